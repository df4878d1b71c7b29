//! RegisterHarness: validate, store the immutable row, route the name.
//!
//! Precedence, as callers see it: the name, then reservation, then the
//! spec, then an existing row with a different spec (ALREADY_EXISTS), and
//! only then whether this host can serve the placement. The last two need
//! the store only when the placement is unservable, so the common path is a
//! single atomic register write that itself refuses a conflicting spec.

use agentsessions_proto::v1::{RegisterHarnessRequest, RegisterHarnessResponse};

use super::registration;
use crate::ops::requests::registry::rules::{
    canonical_spec, route_for_spec, validate_name, validate_spec,
};
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::vocab::shown;
use crate::vocab::{
    Effect, EffectId, HarnessRow, Outcome, PutError, RegisterOutcome, RegistryRefusal, RequestId,
    Response, Route, Status, StoreEffect, StoreOutcome,
};

enum Stage {
    Idle,
    /// Reading the existing row to rank a spec conflict above an
    /// unservable placement; carries the servability refusal.
    Probe(EffectId, String, String),
    /// The register write; carries the route to add once it is stored,
    /// `None` when this host already knows the name (loaded, or isolated
    /// as unservable), so a repeat registration neither reloads nor
    /// replaces anything.
    Write(EffectId, Option<Route>),
}

pub(crate) struct RegisterOp {
    request: RequestId,
    req: RegisterHarnessRequest,
    stage: Stage,
}

fn outcome_proto(o: RegisterOutcome) -> agentsessions_proto::v1::RegisterOutcome {
    use agentsessions_proto::v1::RegisterOutcome as Wire;
    match o {
        RegisterOutcome::Created => Wire::Created,
        RegisterOutcome::Unchanged => Wire::Unchanged,
        RegisterOutcome::Reactivated => Wire::Reactivated,
    }
}

fn conflict(name: &str) -> Status {
    Status::already_exists(format!(
        "harness {:?} is registered with a different spec; registrations are immutable, use a new name",
        shown(name)
    ))
}

impl RegisterOp {
    pub(crate) fn new(request: RequestId, req: RegisterHarnessRequest) -> Self {
        Self {
            request,
            req,
            stage: Stage::Idle,
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>, reply: Result<Response, Status>) -> Flow {
        cx.reply(self.request, reply);
        Flow::Done
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        let name = self.req.name.clone();
        if let Err(status) = validate_name(&name) {
            return self.finish(cx, Err(status));
        }
        if cx.core.is_reserved(&name) {
            let status = Status::already_exists(format!(
                "harness name {:?} is reserved for a static harness",
                shown(&name)
            ));
            return self.finish(cx, Err(status));
        }
        let checked = validate_spec(self.req.spec.as_ref())
            .and_then(|spec| canonical_spec(spec).map(|c| (spec, c)));
        let (spec, canonical) = match checked {
            Ok(ok) => ok,
            Err(status) => return self.finish(cx, Err(status)),
        };
        let known = cx.route(&name).is_some() || cx.core.unservable.contains_key(&name);
        let route = if known {
            None
        } else {
            match route_for_spec(spec) {
                Ok(route) => Some(route),
                Err(reason) => {
                    let id =
                        cx.request(|id| Effect::Store(StoreEffect::GetHarnessRow { id, name }));
                    self.stage = Stage::Probe(id, canonical.digest, reason);
                    return Flow::Continue;
                }
            }
        };
        let now = cx.now();
        let row = HarnessRow {
            name,
            uid: cx.ids().harness_uid(),
            spec: canonical.text,
            spec_digest: canonical.digest,
            created_at: now,
            updated_at: now,
            ..HarnessRow::default()
        };
        let now = cx.now();
        let id = cx.request(|id| Effect::Store(StoreEffect::RegisterHarnessRow { id, row, now }));
        self.stage = Stage::Write(id, route);
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Idle) {
            Stage::Probe(want, digest, reason) if want == id => {
                let reply = match outcome {
                    Outcome::Store(StoreOutcome::HarnessRow(Ok(Some(row))))
                        if row.spec_digest != digest =>
                    {
                        Err(conflict(&self.req.name))
                    }
                    Outcome::Store(StoreOutcome::HarnessRow(Ok(_))) => {
                        Err(Status::failed_precondition(reason))
                    }
                    Outcome::Store(StoreOutcome::HarnessRow(Err(e))) => {
                        Err(e.status(format_args!("register harness {:?}", shown(&self.req.name))))
                    }
                    other => unexpected("register harness", &other),
                };
                self.finish(cx, reply)
            }
            Stage::Write(want, route) if want == id => {
                let Outcome::Store(StoreOutcome::Registered(result)) = outcome else {
                    unexpected("register harness", &outcome)
                };
                let reply = self.written(cx, result, route);
                self.finish(cx, reply)
            }
            _ => unexpected("register harness", &outcome),
        }
    }

    fn written(
        &self,
        cx: &mut Cx<'_>,
        result: Result<(HarnessRow, RegisterOutcome), PutError>,
        route: Option<Route>,
    ) -> Result<Response, Status> {
        let name = &self.req.name;
        match result {
            Ok((row, what)) => {
                if let Some(route) = route {
                    // False only when an identical registration raced this
                    // one and routed the name first; its route is the same.
                    cx.add_route(&row.name, route);
                }
                Ok(Response::Registered(RegisterHarnessResponse {
                    harness: Some(registration(cx, &row)),
                    outcome: outcome_proto(what) as i32,
                }))
            }
            Err(PutError::Refused(RegistryRefusal::Reserved)) => {
                Err(Status::already_exists(format!(
                    "harness name {:?} is reserved for a static harness",
                    shown(name)
                )))
            }
            Err(PutError::Refused(RegistryRefusal::SpecConflict)) => Err(conflict(name)),
            Err(PutError::Refused(other)) => Err(Status::internal(format!(
                "register harness {:?}: {other:?}",
                shown(name)
            ))),
            Err(PutError::Failed(f)) => {
                Err(f.status(format_args!("register harness {:?}", shown(name))))
            }
        }
    }
}
