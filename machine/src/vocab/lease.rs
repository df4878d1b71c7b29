//! Session leases: which host runs a session's live execution, and until
//! when.
//!
//! The fence decides correctness: a writer whose fence was superseded can
//! never append. The lease decides *politeness* between hosts that share a
//! journal: a host taking a session's fence also takes its lease (owner and
//! expiry, in the same store transaction), so a second host refuses to
//! supersede a live execution instead of fighting it, and a host that died
//! mid-turn is taken over once its lease runs out. A lease is renewed by
//! heartbeats while the operation that took it runs and released when it
//! finishes.
//!
//! Expiry is judged by the store's clock (a shared database's own, an
//! embedded store's host's), never by comparing two hosts' clocks; the
//! machine only says how long a lease lasts.

use super::ids::Nanos;

/// One host's lease settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// This host's id, the lease owner it writes. Stable across restarts,
    /// so a restarted host takes its own unexpired leases back at once.
    pub host_id: String,
    /// How long a lease lasts after it is taken or renewed.
    pub ttl: Nanos,
    /// How often a held lease is renewed; shorter than `ttl`.
    pub heartbeat: Nanos,
}

impl LeaseConfig {
    /// Settings with the heartbeat at a third of the lease, so two renewals
    /// can be lost before it lapses.
    pub fn new(host_id: impl Into<String>, ttl: Nanos) -> Self {
        let config = Self {
            host_id: host_id.into(),
            ttl,
            heartbeat: (ttl / 3).max(1),
        };
        config.check();
        config
    }

    /// Why these settings could never hold a lease, if they cannot.
    pub fn problem(&self) -> Option<&'static str> {
        if self.host_id.is_empty() {
            Some("a lease needs a host id")
        } else if self.ttl <= 0 {
            Some("a lease lasts a positive time")
        } else if self.heartbeat <= 0 || self.heartbeat >= self.ttl {
            Some("the heartbeat must be positive and shorter than the lease")
        } else {
            None
        }
    }

    /// Panics on settings that could never hold a lease (the shells refuse
    /// them at startup through [`LeaseConfig::problem`]).
    pub fn check(&self) {
        let problem = self.problem();
        assert!(
            problem.is_none(),
            "lease config: {}",
            problem.unwrap_or_default()
        );
    }
}

/// Default lease length (15 s) for hosts sharing a journal.
pub const DEFAULT_LEASE: Nanos = 15_000_000_000;
// `LeaseConfig::new(_, DEFAULT_LEASE)` has a heartbeat shorter than the lease.
const _: () = assert!(DEFAULT_LEASE / 3 >= 1);

/// What a fence mint asks of the session's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseClaim {
    /// The claiming host.
    pub owner: String,
    /// How long the lease lasts from the store's now.
    pub ttl: Nanos,
    /// Take the lease even from a live holder (Cancel: stopping a live
    /// execution is its purpose).
    pub force: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_hold_a_lease_name_their_problem() {
        assert_eq!(LeaseConfig::new("h", 3_000).problem(), None);
        let bad = |host: &str, ttl, heartbeat| LeaseConfig {
            host_id: host.into(),
            ttl,
            heartbeat,
        };
        assert!(bad("", 10, 1).problem().is_some());
        assert!(bad("h", 0, 1).problem().is_some());
        assert!(bad("h", 10, 0).problem().is_some());
        assert!(
            bad("h", 10, 10).problem().is_some(),
            "a heartbeat as long as the lease"
        );
    }
}
