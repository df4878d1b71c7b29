//! The tool ledger in the shared database: two daemons (two journals, two
//! pools, one database) deduplicate tool calls against the same entries.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentsessions_pg::{PgJournal, PgOptions};
use agentsessions_proto::v1::{ToolCall, ToolResult};
use agentsessions_shells::model::BoxFuture;
use agentsessions_shells::tools::{
    Ask, Interrupt, LedgerEntry, LedgerExecutor, LedgerStore, Tool, ToolContext, ToolError,
    ToolExecutor, ToolRegistry,
};

#[path = "support/pg.rs"]
mod pg;

/// Counts its runs, and the runs told they may be re-drives.
#[derive(Default)]
struct Counting {
    runs: AtomicUsize,
    redrives: AtomicUsize,
}

impl Tool for Counting {
    fn run<'a>(
        &'a self,
        cx: ToolContext<'a>,
        _call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if cx.redrive {
            self.redrives.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async { Ok(ToolResult::default()) })
    }
}

fn call(id: &str, key: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        tool: "count".into(),
        idempotency_key: key.into(),
        ..ToolCall::default()
    }
}

/// One daemon's executor on the database at `url`, over `tool`.
async fn daemon(url: &str, tool: Arc<Counting>) -> (LedgerExecutor, Arc<dyn LedgerStore>) {
    let j = PgJournal::open(url, PgOptions::default()).await.unwrap();
    let ledger: Arc<dyn LedgerStore> = Arc::new(j.tool_ledger());
    let mut registry = ToolRegistry::new();
    registry.register("count", tool).unwrap();
    (LedgerExecutor::with_store(registry, ledger.clone()), ledger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_one_daemon_finished_is_answered_by_another_without_running_again() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let tool = Arc::new(Counting::default());
    let (a, _) = daemon(&url, tool.clone()).await;
    let (b, ledger) = daemon(&url, tool.clone()).await;
    let first = a.execute("s1", &call("c1", "k1")).await.unwrap();
    let again = b.execute("s1", &call("c1", "k1")).await.unwrap();
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1, "executed once");
    assert_eq!(first, again);
    let entry = tokio::task::spawn_blocking(move || ledger.get("s1", "k1").unwrap())
        .await
        .unwrap();
    assert!(matches!(entry, Some(LedgerEntry::Done { tool, .. }) if tool == "count"));
    // Another key is another call.
    b.execute("s1", &call("c2", "k2")).await.unwrap();
    assert_eq!(tool.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_a_crashed_daemon_only_started_is_redriven_carefully_by_another() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let tool = Arc::new(Counting::default());
    let (_, crashed) = daemon(&url, tool.clone()).await;
    // Daemon A recorded the start, then died before the effect's result.
    let started = crashed.clone();
    tokio::task::spawn_blocking(move || started.start("s1", "k1", "count"))
        .await
        .unwrap()
        .unwrap();
    let (b, ledger) = daemon(&url, tool.clone()).await;
    // Reported, not run, until the machine says run it again.
    let c1 = call("c1", "k1");
    assert_eq!(b.execute("s1", &c1).await, Err(ToolError::Unfinished));
    assert_eq!(tool.runs.load(Ordering::SeqCst), 0);
    let again = Ask {
        again: true,
        repeatable: false,
    };
    b.execute_interruptible("s1", &c1, again, Interrupt::never())
        .await
        .unwrap();
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        tool.redrives.load(Ordering::SeqCst),
        1,
        "the tool was told the effect may already have happened"
    );
    let l = ledger.clone();
    let (sessions, forgotten) =
        tokio::task::spawn_blocking(move || (l.sessions().unwrap(), l.forget("s1").unwrap()))
            .await
            .unwrap();
    assert_eq!((sessions, forgotten), (vec!["s1".to_owned()], 1));
    let l = crashed.clone();
    let gone = tokio::task::spawn_blocking(move || l.get("s1", "k1").unwrap())
        .await
        .unwrap();
    assert_eq!(gone, None, "forgotten for every daemon");
}
