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

use agentsessions_machine::host::{Caller, Code, Request, Response, Status};
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

/// The verified caller of `$request`, named in `$log`, and the permit its
/// admission holds ([`super::limits`]); a bad credential or a bound the
/// call would pass returns the call's reply, logged, from the method.
/// `$stream` says whether the call is a stream.
macro_rules! admitted {
    ($service:ident, $log:ident, $request:ident, $stream:expr) => {{
        $log.count_in($service.0.metrics.clone());
        let caller = match $service.0.auth.caller(&$request) {
            Ok(caller) => {
                $log.set_principal(&caller);
                caller
            }
            Err(e) => return $log.unary(Err(e), |_| None),
        };
        let who = Who::of(&caller, $request.remote_addr());
        let bytes = prost::Message::encoded_len($request.get_ref()).max(CALL_FLOOR_BYTES);
        match $service.0.admission.admit(who, $stream, bytes) {
            Ok(permit) => (caller, permit),
            Err(status) => return $log.unary(Err(to_tonic(status)), |_| None),
        }
    }};
}

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
}

/// The `Sessions` service.
#[derive(Clone)]
pub struct SessionsService(Front);

impl SessionsService {
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

    async fn session(
        &self,
        log: &RpcLog,
        caller: Caller,
        request: Request,
        what: &str,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, request)
            .await
        {
            Ok(Response::Session(s)) => Ok(tonic::Response::new(s)),
            Ok(other) => Err(unexpected(what, other)),
            Err(status) => Err(to_tonic(status)),
        }
    }
}

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn create_session(
        &self,
        request: tonic::Request<CreateSessionRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let mut log = start("CreateSession", request.metadata(), "");
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .session(
                &log,
                caller,
                Request::CreateSession(request.into_inner()),
                "create",
            )
            .await;
        log.unary(result, session_uid)
    }

    async fn get_session(
        &self,
        request: tonic::Request<GetSessionRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let mut log = start("GetSession", request.metadata(), &request.get_ref().uid);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .session(
                &log,
                caller,
                Request::GetSession(request.into_inner()),
                "get",
            )
            .await;
        log.unary(result, |_| None)
    }

    async fn list_sessions(
        &self,
        request: tonic::Request<ListSessionsRequest>,
    ) -> Result<tonic::Response<ListSessionsResponse>, tonic::Status> {
        let mut log = start("ListSessions", request.metadata(), "");
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, Request::ListSessions(request.into_inner()))
            .await
        {
            Ok(Response::Sessions(r)) => Ok(tonic::Response::new(r)),
            Ok(other) => Err(unexpected("list", other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, |_| None)
    }

    async fn delete_session(
        &self,
        request: tonic::Request<DeleteSessionRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let mut log = start("DeleteSession", request.metadata(), &request.get_ref().uid);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .session(
                &log,
                caller,
                Request::DeleteSession(request.into_inner()),
                "delete",
            )
            .await;
        log.unary(result, |_| None)
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
        let (caller, permit) = admitted!(self, log, request, true);
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
        let (caller, permit) = admitted!(self, log, request, true);
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
        let mut log = start("Approve", request.metadata(), &request.get_ref().session);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, Request::Approve(request.into_inner()))
            .await
        {
            Ok(Response::Approve(r)) => Ok(tonic::Response::new(r)),
            Ok(other) => Err(unexpected("approve", other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, |_| None)
    }

    async fn cancel(
        &self,
        request: tonic::Request<CancelRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let mut log = start("Cancel", request.metadata(), &request.get_ref().session);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .session(
                &log,
                caller,
                Request::Cancel(request.into_inner()),
                "cancel",
            )
            .await;
        log.unary(result, |_| None)
    }

    async fn suspend(
        &self,
        request: tonic::Request<SuspendRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let mut log = start("Suspend", request.metadata(), &request.get_ref().session);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .session(
                &log,
                caller,
                Request::Suspend(request.into_inner()),
                "suspend",
            )
            .await;
        log.unary(result, |_| None)
    }

    async fn resume(
        &self,
        request: tonic::Request<ResumeRequest>,
    ) -> Result<tonic::Response<Session>, tonic::Status> {
        let mut log = start("Resume", request.metadata(), &request.get_ref().session);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .session(
                &log,
                caller,
                Request::Resume(request.into_inner()),
                "resume",
            )
            .await;
        log.unary(result, |_| None)
    }

    async fn fork(
        &self,
        request: tonic::Request<ForkRequest>,
    ) -> Result<tonic::Response<ForkResponse>, tonic::Status> {
        let mut log = start("Fork", request.metadata(), &request.get_ref().session);
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, Request::Fork(request.into_inner()))
            .await
        {
            Ok(Response::Fork(r)) => Ok(tonic::Response::new(r)),
            Ok(other) => Err(unexpected("fork", other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, |_| None)
    }
}

/// The `HarnessRegistry` admin service (served on a loopback listener only).
#[derive(Clone)]
pub struct RegistryService(Front);

impl RegistryService {
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

    async fn registration(
        &self,
        log: &RpcLog,
        caller: Caller,
        request: Request,
        what: &str,
    ) -> Result<tonic::Response<HarnessRegistration>, tonic::Status> {
        match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, request)
            .await
        {
            Ok(Response::Harness(h)) => Ok(tonic::Response::new(h)),
            Ok(other) => Err(unexpected(what, other)),
            Err(status) => Err(to_tonic(status)),
        }
    }
}

#[tonic::async_trait]
impl HarnessRegistry for RegistryService {
    async fn register_harness(
        &self,
        request: tonic::Request<RegisterHarnessRequest>,
    ) -> Result<tonic::Response<RegisterHarnessResponse>, tonic::Status> {
        let mut log = start_registry("RegisterHarness", request.metadata());
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, Request::RegisterHarness(request.into_inner()))
            .await
        {
            Ok(Response::Registered(r)) => Ok(tonic::Response::new(r)),
            Ok(other) => Err(unexpected("register", other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, |_| None)
    }

    async fn get_harness(
        &self,
        request: tonic::Request<GetHarnessRequest>,
    ) -> Result<tonic::Response<HarnessRegistration>, tonic::Status> {
        let mut log = start_registry("GetHarness", request.metadata());
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .registration(
                &log,
                caller,
                Request::GetHarness(request.into_inner()),
                "get harness",
            )
            .await;
        log.unary(result, |_| None)
    }

    async fn list_harnesses(
        &self,
        request: tonic::Request<ListHarnessesRequest>,
    ) -> Result<tonic::Response<ListHarnessesResponse>, tonic::Status> {
        let mut log = start_registry("ListHarnesses", request.metadata());
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, Request::ListHarnesses(request.into_inner()))
            .await
        {
            Ok(Response::Harnesses(r)) => Ok(tonic::Response::new(r)),
            Ok(other) => Err(unexpected("list harnesses", other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, |_| None)
    }

    async fn retire_harness(
        &self,
        request: tonic::Request<RetireHarnessRequest>,
    ) -> Result<tonic::Response<HarnessRegistration>, tonic::Status> {
        let mut log = start_registry("RetireHarness", request.metadata());
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = self
            .registration(
                &log,
                caller,
                Request::RetireHarness(request.into_inner()),
                "retire harness",
            )
            .await;
        log.unary(result, |_| None)
    }
}

/// Tools.ListTools: the host's tool catalog, served beside Sessions.
#[derive(Clone)]
pub struct ToolsService(Front);

impl ToolsService {
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

#[tonic::async_trait]
impl agentsessions_proto::grpc::tools_server::Tools for ToolsService {
    async fn list_tools(
        &self,
        request: tonic::Request<agentsessions_proto::v1::ListToolsRequest>,
    ) -> Result<tonic::Response<agentsessions_proto::v1::ListToolsResponse>, tonic::Status> {
        let mut log = RpcLog::start("Tools", "ListTools", RpcKind::Unary, request.metadata(), "");
        let (caller, _permit) = admitted!(self, log, request, false);
        let result = match self
            .0
            .driver
            .traced(log.span())
            .unary(caller, Request::ListTools)
            .await
        {
            Ok(Response::Tools(r)) => Ok(tonic::Response::new(r)),
            Ok(other) => Err(unexpected("list tools", other)),
            Err(status) => Err(to_tonic(status)),
        };
        log.unary(result, |_| None)
    }
}
