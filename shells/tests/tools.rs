//! Tool execution: registry lookup, ledger dedup across reopen, the
//! exactly-once `append_note` across a simulated crash, and interrupts (a
//! canceled turn stops an interruptible tool, whose key is then finished
//! with the cancellation receipt; other tools run to completion).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentsessions_machine::vocab::{Outcome, ToolFailure};
use agentsessions_proto::v1::{ToolCall, ToolResult};
use agentsessions_shells::model::BoxFuture;
use agentsessions_shells::tools::{
    AppendNote, Ask, Interrupt, LedgerEntry, LedgerExecutor, LedgerStore as _, Tool, ToolContext,
    ToolError, ToolExecutor, ToolLedger, ToolRegistry, interrupted, tool_outcome,
};
use serde_json::{Value, json};

/// Counts its runs and returns the count, so a re-run is visible.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Tool for Counting {
    fn run<'a>(
        &'a self,
        _cx: ToolContext<'a>,
        _call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            Ok(ToolResult {
                output: Some(struct_of(json!({"run": n as f64}))),
                ..ToolResult::default()
            })
        })
    }
}

impl Counting {
    fn runs(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Counts its runs and answers only once `open` is set (never, unless a
/// test sets it); says whether it may be interrupted.
struct Slow {
    runs: AtomicUsize,
    dropped: Arc<AtomicUsize>,
    interruptible: bool,
    open: Arc<tokio::sync::Notify>,
}

impl Slow {
    fn new(interruptible: bool) -> Arc<Self> {
        Arc::new(Self {
            runs: AtomicUsize::new(0),
            dropped: Arc::default(),
            interruptible,
            open: Arc::default(),
        })
    }
}

/// Counts the runs dropped before they answered.
struct DropCount(Arc<AtomicUsize>, bool);

impl Drop for DropCount {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Tool for Slow {
    fn run<'a>(
        &'a self,
        _cx: ToolContext<'a>,
        _call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let mut guard = DropCount(self.dropped.clone(), false);
            self.open.notified().await;
            guard.1 = true;
            Ok(ToolResult::default())
        })
    }

    fn interruptible(&self) -> bool {
        self.interruptible
    }
}

fn struct_of(v: Value) -> pbjson_types::Struct {
    serde_json::from_value(v).unwrap()
}

fn call(id: &str, tool: &str, key: &str, args: Option<Value>) -> ToolCall {
    ToolCall {
        id: id.into(),
        tool: tool.into(),
        args: args.map(struct_of),
        idempotency_key: key.into(),
        ..ToolCall::default()
    }
}

fn note(id: &str, key: &str, text: &str) -> ToolCall {
    call(id, "append_note", key, Some(json!({"text": text})))
}

struct World {
    _tmp: tempfile::TempDir,
    ledger_path: PathBuf,
    notes: PathBuf,
    counting: Arc<Counting>,
}

impl World {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let ledger_path = ToolLedger::path_for_journal(&tmp.path().join("journal.db"));
        let notes = tmp.path().join("notes");
        Self {
            _tmp: tmp,
            ledger_path,
            notes,
            counting: Arc::default(),
        }
    }

    /// A fresh executor over the on-disk ledger, as after a restart.
    fn executor(&self) -> LedgerExecutor {
        let mut registry = ToolRegistry::with_builtins(&self.notes);
        registry.register("count", self.counting.clone()).unwrap();
        LedgerExecutor::new(registry, ToolLedger::open(&self.ledger_path).unwrap())
    }

    fn notes_of(&self, session: &str) -> String {
        std::fs::read_to_string(self.notes.join(format!("{session}.notes"))).unwrap_or_default()
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn dedup_within_a_process() {
    let w = World::new();
    let ex = w.executor();
    let first = ex
        .execute("s1", &call("c1", "count", "k1", None))
        .await
        .unwrap();
    let again = ex
        .execute("s1", &call("c1", "count", "k1", None))
        .await
        .unwrap();
    assert_eq!(w.counting.runs(), 1);
    assert_eq!(first, again);
    assert_eq!(first.id, "c1");
    ex.execute("s1", &call("c2", "count", "k2", None))
        .await
        .unwrap();
    assert_eq!(w.counting.runs(), 2);
}

#[tokio::test]
async fn concurrent_deliveries_of_one_key_run_once() {
    let w = World::new();
    let ex = w.executor();
    let c = call("c1", "count", "k1", None);
    let (a, b) = tokio::join!(ex.execute("s1", &c), ex.execute("s1", &c));
    assert_eq!(a.unwrap(), b.unwrap());
    assert_eq!(w.counting.runs(), 1);
}

#[tokio::test]
async fn dedup_survives_reopen() {
    let w = World::new();
    let first = {
        let ex = w.executor();
        ex.execute("s1", &call("c1", "count", "k1", None))
            .await
            .unwrap()
    };
    let ex = w.executor();
    let again = ex
        .execute("s1", &call("c1", "count", "k1", None))
        .await
        .unwrap();
    assert_eq!(w.counting.runs(), 1);
    assert_eq!(first, again);
    assert!(matches!(
        ex.ledger().get("s1", "k1").unwrap(),
        Some(LedgerEntry::Done { tool, .. }) if tool == "count"
    ));
}

#[tokio::test]
async fn different_sessions_with_the_same_key_are_two_effects() {
    let w = World::new();
    let ex = w.executor();
    ex.execute("s1", &call("c", "count", "k", None))
        .await
        .unwrap();
    ex.execute("s2", &call("c", "count", "k", None))
        .await
        .unwrap();
    assert_eq!(w.counting.runs(), 2);
    ex.execute("s1", &note("c", "k2", "one")).await.unwrap();
    ex.execute("s2", &note("c", "k2", "two")).await.unwrap();
    assert_eq!(w.notes_of("s1"), "k2\tone\n");
    assert_eq!(w.notes_of("s2"), "k2\ttwo\n");
}

#[tokio::test]
async fn append_note_appends_once_per_key() {
    let w = World::new();
    let ex = w.executor();
    let r = ex.execute("s1", &note("c1", "k1", "hello")).await.unwrap();
    assert!(!r.is_error);
    assert_eq!(r.id, "c1");
    ex.execute("s1", &note("c1", "k1", "hello")).await.unwrap();
    ex.execute("s1", &note("c2", "k2", "multi\nline\ttext\\"))
        .await
        .unwrap();
    drop(ex);
    w.executor()
        .execute("s1", &note("c1", "k1", "hello"))
        .await
        .unwrap();
    assert_eq!(w.notes_of("s1"), "k1\thello\nk2\tmulti\\nline\\ttext\\\\\n");
}

/// The crash cuts of one `append_note`, each simulated by writing the ledger
/// row and the notes file as the crash would have left them.
#[tokio::test]
async fn append_note_exactly_once_after_a_crash_between_started_and_done() {
    let line = AppendNote::line("k1", "hello");
    let cases = [
        // Crashed after the append, before "done".
        ("after-append", line.clone()),
        // Crashed after "started", before the append.
        ("before-append", String::new()),
        // Crashed in the middle of the write: a torn tail.
        ("torn", "k0\tearlier\nk1\thel".to_owned()),
    ];
    for (name, on_disk) in cases {
        let w = World::new();
        {
            let ledger = ToolLedger::open(&w.ledger_path).unwrap();
            ledger.start("s1", "k1", "append_note").unwrap();
        }
        if !on_disk.is_empty() {
            write(&w.notes.join("s1.notes"), &on_disk);
        }
        let ex = w.executor();
        let c = note("c1", "k1", "hello");
        // Reported, not run, until the machine says run it again (a
        // built-in may: it checks for its own earlier effect).
        assert_eq!(ex.execute("s1", &c).await, Err(ToolError::Unfinished));
        let r = ex
            .execute_interruptible(
                "s1",
                &c,
                Ask {
                    again: true,
                    repeatable: false,
                },
                Interrupt::never(),
            )
            .await
            .unwrap();
        let want = match name {
            "torn" => format!("k0\tearlier\n{line}"),
            _ => line.clone(),
        };
        assert_eq!(w.notes_of("s1"), want, "{name}");
        assert!(
            matches!(ex.ledger().get("s1", "k1").unwrap(), Some(LedgerEntry::Done { result, .. }) if result == r),
            "{name}"
        );
        // And a further delivery changes nothing.
        ex.execute("s1", &note("c1", "k1", "hello")).await.unwrap();
        assert_eq!(w.notes_of("s1"), want, "{name}");
    }
}

#[tokio::test]
async fn unknown_tool_is_a_typed_error_and_records_nothing() {
    let w = World::new();
    let ex = w.executor();
    let err = ex
        .execute("s1", &call("c1", "nope", "k1", None))
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::UnknownTool("nope".into()));
    assert_eq!(ex.ledger().get("s1", "k1").unwrap(), None);
    let long = "n".repeat(500);
    let err = ex
        .execute("s1", &call("c1", &long, "k1", None))
        .await
        .unwrap_err();
    assert!(err.to_string().len() < 100);
    assert!(matches!(
        tool_outcome(Err(err)),
        Outcome::Tool(Err(ToolFailure::Error(s))) if s.starts_with("tools: unknown tool: nnn")
    ));
}

#[tokio::test]
async fn missing_or_invalid_args_are_typed_errors() {
    let w = World::new();
    let ex = w.executor();
    let cases = [
        (None, "missing text"),
        (Some(json!({})), "missing text"),
        (Some(json!({"text": 42.0})), "text must be a string"),
        (
            Some(json!({"text": {"secret": "payload"}})),
            "text must be a string",
        ),
        (Some(json!({"text": null})), "text must be a string"),
    ];
    for (i, (args, reason)) in cases.into_iter().enumerate() {
        let key = format!("k{i}");
        let err = ex
            .execute("s1", &call("c", "append_note", &key, args))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ToolError::InvalidArgs {
                tool: "append_note",
                reason
            }
        );
        assert!(!err.to_outcome_string().contains("payload"));
    }
    assert_eq!(w.notes_of("s1"), "");
    // The failed run left "started": the key is reported unfinished, and
    // runs with good args once the machine says run it again.
    let good = note("c", "k0", "fine");
    assert_eq!(ex.execute("s1", &good).await, Err(ToolError::Unfinished));
    ex.execute_interruptible(
        "s1",
        &good,
        Ask {
            again: true,
            repeatable: false,
        },
        Interrupt::never(),
    )
    .await
    .unwrap();
    assert_eq!(w.notes_of("s1"), "k0\tfine\n");
}

#[tokio::test]
async fn refusals_before_any_effect() {
    let w = World::new();
    let ex = w.executor();
    let err = ex.execute("s1", &note("c", "", "x")).await.unwrap_err();
    assert_eq!(err, ToolError::MissingIdempotencyKey);
    for session in ["../up", "", ".hidden", "a/b"] {
        let err = ex.execute(session, &note("c", "k", "x")).await.unwrap_err();
        assert_eq!(err, ToolError::InvalidSession, "{session:?}");
    }
    ex.execute("s1", &call("c", "count", "k", None))
        .await
        .unwrap();
    let err = ex.execute("s1", &note("c", "k", "x")).await.unwrap_err();
    assert_eq!(err, ToolError::KeyConflict);
    assert_eq!(w.notes_of("s1"), "");
}

#[tokio::test]
async fn echo_args_returns_its_args() {
    let w = World::new();
    let ex = w.executor();
    let args = json!({"a": 1.0, "b": ["x", true]});
    let r = ex
        .execute("s1", &call("c9", "echo_args", "k", Some(args.clone())))
        .await
        .unwrap();
    assert_eq!(r.id, "c9");
    assert_eq!(r.output, Some(struct_of(args)));
    let r = ex
        .execute("s1", &call("c9", "echo_args", "k2", None))
        .await
        .unwrap();
    assert_eq!(r.output, Some(pbjson_types::Struct::default()));
}

#[test]
fn registry_refuses_duplicates_and_ledger_path_sits_beside_the_journal() {
    let mut r = ToolRegistry::with_builtins("/nonexistent");
    assert_eq!(r.names().collect::<Vec<_>>(), ["append_note", "echo_args"]);
    let err = r
        .register("echo_args", Arc::new(Counting::default()))
        .unwrap_err();
    assert_eq!(err, ToolError::DuplicateTool("echo_args".into()));
    assert_eq!(
        ToolLedger::path_for_journal(Path::new("/d/agentsessions.db")),
        Path::new("/d/agentsessions.db.tools.db")
    );
}

#[test]
fn ledger_keeps_the_first_result() {
    let ledger = ToolLedger::open_in_memory().unwrap();
    assert_eq!(ledger.get("s", "k").unwrap(), None);
    ledger.start("s", "k", "t").unwrap();
    let first = ToolResult {
        id: "1".into(),
        ..ToolResult::default()
    };
    let second = ToolResult {
        id: "2".into(),
        ..ToolResult::default()
    };
    ledger.finish("s", "k", "t", &first).unwrap();
    ledger.finish("s", "k", "t", &second).unwrap();
    ledger.start("s", "k", "t").unwrap();
    assert_eq!(
        ledger.get("s", "k").unwrap(),
        Some(LedgerEntry::Done {
            tool: "t".into(),
            result: first
        })
    );
}

#[tokio::test]
async fn an_interrupted_call_is_dropped_and_its_key_answers_the_cancellation_receipt() {
    let slow = Slow::new(true);
    let mut registry = ToolRegistry::new();
    registry.register("slow", slow.clone()).unwrap();
    let ledger = Arc::new(ToolLedger::open_in_memory().unwrap());
    let ex = LedgerExecutor::with_store(registry, ledger.clone());
    let c = call("c1", "slow", "k1", None);
    let (interrupter, interrupt) = Interrupt::pair();
    let running = {
        let (ex, c) = (ex.clone(), c.clone());
        tokio::spawn(async move {
            ex.execute_interruptible("s1", &c, Ask::default(), interrupt)
                .await
        })
    };
    while slow.runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    interrupter.fire();
    let receipt = running.await.unwrap().unwrap();
    assert_eq!(receipt, interrupted(&c));
    assert!(receipt.is_error && receipt.error.contains("outcome is unknown"));
    assert_eq!(
        slow.dropped.load(Ordering::SeqCst),
        1,
        "the run was dropped"
    );
    // The receipt is the key's answer: the tool is never asked again.
    assert_eq!(
        ledger.get("s1", "k1").unwrap(),
        Some(LedgerEntry::Done {
            tool: "slow".into(),
            result: receipt.clone()
        })
    );
    assert_eq!(ex.execute("s1", &c).await.unwrap(), receipt);
    assert_eq!(slow.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_interrupt_fired_before_the_call_starts_never_runs_it() {
    let slow = Slow::new(true);
    let mut registry = ToolRegistry::new();
    registry.register("slow", slow.clone()).unwrap();
    let ex = LedgerExecutor::with_store(registry, Arc::new(ToolLedger::open_in_memory().unwrap()));
    let c = call("c1", "slow", "k1", None);
    let (interrupter, interrupt) = Interrupt::pair();
    interrupter.fire();
    drop(interrupter);
    let receipt = ex
        .execute_interruptible("s1", &c, Ask::default(), interrupt)
        .await
        .unwrap();
    assert_eq!(receipt, interrupted(&c));
    assert_eq!(slow.runs.load(Ordering::SeqCst), 0, "never started");
}

#[tokio::test]
async fn a_tool_that_is_not_interruptible_runs_to_completion() {
    let slow = Slow::new(false);
    let mut registry = ToolRegistry::new();
    registry.register("slow", slow.clone()).unwrap();
    let ex = LedgerExecutor::with_store(registry, Arc::new(ToolLedger::open_in_memory().unwrap()));
    let c = call("c1", "slow", "k1", None);
    let (interrupter, interrupt) = Interrupt::pair();
    let running = {
        let (ex, c) = (ex.clone(), c.clone());
        tokio::spawn(async move {
            ex.execute_interruptible("s1", &c, Ask::default(), interrupt)
                .await
        })
    };
    while slow.runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    interrupter.fire();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!running.is_finished(), "the interrupt is ignored");
    slow.open.notify_one();
    let receipt = running.await.unwrap().unwrap();
    assert!(!receipt.is_error, "{receipt:?}");
    assert_eq!(slow.dropped.load(Ordering::SeqCst), 0);
}

/// Says whether its key had a ledger entry while it ran.
struct Peek(Arc<ToolLedger>);

impl Tool for Peek {
    fn run<'a>(
        &'a self,
        cx: ToolContext<'a>,
        _call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        let marked = self
            .0
            .get(cx.session, cx.idempotency_key)
            .unwrap()
            .is_some();
        Box::pin(async move {
            Ok(ToolResult {
                output: Some(struct_of(json!({"marked": marked}))),
                ..ToolResult::default()
            })
        })
    }
}

#[tokio::test]
async fn a_call_harmless_twice_runs_without_a_durable_mark_and_its_result_is_recorded() {
    let ledger = Arc::new(ToolLedger::open_in_memory().unwrap());
    let mut registry = ToolRegistry::new();
    registry
        .register("peek", Arc::new(Peek(ledger.clone())))
        .unwrap();
    let ex = LedgerExecutor::with_store(registry, ledger.clone());
    let marked = |r: &ToolResult| r.output.as_ref().unwrap().fields["marked"].clone();

    // An ordinary call is marked started before it runs.
    let ordinary = ex
        .execute("s", &call("c1", "peek", "k1", None))
        .await
        .unwrap();
    assert_eq!(marked(&ordinary), pbjson_types::Value::from(true));

    // One the machine says is harmless twice is not; its result is stored.
    let repeatable = Ask {
        again: false,
        repeatable: true,
    };
    let c = call("c2", "peek", "k2", None);
    let first = ex
        .execute_interruptible("s", &c, repeatable, Interrupt::never())
        .await
        .unwrap();
    assert_eq!(marked(&first), pbjson_types::Value::from(false));
    // Recorded after the answer, off the call's path.
    let mut stored = None;
    for _ in 0..500 {
        stored = ledger.get("s", "k2").unwrap();
        if stored.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(matches!(stored, Some(LedgerEntry::Done { result, .. }) if result == first));
    // Asked again the same way it runs again (no check): harmless by the
    // tool's own account, and the stored result stays the first.
    let second = ex
        .execute_interruptible("s", &c, repeatable, Interrupt::never())
        .await
        .unwrap();
    assert_eq!(marked(&second), pbjson_types::Value::from(true));
    assert!(matches!(
        ledger.get("s", "k2").unwrap(),
        Some(LedgerEntry::Done { result, .. }) if result == first
    ));
}
