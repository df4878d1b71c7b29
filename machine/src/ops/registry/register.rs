//! RegisterHarness: validate, store the immutable row, route the name.

use agentsessions_proto::v1::{RegisterHarnessRequest, RegisterHarnessResponse};

use super::registration;
use crate::host::registry::{canonical_spec, route_for_spec, validate_name, validate_spec};
use crate::host::{
    Cx, Effect, EffectId, HarnessRow, Outcome, PutError, RegisterOutcome, RegistryRefusal,
    RequestId, Response, Route, Status,
};
use crate::ops::{Flow, unexpected};

pub(crate) struct RegisterOp {
    request: RequestId,
    req: RegisterHarnessRequest,
    /// The row write in flight.
    write: Option<EffectId>,
    /// The route to add once the row is stored; `None` when this host
    /// already knows the name (loaded, or isolated as unservable), so a
    /// repeat registration neither reloads nor replaces anything.
    route: Option<Route>,
}

fn outcome_proto(o: RegisterOutcome) -> agentsessions_proto::v1::RegisterOutcome {
    use agentsessions_proto::v1::RegisterOutcome as Wire;
    match o {
        RegisterOutcome::Created => Wire::Created,
        RegisterOutcome::Unchanged => Wire::Unchanged,
        RegisterOutcome::Reactivated => Wire::Reactivated,
    }
}

impl RegisterOp {
    pub(crate) fn new(request: RequestId, req: RegisterHarnessRequest) -> Self {
        Self {
            request,
            req,
            write: None,
            route: None,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        match self.prepare(cx) {
            Ok(row) => {
                self.write = Some(cx.request(|id| Effect::RegisterHarnessRow { id, row }));
                Flow::Continue
            }
            Err(status) => {
                cx.reply(self.request, Err(status));
                Flow::Done
            }
        }
    }

    /// Every check that needs no store, in the order callers see them: the
    /// name, then reservation, then the spec, then whether this host can
    /// serve it. Nothing is stored when any fails.
    fn prepare(&mut self, cx: &mut Cx<'_>) -> Result<HarnessRow, Status> {
        let name = self.req.name.clone();
        validate_name(&name)?;
        if cx.core.is_reserved(&name) {
            return Err(Status::already_exists(format!(
                "harness name {name:?} is reserved for a static harness"
            )));
        }
        let spec = validate_spec(self.req.spec.as_ref())?;
        let canonical = canonical_spec(spec)?;
        let known = cx.route(&name).is_some() || cx.core.unservable.contains_key(&name);
        if !known {
            self.route = Some(route_for_spec(spec).map_err(Status::failed_precondition)?);
        }
        let now = cx.now();
        Ok(HarnessRow {
            name,
            uid: cx.ids().harness_uid(),
            spec: canonical.text,
            spec_digest: canonical.digest,
            created_at: now,
            updated_at: now,
            ..HarnessRow::default()
        })
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        if self.write != Some(id) {
            unexpected("register harness", &outcome)
        }
        self.write = None;
        let Outcome::Registered(result) = outcome else {
            unexpected("register harness", &outcome)
        };
        let name = &self.req.name;
        let reply = match result {
            Ok((row, what)) => {
                if let Some(route) = self.route.take() {
                    // False only when an identical registration raced this
                    // one and routed the name first; its route is the same.
                    cx.add_route(&row.name, route);
                }
                Ok(Response::Registered(RegisterHarnessResponse {
                    harness: Some(registration(cx, &row)),
                    outcome: outcome_proto(what) as i32,
                }))
            }
            Err(PutError::Refused(RegistryRefusal::Reserved)) => Err(Status::already_exists(
                format!("harness name {name:?} is reserved for a static harness"),
            )),
            Err(PutError::Refused(RegistryRefusal::SpecConflict)) => {
                Err(Status::already_exists(format!(
                    "harness {name:?} is registered with a different spec; registrations are immutable, use a new name"
                )))
            }
            Err(PutError::Refused(other)) => Err(Status::internal(format!(
                "register harness {name:?}: {other:?}"
            ))),
            Err(PutError::Failed(m)) => {
                Err(Status::internal(format!("register harness {name:?}: {m}")))
            }
        };
        cx.reply(self.request, reply);
        Flow::Done
    }
}
