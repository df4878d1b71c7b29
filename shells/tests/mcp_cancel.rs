//! A Cancel of a turn whose MCP call is in flight (issue #36), through the
//! daemon: the host tells its executor (InterruptTool), which drops the
//! call, so the server gets `notifications/cancelled` for that very
//! request; the call's EXECUTOR_ERROR receipt ("cancelled: …, its outcome
//! is unknown") is journaled before the cancel records, the session ends
//! canceled, and the tool is never called again. Against a slow server
//! written on the official TypeScript SDK (`support/slow_mcp.rs`).

#[path = "support/caller.rs"]
mod caller;
#[path = "support/mcp_peers.rs"]
mod mcp_peers;
#[path = "support/slow_mcp.rs"]
mod slow_mcp;
#[path = "support/daemon.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::v1::{CancelRequest, EventKind, ExecRequest, ExecState, tool_result};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use caller::Caller;
use serde_json::json;
use slow_mcp::SlowServer;

const CANCELLED: &str =
    "cancelled: the turn was canceled while the tool ran; its outcome is unknown";

/// A daemon over `slow` (held: its calls answer only when cancelled), whose
/// `slow__append` runs at once, so a turn is cut short mid-call rather
/// than while parked; and the served `caller` harness.
async fn over_held(
    slow: &SlowServer,
    dir: &std::path::Path,
    limits: agentsessions_shells::mcp::McpConfig,
) -> (Daemon, tokio::sync::oneshot::Sender<()>) {
    slow.hold();
    let (caller, harness) = support::serve_harness(Arc::new(Caller)).await;
    let daemon = Daemon::start(DaemonConfig {
        harnesses: vec![("caller".into(), caller)],
        mcp: vec![slow.spec("slow")],
        tool_rules: vec!["slow__append=auto".parse().unwrap()],
        mcp_config: limits,
        ..support::config(dir)
    })
    .await
    .unwrap();
    (daemon, harness)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_cancels_its_mcp_call_on_the_server_and_journals_the_receipt() {
    let Some(peers) = mcp_peers::peers("mcp_cancel") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let slow = SlowServer::new(&peers.node_modules, dir.path());
    let (daemon, _harness) = over_held(&slow, dir.path(), Default::default()).await;
    let mut c = support::client(&daemon).await;
    let uid = support::create(&mut c, "caller").await;

    let input = json!({"tool": "slow__append", "args": {"text": "once"}}).to_string();
    let turn = {
        let (mut c, uid) = (c.clone(), uid.clone());
        tokio::spawn(async move {
            let req = ExecRequest {
                session: uid,
                inputs: vec![support::text(&input)],
                ..Default::default()
            };
            support::exec_code(&mut c, req).await
        })
    };
    let request = slow.wait_started(1, Duration::from_secs(30)).await;

    // The tool holds its answer for as long as the hold file exists (the
    // whole test): only an interrupted call lets the Cancel finish.
    let canceled = tokio::time::timeout(
        Duration::from_secs(20),
        c.cancel(CancelRequest {
            session: uid.clone(),
            execution_id: String::new(),
            reason: "user pressed stop".into(),
        }),
    )
    .await
    .expect("the Cancel does not wait for the tool")
    .unwrap()
    .into_inner();
    assert_eq!(canceled.exec_state, ExecState::ExecCanceled as i32);
    assert_eq!(turn.await.unwrap(), tonic::Code::Cancelled);

    // The server was told, for the request it was running.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while slow.logged("cancelled").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no notifications/cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(slow.logged("cancelled"), vec![request]);

    // TOOL_CALL, its receipt, then the cancel records.
    let records = support::replay(&mut c, &uid).await;
    let kinds: Vec<EventKind> = records
        .iter()
        .map(|r| events::kind_of(r.event.as_ref().unwrap()))
        .collect();
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            EventKind::EventToolCall,
            EventKind::EventToolResult,
            EventKind::EventLifecycle,
            EventKind::EventEnd
        ],
        "{kinds:?}"
    );
    let receipt = records
        .iter()
        .find_map(|r| events::body::result(r.event.as_ref()?))
        .expect("the call's receipt")
        .clone();
    assert!(receipt.is_error);
    assert_eq!(receipt.code, tool_result::Code::ExecutorError as i32);
    assert_eq!(receipt.error, CANCELLED);

    // Nothing re-drives a canceled turn: the tool ran once.
    #[allow(deprecated)]
    c.resume(agentsessions_proto::v1::ResumeRequest {
        session: uid.clone(),
        boot: false,
    })
    .await
    .unwrap();
    assert_eq!(slow.lines(), vec!["once".to_owned()]);
    assert_eq!(slow.logged("started").len(), 1);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_mcp_call_timeout_is_cancelled_and_gets_an_error_receipt() {
    let Some(peers) = mcp_peers::peers("mcp_cancel::timeout") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let slow = SlowServer::new(&peers.node_modules, dir.path());
    let limits = agentsessions_shells::mcp::McpConfig {
        call_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let (daemon, _harness) = over_held(&slow, dir.path(), limits).await;
    let mut c = support::client(&daemon).await;
    let uid = support::create(&mut c, "caller").await;
    let input = json!({"tool": "slow__append", "args": {"text": "once"}}).to_string();
    let req = ExecRequest {
        session: uid.clone(),
        inputs: vec![support::text(&input)],
        ..Default::default()
    };
    assert_eq!(support::exec_code(&mut c, req).await, tonic::Code::Ok);
    let receipt = support::replay(&mut c, &uid)
        .await
        .iter()
        .find_map(|r| events::body::result(r.event.as_ref()?).cloned())
        .expect("the call's receipt");
    assert!(
        receipt.is_error && receipt.error.contains("timed out"),
        "{receipt:?}"
    );
    assert_eq!(slow.logged("cancelled").len(), 1, "the server was told");
    daemon.shutdown().await;
}
