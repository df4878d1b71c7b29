//! Decided: which approval of a session is decided but not yet carried
//! out. Not a wire RPC: the wire renders such a session EXEC_COMPLETED (a
//! compatibility fallback, see `journal::projection`), so the console asks
//! this to show it as waiting for a resume instead.
//!
//! Invariant: read-only; it answers from the session's summary at its
//! head, with the same gate Resume would carry out.

use agentsessions_proto::v1::{ApprovalRef, ExecState};

use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::Flow;
use crate::ops::stages::load::{Load, Loaded};
use crate::vocab::{EffectId, Outcome, RequestId, Response, Status};

/// See the module docs.
pub(crate) struct DecidedOp {
    request: RequestId,
    session: String,
    load: Option<Load>,
}

impl DecidedOp {
    pub(crate) fn new(request: RequestId, session: String) -> Self {
        Self {
            request,
            session,
            load: None,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.session.is_empty() {
            cx.reply(
                self.request,
                Err(Status::invalid_argument("session is required")),
            );
            return Flow::Done;
        }
        self.load = Some(Load::start(cx, &self.session));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        let load = self
            .load
            .take()
            .expect("a decided op waits only on its load");
        assert_eq!(load.waits_on(), id, "a load waits for its own read");
        let reply = match load.on_outcome(cx, id, outcome) {
            Loaded::Pending(load) => {
                self.load = Some(load);
                return Flow::Continue;
            }
            Loaded::Ready(_, journal) => {
                let summary = journal.summary();
                match (summary.status(), summary.selected_gate()) {
                    (Ok(status), Ok(gate)) => Ok(Response::Decided(
                        gate.filter(|g| {
                            status.exec_state != ExecState::ExecCanceled
                                && !g.inherited
                                && !g.completed
                                && !g.has_receipt()
                                && g.decision.is_some()
                        })
                        .and_then(|g| {
                            Some(ApprovalRef {
                                request_seq: g.request_seq()?,
                                execution_id: g.execution_id,
                                tool_call_id: g.call.id,
                            })
                        }),
                    )),
                    (Err(e), _) | (_, Err(e)) => Err(Status::internal(format!(
                        "session approval projection: {e}"
                    ))),
                }
            }
            Loaded::NotFound(s) | Loaded::Busy(s) | Loaded::Failed(s) => Err(s),
        };
        debug_assert!(
            !matches!(&reply, Ok(Response::Decided(Some(g))) if g.request_seq <= 0),
            "a decided gate's request is a committed record"
        );
        cx.reply(self.request, reply);
        Flow::Done
    }
}
