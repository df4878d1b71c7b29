//! Writes whose COMMIT answer was lost, against a real server: the store
//! reads the session back before anyone is answered. A write that landed
//! is answered with its records (never "failed" for what committed); one
//! that did not is `Unavailable`, and its retry writes it once. Both for
//! every member of a group commit and for a fork.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentsessions_journal::{AppendBatch, AppendError, ForkBatch, JournalStore, StoreError};
use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

fn batch(session: &str, head: i64, text: &str) -> AppendBatch {
    AppendBatch {
        session: session.into(),
        expected_last_seq: head,
        fence: 1,
        events: vec![events::input(
            &format!("{session}-{head}"),
            events::text_message("user", text),
        )],
        compute_state: None,
        now_unix_nanos: 1_700_000_000_000_000_000 + head,
        release_lease: None,
    }
}

async fn journal() -> Option<Arc<PgJournal>> {
    let url = pg::fresh_database().await?;
    Some(Arc::new(
        PgJournal::open(&url, PgOptions::default()).await.unwrap(),
    ))
}

/// Counts what reconciliations found.
#[derive(Debug, Default)]
struct Found {
    committed: AtomicUsize,
    not_committed: AtomicUsize,
}

impl agentsessions_journal::CommitMeter for Found {
    fn committed(&self, _: usize, _: Duration, _: bool) {}
    fn appended(&self, _: Duration) {}
    fn commit_unknown(&self, outcome: agentsessions_journal::UnknownOutcome) {
        use agentsessions_journal::UnknownOutcome::*;
        match outcome {
            Committed => self.committed.fetch_add(1, Ordering::SeqCst),
            NotCommitted => self.not_committed.fetch_add(1, Ordering::SeqCst),
            Unreadable => panic!("the server was up"),
        };
    }
}

fn unavailable(r: &Result<Vec<agentsessions_proto::v1::LogRecord>, AppendError>) -> bool {
    matches!(r, Err(AppendError::Failed(StoreError::Unavailable(_))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_group_whose_commit_answer_was_lost_is_answered_with_its_records() {
    let Some(j) = journal().await else {
        return;
    };
    const N: usize = 8;
    let found = Arc::new(Found::default());
    j.set_meter(found.clone());
    for s in 0..N {
        j.mint_fence(&format!("s{s}"), 1, None).await.unwrap();
        j.append(batch(&format!("s{s}"), 0, "first")).await.unwrap();
    }
    // Every group of this burst loses its answer, however they are cut.
    j.plant_lost_commit_answers(true, N as u32);
    let answers = futures_util::future::join_all(
        (0..N).map(|s| j.append(batch(&format!("s{s}"), 1, "second"))),
    )
    .await;
    for (s, answer) in answers.into_iter().enumerate() {
        let records = answer.unwrap_or_else(|e| panic!("s{s}: committed, yet {e:?}"));
        let stored = j.read(&format!("s{s}"), 2, 2).await.unwrap();
        assert_eq!(records, stored, "s{s}: answered with the stored records");
        assert_eq!(j.head(&format!("s{s}")).await.unwrap(), 2);
    }
    assert_eq!(found.committed.load(Ordering::SeqCst), N, "each counted");
    assert_eq!(found.not_committed.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_never_reached_commit_is_unavailable_and_its_retry_lands_once() {
    let Some(j) = journal().await else {
        return;
    };
    let found = Arc::new(Found::default());
    j.set_meter(found.clone());
    j.mint_fence("s", 1, None).await.unwrap();
    j.append(batch("s", 0, "first")).await.unwrap();
    j.plant_lost_commit_answers(false, 1);
    let lost = j.append(batch("s", 1, "second")).await;
    assert!(unavailable(&lost), "{lost:?}");
    assert_eq!(j.head("s").await.unwrap(), 1, "nothing was written");
    let retried = j.append(batch("s", 1, "second")).await.unwrap();
    assert_eq!(retried[0].seq, 2);
    j.verify("s").await.unwrap();
    assert_eq!(found.not_committed.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_commit_answer_was_lost_is_reconciled_both_ways() {
    let Some(j) = journal().await else {
        return;
    };
    j.mint_fence("parent", 1, None).await.unwrap();
    j.append(batch("parent", 0, "a")).await.unwrap();
    j.append(batch("parent", 1, "b")).await.unwrap();
    let fork = |child: &str| ForkBatch {
        child: child.into(),
        parent: "parent".into(),
        at_seq: 2,
        fence: 1,
        events: vec![events::input("fork", events::text_message("user", "fork"))],
        compute_state: None,
        now_unix_nanos: 1_700_000_000_000_000_100,
    };
    for (child, committed) in [("landed", true), ("lost", false)] {
        j.mint_fence(child, 1, None).await.unwrap();
        j.plant_lost_commit_answers(committed, 1);
        let answer = j.fork(fork(child)).await;
        if committed {
            let records = answer.unwrap();
            assert_eq!(records, j.read(child, 3, 3).await.unwrap());
        } else {
            assert!(unavailable(&answer), "{answer:?}");
            assert_eq!(j.head(child).await.unwrap(), 0, "nothing was written");
            j.fork(fork(child)).await.unwrap();
        }
        assert_eq!(j.head(child).await.unwrap(), 3);
        j.verify(child).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_mint_whose_commit_answer_was_lost_is_read_back_with_its_lease() {
    let Some(j) = journal().await else {
        return;
    };
    let found = Arc::new(Found::default());
    j.set_meter(found.clone());
    let claim = agentsessions_journal::LeaseClaim {
        owner: "host-a".into(),
        ttl: 60_000_000_000,
        force: false,
    };
    assert_eq!(j.mint_fence("s", 1, Some(&claim)).await.unwrap(), 1);
    j.plant_lost_commit_answers(true, 1);
    assert_eq!(
        j.mint_fence("s", 2, Some(&claim)).await.unwrap(),
        2,
        "the minted fence, read back"
    );
    assert_eq!(found.committed.load(Ordering::SeqCst), 1);
    // The lease is host-a's at that fence: another host is refused.
    let other = agentsessions_journal::LeaseClaim {
        owner: "host-b".into(),
        ..claim.clone()
    };
    assert!(matches!(
        j.mint_fence("s", 3, Some(&other)).await,
        Err(StoreError::Leased { .. })
    ));
    assert_eq!(j.mint_fence("s", 4, Some(&claim)).await.unwrap(), 3);
}
