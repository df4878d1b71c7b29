//! Client calls in, final answers and stream frames out.

use agentsessions_proto::v1::{
    ExecUpdate, ForkResponse, HarnessRegistration, ListHarnessesResponse, ListSessionsResponse,
    RegisterHarnessResponse, Session,
};

use super::committed::Committed;

/// A client call, as decoded by the gRPC shell.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Sessions.CreateSession.
    CreateSession(agentsessions_proto::v1::CreateSessionRequest),
    /// Sessions.GetSession.
    GetSession(agentsessions_proto::v1::GetSessionRequest),
    /// Sessions.ListSessions.
    ListSessions(agentsessions_proto::v1::ListSessionsRequest),
    /// Sessions.DeleteSession.
    DeleteSession(agentsessions_proto::v1::DeleteSessionRequest),
    /// Sessions.Exec (streams `ExecUpdate`s).
    Exec(agentsessions_proto::v1::ExecRequest),
    /// Sessions.Replay (streams `LogRecord`s; read-only).
    Replay(agentsessions_proto::v1::ReplayRequest),
    /// Sessions.Approve.
    Approve(agentsessions_proto::v1::ApproveRequest),
    /// Sessions.Cancel.
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
    /// One retention step: look at the next rows after `after` and delete
    /// the stale ones (see `HostConfig::retain_completed`). Not a wire RPC;
    /// the daemon's retention task sends it.
    Retain {
        /// Where this step starts ("" = the first row).
        after: String,
    },
    /// The session's approval that is decided but not yet carried out by
    /// a resume, if any (the wire shows that state as EXEC_COMPLETED). Not
    /// a wire RPC; the console asks it.
    Decided {
        /// The session.
        session: String,
    },
    /// Tools.ListTools: the catalog with each tool's policy.
    ListTools,
    /// Boot the host before it serves: reserve the static and configured
    /// names, then load every stored registration. Not a wire RPC; the
    /// daemon and the test world send it once, first.
    Boot,
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
    /// The host booted.
    Booted(BootReport),
    /// A retention step ran.
    Retained(RetentionReport),
    /// The catalog (Tools.ListTools).
    Tools(agentsessions_proto::v1::ListToolsResponse),
    /// The answer to [`Request::Decided`].
    Decided(Option<agentsessions_proto::v1::ApprovalRef>),
}

/// What one retention step did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RetentionReport {
    /// Stale sessions deleted, with the records each held.
    pub deleted: Vec<(String, i64)>,
    /// Stale sessions kept: something in flight or pending, or written
    /// again since the scan.
    pub kept: usize,
    /// Where the next step starts ("" = the scan reached the end).
    pub next: String,
}

/// What a boot loaded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BootReport {
    /// Registration rows read from the store.
    pub loaded: usize,
    /// Rows this host cannot serve, as (name, reason), for the log.
    pub isolated: Vec<(String, String)>,
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
