//! Operations: one state machine per client request in flight.
//!
//! Each operation issues effects through its [`Cx`] and advances when their
//! outcomes come back. The host routes outcomes, harness input, model chunks,
//! deadlines and cancellation to the operation that owns them; an operation
//! returns [`Flow::Done`] once it has replied.

pub(crate) mod requests;
pub(crate) mod stages;

use requests::{
    approve, boot, cancel, decided, delete, exec, expire, fork, registry, replay, resume, session,
    suspend,
};
use stages::authorize;
pub(crate) use stages::flow::{Flow, unexpected};

use crate::ops::stages::cx::Cx;
use crate::vocab::caller::Caller;
use crate::vocab::shown;
use crate::vocab::{ConnId, EffectId, HarnessInput, Outcome, Request, RequestId, Status};

/// One operation in flight.
pub(crate) enum Op {
    Create(session::CreateOp),
    Get(session::GetOp),
    List(session::ListOp),
    Replay(replay::ReplayOp),
    Exec(exec::ExecOp),
    Resume(resume::ResumeOp),
    Suspend(suspend::SuspendOp),
    Approve(approve::ApproveOp),
    Fork(fork::ForkOp),
    ReplayHarness(replay::ReplayHarnessOp),
    Registry(registry::RegistryOp),
    Boot(boot::BootOp),
    Cancel(cancel::CancelOp),
    Delete(delete::DeleteOp),
    Retain(delete::RetainOp),
    Decided(decided::DecidedOp),
    /// ListTools: answered from the config at once.
    Tools(RequestId),
    /// The host's own: denies a request whose wait ran out.
    Expire(expire::ExpireOp),
    /// A call waiting for its session's project (see `authorize`).
    Gate(authorize::GateOp),
}

impl Op {
    /// The operation for a client call.
    pub(crate) fn new(request: RequestId, caller: Caller, call: Request) -> Self {
        let actor = caller.actor();
        match call {
            Request::CreateSession(r) => Self::Create(session::CreateOp::new(request, r, actor)),
            Request::GetSession(r) => Self::Get(session::GetOp::new(request, r.uid)),
            Request::ListSessions(r) => Self::List(session::ListOp::new(request, r)),
            Request::Replay(r) => Self::Replay(replay::ReplayOp::new(request, r)),
            Request::Exec(r) => Self::Exec(exec::ExecOp::new(request, r, actor)),
            Request::Resume(r) => {
                Self::Resume(resume::ResumeOp::unary(request, r.session, &caller))
            }
            Request::Suspend(r) => {
                Self::Suspend(suspend::SuspendOp::new(request, r.session, actor))
            }
            Request::Approve(r) => Self::Approve(approve::ApproveOp::new(request, r, &caller)),
            Request::Fork(r) => Self::Fork(fork::ForkOp::new(request, r, actor)),
            Request::ReplayHarness { session } => {
                Self::ReplayHarness(replay::ReplayHarnessOp::new(request, session))
            }
            Request::RegisterHarness(r) => {
                Self::Registry(registry::RegistryOp::register(request, r))
            }
            Request::GetHarness(r) => Self::Registry(registry::RegistryOp::get(request, r)),
            Request::ListHarnesses(r) => Self::Registry(registry::RegistryOp::list(request, r)),
            Request::RetireHarness(r) => Self::Registry(registry::RegistryOp::retire(request, r)),
            Request::Boot => Self::Boot(boot::BootOp::new(request)),
            Request::DeleteSession(r) => {
                let principal = actor.as_ref().map(|a| a.principal.clone());
                Self::Delete(delete::DeleteOp::new(
                    request,
                    r.uid,
                    principal.unwrap_or_default(),
                ))
            }
            Request::Retain { after } => Self::Retain(delete::RetainOp::new(request, after)),
            Request::ListTools => Self::Tools(request),
            Request::Decided { session } => {
                Self::Decided(decided::DecidedOp::new(request, session))
            }
            Request::Cancel(r) => Self::Cancel(cancel::CancelOp::new(request, r, actor)),
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        match self {
            Self::Create(op) => op.start(cx),
            Self::Get(op) => op.start(cx),
            Self::List(op) => op.start(cx),
            Self::Replay(op) => op.start(cx),
            Self::Exec(op) => op.start(cx),
            Self::Resume(op) => op.start(cx),
            Self::Suspend(op) => op.start(cx),
            Self::Approve(op) => op.start(cx),
            Self::Fork(op) => op.start(cx),
            Self::ReplayHarness(op) => op.start(cx),
            Self::Registry(op) => op.start(cx),
            Self::Boot(op) => op.start(cx),
            Self::Cancel(op) => op.start(cx),
            Self::Delete(op) => op.start(cx),
            Self::Retain(op) => op.start(cx),
            Self::Decided(op) => op.start(cx),
            Self::Expire(op) => op.start(cx),
            Self::Tools(request) => {
                let listing = cx.config().tools.listing();
                cx.reply(*request, Ok(crate::vocab::Response::Tools(listing)));
                Flow::Done
            }
            Self::Gate(_) => unreachable!("a gate starts when it is made"),
        }
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match self {
            Self::Create(op) => op.on_outcome(cx, id, outcome),
            Self::Get(op) => op.on_outcome(cx, id, outcome),
            Self::List(op) => op.on_outcome(cx, id, outcome),
            Self::Replay(op) => op.on_outcome(cx, id, outcome),
            Self::Exec(op) => op.on_outcome(cx, id, outcome),
            Self::Resume(op) => op.on_outcome(cx, id, outcome),
            Self::Suspend(op) => op.on_outcome(cx, id, outcome),
            Self::Approve(op) => op.on_outcome(cx, id, outcome),
            Self::Fork(op) => op.on_outcome(cx, id, outcome),
            Self::ReplayHarness(op) => op.on_outcome(cx, id, outcome),
            Self::Registry(op) => op.on_outcome(cx, id, outcome),
            Self::Boot(op) => op.on_outcome(cx, id, outcome),
            Self::Cancel(op) => op.on_outcome(cx, id, outcome),
            Self::Delete(op) => op.on_outcome(cx, id, outcome),
            Self::Retain(op) => op.on_outcome(cx, id, outcome),
            Self::Decided(op) => op.on_outcome(cx, id, outcome),
            Self::Tools(_) => unexpected("list tools", &outcome),
            Self::Expire(op) => op.on_outcome(cx, id, outcome),
            Self::Gate(op) => op.on_outcome(cx, id, outcome),
        }
    }

    pub(crate) fn on_harness(
        &mut self,
        cx: &mut Cx<'_>,
        conn: ConnId,
        input: HarnessInput,
    ) -> Flow {
        match self {
            Self::Exec(op) => op.on_harness(cx, conn, input),
            Self::Resume(op) => op.on_harness(cx, conn, input),
            Self::ReplayHarness(op) => op.on_harness(cx, conn, input),
            Self::Expire(op) => op.on_harness(cx, conn, input),
            _ => Flow::Continue,
        }
    }

    pub(crate) fn on_chunk(&mut self, cx: &mut Cx<'_>, id: EffectId, chunk: String) -> Flow {
        match self {
            Self::Exec(op) => op.on_chunk(cx, id, chunk),
            Self::Resume(op) => op.on_chunk(cx, id, chunk),
            Self::Expire(op) => op.on_chunk(cx, id, chunk),
            _ => Flow::Continue,
        }
    }

    /// A Cancel call for the session this operation holds.
    pub(crate) fn on_cancel_request(
        &mut self,
        cx: &mut Cx<'_>,
        request: RequestId,
        req: &agentsessions_proto::v1::CancelRequest,
        actor: Option<&agentsessions_proto::v1::IdentityRef>,
    ) -> Flow {
        debug_assert!(
            !req.session.is_empty(),
            "routed by the guard of its session, which has a name"
        );
        match self {
            Self::Exec(op) => op.on_cancel_request(cx, request, req, actor),
            Self::Resume(op) => op.on_cancel_request(cx, request, req, actor),
            Self::Expire(op) => op.on_cancel_request(cx, request, req, actor),
            _ => {
                let busy = format!("cancel: session {:?} is busy; retry", shown(&req.session));
                cx.reply(request, Err(Status::aborted(busy)));
                Flow::Continue
            }
        }
    }

    pub(crate) fn on_cancel(&mut self, cx: &mut Cx<'_>) -> Flow {
        match self {
            Self::Gate(op) => op.on_cancel(cx),
            Self::Exec(op) => op.on_deadline(
                cx,
                Status::new(crate::vocab::Code::Cancelled, "client cancelled"),
            ),
            _ => Flow::Continue,
        }
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Cx<'_>) -> Flow {
        match self {
            Self::Exec(op) => op.on_deadline(
                cx,
                Status::new(crate::vocab::Code::DeadlineExceeded, "deadline exceeded"),
            ),
            _ => Flow::Continue,
        }
    }
}
