//! Whether an operation is still running, and the one way an operation
//! meets an outcome it never asked for (a bug in the routing, so a panic).

use crate::vocab::Outcome;

/// Whether an operation is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Waiting for more input.
    Continue,
    /// Replied; the host drops it.
    Done,
}

/// Panics with a clear message when an outcome does not match the effect an
/// operation is waiting for: the shell answered the wrong effect.
#[track_caller]
pub(crate) fn unexpected(op: &str, outcome: &Outcome) -> ! {
    panic!("{op}: unexpected outcome {outcome:?}")
}
