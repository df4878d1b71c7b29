//! The notification outbox inside SQLite's group commits: each job's
//! notice rows commit in the batch's transaction with its records, a job
//! refused inside the batch leaves none, and an append committed in place
//! announces too.

use agentsessions_journal::outbox::{NoticeClaim, NoticeKind, Outbox, event_id};
use agentsessions_journal::{AppendBatch, AppendError, JournalStore};
use agentsessions_machine::events;
use agentsessions_proto::v1::Event;
use agentsessions_sqlite::{SqliteJournal, SqliteOptions};

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

async fn claimed(j: &SqliteJournal) -> Vec<(String, NoticeKind)> {
    let claim = NoticeClaim {
        owner: "host".into(),
        now: i64::MAX / 2,
        lease: 1_000_000_000,
        limit: 100,
    };
    let notices = j.claim_notices(claim).await.unwrap();
    notices.into_iter().map(|n| (n.event_id, n.kind)).collect()
}

fn open(dir: &tempfile::TempDir) -> SqliteJournal {
    SqliteJournal::open(dir.path().join("journal.db"), SqliteOptions::default()).unwrap()
}

#[tokio::test]
async fn each_batch_member_announces_in_the_batchs_transaction_and_a_refused_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir);
    j.set_outbox(true);
    for s in ["a", "b", "c"] {
        assert_eq!(j.mint_fence(s, 1, None).await.unwrap(), 1);
    }
    j.mint_fence("c", 2, None).await.unwrap();
    let hold = j.hold_writer();
    let before = j.writer_stats();
    // Queued in call order while the writer is parked: one batch.
    let asked = j.append(batch(
        "a",
        0,
        1,
        vec![input(), events::approval_request("e1", "t1")],
    ));
    let quiet = j.append(batch("b", 0, 1, vec![input()]));
    let late = j.append(batch("a", 0, 1, vec![events::error("e1", "late")]));
    let stale = j.append(batch("c", 0, 1, vec![events::error("e1", "stale")]));
    let failed = j.append(batch("b", 1, 1, vec![events::error("e1", "failed")]));
    drop(hold);
    let (asked, quiet, late, stale, failed) = tokio::join!(asked, quiet, late, stale, failed);
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
    assert_eq!(failed.unwrap()[0].seq, 2);
    let after = j.writer_stats();
    assert_eq!(
        after.batches,
        before.batches + 2,
        "the hold, then one batch"
    );
    assert!(after.largest_batch >= 5, "{after:?}");
    assert_eq!(
        claimed(&j).await,
        [
            (event_id("a", 2), NoticeKind::ApprovalRequested),
            (event_id("b", 2), NoticeKind::TurnFailed),
        ]
    );
}

#[tokio::test]
async fn an_append_committed_in_place_announces_and_an_outbox_left_off_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir);
    j.mint_fence("a", 1, None).await.unwrap();
    j.append(batch("a", 0, 1, vec![events::error("e1", "off")]))
        .await
        .unwrap();
    assert!(claimed(&j).await.is_empty(), "the outbox is off by default");
    j.set_outbox(true);
    let now = j.try_append_now(batch("a", 1, 1, vec![events::error("e1", "on")]));
    let records = now.expect("the writer is idle").unwrap();
    assert_eq!(records[0].seq, 2);
    assert_eq!(j.writer_stats().jobs_in_place, 1);
    assert_eq!(
        claimed(&j).await,
        [(event_id("a", 2), NoticeKind::TurnFailed)]
    );
    // The table is created on open, whatever the setting: a reopened file
    // keeps what was queued.
    drop(j);
    let j = open(&dir);
    assert_eq!(j.outbox_stats().await.unwrap().queued, 1);
}
