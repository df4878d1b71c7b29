//! The memory-snapshot override rule.
//!
//! A session whose stored harness requires MEMORY_SNAPSHOT refuses a turn on
//! a STATELESS_REPLAY harness: an Exec override naming one, or the Resume of
//! a turn that recorded one. Parking or finishing only the override could
//! not checkpoint the stored harness's live memory. The rule is decided from
//! Describes alone, before any fence, journal write or runtime change.
//!
//! Only a stored harness whose route can snapshot memory is described: on
//! any other route the admission gate refuses a memory-snapshot harness, so
//! the rule cannot apply and the common path stays free of extra I/O.

use super::placement::{Placed, Placement, Provision, needs_memory};
use crate::host::{Cx, EffectId, Outcome, Route, Status};

enum Step {
    /// Describing the session's stored harness.
    Stored(Box<Placement>),
    /// The stored harness needs memory snapshots: describing the turn's.
    Turn(Box<Placement>),
}

/// The check in progress.
pub(crate) struct OverrideCheck {
    stored: String,
    turn: String,
    turn_route: Route,
    session: String,
    step: Step,
}

/// Where the check stands.
pub(crate) enum Checked {
    Pending,
    Allowed,
    Refused(Status),
}

impl OverrideCheck {
    /// Starts the check for a turn on `turn` in a session stored on
    /// `stored`; `None` when the rule cannot apply (same harness, or a
    /// stored route that cannot snapshot memory, or one this host lacks).
    pub(crate) fn start(
        cx: &mut Cx<'_>,
        session: &str,
        stored: &str,
        turn: &str,
        turn_route: &Route,
    ) -> Option<Self> {
        let stored = if stored.is_empty() {
            cx.config().default_harness.clone()
        } else {
            stored.to_owned()
        };
        if stored == turn {
            return None;
        }
        let stored_route = cx.route(&stored)?.clone();
        if !stored_route.backend.memory_snapshot() {
            return None;
        }
        let describe = Placement::start(
            cx,
            stored.clone(),
            stored_route,
            session,
            Provision::AdmitOnly,
            false,
        );
        Some(Self {
            stored,
            turn: turn.to_owned(),
            turn_route: turn_route.clone(),
            session: session.to_owned(),
            step: Step::Stored(Box::new(describe)),
        })
    }

    /// True when `id` is the Describe this check waits for.
    pub(crate) fn owns(&self, id: EffectId) -> bool {
        match &self.step {
            Step::Stored(p) | Step::Turn(p) => p.owns(id),
        }
    }

    /// Advances on the outcome of the Describe it waits for.
    pub(crate) fn on_outcome(
        &mut self,
        cx: &mut Cx<'_>,
        id: EffectId,
        outcome: Outcome,
    ) -> Checked {
        assert!(
            self.owns(id),
            "override check got an outcome it did not ask for"
        );
        let (stored_step, placement) = match &mut self.step {
            Step::Stored(p) => (true, p),
            Step::Turn(p) => (false, p),
        };
        match placement.on_outcome(cx, id, outcome) {
            Placed::Pending => Checked::Pending,
            // The rule cannot be decided without the stored harness: fail
            // closed with the Describe's own status.
            Placed::Failed(status) => Checked::Refused(status),
            Placed::Ready => {
                let d = placement
                    .descriptor
                    .as_ref()
                    .expect("admitted harness is described");
                assert!(placement.conn.is_none(), "admission opens no connection");
                if stored_step {
                    if !needs_memory(d) {
                        return Checked::Allowed;
                    }
                    let describe = Placement::start(
                        cx,
                        self.turn.clone(),
                        self.turn_route.clone(),
                        &self.session,
                        Provision::AdmitOnly,
                        false,
                    );
                    self.step = Step::Turn(Box::new(describe));
                    return Checked::Pending;
                }
                if needs_memory(d) {
                    Checked::Allowed
                } else {
                    Checked::Refused(Status::failed_precondition(format!(
                        "session harness {:?} requires MEMORY_SNAPSHOT; a turn on the STATELESS_REPLAY harness {:?} could not checkpoint its memory",
                        self.stored, self.turn
                    )))
                }
            }
        }
    }
}
