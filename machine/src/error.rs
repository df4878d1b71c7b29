//! The machine's error catalog.
//!
//! One enum names every way a turn, a recovery or a decision can fail. The
//! variants mirror the reference host's sentinel errors so that status codes
//! map one to one; the `is_*` helpers reproduce its wrapping (for example an
//! incomplete invocation *is* an invalid execution log).

/// Why the host refused or ended an operation on a session's journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// Structural problem in the journal (missing ids, bad start marker,
    /// legacy boundary, malformed approval evidence, bad input counts).
    #[error("invalid execution log: {0}")]
    InvalidExecutionLog(String),
    /// The trailing invocation never got all its inputs; re-Exec instead.
    #[error("invalid execution log: incomplete invocation: {0}")]
    IncompleteInvocation(String),
    /// A fork child holds an unresolved tool intent copied from its parent.
    #[error("invalid execution log: inherited tool intent{0}")]
    InheritedToolIntent(String),
    /// Replay or recovery no longer matches the recorded effects.
    #[error("replay diverged: {0}")]
    ReplayDiverged(Divergence),
    /// A gated tool call names a session with no uid, or similar scope gap.
    #[error("missing session uid")]
    MissingSessionUid,
    /// A host-mediated call without an idempotency key.
    #[error("missing idempotency key")]
    MissingIdempotencyKey,
    /// Recorded approval evidence holds a gated call without an idempotency
    /// key: both an invalid log and a missing-key error, as in the reference.
    #[error("invalid execution log: {0}: missing idempotency key")]
    InvalidLogMissingKey(String),
    /// A tool call the host would not execute (not host-mediated).
    #[error("unmediated tool call: mediation {0}")]
    UnmediatedToolCall(String),
}

impl LogError {
    /// True for every variant the reference wraps in its invalid-log sentinel.
    pub fn is_invalid_log(&self) -> bool {
        matches!(
            self,
            Self::InvalidExecutionLog(_)
                | Self::IncompleteInvocation(_)
                | Self::InheritedToolIntent(_)
                | Self::InvalidLogMissingKey(_)
        )
    }

    /// True for every error that is (or wraps) a missing idempotency key.
    pub fn is_missing_key(&self) -> bool {
        match self {
            Self::MissingIdempotencyKey | Self::InvalidLogMissingKey(_) => true,
            Self::ReplayDiverged(d) => d.missing_key,
            _ => false,
        }
    }

    /// Shorthand for an invalid-log error.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::InvalidExecutionLog(detail.into())
    }

    /// Shorthand for a divergence with only a detail text.
    pub fn diverged(detail: impl Into<String>) -> Self {
        Self::ReplayDiverged(Divergence::new(detail))
    }
}

/// What diverged, plus the more specific causes the reference wraps inside
/// its divergence error (so callers can still ask "was it a key problem?").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Divergence {
    /// Human-readable detail; never contains tool args or keys.
    pub detail: String,
    /// The divergence was caused by a missing idempotency key.
    pub missing_key: bool,
    /// The divergence was caused by a non-host mediation.
    pub unmediated: bool,
    /// The divergence was caused by a harness reporting a host-owned receipt.
    pub receipt_report: bool,
}

impl Divergence {
    /// A divergence with only a detail text.
    pub fn new(detail: impl Into<String>) -> Self {
        Self {
            detail: detail.into(),
            ..Self::default()
        }
    }
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}
