//! Cancel of an execution no operation of this host is running: parked on
//! an approval, cut by a crash, or running on another host.
//!
//! Decided from the journal alone, under the session's guard: the latest
//! execution is the only one a Cancel can name. It gets LIFECYCLE{CANCEL}
//! and END{CANCELED} in one append under a freshly minted fence, so a host
//! still running it is fenced out and its next append fails; a parked
//! request is resolved by the END (Approve then refuses it). A Cancel cut
//! between the two records (a torn write) is finished by writing the END
//! alone; a Cancel of an already canceled execution writes nothing and
//! answers the session again. A live turn of this host takes its Cancel
//! itself (`ExecOp::on_cancel_request`).

use agentsessions_proto::v1::{CancelRequest, IdentityRef, LogRecord, lifecycle};

use crate::events;
use crate::journal::executions;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::load::{Load, Loaded};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::routing::mapping;
use crate::vocab::shown;
use crate::vocab::{EffectId, Outcome, RequestId, Response, Status, StoreOutcome};

enum Stage {
    Load(Load),
    Fence(EffectId, i64, Vec<agentsessions_proto::v1::Event>),
    Append(EffectId),
    Final(Render),
    Over,
}

/// One Cancel call. See the module docs.
pub(crate) struct CancelOp {
    request: RequestId,
    req: CancelRequest,
    stage: Stage,
    /// The verified caller, recorded on the CANCEL marker and the END.
    actor: Option<IdentityRef>,
}

impl CancelOp {
    pub(crate) fn new(request: RequestId, req: CancelRequest, actor: Option<IdentityRef>) -> Self {
        Self {
            actor,
            request,
            req,
            stage: Stage::Over,
        }
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = Stage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.req.session.is_empty() {
            return self.fail(cx, Status::invalid_argument("session is required"));
        }
        self.stage = Stage::Load(Load::start_guarded(cx, &self.req.session));
        Flow::Continue
    }

    /// What the journal says to write (`None`: nothing, reply at once).
    fn decide(
        &self,
        log: &[LogRecord],
    ) -> Result<Option<Vec<agentsessions_proto::v1::Event>>, Status> {
        let projection = executions::project(log)
            .map_err(|e| Status::failed_precondition(format!("cancel: {e}")))?;
        let Some(last) = projection.executions.last() else {
            return Err(Status::failed_precondition(
                "cancel: the session has no execution in flight",
            ));
        };
        let named = &self.req.execution_id;
        if !named.is_empty() && *named != last.id {
            let known = projection.executions.iter().any(|e| e.id == *named);
            let msg = if known {
                format!(
                    "cancel: execution {:?} is not the session's current one",
                    shown(named)
                )
            } else {
                format!("cancel: the session has no execution {:?}", shown(named))
            };
            return Err(Status::failed_precondition(msg));
        }
        let actor = self.actor.as_ref();
        let end = events::by(events::end_canceled(&last.id), actor);
        let short = matches!(
            executions::validate_inputs(last),
            Err(crate::error::LogError::IncompleteInvocation(_))
        );
        match (last.completed, last.canceled) {
            (true, true) => Ok(None),
            (true, false) => Err(Status::failed_precondition(format!(
                "cancel: execution {:?} already ended",
                shown(&last.id)
            ))),
            // A turn cut before all its inputs were durable never reached
            // a harness and can never be resumed (the remedy is a new
            // Exec): nothing is in flight, and an END over it would leave
            // a completed execution short of its declared inputs. One a
            // torn Cancel already marked needs nothing more either.
            (false, true) if short => Ok(None),
            (false, true) => Ok(Some(vec![end])),
            (false, false) if short => Err(Status::failed_precondition(format!(
                "cancel: execution {:?} never started (a crash cut its inputs); nothing is in flight",
                shown(&last.id)
            ))),
            (false, false) => {
                let marker = events::lifecycle(lifecycle::Kind::LifecycleCancel, &self.req.reason);
                let marker = events::by(marker, actor);
                Ok(Some(vec![marker, end]))
            }
        }
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match (std::mem::replace(&mut self.stage, Stage::Over), outcome) {
            (Stage::Load(load), outcome) => match load.on_outcome(cx, id, outcome) {
                Loaded::Pending(load) => {
                    self.stage = Stage::Load(load);
                    Flow::Continue
                }
                Loaded::Ready(_, log) => match self.decide(&log.to_vec()) {
                    Err(status) => self.fail(cx, status),
                    Ok(None) => self.reply_session(cx),
                    Ok(Some(events)) => {
                        debug_assert!(
                            events.last().is_some_and(crate::events::is_canceled_end),
                            "a cancel ends with END{{CANCELED}}"
                        );
                        let head = log.last().map_or(0, |r| r.seq);
                        let fence = cx.mint_fence_forced(&self.req.session);
                        self.stage = Stage::Fence(fence, head, events);
                        Flow::Continue
                    }
                },
                Loaded::NotFound(status) | Loaded::Busy(status) => self.fail(cx, status),
                Loaded::Failed(status) => {
                    self.fail(cx, Status::internal(format!("cancel: {}", status.message)))
                }
            },
            (Stage::Fence(want, head, events), Outcome::Store(StoreOutcome::Fence(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(fence) => {
                        assert!(fence > 0, "fences start at 1");
                        let append = cx.append_last(&self.req.session, head, fence, events);
                        self.stage = Stage::Append(append);
                        Flow::Continue
                    }
                    Err(e) => self.fail(cx, e.status("cancel: fence")),
                }
            }
            (Stage::Append(want), Outcome::Store(StoreOutcome::Appended(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(records) => {
                        assert!(!records.is_empty(), "a cancel appends its records");
                        cx.signal_awaiting(&self.req.session, false);
                        self.reply_session(cx)
                    }
                    Err(e) => self.fail(cx, mapping::append(&e, "cancel")),
                }
            }
            (Stage::Final(mut render), outcome) => match render.on_outcome(cx, id, outcome) {
                Rendered::Pending => {
                    self.stage = Stage::Final(render);
                    Flow::Continue
                }
                Rendered::Done(s) => {
                    cx.reply(self.request, Ok(Response::Session(*s)));
                    Flow::Done
                }
                Rendered::NotFound => self.fail(cx, Status::internal("session vanished")),
                Rendered::Failed(status) => self.fail(cx, status),
            },
            (Stage::Over, _) => unreachable!("input for a finished operation"),
            (_, other) => unexpected("cancel", &other),
        }
    }

    fn reply_session(&mut self, cx: &mut Cx<'_>) -> Flow {
        self.stage = Stage::Final(Render::start(cx, &self.req.session));
        Flow::Continue
    }
}
