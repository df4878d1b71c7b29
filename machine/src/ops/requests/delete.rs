//! DeleteSession and retention: removing a session for good.
//!
//! Invariant: a deletion never takes work with it. It is decided from the
//! journal under the session's guard, and refused while the latest
//! execution could still run (running, parked on an approval, or cut by a
//! crash and waiting for Resume): the caller cancels first. The store then
//! deletes with a CAS on the head the decision was read at, so a record
//! written in between (by another host) aborts the deletion instead of
//! vanishing with it. Records, row and tombstone go in one transaction; the
//! tombstone makes the store refuse the uid from then on, so a zombie
//! writer cannot bring the session back. Fork children are untouched: the
//! store keeps the records of the prefix they refer to until the last of
//! them is deleted.

use std::collections::BTreeMap;

use agentsessions_proto::v1::{LogRecord, Session};

use crate::journal::executions;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::load::{Load, Loaded};
use crate::ops::stages::render;
use crate::vocab::config::{RETENTION_PARALLEL, RETENTION_SCAN};
use crate::vocab::shown;
use crate::vocab::{
    Code, DeleteRefusal, Effect, EffectId, Nanos, Outcome, RequestId, Response, RetentionReport,
    SessionRow, Status, StoreEffect, StoreOutcome,
};

/// Whether the journal has an execution that could still run.
fn in_flight(log: &[LogRecord]) -> Option<String> {
    // A journal that does not project cannot be resumed either; it must
    // still be deletable (erasure matters most for data nobody can use).
    let projection = executions::project(log).ok()?;
    match executions::select_pending(log, &projection) {
        Ok(Some(e)) if !e.canceled => Some(e.id),
        _ => None,
    }
}

enum Stage {
    Load(Load),
    Delete(EffectId, Box<Session>),
    Over,
}

/// Deleting one session; reusable by an operation that deletes several,
/// one at a time. The guard is taken by the load and given back at the end.
pub(crate) struct Deletion {
    uid: String,
    /// Retention: delete only if still last written before this.
    stale_before: Option<Nanos>,
    /// Who deletes, for the tombstone.
    principal: String,
    stage: Stage,
}

/// What a [`Deletion`] step produced.
pub(crate) enum Deleted {
    Pending(Deletion),
    /// Gone: the uid, the session as it was, and how many records it held.
    Done(String, Box<Session>, i64),
    /// Refused, with the caller's status; nothing was written.
    Refused(Status),
}

impl Deletion {
    pub(crate) fn start(
        cx: &mut Cx<'_>,
        uid: &str,
        stale_before: Option<Nanos>,
        principal: &str,
    ) -> Self {
        assert!(!uid.is_empty(), "the caller checks the uid");
        Self {
            uid: uid.to_owned(),
            stale_before,
            principal: principal.to_owned(),
            stage: Stage::Load(Load::start_guarded(cx, uid)),
        }
    }

    /// The effect this deletion waits for.
    fn waits_on(&self) -> EffectId {
        match &self.stage {
            Stage::Load(load) => load.waits_on(),
            Stage::Delete(id, _) => *id,
            Stage::Over => unreachable!("a finished deletion waits for nothing"),
        }
    }

    fn decide(
        uid: &str,
        stale_before: Option<Nanos>,
        row: &SessionRow,
        log: &[LogRecord],
    ) -> Result<(), Status> {
        if let Some(execution) = in_flight(log) {
            return Err(Status::failed_precondition(format!(
                "delete: session {:?} has execution {:?} in flight; cancel it first",
                shown(uid),
                shown(&execution)
            )));
        }
        if let Some(before) = stale_before
            && row.updated_at >= before
        {
            return Err(Status::failed_precondition(format!(
                "delete: session {:?} was written since the retention scan",
                shown(uid)
            )));
        }
        Ok(())
    }

    pub(crate) fn on_outcome(mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Deleted {
        let stage = std::mem::replace(&mut self.stage, Stage::Over);
        match (stage, outcome) {
            (Stage::Over, _) => unreachable!("input for a finished deletion"),
            (Stage::Load(load), outcome) => match load.on_outcome(cx, id, outcome) {
                Loaded::Pending(load) => {
                    self.stage = Stage::Load(load);
                    Deleted::Pending(self)
                }
                Loaded::Ready(row, journal) => {
                    let log = journal.to_vec();
                    if let Err(status) = Self::decide(&self.uid, self.stale_before, &row, &log) {
                        cx.unguard(&self.uid);
                        return Deleted::Refused(status);
                    }
                    let session = match render::session(&row, &log) {
                        Ok(s) => s,
                        // The reply is a courtesy; the deletion is what
                        // was asked for.
                        Err(_) => render::fresh_session(&row),
                    };
                    let head = log.last().map_or(0, |r| r.seq);
                    assert_eq!(head, log.len() as i64, "a loaded journal counts from 1");
                    let delete = cx.delete_session(&self.uid, head, &self.principal);
                    self.stage = Stage::Delete(delete, Box::new(session));
                    Deleted::Pending(self)
                }
                Loaded::NotFound(status) => Deleted::Refused(status),
                // Someone is working on it: an Exec, a Resume, a Fork…
                Loaded::Busy(_) => Deleted::Refused(Status::failed_precondition(format!(
                    "delete: session {:?} has a call in flight; cancel it or retry",
                    shown(&self.uid)
                ))),
                Loaded::Failed(status) => {
                    cx.unguard(&self.uid);
                    Deleted::Refused(status)
                }
            },
            (Stage::Delete(want, session), Outcome::Store(StoreOutcome::Deleted(r))) => {
                assert_eq!(want, id, "a deletion waits for its own delete");
                cx.unguard(&self.uid);
                match r {
                    Ok(records) => {
                        assert!(records >= 0, "a record count");
                        cx.emit(Effect::ForgetTools {
                            session: self.uid.clone(),
                        });
                        cx.signal_awaiting(&self.uid, false);
                        Deleted::Done(self.uid, session, records)
                    }
                    Err(DeleteRefusal::Conflict { head }) => Deleted::Refused(Status::aborted(
                        format!("delete: session moved (journal head is {head}); retry"),
                    )),
                    Err(DeleteRefusal::NotFound) => Deleted::Refused(Status::not_found(format!(
                        "session {:?} not found",
                        shown(&self.uid)
                    ))),
                    Err(DeleteRefusal::Failed(f)) => Deleted::Refused(f.status("delete")),
                }
            }
            (Stage::Delete(..), other) => unexpected("delete", &other),
        }
    }
}

/// One DeleteSession call.
pub(crate) struct DeleteOp {
    request: RequestId,
    uid: String,
    /// The verified caller's name ("" when auth is off).
    principal: String,
    deletion: Option<Deletion>,
}

impl DeleteOp {
    pub(crate) fn new(request: RequestId, uid: String, principal: String) -> Self {
        Self {
            request,
            uid,
            principal,
            deletion: None,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.uid.is_empty() {
            cx.reply(
                self.request,
                Err(Status::invalid_argument("uid is required")),
            );
            return Flow::Done;
        }
        self.deletion = Some(Deletion::start(cx, &self.uid, None, &self.principal));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        let deletion = self.deletion.take().expect("a running delete");
        match deletion.on_outcome(cx, id, outcome) {
            Deleted::Pending(d) => {
                self.deletion = Some(d);
                Flow::Continue
            }
            Deleted::Done(_, session, _) => {
                cx.reply(self.request, Ok(Response::Session(*session)));
                Flow::Done
            }
            Deleted::Refused(status) => {
                cx.reply(self.request, Err(status));
                Flow::Done
            }
        }
    }
}

/// One retention step: a bounded scan, then the stale sessions it found
/// deleted a few side by side (at most [`RETENTION_PARALLEL`], each under
/// its own guard): enough that their small transactions share group
/// commits instead of paying an fsync each, few enough that an append
/// queued behind them waits for a small batch only.
pub(crate) struct RetainOp {
    request: RequestId,
    after: String,
    report: RetentionReport,
    scan: Option<EffectId>,
    before: Nanos,
    /// Deletions in flight, by the effect each waits for.
    deleting: BTreeMap<EffectId, Deletion>,
    /// Stale uids not started yet, last first.
    queued: Vec<String>,
}

impl RetainOp {
    pub(crate) fn new(request: RequestId, after: String) -> Self {
        Self {
            request,
            after,
            report: RetentionReport::default(),
            scan: None,
            before: 0,
            deleting: BTreeMap::new(),
            queued: Vec::new(),
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        let Some(retain) = cx.config().retain_completed else {
            let status = Status::failed_precondition("retention is off on this host");
            cx.reply(self.request, Err(status));
            return Flow::Done;
        };
        assert!(retain > 0, "a retention period is positive");
        self.before = cx.now().saturating_sub(retain);
        let (after, before) = (self.after.clone(), self.before);
        self.scan = Some(cx.request(|id| {
            Effect::Store(StoreEffect::StaleSessions {
                id,
                after,
                before,
                scan: RETENTION_SCAN,
            })
        }));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        if self.scan == Some(id) {
            self.scan = None;
            let Outcome::Store(StoreOutcome::Stale(r)) = outcome else {
                unexpected("retain", &outcome)
            };
            match r {
                Ok((mut stale, next)) => {
                    assert!(stale.len() <= RETENTION_SCAN, "a bounded step");
                    self.report.next = next;
                    stale.reverse();
                    self.queued = stale;
                }
                Err(e) => {
                    cx.reply(self.request, Err(e.status("retain")));
                    return Flow::Done;
                }
            }
        } else {
            let deletion = self.deleting.remove(&id).expect("an outcome of a deletion");
            match deletion.on_outcome(cx, id, outcome) {
                Deleted::Pending(d) => {
                    let waits = d.waits_on();
                    assert!(self.deleting.insert(waits, d).is_none());
                }
                Deleted::Done(uid, _, records) => self.report.deleted.push((uid, records)),
                // Gone already, busy, in flight, written again: kept for a
                // later pass (a storage failure too: the next pass retries).
                Deleted::Refused(status) => {
                    if status.code != Code::NotFound {
                        self.report.kept += 1;
                    }
                }
            }
        }
        while self.deleting.len() < RETENTION_PARALLEL
            && let Some(uid) = self.queued.pop()
        {
            let deletion = Deletion::start(cx, &uid, Some(self.before), "");
            let waits = deletion.waits_on();
            assert!(self.deleting.insert(waits, deletion).is_none());
        }
        assert!(self.deleting.len() <= RETENTION_PARALLEL, "a bounded step");
        if self.scan.is_none() && self.deleting.is_empty() {
            let mut report = std::mem::take(&mut self.report);
            report.deleted.sort();
            cx.reply(self.request, Ok(Response::Retained(report)));
            return Flow::Done;
        }
        Flow::Continue
    }
}
