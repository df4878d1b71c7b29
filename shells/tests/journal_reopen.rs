//! `journal::reopen::Reopening` over a real SQLite journal whose commit
//! reaches the disk but reports failure (an fsync error after the write):
//! the handle goes out of service at once, calls answer UNAVAILABLE without
//! touching it, health follows, and the reopened handle reads back what the
//! "failed" commit really wrote instead of assuming either way.

use std::sync::Arc;
use std::time::Duration;

use agentsessions_shells::journal::reopen::{Backoff, Opener, Reopening};
use agentsessions_shells::journal::sqlite::{Faults, SqliteJournal, SqliteOptions};
use agentsessions_shells::journal::{AppendError, JournalStore as _, StoreError};

mod common;
use common::{TempDb, batch, input, open_with};

fn fast() -> Backoff {
    Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(400),
        settle: Duration::from_secs(30),
    }
}

fn reopener(
    path: std::path::PathBuf,
    opens: Arc<std::sync::atomic::AtomicUsize>,
) -> Opener<SqliteJournal> {
    Arc::new(move || {
        let path = path.clone();
        opens.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move { SqliteJournal::open(&path, SqliteOptions::default()) })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_with_unknown_outcome_takes_the_store_down_until_it_reopens() {
    let db = TempDb::new();
    let faulty = open_with(
        &db.path(),
        SqliteOptions {
            faults: Faults {
                fail_commit_after: Some(1),
            },
            ..Default::default()
        },
    );
    let opens = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let store = Reopening::new(faulty, reopener(db.path(), opens.clone()), fast());
    let mut health = store.health();
    assert!(*health.borrow_and_update(), "up at first");

    let fence = store.mint_fence("s", 1, None).await.unwrap();
    let failed = store.append(batch("s", 0, fence, vec![input("a")])).await;
    assert!(
        matches!(
            failed,
            Err(AppendError::Failed(StoreError::CommitFailed { .. }))
        ),
        "{failed:?}"
    );
    assert!(!*health.borrow(), "down from the failure on");
    assert!(
        matches!(store.head("s").await, Err(StoreError::Unavailable(_))),
        "calls answer at once while down"
    );

    tokio::time::timeout(Duration::from_secs(10), health.wait_for(|up| *up))
        .await
        .expect("reopened within 10 s")
        .unwrap();
    assert_eq!(opens.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The commit did reach the disk: the fresh handle says so.
    assert_eq!(store.head("s").await.unwrap(), 1);
    let more = store
        .append(batch("s", 1, fence, vec![input("b")]))
        .await
        .unwrap();
    assert_eq!(more[0].seq, 2);
    store.verify("s").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_bad_requests_leave_the_store_up() {
    let db = TempDb::new();
    let opens = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let store = Reopening::new(db.open(), reopener(db.path(), opens.clone()), fast());
    let fence = store.mint_fence("s", 1, None).await.unwrap();
    store
        .append(batch("s", 0, fence, vec![input("a")]))
        .await
        .unwrap();
    let conflict = store.append(batch("s", 0, fence, vec![input("b")])).await;
    assert!(matches!(conflict, Err(AppendError::Conflict { head: 1 })));
    let missing = store.session_info("nope").await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound { .. })));
    assert!(*store.health().borrow(), "contention is not an outage");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        opens.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no reopen"
    );
}
