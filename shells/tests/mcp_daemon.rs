//! MCP tools through the daemon (issue #36), against npm's
//! `@modelcontextprotocol/server-filesystem` on stdio: a harness's
//! TOOL_CALL naming a catalog tool is run by the host under its policy. A
//! read-only tool runs at once; `write_file` waits for a decision whatever
//! mediation the harness asked for (deny → no file, approve → written
//! once); a `deny` rule keeps a tool from ever reaching its server; an
//! unknown tool gets an error receipt.

#[path = "support/caller.rs"]
mod caller;
#[path = "support/mcp_peers.rs"]
mod mcp_peers;
#[path = "support/daemon.rs"]
mod support;

use std::path::Path;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, ExecRequest, GetSessionRequest, ResumeRequest, tool_result,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use caller::Caller;
use serde_json::json;
use tonic::transport::Channel;

struct World {
    daemon: Daemon,
    c: SessionsClient<Channel>,
    files: tempfile::TempDir,
    _dir: tempfile::TempDir,
    _harness: tokio::sync::oneshot::Sender<()>,
}

async fn world(test: &str, rules: &[&str]) -> Option<World> {
    let peers = mcp_peers::peers(test)?;
    let (dir, files) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (caller, stop) = support::serve_harness(std::sync::Arc::new(Caller)).await;
    let fs = format!(
        "fs=node {} {}",
        shlex::try_quote(&peers.filesystem.display().to_string()).unwrap(),
        shlex::try_quote(&files.path().display().to_string()).unwrap()
    );
    let daemon = Daemon::start(DaemonConfig {
        harnesses: vec![("caller".into(), caller)],
        mcp: vec![fs, "ghost=/nonexistent/mcp-server".into()],
        tool_rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        console_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let c = support::client(&daemon).await;
    Some(World {
        daemon,
        c,
        files,
        _dir: dir,
        _harness: stop,
    })
}

impl World {
    /// A new session's turn calling `tool` with `args`; its session.
    async fn turn(&mut self, tool: &str, args: serde_json::Value) -> String {
        let uid = support::create(&mut self.c, "caller").await;
        let input = json!({"tool": tool, "args": args}).to_string();
        let code = support::exec_code(
            &mut self.c,
            ExecRequest {
                session: uid.clone(),
                inputs: vec![support::text(&input)],
                ..Default::default()
            },
        )
        .await;
        assert_eq!(code, tonic::Code::Ok, "{tool}");
        uid
    }

    async fn output(&mut self, uid: &str) -> String {
        let records = support::replay(&mut self.c, uid).await;
        records
            .iter()
            .rev()
            .filter_map(|r| r.event.as_ref())
            .find_map(|e| agentsessions_machine::events::body::message(e))
            .map(agentsessions_machine::events::message_text)
            .unwrap_or_default()
    }

    async fn decide(&mut self, uid: &str, approved: bool) {
        let pending = self
            .c
            .get_session(GetSessionRequest { uid: uid.into() })
            .await
            .unwrap()
            .into_inner()
            .pending_approval
            .expect("the call waits for a decision");
        self.c
            .approve(ApproveRequest {
                session: uid.into(),
                execution_id: pending.execution_id,
                tool_call_id: pending.tool_call_id,
                request_seq: pending.request_seq,
                approved: Some(approved),
                reason: "test".into(),
                identity: None,
            })
            .await
            .unwrap();
        #[allow(deprecated)]
        self.c
            .resume(ResumeRequest {
                session: uid.into(),
                boot: false,
            })
            .await
            .unwrap();
    }

    fn path(&self, name: &str) -> String {
        self.files.path().join(name).display().to_string()
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(Path::new(path)).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_for_approval_and_a_read_runs_at_once() {
    let Some(mut w) = world("mcp_daemon::write_then_read", &[]).await else {
        return;
    };
    let a = w.path("a.txt");
    let uid = w
        .turn("fs__write_file", json!({"path": a, "content": "hi"}))
        .await;
    assert_eq!(read(&a), None, "nothing written before a decision");
    // The approval card says which server and policy gated the call.
    let card = format!("http://{}/sessions/{uid}", w.daemon.console_addr.unwrap());
    let page = reqwest::get(card).await.unwrap().text().await.unwrap();
    assert!(
        page.contains("server fs, policy approval, hints destructive, idempotent"),
        "{page}"
    );
    w.decide(&uid, true).await;
    assert_eq!(read(&a).as_deref(), Some("hi"), "written once approved");
    assert!(w.output(&uid).await.starts_with("ok:"));

    let b = w.path("b.txt");
    let denied = w
        .turn("fs__write_file", json!({"path": b, "content": "no"}))
        .await;
    w.decide(&denied, false).await;
    assert_eq!(read(&b), None, "a denial writes nothing");
    assert!(w.output(&denied).await.starts_with("error:"));

    let uid = w.turn("fs__read_text_file", json!({"path": a})).await;
    let session =
        w.c.get_session(GetSessionRequest { uid: uid.clone() })
            .await
            .unwrap()
            .into_inner();
    assert!(session.pending_approval.is_none(), "read-only: no gate");
    assert_eq!(w.output(&uid).await, "ok: hi ");

    // A fork after a tool turn continues: the child holds the parent's
    // call and receipt, and its own turn calls the server again.
    let child =
        w.c.fork(agentsessions_proto::v1::ForkRequest {
            session: uid.clone(),
            count: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .children
        .remove(0)
        .metadata
        .unwrap()
        .uid;
    let inherited = support::replay(&mut w.c, &child).await;
    assert!(
        inherited
            .iter()
            .filter_map(|r| r.event.as_ref())
            .any(|e| agentsessions_machine::events::body::result(e).is_some()),
        "the parent's receipt is in the child"
    );
    std::fs::write(&a, "forked").unwrap();
    let input = json!({"tool": "fs__read_text_file", "args": {"path": a}}).to_string();
    let code = support::exec_code(
        &mut w.c,
        ExecRequest {
            session: child.clone(),
            inputs: vec![support::text(&input)],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code, tonic::Code::Ok);
    assert_eq!(
        w.output(&child).await,
        "ok: forked ",
        "a live call, not a served one"
    );
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_never_reaches_its_server_and_unknown_tools_get_error_receipts() {
    let Some(mut w) = world("mcp_daemon::deny", &["fs__write_*=deny"]).await else {
        return;
    };
    let a = w.path("a.txt");
    let uid = w
        .turn("fs__write_file", json!({"path": a, "content": "hi"}))
        .await;
    assert_eq!(read(&a), None, "the server never saw the call");
    let out = w.output(&uid).await;
    assert!(out.contains("denied by the host's policy"), "{out}");
    let records = support::replay(&mut w.c, &uid).await;
    let receipt = records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .find_map(|e| agentsessions_machine::events::body::result(e))
        .expect("a durable receipt")
        .clone();
    assert_eq!(receipt.code, tool_result::Code::ExecutorError as i32);

    for tool in ["fs__no_such_tool", "ghost__anything"] {
        let uid = w.turn(tool, json!({})).await;
        let out = w.output(&uid).await;
        assert!(out.contains("unknown tool"), "{tool}: {out}");
    }

    // The console lists the catalog with the rule's policy.
    let console = format!("http://{}/tools", w.daemon.console_addr.unwrap());
    let page = reqwest::get(console).await.unwrap().text().await.unwrap();
    let row = |name: &str| {
        let at = page
            .find(&format!("data-name=\"{name}\""))
            .unwrap_or_else(|| panic!("no {name} on the page"));
        page[at..at + page[at..].find("</tr>").unwrap()].to_owned()
    };
    assert!(row("fs__write_file").contains(">deny<"), "{page}");
    assert!(row("fs__read_text_file").contains(">auto<"));
    assert!(row("append_note").contains(">host<"));

    // The server that could not start is named, and the daemon is ready.
    let ops = format!("http://{}", w.daemon.metrics_addr.unwrap());
    let ready = reqwest::get(format!("{ops}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200);
    let text = ready.text().await.unwrap();
    assert!(text.contains("mcp server ghost down"), "{text}");
    let metrics = reqwest::get(format!("{ops}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentsessions_mcp_server_up{server=\"fs\"} 1")
            && metrics.contains("agentsessions_mcp_server_up{server=\"ghost\"} 0"),
        "{metrics}"
    );
    w.daemon.shutdown().await;
}
