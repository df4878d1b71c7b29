//! The console's access log and metrics: every console action logs the
//! `rpc start` and `rpc finish` events an RPC logs (target
//! `agentsessions::console`, the same fields, see [`RpcLog`]) and is
//! counted in the same metric families, under method `console.<action>`.
//!
//! One middleware ([`access`]) wraps the route of each action: it starts
//! the log, runs the handler and finishes the log with the code the
//! handler answered. Handlers say only what the response cannot: the
//! machine's code behind a page ([`with_code`]) and, through the
//! credential check, who is calling ([`note_caller`]). A live stream
//! finishes when its body ends (OK) or is dropped by the browser
//! (CANCELLED), counting the events it sent.
//!
//! Invariant: labels come from [`ACTIONS`] only, never from the request,
//! so a browser cannot grow the metrics; the session uid it names is
//! logged escaped and bounded, as an RPC's is.

use std::cell::RefCell;
use std::pin::Pin;
use std::task::{Context, Poll};

use agentsessions_machine::vocab::{Caller, Code};
use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::{RawPathParams, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tokio_stream::Stream;

use super::Console;
use crate::telemetry::observe::{REQUEST_ID, RpcKind, RpcLog};

/// One console action: its method label, the route it answers and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// The `method` label and the log's `operation`, e.g. `console.view`.
    pub method: &'static str,
    /// The HTTP method and route, e.g. `GET /sessions/{uid}`: the log's
    /// `rpc_method`.
    pub route: &'static str,
    /// A live stream is `ServerStream`.
    pub kind: RpcKind,
}

const fn action(method: &'static str, route: &'static str) -> Action {
    Action {
        method,
        route,
        kind: RpcKind::Unary,
    }
}

/// GET /sessions.
pub const LIST: Action = action("console.list", "GET /sessions");
/// GET /sessions/{uid}.
pub const VIEW: Action = action("console.view", "GET /sessions/{uid}");
/// GET /sessions/{uid}/verify.
pub const VERIFY: Action = action("console.verify", "GET /sessions/{uid}/verify");
/// POST /sessions/{uid}/decide: the Approve.
pub const APPROVE: Action = action("console.approve", "POST /sessions/{uid}/decide");
/// POST /sessions/{uid}/resume.
pub const RESUME: Action = action("console.resume", "POST /sessions/{uid}/resume");
/// The Resume a committed decision makes, within the decision's request:
/// counted as [`RESUME`] is.
pub const RESUME_AFTER_DECISION: Action = Action {
    route: APPROVE.route,
    ..RESUME
};
/// GET /sessions/{uid}/events.
pub const LIVE: Action = Action {
    kind: RpcKind::ServerStream,
    ..action("console.live", "GET /sessions/{uid}/events")
};
/// GET /tools.
pub const TOOLS: Action = action("console.tools", "GET /tools");
/// GET /login.
pub const LOGIN_FORM: Action = action("console.login_form", "GET /login");
/// POST /login.
pub const LOGIN: Action = action("console.login", "POST /login");
/// POST /logout.
pub const LOGOUT: Action = action("console.logout", "POST /logout");

/// Every console action (the static assets and the `/` redirect are not
/// actions and are not logged; a path no route matches is no action).
pub const ACTIONS: [Action; 10] = [
    LIST, VIEW, VERIFY, APPROVE, RESUME, LIVE, TOOLS, LOGIN_FORM, LOGIN, LOGOUT,
];

/// Their method labels, for [`crate::metrics::Metrics::expect_methods`].
pub const METHODS: [&str; 10] = {
    let mut out = [""; 10];
    let mut i = 0;
    while i < ACTIONS.len() {
        out[i] = ACTIONS[i].method;
        i += 1;
    }
    out
};

/// What the handler of the current request told the log.
#[derive(Default)]
struct Note {
    request_id: String,
    uid: String,
    caller: Option<Caller>,
}

tokio::task_local! {
    /// The note of the request this task is answering.
    static NOTE: RefCell<Note>;
}

/// `caller` verified for the current request: its principal is logged.
/// (Outside a request, as on a live stream's later ticks, it does nothing.)
pub(super) fn note_caller(caller: &Caller) {
    let _ = NOTE.try_with(|n| n.borrow_mut().caller = Some(caller.clone()));
}

/// The machine's code behind a response, carried to the log on it (an
/// HTTP status says less: a 409 page may be ABORTED or FAILED_PRECONDITION).
#[derive(Debug, Clone, Copy)]
struct Answered(tonic::Code);

/// `response`, marked as answering with the machine's `code`.
pub(super) fn with_code(mut response: Response, code: Code) -> Response {
    response
        .extensions_mut()
        .insert(Answered(tonic::Code::from_i32(code as i32)));
    response
}

/// The code of a response that names none: what its HTTP status means.
fn code_of(status: StatusCode) -> tonic::Code {
    match status.as_u16() {
        200..=399 => tonic::Code::Ok,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 => tonic::Code::NotFound,
        409 => tonic::Code::FailedPrecondition,
        503 => tonic::Code::Unavailable,
        400..=499 => tonic::Code::InvalidArgument,
        _ => tonic::Code::Internal,
    }
}

/// The log of `action`, one more call the current request makes (the
/// Resume after a decision): same request id and principal, finished by
/// the caller.
pub(super) fn within(console: &Console, action: Action) -> RpcLog {
    let (request_id, uid, caller) = NOTE
        .try_with(|n| {
            let n = n.borrow();
            (n.request_id.clone(), n.uid.clone(), n.caller.clone())
        })
        .unwrap_or_default();
    let mut log = RpcLog::console(
        action.method,
        action.route,
        action.kind,
        Some(&request_id),
        &uid,
    );
    log.count_in(console.metrics());
    if let Some(caller) = &caller {
        log.set_principal(caller);
    }
    log
}

/// Logs and counts `action`, which the request performs.
pub(super) async fn access(
    State((console, action)): State<(Console, Action)>,
    params: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    request: Request,
    next: Next,
) -> Response {
    let uid = params
        .ok()
        .and_then(|p| {
            p.iter()
                .find(|(k, _)| *k == "uid")
                .map(|(_, v)| v.to_owned())
        })
        .unwrap_or_default();
    let asked = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok());
    let mut log = RpcLog::console(action.method, action.route, action.kind, asked, &uid);
    log.count_in(console.metrics());
    let note = Note {
        request_id: log.request_id().to_owned(),
        uid,
        caller: None,
    };
    let (mut response, note) = NOTE
        .scope(RefCell::new(note), async move {
            let response = next.run(request).await;
            (response, NOTE.with(|n| n.take()))
        })
        .await;
    if let Some(caller) = &note.caller {
        log.set_principal(caller);
    }
    let status = response.status();
    log.set_http_status(status.as_u16());
    if let Ok(v) = HeaderValue::from_str(log.request_id()) {
        response.headers_mut().insert(REQUEST_ID, v);
    }
    let code = response
        .extensions()
        .get::<Answered>()
        .map_or_else(|| code_of(status), |a| a.0);
    if action.kind == RpcKind::ServerStream && code == tonic::Code::Ok {
        // The stream's finish is its end, or the browser going away.
        let (parts, body) = response.into_parts();
        let body = Body::from_stream(Logged {
            inner: body.into_data_stream(),
            log,
        });
        return Response::from_parts(parts, body);
    }
    log.finish(code);
    response
}

/// A response body that finishes its action's log when it ends; dropped
/// before its end, the log finishes CANCELLED ([`RpcLog`]'s drop).
struct Logged {
    inner: BodyDataStream,
    log: RpcLog,
}

impl Stream for Logged {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let item = std::task::ready!(Pin::new(&mut this.inner).poll_next(cx));
        match &item {
            // A comment line is a keep-alive, not an event.
            Some(Ok(chunk)) if !chunk.starts_with(b":") => this.log.sent_frame(),
            Some(Ok(_)) => {}
            Some(Err(_)) => this.log.finish(tonic::Code::Internal),
            None => this.log.finish(tonic::Code::Ok),
        }
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_has_a_label_of_its_own() {
        let mut labels = METHODS.to_vec();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), ACTIONS.len(), "labels are unique");
        assert_eq!(RESUME_AFTER_DECISION.method, RESUME.method);
    }

    #[test]
    fn a_status_without_a_machine_code_maps_to_its_meaning() {
        assert_eq!(code_of(StatusCode::SEE_OTHER), tonic::Code::Ok);
        assert_eq!(
            code_of(StatusCode::UNAUTHORIZED),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            code_of(StatusCode::FORBIDDEN),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            code_of(StatusCode::UNPROCESSABLE_ENTITY),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            code_of(StatusCode::INTERNAL_SERVER_ERROR),
            tonic::Code::Internal
        );
    }
}
