//! Any harness can use the host's MCP catalog (issue #36): a Python
//! harness (grpcio, `conformance/python/catalog_harness.py`) whose TOOL_CALL
//! names a catalog tool of npm's `@modelcontextprotocol/server-filesystem`
//! (`--mcp fs=…` on the built `agentsessionsd`) as an ordinary
//! CONTROLLER_MEDIATED call is held to the host's policy: `fs__write_file`
//! parks until a decision, and after Approve + Resume the file is written
//! once; the read-only `fs__read_text_file` runs at once. The same harness
//! against an MCP server from PyPI (`mcp-server-time`, a Python stdio
//! child from the test venv): its read-only `convert_time` runs at once
//! and its text and structured result reach the receipt.
//!
//! Where python3/venv/pip or node/npm is missing the test prints SKIPPED;
//! with `CI=true` it fails.

#[path = "support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/mcp_peers.rs"]
mod mcp_peers;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use agentsessions_conformance::python;
use agentsessions_machine::events;
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, EventKind, ExecRequest, ExecState, GetSessionRequest, ResumeRequest, Session,
};
use serde_json::json;
use tonic::transport::Channel;

/// The harness process; killed when dropped (it also stops when its stdin,
/// held here, closes).
struct PyHarness(Child);

impl Drop for PyHarness {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the catalog harness; its `host:port`.
fn py_harness(tc: &python::Toolchain) -> (PyHarness, String) {
    let root = python::repo_root();
    let mut child = Command::new(&tc.python)
        .arg(root.join("conformance/python/catalog_harness.py"))
        .env("PYTHONPATH", &tc.generated)
        .env("PYTHONPYCACHEPREFIX", root.join("target/pycache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start catalog_harness.py");
    let stdout = child.stdout.take().unwrap();
    let harness = PyHarness(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("serving py-catalog on ")
        .unwrap_or_else(|| panic!("catalog_harness.py said {line:?}"))
        .to_owned();
    (harness, addr)
}

async fn session(c: &mut SessionsClient<Channel>, uid: &str) -> Session {
    let req = GetSessionRequest { uid: uid.into() };
    c.get_session(req).await.unwrap().into_inner()
}

/// A new session's turn asking the harness to call `tool` with `args`.
async fn turn(c: &mut SessionsClient<Channel>, tool: &str, args: serde_json::Value) -> String {
    let uid = support::create(c, "py-catalog").await;
    let input = json!({"tool": tool, "args": args}).to_string();
    let req = ExecRequest {
        session: uid.clone(),
        inputs: vec![support::text(&input)],
        ..Default::default()
    };
    assert_eq!(support::exec_code(c, req).await, tonic::Code::Ok, "{tool}");
    uid
}

/// The session's records of `kind`, counted.
async fn count(c: &mut SessionsClient<Channel>, uid: &str, kind: EventKind) -> usize {
    let records = support::replay(c, uid).await;
    records
        .iter()
        .filter(|r| events::kind_of(r.event.as_ref().unwrap()) == kind)
        .count()
}

async fn output(c: &mut SessionsClient<Channel>, uid: &str) -> String {
    let records = support::replay(c, uid).await;
    records
        .iter()
        .rev()
        .filter_map(|r| r.event.as_ref())
        .find_map(events::body::message)
        .map(events::message_text)
        .unwrap_or_default()
}

#[allow(deprecated)]
async fn resume(c: &mut SessionsClient<Channel>, uid: &str) {
    let req = ResumeRequest {
        session: uid.into(),
        boot: false,
    };
    c.resume(req).await.unwrap();
}

fn mtime(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_harness_calls_catalog_tools_under_the_hosts_policy() {
    let tc = match python::toolchain().await {
        Ok(tc) => tc.clone(),
        Err(why) => {
            assert!(
                !python::required(),
                "python peers are required in CI: {why}"
            );
            eprintln!("SKIPPED: python catalog: {why}");
            return;
        }
    };
    let Some(peers) = mcp_peers::peers("python_catalog") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let (_harness, addr) = py_harness(&tc);
    let fs = format!(
        "fs=node '{}' '{}'",
        peers.filesystem.display(),
        files.display()
    );
    let daemon = cli::Daemon::start_in(
        dir.path(),
        dir.path().join("journal.db").as_os_str(),
        &["--harness", &format!("py-catalog={addr}"), "--mcp", &fs],
    );
    let mut c = support::client_at(&daemon.sessions).await;

    // A write: gated by the host, whatever the harness asked for.
    let a = files.join("a.txt");
    let path = a.display().to_string();
    let uid = turn(
        &mut c,
        "fs__write_file",
        json!({"path": path, "content": "hi"}),
    )
    .await;
    let pending = session(&mut c, &uid)
        .await
        .pending_approval
        .expect("the write waits for a decision");
    assert!(!a.exists(), "nothing written before a decision");
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
    resume(&mut c, &uid).await;
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "hi", "written");
    let out = output(&mut c, &uid).await;
    assert!(out.starts_with("ok:"), "{out}");
    let s = session(&mut c, &uid).await;
    assert_eq!(s.exec_state, ExecState::ExecCompleted as i32);
    // Once: one receipt, and a further Resume does not write again.
    let written = mtime(&a);
    resume(&mut c, &uid).await;
    assert_eq!(mtime(&a), written, "not written again");
    assert_eq!(count(&mut c, &uid, EventKind::EventToolResult).await, 1);

    // A read: read-only, so it runs at once.
    let uid = turn(&mut c, "fs__read_text_file", json!({"path": path})).await;
    assert!(session(&mut c, &uid).await.pending_approval.is_none());
    assert_eq!(
        count(&mut c, &uid, EventKind::EventApprovalRequest).await,
        0
    );
    assert_eq!(output(&mut c, &uid).await, "ok: hi ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pypi_mcp_server_serves_the_catalog_too() {
    let tc = match python::toolchain().await {
        Ok(tc) => tc.clone(),
        Err(why) => {
            assert!(
                !python::required(),
                "python peers are required in CI: {why}"
            );
            eprintln!("SKIPPED: python catalog (mcp-server-time): {why}");
            return;
        }
    };
    let server = tc.python.with_file_name("mcp-server-time");
    assert!(server.exists(), "the venv installs mcp-server-time");
    let dir = tempfile::tempdir().unwrap();
    let (_harness, addr) = py_harness(&tc);
    let time = format!("time='{}' --local-timezone UTC", server.display());
    let daemon = cli::Daemon::start_in(
        dir.path(),
        dir.path().join("journal.db").as_os_str(),
        &["--harness", &format!("py-catalog={addr}"), "--mcp", &time],
    );
    let o = cli::ok_on(dir.path(), &daemon.sessions, &["tools"]);
    let row = o
        .lines()
        .find(|l| l.starts_with("time__convert_time\t"))
        .unwrap_or_else(|| panic!("not listed:\n{o}"))
        .to_owned();
    assert!(
        row.contains("server=time") && row.contains("policy=auto") && row.contains("read-only"),
        "{row}"
    );

    let mut c = support::client_at(&daemon.sessions).await;
    let args = json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"});
    let uid = turn(&mut c, "time__convert_time", args).await;
    assert!(session(&mut c, &uid).await.pending_approval.is_none());
    let out = output(&mut c, &uid).await;
    assert!(
        out.starts_with("ok:") && out.contains("T21:00:00+09:00"),
        "{out}"
    );
    let records = support::replay(&mut c, &uid).await;
    let receipt = records
        .iter()
        .find_map(|r| events::body::result(r.event.as_ref()?))
        .expect("a receipt");
    assert!(!receipt.is_error, "{receipt:?}");
    let structured = serde_json::to_value(receipt.output.as_ref().expect("structured")).unwrap();
    assert_eq!(
        structured["target"]["timezone"], "Asia/Tokyo",
        "{structured}"
    );
    assert_eq!(structured["time_difference"], "+9.0h", "{structured}");
}
