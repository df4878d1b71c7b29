//! The `compute_state` projection an append leaves on the session row.
//!
//! compute_state is a hint for listing and placement; the journal stays the
//! truth. Host-only approval writes happen while compute may be cold, so they
//! must not flip it to LIVE; lifecycle markers move it explicitly.

use agentsessions_proto::v1::{ComputeState, Event, EventKind, event, lifecycle};

/// The compute_state implied by appending `ev`, or `None` to leave it alone.
pub fn compute_state_after(ev: &Event) -> Option<ComputeState> {
    match EventKind::try_from(ev.kind) {
        Ok(EventKind::EventApprovalRequest | EventKind::EventApprovalResult) => None,
        Ok(EventKind::EventLifecycle) => match &ev.body {
            Some(event::Body::Lifecycle(l)) => match lifecycle::Kind::try_from(l.kind) {
                Ok(lifecycle::Kind::LifecycleSuspend | lifecycle::Kind::LifecycleFork) => {
                    Some(ComputeState::ComputeCold)
                }
                Ok(lifecycle::Kind::LifecycleResume) => Some(ComputeState::ComputeLive),
                _ => None,
            },
            _ => None,
        },
        _ => Some(ComputeState::ComputeLive),
    }
}

/// The state after a whole batch: the last event that moves it wins.
pub fn compute_state_after_all(events: &[Event]) -> Option<ComputeState> {
    events.iter().rev().find_map(compute_state_after)
}

/// The text the Go host stores in `sessions.compute_state`.
pub fn to_text(state: ComputeState) -> &'static str {
    match state {
        ComputeState::ComputeLive => "LIVE",
        ComputeState::ComputeCold => "COLD",
        ComputeState::ComputeWarm => "WARM",
        ComputeState::ComputeTerminated => "TERMINATED",
        ComputeState::ComputeNone | ComputeState::Unspecified => "NONE",
    }
}

/// Parses stored text; "" reads as NONE.
pub fn from_text(text: &str) -> Option<ComputeState> {
    Some(match text {
        "" | "NONE" => ComputeState::ComputeNone,
        "LIVE" => ComputeState::ComputeLive,
        "COLD" => ComputeState::ComputeCold,
        "WARM" => ComputeState::ComputeWarm,
        "TERMINATED" => ComputeState::ComputeTerminated,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_proto::v1::Lifecycle;

    fn ev(kind: EventKind) -> Event {
        Event {
            kind: kind as i32,
            ..Default::default()
        }
    }

    fn lc(kind: lifecycle::Kind) -> Event {
        Event {
            kind: EventKind::EventLifecycle as i32,
            body: Some(event::Body::Lifecycle(Lifecycle {
                kind: kind as i32,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn projection_table() {
        use ComputeState::*;
        assert_eq!(
            compute_state_after(&ev(EventKind::EventApprovalRequest)),
            None
        );
        assert_eq!(
            compute_state_after(&ev(EventKind::EventApprovalResult)),
            None
        );
        for k in [
            EventKind::EventInput,
            EventKind::EventOutput,
            EventKind::EventExecutionStart,
            EventKind::EventEnd,
            EventKind::EventError,
        ] {
            assert_eq!(compute_state_after(&ev(k)), Some(ComputeLive));
        }
        assert_eq!(
            compute_state_after(&lc(lifecycle::Kind::LifecycleSuspend)),
            Some(ComputeCold)
        );
        assert_eq!(
            compute_state_after(&lc(lifecycle::Kind::LifecycleFork)),
            Some(ComputeCold)
        );
        assert_eq!(
            compute_state_after(&lc(lifecycle::Kind::LifecycleResume)),
            Some(ComputeLive)
        );
        assert_eq!(
            compute_state_after(&lc(lifecycle::Kind::LifecycleBaseline)),
            None
        );
        assert_eq!(
            compute_state_after(&lc(lifecycle::Kind::LifecycleCancel)),
            None
        );
        assert_eq!(compute_state_after(&ev(EventKind::EventLifecycle)), None);
        assert_eq!(
            compute_state_after_all(&[
                lc(lifecycle::Kind::LifecycleSuspend),
                ev(EventKind::EventApprovalRequest)
            ]),
            Some(ComputeCold)
        );
        for s in [ComputeNone, ComputeLive, ComputeCold] {
            assert_eq!(from_text(to_text(s)), Some(s));
        }
        assert_eq!(from_text(""), Some(ComputeNone));
        assert_eq!(from_text("bogus"), None);
    }
}
