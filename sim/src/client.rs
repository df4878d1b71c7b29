//! The client that runs a scenario's program, one step at a time.
//!
//! A step issues a call and is done when the durable journal shows its
//! goal. After a crash the client does what a careful real client would:
//! it re-reads the journal (as a Replay or GetSession would show it) and
//! retries what is missing — Resume for a turn whose inputs landed, a new
//! Exec for one whose inputs did not, the same Approve for a decision that
//! may not have landed. Without a crash every call must succeed the first
//! time (or be refused exactly as the step expects).

use std::collections::BTreeMap;

use agentsessions_machine::events::{self, body};
use agentsessions_machine::journal::{executions, projection};
use agentsessions_machine::vocab::{Code, Request, Response, Status};
use agentsessions_proto::v1::{
    ApprovalRef, ApproveRequest, CancelRequest, CreateSessionRequest, DeleteSessionRequest,
    EventKind, ExecRequest, ForkRequest, LogRecord, ResumeRequest, Session, SuspendRequest,
};

use crate::oracle::{Check, JournalView, Rule, Violation, violation};
use crate::scenario::{At, Refusal, Step};

/// Most calls one step may make before it counts as stuck.
const MAX_ATTEMPTS: u32 = 8;

/// What the client wants done next.
#[derive(Debug, Clone)]
pub enum Action {
    /// Make a call about `session`.
    Call(String, Request),
    /// Load a fixture into `session`.
    Import(String, &'static str),
    /// Make the executor fail the first attempt for a key.
    FailTool(&'static str),
}

/// The client's memory (survives crashes: it is the caller's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Client {
    /// The step being worked on.
    pub step: usize,
    /// Session uids by slot ("" until known).
    pub slots: Vec<String>,
    attempt: u32,
    base: Option<i64>,
    gate: Option<(String, String, i64)>,
    tried_resume: bool,
    crashed: bool,
    replied: bool,
}

/// Sessions.Resume of `session`.
#[allow(deprecated)]
pub fn resume(session: &str) -> Request {
    Request::Resume(ResumeRequest {
        session: session.into(),
        boot: false,
    })
}

/// Sessions.Exec of `text` ("" = no input) on `session`.
pub fn exec(session: &str, text: &str) -> Request {
    Request::Exec(ExecRequest {
        session: session.into(),
        inputs: if text.is_empty() {
            Vec::new()
        } else {
            vec![events::text_message("user", text)]
        },
        ..ExecRequest::default()
    })
}

/// Sessions.Approve of a gate.
pub fn approve(session: &str, gate: &ApprovalRef, approved: bool) -> Request {
    Request::Approve(ApproveRequest {
        session: session.into(),
        execution_id: gate.execution_id.clone(),
        tool_call_id: gate.tool_call_id.clone(),
        request_seq: gate.request_seq,
        approved: Some(approved),
        reason: "ok".into(),
        identity: None,
    })
}

/// Sessions.Cancel of the session's current execution.
pub fn cancel(session: &str) -> Request {
    Request::Cancel(CancelRequest {
        session: session.into(),
        execution_id: String::new(),
        reason: "sim".into(),
    })
}

/// Sessions.DeleteSession.
pub fn delete(session: &str) -> Request {
    Request::DeleteSession(DeleteSessionRequest {
        uid: session.into(),
    })
}

/// Whether the session's latest execution was canceled to its END.
pub fn canceled(records: &[LogRecord]) -> bool {
    executions::project(records)
        .ok()
        .and_then(|p| p.executions.last().map(|e| e.canceled && e.completed))
        .unwrap_or(false)
}

/// Sessions.Suspend.
pub fn suspend(session: &str) -> Request {
    Request::Suspend(SuspendRequest {
        session: session.into(),
    })
}

/// Sessions.Fork of one child at `at_seq` (0 = head).
pub fn fork(session: &str, at_seq: i64) -> Request {
    Request::Fork(ForkRequest {
        session: session.into(),
        at_seq,
        count: 1,
        ..ForkRequest::default()
    })
}

fn kind(r: &LogRecord) -> EventKind {
    r.event
        .as_ref()
        .map_or(EventKind::Unspecified, events::kind_of)
}

/// One execution as the client reads it.
#[derive(Debug, Default)]
struct Turn {
    inputs: Vec<String>,
    input_count: i64,
    ended: bool,
    /// A request without a decision or receipt.
    awaiting: bool,
}

/// Executions whose START is after `base`, by execution id.
fn turns(records: &[LogRecord], base: i64) -> BTreeMap<String, Turn> {
    let mut out: BTreeMap<String, Turn> = BTreeMap::new();
    for r in records.iter().filter(|r| r.seq > base) {
        let Some(ev) = &r.event else { continue };
        let k = kind(r);
        if k == EventKind::EventExecutionStart {
            let t = out.entry(ev.execution_id.clone()).or_default();
            t.input_count = body::execution_start(ev)
                .and_then(|s| s.input_count)
                .unwrap_or(0);
            continue;
        }
        let Some(t) = out.get_mut(&ev.execution_id) else {
            continue;
        };
        match k {
            EventKind::EventInput => t.inputs.extend(body::message(ev).map(events::message_text)),
            EventKind::EventEnd => t.ended = true,
            EventKind::EventApprovalRequest => t.awaiting = true,
            EventKind::EventApprovalResult | EventKind::EventToolResult => t.awaiting = false,
            _ => {}
        }
    }
    out
}

/// Whether the session has an execution left to recover.
pub fn pending(records: &[LogRecord]) -> bool {
    executions::project(records)
        .ok()
        .and_then(|p| executions::select_pending(records, &p).ok())
        .flatten()
        .is_some()
}

/// The session's own gate waiting for a decision.
pub fn awaiting(records: &[LogRecord]) -> Option<ApprovalRef> {
    let head = records.last().map_or(0, |r| r.seq);
    projection::session_status(records, head)
        .ok()
        .and_then(|s| s.pending_approval)
}

/// The decision recorded for gate (execution, call, request seq).
fn decision(records: &[LogRecord], gate: &(String, String, i64)) -> Option<(bool, LogRecord)> {
    records.iter().find_map(|r| {
        let d = r.event.as_ref().and_then(body::approval_result)?;
        let ev = r.event.as_ref()?;
        (ev.execution_id == gate.0 && d.tool_call_id == gate.1 && d.request_seq == gate.2)
            .then(|| (d.approved, r.clone()))
    })
}

/// The last approval request in the journal, as a gate reference.
fn last_request(records: &[LogRecord]) -> Option<ApprovalRef> {
    records.iter().rev().find_map(|r| {
        let a = r.event.as_ref().and_then(body::approval)?;
        Some(ApprovalRef {
            execution_id: r.event.as_ref()?.execution_id.clone(),
            tool_call_id: a.tool_call_id.clone(),
            request_seq: r.seq,
        })
    })
}

fn gate_ref(g: &(String, String, i64)) -> ApprovalRef {
    ApprovalRef {
        execution_id: g.0.clone(),
        tool_call_id: g.1.clone(),
        request_seq: g.2,
    }
}

/// A reply in one line (status code and message, or the response kind).
pub fn brief(reply: &Result<Response, Status>) -> String {
    match reply {
        Ok(r) => {
            let name = format!("{r:?}");
            format!("Ok({})", name.split('(').next().unwrap_or_default())
        }
        Err(s) => format!("{:?}: {}", s.code, s.message),
    }
}

fn code(reply: &Result<Response, Status>) -> Code {
    match reply {
        Ok(_) => Code::Ok,
        Err(s) => s.code,
    }
}

fn session_of(reply: &Result<Response, Status>) -> Option<Session> {
    match reply {
        Ok(Response::Session(s)) => Some(s.clone()),
        Ok(Response::Fork(f)) => f.children.first().cloned(),
        _ => None,
    }
}

impl Client {
    fn slot(&self, slot: usize) -> &str {
        self.slots.get(slot).map_or("", String::as_str)
    }

    /// Records the uid of `slot`.
    pub fn set_slot(&mut self, slot: usize, uid: String) {
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, String::new());
        }
        self.slots[slot] = uid;
    }

    fn advance(&mut self) {
        self.step += 1;
        self.attempt = 0;
        self.base = None;
        self.tried_resume = false;
        self.crashed = false;
        self.replied = false;
    }

    /// True once every step is done.
    pub fn finished(&self, program: &[Step]) -> bool {
        self.step >= program.len()
    }

    /// The calls in flight were lost.
    pub fn on_crash(&mut self) {
        self.crashed = true;
    }

    /// A store answer of the current step was lost on a live host: the
    /// step may fail (UNAVAILABLE) or write, as after a crash, and is
    /// retried.
    pub fn on_lost_answer(&mut self) {
        self.crashed = true;
    }

    fn stuck(&self, program: &[Step]) -> Violation {
        violation(
            Rule::Liveness,
            format!(
                "step {} ({:?}) made no progress in {MAX_ATTEMPTS} calls",
                self.step, program[self.step]
            ),
        )
    }

    /// The next action, or `None` when the program is finished. Completes
    /// steps whose goal already holds on the way.
    pub fn next(
        &mut self,
        program: &[Step],
        view: &dyn JournalView,
    ) -> Result<Option<Action>, Violation> {
        loop {
            let Some(step) = program.get(self.step).copied() else {
                return Ok(None);
            };
            match self.decide(step, view)? {
                Some(action) => {
                    self.attempt += 1;
                    if self.attempt > MAX_ATTEMPTS {
                        return Err(self.stuck(program));
                    }
                    return Ok(Some(action));
                }
                None => self.advance(),
            }
        }
    }

    /// What `step` needs next; `None` when it is done.
    fn decide(&mut self, step: Step, view: &dyn JournalView) -> Result<Option<Action>, Violation> {
        let first = self.attempt == 0;
        Ok(match step {
            Step::Import { slot, fixture } => {
                let uid = format!("sess-legacy{slot:013}{:08x}", fixture.len());
                self.set_slot(slot, uid.clone());
                Some(Action::Import(uid, fixture)).filter(|_| first)
            }
            Step::FailTool { key } => Some(Action::FailTool(key)).filter(|_| first),
            Step::Create { slot, harness } => {
                (!self.replied || self.slot(slot).is_empty()).then(|| {
                    let req = Request::CreateSession(CreateSessionRequest {
                        session: Some(Session {
                            harness: harness.into(),
                            ..Session::default()
                        }),
                    });
                    Action::Call(String::new(), req)
                })
            }
            Step::Exec { slot, text, park } => {
                let sid = self.slot(slot).to_owned();
                let records = &*view.records(&sid);
                let base = *self.base.get_or_insert(records.last().map_or(0, |r| r.seq));
                let turns = turns(records, base);
                let ours = turns
                    .values()
                    .filter(|t| t.inputs.iter().any(|i| i == text));
                let mut reached = false;
                let mut recoverable = false;
                for t in ours {
                    reached |= if park {
                        t.awaiting && !t.ended
                    } else {
                        t.ended
                    };
                    recoverable |= !t.ended && t.inputs.len() as i64 == t.input_count;
                }
                if reached {
                    None
                } else if recoverable && !first && !self.tried_resume {
                    self.tried_resume = true;
                    Some(Action::Call(sid.clone(), resume(&sid)))
                } else {
                    self.tried_resume = false;
                    Some(Action::Call(sid.clone(), exec(&sid, text)))
                }
            }
            Step::Approve { slot, approved } => {
                let sid = self.slot(slot).to_owned();
                let records = &*view.records(&sid);
                if first {
                    // The gate waiting now; after a lost answer it may be
                    // decided already, and is then the last request.
                    let g = awaiting(records)
                        .or_else(|| last_request(records))
                        .ok_or_else(|| violation(Rule::Liveness, format!("{sid}: no gate")))?;
                    self.gate = Some((g.execution_id, g.tool_call_id, g.request_seq));
                }
                if self.check_decision(records, approved)? {
                    None
                } else {
                    let g = gate_ref(self.gate.as_ref().expect("set above"));
                    Some(Action::Call(sid.clone(), approve(&sid, &g, approved)))
                }
            }
            Step::Decide { slot, approved, .. } => {
                let sid = self.slot(slot).to_owned();
                self.base
                    .get_or_insert(view.records(&sid).last().map_or(0, |r| r.seq));
                let g = self.gate.clone().ok_or_else(|| {
                    violation(Rule::Expectation, "Decide needs an earlier Approve")
                })?;
                (!self.replied)
                    .then(|| Action::Call(sid.clone(), approve(&sid, &gate_ref(&g), approved)))
            }
            Step::Resume { slot } => {
                let sid = self.slot(slot).to_owned();
                let done = self.replied && !pending(&view.records(&sid));
                (!done).then(|| Action::Call(sid.clone(), resume(&sid)))
            }
            Step::Suspend { slot } => {
                let sid = self.slot(slot).to_owned();
                (!self.replied).then(|| Action::Call(sid.clone(), suspend(&sid)))
            }
            Step::Cancel { slot } => {
                let sid = self.slot(slot).to_owned();
                let done = self.replied && canceled(&view.records(&sid));
                (!done).then(|| Action::Call(sid.clone(), cancel(&sid)))
            }
            Step::Delete { slot } => {
                let sid = self.slot(slot).to_owned();
                let done = view.deleted().contains(&sid);
                (!done).then(|| Action::Call(sid.clone(), delete(&sid)))
            }
            Step::Fork { slot, child, at } => {
                let sid = self.slot(slot).to_owned();
                let at_seq = match at {
                    At::Head => 0,
                    At::Turn(n) => view
                        .records(&sid)
                        .iter()
                        .filter(|r| kind(r) == EventKind::EventEnd)
                        .nth(n - 1)
                        .map_or(0, |r| r.seq),
                };
                (!self.replied || self.slot(child).is_empty())
                    .then(|| Action::Call(sid.clone(), fork(&sid, at_seq)))
            }
            Step::Refuse { slot, what, .. } => {
                let sid = self.slot(slot).to_owned();
                self.base
                    .get_or_insert(view.records(&sid).last().map_or(0, |r| r.seq));
                let req = match what {
                    Refusal::Resume => resume(&sid),
                    Refusal::Exec(text) => exec(&sid, text),
                    Refusal::ApproveInherited => {
                        let g = last_request(&view.records(&sid)).ok_or_else(|| {
                            violation(Rule::Expectation, format!("{sid}: no inherited gate"))
                        })?;
                        approve(&sid, &g, true)
                    }
                };
                (!self.replied).then(|| Action::Call(sid.clone(), req))
            }
        })
    }

    /// True when the gate has the wanted decision; a different one is a
    /// violation (a decision must never flip).
    fn check_decision(&self, records: &[LogRecord], approved: bool) -> Result<bool, Violation> {
        let g = self.gate.as_ref().expect("gate chosen");
        match decision(records, g) {
            None => Ok(false),
            Some((d, _)) if d == approved => Ok(true),
            Some((_, r)) => Err(violation(
                Rule::Expectation,
                format!("gate {} decided the other way at seq {}", g.1, r.seq),
            )),
        }
    }

    /// The reply to the call the last action made.
    pub fn on_reply(
        &mut self,
        program: &[Step],
        view: &dyn JournalView,
        reply: &Result<Response, Status>,
    ) -> Check {
        let step = program[self.step];
        let got = code(reply);
        let strict = !self.crashed;
        match step {
            Step::Create { slot, .. } => {
                if let Some(s) = session_of(reply) {
                    let uid = s.metadata.map(|m| m.uid).unwrap_or_default();
                    self.set_slot(slot, uid);
                }
            }
            Step::Fork { child, .. } => {
                if let Some(s) = session_of(reply) {
                    let uid = s.metadata.map(|m| m.uid).unwrap_or_default();
                    self.set_slot(child, uid);
                }
            }
            Step::Decide { slot, expect, .. } | Step::Refuse { slot, expect, .. } => {
                if got != expect {
                    return Err(violation(
                        Rule::Expectation,
                        format!(
                            "step {} ({step:?}): expected {expect:?}, got {}",
                            self.step,
                            brief(reply)
                        ),
                    ));
                }
                let sid = self.slot(slot);
                let head = view.records(sid).last().map_or(0, |r| r.seq);
                if !self.crashed && Some(head) != self.base {
                    return Err(violation(
                        Rule::Expectation,
                        format!("step {} ({step:?}) wrote to the journal", self.step),
                    ));
                }
                if let (Step::Decide { .. }, Ok(Response::Approve(a))) = (step, reply) {
                    let g = self.gate.as_ref().expect("Decide follows Approve");
                    let durable = decision(&view.records(sid), g).map(|(_, r)| r);
                    if a.decision != durable {
                        return Err(violation(
                            Rule::Expectation,
                            "an exact retry must answer with the committed decision",
                        ));
                    }
                }
                self.replied = true;
                return Ok(());
            }
            _ => {}
        }
        if strict && got != Code::Ok {
            return Err(violation(
                Rule::Expectation,
                format!(
                    "step {} ({step:?}) failed without a crash: {}",
                    self.step,
                    brief(reply)
                ),
            ));
        }
        if got == Code::Ok {
            self.replied = true;
        }
        Ok(())
    }
}
