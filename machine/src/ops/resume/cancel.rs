//! Cancel of a running recovery (Resume, or an inputless Exec that
//! re-drives a turn), and finishing a Cancel that was cut before its END.
//! The run itself cancels as a live turn does (`invocation::cancel`).

use agentsessions_proto::v1::CancelRequest;

use super::{ResumeOp, Stage};
use crate::events;
use crate::invocation::{CancelRefusal, Ending};
use crate::ops::cx::Cx;
use crate::ops::routing::mapping;
use crate::ops::session::{Render, Rendered};
use crate::ops::{Flow, unexpected};
use crate::vocab::{Committed, EffectId, Outcome, RequestId, Response, Status, StoreOutcome};

impl ResumeOp {
    /// A Cancel for this session while this recovery holds it: taken while
    /// the recovered execution runs; ABORTED (retry) before and after.
    pub(crate) fn on_cancel_request(
        &mut self,
        cx: &mut Cx<'_>,
        request: RequestId,
        req: &CancelRequest,
    ) -> Flow {
        if !matches!(self.stage, Stage::Running(_)) {
            let busy = format!("cancel: session {:?} is recovering; retry", self.session);
            cx.reply(request, Err(Status::aborted(busy)));
            return Flow::Continue;
        }
        let Stage::Running(mut run) = std::mem::replace(&mut self.stage, Stage::Over) else {
            unreachable!("matched above");
        };
        let current = run.inv.setup().execution_id.clone();
        if !req.execution_id.is_empty() && req.execution_id != current {
            let msg = format!(
                "cancel: execution {:?} is not the session's current one ({current:?})",
                req.execution_id
            );
            cx.reply(request, Err(Status::failed_precondition(msg)));
        } else {
            match run.cancel(cx, &req.reason) {
                Ok(()) => self.cancels.push(request),
                Err(CancelRefusal::Parking) => cx.reply(
                    request,
                    Err(Status::aborted(
                        "cancel: the execution is parking on an approval; retry",
                    )),
                ),
                Err(CancelRefusal::Ended | CancelRefusal::Replaying) => cx.reply(
                    request,
                    Err(Status::failed_precondition(format!(
                        "cancel: execution {current:?} already ended"
                    ))),
                ),
            }
        }
        self.after_run(cx, run)
    }

    /// The run ended: Cancel calls it did not end by cancel are refused.
    pub(super) fn settle_cancels(&mut self, cx: &mut Cx<'_>, ending: &Ending) {
        if matches!(ending, Ending::Canceled) {
            return;
        }
        let status = match ending {
            Ending::Failed(e) => mapping::resume(e),
            _ => Status::failed_precondition("cancel: the execution already ended"),
        };
        for request in std::mem::take(&mut self.cancels) {
            cx.reply(request, Err(status.clone()));
        }
    }

    /// The canceled session is rendered: every Cancel call gets it.
    pub(super) fn on_canceled(
        &mut self,
        cx: &mut Cx<'_>,
        mut render: Render,
        id: EffectId,
        outcome: Outcome,
    ) -> Flow {
        let result = match render.on_outcome(cx, id, outcome) {
            Rendered::Pending => {
                self.stage = Stage::Canceled(render);
                return Flow::Continue;
            }
            Rendered::Done(s) => Ok(Response::Session(*s)),
            Rendered::NotFound => Err(Status::internal("session vanished")),
            Rendered::Failed(status) => Err(status),
        };
        assert!(
            !self.cancels.is_empty(),
            "a canceled recovery has a Cancel call"
        );
        for request in std::mem::take(&mut self.cancels) {
            cx.reply(request, result.clone());
        }
        Flow::Done
    }

    /// Finishing a cut Cancel: mint, then append END{CANCELED}.
    pub(super) fn on_end_cancel(
        &mut self,
        cx: &mut Cx<'_>,
        id: EffectId,
        outcome: Outcome,
        fence: EffectId,
        append: Option<EffectId>,
        exec_id: String,
    ) -> Flow {
        match (append, outcome) {
            (None, Outcome::Store(StoreOutcome::Fence(Ok(f)))) => {
                assert_eq!(fence, id);
                let end = events::end_canceled(&exec_id);
                let append = cx.append(&self.session, self.head(), f, vec![end]);
                self.stage = Stage::EndCancel {
                    fence,
                    append: Some(append),
                    exec_id,
                };
                Flow::Continue
            }
            (None, Outcome::Store(StoreOutcome::Fence(Err(e)))) => {
                self.fail(cx, Status::internal(format!("mint fence: {e}")))
            }
            (Some(want), Outcome::Store(StoreOutcome::Appended(Ok(records)))) => {
                assert_eq!(want, id);
                for r in records {
                    self.log.push(r.clone());
                    self.stream(cx, Committed::new(r));
                }
                self.reply_session(cx)
            }
            (Some(_), Outcome::Store(StoreOutcome::Appended(Err(e)))) => {
                self.fail(cx, mapping::append(&e, "resume"))
            }
            (_, other) => unexpected("resume end-cancel", &other),
        }
    }
}
