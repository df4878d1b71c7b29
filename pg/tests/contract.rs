//! The store contract on PostgreSQL (a throwaway cluster started by
//! `scripts/pg-cluster.sh`; see `support/pg.rs`), each check on a fresh
//! database.

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

use agentsessions_journal::contract;
use agentsessions_pg::PgJournal;

#[tokio::test]
async fn the_postgres_journal_keeps_the_store_contract() {
    // Skipped (loudly) only where no PostgreSQL can be had and this is not CI.
    if pg::fresh_database().await.is_none() {
        return;
    }
    contract::run(|| async {
        let url = pg::fresh_database().await.expect("the cluster is up");
        PgJournal::open(&url, Default::default()).await.unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_postgres_ledger_keeps_the_ledger_contract() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let j = PgJournal::open(&url, Default::default()).await.unwrap();
    let ledger = j.tool_ledger();
    // Its calls block on the runtime, as the executor makes them.
    tokio::task::spawn_blocking(move || contract::ledger(&ledger))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_journal_keeps_the_outbox_contract() {
    if pg::fresh_database().await.is_none() {
        return;
    }
    // Two connections claim at once: `FOR UPDATE SKIP LOCKED` keeps their
    // sets disjoint.
    contract::outbox(|| async {
        let url = pg::fresh_database().await.expect("the cluster is up");
        PgJournal::open(&url, Default::default()).await.unwrap()
    })
    .await;
}
