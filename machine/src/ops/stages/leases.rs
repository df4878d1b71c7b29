//! The leases this host holds, kept beside the operations that took them.
//!
//! Invariants: a session is held by at most one operation (the one whose
//! mint last succeeded for it); every held lease has exactly one renewal
//! either armed in `due` or outstanding in `renewals`; a finished
//! operation's leases are released (after an outstanding renewal is
//! answered, so a late renewal cannot outlive the release). The replies of
//! an operation that held leases leave only once they are released (see
//! `Core::release`), so a client's next call, on any host, finds the
//! session free.

use std::collections::{BTreeMap, BTreeSet};

use crate::vocab::{
    Effect, EffectId, LeaseClaim, LeaseConfig, Nanos, Outcome, StoreEffect, StoreOutcome,
};

/// One held lease; `Op` names the operation holding it.
#[derive(Debug)]
struct Held<Op> {
    op: Op,
    fence: i64,
    /// Its operation finished while a renewal was outstanding: release it
    /// when that renewal is answered.
    released: bool,
}

/// The host's leases. Inert (no claims, no effects) without a config.
#[derive(Debug)]
pub(crate) struct Leases<Op> {
    config: Option<LeaseConfig>,
    held: BTreeMap<String, Held<Op>>,
    due: BTreeSet<(Nanos, String)>,
    mints: BTreeMap<EffectId, (Op, String)>,
    renewals: BTreeMap<EffectId, (String, i64)>,
    /// Last appends that end a lease if they commit: the (session, fence)
    /// each ends, by effect.
    endings: BTreeMap<EffectId, (String, i64)>,
}

impl<Op: Copy + Eq> Leases<Op> {
    pub(crate) fn new(config: Option<LeaseConfig>) -> Self {
        if let Some(c) = &config {
            c.check();
        }
        Self {
            config,
            held: BTreeMap::new(),
            due: BTreeSet::new(),
            mints: BTreeMap::new(),
            renewals: BTreeMap::new(),
            endings: BTreeMap::new(),
        }
    }

    /// The claim a mint by this host carries, if it takes leases.
    pub(crate) fn claim(&self, force: bool) -> Option<LeaseClaim> {
        let claim = self.config.as_ref().map(|c| LeaseClaim {
            owner: c.host_id.clone(),
            ttl: c.ttl,
            force,
        });
        assert!(
            claim
                .as_ref()
                .is_none_or(|c| c.ttl > 0 && !c.owner.is_empty()),
            "a checked config claims for a positive time"
        );
        claim
    }

    /// Remembers that mint `effect` of `op` takes `session`'s lease.
    pub(crate) fn minting(&mut self, effect: EffectId, op: Op, session: &str) {
        if self.config.is_some() {
            let fresh = self
                .mints
                .insert(effect, (op, session.to_owned()))
                .is_none();
            assert!(fresh, "one mint per effect id");
        }
    }

    /// The owner to name on `op`'s last append to `session` under
    /// `fence`, if `op` holds that lease (and so may end it).
    pub(crate) fn releasable(&self, op: Op, session: &str, fence: i64) -> Option<String> {
        let config = self.config.as_ref()?;
        let held = self.held.get(session)?;
        (held.op == op && held.fence == fence && !held.released).then(|| config.host_id.clone())
    }

    /// Remembers that append `effect` ends `session`'s lease at `fence` if
    /// it commits.
    pub(crate) fn ending(&mut self, effect: EffectId, session: &str, fence: i64) {
        debug_assert!(
            self.held
                .get(session)
                .is_some_and(|h| h.fence == fence && !h.released),
            "only a held lease is ended"
        );
        let fresh = self
            .endings
            .insert(effect, (session.to_owned(), fence))
            .is_none();
        assert!(fresh, "one ending per effect id");
    }

    /// Every held session (for reports and tests).
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &str> {
        self.held.keys().map(String::as_str)
    }

    /// The earliest renewal due.
    pub(crate) fn next_due(&self) -> Option<Nanos> {
        debug_assert!(
            self.due.iter().all(|(_, s)| self.held.contains_key(s)),
            "only a held lease is renewed"
        );
        self.due.first().map(|(at, _)| *at)
    }

    /// Learns from an outcome the leases it took or lost. `alive`: whether
    /// the operation the outcome belongs to still runs. Returns a lease
    /// nobody holds any more, as (session, fence), to release.
    pub(crate) fn observe(
        &mut self,
        now: Nanos,
        effect: EffectId,
        outcome: &Outcome,
        alive: bool,
    ) -> Option<(String, i64)> {
        let config = self.config.as_ref()?;
        let heartbeat = config.heartbeat;
        assert!(heartbeat > 0, "a renewal is due strictly later");
        if let Some((session, fence)) = self.endings.remove(&effect) {
            // Committed: the store removed the lease with the records. A
            // refused or unknown append keeps it for the usual release (a
            // release of a lease already gone changes nothing). A renewal
            // still outstanding finds no row and no entry here. A lease
            // minted again since (a Cancel on this host) is not this one.
            let committed = matches!(outcome, Outcome::Store(StoreOutcome::Appended(Ok(_))));
            if committed && self.held.get(&session).is_some_and(|h| h.fence == fence) {
                self.held.remove(&session);
                self.due.retain(|(_, s)| *s != session);
            }
            return None;
        }
        if let Some((op, session)) = self.mints.remove(&effect) {
            let Outcome::Store(StoreOutcome::Fence(Ok(fence))) = outcome else {
                return None;
            };
            if !alive {
                // Cut short while minting: nobody will renew it.
                return Some((session, *fence));
            }
            self.due.retain(|(_, s)| *s != session);
            let renewing = self.renewals.values().any(|(s, _)| *s == session);
            self.held.insert(
                session.clone(),
                Held {
                    op,
                    fence: *fence,
                    released: false,
                },
            );
            if !renewing {
                self.due.insert((now + heartbeat, session));
            }
            return None;
        }
        let (session, fence) = self.renewals.remove(&effect)?;
        let Outcome::Store(StoreOutcome::LeaseHeld(result)) = outcome else {
            panic!("a lease renewal is answered by LeaseHeld, not {outcome:?}");
        };
        let held = self.held.get(&session)?;
        if held.released {
            let fence = held.fence;
            self.held.remove(&session);
            return Some((session, fence));
        }
        if matches!(result, Ok(false)) && held.fence == fence {
            // Superseded (a forced Cancel, or a takeover after a lapse):
            // the fence refuses this host's appends from here on.
            self.held.remove(&session);
            return None;
        }
        self.due.insert((now + heartbeat, session));
        None
    }

    /// Pops the next renewal due at or before `now`, as (session, fence, ttl).
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<(String, i64, Nanos)> {
        let (at, _) = self.due.first()?;
        if *at > now {
            return None;
        }
        let (_, session) = self.due.pop_first().expect("a first entry");
        let held = self.held.get(&session).expect("a due renewal is held");
        debug_assert!(!held.released, "a released lease is not renewed");
        let ttl = self.config.as_ref().expect("leases configured").ttl;
        Some((session, held.fence, ttl))
    }

    /// Records that renewal `effect` of `session` under `fence` went out.
    pub(crate) fn renewing(&mut self, effect: EffectId, session: String, fence: i64) {
        debug_assert!(
            !self.renewals.values().any(|(s, _)| *s == session),
            "one renewal per session at a time"
        );
        let fresh = self.renewals.insert(effect, (session, fence)).is_none();
        assert!(fresh, "one renewal per effect id");
    }

    /// Releases every lease finished operation `op` held. Returns the
    /// (session, fence) pairs to release now, and the sessions whose
    /// release waits for an outstanding renewal's answer.
    pub(crate) fn release(&mut self, op: Op) -> (Vec<(String, i64)>, Vec<String>) {
        let (mut now, mut later) = (Vec::new(), Vec::new());
        let mine: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.op == op && !h.released)
            .map(|(s, _)| s.clone())
            .collect();
        for session in mine {
            let renewing = self.renewals.values().any(|(s, _)| *s == session);
            self.due.retain(|(_, s)| *s != session);
            if renewing {
                self.held.get_mut(&session).expect("held").released = true;
                later.push(session);
            } else {
                let held = self.held.remove(&session).expect("held");
                now.push((session, held.fence));
            }
        }
        debug_assert!(self.held.values().all(|h| h.op != op || h.released));
        debug_assert!(now.iter().all(|(s, _)| !self.held.contains_key(s)));
        debug_assert!(
            later
                .iter()
                .all(|s| self.held.get(s).is_some_and(|h| h.released)),
            "a lease still renewing is released on the renewal's answer"
        );
        (now, later)
    }

    /// The store effect holding (ttl > 0) or releasing (0) a lease.
    pub(crate) fn hold_effect(
        &self,
        id: EffectId,
        session: String,
        fence: i64,
        ttl: Nanos,
        now: Nanos,
    ) -> Effect {
        let config = self.config.as_ref().expect("leases configured");
        assert!(
            ttl == 0 || ttl == config.ttl,
            "a hold renews for the configured ttl or releases"
        );
        let owner = config.host_id.clone();
        Effect::Store(StoreEffect::HoldLease {
            id,
            session,
            owner,
            fence,
            ttl,
            now,
        })
    }
}
