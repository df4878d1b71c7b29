//! The session lease rule every store applies inside its fence mint, and
//! the lease row stores keep beside the session (see the machine's
//! `vocab::lease` for what leases are for).
//!
//! Invariant: a mint that takes a lease either takes it (fence + 1, owner
//! and expiry written in the same transaction) or changes nothing.

pub use agentsessions_machine::host::LeaseClaim;

use crate::StoreError;

/// A session's lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLease {
    /// The host holding it.
    pub owner: String,
    /// The fence it was taken with.
    pub fence: i64,
    /// When it lapses, in the store's clock (unix nanos).
    pub expires_at: i64,
}

/// Whether `claim` may take a session whose lease is `held`, at store time
/// `now`: yes when there is none, it lapsed, it is the claimer's own, or
/// the claim is forced; otherwise the refusal names the holder.
pub fn check_claim(
    session: &str,
    held: Option<&StoredLease>,
    claim: &LeaseClaim,
    now: i64,
) -> Result<(), StoreError> {
    assert!(!claim.owner.is_empty(), "a claim names its owner");
    assert!(claim.ttl > 0, "a claimed lease lasts a positive time");
    match held {
        Some(h) if h.owner != claim.owner && h.expires_at > now && !claim.force => {
            Err(StoreError::Leased {
                session: session.to_owned(),
                owner: h.owner.clone(),
                remaining_ms: (h.expires_at - now + 999_999) / 1_000_000,
            })
        }
        _ => Ok(()),
    }
}

/// The lease `claim` writes with `fence` at store time `now`.
pub fn taken(claim: &LeaseClaim, fence: i64, now: i64) -> StoredLease {
    StoredLease {
        owner: claim.owner.clone(),
        fence,
        expires_at: now.saturating_add(claim.ttl),
    }
}
