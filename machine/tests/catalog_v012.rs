//! Id-less v0.1.2 journals through the host: Resume of the crashed Go
//! fixtures, a failed legacy recovery's ID-less ERROR, legacy Usage and
//! tool re-drive, and the legacy fork guard (controller.md §7.3 and the
//! v012_journal, legacy_failure and session/resume entries of the catalog).
//!
//! Fixtures come from the shared Go v0.1.2 directory; when it is missing the
//! fixture tests print a SKIPPED line and pass, unless
//! `AGENTSESSIONS_REQUIRE_FIXTURES` is set. The hand-built cases always run.

mod common;

use agentsessions_machine::events::{self, body};
use agentsessions_machine::vocab::{
    Code, Effect, ExecuteTool, ReplayReport, Request, Response, Status,
};
use agentsessions_proto::v1::{
    Event, EventKind, LogRecord, Mediation, Start, Usage, controller_frame::Frame,
};
use agentsessions_testkit::harness::{self, FnScript, Step, keyed_call};
use agentsessions_testkit::interop::parse_go_records;
use agentsessions_testkit::{Call, World};
use common::*;

use EventKind::*;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/go-v0.1.2"
);

/// A fixture's records, or `None` after a visible SKIPPED line.
fn fixture(name: &str) -> Option<Vec<LogRecord>> {
    if !std::path::Path::new(FIXTURES).is_dir() {
        assert!(
            std::env::var_os("AGENTSESSIONS_REQUIRE_FIXTURES").is_none(),
            "fixtures required but not found at {FIXTURES}"
        );
        println!("SKIPPED: fixtures not found at {FIXTURES}");
        return None;
    }
    let path = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Some(parse_go_records(&text).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// A session on the default (echo) harness holding `records` verbatim.
fn imported(world: &mut World, records: Vec<LogRecord>) -> String {
    let sid = create(world, "");
    world.store.import(&sid, records, world.now);
    sid
}

/// The Start frame sent since `mark`: (wire execution id, start).
fn start_sent(world: &World, mark: usize) -> Option<(String, Start)> {
    start_delivered(world, mark)
}

fn texts(messages: &[agentsessions_proto::v1::Message]) -> Vec<String> {
    messages.iter().map(events::message_text).collect()
}

fn replay_outputs(world: &mut World, sid: &str) -> Result<Vec<String>, Status> {
    let call = world.call(Request::ReplayHarness {
        session: sid.into(),
    });
    match call.reply {
        Ok(Response::Replayed(ReplayReport { outputs, .. })) => Ok(outputs),
        Ok(other) => panic!("unexpected reply {other:?}"),
        Err(status) => Err(status),
    }
}

/// Kinds and execution ids of the records after the first `from`.
fn tail(world: &World, sid: &str, from: usize) -> Vec<(EventKind, String)> {
    world.store.records(sid)[from..]
        .iter()
        .map(|r| {
            let ev = r.event.as_ref().unwrap();
            (events::kind_of(ev), ev.execution_id.clone())
        })
        .collect()
}

fn idless(kinds: &[EventKind]) -> Vec<(EventKind, String)> {
    kinds.iter().map(|k| (*k, String::new())).collect()
}

fn is_legacy_id(id: &str) -> bool {
    id.starts_with("legacy-") && id.len() == "legacy-".len() + 64
}

fn verify(world: &World, sid: &str) {
    agentsessions_machine::chain::verify(&world.store.records(sid)).expect("chain verifies");
}

// ---- the crashed fixtures ---------------------------------------------------------

#[test]
fn crashed_input_resumes_as_a_legacy_turn_then_replays_and_takes_a_new_exec() {
    let Some(records) = fixture("crashed-input") else {
        return;
    };
    let mut world = World::default();
    let sid = imported(&mut world, records.clone());
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.model_calls, 1);
    let (wire, start) = start_sent(&world, mark).expect("the legacy turn ran");
    assert!(is_legacy_id(&wire), "{wire}");
    assert!(start.history.is_empty());
    assert_eq!(texts(&start.inputs), vec!["hello"]);
    assert_eq!(start.resume_from_seq, 0);
    // The prefix is untouched; the recovered records carry no id.
    assert_eq!(&world.store.records(&sid)[..1], records.as_slice());
    assert_eq!(
        tail(&world, &sid, 1),
        idless(&[EventModelCall, EventOutput, EventEnd, EventLifecycle])
    );
    verify(&world, &sid);
    // Recovered: a second Resume runs nothing; Replay reproduces the turn.
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert!(start_sent(&world, mark).is_none());
    assert_eq!(
        replay_outputs(&mut world, &sid).unwrap(),
        vec!["echo:hello"]
    );
    // A new turn sees the whole recovered prefix as History.
    let head = world.store.records(&sid).len();
    let mark = world.trace.len();
    assert_eq!(world.call(exec(&sid, "", "new")).code(), Code::Ok);
    let (_, start) = start_sent(&world, mark).unwrap();
    assert_eq!(start.history.len(), head);
    let calls = world.model_calls;
    assert_eq!(
        replay_outputs(&mut world, &sid).unwrap(),
        vec!["echo:hello", "echo:new"]
    );
    assert_eq!(world.model_calls, calls);
}

#[test]
fn crashed_model_has_no_completion_to_serve_and_its_idless_error_finishes_the_turn() {
    let Some(records) = fixture("crashed-model") else {
        return;
    };
    let mut world = World::default();
    let sid = imported(&mut world, records);
    let call = world.call(resume(&sid));
    let err = call.reply.clone().unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err:?}");
    assert!(
        err.message.contains("recorded completion missing"),
        "{err:?}"
    );
    // A legacy trailing MODEL_CALL is never re-driven.
    assert_eq!(world.model_calls, 0);
    assert_eq!(tail(&world, &sid, 2), idless(&[EventError]));
    let log = world.store.records(&sid);
    let last = log.last().unwrap();
    let error = match &last.event.as_ref().unwrap().body {
        Some(agentsessions_proto::v1::event::Body::Error(e)) => e.description.clone(),
        other => panic!("not an error: {other:?}"),
    };
    assert!(error.contains("recorded completion missing"), "{error}");
    verify(&world, &sid);
    // The ERROR finished the turn: a retry runs nothing.
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert!(start_sent(&world, mark).is_none());
    assert_eq!(world.model_calls, 0);
    assert_eq!(tail(&world, &sid, 3), idless(&[EventLifecycle]));
}

#[test]
fn crashed_output_resumes_with_no_model_call_and_an_idless_end() {
    let Some(records) = fixture("crashed-output") else {
        return;
    };
    let mut world = World::default();
    let sid = imported(&mut world, records.clone());
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.model_calls, 0);
    assert_eq!(&world.store.records(&sid)[..3], records.as_slice());
    assert_eq!(tail(&world, &sid, 3), idless(&[EventEnd, EventLifecycle]));
    verify(&world, &sid);
    assert_eq!(
        replay_outputs(&mut world, &sid).unwrap(),
        vec!["echo:hello"]
    );
}

#[test]
fn multi_turn_crashed_output_resumes_its_last_input_with_the_first_turn_as_history() {
    let Some(records) = fixture("multi-turn-crashed-output") else {
        return;
    };
    let mut world = World::default();
    let sid = imported(&mut world, records.clone());
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    let (wire, start) = start_sent(&world, mark).unwrap();
    assert!(is_legacy_id(&wire), "{wire}");
    assert_eq!(texts(&start.inputs), vec!["second"]);
    let first: Vec<Event> = records[..4]
        .iter()
        .map(|r| r.event.clone().unwrap())
        .collect();
    assert_eq!(start.history, first);
    assert_eq!(world.model_calls, 0);
    assert_eq!(tail(&world, &sid, 7), idless(&[EventEnd, EventLifecycle]));
}

#[test]
fn mixed_interrupted_resumes_its_modern_turn_without_legacy_effects() {
    let Some(records) = fixture("mixed-interrupted") else {
        return;
    };
    let mut world = World::default();
    let sid = imported(&mut world, records.clone());
    let modern = records[4].event.as_ref().unwrap().execution_id.clone();
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    let (wire, start) = start_sent(&world, mark).unwrap();
    assert_eq!(wire, modern);
    assert_eq!(start.history.len(), 4);
    assert_eq!(world.model_calls, 0);
    let end = tail(&world, &sid, records.len());
    assert_eq!(
        end,
        vec![(EventEnd, modern), (EventLifecycle, String::new())]
    );
    assert_eq!(
        replay_outputs(&mut world, &sid).unwrap(),
        vec!["echo:hello", "echo:new"]
    );
}

// ---- hand-built legacy journals ------------------------------------------------

/// The events a modern run of `steps` on "tools" journals, with START
/// dropped and every execution id blanked: the shape v0.1.2 wrote. The
/// first `keep` of them are returned (a crash cut).
fn legacy_events(steps: Vec<Step>, keep: usize) -> Vec<Event> {
    let mut world = World::default();
    play(&mut world, steps);
    let sid = create(&mut world, "tools");
    assert_eq!(world.call(exec(&sid, "", "hello")).code(), Code::Ok);
    world.store.records(&sid)[1..]
        .iter()
        .take(keep)
        .map(|r| {
            let mut ev = r.event.clone().unwrap();
            ev.execution_id.clear();
            ev
        })
        .collect()
}

fn play(world: &mut World, steps: Vec<Step>) {
    world.scripts.insert(
        "tools".into(),
        Box::new(move || {
            Box::new(FnScript::new("tools", harness::steps(steps.clone())))
                as Box<dyn harness::Script>
        }),
    );
}

fn legacy_session(world: &mut World, events: &[Event]) -> String {
    let sid = create(world, "tools");
    world.store.append(&sid, 0, 1, events, world.now).unwrap();
    sid
}

fn error_text(call: &Call) -> String {
    call.reply.clone().unwrap_err().message
}

#[test]
fn a_failed_legacy_recovery_appends_one_idless_error_and_a_retry_is_a_no_op() {
    let model = || vec![Step::Model("hello".into()), Step::Output("done".into())];
    // INPUT, MODEL_CALL, OUTPUT: the harness must re-ask, then say "done".
    let events = legacy_events(model(), 3);
    // (harness on recovery, the cause the ERROR records)
    let cases: [(Vec<Step>, &str); 2] = [
        // Asks nothing and ends: recorded effects are left unconsumed.
        (vec![], "recovery consumed 0 of 2 recorded effects"),
        // Fails on its own after the served answer.
        (vec![Step::Model("hello".into())], "stream failed"),
    ];
    for (steps, cause) in cases {
        let mut world = World::default();
        let sid = legacy_session(&mut world, &events);
        let failing = !steps.is_empty();
        play(&mut world, steps.clone());
        if failing {
            // After its model answer the harness's stream breaks.
            world.scripts.insert(
                "tools".into(),
                Box::new(move || {
                    let mut inner = harness::steps(steps.clone());
                    Box::new(FnScript::new("tools", move |f| {
                        let mut reply = inner(f);
                        if matches!(f.frame, Some(Frame::Model(_))) {
                            reply.events.clear();
                            reply.fail = Some("stream failed".into());
                        }
                        reply
                    })) as Box<dyn harness::Script>
                }),
            );
        }
        let call = world.call(resume(&sid));
        assert_ne!(call.code(), Code::Ok, "{cause}");
        assert!(error_text(&call).contains(cause), "{call:?}");
        assert_eq!(world.model_calls, 0, "{cause}");
        assert_eq!(tail(&world, &sid, 3), idless(&[EventError]), "{cause}");
        let ev = world.store.records(&sid)[3].event.clone().unwrap();
        assert!(format!("{:?}", ev.body).contains(cause), "{cause}");
        // The ERROR finished the legacy turn.
        play(&mut world, model());
        let mark = world.trace.len();
        assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
        assert!(start_sent(&world, mark).is_none(), "{cause}");
        assert_eq!(tail(&world, &sid, 4), idless(&[EventLifecycle]));
    }
}

#[test]
fn an_error_finished_v012_turn_is_only_marked_on_resume_and_exec_starts_the_next() {
    // INPUT, MODEL_CALL, ERROR: the released host's failed turn.
    let mut events = legacy_events(vec![Step::Model("hello".into())], 2);
    events.push(events::error("", "model: provider down"));
    let mut world = World::default();
    let sid = legacy_session(&mut world, &events);
    play(&mut world, vec![Step::Model("new".into())]);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert!(start_sent(&world, mark).is_none());
    assert_eq!(tail(&world, &sid, 3), idless(&[EventLifecycle]));
    assert_eq!(world.call(exec(&sid, "", "new")).code(), Code::Ok);
    // The failed legacy turn has no END, so Replay keeps only the new turn.
    assert_eq!(replay_outputs(&mut world, &sid).unwrap(), vec!["echo:new"]);
    assert_eq!(world.model_calls, 1);
}

#[test]
fn legacy_usage_is_ignored_in_the_served_prefix_and_journaled_past_it() {
    let usage = |n: i64| {
        Step::Usage(Usage {
            input_tokens: n,
            ..Usage::default()
        })
    };
    // INPUT, MODEL_CALL, OUTPUT (v0.1.2 never served its USAGE records).
    let events = legacy_events(vec![Step::Model("hello".into())], 3);
    let mut world = World::default();
    let sid = legacy_session(&mut world, &events);
    // Any usage while the prefix is served; a real one after it.
    play(
        &mut world,
        vec![usage(99), Step::Model("hello".into()), usage(7)],
    );
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.model_calls, 0);
    assert_eq!(
        tail(&world, &sid, 3),
        idless(&[EventUsage, EventEnd, EventLifecycle])
    );
    let live = world.store.records(&sid)[3].event.clone().unwrap();
    assert_eq!(body::usage(&live).map(|u| u.input_tokens), Some(7));
    // Replay serves the whole legacy log, the journaled USAGE included.
    assert_eq!(
        replay_outputs(&mut world, &sid).unwrap(),
        vec!["echo:hello"]
    );
}

#[test]
fn a_legacy_tool_intent_is_redriven_once_in_the_session_scope() {
    let call = keyed_call("c1", Mediation::ControllerMediated);
    let steps = || vec![Step::Call(call.clone()), Step::Output("original".into())];
    // INPUT, TOOL_CALL: the effect may have happened, its result never landed.
    let events = legacy_events(steps(), 2);
    let mut world = World::default();
    let sid = legacy_session(&mut world, &events);
    play(&mut world, steps());
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    let driven: Vec<_> = since(&world, mark)
        .iter()
        .filter_map(|e| match e {
            Effect::Tool(ExecuteTool { session, call, .. }) => {
                Some((session.clone(), call.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(driven, vec![(sid.clone(), call.clone())]);
    assert_eq!(
        tail(&world, &sid, 2),
        idless(&[EventToolResult, EventOutput, EventEnd, EventLifecycle])
    );
    // Replay serves the receipt and never runs the tool again.
    assert_eq!(replay_outputs(&mut world, &sid).unwrap(), vec!["original"]);
    assert_eq!(world.executor.attempts, 1);
}

#[test]
fn a_legacy_tool_intent_inherited_by_a_fork_is_refused_with_exec_guidance() {
    let call = keyed_call("c1", Mediation::ControllerMediated);
    let events = legacy_events(vec![Step::Call(call), Step::Output("x".into())], 4);
    let mut world = World::default();
    let parent = legacy_session(&mut world, &events);
    let child = fork_child(&mut world, &parent, 2, "tools");
    let before = world.store.records(&child).to_vec();
    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(error_text(&call).contains("or Exec a new turn"), "{call:?}");
    assert_eq!(&*world.store.records(&child), before.as_slice());
    assert_eq!(world.executor.attempts, 0);
    play(&mut world, vec![Step::Output("fresh".into())]);
    assert_eq!(world.call(exec(&child, "", "again")).code(), Code::Ok);
}
