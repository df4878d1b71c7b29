//! Session projections shown to clients: the compute axis, derived event by
//! event as records are appended, and the execution axis with the pending
//! approval, derived from the journal up to the session's captured cursor.

use agentsessions_proto::v1::{ApprovalRef, ComputeState, Event, EventKind, ExecState, LogRecord};

use super::approval::{ApprovalState, scan};
use crate::error::LogError;
use crate::events::{body, kind_of};

/// The compute state appending `ev` moves a session to; `None` leaves it.
///
/// Approval records and a Cancel's END are written by the host while the
/// session may be cold (an out-of-band decision, a repair, a cancel), so
/// they leave the state alone; any
/// other non-lifecycle record means a harness is running. Of the lifecycle
/// markers only SUSPEND, FORK (the child starts cold) and RESUME move it.
pub fn compute_state_move(ev: &Event) -> Option<ComputeState> {
    use agentsessions_proto::v1::lifecycle::Kind;
    match kind_of(ev) {
        EventKind::EventApprovalRequest | EventKind::EventApprovalResult => None,
        // A Cancel's END may be written to a cold session (a parked turn);
        // it starts nothing, and a live one stays as it was.
        EventKind::EventEnd if crate::events::is_canceled_end(ev) => None,
        EventKind::EventLifecycle => {
            let marker = body::lifecycle(ev).and_then(|l| Kind::try_from(l.kind).ok());
            match marker {
                Some(Kind::LifecycleSuspend | Kind::LifecycleFork) => {
                    Some(ComputeState::ComputeCold)
                }
                Some(Kind::LifecycleResume) => Some(ComputeState::ComputeLive),
                _ => None,
            }
        }
        _ => Some(ComputeState::ComputeLive),
    }
}

/// The compute state after `ev` is appended to a session in `current`.
pub fn compute_state_after(current: ComputeState, ev: &Event) -> ComputeState {
    compute_state_move(ev).unwrap_or(current)
}

/// The compute state a whole batch leaves (the last event that moves it
/// wins); `None` leaves the stored state. The machine puts this on every
/// append, and stores write exactly it.
pub fn batch_compute_state(events: &[Event]) -> Option<ComputeState> {
    events.iter().rev().find_map(compute_state_move)
}

/// The execution axis of a session as rendered to clients.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStatus {
    pub exec_state: ExecState,
    /// Set only while the session's own gate waits for a decision.
    pub pending_approval: Option<ApprovalRef>,
}

/// The session's execution state as of `last_seq`, the cursor captured with
/// the session row. Records past the cursor (a decision that raced the read,
/// say) are ignored so the rendering matches the row it came with; a zero
/// cursor means an empty session and is not "read to the head".
///
/// The state is AWAITING only for a gate this session owns (not inherited
/// through a fork) in an unfinished execution with a request and no
/// decision. A decided gate without a receipt is not awaiting anyone; it
/// still blocks new input, which the Exec path checks on its own. CANCELED
/// when the latest execution ended with END{CANCELED}. Running and failed
/// are never derived here.
pub fn session_status(records: &[LogRecord], last_seq: i64) -> Result<SessionStatus, LogError> {
    status_from(
        last_seq,
        last_seq > 0 && last_execution_canceled(records, last_seq),
        || Ok(scan(records, last_seq)?.selected().cloned()),
    )
}

/// [`session_status`] from its parts: whether the latest execution was
/// canceled, and the selected gate (asked for only when it matters).
pub(crate) fn status_from(
    last_seq: i64,
    canceled: bool,
    selected: impl FnOnce() -> Result<Option<ApprovalState>, LogError>,
) -> Result<SessionStatus, LogError> {
    if last_seq <= 0 {
        // A negative cursor is unreachable from a real row; like the
        // reference it is simply not inspected.
        let exec_state = if last_seq == 0 {
            ExecState::ExecPending
        } else {
            ExecState::ExecCompleted
        };
        return Ok(SessionStatus {
            exec_state,
            pending_approval: None,
        });
    }
    if canceled {
        return Ok(SessionStatus {
            exec_state: ExecState::ExecCanceled,
            pending_approval: None,
        });
    }
    let pending = selected()?.and_then(|s| {
        let request_seq = s.request_seq().filter(|&seq| seq > 0)?;
        let awaiting = !s.inherited && !s.completed && s.decision.is_none();
        awaiting.then(|| ApprovalRef {
            execution_id: s.execution_id.clone(),
            tool_call_id: s.call.id.clone(),
            request_seq,
        })
    });
    debug_assert!(
        pending
            .as_ref()
            .is_none_or(|p| !p.execution_id.is_empty() && !p.tool_call_id.is_empty()),
        "a scanned gate names its execution and its call"
    );
    Ok(SessionStatus {
        exec_state: if pending.is_some() {
            ExecState::ExecAwaiting
        } else {
            ExecState::ExecCompleted
        },
        pending_approval: pending,
    })
}

/// True when the last execution within the cursor ended with a Cancel's
/// END: walking back over host markers, the first END or execution record
/// decides.
fn last_execution_canceled(records: &[LogRecord], last_seq: i64) -> bool {
    debug_assert!(last_seq > 0, "a zero cursor reads nothing");
    let within = records.iter().rev().filter(|r| r.seq <= last_seq);
    for r in within {
        let Some(ev) = r.event.as_ref() else {
            return false;
        };
        match kind_of(ev) {
            EventKind::EventLifecycle
            | EventKind::EventApprovalRequest
            | EventKind::EventApprovalResult
            | EventKind::EventError => continue,
            EventKind::EventEnd => return crate::events::is_canceled_end(ev),
            _ => return false,
        }
    }
    false
}
