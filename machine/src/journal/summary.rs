//! What the host needs from a session's past, kept up to date as records
//! are appended instead of rescanned on every turn.
//!
//! Invariant: a summary that took records 1..=N (in order, each linked to
//! the one before) answers exactly what the full projections answer over
//! those records: [`approval::scan`], [`legacy_prefix`], the canceled test
//! of [`session_status`] and the head. Each part is a fold whose step is
//! O(log n) or less (see [`GateFold`] for the gate); `tests/summary.rs`
//! compares every answer with a full rescan, and the simulator's oracle does
//! so for every journal a host is handed.
//!
//! [`approval::scan`]: super::approval::scan
//! [`legacy_prefix`]: super::legacy::legacy_prefix
//! [`session_status`]: super::projection::session_status

use std::sync::Arc;

use agentsessions_proto::v1::{EventKind, LogRecord};
use imbl::Vector;

use super::approval::{ApprovalScan, ApprovalState};
use super::gates::GateFold;
use super::legacy::LegacyFold;
use super::projection::{SessionStatus, status_from};
use crate::error::LogError;
use crate::events::kind_of;

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    head: i64,
    head_hash: String,
    legacy: LegacyFold,
    /// The latest execution ended with a Cancel's END.
    canceled: bool,
    gates: GateFold,
    /// Tokens of every USAGE record (see [`usage_tokens`]).
    tokens: i64,
}

/// What a USAGE record counts against a token budget.
pub fn usage_tokens(u: &agentsessions_proto::v1::Usage) -> i64 {
    let tokens = u.input_tokens.max(0).saturating_add(u.output_tokens.max(0));
    assert!(tokens >= 0, "negative counts count as nothing");
    tokens
}

/// The tokens of every USAGE record in `records`.
pub fn tokens_in(records: &[LogRecord]) -> i64 {
    let tokens = records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .filter_map(crate::events::body::usage)
        .map(usage_tokens)
        .fold(0, i64::saturating_add);
    assert!(tokens >= 0);
    tokens
}

impl Summary {
    /// Takes `records[index]`, just appended (already checked to link).
    pub(crate) fn push(&mut self, records: &Vector<Arc<LogRecord>>, index: usize) {
        assert_eq!(index + 1, records.len(), "the record just appended");
        let r = &records[index];
        assert_eq!(r.seq, self.head + 1, "records are summarized in order");
        self.head = r.seq;
        self.head_hash.clone_from(&r.content_hash);
        // A planted bug: the gate stops following the journal, so the
        // summary serves a stale approval state.
        if !crate::planted!(StaleSummary) {
            self.gates.push(records, index);
        }
        self.legacy.push(r);
        self.canceled = canceled_after(self.canceled, r);
        if let Some(u) = r.event.as_ref().and_then(crate::events::body::usage) {
            self.tokens = self.tokens.saturating_add(usage_tokens(u));
        }
        assert!(self.tokens >= 0);
    }

    /// Tokens committed in USAGE records so far.
    pub fn tokens(&self) -> i64 {
        self.tokens
    }

    /// Seq of the last record (0: empty).
    pub fn head(&self) -> i64 {
        assert!(self.head >= 0, "a seq or 0");
        self.head
    }

    /// Hash of the last record ("" when empty).
    pub fn head_hash(&self) -> &str {
        debug_assert!(self.head > 0 || self.head_hash.is_empty());
        &self.head_hash
    }

    /// Where the id-less (v0.1.2) prefix ends, as [`legacy_prefix`] says.
    ///
    /// [`legacy_prefix`]: super::legacy::legacy_prefix
    pub fn legacy_prefix(&self) -> Result<usize, LogError> {
        let prefix = self.legacy.prefix();
        debug_assert!(
            prefix.iter().all(|&n| (n as i64) <= self.head),
            "the prefix ends within the records taken"
        );
        prefix
    }

    /// The gate the session waits on, as `approval::scan(records, 0)`
    /// selects it; O(1).
    pub fn selected_gate(&self) -> Result<Option<ApprovalState>, LogError> {
        self.gates.selected(self.head)
    }

    /// `approval::scan(records, 0)`: every gate, copied.
    pub fn approval_scan(&self) -> Result<ApprovalScan, LogError> {
        self.gates.scan(self.head)
    }

    /// `session_status(records, head)`: the execution axis at the head.
    pub fn status(&self) -> Result<SessionStatus, LogError> {
        status_from(self.head, self.canceled, || self.selected_gate())
    }
}

/// The canceled test after `r`, read forward: host markers keep it, an END
/// sets it to whether it was a Cancel's, anything else (or a record with no
/// event) clears it — the backward walk of `session_status` in one step.
fn canceled_after(current: bool, r: &LogRecord) -> bool {
    let Some(ev) = r.event.as_ref() else {
        return false;
    };
    match kind_of(ev) {
        EventKind::EventLifecycle
        | EventKind::EventApprovalRequest
        | EventKind::EventApprovalResult
        | EventKind::EventError => current,
        EventKind::EventEnd => crate::events::is_canceled_end(ev),
        _ => false,
    }
}
