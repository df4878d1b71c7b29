//! Approval deadlines: when the host denies a request nobody decided.
//!
//! Invariant: at most one deadline per session, for the request its
//! journal last showed pending, due at the request's journaled time plus the
//! tool's expiry. Deadlines are derived, never stored: whatever loads a
//! session arms or disarms its deadline from what it read, so a restarted
//! host (or another host) finds them again by loading the session, and a
//! stale one only starts an expiry that rereads the journal and finds
//! nothing left to deny.

use std::collections::{BTreeMap, BTreeSet};

use agentsessions_proto::v1::{ApprovalRef, Event, EventKind, event::Body};

use crate::journal::Journal;
use crate::journal::approval::ApprovalState;
use crate::vocab::{Nanos, ToolGate};

/// Deadlines held at most. Past this a new one is not armed; the session's
/// next load (a rescan, any call on it) arms it once room is made.
pub(crate) const MAX_ARMED: usize = 65_536;

/// A request the host will deny at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Armed {
    /// When it expires, on the machine's clock (Unix nanoseconds).
    pub(crate) at: Nanos,
    /// The request.
    pub(crate) gate: ApprovalRef,
    /// The wait it was given, for the reason the denial records.
    pub(crate) after_ms: u64,
}

/// Every armed deadline, by session and by time.
#[derive(Debug, Default)]
pub(crate) struct Expiries {
    by_session: BTreeMap<String, Armed>,
    due: BTreeSet<(Nanos, String)>,
    /// Sessions whose expiry runs now, with the wait that ran out: a human
    /// decision meeting one is refused as late, not as busy.
    running: BTreeMap<String, u64>,
}

impl Expiries {
    /// Arms (or moves) `session`'s deadline; false when the table is full.
    pub(crate) fn arm(&mut self, session: &str, armed: Armed) -> bool {
        assert!(!session.is_empty() && armed.after_ms > 0);
        if let Some(old) = self.by_session.get(session) {
            if *old == armed {
                return true;
            }
            self.due.remove(&(old.at, session.to_owned()));
        } else if self.by_session.len() >= MAX_ARMED {
            return false;
        }
        self.due.insert((armed.at, session.to_owned()));
        self.by_session.insert(session.to_owned(), armed);
        debug_assert_eq!(self.due.len(), self.by_session.len(), "one deadline each");
        true
    }

    /// Drops `session`'s deadline, if any.
    pub(crate) fn disarm(&mut self, session: &str) {
        if let Some(old) = self.by_session.remove(session) {
            let removed = self.due.remove(&(old.at, session.to_owned()));
            assert!(removed, "an armed deadline is in the time order");
        }
        debug_assert_eq!(self.due.len(), self.by_session.len());
    }

    /// The earliest deadline.
    pub(crate) fn next_due(&self) -> Option<Nanos> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Removes and returns a deadline due by `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<(String, Armed)> {
        let (at, session) = self.due.first()?.clone();
        if at > now {
            return None;
        }
        self.due.pop_first();
        let armed = self.by_session.remove(&session).expect("indexed both ways");
        assert_eq!(armed.at, at, "the time order holds each deadline's time");
        Some((session, armed))
    }

    /// The deadline armed for `session`.
    pub(crate) fn armed(&self, session: &str) -> Option<&Armed> {
        self.by_session.get(session)
    }

    /// `session`'s expiry started (after a wait of `after_ms`) or ended.
    pub(crate) fn set_running(&mut self, session: &str, after_ms: Option<u64>) {
        match after_ms {
            Some(ms) => {
                let earlier = self.running.insert(session.to_owned(), ms);
                debug_assert!(earlier.is_none(), "one expiry per session at a time");
            }
            None => {
                self.running.remove(session);
            }
        }
    }

    /// The wait that ran out, while `session`'s expiry runs.
    pub(crate) fn running(&self, session: &str) -> Option<u64> {
        self.running.get(session).copied()
    }
}

/// The deadline a session's journal calls for: its selected gate when that
/// is a request this session owns and nobody decided, and its tool has an
/// expiry. A request journaled without a time (written before requests
/// were stamped, or by another host) counts from `now`, when this host
/// first saw it pending.
pub(crate) fn due(journal: &Journal, tools: &ToolGate, now: Nanos) -> Option<Armed> {
    let gate = journal.summary().selected_gate().ok().flatten()?;
    if gate.inherited || gate.completed || !gate.is_pending_request() {
        return None;
    }
    if canceled_after(journal, gate.request_seq()?) {
        return None;
    }
    let after_ms = tools.expiry_ms(&gate.call.tool)?;
    let since = requested_at(&gate).unwrap_or(now);
    let armed = Armed {
        at: deadline(since, after_ms),
        gate: ApprovalRef {
            execution_id: gate.execution_id.clone(),
            tool_call_id: gate.call.id.clone(),
            request_seq: gate.request_seq()?,
        },
        after_ms,
    };
    debug_assert!(armed.gate.request_seq > 0 && armed.at > since);
    Some(armed)
}

/// A Cancel marker follows record `seq`: the execution parked there was
/// canceled, even if the Cancel's END was cut off by a torn write (a retry
/// of the Cancel writes it). Nothing of a canceled execution may be
/// decided. Only the records after the request are read, a few at most.
pub(crate) fn canceled_after(journal: &Journal, seq: i64) -> bool {
    assert!(seq > 0, "a committed request");
    let marked = journal.iter().rev().take_while(|r| r.seq > seq).any(|r| {
        r.event
            .as_ref()
            .is_some_and(crate::events::is_cancel_marker)
    });
    debug_assert!(seq <= journal.head() || !marked);
    marked
}

/// The journaled time of a gate's APPROVAL_REQUEST, in Unix nanoseconds.
pub(crate) fn requested_at(gate: &ApprovalState) -> Option<Nanos> {
    let ts = gate.request.as_ref()?.event.as_ref()?.ts.as_ref()?;
    crate::vocab::ids::nanos_of(ts)
}

/// When a wait of `after_ms` from `since` runs out.
pub(crate) fn deadline(since: Nanos, after_ms: u64) -> Nanos {
    let at = since
        .saturating_add(Nanos::try_from(after_ms.saturating_mul(1_000_000)).unwrap_or(Nanos::MAX));
    debug_assert!(at > since || since == Nanos::MAX, "an expiry is positive");
    at
}

/// Arms or disarms `session`'s deadline from its journal, just read. A
/// deadline already armed for the same request stays as it is (a request
/// without a time would otherwise move on every read), and a session
/// whose expiry runs is left to it.
pub(crate) fn observe(
    expiries: &mut Expiries,
    (tools, now): (&ToolGate, Nanos),
    session: &str,
    journal: &Journal,
) {
    // Without any expiry configured nothing here looks at a journal.
    if !tools.expires() || expiries.running(session).is_some() {
        return;
    }
    match due(journal, tools, now) {
        Some(armed) => {
            let same = expiries
                .armed(session)
                .is_some_and(|a| a.gate == armed.gate);
            if !same {
                expiries.arm(session, armed);
            }
        }
        None => expiries.disarm(session),
    }
}

/// Stamps the host's time on each APPROVAL_REQUEST of a batch about to be
/// appended after `head` (the time its expiry counts from), and arms the
/// deadline of a request whose call is in the same batch, as a gated call's
/// always is. Should the append fail, the deadline finds nothing to deny.
pub(crate) fn stamp(
    expiries: &mut Expiries,
    (tools, now): (&ToolGate, Nanos),
    (session, head): (&str, i64),
    events: &mut [Event],
) {
    let mut requested = None;
    for (i, ev) in events.iter_mut().enumerate() {
        if let Some(Body::Approval(a)) = &ev.body
            && ev.kind == EventKind::EventApprovalRequest as i32
        {
            if ev.ts.is_none() {
                ev.ts = crate::vocab::ids::timestamp(now);
            }
            requested = Some((
                head + 1 + i as i64,
                a.tool_call_id.clone(),
                ev.execution_id.clone(),
            ));
        }
    }
    let Some((request_seq, call_id, execution_id)) = requested else {
        return;
    };
    if !tools.expires() || expiries.running(session).is_some() {
        return;
    }
    let name = events.iter().find_map(|ev| match &ev.body {
        Some(Body::Tool(tc)) if tc.id == call_id => Some(tc.tool.clone()),
        _ => None,
    });
    let Some(after_ms) = name.and_then(|n| tools.expiry_ms(&n)) else {
        return;
    };
    assert!(
        request_seq > head,
        "the request is one of the batch's records"
    );
    expiries.arm(
        session,
        Armed {
            at: deadline(now, after_ms),
            gate: ApprovalRef {
                execution_id,
                tool_call_id: call_id,
                request_seq,
            },
            after_ms,
        },
    );
}

/// What a denial at expiry records as its reason.
pub fn reason(after_ms: u64) -> String {
    format!(
        "expired after {}",
        crate::vocab::tools::expiry_text(after_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn armed(at: Nanos, seq: i64) -> Armed {
        Armed {
            at,
            gate: ApprovalRef {
                execution_id: "e".into(),
                tool_call_id: "c".into(),
                request_seq: seq,
            },
            after_ms: 1000,
        }
    }

    #[test]
    fn each_session_holds_one_deadline_and_they_leave_in_time_order() {
        let mut x = Expiries::default();
        assert!(x.arm("b", armed(20, 1)));
        assert!(x.arm("a", armed(30, 1)));
        assert!(x.arm("a", armed(10, 2)), "a later request moves it");
        assert_eq!(x.next_due(), Some(10));
        assert_eq!(x.pop_due(5), None);
        assert_eq!(
            x.pop_due(25).map(|(s, a)| (s, a.at)),
            Some(("a".into(), 10))
        );
        assert_eq!(x.pop_due(25).map(|(s, _)| s), Some("b".into()));
        assert_eq!(x.pop_due(Nanos::MAX), None);
        x.arm("c", armed(5, 1));
        x.disarm("c");
        assert_eq!(x.next_due(), None);
        assert_eq!(reason(1_800_000), "expired after 30m");
    }
}
