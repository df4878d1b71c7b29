//! Signals: what the machine decided, told to whoever keeps the figures.
//!
//! A signal asks for nothing and expects no outcome; it is not an effect,
//! so ignoring every one changes no behaviour. The shell turns them into
//! metrics; the simulator may ignore them. Invariant: a signal is emitted
//! only after what it reports is durable (or, for a failed turn, final),
//! so a counter never runs ahead of the journal.

use super::ids::Nanos;

/// How a turn (a live run of an Exec or a Resume) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TurnOutcome {
    /// END{COMPLETED} is durable.
    Completed,
    /// The run parked on an approval request.
    Parked,
    /// The run failed (its ERROR record, where one is written, is durable).
    Failed,
    /// A Cancel ended it.
    Canceled,
}

impl TurnOutcome {
    /// The label value: lowercase, stable.
    pub fn as_str(self) -> &'static str {
        let label = match self {
            Self::Completed => "completed",
            Self::Parked => "parked",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        };
        debug_assert!(
            label.bytes().all(|b| b.is_ascii_lowercase()),
            "a lowercase label"
        );
        label
    }
}

/// One decision worth counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A turn on `harness` ended `outcome`, `took` after its Start was sent.
    TurnEnded {
        /// The registry name the turn ran on.
        harness: String,
        /// How it ended.
        outcome: TurnOutcome,
        /// From the Start frame to the end, on the machine's clock.
        took: Nanos,
    },
    /// `session` now waits for an approval decision (`true`: its request is
    /// durable) or no longer does (`false`: a decision, a cancel or a
    /// deletion is durable). A `false` for a session that was not waiting
    /// is harmless: the receiver keeps a set.
    Awaiting {
        /// Session uid.
        session: String,
        /// Whether it now waits.
        awaiting: bool,
    },
    /// The host denied `session`'s request when its wait ran out; the
    /// denial is durable.
    ApprovalExpired {
        /// Session uid.
        session: String,
    },
}

/// Signals kept for the shell at most; past this the oldest go (a shell
/// drains after every input, so only a shell that never drains loses any).
pub const SIGNAL_QUEUE: usize = 4096;
// A full queue drops its oldest to keep the newest: it holds at least one.
const _: () = assert!(SIGNAL_QUEUE > 0);
