//! DeleteSession and retention steps: what a deletion removes, when it is
//! refused (work in flight, a lost race, bad input), what it leaves alone
//! (fork children), and which sessions a retention step takes.

mod common;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    AppendError, Code, Effect, HostConfig, Request, Response, StoreEffect,
};
use agentsessions_proto::v1::{CancelRequest, DeleteSessionRequest, ForkRequest};
use agentsessions_testkit::World;
use common::*;

fn delete(uid: &str) -> Request {
    Request::DeleteSession(DeleteSessionRequest { uid: uid.into() })
}

fn cancel(sid: &str) -> Request {
    Request::Cancel(CancelRequest {
        session: sid.into(),
        ..CancelRequest::default()
    })
}

fn retain(after: &str) -> Request {
    Request::Retain {
        after: after.into(),
    }
}

fn assert_gone(world: &mut World, sid: &str) {
    assert!(world.store.records(sid).is_empty(), "no records left");
    assert!(world.store.row(sid).is_none(), "no row left");
    assert!(world.store.is_deleted(sid), "a tombstone stays");
    assert_eq!(world.call(get(sid)).code(), Code::NotFound);
}

#[test]
fn a_delete_reads_under_the_guard_deletes_at_the_head_it_read_and_forgets_the_tools() {
    let mut world = World::default();
    let sid = create(&mut world, "tools");
    assert_eq!(world.call(exec(&sid, "", "use the tool")).code(), Code::Ok);
    assert!(world.executor.sessions().contains(&sid), "the tool ran");
    let head = world.store.records(&sid).len() as i64;
    let mark = world.trace.len();

    let call = world.call(delete(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let session = call.session().expect("the session as it was");
    assert_eq!(session.last_seq, head);
    assert_eq!(
        effect_names(since(&world, mark)),
        [
            "GetSession",
            "ReadJournal",
            "DeleteSession",
            "ForgetTools",
            "Reply"
        ]
    );
    let deleted_at = since(&world, mark).iter().find_map(|e| match e {
        Effect::Store(StoreEffect::DeleteSession {
            expected_last_seq, ..
        }) => Some(*expected_last_seq),
        _ => None,
    });
    assert_eq!(deleted_at, Some(head), "the CAS names the head it read");
    assert!(!world.executor.sessions().contains(&sid), "tools forgotten");
    assert_gone(&mut world, &sid);
}

#[test]
fn a_deleted_uid_answers_as_an_unknown_one_and_takes_no_more_writes() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    assert_eq!(world.call(delete(&sid)).code(), Code::Ok);
    for again in [
        delete(&sid),
        exec(&sid, "", "again"),
        resume(&sid),
        cancel(&sid),
    ] {
        assert_eq!(world.call(again).code(), Code::NotFound);
    }
    let replayed = world.call(replay(&sid));
    let unknown = world.call(replay("sess-never-created"));
    assert_eq!(
        replayed.code(),
        unknown.code(),
        "replay as for an unknown uid"
    );
    // A writer that still holds a fence (a zombie on another host) cannot
    // bring the session back.
    let ev = events::output("e", events::assistant_text("late"));
    assert_eq!(
        world.store.append(&sid, 0, 99, &[ev], 0),
        Err(AppendError::Deleted)
    );
    assert_gone(&mut world, &sid);
}

#[test]
fn delete_is_refused_while_a_turn_runs_is_parked_or_was_cut_and_allowed_after_cancel() {
    let mut world = World::default();
    // Running: the turn holds the session's guard.
    let running = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let turn = world.start(exec(&running, "", "hello"));
    let before = world.store.records(&running).to_vec();
    let refused = world.start(delete(&running));
    let refused = world.take(refused);
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
    assert!(world.store.records(&running).len() > before.len());

    // Parked on an approval, and cut by a crash: both could still run.
    let (parked_sid, _, _) = parked(&mut world, "approval");
    let cut = crashed_turn(&mut world, "", 3);
    for sid in [&parked_sid, &cut] {
        let before = world.store.records(sid).to_vec();
        let call = world.call(delete(sid));
        assert_eq!(call.code(), Code::FailedPrecondition, "{sid}: {call:?}");
        let message = call.reply.as_ref().err().map(|s| s.message.clone());
        assert!(
            message.is_some_and(|m| m.contains("cancel it first")),
            "{call:?}"
        );
        assert_eq!(&*world.store.records(sid), &before[..], "journal unchanged");
        assert_eq!(world.call(cancel(sid)).code(), Code::Ok);
        assert_eq!(world.call(delete(sid)).code(), Code::Ok);
        assert_gone(&mut world, sid);
    }
}

#[test]
fn a_delete_that_loses_the_race_to_another_writer_aborts_and_deletes_nothing() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    let head = world.store.records(&sid).len() as i64;
    let fence = world.store.fence(&sid);
    let raced = sid.clone();
    // Another host appends between the read and the delete.
    world.before_effect = Some(Box::new(move |e, store| {
        if matches!(e, Effect::Store(StoreEffect::DeleteSession { .. })) {
            let ev = events::lifecycle(
                agentsessions_proto::v1::lifecycle::Kind::LifecycleSuspend,
                "",
            );
            store.append(&raced, head, fence, &[ev], 0).unwrap();
        }
    }));
    let call = world.call(delete(&sid));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    world.before_effect = None;
    assert_eq!(world.store.records(&sid).len() as i64, head + 1);
    assert!(!world.store.is_deleted(&sid));
    assert_eq!(world.call(delete(&sid)).code(), Code::Ok, "a retry deletes");
}

#[test]
fn bad_deletes_get_their_status_and_change_nothing() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(delete("")).code(), Code::InvalidArgument);
    assert_eq!(
        world.call(delete("sess-never-created")).code(),
        Code::NotFound
    );
    assert!(world.store.row(&sid).is_some());
    assert!(world.store.deleted().is_empty());
}

#[test]
fn fork_children_keep_their_prefix_and_run_after_the_parent_is_deleted() {
    let mut world = World::default();
    let parent = create(&mut world, "");
    assert_eq!(world.call(exec(&parent, "", "one")).code(), Code::Ok);
    let prefix = world.store.records(&parent).to_vec();
    let forked = world.call(Request::Fork(ForkRequest {
        session: parent.clone(),
        count: 2,
        ..ForkRequest::default()
    }));
    let children: Vec<String> = match forked.reply {
        Ok(Response::Fork(f)) => f
            .children
            .iter()
            .map(|c| c.metadata.as_ref().unwrap().uid.clone())
            .collect(),
        other => panic!("fork: {other:?}"),
    };
    assert_eq!(world.call(delete(&parent)).code(), Code::Ok);
    assert_gone(&mut world, &parent);
    for child in &children {
        let records = world.store.records(child).to_vec();
        agentsessions_machine::chain::verify(&records).expect("the child verifies");
        let hashes = |r: &[agentsessions_proto::v1::LogRecord]| {
            r.iter().map(|r| r.content_hash.clone()).collect::<Vec<_>>()
        };
        assert_eq!(hashes(&records[..prefix.len()]), hashes(&prefix));
        assert_eq!(world.call(exec(child, "", "two")).code(), Code::Ok);
        agentsessions_machine::chain::verify(&world.store.records(child)).expect("still");
    }
    // The prefix is stored once, under the deleted parent, until the last
    // child that shares it goes.
    let own = |w: &World| -> usize { children.iter().map(|c| w.store.records(c).len()).sum() };
    let shared = own(&world) - 2 * prefix.len() + prefix.len();
    assert_eq!(world.store.stored_records(), shared);
    for child in &children {
        assert_eq!(world.call(delete(child)).code(), Code::Ok);
    }
    assert_eq!(world.store.stored_records(), 0, "nothing orphaned");
}

fn retaining(period: i64) -> World {
    World::new(HostConfig {
        retain_completed: Some(period),
        ..agentsessions_testkit::world::config()
    })
}

#[test]
fn a_retention_step_deletes_stale_idle_sessions_and_keeps_busy_or_fresh_ones() {
    // Each call moves the world's clock by a millisecond.
    let mut world = retaining(500_000_000);
    let done = create(&mut world, "");
    assert_eq!(world.call(exec(&done, "", "hi")).code(), Code::Ok);
    let (parked_sid, _, _) = parked(&mut world, "approval");
    let never_run = create(&mut world, "");
    world.now += 1_000_000_000;
    let fresh = create(&mut world, "");

    let call = world.call(retain(""));
    let report = match call.reply {
        Ok(Response::Retained(r)) => r,
        other => panic!("retain: {other:?}"),
    };
    let mut deleted: Vec<&str> = report.deleted.iter().map(|(u, _)| u.as_str()).collect();
    deleted.sort_unstable();
    let mut want = vec![done.as_str(), never_run.as_str()];
    want.sort_unstable();
    assert_eq!(deleted, want);
    assert_eq!(report.kept, 1, "the parked session is kept");
    assert_eq!(report.next, "", "a small table is one step");
    let records: i64 = report.deleted.iter().map(|(_, n)| n).sum();
    assert_eq!(records, 5, "the completed turn's records");
    for sid in [&done, &never_run] {
        assert_gone(&mut world, sid);
    }
    for sid in [&parked_sid, &fresh] {
        assert!(world.store.row(sid).is_some(), "{sid} kept");
    }
}

#[test]
fn a_retention_step_is_refused_when_retention_is_off() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.now = i64::MAX / 2;
    assert_eq!(world.call(retain("")).code(), Code::FailedPrecondition);
    assert!(world.store.row(&sid).is_some());
}
