//! The store contract on the in-memory journal (the madsim runs' store),
//! with writes durable after a zero delay.

use std::sync::Arc;
use std::time::Duration;

use agentsessions_journal::contract;
use agentsessions_journal::memory::{Durability, MemoryDisk};

#[tokio::test]
async fn the_memory_journal_keeps_the_store_contract() {
    contract::run(|| async {
        let disk = Arc::new(MemoryDisk::default());
        disk.open(Durability::After(Duration::ZERO))
    })
    .await;
}

#[test]
fn the_memory_ledger_keeps_the_ledger_contract() {
    contract::ledger(&agentsessions_journal::ledger::MemoryLedger::default());
}

#[tokio::test]
async fn the_memory_journal_keeps_the_outbox_contract() {
    contract::outbox(|| async {
        let disk = Arc::new(MemoryDisk::default());
        disk.open(Durability::After(Duration::ZERO))
    })
    .await;
}

#[tokio::test]
async fn the_instant_store_keeps_the_outbox_contract() {
    contract::outbox(|| async {
        agentsessions_journal::memory::InstantStore::new(
            agentsessions_journal::memory::Tables::default(),
            agentsessions_journal::DEFAULT_PROJECT,
        )
    })
    .await;
}
