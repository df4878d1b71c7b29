//! Loading a session: its row, then its whole journal with its summary.
//! Most operations start here, because every decision is made from the
//! journal.

use crate::vocab::StoreOutcome;

use crate::journal::Journal;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::expiry;
use crate::ops::stages::flow::unexpected;
use crate::vocab::shown;
use crate::vocab::{Code, EffectId, Outcome, SessionRow, Status};

#[derive(Debug)]
enum Step {
    Row(EffectId),
    Log(EffectId, Box<SessionRow>),
}

/// A load in progress.
#[derive(Debug)]
pub(crate) struct Load {
    session: String,
    step: Step,
    guard_after_row: bool,
}

/// What a load step produced.
pub(crate) enum Loaded {
    Pending(Load),
    Ready(SessionRow, Journal),
    /// No such session: NOT_FOUND, with the reference's text.
    NotFound(Status),
    /// Another operation holds the session's guard: ABORTED.
    Busy(Status),
    Failed(Status),
}

impl Load {
    /// Starts by reading the row of `session`.
    pub(crate) fn start(cx: &mut Cx<'_>, session: &str) -> Self {
        assert!(!session.is_empty(), "the caller checks the session");
        Self {
            session: session.to_owned(),
            step: Step::Row(cx.get_session(session)),
            guard_after_row: false,
        }
    }

    /// Like [`Load::start`], but takes the session's overlap guard once the
    /// row exists and before the journal is read: an unknown session is
    /// NOT_FOUND, a busy one ABORTED, and the journal read is the guarded
    /// one.
    pub(crate) fn start_guarded(cx: &mut Cx<'_>, session: &str) -> Self {
        Self {
            guard_after_row: true,
            ..Self::start(cx, session)
        }
    }

    /// The effect this load waits for.
    pub(crate) fn waits_on(&self) -> EffectId {
        match &self.step {
            Step::Row(id) | Step::Log(id, _) => *id,
        }
    }

    /// Advances on the outcome of this load's effect.
    pub(crate) fn on_outcome(self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Loaded {
        match (self.step, outcome) {
            (Step::Row(want), Outcome::Store(StoreOutcome::Session(r))) => {
                assert_eq!(want, id, "a load waits for its own read");
                match r {
                    Ok(Some(row)) => {
                        if self.guard_after_row && !cx.try_guard(&self.session) {
                            return Loaded::Busy(Status::aborted(format!(
                                "session {:?} is busy",
                                shown(&self.session)
                            )));
                        }
                        debug_assert!(
                            !self.guard_after_row
                                || cx.core.guards().get(&self.session) == Some(&cx.op),
                            "a guarded load reads the journal under the guard"
                        );
                        let read = cx.read_journal(&self.session);
                        Loaded::Pending(Self {
                            step: Step::Log(read, Box::new(row)),
                            session: self.session,
                            guard_after_row: self.guard_after_row,
                        })
                    }
                    Ok(None) => Loaded::NotFound(Status::not_found(format!(
                        "session {:?} not found",
                        shown(&self.session)
                    ))),
                    Err(e) => {
                        Loaded::Failed(e.status(format_args!("session {:?}", shown(&self.session))))
                    }
                }
            }
            (Step::Log(want, row), Outcome::Store(StoreOutcome::Journal(r))) => {
                assert_eq!(want, id, "a load waits for its own read");
                match r {
                    // The store hands back a chain; one that is not (a gap, a
                    // broken link) is refused before anything is decided on it.
                    Ok(journal) => match journal.broken() {
                        None => {
                            let core = &mut *cx.core;
                            let clock = (&core.config.tools, core.now);
                            expiry::observe(&mut core.expiries, clock, &self.session, &journal);
                            Loaded::Ready(*row, journal)
                        }
                        Some(e) => Loaded::Failed(Status::new(
                            Code::DataLoss,
                            format!(
                                "session {:?}: the journal read back is not a chain: {e}",
                                shown(&self.session)
                            ),
                        )),
                    },
                    Err(e) => Loaded::Failed(
                        e.status(format_args!("session {:?}: read", shown(&self.session))),
                    ),
                }
            }
            (_, other) => unexpected("load", &other),
        }
    }
}
