//! RetireHarness: stop a registration from taking new sessions.
//!
//! Retiring only flips the stored state; the route stays, because sessions
//! already on the harness keep running. New sessions are refused by the
//! store's registry check inside the session insert (`HarnessCheck`), in the
//! same transaction, so a create can never land after a retire returned.

use agentsessions_proto::v1::RetireHarnessRequest;

use super::registration;
use crate::ops::requests::registry::rules::MAX_RETIRE_REASON_BYTES;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::vocab::shown;
use crate::vocab::{
    Effect, EffectId, Outcome, PutError, RegistryRefusal, RequestId, Response, Status, StoreEffect,
    StoreOutcome,
};

pub(crate) struct RetireOp {
    request: RequestId,
    req: RetireHarnessRequest,
    write: Option<EffectId>,
}

impl RetireOp {
    pub(crate) fn new(request: RequestId, req: RetireHarnessRequest) -> Self {
        Self {
            request,
            req,
            write: None,
        }
    }

    fn check(&self, cx: &Cx<'_>) -> Result<(), Status> {
        let name = &self.req.name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name is required"));
        }
        if cx.core.is_static(name) {
            return Err(Status::failed_precondition(format!(
                "harness {:?} is static on this host; only registered harnesses can be retired",
                shown(name)
            )));
        }
        if self.req.reason.len() > MAX_RETIRE_REASON_BYTES {
            return Err(Status::invalid_argument(format!(
                "reason is {} bytes, over the {MAX_RETIRE_REASON_BYTES}-byte limit",
                self.req.reason.len()
            )));
        }
        Ok(())
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if let Err(status) = self.check(cx) {
            cx.reply(self.request, Err(status));
            return Flow::Done;
        }
        debug_assert!(
            !self.req.name.is_empty() && self.req.reason.len() <= MAX_RETIRE_REASON_BYTES,
            "checked above"
        );
        let (name, reason, now) = (self.req.name.clone(), self.req.reason.clone(), cx.now());
        self.write = Some(cx.request(|id| {
            Effect::Store(StoreEffect::RetireHarnessRow {
                id,
                name,
                reason,
                now,
            })
        }));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        if self.write != Some(id) {
            unexpected("retire harness", &outcome)
        }
        self.write = None;
        let Outcome::Store(StoreOutcome::Retired(result)) = outcome else {
            unexpected("retire harness", &outcome)
        };
        let name = &self.req.name;
        let reply = match result {
            Ok(row) => Ok(Response::Harness(registration(cx, &row))),
            Err(PutError::Refused(RegistryRefusal::NotFound)) => Err(Status::not_found(format!(
                "harness {:?} is not registered",
                shown(name)
            ))),
            Err(PutError::Refused(other)) => Err(Status::internal(format!(
                "retire harness {:?}: {other:?}",
                shown(name)
            ))),
            Err(PutError::Failed(f)) => {
                Err(f.status(format_args!("retire harness {:?}", shown(name))))
            }
        };
        cx.reply(self.request, reply);
        Flow::Done
    }
}
