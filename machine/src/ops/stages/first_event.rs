//! The bound on a harness's first event: from the first frame the host
//! sends on a connection (Start) until anything comes back. A harness that
//! stays silent (headers only, or nothing at all) fails its connection as
//! unavailable. A machine timer like the others, so `poll_timeout` shows it
//! and the simulator drives it; the shell keeps no clock of its own.
//!
//! Invariants: a connection is armed at most once (by its first frame) and
//! only while nothing has been heard on it; an armed connection is in
//! `quiet` under the same deadline; both maps hold only open connections,
//! so they are bounded by the connections in flight.

use std::collections::{BTreeMap, BTreeSet};

use crate::vocab::{ConnId, Nanos};

/// Connections whose harness has not answered yet.
#[derive(Debug, Default)]
pub(crate) struct FirstEvents {
    /// Open connections nothing has been heard on, with their deadline
    /// once a frame went out.
    quiet: BTreeMap<ConnId, Option<Nanos>>,
    /// The armed deadlines, earliest first.
    armed: BTreeSet<(Nanos, ConnId)>,
}

impl FirstEvents {
    /// A new connection: nothing heard, nothing sent.
    pub(crate) fn opened(&mut self, conn: ConnId) {
        let fresh = self.quiet.insert(conn, None).is_none();
        assert!(fresh, "connection ids are never reused");
    }

    /// A frame went out on `conn` at `now`: the first one arms its bound.
    pub(crate) fn sent(&mut self, conn: ConnId, now: Nanos, bound_ms: u64) {
        assert!(bound_ms > 0, "a zero bound would fail every connection");
        if let Some(deadline @ None) = self.quiet.get_mut(&conn) {
            let bound = i64::try_from(bound_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
            let at = now.saturating_add(bound);
            *deadline = Some(at);
            self.armed.insert((at, conn));
        }
        debug_assert_eq!(self.armed.len(), self.quiet.values().flatten().count());
    }

    /// Something (an event, a failure, the end) arrived on `conn`, or it
    /// closed: it owes nothing any more.
    pub(crate) fn heard(&mut self, conn: ConnId) {
        if let Some(Some(at)) = self.quiet.remove(&conn) {
            let was = self.armed.remove(&(at, conn));
            assert!(was, "an armed connection is in the deadline set");
        }
    }

    /// The earliest armed deadline.
    pub(crate) fn next_due(&self) -> Option<Nanos> {
        self.armed.first().map(|(at, _)| *at)
    }

    /// Removes and returns a connection whose bound passed by `now`, with
    /// the deadline it missed.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<ConnId> {
        let &(at, conn) = self.armed.first()?;
        if at > now {
            return None;
        }
        self.armed.pop_first();
        let was = self.quiet.remove(&conn);
        assert_eq!(was, Some(Some(at)), "a due connection was quiet and armed");
        Some(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_frame_arms_and_any_input_disarms() {
        let mut f = FirstEvents::default();
        f.opened(ConnId(1));
        f.opened(ConnId(2));
        assert_eq!(f.next_due(), None, "nothing sent, nothing owed");
        f.sent(ConnId(1), 100, 5);
        f.sent(ConnId(1), 9_000_000, 5);
        assert_eq!(f.next_due(), Some(5_000_100));
        f.sent(ConnId(2), 200, 5);
        f.heard(ConnId(2));
        assert_eq!(f.pop_due(5_000_099), None);
        assert_eq!(f.pop_due(5_000_100), Some(ConnId(1)));
        assert_eq!(f.pop_due(u64::MAX as i64 >> 1), None);
        f.sent(ConnId(2), 300, 5);
        assert_eq!(f.next_due(), None, "a connection heard from is never armed");
    }
}
