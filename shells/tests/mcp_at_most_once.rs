//! At most once across a crash (issue #36), the executor's half: the
//! ledger holds "started" for a call whose host stopped before the answer.
//! Re-driven, the executor reports the run unfinished and calls nothing;
//! only when the machine says so (the tool's server says it is idempotent)
//! does it call the tool again. Against npm's
//! `@modelcontextprotocol/server-filesystem`. The whole rule, daemon killed
//! mid-call, is `tests/mcp_crash.rs`; its sweep is the simulator's
//! `unknown-outcome` scenario.

#[path = "support/mcp_peers.rs"]
mod mcp_peers;

use agentsessions_machine::vocab::{Outcome, ToolFailure, ToolGate};
use agentsessions_proto::v1::{Mediation, ToolCall};
use agentsessions_shells::daemon::tool_catalog;
use agentsessions_shells::mcp::{McpConfig, McpHub, ServerSpec, json_to_struct};
use agentsessions_shells::tools::{
    self, Ask, Interrupt, LedgerExecutor, LedgerStore, ToolError, ToolExecutor, ToolLedger,
    ToolRegistry,
};
use serde_json::json;

fn call(tool: &str, key: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        tool: tool.into(),
        args: Some(json_to_struct(args.as_object().unwrap()).unwrap()),
        mediation: Mediation::ControllerMediated as i32,
        idempotency_key: key.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_call_is_reported_and_run_again_only_when_told() {
    let Some(peers) = mcp_peers::peers("mcp_at_most_once") else {
        return;
    };
    let files = tempfile::tempdir().unwrap();
    let spec: ServerSpec = format!(
        "fs=node {} {}",
        peers.filesystem.display(),
        files.path().display()
    )
    .parse()
    .unwrap();
    let hub = McpHub::start(vec![spec], McpConfig::default()).await;
    let ledger = std::sync::Arc::new(ToolLedger::open_in_memory().unwrap());
    let executor =
        LedgerExecutor::with_store(ToolRegistry::new(), ledger.clone()).with_mcp(hub.clone());

    let note = files.path().join("note.txt");
    std::fs::write(&note, "one").unwrap();
    let path = note.display().to_string();

    let gate = ToolGate {
        rules: Vec::new(),
        catalog: Some(std::sync::Arc::new(tool_catalog::catalog(&hub, []))),
        approval_expiry_ms: None,
    };

    // edit_file is not idempotent: a crash after "started" leaves its
    // outcome unknown. The executor reports that and runs nothing; the
    // machine's rule (from the server's own hints) says not to run it again.
    let edit = call(
        "fs__edit_file",
        "k-edit",
        json!({"path": path, "edits": [{"oldText": "one", "newText": "two"}]}),
    );
    ledger.start("s", "k-edit", "fs__edit_file").unwrap();
    let refused = executor.execute("s", &edit).await.unwrap_err();
    assert_eq!(refused, ToolError::Unfinished);
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "one", "not called");
    assert!(!gate.may_rerun("fs__edit_file"));
    assert!(matches!(
        tools::tool_outcome(Err(refused)),
        Outcome::Tool(Err(ToolFailure::Unfinished))
    ));

    // write_file says it is idempotent: the rule says run it again, and
    // told so, the executor does.
    let write = call(
        "fs__write_file",
        "k-write",
        json!({"path": path, "content": "three"}),
    );
    ledger.start("s", "k-write", "fs__write_file").unwrap();
    assert!(gate.may_rerun("fs__write_file"));
    let receipt = executor
        .execute_interruptible(
            "s",
            &write,
            Ask {
                again: true,
                repeatable: false,
            },
            Interrupt::never(),
        )
        .await
        .unwrap();
    assert!(!receipt.is_error, "{receipt:?}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "three");
    // Its result is the key's answer from now on.
    assert_eq!(executor.execute("s", &write).await.unwrap(), receipt);

    // A fresh key runs the non-idempotent tool once.
    let fresh = call(
        "fs__edit_file",
        "k-fresh",
        json!({"path": path, "edits": [{"oldText": "three", "newText": "four"}]}),
    );
    assert!(!executor.execute("s", &fresh).await.unwrap().is_error);
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "four");
    hub.shutdown().await;
}
