//! Live turns through the host: the controller_test, execution_start,
//! harness_identity, session/service_test and run_status entries of the
//! catalog (controller.md §10, service.md §9).

mod common;

use agentsessions_machine::events::{self, body};
use agentsessions_machine::vocab::{
    AppendError, Backend, Code, Effect, EffectId, ExecuteTool, HarnessEffect, HarnessFailure,
    History, ModelFailure, Request, Response, Route, StoreEffect, StreamItem,
};
use agentsessions_proto::v1::{
    ControllerFrame, CreateSessionRequest, EventKind, ExecState, HarnessEnd, Mediation,
    ReplayRequest, Resumability, Session, ToolCall, controller_frame::Frame, event::Body,
};
use agentsessions_testkit::harness::{self, FnScript, Reply, ev};
use agentsessions_testkit::{World, world};
use common::*;

fn records_of(call: &agentsessions_testkit::Call) -> usize {
    call.record_seqs().len()
}

#[test]
fn a_turn_replays_identically_after_a_host_restart_with_no_model_calls() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    let live = world.store.records(&sid).to_vec();
    let calls = world.model_calls;
    world.restart();
    let call = world.call(replay(&sid));
    assert_eq!(call.code(), Code::Ok);
    assert_eq!(streamed(&call), live, "records verbatim, hashes included");
    assert_eq!(world.model_calls, calls, "replay makes no model calls");
    agentsessions_machine::chain::verify(&live).expect("chain verifies");
    let output = live[3].event.as_ref().and_then(body::message).unwrap();
    assert_eq!(events::message_text(output), "echo:hi");
}

#[test]
fn each_turn_mints_a_newer_fence_and_appends_under_it() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "one"));
    world.call(exec(&sid, "", "two"));
    let fences: Vec<i64> = world.store.records(&sid).iter().map(|r| r.fence).collect();
    assert_eq!(fences, vec![1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
}

#[test]
fn a_turn_superseded_by_a_newer_fence_is_aborted_and_writes_nothing_more() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.hold = true;
    let turn = world.start(exec(&sid, "", "hi"));
    // Another incarnation takes the session over mid-turn.
    let mint = StoreEffect::MintFence {
        id: EffectId(u64::MAX),
        session: sid.clone(),
        now: world.now,
        lease: None,
    };
    world.store.perform(&mint);
    world.release();
    let call = world.take(turn);
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert!(format!("{:?}", call.reply).contains("stale fencing token"));
    assert_eq!(
        kinds(&world, &sid),
        vec![EventKind::EventExecutionStart, EventKind::EventInput],
        "neither the model call nor an ERROR lands under the stale fence"
    );
    assert_eq!(world.model_calls, 0);
}

#[test]
fn a_failed_first_append_never_reaches_the_harness() {
    for (err, code) in [
        (AppendError::Conflict { head: 3 }, Code::Aborted),
        (AppendError::Fenced { current: 9 }, Code::Aborted),
        (AppendError::Failed("disk".into()), Code::Internal),
    ] {
        let mut world = World::default();
        let sid = create(&mut world, "");
        world.faults.append = Some((0, err));
        let mark = world.trace.len();
        let call = world.call(exec(&sid, "", "hi"));
        assert_eq!(call.code(), code, "{call:?}");
        assert!(world.store.records(&sid).is_empty(), "head stays 0");
        assert!(!any_of(since(&world, mark), &["Send", "InvokeModel"]));
        assert_eq!(world.model_calls, 0);
    }
}

#[test]
fn execution_start_records_config_cursor_count_and_the_connected_identity() {
    let mut world = World::default();
    let mut d = harness::descriptor("echo", Resumability::StatelessReplay);
    d.version = "v9".into();
    world.descriptors.insert("echo".into(), d);
    world.add_local("alias", "echo");
    let sid = create(&mut world, "");
    let mut req = exec_req(&sid, "alias", "b");
    req.inputs.insert(0, events::text_message("user", "a"));
    req.config = b"\x00opaque \n".to_vec();
    req.resume_from_seq = 7;
    let mark = world.trace.len();
    let call = world.call(Request::Exec(req));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let first = world.store.records(&sid)[0].clone();
    let start = first
        .event
        .as_ref()
        .and_then(body::execution_start)
        .unwrap();
    assert_eq!(start.config, b"\x00opaque \n");
    assert_eq!(start.resume_from_seq, 7);
    assert_eq!(start.input_count, Some(2));
    assert_eq!(start.harness, "alias", "the per-turn alias is recorded");
    assert_eq!(
        start.harness_version, "v9",
        "the connected harness's version"
    );
    // The harness gets the same Start, with no history and the inputs.
    let (exec_id, s) = start_delivered(&world, mark).expect("Start sent");
    assert_eq!(exec_id, first.event.as_ref().unwrap().execution_id);
    assert_eq!(
        (s.config.as_slice(), s.resume_from_seq),
        (&b"\x00opaque \n"[..], 7)
    );
    assert!(s.history.is_empty());
    assert_eq!(s.inputs.len(), 2);
    // The session keeps its stored harness; Replay to seq 1 is that record.
    assert_eq!(session(&mut world, &sid).harness, "echo");
    let call = world.call(Request::Replay(ReplayRequest {
        session: sid.clone(),
        from_seq: 0,
        to_seq: 1,
    }));
    assert_eq!(streamed(&call), vec![first]);
}

#[test]
fn each_turn_has_its_own_execution_id_and_sees_earlier_turns_as_history() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "same"));
    let mark = world.trace.len();
    world.call(exec(&sid, "", "same"));
    let records = &*world.store.records(&sid);
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r.event.as_ref().unwrap().execution_id.as_str())
        .collect();
    assert!(ids[..5].iter().all(|i| *i == ids[0]) && ids[5..].iter().all(|i| *i == ids[5]));
    assert_ne!(ids[0], ids[5]);
    assert!(
        ids.iter()
            .all(|i| i.len() == 16 && i.bytes().all(|b| b.is_ascii_hexdigit()))
    );
    let history = since(&world, mark).iter().find_map(|e| match e {
        Effect::Harness(HarnessEffect::Send {
            frame:
                ControllerFrame {
                    frame: Some(Frame::Start(s)),
                    ..
                },
            history,
            ..
        }) => {
            assert!(s.history.is_empty(), "the history travels beside the frame");
            history.as_ref().map(History::to_vec)
        }
        _ => None,
    });
    let history: Vec<_> = history.unwrap().iter().map(events::kind_of).collect();
    assert_eq!(history, kinds_of(&records[..5]));
}

#[test]
fn a_host_tool_executes_only_after_its_intent_is_committed() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let (pos, intent) = world
        .trace
        .iter()
        .enumerate()
        .find_map(|(i, e)| match e {
            Effect::Tool(ExecuteTool { intent, .. }) => Some((i, intent.record().clone())),
            _ => None,
        })
        .expect("the tool ran");
    // The append that produced the intent precedes the execution.
    assert!(world.trace[..pos].iter().any(|e| matches!(e,
        Effect::Store(StoreEffect::Append { events: evs, .. }) if evs.iter().any(|ev| events::kind_of(ev) == EventKind::EventToolCall))));
    assert_eq!(world.store.records(&sid)[intent.seq as usize - 1], intent);
    assert_eq!(
        kinds(&world, &sid)[2..].to_vec(),
        vec![
            EventKind::EventToolCall,
            EventKind::EventToolResult,
            EventKind::EventOutput,
            EventKind::EventEnd
        ]
    );
    assert_eq!(world.executor.effects, 1);
}

#[test]
fn without_an_executor_a_host_tool_fails_the_turn_after_its_intent() {
    let mut config = world::config();
    config.has_executor = false;
    let mut world = World::new(config);
    let sid = create(&mut world, "tools");
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(call.code(), Code::Internal);
    assert!(format!("{:?}", call.reply).contains("no tool executor configured"));
    assert_eq!(
        kinds(&world, &sid)[2..].to_vec(),
        vec![EventKind::EventToolCall, EventKind::EventError]
    );
}

/// A harness that makes one ordinary host-mediated call `call`.
fn one_call(call: ToolCall) -> impl Fn() -> Box<dyn harness::Script> + Send {
    move || {
        let call = call.clone();
        Box::new(FnScript::new("tools", move |f| match &f.frame {
            Some(Frame::Start(_)) => Reply::send(vec![ev(
                &f.execution_id,
                EventKind::EventToolCall,
                Body::Tool(call.clone()),
            )]),
            _ => Reply::default(),
        }))
    }
}

#[test]
fn a_keyless_host_tool_call_fails_the_turn_with_no_intent() {
    let mut world = World::default();
    let mut call = harness::keyed_call("c1", Mediation::ControllerMediated);
    call.idempotency_key.clear();
    world
        .scripts
        .insert("tools".into(), Box::new(one_call(call)));
    let sid = create(&mut world, "tools");
    let reply = world.call(exec(&sid, "", "go"));
    assert_eq!(reply.code(), Code::Internal);
    assert!(format!("{:?}", reply.reply).contains("idempotency"));
    assert_eq!(
        kinds(&world, &sid)[2..].to_vec(),
        vec![EventKind::EventError]
    );
    assert_eq!(world.executor.attempts, 0);
}

#[test]
fn an_executor_failure_fails_the_turn_and_leaves_the_intent_unresolved() {
    let mut world = World::default();
    world.executor.fail_next = Some("boom".into());
    let sid = create(&mut world, "tools");
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(call.code(), Code::Internal);
    assert_eq!(
        kinds(&world, &sid)[2..].to_vec(),
        vec![EventKind::EventToolCall, EventKind::EventError]
    );
}

#[test]
fn a_model_failure_is_internal_and_journals_an_error() {
    let mut world = World::default();
    world.model_fail_next = Some(ModelFailure::other("invalid response body"));
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.code(), Code::Internal);
    assert_eq!(kinds(&world, &sid).last(), Some(&EventKind::EventError));
}

#[test]
fn an_unreachable_model_is_unavailable_and_journals_the_same_error() {
    let mut world = World::default();
    world.model_fail_next = Some(ModelFailure::unavailable("provider down"));
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.code(), Code::Unavailable, "clients retry it");
    let log = world.store.records(&sid);
    let last = log
        .last()
        .and_then(|r| r.event.as_ref())
        .expect("an error record");
    assert_eq!(events::kind_of(last), EventKind::EventError);
    assert!(
        format!("{last:?}").contains("model: provider down"),
        "the record says what failed: {last:?}"
    );
}

#[test]
fn a_harness_that_ends_failed_is_internal_and_journals_an_error() {
    let mut world = World::default();
    world.scripts.insert(
        "echo".into(),
        Box::new(|| {
            Box::new(FnScript::new("echo", |f| match &f.frame {
                Some(Frame::Start(_)) => Reply::finish(vec![ev(
                    &f.execution_id,
                    EventKind::EventEnd,
                    Body::End(HarnessEnd {
                        state: "FAILED".into(),
                        error: None,
                    }),
                )]),
                _ => Reply::default(),
            })) as Box<dyn harness::Script>
        }),
    );
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.code(), Code::Internal);
    assert_eq!(
        kinds(&world, &sid),
        vec![
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventError
        ]
    );
}

#[test]
fn request_validation_and_routing_statuses() {
    let mut world = World::default();
    // Unknown session.
    assert_eq!(
        world.call(exec("sess-nope", "", "x")).code(),
        Code::NotFound
    );
    // Unknown harness: refused before the Session frame.
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "nope", "x"));
    assert_eq!(call.code(), Code::InvalidArgument);
    assert!(call.items.is_empty(), "no frame before the refusal");
    let created = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: "nope".into(),
            ..Default::default()
        }),
    }));
    assert_eq!(created.code(), Code::InvalidArgument);
    // The Session frame is always first.
    let call = world.call(exec(&sid, "", "x"));
    assert!(matches!(call.items.first(), Some(StreamItem::Session(_))));
}

#[test]
fn turns_without_cas_append_at_the_head_and_an_explicit_zero_is_enforced() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(
        session(&mut world, &sid).exec_state,
        ExecState::ExecPending as i32
    );
    let mut first = exec_req(&sid, "", "a");
    first.expected_last_seq = Some(0);
    assert_eq!(world.call(Request::Exec(first.clone())).code(), Code::Ok);
    for t in ["b", "c"] {
        assert_eq!(world.call(exec(&sid, "", t)).code(), Code::Ok);
    }
    assert_eq!(session(&mut world, &sid).last_seq, 15);
    assert_eq!(
        session(&mut world, &sid).exec_state,
        ExecState::ExecCompleted as i32
    );
    assert_eq!(world.call(Request::Exec(first)).code(), Code::Aborted);
}

#[test]
fn a_past_deadline_is_deadline_exceeded_and_writes_nothing() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let mut req = exec_req(&sid, "", "x");
    req.deadline_unix = 1;
    let call = world.call(Request::Exec(req));
    assert_eq!(call.code(), Code::DeadlineExceeded, "{call:?}");
    assert!(world.store.records(&sid).is_empty());
}

#[test]
fn admission_refusal_of_a_memory_harness_on_a_plain_runtime_provisions_nothing() {
    let mut world = World::default();
    world.add_local("plain-counter", "counter");
    let sid = create(&mut world, "plain-counter");
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", "x"));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert_eq!(
        effect_names(since(&world, mark)),
        vec!["GetSession", "ReadJournal", "Stream", "Describe", "Reply"],
        "admission refuses before Runtime, MintFence or Append"
    );
    assert!(world.store.records(&sid).is_empty());
    // The same harness fits a runtime with memory snapshots.
    let sid = create(&mut world, "counter");
    assert_eq!(world.call(exec(&sid, "", "x")).code(), Code::Ok);
}

fn with_descriptor_pin(backend: Backend) -> World {
    let mut config = world::config();
    config.harnesses.insert(
        "pinned".into(),
        Route {
            backend,
            descriptor_id: "echo".into(),
            registered: false,
            spec: None,
        },
    );
    World::new(config)
}

#[test]
fn a_descriptor_id_pin_refuses_an_impostor_before_any_runtime_work() {
    let mut world = with_descriptor_pin(Backend::Local {
        kind: "tools".into(),
    });
    let sid = create(&mut world, "pinned");
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", "x"));
    assert_eq!(call.code(), Code::FailedPrecondition);
    let text = call.reply.clone().unwrap_err().message;
    assert!(
        text.contains("\"echo\"") && text.contains("\"tools\""),
        "{text}"
    );
    assert!(!any_of(
        since(&world, mark),
        &["Runtime", "MintFence", "Append"]
    ));
    // An unpinned route runs whatever answers.
    let sid = create(&mut world, "tools");
    assert_eq!(world.call(exec(&sid, "", "x")).code(), Code::Ok);
}

#[test]
fn a_remote_route_rechecks_the_harness_on_the_turns_own_connection() {
    let mut world = with_descriptor_pin(Backend::Remote {
        address: "10.0.0.1:7000".into(),
    });
    world.remote.insert("10.0.0.1:7000".into(), "echo".into());
    // Admission sees "echo"; the address actually serves an impostor.
    world.descriptors.insert(
        "echo".into(),
        harness::descriptor("echo", Resumability::StatelessReplay),
    );
    world.scripts.insert(
        "echo".into(),
        Box::new(|| {
            Box::new(FnScript::new("impostor", |_| Reply::default())) as Box<dyn harness::Script>
        }),
    );
    let sid = create(&mut world, "pinned");
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", "x"));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    let effects = since(&world, mark);
    assert_eq!(
        effects
            .iter()
            .filter(|e| matches!(e, Effect::Harness(HarnessEffect::Describe { .. })))
            .count(),
        2
    );
    assert_eq!(
        effect_names(effects)
            .iter()
            .filter(|n| **n == "Close")
            .count(),
        1
    );
    assert!(!any_of(effects, &["MintFence", "Append", "Send"]));
}

#[test]
fn describe_failures_are_classified_and_have_no_execution_effects() {
    for (failure, code) in [
        (
            HarnessFailure::Unavailable("down".into()),
            Code::Unavailable,
        ),
        (HarnessFailure::Timeout, Code::Unavailable),
        (
            HarnessFailure::Other {
                code: 12,
                message: "unimplemented".into(),
            },
            Code::Internal,
        ),
    ] {
        let mut world = World::default();
        let sid = create(&mut world, "");
        world.describe_fail.insert("echo".into(), failure.clone());
        let mark = world.trace.len();
        let call = world.call(exec(&sid, "", "x"));
        assert_eq!(call.code(), code, "{failure:?}");
        assert!(!any_of(
            since(&world, mark),
            &["Runtime", "Dial", "MintFence", "Append"]
        ));
        // The same classification on the turn's own connection.
        let mut world = with_descriptor_pin(Backend::Remote {
            address: "a:1".into(),
        });
        world.remote.insert("a:1".into(), "echo".into());
        world.faults.recheck = Some(failure.clone());
        let sid = create(&mut world, "pinned");
        let mark = world.trace.len();
        let call = world.call(exec(&sid, "", "x"));
        assert_eq!(call.code(), code, "recheck {failure:?}");
        assert!(!any_of(
            since(&world, mark),
            &["MintFence", "Append", "Send"]
        ));
        assert!(world.store.records(&sid).is_empty());
    }
}

#[test]
fn an_ambiguous_legacy_boundary_is_refused_before_describe() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let legacy = events::input("", events::text_message("user", "old"));
    let modern = events::input("e2", events::text_message("user", "new"));
    world
        .store
        .append(&sid, 0, 0, &[legacy, modern], world.now)
        .unwrap();
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", "x"));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(!any_of(
        since(&world, mark),
        &["Describe", "Runtime", "Append"]
    ));
    assert_eq!(world.store.records(&sid).len(), 2);
}

#[test]
fn exec_without_a_session_creates_one_with_the_requested_harness() {
    let mut world = World::default();
    let call = world.call(exec("", "tools", "go"));
    assert_eq!(call.code(), Code::Ok);
    let sid = call.session().unwrap().metadata.unwrap().uid;
    assert_eq!(session(&mut world, &sid).harness, "tools");
    assert!(records_of(&call) > 0);
    assert!(matches!(call.reply, Ok(Response::StreamEnd)));
}

#[test]
fn a_journal_read_back_with_a_broken_link_is_data_loss_and_nothing_is_written() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "one")).code(), Code::Ok);
    // The same records under another uid, one link broken, as a damaged
    // store would hand them back.
    let mut records = world.store.records(&sid).to_vec();
    assert!(records.len() > 3, "{records:?}");
    records[2].prev_hash = "0".repeat(64);
    let damaged = "sess-damaged0000000000000000";
    world.store.import(damaged, records.clone(), world.now);
    let call = world.call(exec(damaged, "", "two"));
    assert_eq!(call.code(), Code::DataLoss, "{call:?}");
    assert_eq!(&*world.store.records(damaged), records.as_slice());
}

/// A world serving only the echo model, whose echo harness names `model`.
fn serving_echo_only(model: &str) -> World {
    let mut config = world::config();
    config.models = Some(["echo".to_owned()].into());
    let mut world = World::new(config);
    let mut d = harness::by_kind("echo").expect("echo script").descriptor();
    d.models = vec![model.to_owned()];
    world.descriptors.insert("echo".into(), d);
    world
}

#[test]
fn a_harness_naming_an_unserved_model_is_refused_before_its_turn_starts() {
    let mut world = serving_echo_only("gpt-4o");
    let sid = create(&mut world, "echo");
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.code(), Code::FailedPrecondition);
    let text = match &call.reply {
        Err(s) => s.message.clone(),
        Ok(_) => String::new(),
    };
    assert!(
        text.contains("\"gpt-4o\"") && text.contains("--model"),
        "names the model and the fix: {text}"
    );
    assert!(world.store.records(&sid).is_empty(), "nothing journaled");
    assert_eq!(world.model_calls, 0);
    assert!(world.runtime_calls.is_empty(), "no compute provisioned");
}

#[test]
fn a_harness_naming_a_served_model_runs() {
    let mut world = serving_echo_only("echo");
    let sid = create(&mut world, "echo");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    assert_eq!(world.model_calls, 1);
}

#[test]
fn fork_admits_a_harness_whatever_models_it_names() {
    let mut config = world::config();
    config.models = Some(std::collections::BTreeSet::new());
    let mut world = World::new(config);
    let sid = create(&mut world, "echo");
    let fork = world.call(Request::Fork(agentsessions_proto::v1::ForkRequest {
        session: sid.clone(),
        count: 1,
        ..Default::default()
    }));
    assert_eq!(fork.code(), Code::Ok, "{:?}", fork.reply);
    assert_eq!(
        world.call(exec(&sid, "", "hi")).code(),
        Code::FailedPrecondition,
        "a turn is refused: echo is not served here"
    );
}
