//! Cancel: a live turn (mid model call, mid tool call — which is told with
//! one InterruptTool and still has its receipt recorded — racing its own
//! END), a parked approval, a cut Cancel finished by Resume, and the
//! documented refusals, each with the journal it must leave.

mod common;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    AppendError, Code, Effect, EffectId, ModelFailure, Request, StoreEffect,
};
use agentsessions_proto::v1::{CancelRequest, EventKind, ExecState, event::Body, lifecycle};
use agentsessions_testkit::World;
use common::*;

use EventKind::*;

fn cancel(sid: &str, execution_id: &str, reason: &str) -> Request {
    Request::Cancel(CancelRequest {
        session: sid.into(),
        execution_id: execution_id.into(),
        reason: reason.into(),
    })
}

fn verify(world: &World, sid: &str) {
    agentsessions_machine::chain::verify(&world.store.records(sid)).expect("chain verifies");
}

/// The last two records are LIFECYCLE{CANCEL, reason} and END{CANCELED}.
fn assert_canceled_tail(world: &World, sid: &str, reason: &str) {
    let records = &*world.store.records(sid);
    let [.., marker, end] = records else {
        panic!("too few records");
    };
    let marker = marker.event.as_ref().unwrap();
    match &marker.body {
        Some(Body::Lifecycle(l)) => {
            assert_eq!(l.kind, lifecycle::Kind::LifecycleCancel as i32);
            assert_eq!(l.detail, reason);
        }
        other => panic!("expected the CANCEL marker, got {other:?}"),
    }
    assert!(events::is_canceled_end(end.event.as_ref().unwrap()));
    verify(world, sid);
}

#[test]
fn cancel_mid_model_call_is_durable_first_and_ends_the_exec_stream_cancelled() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&sid, "", "hello"));
    assert!(!world.replied(turn), "the model call is held");
    let before = world.store.records(&sid).len();

    let canceling = world.start(cancel(&sid, "", "user pressed stop"));
    let call = world.take(canceling);
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let session = call.session().unwrap();
    assert_eq!(session.exec_state, ExecState::ExecCanceled as i32);
    assert_eq!(world.store.records(&sid).len(), before + 2);
    assert_canceled_tail(&world, &sid, "user pressed stop");

    let turn = world.take(turn);
    assert_eq!(turn.code(), Code::Cancelled, "{turn:?}");
    let streamed = streamed(&turn);
    assert_eq!(
        kinds_of(&streamed[streamed.len() - 2..]),
        vec![EventLifecycle, EventEnd],
        "the stream ends after the cancel records"
    );
    // The abandoned model answer arrives late and is dropped.
    world.release();
    assert_eq!(world.store.records(&sid).len(), before + 2);

    // Nothing re-drives a canceled turn; a new turn runs normally.
    let model_calls = world.model_calls;
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.model_calls, model_calls);
    let next = world.call(exec(&sid, "", "again"));
    assert_eq!(next.code(), Code::Ok, "{next:?}");
    assert_eq!(
        common::session(&mut world, &sid).exec_state,
        ExecState::ExecCompleted as i32
    );
    verify(&world, &sid);
}

#[test]
fn a_harness_replay_skips_the_canceled_turn_and_calls_no_model() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "first")).code(), Code::Ok);
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&sid, "", "second"));
    let canceling = world.start(cancel(&sid, "", ""));
    assert_eq!(world.take(canceling).code(), Code::Ok);
    world.release();
    assert_eq!(world.take(turn).code(), Code::Cancelled);
    let model_calls = world.model_calls;
    let replayed = world.call(Request::ReplayHarness {
        session: sid.clone(),
    });
    match replayed.reply {
        Ok(agentsessions_machine::vocab::Response::Replayed(report)) => {
            assert_eq!(report.executions, 1, "only the completed turn replays")
        }
        other => panic!("replay: {other:?}"),
    }
    assert_eq!(world.model_calls, model_calls);
}

/// The id of the last tool execution the host asked for.
fn last_tool_effect(world: &World) -> EffectId {
    world
        .trace
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::Tool(t) => Some(t.id),
            _ => None,
        })
        .expect("a tool execution was asked for")
}

#[test]
fn cancel_mid_tool_call_records_the_receipt_and_runs_nothing_after() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Tool(_))));
    let turn = world.start(exec(&sid, "", "use the tool"));
    let canceling = world.start(cancel(&sid, "", "too slow"));
    assert!(
        !world.replied(canceling),
        "the run waits for the tool's answer"
    );
    world.release();
    let call = world.take(canceling);
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let tail = kinds(&world, &sid);
    assert_eq!(
        tail[tail.len() - 4..].to_vec(),
        vec![EventToolCall, EventToolResult, EventLifecycle, EventEnd]
    );
    assert_canceled_tail(&world, &sid, "too slow");
    assert_eq!(world.executor.attempts, 1);
    assert_eq!(world.take(turn).code(), Code::Cancelled);
}

#[test]
fn cancel_mid_tool_call_interrupts_it_once_and_nothing_else() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Tool(_))));
    let turn = world.start(exec(&sid, "", "use the tool"));
    let tool = last_tool_effect(&world);
    let mark = world.trace.len();
    let canceling = world.start(cancel(&sid, "", "too slow"));
    assert_eq!(
        since(&world, mark),
        &[Effect::InterruptTool { id: tool }],
        "the call is told, and nothing is written before its answer"
    );
    // A second Cancel joins the first: the call is not told twice.
    let mark = world.trace.len();
    let again = world.start(cancel(&sid, "", "still too slow"));
    assert_eq!(since(&world, mark), &[], "{}", render(since(&world, mark)));
    world.release();
    assert_eq!(world.take(canceling).code(), Code::Ok);
    assert_eq!(world.take(again).code(), Code::Ok);
    assert_eq!(world.take(turn).code(), Code::Cancelled);
    assert_canceled_tail(&world, &sid, "too slow");
}

#[test]
fn cancel_mid_model_call_interrupts_no_tool() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&sid, "", "hello"));
    let mark = world.trace.len();
    let canceling = world.start(cancel(&sid, "", "stop"));
    let names = effect_names(since(&world, mark));
    assert_eq!(names[0], "AbandonModel", "{names:?}");
    assert!(!names.contains(&"InterruptTool"), "{names:?}");
    world.release();
    assert_eq!(world.take(canceling).code(), Code::Ok);
    assert_eq!(world.take(turn).code(), Code::Cancelled);
}

#[test]
fn a_turn_whose_end_commits_first_stays_completed() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Store(StoreEffect::Append { events, .. })
            if events.iter().any(|ev| events::kind_of(ev) == EventEnd))
    }));
    let turn = world.start(exec(&sid, "", "hello"));
    let canceling = world.start(cancel(&sid, "", "late"));
    world.release();
    assert_eq!(world.take(canceling).code(), Code::FailedPrecondition);
    assert_eq!(world.take(turn).code(), Code::Ok);
    assert!(!kinds(&world, &sid).contains(&EventLifecycle));
}

#[test]
fn cancel_of_a_parked_approval_resolves_it_and_a_later_approve_is_refused() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let call = world.call(cancel(&sid, &eid, "not needed"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let session = call.session().unwrap();
    assert_eq!(session.exec_state, ExecState::ExecCanceled as i32);
    assert_eq!(session.pending_approval, None);
    assert_canceled_tail(&world, &sid, "not needed");

    let head = world.store.records(&sid).len();
    let approve = world.call(approve(&sid, &eid, "c1", seq, true));
    assert_eq!(approve.code(), Code::FailedPrecondition, "{approve:?}");
    assert_eq!(world.store.records(&sid).len(), head);
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.attempts, 0, "the gated call never ran");
    // A new turn is not blocked by the resolved gate.
    assert_eq!(world.call(exec(&sid, "", "next")).code(), Code::Ok);
}

#[test]
fn a_second_cancel_answers_again_and_writes_nothing() {
    let mut world = World::default();
    let (sid, eid, _) = parked(&mut world, "approval");
    assert_eq!(world.call(cancel(&sid, "", "once")).code(), Code::Ok);
    let head = world.store.records(&sid).len();
    let again = world.call(cancel(&sid, &eid, "twice"));
    assert_eq!(again.code(), Code::Ok, "{again:?}");
    assert_eq!(world.store.records(&sid).len(), head);
}

#[test]
fn a_cancel_cut_before_its_end_is_finished_by_resume() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world, "approval");
    // A torn cancel: the marker landed, the END did not.
    let head = world.store.records(&sid).len() as i64;
    let fence = world.store.fence(&sid);
    let marker = events::lifecycle(lifecycle::Kind::LifecycleCancel, "cut");
    world
        .store
        .append(&sid, head, fence, &[marker], world.now)
        .unwrap();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_canceled_tail_or_end(&world, &sid);
    assert_eq!(world.executor.attempts, 0);
    // A Cancel now finds the execution canceled and writes nothing.
    let head = world.store.records(&sid).len();
    assert_eq!(world.call(cancel(&sid, "", "")).code(), Code::Ok);
    assert_eq!(world.store.records(&sid).len(), head);
}

/// After a finished cut cancel: ..., CANCEL, END{CANCELED}.
fn assert_canceled_tail_or_end(world: &World, sid: &str) {
    let records = &*world.store.records(sid);
    let last = records.last().unwrap().event.as_ref().unwrap();
    assert!(events::is_canceled_end(last), "{last:?}");
    let kinds = kinds(world, sid);
    assert_eq!(
        kinds[kinds.len() - 2..].to_vec(),
        vec![EventLifecycle, EventEnd]
    );
    verify(world, sid);
}

#[test]
fn cancel_refusals_leave_the_journal_unchanged() {
    let mut world = World::default();
    assert_eq!(world.call(cancel("", "", "")).code(), Code::InvalidArgument);
    assert_eq!(
        world.call(cancel("sess-unknown", "", "")).code(),
        Code::NotFound
    );
    let empty = create(&mut world, "");
    assert_eq!(
        world.call(cancel(&empty, "", "")).code(),
        Code::FailedPrecondition,
        "nothing ever ran"
    );
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "done")).code(), Code::Ok);
    let head = world.store.records(&sid).len();
    assert_eq!(
        world.call(cancel(&sid, "", "")).code(),
        Code::FailedPrecondition,
        "a completed execution"
    );
    let (parked_sid, eid, _) = parked(&mut world, "approval");
    let parked_head = world.store.records(&parked_sid).len();
    for wrong in ["not-an-execution", &format!("{eid}x")] {
        assert_eq!(
            world.call(cancel(&parked_sid, wrong, "")).code(),
            Code::FailedPrecondition
        );
    }
    assert_eq!(world.store.records(&sid).len(), head);
    assert_eq!(world.store.records(&parked_sid).len(), parked_head);
}

#[test]
fn cancel_of_a_live_turn_naming_another_execution_is_refused() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&sid, "", "hello"));
    let head = world.store.records(&sid).len();
    assert_eq!(
        world.call(cancel(&sid, "0000000000000000", "")).code(),
        Code::FailedPrecondition
    );
    assert_eq!(world.store.records(&sid).len(), head);
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
}

#[test]
fn an_abandoned_model_answer_arriving_before_the_cancel_commits_is_dropped() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&sid, "", "hello"));
    // Hold the cancel records' append too: the model answer (held first)
    // is delivered while the turn still waits for them.
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Store(StoreEffect::Append { events, .. })
            if events.iter().any(events::is_cancel_marker))
    }));
    let canceling = world.start(cancel(&sid, "", "stop"));
    assert!(!world.replied(canceling));
    world.release();
    assert_eq!(world.take(canceling).code(), Code::Ok);
    assert_eq!(world.take(turn).code(), Code::Cancelled);
    assert_canceled_tail(&world, &sid, "stop");
}

/// Found by the race explorer: a Cancel that met the turn before it ran
/// dropped the turn's state, and its next outcome hit a finished stage.
#[test]
fn a_cancel_while_the_turn_is_still_starting_is_aborted_and_the_turn_goes_on() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Store(StoreEffect::MintFence { .. }))
    }));
    let turn = world.start(exec(&sid, "", "hello"));
    let canceling = world.start(cancel(&sid, "", ""));
    assert_eq!(world.take(canceling).code(), Code::Aborted);
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
    assert!(!kinds(&world, &sid).contains(&EventLifecycle));
}

#[test]
fn cancel_of_a_resume_redriving_a_model_call_ends_both_calls() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.model_fail_next = Some(ModelFailure::other("provider down"));
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Internal);
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let resuming = world.start(resume(&sid));
    let canceling = world.start(cancel(&sid, "", "give up"));
    let call = world.take(canceling);
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(
        call.session().unwrap().exec_state,
        ExecState::ExecCanceled as i32
    );
    assert_eq!(world.take(resuming).code(), Code::Cancelled);
    assert_canceled_tail(&world, &sid, "give up");
    world.release();
    assert_canceled_tail(&world, &sid, "give up");
    // Nothing re-drives it now.
    let model_calls = world.model_calls;
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.model_calls, model_calls);
}

#[test]
fn cancel_of_an_approved_gate_being_executed_by_resume_keeps_the_receipt() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Ok
    );
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Tool(_))));
    let resuming = world.start(resume(&sid));
    let tool = last_tool_effect(&world);
    let mark = world.trace.len();
    let canceling = world.start(cancel(&sid, &eid, "enough"));
    assert!(
        !world.replied(canceling),
        "the run waits for the tool's answer"
    );
    assert_eq!(since(&world, mark), &[Effect::InterruptTool { id: tool }]);
    world.release();
    assert_eq!(world.take(canceling).code(), Code::Ok);
    assert_eq!(world.take(resuming).code(), Code::Cancelled);
    let tail = kinds(&world, &sid);
    assert_eq!(
        tail[tail.len() - 3..].to_vec(),
        vec![EventToolResult, EventLifecycle, EventEnd]
    );
    assert_eq!(world.executor.attempts, 1);
    assert_canceled_tail(&world, &sid, "enough");
}

#[test]
fn a_cancel_after_the_deadline_aborted_the_turn_is_refused() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let mut req = exec_req(&sid, "", "slow");
    req.deadline_unix = world.now / 1_000_000_000 + 5;
    let turn = world.start(Request::Exec(req));
    world.advance(10 * 1_000_000_000);
    assert!(!world.replied(turn), "the abort waits for the model call");
    let canceling = world.start(cancel(&sid, "", "late"));
    let call = world.take(canceling);
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    world.release();
    assert_eq!(world.take(turn).code(), Code::DeadlineExceeded);
    assert!(!kinds(&world, &sid).contains(&EventLifecycle));
}

#[test]
fn a_cancel_whose_records_are_fenced_out_is_aborted() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&sid, "", "hello"));
    world.faults.append = Some((0, AppendError::Fenced { current: 99 }));
    let canceling = world.start(cancel(&sid, "", "stop"));
    let call = world.take(canceling);
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert_eq!(world.take(turn).code(), Code::Aborted);
    assert!(!kinds(&world, &sid).contains(&EventLifecycle));
}

#[test]
fn a_cancel_naming_an_earlier_or_an_unknown_execution_says_which() {
    let mut world = World::default();
    let (sid, first, _) = parked(&mut world, "approval");
    assert_eq!(world.call(cancel(&sid, &first, "")).code(), Code::Ok);
    let second = world.call(exec(&sid, "", "again"));
    assert_eq!(second.code(), Code::Ok, "{second:?}");
    let message = |call: &agentsessions_testkit::Call| match &call.reply {
        Err(s) => s.message.clone(),
        Ok(_) => String::new(),
    };
    let earlier = world.call(cancel(&sid, &first, ""));
    assert_eq!(earlier.code(), Code::FailedPrecondition);
    assert!(
        message(&earlier).contains("not the session's current one"),
        "{earlier:?}"
    );
    let unknown = world.call(cancel(&sid, "0123456789abcdef", ""));
    assert_eq!(unknown.code(), Code::FailedPrecondition);
    assert!(
        message(&unknown).contains("has no execution"),
        "{unknown:?}"
    );
}

/// Found by madsim (seed 39 of the teeth runs): a turn torn after its
/// START (its INPUT never durable) was canceled, and the END over it left
/// a completed execution short of its declared inputs, which no later
/// projection accepts. Such a turn never started and cannot be resumed:
/// a Cancel finds nothing in flight and writes nothing; a new Exec and a
/// DeleteSession both go ahead.
#[test]
fn cancel_of_a_turn_cut_before_its_inputs_finds_nothing_in_flight() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 1);
    assert_eq!(kinds(&world, &sid), vec![EventExecutionStart]);
    let before = world.store.records(&sid).to_vec();
    let call = world.call(cancel(&sid, "", "stop"));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert_eq!(&*world.store.records(&sid), &before[..], "nothing written");
    agentsessions_machine::journal::executions::project(&world.store.records(&sid))
        .expect("the journal still projects");
    assert_eq!(world.call(exec(&sid, "", "again")).code(), Code::Ok);
    verify(&world, &sid);
}

/// The same short turn with a torn Cancel's marker already on it (a store
/// that tears batches): the next Cancel has nothing to finish and writes
/// no END over it.
#[test]
fn cancel_of_a_short_turn_already_marked_writes_nothing() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 1);
    let fence = world.store.fence(&sid);
    let marker = events::lifecycle(lifecycle::Kind::LifecycleCancel, "torn");
    world.store.append(&sid, 1, fence, &[marker], 0).unwrap();
    let before = world.store.records(&sid).to_vec();
    let call = world.call(cancel(&sid, "", "again"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(&*world.store.records(&sid), &before[..], "nothing written");
    agentsessions_machine::journal::executions::project(&world.store.records(&sid))
        .expect("the journal still projects");
}

#[test]
fn a_deadline_passing_while_a_canceled_turn_renders_its_session_replies_nothing_twice() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let mut req = exec_req(&sid, "", "slow");
    req.deadline_unix = world.now / 1_000_000_000 + 5;
    let turn = world.start(Request::Exec(req));
    // The Cancel's records commit and the turn ends; the session it
    // answers the Cancel with is still being read when the deadline passes.
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Store(StoreEffect::GetSession { .. }))
    }));
    let canceling = world.start(cancel(&sid, "", "stop"));
    assert!(!world.replied(canceling), "the session's render is held");
    world.advance(10 * 1_000_000_000);
    world.release();
    let call = world.take(canceling);
    assert_eq!(call.code(), Code::Ok, "the Cancel is answered: {call:?}");
    let turn = world.take(turn);
    assert_eq!(
        turn.code(),
        Code::Cancelled,
        "one reply, the first: {turn:?}"
    );
    assert_canceled_tail(&world, &sid, "stop");
}
