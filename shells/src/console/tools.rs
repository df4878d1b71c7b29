//! GET /tools: the host's tool catalog, as `agentctl tools` prints it:
//! each tool with its server, the policy its calls meet, its hints and
//! whether its server is up.
//!
//! Invariant: the page shows what the machine answers to ListTools for
//! this viewer, nothing the shell decides.

use agentsessions_machine::vocab::{Request, Response};
use agentsessions_proto::v1::CatalogEntry;
use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response as HttpResponse};

use super::pages::viewer_or_login;
use super::{Console, Failure, page};

#[derive(Template)]
#[template(path = "console/tools.html")]
struct ToolsPage {
    viewer: String,
    csrf: String,
    tools: Vec<(CatalogEntry, String)>,
}

/// GET /tools.
pub async fn tools(State(console): State<Console>, headers: HeaderMap, uri: Uri) -> HttpResponse {
    let viewer = match viewer_or_login(&console, &headers, &uri) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    match console.unary(&viewer.caller, Request::ListTools).await {
        Ok(Response::Tools(listing)) => page(
            StatusCode::OK,
            &ToolsPage {
                viewer: viewer.name(),
                csrf: console.csrf().token_for(&viewer.session),
                tools: listing
                    .tools
                    .into_iter()
                    .map(|t| {
                        let hints = agentsessions_machine::vocab::hints(&t).join(" ");
                        (t, hints)
                    })
                    .collect(),
            },
        ),
        Ok(other) => Failure::from(super::unexpected("ListTools", &other)).into_response(),
        Err(s) => Failure::from(s).into_response(),
    }
}
