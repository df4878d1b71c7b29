//! Signals through the host: each live turn's end is told once with its
//! outcome and harness, a park marks its session awaiting and the decision,
//! a cancel or a deletion clears it; a replay and a refused call tell
//! nothing. The shell's metrics are only as exact as these.

mod common;

use agentsessions_machine::vocab::{Code, ModelFailure, Request, Signal, TurnOutcome};
use agentsessions_proto::v1::{CancelRequest, DeleteSessionRequest};
use agentsessions_testkit::World;
use common::*;

/// (harness, outcome) of each TurnEnded.
type Turns = Vec<(String, TurnOutcome)>;
/// (session, awaiting) of each Awaiting.
type Moves = Vec<(String, bool)>;

/// The turns and the awaiting moves told since the last call.
fn told(world: &mut World) -> (Turns, Moves) {
    let mut turns = Vec::new();
    let mut awaiting = Vec::new();
    for s in world.signals() {
        match s {
            Signal::TurnEnded {
                harness,
                outcome,
                took,
            } => {
                assert!(took > 0, "a turn takes time on the machine's clock");
                turns.push((harness, outcome));
            }
            Signal::Awaiting {
                session,
                awaiting: a,
            } => awaiting.push((session, a)),
            Signal::ApprovalExpired { session } => panic!("no expiry is configured: {session}"),
        }
    }
    (turns, awaiting)
}

#[test]
fn a_completed_turn_is_told_once_with_its_harness() {
    let mut world = World::default();
    let sid = create(&mut world, "echo");
    let _ = world.signals();
    for _ in 0..3 {
        assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    }
    let (turns, awaiting) = told(&mut world);
    assert_eq!(turns, vec![("echo".to_owned(), TurnOutcome::Completed); 3]);
    assert!(awaiting.is_empty(), "{awaiting:?}");
}

#[test]
fn a_failed_model_call_ends_the_turn_failed() {
    let mut world = World::default();
    world.model_fail_next = Some(ModelFailure::other("provider down"));
    let sid = create(&mut world, "echo");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Internal);
    let (turns, _) = told(&mut world);
    assert_eq!(turns, vec![("echo".to_owned(), TurnOutcome::Failed)]);
}

#[test]
fn a_park_awaits_until_the_decision_and_the_resumed_turn_completes() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let (turns, awaiting) = told(&mut world);
    assert_eq!(turns, vec![("approval".to_owned(), TurnOutcome::Parked)]);
    assert_eq!(awaiting, vec![(sid.clone(), true)]);

    let call = world.call(approve(&sid, &eid, "c1", seq, true));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let (turns, awaiting) = told(&mut world);
    assert!(turns.is_empty(), "a decision is not a turn: {turns:?}");
    assert_eq!(awaiting, vec![(sid.clone(), false)]);

    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    let (turns, awaiting) = told(&mut world);
    assert_eq!(turns, vec![("approval".to_owned(), TurnOutcome::Completed)]);
    assert!(awaiting.is_empty());
}

#[test]
fn a_cancel_clears_a_waiting_session_and_a_deletion_is_told_too() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world, "approval");
    let _ = world.signals();
    let cancel = world.call(Request::Cancel(CancelRequest {
        session: sid.clone(),
        ..Default::default()
    }));
    assert_eq!(cancel.code(), Code::Ok, "{cancel:?}");
    assert_eq!(told(&mut world).1, vec![(sid.clone(), false)]);

    let delete = world.call(Request::DeleteSession(DeleteSessionRequest {
        uid: sid.clone(),
    }));
    assert_eq!(delete.code(), Code::Ok, "{delete:?}");
    assert_eq!(told(&mut world), (vec![], vec![(sid, false)]));
}

#[test]
fn a_replay_and_a_refused_call_tell_nothing() {
    let mut world = World::default();
    let sid = create(&mut world, "echo");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    let _ = world.signals();
    assert_eq!(world.call(replay(&sid)).code(), Code::Ok);
    assert_eq!(world.call(exec("nope", "", "hi")).code(), Code::NotFound);
    assert_eq!(told(&mut world), (vec![], vec![]));
}

#[test]
fn a_host_that_never_drains_keeps_only_the_newest_signals() {
    use agentsessions_machine::vocab::SIGNAL_QUEUE;
    let mut world = World::default();
    // A fresh session per turn keeps each turn's history short.
    for _ in 0..SIGNAL_QUEUE + 5 {
        let sid = create(&mut world, "echo");
        assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    }
    assert_eq!(world.signals().len(), SIGNAL_QUEUE);
}
