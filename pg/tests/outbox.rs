//! The notification outbox inside group commits, against a real server:
//! each member's notice rows commit in the group's transaction with its
//! records, a member refused inside the group leaves none, and an append
//! that falls back to the one-append path announces too.

use agentsessions_journal::outbox::{NoticeClaim, NoticeKind, Outbox, event_id};
use agentsessions_journal::{AppendBatch, AppendError, JournalStore};
use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};
use agentsessions_proto::v1::Event;

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

fn batch(session: &str, head: i64, fence: i64, events: Vec<Event>) -> AppendBatch {
    AppendBatch {
        session: session.into(),
        expected_last_seq: head,
        fence,
        events,
        compute_state: None,
        now_unix_nanos: 1_700_000_000_000_000_000 + head,
        release_lease: None,
    }
}

fn input() -> Event {
    events::input("e1", events::text_message("user", "hi"))
}

async fn claimed(j: &PgJournal) -> Vec<(String, NoticeKind)> {
    let claim = NoticeClaim {
        owner: "host".into(),
        now: i64::MAX / 2,
        lease: 1_000_000_000,
        limit: 100,
    };
    let notices = j.claim_notices(claim).await.unwrap();
    notices.into_iter().map(|n| (n.event_id, n.kind)).collect()
}

/// The current-thread runtime runs the committer only once the test task
/// waits, so every append of one `join!` is queued before it takes them:
/// one group.
#[tokio::test]
async fn each_group_member_announces_in_the_groups_transaction_and_a_refused_one_does_not() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let j = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    j.set_outbox(true);
    for s in ["a", "b", "c"] {
        assert_eq!(j.mint_fence(s, 1, None).await.unwrap(), 1);
    }
    j.mint_fence("c", 2, None).await.unwrap();
    let before = j.group_stats();
    let (asked, quiet, late, stale, fresh) = tokio::join!(
        j.append(batch(
            "a",
            0,
            1,
            vec![input(), events::approval_request("e1", "t1")]
        )),
        j.append(batch("b", 0, 1, vec![input()])),
        // Raced the first for the same head: refused inside the group.
        j.append(batch("a", 0, 1, vec![events::error("e1", "late")])),
        // A fence older than the session's: refused inside the group.
        j.append(batch("c", 0, 1, vec![events::error("e1", "stale")])),
        // No session row to lock: the one-append path after the group.
        j.append(batch("d", 0, 1, vec![events::error("e1", "failed")])),
    );
    assert_eq!(asked.unwrap().len(), 2);
    assert_eq!(quiet.unwrap().len(), 1);
    assert!(
        matches!(late, Err(AppendError::Conflict { head: 2 })),
        "{late:?}"
    );
    assert!(
        matches!(stale, Err(AppendError::Fenced { current: 2 })),
        "{stale:?}"
    );
    assert_eq!(fresh.unwrap().len(), 1);
    let after = j.group_stats();
    assert_eq!(after.commits, before.commits + 1, "one group: {after:?}");
    assert_eq!(after.appends, before.appends + 2);
    assert_eq!(
        claimed(&j).await,
        [
            (event_id("a", 2), NoticeKind::ApprovalRequested),
            (event_id("d", 1), NoticeKind::TurnFailed),
        ]
    );
    assert_eq!(j.outbox_stats().await.unwrap().queued, 2);
}

#[tokio::test]
async fn a_group_with_the_outbox_off_announces_nothing() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let j = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    for s in ["a", "b"] {
        j.mint_fence(s, 1, None).await.unwrap();
    }
    let (a, b) = tokio::join!(
        j.append(batch("a", 0, 1, vec![events::approval_request("e1", "t1")])),
        j.append(batch("b", 0, 1, vec![events::error("e1", "x")])),
    );
    a.unwrap();
    b.unwrap();
    assert!(claimed(&j).await.is_empty());
    assert_eq!(j.outbox_stats().await.unwrap().queued, 0);
}

/// Without group commit every append is its own transaction, and announces
/// in it.
#[tokio::test]
async fn a_single_append_announces_in_its_own_transaction() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let options = PgOptions {
        group_commit: None,
        ..PgOptions::default()
    };
    let j = PgJournal::open(&url, options).await.unwrap();
    j.set_outbox(true);
    j.mint_fence("a", 1, None).await.unwrap();
    j.append(batch("a", 0, 1, vec![events::error("e1", "x")]))
        .await
        .unwrap();
    let stale = j
        .append(batch("a", 0, 1, vec![events::error("e1", "y")]))
        .await;
    assert!(
        matches!(stale, Err(AppendError::Conflict { head: 1 })),
        "{stale:?}"
    );
    assert_eq!(
        claimed(&j).await,
        [(event_id("a", 1), NoticeKind::TurnFailed)]
    );
}
