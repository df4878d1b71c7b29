//! The store contract on SQLite, each check on a fresh file.

use agentsessions_journal::contract;
use agentsessions_sqlite::{SqliteJournal, SqliteOptions};

#[tokio::test]
async fn the_sqlite_journal_keeps_the_store_contract() {
    // Each check's store is dropped before its directory.
    let mut dirs = Vec::new();
    contract::run(|| {
        let dir = tempfile::tempdir().unwrap();
        let j = SqliteJournal::open(dir.path().join("journal.db"), SqliteOptions::default());
        dirs.push(dir);
        async move { j.unwrap() }
    })
    .await;
}

#[test]
fn the_sqlite_ledger_keeps_the_ledger_contract() {
    contract::ledger(&agentsessions_sqlite::ledger::ToolLedger::open_in_memory().unwrap());
}

#[tokio::test]
async fn the_sqlite_journal_keeps_the_outbox_contract() {
    let mut dirs = Vec::new();
    contract::outbox(|| {
        let dir = tempfile::tempdir().unwrap();
        let j = SqliteJournal::open(dir.path().join("journal.db"), SqliteOptions::default());
        dirs.push(dir);
        async move { j.unwrap() }
    })
    .await;
}
