//! The journal seen as a list of executions (turns).
//!
//! Replay, Resume and the read-only "which harness would resume this" query
//! all start from the same projection: an optional legacy execution for an
//! id-less v0.1.2 prefix, then one execution per execution id in the order
//! ids first appear. Everything the host needs to rebuild a harness `Start`
//! (inputs, recorded start marker, History boundary) and to serve recorded
//! effects (the effect stream) comes from here.

use std::collections::BTreeMap;

use agentsessions_proto::v1::{EventKind, ExecutionStart, LogRecord, Message};

use super::approval;
use super::inputs::check_input_counts;
use super::legacy::legacy_prefix;
use super::records::{event, exec_id, is_fork, is_gated, kind, kind_name, tool_call};
use crate::error::LogError;
use crate::events::body;

/// How an execution was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecKind {
    /// Id-bearing records opened by an EXECUTION_START.
    Modern,
    /// Id-bearing records without a start marker (written before markers
    /// existed): defaults for config and cursor, no completeness check.
    Markerless,
    /// Id-less v0.1.2 records.
    Legacy,
}

/// One execution as recorded in the journal. Indexes point into the records
/// slice the projection was computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The recorded execution id; "" for legacy.
    pub id: String,
    pub kind: ExecKind,
    /// History handed to a resumed harness is `records[..start]`: the first
    /// record of the group (modern), or the last INPUT (legacy resume).
    pub start: usize,
    /// History for replay is `records[..history_end]`. Legacy replay hands
    /// over the whole trimmed prefix, turn included, as the released host
    /// did; for every other execution this equals `start`.
    pub history_end: usize,
    /// A copy of the recorded start marker.
    pub marker: Option<ExecutionStart>,
    /// Recorded input messages, in order.
    pub inputs: Vec<Message>,
    /// Number of INPUT records, including any without a message.
    pub input_records: usize,
    /// Some INPUT record carried no message.
    pub input_missing_payload: bool,
    /// Indexes of the recorded effects served back on replay and recovery.
    pub stream: Vec<usize>,
    /// The execution has an END (legacy replay projections never do).
    pub completed: bool,
    /// A Cancel ended it: its END says CANCELED, or (a cut between the
    /// marker and the END) a LIFECYCLE{CANCEL} follows its first record
    /// and it is the last execution. Never replayed, never re-driven.
    pub canceled: bool,
    /// Legacy only: the record the compatibility invocation id is derived
    /// from (replay: first INPUT, else first non-lifecycle record; resume:
    /// the last INPUT).
    pub anchor: Option<usize>,
}

impl Execution {
    fn new(id: &str, kind: ExecKind, start: usize) -> Self {
        debug_assert_eq!(
            id.is_empty(),
            kind == ExecKind::Legacy,
            "only a legacy execution has no id"
        );
        Self {
            id: id.to_owned(),
            kind,
            start,
            history_end: start,
            marker: None,
            inputs: Vec::new(),
            input_records: 0,
            input_missing_payload: false,
            stream: Vec::new(),
            completed: false,
            canceled: false,
            anchor: None,
        }
    }

    /// Counts one INPUT record.
    fn add_input(&mut self, message: Option<&Message>) {
        self.input_records += 1;
        match message {
            Some(m) => self.inputs.push(m.clone()),
            None => self.input_missing_payload = true,
        }
        assert!(self.inputs.len() <= self.input_records);
        assert!(
            self.input_missing_payload || self.inputs.len() == self.input_records,
            "every input record without a message is flagged"
        );
    }
}

/// The journal split into executions, in first-seen order.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    pub executions: Vec<Execution>,
    /// Where the id-less legacy prefix ends (0 when there is none).
    pub prefix_end: usize,
}

/// Effects of a modern execution: everything replay serves back in order.
fn is_modern_effect(k: EventKind) -> bool {
    debug_assert_ne!(k, EventKind::EventLifecycle, "markers are skipped before");
    matches!(
        k,
        EventKind::EventModelCall
            | EventKind::EventOutput
            | EventKind::EventToolCall
            | EventKind::EventToolResult
            | EventKind::EventUsage
            | EventKind::EventApprovalRequest
            | EventKind::EventApprovalResult
    )
}

/// Effects of a legacy run. USAGE is left out on purpose: the released host
/// never served it back, and served Usage stays a no-op for legacy turns.
fn is_legacy_effect(k: EventKind) -> bool {
    let legacy = matches!(
        k,
        EventKind::EventModelCall
            | EventKind::EventOutput
            | EventKind::EventToolCall
            | EventKind::EventToolResult
    );
    debug_assert!(
        !legacy || is_modern_effect(k),
        "a legacy effect is served by modern turns too"
    );
    legacy
}

/// Projects the whole journal into executions and validates the input
/// evidence of every completed one. Incomplete executions are not validated
/// here: replay skips them and recovery validates only the one it picks.
pub fn project(records: &[LogRecord]) -> Result<Projection, LogError> {
    let prefix_end = legacy_prefix(records)?;
    assert!(prefix_end <= records.len());
    let mut executions = Vec::new();

    if let Some(legacy) = legacy_replay_projection(records, prefix_end) {
        executions.push(legacy);
    }

    // First-seen order is what decides which execution is "the latest", so
    // the map only indexes into the ordered vector.
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    let mut last_cancel = None;
    for (i, r) in records.iter().enumerate().skip(prefix_end) {
        let k = kind(r);
        if k == EventKind::EventLifecycle {
            if event(r).is_some_and(crate::events::is_cancel_marker) {
                last_cancel = Some(i);
            }
            continue;
        }
        let id = exec_id(r);
        if id.is_empty() {
            return Err(LogError::invalid(format!(
                "event {} ({}) has no execution_id",
                i + 1,
                kind_name(k)
            )));
        }
        let slot = *by_id.entry(id).or_insert_with(|| {
            executions.push(Execution::new(id, ExecKind::Markerless, i));
            executions.len() - 1
        });
        let Some(e) = executions.get_mut(slot) else {
            continue;
        };
        debug_assert_eq!(e.id, id, "the map indexes the execution of its id");
        let ev = event(r);
        match k {
            EventKind::EventExecutionStart => {
                let start = ev.and_then(body::execution_start);
                match start {
                    Some(s) if i == e.start => {
                        e.marker = Some(s.clone());
                        e.kind = ExecKind::Modern;
                    }
                    _ => {
                        return Err(LogError::invalid(format!(
                            "invalid start event {} in execution {}",
                            i + 1,
                            e.id
                        )));
                    }
                }
            }
            EventKind::EventInput => e.add_input(ev.and_then(body::message)),
            EventKind::EventEnd => {
                e.completed = true;
                e.canceled = ev.is_some_and(crate::events::is_canceled_end);
            }
            k if is_modern_effect(k) => e.stream.push(i),
            // ERROR is an audit record and unknown kinds carry nothing to
            // serve; neither ends nor feeds the execution.
            _ => {}
        }
    }

    // A Cancel marker names no execution: it cancels the latest one.
    if let (Some(at), Some(last)) = (last_cancel, executions.last_mut())
        && !last.completed
        && at > last.start
    {
        last.canceled = true;
    }
    debug_assert!(
        executions.iter().all(|e| e.start < records.len()
            && e.stream.windows(2).all(|w| w[0] < w[1])
            && e.stream
                .iter()
                .all(|i| (e.start..records.len()).contains(i))),
        "an execution's effects follow its start, in journal order"
    );
    debug_assert!(
        executions
            .iter()
            .skip(1)
            .all(|e| e.kind != ExecKind::Legacy),
        "only the first execution is legacy"
    );
    for e in executions.iter().filter(|e| e.completed) {
        validate_inputs(e)?;
    }
    Ok(Projection {
        executions,
        prefix_end,
    })
}

/// The single whole-log legacy execution that replay runs, if any.
///
/// When modern turns follow, only the part up to the last END is replayed
/// (an abandoned tail was superseded by the next modern turn); a pure
/// legacy journal replays whole, finished or not.
fn legacy_replay_projection(records: &[LogRecord], prefix_end: usize) -> Option<Execution> {
    let prefix = records.get(..prefix_end)?;
    let replay_end = if prefix_end < records.len() {
        prefix
            .iter()
            .rposition(|r| kind(r) == EventKind::EventEnd)
            .map_or(0, |p| p + 1)
    } else {
        prefix_end
    };
    if replay_end == 0 {
        return None;
    }
    assert!(replay_end <= prefix_end);
    let mut e = Execution::new("", ExecKind::Legacy, 0);
    e.history_end = replay_end;
    let mut first_input = None;
    let mut first_record = None;
    for (i, r) in prefix.iter().enumerate().take(replay_end) {
        let k = kind(r);
        if k == EventKind::EventLifecycle {
            continue;
        }
        first_record.get_or_insert(i);
        if k == EventKind::EventInput {
            first_input.get_or_insert(i);
            e.add_input(event(r).and_then(body::message));
        } else if is_legacy_effect(k) {
            e.stream.push(i);
        }
    }
    e.anchor = first_input.or(first_record);
    debug_assert!(
        e.anchor.is_some(),
        "a replayed prefix holds a legacy record (at least its END)"
    );
    Some(e)
}

/// The legacy turn recovery would continue: v0.1.2's "last INPUT" rule.
/// `None` when there is no INPUT, or an END or ERROR already follows the
/// last one (an id-less ERROR finishes a legacy turn).
fn legacy_resume_projection(records: &[LogRecord], prefix_end: usize) -> Option<Execution> {
    let prefix = records.get(..prefix_end)?;
    let last_input = prefix
        .iter()
        .rposition(|r| kind(r) == EventKind::EventInput)?;
    let tail = prefix.get(last_input + 1..)?;
    if tail
        .iter()
        .any(|r| matches!(kind(r), EventKind::EventEnd | EventKind::EventError))
    {
        return None;
    }
    let mut e = Execution::new("", ExecKind::Legacy, last_input);
    e.anchor = Some(last_input);
    e.add_input(
        prefix
            .get(last_input)
            .and_then(event)
            .and_then(body::message),
    );
    e.stream = tail
        .iter()
        .enumerate()
        .filter(|(_, r)| is_legacy_effect(kind(r)))
        .map(|(j, _)| last_input + 1 + j)
        .collect();
    assert_eq!(
        e.input_records, 1,
        "a legacy turn resumes from its last INPUT"
    );
    debug_assert!(e.stream.iter().all(|&i| last_input < i && i < prefix_end));
    Some(e)
}

/// The executions replay runs: every completed id-bearing execution and the
/// legacy replay projection, in first-seen order. Incomplete executions,
/// malformed or not, are left out, and so are canceled ones: their harness
/// was stopped mid-run, so a re-run would ask for effects never recorded.
pub fn replay_selection(p: &Projection) -> Vec<&Execution> {
    debug_assert!(
        p.executions
            .iter()
            .skip(1)
            .all(|e| e.kind != ExecKind::Legacy),
        "only the first execution is legacy"
    );
    p.executions
        .iter()
        .filter(|e| (e.kind == ExecKind::Legacy || e.completed) && !e.canceled)
        .collect()
}

/// The execution recovery would continue, or `None` when there is nothing to
/// do. Only the last execution in first-seen order is a candidate, so a late
/// END written by an older execution cannot redirect recovery.
pub fn select_pending(
    records: &[LogRecord],
    p: &Projection,
) -> Result<Option<Execution>, LogError> {
    let Some(last) = p.executions.last() else {
        return Ok(None);
    };
    if last.completed && !(last.canceled && crate::planted!(RedriveCanceled)) {
        return Ok(None);
    }
    validate_inputs(last)?;
    if last.kind == ExecKind::Legacy {
        return Ok(legacy_resume_projection(records, p.prefix_end));
    }
    assert!(!last.id.is_empty(), "an id-bearing execution");
    Ok(Some(last.clone()))
}

/// Checks that a marked execution recorded exactly the inputs its start
/// marker announced. Markerless and legacy executions have nothing to check
/// against. A short, unfinished invocation is told apart (re-Exec instead of
/// Resume); every other mismatch is plain corruption.
pub fn validate_inputs(e: &Execution) -> Result<(), LogError> {
    assert!(e.inputs.len() <= e.input_records);
    check_input_counts(
        &e.id,
        e.marker.as_ref(),
        e.input_records,
        e.input_missing_payload,
        e.completed,
    )
}

/// A copy of the start marker of the execution recovery would continue.
/// `None` when nothing is pending or the pending turn has no marker (legacy
/// or markerless). Evidence that would make recovery fail fails here too, in
/// the same order: projection, approval scan, pending selection.
pub fn resume_invocation(records: &[LogRecord]) -> Result<Option<ExecutionStart>, LogError> {
    let p = project(records)?;
    approval::scan(records, 0)?;
    Ok(select_pending(records, &p)?.and_then(|e| e.marker))
}

/// Refuses to recover an execution that a fork copied mid-tool-call.
///
/// A TOOL_CALL with no TOOL_RESULT directly answering it is an unresolved
/// intent. If such an intent was copied into this session by a fork, the
/// effect may already have run in the parent; re-driving it here would run
/// it twice under another session's scope. Approval records are transparent
/// (they neither resolve nor clear), so a gated receipt written after the
/// fork still resolves its call.
pub fn check_inherited_intent(records: &[LogRecord], e: &Execution) -> Result<(), LogError> {
    let mut unresolved: i64 = 0;
    let mut inherited: i64 = 0;
    // The call a TOOL_RESULT may still answer, and whether it predates the
    // latest fork marker.
    let mut preceding: Option<(String, bool)> = None;
    for r in records.iter().skip(e.start) {
        let k = kind(r);
        if k == EventKind::EventLifecycle {
            if is_fork(r) {
                inherited = unresolved;
                if let Some((_, pre_fork)) = preceding.as_mut() {
                    *pre_fork = true;
                }
            }
            continue;
        }
        if exec_id(r) != e.id {
            continue;
        }
        match k {
            EventKind::EventToolCall => {
                unresolved += 1;
                let id = tool_call(r).map(|c| c.id.clone()).unwrap_or_default();
                preceding = Some((id, false));
            }
            EventKind::EventToolResult => {
                let answered = event(r).and_then(body::result).map(|res| res.id.as_str());
                // Any result ends adjacency; only a matching one resolves.
                match (preceding.take(), answered) {
                    (Some((call_id, pre_fork)), Some(res_id)) if call_id == res_id => {
                        unresolved -= 1;
                        if pre_fork {
                            inherited -= 1;
                        }
                    }
                    _ => {}
                }
            }
            EventKind::EventModelCall | EventKind::EventOutput | EventKind::EventUsage => {
                preceding = None;
            }
            _ => {}
        }
    }
    // Every call a fork copied is one the count held then, and each is
    // resolved at most once.
    debug_assert!(
        (0..=unresolved).contains(&inherited),
        "inherited intents are a part of the unresolved ones"
    );
    if inherited > 0 {
        return Err(LogError::InheritedToolIntent(format!(
            ": execution {}",
            e.id
        )));
    }
    Ok(())
}

/// Whether running `selected` requires asking the harness to describe
/// itself: some execution pinned a harness name or version, or holds a gated
/// call (which needs a stateless-replay harness). Unpinned legacy and
/// markerless turns never add a Describe dependency.
pub fn needs_describe(selected: &[&Execution], records: &[LogRecord]) -> bool {
    debug_assert!(
        selected
            .iter()
            .all(|e| e.stream.iter().all(|&i| i < records.len())),
        "the executions were projected from these records"
    );
    selected.iter().any(|e| {
        let pinned = e
            .marker
            .as_ref()
            .is_some_and(|m| !m.harness.is_empty() || !m.harness_version.is_empty());
        pinned
            || e.stream
                .iter()
                .filter_map(|&i| records.get(i))
                .filter(|r| kind(r) == EventKind::EventToolCall)
                .filter_map(tool_call)
                .any(is_gated)
    })
}
