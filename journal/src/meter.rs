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
}

/// A shared [`CommitMeter`], as stores keep it.
pub type Meter = Arc<dyn CommitMeter>;
