//! The notification outbox's contract ([`crate::outbox`]) as one suite any
//! backend runs against itself ([`outbox`]), with real records appended
//! through [`JournalStore::append`]: a committed announcing record has
//! exactly one notice of its kind, a refused append or a store with the
//! outbox off has none, claims are leases that never overlap while live,
//! and settling retries or deletes.
//!
//! The memory store runs it in `journal/tests/contract.rs`, SQLite in
//! `sqlite/tests/contract.rs` and PostgreSQL in `pg/tests/contract.rs`
//! (where two concurrent claims exercise `FOR UPDATE SKIP LOCKED`).

use std::collections::BTreeSet;
use std::future::Future;

use agentsessions_machine::events;
use agentsessions_machine::vocab::HOST_PRINCIPAL;
use agentsessions_proto::v1::event::Body;
use agentsessions_proto::v1::{ApprovalResult, Event, EventKind, IdentityRef, ToolCall};
use agentsessions_proto::wkt::Timestamp;

use super::{S, batch, check, input};
use crate::outbox::{Notice, NoticeClaim, NoticeKind, Outbox, OutboxStats, Settle, event_id};
use crate::{AppendBatch, AppendError, JournalStore};

/// Every check of the outbox contract, by name, in the order [`outbox`]
/// runs them.
pub const OUTBOX_CHECKS: &[&str] = &[
    "a_store_with_the_outbox_off_announces_nothing",
    "each_announcing_record_gets_one_notice_of_its_kind",
    "a_refused_append_announces_nothing",
    "a_claimed_notice_is_skipped_until_its_lease_passes",
    "a_retry_counts_an_attempt_and_waits_and_a_delivery_deletes",
    "claims_honour_their_limit_and_concurrent_claimers_never_share",
];

/// Runs every check of the outbox contract, each against a fresh store
/// from `open` (its outbox off, as every store opens), and panics naming
/// the first that fails.
pub async fn outbox<J, F, Fut>(mut open: F)
where
    J: JournalStore + Outbox,
    F: FnMut() -> Fut,
    Fut: Future<Output = J>,
{
    check(
        "a_store_with_the_outbox_off_announces_nothing",
        a_store_with_the_outbox_off_announces_nothing(&open().await),
    )
    .await;
    check(
        "each_announcing_record_gets_one_notice_of_its_kind",
        each_announcing_record_gets_one_notice_of_its_kind(&open().await),
    )
    .await;
    check(
        "a_refused_append_announces_nothing",
        a_refused_append_announces_nothing(&open().await),
    )
    .await;
    check(
        "a_claimed_notice_is_skipped_until_its_lease_passes",
        a_claimed_notice_is_skipped_until_its_lease_passes(&open().await),
    )
    .await;
    check(
        "a_retry_counts_an_attempt_and_waits_and_a_delivery_deletes",
        a_retry_counts_an_attempt_and_waits_and_a_delivery_deletes(&open().await),
    )
    .await;
    check(
        "claims_honour_their_limit_and_concurrent_claimers_never_share",
        claims_honour_their_limit_and_concurrent_claimers_never_share(&open().await),
    )
    .await;
}

/// Claims start well after every append's `now` (1_000 + head).
const T: i64 = 1_000_000;
/// A lease longer than any check runs in claim time.
const LONG: i64 = 1_000_000_000;

fn claim(owner: &str, now: i64, lease: i64, limit: usize) -> NoticeClaim {
    NoticeClaim {
        owner: owner.into(),
        now,
        lease,
        limit,
    }
}

fn tool_call(id: &str) -> Event {
    let call = ToolCall {
        id: id.into(),
        tool: "echo".into(),
        ..ToolCall::default()
    };
    events::event("e1", EventKind::EventToolCall, Body::Tool(call))
}

fn approval_request(id: &str) -> Event {
    events::approval_request("e1", id)
}

/// An APPROVAL_RESULT for `id` by `principal`.
fn decision(id: &str, approved: bool, principal: &str) -> Event {
    let actor = IdentityRef {
        principal: principal.into(),
        issuer: "contract".into(),
        subject: String::new(),
    };
    let result = ApprovalResult {
        tool_call_id: id.into(),
        approved,
        reason: String::new(),
        request_seq: 2,
    };
    let at = Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    };
    events::approval_result("e1", result, Some(actor), at)
}

/// Appends `events` at the head; the batch it committed.
async fn append<J: JournalStore>(j: &J, head: i64, events: Vec<Event>) -> AppendBatch {
    let b = batch(head, 1, events);
    let n = b.events.len();
    let records = j.append(b.clone()).await.expect("the append commits");
    assert_eq!(records.len(), n);
    b
}

/// The (event id, kind) of each of `notices`, in claim order.
fn kinds(notices: &[Notice]) -> Vec<(String, NoticeKind)> {
    notices
        .iter()
        .map(|n| (n.event_id.clone(), n.kind))
        .collect()
}

async fn claim_all<J: Outbox>(j: &J, owner: &str, now: i64) -> Vec<Notice> {
    j.claim_notices(claim(owner, now, LONG, 100)).await.unwrap()
}

async fn a_store_with_the_outbox_off_announces_nothing<J: JournalStore + Outbox>(j: &J) {
    j.mint_fence(S, 1, None).await.unwrap();
    append(j, 0, vec![tool_call("t1"), approval_request("t1")]).await;
    append(j, 2, vec![events::error("e1", "boom")]).await;
    assert!(claim_all(j, "h1", T).await.is_empty(), "nothing to claim");
    assert_eq!(j.outbox_stats().await.unwrap(), OutboxStats::default());
    // Turned on, it announces from then on, and only that.
    j.set_outbox(true);
    append(j, 3, vec![events::error("e1", "again")]).await;
    let claimed = claim_all(j, "h1", T).await;
    assert_eq!(kinds(&claimed), [(event_id(S, 4), NoticeKind::TurnFailed)]);
}

async fn each_announcing_record_gets_one_notice_of_its_kind<J: JournalStore + Outbox>(j: &J) {
    j.set_outbox(true);
    j.mint_fence(S, 1, None).await.unwrap();
    let b = append(j, 0, vec![tool_call("t1"), approval_request("t1")]).await;
    let claimed = claim_all(j, "h1", T).await;
    assert_eq!(
        claimed,
        [Notice {
            event_id: format!("{S}/2"),
            session: S.into(),
            seq: 2,
            kind: NoticeKind::ApprovalRequested,
            created_at: b.now_unix_nanos,
            attempts: 0,
        }]
    );
    // An ordinary turn announces nothing.
    let ordinary = vec![
        input("hi"),
        events::output("e1", events::assistant_text("hello")),
        events::end_completed("e1"),
    ];
    append(j, 2, ordinary).await;
    assert!(claim_all(j, "h1", T).await.is_empty());
    // The host's denial at a deadline is an expiry; any other decision
    // (a person's denial, the host's approval) is a decision.
    let decisions = vec![
        decision("t1", false, HOST_PRINCIPAL),
        decision("t2", false, "alice"),
        decision("t3", true, HOST_PRINCIPAL),
    ];
    append(j, 5, decisions).await;
    append(j, 8, vec![events::error("e1", "the turn failed")]).await;
    let claimed = claim_all(j, "h1", T).await;
    assert_eq!(
        kinds(&claimed),
        [
            (event_id(S, 6), NoticeKind::ApprovalExpired),
            (event_id(S, 7), NoticeKind::ApprovalDecided),
            (event_id(S, 8), NoticeKind::ApprovalDecided),
            (event_id(S, 9), NoticeKind::TurnFailed),
        ]
    );
    assert!(claimed.iter().all(|n| n.attempts == 0 && n.session == S));
    let stats = j.outbox_stats().await.unwrap();
    assert_eq!(stats.queued, 5, "claimed notices stay queued until settled");
    assert_eq!(stats.oldest_created, Some(b.now_unix_nanos));
}

async fn a_refused_append_announces_nothing<J: JournalStore + Outbox>(j: &J) {
    j.set_outbox(true);
    j.mint_fence(S, 1, None).await.unwrap();
    append(j, 0, vec![input("a")]).await;
    // A stale head: the CAS refuses it.
    let stale = j.append(batch(0, 1, vec![approval_request("t1")])).await;
    assert!(
        matches!(stale, Err(AppendError::Conflict { head: 1 })),
        "{stale:?}"
    );
    // A stale fence: a newer writer took the session.
    j.mint_fence(S, 2, None).await.unwrap();
    let fenced = j.append(batch(1, 1, vec![events::error("e1", "x")])).await;
    assert!(
        matches!(fenced, Err(AppendError::Fenced { current: 2 })),
        "{fenced:?}"
    );
    assert!(
        claim_all(j, "h1", T).await.is_empty(),
        "no notice of a refusal"
    );
    assert_eq!(j.outbox_stats().await.unwrap().queued, 0);
    // The writer holding the fence announces as usual.
    let ok = j.append(batch(1, 2, vec![approval_request("t1")])).await;
    assert_eq!(ok.unwrap()[0].seq, 2);
    let claimed = claim_all(j, "h1", T).await;
    assert_eq!(
        kinds(&claimed),
        [(event_id(S, 2), NoticeKind::ApprovalRequested)]
    );
}

async fn a_claimed_notice_is_skipped_until_its_lease_passes<J: JournalStore + Outbox>(j: &J) {
    j.set_outbox(true);
    j.mint_fence(S, 1, None).await.unwrap();
    append(j, 0, vec![approval_request("t1")]).await;
    let lease = 5_000;
    let first = j.claim_notices(claim("h1", T, lease, 10)).await.unwrap();
    assert_eq!(first.len(), 1);
    let again = j.claim_notices(claim("h2", T + lease - 1, lease, 10)).await;
    assert!(again.unwrap().is_empty(), "a live claim keeps others off");
    let after = j.claim_notices(claim("h2", T + lease, lease, 10)).await;
    let after = after.unwrap();
    assert_eq!(
        after, first,
        "a lapsed claim is taken again, attempts unchanged"
    );
    assert_eq!(after[0].attempts, 0);
    // The first claimer lost it: its retry changes nothing now.
    let retry = Settle::Retry {
        due_at: T,
        error: "late".into(),
    };
    let id = &first[0].event_id;
    assert!(!j.settle_notice("h1", id, retry).await.unwrap());
    let refused = j.claim_notices(claim("", T, lease, 10)).await;
    assert!(refused.is_err(), "a claim names its owner");
    // A restarted owner lets go of what it held: claimable at once, by
    // anyone; another owner's release touches nothing.
    assert_eq!(j.release_claims("h1").await.unwrap(), 0, "h1 holds nothing");
    assert_eq!(j.release_claims("h2").await.unwrap(), 1);
    let taken = j.claim_notices(claim("h3", T + lease, lease, 10)).await;
    assert_eq!(
        taken.unwrap().len(),
        1,
        "released: claimable before the lease lapses"
    );
    assert!(
        j.release_claims("").await.is_err(),
        "a release names its owner"
    );
}

async fn a_retry_counts_an_attempt_and_waits_and_a_delivery_deletes<J: JournalStore + Outbox>(
    j: &J,
) {
    j.set_outbox(true);
    j.mint_fence(S, 1, None).await.unwrap();
    let first = append(j, 0, vec![approval_request("t1")]).await;
    append(j, 1, vec![events::error("e1", "boom")]).await;
    let stats = j.outbox_stats().await.unwrap();
    assert_eq!(
        stats,
        OutboxStats {
            queued: 2,
            oldest_created: Some(first.now_unix_nanos)
        }
    );
    let claimed = j.claim_notices(claim("h1", T, LONG, 1)).await.unwrap();
    let id = claimed[0].event_id.clone();
    assert_eq!(id, event_id(S, 1), "the oldest due first");
    let due = T + 10_000;
    let retry = |error: &str| Settle::Retry {
        due_at: due,
        error: error.into(),
    };
    assert!(
        !j.settle_notice("h2", &id, retry("x")).await.unwrap(),
        "only the claimer retries"
    );
    assert!(j.settle_notice("h1", &id, retry("503")).await.unwrap());
    assert_eq!(
        j.outbox_stats().await.unwrap().queued,
        2,
        "a retry keeps the row"
    );
    // Released, but not due before `due`.
    let early = j
        .claim_notices(claim("h2", due - 1, LONG, 10))
        .await
        .unwrap();
    assert_eq!(kinds(&early), [(event_id(S, 2), NoticeKind::TurnFailed)]);
    let due_now = j.claim_notices(claim("h2", due, LONG, 10)).await.unwrap();
    assert_eq!(due_now.len(), 1);
    assert_eq!(
        (due_now[0].event_id.as_str(), due_now[0].attempts),
        (id.as_str(), 1)
    );
    // Delivered deletes whoever holds the claim.
    assert!(j.settle_notice("h2", &id, Settle::Delivered).await.unwrap());
    assert!(!j.settle_notice("h2", &id, Settle::Delivered).await.unwrap());
    let rest = j.outbox_stats().await.unwrap();
    assert_eq!(rest.queued, 1);
    assert!(rest.oldest_created > Some(first.now_unix_nanos));
    let other = event_id(S, 2);
    assert!(
        j.settle_notice("h1", &other, Settle::Delivered)
            .await
            .unwrap()
    );
    assert_eq!(j.outbox_stats().await.unwrap(), OutboxStats::default());
    assert!(
        j.claim_notices(claim("h3", LONG * 10, LONG, 10))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn claims_honour_their_limit_and_concurrent_claimers_never_share<J: JournalStore + Outbox>(
    j: &J,
) {
    j.set_outbox(true);
    j.mint_fence(S, 1, None).await.unwrap();
    let failures = (0..10)
        .map(|i| events::error("e1", &format!("f{i}")))
        .collect();
    append(j, 0, failures).await;
    let ids = |n: &[Notice]| n.iter().map(|n| n.event_id.clone()).collect::<Vec<_>>();
    let three = j.claim_notices(claim("h0", T, LONG, 3)).await.unwrap();
    assert_eq!(three.len(), 3, "the limit");
    let mut sorted = ids(&three);
    sorted.sort();
    assert_eq!(ids(&three), sorted, "in (due_at, event_id) order");
    let (a, b) = futures_util::future::join(
        j.claim_notices(claim("h1", T, LONG, 4)),
        j.claim_notices(claim("h2", T, LONG, 4)),
    )
    .await;
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.len() <= 4 && b.len() <= 4);
    let rest = claim_all(j, "h3", T).await;
    let mut seen = BTreeSet::new();
    for id in [three, a, b, rest].iter().flat_map(|n| ids(n)) {
        assert!(seen.insert(id.clone()), "{id} claimed twice while claimed");
    }
    assert_eq!(seen.len(), 10, "every notice claimed once");
}
