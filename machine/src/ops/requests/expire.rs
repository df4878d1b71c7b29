//! Expire: the host's own call when an approval request outlives its wait.
//! It denies the request as the host, then resumes the turn so the agent
//! reads the denial, which is what `agentctl deny` does for a human.
//!
//! Invariants: the denial goes through Approve's rules (a decided request
//! is left alone, a racing writer turns the append into ABORTED), so at
//! most one decision is ever recorded; a denial that could not be written
//! for now is armed again, so a request is never forgotten while the host
//! runs. Nothing here replies to a client: the calls it makes are the
//! host's own ([`RequestId::is_host`]).

use agentsessions_proto::v1::{ApprovalRef, ApproveRequest};

use crate::ops::requests::approve::ApproveOp;
use crate::ops::requests::resume::ResumeOp;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::expiry::{Armed, reason};
use crate::ops::stages::flow::Flow;
use crate::vocab::caller::{Caller, host_identity};
use crate::vocab::{Code, ConnId, EffectId, HarnessInput, Nanos, Outcome, RequestId, Signal};

/// How long a denial that could not be written waits before it is tried
/// again (the session was busy, or the store down).
pub(crate) const RETRY: Nanos = 5_000_000_000;

enum Stage {
    Deny(ApproveOp),
    Resume(ResumeOp),
    Over,
}

/// See the module docs.
pub(crate) struct ExpireOp {
    request: RequestId,
    session: String,
    armed: Armed,
    stage: Stage,
}

impl ExpireOp {
    pub(crate) fn new(request: RequestId, session: String, armed: Armed) -> Self {
        assert!(request.is_host(), "an expiry is the host's own call");
        assert!(!session.is_empty() && armed.gate.request_seq > 0);
        Self {
            request,
            session,
            armed,
            stage: Stage::Over,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        cx.core
            .expiries
            .set_running(&self.session, Some(self.armed.after_ms));
        let ApprovalRef {
            execution_id,
            tool_call_id,
            request_seq,
        } = self.armed.gate.clone();
        let deny = ApproveRequest {
            session: self.session.clone(),
            execution_id,
            tool_call_id,
            request_seq,
            approved: Some(false),
            reason: reason(self.armed.after_ms),
            identity: Some(host_identity()),
        };
        let mut op = ApproveOp::expiring(self.request, deny);
        let flow = op.start(cx);
        self.stage = Stage::Deny(op);
        self.step(cx, flow)
    }

    /// After the inner call moved: once it is done, its reply decides what
    /// comes next.
    fn step(&mut self, cx: &mut Cx<'_>, flow: Flow) -> Flow {
        if matches!(flow, Flow::Continue) {
            return Flow::Continue;
        }
        let reply = cx
            .core
            .take_host_reply(self.request)
            .expect("a call replies before it is done");
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Deny(_) => match reply {
                Ok(_) => {
                    cx.signal(Signal::ApprovalExpired {
                        session: self.session.clone(),
                    });
                    let mut op = ResumeOp::unary(self.request, self.session.clone(), &Caller::Open);
                    let flow = op.start(cx);
                    self.stage = Stage::Resume(op);
                    self.step(cx, flow)
                }
                Err(status) => {
                    // Busy or unreachable: try again later. Anything else
                    // (decided, gone, superseded) leaves nothing to deny.
                    if matches!(status.code, Code::Aborted | Code::Unavailable) {
                        let again = Armed {
                            at: cx.now().saturating_add(RETRY),
                            ..self.armed.clone()
                        };
                        self.end(cx);
                        cx.core.expiries.arm(&self.session, again);
                        return Flow::Done;
                    }
                    self.end(cx)
                }
            },
            // The decision is durable whatever the resume did: a resume that
            // failed leaves the session for a client's Resume, as a human's
            // denial would.
            Stage::Resume(_) => self.end(cx),
            Stage::Over => unreachable!("an expiry steps while a call runs"),
        }
    }

    fn end(&mut self, cx: &mut Cx<'_>) -> Flow {
        cx.core.expiries.set_running(&self.session, None);
        self.stage = Stage::Over;
        Flow::Done
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        let flow = match &mut self.stage {
            Stage::Deny(op) => op.on_outcome(cx, id, outcome),
            Stage::Resume(op) => op.on_outcome(cx, id, outcome),
            Stage::Over => unreachable!("an ended expiry waits for nothing"),
        };
        self.step(cx, flow)
    }

    pub(crate) fn on_harness(
        &mut self,
        cx: &mut Cx<'_>,
        conn: ConnId,
        input: HarnessInput,
    ) -> Flow {
        let flow = match &mut self.stage {
            Stage::Resume(op) => op.on_harness(cx, conn, input),
            _ => Flow::Continue,
        };
        self.step(cx, flow)
    }

    pub(crate) fn on_chunk(&mut self, cx: &mut Cx<'_>, id: EffectId, chunk: String) -> Flow {
        let flow = match &mut self.stage {
            Stage::Resume(op) => op.on_chunk(cx, id, chunk),
            _ => Flow::Continue,
        };
        self.step(cx, flow)
    }

    /// A Cancel of the session: the resumed turn takes it like any other.
    pub(crate) fn on_cancel_request(
        &mut self,
        cx: &mut Cx<'_>,
        request: RequestId,
        req: &agentsessions_proto::v1::CancelRequest,
        actor: Option<&agentsessions_proto::v1::IdentityRef>,
    ) -> Flow {
        let flow = match &mut self.stage {
            Stage::Resume(op) => op.on_cancel_request(cx, request, req, actor),
            _ => {
                let busy = "cancel: the host is denying an expired approval request; retry";
                cx.reply(request, Err(crate::vocab::Status::aborted(busy)));
                Flow::Continue
            }
        };
        self.step(cx, flow)
    }
}
