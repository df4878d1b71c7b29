//! The web console: server-rendered pages over the Sessions API for the
//! people in the loop (`--console-addr`).
//!
//! It is a shell like the gRPC layer: every page is the answer to the
//! machine's requests (ListSessions, GetSession, Replay, Approve, Resume)
//! submitted through the same [`DriverHandle`] with the verified
//! [`Caller`] of the browser's cookie, so the machine authorizes and
//! records every call exactly as it does a gRPC client's. The console
//! decides nothing; it only chooses what to show (no buttons for a
//! principal without the approver role, which the machine would refuse
//! anyway).
//!
//! Invariants: journal content reaches the page only through templates
//! that escape HTML; every request, and every tick of a live stream, acts
//! only for a console session whose credential verifies now
//! ([`auth::resolve`]); every POST carries the CSRF token of its cookie
//! ([`auth::CsrfKey`]); every live stream ends when the daemon stops;
//! every action is access-logged and counted as an RPC is ([`access`]).

mod access;
mod auth;
mod decide;
mod live;
mod login;
mod next;
mod pages;
mod session;
pub mod tls;
mod tools;
mod view;

use std::sync::Arc;

use agentsessions_machine::verify::ChainCheck;
use agentsessions_machine::vocab::{Caller, Code, Request, Response, Status};
use agentsessions_proto::v1::{GetSessionRequest, LogRecord, ReplayRequest, Session};
use askama::Template;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::{get, post};

use crate::auth::Authenticator;
use crate::metrics::Metrics;

pub use auth::CsrfKey;
pub use session::MAX_SESSIONS;

/// Most live (server-sent event) streams open at once; one more is
/// answered 503 instead of polling without bound.
pub const MAX_LIVE_STREAMS: usize = 64;

/// What the console asks of the host, and all it knows of it: a unary
/// call and a Replay stream, each as a verified caller. The daemon's drive
/// loops implement it; the console never reaches into the daemon.
pub trait Calls: Send + Sync + 'static {
    /// One unary call.
    fn unary(
        &self,
        caller: Caller,
        request: Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Status>> + Send + '_>>;
    /// A Replay's records, in order; dropping the stream ends the call.
    fn replay(&self, caller: Caller, request: Request) -> Records;
}

/// A Replay's records as [`Calls::replay`] streams them.
pub type Records =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<LogRecord, Status>> + Send>>;

/// What every handler holds.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
    /// Where actions are counted, if metrics are on.
    metrics: Option<Arc<Metrics>>,
}

struct Inner {
    driver: Arc<dyn Calls>,
    auth: Arc<Authenticator>,
    csrf: CsrfKey,
    /// The open console sessions (`--auth` only).
    sessions: session::Sessions,
    live: Arc<tokio::sync::Semaphore>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Served over TLS: cookies are marked `Secure`.
    secure: bool,
}

impl Console {
    /// A console submitting to `driver` as the callers `auth` verifies;
    /// its live streams end when `stop` turns true. `secure`: it is served
    /// over TLS, so its cookies are marked `Secure`.
    pub fn new(
        driver: Arc<dyn Calls>,
        auth: Arc<Authenticator>,
        csrf: CsrfKey,
        stop: tokio::sync::watch::Receiver<bool>,
        secure: bool,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                driver,
                auth,
                csrf,
                sessions: session::Sessions::default(),
                live: Arc::new(tokio::sync::Semaphore::new(MAX_LIVE_STREAMS)),
                stop,
                secure,
            }),
            metrics: None,
        }
    }

    /// Counts every action in `metrics` (its series exist from now on).
    pub fn with_metrics(mut self, metrics: Option<Arc<Metrics>>) -> Self {
        if let Some(m) = &metrics {
            m.expect_methods(&access::METHODS);
        }
        self.metrics = metrics;
        self
    }

    fn metrics(&self) -> Option<Arc<Metrics>> {
        self.metrics.clone()
    }

    fn is_secure(&self) -> bool {
        self.inner.secure
    }

    /// The console's routes.
    pub fn router(self) -> Router {
        use access::{APPROVE, LIST, LIVE, LOGIN, LOGIN_FORM, LOGOUT, RESUME, TOOLS, VERIFY, VIEW};
        // Each action's route, access-logged as that action.
        let logged =
            |action| axum::middleware::from_fn_with_state((self.clone(), action), access::access);
        Router::new()
            .route("/", get(|| async { Redirect::to("/sessions") }))
            .route("/sessions", get(pages::list).layer(logged(LIST)))
            .route("/sessions/{uid}", get(pages::session).layer(logged(VIEW)))
            .route(
                "/sessions/{uid}/verify",
                get(pages::verify).layer(logged(VERIFY)),
            )
            .route(
                "/sessions/{uid}/decide",
                post(decide::decide).layer(logged(APPROVE)),
            )
            .route(
                "/sessions/{uid}/resume",
                post(decide::resume).layer(logged(RESUME)),
            )
            .route(
                "/sessions/{uid}/events",
                get(live::events).layer(logged(LIVE)),
            )
            .route("/tools", get(tools::tools).layer(logged(TOOLS)))
            .route("/login", get(login::login_form).layer(logged(LOGIN_FORM)))
            .route("/login", post(login::login).layer(logged(LOGIN)))
            .route("/logout", post(login::logout).layer(logged(LOGOUT)))
            .route("/static/console.css", get(css))
            .route("/static/console.js", get(js))
            .fallback(|| async { Failure::new(StatusCode::NOT_FOUND, "Not found", "no such page") })
            .with_state(self)
    }

    fn auth(&self) -> &Authenticator {
        &self.inner.auth
    }

    fn csrf(&self) -> &CsrfKey {
        &self.inner.csrf
    }

    fn sessions(&self) -> &session::Sessions {
        &self.inner.sessions
    }

    /// The verified viewer of a request with `headers`.
    fn viewer(&self, headers: &axum::http::HeaderMap) -> Result<auth::Viewer, auth::NoViewer> {
        auth::viewer(self.auth(), self.sessions(), headers)
    }

    /// `viewer`'s caller now: its console session resolved and its
    /// credential verified again (a live stream asks on every tick).
    fn recheck(&self, viewer: &auth::Viewer) -> Result<Caller, auth::NoViewer> {
        auth::resolve(self.auth(), self.sessions(), &viewer.session)
    }

    async fn unary(&self, caller: &Caller, request: Request) -> Result<Response, Status> {
        self.inner.driver.unary(caller.clone(), request).await
    }

    /// The session's approval that is decided but not carried out yet: the
    /// wire shows it as EXEC_COMPLETED, the console as DECIDED.
    async fn decided(
        &self,
        caller: &Caller,
        uid: &str,
    ) -> Result<Option<agentsessions_proto::v1::ApprovalRef>, Status> {
        let request = Request::Decided {
            session: uid.to_owned(),
        };
        match self.unary(caller, request).await? {
            Response::Decided(d) => Ok(d),
            other => Err(unexpected("Decided", &other)),
        }
    }

    /// Whether `s`'s approval is decided but not carried out; asked only
    /// when the wire state leaves it open (COMPLETED).
    async fn is_decided(&self, caller: &Caller, s: &Session) -> Result<bool, Status> {
        if s.exec_state != agentsessions_proto::v1::ExecState::ExecCompleted as i32 {
            return Ok(false);
        }
        let uid = s.metadata.as_ref().map_or("", |m| m.uid.as_str());
        Ok(self.decided(caller, uid).await?.is_some())
    }

    async fn get_session(&self, caller: &Caller, uid: &str) -> Result<Session, Status> {
        let request = Request::GetSession(GetSessionRequest {
            uid: uid.to_owned(),
        });
        match self.unary(caller, request).await? {
            Response::Session(s) => Ok(s),
            other => Err(unexpected("GetSession", &other)),
        }
    }

    /// Records `from..=to` (Replay), at most `limit` of them.
    async fn replay(
        &self,
        caller: &Caller,
        uid: &str,
        from: i64,
        to: i64,
        limit: usize,
    ) -> Result<Vec<LogRecord>, Status> {
        let mut rx = self.inner.driver.replay(
            caller.clone(),
            Request::Replay(ReplayRequest {
                session: uid.to_owned(),
                from_seq: from,
                to_seq: to,
            }),
        );
        let mut out = Vec::new();
        while let Some(item) = tokio_stream::StreamExt::next(&mut rx).await {
            out.push(item?);
            if out.len() >= limit {
                // Dropping the receiver ends the call in the drive loop.
                break;
            }
        }
        Ok(out)
    }

    /// `agentctl verify`'s check over Replay(1..=last_seq): the records
    /// verified, or why the chain fails.
    async fn verify_chain(&self, caller: &Caller, session: &Session) -> Result<Verdict, Status> {
        let uid = session.metadata.as_ref().map_or("", |m| m.uid.as_str());
        let mut check = ChainCheck::new(session.last_seq);
        if session.last_seq > 0 {
            let mut rx = self.inner.driver.replay(
                caller.clone(),
                Request::Replay(ReplayRequest {
                    session: uid.to_owned(),
                    from_seq: 1,
                    to_seq: session.last_seq,
                }),
            );
            while let Some(item) = tokio_stream::StreamExt::next(&mut rx).await {
                if let Err(e) = check.push(&item?) {
                    return Ok(Verdict::Broken {
                        seq: e.seq(),
                        error: e.to_string(),
                    });
                }
            }
        }
        Ok(match check.finish() {
            Ok(n) => Verdict::Verified(n),
            Err(e) => Verdict::Broken {
                seq: e.seq(),
                error: e.to_string(),
            },
        })
    }
}

/// The chain check's result, as the page shows it.
pub enum Verdict {
    /// Every record verified.
    Verified(u64),
    /// The first failure.
    Broken { seq: i64, error: String },
}

fn unexpected(call: &str, got: &Response) -> Status {
    Status::internal(format!("{call}: unexpected reply {got:?}"))
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("assets/console.css"),
    )
}

async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("assets/console.js"),
    )
}

/// Headers on every page: no framing by other sites, no inline script,
/// nothing loaded from elsewhere.
const SECURITY_HEADERS: [(header::HeaderName, &str); 3] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "same-origin"),
];

/// A rendered page.
fn page<T: Template>(status: StatusCode, template: &T) -> axum::response::Response {
    match template.render() {
        Ok(html) => (status, SECURITY_HEADERS, Html(html)).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("template: {e}\n"),
        )
            .into_response(),
    }
}

/// An error page.
#[derive(Template)]
#[template(path = "console/error.html")]
pub struct Failure {
    status: StatusCode,
    /// The machine's code behind the page, if a call failed.
    code: Option<Code>,
    title: String,
    message: String,
    viewer: String,
    csrf: String,
}

impl Failure {
    fn new(status: StatusCode, title: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: None,
            title: title.to_owned(),
            message: message.into(),
            viewer: String::new(),
            csrf: String::new(),
        }
    }

    /// The page for a machine status, with its HTTP equivalent.
    fn from_status(s: &Status) -> Self {
        let (status, title) = match s.code {
            Code::NotFound => (StatusCode::NOT_FOUND, "Not found"),
            Code::InvalidArgument | Code::OutOfRange => (StatusCode::BAD_REQUEST, "Bad request"),
            Code::PermissionDenied => (StatusCode::FORBIDDEN, "Permission denied"),
            Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "Not signed in"),
            Code::FailedPrecondition | Code::Aborted | Code::AlreadyExists => {
                (StatusCode::CONFLICT, "Conflict")
            }
            Code::Unavailable | Code::ResourceExhausted => {
                (StatusCode::SERVICE_UNAVAILABLE, "Unavailable")
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "Error"),
        };
        let mut page = Self::new(status, title, format!("{:?}: {}", s.code, s.message));
        page.code = Some(s.code);
        page
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Self::from_status(&s)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> axum::response::Response {
        match self.code {
            Some(code) => access::with_code(page(self.status, &self), code),
            None => page(self.status, &self),
        }
    }
}

/// Serves the console on `listener` (over TLS with `tls`) until `stop`
/// turns true.
pub fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    console: Console,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let app = console.router();
    let stopped = async move {
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                return;
            }
        }
    };
    Ok(match tls {
        None => tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
        }),
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config)?;
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await;
            })
        }
    })
}
