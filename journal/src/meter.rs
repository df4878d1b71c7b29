//! What a store reports about its commits, to whoever measures them. The
//! contract names only the two observations; the daemon's metrics registry
//! implements them, and a store without a writer of its own reports nothing.

use std::sync::Arc;
use std::time::Duration;

/// Receives a store's commit timings and batch sizes.
pub trait CommitMeter: Send + Sync + std::fmt::Debug {
    /// One successful commit of `appends` (> 0) appends that took `took`,
    /// made in place (on the caller's thread) or by the store's writer.
    fn committed(&self, appends: usize, took: Duration, in_place: bool);
    /// One append, `waited` from being queued to being durable.
    fn appended(&self, waited: Duration);
    /// The store came back after being down (a new backend handle: new
    /// connections, nothing cached from before).
    fn reopened(&self) {}
    /// A write whose COMMIT answer was lost, and what reading it back
    /// found.
    fn commit_unknown(&self, _outcome: UnknownOutcome) {}
}

/// What reconciling a write whose COMMIT answer was lost found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownOutcome {
    /// It is durable; answered with its records.
    Committed,
    /// It is not there; answered UNAVAILABLE.
    NotCommitted,
    /// It could not be read back; still unknown.
    Unreadable,
}

impl UnknownOutcome {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownOutcome::Committed => "committed",
            UnknownOutcome::NotCommitted => "not_committed",
            UnknownOutcome::Unreadable => "unreadable",
        }
    }
}

/// A shared [`CommitMeter`], as stores keep it.
pub type Meter = Arc<dyn CommitMeter>;
