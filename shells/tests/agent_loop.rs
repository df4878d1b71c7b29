//! The built-in `agent` harness end to end (issue #36): a daemon with
//! npm's `@modelcontextprotocol/server-filesystem` as its MCP server and
//! PyPI's `fakellm` as the model, which answers with tool calls by YAML
//! rule. A read-only call runs at once and its result reaches the model;
//! a write parks until a decision (approve: written once, then the model's
//! answer; deny: nothing written, and the model is told why); a tool the
//! turn does not offer is refused without reaching the host; `max_steps`
//! ends a tool-hungry model's turn FAILED; a completed session replays the
//! same records and a second Resume asks the model nothing.
//!
//! What the model was sent is asserted through fakellm's own matching: a
//! rule fires only when its request holds the text it names (a tool result,
//! an offered tool), and `/_fakellm/stats` counts requests by rule.
//!
//! Where node/npm or Python/fakellm are missing the test prints SKIPPED and
//! returns; with `CI=true` it fails.

// Only the filesystem server is used here.
#[allow(dead_code)]
#[path = "support/mcp_peers.rs"]
mod mcp_peers;
#[path = "support/daemon.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, EventKind, ExecRequest, ExecState, GetSessionRequest, LogRecord, ResumeRequest,
    Session, event::Body,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use serde_json::{Value, json};
use tonic::transport::Channel;

/// The model id the daemon serves from fakellm.
const MODEL: &str = "fake-agent";

/// The text the read scenario's file holds.
const FILE_TEXT: &str = "hello from the file";

/// The approver's reason in the deny scenario.
const REASON: &str = "not on a friday";

/// Fails under `CI=true`, else prints SKIPPED; the caller then returns.
fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: fakellm is required in CI: {why}"
    );
    eprintln!("*** SKIPPED {test}: {why} ***");
}

/// A fakellm server, killed when dropped.
struct FakeLlm {
    base: String,
    _child: tokio::process::Child,
}

impl FakeLlm {
    /// Starts fakellm from the conformance venv with `rules`; None (after
    /// [`skip`]) when it cannot be had.
    async fn start(test: &str, rules: &Path) -> Option<Self> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = tokio::process::Command::new("bash")
            .arg(root.join("conformance/python/venv.sh"))
            .stdin(Stdio::null())
            .output()
            .await;
        let python = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                .lines()
                .last()
                .map(PathBuf::from)
                .filter(|p| p.is_file()),
            Ok(o) => {
                let why = format!(
                    "venv.sh failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
                skip(test, &why);
                return None;
            }
            Err(e) => {
                skip(test, &format!("bash: {e}"));
                return None;
            }
        };
        let Some(python) = python else {
            skip(test, "venv.sh printed no interpreter");
            return None;
        };
        // A free port, released for fakellm to take; a rare race is retried.
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = tokio::process::Command::new(&python)
                .args(["-m", "fakellm.cli", "serve", "--host", "127.0.0.1"])
                .args(["--port", &port.to_string()])
                .arg("--config")
                .arg(rules)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn();
            let mut child = match child {
                Ok(c) => c,
                Err(e) => {
                    skip(test, &format!("spawn fakellm: {e}"));
                    return None;
                }
            };
            let base = format!("http://127.0.0.1:{port}");
            let http = reqwest::Client::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while tokio::time::Instant::now() < deadline {
                if let Ok(Some(status)) = child.try_wait() {
                    if status.code() == Some(1) {
                        // Not installed, or a bad rules file: no use retrying.
                        skip(test, &format!("fakellm exited at once ({status})"));
                        return None;
                    }
                    break;
                }
                let stats = http.get(format!("{base}/_fakellm/stats")).send().await;
                if stats.is_ok_and(|r| r.status().is_success()) {
                    return Some(Self {
                        base,
                        _child: child,
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        skip(test, "fakellm did not start");
        None
    }

    /// `/_fakellm/stats`: requests in all and by the rule that answered.
    async fn stats(&self) -> (u64, Value) {
        let body = reqwest::get(format!("{}/_fakellm/stats", self.base))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let stats: Value = serde_json::from_slice(&body).unwrap();
        (
            stats["total_requests"].as_u64().unwrap(),
            stats["by_rule"].clone(),
        )
    }

    async fn hits(&self, rule: &str) -> u64 {
        self.stats().await.1[rule].as_u64().unwrap_or(0)
    }
}

/// The rules: per scenario, keyed by a word of its first user message
/// (fakellm keeps one conversation per first user message), answers
/// first, the tool call last; `BAD:` answers fire only on a wrong request.
fn rules(dir: &Path) -> String {
    let file = |name: &str| dir.join(name).display().to_string();
    let rules = json!({"rules": [
        {"name": "bad_denied_tool_offered",
         "when": {"tools_include": "fs__move_file"},
         "respond": {"content": "BAD: a denied tool was offered"}},
        {"name": "bad_unlisted_tool_offered",
         "when": {"messages_contain": "scenario-read", "tools_include": "fs__write_file"},
         "respond": {"content": "BAD: a tool outside the config was offered"}},
        {"name": "history_seen",
         "when": {"previous_message_contains": "the file says hello", "messages_contain": FILE_TEXT},
         "respond": {"content": "I remember the file"}},
        {"name": "read_answer",
         "when": {"messages_contain": "scenario-read", "tool_result_contains": FILE_TEXT},
         "respond": {"content": "the file says hello"}},
        {"name": "read_call",
         "when": {"messages_contain": "scenario-read"},
         "respond": {"tool_calls": [
             {"name": "fs__read_text_file", "arguments": {"path": file("hello.txt")}}]}},
        {"name": "write_answer",
         "when": {"messages_contain": "scenario-approve", "tool_result_contains": "Successfully wrote"},
         "respond": {"content": "written as asked"}},
        {"name": "write_call",
         "when": {"messages_contain": "scenario-approve"},
         "respond": {"tool_calls": [
             {"name": "fs__write_file",
              "arguments": {"path": file("approved.txt"), "content": "approved-content"}}]}},
        {"name": "denial_seen",
         "when": {"messages_contain": "scenario-deny", "tool_result_contains": REASON},
         "respond": {"content": "understood, not writing"}},
        {"name": "denial_missed",
         "when": {"messages_contain": "scenario-deny", "previous_message_role": "assistant"},
         "respond": {"content": "BAD: no denial reason seen"}},
        {"name": "deny_call",
         "when": {"messages_contain": "scenario-deny"},
         "respond": {"tool_calls": [
             {"name": "fs__write_file",
              "arguments": {"path": file("denied.txt"), "content": "nope"}}]}},
        {"name": "unlisted_seen",
         "when": {"messages_contain": "scenario-unlisted", "tool_result_contains": "is not offered"},
         "respond": {"content": "fine, it stays where it is"}},
        {"name": "unlisted_call",
         "when": {"messages_contain": "scenario-unlisted"},
         "respond": {"tool_calls": [
             {"name": "fs__move_file",
              "arguments": {"source": file("hello.txt"), "destination": file("moved.txt")}}]}},
        {"name": "loop_call",
         "when": {"messages_contain": "scenario-loop"},
         "respond": {"tool_calls": [{"name": "fs__list_allowed_directories", "arguments": {}}]}},
    ]});
    // YAML is a superset of JSON.
    rules.to_string()
}

struct World {
    daemon: Daemon,
    c: SessionsClient<Channel>,
    llm: FakeLlm,
    files: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

async fn world(test: &str) -> Option<World> {
    let peers = mcp_peers::peers(test)?;
    let (dir, files) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // The filesystem server reports canonical paths.
    let root = files.path().canonicalize().unwrap();
    std::fs::write(root.join("hello.txt"), FILE_TEXT).unwrap();
    let rules_file = dir.path().join("fakellm.yaml");
    std::fs::write(&rules_file, rules(&root)).unwrap();
    let llm = FakeLlm::start(test, &rules_file).await?;
    let fs = format!(
        "fs=node {} {}",
        shlex::try_quote(&peers.filesystem.display().to_string()).unwrap(),
        shlex::try_quote(&root.display().to_string()).unwrap()
    );
    let daemon = Daemon::start(DaemonConfig {
        models: vec![format!("{MODEL}={}/v1", llm.base)],
        mcp: vec![fs],
        tool_rules: vec!["fs__move_file=deny".parse().unwrap()],
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let c = support::client(&daemon).await;
    Some(World {
        daemon,
        c,
        llm,
        files,
        _dir: dir,
    })
}

impl World {
    fn path(&self, name: &str) -> PathBuf {
        self.files.path().canonicalize().unwrap().join(name)
    }

    /// A new agent session's first turn with `input` and `config`; its uid.
    async fn turn(&mut self, input: &str, config: Value) -> String {
        let uid = support::create(&mut self.c, "agent").await;
        // The Exec stream's status is not the point: the records are.
        let _ = support::exec_code(
            &mut self.c,
            ExecRequest {
                session: uid.clone(),
                inputs: vec![support::text(input)],
                config: config.to_string().into_bytes(),
                ..Default::default()
            },
        )
        .await;
        uid
    }

    async fn session(&mut self, uid: &str) -> Session {
        self.c
            .get_session(GetSessionRequest { uid: uid.into() })
            .await
            .unwrap()
            .into_inner()
    }

    async fn decide(&mut self, uid: &str, approved: bool, reason: &str) {
        let pending = self
            .session(uid)
            .await
            .pending_approval
            .expect("the call waits for a decision");
        self.c
            .approve(ApproveRequest {
                session: uid.into(),
                execution_id: pending.execution_id,
                tool_call_id: pending.tool_call_id,
                request_seq: pending.request_seq,
                approved: Some(approved),
                reason: reason.into(),
                identity: None,
            })
            .await
            .unwrap();
        self.resume(uid).await.unwrap();
    }

    async fn resume(&mut self, uid: &str) -> Result<Session, tonic::Status> {
        #[allow(deprecated)]
        self.c
            .resume(ResumeRequest {
                session: uid.into(),
                boot: false,
            })
            .await
            .map(tonic::Response::into_inner)
    }
}

fn kinds(records: &[LogRecord]) -> Vec<EventKind> {
    records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .map(events::kind_of)
        .collect()
}

/// The text of the last OUTPUT.
fn last_output(records: &[LogRecord]) -> String {
    records
        .iter()
        .rev()
        .filter_map(|r| r.event.as_ref())
        .filter(|e| events::kind_of(e) == EventKind::EventOutput)
        .find_map(events::body::message)
        .map(events::message_text)
        .unwrap_or_default()
}

/// How the turn ended: the END's state and error text, or FAILED and the
/// text of the ERROR the host records for a harness that ended FAILED.
fn end(records: &[LogRecord]) -> (String, String) {
    records
        .iter()
        .rev()
        .filter_map(|r| r.event.as_ref())
        .find_map(|e| match &e.body {
            Some(Body::End(end)) => Some((
                end.state.clone(),
                end.error
                    .as_ref()
                    .map(|e| e.description.clone())
                    .unwrap_or_default(),
            )),
            Some(Body::Error(error)) => Some(("FAILED".to_owned(), error.description.clone())),
            _ => None,
        })
        .expect("an END or ERROR record")
}

fn count(records: &[LogRecord], kind: EventKind) -> usize {
    kinds(records).iter().filter(|k| **k == kind).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loops_over_host_tools_under_policy() {
    let Some(mut w) = world("agent_loop").await else {
        return;
    };

    // (1) A read-only call runs at once; its result reaches the model.
    let read = w
        .turn(
            "scenario-read: what does hello.txt say?",
            json!({"system_prompt": "You read files.", "tools": ["fs__read_*"]}),
        )
        .await;
    let s = w.session(&read).await;
    assert!(s.pending_approval.is_none(), "read-only: no gate");
    assert_eq!(s.exec_state, ExecState::ExecCompleted as i32);
    let records = support::replay(&mut w.c, &read).await;
    let got: Vec<EventKind> = kinds(&records)
        .into_iter()
        .filter(|k| {
            matches!(
                k,
                EventKind::EventModelCall
                    | EventKind::EventOutput
                    | EventKind::EventToolCall
                    | EventKind::EventToolResult
                    | EventKind::EventEnd
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventToolCall,
            EventKind::EventToolResult,
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventEnd,
        ]
    );
    assert_eq!(end(&records).0, "COMPLETED");
    assert_eq!(last_output(&records), "the file says hello");
    let receipt = records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .find_map(events::body::result)
        .unwrap();
    assert!(!receipt.is_error, "{receipt:?}");
    let call = records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .find_map(events::body::tool)
        .unwrap();
    assert_eq!(call.tool, "fs__read_text_file");
    assert_eq!(receipt.id, call.id);
    assert!(call.idempotency_key.ends_with(&format!("/{}", call.id)));
    assert_eq!(w.llm.hits("read_answer").await, 1);

    // (2) A write parks; once approved it is written once and the model
    // answers.
    let approved = w.path("approved.txt");
    let write = w.turn("scenario-approve: write the file", json!({})).await;
    let s = w.session(&write).await;
    assert_eq!(s.exec_state, ExecState::ExecAwaiting as i32);
    assert!(!approved.exists(), "nothing written before a decision");
    w.decide(&write, true, "fine").await;
    assert_eq!(
        std::fs::read_to_string(&approved).unwrap(),
        "approved-content"
    );
    let written_at = std::fs::metadata(&approved).unwrap().modified().unwrap();
    let records = support::replay(&mut w.c, &write).await;
    assert_eq!(end(&records).0, "COMPLETED");
    assert_eq!(last_output(&records), "written as asked");
    assert_eq!(count(&records, EventKind::EventToolCall), 1);
    assert_eq!(count(&records, EventKind::EventToolResult), 1);
    assert_eq!(
        w.llm.hits("write_call").await,
        1,
        "the parked step is served"
    );
    assert_eq!(w.llm.hits("write_answer").await, 1);

    // (5) The completed session replays the same records, and a second
    // Resume asks the model nothing and writes nothing.
    let (asked, _) = w.llm.stats().await;
    let again = w.resume(&write).await;
    assert!(
        again.is_ok()
            || again
                .as_ref()
                .is_err_and(|s| s.code() == tonic::Code::FailedPrecondition),
        "{again:?}"
    );
    // Resume marks itself with a LIFECYCLE record, and that is all.
    let after = support::replay(&mut w.c, &write).await;
    assert_eq!(after[..records.len()], records[..]);
    assert!(
        kinds(&after[records.len()..])
            .iter()
            .all(|k| *k == EventKind::EventLifecycle)
    );
    assert_eq!(w.llm.stats().await.0, asked, "no model request");
    assert_eq!(
        std::fs::metadata(&approved).unwrap().modified().unwrap(),
        written_at,
        "written exactly once"
    );

    // (3) A denial writes nothing and the model is told, with the reason.
    let denied = w.path("denied.txt");
    let deny = w
        .turn("scenario-deny: write the other file", json!({}))
        .await;
    w.decide(&deny, false, REASON).await;
    assert!(!denied.exists(), "a denial writes nothing");
    let records = support::replay(&mut w.c, &deny).await;
    assert_eq!(end(&records).0, "COMPLETED");
    assert_eq!(last_output(&records), "understood, not writing");
    assert_eq!(
        w.llm.hits("denial_seen").await,
        1,
        "the denial reached the model"
    );
    assert_eq!(w.llm.hits("denial_missed").await, 0);

    // (4) A model that always calls a tool meets max_steps.
    let looping = w
        .turn("scenario-loop: keep going", json!({"max_steps": 1}))
        .await;
    let records = support::replay(&mut w.c, &looping).await;
    let (state, error) = end(&records);
    assert_eq!(state, "FAILED");
    assert!(error.contains("max_steps (1)"), "{error}");
    assert_eq!(count(&records, EventKind::EventModelCall), 1);
    assert_eq!(
        count(&records, EventKind::EventToolCall),
        0,
        "nothing runs past the bound"
    );
    assert!(w.session(&looping).await.pending_approval.is_none());

    // A tool the turn does not offer (here: denied by policy) is refused by
    // the agent itself, durably, and the model is told.
    let unlisted = w.turn("scenario-unlisted: move the file", json!({})).await;
    let records = support::replay(&mut w.c, &unlisted).await;
    assert_eq!(end(&records).0, "COMPLETED");
    assert_eq!(last_output(&records), "fine, it stays where it is");
    assert_eq!(
        count(&records, EventKind::EventToolCall),
        0,
        "never asked of the host"
    );
    let refusal = records
        .iter()
        .filter_map(|r| r.event.as_ref())
        .find_map(events::body::result)
        .unwrap();
    assert!(refusal.is_error && refusal.error.contains("is not offered"));
    assert!(w.path("hello.txt").exists() && !w.path("moved.txt").exists());

    // A later turn sees the earlier one (history → messages): its request
    // holds the first turn's tool result and, right before the new input,
    // the first turn's answer.
    let _ = support::exec_code(
        &mut w.c,
        ExecRequest {
            session: read.clone(),
            inputs: vec![support::text("and again?")],
            config: json!({"tools": ["fs__read_*"]}).to_string().into_bytes(),
            ..Default::default()
        },
    )
    .await;
    let records = support::replay(&mut w.c, &read).await;
    assert_eq!(end(&records).0, "COMPLETED");
    assert_eq!(last_output(&records), "I remember the file");

    for bad in ["bad_denied_tool_offered", "bad_unlisted_tool_offered"] {
        assert_eq!(w.llm.hits(bad).await, 0, "{bad}");
    }
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_fails_the_turn_before_any_model_call() {
    let Some(mut w) = world("agent_loop::bad_config").await else {
        return;
    };
    let uid = w
        .turn("scenario-read: anything", json!({"max_steps": 0}))
        .await;
    let records = support::replay(&mut w.c, &uid).await;
    let (state, error) = end(&records);
    assert_eq!(state, "FAILED");
    assert!(error.contains("max_steps must be"), "{error}");
    assert_eq!(count(&records, EventKind::EventModelCall), 0);
    assert_eq!(w.llm.stats().await.0, 0);
    w.daemon.shutdown().await;
}
