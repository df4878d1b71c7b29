//! Approval expiry through the host: a request nobody decides within its
//! wait is denied by the host itself (a durable APPROVAL_RESULT, then the
//! turn resumed), counted from the request's journaled time, and a human
//! decision after the deadline is refused.

mod common;

use agentsessions_machine::events::body;
use agentsessions_machine::vocab::{
    Code, HOST_PRINCIPAL, HostConfig, Nanos, Request, Signal, ToolRule,
};
use agentsessions_proto::v1::{ApproveRequest, EventKind, IdentityRef, LogRecord};
use agentsessions_testkit::{World, world};
use common::*;

use EventKind::*;

const SECOND: Nanos = 1_000_000_000;

fn expiring(ms: Option<u64>, rules: &[&str]) -> World {
    let mut config: HostConfig = world::config();
    config.tools.approval_expiry_ms = ms;
    config.tools.rules = rules
        .iter()
        .map(|r| r.parse::<ToolRule>().unwrap())
        .collect();
    World::new(config)
}

fn decisions(world: &World, sid: &str) -> Vec<LogRecord> {
    world
        .store
        .records(sid)
        .iter()
        .filter(|r| r.event.as_ref().unwrap().kind == EventApprovalResult as i32)
        .cloned()
        .collect()
}

#[test]
fn a_request_undecided_past_its_wait_is_denied_by_the_host_and_the_turn_resumes() {
    let mut world = expiring(Some(60_000), &[]);
    let (sid, _, seq) = parked(&mut world, "approval");
    world.signals();
    world.advance(59 * SECOND);
    assert!(decisions(&world, &sid).is_empty(), "not yet");
    world.advance(2 * SECOND);
    let decided = decisions(&world, &sid);
    assert_eq!(decided.len(), 1, "denied once");
    let ev = decided[0].event.as_ref().unwrap();
    assert_eq!(ev.actor.as_ref().unwrap().principal, HOST_PRINCIPAL);
    let r = body::approval_result(ev).unwrap();
    assert_eq!(
        (r.approved, r.reason.as_str(), r.request_seq),
        (false, "expired after 1m", seq)
    );
    // The turn went on: the denial receipt reached the agent, which ended.
    let after = after_decision(&world, &sid);
    assert_eq!(
        after,
        [EventToolResult, EventOutput, EventEnd, EventLifecycle],
        "the receipt, the agent's answer, END and the RESUME marker"
    );
    let receipt = world.store.records(&sid)[decided[0].seq as usize].clone();
    let result = body::result(receipt.event.as_ref().unwrap()).unwrap();
    assert!(result.is_error, "the agent reads a denial");
    assert!(world.signals().contains(&Signal::ApprovalExpired {
        session: sid.clone()
    }));
    assert_eq!(world.host.in_flight(), 0, "the expiry ended");
}

/// The kinds of the records after the (first) decision.
fn after_decision(world: &World, sid: &str) -> Vec<EventKind> {
    let all = kinds(world, sid);
    let at = all
        .iter()
        .position(|k| *k == EventApprovalResult)
        .expect("decided");
    all[at + 1..].to_vec()
}

fn deny(sid: &str, eid: &str, seq: i64, principal: &str) -> Request {
    Request::Approve(ApproveRequest {
        session: sid.into(),
        execution_id: eid.into(),
        tool_call_id: "c1".into(),
        request_seq: seq,
        approved: Some(true),
        reason: "looks fine".into(),
        identity: Some(IdentityRef {
            principal: principal.into(),
            ..Default::default()
        }),
    })
}

#[test]
fn a_human_decision_after_the_deadline_is_refused_and_the_host_denies() {
    let mut world = expiring(None, &["write=approval:30s"]);
    let (sid, eid, seq) = parked(&mut world, "approval");
    world.advance(31 * SECOND);
    let late = world.call(deny(&sid, &eid, seq, "alice"));
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    let text = late.reply.as_ref().unwrap_err().message.clone();
    assert_eq!(
        text,
        "approve: request expired after 30s: the host denied it"
    );
    let decided = decisions(&world, &sid);
    assert_eq!(decided.len(), 1);
    let actor = decided[0].event.as_ref().unwrap().actor.clone().unwrap();
    assert_eq!(actor.principal, HOST_PRINCIPAL, "the host's denial stands");
}

#[test]
fn a_human_decision_that_reaches_a_deadline_already_passed_is_refused_before_the_timer_fires() {
    let mut world = expiring(Some(10_000), &[]);
    let (sid, eid, seq) = parked(&mut world, "approval");
    // The clock moves without the host being asked: the decision arrives
    // first, at a time past the deadline.
    world.now += 11 * SECOND;
    let late = world.call(deny(&sid, &eid, seq, "alice"));
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    assert!(
        late.reply
            .as_ref()
            .unwrap_err()
            .message
            .contains("expired after 10s")
    );
    let decided = decisions(&world, &sid);
    assert_eq!(decided.len(), 1, "exactly one decision, the host's");
    let ev = decided[0].event.as_ref().unwrap();
    assert_eq!(ev.actor.as_ref().unwrap().principal, HOST_PRINCIPAL);
}

#[test]
fn a_decision_in_time_wins_and_the_deadline_does_nothing() {
    let mut world = expiring(Some(10_000), &[]);
    let (sid, eid, seq) = parked(&mut world, "approval");
    world.advance(9 * SECOND);
    assert_eq!(world.call(deny(&sid, &eid, seq, "alice")).code(), Code::Ok);
    world.advance(60 * SECOND);
    let decided = decisions(&world, &sid);
    assert_eq!(decided.len(), 1);
    let ev = decided[0].event.as_ref().unwrap();
    assert_eq!(ev.actor.as_ref().unwrap().principal, "alice");
    assert_eq!(world.host.poll_timeout(), None, "nothing left armed");
}

#[test]
fn without_an_expiry_a_request_waits_forever() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world, "approval");
    world.advance(365 * 24 * 3600 * SECOND);
    assert!(decisions(&world, &sid).is_empty());
}

#[test]
fn after_a_restart_the_deadline_counts_from_the_journaled_request() {
    let mut world = expiring(Some(60_000), &[]);
    let (sid, _, _) = parked(&mut world, "approval");
    world.advance(30 * SECOND);
    world.restart();
    assert!(
        world.host.poll_timeout().is_none(),
        "a new host knows nothing yet"
    );
    // Any load finds it (the daemon's boot scan reads every session).
    let _ = session(&mut world, &sid);
    world.advance(29 * SECOND);
    assert!(decisions(&world, &sid).is_empty(), "59 s after the request");
    world.advance(2 * SECOND);
    assert_eq!(decisions(&world, &sid).len(), 1, "61 s after, not 90 s");
    world.restart();
    let _ = session(&mut world, &sid);
    world.advance(600 * SECOND);
    assert_eq!(decisions(&world, &sid).len(), 1, "never twice");
}

#[test]
fn a_busy_session_puts_the_expiry_off_and_it_still_happens() {
    let mut world = expiring(Some(10_000), &[]);
    let (sid, eid, seq) = parked(&mut world, "approval");
    // A human's Approve holds the session when the deadline passes.
    world.pause_on = Some(Box::new(|e| {
        matches!(
            e,
            agentsessions_machine::vocab::Effect::Store(
                agentsessions_machine::vocab::StoreEffect::MintFence { .. }
            )
        )
    }));
    let human = world.start(deny(&sid, &eid, seq, "alice"));
    world.advance(11 * SECOND);
    world.release();
    let call = world.take(human);
    assert_eq!(call.code(), Code::Ok, "it started in time: {call:?}");
    world.advance(30 * SECOND);
    let decided = decisions(&world, &sid);
    assert_eq!(decided.len(), 1, "one decision, the human's");
}

#[test]
fn the_host_identity_is_not_for_humans() {
    let mut world = expiring(Some(10_000), &[]);
    let (sid, eid, seq) = parked(&mut world, "approval");
    let forged = world.call(deny(&sid, &eid, seq, HOST_PRINCIPAL));
    assert_eq!(forged.code(), Code::InvalidArgument, "{forged:?}");
    assert!(decisions(&world, &sid).is_empty());
}

/// Found by madsim: a Cancel torn after its CANCEL marker (the END never
/// written) left the gate looking open, and the host's expiry decided it
/// after the Cancel. A canceled execution takes no decision, from the host
/// or from anyone.
#[test]
fn a_cancel_torn_before_its_end_leaves_nothing_to_decide_or_expire() {
    let mut world = expiring(Some(10_000), &[]);
    let (sid, eid, seq) = parked(&mut world, "approval");
    let head = world.store.records(&sid).len() as i64;
    let fence = world.store.fence(&sid);
    let marker = agentsessions_machine::events::lifecycle(
        agentsessions_proto::v1::lifecycle::Kind::LifecycleCancel,
        "",
    );
    world.store.append(&sid, head, fence, &[marker], 0).unwrap();
    let human = world.call(deny(&sid, &eid, seq, "alice"));
    assert_eq!(human.code(), Code::FailedPrecondition, "{human:?}");
    assert!(
        human
            .reply
            .as_ref()
            .unwrap_err()
            .message
            .contains("canceled"),
        "{human:?}"
    );
    world.advance(60 * SECOND);
    assert!(
        decisions(&world, &sid).is_empty(),
        "nothing follows the Cancel"
    );
}
