//! `agentctl tools` against the built `agentsessionsd --mcp …` (issue
//! #36): the catalog lists the built-ins and every tool of npm's
//! `@modelcontextprotocol/server-filesystem`, each with its server, the
//! policy its calls meet (the hint's default or the operator's rule) and
//! its hints; a server that cannot start is listed as down, not fatal.
//! `agentctl get` of a session parked on an MCP call prints the call, its
//! arguments, and the tool's server, policy and hints.

#[path = "../shells/tests/support/caller.rs"]
mod caller;
#[path = "support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/mcp_peers.rs"]
mod mcp_peers;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use cli::{Daemon, agentctl, stderr, stdout};

#[test]
fn tools_lists_each_tool_with_its_server_policy_and_hints() {
    let Some(peers) = mcp_peers::peers("agentctl_tools") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = d.join("files");
    std::fs::create_dir(&files).unwrap();
    let fs = format!("fs=node {} {}", peers.filesystem.display(), files.display());
    let daemon = Daemon::start_in(
        d,
        d.join("j.db").as_os_str(),
        &["--mcp", &fs, "--tool-policy", "fs__move_file=deny"],
    );
    let o = agentctl(d, &["--server", &daemon.sessions, "tools"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.split('\t').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .to_owned()
    };
    let read = row("fs__read_text_file");
    assert!(
        read.contains("server=fs") && read.contains("policy=auto") && read.contains("read-only"),
        "{read}"
    );
    assert!(row("fs__read_text_file").ends_with("\tup"));
    let write = row("fs__write_file");
    assert!(
        write.contains("policy=approval") && write.contains("idempotent"),
        "{write}"
    );
    assert!(row("fs__move_file").contains("policy=deny"));
    assert!(row("append_note").contains("server=-"));

    let o = agentctl(d, &["--server", &daemon.sessions, "--json", "tools"]);
    let listed: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(listed["tools"].as_array().unwrap().len() > 10, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_parked_call_prints_its_tool_policy_and_hints() {
    let Some(peers) = mcp_peers::peers("agentctl_tools::get") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = d.join("files");
    std::fs::create_dir(&files).unwrap();
    let (harness, _harness) = support::serve_harness(std::sync::Arc::new(caller::Caller)).await;
    let fs = format!("fs=node {} {}", peers.filesystem.display(), files.display());
    let route = format!("caller={harness}");
    let daemon = Daemon::start_in(
        d,
        d.join("j.db").as_os_str(),
        &["--mcp", &fs, "--harness", &route],
    );
    let mut c = support::client_at(&daemon.sessions).await;
    let uid = support::create(&mut c, "caller").await;
    let path = files.join("a.txt").display().to_string();
    let input = serde_json::json!({
        "tool": "fs__write_file",
        "args": {"path": path, "content": "hi"},
    });
    let req = agentsessions_proto::v1::ExecRequest {
        session: uid.clone(),
        inputs: vec![support::text(&input.to_string())],
        ..Default::default()
    };
    assert_eq!(support::exec_code(&mut c, req).await, tonic::Code::Ok);

    let o = agentctl(d, &["--server", &daemon.sessions, "get", "--session", &uid]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let line = |head: &str| {
        text.lines()
            .find(|l| l.starts_with(head))
            .unwrap_or_else(|| panic!("no {head} in:\n{text}"))
            .to_owned()
    };
    assert!(line("pending_approval ").contains("request_seq="), "{text}");
    let call = line("pending_call ");
    assert!(
        call.contains("tool=fs__write_file") && call.contains(r#""content":"hi""#),
        "{call}"
    );
    assert_eq!(
        line("pending_tool "),
        "pending_tool tool=fs__write_file server=fs policy=approval hints=destructive,idempotent"
    );
}
