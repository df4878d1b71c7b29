//! Authorization through the host: the verified principal is an input of
//! every request, roles are per project, a refusal has no effect but its
//! reply, and an unauthorized caller cannot tell a missing session from a
//! forbidden one. Approvals and client-written records name the principal.

mod common;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    Caller, Code, Effect, Principal, Request, Response, StoreEffect,
};
use agentsessions_proto::v1::{
    ApprovalRef, CancelRequest, CreateSessionRequest, DeleteSessionRequest, EventKind, ForkRequest,
    GetHarnessRequest, IdentityRef, ListHarnessesRequest, ListSessionsRequest, ResourceMetadata,
    Session,
};
use agentsessions_testkit::{Call, World};
use common::*;

fn who(name: &str, grants: &[&str]) -> Caller {
    Caller::Verified(Principal {
        name: name.into(),
        issuer: "api-key".into(),
        grants: grants.iter().map(|g| g.parse().unwrap()).collect(),
        separate_approver: false,
    })
}

fn separate(caller: Caller) -> Caller {
    let Caller::Verified(mut p) = caller else {
        unreachable!()
    };
    p.separate_approver = true;
    Caller::Verified(p)
}

fn create_in(world: &mut World, caller: Caller, project: &str, harness: &str) -> Call {
    world.call_as(
        caller,
        Request::CreateSession(CreateSessionRequest {
            session: Some(Session {
                harness: harness.into(),
                metadata: Some(ResourceMetadata {
                    project: project.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
    )
}

fn uid(call: &Call) -> String {
    call.session().expect("a session").metadata.unwrap().uid
}

/// Every session-scoped call on `sid`, with the role it needs.
fn session_calls(sid: &str) -> Vec<(&'static str, Request)> {
    vec![
        ("reader", get(sid)),
        ("reader", replay(sid)),
        ("writer", exec(sid, "", "hi")),
        ("writer", suspend(sid)),
        ("writer", resume(sid)),
        (
            "writer",
            Request::Fork(ForkRequest {
                session: sid.into(),
                count: 1,
                ..Default::default()
            }),
        ),
        (
            "writer",
            Request::Cancel(CancelRequest {
                session: sid.into(),
                ..Default::default()
            }),
        ),
        (
            "writer",
            Request::DeleteSession(DeleteSessionRequest { uid: sid.into() }),
        ),
        ("approver", approve(sid, "e", "c1", 3, true)),
    ]
}

#[test]
fn a_caller_with_no_suitable_role_anywhere_is_refused_with_no_effect_but_the_reply() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    let before = world.store.records(&sid).to_vec();
    let nobody = who("nobody", &[]);
    let reader = who("rita", &["*:reader"]);
    let mut calls = session_calls(&sid);
    calls.push((
        "writer",
        Request::CreateSession(CreateSessionRequest::default()),
    ));
    calls.push(("admin", Request::GetHarness(GetHarnessRequest::default())));
    calls.push((
        "admin",
        Request::ListHarnesses(ListHarnessesRequest::default()),
    ));
    calls.push(("host", Request::Boot));
    for (role, call) in calls {
        for caller in [&nobody, &reader] {
            if role == "reader" && caller == &reader {
                continue;
            }
            let mark = world.trace.len();
            let got = world.call_as(caller.clone(), call.clone());
            assert_eq!(
                got.code(),
                Code::PermissionDenied,
                "{role} {call:?}: {got:?}"
            );
            assert_eq!(
                effect_names(since(&world, mark)),
                ["Reply"],
                "decided before any read: {call:?}"
            );
        }
    }
    assert_eq!(&*world.store.records(&sid), before, "nothing written");
}

#[test]
fn a_missing_session_and_a_session_of_another_project_are_refused_alike() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    let elsewhere = who("eve", &["other:admin"]);
    for (_, call) in session_calls(&sid) {
        let mark = world.trace.len();
        let forbidden = world.call_as(elsewhere.clone(), call.clone());
        let forbidden_effects = effect_names(since(&world, mark));
        let missing_call = retarget(call, "no-such-session");
        let mark = world.trace.len();
        let missing = world.call_as(elsewhere.clone(), missing_call);
        assert_eq!(forbidden.code(), Code::PermissionDenied, "{forbidden:?}");
        assert_eq!(forbidden.reply, missing.reply, "indistinguishable replies");
        assert_eq!(forbidden_effects, effect_names(since(&world, mark)));
        assert_eq!(forbidden_effects, ["GetSession", "Reply"]);
    }
}

/// `call` aimed at session `sid` instead.
fn retarget(call: Request, sid: &str) -> Request {
    match call {
        Request::GetSession(mut r) => {
            r.uid = sid.into();
            Request::GetSession(r)
        }
        Request::DeleteSession(mut r) => {
            r.uid = sid.into();
            Request::DeleteSession(r)
        }
        Request::Replay(mut r) => {
            r.session = sid.into();
            Request::Replay(r)
        }
        Request::Exec(mut r) => {
            r.session = sid.into();
            Request::Exec(r)
        }
        Request::Suspend(mut r) => {
            r.session = sid.into();
            Request::Suspend(r)
        }
        Request::Resume(mut r) => {
            r.session = sid.into();
            Request::Resume(r)
        }
        Request::Fork(mut r) => {
            r.session = sid.into();
            Request::Fork(r)
        }
        Request::Cancel(mut r) => {
            r.session = sid.into();
            Request::Cancel(r)
        }
        Request::Approve(mut r) => {
            r.session = sid.into();
            Request::Approve(r)
        }
        other => panic!("not session-scoped: {other:?}"),
    }
}

#[test]
fn a_role_on_the_sessions_project_admits_exactly_its_calls() {
    let mut world = World::default();
    let writer = who("wes", &["team:writer"]);
    let reader = who("rita", &["team:reader"]);
    let approver = who("abe", &["team:approver"]);
    let created = create_in(&mut world, writer.clone(), "team", "tools");
    assert_eq!(created.code(), Code::Ok, "{created:?}");
    let sid = uid(&created);
    assert_eq!(world.call_as(reader.clone(), get(&sid)).code(), Code::Ok);
    assert_eq!(world.call_as(approver.clone(), get(&sid)).code(), Code::Ok);
    assert_eq!(
        world.call_as(reader.clone(), exec(&sid, "", "hi")).code(),
        Code::PermissionDenied
    );
    assert_eq!(
        world.call_as(approver.clone(), exec(&sid, "", "hi")).code(),
        Code::PermissionDenied
    );
    let turn = world.call_as(writer.clone(), exec(&sid, "", "hi"));
    assert_eq!(turn.reply, Ok(Response::StreamEnd), "{turn:?}");
    // A writer is no approver; the approver gets past the check (and is
    // then refused by the journal: nothing is pending).
    let decide = approve(&sid, "e", "c1", 3, true);
    assert_eq!(
        world.call_as(writer, decide.clone()).code(),
        Code::PermissionDenied
    );
    assert_eq!(
        world.call_as(approver, decide).code(),
        Code::FailedPrecondition
    );
    // Creating or listing in a project needs the role there.
    let other = create_in(&mut world, reader.clone(), "team", "tools");
    assert_eq!(other.code(), Code::PermissionDenied);
    let list = |project: &str| {
        Request::ListSessions(ListSessionsRequest {
            project: project.into(),
            ..Default::default()
        })
    };
    match world.call_as(reader.clone(), list("team")).reply {
        Ok(Response::Sessions(page)) => assert_eq!(page.sessions.len(), 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        world.call_as(reader, list("default")).code(),
        Code::PermissionDenied
    );
}

#[test]
fn with_a_role_on_every_project_a_missing_session_is_not_found() {
    let mut world = World::default();
    let everywhere = who("root", &["*:reader"]);
    let got = world.call_as(everywhere, get("no-such-session"));
    assert_eq!(got.code(), Code::NotFound, "{got:?}");
}

#[test]
fn the_registry_needs_admin_on_every_project() {
    let mut world = World::default();
    let list = Request::ListHarnesses(ListHarnessesRequest::default());
    let local = who("al", &["default:admin"]);
    assert_eq!(
        world.call_as(local, list.clone()).code(),
        Code::PermissionDenied
    );
    let admin = who("root", &["*:admin"]);
    assert_eq!(world.call_as(admin, list).code(), Code::Ok);
}

#[test]
fn an_approval_names_the_verified_principal_whatever_the_request_says() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let Request::Approve(mut req) = approve(&sid, &eid, "c1", seq, false) else {
        unreachable!()
    };
    req.identity = Some(IdentityRef {
        principal: "mallory".into(),
        issuer: "forged".into(),
        ..Default::default()
    });
    let got = world.call_as(who("abe", &["*:approver"]), Request::Approve(req.clone()));
    let Ok(Response::Approve(r)) = &got.reply else {
        panic!("{got:?}")
    };
    let actor = r
        .decision
        .as_ref()
        .unwrap()
        .event
        .as_ref()
        .unwrap()
        .actor
        .clone();
    assert_eq!(
        actor.unwrap(),
        IdentityRef {
            principal: "abe".into(),
            issuer: "api-key".into(),
            subject: String::new(),
        }
    );
    // The exact retry is the same principal's, not the forged identity's.
    let again = world.call_as(who("abe", &["*:approver"]), Request::Approve(req.clone()));
    assert_eq!(again.reply, got.reply);
    let other = world.call_as(who("ann", &["*:approver"]), Request::Approve(req));
    assert_eq!(other.code(), Code::FailedPrecondition, "another decider");
}

/// The call `parked` left pending may not be decided by `creator`, a
/// separate approver (nothing is written), and is by another one.
fn only_another_approver_decides(world: &mut World, creator: Caller, parked: &Call) {
    let session = parked.session().expect("a parked session");
    let sid = session.metadata.unwrap().uid;
    let pending = session.pending_approval.unwrap();
    let before = world.store.records(&sid).to_vec();
    let decide = approve(&sid, &pending.execution_id, "c1", pending.request_seq, true);
    let own = world.call_as(creator, decide.clone());
    assert_eq!(own.code(), Code::PermissionDenied, "{own:?}");
    assert_eq!(&*world.store.records(&sid), before, "nothing written");
    let bob = separate(who("bob", &["*:approver"]));
    assert_eq!(world.call_as(bob, decide).code(), Code::Ok);
}

#[test]
fn a_separate_approver_may_not_decide_calls_of_a_session_it_created() {
    let mut world = World::default();
    let alice = separate(who("alice", &["*:writer", "*:approver"]));
    let created = create_in(&mut world, alice.clone(), "", "approval");
    let sid = uid(&created);
    let parked = world.call_as(alice.clone(), exec(&sid, "", "go"));
    only_another_approver_decides(&mut world, alice, &parked);
}

#[test]
fn a_session_created_implicitly_by_exec_records_its_creator_and_a_separate_approver_may_not_decide_it()
 {
    let mut world = World::default();
    let alice = separate(who("alice", &["*:writer", "*:approver"]));
    // No session named: Exec creates it on the fly.
    let parked = world.call_as(alice.clone(), exec("", "approval", "go"));
    let session = parked.session().expect("the implicit session");
    assert_eq!(
        session.identity.as_ref().map(|i| i.principal.as_str()),
        Some("alice"),
        "the implicit session names its creator"
    );
    only_another_approver_decides(&mut world, alice, &parked);
}

#[test]
fn a_separate_approver_may_not_decide_on_a_session_that_records_no_creator() {
    let mut world = World::default();
    // Created by an open caller (auth off then): no creator on the row.
    let created = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: "approval".into(),
            ..Default::default()
        }),
    }));
    let sid = uid(&created);
    let parked = world.call(exec(&sid, "", "go"));
    let pending = parked.session().unwrap().pending_approval.unwrap();
    let decide = approve(&sid, &pending.execution_id, "c1", pending.request_seq, true);
    let bob = separate(who("bob", &["*:approver"]));
    let refused = world.call_as(bob, decide.clone());
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // An approver not bound by the rule still may.
    assert_eq!(
        world.call_as(who("ann", &["*:approver"]), decide).code(),
        Code::Ok
    );
}

#[test]
fn the_creator_and_the_turns_it_writes_carry_the_principal_and_open_calls_carry_none() {
    let mut world = World::default();
    let alice = who("alice", &["*:writer"]);
    let created = create_in(&mut world, alice.clone(), "", "tools");
    let session = created.session().unwrap();
    assert_eq!(session.identity.unwrap().principal, "alice");
    let sid = uid(&created);
    world.call_as(alice, exec(&sid, "", "hi"));
    world.call(exec(&sid, "", "again"));
    let records = &*world.store.records(&sid);
    let actor_of = |kind: EventKind, nth: usize| {
        records
            .iter()
            .filter(|r| events::kind_of(r.event.as_ref().unwrap()) == kind)
            .nth(nth)
            .and_then(|r| r.event.as_ref().unwrap().actor.clone())
            .map(|a| a.principal)
    };
    assert_eq!(
        actor_of(EventKind::EventExecutionStart, 0).as_deref(),
        Some("alice")
    );
    assert_eq!(actor_of(EventKind::EventInput, 0).as_deref(), Some("alice"));
    assert_eq!(actor_of(EventKind::EventExecutionStart, 1), None);
    assert_eq!(actor_of(EventKind::EventInput, 1), None);
    // The harness's own records are not the caller's.
    assert_eq!(actor_of(EventKind::EventOutput, 0), None);
}

#[test]
fn a_client_gone_while_its_call_waits_for_the_project_check_starts_nothing() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    let before = world.store.records(&sid).to_vec();
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Store(StoreEffect::GetSession { .. }))
    }));
    let id = world.start_as(who("wes", &["default:writer"]), exec(&sid, "", "hi"));
    assert!(world.holding() && !world.replied(id), "the check waits");
    world.cancel(id);
    world.release();
    let got = world.take(id);
    assert_eq!(got.code(), Code::Cancelled, "{got:?}");
    assert_eq!(&*world.store.records(&sid), before);
    assert_eq!(world.host.in_flight(), 0);
}

#[test]
fn a_verified_fork_and_delete_name_their_principal() {
    let mut world = World::default();
    let wes = who("wes", &["default:writer"]);
    let sid = create(&mut world, "tools");
    world.call(exec(&sid, "", "hi"));
    let fork = world.call_as(
        wes.clone(),
        Request::Fork(ForkRequest {
            session: sid.clone(),
            count: 1,
            ..Default::default()
        }),
    );
    let Ok(Response::Fork(children)) = &fork.reply else {
        panic!("{fork:?}")
    };
    let child = &children.children[0];
    assert_eq!(child.identity.as_ref().unwrap().principal, "wes");
    let mark = world.trace.len();
    let uid = child.metadata.as_ref().unwrap().uid.clone();
    let deleted = world.call_as(wes, Request::DeleteSession(DeleteSessionRequest { uid }));
    assert_eq!(deleted.code(), Code::Ok, "{deleted:?}");
    let principal = since(&world, mark).iter().find_map(|e| match e {
        Effect::Store(StoreEffect::DeleteSession { principal, .. }) => Some(principal.clone()),
        _ => None,
    });
    assert_eq!(
        principal.as_deref(),
        Some("wes"),
        "the tombstone names the deleter"
    );
}

#[test]
fn a_live_turns_cancel_records_and_a_parked_turns_name_the_canceller() {
    let mut world = World::default();
    let wes = who("wes", &["*:writer"]);
    let cancel = |sid: &str| {
        Request::Cancel(CancelRequest {
            session: sid.into(),
            reason: "stop".into(),
            ..Default::default()
        })
    };
    let actors = |world: &World, sid: &str| -> Vec<Option<String>> {
        let records = &*world.store.records(sid);
        records[records.len() - 2..]
            .iter()
            .map(|r| r.event.as_ref().unwrap().actor.clone().map(|a| a.principal))
            .collect()
    };
    // Live: the running turn takes the Cancel and writes its records.
    let live = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&live, "", "hello"));
    let canceling = world.start_as(wes.clone(), cancel(&live));
    world.release();
    assert_eq!(world.take(canceling).code(), Code::Ok);
    assert_eq!(world.take(turn).code(), Code::Cancelled);
    assert_eq!(
        actors(&world, &live),
        [Some("wes".into()), Some("wes".into())]
    );
    // Parked: no operation holds it; the Cancel writes from the journal.
    let (parked_sid, _, _) = parked(&mut world, "approval");
    assert_eq!(world.call_as(wes, cancel(&parked_sid)).code(), Code::Ok);
    assert_eq!(
        actors(&world, &parked_sid),
        [Some("wes".into()), Some("wes".into())]
    );
}

/// A session of `writer`'s parked on its approval gate, with the pending
/// reference.
fn parked_by(world: &mut World, writer: &Caller) -> (String, ApprovalRef) {
    let created = create_in(world, writer.clone(), "", "approval");
    let sid = uid(&created);
    let parked = world.call_as(writer.clone(), exec(&sid, "", "go"));
    let pending = parked
        .session()
        .and_then(|s| s.pending_approval)
        .expect("parked on the gate");
    (sid, pending)
}

#[test]
fn an_approver_without_writer_resumes_the_execution_it_approved() {
    let mut world = World::default();
    let alice = who("alice", &["*:writer"]);
    let bob = who("bob", &["*:approver"]);
    let (sid, pending) = parked_by(&mut world, &alice);
    let decided = |world: &mut World| match world
        .call_as(
            bob.clone(),
            Request::Decided {
                session: sid.clone(),
            },
        )
        .reply
    {
        Ok(Response::Decided(d)) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!(decided(&mut world), None, "undecided yet");
    let decide = approve(&sid, &pending.execution_id, "c1", pending.request_seq, true);
    assert_eq!(world.call_as(bob.clone(), decide).code(), Code::Ok);
    assert_eq!(
        decided(&mut world),
        Some(pending.clone()),
        "decided, not carried out: the wire says COMPLETED, the host knows better"
    );
    let resumed = world.call_as(bob.clone(), resume(&sid));
    assert_eq!(resumed.code(), Code::Ok, "{:?}", resumed.reply);
    let kinds: Vec<_> = world
        .store
        .records(&sid)
        .iter()
        .filter_map(|r| r.event.as_ref().map(events::kind_of))
        .collect();
    assert!(
        kinds.contains(&EventKind::EventToolResult),
        "the approved call ran: {kinds:?}"
    );
    assert_eq!(decided(&mut world), None, "carried out");
}

#[test]
fn an_approver_without_writer_may_not_resume_anything_else() {
    let mut world = World::default();
    let alice = who("alice", &["*:writer"]);
    let bob = who("bob", &["*:approver"]);
    // Undecided: nothing to carry out yet.
    let (sid, pending) = parked_by(&mut world, &alice);
    let before = world.store.records(&sid).to_vec();
    let early = world.call_as(bob.clone(), resume(&sid));
    assert_eq!(early.code(), Code::PermissionDenied, "{:?}", early.reply);
    assert_eq!(&*world.store.records(&sid), before, "nothing written");
    // Decided and carried out: the gate is spent.
    let decide = approve(&sid, &pending.execution_id, "c1", pending.request_seq, true);
    assert_eq!(world.call_as(bob.clone(), decide).code(), Code::Ok);
    assert_eq!(world.call_as(bob.clone(), resume(&sid)).code(), Code::Ok);
    let after = world.store.records(&sid).to_vec();
    let again = world.call_as(bob.clone(), resume(&sid));
    assert_eq!(again.code(), Code::PermissionDenied, "{:?}", again.reply);
    assert_eq!(&*world.store.records(&sid), after, "nothing written");
    // A session with no gate at all.
    let plain = uid(&create_in(&mut world, alice.clone(), "", "echo"));
    assert_eq!(
        world.call_as(alice, exec(&plain, "", "hi")).code(),
        Code::Ok
    );
    assert_eq!(
        world.call_as(bob, resume(&plain)).code(),
        Code::PermissionDenied
    );
}

#[test]
fn an_approver_of_another_project_may_not_resume_a_decided_gate() {
    let mut world = World::default();
    let alice = who("alice", &["*:writer"]);
    let (sid, pending) = parked_by(&mut world, &alice);
    let decide = approve(&sid, &pending.execution_id, "c1", pending.request_seq, true);
    let bob = who("bob", &["*:approver"]);
    assert_eq!(world.call_as(bob, decide).code(), Code::Ok);
    let carol = who("carol", &["elsewhere:approver"]);
    assert_eq!(
        world.call_as(carol, resume(&sid)).code(),
        Code::PermissionDenied
    );
}
