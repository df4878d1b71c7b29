//! Effects: the work the machine hands to the shells.
//!
//! Effects that need an answer carry an [`EffectId`]; the answer comes back
//! as an [`Outcome`](super::Outcome) with that id, exactly once.

use agentsessions_proto::v1::{
    ComputeState, ControllerFrame, Event, ModelCall, SnapshotRef, ToolCall,
};

use super::committed::Committed;
use super::config::Backend;
use super::ids::{ConnId, EffectId, Nanos, RequestId};
use super::lease::LeaseClaim;
use super::request::{Response, StreamItem};
use super::rows::{HarnessCheck, HarnessRow, SessionRow};
use super::status::Status;

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

/// Work for the shells, grouped by who performs it, so each performer
/// matches only its own group. Effects with an id expect exactly one
/// [`Outcome`](super::Outcome) of the matching group.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// The journal and registry store.
    Store(StoreEffect),
    /// Harness connections (Describe and `Harness.Connect`).
    Harness(HarnessEffect),
    /// The runtime backend of a route.
    Runtime(RuntimeCall),
    /// The model provider.
    Model(InvokeModel),
    /// The model provider: stop the call `id` (a canceled run abandoned
    /// it). Its outcome is still delivered once, early or late; the host
    /// drops it on arrival.
    AbandonModel {
        /// The `InvokeModel` to stop.
        id: EffectId,
    },
    /// The tool executor.
    Tool(ExecuteTool),
    /// The tool executor: a Cancel met the call `id` in flight. Advisory:
    /// the executor may stop the tool (an MCP call is cancelled on its
    /// server) and answer a durable error receipt instead, or let it run;
    /// either way the `ExecuteTool`'s outcome is still delivered once and
    /// recorded, so the journal keeps what happened.
    InterruptTool {
        /// The `ExecuteTool` whose turn was canceled.
        id: EffectId,
    },
    /// The client of a call (the gRPC server).
    Client(ClientEffect),
    /// The tool executor's ledger: forget every key of a deleted session.
    /// Expects no outcome; repeating it is harmless.
    ForgetTools {
        /// Session uid (deleted).
        session: String,
    },
}

/// Work for the store. Every store effect expects an outcome; the ones that
/// stamp a time carry the machine's `now`.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreEffect {
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
        /// The session's compute_state after the batch, as the machine
        /// decides it (`None`: leave it); the store writes exactly this.
        compute_state: Option<ComputeState>,
        /// The machine's time, for what the store stamps.
        now: Nanos,
        /// Ends this host's lease on the session in the same transaction
        /// (the owner whose lease at `fence` the store removes): set on an
        /// operation's last append, so the release costs no commit of its
        /// own. A refused append keeps the lease.
        release: Option<String>,
    },
    /// A fork child's first write: `session` (empty, its fence minted)
    /// begins with `parent`'s records `1..=at_seq`, which the store
    /// references instead of copying, and `events` follow as records
    /// `at_seq + 1 ..`, the first chaining from the parent's record at
    /// `at_seq`. Answered like an append (`StoreOutcome::Appended`, with
    /// only the new records); a deleted parent is `AppendError::Deleted`.
    Fork {
        /// Completion key.
        id: EffectId,
        /// The child's uid.
        session: String,
        /// The parent's uid.
        parent: String,
        /// The last parent record the child shares (0: none).
        at_seq: i64,
        /// The child's fence.
        fence: i64,
        /// Events after the shared prefix (the FORK marker).
        events: Vec<Event>,
        /// The child's compute_state after the write (`None`: leave it).
        compute_state: Option<ComputeState>,
        /// The machine's time, for what the store stamps.
        now: Nanos,
    },
    /// Mint the next fence for `session` (creating its row if missing),
    /// taking its lease in the same transaction when `lease` is set; a
    /// live lease of another host refuses the mint (a busy fault).
    MintFence {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
        /// The machine's time, for what the store stamps.
        now: Nanos,
        /// The lease to take with the fence (hosts sharing a journal).
        lease: Option<LeaseClaim>,
    },
    /// Extend `owner`'s lease on `session` to `ttl` from the store's now
    /// (0: release it), if `owner` still holds it under `fence`. Answered
    /// with whether it still does.
    HoldLease {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
        /// The holding host.
        owner: String,
        /// The fence the lease was taken with.
        fence: i64,
        /// New length from now; 0 releases.
        ttl: Nanos,
        /// The machine's time (the embedded stores' clock).
        now: Nanos,
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
        /// Set for a page of a client's stream: see [`Pace`].
        pace: Option<Pace>,
    },
    /// Read the whole journal as a [`Journal`](crate::journal::Journal):
    /// its records from seq 1 and their summary. A shell may answer from a
    /// journal it keeps, extended with what the store holds past it.
    ReadJournal {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
    },
    /// Delete the session (records and row) and leave its tombstone, in
    /// one transaction, if its head is still `expected_last_seq`.
    DeleteSession {
        /// Completion key.
        id: EffectId,
        /// Session uid.
        session: String,
        /// CAS: the head the deletion was decided from.
        expected_last_seq: i64,
        /// The machine's time, stamped on the tombstone.
        now: Nanos,
        /// Who deleted it, for the tombstone ("" = unauthenticated, or the
        /// host's own retention).
        principal: String,
    },
    /// One bounded retention step: the next `scan` session rows in uid
    /// order after `after`, keeping those last written before `before`.
    StaleSessions {
        /// Completion key.
        id: EffectId,
        /// Exclusive lower bound on uid ("" = from the start).
        after: String,
        /// Rows last written before this are stale.
        before: Nanos,
        /// Rows to look at.
        scan: usize,
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
        /// The machine's time, for what the store stamps.
        now: Nanos,
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
        /// The machine's time, for what the store stamps.
        now: Nanos,
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
        /// The machine's time, for what the store stamps.
        now: Nanos,
    },
}

/// Work for the harness client.
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessEffect {
    /// Ask a harness for its descriptor: through a route, or over an open
    /// connection (`conn`), bounded by `timeout_ms`.
    Describe {
        /// Completion key.
        id: EffectId,
        /// Route (registry name) to describe.
        harness: String,
        /// The route's backend.
        backend: Backend,
        /// Describe the harness behind this connection instead.
        conn: Option<ConnId>,
        /// Upper bound; the shell reports [`HarnessFailure::Timeout`](super::HarnessFailure::Timeout).
        timeout_ms: u64,
    },
    /// Open `Harness.Connect` to `address` as connection `conn`.
    Dial {
        /// Completion key.
        id: EffectId,
        /// Route (registry name).
        harness: String,
        /// The route's backend.
        backend: Backend,
        /// Harness address from the runtime.
        address: String,
        /// The connection's id for later frames and events. Its harness
        /// must send a first event within `connect_timeout_ms` of the first
        /// frame, or the machine fails the connection as unavailable.
        conn: ConnId,
    },
    /// Send a frame on a connection (failures come back as harness input).
    Send {
        /// Connection.
        conn: ConnId,
        /// Frame.
        frame: ControllerFrame,
        /// A Start's prior events, which `frame` leaves empty: shared with
        /// the journal, so delivering them in process copies nothing (see
        /// [`History`](super::History)). None for every other frame.
        history: Option<super::History>,
    },
    /// Close a connection (idempotent); no further input is expected.
    Close {
        /// Connection.
        conn: ConnId,
    },
}

/// A Runtime SPI call on the backend of route `harness`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeCall {
    /// Completion key.
    pub id: EffectId,
    /// Route (registry name).
    pub harness: String,
    /// The route's backend.
    pub backend: Backend,
    /// The call.
    pub op: RuntimeOp,
}

/// Invoke the model provider once.
#[derive(Debug, Clone, PartialEq)]
pub struct InvokeModel {
    /// Completion key (also tags streamed chunks).
    pub id: EffectId,
    /// Session uid.
    pub session: String,
    /// Execution the call belongs to.
    pub execution_id: String,
    /// The request (model, params, messages, tools, tool_choice).
    pub request: ModelCall,
}

/// Run a host-executed tool. Only emitted once its TOOL_CALL intent is
/// durable; the executor dedups by (session, idempotency key).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecuteTool {
    /// Completion key.
    pub id: EffectId,
    /// Session uid (the dedup scope).
    pub session: String,
    /// The durable TOOL_CALL record this execution is for.
    pub intent: Committed,
    /// The call exactly as recorded.
    pub call: ToolCall,
    /// Run it even though an earlier run under its key started and never
    /// finished: the machine found re-running safe (see
    /// [`ToolGate::may_rerun`](super::ToolGate::may_rerun)). Without it the
    /// executor answers such a key with [`ToolFailure::Unfinished`](super::ToolFailure::Unfinished).
    pub again: bool,
    /// Running the call twice is harmless in itself
    /// ([`ToolGate::harmless_twice`](super::ToolGate::harmless_twice)), so
    /// the executor need not make a mark durable before it runs: a crash
    /// mid-run just runs it again.
    pub repeatable: bool,
}

/// Work for the client side of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEffect {
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
            Self::Store(e) => Some(e.id()),
            Self::Harness(e) => e.id(),
            Self::Runtime(e) => Some(e.id),
            Self::Model(e) => Some(e.id),
            Self::Tool(e) => Some(e.id),
            Self::Client(_)
            | Self::ForgetTools { .. }
            | Self::AbandonModel { .. }
            | Self::InterruptTool { .. } => None,
        }
    }

    /// The effect's name, for traces and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Store(e) => e.name(),
            Self::Harness(e) => e.name(),
            Self::Runtime(_) => "Runtime",
            Self::Model(_) => "InvokeModel",
            Self::Tool(_) => "ExecuteTool",
            Self::Client(ClientEffect::Stream { .. }) => "Stream",
            Self::Client(ClientEffect::Reply { .. }) => "Reply",
            Self::ForgetTools { .. } => "ForgetTools",
            Self::AbandonModel { .. } => "AbandonModel",
            Self::InterruptTool { .. } => "InterruptTool",
        }
    }
}

impl StoreEffect {
    /// The completion key.
    pub fn id(&self) -> EffectId {
        match self {
            Self::Append { id, .. }
            | Self::Fork { id, .. }
            | Self::MintFence { id, .. }
            | Self::HoldLease { id, .. }
            | Self::ReadLog { id, .. }
            | Self::ReadJournal { id, .. }
            | Self::GetSession { id, .. }
            | Self::PutSession { id, .. }
            | Self::ListSessions { id, .. }
            | Self::GetHarnessRow { id, .. }
            | Self::ListHarnessRows { id, .. }
            | Self::RegisterHarnessRow { id, .. }
            | Self::RetireHarnessRow { id, .. }
            | Self::ReserveHarnessNames { id, .. }
            | Self::DeleteSession { id, .. }
            | Self::StaleSessions { id, .. } => *id,
        }
    }

    /// The effect's name, for traces and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Append { .. } => "Append",
            Self::Fork { .. } => "Fork",
            Self::MintFence { .. } => "MintFence",
            Self::HoldLease { .. } => "HoldLease",
            Self::ReadLog { .. } => "ReadLog",
            Self::ReadJournal { .. } => "ReadJournal",
            Self::GetSession { .. } => "GetSession",
            Self::PutSession { .. } => "PutSession",
            Self::ListSessions { .. } => "ListSessions",
            Self::GetHarnessRow { .. } => "GetHarnessRow",
            Self::ListHarnessRows { .. } => "ListHarnessRows",
            Self::RegisterHarnessRow { .. } => "RegisterHarnessRow",
            Self::RetireHarnessRow { .. } => "RetireHarnessRow",
            Self::ReserveHarnessNames { .. } => "ReserveHarnessNames",
            Self::DeleteSession { .. } => "DeleteSession",
            Self::StaleSessions { .. } => "StaleSessions",
        }
    }
}

impl HarnessEffect {
    /// The completion key, for Describe and Dial.
    pub fn id(&self) -> Option<EffectId> {
        match self {
            Self::Describe { id, .. } | Self::Dial { id, .. } => Some(*id),
            Self::Send { .. } | Self::Close { .. } => None,
        }
    }

    /// The effect's name, for traces and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Describe { .. } => "Describe",
            Self::Dial { .. } => "Dial",
            Self::Send { .. } => "Send",
            Self::Close { .. } => "Close",
        }
    }
}

/// How a ReadLog that pages a client's stream is performed: once the
/// client has taken every frame streamed to it before (so a slow reader
/// holds at most one page), and stopping after the record that brings the
/// page's encoded size to `max_bytes` or more (at least one record when
/// any is in range). A page shorter than asked and under `max_bytes` is
/// therefore the end of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// The stream's call.
    pub request: RequestId,
    /// The page's byte bound (prost encoded lengths).
    pub max_bytes: usize,
}

/// A page's running encoded size against its byte bound: the one place
/// [`Pace`]'s rule is written, for the store that cuts a page and the
/// machine that reads a cut page as "more may follow".
#[derive(Debug, Clone, Copy)]
pub struct PageFill {
    left: usize,
    /// `add` said the page is full: it ends there.
    full: bool,
}

impl PageFill {
    /// An empty page bounded by `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            left: max_bytes,
            full: false,
        }
    }

    /// Counts `record`; true when the page is full and ends with it.
    pub fn add(&mut self, record: &agentsessions_proto::v1::LogRecord) -> bool {
        debug_assert!(!self.full, "a full page takes no more records");
        self.left = self
            .left
            .saturating_sub(prost::Message::encoded_len(record));
        self.full = self.left == 0;
        self.full
    }
}
