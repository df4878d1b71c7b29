//! A statement blocked by another client's lock, against a real server:
//! it is canceled at the statement timeout and answered `Busy` (clients
//! get UNAVAILABLE; the store is not down), other sessions are served
//! meanwhile, and the same write lands once the lock is gone.

use std::time::Duration;

use agentsessions_journal::{AppendBatch, AppendError, JournalStore, StoreError};
use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

fn batch(session: &str, head: i64) -> AppendBatch {
    AppendBatch {
        session: session.into(),
        expected_last_seq: head,
        fence: 1,
        events: vec![events::input(
            &format!("{session}-{head}"),
            events::text_message("user", "hi"),
        )],
        compute_state: None,
        now_unix_nanos: 1_700_000_000_000_000_000 + head,
        release_lease: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_blocked_past_the_statement_timeout_is_busy_and_the_store_serves_on() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let options = PgOptions {
        statement_timeout: Some(Duration::from_millis(500)),
        ..PgOptions::default()
    };
    let j = PgJournal::open(&url, options).await.unwrap();
    for s in ["held", "free"] {
        j.mint_fence(s, 1, None).await.unwrap();
        j.append(batch(s, 0)).await.unwrap();
    }

    // Another client takes the session's row and keeps it.
    let (other, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    other
        .batch_execute("BEGIN; SELECT 1 FROM sessions WHERE session = 'held' FOR UPDATE")
        .await
        .unwrap();

    let blocked = j.append(batch("held", 1)).await;
    match &blocked {
        Err(AppendError::Failed(e @ StoreError::Busy(_))) => {
            assert!(e.is_retryable() && !e.is_transient(), "busy, not down");
        }
        other => panic!("a write past the statement timeout: {other:?}"),
    }
    assert_eq!(j.head("held").await.unwrap(), 1, "nothing was written");
    j.append(batch("free", 1)).await.unwrap();

    other.batch_execute("ROLLBACK").await.unwrap();
    let landed = j.append(batch("held", 1)).await.unwrap();
    assert_eq!(landed[0].seq, 2);
    j.verify("held").await.unwrap();
}
