//! The approval gate through the host: approval, approval_gate,
//! approval_crash and approval_safety entries (controller.md §6) and the
//! placement/session approval entries (service.md §1.10, §9).

mod common;

use agentsessions_machine::events::body;
use agentsessions_machine::vocab::{
    AppendError, Code, Effect, HarnessEffect, HostConfig, Request, Response, RuntimeCall,
    RuntimeOp, StoreEffect, StreamItem,
};
use agentsessions_proto::v1::{
    ApproveRequest, ComputeState, EventKind, ExecState, IdentityRef, Mediation, Resumability,
    ToolResult, controller_frame::Frame, event::Body, tool_result,
};
use agentsessions_testkit::harness::{self, FnScript, Reply, ev};
use agentsessions_testkit::{MemStore, World, world};
use common::*;

use EventKind::*;

fn decision_of(call: &agentsessions_testkit::Call) -> agentsessions_proto::v1::LogRecord {
    match &call.reply {
        Ok(Response::Approve(r)) => r.decision.clone().expect("decision"),
        other => panic!("not an approval: {other:?}"),
    }
}

fn with_identity(req: Request, principal: &str) -> Request {
    match req {
        Request::Approve(mut a) => {
            a.identity = Some(IdentityRef {
                principal: principal.into(),
                ..Default::default()
            });
            Request::Approve(a)
        }
        other => other,
    }
}

#[test]
fn approve_records_the_decision_at_the_head_with_the_identity_as_actor() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let call = world.call(with_identity(
        approve(&sid, &eid, "c1", seq, false),
        "alice",
    ));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let d = decision_of(&call);
    assert_eq!(d.seq, 6, "after TOOL_CALL, REQUEST and the park's SUSPEND");
    let ev = d.event.as_ref().unwrap();
    assert_eq!(ev.actor.as_ref().unwrap().principal, "alice");
    assert!(ev.ts.is_some(), "only Approve stamps a time");
    let r = body::approval_result(ev).unwrap();
    assert_eq!(
        (r.tool_call_id.as_str(), r.request_seq, r.approved),
        ("c1", seq, false)
    );
    let Ok(Response::Approve(resp)) = &call.reply else {
        unreachable!()
    };
    let s = resp.session.as_ref().unwrap();
    assert!(s.pending_approval.is_none());
    assert_ne!(s.exec_state, ExecState::ExecAwaiting as i32);
    assert_eq!(s.last_seq, 6);
}

#[test]
fn an_exact_retry_returns_the_committed_record_without_a_fence_or_append() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let first = decision_of(&world.call(approve(&sid, &eid, "c1", seq, true)));
    let fence = world.store.fence(&sid);
    let mark = world.trace.len();
    let again = world.call(approve(&sid, &eid, "c1", seq, true));
    assert_eq!(decision_of(&again), first);
    assert_eq!(
        effect_names(since(&world, mark)),
        vec![
            "GetSession",
            "ReadJournal",
            "GetSession",
            "ReadJournal",
            "Reply"
        ],
        "a retry reads and renders; it never mints or appends"
    );
    assert_eq!(world.store.fence(&sid), fence, "no writer is fenced");
    // Still exact after the receipt, END and a newer turn.
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.call(exec(&sid, "", "more")).code(), Code::Ok);
    let head = world.store.records(&sid).len();
    let mark = world.trace.len();
    assert_eq!(
        decision_of(&world.call(approve(&sid, &eid, "c1", seq, true))),
        first
    );
    assert!(!any_of(since(&world, mark), &["MintFence", "Append"]));
    assert_eq!(world.store.records(&sid).len(), head);
    // An explicit all-empty identity is the same as none.
    let call = world.call(with_identity(approve(&sid, &eid, "c1", seq, true), ""));
    assert_eq!(decision_of(&call), first);
}

#[test]
fn invalid_approvals_are_refused_without_writing_or_fencing() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let fence = world.store.fence(&sid);
    let base = ApproveRequest {
        session: sid.clone(),
        execution_id: eid.clone(),
        tool_call_id: "c1".into(),
        request_seq: seq,
        approved: Some(true),
        reason: "ok".into(),
        identity: None,
    };
    let missing: [fn(&mut ApproveRequest); 5] = [
        |r| r.session.clear(),
        |r| r.execution_id.clear(),
        |r| r.tool_call_id.clear(),
        |r| r.request_seq = 0,
        |r| r.approved = None,
    ];
    for f in missing {
        let mut r = base.clone();
        f(&mut r);
        let mark = world.trace.len();
        assert_eq!(
            world.call(Request::Approve(r)).code(),
            Code::InvalidArgument
        );
        assert_eq!(effect_names(since(&world, mark)), vec!["Reply"]);
    }
    let mut r = base.clone();
    r.session = "sess-unknown".into();
    assert_eq!(world.call(Request::Approve(r)).code(), Code::NotFound);
    assert!(world.store.row("sess-unknown").is_none(), "no row created");
    let wrong: [fn(&mut ApproveRequest); 3] = [
        |r| r.execution_id = "ffffffffffffffff".into(),
        |r| r.tool_call_id = "c9".into(),
        |r| r.request_seq += 1,
    ];
    for f in wrong {
        let mut r = base.clone();
        f(&mut r);
        let mark = world.trace.len();
        assert_eq!(
            world.call(Request::Approve(r)).code(),
            Code::FailedPrecondition
        );
        assert!(!any_of(since(&world, mark), &["MintFence", "Append"]));
    }
    assert_eq!(world.store.fence(&sid), fence);
    // Once decided, any change to the verdict, reason or identity is refused.
    world.call(Request::Approve(base.clone()));
    let changed: [fn(&mut ApproveRequest); 3] = [
        |r| r.approved = Some(false),
        |r| r.reason = "other".into(),
        |r| {
            r.identity = Some(IdentityRef {
                subject: "bob".into(),
                ..Default::default()
            })
        },
    ];
    let head = world.store.records(&sid).len();
    for f in changed {
        let mut r = base.clone();
        f(&mut r);
        assert_eq!(
            world.call(Request::Approve(r)).code(),
            Code::FailedPrecondition
        );
    }
    assert_eq!(world.store.records(&sid).len(), head);
}

#[test]
fn a_head_advance_between_scan_and_append_aborts_the_decision() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let racer = sid.clone();
    world.before_effect = Some(Box::new(move |e, store| {
        if matches!(e, Effect::Store(StoreEffect::MintFence { .. })) {
            let head = store.records(&racer).len() as i64;
            let fence = store.fence(&racer);
            let marker = agentsessions_machine::events::lifecycle(
                agentsessions_proto::v1::lifecycle::Kind::LifecycleResume,
                "",
            );
            store.append(&racer, head, fence, &[marker], 0).unwrap();
        }
    }));
    let call = world.call(approve(&sid, &eid, "c1", seq, true));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    world.before_effect = None;
    assert!(!kinds(&world, &sid).contains(&EventApprovalResult));
}

/// Found by madsim (two hosts, no faults): a Resume loaded the journal,
/// another host then appended the approved call's receipt, and the Resume
/// minted its fence and re-ran the call before its own append could fail
/// the CAS. The journal is now re-read under the new fence.
#[test]
fn a_journal_that_moves_while_resume_fences_aborts_before_the_tool_runs() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Ok
    );
    let racer = sid.clone();
    world.before_effect = Some(Box::new(move |e, store| {
        if matches!(e, Effect::Store(StoreEffect::MintFence { .. })) {
            let head = store.records(&racer).len() as i64;
            let fence = store.fence(&racer);
            let marker = agentsessions_machine::events::lifecycle(
                agentsessions_proto::v1::lifecycle::Kind::LifecycleResume,
                "",
            );
            store.append(&racer, head, fence, &[marker], 0).unwrap();
        }
    }));
    let attempts = world.executor.attempts;
    let call = world.call(resume(&sid));
    world.before_effect = None;
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert_eq!(
        world.executor.attempts, attempts,
        "the approved call did not run"
    );
    // With the journal still, the next Resume runs it once.
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.attempts, attempts + 1);
}

#[test]
fn operational_failures_of_approve_are_internal_and_write_nothing() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    world.faults.read = Some((0, "disk".into()));
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Internal
    );
    world.faults.fence = Some("disk".into());
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Internal
    );
    world.faults.append = Some((0, AppendError::Fenced { current: 99 }));
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Aborted
    );
    assert!(!kinds(&world, &sid).contains(&EventApprovalResult));
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Ok
    );
}

#[test]
fn the_same_ids_in_two_sessions_are_decided_independently() {
    let mut world = World::default();
    let (a, ea, sa) = parked(&mut world, "approval");
    let (b, eb, sb) = parked(&mut world, "approval");
    assert_eq!(
        world.call(approve(&a, &ea, "c1", sa, true)).code(),
        Code::Ok
    );
    assert_eq!(
        world.call(approve(&b, &eb, "c1", sb, false)).code(),
        Code::Ok
    );
    // A tuple from one session is not owned by the other.
    assert_eq!(
        world.call(approve(&b, &ea, "c1", sa, true)).code(),
        Code::FailedPrecondition
    );
}

#[test]
fn approve_needs_no_route_and_touches_no_compute() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    // A host that does not serve the recorded harness still decides.
    let store = std::mem::replace(&mut world.store, MemStore::new());
    let mut world = World::with_store(HostConfig::default(), store);
    let mark = world.trace.len();
    assert_eq!(
        world.call(approve(&sid, &eid, "c1", seq, true)).code(),
        Code::Ok
    );
    assert!(!any_of(
        since(&world, mark),
        &["Describe", "Runtime", "Dial"]
    ));
}

#[test]
fn new_input_is_blocked_by_an_unreceipted_gate_before_any_runtime_io() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    for decide in [false, true] {
        if decide {
            world.call(approve(&sid, &eid, "c1", seq, true));
        }
        let mark = world.trace.len();
        let call = world.call(exec(&sid, "", "more"));
        assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
        assert_eq!(
            effect_names(since(&world, mark)),
            vec!["GetSession", "ReadJournal", "Reply"]
        );
    }
}

#[test]
fn an_undecided_resume_parks_again_with_no_runtime_dial_or_fence() {
    let mut world = World::default();
    let (sid, _, seq) = parked(&mut world, "approval");
    for _ in 0..2 {
        let mark = world.trace.len();
        let call = world.call(resume(&sid));
        assert_eq!(call.code(), Code::Ok);
        assert_eq!(
            call.session()
                .unwrap()
                .pending_approval
                .unwrap()
                .request_seq,
            seq
        );
        assert_eq!(
            effect_names(since(&world, mark)),
            vec![
                "GetSession",
                "ReadJournal",
                "GetSession",
                "ReadJournal",
                "Reply"
            ],
            "journal reads only: no Runtime, Dial or MintFence"
        );
    }
}

#[test]
fn a_parked_session_is_discoverable_after_restart_and_inputless_exec_returns_it() {
    let mut world = World::default();
    let (sid, _, seq) = parked(&mut world, "approval");
    world.restart();
    let s = session(&mut world, &sid);
    assert_eq!(s.exec_state, ExecState::ExecAwaiting as i32);
    assert_eq!(s.compute_state, ComputeState::ComputeCold as i32);
    assert_eq!(s.pending_approval.as_ref().unwrap().request_seq, seq);
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", ""));
    assert_eq!(call.code(), Code::Ok);
    assert_eq!(call.items.len(), 2, "Session frame, final Session frame");
    assert!(
        call.items
            .iter()
            .all(|i| matches!(i, StreamItem::Session(_)))
    );
    assert!(!any_of(
        since(&world, mark),
        &["Runtime", "Dial", "MintFence", "Append"]
    ));
}

#[test]
fn a_call_only_cut_is_repaired_once_and_then_parks_without_writing() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world, "approval");
    world.store.truncate(&sid, 3);
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", ""));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let shape: Vec<&str> = call
        .items
        .iter()
        .map(|i| match i {
            StreamItem::Session(_) => "Session",
            StreamItem::Record(_) => "Record",
            StreamItem::Delta(_) => "Delta",
        })
        .collect();
    assert_eq!(shape, vec!["Session", "Record", "Session"]);
    assert_eq!(
        kinds(&world, &sid)[3..].to_vec(),
        vec![EventApprovalRequest]
    );
    let effects = since(&world, mark);
    assert_eq!(
        effect_names(effects)
            .iter()
            .filter(|n| **n == "MintFence")
            .count(),
        1
    );
    assert!(!any_of(effects, &["Runtime", "Dial", "Describe"]));
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(
        call.session()
            .unwrap()
            .pending_approval
            .unwrap()
            .request_seq,
        4
    );
    assert!(!any_of(since(&world, mark), &["MintFence", "Append"]));
}

#[test]
fn a_failed_repair_writes_no_request_and_a_retry_parks() {
    for err in [
        AppendError::Conflict { head: 9 },
        AppendError::Fenced { current: 9 },
        AppendError::Failed("disk".into()),
    ] {
        let mut world = World::default();
        let (sid, _, _) = parked(&mut world, "approval");
        world.store.truncate(&sid, 3);
        world.faults.append = Some((0, err.clone()));
        let call = world.call(resume(&sid));
        let want = if matches!(err, AppendError::Failed(_)) {
            Code::Internal
        } else {
            Code::Aborted
        };
        assert_eq!(call.code(), want, "{err:?}");
        assert_eq!(world.store.records(&sid).len(), 3);
        let call = world.call(resume(&sid));
        assert_eq!(
            call.session()
                .unwrap()
                .pending_approval
                .unwrap()
                .request_seq,
            4
        );
    }
}

#[test]
fn decided_recovery_reruns_the_original_invocation_and_executes_once() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    let mut req = exec_req(&sid, "", "write");
    req.config = b"original".to_vec();
    req.resume_from_seq = 7;
    world.call(Request::Exec(req));
    let pending = session(&mut world, &sid).pending_approval.unwrap();
    world.call(approve(
        &sid,
        &pending.execution_id,
        "c1",
        pending.request_seq,
        true,
    ));
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", ""));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let (exec_id, start) = since(&world, mark)
        .iter()
        .find_map(|e| match e {
            Effect::Harness(HarnessEffect::Send { frame, .. }) => match &frame.frame {
                Some(Frame::Start(s)) => Some((frame.execution_id.clone(), s.clone())),
                _ => None,
            },
            _ => None,
        })
        .unwrap();
    assert_eq!(exec_id, pending.execution_id);
    assert_eq!(
        (start.config.as_slice(), start.resume_from_seq),
        (&b"original"[..], 7)
    );
    assert_eq!(start.inputs.len(), 1);
    assert_eq!(world.executor.effects, 1);
    let s = call.session().unwrap();
    assert!(s.pending_approval.is_none());
    assert_eq!(s.compute_state, ComputeState::ComputeLive as i32);
    // A new turn is allowed once the receipt is durable.
    assert_eq!(world.call(exec(&sid, "", "next")).code(), Code::Ok);
}

#[test]
fn an_approved_executor_failure_is_a_durable_receipt_the_turn_continues_with() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    world.call(approve(&sid, &eid, "c1", seq, true));
    world.executor.fail_next = Some("disk full".into());
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let receipt = world.store.records(&sid)[6].clone();
    let r = receipt.event.as_ref().and_then(body::result).unwrap();
    assert!(r.is_error);
    assert_eq!(r.code, tool_result::Code::ExecutorError as i32);
    assert_eq!((r.approval_request_seq, r.approval_decision_seq), (4, 6));
    assert!(!kinds(&world, &sid).contains(&EventError));
    assert_eq!(world.executor.attempts, 1);
}

#[test]
fn a_decided_gate_without_an_executor_is_refused_and_stays_decided() {
    let mut config = world::config();
    config.has_executor = false;
    let mut world = World::new(config);
    let (sid, eid, seq) = parked(&mut world, "approval");
    world.call(approve(&sid, &eid, "c1", seq, true));
    world.runtime_calls.clear();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(call.reply.unwrap_err().message.contains("no tool executor"));
    let s = session(&mut world, &sid);
    assert!(s.pending_approval.is_none());
    assert_eq!(s.last_seq, 6, "no receipt, no ERROR");
    assert!(!world.runtime_calls.contains(&"snapshot".to_string()));
}

#[test]
fn a_second_gate_parks_after_the_first_runs_and_the_first_never_reruns() {
    let mut world = World::default();
    world.scripts.insert(
        "approval".into(),
        Box::new(|| {
            Box::new(FnScript::new("tools", harness::gates(&["c1", "c2"])))
                as Box<dyn harness::Script>
        }),
    );
    let (sid, eid, seq) = parked(&mut world, "approval");
    world.call(approve(&sid, &eid, "c1", seq, true));
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let p2 = call
        .session()
        .unwrap()
        .pending_approval
        .expect("second park");
    assert_eq!(p2.tool_call_id, "c2");
    assert!(p2.request_seq > seq);
    let k = kinds(&world, &sid);
    assert_eq!(k.last(), Some(&EventLifecycle));
    assert!(!k.contains(&EventEnd));
    let records = &*world.store.records(&sid);
    let request_fence = records[seq as usize - 1].fence;
    assert_ne!(
        records.last().unwrap().fence,
        request_fence,
        "recovery fence"
    );
    assert_eq!(world.executor.effects, 1);
    world.call(approve(&sid, &p2.execution_id, "c2", p2.request_seq, false));
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.attempts, 1, "c1 is served, not re-run");
    let out = world
        .store
        .records(&sid)
        .iter()
        .rev()
        .find_map(|r| r.event.as_ref().and_then(body::message).cloned())
        .unwrap();
    assert_eq!(
        agentsessions_machine::events::message_text(&out),
        "ok,denied"
    );
}

#[test]
fn a_failed_snapshot_after_the_park_keeps_the_request_pending() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    world.faults.snapshot = Some("snapshot unavailable".into());
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(call.code(), Code::Internal, "{call:?}");
    assert!(
        call.reply
            .clone()
            .unwrap_err()
            .message
            .contains("snapshot unavailable")
    );
    let finals = call
        .items
        .iter()
        .filter(|i| matches!(i, StreamItem::Session(_)))
        .count();
    assert_eq!(finals, 1, "only the first frame, no final Session");
    let s = session(&mut world, &sid);
    let pending = s.pending_approval.clone().expect("still pending");
    assert_ne!(s.compute_state, ComputeState::ComputeCold as i32);
    let call = world.call(suspend(&sid));
    assert_eq!(call.code(), Code::Ok);
    let s = call.session().unwrap();
    assert_eq!(s.compute_state, ComputeState::ComputeCold as i32);
    assert_eq!(s.pending_approval, Some(pending));
}

#[test]
fn a_conflict_on_the_automatic_suspend_is_aborted_and_keeps_the_request() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    // TOOL_CALL+REQUEST is the turn's second append; SUSPEND its third.
    world.faults.append = Some((2, AppendError::Conflict { head: 9 }));
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert!(session(&mut world, &sid).pending_approval.is_some());
    assert_eq!(
        kinds(&world, &sid),
        vec![
            EventExecutionStart,
            EventInput,
            EventToolCall,
            EventApprovalRequest
        ]
    );
}

/// A gated harness that answers the park with `ack` (events, close).
fn acking(
    ack: fn(&str, &agentsessions_proto::v1::ApprovalRef) -> Reply,
) -> impl Fn() -> Box<dyn harness::Script> + Send {
    move || {
        Box::new(FnScript::new("tools", move |f| match &f.frame {
            Some(Frame::Start(_)) => Reply::send(vec![ev(
                &f.execution_id,
                EventToolCall,
                Body::Tool(harness::keyed_call("c1", Mediation::RequiresApproval)),
            )]),
            Some(Frame::Park(p)) => ack(&f.execution_id, p),
            _ => Reply::default(),
        })) as Box<dyn harness::Script>
    }
}

#[test]
fn a_bad_park_acknowledgement_is_an_error_not_a_park() {
    let acks: [fn(&str, &agentsessions_proto::v1::ApprovalRef) -> Reply; 3] = [
        |_, _| Reply::finish(vec![]),
        |e, p| {
            let mut wrong = p.clone();
            wrong.request_seq += 1;
            Reply::finish(vec![ev(e, EventParked, Body::Parked(wrong))])
        },
        |e, p| {
            Reply::finish(vec![
                ev(e, EventParked, Body::Parked(p.clone())),
                harness::end(e),
            ])
        },
    ];
    for ack in acks {
        let mut world = World::default();
        world
            .scripts
            .insert("approval".into(), Box::new(acking(ack)));
        let sid = create(&mut world, "approval");
        let call = world.call(exec(&sid, "", "go"));
        assert_eq!(call.code(), Code::Internal, "{call:?}");
        assert!(
            call.reply
                .unwrap_err()
                .message
                .contains("park acknowledgement")
        );
        assert_eq!(
            kinds(&world, &sid),
            vec![
                EventExecutionStart,
                EventInput,
                EventToolCall,
                EventApprovalRequest
            ],
            "no PARKED, SUSPEND, END or ERROR"
        );
        assert!(!world.runtime_calls.contains(&"snapshot".to_string()));
        let call = world.call(resume(&sid));
        assert!(call.session().unwrap().pending_approval.is_some());
    }
}

/// A harness that reports a result carrying host-only receipt fields.
fn receipt_reporter() -> Box<dyn harness::Script> {
    Box::new(FnScript::new("tools", |f| match &f.frame {
        Some(Frame::Start(_)) => Reply::send(vec![ev(
            &f.execution_id,
            EventToolResult,
            Body::Result(ToolResult {
                id: "c1".into(),
                approval_request_seq: 3,
                ..Default::default()
            }),
        )]),
        _ => Reply::default(),
    }))
}

#[test]
fn a_harness_report_with_receipt_fields_is_refused_and_not_journaled() {
    let mut world = World::default();
    world
        .scripts
        .insert("tools".into(), Box::new(receipt_reporter));
    let sid = create(&mut world, "tools");
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(!kinds(&world, &sid).contains(&EventToolResult));
}

#[test]
fn gating_is_validated_before_any_intent_is_written() {
    // A memory-snapshot harness cannot gate; neither can a call without an
    // id or a key.
    type Mutate = fn(&mut agentsessions_proto::v1::ToolCall);
    let cases: [(Resumability, Mutate); 3] = [
        (Resumability::RequiresMemorySnapshot, |_| {}),
        (Resumability::StatelessReplay, |c| c.id.clear()),
        (Resumability::StatelessReplay, |c| c.idempotency_key.clear()),
    ];
    for (resumability, mutate) in cases {
        let mut world = World::default();
        let mut call = harness::keyed_call("c1", Mediation::RequiresApproval);
        mutate(&mut call);
        world.scripts.insert(
            "memgate".into(),
            Box::new(move || {
                let call = call.clone();
                Box::new(FnScript::with_descriptor(
                    harness::descriptor("memgate", resumability),
                    move |f| match &f.frame {
                        Some(Frame::Start(_)) => Reply::send(vec![ev(
                            &f.execution_id,
                            EventToolCall,
                            Body::Tool(call.clone()),
                        )]),
                        _ => Reply::default(),
                    },
                )) as Box<dyn harness::Script>
            }),
        );
        world.add_memory("memgate", "memgate");
        let sid = create(&mut world, "memgate");
        let reply = world.call(exec(&sid, "", "go"));
        assert_ne!(reply.code(), Code::Ok);
        let k = kinds(&world, &sid);
        assert!(
            !k.contains(&EventToolCall) && !k.contains(&EventApprovalRequest),
            "{k:?}"
        );
        assert_eq!(world.executor.attempts, 0);
    }
}

#[test]
fn an_inherited_request_cannot_be_decided_or_recovered_in_the_child() {
    let mut world = World::default();
    let (parent, eid, seq) = parked(&mut world, "approval");
    let child = fork_child(&mut world, &parent, 4, "approval");
    assert_eq!(
        world.call(approve(&child, &eid, "c1", seq, true)).code(),
        Code::FailedPrecondition
    );
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&child)).code(), Code::FailedPrecondition);
    assert_eq!(
        world.call(exec(&child, "", "")).code(),
        Code::FailedPrecondition
    );
    assert!(!any_of(
        since(&world, mark),
        &["Runtime", "MintFence", "Append"]
    ));
    assert!(session(&mut world, &child).pending_approval.is_none());
    // A new input turn in the child starts (and parks) its own gate.
    let call = world.call(exec(&child, "", "own"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let own = call.session().unwrap().pending_approval.unwrap();
    assert_ne!(own.execution_id, eid);
}

#[test]
fn an_inherited_receipt_is_served_to_the_child_without_executing() {
    let mut world = World::default();
    let (parent, eid, seq) = parked(&mut world, "approval");
    world.call(approve(&parent, &eid, "c1", seq, true));
    world.store.truncate(&parent, 6);
    assert_eq!(world.call(resume(&parent)).code(), Code::Ok);
    // Cut the child right after the receipt (seq 7), before OUTPUT.
    let child = fork_child(&mut world, &parent, 7, "approval");
    let attempts = world.executor.attempts;
    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.executor.attempts, attempts);
    assert_eq!(
        kinds(&world, &child)[8..].to_vec(),
        vec![EventOutput, EventEnd, EventLifecycle]
    );
}

#[test]
fn suspend_of_a_parked_turn_routes_to_the_recorded_harness_with_no_fallback() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "approval", "go"));
    let mark = world.trace.len();
    assert_eq!(world.call(suspend(&sid)).code(), Code::Ok);
    let routed = since(&world, mark).iter().find_map(|e| match e {
        Effect::Runtime(RuntimeCall {
            harness,
            op: RuntimeOp::Snapshot { .. },
            ..
        }) => Some(harness.clone()),
        _ => None,
    });
    assert_eq!(routed.as_deref(), Some("approval"));
    // Unserved recorded harness: refused before any IO.
    let store = std::mem::replace(&mut world.store, MemStore::new());
    let mut world = World::with_store(HostConfig::default(), store);
    let call = world.call(suspend(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition);
    assert!(world.runtime_calls.is_empty());
}
