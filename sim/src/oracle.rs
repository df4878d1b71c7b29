//! The invariant oracle: one set of safety rules for every simulator.
//!
//! The oracle never drives anything. A runner reports what it observes —
//! fences minted, appends issued and committed, records acknowledged to a
//! client, tool and model calls, frames answering a harness, crashes — and
//! hands it a [`JournalView`] of the **durable** journal when a rule needs
//! one. The exhaustive explorer in this crate feeds it from an in-memory
//! world; a madsim runner of the real shells can feed it the same calls
//! from its store and its fake executor, model and harness.
//!
//! The rules are checked against the oracle's own reading of the journal
//! (record kinds, ids and seqs), not through the machine's projections,
//! wherever the machine's answer is what is being checked.

use std::collections::{BTreeMap, BTreeSet};

use agentsessions_machine::events::{self, body};
use agentsessions_machine::journal::{Journal, approval, executions, legacy, projection};
use agentsessions_machine::vocab::{AppendError, ReplayReport, SessionRow};
use agentsessions_proto::v1::{
    ComputeState, EventKind, LogRecord, Mediation, ModelCall, Session, lifecycle,
};

/// Read access to a durable journal.
pub trait JournalView {
    /// Every session with a row or records.
    fn sessions(&self) -> Vec<String>;
    /// The durable records of `session`, in seq order.
    fn records(&self, session: &str) -> std::borrow::Cow<'_, [LogRecord]>;
    /// The durable row of `session`.
    fn row(&self, session: &str) -> Option<SessionRow>;
    /// The durable fence of `session`.
    fn fence(&self, session: &str) -> i64;
    /// Uids with a durable tombstone (deleted sessions).
    fn deleted(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Which rule was broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// The chain does not verify, or seqs have a gap.
    Chain,
    /// A record's fence is lower than an earlier record's.
    FenceMonotonic,
    /// A record committed under a fence older than the stored one.
    SupersededFence,
    /// An append under a fence its incarnation never minted.
    FenceProvenance,
    /// A record committed at a head other than the writer's expected one.
    Cas,
    /// A record acknowledged to a client is gone after a crash.
    AckLost,
    /// A record acknowledged to a client was not durable yet.
    AckBeforeDurable,
    /// An effect (tool, model, answer to the harness) ran before its record
    /// was durable.
    RecordBeforeEffect,
    /// A tool ran twice for one key, or again after its result was durable.
    DuplicateExecution,
    /// A gated tool ran without a committed approving decision.
    Approval,
    /// A denied gate ran its tool.
    Denial,
    /// A gate inherited through a fork was decided or executed.
    Inherited,
    /// Replay invoked the model or a tool.
    ReplayCalls,
    /// Replay did not reproduce the journal.
    ReplayMismatch,
    /// A harness got a model answer for a request whose input hash differs
    /// from the recorded one (I0).
    InputHash,
    /// A fork child's prefix differs from its parent's.
    ForkPrefix,
    /// A rendered projection differs from a recomputation.
    Projection,
    /// A journal's summary, as a host was handed it, differs from a full
    /// rescan of its records.
    Summary,
    /// The approval scan or the execution projection rejects the journal.
    JournalInvalid,
    /// Something of an execution ran, or was written, after its Cancel.
    Canceled,
    /// A deleted session left a row or records behind.
    Deleted,
    /// A scenario could not reach its goal.
    Liveness,
    /// A scenario step got an answer it must not get.
    Expectation,
    /// A forbidden call was not refused, or left a trace (a record, row
    /// or decision naming its principal).
    Authorization,
    /// The machine panicked.
    Panic,
}

/// No row or record of `view` names a principal starting with `prefix`:
/// the calls of such principals were all refused before they could write.
pub fn check_no_trace(view: &dyn JournalView, prefix: &str) -> Check {
    let named = |who: Option<&agentsessions_proto::v1::IdentityRef>| {
        who.is_some_and(|w| w.principal.starts_with(prefix))
    };
    for sid in view.sessions() {
        if named(view.row(&sid).and_then(|r| r.identity).as_ref()) {
            let detail = format!("{sid}: created by {prefix:?}");
            return Err(violation(Rule::Authorization, detail));
        }
        for r in view.records(&sid).iter() {
            if named(r.event.as_ref().and_then(|e| e.actor.as_ref())) {
                let detail = format!("{sid}: seq {} written by {prefix:?}", r.seq);
                return Err(violation(Rule::Authorization, detail));
            }
        }
    }
    Ok(())
}

/// A broken rule and what broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// Details for the report.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.rule, self.detail)
    }
}

/// Shorthand for a rule check.
pub type Check = Result<(), Violation>;

/// Builds a violation.
pub fn violation(rule: Rule, detail: impl Into<String>) -> Violation {
    Violation {
        rule,
        detail: detail.into(),
    }
}

fn ensure(ok: bool, rule: Rule, detail: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(violation(rule, detail()))
    }
}

fn kind(r: &LogRecord) -> EventKind {
    r.event
        .as_ref()
        .map_or(EventKind::Unspecified, events::kind_of)
}

fn exec_of(r: &LogRecord) -> &str {
    r.event.as_ref().map_or("", |e| e.execution_id.as_str())
}

/// Seq of the last LIFECYCLE FORK marker (0 when none).
fn last_fork(records: &[LogRecord]) -> i64 {
    records
        .iter()
        .rev()
        .find(|r| is_fork_marker(r))
        .map_or(0, |r| r.seq)
}

fn is_fork_marker(r: &LogRecord) -> bool {
    r.event
        .as_ref()
        .and_then(body::lifecycle)
        .is_some_and(|l| l.kind == lifecycle::Kind::LifecycleFork as i32)
}

/// The compute state a row must show after `records`.
pub fn compute_state_of(records: &[LogRecord]) -> ComputeState {
    records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .fold(ComputeState::ComputeNone, projection::compute_state_after)
}

/// What a harness replay must report: the text of every OUTPUT record in
/// the streams of the executions replay selects, in order.
pub fn expected_replay_outputs(records: &[LogRecord]) -> Result<Vec<String>, String> {
    let p = executions::project(records).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for e in executions::replay_selection(&p) {
        for &i in &e.stream {
            if let Some(m) = records[i].event.as_ref().and_then(body::message)
                && kind(&records[i]) == EventKind::EventOutput
            {
                out.push(events::message_text(m));
            }
        }
    }
    Ok(out)
}

/// The rules' memory across one run (crashes included). Cheap to clone, so
/// an explorer can checkpoint it with the rest of the world.
#[derive(Debug, Clone, Default)]
pub struct Oracle {
    /// Fences each incarnation minted, per session.
    minted: BTreeMap<(u64, String), BTreeSet<i64>>,
    /// Records acknowledged to a client: (session, seq) → content hash.
    acked: BTreeMap<(String, i64), String>,
    /// Executor effects per (session, idempotency key).
    effects: BTreeMap<(String, String), u32>,
    /// The highest seq each incarnation has seen of each session (through
    /// reads and its own appends).
    seen: BTreeMap<(u64, String), i64>,
    /// True while a replay is being checked: nothing may be invoked.
    replaying: bool,
    /// "Sometimes" coverage: how often each interesting thing happened.
    pub coverage: BTreeMap<&'static str, u64>,
}

impl Oracle {
    /// Counts a coverage event.
    pub fn note(&mut self, what: &'static str) {
        *self.coverage.entry(what).or_default() += 1;
    }

    /// Marks the start or end of a replay check.
    pub fn set_replaying(&mut self, on: bool) {
        self.replaying = on;
    }

    /// Incarnation `inc` minted `fence` for `session`.
    pub fn on_mint(&mut self, inc: u64, session: &str, fence: i64) {
        self.minted
            .entry((inc, session.to_owned()))
            .or_default()
            .insert(fence);
    }

    /// Incarnation `inc` asks to append under `fence`: every writer fences
    /// first, so the fence must be one it minted for this session.
    pub fn on_append(&mut self, inc: u64, session: &str, fence: i64) -> Check {
        ensure(
            self.minted
                .get(&(inc, session.to_owned()))
                .is_some_and(|f| f.contains(&fence)),
            Rule::FenceProvenance,
            || {
                format!(
                    "incarnation {inc} appends to {session} under fence {fence} it never minted"
                )
            },
        )
    }

    /// The store answered an append made at `expected` under `fence` while
    /// its stored fence was `stored`.
    pub fn on_commit(
        &mut self,
        session: &str,
        expected: i64,
        fence: i64,
        stored: i64,
        result: &Result<Vec<LogRecord>, AppendError>,
    ) -> Check {
        let records = match result {
            Ok(r) => r,
            Err(AppendError::Fenced { .. }) => {
                self.note("append fenced");
                return Ok(());
            }
            Err(AppendError::Conflict { .. }) => {
                self.note("append conflict");
                return Ok(());
            }
            Err(AppendError::Failed(_)) => return Ok(()),
            Err(AppendError::Deleted) => {
                self.note("append to a deleted session");
                return Ok(());
            }
        };
        let first = records.first().map_or(expected + 1, |r| r.seq);
        ensure(first == expected + 1, Rule::Cas, || {
            format!("{session}: append expecting head {expected} committed at seq {first}")
        })?;
        ensure(fence >= stored, Rule::SupersededFence, || {
            format!("{session}: seq {first} committed under fence {fence} < stored {stored}")
        })
    }

    /// A client was shown `record` of `session` (a stream frame or a reply).
    pub fn on_ack(&mut self, view: &dyn JournalView, session: &str, record: &LogRecord) -> Check {
        // A record streamed after its session was deleted had committed
        // (the delete's CAS saw it); there is nothing left to compare.
        if view.deleted().iter().any(|d| d == session) {
            return Ok(());
        }
        let log = view.records(session);
        let durable = log.get(record.seq as usize - 1);
        ensure(
            durable.is_some_and(|d| d.content_hash == record.content_hash),
            Rule::AckBeforeDurable,
            || {
                format!(
                    "{session}: seq {} acknowledged before it was durable",
                    record.seq
                )
            },
        )?;
        self.acked.insert(
            (session.to_owned(), record.seq),
            record.content_hash.clone(),
        );
        Ok(())
    }

    /// After a crash: every acknowledged record survived, unless a durable
    /// delete removed it on purpose.
    pub fn on_crash(&self, view: &dyn JournalView) -> Check {
        let deleted = view.deleted();
        for ((session, seq), hash) in &self.acked {
            if deleted.contains(session) {
                continue;
            }
            let log = view.records(session);
            let kept = log.get(*seq as usize - 1);
            ensure(
                kept.is_some_and(|r| &r.content_hash == hash),
                Rule::AckLost,
                || format!("{session}: acknowledged seq {seq} lost in a crash"),
            )?;
        }
        Ok(())
    }

    /// Incarnation `inc` has seen `session` through seq `head` (a read or
    /// one of its own appends was delivered to it).
    pub fn on_observed(&mut self, inc: u64, session: &str, head: i64) {
        let seen = self.seen.entry((inc, session.to_owned())).or_default();
        *seen = (*seen).max(head);
    }

    /// Incarnation `inc` is about to have the executor run `intent` of
    /// `session`.
    pub fn on_execute_tool(
        &mut self,
        view: &dyn JournalView,
        inc: u64,
        session: &str,
        intent: &LogRecord,
        call: &agentsessions_proto::v1::ToolCall,
    ) -> Check {
        ensure(!self.replaying, Rule::ReplayCalls, || {
            format!("{session}: replay executed tool {}", call.id)
        })?;
        self.check_not_canceled(
            view,
            inc,
            session,
            exec_of(intent),
            &format!("tool {}", call.id),
        )?;
        let records = &*view.records(session);
        let stored = records.get(intent.seq as usize - 1);
        ensure(
            stored.is_some_and(|r| {
                r.content_hash == intent.content_hash && !r.content_hash.is_empty()
            }),
            Rule::RecordBeforeEffect,
            || {
                format!(
                    "{session}: tool {} ran before its TOOL_CALL (seq {}) was durable",
                    call.id, intent.seq
                )
            },
        )?;
        let exec = exec_of(intent);
        let later = records[intent.seq as usize..]
            .iter()
            .filter(|r| exec_of(r) == exec);
        for r in later {
            let ev = r.event.as_ref().expect("stored records carry events");
            if body::tool(ev).is_some_and(|t| t.id == call.id) {
                break; // a later call reusing the id owns what follows
            }
            // A racing recovery may re-run a tool whose result another
            // incarnation wrote after it read the journal (the executor
            // dedups by key); running it once its result was seen is a bug.
            let seen = self
                .seen
                .get(&(inc, session.to_owned()))
                .copied()
                .unwrap_or(0);
            ensure(
                !(r.seq <= seen && body::result(ev).is_some_and(|t| t.id == call.id)),
                Rule::DuplicateExecution,
                || {
                    format!(
                        "{session}: tool {} ran again after its result (seq {}) was read",
                        call.id, r.seq
                    )
                },
            )?;
        }
        if intent.fence < view.fence(session) {
            self.note("tool intent re-driven by a later incarnation");
        }
        // The operator's policy gates a call whatever mediation it carries.
        let policed = crate::world::config().tools.verdict(&call.tool)
            == agentsessions_machine::vocab::Verdict::Policy(
                agentsessions_machine::vocab::Policy::Approval,
            );
        if call.mediation != Mediation::RequiresApproval as i32 && !policed {
            return Ok(());
        }
        self.note("approved gate executed");
        self.check_gate(records, session, intent, call)
    }

    /// A gated call may run only on a committed approving decision for the
    /// same execution, call and request, in the session that owns it.
    fn check_gate(
        &mut self,
        records: &[LogRecord],
        session: &str,
        intent: &LogRecord,
        call: &agentsessions_proto::v1::ToolCall,
    ) -> Check {
        let exec = exec_of(intent);
        let fork = last_fork(records);
        ensure(intent.seq > fork, Rule::Inherited, || {
            format!(
                "{session}: gate {} inherited through the fork at seq {fork} was executed",
                call.id
            )
        })?;
        let after = &records[intent.seq as usize..];
        let request = after.iter().find(|r| {
            exec_of(r) == exec
                && r.event
                    .as_ref()
                    .and_then(body::approval)
                    .is_some_and(|a| a.tool_call_id == call.id)
        });
        let Some(request) = request else {
            return Err(violation(
                Rule::Approval,
                format!("{session}: gate {} ran without a durable request", call.id),
            ));
        };
        let decision = after.iter().find_map(|r| {
            let d = r.event.as_ref().and_then(body::approval_result)?;
            (exec_of(r) == exec && d.tool_call_id == call.id && d.request_seq == request.seq)
                .then_some(d)
        });
        let Some(decision) = decision else {
            return Err(violation(
                Rule::Approval,
                format!(
                    "{session}: gate {} ran without a committed decision",
                    call.id
                ),
            ));
        };
        ensure(decision.approved, Rule::Denial, || {
            format!("{session}: denied gate {} was executed", call.id)
        })
    }

    /// The executor performed a real (not deduplicated) effect. Only a
    /// tool that says it is idempotent (`repeatable`) may make one twice.
    pub fn on_tool_effect(&mut self, session: &str, key: &str, repeatable: bool) -> Check {
        let n = self
            .effects
            .entry((session.to_owned(), key.to_owned()))
            .or_default();
        *n += 1;
        ensure(*n <= 1 || repeatable, Rule::DuplicateExecution, || {
            format!("{session}: key {key} executed {n} times")
        })
    }

    /// Records of `exec` in `records`; legacy turns (no record carries the
    /// wire id) fall back to the id-less records.
    /// A Cancel ends an execution for every incarnation that has seen it:
    /// none of them may run its tools or model after that. (One that has
    /// not read it yet is fenced out; its appends fail.)
    fn check_not_canceled(
        &self,
        view: &dyn JournalView,
        inc: u64,
        session: &str,
        exec: &str,
        what: &str,
    ) -> Check {
        let seen = self
            .seen
            .get(&(inc, session.to_owned()))
            .copied()
            .unwrap_or(0);
        match canceled_at(&view.records(session), exec) {
            Some(at) if at <= seen => Err(violation(
                Rule::Canceled,
                format!("{session}: {what} ran for {exec} after its Cancel (seq {at}) was read"),
            )),
            _ => Ok(()),
        }
    }

    fn execution<'a>(records: &'a [LogRecord], exec: &str) -> Vec<&'a LogRecord> {
        let own: Vec<_> = records.iter().filter(|r| exec_of(r) == exec).collect();
        if own.is_empty() {
            records.iter().filter(|r| exec_of(r).is_empty()).collect()
        } else {
            own
        }
    }

    /// Incarnation `inc` is about to invoke the model provider for `exec`:
    /// only for a durable MODEL_CALL, and never for one it has seen
    /// answered (a racing recovery may re-drive a call whose OUTPUT
    /// another incarnation wrote after it read; its own append then fails).
    pub fn on_invoke_model(
        &mut self,
        view: &dyn JournalView,
        inc: u64,
        session: &str,
        exec: &str,
    ) -> Check {
        ensure(!self.replaying, Rule::ReplayCalls, || {
            format!("{session}: replay invoked the model")
        })?;
        self.check_not_canceled(view, inc, session, exec, "the model")?;
        let log = view.records(session);
        let records = Self::execution(&log, exec);
        ensure(
            records.iter().any(|r| kind(r) == EventKind::EventModelCall),
            Rule::RecordBeforeEffect,
            || format!("{session}: model invoked for {exec} without a durable MODEL_CALL"),
        )?;
        let seen = self
            .seen
            .get(&(inc, session.to_owned()))
            .copied()
            .unwrap_or(0);
        let last = records
            .iter()
            .rev()
            .filter(|r| r.seq <= seen)
            .find(|r| kind(r) != EventKind::EventError);
        if last.is_some_and(|r| r.fence < view.fence(session)) {
            self.note("model call re-driven by a later incarnation");
        }
        ensure(
            last.is_some_and(|r| kind(r) == EventKind::EventModelCall),
            Rule::DuplicateExecution,
            || {
                format!(
                    "{session}: model invoked for {exec} although its last model call was seen answered"
                )
            },
        )
    }

    /// A harness got the answer to its `k`-th model request (0-based) of
    /// execution `exec`: the matching MODEL_CALL must record this request's
    /// input hash, and its OUTPUT must be durable.
    pub fn on_model_answer(
        &mut self,
        view: &dyn JournalView,
        session: &str,
        exec: &str,
        k: usize,
        request: &ModelCall,
    ) -> Check {
        let log = view.records(session);
        let records: Vec<&LogRecord> = log
            .iter()
            .filter(|r| exec_of(r) == exec && !exec.is_empty())
            .collect();
        if records.is_empty() {
            // A legacy turn: its records carry no id to match the wire id.
            return Ok(());
        }
        let calls: Vec<usize> = (0..records.len())
            .filter(|&i| kind(records[i]) == EventKind::EventModelCall)
            .collect();
        let Some(&at) = calls.get(k) else {
            return Err(violation(
                Rule::RecordBeforeEffect,
                format!("{session}: answer {k} of {exec} has no durable MODEL_CALL"),
            ));
        };
        let recorded = records[at].event.as_ref().and_then(body::model);
        let want = agentsessions_machine::inputhash::input_hash(
            &agentsessions_machine::inputhash::from_model_call(request),
        )
        .unwrap_or_default();
        ensure(
            recorded.is_some_and(|m| m.input_hash == want),
            Rule::InputHash,
            || {
                format!(
                    "{session}: answer {k} of {exec} served for a request whose input hash differs from seq {}",
                    records[at].seq
                )
            },
        )?;
        let next = records[at + 1..]
            .iter()
            .find(|r| kind(r) != EventKind::EventError);
        ensure(
            next.is_some_and(|r| kind(r) == EventKind::EventOutput),
            Rule::RecordBeforeEffect,
            || format!("{session}: answer {k} of {exec} sent before its OUTPUT was durable"),
        )
    }

    /// A harness got tool result `id` of execution `exec`: it must be durable.
    pub fn on_tool_answer(
        &mut self,
        view: &dyn JournalView,
        session: &str,
        exec: &str,
        id: &str,
    ) -> Check {
        let records = &*view.records(session);
        if !records.iter().any(|r| exec_of(r) == exec) {
            return Ok(()); // legacy
        }
        ensure(
            records.iter().any(|r| {
                exec_of(r) == exec
                    && r.event
                        .as_ref()
                        .and_then(body::result)
                        .is_some_and(|t| t.id == id)
            }),
            Rule::RecordBeforeEffect,
            || format!("{session}: tool result {id} of {exec} sent before it was durable"),
        )
    }

    /// Whole-journal rules, for every session.
    pub fn check_journal(&self, view: &dyn JournalView) -> Check {
        for s in view.deleted() {
            ensure(
                view.row(&s).is_none() && view.records(&s).is_empty(),
                Rule::Deleted,
                || {
                    format!(
                        "{s}: deleted, but {} records and a row ({}) remain",
                        view.records(&s).len(),
                        view.row(&s).is_some()
                    )
                },
            )?;
        }
        for s in view.sessions() {
            self.check_session_journal(view, &s)?;
        }
        Ok(())
    }

    fn check_session_journal(&self, view: &dyn JournalView, s: &str) -> Check {
        let records = &*view.records(s);
        agentsessions_machine::chain::verify(records)
            .map_err(|e| violation(Rule::Chain, format!("{s}: {e}")))?;
        for (i, r) in records.iter().enumerate() {
            ensure(r.seq == i as i64 + 1, Rule::Chain, || {
                format!("{s}: seq {} at position {}", r.seq, i + 1)
            })?;
            // Fences are a session's own: a fork child's records before its
            // FORK marker are its parent's, under the parent's fences, and
            // its own begin again at its first mint.
            if i > 0 && !is_fork_marker(r) {
                ensure(
                    r.fence >= records[i - 1].fence,
                    Rule::FenceMonotonic,
                    || {
                        format!(
                            "{s}: seq {} has fence {} after {}",
                            r.seq,
                            r.fence,
                            records[i - 1].fence
                        )
                    },
                )?;
            }
        }
        check_nothing_after_cancel(s, records)?;
        approval::scan(records, 0)
            .map_err(|e| violation(Rule::JournalInvalid, format!("{s}: approval scan: {e}")))?;
        executions::project(records)
            .map_err(|e| violation(Rule::JournalInvalid, format!("{s}: projection: {e}")))?;
        self.check_inherited_decisions(s, records)?;
        if let Some(row) = view.row(s) {
            let head = records.last().map_or(0, |r| r.seq);
            ensure(row.last_seq == head, Rule::Projection, || {
                format!("{s}: row last_seq {} but head {head}", row.last_seq)
            })?;
            let want = compute_state_of(records);
            ensure(row.compute_state == want, Rule::Projection, || {
                format!(
                    "{s}: row compute_state {:?}, journal says {want:?}",
                    row.compute_state
                )
            })?;
            if !row.parent_uid.is_empty() {
                self.check_fork_prefix(view, s, &row)?;
            }
        }
        Ok(())
    }

    /// No decision after the last fork marker for a gate copied before it.
    fn check_inherited_decisions(&self, s: &str, records: &[LogRecord]) -> Check {
        let fork = last_fork(records);
        if fork == 0 {
            return Ok(());
        }
        for r in &records[fork as usize..] {
            let Some(d) = r.event.as_ref().and_then(body::approval_result) else {
                continue;
            };
            let inherited = records[..fork as usize].iter().any(|c| {
                exec_of(c) == exec_of(r)
                    && c.event
                        .as_ref()
                        .and_then(body::tool)
                        .is_some_and(|t| t.id == d.tool_call_id)
            });
            ensure(!inherited, Rule::Inherited, || {
                format!(
                    "{s}: seq {} decides gate {} inherited through the fork at {fork}",
                    r.seq, d.tool_call_id
                )
            })?;
        }
        Ok(())
    }

    fn check_fork_prefix(&self, view: &dyn JournalView, s: &str, row: &SessionRow) -> Check {
        // A child outlives its deleted parent on its own copy of the
        // prefix; its chain was verified above.
        if view.deleted().contains(&row.parent_uid) {
            return Ok(());
        }
        let child = &*view.records(s);
        let parent = &*view.records(&row.parent_uid);
        let n = row.fork_seq as usize;
        ensure(
            child.len() > n && parent.len() >= n,
            Rule::ForkPrefix,
            || {
                format!(
                    "{s}: fork at {n} but child has {} and parent {} records",
                    child.len(),
                    parent.len()
                )
            },
        )?;
        for (c, p) in child[..n].iter().zip(&parent[..n]) {
            ensure(c.content_hash == p.content_hash, Rule::ForkPrefix, || {
                format!("{s}: seq {} differs from parent {}", c.seq, row.parent_uid)
            })?;
        }
        Ok(())
    }

    /// A journal handed to a host summarizes its own records: every answer
    /// of the summary equals the full projection over them.
    pub fn check_summary(&self, session: &str, journal: &Journal) -> Check {
        let records = journal.to_vec();
        let s = journal.summary();
        let head = records.last().map_or(0, |r| r.seq);
        let differs = |what: &str, got: String, want: String| {
            violation(
                Rule::Summary,
                format!("{session}: summary {what} {got}, a rescan says {want}"),
            )
        };
        if s.head() != head {
            return Err(differs("head", s.head().to_string(), head.to_string()));
        }
        // Compared as text: a NaN in a call's args is unequal to itself.
        let scan = approval::scan(&records, 0);
        let (got, want) = (format!("{:?}", s.approval_scan()), format!("{scan:?}"));
        if got != want {
            return Err(differs("approval scan", got, want));
        }
        let selected = scan.map(|sc| sc.selected().cloned());
        let (got, want) = (format!("{:?}", s.selected_gate()), format!("{selected:?}"));
        if got != want {
            return Err(differs("selected gate", got, want));
        }
        let (got, want) = (s.legacy_prefix(), legacy::legacy_prefix(&records));
        if got != want {
            return Err(differs(
                "legacy prefix",
                format!("{got:?}"),
                format!("{want:?}"),
            ));
        }
        let (got, want) = (s.status(), projection::session_status(&records, head));
        if got != want {
            return Err(differs("status", format!("{got:?}"), format!("{want:?}")));
        }
        Ok(())
    }

    /// A rendered session equals a recomputation from the durable journal.
    pub fn check_session(&self, view: &dyn JournalView, rendered: &Session) -> Check {
        let uid = rendered.metadata.as_ref().map_or("", |m| m.uid.as_str());
        let records = &*view.records(uid);
        let head = records.last().map_or(0, |r| r.seq);
        ensure(rendered.last_seq == head, Rule::Projection, || {
            format!(
                "{uid}: rendered last_seq {} but head {head}",
                rendered.last_seq
            )
        })?;
        let status = projection::session_status(records, head)
            .map_err(|e| violation(Rule::JournalInvalid, format!("{uid}: {e}")))?;
        ensure(
            rendered.exec_state == status.exec_state as i32
                && rendered.pending_approval == status.pending_approval,
            Rule::Projection,
            || {
                format!(
                    "{uid}: rendered exec_state {} / pending {:?}, journal says {:?}",
                    rendered.exec_state, rendered.pending_approval, status
                )
            },
        )?;
        let want = compute_state_of(records) as i32;
        ensure(rendered.compute_state == want, Rule::Projection, || {
            format!(
                "{uid}: rendered compute_state {}, journal says {want}",
                rendered.compute_state
            )
        })
    }

    /// Sessions.Replay streamed exactly the durable journal.
    pub fn check_replay_records(
        &self,
        view: &dyn JournalView,
        session: &str,
        streamed: &[LogRecord],
    ) -> Check {
        ensure(
            *streamed == *view.records(session),
            Rule::ReplayMismatch,
            || {
                format!(
                    "{session}: Replay streamed {} records, journal has {}",
                    streamed.len(),
                    view.records(session).len()
                )
            },
        )
    }

    /// A harness replay reproduced every recorded output, byte for byte.
    pub fn check_replay_report(
        &self,
        view: &dyn JournalView,
        session: &str,
        report: &ReplayReport,
    ) -> Check {
        let want = expected_replay_outputs(&view.records(session))
            .map_err(|e| violation(Rule::JournalInvalid, format!("{session}: {e}")))?;
        ensure(report.outputs == want, Rule::ReplayMismatch, || {
            format!(
                "{session}: replay reported {:?}, journal records {want:?}",
                report.outputs
            )
        })
    }
}

/// Where execution `exec` was canceled: its END{CANCELED}, or a CANCEL
/// marker after its first record (a Cancel cut before its END).
fn canceled_at(records: &[LogRecord], exec: &str) -> Option<i64> {
    let start = records.iter().position(|r| exec_of(r) == exec)?;
    records[start..].iter().find_map(|r| {
        let ev = r.event.as_ref()?;
        let own_end = exec_of(r) == exec && agentsessions_machine::events::is_canceled_end(ev);
        (own_end || agentsessions_machine::events::is_cancel_marker(ev)).then_some(r.seq)
    })
}

/// In the durable journal, a canceled execution asks for nothing after its
/// CANCEL marker (a tool receipt of a call already running is the one
/// record allowed), and nothing of it follows its END{CANCELED}.
fn check_nothing_after_cancel(s: &str, records: &[LogRecord]) -> Check {
    let mut canceling: Option<(String, bool)> = None;
    let mut current = String::new();
    for r in records {
        let Some(ev) = r.event.as_ref() else {
            continue;
        };
        let k = kind(r);
        if agentsessions_machine::events::is_cancel_marker(ev) {
            canceling = Some((current.clone(), false));
            continue;
        }
        if k == EventKind::EventLifecycle {
            continue;
        }
        let exec = exec_of(r).to_owned();
        if let Some((canceled, ended)) = &mut canceling
            && exec == *canceled
        {
            let allowed = !*ended
                && matches!(
                    k,
                    EventKind::EventToolResult | EventKind::EventEnd | EventKind::EventError
                );
            ensure(allowed, Rule::Canceled, || {
                format!("{s}: seq {} ({k:?}) of {exec} follows its Cancel", r.seq)
            })?;
            if agentsessions_machine::events::is_canceled_end(ev) {
                *ended = true;
            }
        }
        current = exec;
    }
    Ok(())
}
