//! GetHarness: one registration, optionally observed with a live Describe.
//!
//! Observation is best effort: a Describe failure lands in `observe_error`
//! and the call still succeeds, because an operator asking "what is
//! registered" must get an answer while the harness is down. Entries this
//! host cannot serve are never described (there is nothing safe to dial).

use agentsessions_proto::v1::{GetHarnessRequest, HarnessRegistration};

use super::{describe_failure, registration, static_registration};
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::vocab::shown;
use crate::vocab::{
    Effect, EffectId, HarnessEffect, HarnessOutcome, Outcome, RequestId, Response, Status,
    StoreEffect, StoreOutcome,
};

enum Stage {
    Idle,
    Row(EffectId),
    Describe(EffectId, Box<HarnessRegistration>),
}

pub(crate) struct GetOp {
    request: RequestId,
    req: GetHarnessRequest,
    stage: Stage,
}

impl GetOp {
    pub(crate) fn new(request: RequestId, req: GetHarnessRequest) -> Self {
        Self {
            request,
            req,
            stage: Stage::Idle,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        let name = self.req.name.clone();
        if name.is_empty() {
            cx.reply(
                self.request,
                Err(Status::invalid_argument("name is required")),
            );
            return Flow::Done;
        }
        if cx.core.is_static(&name) {
            return self.observe_or_reply(cx, static_registration(&name));
        }
        self.stage =
            Stage::Row(cx.request(|id| Effect::Store(StoreEffect::GetHarnessRow { id, name })));
        Flow::Continue
    }

    /// Replies with `reg`, after a Describe when the caller asked for one
    /// and the entry is servable here.
    fn observe_or_reply(&mut self, cx: &mut Cx<'_>, mut reg: HarnessRegistration) -> Flow {
        if self.req.observe {
            if !reg.unservable_reason.is_empty() {
                reg.observe_error = format!(
                    "harness {:?} is not served by this host: {}",
                    shown(&self.req.name),
                    reg.unservable_reason
                );
            } else if let Some(route) = cx.route(&self.req.name) {
                let (harness, backend) = (self.req.name.clone(), route.backend.clone());
                let timeout_ms = cx.config().describe_timeout_ms;
                let id = cx.request(|id| {
                    Effect::Harness(HarnessEffect::Describe {
                        id,
                        harness,
                        backend,
                        conn: None,
                        timeout_ms,
                    })
                });
                self.stage = Stage::Describe(id, Box::new(reg));
                return Flow::Continue;
            }
        }
        cx.reply(self.request, Ok(Response::Harness(reg)));
        Flow::Done
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Idle) {
            Stage::Row(want) if want == id => match outcome {
                Outcome::Store(StoreOutcome::HarnessRow(Ok(Some(row)))) => {
                    let reg = registration(cx, &row);
                    self.observe_or_reply(cx, reg)
                }
                Outcome::Store(StoreOutcome::HarnessRow(Ok(None))) => {
                    let msg = format!("harness {:?} not found", shown(&self.req.name));
                    cx.reply(self.request, Err(Status::not_found(msg)));
                    Flow::Done
                }
                Outcome::Store(StoreOutcome::HarnessRow(Err(e))) => {
                    let status = e.status(format_args!("harness {:?}", shown(&self.req.name)));
                    cx.reply(self.request, Err(status));
                    Flow::Done
                }
                other => unexpected("get harness", &other),
            },
            Stage::Describe(want, mut reg) if want == id => {
                let Outcome::Harness(HarnessOutcome::Described(result)) = outcome else {
                    unexpected("get harness", &outcome)
                };
                match result {
                    Ok(descriptor) => reg.observed = Some(descriptor),
                    Err(e) => reg.observe_error = describe_failure(&e),
                }
                cx.reply(self.request, Ok(Response::Harness(*reg)));
                Flow::Done
            }
            _ => unexpected("get harness", &outcome),
        }
    }
}
