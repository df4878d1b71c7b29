//! Boot: what a host does once, before it serves. It reserves the static
//! and configured names in the store, then loads every stored registration
//! (retired ones included: sessions on them keep running), a page at a
//! time, through the registry rules.
//!
//! A reservation that collides (a static or reserved name that already has
//! a registration row) fails the boot: serving a static harness under a
//! name another host registered would mix two harnesses in one name's
//! sessions. A row this host cannot serve is isolated and reported, never
//! fatal. The daemon and the test world both boot through this operation.

use super::registry::rules::load_registrations;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::vocab::{
    BootReport, Effect, EffectId, Outcome, PutError, RegistryRefusal, RequestId, Response, Status,
    StoreEffect, StoreOutcome,
};

/// Registration rows read per page.
pub(crate) const BOOT_PAGE: usize = 500;

enum Stage {
    Reserving(EffectId),
    Loading(EffectId),
}

pub(crate) struct BootOp {
    request: RequestId,
    stage: Option<Stage>,
    report: BootReport,
}

impl BootOp {
    pub(crate) fn new(request: RequestId) -> Self {
        Self {
            request,
            stage: None,
            report: BootReport::default(),
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.stage.is_none(), "a boot starts once");
        let names = cx.core.reserved_names();
        let now = cx.now();
        let id =
            cx.request(|id| Effect::Store(StoreEffect::ReserveHarnessNames { id, names, now }));
        self.stage = Some(Stage::Reserving(id));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match (self.stage.take(), outcome) {
            (Some(Stage::Reserving(want)), Outcome::Store(StoreOutcome::Reserved(r))) => {
                assert_eq!(want, id, "one effect in flight");
                match r {
                    Ok(()) => self.page(cx, String::new()),
                    Err(PutError::Refused(RegistryRefusal::NameCollision)) => self.fail(
                        cx,
                        Status::failed_precondition(
                            "a static or reserved harness name already has a registration \
                             row in this journal: rename the static harness or use another \
                             journal",
                        ),
                    ),
                    Err(e) => self.fail(
                        cx,
                        Status::unavailable(format!("reserving harness names: {e:?}")),
                    ),
                }
            }
            (Some(Stage::Loading(want)), Outcome::Store(StoreOutcome::HarnessRows(r))) => {
                assert_eq!(want, id, "one effect in flight");
                let rows = match r {
                    Ok(rows) => rows,
                    Err(e) => {
                        let status = Status::unavailable(format!("reading registrations: {e}"));
                        return self.fail(cx, status);
                    }
                };
                assert!(rows.len() <= BOOT_PAGE, "the store honours the page limit");
                self.report.loaded += rows.len();
                let last = rows.last().map(|r| r.name.clone());
                self.report
                    .isolated
                    .extend(load_registrations(cx.core, &rows));
                match last {
                    Some(after) if rows.len() == BOOT_PAGE => self.page(cx, after),
                    _ => {
                        let report = std::mem::take(&mut self.report);
                        cx.reply(self.request, Ok(Response::Booted(report)));
                        Flow::Done
                    }
                }
            }
            (_, other) => unexpected("boot", &other),
        }
    }

    fn page(&mut self, cx: &mut Cx<'_>, after: String) -> Flow {
        assert!(self.stage.is_none(), "one page in flight");
        let id = cx.request(|id| {
            Effect::Store(StoreEffect::ListHarnessRows {
                id,
                after,
                limit: BOOT_PAGE,
                include_retired: true,
            })
        });
        self.stage = Some(Stage::Loading(id));
        Flow::Continue
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        cx.reply(self.request, Err(status));
        Flow::Done
    }
}
