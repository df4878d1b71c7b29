//! POST /sessions/{uid}/decide: Approve, then Resume, as `agentctl
//! approve` does (the client crate's one decision workflow, over the drive
//! loop), with the browser's verified caller.
//!
//! Invariant: nothing is submitted unless the cookie's console session
//! verifies now and the form carries that session's CSRF token.

use agentsessions_client::{DecideCalls, decide as decide_then_resume};
use agentsessions_machine::vocab::{Caller, Code, Request, Response, Status};
use agentsessions_proto::v1::{ApproveRequest, ApproveResponse, ResumeRequest, Session};
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response as HttpResponse};

use super::access::{self, RESUME_AFTER_DECISION};
use super::pages::urlencode;
use super::{Console, Failure};

/// The decision form.
#[derive(Debug, Default, serde::Deserialize)]
pub struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    execution_id: String,
    #[serde(default)]
    tool_call_id: String,
    #[serde(default)]
    request_seq: i64,
    /// `approve` or `deny`.
    #[serde(default)]
    decision: String,
    #[serde(default)]
    reason: String,
}

fn refused(status: StatusCode, title: &str, why: &str) -> HttpResponse {
    Failure::new(status, title, format!("{why}; nothing was changed")).into_response()
}

/// The verified viewer of a form post that carries its console session's
/// CSRF token; else the refusal to send (nothing is submitted).
fn submitter(
    console: &Console,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<super::auth::Viewer, Box<HttpResponse>> {
    let viewer = console.viewer(headers).map_err(|no| {
        Box::new(refused(
            StatusCode::UNAUTHORIZED,
            "Not signed in",
            no.reason(),
        ))
    })?;
    if !console.csrf().check(&viewer.session, csrf) {
        return Err(Box::new(refused(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "the form's CSRF token is missing or wrong",
        )));
    }
    Ok(viewer)
}

/// The decision workflow's two calls, made through the drive loop as the
/// browser's verified caller.
struct ViaDriver<'a> {
    console: &'a Console,
    caller: &'a Caller,
}

impl DecideCalls for ViaDriver<'_> {
    type Error = Status;

    async fn approve(&mut self, request: ApproveRequest) -> Result<ApproveResponse, Status> {
        match self
            .console
            .unary(self.caller, Request::Approve(request))
            .await?
        {
            Response::Approve(r) => Ok(r),
            other => Err(super::unexpected("Approve", &other)),
        }
    }

    async fn resume(&mut self, session: &str) -> Result<Session, Status> {
        let request = Request::Resume(ResumeRequest {
            session: session.to_owned(),
            ..Default::default()
        });
        // The Resume is an action of its own in the access log and metrics.
        let mut log = access::within(self.console, RESUME_AFTER_DECISION);
        let resumed = self.console.unary(self.caller, request).await;
        log.finish(resumed.as_ref().map_or_else(
            |s| tonic::Code::from_i32(s.code as i32),
            |_| tonic::Code::Ok,
        ));
        match resumed? {
            Response::Session(s) => Ok(s),
            other => Err(super::unexpected("Resume", &other)),
        }
    }
}

/// Commits the decision and resumes the session, then shows the session
/// with the receipt; a decision that lost to another shows the winner.
pub async fn decide(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(uid): Path<String>,
    Form(f): Form<DecideForm>,
) -> HttpResponse {
    let viewer = match submitter(&console, &headers, &f.csrf) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let approved = match f.decision.as_str() {
        "approve" => true,
        "deny" => false,
        _ => {
            return refused(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "decision must be approve or deny",
            );
        }
    };
    let request = ApproveRequest {
        session: uid.clone(),
        execution_id: f.execution_id.clone(),
        tool_call_id: f.tool_call_id.clone(),
        request_seq: f.request_seq,
        approved: Some(approved),
        reason: f.reason.clone(),
        // The machine records the verified principal; with auth off the
        // decision names no one, as an anonymous `agentctl approve`.
        identity: None,
    };
    let base = format!("/sessions/{}", urlencode(&uid));
    let mut via = ViaDriver {
        console: &console,
        caller: &viewer.caller,
    };
    let decided = match decide_then_resume(&mut via, request, true).await {
        Ok(d) => d,
        Err(s) if s.code == Code::FailedPrecondition => {
            // Decided elsewhere (or superseded): the page looks for the
            // decision that won. Only codes travel in the URL, so a link
            // cannot put words of its own on the console's page.
            let to = format!(
                "{base}?stale={}&call={}#stale",
                f.request_seq,
                urlencode(&f.tool_call_id),
            );
            return access::with_code(Redirect::to(&to).into_response(), s.code);
        }
        Err(s) => return Failure::from(s).into_response(),
    };
    let mut to = format!("{base}?receipt={}", decided.decision.seq);
    if let Some(Err(s)) = decided.resumed {
        // The page says so (the decision stands); the log has the cause.
        tracing::warn!(session = %uid, code = ?s.code, message = %s.message,
            "console: resume after a decision failed");
        to.push_str(&format!("&resume={}", s.code as i32));
    }
    to.push_str("#receipt");
    Redirect::to(&to).into_response()
}

/// The resume form: only its CSRF token.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ResumeForm {
    #[serde(default)]
    csrf: String,
}

/// POST /sessions/{uid}/resume: carries out a decided approval, as
/// `agentctl resume` does, then shows the session.
pub async fn resume(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(uid): Path<String>,
    Form(f): Form<ResumeForm>,
) -> HttpResponse {
    let viewer = match submitter(&console, &headers, &f.csrf) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let request = Request::Resume(ResumeRequest {
        session: uid.clone(),
        ..Default::default()
    });
    let mut to = format!("/sessions/{}", urlencode(&uid));
    match console.unary(&viewer.caller, request).await {
        Ok(_) => Redirect::to(&to).into_response(),
        Err(s) => {
            tracing::warn!(session = %uid, code = ?s.code, message = %s.message,
                "console: resume failed");
            to.push_str(&format!("?resume={}", s.code as i32));
            access::with_code(Redirect::to(&to).into_response(), s.code)
        }
    }
}
