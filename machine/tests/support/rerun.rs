//! Re-running recorded turns through the host with a scripted harness that
//! re-emits them, possibly with one request changed: journal builders, the
//! Replay/Resume drivers and the divergence check shared by the identity
//! catalogs (`catalog_identity`, `catalog_gate_ids`).
#![allow(dead_code)]

use agentsessions_machine::vocab::HarnessEffect;
use agentsessions_machine::vocab::{Code, Effect, ReplayReport, Request, Response, Status};
use agentsessions_proto::v1::{EventKind, Mediation, ToolCall, controller_frame::Frame};
use agentsessions_testkit::harness::{self, FnScript, Step, keyed_call};
use agentsessions_testkit::{Call, MemStore, World, world};
use pbjson_types::{ListValue, Struct, Value, value::Kind};

use crate::common::*;
use EventKind::*;

// ---- builders ---------------------------------------------------------------

pub fn num(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

pub fn text(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

pub fn null() -> Value {
    Value {
        kind: Some(Kind::NullValue(0)),
    }
}

pub fn list(items: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values: items })),
    }
}

pub fn obj(fields: Vec<(&str, Value)>) -> Struct {
    Struct {
        fields: fields.into_iter().map(|(k, v)| (k.into(), v)).collect(),
    }
}

pub fn nested(fields: Vec<(&str, Value)>) -> Value {
    Value {
        kind: Some(Kind::StructValue(obj(fields))),
    }
}

/// The recorded ordinary call: keyed, host-mediated, with nested args.
pub fn ordinary(id: &str) -> ToolCall {
    ToolCall {
        args: Some(obj(vec![
            ("path", text("a")),
            (
                "opts",
                nested(vec![("list", list(vec![num(1.0), num(2.0)]))]),
            ),
        ])),
        ..keyed_call(id, Mediation::ControllerMediated)
    }
}

pub fn gate(id: &str) -> ToolCall {
    keyed_call(id, Mediation::RequiresApproval)
}

/// Serves harness kind `kind` with a [`harness::steps`] script.
pub fn play(world: &mut World, kind: &str, steps: Vec<Step>) {
    world.scripts.insert(
        kind.into(),
        Box::new(move || {
            Box::new(FnScript::new("tools", harness::steps(steps.clone())))
                as Box<dyn harness::Script>
        }),
    );
}

/// A completed ordinary turn on "tools": START, INPUT, TOOL_CALL,
/// TOOL_RESULT, OUTPUT, END.
pub fn ordinary_turn(call: ToolCall) -> (MemStore, String) {
    let mut world = World::default();
    play(
        &mut world,
        "tools",
        vec![Step::Call(call), Step::Output("done".into())],
    );
    let sid = create(&mut world, "tools");
    let done = world.call(exec(&sid, "", "go"));
    assert_eq!(done.code(), Code::Ok, "{done:?}");
    assert_eq!(world.store.records(&sid).len(), 6);
    (world.store, sid)
}

/// A gated turn on "approval" after its approval: START, INPUT, TOOL_CALL,
/// APPROVAL_REQUEST, SUSPEND, APPROVAL_RESULT (the decision cut), and the
/// same journal completed by a Resume: + TOOL_RESULT, OUTPUT, END, RESUME.
pub fn gated_turn(steps: Vec<Step>) -> (MemStore, MemStore, String) {
    let mut world = World::default();
    play(&mut world, "approval", steps);
    let (sid, eid, seq) = parked(&mut world, "approval");
    let approved = world.call(approve(&sid, &eid, "c1", seq, true));
    assert_eq!(approved.code(), Code::Ok, "{approved:?}");
    let decided = world.store.clone();
    let done = world.call(resume(&sid));
    assert_eq!(done.code(), Code::Ok, "{done:?}");
    (decided, world.store, sid)
}

pub fn gated_default() -> (MemStore, MemStore, String) {
    gated_turn(vec![Step::Call(gate("c1")), Step::Output("done".into())])
}

/// A world over `store` (cut to `keep` records when set) whose `kind`
/// harness plays `steps`.
pub fn over(
    store: &MemStore,
    sid: &str,
    keep: Option<usize>,
    kind: &str,
    steps: Vec<Step>,
) -> World {
    let mut store = store.clone();
    if let Some(keep) = keep {
        store.truncate(sid, keep);
    }
    let mut world = World::with_store(world::config(), store);
    play(&mut world, kind, steps);
    world
}

pub fn replay_harness(world: &mut World, sid: &str) -> Result<ReplayReport, Status> {
    let call = world.call(Request::ReplayHarness {
        session: sid.into(),
    });
    match call.reply {
        Ok(Response::Replayed(report)) => Ok(report),
        Ok(other) => panic!("unexpected reply {other:?}"),
        Err(status) => Err(status),
    }
}

/// The status of a failed call.
pub fn status(call: &Call) -> Status {
    call.reply.clone().expect_err("the call fails")
}

pub fn tool_frames_sent(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| {
            matches!(e, Effect::Harness(HarnessEffect::Send { frame, .. }) if matches!(frame.frame, Some(Frame::Tool(_))))
        })
        .count()
}

pub fn count(world: &World, sid: &str, kind: EventKind) -> usize {
    kinds(world, sid).iter().filter(|k| **k == kind).count()
}

/// How a recorded turn is re-run.
#[derive(Debug, Clone, Copy)]
pub enum Rerun {
    /// ReplayHarness of the whole journal.
    Replay,
    /// Resume of the journal cut to this many records.
    Resume(usize),
}

/// Re-runs the turn and checks the run diverged on `field` before anything
/// was executed, invoked or sent back: Replay writes nothing; Resume writes
/// exactly one ERROR.
pub fn assert_diverges(
    store: &MemStore,
    sid: &str,
    kind: &str,
    rerun: Rerun,
    steps: Vec<Step>,
    field: &str,
) {
    let mut world = over(store, sid, None, kind, steps);
    let keep = match rerun {
        Rerun::Replay => world.store.records(sid).len(),
        Rerun::Resume(keep) => keep,
    };
    world.store.truncate(sid, keep);
    let mark = world.trace.len();
    let err = match rerun {
        Rerun::Replay => replay_harness(&mut world, sid).expect_err("diverges"),
        Rerun::Resume(_) => status(&world.call(resume(sid))),
    };
    let what = format!("{rerun:?} {field}");
    assert_eq!(err.code, Code::Internal, "{what}: {err:?}");
    let want = format!("replay diverged: tool call {field} differs from the record");
    assert!(err.message.contains(&want), "{what}: {}", err.message);
    let effects = since(&world, mark);
    assert!(!any_of(effects, &["ExecuteTool", "InvokeModel"]), "{what}");
    assert_eq!(
        tool_frames_sent(effects),
        0,
        "{what}: no result reaches the harness"
    );
    let appended = world.store.records(sid).len() - keep;
    match rerun {
        Rerun::Replay => assert_eq!(appended, 0, "{what}"),
        Rerun::Resume(_) => {
            assert_eq!(appended, 1, "{what}");
            assert_eq!(kinds(&world, sid).last(), Some(&EventError), "{what}");
        }
    }
}
