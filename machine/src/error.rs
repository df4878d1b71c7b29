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
        let detail = detail.into();
        debug_assert!(!detail.is_empty(), "an invalid log says what is wrong");
        Self::InvalidExecutionLog(detail)
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
        let detail = detail.into();
        debug_assert!(!detail.is_empty(), "a divergence says what diverged");
        Self {
            detail,
            ..Self::default()
        }
    }
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

/// Why one invocation (a live turn, a replayed execution or a recovery)
/// ended without completing. Over the wire a harness cannot handle a sink
/// error, so the first one ends the run; the variant still decides the
/// status code and the text of the audit ERROR record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The journal or the harness's requests contradict each other.
    #[error(transparent)]
    Log(#[from] LogError),
    /// An owned approval call has no receipt; new inputs must wait.
    #[error("approval blocked: a tool call awaits its approval receipt")]
    ApprovalBlocked,
    /// The gate needs a STATELESS_REPLAY harness.
    #[error("approval unavailable: the harness is not stateless-replay")]
    ApprovalUnavailable,
    /// A gated call with no id, a reused id, or a gate in a legacy turn.
    #[error("invalid approval call: {0}")]
    InvalidApprovalCall(String),
    /// The harness tried to write a host-owned receipt.
    #[error("approval receipt report: receipts are host-owned")]
    ApprovalReceiptReport,
    /// An approved call, but this host has no tool executor.
    #[error("no tool executor configured for an approved call")]
    MissingToolExecutor,
    /// Recorded harness name differs from the one serving now.
    #[error("harness mismatch: recorded {recorded:?}, serving {serving:?}")]
    HarnessMismatch {
        /// Recorded on EXECUTION_START.
        recorded: String,
        /// Resolved now.
        serving: String,
    },
    /// Recorded harness version differs from the connected harness's.
    #[error("harness version mismatch: recorded {recorded:?}, serving {serving:?}")]
    HarnessVersionMismatch {
        /// Recorded on EXECUTION_START.
        recorded: String,
        /// Reported by Describe now.
        serving: String,
    },
    /// A plain sink error (a recorded completion missing, an executor error,
    /// a harness protocol violation…), kept as text.
    #[error("{0}")]
    Sink(String),
    /// The harness run failed (END FAILED, stream error).
    #[error("{0}")]
    Harness(String),
    /// The harness never answered Start (UNAVAILABLE, unlike a run that
    /// fails once it is going).
    #[error("harness unavailable: {0}")]
    HarnessUnavailable(String),
    /// The session's committed usage reached its token budget; no more
    /// model calls (RESOURCE_EXHAUSTED).
    #[error("token budget: the session used {used} of its {limit} tokens")]
    TokenBudget {
        /// Tokens committed in USAGE records (input + output).
        used: i64,
        /// The session's budget.
        limit: i64,
    },
    /// The model provider failed.
    #[error("model: {0}")]
    Model(String),
    /// The model provider could not be reached or was overloaded; the
    /// journaled text is the same as [`TurnError::Model`]'s, the status is
    /// UNAVAILABLE.
    #[error("model: {0}")]
    ModelUnavailable(String),
    /// The park acknowledgement was missing or wrong.
    #[error("park acknowledgement: {0}")]
    ParkAck(String),
    /// A journal read (or other store call) failed.
    #[error("{0}")]
    Store(crate::vocab::StoreFault),
    /// A journal write was refused or failed.
    #[error("append: {0:?}")]
    Append(crate::vocab::AppendError),
    /// The caller's deadline passed.
    #[error("deadline exceeded")]
    DeadlineExceeded,
}

impl TurnError {
    /// True when the error is a replay divergence (latched in the reference).
    pub fn is_divergence(&self) -> bool {
        matches!(self, Self::Log(LogError::ReplayDiverged(_)))
    }
}
