//! Planted losses of COMMIT answers, for the tests of reconciliation
//! against a real server (`faults` feature only; without it nothing is
//! ever planted and every check is `false`).
//!
//! `after`: the next write commits, then its answer is lost (as when the
//! connection dies on the way back). `before`: the next write never reaches
//! COMMIT, and the caller is told only that COMMIT failed.

use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Planted {
    after: AtomicU32,
    before: AtomicU32,
}

impl Planted {
    /// Plants `n` more losses of the given kind.
    #[cfg(feature = "faults")]
    pub(crate) fn plant(&self, committed: bool, n: u32) {
        let counter = if committed { &self.after } else { &self.before };
        counter.fetch_add(n, Ordering::SeqCst);
    }

    /// Takes one planted loss after COMMIT, if any.
    pub(crate) fn lose_after(&self) -> bool {
        take(&self.after)
    }

    /// Takes one planted loss before COMMIT, if any.
    pub(crate) fn lose_before(&self) -> bool {
        take(&self.before)
    }
}

fn take(counter: &AtomicU32) -> bool {
    cfg!(feature = "faults")
        && counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
}
