//! The approval gate as recorded in the journal.
//!
//! A gated call is journaled as TOOL_CALL (mediation REQUIRES_APPROVAL),
//! APPROVAL_REQUEST, APPROVAL_RESULT (the decision, written out of band) and
//! finally a host-written TOOL_RESULT receipt. [`scan`] rebuilds the state of
//! every gated call from those records and fails closed on any evidence a
//! correct host could not have written; recovery, approval decisions and the
//! session projection all trust only what the scan accepted.

use std::collections::BTreeMap;

use agentsessions_proto::v1::{
    ApprovalResult, EventKind, ExecutionStart, LogRecord, Part, TextPart, ToolCall, ToolResult,
    part, tool_result::Code,
};

use super::inputs::check_input_counts;
use super::records::{event, exec_id, is_fork, is_gated, kind, kind_name, tool_call};
use crate::error::LogError;
use crate::events::body;

/// Error text (and single text content part) of a denial receipt.
pub const DENIED_TEXT: &str = "Tool execution denied by approval decision.";

/// The derived state of one gated call.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalState {
    pub execution_id: String,
    /// The recorded call, copied.
    pub call: ToolCall,
    /// Seq of the TOOL_CALL record.
    pub call_seq: i64,
    /// The APPROVAL_REQUEST record, if written.
    pub request: Option<LogRecord>,
    /// The APPROVAL_RESULT record, if written.
    pub decision: Option<LogRecord>,
    /// The TOOL_RESULT receipt record, if written.
    pub receipt: Option<LogRecord>,
    /// Seq of the last record the scan looked at.
    pub head: i64,
    /// The call was copied into this session by a fork (its TOOL_CALL
    /// precedes the last fork marker). Such a gate belongs to the parent: it
    /// cannot be decided or re-driven here, only served once complete.
    pub inherited: bool,
    /// The call's execution has an END.
    pub completed: bool,
    /// The execution's start marker, copied; `None` when markerless.
    pub invocation: Option<ExecutionStart>,
}

impl ApprovalState {
    /// A request is out and no decision has been recorded.
    pub fn is_pending_request(&self) -> bool {
        assert!(
            self.decision.is_none() || self.request.is_some(),
            "a decision follows its request"
        );
        self.request.is_some() && self.decision.is_none()
    }

    /// The host has written the receipt.
    pub fn has_receipt(&self) -> bool {
        assert!(
            self.receipt.is_none() || self.decision.is_some(),
            "a receipt answers a decision"
        );
        self.receipt.is_some()
    }

    /// Seq of the APPROVAL_REQUEST.
    pub fn request_seq(&self) -> Option<i64> {
        self.request.as_ref().map(|r| r.seq)
    }

    /// Seq of the APPROVAL_RESULT.
    pub fn decision_seq(&self) -> Option<i64> {
        assert!(self.decision.is_none() || self.request.is_some());
        self.decision.as_ref().map(|r| r.seq)
    }

    /// The recorded decision.
    pub fn decision_body(&self) -> Option<&ApprovalResult> {
        let decided = self
            .decision
            .as_ref()
            .and_then(event)
            .and_then(body::approval_result);
        debug_assert_eq!(
            decided.is_some(),
            self.decision.is_some(),
            "the scan accepts only a decision with its payload"
        );
        decided
    }

    /// Stamps what depends on the whole scanned range: its head, and
    /// whether the call precedes the last fork marker (`last_fork`, 0 for
    /// none) and so belongs to the parent.
    pub(super) fn settle(&mut self, head: i64, last_fork: i64) {
        assert!(self.call_seq > 0, "a gate opens at a committed record");
        self.head = head;
        self.inherited =
            last_fork > 0 && self.call_seq < last_fork && !crate::planted!(AcceptInheritedApproval);
    }

    /// A gate just opened by its gated TOOL_CALL at `call_seq`.
    fn opened(
        execution_id: &str,
        call_seq: i64,
        call: &ToolCall,
        invocation: Option<ExecutionStart>,
    ) -> Self {
        assert!(call_seq > 0, "a gated call is a committed record");
        assert!(
            !execution_id.is_empty(),
            "the walk refuses id-less evidence"
        );
        assert!(
            !call.id.is_empty() && !call.idempotency_key.is_empty(),
            "a gated call is addressable and keyed"
        );
        debug_assert!(is_gated(call));
        Self {
            execution_id: execution_id.to_owned(),
            call: call.clone(),
            call_seq,
            request: None,
            decision: None,
            receipt: None,
            head: 0,
            inherited: false,
            completed: false,
            invocation,
        }
    }
}

/// Every gated call in the scanned range, plus the one the session is
/// currently waiting on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApprovalScan {
    /// Gated calls in journal order (grouped by execution, executions in
    /// first-seen order).
    pub states: Vec<ApprovalState>,
    /// Index into `states` of the last gated call of the latest execution,
    /// when that execution is gated at all. A later ordinary execution
    /// clears it: starting a new turn is the escape from a stuck gate.
    pub selected: Option<usize>,
    /// Seq of the last record scanned (0 for an empty range).
    pub head: i64,
}

impl ApprovalScan {
    /// The gate the session is waiting on, if any.
    pub fn selected(&self) -> Option<&ApprovalState> {
        assert!(
            self.selected.is_none_or(|i| i < self.states.len()),
            "the selection indexes a scanned gate"
        );
        self.selected.and_then(|i| self.states.get(i))
    }

    /// The first gate of `execution_id` for call `tool_call_id` whose request
    /// was written at `request_seq`. A call-only cut has no request and so
    /// is never addressable this way.
    pub fn find(
        &self,
        execution_id: &str,
        tool_call_id: &str,
        request_seq: i64,
    ) -> Option<&ApprovalState> {
        self.states.iter().find(|s| {
            s.execution_id == execution_id
                && s.call.id == tool_call_id
                && s.request_seq() == Some(request_seq)
        })
    }

    /// The gate of `execution_id` for call `tool_call_id` (gated ids are
    /// unique within an execution).
    pub fn for_call(&self, execution_id: &str, tool_call_id: &str) -> Option<&ApprovalState> {
        debug_assert!(
            self.states
                .iter()
                .filter(|s| s.execution_id == execution_id && s.call.id == tool_call_id)
                .count()
                <= 1,
            "gated call ids are unique within an execution"
        );
        self.states
            .iter()
            .find(|s| s.execution_id == execution_id && s.call.id == tool_call_id)
    }

    /// The gates of one execution, in journal order.
    pub fn for_execution<'a>(
        &'a self,
        execution_id: &'a str,
    ) -> impl Iterator<Item = &'a ApprovalState> + 'a {
        self.states
            .iter()
            .filter(move |s| s.execution_id == execution_id)
    }
}

/// Rebuilds and validates every gate in records with seq ≤ `through_seq`
/// (0 = the whole journal; a negative cursor is invalid). The first bad
/// piece of evidence aborts the scan.
pub fn scan(records: &[LogRecord], through_seq: i64) -> Result<ApprovalScan, LogError> {
    check_cursor(through_seq)?;
    assert!(through_seq >= 0);
    let within = |r: &&LogRecord| through_seq == 0 || r.seq <= through_seq;
    // Most journals never use the gate: one pass over the kinds settles
    // that without grouping every record by execution.
    if !records.iter().filter(within).any(is_gated_record) {
        return Ok(ApprovalScan {
            states: Vec::new(),
            selected: None,
            head: records.iter().rev().find(within).map_or(0, |r| r.seq),
        });
    }
    scan_grouped(records, through_seq)
}

/// A cursor is a seq or 0 (the whole journal). Both scans refuse a
/// negative one: read as "no bound" it would scan records past the cut.
fn check_cursor(through_seq: i64) -> Result<(), LogError> {
    if through_seq < 0 {
        return Err(LogError::invalid(format!(
            "negative approval scan cursor {through_seq}"
        )));
    }
    Ok(())
}

/// [`scan`] without its shortcut for journals with no gated record.
fn scan_grouped(records: &[LogRecord], through_seq: i64) -> Result<ApprovalScan, LogError> {
    check_cursor(through_seq)?;
    let mut head = 0;
    let mut last_fork = 0;
    let mut groups: Vec<(&str, Vec<&LogRecord>)> = Vec::new();
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for r in records {
        if through_seq > 0 && r.seq > through_seq {
            continue;
        }
        head = r.seq;
        if kind(r) == EventKind::EventLifecycle {
            if is_fork(r) {
                last_fork = r.seq;
            }
            continue;
        }
        let id = exec_id(r);
        let slot = *by_id.entry(id).or_insert_with(|| {
            groups.push((id, Vec::new()));
            groups.len() - 1
        });
        if let Some((_, members)) = groups.get_mut(slot) {
            members.push(r);
        }
    }
    debug_assert_eq!(groups.len(), by_id.len(), "one group per execution id");
    debug_assert!(groups.iter().all(|(_, members)| !members.is_empty()));

    let mut states = Vec::new();
    let mut selected = None;
    let last_group = groups.len().saturating_sub(1);
    for (gi, (id, members)) in groups.iter().enumerate() {
        if !is_gated_group(members) {
            continue;
        }
        let first = states.len();
        walk_gated_group(id, members, &mut states)?;
        if gi == last_group && states.len() > first {
            selected = Some(states.len() - 1);
        }
    }
    for s in &mut states {
        s.settle(head, last_fork);
    }
    debug_assert!(selected.is_none_or(|i| i < states.len()));
    Ok(ApprovalScan {
        states,
        selected,
        head,
    })
}

/// An execution takes part in the gate protocol if any record of it does.
fn is_gated_group(members: &[&LogRecord]) -> bool {
    debug_assert!(!members.is_empty(), "a group holds its first record");
    members.iter().copied().any(is_gated_record)
}

pub(super) fn is_gated_record(r: &LogRecord) -> bool {
    match kind(r) {
        EventKind::EventApprovalRequest | EventKind::EventApprovalResult => true,
        EventKind::EventToolCall => tool_call(r).is_some_and(is_gated),
        EventKind::EventToolResult => event(r)
            .and_then(body::result)
            .is_some_and(carries_approval_seqs),
        _ => false,
    }
}

/// The shortcut in [`scan`] must not change its answer (the fuzz targets
/// check this on every input).
#[cfg(any(test, feature = "faults"))]
pub fn scan_agrees_with_grouped_scan(records: &[LogRecord], through_seq: i64) -> bool {
    // Compared as text: a NaN in a call's args is unequal to itself, so
    // `==` would report two identical answers as different.
    format!("{:?}", scan(records, through_seq))
        == format!("{:?}", scan_grouped(records, through_seq))
}

fn carries_approval_seqs(res: &ToolResult) -> bool {
    res.approval_request_seq != 0 || res.approval_decision_seq != 0
}

fn continuation(id: &str, call_id: &str, r: &LogRecord) -> LogError {
    debug_assert!(!id.is_empty(), "the walk refuses id-less evidence first");
    LogError::invalid(format!(
        "execution {id} continued past an unresolved approval call {call_id} (seq {}, {})",
        r.seq,
        kind_name(kind(r))
    ))
}

fn bad(id: &str, r: &LogRecord, what: &str) -> LogError {
    debug_assert!(!id.is_empty(), "the walk refuses id-less evidence first");
    LogError::invalid(format!("execution {id} seq {}: {what}", r.seq))
}

fn diverged(id: &str, r: &LogRecord, what: &str) -> LogError {
    debug_assert!(!id.is_empty(), "the walk refuses id-less evidence first");
    LogError::diverged(format!(
        "approval evidence of execution {id} seq {}: {what}",
        r.seq
    ))
}

/// Walks one gated execution, appending a state per gated call. While a
/// gated call is open (no receipt yet) only its request, its decision, its
/// receipt and audit ERRORs may follow: anything else means some writer ran
/// past a gate that should have parked the execution.
pub(super) fn walk_gated_group(
    id: &str,
    members: &[&LogRecord],
    states: &mut Vec<ApprovalState>,
) -> Result<(), LogError> {
    if id.is_empty() {
        return Err(LogError::invalid("approval evidence has no execution_id"));
    }
    let first_state = states.len();
    let mut open: Option<usize> = None;
    let mut completed = false;
    let mut input_records = 0usize;
    let mut missing_payload = false;
    let mut marker: Option<ExecutionStart> = None;
    // Call ids seen in this execution, and whether that call was gated.
    let mut calls: BTreeMap<&str, bool> = BTreeMap::new();

    for (j, &r) in members.iter().enumerate() {
        debug_assert!(
            open.is_none_or(|o| (first_state..states.len()).contains(&o)),
            "the open gate is one of this execution's"
        );
        let k = kind(r);
        let ev = event(r);
        let open_state = open.and_then(|o| states.get(o));
        match k {
            EventKind::EventExecutionStart => match ev.and_then(body::execution_start) {
                Some(s) if j == 0 => marker = Some(s.clone()),
                _ => return Err(bad(id, r, "invalid start event")),
            },
            EventKind::EventInput => {
                if let Some(s) = open_state {
                    return Err(continuation(id, &s.call.id, r));
                }
                input_records += 1;
                if ev.and_then(body::message).is_none() {
                    missing_payload = true;
                }
            }
            EventKind::EventToolCall => {
                if let Some(s) = open_state {
                    return Err(continuation(id, &s.call.id, r));
                }
                if let Some(gate) = gate_for_call(id, r, &mut calls, completed, &marker)? {
                    states.push(gate);
                    open = Some(states.len() - 1);
                }
            }
            EventKind::EventApprovalRequest => {
                record_request(id, r, open.and_then(|o| states.get_mut(o)))?;
            }
            EventKind::EventApprovalResult => {
                record_decision(id, r, open.and_then(|o| states.get_mut(o)))?;
            }
            EventKind::EventToolResult => {
                let res = ev.and_then(body::result);
                if let Some(s) = open.and_then(|o| states.get_mut(o)) {
                    check_receipt(id, r, res, s)?;
                    s.receipt = Some(r.clone());
                    open = None;
                } else if let Some(res) = res {
                    let reuses_gate = calls.get(res.id.as_str()) == Some(&true);
                    if reuses_gate || carries_approval_seqs(res) {
                        return Err(bad(id, r, "duplicate or unbound approval receipt"));
                    }
                }
            }
            EventKind::EventEnd => {
                // A Cancel resolves an open gate: it ends the execution
                // with the call never run.
                if let Some(s) = open_state
                    && !ev.is_some_and(crate::events::is_canceled_end)
                {
                    return Err(continuation(id, &s.call.id, r));
                }
                open = None;
                completed = true;
            }
            // Audit only: a failed attempt may be recorded while a gate waits.
            EventKind::EventError => {}
            _ => {
                if let Some(s) = open_state {
                    return Err(continuation(id, &s.call.id, r));
                }
            }
        }
    }

    // Input completeness is enforced only for gated executions, so a
    // malformed ordinary history keeps the "start a new turn" escape.
    check_input_counts(
        id,
        marker.as_ref(),
        input_records,
        missing_payload,
        completed,
    )?;
    for s in states.iter_mut().skip(first_state) {
        s.completed = completed;
    }
    debug_assert!(
        states
            .iter()
            .skip(first_state)
            .all(|s| s.execution_id == id)
    );
    Ok(())
}

/// A TOOL_CALL of a gated execution: `None` for an ordinary call, the new
/// gate for a gated one. Call ids are unique once a gate is involved, and
/// a gated call needs an id and an idempotency key and an open execution.
fn gate_for_call<'a>(
    id: &str,
    r: &'a LogRecord,
    calls: &mut BTreeMap<&'a str, bool>,
    completed: bool,
    marker: &Option<ExecutionStart>,
) -> Result<Option<ApprovalState>, LogError> {
    let Some(call) = tool_call(r) else {
        return Err(bad(id, r, "tool call without payload"));
    };
    let gated = is_gated(call);
    if calls
        .get(call.id.as_str())
        .is_some_and(|&prev| prev || gated)
    {
        return Err(bad(id, r, "duplicate approval call identity"));
    }
    if !gated {
        calls.insert(call.id.as_str(), false);
        return Ok(None);
    }
    if completed {
        return Err(continuation(id, &call.id, r));
    }
    if call.id.is_empty() {
        return Err(bad(id, r, "approval call has no id"));
    }
    if call.idempotency_key.is_empty() {
        return Err(LogError::InvalidLogMissingKey(format!(
            "execution {id} seq {}: approval call {}",
            r.seq, call.id
        )));
    }
    // Every committed record has seq >= 1; a scan of records from
    // anywhere (a fuzzer, a tampered import) must say so, not assume it.
    if r.seq <= 0 {
        return Err(bad(id, r, "gated call at a non-positive seq"));
    }
    debug_assert!(
        !calls.contains_key(call.id.as_str()),
        "a gated call id is new to its execution"
    );
    calls.insert(call.id.as_str(), true);
    Ok(Some(ApprovalState::opened(id, r.seq, call, marker.clone())))
}

/// Records an APPROVAL_REQUEST on the open gate `s`: one per gate, for
/// that gate's call.
fn record_request(id: &str, r: &LogRecord, s: Option<&mut ApprovalState>) -> Result<(), LogError> {
    let Some(req) = event(r).and_then(body::approval) else {
        return Err(bad(id, r, "approval request without payload"));
    };
    let Some(s) = s else {
        return Err(bad(id, r, "approval request without an open call"));
    };
    if s.request.is_some() {
        return Err(bad(id, r, "duplicate approval request"));
    }
    if req.tool_call_id != s.call.id {
        return Err(diverged(id, r, "approval request names another call"));
    }
    s.request = Some(r.clone());
    debug_assert!(s.decision.is_none() && s.receipt.is_none());
    Ok(())
}

/// Records an APPROVAL_RESULT on the open gate `s`: one per gate, after its
/// request, naming that call and that request.
fn record_decision(id: &str, r: &LogRecord, s: Option<&mut ApprovalState>) -> Result<(), LogError> {
    let Some(dec) = event(r).and_then(body::approval_result) else {
        return Err(bad(id, r, "approval decision without payload"));
    };
    let Some(s) = s else {
        return Err(bad(id, r, "approval decision without an open call"));
    };
    let Some(request_seq) = s.request_seq() else {
        return Err(bad(id, r, "approval decision without a request"));
    };
    if s.decision.is_some() {
        return Err(bad(id, r, "duplicate approval decision"));
    }
    if dec.tool_call_id != s.call.id {
        return Err(diverged(id, r, "approval decision names another call"));
    }
    if dec.request_seq != request_seq {
        return Err(diverged(id, r, "approval decision names another request"));
    }
    s.decision = Some(r.clone());
    debug_assert!(s.receipt.is_none(), "a receipt closes the gate");
    Ok(())
}

/// A receipt must answer exactly the open gate's call, request and decision,
/// with a status the decision allows.
fn check_receipt(
    id: &str,
    r: &LogRecord,
    res: Option<&ToolResult>,
    s: &ApprovalState,
) -> Result<(), LogError> {
    debug_assert!(s.receipt.is_none(), "a receipt closes its gate");
    let Some(res) = res else {
        return Err(bad(id, r, "approval receipt without payload"));
    };
    let (Some(request_seq), Some(decision_seq), Some(decision)) =
        (s.request_seq(), s.decision_seq(), s.decision_body())
    else {
        return Err(bad(id, r, "receipt lacks request or decision"));
    };
    if res.id != s.call.id {
        return Err(diverged(id, r, "approval receipt names another call"));
    }
    if res.approval_request_seq != request_seq || res.approval_decision_seq != decision_seq {
        return Err(diverged(
            id,
            r,
            "approval receipt names another request or decision",
        ));
    }
    if !receipt_matches_decision(decision, res) {
        return Err(diverged(
            id,
            r,
            "approval receipt status contradicts the decision",
        ));
    }
    Ok(())
}

/// The receipt status rule: a denial is an error coded APPROVAL_DENIED; an
/// approval is either a success with no code or an error coded
/// EXECUTOR_ERROR (the executor ran and failed).
pub fn receipt_matches_decision(decision: &ApprovalResult, receipt: &ToolResult) -> bool {
    let Ok(code) = Code::try_from(receipt.code) else {
        return false;
    };
    if decision.approved {
        matches!(
            (receipt.is_error, code),
            (false, Code::Unspecified) | (true, Code::ExecutorError)
        )
    } else {
        receipt.is_error && code == Code::ApprovalDenied
    }
}

fn bind(mut result: ToolResult, call_id: &str, request_seq: i64, decision_seq: i64) -> ToolResult {
    result.id = call_id.to_owned();
    result.approval_request_seq = request_seq;
    result.approval_decision_seq = decision_seq;
    result
}

/// The receipt the host writes for a denied gate; the executor never runs.
pub fn denial_receipt(call_id: &str, request_seq: i64, decision_seq: i64) -> ToolResult {
    let result = ToolResult {
        is_error: true,
        error: DENIED_TEXT.to_owned(),
        content: vec![Part {
            part: Some(part::Part::Text(TextPart {
                text: DENIED_TEXT.to_owned(),
            })),
        }],
        code: Code::ApprovalDenied as i32,
        ..ToolResult::default()
    };
    let receipt = bind(result, call_id, request_seq, decision_seq);
    debug_assert!(receipt_matches_decision(
        &ApprovalResult::default(),
        &receipt
    ));
    receipt
}

/// The receipt the host writes after running an approved gate. An executor
/// failure is a receipt too (coded EXECUTOR_ERROR), never a host error. The
/// call id and the approval seqs come from the scanned evidence, whatever
/// the executor put there.
pub fn executor_receipt(
    call_id: &str,
    request_seq: i64,
    decision_seq: i64,
    outcome: Result<ToolResult, String>,
) -> ToolResult {
    let mut result = match outcome {
        Ok(r) => r,
        Err(text) => ToolResult {
            is_error: true,
            error: text,
            ..ToolResult::default()
        },
    };
    result.code = if result.is_error {
        Code::ExecutorError as i32
    } else {
        Code::Unspecified as i32
    };
    let receipt = bind(result, call_id, request_seq, decision_seq);
    debug_assert!(
        receipt_matches_decision(
            &ApprovalResult {
                approved: true,
                ..ApprovalResult::default()
            },
            &receipt
        ),
        "an executor receipt is what an approval allows"
    );
    receipt
}
