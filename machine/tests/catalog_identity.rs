//! Tool identity on replay and recovery through the host: the tool_replay
//! entries and the recorded-identity half of approval_safety in the catalog
//! (controller.md §4.5, §4.6).
//!
//! Every case re-runs a recorded turn with a scripted harness that re-emits
//! it with one request changed ([`harness::steps`]), on Replay
//! (`ReplayHarness`, read-only) and on Resume of a journal cut at a chosen
//! record.

mod common;
#[path = "support/rerun.rs"]
mod rerun;

use agentsessions_machine::vocab::HarnessEffect;
use agentsessions_machine::vocab::{Code, Effect};
use agentsessions_proto::v1::{
    Event, EventKind, Mediation, ToolCall, ToolResult, controller_frame::Frame, event::Body,
};
use agentsessions_testkit::World;
use agentsessions_testkit::harness::{self, Step};
use common::*;
use rerun::*;

use EventKind::*;

// ---- tool identity ------------------------------------------------------------

/// Each identity change of a re-emitted ordinary call, and the field the
/// divergence names.
fn ordinary_mutations() -> Vec<(ToolCall, &'static str)> {
    let base = ordinary("c1");
    let with = |f: fn(&mut ToolCall)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    vec![
        (with(|c| c.id = "c2".into()), "id"),
        (with(|c| c.tool = "read".into()), "tool"),
        (
            with(|c| c.args = Some(obj(vec![("path", text("b"))]))),
            "args",
        ),
        (
            with(|c| {
                c.args = Some(obj(vec![
                    ("path", text("a")),
                    (
                        "opts",
                        nested(vec![("list", list(vec![num(1.0), num(3.0)]))]),
                    ),
                ]))
            }),
            "args",
        ),
        (
            with(|c| {
                c.args = Some(obj(vec![
                    ("path", text("a")),
                    (
                        "opts",
                        nested(vec![("list", list(vec![num(2.0), num(1.0)]))]),
                    ),
                ]))
            }),
            "args",
        ),
        (
            with(|c| c.idempotency_key = "k-other".into()),
            "idempotency key",
        ),
        (
            with(|c| c.mediation = Mediation::RequiresApproval as i32),
            "mediation",
        ),
        (
            with(|c| c.mediation = Mediation::InHarnessReported as i32),
            "mediation",
        ),
        (
            with(|c| c.mediation = Mediation::Unspecified as i32),
            "mediation",
        ),
    ]
}

#[test]
fn a_changed_tool_identity_diverges_before_any_result_or_effect() {
    let (store, sid) = ordinary_turn(ordinary("c1"));
    // Replay; Resume with the result recorded; Resume at the bare intent.
    for rerun in [Rerun::Replay, Rerun::Resume(4), Rerun::Resume(3)] {
        for (call, field) in ordinary_mutations() {
            let steps = vec![Step::Call(call), Step::Output("done".into())];
            assert_diverges(&store, &sid, "tools", rerun, steps, field);
        }
    }
    // The unchanged call replays and recovers without running the tool again.
    let steps = || vec![Step::Call(ordinary("c1")), Step::Output("done".into())];
    let mut world = over(&store, &sid, None, "tools", steps());
    assert!(replay_harness(&mut world, &sid).is_ok());
    let mut world = over(&store, &sid, Some(4), "tools", steps());
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.attempts, 0);
}

#[test]
fn a_changed_identity_of_a_recorded_gate_diverges_and_never_executes() {
    let (decided, done, sid) = gated_default();
    let with = |f: fn(&mut ToolCall)| {
        let mut c = gate("c1");
        f(&mut c);
        c
    };
    let mutations = [
        (with(|c| c.id = "c2".into()), "id"),
        (with(|c| c.tool = "read".into()), "tool"),
        (with(|c| c.args = Some(obj(vec![("x", num(1.0))]))), "args"),
        (
            with(|c| c.idempotency_key = "k-other".into()),
            "idempotency key",
        ),
        (
            with(|c| c.mediation = Mediation::ControllerMediated as i32),
            "mediation",
        ),
        // The same id re-emitted as a keyless ordinary call is a mediation
        // divergence, not a missing-key refusal: the id names the gate.
        (
            with(|c| {
                c.mediation = Mediation::ControllerMediated as i32;
                c.idempotency_key.clear();
            }),
            "mediation",
        ),
    ];
    for (call, field) in mutations {
        let steps = || vec![Step::Call(call.clone()), Step::Output("done".into())];
        // Decided (the executor would run next), receipt cut, and replay.
        assert_diverges(&decided, &sid, "approval", Rerun::Resume(6), steps(), field);
        assert_diverges(&done, &sid, "approval", Rerun::Resume(7), steps(), field);
        assert_diverges(&done, &sid, "approval", Rerun::Replay, steps(), field);
    }
}

#[test]
fn a_keyless_identity_change_on_decided_recovery_keeps_the_evidence_for_the_next_resume() {
    let (decided, _, sid) = gated_default();
    let mut keyless = gate("c1");
    keyless.mediation = Mediation::ControllerMediated as i32;
    keyless.idempotency_key.clear();
    let mut world = over(&decided, &sid, None, "approval", vec![Step::Call(keyless)]);
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Internal, "{call:?}");
    assert!(status(&call).message.contains("replay diverged"));
    assert_eq!(world.executor.attempts, 0);
    assert_eq!(world.model_calls, 0);
    assert_eq!(kinds(&world, &sid)[6..].to_vec(), vec![EventError]);
    agentsessions_machine::chain::verify(&world.store.records(&sid)).expect("chain verifies");
    // No park handoff happened, and the decision still stands.
    assert!(!world.runtime_calls.contains(&"snapshot".to_string()));
    assert!(session(&mut world, &sid).pending_approval.is_none());
    play(
        &mut world,
        "approval",
        vec![Step::Call(gate("c1")), Step::Output("done".into())],
    );
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.effects, 1);
    assert_eq!(kinds(&world, &sid).last(), Some(&EventLifecycle));
}

#[test]
fn a_keyless_reemission_of_a_recorded_keyed_call_is_a_key_refusal_that_consumes_nothing() {
    let (store, sid) = ordinary_turn(ordinary("c1"));
    let mut keyless = ordinary("c1");
    keyless.idempotency_key.clear();
    // The live host refused a keyless call before writing anything, so its
    // re-emission is refused the same way rather than matched to the record.
    for keep in [None, Some(4)] {
        let mut world = over(
            &store,
            &sid,
            keep,
            "tools",
            vec![Step::Call(keyless.clone())],
        );
        let err = match keep {
            None => replay_harness(&mut world, &sid).expect_err("refused"),
            Some(_) => status(&world.call(resume(&sid))),
        };
        assert!(err.message.contains("missing idempotency key"), "{err:?}");
        assert!(!err.message.contains("diverged"), "{err:?}");
        assert_eq!(world.executor.attempts, 0);
    }
    // The keyed call is then served from the record: no tool runs.
    let steps = || vec![Step::Call(ordinary("c1")), Step::Output("done".into())];
    let mut world = over(&store, &sid, Some(4), "tools", steps());
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert!(replay_harness(&mut world, &sid).is_ok());
    assert_eq!(world.executor.attempts, 0);
}

// ---- recorded tool evidence ---------------------------------------------------------

/// A session on "tools" holding `events` (appended as another writer would).
fn journal(world: &mut World, events: &[Event]) -> String {
    let sid = create(world, "tools");
    world.store.append(&sid, 0, 1, events, world.now).unwrap();
    sid
}

/// The events of one recorded turn of execution "e1" around `middle`.
fn turn(middle: Vec<Event>) -> Vec<Event> {
    use agentsessions_machine::events as ev;
    let start = agentsessions_proto::v1::ExecutionStart {
        input_count: Some(1),
        harness: "tools".into(),
        harness_version: "1".into(),
        ..Default::default()
    };
    let mut all = vec![
        ev::execution_start("e1", start),
        ev::input("e1", ev::text_message("user", "go")),
    ];
    all.extend(middle);
    all.push(ev::output("e1", ev::assistant_text("done")));
    all.push(ev::end_completed("e1"));
    all
}

fn tool_event(call: Option<ToolCall>) -> Event {
    let mut e = harness::ev("e1", EventToolCall, Body::Tool(ToolCall::default()));
    e.body = call.map(Body::Tool);
    e
}

fn result_event(id: Option<&str>) -> Event {
    let mut e = harness::ev("e1", EventToolResult, Body::Result(ToolResult::default()));
    e.body = id.map(|id| {
        Body::Result(ToolResult {
            id: id.into(),
            ..ToolResult::default()
        })
    });
    e
}

/// Replays the hand-built turn and resumes it without its END; both must
/// fail with `code` and a message containing `want`, before any tool or
/// model effect, with at most the audit ERROR written.
fn assert_fails_closed(middle: Vec<Event>, emit: ToolCall, code: Code, want: &str) {
    let mut world = World::default();
    play(
        &mut world,
        "tools",
        vec![Step::Call(emit), Step::Output("done".into())],
    );
    let sid = journal(&mut world, &turn(middle));
    let full = world.store.records(&sid).len();
    let mark = world.trace.len();
    let err = replay_harness(&mut world, &sid).expect_err("replay fails");
    assert_eq!(
        (err.code, err.message.contains(want)),
        (code, true),
        "replay: {err:?}"
    );
    world.store.truncate(&sid, full - 1);
    let err = status(&world.call(resume(&sid)));
    assert_eq!(
        (err.code, err.message.contains(want)),
        (code, true),
        "resume: {err:?}"
    );
    let effects = since(&world, mark);
    assert!(!any_of(effects, &["ExecuteTool", "InvokeModel"]), "{want}");
    assert_eq!(tool_frames_sent(effects), 0, "{want}");
    assert!(
        world.store.records(&sid).len() <= full,
        "at most the ERROR: {want}"
    );
}

#[test]
fn malformed_recorded_tool_evidence_fails_closed_with_no_effects() {
    let c1 = || ordinary("c1");
    let diverged = Code::Internal;
    // A result with no call before it.
    assert_fails_closed(
        vec![result_event(Some("c1"))],
        c1(),
        diverged,
        "expected a recorded tool call",
    );
    // A call with no payload.
    assert_fails_closed(
        vec![tool_event(None), result_event(Some("c1"))],
        c1(),
        diverged,
        "replay diverged: recorded tool call has no payload",
    );
    // A result with no payload.
    assert_fails_closed(
        vec![tool_event(Some(c1())), result_event(None)],
        c1(),
        diverged,
        "replay diverged: recorded tool result has no payload",
    );
    // A result answering another call.
    assert_fails_closed(
        vec![tool_event(Some(c1())), result_event(Some("c2"))],
        c1(),
        diverged,
        "recorded tool result answers another call",
    );
}

#[test]
fn an_invalid_recorded_tool_intent_diverges_with_its_cause() {
    let mut keyless = ordinary("c1");
    keyless.idempotency_key.clear();
    let mediated = |m: Mediation| ToolCall {
        mediation: m as i32,
        ..ordinary("c1")
    };
    let evidence = |call: &ToolCall| vec![tool_event(Some(call.clone())), result_event(Some("c1"))];
    // A keyed re-emission of a keyless record: the record is at fault.
    assert_fails_closed(
        evidence(&keyless),
        ordinary("c1"),
        Code::Internal,
        "replay diverged: recorded tool call has no idempotency key",
    );
    // The identical keyless call meets the live refusal first.
    assert_fails_closed(
        evidence(&keyless),
        keyless.clone(),
        Code::Internal,
        "missing idempotency key",
    );
    for m in [Mediation::InHarnessReported, Mediation::Unspecified] {
        let call = mediated(m);
        let want = format!(
            "replay diverged: recorded tool call has mediation {}",
            m.as_str_name()
        );
        assert_fails_closed(evidence(&call), call.clone(), Code::Internal, &want);
    }
}

#[test]
fn argument_presence_and_shape_stay_distinct() {
    let empty = || Some(obj(vec![]));
    let cases = [
        (None, empty()),
        (empty(), None),
        (empty(), Some(obj(vec![("x", null())]))),
        (
            Some(obj(vec![("x", nested(vec![]))])),
            Some(obj(vec![("x", list(vec![]))])),
        ),
        // The two shapes Go's whole-map fallback could record for a nested
        // nil map are not interchangeable either.
        (
            Some(obj(vec![("m", null())])),
            Some(obj(vec![("m", nested(vec![]))])),
        ),
    ];
    for (recorded, emitted) in cases {
        let (store, sid) = ordinary_turn(ToolCall {
            args: recorded,
            ..ordinary("c1")
        });
        let emitted = ToolCall {
            args: emitted,
            ..ordinary("c1")
        };
        for rerun in [Rerun::Replay, Rerun::Resume(4), Rerun::Resume(3)] {
            let steps = vec![Step::Call(emitted.clone()), Step::Output("done".into())];
            assert_diverges(&store, &sid, "tools", rerun, steps, "args");
        }
    }
}

#[test]
fn equal_numbers_match_however_they_were_built_and_serve_the_recorded_result() {
    // Struct numbers are f64 on both sides: an integer-built 2 and 2.0 are
    // one value, so the recorded result is served and nothing runs.
    let recorded = ToolCall {
        args: Some(obj(vec![("n", num(2.0)), ("l", list(vec![num(0.5)]))])),
        ..ordinary("c1")
    };
    let (store, sid) = ordinary_turn(recorded);
    let two: i64 = 2;
    let emitted = ToolCall {
        args: Some(obj(vec![
            ("n", num(two as f64)),
            ("l", list(vec![num(1.0 / 2.0)])),
        ])),
        ..ordinary("c1")
    };
    let steps = || vec![Step::Call(emitted.clone()), Step::Output("done".into())];
    let mut world = over(&store, &sid, None, "tools", steps());
    assert!(replay_harness(&mut world, &sid).is_ok());
    let mut world = over(&store, &sid, Some(4), "tools", steps());
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.attempts, 0);
    let served = since(&world, mark).iter().find_map(|e| match e {
        Effect::Harness(HarnessEffect::Send { frame, .. }) => match &frame.frame {
            Some(Frame::Tool(r)) => Some(r.id.clone()),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(served.as_deref(), Some("c1"));
    agentsessions_machine::chain::verify(&world.store.records(&sid)).expect("chain");
}

#[test]
fn an_ordinary_call_with_an_empty_id_executes_and_replays_with_an_empty_result_id() {
    let call = ToolCall {
        id: String::new(),
        ..ordinary("c1")
    };
    let (store, sid) = ordinary_turn(call.clone());
    let result = store.records(&sid)[3].clone();
    let r = agentsessions_machine::events::body::result(result.event.as_ref().unwrap()).unwrap();
    assert_eq!(r.id, "");
    let steps = || vec![Step::Call(call.clone()), Step::Output("done".into())];
    let mut world = over(&store, &sid, None, "tools", steps());
    assert!(replay_harness(&mut world, &sid).is_ok());
    let mut world = over(&store, &sid, Some(4), "tools", steps());
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.attempts, 0);
}

#[test]
fn live_tail_tool_errors_after_a_served_prefix_are_not_divergence() {
    let (store, sid) = ordinary_turn(ordinary("c1"));
    let mut keyless = ordinary("c2");
    keyless.idempotency_key.clear();
    let in_harness = ToolCall {
        mediation: Mediation::InHarnessReported as i32,
        ..ordinary("c2")
    };
    // (second call, executor failure, expected text, executor attempts)
    let cases = [
        (ordinary("c2"), Some("boom"), "boom", 1),
        (keyless, None, "missing idempotency key", 0),
        (in_harness, None, "unmediated tool call", 0),
    ];
    for (second, fail, want, attempts) in cases {
        let steps = vec![Step::Call(ordinary("c1")), Step::Call(second)];
        let mut world = over(&store, &sid, Some(4), "tools", steps);
        world.executor.fail_next = fail.map(String::from);
        let err = status(&world.call(resume(&sid)));
        assert_eq!(err.code, Code::Internal, "{want}: {err:?}");
        assert!(err.message.contains(want), "{err:?}");
        assert!(!err.message.contains("diverged"), "{err:?}");
        assert_eq!(world.executor.attempts, attempts, "{want}");
        assert_eq!(kinds(&world, &sid).last(), Some(&EventError));
    }
}
