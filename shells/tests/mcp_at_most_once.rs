//! At most once across a crash (issue #36): the ledger holds "started" for
//! a call whose host stopped before the answer. Re-driven, a tool that does
//! not say it is idempotent gets a durable EXECUTOR_ERROR receipt saying
//! the outcome is unknown and is never called again; an idempotent one is
//! called again. Against npm's `@modelcontextprotocol/server-filesystem`.

#[path = "support/mcp_peers.rs"]
mod mcp_peers;

use agentsessions_proto::v1::{Mediation, ToolCall, tool_result};
use agentsessions_shells::mcp::{McpConfig, McpHub, ServerSpec, json_to_struct};
use agentsessions_shells::tools::{
    LedgerExecutor, LedgerStore, ToolExecutor, ToolLedger, ToolRegistry,
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
async fn a_redriven_call_runs_again_only_if_its_tool_is_idempotent() {
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

    // edit_file is not idempotent: a crash after "started" leaves its
    // outcome unknown, and it is not called again.
    let edit = call(
        "fs__edit_file",
        "k-edit",
        json!({"path": path, "edits": [{"oldText": "one", "newText": "two"}]}),
    );
    ledger.start("s", "k-edit", "fs__edit_file").unwrap();
    let receipt = executor.execute("s", &edit).await.unwrap();
    assert!(receipt.is_error, "{receipt:?}");
    assert_eq!(receipt.code, tool_result::Code::ExecutorError as i32);
    assert!(
        receipt.error.contains("outcome unknown"),
        "{}",
        receipt.error
    );
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "one", "not called");
    // The receipt is the key's answer from now on.
    let again = executor.execute("s", &edit).await.unwrap();
    assert_eq!(again, receipt);

    // write_file says it is idempotent: it is simply called again.
    let write = call(
        "fs__write_file",
        "k-write",
        json!({"path": path, "content": "three"}),
    );
    ledger.start("s", "k-write", "fs__write_file").unwrap();
    let receipt = executor.execute("s", &write).await.unwrap();
    assert!(!receipt.is_error, "{receipt:?}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "three");

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
