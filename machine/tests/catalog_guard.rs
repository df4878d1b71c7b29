//! The per-session overlap guard (service.md §3.4; placement/session_guard,
//! suspend, approval_guard and session/overlap tests). A turn is held open
//! by holding back its harness's events, so a second request really
//! overlaps it.

mod common;

use agentsessions_machine::vocab::{
    AppendError, Code, Effect, HarnessEffect, Request, Response, RuntimeCall,
};
use agentsessions_proto::v1::{ComputeState, EventKind, controller_frame::Frame};
use agentsessions_testkit::World;
use common::*;

/// An echo session with a turn held open after its Start frame.
fn held_turn(world: &mut World) -> (String, agentsessions_machine::vocab::RequestId) {
    let sid = create(world, "");
    world.hold = true;
    let id = world.start(exec(&sid, "", "hi"));
    assert!(!world.replied(id), "the turn waits for its harness");
    assert_eq!(world.host.in_flight(), 1);
    (sid, id)
}

#[test]
fn exec_resume_and_suspend_overlapping_a_turn_are_aborted_with_only_a_reply() {
    let mut world = World::default();
    let (sid, turn) = held_turn(&mut world);
    let head = world.store.records(&sid).len();
    for req in [exec(&sid, "", "two"), resume(&sid), suspend(&sid)] {
        let mark = world.trace.len();
        let call = world.call(req);
        assert_eq!(call.code(), Code::Aborted, "{call:?}");
        // Contention is decided before any read, compute or journal step.
        assert_eq!(effect_names(since(&world, mark)), vec!["Reply"]);
        assert!(call.items.is_empty(), "no Session frame before the refusal");
    }
    assert_eq!(world.store.records(&sid).len(), head, "journal unchanged");
    world.release();
    let first = world.take(turn);
    assert_eq!(first.reply, Ok(Response::StreamEnd), "{first:?}");
    assert_eq!(
        world.store.records(&sid).len(),
        5,
        "the first turn completes"
    );
    // The guard drained with the turn: a later Suspend succeeds.
    let call = world.call(suspend(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(
        call.session().unwrap().compute_state,
        ComputeState::ComputeCold as i32
    );
}

#[test]
fn approve_overlapping_a_turn_reads_only_the_row_then_is_aborted() {
    let mut world = World::default();
    let (sid, turn) = held_turn(&mut world);
    let mark = world.trace.len();
    let call = world.call(approve(&sid, "e", "c1", 1, true));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    // The reference looks the session up first (so an unknown uid is
    // NOT_FOUND), then takes the guard before reading any approval state.
    assert_eq!(
        effect_names(since(&world, mark)),
        vec!["GetSession", "Reply"]
    );
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
}

#[test]
fn reads_and_other_sessions_are_not_blocked_by_a_running_turn() {
    let mut world = World::default();
    let (sid, turn) = held_turn(&mut world);
    // Replay and Get take no guard; they see what is committed so far.
    let call = world.call(replay(&sid));
    assert_eq!(call.code(), Code::Ok);
    assert_eq!(
        kinds_of(&streamed(&call)),
        vec![EventKind::EventExecutionStart, EventKind::EventInput]
    );
    assert_eq!(world.call(get(&sid)).code(), Code::Ok);
    // An independent session's operations proceed.
    let other = create(&mut world, "");
    assert_eq!(world.call(suspend(&other)).code(), Code::Ok);
    assert_eq!(world.call(resume(&other)).code(), Code::Ok);
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
}

/// START promising two inputs and one INPUT: an invocation that never
/// reached its harness.
fn incomplete_invocation(world: &mut World, sid: &str) {
    use agentsessions_machine::events;
    let start = events::execution_start(
        "e1",
        agentsessions_proto::v1::ExecutionStart {
            input_count: Some(2),
            harness: "echo".into(),
            ..Default::default()
        },
    );
    let input = events::input("e1", events::text_message("user", "a"));
    let head = world.store.records(sid).len() as i64;
    world
        .store
        .append(sid, head, 0, &[start, input], world.now)
        .unwrap();
}

#[test]
fn contention_wins_over_a_stale_incomplete_invocation() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    incomplete_invocation(&mut world, &sid);
    assert_eq!(world.call(resume(&sid)).code(), Code::FailedPrecondition);
    world.hold = true;
    let turn = world.start(exec(&sid, "", "new"));
    // Recovery would refuse this journal on its own merits; while a turn
    // holds the session, contention is what the caller hears.
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert_eq!(effect_names(since(&world, mark)), vec!["Reply"]);
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
}

#[test]
fn the_park_handshake_holds_the_guard_against_approve_resume_and_suspend() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    world.pause_on = Some(Box::new(
        |e| matches!(e, Effect::Harness(HarnessEffect::Send { frame, .. }) if matches!(frame.frame, Some(Frame::Park(_)))),
    ));
    let turn = world.start(exec(&sid, "", "go"));
    assert!(world.holding() && !world.replied(turn));
    let head = world.store.records(&sid).len();
    assert_eq!(head, 4, "TOOL_CALL and APPROVAL_REQUEST are committed");
    for req in [
        approve(&sid, "0000000000000002", "c1", 4, true),
        resume(&sid),
        suspend(&sid),
        exec(&sid, "", ""),
    ] {
        let call = world.call(req);
        assert_eq!(call.code(), Code::Aborted, "{call:?}");
    }
    assert_eq!(world.store.records(&sid).len(), head, "authority unchanged");
    world.release();
    let call = world.take(turn);
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(kinds(&world, &sid).last(), Some(&EventKind::EventLifecycle));
    // Released: the guard is free for the decision.
    let pending = session(&mut world, &sid).pending_approval.unwrap();
    let call = world.call(approve(
        &sid,
        &pending.execution_id,
        "c1",
        pending.request_seq,
        true,
    ));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
}

#[test]
fn the_handoff_snapshot_phase_holds_the_guard() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    world.pause_on = Some(Box::new(|e| {
        matches!(
            e,
            Effect::Runtime(RuntimeCall {
                op: agentsessions_machine::vocab::RuntimeOp::Snapshot { .. },
                ..
            })
        )
    }));
    let turn = world.start(exec(&sid, "", "go"));
    assert!(world.holding());
    for req in [resume(&sid), suspend(&sid), exec(&sid, "", "x")] {
        assert_eq!(world.call(req).code(), Code::Aborted);
    }
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
    assert_eq!(world.host.in_flight(), 0, "guards drain with the operation");
}

/// Runs `req` after arming a failure, expects `code`, then shows the
/// session is free again by completing an echo turn on it.
fn fails_then_frees(
    world: &mut World,
    sid: &str,
    req: agentsessions_machine::vocab::Request,
    code: Code,
) {
    let call = world.call(req);
    assert_eq!(call.code(), code, "{call:?}");
    assert_eq!(world.host.in_flight(), 0);
    let next = world.call(exec(sid, "", "after"));
    assert_eq!(next.code(), Code::Ok, "the guard was released: {next:?}");
}

#[test]
fn the_guard_drains_after_backend_and_journal_failures_of_every_guarded_op() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "first"));

    world.faults.provision = Some("backend down".into());
    fails_then_frees(&mut world, &sid, exec(&sid, "", "x"), Code::Internal);
    world.faults.read = Some((0, "disk".into()));
    fails_then_frees(&mut world, &sid, exec(&sid, "", "x"), Code::Internal);

    world.faults.snapshot = Some("backend down".into());
    fails_then_frees(&mut world, &sid, suspend(&sid), Code::Internal);
    world.faults.append = Some((0, AppendError::Failed("disk".into())));
    fails_then_frees(&mut world, &sid, suspend(&sid), Code::Internal);

    world.faults.provision = Some("backend down".into());
    fails_then_frees(&mut world, &sid, resume(&sid), Code::Internal);
    world.faults.read = Some((0, "disk".into()));
    fails_then_frees(&mut world, &sid, resume(&sid), Code::Internal);

    world.faults.read = Some((0, "disk".into()));
    fails_then_frees(
        &mut world,
        &sid,
        approve(&sid, "e", "c", 1, true),
        Code::Internal,
    );
}

#[test]
fn the_guard_drains_after_routing_and_journal_refusals_of_resume() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    incomplete_invocation(&mut world, &sid);
    for _ in 0..2 {
        let call = world.call(resume(&sid));
        assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
        assert!(format!("{:?}", call.reply).contains("never reached the harness"));
        assert_eq!(world.host.in_flight(), 0);
    }
    // The session is free: a fresh turn supersedes the incomplete one.
    assert_eq!(world.call(exec(&sid, "", "again")).code(), Code::Ok);
}

#[test]
fn a_call_past_the_in_flight_cap_is_resource_exhausted_with_only_a_reply() {
    let mut config = agentsessions_testkit::world::config();
    config.max_in_flight = 1;
    let mut world = World::new(config);
    let (sid, turn) = held_turn(&mut world);
    let head = world.store.records(&sid).len();
    let create_one = Request::CreateSession(Default::default());
    for req in [exec(&sid, "", "two"), get(&sid), create_one] {
        let mark = world.trace.len();
        let call = world.call(req);
        assert_eq!(call.code(), Code::ResourceExhausted, "{call:?}");
        assert_eq!(effect_names(since(&world, mark)), vec!["Reply"]);
    }
    assert_eq!(world.store.records(&sid).len(), head, "journal unchanged");
    world.release();
    assert_eq!(world.take(turn).reply, Ok(Response::StreamEnd));
    // Room again once the turn is done.
    assert_eq!(world.call(get(&sid)).code(), Code::Ok);
}
