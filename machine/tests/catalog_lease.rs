//! Session leases between hosts sharing a journal: every mint claims the
//! lease, a heartbeat renews it while the operation runs, the end of the
//! operation releases it, another host's live lease refuses a second
//! writer (ABORTED, as an overlapping call on one host), a lapsed one is
//! taken over, and Cancel takes it even from a live holder.

mod common;

use agentsessions_machine::vocab::{
    Code, Effect, LeaseClaim, LeaseConfig, Request, StoreEffect, StoreOutcome,
};
use agentsessions_proto::v1::{CancelRequest, EventKind};
use agentsessions_testkit::World;
use agentsessions_testkit::world::config;
use common::*;

const SECOND: i64 = 1_000_000_000;
const TTL: i64 = 15 * SECOND;

fn host(id: &str) -> World {
    let mut c = config();
    c.lease = Some(LeaseConfig::new(id, TTL));
    // Held turns here are slow, not silent: their harness's first event
    // may take longer than the heartbeats these tests step through.
    c.connect_timeout_ms = 3_600_000;
    World::new(c)
}

/// A second host over the same journal, at the same time.
fn beside(world: &World, id: &str) -> World {
    let mut c = config();
    c.lease = Some(LeaseConfig::new(id, TTL));
    c.connect_timeout_ms = 3_600_000;
    let mut other = World::with_store(c, world.store.clone());
    other.now = world.now;
    other
}

fn mints(effects: &[Effect]) -> Vec<Option<LeaseClaim>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Store(StoreEffect::MintFence { lease, .. }) => Some(lease.clone()),
            _ => None,
        })
        .collect()
}

/// (fence, ttl) of every HoldLease in `effects`.
fn holds(effects: &[Effect]) -> Vec<(i64, i64)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Store(StoreEffect::HoldLease { fence, ttl, .. }) => Some((*fence, *ttl)),
            _ => None,
        })
        .collect()
}

fn cancel(sid: &str) -> Request {
    Request::Cancel(CancelRequest {
        session: sid.into(),
        execution_id: String::new(),
        reason: "stop".into(),
    })
}

/// The release each Append carries, in order.
fn append_releases(effects: &[Effect]) -> Vec<Option<String>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Store(StoreEffect::Append { release, .. }) => Some(release.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn every_mint_claims_the_lease_and_the_turns_last_append_ends_it() {
    let mut world = host("a");
    let sid = create(&mut world, "");
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let turn = since(&world, mark);
    let claim = LeaseClaim {
        owner: "a".into(),
        ttl: TTL,
        force: false,
    };
    assert_eq!(mints(turn), vec![Some(claim)]);
    let releases = append_releases(turn);
    let (last, rest) = releases.split_last().expect("the turn appended");
    assert_eq!(last.as_deref(), Some("a"), "the END carries the release");
    assert!(rest.iter().all(Option::is_none), "{releases:?}");
    assert!(
        holds(turn).is_empty(),
        "no release of its own, nothing renewed"
    );
    assert_eq!(world.store.lease(&sid), None, "released in the store");
    assert!(world.host.leased().is_empty());
}

#[test]
fn a_refused_last_append_keeps_the_lease_until_a_release_of_its_own() {
    let mut world = host("a");
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let mark = world.trace.len();
    let turn = world.start(exec(&sid, "", "hi"));
    // Another writer moves the head while the turn waits on its model:
    // every append of the turn from here on is refused by the CAS.
    let head = world.store.records(&sid).last().unwrap().clone();
    let other = agentsessions_machine::events::lifecycle(
        agentsessions_proto::v1::lifecycle::Kind::LifecycleSuspend,
        "",
    );
    world
        .store
        .append(&sid, head.seq, head.fence, &[other], world.now)
        .unwrap();
    world.release();
    let call = world.take(turn);
    assert_ne!(call.code(), Code::Ok, "{call:?}");
    let effects = since(&world, mark);
    assert_eq!(
        append_releases(effects)
            .last()
            .cloned()
            .flatten()
            .as_deref(),
        Some("a"),
        "the ERROR tried to end the lease"
    );
    assert_eq!(holds(effects), vec![(head.fence, 0)], "then released alone");
    assert_eq!(world.store.lease(&sid), None);
    assert!(world.host.leased().is_empty());
}

#[test]
fn another_host_takes_the_next_turn_as_soon_as_the_reply_arrives() {
    let mut a = host("a");
    let sid = create(&mut a, "");
    for text in ["one", "two", "three"] {
        assert_eq!(a.call(exec(&sid, "", text)).code(), Code::Ok);
        let mut b = beside(&a, "b");
        let call = b.call(exec(&sid, "", text));
        assert_eq!(call.code(), Code::Ok, "the session is free: {call:?}");
        // Back to a, over the journal as b left it.
        a.store = b.store.clone();
        a.now = b.now;
    }
    agentsessions_machine::chain::verify(&a.store.records(&sid)).unwrap();
}

#[test]
fn suspend_and_resume_end_their_leases_with_their_last_append() {
    let mut world = host("a");
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    for request in [suspend(&sid), resume(&sid)] {
        let mark = world.trace.len();
        let call = world.call(request);
        assert_eq!(call.code(), Code::Ok, "{call:?}");
        let effects = since(&world, mark);
        assert_eq!(mints(effects).len(), 1, "one claim");
        let releases = append_releases(effects);
        assert_eq!(releases.last().cloned().flatten().as_deref(), Some("a"));
        assert!(holds(effects).is_empty(), "no release commit: {releases:?}");
        assert_eq!(world.store.lease(&sid), None);
    }
}

#[test]
fn a_host_without_lease_settings_takes_no_leases() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let mark = world.trace.len();
    assert_eq!(world.call(exec(&sid, "", "hi")).code(), Code::Ok);
    assert_eq!(mints(since(&world, mark)), vec![None]);
    assert!(holds(since(&world, mark)).is_empty());
    assert_eq!(world.store.lease(&sid), None);
}

#[test]
fn a_held_lease_is_renewed_every_heartbeat_while_the_turn_runs() {
    let mut world = host("a");
    let sid = create(&mut world, "");
    world.hold = true;
    let turn = world.start(exec(&sid, "", "hi"));
    let taken = world.store.lease(&sid).expect("taken with the fence");
    assert_eq!(taken.owner, "a");
    let mark = world.trace.len();
    let heartbeat = TTL / 3;
    for _ in 0..3 {
        world.advance(heartbeat + 1);
    }
    let renewals = holds(since(&world, mark));
    assert_eq!(renewals, vec![(taken.fence, TTL); 3], "{renewals:?}");
    let renewed = world.store.lease(&sid).unwrap();
    assert!(renewed.expires_at > taken.expires_at + 2 * heartbeat);
    assert_eq!(world.host.leased(), vec![sid.clone()]);
    world.release();
    assert_eq!(world.take(turn).code(), Code::Ok);
    assert_eq!(world.store.lease(&sid), None);
    assert!(world.host.leased().is_empty());
}

#[test]
fn another_hosts_live_lease_refuses_a_turn_with_aborted_and_writes_nothing() {
    let mut a = host("a");
    let sid = create(&mut a, "");
    a.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let running = a.start(exec(&sid, "", "hello"));
    assert!(!a.replied(running), "a's turn waits on its model");

    let mut b = beside(&a, "b");
    let before = b.store.records(&sid).to_vec();
    let call = b.call(exec(&sid, "", "me too"));
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    let message = call.reply.unwrap_err().message;
    assert!(message.contains("leased to host a"), "{message}");
    assert_eq!(&*b.store.records(&sid), &before[..], "nothing written");
    assert_eq!(b.store.lease(&sid).unwrap().owner, "a", "a's lease stands");
}

#[test]
fn a_lapsed_lease_is_taken_over_and_the_cut_turn_recovered() {
    let mut a = host("a");
    let sid = create(&mut a, "");
    a.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let _running = a.start(exec(&sid, "", "hello"));
    // Host a dies here: nothing renews or releases its lease.
    let mut b = beside(&a, "b");
    assert_eq!(b.call(resume(&sid)).code(), Code::Aborted, "still live");
    b.advance(TTL + SECOND);
    let call = b.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let kinds = kinds(&b, &sid);
    assert!(
        kinds.contains(&EventKind::EventEnd),
        "the turn ended: {kinds:?}"
    );
    agentsessions_machine::chain::verify(&b.store.records(&sid)).unwrap();
    assert_eq!(b.store.lease(&sid), None, "b released it after the turn");
}

#[test]
fn the_host_whose_lease_was_taken_stops_renewing_and_cannot_append() {
    let mut a = host("a");
    let sid = create(&mut a, "");
    a.hold = true;
    let turn = a.start(exec(&sid, "", "hi"));
    // Another host cancels it (a forced claim), while a is still running.
    let forced = StoreEffect::MintFence {
        id: agentsessions_machine::vocab::EffectId(u64::MAX),
        session: sid.clone(),
        now: a.now,
        lease: Some(LeaseClaim {
            owner: "b".into(),
            ttl: TTL,
            force: true,
        }),
    };
    assert!(matches!(
        a.store.perform(&forced),
        StoreOutcome::Fence(Ok(_))
    ));
    a.advance(TTL / 3 + 1);
    assert!(a.host.leased().is_empty(), "the renewal found it gone");
    let mark = a.trace.len();
    a.advance(TTL);
    assert!(
        holds(since(&a, mark)).is_empty(),
        "no renewal after the loss"
    );
    a.release();
    let call = a.take(turn);
    assert_eq!(call.code(), Code::Aborted, "{call:?}");
    assert_eq!(
        a.store.lease(&sid).unwrap().owner,
        "b",
        "a's release was a no-op"
    );
}

#[test]
fn cancel_takes_the_lease_even_from_a_live_holder_on_another_host() {
    let mut a = host("a");
    let sid = create(&mut a, "");
    a.pause_on = Some(Box::new(|e| matches!(e, Effect::Model(_))));
    let _running = a.start(exec(&sid, "", "hello"));
    let mut b = beside(&a, "b");
    let mark = b.trace.len();
    let call = b.call(cancel(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let claims = mints(since(&b, mark));
    assert_eq!(claims.len(), 1);
    assert!(
        claims[0]
            .as_ref()
            .is_some_and(|c| c.force && c.owner == "b")
    );
    let kinds = kinds(&b, &sid);
    assert_eq!(kinds.last(), Some(&EventKind::EventEnd), "{kinds:?}");
    let releases = append_releases(since(&b, mark));
    assert_eq!(
        releases,
        vec![Some("b".to_owned())],
        "the END ends b's lease"
    );
    assert_eq!(b.store.lease(&sid), None);
}
