//! Recovery through the host: resume_model_cut, tool_replay (recovery
//! half), harness identity, input completeness, fork-inherited intents and
//! Suspend/Resume round trips (controller.md §5, §7; service.md §1.8–1.9).

mod common;

use agentsessions_machine::events::body;
use agentsessions_machine::vocab::RuntimeCall;
use agentsessions_machine::vocab::{AppendError, Code, Effect, ModelFailure, Request, RuntimeOp};
use agentsessions_proto::v1::{
    ComputeState, EventKind, ModelCall, Resumability, controller_frame::Frame, event::Body,
};
use agentsessions_testkit::harness::{self, FnScript, Reply, ev};
use agentsessions_testkit::{MemStore, World, world};
use common::*;

use EventKind::*;

fn verify(world: &World, sid: &str) {
    agentsessions_machine::chain::verify(&world.store.records(sid)).expect("chain verifies");
}

#[test]
fn resume_after_a_provider_error_calls_the_provider_once_more() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.model_fail_next = Some(ModelFailure::other("provider down"));
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Internal);
    assert_eq!(
        kinds(&world, &sid),
        vec![EventExecutionStart, EventInput, EventModelCall, EventError]
    );
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.model_calls, 1);
    assert_eq!(
        kinds(&world, &sid)[4..].to_vec(),
        vec![EventOutput, EventEnd, EventLifecycle]
    );
    verify(&world, &sid);
    // The recovered journal replays with no calls.
    world.call(replay(&sid));
    assert_eq!(world.model_calls, 1);
}

#[test]
fn each_failed_resume_at_a_model_call_calls_once_and_journals_an_error() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 3);
    let mark = world.trace.len();
    for _ in 0..2 {
        world.model_fail_next = Some(ModelFailure::other("provider down"));
        assert_eq!(world.call(resume(&sid)).code(), Code::Internal);
    }
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    let invoked = effect_names(since(&world, mark))
        .into_iter()
        .filter(|n| *n == "InvokeModel")
        .count();
    assert_eq!(invoked, 3, "one provider call per attempt");
    let k = kinds(&world, &sid);
    assert_eq!(k.iter().filter(|k| **k == EventModelCall).count(), 1);
    assert_eq!(k.iter().filter(|k| **k == EventOutput).count(), 1);
    assert_eq!(k.iter().filter(|k| **k == EventError).count(), 2);
    verify(&world, &sid);
}

/// An echo-like harness whose model input differs from the recorded one.
fn flaky() -> Box<dyn harness::Script> {
    Box::new(FnScript::new("echo", |f| match &f.frame {
        Some(Frame::Start(_)) => {
            let call = ModelCall {
                model: "echo".into(),
                id: "m1".into(),
                messages: vec![agentsessions_machine::events::text_message(
                    "user", "changed",
                )],
                ..ModelCall::default()
            };
            Reply::send(vec![ev(&f.execution_id, EventModelCall, Body::Model(call))])
        }
        _ => Reply::finish(vec![harness::end(&f.execution_id)]),
    }))
}

#[test]
fn resume_with_a_changed_model_input_diverges_without_a_provider_call() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 3);
    let before = world.model_calls;
    world.scripts.insert("echo".into(), Box::new(flaky));
    let call = world.call(resume(&sid));
    // An ordinary divergence on recovery is INTERNAL.
    assert_eq!(call.code(), Code::Internal, "{call:?}");
    assert!(call.reply.clone().unwrap_err().message.contains("I0"));
    assert_eq!(world.model_calls, before);
    assert_eq!(kinds(&world, &sid).last(), Some(&EventError));
    // The real harness then recovers with one call.
    world.scripts.clear();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.model_calls, before + 1);
}

#[test]
fn resume_of_a_durable_tool_intent_redrives_it_once_and_the_executor_dedups() {
    let mut world = World::default();
    // The effect happened but the result never landed.
    let sid = crashed_turn(&mut world, "tools", 3);
    assert_eq!((world.executor.attempts, world.executor.effects), (1, 1));
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.executor.attempts, 2, "re-driven once");
    assert_eq!(world.executor.effects, 1, "deduplicated by session and key");
    assert_eq!(
        kinds(&world, &sid)[3..].to_vec(),
        vec![EventToolResult, EventOutput, EventEnd, EventLifecycle]
    );
    // Recovery is idempotent; Replay repeats nothing.
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    world.call(replay(&sid));
    assert_eq!(world.executor.attempts, 2);
    // The same key in another session is a distinct effect.
    let other = create(&mut world, "tools");
    world.call(exec(&other, "", "go"));
    assert_eq!(world.executor.effects, 2);
}

#[test]
fn resume_after_a_lost_executor_answer_completes_without_repeating_the_effect() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    world.executor.lose_next = Some("connection reset".into());
    assert_eq!(world.call(exec(&sid, "", "go")).code(), Code::Internal);
    assert_eq!(
        kinds(&world, &sid)[2..].to_vec(),
        vec![EventToolCall, EventError]
    );
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!((world.executor.attempts, world.executor.effects), (2, 1));
    assert_eq!(kinds(&world, &sid).last(), Some(&EventLifecycle));
}

#[test]
fn resume_with_a_recorded_tool_result_serves_it_and_runs_nothing() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "tools", 4);
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.executor.attempts, 1, "only the original execution");
    assert_eq!(
        kinds(&world, &sid)[4..].to_vec(),
        vec![EventOutput, EventEnd, EventLifecycle]
    );
}

#[test]
fn a_recorded_version_that_changed_is_refused_before_the_harness_runs() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 3);
    let mut v2 = harness::descriptor("echo", Resumability::StatelessReplay);
    v2.version = "2".into();
    world.descriptors.insert("echo".into(), v2);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(call.reply.clone().unwrap_err().message.contains("version"));
    assert!(!any_of(
        since(&world, mark),
        &["Send", "Append", "InvokeModel"]
    ));
    assert_eq!(world.store.records(&sid).len(), 3);
    // At the recorded version it recovers.
    world.descriptors.clear();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
}

#[test]
fn an_unserved_recorded_harness_is_refused_with_no_fallback_to_the_default() {
    let mut world = World::default();
    world.add_local("alias", "echo");
    let sid = create(&mut world, "");
    world.call(exec(&sid, "alias", "hi"));
    world.store.truncate(&sid, 3);
    // A restarted host that no longer serves "alias".
    let store = std::mem::replace(&mut world.store, MemStore::new());
    let mut world = World::with_store(world::config(), store);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(call.reply.clone().unwrap_err().message.contains("alias"));
    assert!(!any_of(
        since(&world, mark),
        &["Describe", "Runtime", "Dial", "Append"]
    ));
}

#[test]
fn a_completed_turn_on_an_unserved_override_resumes_on_the_stored_harness() {
    let mut world = World::default();
    world.add_local("alias", "echo");
    let sid = create(&mut world, "");
    world.call(exec(&sid, "alias", "hi"));
    let store = std::mem::replace(&mut world.store, MemStore::new());
    let mut world = World::with_store(world::config(), store);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(kinds(&world, &sid)[5..].to_vec(), vec![EventLifecycle]);
    assert!(!any_of(since(&world, mark), &["Send"]), "no run");
    assert_eq!(
        call.session().unwrap().compute_state,
        ComputeState::ComputeLive as i32
    );
}

#[test]
fn an_incomplete_invocation_is_refused_with_guidance_and_exec_starts_over() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let start = agentsessions_machine::events::execution_start(
        "e1",
        agentsessions_proto::v1::ExecutionStart {
            input_count: Some(2),
            harness: "echo".into(),
            ..Default::default()
        },
    );
    let input = agentsessions_machine::events::input(
        "e1",
        agentsessions_machine::events::text_message("user", "a"),
    );
    world
        .store
        .append(&sid, 0, 0, &[start, input], world.now)
        .unwrap();
    let raw = world.store.records(&sid).to_vec();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition);
    let msg = call.reply.unwrap_err().message;
    for hint in ["never reached the harness", "Exec again", "inputs"] {
        assert!(msg.contains(hint), "{msg}");
    }
    assert_eq!(&*world.store.records(&sid), raw.as_slice(), "unchanged");
    assert_eq!(world.call(exec(&sid, "", "b")).code(), Code::Ok);
    assert_eq!(streamed(&world.call(replay(&sid)))[..2].to_vec(), raw);
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok);
    assert_eq!(kinds(&world, &sid).last(), Some(&EventLifecycle));
    assert_eq!(
        call.session().unwrap().compute_state,
        ComputeState::ComputeLive as i32
    );
}

#[test]
fn a_fork_child_at_a_tool_call_refuses_recovery_and_can_exec_a_new_turn() {
    let mut world = World::default();
    let parent = create(&mut world, "tools");
    world.call(exec(&parent, "", "go"));
    let child = fork_child(&mut world, &parent, 3, "tools");
    let parent_log = world.store.records(&parent).to_vec();
    let before = world.store.records(&child).to_vec();
    let mark = world.trace.len();
    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(
        call.reply
            .unwrap_err()
            .message
            .contains("fork at or after the TOOL_RESULT, or Exec a new turn")
    );
    assert!(!any_of(
        since(&world, mark),
        &["Describe", "Runtime", "Append", "ExecuteTool"]
    ));
    assert_eq!(&*world.store.records(&child), before.as_slice());
    assert_eq!(&*world.store.records(&parent), parent_log.as_slice());
    assert_eq!(world.executor.effects, 1);
    // A new turn in the child is its own effect.
    let mut req = exec_req(&child, "", "again");
    req.expected_last_seq = Some(4);
    assert_eq!(world.call(Request::Exec(req)).code(), Code::Ok);
}

#[test]
fn a_fork_child_at_a_tool_result_resumes_from_the_recorded_receipt() {
    let mut world = World::default();
    let parent = create(&mut world, "tools");
    world.call(exec(&parent, "", "go"));
    let child = fork_child(&mut world, &parent, 4, "tools");
    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.executor.attempts, 1, "no effect re-run");
    assert_eq!(
        kinds(&world, &child)[4..].to_vec(),
        vec![EventLifecycle, EventOutput, EventEnd, EventLifecycle]
    );
    verify(&world, &child);
}

#[test]
fn a_fork_child_at_a_model_call_redrives_its_own_provider_call_once() {
    let mut world = World::default();
    let parent = create(&mut world, "");
    world.call(exec(&parent, "", "hi"));
    let parent_log = world.store.records(&parent).to_vec();
    let child = fork_child(&mut world, &parent, 3, "");
    let before = world.model_calls;
    assert_eq!(world.call(resume(&child)).code(), Code::Ok);
    assert_eq!(world.model_calls, before + 1);
    assert_eq!(
        kinds(&world, &child),
        vec![
            EventExecutionStart,
            EventInput,
            EventModelCall,
            EventLifecycle,
            EventOutput,
            EventEnd,
            EventLifecycle
        ]
    );
    assert_eq!(&*world.store.records(&parent), parent_log.as_slice());
}

fn restore_ref(effects: &[Effect]) -> Option<agentsessions_proto::v1::SnapshotRef> {
    effects.iter().find_map(|e| match e {
        Effect::Runtime(RuntimeCall {
            op: RuntimeOp::Restore { snapshot },
            ..
        }) => Some(snapshot.clone()),
        _ => None,
    })
}

#[test]
fn suspend_then_resume_round_trips_the_snapshot_ref_through_the_journal() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hi"));
    let call = world.call(suspend(&sid));
    assert_eq!(call.code(), Code::Ok);
    assert_eq!(
        call.session().unwrap().compute_state,
        ComputeState::ComputeCold as i32
    );
    let last = world.store.records(&sid).last().cloned().unwrap();
    let l = last.event.as_ref().and_then(body::lifecycle).unwrap();
    assert_eq!(
        (l.snapshot_local.as_str(), l.snapshot_memory),
        (sid.as_str(), false)
    );
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok);
    let r = restore_ref(since(&world, mark)).expect("restored");
    assert_eq!((r.local.as_str(), r.memory), (sid.as_str(), false));
    assert_eq!(
        kinds(&world, &sid)[5..].to_vec(),
        vec![EventLifecycle, EventLifecycle]
    );
    verify(&world, &sid);
}

#[test]
fn a_memory_harness_suspends_to_an_external_snapshot_and_restores_from_it() {
    let mut world = World::default();
    let sid = create(&mut world, "counter");
    world.call(exec(&sid, "", "x"));
    world.call(suspend(&sid));
    let mark = world.trace.len();
    world.call(resume(&sid));
    let r = restore_ref(since(&world, mark)).unwrap();
    assert!(r.memory);
    assert_eq!(r.external_uri, format!("snap://{sid}"));
    assert_eq!(world.runtime_calls, vec!["create", "snapshot", "restore"]);
}

#[test]
fn a_fork_child_restores_its_own_snapshot_never_the_inherited_parent_ref() {
    let mut world = World::default();
    let parent = create(&mut world, "");
    world.call(exec(&parent, "", "hi"));
    world.call(suspend(&parent));
    let child = fork_child(&mut world, &parent, 6, "");
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&child)).code(), Code::Ok);
    let r = restore_ref(since(&world, mark)).unwrap();
    assert_eq!(r.local, child);
}

#[test]
fn suspend_failures_keep_the_journal_and_a_retry_succeeds() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hi"));
    let arm: [fn(&mut World); 4] = [
        |w| w.faults.snapshot = Some("backend".into()),
        |w| w.faults.fence = Some("fence".into()),
        // The head read is Suspend's second GetSession.
        |w| w.faults.get = Some((1, "head".into())),
        |w| w.faults.append = Some((0, AppendError::Failed("disk".into()))),
    ];
    for f in arm {
        f(&mut world);
        let call = world.call(suspend(&sid));
        assert_ne!(call.code(), Code::Ok);
        assert_eq!(world.store.records(&sid).len(), 5, "journal unchanged");
    }
    assert_eq!(world.call(suspend(&sid)).code(), Code::Ok);
}

#[test]
fn suspend_and_resume_of_an_empty_session_agree_with_get() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let call = world.call(suspend(&sid));
    assert_eq!(
        call.session().unwrap().compute_state,
        ComputeState::ComputeCold as i32
    );
    assert_eq!(
        session(&mut world, &sid).compute_state,
        ComputeState::ComputeCold as i32
    );
    let call = world.call(resume(&sid));
    assert_eq!(
        call.session().unwrap().compute_state,
        ComputeState::ComputeLive as i32
    );
    assert_eq!(
        session(&mut world, &sid).compute_state,
        ComputeState::ComputeLive as i32
    );
}

/// A session on memory-snapshot harness `route` whose turn `e1` was cut
/// after `tail` (its START and one INPUT come first).
fn cut_memory_turn(
    world: &mut World,
    route: &str,
    tail: Vec<agentsessions_proto::v1::Event>,
) -> String {
    use agentsessions_machine::events;
    let sid = create(world, route);
    let marker = agentsessions_proto::v1::ExecutionStart {
        input_count: Some(1),
        harness: route.into(),
        ..Default::default()
    };
    let mut evs = vec![
        events::execution_start("e1", marker),
        events::input("e1", events::text_message("user", "a")),
    ];
    evs.extend(tail);
    world.store.append(&sid, 0, 0, &evs, world.now).unwrap();
    sid
}

#[test]
fn a_cut_memory_snapshot_turn_recovers_without_gates_and_is_refused_with_one() {
    use agentsessions_machine::events;
    let mut world = World::default();
    world.add_memory("mem", "counter");
    let plain = cut_memory_turn(&mut world, "mem", Vec::new());
    let call = world.call(resume(&plain));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert!(
        kinds(&world, &plain).contains(&EventEnd),
        "{:?}",
        kinds(&world, &plain)
    );

    let call = agentsessions_proto::v1::ToolCall {
        id: "c1".into(),
        tool: "note".into(),
        idempotency_key: "k-c1".into(),
        mediation: agentsessions_proto::v1::Mediation::RequiresApproval as i32,
        ..Default::default()
    };
    let gated = cut_memory_turn(
        &mut world,
        "mem",
        vec![
            events::event("e1", EventToolCall, Body::Tool(call)),
            events::approval_request("e1", "c1"),
            events::approval_result(
                "e1",
                agentsessions_proto::v1::ApprovalResult {
                    tool_call_id: "c1".into(),
                    approved: true,
                    reason: "ok".into(),
                    request_seq: 4,
                },
                None,
                Default::default(),
            ),
        ],
    );
    let head = world.store.records(&gated).len();
    let call = world.call(resume(&gated));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert_eq!(
        world.store.records(&gated).len(),
        head,
        "refused before writing"
    );
}
