//! Retries, only where a second attempt cannot do again what the first
//! did: reads, and an Exec that carries `expected_last_seq` and failed
//! before the server sent anything.
//!
//! Invariant: a call that may have changed the session is never repeated
//! unless the server itself would refuse the repetition (the head moved, so
//! `expected_last_seq` no longer matches).

use std::time::Duration;

/// How often and how long to wait between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (1: never retry).
    pub attempts: u32,
    /// The wait before the second attempt; it doubles after each.
    pub first_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 4,
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl Retry {
    /// Never retry.
    pub fn never() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// The wait before attempt `n` (n ≥ 2).
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        assert!(n >= 2, "the first attempt does not wait");
        let doublings = (n - 2).min(16);
        self.first_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }
}

/// Codes worth another attempt: the server was busy or another writer won
/// a race; neither means the request was wrong.
pub(crate) fn transient(code: tonic::Code) -> bool {
    matches!(code, tonic::Code::Unavailable | tonic::Code::Aborted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let r = Retry {
            attempts: 10,
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
        };
        let waits: Vec<_> = (2..=6).map(|n| r.backoff(n).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 50, 50]);
    }

    #[test]
    fn only_busy_and_lost_races_are_transient() {
        assert!(transient(tonic::Code::Unavailable));
        assert!(transient(tonic::Code::Aborted));
        assert!(!transient(tonic::Code::FailedPrecondition));
        assert!(!transient(tonic::Code::Internal));
    }
}
