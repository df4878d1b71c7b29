//! At most once across a real crash (issue #36), against the built
//! `agentsessionsd`: a harness's call to an MCP tool (`--mcp`, a slow
//! server on the official TypeScript SDK, `shells/tests/support/slow_mcp.rs`)
//! is approved and Resumed, and the daemon is SIGKILLed while the tool runs
//! (its line appended, its answer not yet sent). Restarted on the same
//! journal, a Resume finishes the turn: a tool that does not say it is
//! idempotent is not called a second time and its call ends with a durable
//! EXECUTOR_ERROR receipt saying the outcome is unknown; one that says it
//! is idempotent is called again. The journal then replays identically
//! after another restart, a further Resume re-drives nothing, and the
//! chain verifies.
//!
//! Where node or npm is missing the test prints SKIPPED; with `CI=true`
//! it fails.

#[path = "../shells/tests/support/caller.rs"]
mod caller;
#[path = "support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/mcp_peers.rs"]
mod mcp_peers;
#[path = "../shells/tests/support/slow_mcp.rs"]
mod slow_mcp;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, EventKind, ExecRequest, ExecState, GetSessionRequest, LogRecord, ResumeRequest,
    ToolResult, tool_result,
};
use caller::Caller;
use serde_json::json;
use slow_mcp::SlowServer;
use tonic::transport::Channel;

/// What a crashed call came to.
struct After {
    receipt: ToolResult,
    /// The lines the tool appended (one per time it ran).
    lines: Vec<String>,
}

fn daemon(dir: &Path, harness: &str, slow: &SlowServer) -> cli::Daemon {
    let journal = dir.join("journal.db");
    let (caller, mcp) = (format!("caller={harness}"), slow.spec("slow"));
    cli::Daemon::start_in(
        dir,
        journal.as_os_str(),
        &["--harness", &caller, "--mcp", &mcp],
    )
}

#[allow(deprecated)]
async fn resume(c: &mut SessionsClient<Channel>, uid: &str) -> Result<(), tonic::Status> {
    let req = ResumeRequest {
        session: uid.into(),
        boot: false,
    };
    c.resume(req).await.map(drop)
}

fn receipt_of(records: &[LogRecord]) -> ToolResult {
    records
        .iter()
        .rev()
        .find_map(|r| events::body::result(r.event.as_ref()?))
        .expect("a durable receipt")
        .clone()
}

/// Runs one approved call of `tool` that the daemon is killed in the
/// middle of, then restarts and resumes; None when node is missing.
async fn crash_mid_call(test: &str, tool: &str) -> Option<After> {
    let peers = mcp_peers::peers(test)?;
    let dir = tempfile::tempdir().unwrap();
    // Declared first, dropped last: it kills the servers the killed
    // daemons orphaned.
    let slow = SlowServer::new(&peers.node_modules, dir.path());
    slow.hold();
    let (harness, _harness) = support::serve_harness(Arc::new(Caller)).await;

    let first = daemon(dir.path(), &harness, &slow);
    let mut c = support::client_at(&first.sessions).await;
    let uid = support::create(&mut c, "caller").await;
    let input = json!({"tool": tool, "args": {"text": "once"}}).to_string();
    let req = ExecRequest {
        session: uid.clone(),
        inputs: vec![support::text(&input)],
        ..Default::default()
    };
    assert_eq!(support::exec_code(&mut c, req).await, tonic::Code::Ok);
    let session = c
        .get_session(GetSessionRequest { uid: uid.clone() })
        .await
        .unwrap()
        .into_inner();
    let pending = session
        .pending_approval
        .expect("not read-only: the call waits for a decision");
    assert!(slow.lines().is_empty(), "nothing ran before the decision");
    c.approve(ApproveRequest {
        session: uid.clone(),
        execution_id: pending.execution_id,
        tool_call_id: pending.tool_call_id,
        request_seq: pending.request_seq,
        approved: Some(true),
        reason: "test".into(),
        identity: None,
    })
    .await
    .unwrap();
    let resuming = {
        let (mut c, uid) = (c.clone(), uid.clone());
        tokio::spawn(async move { resume(&mut c, &uid).await })
    };
    slow.wait_started(1, Duration::from_secs(30)).await;
    // SIGKILL: the line is appended, the answer is not sent.
    drop(first);
    assert!(resuming.await.unwrap().is_err(), "the daemon died mid-call");
    assert_eq!(slow.lines(), ["once"]);
    // A call made again now answers at once.
    slow.release();

    let second = daemon(dir.path(), &harness, &slow);
    let mut c = support::client_at(&second.sessions).await;
    resume(&mut c, &uid).await.unwrap();
    let session = c
        .get_session(GetSessionRequest { uid: uid.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.exec_state, ExecState::ExecCompleted as i32);
    let records = support::replay(&mut c, &uid).await;
    let receipt = receipt_of(&records);

    // What is recorded stays so: a restart replays it identically, and a
    // further Resume only marks itself (nothing is re-driven).
    drop(second);
    let third = daemon(dir.path(), &harness, &slow);
    let mut c = support::client_at(&third.sessions).await;
    assert_eq!(support::replay(&mut c, &uid).await, records);
    resume(&mut c, &uid).await.unwrap();
    let after = support::replay(&mut c, &uid).await;
    assert_eq!(after[..records.len()], records[..]);
    assert!(
        after[records.len()..]
            .iter()
            .all(|r| events::kind_of(r.event.as_ref().unwrap()) == EventKind::EventLifecycle),
        "{:?}",
        &after[records.len()..]
    );
    cli::ok_on(dir.path(), &third.sessions, &["verify", "--session", &uid]);
    Some(After {
        receipt,
        lines: slow.lines(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_a_crash_is_not_made_again_and_ends_outcome_unknown() {
    let Some(after) = crash_mid_call("mcp_crash::not_idempotent", "slow__append").await else {
        return;
    };
    assert_eq!(after.lines, ["once"], "the tool ran once");
    let r = &after.receipt;
    assert!(r.is_error, "{r:?}");
    assert_eq!(r.code, tool_result::Code::ExecutorError as i32);
    assert!(r.error.contains("outcome unknown"), "{}", r.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_call_cut_by_a_crash_is_made_again() {
    let Some(after) = crash_mid_call("mcp_crash::idempotent", "slow__append_idem").await else {
        return;
    };
    assert_eq!(after.lines, ["once", "once"], "called again");
    assert!(!after.receipt.is_error, "{:?}", after.receipt);
    assert!(after.receipt.approval_decision_seq > 0, "the approved call");
}
