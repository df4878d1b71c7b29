//! The journal store contract as one suite any backend runs against itself
//! ([`run`]): what the machine relies on, checked through the trait alone.
//! CAS on the head, fences, the hash chain, ranged reads, the compute_state
//! the append carries, session metadata and keyset paging, registry rows and
//! reservations, the session/registry check, deletion and tombstones,
//! leases, and fork prefixes.
//!
//! The notification outbox has a suite of its own ([`outbox()`]).
//!
//! The memory store runs them in `journal/tests/contract.rs`, SQLite in
//! `sqlite/tests/contract.rs` and PostgreSQL in `pg/tests/contract.rs`; a new
//! backend is done when it passes. Crashes differ by backend and are checked
//! where each models them (the memory journal's pending, lost and torn
//! writes in `memory/tests.rs`, SQLite under a real SIGKILL in
//! `tests/crash_kill.rs`).

use std::future::Future;
use std::time::Duration;

use agentsessions_machine::chain;
use agentsessions_machine::events;
use agentsessions_proto::v1::LogRecord;
use agentsessions_proto::v1::{ComputeState, Event, lifecycle};

use crate::memory::MemoryJournal;

mod outbox;
pub use self::outbox::{OUTBOX_CHECKS, outbox};
use crate::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessState, JournalStore, LeaseClaim, ListHarnesses, ListSessions, RegisterOutcome,
    RegistryError, SessionMeta, StaleScan, StoreError,
};

/// Every check of the contract, by name, in the order [`run`] runs them.
pub const CHECKS: &[&str] = &[
    "appends_chain_from_genesis_and_the_store_verifies_them",
    "a_stale_head_is_a_conflict_naming_the_head_and_writes_nothing",
    "an_older_fence_is_fenced_and_a_newer_one_writes",
    "reads_return_exactly_the_asked_range",
    "the_compute_state_is_the_one_the_append_carries",
    "keyset_pages_list_every_session_of_a_project_once_newest_first",
    "registrations_are_immutable_and_only_their_state_moves",
    "reservations_are_all_or_nothing_and_block_registration",
    "a_session_is_stored_only_on_a_harness_the_registry_allows",
    "a_delete_removes_the_session_whole_and_its_uid_takes_no_more_writes",
    "a_delete_decided_at_an_old_head_is_a_conflict_and_deletes_nothing",
    "a_stale_scan_walks_the_table_in_bounded_steps",
    "concurrent_appends_at_one_head_commit_exactly_one",
    "a_live_lease_refuses_another_owners_mint_and_changes_nothing",
    "a_lease_is_renewed_and_released_only_by_its_holder_at_its_fence",
    "concurrent_claims_by_several_hosts_leave_exactly_one_holder",
    "an_append_ending_a_lease_removes_only_its_owners_and_only_if_it_commits",
    "a_fork_child_reads_its_parents_records_and_its_appends_stay_its_own",
    "a_fork_of_a_fork_reads_through_both_without_copying_either",
    "a_deleted_parent_lives_on_in_its_children_until_the_last_is_deleted",
    "a_fork_writes_the_same_rows_whatever_the_prefix_length",
];

/// Runs every check of the contract, each against a fresh store from
/// `open`, and panics naming the first that fails. Needs a tokio (or madsim)
/// runtime: some checks race appends or wait for a lease to lapse.
pub async fn run<J, F, Fut>(mut open: F)
where
    J: JournalStore + StoredRows,
    F: FnMut() -> Fut,
    Fut: Future<Output = J>,
{
    check(
        "appends_chain_from_genesis_and_the_store_verifies_them",
        appends_chain_from_genesis_and_the_store_verifies_them(&open().await),
    )
    .await;
    check(
        "a_stale_head_is_a_conflict_naming_the_head_and_writes_nothing",
        a_stale_head_is_a_conflict_naming_the_head_and_writes_nothing(&open().await),
    )
    .await;
    check(
        "an_older_fence_is_fenced_and_a_newer_one_writes",
        an_older_fence_is_fenced_and_a_newer_one_writes(&open().await),
    )
    .await;
    check(
        "reads_return_exactly_the_asked_range",
        reads_return_exactly_the_asked_range(&open().await),
    )
    .await;
    check(
        "the_compute_state_is_the_one_the_append_carries",
        the_compute_state_is_the_one_the_append_carries(&open().await),
    )
    .await;
    check(
        "keyset_pages_list_every_session_of_a_project_once_newest_first",
        keyset_pages_list_every_session_of_a_project_once_newest_first(&open().await),
    )
    .await;
    check(
        "registrations_are_immutable_and_only_their_state_moves",
        registrations_are_immutable_and_only_their_state_moves(&open().await),
    )
    .await;
    check(
        "reservations_are_all_or_nothing_and_block_registration",
        reservations_are_all_or_nothing_and_block_registration(&open().await),
    )
    .await;
    check(
        "a_session_is_stored_only_on_a_harness_the_registry_allows",
        a_session_is_stored_only_on_a_harness_the_registry_allows(&open().await),
    )
    .await;
    check(
        "a_delete_removes_the_session_whole_and_its_uid_takes_no_more_writes",
        a_delete_removes_the_session_whole_and_its_uid_takes_no_more_writes(&open().await),
    )
    .await;
    check(
        "a_delete_decided_at_an_old_head_is_a_conflict_and_deletes_nothing",
        a_delete_decided_at_an_old_head_is_a_conflict_and_deletes_nothing(&open().await),
    )
    .await;
    check(
        "a_stale_scan_walks_the_table_in_bounded_steps",
        a_stale_scan_walks_the_table_in_bounded_steps(&open().await),
    )
    .await;
    check(
        "concurrent_appends_at_one_head_commit_exactly_one",
        concurrent_appends_at_one_head_commit_exactly_one(&open().await),
    )
    .await;
    check(
        "a_live_lease_refuses_another_owners_mint_and_changes_nothing",
        a_live_lease_refuses_another_owners_mint_and_changes_nothing(&open().await),
    )
    .await;
    check(
        "a_lease_is_renewed_and_released_only_by_its_holder_at_its_fence",
        a_lease_is_renewed_and_released_only_by_its_holder_at_its_fence(&open().await),
    )
    .await;
    check(
        "concurrent_claims_by_several_hosts_leave_exactly_one_holder",
        concurrent_claims_by_several_hosts_leave_exactly_one_holder(&open().await),
    )
    .await;
    check(
        "an_append_ending_a_lease_removes_only_its_owners_and_only_if_it_commits",
        an_append_ending_a_lease_removes_only_its_owners_and_only_if_it_commits(&open().await),
    )
    .await;
    check(
        "a_fork_child_reads_its_parents_records_and_its_appends_stay_its_own",
        a_fork_child_reads_its_parents_records_and_its_appends_stay_its_own(&open().await),
    )
    .await;
    check(
        "a_fork_of_a_fork_reads_through_both_without_copying_either",
        a_fork_of_a_fork_reads_through_both_without_copying_either(&open().await),
    )
    .await;
    check(
        "a_deleted_parent_lives_on_in_its_children_until_the_last_is_deleted",
        a_deleted_parent_lives_on_in_its_children_until_the_last_is_deleted(&open().await),
    )
    .await;
    check(
        "a_fork_writes_the_same_rows_whatever_the_prefix_length",
        a_fork_writes_the_same_rows_whatever_the_prefix_length(&open().await),
    )
    .await;
}

/// Runs one check, naming it if it panics (the panic's own message says
/// what broke).
async fn check(name: &str, run: impl Future<Output = ()>) {
    struct Named<'a>(&'a str);
    impl Drop for Named<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("store contract: check {} failed", self.0);
            }
        }
    }
    let _named = Named(name);
    run.await;
}

const S: &str = "sess-000000000000000000000001";

fn input(text: &str) -> Event {
    events::input("e1", events::text_message("user", text))
}

fn batch(expected: i64, fence: i64, events: Vec<Event>) -> AppendBatch {
    AppendBatch {
        session: S.into(),
        expected_last_seq: expected,
        fence,
        compute_state: agentsessions_machine::journal::projection::batch_compute_state(&events),
        events,
        now_unix_nanos: 1_000 + expected,
        release_lease: None,
    }
}

fn meta(uid: &str, project: &str, created_at: i64) -> SessionMeta {
    SessionMeta {
        uid: uid.into(),
        project: project.into(),
        harness: "echo".into(),
        created_at,
        ..SessionMeta::default()
    }
}

fn reg(name: &str, digest: &str) -> HarnessRegistration {
    HarnessRegistration {
        name: name.into(),
        uid: format!("harness-{name:0>24}"),
        spec: format!("{{\"d\":\"{digest}\"}}"),
        spec_digest: format!("sha256:{digest}"),
    }
}

async fn appends_chain_from_genesis_and_the_store_verifies_them<J: JournalStore>(j: &J) {
    assert_eq!(j.mint_fence(S, 1, None).await.unwrap(), 1);
    let first = j.append(batch(0, 1, vec![input("a"), input("b")])).await;
    let first = first.unwrap();
    assert_eq!(first.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(first[0].prev_hash, "", "genesis links to nothing");
    let second = j.append(batch(2, 1, vec![input("c")])).await.unwrap();
    assert_eq!(second[0].prev_hash, first[1].content_hash);
    let all = j.read(S, 1, 0).await.unwrap();
    assert_eq!(all.len(), 3);
    chain::verify(&all).expect("a chain the machine's verifier accepts");
    j.verify(S).await.expect("the store's own verify");
    assert_eq!(j.head(S).await.unwrap(), 3);
}

async fn a_stale_head_is_a_conflict_naming_the_head_and_writes_nothing<J: JournalStore>(j: &J) {
    j.mint_fence(S, 1, None).await.unwrap();
    j.append(batch(0, 1, vec![input("a")])).await.unwrap();
    for stale in [0, 2, 7] {
        let got = j.append(batch(stale, 1, vec![input("late")])).await;
        assert!(
            matches!(got, Err(AppendError::Conflict { head: 1 })),
            "expected {stale}: {got:?}"
        );
    }
    assert_eq!(j.read(S, 1, 0).await.unwrap().len(), 1);
}

async fn an_older_fence_is_fenced_and_a_newer_one_writes<J: JournalStore>(j: &J) {
    assert_eq!(j.mint_fence(S, 1, None).await.unwrap(), 1);
    assert_eq!(j.mint_fence(S, 2, None).await.unwrap(), 2);
    let got = j.append(batch(0, 1, vec![input("zombie")])).await;
    assert!(
        matches!(got, Err(AppendError::Fenced { current: 2 })),
        "{got:?}"
    );
    assert_eq!(j.head(S).await.unwrap(), 0, "the zombie wrote nothing");
    j.append(batch(0, 2, vec![input("holder")])).await.unwrap();
    // A larger fence is accepted and does not advance the stored one.
    j.append(batch(1, 9, vec![input("ahead")])).await.unwrap();
    assert_eq!(j.session_info(S).await.unwrap().fence, 2);
    assert_eq!(j.mint_fence(S, 3, None).await.unwrap(), 3);
}

async fn reads_return_exactly_the_asked_range<J: JournalStore>(j: &J) {
    j.mint_fence(S, 1, None).await.unwrap();
    let evs = (0..5).map(|i| input(&format!("m{i}"))).collect();
    j.append(batch(0, 1, evs)).await.unwrap();
    let seqs = |r: Vec<agentsessions_proto::v1::LogRecord>| -> Vec<i64> {
        r.iter().map(|r| r.seq).collect()
    };
    assert_eq!(seqs(j.read(S, 2, 3).await.unwrap()), [2, 3]);
    assert_eq!(seqs(j.read(S, 4, 0).await.unwrap()), [4, 5]);
    assert_eq!(seqs(j.read(S, 6, 0).await.unwrap()), Vec::<i64>::new());
    assert_eq!(j.head("sess-unknown").await.unwrap(), 0);
}

async fn the_compute_state_is_the_one_the_append_carries<J: JournalStore>(j: &J) {
    j.mint_fence(S, 1, None).await.unwrap();
    let mut told = batch(0, 1, vec![input("a")]);
    told.compute_state = Some(ComputeState::ComputeLive);
    j.append(told).await.unwrap();
    assert_eq!(
        j.session_info(S).await.unwrap().compute_state,
        ComputeState::ComputeLive
    );
    // None leaves the stored state, whatever the events are.
    let mut leave = batch(
        1,
        1,
        vec![events::lifecycle(lifecycle::Kind::LifecycleSuspend, "")],
    );
    leave.compute_state = None;
    j.append(leave).await.unwrap();
    assert_eq!(
        j.session_info(S).await.unwrap().compute_state,
        ComputeState::ComputeLive
    );
    // The store writes what it is told, not what it would derive.
    let mut cold = batch(2, 1, vec![input("b")]);
    cold.compute_state = Some(ComputeState::ComputeCold);
    j.append(cold).await.unwrap();
    assert_eq!(
        j.session_info(S).await.unwrap().compute_state,
        ComputeState::ComputeCold
    );
}

async fn keyset_pages_list_every_session_of_a_project_once_newest_first<J: JournalStore>(j: &J) {
    // Two share a created_at, so the uid breaks the tie.
    let rows = [
        ("sess-a", 30),
        ("sess-b", 10),
        ("sess-c", 20),
        ("sess-d", 20),
        ("sess-e", 50),
    ];
    for (uid, at) in rows {
        j.put_session(meta(uid, "p", at), 100).await.unwrap();
    }
    j.put_session(meta("sess-x", "other", 40), 100)
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = j
            .list_sessions(ListSessions {
                project: "p".into(),
                page_size: 2,
                page_token: token,
            })
            .await
            .unwrap();
        assert!(page.sessions.len() <= 2);
        seen.extend(page.sessions.iter().map(|s| s.meta.uid.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, ["sess-e", "sess-a", "sess-c", "sess-d", "sess-b"]);
    // An update keeps created_at and the project.
    j.put_session(meta("sess-b", "p", 0), 200).await.unwrap();
    let info = j.session_info("sess-b").await.unwrap();
    assert_eq!(
        (info.meta.created_at, info.meta.project.as_str()),
        (10, "p")
    );
}

async fn registrations_are_immutable_and_only_their_state_moves<J: JournalStore>(j: &J) {
    let (row, out) = j.register_harness(reg("alpha", "aa"), 10).await.unwrap();
    assert_eq!(out, RegisterOutcome::Created);
    assert_eq!(row.state, HarnessState::Active);
    let (_, out) = j.register_harness(reg("alpha", "aa"), 11).await.unwrap();
    assert_eq!(out, RegisterOutcome::Unchanged);
    let conflict = j.register_harness(reg("alpha", "bb"), 12).await;
    assert!(
        matches!(conflict, Err(RegistryError::SpecConflict { .. })),
        "{conflict:?}"
    );
    let retired = j.retire_harness("alpha", "first", 20).await.unwrap();
    assert_eq!(retired.state, HarnessState::Retired);
    let again = j.retire_harness("alpha", "second", 30).await.unwrap();
    assert_eq!(
        (again.retire_reason.as_str(), again.retired_at),
        ("first", 20)
    );
    let (_, out) = j.register_harness(reg("alpha", "aa"), 40).await.unwrap();
    assert_eq!(out, RegisterOutcome::Reactivated);
    let missing = j.retire_harness("nobody", "x", 50).await;
    assert!(
        matches!(missing, Err(RegistryError::NotFound { .. })),
        "{missing:?}"
    );
    j.register_harness(reg("beta", "cc"), 60).await.unwrap();
    j.retire_harness("beta", "gone", 61).await.unwrap();
    let list = |include_retired| ListHarnesses {
        after: String::new(),
        limit: 10,
        include_retired,
    };
    let names = |rows: Vec<crate::HarnessRow>| -> Vec<String> {
        rows.into_iter().map(|r| r.name).collect()
    };
    assert_eq!(
        names(j.list_harnesses(list(true)).await.unwrap()),
        ["alpha", "beta"]
    );
    assert_eq!(
        names(j.list_harnesses(list(false)).await.unwrap()),
        ["alpha"]
    );
}

async fn reservations_are_all_or_nothing_and_block_registration<J: JournalStore>(j: &J) {
    j.register_harness(reg("taken", "aa"), 1).await.unwrap();
    let collide = j
        .reserve_harness_names(vec!["free".into(), "taken".into()], 2)
        .await;
    assert!(
        matches!(collide, Err(RegistryError::NameCollision { .. })),
        "{collide:?}"
    );
    // Nothing was reserved: "free" still registers.
    j.register_harness(reg("free", "bb"), 3).await.unwrap();
    j.reserve_harness_names(vec!["static".into()], 4)
        .await
        .unwrap();
    j.reserve_harness_names(vec!["static".into()], 5)
        .await
        .unwrap();
    let reserved = j.register_harness(reg("static", "cc"), 6).await;
    assert!(
        matches!(reserved, Err(RegistryError::NameReserved { .. })),
        "{reserved:?}"
    );
}

async fn a_session_is_stored_only_on_a_harness_the_registry_allows<J: JournalStore>(j: &J) {
    let on = |uid: &str, harness: &str| SessionMeta {
        harness: harness.into(),
        ..meta(uid, "p", 1)
    };
    let unknown = j
        .put_session_on_active_harness(on("sess-1", "ghost"), true, 1)
        .await;
    assert!(
        matches!(unknown, Err(RegistryError::NotFound { .. })),
        "{unknown:?}"
    );
    j.register_harness(reg("live", "aa"), 1).await.unwrap();
    j.put_session_on_active_harness(on("sess-2", "live"), true, 2)
        .await
        .unwrap();
    j.retire_harness("live", "done", 3).await.unwrap();
    let retired = j
        .put_session_on_active_harness(on("sess-3", "live"), true, 4)
        .await;
    assert!(
        matches!(retired, Err(RegistryError::Retired { .. })),
        "{retired:?}"
    );
    // A static harness must have no registration row.
    let collide = j
        .put_session_on_active_harness(on("sess-4", "live"), false, 5)
        .await;
    assert!(
        matches!(collide, Err(RegistryError::NameCollision { .. })),
        "{collide:?}"
    );
    j.put_session_on_active_harness(on("sess-5", "echo"), false, 6)
        .await
        .unwrap();
    for (uid, stored) in [
        ("sess-1", false),
        ("sess-2", true),
        ("sess-3", false),
        ("sess-4", false),
        ("sess-5", true),
    ] {
        assert_eq!(j.session_info(uid).await.is_ok(), stored, "{uid}");
    }
}

fn delete(uid: &str, expected: i64) -> DeleteSession {
    DeleteSession {
        uid: uid.into(),
        expected_last_seq: expected,
        principal: "ops@example".into(),
        now_unix_nanos: 9_000,
    }
}

async fn a_delete_removes_the_session_whole_and_its_uid_takes_no_more_writes<J: JournalStore>(
    j: &J,
) {
    j.put_session(meta(S, "p", 10), 10).await.unwrap();
    let fence = j.mint_fence(S, 11, None).await.unwrap();
    j.append(batch(0, fence, vec![input("a"), input("b")]))
        .await
        .unwrap();
    let other = "sess-000000000000000000000002";
    j.put_session(meta(other, "p", 20), 20).await.unwrap();

    let tombstone = j.delete_session(delete(S, 2)).await.unwrap();
    assert_eq!(
        (
            tombstone.records,
            tombstone.deleted_at,
            tombstone.principal.as_str()
        ),
        (2, 9_000, "ops@example")
    );
    assert_eq!(j.tombstone(S).await.unwrap(), Some(tombstone));
    assert!(matches!(
        j.session_info(S).await,
        Err(StoreError::SessionNotFound { .. })
    ));
    assert!(j.read(S, 1, 0).await.unwrap().is_empty());
    assert_eq!(j.head(S).await.unwrap(), 0);
    let page = j
        .list_sessions(ListSessions {
            project: "p".into(),
            ..ListSessions::default()
        })
        .await
        .unwrap();
    let uids: Vec<&str> = page.sessions.iter().map(|s| s.meta.uid.as_str()).collect();
    assert_eq!(uids, [other], "only the other session is listed");
    assert!(j.session_info(other).await.is_ok(), "others are untouched");

    // Every write to the uid is refused, so nothing brings it back.
    assert!(matches!(
        j.mint_fence(S, 12, None).await,
        Err(StoreError::SessionDeleted { .. })
    ));
    assert!(matches!(
        j.append(batch(0, fence + 1, vec![input("c")])).await,
        Err(AppendError::Failed(StoreError::SessionDeleted { .. }))
    ));
    assert!(matches!(
        j.put_session(meta(S, "p", 30), 30).await,
        Err(StoreError::SessionDeleted { .. })
    ));
    assert!(matches!(
        j.delete_session(delete(S, 0)).await,
        Err(DeleteError::Failed(StoreError::SessionDeleted { .. }))
    ));
    assert!(matches!(
        j.session_info(S).await,
        Err(StoreError::SessionNotFound { .. })
    ));
}

async fn a_delete_decided_at_an_old_head_is_a_conflict_and_deletes_nothing<J: JournalStore>(j: &J) {
    let fence = j.mint_fence(S, 1, None).await.unwrap();
    j.append(batch(0, fence, vec![input("a")])).await.unwrap();
    assert!(matches!(
        j.delete_session(delete(S, 0)).await,
        Err(DeleteError::Conflict { head: 1 })
    ));
    assert_eq!(j.read(S, 1, 0).await.unwrap().len(), 1);
    assert_eq!(j.tombstone(S).await.unwrap(), None);
    assert!(matches!(
        j.delete_session(delete("sess-never", 0)).await,
        Err(DeleteError::Failed(StoreError::SessionNotFound { .. }))
    ));
    assert!(matches!(
        j.delete_session(delete("", 0)).await,
        Err(DeleteError::Failed(StoreError::InvalidArgument(_)))
    ));
}

async fn a_stale_scan_walks_the_table_in_bounded_steps<J: JournalStore>(j: &J) {
    for (i, at) in [(1, 100), (2, 500), (3, 100), (4, 900), (5, 100)] {
        j.put_session(meta(&format!("sess-{i}"), "p", at), at)
            .await
            .unwrap();
    }
    let mut stale = Vec::new();
    let mut after = String::new();
    let mut steps = 0;
    loop {
        let page = j
            .stale_sessions(StaleScan {
                after: after.clone(),
                before: 600,
                scan: 2,
            })
            .await
            .unwrap();
        assert!(page.stale.len() <= 2, "a step looks at no more than asked");
        stale.extend(page.stale);
        steps += 1;
        if page.next.is_empty() {
            break;
        }
        after = page.next;
    }
    assert_eq!(stale, ["sess-1", "sess-2", "sess-3", "sess-5"]);
    assert_eq!(steps, 3, "five rows, two per step");
}

async fn concurrent_appends_at_one_head_commit_exactly_one<J: JournalStore>(j: &J) {
    let fence = j.mint_fence(S, 1, None).await.unwrap();
    j.append(batch(0, fence, vec![input("a")])).await.unwrap();
    let racers = (0..8).map(|i| j.append(batch(1, fence, vec![input(&format!("r{i}"))])));
    let results = futures_util::future::join_all(racers).await;
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    for r in &results {
        assert!(
            matches!(r, Ok(_) | Err(AppendError::Conflict { head: 2 })),
            "a loser sees the winner's head: {r:?}"
        );
    }
    let records = j.read(S, 1, 0).await.unwrap();
    assert_eq!(records.len(), 2);
    chain::verify(&records).unwrap();
    j.verify(S).await.unwrap();
}

fn claim(owner: &str, ttl: Duration, force: bool) -> LeaseClaim {
    LeaseClaim {
        owner: owner.into(),
        ttl: i64::try_from(ttl.as_nanos()).unwrap(),
        force,
    }
}

// Leases are judged by the store's clock (PostgreSQL's own, the host's for
// the embedded stores), so these checks pass real time and really wait.
fn now() -> i64 {
    crate::system_now_unix_nanos()
}

async fn a_live_lease_refuses_another_owners_mint_and_changes_nothing<J: JournalStore>(j: &J) {
    let short = Duration::from_millis(300);
    let a = claim("host-a", short, false);
    let b = claim("host-b", Duration::from_secs(60), false);
    assert_eq!(j.mint_fence(S, now(), Some(&a)).await.unwrap(), 1);
    let refused = j.mint_fence(S, now(), Some(&b)).await;
    match refused {
        Err(StoreError::Leased {
            owner,
            remaining_ms,
            ..
        }) => {
            assert_eq!(owner, "host-a");
            assert!((1..=300).contains(&remaining_ms), "{remaining_ms}");
        }
        other => panic!("want Leased, got {other:?}"),
    }
    assert_eq!(j.session_info(S).await.unwrap().fence, 1, "no fence taken");
    // The holder's own mint goes through (a restarted host keeps its id).
    assert_eq!(j.mint_fence(S, now(), Some(&a)).await.unwrap(), 2);
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(j.mint_fence(S, now(), Some(&b)).await.unwrap(), 3, "lapsed");
    assert!(
        matches!(
            j.mint_fence(S, now(), Some(&a)).await,
            Err(StoreError::Leased { .. })
        ),
        "b holds it now"
    );
    // A forced claim (Cancel) takes it from a live holder.
    let forced = claim("host-a", short, true);
    assert_eq!(j.mint_fence(S, now(), Some(&forced)).await.unwrap(), 4);
    // A mint without a claim ignores leases (a single-host journal).
    assert_eq!(j.mint_fence(S, now(), None).await.unwrap(), 5);
}

async fn a_lease_is_renewed_and_released_only_by_its_holder_at_its_fence<J: JournalStore>(j: &J) {
    let ttl = Duration::from_secs(60);
    let ttl_nanos = i64::try_from(ttl.as_nanos()).unwrap();
    let f = j
        .mint_fence(S, now(), Some(&claim("host-a", ttl, false)))
        .await
        .unwrap();
    assert!(
        !j.hold_lease(S, "host-b", f, ttl_nanos, now())
            .await
            .unwrap()
    );
    assert!(
        !j.hold_lease(S, "host-a", f + 1, ttl_nanos, now())
            .await
            .unwrap()
    );
    assert!(
        !j.hold_lease("no-such", "host-a", f, ttl_nanos, now())
            .await
            .unwrap()
    );
    assert!(
        j.hold_lease(S, "host-a", f, ttl_nanos, now())
            .await
            .unwrap()
    );
    let b = claim("host-b", ttl, false);
    assert!(j.mint_fence(S, now(), Some(&b)).await.is_err(), "renewed");
    assert!(
        j.hold_lease(S, "host-a", f, 0, now()).await.unwrap(),
        "released"
    );
    assert!(
        !j.hold_lease(S, "host-a", f, ttl_nanos, now())
            .await
            .unwrap()
    );
    let g = j.mint_fence(S, now(), Some(&b)).await.unwrap();
    assert_eq!(g, f + 1, "free at once after the release");
    // A delete takes the lease with the session.
    j.append(batch(0, g, vec![input("x")])).await.unwrap();
    j.delete_session(delete(S, 1)).await.unwrap();
    assert!(
        !j.hold_lease(S, "host-b", g, ttl_nanos, now())
            .await
            .unwrap()
    );
}

fn ending(mut b: AppendBatch, owner: &str) -> AppendBatch {
    b.release_lease = Some(owner.into());
    b
}

async fn an_append_ending_a_lease_removes_only_its_owners_and_only_if_it_commits<
    J: JournalStore,
>(
    j: &J,
) {
    let ttl = Duration::from_secs(60);
    let b = claim("host-b", ttl, false);
    let f = j
        .mint_fence(S, now(), Some(&claim("host-a", ttl, false)))
        .await
        .unwrap();
    j.append(ending(batch(0, f, vec![input("x")]), "host-b"))
        .await
        .unwrap();
    assert!(
        j.mint_fence(S, now(), Some(&b)).await.is_err(),
        "another owner's name ends nothing"
    );
    let stale = j
        .append(ending(batch(0, f, vec![input("y")]), "host-a"))
        .await;
    assert!(matches!(stale, Err(AppendError::Conflict { head: 1 })));
    assert!(
        j.mint_fence(S, now(), Some(&b)).await.is_err(),
        "a refused append keeps the lease"
    );
    j.append(ending(batch(1, f, vec![input("y")]), "host-a"))
        .await
        .unwrap();
    assert_eq!(j.head(S).await.unwrap(), 2);
    assert_eq!(
        j.mint_fence(S, now(), Some(&b)).await.unwrap(),
        f + 1,
        "free with the commit"
    );
    // Many at once (one group on PostgreSQL): each ends its own.
    let sessions: Vec<String> = (0..8).map(|i| format!("{S}-{i}")).collect();
    for s in &sessions {
        let f = j
            .mint_fence(s, now(), Some(&claim("host-a", ttl, false)))
            .await
            .unwrap();
        assert_eq!(f, 1);
    }
    let appends = sessions.iter().map(|s| {
        let mut one = ending(batch(0, 1, vec![input("z")]), "host-a");
        one.session = s.clone();
        j.append(one)
    });
    for r in futures_util::future::join_all(appends).await {
        r.unwrap();
    }
    for s in &sessions {
        assert_eq!(j.mint_fence(s, now(), Some(&b)).await.unwrap(), 2, "{s}");
    }
}

async fn concurrent_claims_by_several_hosts_leave_exactly_one_holder<J: JournalStore>(j: &J) {
    let claims: Vec<LeaseClaim> = (0..8)
        .map(|i| claim(&format!("host-{i}"), Duration::from_secs(60), false))
        .collect();
    let racers = claims.iter().map(|c| j.mint_fence(S, now(), Some(c)));
    let results = futures_util::future::join_all(racers).await;
    let won: Vec<usize> = (0..8).filter(|i| results[*i].is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    for r in &results {
        assert!(
            matches!(r, Ok(1) | Err(StoreError::Leased { .. })),
            "a loser takes no fence: {r:?}"
        );
    }
    assert_eq!(j.session_info(S).await.unwrap().fence, 1);
    let holder = format!("host-{}", won[0]);
    assert!(
        j.hold_lease(S, &holder, 1, 1_000_000_000, now())
            .await
            .unwrap()
    );
}

// ---- fork prefixes -------------------------------------------------------

/// What a backend stores, counted where it keeps it: (records, prefix
/// spans). A record shared by fork children is stored once. The fork checks
/// use it to show a fork costs the same whatever the prefix's length.
pub trait StoredRows {
    /// (records, prefix spans) stored now.
    fn stored(&self) -> impl std::future::Future<Output = (i64, i64)>;
}

impl StoredRows for MemoryJournal {
    async fn stored(&self) -> (i64, i64) {
        let image = self.disk().durable();
        (image.stored_records() as i64, image.stored_spans() as i64)
    }
}

fn sid(n: u32) -> String {
    format!("sess-{n:024}")
}

/// `n` records in `session` (fence minted), in batches of up to 100.
async fn journal_of<J: JournalStore>(j: &J, session: &str, n: i64) -> Vec<LogRecord> {
    let fence = j.mint_fence(session, 1, None).await.unwrap();
    let mut head = 0;
    while head < n {
        let events: Vec<Event> = (head..n.min(head + 100))
            .map(|i| input(&format!("{session} {i}")))
            .collect();
        let b = AppendBatch {
            session: session.into(),
            ..batch(head, fence, events)
        };
        head += b.events.len() as i64;
        j.append(b).await.unwrap();
    }
    j.read(session, 1, 0).await.unwrap()
}

/// Forks `child` off `parent` at `at` under a freshly minted fence: the
/// FORK marker, as the machine writes it.
async fn fork_at<J: JournalStore>(
    j: &J,
    child: &str,
    parent: &str,
    at: i64,
) -> Result<Vec<LogRecord>, AppendError> {
    let fence = j.mint_fence(child, 2, None).await.unwrap();
    j.fork(fork_batch(child, parent, at, fence)).await
}

fn fork_batch(child: &str, parent: &str, at: i64, fence: i64) -> ForkBatch {
    let events = vec![events::fork_marker(at)];
    ForkBatch {
        child: child.into(),
        parent: parent.into(),
        at_seq: at,
        fence,
        compute_state: agentsessions_machine::journal::projection::batch_compute_state(&events),
        events,
        now_unix_nanos: 3,
    }
}

/// The child's whole journal is the parent's records up to the fork seq,
/// byte for byte, then its own, and it verifies as one chain.
async fn assert_child_of<J: JournalStore>(j: &J, child: &str, parent: &[LogRecord], at: usize) {
    let got = j.read(child, 1, 0).await.unwrap();
    assert!(got.len() > at, "{child}: {} records", got.len());
    assert_eq!(got[..at], parent[..at], "{child}: the shared prefix");
    assert_eq!(got[at].seq, at as i64 + 1, "{child}: the marker follows");
    let prev = parent[..at].last().map_or("", |r| r.content_hash.as_str());
    assert_eq!(
        got[at].prev_hash, prev,
        "{child}: chained from the fork point"
    );
    chain::check_links(&got, 1).expect("the child's links");
    chain::verify(&got).expect("the child's hashes");
    j.verify(child).await.expect("the store verifies the child");
    let head = got.last().unwrap().seq;
    assert_eq!(j.head(child).await.unwrap(), head);
    assert_eq!(j.session_info(child).await.unwrap().last_seq, head);
}

async fn a_fork_child_reads_its_parents_records_and_its_appends_stay_its_own<
    J: JournalStore + StoredRows,
>(
    j: &J,
) {
    let (parent, child) = (sid(1), sid(2));
    let log = journal_of(j, &parent, 5).await;
    let before = j.stored().await;
    let marker = fork_at(j, &child, &parent, 3).await.unwrap();
    assert_eq!(marker.len(), 1, "the store answers with the marker only");
    assert_eq!(
        j.stored().await,
        (before.0 + 1, before.1 + 1),
        "one row, one span"
    );
    assert_child_of(j, &child, &log, 3).await;

    // Ranges across the prefix and the child's own records.
    let part = j.read(&child, 2, 4).await.unwrap();
    assert_eq!(part[..2], log[1..3]);
    assert_eq!(part[2], marker[0]);
    assert_eq!(j.read(&child, 4, 0).await.unwrap(), marker);
    assert_eq!(j.read(&child, 3, 3).await.unwrap(), log[2..3]);

    // The child's appends chain on its marker and never show in the parent.
    let fence = j.session_info(&child).await.unwrap().fence;
    let own = j
        .append(AppendBatch {
            session: child.clone(),
            ..batch(4, fence, vec![input("child only")])
        })
        .await
        .unwrap();
    assert_eq!(own[0].seq, 5);
    assert_ne!(own[0].content_hash, log[4].content_hash);
    assert_eq!(
        j.read(&parent, 1, 0).await.unwrap(),
        log,
        "the parent is untouched"
    );
    j.verify(&child).await.unwrap();
    assert_eq!(j.read(&child, 1, 0).await.unwrap().len(), 5);

    // A child takes its prefix once: a second fork into it is a conflict,
    // and a fork under a superseded fence is fenced.
    assert!(matches!(
        j.fork(fork_batch(&child, &parent, 2, fence)).await,
        Err(AppendError::Conflict { head: 5 })
    ));
    let other = sid(3);
    let stale = j.mint_fence(&other, 4, None).await.unwrap();
    j.mint_fence(&other, 5, None).await.unwrap();
    assert!(matches!(
        j.fork(fork_batch(&other, &parent, 2, stale)).await,
        Err(AppendError::Fenced { .. })
    ));
    // The parent must hold the fork seq.
    assert!(matches!(
        j.fork(fork_batch(&other, &parent, 6, stale + 1)).await,
        Err(AppendError::Failed(StoreError::InvalidArgument(_)))
    ));
    // A fork at 0 shares nothing: the marker starts a chain of its own.
    let empty = fork_at(j, &sid(4), &parent, 0).await.unwrap();
    assert_eq!((empty[0].seq, empty[0].prev_hash.as_str()), (1, ""));
}

async fn a_fork_of_a_fork_reads_through_both_without_copying_either<
    J: JournalStore + StoredRows,
>(
    j: &J,
) {
    let (parent, child, grandchild, cousin) = (sid(1), sid(2), sid(3), sid(4));
    let log = journal_of(j, &parent, 5).await;
    fork_at(j, &child, &parent, 3).await.unwrap();
    let fence = j.session_info(&child).await.unwrap().fence;
    j.append(AppendBatch {
        session: child.clone(),
        ..batch(4, fence, vec![input("c5"), input("c6")])
    })
    .await
    .unwrap();
    let child_log = j.read(&child, 1, 0).await.unwrap();

    let before = j.stored().await;
    fork_at(j, &grandchild, &child, 5).await.unwrap();
    // Flattened: a span of the parent's rows and one of the child's.
    assert_eq!(j.stored().await, (before.0 + 1, before.1 + 2));
    assert_child_of(j, &grandchild, &child_log, 5).await;
    assert_eq!(j.read(&grandchild, 1, 3).await.unwrap(), log[..3]);

    // Forked inside the child's prefix: only the parent's rows are named.
    let before = j.stored().await;
    fork_at(j, &cousin, &child, 2).await.unwrap();
    assert_eq!(j.stored().await, (before.0 + 1, before.1 + 1));
    assert_child_of(j, &cousin, &log, 2).await;
}

async fn a_deleted_parent_lives_on_in_its_children_until_the_last_is_deleted<
    J: JournalStore + StoredRows,
>(
    j: &J,
) {
    let (parent, child, grandchild) = (sid(1), sid(2), sid(3));
    let empty = j.stored().await;
    let log = journal_of(j, &parent, 5).await;
    fork_at(j, &child, &parent, 3).await.unwrap();
    let child_log = j.read(&child, 1, 0).await.unwrap();
    fork_at(j, &grandchild, &child, 4).await.unwrap();
    let grandchild_log = j.read(&grandchild, 1, 0).await.unwrap();
    assert_eq!(j.stored().await, (empty.0 + 5 + 1 + 1, empty.1 + 1 + 2));

    // The parent goes: reads of it return nothing, its children still
    // read and verify, and only the records they share are kept.
    let tombstone = j.delete_session(delete(&parent, 5)).await.unwrap();
    assert_eq!(tombstone.records, 5);
    assert!(j.read(&parent, 1, 0).await.unwrap().is_empty());
    assert_eq!(j.head(&parent).await.unwrap(), 0);
    assert_eq!(j.read(&child, 1, 0).await.unwrap(), child_log);
    assert_eq!(j.read(&grandchild, 1, 0).await.unwrap(), grandchild_log);
    j.verify(&child).await.unwrap();
    j.verify(&grandchild).await.unwrap();
    assert_eq!(j.stored().await, (empty.0 + 3 + 1 + 1, empty.1 + 3));
    assert_child_of(j, &grandchild, &child_log, 4).await;
    // A deleted parent takes no new children.
    assert!(matches!(
        fork_at(j, &sid(9), &parent, 2).await,
        Err(AppendError::Failed(StoreError::SessionDeleted { .. }))
    ));

    // The child goes: the grandchild still names the parent's three
    // records and the child's marker, so those stay.
    j.delete_session(delete(&child, 4)).await.unwrap();
    assert_eq!(j.read(&grandchild, 1, 0).await.unwrap(), grandchild_log);
    j.verify(&grandchild).await.unwrap();
    assert_eq!(j.stored().await, (empty.0 + 3 + 1 + 1, empty.1 + 2));

    // The last child goes: nothing of the three is left.
    j.delete_session(delete(&grandchild, 5)).await.unwrap();
    assert_eq!(j.stored().await, empty, "no orphan records or spans");
    assert_eq!(log.len(), 5);
}

async fn a_fork_writes_the_same_rows_whatever_the_prefix_length<J: JournalStore + StoredRows>(
    j: &J,
) {
    let mut added = Vec::new();
    for (n, (parent, child)) in [(10, (sid(1), sid(2))), (1_000, (sid(3), sid(4)))] {
        let log = journal_of(j, &parent, n).await;
        let before = j.stored().await;
        fork_at(j, &child, &parent, n).await.unwrap();
        let after = j.stored().await;
        added.push((after.0 - before.0, after.1 - before.1));
        assert_child_of(j, &child, &log, n as usize).await;
    }
    assert_eq!(added, [(1, 1), (1, 1)], "one record and one span each");
}

// ---- the tool ledger -------------------------------------------------------

/// The tool ledger's contract ([`crate::ledger`]), on an empty `ledger`:
/// `start` never overwrites, the first finished result wins (synced or not),
/// a started key reads back as started, and `forget` removes one session's
/// keys and nothing else.
pub fn ledger(ledger: &dyn crate::ledger::LedgerStore) {
    use crate::ledger::LedgerEntry;
    use agentsessions_proto::v1::ToolResult;
    let result = |text: &str| ToolResult {
        id: text.into(),
        ..ToolResult::default()
    };
    assert_eq!(ledger.get("s1", "k1").unwrap(), None);
    assert!(ledger.sessions().unwrap().is_empty());
    ledger.start("s1", "k1", "echo").unwrap();
    ledger.start("s1", "k1", "other").unwrap();
    assert_eq!(
        ledger.get("s1", "k1").unwrap(),
        Some(LedgerEntry::Started {
            tool: "echo".into()
        }),
        "a second start leaves the first entry"
    );
    ledger.finish("s1", "k1", "echo", &result("first")).unwrap();
    ledger
        .finish("s1", "k1", "echo", &result("second"))
        .unwrap();
    assert_eq!(
        ledger.get("s1", "k1").unwrap(),
        Some(LedgerEntry::Done {
            tool: "echo".into(),
            result: result("first")
        }),
        "the first finished result wins"
    );
    ledger.start("s1", "k1", "echo").unwrap();
    assert!(matches!(
        ledger.get("s1", "k1").unwrap(),
        Some(LedgerEntry::Done { .. })
    ));
    // A result with no start (a harmless-twice call) lands unsynced, and
    // still loses to one stored before it.
    ledger
        .finish_unsynced("s2", "k1", "get", &result("a"))
        .unwrap();
    ledger
        .finish_unsynced("s2", "k1", "get", &result("b"))
        .unwrap();
    assert_eq!(
        ledger.get("s2", "k1").unwrap(),
        Some(LedgerEntry::Done {
            tool: "get".into(),
            result: result("a")
        })
    );
    ledger.start("s3", "k9", "echo").unwrap();
    assert_eq!(ledger.sessions().unwrap(), ["s1", "s2", "s3"]);
    assert_eq!(ledger.forget("s1").unwrap(), 1);
    assert_eq!(
        ledger.forget("s1").unwrap(),
        0,
        "forgetting twice is harmless"
    );
    assert_eq!(ledger.get("s1", "k1").unwrap(), None);
    assert_eq!(ledger.sessions().unwrap(), ["s2", "s3"]);
}
