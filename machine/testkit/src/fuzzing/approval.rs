//! Target `approval_protocol`: arbitrary client calls and harness frames
//! against the host in the deterministic [`World`].
//!
//! A session runs on well-behaved test harnesses or on a *puppet* whose
//! answers to controller frames come from the fuzz input (forged and
//! mismatched PARKED acknowledgements, reused call ids, host-owned kinds,
//! early closes, stream failures). Frames can also be injected on any open
//! connection at any time. Between them the input makes Approve calls with
//! right and wrong (execution, call, request) tuples, repeated and
//! conflicting decisions, Resume, Suspend, Replay, cancellations, deadlines,
//! store and harness faults, and host restarts.
//!
//! After every step the oracle checks what the simulator checks: every
//! chain verifies and scans, every decision answers a request and no
//! request has two, a replay runs no model and no tool, and — at the
//! moment the executor is asked — a gated tool runs only with a committed
//! approving decision for the same tuple, and the executed call is the
//! committed intent.

use agentsessions_machine::vocab::{ExecuteTool, ModelFailure};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use agentsessions_proto::v1::{
    ApproveRequest, ControllerFrame, EventKind, ExecRequest, GetSessionRequest, LogRecord,
    Mediation, ReplayRequest, ResumeRequest, SuspendRequest, controller_frame::Frame,
};
use arbitrary::Unstructured;

use super::acts::{Act, Shared, Step, Then};
use crate::harness::{self, Reply, Script};
use crate::{MemStore, World};
use agentsessions_machine::chain;
use agentsessions_machine::events::{self, body};
use agentsessions_machine::journal::approval;
use agentsessions_machine::vocab::{
    AppendError, ConnId, Effect, HarnessFailure, HarnessInput, Request, RequestId,
};

/// Most steps taken from one input.
const MAX_STEPS: usize = 48;

/// Routes an Exec can name; the last one is served by nobody.
const ROUTES: &[&str] = &[
    "puppet",
    "puppet",
    "approval",
    "puppet-mem",
    "tools",
    "echo",
    "counter",
    "nope",
];

/// The target body.
pub fn approval_protocol(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut rig = Rig::new();
    for _ in 0..MAX_STEPS {
        let Ok(op) = Op::decode(&mut u) else {
            break;
        };
        rig.apply(op);
        rig.check();
        if u.is_empty() {
            break;
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Append { skip: u8, kind: u8 },
    Fence,
    Read { skip: u8 },
    Get { skip: u8 },
    Snapshot,
    Provision,
    Dial,
    Recheck,
    Model,
    Tool,
    ToolLost,
}

#[derive(Debug, Clone)]
enum Op {
    /// Exec on session `session` (one past the last: a new session).
    Exec {
        session: u8,
        route: u8,
        input: bool,
        expected: Option<u8>,
        deadline: bool,
    },
    /// Approve the `gate`-th request of a session, with `tamper` applied.
    Approve {
        session: u8,
        gate: u8,
        tamper: u8,
        approved: Option<bool>,
        reason: bool,
        identity: bool,
    },
    Resume {
        session: u8,
    },
    Suspend {
        session: u8,
    },
    /// Sessions.Replay, or with `harness` a harness replay.
    Replay {
        session: u8,
        harness: bool,
    },
    Get {
        session: u8,
    },
    /// Queue the puppet's answer to a later frame.
    Plan(Step),
    /// Send on an open connection (or a stale id) now.
    Inject {
        conn: u8,
        act: Act,
        then: Then,
    },
    Fault(Fault),
    Advance {
        seconds: u8,
    },
    Cancel {
        call: u8,
    },
    Restart,
}

impl Op {
    /// A tag byte (mod 12) and a parameter byte, then per-op fields, so
    /// that seeds can be written by hand (see `fuzz/README` in the docs):
    ///
    /// | tag | op | bytes after the parameter `p` |
    /// | --- | --- | --- |
    /// | 0 | Exec on session `p` | route, flags (1 input, 2 deadline, 4 expected), expected |
    /// | 1 | Approve on session `p` | gate, tamper (>= 4 mod 8: right), flags (1 present, 2 approved, 4 reason, 8 identity) |
    /// | 2 | Resume `p` | |
    /// | 3 | Suspend `p` | |
    /// | 4 | Replay `p` | harness (odd: harness replay) |
    /// | 5 | Get `p` | |
    /// | 6 | Plan | a step: count, actions, then |
    /// | 7 | Inject on connection `p` | an action, then |
    /// | 8 | Fault `p` (mod 11) | parameter |
    /// | 9 | Advance `p` seconds | |
    /// | 10 | Cancel call `p` | |
    /// | 11 | Restart | |
    fn decode(u: &mut Unstructured<'_>) -> arbitrary::Result<Self> {
        let [tag, p]: [u8; 2] = u.arbitrary()?;
        Ok(match tag % 12 {
            0 => {
                let [route, flags, expected]: [u8; 3] = u.arbitrary()?;
                Self::Exec {
                    session: p,
                    route,
                    input: flags & 1 != 0,
                    deadline: flags & 2 != 0,
                    expected: (flags & 4 != 0).then_some(expected),
                }
            }
            1 => {
                let [gate, tamper, flags]: [u8; 3] = u.arbitrary()?;
                Self::Approve {
                    session: p,
                    gate,
                    tamper,
                    approved: (flags & 1 != 0).then_some(flags & 2 != 0),
                    reason: flags & 4 != 0,
                    identity: flags & 8 != 0,
                }
            }
            2 => Self::Resume { session: p },
            3 => Self::Suspend { session: p },
            4 => Self::Replay {
                session: p,
                harness: u.arbitrary::<u8>()? % 2 == 1,
            },
            5 => Self::Get { session: p },
            6 => Self::Plan(Step::decode(u)?),
            7 => Self::Inject {
                conn: p,
                act: Act::decode(u)?,
                then: Then::decode(u)?,
            },
            8 => {
                let q: u8 = u.arbitrary()?;
                Self::Fault(match p % 11 {
                    0 => Fault::Append {
                        skip: q,
                        kind: q / 4,
                    },
                    1 => Fault::Fence,
                    2 => Fault::Read { skip: q },
                    3 => Fault::Get { skip: q },
                    4 => Fault::Snapshot,
                    5 => Fault::Provision,
                    6 => Fault::Dial,
                    7 => Fault::Recheck,
                    8 => Fault::Model,
                    9 => Fault::Tool,
                    _ => Fault::ToolLost,
                })
            }
            9 => Self::Advance { seconds: p },
            10 => Self::Cancel { call: p },
            _ => Self::Restart,
        })
    }
}

/// A harness whose answers come from the shared plan; with an empty plan
/// it behaves like a gated tool user.
struct Puppet {
    shared: Arc<Mutex<Shared>>,
    memory: bool,
}

impl Script for Puppet {
    fn descriptor(&self) -> agentsessions_proto::v1::HarnessDescriptor {
        use agentsessions_proto::v1::Resumability;
        let r = if self.memory {
            Resumability::RequiresMemorySnapshot
        } else {
            Resumability::StatelessReplay
        };
        harness::descriptor("puppet", r)
    }

    fn on_frame(&mut self, frame: &ControllerFrame) -> Reply {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.last_exec = frame.execution_id.clone();
        if let Some(Frame::Park(p)) = &frame.frame {
            s.last_park = Some(p.clone());
        }
        if let Some(step) = s.plan.pop_front() {
            return step.reply(&s);
        }
        let exec = frame.execution_id.as_str();
        match &frame.frame {
            Some(Frame::Start(_)) => Reply::send(vec![Act::gated(0).event(exec, &s)]),
            Some(Frame::Park(_)) => Reply::finish(vec![Act::Ack.event(exec, &s)]),
            Some(Frame::Tool(_)) => Reply::finish(vec![
                Act::Output.event(exec, &s),
                Act::End { completed: true }.event(exec, &s),
            ]),
            Some(Frame::Model(_)) => {
                Reply::finish(vec![Act::End { completed: true }.event(exec, &s)])
            }
            _ => Reply::default(),
        }
    }
}

struct Rig {
    world: World,
    shared: Arc<Mutex<Shared>>,
    pending: Vec<RequestId>,
}

impl Rig {
    fn new() -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let mut world = World::default();
        world.add_local("echo", "echo");
        world.add_local("puppet", "puppet");
        world.add_memory("puppet-mem", "puppet-mem");
        for (kind, memory) in [("puppet", false), ("puppet-mem", true)] {
            let shared = Arc::clone(&shared);
            world.scripts.insert(
                kind.into(),
                Box::new(move || {
                    Box::new(Puppet {
                        shared: Arc::clone(&shared),
                        memory,
                    }) as Box<dyn Script>
                }),
            );
        }
        world.before_effect = Some(Box::new(check_effect));
        Self {
            world,
            shared,
            pending: Vec::new(),
        }
    }

    /// The session an op names: an existing one, or `None` for "new".
    fn session(&self, pick: u8) -> Option<String> {
        let sids = self.world.store.sessions();
        let i = usize::from(pick) % (sids.len() + 1);
        sids.get(i).cloned()
    }

    fn start(&mut self, request: Request) {
        let id = self.world.start(request);
        self.pending.push(id);
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Exec {
                session,
                route,
                input,
                expected,
                deadline,
            } => {
                let session = self.session(session).unwrap_or_default();
                let harness = ROUTES[usize::from(route) % ROUTES.len()];
                let req = ExecRequest {
                    harness: if session.is_empty() || route % 2 == 0 {
                        harness.into()
                    } else {
                        String::new()
                    },
                    session,
                    inputs: if input {
                        vec![events::text_message("user", "go")]
                    } else {
                        Vec::new()
                    },
                    expected_last_seq: expected.map(i64::from),
                    deadline_unix: if deadline {
                        self.world.now / 1_000_000_000 + 2
                    } else {
                        0
                    },
                    ..ExecRequest::default()
                };
                self.start(Request::Exec(req));
            }
            Op::Approve {
                session,
                gate,
                tamper,
                approved,
                reason,
                identity,
            } => {
                let Some(session) = self.session(session) else {
                    return;
                };
                let req = approve_request(
                    &session,
                    &self.world.store.records(&session),
                    gate,
                    tamper,
                    approved,
                    reason,
                    identity,
                );
                self.start(Request::Approve(req));
            }
            #[allow(deprecated)]
            Op::Resume { session } => {
                let session = self.session(session).unwrap_or_default();
                self.start(Request::Resume(ResumeRequest {
                    session,
                    boot: false,
                }));
            }
            Op::Suspend { session } => {
                let session = self.session(session).unwrap_or_default();
                self.start(Request::Suspend(SuspendRequest { session }));
            }
            Op::Replay { session, harness } => {
                let session = self.session(session).unwrap_or_default();
                let before = (self.world.model_calls, self.world.executor.attempts);
                if harness {
                    self.start(Request::ReplayHarness { session });
                } else {
                    self.start(Request::Replay(ReplayRequest {
                        session,
                        ..ReplayRequest::default()
                    }));
                }
                // Both replays serve recorded effects: nothing runs again.
                assert_eq!(
                    (self.world.model_calls, self.world.executor.attempts),
                    before,
                    "a replay invokes no model and no tool"
                );
            }
            Op::Get { session } => {
                let uid = self.session(session).unwrap_or_default();
                self.start(Request::GetSession(GetSessionRequest { uid }));
            }
            Op::Plan(step) => {
                let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                if s.plan.len() < 16 {
                    s.plan.push_back(step);
                }
            }
            Op::Inject { conn, act, then } => self.inject(conn, act, then),
            Op::Fault(f) => self.fault(f),
            Op::Advance { seconds } => self.world.advance(i64::from(seconds) * 1_000_000_000),
            Op::Cancel { call } => {
                if !self.pending.is_empty() {
                    let id = self.pending[usize::from(call) % self.pending.len()];
                    self.world.cancel(id);
                }
            }
            Op::Restart => {
                self.world.restart();
                self.pending.clear();
            }
        }
        // Calls that have replied are done with; the rest stay open.
        let world = &mut self.world;
        self.pending.retain(|&id| {
            if world.replied(id) {
                world.take(id);
                false
            } else {
                true
            }
        });
    }

    fn inject(&mut self, conn: u8, act: Act, then: Then) {
        let open = self.world.connections();
        // One past the open ones: a connection id that is closed or unused.
        let id = open
            .get(usize::from(conn) % (open.len() + 1))
            .copied()
            .unwrap_or(ConnId(u64::from(conn)));
        let ev = {
            let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            act.event(&s.last_exec, &s)
        };
        self.world.inject(id, HarnessInput::Event(ev));
        match then {
            Then::Open => {}
            Then::Close => self.world.inject(id, HarnessInput::Closed),
            Then::Fail => self.world.inject(id, HarnessInput::Failed("forged".into())),
        }
    }

    fn fault(&mut self, f: Fault) {
        let faults = &mut self.world.faults;
        match f {
            Fault::Append { skip, kind } => {
                let e = match kind % 3 {
                    0 => AppendError::Conflict { head: 0 },
                    1 => AppendError::Fenced { current: 99 },
                    _ => AppendError::Failed("disk".into()),
                };
                faults.append = Some((usize::from(skip % 4), e));
            }
            Fault::Fence => faults.fence = Some("fence".into()),
            Fault::Read { skip } => faults.read = Some((usize::from(skip % 4), "read".into())),
            Fault::Get { skip } => faults.get = Some((usize::from(skip % 4), "get".into())),
            Fault::Snapshot => faults.snapshot = Some("snapshot".into()),
            Fault::Provision => faults.provision = Some("provision".into()),
            Fault::Dial => faults.dial = Some(HarnessFailure::Unavailable("dial".into())),
            Fault::Recheck => faults.recheck = Some(HarnessFailure::Timeout),
            Fault::Model => self.world.model_fail_next = Some(ModelFailure::other("model")),
            Fault::Tool => self.world.executor.fail_next = Some("tool".into()),
            Fault::ToolLost => self.world.executor.lose_next = Some("lost".into()),
        }
    }

    /// The journal invariants, for every session.
    fn check(&self) {
        for sid in self.world.store.sessions() {
            let records = &*self.world.store.records(&sid);
            if let Err(e) = chain::verify(records) {
                panic!("{sid}: chain does not verify: {e}");
            }
            if let Err(e) = approval::scan(records, 0) {
                panic!("{sid}: the host wrote evidence its own scan rejects: {e}");
            }
            check_decisions(&sid, records);
        }
    }
}

/// The Approve call for the `gate`-th request of `records`, made wrong in
/// one way by `tamper` (most values leave it right).
fn approve_request(
    session: &str,
    records: &[LogRecord],
    gate: u8,
    tamper: u8,
    approved: Option<bool>,
    reason: bool,
    identity: bool,
) -> ApproveRequest {
    let requests: Vec<(String, String, i64)> = records
        .iter()
        .filter_map(|r| {
            let ev = r.event.as_ref()?;
            let req = body::approval(ev)?;
            Some((ev.execution_id.clone(), req.tool_call_id.clone(), r.seq))
        })
        .collect();
    let (mut exec, mut call, mut seq) = requests
        .get(usize::from(gate) % requests.len().max(1))
        .cloned()
        .unwrap_or_else(|| ("ffffffffffffffff".into(), "c0".into(), 1));
    match tamper % 8 {
        0 => exec.push('0'),
        1 => call = format!("c{}", (tamper / 8) % 3),
        2 => seq += i64::from(tamper / 8) - 16,
        3 => exec.clear(),
        _ => {}
    }
    ApproveRequest {
        session: session.into(),
        execution_id: exec,
        tool_call_id: call,
        request_seq: seq,
        approved,
        reason: if reason { "ok".into() } else { String::new() },
        identity: identity.then(|| agentsessions_proto::v1::IdentityRef {
            principal: "alice".into(),
            ..Default::default()
        }),
    }
}

/// Every decision answers a request of the same execution and call, and no
/// request is decided twice (a repeat returns the first decision).
fn check_decisions(sid: &str, records: &[LogRecord]) {
    let mut decided = BTreeSet::new();
    for r in records {
        let Some(ev) = r.event.as_ref() else { continue };
        if events::kind_of(ev) != EventKind::EventApprovalResult {
            continue;
        }
        let d = body::approval_result(ev).expect("a decision has its body");
        let request = usize::try_from(d.request_seq - 1)
            .ok()
            .and_then(|i| records.get(i))
            .and_then(|q| Some((q.event.as_ref()?, q)))
            .filter(|(q, _)| q.execution_id == ev.execution_id)
            .and_then(|(q, _)| body::approval(q));
        assert!(
            request.is_some_and(|q| q.tool_call_id == d.tool_call_id),
            "{sid}: decision at seq {} answers no request",
            r.seq
        );
        assert!(
            decided.insert((ev.execution_id.clone(), d.request_seq)),
            "{sid}: request {} decided twice",
            d.request_seq
        );
    }
}

/// At the moment the executor is asked: the intent is committed and is the
/// call being executed, and a gated call has an approving decision for the
/// same (execution, call, request) committed before it.
fn check_effect(effect: &Effect, store: &mut MemStore) {
    let Effect::Tool(ExecuteTool {
        session,
        intent,
        call,
        ..
    }) = effect
    else {
        return;
    };
    let records = &*store.records(session);
    let intent = intent.record();
    let stored = usize::try_from(intent.seq - 1)
        .ok()
        .and_then(|i| records.get(i));
    assert_eq!(stored, Some(intent), "the executed intent is committed");
    let ev = intent.event.as_ref().expect("an intent has an event");
    assert_eq!(
        body::tool(ev),
        Some(call),
        "the executed call is the intent"
    );
    if call.mediation != Mediation::RequiresApproval as i32 {
        return;
    }
    let exec = &ev.execution_id;
    let request = records.iter().find(|r| {
        r.seq > intent.seq
            && r.event.as_ref().is_some_and(|e| {
                &e.execution_id == exec
                    && body::approval(e).is_some_and(|a| a.tool_call_id == call.id)
            })
    });
    let Some(request) = request else {
        panic!("gated call {} executed without its request", call.id);
    };
    let decision = records.iter().find_map(|r| {
        let e = r.event.as_ref()?;
        let d = body::approval_result(e)?;
        (&e.execution_id == exec && d.tool_call_id == call.id && d.request_seq == request.seq)
            .then_some(d)
    });
    let Some(decision) = decision else {
        panic!(
            "gated call {} executed without a committed decision",
            call.id
        );
    };
    assert!(decision.approved, "a denial never executes ({})", call.id);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rig can reach the protocol's happy path: park, approve, resume,
    /// execute. Without it the fuzzer would explore only refusals.
    #[test]
    fn park_approve_resume_executes() {
        let mut rig = Rig::new();
        rig.apply(Op::Exec {
            session: 0,
            route: 0,
            input: true,
            expected: None,
            deadline: false,
        });
        rig.check();
        let sid = rig.world.store.sessions()[0].clone();
        let kinds: Vec<_> = rig
            .world
            .store
            .records(&sid)
            .iter()
            .map(|r| events::kind_of(r.event.as_ref().unwrap()))
            .collect();
        assert!(
            kinds.contains(&EventKind::EventApprovalRequest),
            "{kinds:?}"
        );
        rig.apply(Op::Approve {
            session: 0,
            gate: 0,
            tamper: 7,
            approved: Some(true),
            reason: true,
            identity: false,
        });
        rig.apply(Op::Resume { session: 0 });
        rig.check();
        assert_eq!(
            rig.world.executor.effects,
            1,
            "{:?}",
            rig.world.store.records(&sid)
        );
    }
}
