//! Fork through the deterministic world: what children get, what the parent
//! keeps, what is refused before any side effect, and how inherited turns
//! recover in a child.

use std::collections::BTreeMap;

use agentsessions_machine::chain;
use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    AppendError, ClientEffect, Code, Effect, HarnessEffect, Request, Response, RuntimeCall,
    RuntimeOp, StoreEffect,
};
use agentsessions_proto::v1::{
    ApproveRequest, ComputeState, CreateSessionRequest, EventKind, ExecRequest, ExecState,
    ForkRequest, IdentityRef, LogRecord, Origin, ResourceMetadata, ResumeRequest, Session,
    event::Body, lifecycle,
};
use agentsessions_testkit::World;

const IDENTITY_TEXT: &str =
    "ForkRequest.identity is unsupported: per-child principals are not enforced";

fn exec(session: &str, text: &str) -> Request {
    Request::Exec(ExecRequest {
        session: session.into(),
        inputs: vec![events::text_message("user", text)],
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

/// A session with one completed echo turn (5 records).
fn echoed(world: &mut World) -> String {
    let sid = create(world, "");
    let call = world.call(exec(&sid, "hello"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.store.records(&sid).len(), 5);
    sid
}

fn fork_req(session: &str, at_seq: i64, count: i32) -> ForkRequest {
    ForkRequest {
        session: session.into(),
        at_seq,
        count,
        ..Default::default()
    }
}

/// Forks and returns the children, failing the test on an error.
fn fork_ok(world: &mut World, req: ForkRequest) -> Vec<Session> {
    let call = world.call(Request::Fork(req));
    match call.reply {
        Ok(Response::Fork(resp)) => resp.children,
        other => panic!("fork failed: {other:?}"),
    }
}

fn uid(s: &Session) -> String {
    s.metadata.as_ref().unwrap().uid.clone()
}

fn kinds(records: &[LogRecord]) -> Vec<EventKind> {
    records
        .iter()
        .map(|r| events::kind_of(r.event.as_ref().unwrap()))
        .collect()
}

fn lifecycle_of(r: &LogRecord) -> (lifecycle::Kind, String) {
    match &r.event.as_ref().unwrap().body {
        Some(Body::Lifecycle(l)) => (lifecycle::Kind::try_from(l.kind).unwrap(), l.detail.clone()),
        other => panic!("not a lifecycle record: {other:?}"),
    }
}

#[allow(deprecated)]
fn resume(sid: &str) -> Request {
    Request::Resume(ResumeRequest {
        session: sid.into(),
        boot: false,
    })
}

/// Asserts the child is the parent's first `at` records, hash for hash,
/// then one FORK marker chained to parent@`at`.
fn assert_forked_copy(world: &World, parent: &str, child: &str, at: usize) {
    let p = &*world.store.records(parent);
    let c = &*world.store.records(child);
    assert_eq!(c.len(), at + 1, "prefix plus the marker");
    for (pr, cr) in p[..at].iter().zip(c) {
        assert_eq!((pr.seq, &pr.content_hash), (cr.seq, &cr.content_hash));
        assert_eq!(pr.event, cr.event);
    }
    let marker = &c[at];
    assert_eq!(
        lifecycle_of(marker),
        (lifecycle::Kind::LifecycleFork, format!("parent@{at}"))
    );
    let expected_prev = if at == 0 {
        String::new()
    } else {
        p[at - 1].content_hash.clone()
    };
    assert_eq!(marker.prev_hash, expected_prev);
    chain::verify(c).expect("the child's chain verifies");
}

#[test]
fn a_fork_at_the_head_copies_the_journal_hash_for_hash_and_appends_a_fork_marker() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    let before = world.store.records(&sid).to_vec();
    let children = fork_ok(&mut world, fork_req(&sid, 0, 1));
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_forked_copy(&world, &sid, &uid(child), 5);
    assert_eq!(
        &*world.store.records(&sid),
        before,
        "the parent is unchanged"
    );
    assert_eq!(child.compute_state, ComputeState::ComputeCold as i32);
    assert_eq!(child.exec_state, ExecState::ExecCompleted as i32);
    assert_eq!(child.last_seq, 6);
    assert_eq!(child.fork_seq, 5);
    assert_eq!(child.parent_uid, sid);
    assert_ne!(uid(child), sid);
    // The child's own fence wrote its records; the parent's was not touched.
    assert!(
        world
            .store
            .records(&uid(child))
            .iter()
            .all(|r| r.fence == 1)
    );
    assert_eq!(world.store.fence(&sid), 1);
}

#[test]
fn a_fork_at_a_historical_seq_copies_only_the_records_up_to_it() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    let children = fork_ok(&mut world, fork_req(&sid, 3, 1));
    let child = &children[0];
    assert_forked_copy(&world, &sid, &uid(child), 3);
    assert_eq!(child.last_seq, 4);
    assert_eq!(child.fork_seq, 3);
    assert_eq!(child.compute_state, ComputeState::ComputeCold as i32);
    assert_eq!(world.store.records(&sid).len(), 5);
}

/// A marker naming a seq the parent never had would be a false record, so
/// a seq past the head is OUT_OF_RANGE (the Go reference forks anyway).
#[test]
fn a_fork_past_the_head_is_out_of_range_and_provisions_nothing() {
    for at_seq in [6, 9, 1 << 62, i64::MAX] {
        let mut world = World::default();
        let sid = echoed(&mut world);
        let sessions = world.store.sessions();
        let before = world.trace.len();
        let call = world.call(Request::Fork(fork_req(&sid, at_seq, 1)));
        let status = call.reply.unwrap_err();
        assert_eq!(status.code, Code::OutOfRange, "{status:?}");
        assert_eq!(
            status.message,
            format!("at_seq {at_seq} is past the session's head (5)")
        );
        assert!(
            !world.trace[before..].iter().any(|e| matches!(
                e,
                Effect::Harness(_) | Effect::Runtime(_) | Effect::Store(StoreEffect::Fork { .. })
            )),
            "refused before Describe, clone or copy"
        );
        assert_eq!(world.store.sessions(), sessions, "no child");
    }
}

#[test]
fn a_fork_at_the_head_seq_named_explicitly_is_allowed() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    let children = fork_ok(&mut world, fork_req(&sid, 5, 1));
    assert_forked_copy(&world, &sid, &uid(&children[0]), 5);
    assert_eq!(children[0].fork_seq, 5);
}

#[test]
fn children_take_names_and_request_labels_and_inherit_the_rest_of_the_parent_metadata() {
    let mut world = World::default();
    let parent = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            metadata: Some(ResourceMetadata {
                project: "proj".into(),
                name: "parent-name".into(),
                ..Default::default()
            }),
            model: "m1".into(),
            labels: BTreeMap::from([("team".into(), "a".into())]),
            annotations: BTreeMap::from([("note".into(), "line\n\"quoted\" ✓".into())]),
            origin: Some(Origin {
                ..Default::default()
            }),
            identity: Some(IdentityRef {
                ..Default::default()
            }),
            ..Default::default()
        }),
    }));
    let sid = uid(&parent.session().unwrap());
    world.call(exec(&sid, "hello"));

    let mut req = fork_req(&sid, 0, 2);
    req.child_names = vec!["left".into(), "right".into()];
    req.labels = BTreeMap::from([("branch".into(), "x".into())]);
    let children = fork_ok(&mut world, req);
    let names: Vec<_> = children
        .iter()
        .map(|c| c.metadata.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(names, vec!["left", "right"]);
    for c in &children {
        let meta = c.metadata.as_ref().unwrap();
        assert_eq!(meta.project, "proj");
        assert_eq!(c.model, "m1");
        assert_eq!(c.harness, "echo");
        assert_eq!(
            c.labels,
            BTreeMap::from([("branch".into(), "x".into())]),
            "request labels replace the parent's"
        );
        assert_eq!(c.annotations.get("note").unwrap(), "line\n\"quoted\" ✓");
        assert!(c.origin.is_some());
        assert_eq!(c.identity, None, "children carry no identity");
        assert!(meta.create_time.is_some());
    }
    assert_ne!(uid(&children[0]), uid(&children[1]));

    // No labels on the request: children get none, and no names either.
    let plain = fork_ok(&mut world, fork_req(&sid, 0, 1));
    assert!(plain[0].labels.is_empty());
    assert_eq!(plain[0].metadata.as_ref().unwrap().name, "");
}

#[test]
fn a_count_of_zero_forks_one_child() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    assert_eq!(fork_ok(&mut world, fork_req(&sid, 0, 0)).len(), 1);
    assert_eq!(fork_ok(&mut world, fork_req(&sid, 0, -4)).len(), 1);
}

#[test]
fn exactly_the_maximum_of_128_children_is_allowed() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    let children = fork_ok(&mut world, fork_req(&sid, 0, 128));
    assert_eq!(children.len(), 128);
    let uids: std::collections::BTreeSet<_> = children.iter().map(uid).collect();
    assert_eq!(uids.len(), 128, "every child is its own session");
    assert_forked_copy(&world, &sid, &uid(&children[127]), 5);
    let clones = world
        .trace
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Runtime(RuntimeCall {
                    op: RuntimeOp::Fork { .. },
                    ..
                })
            )
        })
        .count();
    assert_eq!(clones, 128);
}

/// Runs `req` on a world holding one echoed session and asserts it is
/// refused with `code` after no effect but the reply.
fn refused_before_any_effect(req: impl FnOnce(&str) -> ForkRequest, code: Code) -> String {
    let mut world = World::default();
    let sid = echoed(&mut world);
    let before = world.trace.len();
    let sessions = world.store.sessions();
    let call = world.call(Request::Fork(req(&sid)));
    assert_eq!(call.code(), code, "{call:?}");
    let effects = &world.trace[before..];
    assert_eq!(effects.len(), 1, "only the reply: {effects:?}");
    assert!(matches!(
        effects[0],
        Effect::Client(ClientEffect::Reply { .. })
    ));
    assert_eq!(world.store.sessions(), sessions, "no new sessions");
    call.reply.unwrap_err().message
}

#[test]
fn more_than_128_children_is_an_invalid_argument() {
    refused_before_any_effect(|s| fork_req(s, 0, 129), Code::InvalidArgument);
}

#[test]
fn child_names_must_be_empty_or_exactly_count() {
    refused_before_any_effect(
        |s| ForkRequest {
            child_names: vec!["one".into()],
            ..fork_req(s, 0, 2)
        },
        Code::InvalidArgument,
    );
    refused_before_any_effect(
        |s| ForkRequest {
            child_names: vec!["a".into(), "b".into(), "c".into()],
            ..fork_req(s, 0, 2)
        },
        Code::InvalidArgument,
    );
}

#[test]
fn a_supplied_identity_is_refused_before_anything_even_when_empty() {
    let principal = IdentityRef {
        principal: "alice@example".into(),
        ..Default::default()
    };
    for identity in [IdentityRef::default(), principal] {
        for target in ["parent", "sess-unknown", ""] {
            let identity = identity.clone();
            let msg = refused_before_any_effect(
                |s| ForkRequest {
                    session: if target == "parent" {
                        s.into()
                    } else {
                        target.into()
                    },
                    identity: Some(identity),
                    count: 200, // also invalid: identity is checked first
                    ..Default::default()
                },
                Code::InvalidArgument,
            );
            assert_eq!(msg, IDENTITY_TEXT);
        }
    }
}

#[test]
fn an_empty_session_is_an_invalid_argument_and_an_unknown_one_not_found() {
    refused_before_any_effect(|_| fork_req("", 0, 1), Code::InvalidArgument);
    let mut world = World::default();
    let call = world.call(Request::Fork(fork_req("sess-nobody", 0, 1)));
    assert_eq!(call.code(), Code::NotFound, "{call:?}");
    assert!(!world.trace.iter().any(|e| matches!(
        e,
        Effect::Harness(HarnessEffect::Describe { .. })
            | Effect::Store(StoreEffect::MintFence { .. })
    )));
}

#[test]
fn a_harness_outage_at_admission_is_unavailable_and_provisions_nothing() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    world.describe_fail.insert(
        "echo".into(),
        agentsessions_machine::vocab::HarnessFailure::Unavailable("down".into()),
    );
    let before = world.trace.len();
    let call = world.call(Request::Fork(fork_req(&sid, 0, 2)));
    assert_eq!(call.code(), Code::Unavailable, "{call:?}");
    assert!(!world.trace[before..].iter().any(|e| matches!(
        e,
        Effect::Runtime(RuntimeCall { .. }) | Effect::Store(StoreEffect::MintFence { .. })
    )));
}

#[test]
fn a_failed_child_copy_stops_every_provisioned_child_and_records_no_rows() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    // The first child's copy lands; the second one's is refused.
    world.faults.append = Some((1, AppendError::Conflict { head: 3 }));
    let call = world.call(Request::Fork(fork_req(&sid, 0, 3)));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    let stops: Vec<String> = world
        .trace
        .iter()
        .filter_map(|e| match e {
            Effect::Runtime(RuntimeCall {
                op: RuntimeOp::Stop { session },
                ..
            }) => Some(session.clone()),
            _ => None,
        })
        .collect();
    let clones: Vec<String> = world
        .trace
        .iter()
        .filter_map(|e| match e {
            Effect::Runtime(RuntimeCall {
                op: RuntimeOp::Fork { child, .. },
                ..
            }) => Some(child.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(clones.len(), 2, "the third child is never provisioned");
    assert_eq!(stops, clones, "every provisioned child is stopped");
    // The reply comes after every Stop was answered.
    let reply_at = world
        .trace
        .iter()
        .rposition(|e| matches!(e, Effect::Client(ClientEffect::Reply { .. })))
        .unwrap();
    let last_stop = world
        .trace
        .iter()
        .rposition(|e| {
            matches!(
                e,
                Effect::Runtime(RuntimeCall {
                    op: RuntimeOp::Stop { .. },
                    ..
                })
            )
        })
        .unwrap();
    assert!(last_stop < reply_at);
    assert!(
        !world
            .trace
            .iter()
            .any(|e| matches!(e, Effect::Store(StoreEffect::PutSession { row, .. }) if row.parent_uid == sid)),
        "no child rows for a refused fork"
    );
}

#[test]
fn a_memory_harness_refuses_a_historical_fork_without_minting_a_fence() {
    let mut world = World::default();
    let sid = create(&mut world, "counter");
    assert_eq!(world.call(exec(&sid, "tick")).code(), Code::Ok);
    let before_records = world.store.records(&sid).to_vec();
    let before = world.trace.len();
    let call = world.call(Request::Fork(fork_req(&sid, 2, 1)));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    let msg = call.reply.unwrap_err().message;
    assert!(
        msg.contains("can only fork at the log head (4), not seq 2"),
        "{msg}"
    );
    let after = &world.trace[before..];
    assert!(
        !after.iter().any(|e| matches!(
            e,
            Effect::Store(StoreEffect::MintFence { .. }) | Effect::Runtime(RuntimeCall { .. })
        )),
        "{after:?}"
    );
    assert_eq!(&*world.store.records(&sid), before_records);
}

#[test]
fn a_memory_harness_fork_at_the_head_checkpoints_the_parent_once_and_clones_it() {
    let mut world = World::default();
    let sid = create(&mut world, "counter");
    assert_eq!(world.call(exec(&sid, "tick")).code(), Code::Ok);
    let head = world.store.records(&sid).len();
    let fence_before = world.store.fence(&sid);
    let snapshots_before = world
        .runtime_calls
        .iter()
        .filter(|c| *c == "snapshot")
        .count();
    let children = fork_ok(&mut world, fork_req(&sid, 0, 2));

    let parent = &*world.store.records(&sid);
    assert_eq!(parent.len(), head + 1, "the parent gets one SUSPEND");
    let suspend = &parent[head];
    assert_eq!(lifecycle_of(suspend).0, lifecycle::Kind::LifecycleSuspend);
    assert_eq!(suspend.fence, fence_before + 1, "under a fresh fence");
    let snapshots = world
        .runtime_calls
        .iter()
        .filter(|c| *c == "snapshot")
        .count();
    assert_eq!(snapshots - snapshots_before, 1, "one snapshot serves all");
    let clone_refs: Vec<_> = world
        .trace
        .iter()
        .filter_map(|e| match e {
            Effect::Runtime(RuntimeCall {
                op: RuntimeOp::Fork { snapshot, .. },
                ..
            }) => Some(snapshot.external_uri.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(clone_refs, vec![format!("snap://{sid}"); 2]);
    for c in &children {
        assert_forked_copy(&world, &sid, &uid(c), head);
        assert_eq!(c.fork_seq, head as i64);
    }
    let row = world.store.row(&sid).unwrap();
    assert_eq!(row.compute_state, ComputeState::ComputeCold);
}

#[test]
fn a_memory_fork_aborts_when_a_writer_moves_the_head_after_the_fence() {
    let mut world = World::default();
    let sid = create(&mut world, "counter");
    assert_eq!(world.call(exec(&sid, "tick")).code(), Code::Ok);
    let head = world.store.records(&sid).len() as i64;
    let racer = sid.clone();
    let mut raced = false;
    // Another writer lands between the fence and the head re-read.
    world.before_effect = Some(Box::new(move |effect, store| {
        if !raced
            && matches!(effect, Effect::Store(StoreEffect::MintFence { session, .. }) if *session == racer)
        {
            raced = true;
            let ev = events::lifecycle(lifecycle::Kind::LifecycleResume, "");
            store
                .append(&racer, head, i64::MAX, &[ev], 0)
                .expect("racer appends");
        }
    }));
    let call = world.call(Request::Fork(fork_req(&sid, 0, 1)));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert!(
        !world.trace.iter().any(|e| matches!(
            e,
            Effect::Runtime(RuntimeCall {
                op: RuntimeOp::Snapshot { .. },
                ..
            })
        )),
        "no snapshot after a moved head"
    );
}

/// Parks a gated call; returns (session, execution id, request seq).
fn parked(world: &mut World) -> (String, String, i64) {
    let sid = create(world, "approval");
    let call = world.call(exec(&sid, "go"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let pending = call
        .session()
        .unwrap()
        .pending_approval
        .expect("pending approval");
    (sid, pending.execution_id, pending.request_seq)
}

#[test]
fn a_child_that_inherited_a_pending_approval_can_neither_resume_nor_approve_it() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world);
    let children = fork_ok(&mut world, fork_req(&sid, 0, 1));
    let child = uid(&children[0]);
    assert_eq!(children[0].pending_approval, None, "not the child's gate");
    let records = world.store.records(&child).len();

    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    let call = world.call(Request::Approve(ApproveRequest {
        session: child.clone(),
        execution_id: eid,
        tool_call_id: "c1".into(),
        request_seq: seq,
        approved: Some(true),
        reason: "ok".into(),
        identity: None,
    }));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert_eq!(
        world.store.records(&child).len(),
        records,
        "nothing written"
    );
    assert_eq!(world.executor.attempts, 0);
}

#[test]
fn a_fork_at_a_model_call_redrives_the_model_once_in_the_child() {
    let mut world = World::default();
    let sid = echoed(&mut world);
    let parent_before = world.store.records(&sid).to_vec();
    let calls = world.model_calls;
    let children = fork_ok(&mut world, fork_req(&sid, 3, 1));
    let child = uid(&children[0]);
    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.model_calls, calls + 1, "one provider call");
    assert_eq!(
        kinds(&world.store.records(&child)),
        vec![
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventModelCall,
            EventKind::EventLifecycle,
            EventKind::EventOutput,
            EventKind::EventEnd,
            EventKind::EventLifecycle,
        ]
    );
    assert_eq!(&*world.store.records(&sid), parent_before);
    chain::verify(&world.store.records(&child)).unwrap();
    // A second Resume has nothing left to drive.
    world.call(resume(&child));
    assert_eq!(world.model_calls, calls + 1);
}

#[test]
fn a_fork_at_a_tool_call_refuses_to_resume_the_inherited_intent() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    assert_eq!(world.call(exec(&sid, "go")).code(), Code::Ok);
    assert_eq!(
        kinds(&world.store.records(&sid)[2..4]),
        vec![EventKind::EventToolCall, EventKind::EventToolResult]
    );
    let effects = world.executor.effects;
    let children = fork_ok(&mut world, fork_req(&sid, 3, 1));
    let child = uid(&children[0]);
    let call = world.call(resume(&child));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(
        call.reply
            .unwrap_err()
            .message
            .contains("inherited tool intent"),
        "the refusal names the cause"
    );
    assert_eq!(
        world.executor.effects, effects,
        "the tool does not run twice"
    );
    assert_eq!(world.store.records(&child).len(), 4, "nothing written");
}

/// The parent's reads and the children's writes of one fork: what the
/// fork costs the store.
fn fork_effects(world: &mut World, parent: &str) -> Vec<Effect> {
    let mark = world.trace.len();
    fork_ok(world, fork_req(parent, 0, 2));
    world.trace[mark..]
        .iter()
        .filter(|e| matches!(e, Effect::Store(_)))
        .cloned()
        .collect()
}

#[test]
fn a_fork_reads_only_the_parents_row_and_writes_one_marker_per_child_whatever_its_length() {
    let mut world = World::default();
    let short = echoed(&mut world);
    let long = echoed(&mut world);
    for i in 0..60 {
        let call = world.call(exec(&long, &format!("turn {i}")));
        assert_eq!(call.code(), Code::Ok, "{call:?}");
    }
    let long_head = world.store.records(&long).len() as i64;
    assert!(long_head > 300, "{long_head}");

    let (a, b) = (
        fork_effects(&mut world, &short),
        fork_effects(&mut world, &long),
    );
    let names = |effects: &[Effect]| effects.iter().map(Effect::name).collect::<Vec<_>>();
    assert_eq!(names(&a), names(&b), "the same effects whatever the length");
    for (effects, parent, head) in [(&a, &short, 5), (&b, &long, long_head)] {
        // Nothing of the parent's journal is read: its row has the head.
        assert!(!effects.iter().any(|e| matches!(
            e,
            Effect::Store(StoreEffect::ReadLog { session, .. } | StoreEffect::ReadJournal { session, .. })
                if session == parent
        )));
        let forks: Vec<_> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Store(StoreEffect::Fork {
                    parent: p,
                    at_seq,
                    events,
                    ..
                }) => Some((p.clone(), *at_seq, events.len())),
                _ => None,
            })
            .collect();
        assert_eq!(forks, vec![(parent.clone(), head, 1); 2], "one marker each");
        assert!(
            !effects
                .iter()
                .any(|e| matches!(e, Effect::Store(StoreEffect::Append { .. })))
        );
    }
    // And the children read as copies would have.
    let children: Vec<String> = world
        .store
        .sessions()
        .into_iter()
        .filter(|s| world.store.row(s).is_some_and(|r| r.parent_uid == long))
        .collect();
    assert_eq!(children.len(), 2);
    for child in &children {
        assert_forked_copy(&world, &long, child, long_head as usize);
    }
    // Stored once: each child adds its marker, not the prefix.
    let own: usize = [&short, &long]
        .iter()
        .map(|s| world.store.records(s).len())
        .sum();
    assert_eq!(world.store.stored_records(), own + 4);
}
