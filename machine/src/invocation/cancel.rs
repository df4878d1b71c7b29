//! Cancel: a client ends a live run, durable first.
//!
//! LIFECYCLE{CANCEL, detail: reason} and END{CANCELED} are appended in one
//! batch at the head the run knows, under its fence; only once they are
//! durable does the harness connection close. An outstanding model call is
//! abandoned (the caller drops its answer). An outstanding append or tool
//! call completes first and its record is kept, but nothing the harness
//! asked for after it runs. A tool call is told of the Cancel
//! ([`Action::InterruptTool`], advisory): its executor may stop it and
//! answer an error receipt sooner, which is recorded like any other, so the
//! journal still says what the call came to. A turn whose END committed
//! before the Cancel took effect stays completed.

use agentsessions_proto::v1::{IdentityRef, lifecycle};

use super::{Action, AfterAppend, Invocation, Mode, Wait};
use crate::events;

/// Why a run would not take a Cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefusal {
    /// The run already ended (or is ending with an error).
    Ended,
    /// The run is parking on an approval request; once parked, a Cancel
    /// resolves the request from the journal.
    Parking,
    /// A replay writes nothing, so it has nothing to cancel.
    Replaying,
}

impl Invocation {
    /// Starts canceling the run. A second Cancel of a run already canceling
    /// joins the first.
    pub fn cancel(&mut self, reason: &str, out: &mut Vec<Action>) -> Result<(), CancelRefusal> {
        self.cancel_by(reason, None, out)
    }

    /// [`Invocation::cancel`] by a verified caller, recorded as the actor
    /// of the cancel records.
    pub fn cancel_by(
        &mut self,
        reason: &str,
        actor: Option<&IdentityRef>,
        out: &mut Vec<Action>,
    ) -> Result<(), CancelRefusal> {
        if self.canceling.is_some() {
            return Ok(());
        }
        if self.setup.mode == Mode::Replay {
            return Err(CancelRefusal::Replaying);
        }
        if self.finish.is_some()
            || self.aborting.is_some()
            || matches!(self.wait, Wait::ErrorRecord(_))
        {
            return Err(CancelRefusal::Ended);
        }
        if self.park.is_some() {
            return Err(CancelRefusal::Parking);
        }
        self.canceling = Some((reason.to_owned(), actor.cloned()));
        self.inbox.clear();
        match self.wait {
            Wait::Idle => self.write_cancel(out),
            Wait::Model { .. } => {
                // Abandoned: the caller stops routing its answer here.
                self.wait = Wait::Idle;
                self.write_cancel(out);
            }
            // Only a first Cancel gets here, so a call is interrupted once.
            Wait::Tool { .. } => out.push(Action::InterruptTool),
            Wait::Append(_) => {}
            Wait::ErrorRecord(_) => unreachable!("refused above"),
        }
        Ok(())
    }

    /// Appends the cancel records; the run ends when they are durable.
    pub(super) fn write_cancel(&mut self, out: &mut Vec<Action>) {
        assert_eq!(self.wait, Wait::Idle, "a cancel is written between actions");
        let (reason, actor) = self
            .canceling
            .clone()
            .expect("written only while canceling");
        let events = vec![
            events::by(
                events::lifecycle(lifecycle::Kind::LifecycleCancel, &reason),
                actor.as_ref(),
            ),
            events::by(
                events::end_canceled(&self.setup.execution_id),
                actor.as_ref(),
            ),
        ];
        self.wait = Wait::Append(AfterAppend::Canceled);
        out.push(Action::Append {
            expected_last_seq: self.head,
            events,
            last: true,
        });
    }
}
