//! The operator's HTTP listener: `/metrics` (Prometheus text) and
//! `/readyz` (200 once the host booted, while the journal is up).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::{CONTENT_TYPE, Metrics};

#[derive(Clone)]
struct Ops {
    metrics: Arc<Metrics>,
    /// The journal's health (None: a store that is always up).
    journal: Option<tokio::sync::watch::Receiver<bool>>,
}

async fn metrics(State(ops): State<Ops>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], ops.metrics.encode())
}

/// The listener serves only after the host booted (the registry loaded),
/// so ready means: the journal is up. An MCP server that is down does not
/// make the daemon unready (its tools get error receipts), but is named.
async fn readyz(State(ops): State<Ops>) -> impl IntoResponse {
    let up = ops.journal.as_ref().is_none_or(|j| *j.borrow());
    let mut text = if up {
        "ready\n".to_owned()
    } else {
        "journal unavailable\n".to_owned()
    };
    for server in ops.metrics.mcp_down() {
        text.push_str(&format!("mcp server {server} down\n"));
    }
    let status = if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, text)
}

/// Serves `/metrics` and `/readyz` on `listener` until `stop` is set.
pub fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    journal: Option<tokio::sync::watch::Receiver<bool>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let app = Router::new()
        .route("/metrics", get(self::metrics))
        .route("/readyz", get(readyz))
        .with_state(Ops { metrics, journal });
    tokio::spawn(async move {
        let stopped = async move {
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await;
    })
}
