//! Model-based test of the host: random sequences of client operations and
//! host restarts, run against the deterministic world and checked against a
//! small reference model (record counts, the pending gate, model and tool
//! call counts) and the machine's safety invariants:
//!
//! - every session's chain verifies;
//! - record before effect: every executed tool's intent is a committed
//!   record of its session;
//! - at most one executor effect per (session, idempotency key);
//! - a gated tool runs only after a committed approving decision for the
//!   same execution, call and request, and a denial never runs;
//! - Replay streams exactly the stored records and calls no model;
//! - the rendered execution state equals a recomputation from the journal.
//!
//! `PROPTEST_CASES` scales the number of sequences (default 128).

mod common;

use agentsessions_machine::vocab::ExecuteTool;
use std::collections::BTreeSet;

use agentsessions_machine::events::{self, body};
use agentsessions_machine::journal::projection::session_status;
use agentsessions_machine::vocab::{Code, Effect, Response};
use agentsessions_proto::v1::{EventKind, ExecState, Mediation};
use agentsessions_testkit::World;
use common::*;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

/// The harness a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Echo,
    Tools,
    Approval,
}

impl Kind {
    fn route(self) -> &'static str {
        match self {
            Self::Echo => "echo",
            Self::Tools => "tools",
            Self::Approval => "approval",
        }
    }
}

/// The latest gated call of an approval session.
#[derive(Debug, Clone, PartialEq)]
struct Gate {
    request_seq: i64,
    decision: Option<bool>,
    receipted: bool,
}

#[derive(Debug, Clone)]
struct Sess {
    kind: Kind,
    records: usize,
    gate: Option<Gate>,
    /// The tool's effect has happened (all test harnesses use one key).
    executed: bool,
}

impl Sess {
    /// A gate that still blocks new input: no receipt yet.
    fn open_gate(&self) -> Option<&Gate> {
        self.gate.as_ref().filter(|g| !g.receipted)
    }
}

#[derive(Debug, Clone, Default)]
struct Model {
    sessions: Vec<Sess>,
    model_calls: usize,
    tool_attempts: usize,
}

#[derive(Debug, Clone)]
enum Op {
    Create(Kind),
    Exec(Index, bool),
    Approve {
        s: Index,
        approved: bool,
        right: bool,
    },
    Resume(Index),
    Suspend(Index),
    Replay(Index),
    Get(Index),
    Restart,
}

struct Reference;

impl Model {
    fn pick(&self, i: &Index) -> usize {
        i.index(self.sessions.len())
    }

    /// A turn or recovery outcome for session `s`: what Exec (with or
    /// without inputs) and Resume do to the journal and the counters.
    fn run_turn(&mut self, s: usize, inputs: usize) {
        let sess = &mut self.sessions[s];
        match sess.kind {
            Kind::Echo => {
                sess.records += 3 + inputs + 1;
                self.model_calls += 1;
            }
            Kind::Tools => {
                sess.records += 4 + inputs + 1;
                self.tool_attempts += 1;
                sess.executed = true;
            }
            Kind::Approval => {
                // START, INPUT*, TOOL_CALL+REQUEST, SUSPEND.
                let request_seq = (sess.records + 1 + inputs + 2) as i64;
                sess.records += 1 + inputs + 3;
                sess.gate = Some(Gate {
                    request_seq,
                    decision: None,
                    receipted: false,
                });
            }
        }
    }

    /// Resume (or inputless Exec recovery) of session `s`.
    fn recover(&mut self, s: usize, unary: bool) {
        let sess = &mut self.sessions[s];
        match sess.open_gate().cloned() {
            Some(Gate { decision: None, .. }) => {}
            Some(Gate {
                decision: Some(approved),
                ..
            }) => {
                // Receipt, the harness's OUTPUT and END, then RESUME.
                sess.records += 4;
                if approved {
                    self.tool_attempts += 1;
                    sess.executed = true;
                }
                if let Some(g) = sess.gate.as_mut() {
                    g.receipted = true;
                }
            }
            None if unary => sess.records += 1,
            None => unreachable!("inputless Exec without a gate is a turn"),
        }
    }
}

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Op> {
        let kind = prop_oneof![Just(Kind::Echo), Just(Kind::Tools), Just(Kind::Approval)];
        if state.sessions.is_empty() {
            return kind.prop_map(Op::Create).boxed();
        }
        prop_oneof![
            1 => kind.prop_map(Op::Create),
            4 => (any::<Index>(), any::<bool>()).prop_map(|(s, i)| Op::Exec(s, i)),
            3 => (any::<Index>(), any::<bool>(), prop::bool::weighted(0.8))
                .prop_map(|(s, approved, right)| Op::Approve { s, approved, right }),
            2 => any::<Index>().prop_map(Op::Resume),
            1 => any::<Index>().prop_map(Op::Suspend),
            1 => any::<Index>().prop_map(Op::Replay),
            1 => any::<Index>().prop_map(Op::Get),
            1 => Just(Op::Restart),
        ]
        .boxed()
    }

    fn preconditions(state: &Model, op: &Op) -> bool {
        matches!(op, Op::Create(_)) || !state.sessions.is_empty()
    }

    fn apply(mut state: Model, op: &Op) -> Model {
        match op {
            Op::Create(kind) => state.sessions.push(Sess {
                kind: *kind,
                records: 0,
                gate: None,
                executed: false,
            }),
            Op::Exec(i, with_input) => {
                let s = state.pick(i);
                let gated = state.sessions[s].open_gate().is_some();
                match (gated, with_input) {
                    (true, true) => {} // blocked by the gate
                    (true, false) => state.recover(s, false),
                    (false, _) => state.run_turn(s, usize::from(*with_input)),
                }
            }
            Op::Approve { s, approved, right } => {
                let s = state.pick(s);
                if let (true, Some(g)) = (*right, state.sessions[s].gate.as_mut())
                    && g.decision.is_none()
                {
                    g.decision = Some(*approved);
                    state.sessions[s].records += 1;
                }
            }
            Op::Resume(i) => {
                let s = state.pick(i);
                state.recover(s, true);
            }
            Op::Suspend(i) => {
                let s = state.pick(i);
                state.sessions[s].records += 1;
            }
            Op::Replay(_) | Op::Get(_) | Op::Restart => {}
        }
        state
    }
}

struct Sut {
    world: World,
    sids: Vec<String>,
    /// Trace entries already checked for the effect invariants.
    checked: usize,
    /// The reference state before the transition being applied (the
    /// runner hands `apply` only the state after it).
    before: Model,
}

struct HostModel;

impl HostModel {
    /// The status the host must answer `op` with, given the model before it.
    fn expect_code(op: &Op, before: &Model) -> Code {
        match op {
            Op::Exec(i, true) if before.sessions[before.pick(i)].open_gate().is_some() => {
                Code::FailedPrecondition
            }
            Op::Approve { s, approved, right } => {
                let sess = &before.sessions[before.pick(s)];
                match (&sess.gate, right) {
                    (Some(g), true) => match g.decision {
                        None => Code::Ok,
                        Some(d) if d == *approved => Code::Ok,
                        Some(_) => Code::FailedPrecondition,
                    },
                    _ => Code::FailedPrecondition,
                }
            }
            _ => Code::Ok,
        }
    }
}

impl StateMachineTest for HostModel {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sut {
        Sut {
            world: World::default(),
            sids: Vec::new(),
            checked: 0,
            before: Model::default(),
        }
    }

    fn apply(mut sut: Sut, model: &Model, op: Op) -> Sut {
        let before = std::mem::replace(&mut sut.before, model.clone());
        sut.checked = sut.world.trace.len();
        let world = &mut sut.world;
        let pick = |i: &Index| i.index(sut.sids.len());
        match &op {
            Op::Create(kind) => {
                let sid = create(world, kind.route());
                sut.sids.push(sid);
            }
            Op::Restart => world.restart(),
            Op::Replay(i) => {
                let sid = &sut.sids[pick(i)];
                let calls = world.model_calls;
                let call = world.call(replay(sid));
                assert_eq!(call.code(), Code::Ok);
                assert_eq!(streamed(&call), &*world.store.records(sid));
                assert_eq!(world.model_calls, calls, "replay calls no model");
            }
            Op::Get(i) => {
                let sid = &sut.sids[pick(i)];
                let s = session(world, sid);
                let records = &*world.store.records(sid);
                let status = session_status(records, s.last_seq).expect("projection");
                assert_eq!(s.exec_state, status.exec_state as i32);
                assert_eq!(s.pending_approval, status.pending_approval);
                let sess = &model.sessions[pick(i)];
                let awaiting = sess.gate.as_ref().filter(|g| g.decision.is_none());
                assert_eq!(
                    s.pending_approval.as_ref().map(|p| p.request_seq),
                    awaiting.map(|g| g.request_seq)
                );
                if awaiting.is_some() {
                    assert_eq!(s.exec_state, ExecState::ExecAwaiting as i32);
                }
            }
            Op::Exec(i, with_input) => {
                let sid = sut.sids[pick(i)].clone();
                let text = if *with_input { "hi" } else { "" };
                let call = world.call(exec(&sid, "", text));
                let want = HostModel::expect_code(&op, &before);
                assert_eq!(call.code(), want, "{op:?}: {call:?}");
            }
            Op::Approve { s, approved, right } => {
                let sid = sut.sids[pick(s)].clone();
                let sess = &before.sessions[pick(s)];
                let (exec_id, seq) = match (&sess.gate, right) {
                    (Some(g), true) => {
                        let rec = world.store.records(&sid)[g.request_seq as usize - 1].clone();
                        (
                            rec.event.as_ref().unwrap().execution_id.clone(),
                            g.request_seq,
                        )
                    }
                    _ => ("ffffffffffffffff".to_owned(), 9999),
                };
                let call = world.call(approve(&sid, &exec_id, "c1", seq, *approved));
                let want = HostModel::expect_code(&op, &before);
                assert_eq!(call.code(), want, "{op:?}: {call:?}");
                if want == Code::Ok {
                    assert!(matches!(call.reply, Ok(Response::Approve(_))));
                }
            }
            Op::Resume(i) => {
                let sid = sut.sids[pick(i)].clone();
                let call = world.call(resume(&sid));
                assert_eq!(call.code(), Code::Ok, "{op:?}: {call:?}");
            }
            Op::Suspend(i) => {
                let sid = sut.sids[pick(i)].clone();
                let call = world.call(suspend(&sid));
                assert_eq!(call.code(), Code::Ok, "{op:?}: {call:?}");
            }
        }
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        let world = &sut.world;
        debug_assert_eq!(sut.sids.len(), model.sessions.len());
        assert_eq!(world.host.in_flight(), 0, "a host at rest holds no session");
        for (sid, sess) in sut.sids.iter().zip(&model.sessions) {
            let records = &*world.store.records(sid);
            assert_eq!(records.len(), sess.records, "{sid} ({:?})", sess.kind);
            agentsessions_machine::chain::verify(records).expect("chain verifies");
        }
        assert_eq!(world.model_calls, model.model_calls, "model calls");
        assert_eq!(
            world.executor.attempts, model.tool_attempts,
            "tool attempts"
        );
        let executed = model.sessions.iter().filter(|s| s.executed).count();
        assert_eq!(
            world.executor.effects, executed,
            "one effect per (session, key)"
        );
        let mut keys = BTreeSet::new();
        for e in &world.trace {
            if let Effect::Tool(ExecuteTool { session, call, .. }) = e {
                keys.insert((session.clone(), call.idempotency_key.clone()));
            }
        }
        assert_eq!(world.executor.effects, keys.len());
        for e in &world.trace[sut.checked..] {
            if let Effect::Tool(ExecuteTool {
                session,
                intent,
                call,
                ..
            }) = e
            {
                check_tool(world, session, intent.record(), call);
            }
        }
    }
}

/// Record before effect, and the approval rule for gated calls.
fn check_tool(
    world: &World,
    session: &str,
    intent: &agentsessions_proto::v1::LogRecord,
    call: &agentsessions_proto::v1::ToolCall,
) {
    let records = &*world.store.records(session);
    let stored = records.get(intent.seq as usize - 1);
    assert_eq!(
        stored,
        Some(intent),
        "the executed intent is a committed record"
    );
    if call.mediation != Mediation::RequiresApproval as i32 {
        return;
    }
    let exec_id = &intent.event.as_ref().unwrap().execution_id;
    let request = records.iter().find(|r| {
        let ev = r.event.as_ref().unwrap();
        &ev.execution_id == exec_id && body::approval(ev).is_some_and(|a| a.tool_call_id == call.id)
    });
    let request = request.expect("a gated call has its request");
    let decision = records.iter().find(|r| {
        let ev = r.event.as_ref().unwrap();
        &ev.execution_id == exec_id
            && events::kind_of(ev) == EventKind::EventApprovalResult
            && body::approval_result(ev)
                .is_some_and(|d| d.tool_call_id == call.id && d.request_seq == request.seq)
    });
    let decision = decision.expect("a gated call runs only after its decision");
    let d = body::approval_result(decision.event.as_ref().unwrap()).unwrap();
    assert!(d.approved, "a denial never executes");
    assert!(intent.seq < request.seq && request.seq < decision.seq);
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128)
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn host_matches_the_reference_model(sequential 1..40 => HostModel);
}
