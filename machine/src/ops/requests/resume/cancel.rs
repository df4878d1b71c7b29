//! Cancel of a running recovery (Resume, or an inputless Exec that
//! re-drives a turn), and finishing a Cancel that was cut before its END.
//! The run itself cancels as a live turn does (`invocation::cancel`).

use agentsessions_proto::v1::{CancelRequest, IdentityRef};

use super::{ResumeOp, Stage};
use crate::events;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::present::Render;
use crate::ops::stages::routing::mapping;
use crate::vocab::shown;
use crate::vocab::{Committed, EffectId, Outcome, RequestId, Status, StoreOutcome};

impl ResumeOp {
    /// A Cancel for this session while this recovery holds it: taken while
    /// the recovered execution runs; ABORTED (retry) before and after.
    pub(crate) fn on_cancel_request(
        &mut self,
        cx: &mut Cx<'_>,
        request: RequestId,
        req: &CancelRequest,
        actor: Option<&IdentityRef>,
    ) -> Flow {
        debug_assert_eq!(
            req.session, self.session,
            "a Cancel is routed by the guard of its session"
        );
        if !matches!(self.stage, Stage::Running(_)) {
            let busy = format!(
                "cancel: session {:?} is recovering; retry",
                shown(&self.session)
            );
            cx.reply(request, Err(Status::aborted(busy)));
            return Flow::Continue;
        }
        let Stage::Running(mut run) = std::mem::replace(&mut self.stage, Stage::Over) else {
            unreachable!("matched above");
        };
        self.cancels.offer(cx, &mut run, request, req, actor);
        self.after_run(cx, run)
    }

    /// The canceled session is rendered: every Cancel call gets it.
    pub(super) fn on_canceled(
        &mut self,
        cx: &mut Cx<'_>,
        render: Render,
        id: EffectId,
        outcome: Outcome,
    ) -> Flow {
        match self.cancels.on_render(cx, render, id, outcome) {
            Some(render) => {
                self.stage = Stage::Canceled(render);
                Flow::Continue
            }
            None => Flow::Done,
        }
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
                assert!(f > 0, "fences start at 1");
                assert!(
                    !exec_id.is_empty(),
                    "a Cancel names an id-bearing execution"
                );
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
                self.fail(cx, e.status("mint fence"))
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
