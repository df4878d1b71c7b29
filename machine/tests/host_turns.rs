//! End-to-end behaviour of the host, driven through the deterministic world.

use agentsessions_machine::events;
use agentsessions_machine::vocab::{Code, Request, Response, StreamItem};
use agentsessions_proto::v1::{
    CreateSessionRequest, EventKind, ExecRequest, LogRecord, ReplayRequest, ResumeRequest, Session,
};
use agentsessions_testkit::World;

fn exec(session: &str, harness: &str, text: &str) -> Request {
    Request::Exec(ExecRequest {
        session: session.into(),
        harness: harness.into(),
        inputs: if text.is_empty() {
            vec![]
        } else {
            vec![events::text_message("user", text)]
        },
        ..Default::default()
    })
}

fn create(world: &mut World, harness: &str) -> String {
    let call = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: harness.into(),
            ..Default::default()
        }),
    }));
    call.session().expect("created").metadata.unwrap().uid
}

fn kinds(world: &World, session: &str) -> Vec<EventKind> {
    world
        .store
        .records(session)
        .iter()
        .map(|r| events::kind_of(r.event.as_ref().unwrap()))
        .collect()
}

#[test]
fn an_echo_turn_journals_five_records_and_streams_them_after_the_session_frame() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "", "hello"));
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
    assert!(matches!(call.items.first(), Some(StreamItem::Session(_))));
    assert_eq!(call.record_seqs(), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        kinds(&world, &sid),
        vec![
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventEnd
        ]
    );
    agentsessions_machine::chain::verify(&world.store.records(&sid)).expect("chain verifies");
    assert_eq!(world.model_calls, 1);
}

#[test]
fn exec_without_a_session_creates_one_and_runs_the_turn() {
    let mut world = World::default();
    let call = world.call(exec("", "", "hi"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let sid = call.session().unwrap().metadata.unwrap().uid;
    assert_eq!(world.store.records(&sid).len(), 5);
}

/// Every record a Replay of `sid` streams.
fn replay(world: &mut World, sid: &str) -> Vec<LogRecord> {
    let call = world.call(Request::Replay(ReplayRequest {
        session: sid.into(),
        ..Default::default()
    }));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    call.items
        .iter()
        .map(|i| match i {
            StreamItem::Record(r) => r.record().clone(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn replay_streams_the_committed_records_verbatim_with_no_model_calls() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hello"));
    let calls = world.model_calls;
    let replayed = replay(&mut world, &sid);
    assert_eq!(replayed, &*world.store.records(&sid));
    assert_eq!(world.model_calls, calls);
}

#[test]
fn replay_reads_pages_bounded_in_bytes_each_paced_by_its_client() {
    use agentsessions_machine::vocab::{Effect, StoreEffect, config::REPLAY_PAGE_BYTES};
    let mut world = World::default();
    let sid = create(&mut world, "");
    // Four turns whose input and echoed output are each a third of a page.
    let big = "x".repeat(REPLAY_PAGE_BYTES / 3);
    for _ in 0..4 {
        assert_eq!(world.call(exec(&sid, "", &big)).code(), Code::Ok);
    }
    let stored = world.store.records(&sid).to_vec();
    world.trace.clear();
    let replayed = replay(&mut world, &sid);
    assert_eq!(replayed, stored, "every record once, in order");
    let pages: Vec<_> = world
        .trace
        .iter()
        .filter_map(|e| match e {
            Effect::Store(StoreEffect::ReadLog { from_seq, pace, .. }) => Some((*from_seq, *pace)),
            _ => None,
        })
        .collect();
    assert!(
        pages.len() >= 3,
        "8 records of a third of a page each: {pages:?}"
    );
    for (_, pace) in &pages {
        let pace = pace.expect("a replay page is paced");
        assert_eq!(pace.max_bytes, REPLAY_PAGE_BYTES);
    }
}

#[test]
fn resume_of_a_completed_session_only_marks_resume() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hello"));
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(kinds(&world, &sid).last(), Some(&EventKind::EventLifecycle));
    assert_eq!(world.model_calls, 1);
}

#[test]
fn a_stale_expected_last_seq_is_aborted_and_writes_nothing() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "one"));
    let mut req = ExecRequest {
        session: sid.clone(),
        inputs: vec![events::text_message("user", "two")],
        expected_last_seq: Some(0),
        ..Default::default()
    };
    let call = world.call(Request::Exec(req.clone()));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert_eq!(world.store.records(&sid).len(), 5);
    req.expected_last_seq = Some(5);
    assert_eq!(world.call(Request::Exec(req)).code(), Code::Ok);
}

fn approve(sid: &str, exec_id: &str, seq: i64, approved: bool) -> Request {
    Request::Approve(agentsessions_proto::v1::ApproveRequest {
        session: sid.into(),
        execution_id: exec_id.into(),
        tool_call_id: "c1".into(),
        request_seq: seq,
        approved: Some(approved),
        reason: "ok".into(),
        identity: None,
    })
}

#[allow(deprecated)]
fn resume(sid: &str) -> Request {
    Request::Resume(ResumeRequest {
        session: sid.into(),
        boot: false,
    })
}

/// Parks a gated call; returns (session, execution id, request seq).
fn parked(world: &mut World) -> (String, String, i64) {
    let sid = create(world, "approval");
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(
        call.reply,
        Ok(Response::StreamEnd),
        "a park closes OK: {call:?}"
    );
    let session = call.session().unwrap();
    let pending = session.pending_approval.clone().expect("pending approval");
    assert_eq!(
        session.exec_state,
        agentsessions_proto::v1::ExecState::ExecAwaiting as i32
    );
    assert_eq!(
        session.compute_state,
        agentsessions_proto::v1::ComputeState::ComputeCold as i32
    );
    (sid, pending.execution_id, pending.request_seq)
}

#[test]
fn a_gated_call_parks_with_request_then_suspend_and_no_end() {
    let mut world = World::default();
    let (sid, _, seq) = parked(&mut world);
    assert_eq!(seq, 4);
    assert_eq!(
        kinds(&world, &sid),
        vec![
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventToolCall,
            EventKind::EventApprovalRequest,
            EventKind::EventLifecycle
        ]
    );
    assert_eq!(world.executor.attempts, 0, "nothing runs before a decision");
}

#[test]
fn approve_then_resume_executes_once_and_completes() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world);
    let call = world.call(approve(&sid, &eid, seq, true));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let Ok(Response::Approve(resp)) = &call.reply else {
        panic!()
    };
    let decision = resp.decision.clone().unwrap();
    assert_eq!(decision.seq, 6);
    // An exact retry returns the same record and writes nothing.
    let retry = world.call(approve(&sid, &eid, seq, true));
    let Ok(Response::Approve(again)) = &retry.reply else {
        panic!()
    };
    assert_eq!(again.decision.as_ref(), Some(&decision));
    assert_eq!(world.store.records(&sid).len(), 6);
    // A different decision is refused.
    assert_eq!(
        world.call(approve(&sid, &eid, seq, false)).code(),
        Code::FailedPrecondition
    );

    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.executor.effects, 1);
    let tail: Vec<_> = kinds(&world, &sid)[6..].to_vec();
    assert_eq!(
        tail,
        vec![
            EventKind::EventToolResult,
            EventKind::EventOutput,
            EventKind::EventEnd,
            EventKind::EventLifecycle
        ]
    );
    // Recovery is idempotent: a second Resume runs nothing.
    world.call(resume(&sid));
    assert_eq!(world.executor.attempts, 1);
    agentsessions_machine::chain::verify(&world.store.records(&sid)).unwrap();
}

#[test]
fn a_denied_call_never_executes_and_records_a_denial_receipt() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world);
    world.call(approve(&sid, &eid, seq, false));
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.executor.attempts, 0);
    let receipt = world.store.records(&sid)[6].event.clone().unwrap();
    let Some(agentsessions_proto::v1::event::Body::Result(r)) = receipt.body else {
        panic!()
    };
    assert!(r.is_error);
    assert_eq!(
        r.code,
        agentsessions_proto::v1::tool_result::Code::ApprovalDenied as i32
    );
    assert_eq!((r.approval_request_seq, r.approval_decision_seq), (4, 6));
}

#[test]
fn new_inputs_wait_while_an_owned_gate_lacks_its_receipt() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world);
    let call = world.call(exec(&sid, "", "more"));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert_eq!(world.store.records(&sid).len(), 5);
}

#[test]
fn resume_of_an_undecided_request_parks_again_without_runtime_io() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world);
    let before = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert!(call.session().unwrap().pending_approval.is_some());
    let io = world.trace[before..].iter().any(|e| {
        matches!(
            e,
            agentsessions_machine::vocab::Effect::Runtime(
                agentsessions_machine::vocab::RuntimeCall { .. }
            ) | agentsessions_machine::vocab::Effect::Harness(
                agentsessions_machine::vocab::HarnessEffect::Dial { .. }
            ) | agentsessions_machine::vocab::Effect::Store(
                agentsessions_machine::vocab::StoreEffect::MintFence { .. }
            )
        )
    });
    assert!(!io, "no fence, no runtime IO");
}

#[test]
fn resume_after_a_crash_past_output_serves_it_and_appends_end_and_resume() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hello"));
    // Cut the journal after OUTPUT, as a crash before END would leave it.
    let cut: Vec<_> = world.store.records(&sid)[..4].to_vec();
    let mut fresh = World::default();
    fresh.store.import(&sid, cut, fresh.now);
    let call = fresh.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(fresh.model_calls, 0, "the recorded completion is served");
    assert_eq!(
        kinds(&fresh, &sid)[4..].to_vec(),
        vec![EventKind::EventEnd, EventKind::EventLifecycle]
    );
}

#[test]
fn resume_after_a_crash_at_model_call_invokes_the_model_once() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hello"));
    let cut: Vec<_> = world.store.records(&sid)[..3].to_vec();
    let mut fresh = World::default();
    fresh.store.import(&sid, cut, fresh.now);
    assert_eq!(fresh.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(fresh.model_calls, 1);
    assert_eq!(
        kinds(&fresh, &sid)[3..].to_vec(),
        vec![
            EventKind::EventOutput,
            EventKind::EventEnd,
            EventKind::EventLifecycle
        ]
    );
}
