//! Per-RPC logging and request-id correlation.
//!
//! Every RPC logs one `start` and one `finish` event (target
//! `agentsessions::grpc`) with the stable fields listed in
//! docs/observability.md; every web console action logs the same two
//! events with the same fields (target `agentsessions::console`, see
//! `console::access`). The request id comes from the caller's
//! `x-request-id` metadata when it is well formed, else it is generated,
//! and it is echoed in the response metadata (headers on success, the
//! status's metadata on failure) so a client can quote it.
//!
//! What the events carry is deliberately narrow: ids, names, codes, counts
//! and durations. Message content, tool arguments and results, config
//! bytes, fences, snapshot references, keys and raw error strings are never
//! logged — an error's detail goes to the caller in its status, and the
//! log only says which kind of error it was.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use agentsessions_machine::vocab::shown;
use tokio_stream::Stream;

/// The correlation header.
pub const REQUEST_ID: &str = "x-request-id";

/// A caller-supplied id is adopted when it is 1–128 characters from
/// `[A-Za-z0-9-_.]`; anything else could smuggle text into the logs.
pub fn valid_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A fresh id: 12 random bytes as lowercase hex.
pub fn new_request_id() -> String {
    let mut out = String::with_capacity(24);
    for _ in 0..12 {
        out.push_str(&format!("{:02x}", fastrand::u8(..)));
    }
    out
}

/// The `error_kind` of a gRPC code (the reference's vocabulary: ABORTED is
/// a conflict, and every code without a kind of its own is internal).
pub fn error_kind(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "",
        Cancelled => "canceled",
        InvalidArgument => "invalid_argument",
        DeadlineExceeded => "deadline_exceeded",
        NotFound => "not_found",
        AlreadyExists => "already_exists",
        FailedPrecondition => "failed_precondition",
        Aborted => "conflict",
        Unavailable => "unavailable",
        PermissionDenied => "permission_denied",
        Unauthenticated => "unauthenticated",
        _ => "internal",
    }
}

/// The canonical upper-case name of a gRPC status code, as the proto and
/// every other gRPC tool spells it (the logs' `grpc_code`, agentctl's errors).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Unary or server-streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    /// One request, one response.
    Unary,
    /// One request, a stream of responses.
    ServerStream,
}

impl RpcKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Unary => "unary",
            Self::ServerStream => "server_stream",
        }
    }
}

/// Where a call arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// A gRPC service, e.g. `Sessions`.
    Grpc(&'static str),
    /// A web console route, e.g. `GET /sessions/{uid}`.
    Console(&'static str),
}

/// One access event, on the target and with the `component` and
/// `rpc_method` of its surface; `[…]` are fields only the console's has.
macro_rules! access_event {
    ($level:ident, $log:expr, $method:expr, [$($console:tt)*], $($fields:tt)*) => {
        match $log.surface {
            Surface::Grpc(service) => tracing::$level!(
                target: "agentsessions::grpc",
                component = "grpc",
                operation = $method,
                rpc_method = %format_args!("/agentsessions.v1.{service}/{}", $method),
                $($fields)*
            ),
            Surface::Console(route) => tracing::$level!(
                target: "agentsessions::console",
                component = "console",
                operation = $method,
                rpc_method = route,
                $($console)*
                $($fields)*
            ),
        }
    };
}

/// One RPC being logged: created (and its start event written) when the
/// call arrives, finished exactly once.
#[derive(Debug)]
pub struct RpcLog {
    surface: Surface,
    method: &'static str,
    kind: RpcKind,
    request_id: String,
    session_uid: String,
    /// The verified caller ("" when auth is off or it failed).
    principal: String,
    /// Where the finish is counted, if metrics are on.
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    started: Instant,
    /// Frames sent (streams only).
    frames: u64,
    /// The HTTP status a console action answered (0 for RPCs).
    http_status: u16,
    finished: bool,
    /// The RPC's trace span: the parent of the work it causes.
    span: tracing::Span,
}

impl RpcLog {
    /// Logs the start of `service/method` and settles its request id from
    /// the caller's metadata.
    pub fn start(
        service: &'static str,
        method: &'static str,
        kind: RpcKind,
        metadata: &tonic::metadata::MetadataMap,
        session_uid: &str,
    ) -> Self {
        let asked = metadata.get(REQUEST_ID).and_then(|v| v.to_str().ok());
        let mut log = Self::begin(Surface::Grpc(service), method, kind, asked, session_uid);
        let span = tracing::info_span!(
            target: super::propagation::TARGET,
            "rpc",
            otel.name = %format_args!("{service}/{method}"),
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %format_args!("agentsessions.v1.{service}"),
            rpc.method = method,
            request_id = %log.request_id,
            session.uid = log.session_uid.as_str(),
            rpc.grpc.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        super::propagation::adopt_parent(&span, metadata);
        log.span = span;
        log
    }

    /// Logs the start of web console action `method` (`console.view`) on
    /// `route` (`GET /sessions/{uid}`); `asked` is the request's
    /// `x-request-id` header, adopted when well formed. It has no trace
    /// span.
    pub fn console(
        method: &'static str,
        route: &'static str,
        kind: RpcKind,
        asked: Option<&str>,
        session_uid: &str,
    ) -> Self {
        Self::begin(Surface::Console(route), method, kind, asked, session_uid)
    }

    fn begin(
        surface: Surface,
        method: &'static str,
        kind: RpcKind,
        asked: Option<&str>,
        session_uid: &str,
    ) -> Self {
        // The uid is the caller's text: escaped and bounded once here, so
        // neither event nor the span can carry a forged line or megabytes.
        let session_uid = shown(session_uid).to_string();
        let request_id = asked
            .filter(|v| valid_request_id(v))
            .map(str::to_owned)
            .unwrap_or_else(new_request_id);
        let log = Self {
            span: tracing::Span::none(),
            surface,
            method,
            kind,
            request_id,
            session_uid,
            principal: String::new(),
            metrics: None,
            started: Instant::now(),
            frames: 0,
            http_status: 0,
            finished: false,
        };
        access_event!(
            info,
            log,
            method,
            [],
            rpc_kind = kind.as_str(),
            phase = "start",
            request_id = %log.request_id,
            session_uid = log.session_uid.as_str(),
            "rpc start"
        );
        log
    }

    /// The RPC's trace span.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The settled request id.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// Names the session once it is known (a created session, or the
    /// first Session frame of an auto-creating Exec).
    pub fn set_session(&mut self, uid: &str) {
        if self.session_uid.is_empty() {
            self.session_uid = shown(uid).to_string();
        }
    }

    /// Counts the finish in `metrics` too.
    pub fn count_in(&mut self, metrics: Option<std::sync::Arc<crate::metrics::Metrics>>) {
        self.metrics = metrics;
    }

    /// One more frame sent on a stream.
    pub fn sent_frame(&mut self) {
        self.frames += 1;
    }

    /// The HTTP status a console action answered.
    pub fn set_http_status(&mut self, status: u16) {
        self.http_status = status;
    }

    /// Names the verified caller (never its credential).
    pub fn set_principal(&mut self, caller: &agentsessions_machine::vocab::Caller) {
        if let agentsessions_machine::vocab::Caller::Verified(p) = caller {
            // A JWT's subject is the issuer's text, not ours: shown too.
            self.principal = shown(&p.name).to_string();
        }
    }

    /// Logs the finish event with `code`.
    pub fn finish(&mut self, code: tonic::Code) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let took = self.started.elapsed();
        self.span.record("rpc.grpc.status_code", i32::from(code));
        if code != tonic::Code::Ok {
            self.span.record("otel.status_code", "ERROR");
        }
        if let Some(m) = &self.metrics {
            m.rpc_finished(self.method, code_name(code), took);
        }
        let duration_ms = took.as_secs_f64() * 1000.0;
        let kind = error_kind(code);
        let outcome = if code == tonic::Code::Ok {
            "success"
        } else {
            "error"
        };
        macro_rules! finish_event {
            ($level:ident) => {
                access_event!(
                    $level,
                    self,
                    self.method,
                    [http_status = self.http_status,],
                    rpc_kind = self.kind.as_str(),
                    phase = "finish",
                    outcome,
                    grpc_code = code_name(code),
                    error_kind = kind,
                    duration_ms,
                    request_id = %self.request_id,
                    session_uid = self.session_uid.as_str(),
                    principal = self.principal.as_str(),
                    frames = self.frames,
                    "rpc finish"
                )
            };
        }
        // Refusals the caller caused (or can retry) are routine; an outage
        // is worth a warning; everything else is the host's own failure.
        match kind {
            ""
            | "conflict"
            | "canceled"
            | "deadline_exceeded"
            | "failed_precondition"
            | "not_found"
            | "already_exists"
            | "invalid_argument"
            | "permission_denied" => finish_event!(info),
            "unauthenticated" => finish_event!(warn),
            "unavailable" => finish_event!(warn),
            _ => finish_event!(error),
        }
    }

    /// Finishes a unary call and stamps the request id on its answer.
    pub fn unary<T>(
        mut self,
        result: Result<tonic::Response<T>, tonic::Status>,
        session_of: impl FnOnce(&T) -> Option<&str>,
    ) -> Result<tonic::Response<T>, tonic::Status> {
        match result {
            Ok(mut response) => {
                if let Some(uid) = session_of(response.get_ref()) {
                    self.set_session(uid);
                }
                self.finish(tonic::Code::Ok);
                stamp(response.metadata_mut(), &self.request_id);
                Ok(response)
            }
            Err(status) => Err(self.failed(status)),
        }
    }

    /// Finishes with `status` and stamps the request id on it.
    pub fn failed(&mut self, mut status: tonic::Status) -> tonic::Status {
        self.finish(status.code());
        stamp(status.metadata_mut(), &self.request_id);
        status
    }
}

impl Drop for RpcLog {
    fn drop(&mut self) {
        // A stream dropped before its end: the client went away.
        if !self.finished {
            self.finish(tonic::Code::Cancelled);
        }
    }
}

fn stamp(metadata: &mut tonic::metadata::MetadataMap, request_id: &str) {
    // Adopted ids were validated and generated ids are hex, so this parse
    // cannot fail; a failure would only drop the echo, never the call.
    if let Ok(v) = request_id.parse() {
        metadata.insert(REQUEST_ID, v);
    }
}

/// A response stream that logs its call's finish when it ends, fails or is
/// dropped, and learns the session from the first frame that names it.
pub struct LoggedStream<T> {
    inner: Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>,
    log: RpcLog,
    session_of: fn(&T) -> Option<&str>,
}

impl<T> LoggedStream<T> {
    /// Wraps `inner`; `session_of` reads a session uid from a frame.
    pub fn new(
        inner: Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>,
        log: RpcLog,
        session_of: fn(&T) -> Option<&str>,
    ) -> Self {
        Self {
            inner,
            log,
            session_of,
        }
    }
}

impl<T> Stream for LoggedStream<T> {
    type Item = Result<T, tonic::Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let item = std::task::ready!(this.inner.as_mut().poll_next(cx));
        match item {
            Some(Ok(frame)) => {
                this.log.frames += 1;
                if let Some(uid) = (this.session_of)(&frame) {
                    this.log.set_session(uid);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(status)) => Poll::Ready(Some(Err(this.log.failed(status)))),
            None => {
                this.log.finish(tonic::Code::Ok);
                Poll::Ready(None)
            }
        }
    }
}

/// Installs the process-wide subscriber for a daemon: stderr, filtered by
/// `RUST_LOG` (default `info`), JSON lines when `AGENTSESSIONS_LOG_FORMAT`
/// is `json`, else compact text (coloured only on a terminal); and, with
/// `otlp`, the exporter of the daemon's trace spans (which the log lines
/// never show). Returns false when a subscriber was already installed (the
/// existing one is kept).
#[cfg(not(madsim))]
pub fn init_logging(otlp: Option<&super::otlp::Otlp>) -> bool {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let json = std::env::var("AGENTSESSIONS_LOG_FORMAT").is_ok_and(|f| f == "json");
    // Colour codes only for a terminal: redirected logs stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    subscriber(json, ansi, std::io::stderr, otlp)
        .try_init()
        .is_ok()
}

/// The subscriber [`init_logging`] installs, writing its lines to `writer`.
#[cfg(not(madsim))]
fn subscriber<W>(
    json: bool,
    ansi: bool,
    writer: W,
    otlp: Option<&super::otlp::Otlp>,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::{EnvFilter, Layer, Registry};
    let trace_off = format!("{}=off", super::propagation::TARGET);
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(trace_off.parse().expect("a valid directive"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if json {
        fmt.json().flatten_event(true).boxed()
    } else {
        fmt.compact().boxed()
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(AskEachTime(filter)))
        .with(otlp.map(|o| o.layer()))
}

/// A per-layer filter asked on every event and span, never answering a
/// callsite with "always".
///
/// A per-layer filter hands its verdict to its layer through a
/// thread-local, set by `enabled` and consumed by the event. A callsite
/// cached as "always" skips `enabled`, so it reads whatever the last
/// `enabled` query on that thread left: a bare query (`tracing::enabled!`,
/// as the drive loop's tracer makes at start, or the `log` crate's
/// `log_enabled!` through tracing-log) leaves "disabled" behind and the
/// next such event is dropped — the first `rpc start` after a start was
/// (tokio-rs/tracing#2519). Asking each time overwrites that state first.
#[cfg(not(madsim))]
struct AskEachTime<F>(F);

#[cfg(not(madsim))]
impl<S, F: tracing_subscriber::layer::Filter<S>> tracing_subscriber::layer::Filter<S>
    for AskEachTime<F>
{
    fn enabled(
        &self,
        meta: &tracing::Metadata<'_>,
        cx: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        self.0.enabled(meta, cx)
    }

    fn callsite_enabled(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        match self.0.callsite_enabled(meta) {
            i if i.is_always() => tracing::subscriber::Interest::sometimes(),
            i => i,
        }
    }

    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        cx: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        self.0.event_enabled(event, cx)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.on_new_span(attrs, id, ctx)
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.on_record(id, values, ctx)
    }

    fn on_enter(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        self.0.on_enter(id, ctx)
    }

    fn on_exit(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        self.0.on_exit(id, ctx)
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        self.0.on_close(id, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_adopted_only_when_well_formed() {
        assert!(valid_request_id("abc-123_X.y"));
        assert!(valid_request_id(&"a".repeat(128)));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id(&"a".repeat(129)));
        assert!(!valid_request_id("has space"));
        assert!(!valid_request_id("new\nline"));
        let id = new_request_id();
        assert_eq!(id.len(), 24);
        assert!(valid_request_id(&id));
    }

    /// Lines written to a shared buffer.
    #[cfg(not(madsim))]
    #[derive(Clone, Default)]
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    #[cfg(not(madsim))]
    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[cfg(not(madsim))]
    #[test]
    fn an_enabled_query_does_not_swallow_the_next_event() {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = subscriber(false, false, move || writer.clone(), None);
        tracing::subscriber::with_default(subscriber, || {
            // What the drive loop's tracer asks at start, on the thread
            // that then serves the first RPC.
            let _ =
                tracing::enabled!(target: super::super::propagation::TARGET, tracing::Level::INFO);
            let log = RpcLog::console("console.list", "GET /sessions", RpcKind::Unary, None, "");
            drop(log);
        });
        let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("rpc start"), "no start line in:\n{text}");
        assert!(text.contains("rpc finish"), "no finish line in:\n{text}");
    }

    #[test]
    fn error_kinds_follow_the_reference_vocabulary() {
        assert_eq!(error_kind(tonic::Code::Aborted), "conflict");
        assert_eq!(error_kind(tonic::Code::Unimplemented), "internal");
        assert_eq!(error_kind(tonic::Code::Cancelled), "canceled");
        assert_eq!(error_kind(tonic::Code::Ok), "");
    }
}
