//! The machine's vocabulary: what comes in, what goes out.
//!
//! Inputs enter through `Host::handle_*`; effects leave through
//! `Host::poll_effect`. Every effect that needs an answer carries an
//! [`EffectId`], and its answer comes back as an [`Outcome`] with that id.
//! Effects that may only happen once a record is durable (a tool execution,
//! a stream frame carrying a record) hold [`Committed`] records, which only
//! the machine can construct from an append outcome — so the wrong order
//! cannot be expressed.

use std::collections::BTreeMap;

use agentsessions_proto::v1::{
    ApprovalRef, ComputeState, ControllerFrame, Event, ExecUpdate, ForkResponse, HarnessDescriptor,
    HarnessRegistration, IdentityRef, ListHarnessesResponse, ListSessionsResponse, LogRecord,
    Message, ModelCall, Origin, RegisterHarnessResponse, Session, SnapshotRef, ToolCall,
    ToolResult, Usage,
};

use super::status::Status;

/// Identifies one effect awaiting an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EffectId(pub u64);

/// Identifies one client call; chosen by the shell, unique while in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Identifies one harness connection (one `Harness.Connect` stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// Unix time in nanoseconds; the only clock the machine knows.
pub type Nanos = i64;

/// Records known to be durable: built only from an append or read outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed(LogRecord);

impl Committed {
    /// Wraps a record the store reported as committed. Crate-private so an
    /// effect cannot be given a record the machine has not seen land.
    pub(crate) fn new(record: LogRecord) -> Self {
        Self(record)
    }
    /// The committed record.
    pub fn record(&self) -> &LogRecord {
        &self.0
    }
    /// Unwraps the record.
    pub fn into_record(self) -> LogRecord {
        self.0
    }
}

/// Where ids come from. The daemon uses OS randomness; tests and the
/// simulator use a seeded or counting source, which keeps the machine
/// deterministic.
pub trait IdSource {
    /// `sess-` + 24 lowercase hex.
    fn session_uid(&mut self) -> String;
    /// 16 lowercase hex (8 random bytes).
    fn execution_id(&mut self) -> String;
    /// 16 lowercase hex; the recorded MODEL_CALL id.
    fn model_call_id(&mut self) -> String;
    /// `harness-` + 24 lowercase hex.
    fn harness_uid(&mut self) -> String;
}

/// A deterministic [`IdSource`] that counts; the ids keep the real formats.
#[derive(Debug, Clone, Default)]
pub struct CountingIds {
    next: u64,
}

impl CountingIds {
    /// Starts counting at `start` (use different starts for different hosts).
    pub fn starting_at(start: u64) -> Self {
        Self { next: start }
    }
    fn bump(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

impl IdSource for CountingIds {
    fn session_uid(&mut self) -> String {
        format!("sess-{:024x}", self.bump())
    }
    fn execution_id(&mut self) -> String {
        format!("{:016x}", self.bump())
    }
    fn model_call_id(&mut self) -> String {
        format!("{:016x}", self.bump())
    }
    fn harness_uid(&mut self) -> String {
        format!("harness-{:024x}", self.bump())
    }
}

/// A client call, as decoded by the gRPC shell.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Sessions.CreateSession.
    CreateSession(agentsessions_proto::v1::CreateSessionRequest),
    /// Sessions.GetSession.
    GetSession(agentsessions_proto::v1::GetSessionRequest),
    /// Sessions.ListSessions.
    ListSessions(agentsessions_proto::v1::ListSessionsRequest),
    /// Sessions.DeleteSession (not implemented yet).
    DeleteSession(agentsessions_proto::v1::DeleteSessionRequest),
    /// Sessions.Exec (streams `ExecUpdate`s).
    Exec(agentsessions_proto::v1::ExecRequest),
    /// Sessions.Replay (streams `LogRecord`s; read-only).
    Replay(agentsessions_proto::v1::ReplayRequest),
    /// Sessions.Approve.
    Approve(agentsessions_proto::v1::ApproveRequest),
    /// Sessions.Cancel (not implemented yet).
    Cancel(agentsessions_proto::v1::CancelRequest),
    /// Sessions.Suspend.
    Suspend(agentsessions_proto::v1::SuspendRequest),
    /// Sessions.Resume.
    Resume(agentsessions_proto::v1::ResumeRequest),
    /// Sessions.Fork.
    Fork(agentsessions_proto::v1::ForkRequest),
    /// Re-run the harness over every completed execution with recorded
    /// effects served (zero model and tool calls) and report the outputs.
    /// Not a wire RPC: `agentctl verify --replay` and the simulator use it.
    ReplayHarness {
        /// The session to re-run.
        session: String,
    },
    /// HarnessRegistry.RegisterHarness.
    RegisterHarness(agentsessions_proto::v1::RegisterHarnessRequest),
    /// HarnessRegistry.GetHarness.
    GetHarness(agentsessions_proto::v1::GetHarnessRequest),
    /// HarnessRegistry.ListHarnesses.
    ListHarnesses(agentsessions_proto::v1::ListHarnessesRequest),
    /// HarnessRegistry.RetireHarness.
    RetireHarness(agentsessions_proto::v1::RetireHarnessRequest),
}

/// The final answer to a client call.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// A session (Create, Get, Suspend, Resume).
    Session(Session),
    /// A page of sessions.
    Sessions(ListSessionsResponse),
    /// Fork children.
    Fork(ForkResponse),
    /// A committed decision.
    Approve(agentsessions_proto::v1::ApproveResponse),
    /// A streamed call finished cleanly (Exec, Replay).
    StreamEnd,
    /// The outputs of a harness replay.
    Replayed(ReplayReport),
    /// A registration (Get, Retire).
    Harness(HarnessRegistration),
    /// RegisterHarness.
    Registered(RegisterHarnessResponse),
    /// ListHarnesses.
    Harnesses(ListHarnessesResponse),
}

/// What a harness replay reproduced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayReport {
    /// Executions re-run.
    pub executions: usize,
    /// Text of every served completion and output, in order.
    pub outputs: Vec<String>,
}

/// One frame of a streamed reply.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// An Exec session frame (first, and final after recovery or park).
    Session(Session),
    /// A committed record (Exec or Replay).
    Record(Committed),
    /// An ephemeral output chunk (Exec only; never journaled).
    Delta(agentsessions_proto::v1::Delta),
}

impl StreamItem {
    /// The Exec wire frame for this item.
    pub fn into_exec_update(self) -> ExecUpdate {
        use agentsessions_proto::v1::exec_update::Update;
        let update = match self {
            Self::Session(s) => Update::Session(s),
            Self::Record(r) => Update::Record(r.into_record()),
            Self::Delta(d) => Update::Delta(d),
        };
        ExecUpdate {
            update: Some(update),
        }
    }
}

/// Session metadata as the store keeps it, plus the derived head.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionRow {
    /// `sess-…`.
    pub uid: String,
    /// Tenant.
    pub project: String,
    /// Display name.
    pub name: String,
    /// The session's harness (registry name); empty on legacy rows.
    pub harness: String,
    /// Model id.
    pub model: String,
    /// Fork lineage.
    pub parent_uid: String,
    /// Seq the session was forked at.
    pub fork_seq: i64,
    /// Unix nanos; 0 = unset.
    pub created_at: Nanos,
    /// Unix nanos.
    pub updated_at: Nanos,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// External context.
    pub origin: Option<Origin>,
    /// Provenance.
    pub identity: Option<IdentityRef>,
    /// Head of the journal (0 when empty); read-only.
    pub last_seq: i64,
    /// Projection maintained by appends; read-only.
    pub compute_state: ComputeState,
}

/// How a new session row must relate to the harness registry when stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarnessCheck {
    /// The harness is a registered one: it must have an active row.
    Registered,
    /// The harness is static: no registration row may exist for it.
    Static,
}

/// One stored harness registration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HarnessRow {
    /// Registry name.
    pub name: String,
    /// `harness-…`.
    pub uid: String,
    /// Canonical proto3-JSON of the spec.
    pub spec: String,
    /// `sha256:…`.
    pub spec_digest: String,
    /// Retired rows refuse new sessions.
    pub retired: bool,
    /// First retire reason.
    pub retire_reason: String,
    /// Unix nanos of the first retirement; 0 while active.
    pub retired_at: Nanos,
    /// Unix nanos.
    pub created_at: Nanos,
    /// Unix nanos.
    pub updated_at: Nanos,
}

/// Operations of the Runtime SPI.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeOp {
    /// Provision a cold incarnation for `session`.
    Create {
        /// Session uid.
        session: String,
    },
    /// Bring a snapshot back.
    Restore {
        /// From a SUSPEND record, or `{local: uid}`.
        snapshot: SnapshotRef,
    },
    /// Capture state and release compute (EXTERNAL: the cold transition).
    Snapshot {
        /// Session uid.
        session: String,
    },
    /// Clone a snapshot into a child.
    Fork {
        /// The parent's snapshot.
        snapshot: SnapshotRef,
        /// Child session uid.
        child: String,
    },
    /// Destroy an incarnation.
    Stop {
        /// Session uid.
        session: String,
    },
}

/// Work for the shells. Effects with an id expect exactly one [`Outcome`].
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Append `events` as consecutive records after `expected_last_seq`
    /// under `fence` (CAS + fence in one transaction).
    Append {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
        /// CAS: the head the writer expects.
        expected_last_seq: i64,
        /// The writer's fence.
        fence: i64,
        /// Events to append, in order.
        events: Vec<Event>,
    },
    /// Mint the next fence for `session` (creating its row if missing).
    MintFence {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
    },
    /// Read records `from_seq..=to_seq` (`to_seq` 0 = to the head).
    ReadLog {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
        /// First seq (>= 1).
        from_seq: i64,
        /// Last seq, 0 = head.
        to_seq: i64,
    },
    /// Read the session row.
    GetSession {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
    },
    /// Upsert a session row (never touches fence or compute_state).
    PutSession {
        /// Completion key.
        id: EffectId,
        /// The row; `last_seq` and `compute_state` are ignored.
        row: SessionRow,
        /// When set, check the harness registry in the same transaction.
        check: Option<HarnessCheck>,
    },
    /// Keyset page of sessions in `project`, (created_at DESC, uid ASC).
    ListSessions {
        /// Completion key.
        id: EffectId,
        /// Exact project.
        project: String,
        /// Rows wanted (1..=500); the store reports whether more follow.
        page_size: usize,
        /// Resume after this (created_at, uid), exclusive.
        after: Option<(Nanos, String)>,
    },
    /// Read a harness registration row.
    GetHarnessRow {
        /// Completion key.
        id: EffectId,
        /// Registry name.
        name: String,
    },
    /// Page of registration rows with names `> after`, in name order.
    ListHarnessRows {
        /// Completion key.
        id: EffectId,
        /// Exclusive lower bound.
        after: String,
        /// Rows wanted.
        limit: usize,
        /// Include retired rows.
        include_retired: bool,
    },
    /// Register (or find unchanged / reactivate) a harness, atomically.
    RegisterHarnessRow {
        /// Completion key.
        id: EffectId,
        /// The row to insert when absent.
        row: HarnessRow,
    },
    /// Retire a registration (idempotent; keeps the first reason).
    RetireHarnessRow {
        /// Completion key.
        id: EffectId,
        /// Registry name.
        name: String,
        /// Reason.
        reason: String,
        /// Unix nanos.
        now: Nanos,
    },
    /// Reserve names permanently (all or nothing).
    ReserveHarnessNames {
        /// Completion key.
        id: EffectId,
        /// Names.
        names: Vec<String>,
    },
    /// Ask a harness for its descriptor: through a route, or over an open
    /// connection (`conn`), bounded by `timeout_ms`.
    Describe {
        /// Completion key.
        id: EffectId,
        /// Route (registry name) to describe.
        harness: String,
        /// The route's backend.
        backend: super::config::Backend,
        /// Describe the harness behind this connection instead.
        conn: Option<ConnId>,
        /// Upper bound; the shell reports [`HarnessFailure::Timeout`].
        timeout_ms: u64,
    },
    /// A Runtime SPI call on the backend of route `harness`.
    Runtime {
        /// Completion key.
        id: EffectId,
        /// Route (registry name).
        harness: String,
        /// The route's backend.
        backend: super::config::Backend,
        /// The call.
        op: RuntimeOp,
    },
    /// Open `Harness.Connect` to `address` as connection `conn`.
    Dial {
        /// Completion key.
        id: EffectId,
        /// Route (registry name).
        harness: String,
        /// The route's backend.
        backend: super::config::Backend,
        /// Harness address from the runtime.
        address: String,
        /// The connection's id for later frames and events.
        conn: ConnId,
        /// The harness must send its first event within this bound, or the
        /// connection fails with [`HarnessInput::Unavailable`].
        first_event_timeout_ms: u64,
    },
    /// Send a frame on a connection (failures come back as harness input).
    Send {
        /// Connection.
        conn: ConnId,
        /// Frame.
        frame: ControllerFrame,
    },
    /// Close a connection (idempotent); no further input is expected.
    Close {
        /// Connection.
        conn: ConnId,
    },
    /// Invoke the model provider once.
    InvokeModel {
        /// Completion key (also tags streamed chunks).
        id: EffectId,
        /// Session uid.
        session: String,
        /// Execution the call belongs to.
        execution_id: String,
        /// The request (model, params, messages, tools, tool_choice).
        request: ModelCall,
    },
    /// Run a host-executed tool. Only emitted once its TOOL_CALL intent is
    /// durable; the executor dedups by (session, idempotency key).
    ExecuteTool {
        /// Completion key.
        id: EffectId,
        /// Session uid (the dedup scope).
        session: String,
        /// The durable TOOL_CALL record this execution is for.
        intent: Committed,
        /// The call exactly as recorded.
        call: ToolCall,
    },
    /// Send one frame of a streamed reply.
    Stream {
        /// The call.
        request: RequestId,
        /// The frame.
        item: StreamItem,
    },
    /// Finish a client call.
    Reply {
        /// The call.
        request: RequestId,
        /// Result.
        result: Result<Response, Status>,
    },
}

impl Effect {
    /// The completion key, for effects that expect an outcome.
    pub fn id(&self) -> Option<EffectId> {
        match self {
            Self::Append { id, .. }
            | Self::MintFence { id, .. }
            | Self::ReadLog { id, .. }
            | Self::GetSession { id, .. }
            | Self::PutSession { id, .. }
            | Self::ListSessions { id, .. }
            | Self::GetHarnessRow { id, .. }
            | Self::ListHarnessRows { id, .. }
            | Self::RegisterHarnessRow { id, .. }
            | Self::RetireHarnessRow { id, .. }
            | Self::ReserveHarnessNames { id, .. }
            | Self::Describe { id, .. }
            | Self::Runtime { id, .. }
            | Self::Dial { id, .. }
            | Self::InvokeModel { id, .. }
            | Self::ExecuteTool { id, .. } => Some(*id),
            Self::Send { .. } | Self::Close { .. } | Self::Stream { .. } | Self::Reply { .. } => {
                None
            }
        }
    }

    /// The variant's name, for traces and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Append { .. } => "Append",
            Self::MintFence { .. } => "MintFence",
            Self::ReadLog { .. } => "ReadLog",
            Self::GetSession { .. } => "GetSession",
            Self::PutSession { .. } => "PutSession",
            Self::ListSessions { .. } => "ListSessions",
            Self::GetHarnessRow { .. } => "GetHarnessRow",
            Self::ListHarnessRows { .. } => "ListHarnessRows",
            Self::RegisterHarnessRow { .. } => "RegisterHarnessRow",
            Self::RetireHarnessRow { .. } => "RetireHarnessRow",
            Self::ReserveHarnessNames { .. } => "ReserveHarnessNames",
            Self::Describe { .. } => "Describe",
            Self::Runtime { .. } => "Runtime",
            Self::Dial { .. } => "Dial",
            Self::Send { .. } => "Send",
            Self::Close { .. } => "Close",
            Self::InvokeModel { .. } => "InvokeModel",
            Self::ExecuteTool { .. } => "ExecuteTool",
            Self::Stream { .. } => "Stream",
            Self::Reply { .. } => "Reply",
        }
    }
}

/// Why an append did not commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// The head was not `expected_last_seq`.
    Conflict {
        /// The head seen by the store.
        head: i64,
    },
    /// A newer fence was minted.
    Fenced {
        /// The stored fence.
        current: i64,
    },
    /// Storage failure; whether anything committed is unknown to the caller,
    /// so the machine re-reads before deciding again.
    Failed(String),
}

/// Why a harness call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessFailure {
    /// The harness could not be reached (gRPC UNAVAILABLE or refused dial).
    Unavailable(String),
    /// No answer within the bound.
    Timeout,
    /// Anything else, with its gRPC code number.
    Other {
        /// gRPC code number.
        code: i32,
        /// Detail.
        message: String,
    },
}

/// Why a registry write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryRefusal {
    /// The name is reserved for a static harness.
    Reserved,
    /// A row with a different digest exists.
    SpecConflict,
    /// No such row.
    NotFound,
    /// The harness row is retired.
    Retired,
    /// A static name has a registration row (or a reservation collides).
    NameCollision,
}

/// Answer to a [`Effect::RegisterHarnessRow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// Inserted.
    Created,
    /// Same digest, already active.
    Unchanged,
    /// Same digest, was retired, now active.
    Reactivated,
}

/// A model completion.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelReply {
    /// The assistant message (text, reasoning and tool-call parts).
    pub message: Option<Message>,
    /// Provider usage.
    pub usage: Option<Usage>,
}

/// The answer to an effect, keyed by its [`EffectId`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// For [`Effect::Append`]: the committed records, in order.
    Appended(Result<Vec<LogRecord>, AppendError>),
    /// For [`Effect::MintFence`].
    Fence(Result<i64, String>),
    /// For [`Effect::ReadLog`].
    Log(Result<Vec<LogRecord>, String>),
    /// For [`Effect::GetSession`]: `None` when the session is unknown.
    Session(Result<Option<SessionRow>, String>),
    /// For [`Effect::PutSession`].
    Put(Result<(), PutError>),
    /// For [`Effect::ListSessions`]: the rows, and whether more follow.
    SessionPage(Result<(Vec<SessionRow>, bool), String>),
    /// For [`Effect::GetHarnessRow`].
    HarnessRow(Result<Option<HarnessRow>, String>),
    /// For [`Effect::ListHarnessRows`].
    HarnessRows(Result<Vec<HarnessRow>, String>),
    /// For [`Effect::RegisterHarnessRow`]: the stored row and what happened.
    Registered(Result<(HarnessRow, RegisterOutcome), PutError>),
    /// For [`Effect::RetireHarnessRow`]: the row after retiring.
    Retired(Result<HarnessRow, PutError>),
    /// For [`Effect::ReserveHarnessNames`].
    Reserved(Result<(), PutError>),
    /// For [`Effect::Describe`].
    Described(Result<HarnessDescriptor, HarnessFailure>),
    /// For [`Effect::Runtime`]: an address (Create, Restore, Fork), a
    /// snapshot (Snapshot) or nothing (Stop).
    Runtime(Result<RuntimeReply, String>),
    /// For [`Effect::Dial`].
    Dialed(Result<(), HarnessFailure>),
    /// For [`Effect::InvokeModel`].
    Model(Result<ModelReply, String>),
    /// For [`Effect::ExecuteTool`].
    Tool(Result<ToolResult, String>),
}

/// Why a store write with a precondition was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutError {
    /// The registry refused it.
    Refused(RegistryRefusal),
    /// Storage failure.
    Failed(String),
}

/// What a Runtime SPI call returned.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeReply {
    /// A harness address to dial.
    Incarnation {
        /// `unix://…` or `host:port`.
        address: String,
    },
    /// A snapshot handle.
    Snapshot(SnapshotRef),
    /// Nothing to report.
    Done,
}

/// Something the harness sent, or the end of its stream.
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessInput {
    /// An event frame.
    Event(Event),
    /// The harness closed its send side cleanly.
    Closed,
    /// The stream failed (including a failed send).
    Failed(String),
    /// The harness sent no event within the dial's first-event bound.
    Unavailable(String),
}

/// A park reference, re-exported for callers matching on parks.
pub type ParkRef = ApprovalRef;
