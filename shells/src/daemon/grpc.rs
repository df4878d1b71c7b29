//! The gRPC surface: `Sessions` and `HarnessRegistry` as thin translations
//! into the host's requests. Validation, ordering and status codes are all
//! the machine's; this layer only converts types, admits each call under
//! the bounds on what callers may make the daemon hold ([`super::limits`]:
//! counts per principal and connection, bytes in flight and an Exec's
//! decoded shape, all things of the transport the machine never sees), and
//! logs each call's start and finish with its request id
//! ([`super::observe`]).

use std::pin::Pin;
use std::sync::Arc;

use agentsessions_machine::vocab::{Caller, Code, Request, Response, Status};
use agentsessions_proto::grpc::harness_registry_server::HarnessRegistry;
use agentsessions_proto::grpc::sessions_server::Sessions;
use agentsessions_proto::v1::{
    ApproveRequest, ApproveResponse, CancelRequest, CreateSessionRequest, DeleteSessionRequest,
    ExecRequest, ExecUpdate, ForkRequest, ForkResponse, GetHarnessRequest, GetSessionRequest,
    HarnessRegistration, ListHarnessesRequest, ListHarnessesResponse, ListSessionsRequest,
    ListSessionsResponse, LogRecord, RegisterHarnessRequest, RegisterHarnessResponse,
    ReplayRequest, ResumeRequest, RetireHarnessRequest, Session, SuspendRequest,
};
use tokio_stream::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::driver::DriverHandle;
use super::limits::{Admission, CALL_FLOOR_BYTES, Limits, Permit, Who, check_exec};
use super::observe::{LoggedStream, RpcKind, RpcLog};
use crate::auth::Authenticator;
use crate::metrics::Metrics;

fn session_uid(s: &Session) -> Option<&str> {
    s.metadata.as_ref().map(|m| m.uid.as_str())
}

fn exec_session(u: &ExecUpdate) -> Option<&str> {
    match &u.update {
        Some(agentsessions_proto::v1::exec_update::Update::Session(s)) => session_uid(s),
        _ => None,
    }
}

fn start(method: &'static str, metadata: &tonic::metadata::MetadataMap, uid: &str) -> RpcLog {
    RpcLog::start("Sessions", method, RpcKind::Unary, metadata, uid)
}

fn start_registry(method: &'static str, metadata: &tonic::metadata::MetadataMap) -> RpcLog {
    RpcLog::start("HarnessRegistry", method, RpcKind::Unary, metadata, "")
}

/// Wraps a driver stream so its finish is logged, the request id is on
/// its headers and its admission `permit` is held until the stream ends
/// or is dropped.
fn logged<T: Send + 'static>(
    rx: impl Stream<Item = Result<T, Status>> + Send + 'static,
    log: RpcLog,
    session_of: fn(&T) -> Option<&str>,
    permit: Permit,
) -> tonic::Response<FrameStream<T>> {
    let request_id = log.request_id().to_owned();
    let stream = rx.map(move |r| {
        let _held = &permit;
        r.map_err(to_tonic)
    });
    let mut response =
        tonic::Response::new(
            Box::pin(LoggedStream::new(Box::pin(stream), log, session_of)) as FrameStream<T>,
        );
    if let Ok(v) = request_id.parse() {
        response
            .metadata_mut()
            .insert(super::observe::REQUEST_ID, v);
    }
    response
}

/// The machine's status as a tonic status (codes are numbered alike).
pub fn to_tonic(status: Status) -> tonic::Status {
    tonic::Status::new(tonic::Code::from_i32(status.code as i32), status.message)
}

fn unexpected(what: &str, got: Response) -> tonic::Status {
    to_tonic(Status::new(
        Code::Internal,
        format!("{what}: unexpected reply {got:?}"),
    ))
}

impl Authenticator {
    /// The caller of `request`: its bearer credential, or the verified
    /// client certificate of its connection.
    pub fn caller<T>(&self, request: &tonic::Request<T>) -> Result<Caller, tonic::Status> {
        let certs = request.peer_certs();
        let leaf = certs.as_ref().and_then(|c| c.first()).map(|c| c.as_ref());
        self.authenticate(request.metadata(), leaf)
            .map_err(|e| e.to_tonic())
    }
}

/// A stream of frames for tonic.
pub type FrameStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

/// What both services hold: the drive loop, the credential check and
/// where calls are counted.
#[derive(Clone)]
struct Front {
    driver: DriverHandle,
    auth: Arc<Authenticator>,
    metrics: Option<Arc<Metrics>>,
    admission: Arc<Admission>,
}

impl Front {
    fn new(driver: DriverHandle, auth: Arc<Authenticator>) -> Self {
        Self {
            driver,
            auth,
            metrics: None,
            admission: Arc::new(Admission::new(Limits::default(), None)),
        }
    }

    fn with_metrics(mut self, metrics: Option<Arc<Metrics>>) -> Self {
        self.metrics = metrics;
        self
    }

    fn with_admission(mut self, admission: Arc<Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// The verified caller of `request`, named in `log`, and the permit its
    /// admission holds ([`super::limits`]). A bad credential or a bound the
    /// call would pass is the call's reply: finished in `log` and returned.
    /// `stream` says whether the call is a stream.
    fn admit<M: prost::Message>(
        &self,
        log: &mut RpcLog,
        request: &tonic::Request<M>,
        stream: bool,
    ) -> Result<(Caller, Permit), tonic::Status> {
        log.count_in(self.metrics.clone());
        let caller = self.auth.caller(request).map_err(|e| log.failed(e))?;
        log.set_principal(&caller);
        let who = Who::of(&caller, request.remote_addr());
        let bytes = prost::Message::encoded_len(request.get_ref()).max(CALL_FLOOR_BYTES);
        let permit = self
            .admission
            .admit(who, stream, bytes)
            .map_err(|status| log.failed(to_tonic(status)))?;
        Ok((caller, permit))
    }

    /// One unary call, whole: admitted, submitted to the drive loop as
    /// `into(message)`, its reply taken by `pick` (any other is INTERNAL,
    /// named `what`), and its finish logged, with the session `session_of`
    /// names.
    async fn unary<M: prost::Message, T>(
        &self,
        mut log: RpcLog,
        request: tonic::Request<M>,
        into: fn(M) -> Request,
        (what, pick): Pick<T>,
        session_of: fn(&T) -> Option<&str>,
    ) -> Result<tonic::Response<T>, tonic::Status> {
        let (caller, _permit) = self.admit(&mut log, &request, false)?;
        let reply = self
            .driver
            .traced(log.span())
            .unary(caller, into(request.into_inner()))
            .await;
        let result = match reply.map(pick) {
            Ok(Ok(r)) => Ok(tonic::Response::new(r)),
            Ok(Err(other)) => Err(unexpected(what, *other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, session_of)
    }
}

/// Which reply each unary call expects, and the name an unexpected one is
/// reported under.
type Pick<T> = (&'static str, fn(Response) -> Result<T, Box<Response>>);

macro_rules! pick {
    ($what:literal, $variant:ident) => {
        ($what, |r| match r {
            Response::$variant(v) => Ok(v),
            other => Err(Box::new(other)),
        })
    };
}

const SESSION: Pick<Session> = pick!("session", Session);
const SESSIONS: Pick<ListSessionsResponse> = pick!("list", Sessions);
const APPROVE: Pick<ApproveResponse> = pick!("approve", Approve);
const FORK: Pick<ForkResponse> = pick!("fork", Fork);
const REGISTERED: Pick<RegisterHarnessResponse> = pick!("register", Registered);
const HARNESS: Pick<HarnessRegistration> = pick!("harness", Harness);
const HARNESSES: Pick<ListHarnessesResponse> = pick!("list harnesses", Harnesses);
const TOOLS: Pick<agentsessions_proto::v1::ListToolsResponse> = pick!("list tools", Tools);

/// A service over the shared [`Front`]: built from the drive loop and the
/// credential check, then given the daemon's admission and metrics.
macro_rules! front_service {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(Front);

        impl $name {
            /// A service submitting to `driver` the calls `auth` authenticates.
            pub fn new(driver: DriverHandle, auth: Arc<Authenticator>) -> Self {
                Self(Front::new(driver, auth))
            }

            /// Admits calls through `admission` (shared with the daemon's other
            /// services, so the bounds hold across them).
            pub fn with_admission(self, admission: Arc<Admission>) -> Self {
                Self(self.0.with_admission(admission))
            }

            /// Counts every call in `metrics`.
            pub fn with_metrics(self, metrics: Option<Arc<Metrics>>) -> Self {
                Self(self.0.with_metrics(metrics))
            }
        }
    };
}

front_service!(
    /// The `Sessions` service.
    SessionsService
);

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn create_session(
        &self,
        request: tonic::Request<CreateSessionRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let log = start("CreateSession", request.metadata(), "");
        self.0
            .unary(log, request, Request::CreateSession, SESSION, session_uid)
            .await
    }

    async fn get_session(
        &self,
        request: tonic::Request<GetSessionRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let log = start("GetSession", request.metadata(), &request.get_ref().uid);
        self.0
            .unary(log, request, Request::GetSession, SESSION, |_| None)
            .await
    }

    async fn list_sessions(
        &self,
        request: tonic::Request<ListSessionsRequest>,
    ) -> Result<tonic::Response<ListSessionsResponse>, tonic::Status> {
        let log = start("ListSessions", request.metadata(), "");
        self.0
            .unary(log, request, Request::ListSessions, SESSIONS, |_| None)
            .await
    }

    async fn delete_session(
        &self,
        request: tonic::Request<DeleteSessionRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let log = start("DeleteSession", request.metadata(), &request.get_ref().uid);
        self.0
            .unary(log, request, Request::DeleteSession, SESSION, |_| None)
            .await
    }

    type ExecStream = FrameStream<ExecUpdate>;

    async fn exec(
        &self,
        request: tonic::Request<ExecRequest>,
    ) -> Result<tonic::Response<Self::ExecStream>, tonic::Status> {
        let mut log = RpcLog::start(
            "Sessions",
            "Exec",
            RpcKind::ServerStream,
            request.metadata(),
            &request.get_ref().session,
        );
        let (caller, permit) = self.0.admit(&mut log, &request, true)?;
        if let Err((bound, status)) = check_exec(self.0.admission.limits(), request.get_ref()) {
            self.0.admission.refused(bound);
            return log.unary(Err(to_tonic(status)), |_| None);
        }
        let rx = self
            .0
            .driver
            .traced(log.span())
            .exec(caller, Request::Exec(request.into_inner()));
        Ok(logged(
            UnboundedReceiverStream::new(rx),
            log,
            exec_session,
            permit,
        ))
    }

    type ReplayStream = FrameStream<LogRecord>;

    async fn replay(
        &self,
        request: tonic::Request<ReplayRequest>,
    ) -> Result<tonic::Response<Self::ReplayStream>, tonic::Status> {
        let mut log = RpcLog::start(
            "Sessions",
            "Replay",
            RpcKind::ServerStream,
            request.metadata(),
            &request.get_ref().session,
        );
        let (caller, permit) = self.0.admit(&mut log, &request, true)?;
        let rx = self
            .0
            .driver
            .traced(log.span())
            .replay(caller, Request::Replay(request.into_inner()));
        Ok(logged(rx, log, |_| None, permit))
    }

    async fn approve(
        &self,
        request: tonic::Request<ApproveRequest>,
    ) -> Result<tonic::Response<ApproveResponse>, tonic::Status> {
        let log = start("Approve", request.metadata(), &request.get_ref().session);
        self.0
            .unary(log, request, Request::Approve, APPROVE, |_| None)
            .await
    }

    async fn cancel(
        &self,
        request: tonic::Request<CancelRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let log = start("Cancel", request.metadata(), &request.get_ref().session);
        self.0
            .unary(log, request, Request::Cancel, SESSION, |_| None)
            .await
    }

    async fn suspend(
        &self,
        request: tonic::Request<SuspendRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let log = start("Suspend", request.metadata(), &request.get_ref().session);
        self.0
            .unary(log, request, Request::Suspend, SESSION, |_| None)
            .await
    }

    async fn resume(
        &self,
        request: tonic::Request<ResumeRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let log = start("Resume", request.metadata(), &request.get_ref().session);
        self.0
            .unary(log, request, Request::Resume, SESSION, |_| None)
            .await
    }

    async fn fork(
        &self,
        request: tonic::Request<ForkRequest>,
    ) -> Result<tonic::Response<ForkResponse>, tonic::Status> {
        let log = start("Fork", request.metadata(), &request.get_ref().session);
        self.0
            .unary(log, request, Request::Fork, FORK, |_| None)
            .await
    }
}

front_service!(
    /// The `HarnessRegistry` admin service (served on a loopback listener only).
    RegistryService
);

#[tonic::async_trait]
impl HarnessRegistry for RegistryService {
    async fn register_harness(
        &self,
        request: tonic::Request<RegisterHarnessRequest>,
    ) -> Result<tonic::Response<RegisterHarnessResponse>, tonic::Status> {
        let log = start_registry("RegisterHarness", request.metadata());
        self.0
            .unary(log, request, Request::RegisterHarness, REGISTERED, |_| None)
            .await
    }

    async fn get_harness(
        &self,
        request: tonic::Request<GetHarnessRequest>,
    ) -> Result<tonic::Response<HarnessRegistration>, tonic::Status> {
        let log = start_registry("GetHarness", request.metadata());
        self.0
            .unary(log, request, Request::GetHarness, HARNESS, |_| None)
            .await
    }

    async fn list_harnesses(
        &self,
        request: tonic::Request<ListHarnessesRequest>,
    ) -> Result<tonic::Response<ListHarnessesResponse>, tonic::Status> {
        let log = start_registry("ListHarnesses", request.metadata());
        self.0
            .unary(log, request, Request::ListHarnesses, HARNESSES, |_| None)
            .await
    }

    async fn retire_harness(
        &self,
        request: tonic::Request<RetireHarnessRequest>,
    ) -> Result<tonic::Response<HarnessRegistration>, tonic::Status> {
        let log = start_registry("RetireHarness", request.metadata());
        self.0
            .unary(log, request, Request::RetireHarness, HARNESS, |_| None)
            .await
    }
}

front_service!(
    /// Tools.ListTools: the host's tool catalog, served beside Sessions.
    ToolsService
);

#[tonic::async_trait]
impl agentsessions_proto::grpc::tools_server::Tools for ToolsService {
    async fn list_tools(
        &self,
        request: tonic::Request<agentsessions_proto::v1::ListToolsRequest>,
    ) -> Result<tonic::Response<agentsessions_proto::v1::ListToolsResponse>, tonic::Status> {
        let log = RpcLog::start("Tools", "ListTools", RpcKind::Unary, request.metadata(), "");
        self.0
            .unary(log, request, |_| Request::ListTools, TOOLS, |_| None)
            .await
    }
}
