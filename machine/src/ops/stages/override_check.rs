//! The memory-snapshot override rule.
//!
//! A session whose stored harness requires MEMORY_SNAPSHOT refuses a turn on
//! a STATELESS_REPLAY harness: an Exec override naming one, or the Resume of
//! a turn that recorded one. Parking or finishing only the override could
//! not checkpoint the stored harness's live memory. The rule is decided from
//! Describes alone, before any fence, journal write or runtime change. It
//! fails closed: a stored harness that cannot be described refuses the
//! override with its Describe status.
//!
//! Only a stored harness whose route can snapshot memory is described:
//! remote routes serve STATELESS_REPLAY harnesses only, and on any other
//! route admission refuses a memory-snapshot harness, so the rule cannot
//! apply. Ordinary turns and static overrides keep their single Describe.

use super::placement::{describe_error, needs_memory};
use crate::ops::stages::cx::Cx;
use crate::vocab::shown;
use crate::vocab::{Effect, EffectId, HarnessEffect, HarnessOutcome, Outcome, Route, Status};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Describing the session's stored harness.
    Stored(EffectId),
    /// The stored harness needs memory snapshots: describing the turn's.
    Turn(EffectId),
}

/// The check in progress.
pub(crate) struct OverrideCheck {
    stored: String,
    turn: String,
    turn_route: Route,
    step: Step,
}

/// Where the check stands.
pub(crate) enum Checked {
    Pending,
    Allowed,
    Refused(Status),
}

fn describe(cx: &mut Cx<'_>, harness: &str, route: &Route) -> EffectId {
    let timeout_ms = cx.config().describe_timeout_ms;
    let (harness, backend) = (harness.to_owned(), route.backend.clone());
    cx.request(|id| {
        Effect::Harness(HarnessEffect::Describe {
            id,
            harness,
            backend,
            conn: None,
            timeout_ms,
        })
    })
}

impl OverrideCheck {
    /// Starts the check for a turn on `turn` in a session stored on
    /// `stored`; `None` when the rule cannot apply (the same harness, or a
    /// stored route that cannot snapshot memory, or none on this host).
    pub(crate) fn start(
        cx: &mut Cx<'_>,
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
        debug_assert!(cx.route(turn).is_some(), "the turn's harness was routed");
        let stored_route = cx.route(&stored)?.clone();
        if !stored_route.backend.memory_snapshot() {
            return None;
        }
        let id = describe(cx, &stored, &stored_route);
        Some(Self {
            stored,
            turn: turn.to_owned(),
            turn_route: turn_route.clone(),
            step: Step::Stored(id),
        })
    }

    /// True when `id` is the Describe this check waits for.
    pub(crate) fn owns(&self, id: EffectId) -> bool {
        matches!(self.step, Step::Stored(x) | Step::Turn(x) if x == id)
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
        let Outcome::Harness(HarnessOutcome::Described(result)) = outcome else {
            crate::ops::stages::flow::unexpected("override check", &outcome)
        };
        match self.step {
            Step::Stored(_) => match result {
                Err(e) => Checked::Refused(describe_error(&self.stored, &e)),
                Ok(d) if !needs_memory(&d) => Checked::Allowed,
                Ok(_) => {
                    debug_assert!(
                        cx.route(&self.stored)
                            .is_some_and(|r| r.backend.memory_snapshot()),
                        "routes are never removed, so the stored one still snapshots"
                    );
                    let (turn, route) = (self.turn.clone(), self.turn_route.clone());
                    self.step = Step::Turn(describe(cx, &turn, &route));
                    Checked::Pending
                }
            },
            Step::Turn(_) => match result {
                Err(e) => Checked::Refused(describe_error(&self.turn, &e)),
                Ok(d) if needs_memory(&d) => Checked::Allowed,
                Ok(_) => Checked::Refused(Status::failed_precondition(format!(
                    "session harness {:?} requires MEMORY_SNAPSHOT; a turn on the STATELESS_REPLAY harness {:?} could not checkpoint its memory",
                    shown(&self.stored),
                    shown(&self.turn)
                ))),
            },
        }
    }
}
