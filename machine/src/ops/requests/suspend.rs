//! Suspend: take the session cold and record where its state went.
//!
//! Snapshot(EXTERNAL) owns the cold transition; then a fresh fence, the
//! current head, and LIFECYCLE{SUSPEND} carrying the snapshot. A session
//! parked on an unreceipted approval is routed to the harness its turn
//! recorded, with no fallback.

use agentsessions_proto::v1::{IdentityRef, LogRecord, SnapshotRef};

use crate::events;
use crate::journal::approval;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::load::{Load, Loaded};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::routing::{check_resumed, mapping, resolve, resolve_recorded};
use crate::ops::stages::run::suspend_event;
use crate::vocab::shown;
use crate::vocab::{
    Effect, EffectId, Outcome, RequestId, Response, RuntimeCall, RuntimeOp, RuntimeReply, Status,
    StoreOutcome,
};

enum Stage {
    Load(Load),
    Snapshot(EffectId),
    Fence(EffectId, SnapshotRef),
    Head(EffectId, SnapshotRef, i64),
    Append(EffectId),
    Final(Render),
    Over,
}

pub(crate) struct SuspendOp {
    request: RequestId,
    session: String,
    stored: String,
    stage: Stage,
    /// The verified caller, recorded on the SUSPEND marker.
    actor: Option<IdentityRef>,
}

impl SuspendOp {
    pub(crate) fn new(request: RequestId, session: String, actor: Option<IdentityRef>) -> Self {
        Self {
            actor,
            request,
            session,
            stored: String::new(),
            stage: Stage::Over,
        }
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = Stage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.session.is_empty() {
            return self.fail(cx, Status::invalid_argument("session is required"));
        }
        if !cx.try_guard(&self.session) {
            let msg = format!("session {:?} is busy", shown(&self.session));
            return self.fail(cx, Status::aborted(msg));
        }
        self.stage = Stage::Load(Load::start(cx, &self.session));
        Flow::Continue
    }

    fn route(&mut self, cx: &mut Cx<'_>, log: &[LogRecord]) -> Flow {
        let scan = match approval::scan(log, 0) {
            Ok(s) => s,
            Err(e) => {
                return self.fail(cx, Status::failed_precondition(format!("suspend: {e}")));
            }
        };
        let recorded = scan
            .selected()
            .filter(|s| !s.has_receipt())
            .and_then(|s| s.invocation.as_ref())
            .map(|m| m.harness.clone())
            .filter(|h| !h.is_empty());
        let routed = match &recorded {
            Some(name) => resolve_recorded(cx, name),
            None => resolve(cx, &self.stored),
        };
        let (harness, route) = match routed {
            Ok(r) => r,
            Err(status) => return self.fail(cx, status),
        };
        if let Err(status) = check_resumed(cx, &self.session, &self.stored, &harness) {
            return self.fail(cx, status);
        }
        let session = self.session.clone();
        self.stage = Stage::Snapshot(cx.request(|id| {
            Effect::Runtime(RuntimeCall {
                id,
                harness,
                backend: route.backend,
                op: RuntimeOp::Snapshot { session },
            })
        }));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match (std::mem::replace(&mut self.stage, Stage::Over), outcome) {
            (Stage::Load(load), outcome) => match load.on_outcome(cx, id, outcome) {
                Loaded::Pending(load) => {
                    self.stage = Stage::Load(load);
                    Flow::Continue
                }
                Loaded::Ready(row, log) => {
                    self.stored = row.harness;
                    self.route(cx, &log.to_vec())
                }
                Loaded::NotFound(status) | Loaded::Busy(status) => self.fail(cx, status),
                Loaded::Failed(status) => {
                    self.fail(cx, Status::internal(format!("suspend: {}", status.message)))
                }
            },
            (Stage::Snapshot(want), Outcome::Runtime(r)) => {
                assert_eq!(want, id);
                match r {
                    Ok(RuntimeReply::Snapshot(snapshot)) => {
                        self.stage = Stage::Fence(cx.mint_fence(&self.session), snapshot);
                        Flow::Continue
                    }
                    Ok(other) => self.fail(
                        cx,
                        Status::internal(format!("suspend: runtime returned {other:?}")),
                    ),
                    Err(e) => self.fail(cx, Status::internal(format!("suspend: {e}"))),
                }
            }
            (Stage::Fence(want, snapshot), Outcome::Store(StoreOutcome::Fence(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(fence) => {
                        assert!(fence > 0, "fences start at 1");
                        // Read the head after the fence: anything appended
                        // before it is accepted; anything after is fenced.
                        self.stage = Stage::Head(cx.get_session(&self.session), snapshot, fence);
                        Flow::Continue
                    }
                    Err(e) => self.fail(cx, e.status("suspend: mint fence")),
                }
            }
            (Stage::Head(want, snapshot, fence), Outcome::Store(StoreOutcome::Session(r))) => {
                assert_eq!(want, id);
                let head = match r {
                    Ok(Some(row)) => row.last_seq,
                    Ok(None) => 0,
                    Err(e) => {
                        return self.fail(cx, e.status("suspend: head"));
                    }
                };
                let event = events::by(suspend_event(&snapshot), self.actor.as_ref());
                let append = cx.append_last(&self.session, head, fence, vec![event]);
                self.stage = Stage::Append(append);
                Flow::Continue
            }
            (Stage::Append(want), Outcome::Store(StoreOutcome::Appended(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(_) => {
                        self.stage = Stage::Final(Render::start(cx, &self.session));
                        Flow::Continue
                    }
                    Err(e) => self.fail(cx, mapping::append(&e, "suspend")),
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
            (_, other) => unexpected("suspend", &other),
        }
    }
}
