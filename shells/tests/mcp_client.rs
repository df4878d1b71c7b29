//! The MCP client (`shells::mcp`) against MCP servers nobody here wrote:
//! npm's `@modelcontextprotocol/server-filesystem` (stdio) and
//! `server-everything` (streamable HTTP and stdio), installed pinned by
//! `scripts/mcp-peers.sh`, plus a small server written here on the official
//! TypeScript SDK for what those two do not do (paginated listings, a tool
//! list that changes, oversized and unrepresentable results, observable
//! cancellation).
//!
//! Where node or npm is missing each test prints `SKIPPED: …` and passes;
//! with `CI=true` it fails instead, so CI cannot go green without them.
#![cfg(not(madsim))]

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use agentsessions_proto::v1::part;
use agentsessions_shells::mcp::{
    CallOutcome, Content, JsonError, McpConfig, McpError, McpHub, ServerSpec, Target,
    to_tool_result,
};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------- peers

struct Peers {
    filesystem: PathBuf,
    everything: PathBuf,
    node_modules: PathBuf,
}

/// The installed servers, or None after saying loudly why not (a panic
/// under CI=true).
fn peers() -> Option<&'static Peers> {
    static PEERS: OnceLock<Result<Peers, String>> = OnceLock::new();
    let got = PEERS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new("bash")
            .arg(root.join("scripts/mcp-peers.sh"))
            .current_dir(&root)
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run scripts/mcp-peers.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/mcp-peers.sh failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(PathBuf::from)
                .ok_or_else(|| format!("scripts/mcp-peers.sh printed no {name}="))
        };
        Ok(Peers {
            filesystem: field("filesystem")?,
            everything: field("everything")?,
            node_modules: field("node_modules")?,
        })
    });
    match got {
        Ok(p) => Some(p),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{why} (CI=true: the MCP peers are required)")
        }
        Err(why) => {
            // Written past libtest's capture, so it shows for a passing test.
            let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
            None
        }
    }
}

macro_rules! peers_or_skip {
    () => {
        match peers() {
            Some(p) => p,
            None => return,
        }
    };
}

// ---------------------------------------------------------------- helpers

fn config() -> McpConfig {
    McpConfig {
        call_timeout: Duration::from_secs(20),
        ..McpConfig::default()
    }
}

fn stdio(name: &str, program: &str, args: &[&str]) -> ServerSpec {
    ServerSpec {
        name: name.to_owned(),
        target: Target::Stdio {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        },
    }
}

fn http(name: &str, url: String) -> ServerSpec {
    ServerSpec {
        name: name.to_owned(),
        target: Target::Http { url },
    }
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("arguments must be an object"),
    }
}

fn first_text(o: &CallOutcome) -> &str {
    o.content
        .iter()
        .find_map(|c| match c {
            Content::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .expect("a text block")
}

/// Polls `f` every 10 ms until it is true or `within` passes.
async fn eventually(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn server_state(hub: &McpHub, name: &str) -> (bool, String) {
    hub.servers()
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, up, err)| (up, err))
        .expect("server listed")
}

/// From /proc/PID/stat: (state, ppid, pgrp), or None once the pid is gone.
fn proc_stat(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Pids of the processes in process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|(_, _, g)| g == pgid))
        .collect()
}

/// Whether `pid` still runs or awaits reaping by us. A zombie whose parent
/// is not this process was orphaned to init, which reaps it (this sandbox's
/// init does not, so such zombies linger here): it is not ours.
fn alive_or_ours(pid: u32) -> bool {
    match proc_stat(pid) {
        None => false,
        Some(('Z' | 'X', ppid, _)) => ppid == std::process::id(),
        Some(_) => true,
    }
}

fn kill9(pid: u32) {
    let ok = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "kill -9 {pid}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A node process killed and reaped when dropped.
struct NodeServer(Child);

impl Drop for NodeServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Loaded with `node --import`: makes `listen(port)` bind loopback only
/// (server-everything would listen on every interface).
const LOOPBACK_ONLY: &str = r#"
import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if (typeof a[0] === "number" || typeof a[0] === "string") a.splice(1, 0, "127.0.0.1");
  return listen.apply(this, a);
};
"#;

/// server-everything in streamable HTTP mode on a free loopback port;
/// returns once it accepts connections.
async fn everything_over_http(p: &Peers, dir: &Path) -> (NodeServer, SocketAddr) {
    everything_on_port(p, dir, free_port()).await
}

async fn everything_on_port(p: &Peers, dir: &Path, port: u16) -> (NodeServer, SocketAddr) {
    let preload = dir.join("loopback-only.mjs");
    std::fs::write(&preload, LOOPBACK_ONLY).unwrap();
    let child = Command::new("node")
        .arg("--import")
        .arg(format!("file://{}", preload.display()))
        .arg(&p.everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn server-everything");
    let server = NodeServer(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (server, addr)
}

/// A TCP proxy to `upstream` that records every byte the client sends, so
/// a test can see what went on the wire (notifications/cancelled).
async fn recording_proxy(upstream: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sent = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(upstream).await else {
                continue;
            };
            let sent = Arc::clone(&sent);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        sent.lock().unwrap().extend_from_slice(&buf[..n]);
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    (addr, log)
}

/// A server on the official TypeScript SDK's low-level `Server`, for what
/// the npm servers do not do: tools listed two per page, a tool that adds a
/// tool (and says so with tools/list_changed), oversized and
/// unrepresentable results, and a slow tool whose cancellation it records.
const PAGED_SERVER: &str = r#"
import { Server } from "SDK/server/index.js";
import { StdioServerTransport } from "SDK/server/stdio.js";
import { ListToolsRequestSchema, CallToolRequestSchema } from "SDK/types.js";
import { writeFileSync } from "node:fs";

const tool = (name, description) => ({ name, description, inputSchema: { type: "object" } });
const tools = [
  tool("t0", "zero"), tool("t1", "one"), tool("t2", "two"), tool("t3", "three"),
  tool("add_tool", "adds a tool"), tool("big", "2 MB of text"),
  tool("huge_int", "an integer past 2^53"), tool("slow", "waits args.ms"),
  tool("seen", "what slow saw"), tool("bad.name", "left out by the host"),
];
const started = [], cancelled = [];
const server = new Server({ name: "paged", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
server.setRequestHandler(ListToolsRequestSchema, async (req) => {
  const at = Number(req.params?.cursor ?? 0);
  const next = at + 2 < tools.length ? String(at + 2) : undefined;
  return { tools: tools.slice(at, at + 2), nextCursor: next };
});
server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
  const name = req.params.name;
  const text = (t) => ({ content: [{ type: "text", text: t }] });
  if (name === "add_tool") {
    tools.push(tool(`t${tools.length}`, "added"));
    await server.sendToolListChanged();
    return text("added");
  }
  if (name === "big") return text("x".repeat(2_000_000));
  if (name === "huge_int") return { content: [], structuredContent: { n: 2 ** 53 + 2 } };
  if (name === "slow") {
    started.push(extra.requestId);
    if (req.params.arguments?.marker) writeFileSync(req.params.arguments.marker, "started");
    extra.signal.addEventListener("abort", () => cancelled.push(extra.requestId));
    await new Promise((r) => setTimeout(r, req.params.arguments?.ms ?? 30000));
    return text("slept");
  }
  if (name === "seen") return text(JSON.stringify({ started, cancelled }));
  return text(`called ${name}`);
});
await server.connect(new StdioServerTransport());
"#;

fn paged_server(p: &Peers, dir: &Path) -> PathBuf {
    let sdk = p.node_modules.join("@modelcontextprotocol/sdk/dist/esm");
    let path = dir.join("paged.mjs");
    let sdk_url = format!("file://{}", sdk.display());
    std::fs::write(&path, PAGED_SERVER.replace("SDK/", &format!("{sdk_url}/"))).unwrap();
    path
}

// ---------------------------------------------------------------- filesystem (stdio)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_tools_carry_their_annotations() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let fs = p.filesystem.to_str().unwrap();
    let hub = McpHub::start(vec![stdio("fs", "node", &[fs, root])], config()).await;
    assert_eq!(hub.servers(), vec![("fs".to_owned(), true, String::new())]);
    let tools = hub.tools();
    let get = |n: &str| {
        tools
            .iter()
            .find(|t| t.name == n)
            .unwrap_or_else(|| panic!("{n} listed"))
    };
    assert!(tools.iter().all(|t| t.up && t.server == "fs"));
    assert!(
        tools.windows(2).all(|w| w[0].name < w[1].name),
        "sorted by name"
    );

    let read = get("fs__read_file");
    assert_eq!(read.tool, "read_file");
    assert!(read.read_only);
    assert!(read.input_schema.is_object());
    let write = get("fs__write_file");
    assert!(!write.read_only && write.idempotent && write.destructive && !write.open_world);
    let edit = get("fs__edit_file");
    assert!(!edit.read_only && !edit.idempotent);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_then_read_round_trips_through_the_filesystem_server() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let fs = p.filesystem.to_str().unwrap();
    let hub = McpHub::start(
        vec![stdio("fs", "node", &[fs, root.to_str().unwrap()])],
        config(),
    )
    .await;
    let file = root.join("note.txt");
    let path = file.to_str().unwrap();

    let wrote = hub
        .call(
            "fs__write_file",
            args(json!({"path": path, "content": "héllo\nwörld\n"})),
        )
        .await
        .unwrap();
    assert!(!wrote.is_error, "{wrote:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "héllo\nwörld\n");

    let read = hub
        .call("fs__read_text_file", args(json!({"path": path})))
        .await
        .unwrap();
    assert!(!read.is_error);
    assert_eq!(first_text(&read), "héllo\nwörld\n");
    assert_eq!(read.structured, Some(json!({"content": "héllo\nwörld\n"})));

    let receipt = to_tool_result("call-1", &read);
    assert_eq!(receipt.id, "call-1");
    assert!(!receipt.is_error);
    assert!(
        matches!(&receipt.content[0].part, Some(part::Part::Text(t)) if t.text == "héllo\nwörld\n")
    );
    assert!(receipt.output.unwrap().fields.contains_key("content"));
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_outside_the_allowed_directory_is_a_tool_error() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let fs = p.filesystem.to_str().unwrap();
    let hub = McpHub::start(
        vec![stdio("fs", "node", &[fs, dir.path().to_str().unwrap()])],
        config(),
    )
    .await;
    let out = hub
        .call("fs__read_text_file", args(json!({"path": "/etc/hostname"})))
        .await
        .unwrap();
    assert!(out.is_error, "{out:?}");
    let receipt = to_tool_result("c", &out);
    assert!(receipt.is_error);
    assert!(!receipt.error.is_empty());
    hub.shutdown().await;
}

// ---------------------------------------------------------------- everything (HTTP)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_http_lists_its_tools_and_echoes() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = everything_over_http(p, dir.path()).await;
    let hub = McpHub::start(vec![http("every", format!("http://{addr}/mcp"))], config()).await;
    assert_eq!(server_state(&hub, "every"), (true, String::new()));
    let names: Vec<String> = hub.tools().into_iter().map(|t| t.name).collect();
    for want in [
        "every__echo",
        "every__get-sum",
        "every__trigger-long-running-operation",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let out = hub
        .call("every__echo", args(json!({"message": "hi there"})))
        .await
        .unwrap();
    assert_eq!(first_text(&out), "Echo: hi there");
    let sum = hub
        .call("every__get-sum", args(json!({"a": 2, "b": 40})))
        .await
        .unwrap();
    assert!(first_text(&sum).contains("42"), "{sum:?}");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_long_call_over_http_sends_cancelled_and_the_next_call_works() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = everything_over_http(p, dir.path()).await;
    let (proxy, sent) = recording_proxy(addr).await;
    let hub = McpHub::start(vec![http("every", format!("http://{proxy}/mcp"))], config()).await;
    assert!(server_state(&hub, "every").0);

    let call = {
        let hub = hub.clone();
        tokio::spawn(async move {
            hub.call(
                "every__trigger-long-running-operation",
                args(json!({"duration": 30, "steps": 30})),
            )
            .await
        })
    };
    let wire = |s: &str| String::from_utf8_lossy(&sent.lock().unwrap()).contains(s);
    eventually(Duration::from_secs(10), "the call is on the wire", || {
        wire("trigger-long-running-operation\"")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());

    eventually(
        Duration::from_secs(5),
        "notifications/cancelled is sent",
        || wire("notifications/cancelled"),
    )
    .await;
    // It names the request that was dropped.
    let text = String::from_utf8_lossy(&sent.lock().unwrap()).into_owned();
    let call_at = text
        .find("\"method\":\"tools/call\"")
        .expect("tools/call sent");
    let id_at = text[..call_at].rfind("\"id\":").expect("request id");
    let id: String = text[id_at + 5..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    assert!(
        text.contains(&format!("\"requestId\":{id}")),
        "cancelled names request {id}"
    );

    let started = Instant::now();
    let out = hub
        .call("every__echo", args(json!({"message": "still here"})))
        .await
        .unwrap();
    assert_eq!(first_text(&out), "Echo: still here");
    assert!(started.elapsed() < Duration::from_secs(5));
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_goes_away_is_marked_down_then_reconnected() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = everything_over_http(p, dir.path()).await;
    let config = McpConfig {
        call_timeout: Duration::from_secs(5),
        ..config()
    };
    let hub = McpHub::start(vec![http("every", format!("http://{addr}/mcp"))], config).await;
    assert!(server_state(&hub, "every").0);
    drop(server);
    // The first call after it went away fails, and makes the hub check.
    let err = hub
        .call("every__echo", args(json!({"message": "x"})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, McpError::ServerDown { .. } | McpError::Timeout { .. }),
        "{err:?}"
    );
    eventually(Duration::from_secs(10), "the server is down", || {
        !server_state(&hub, "every").0
    })
    .await;
    assert!(matches!(
        hub.call("every__echo", args(json!({"message": "x"}))).await,
        Err(McpError::ServerDown { .. })
    ));
    let _server = everything_on_port(p, dir.path(), addr.port()).await;
    eventually(Duration::from_secs(20), "the server is back", || {
        server_state(&hub, "every").0
    })
    .await;
    let out = hub
        .call("every__echo", args(json!({"message": "back"})))
        .await
        .unwrap();
    assert_eq!(first_text(&out), "Echo: back");
    hub.shutdown().await;
}

// ---------------------------------------------------------------- the paged server (stdio)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_across_pages_and_unofferable_names_left_out() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let hub = McpHub::start(
        vec![stdio("paged", "node", &[server.to_str().unwrap()])],
        config(),
    )
    .await;
    let names: Vec<String> = hub.tools().into_iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "paged__add_tool",
            "paged__big",
            "paged__huge_int",
            "paged__seen",
            "paged__slow",
            "paged__t0",
            "paged__t1",
            "paged__t2",
            "paged__t3",
        ]
    );
    // No annotations: the most conservative reading.
    let t0 = hub
        .tools()
        .into_iter()
        .find(|t| t.name == "paged__t0")
        .unwrap();
    assert!(!t0.read_only && t0.destructive && !t0.idempotent && t0.open_world);
    assert_eq!(t0.description, "zero");
    assert_eq!(
        hub.call("paged__bad.name", Map::new()).await.unwrap_err(),
        McpError::UnknownTool {
            name: "paged__bad.name".into()
        }
    );
    assert!(matches!(
        hub.call("paged__nope", Map::new()).await,
        Err(McpError::UnknownTool { .. })
    ));
    assert!(matches!(
        hub.call("nope", Map::new()).await,
        Err(McpError::UnknownTool { .. })
    ));
    assert!(matches!(
        hub.call("other__t0", Map::new()).await,
        Err(McpError::UnknownTool { .. })
    ));
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_list_changed_notification_updates_the_catalog_and_ticks_the_watch() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let hub = McpHub::start(
        vec![stdio("paged", "node", &[server.to_str().unwrap()])],
        config(),
    )
    .await;
    let mut changes = hub.changes();
    changes.borrow_and_update();
    assert!(!hub.tools().iter().any(|t| t.name == "paged__t10"));
    let out = hub.call("paged__add_tool", Map::new()).await.unwrap();
    assert_eq!(first_text(&out), "added");
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the watch ticks")
        .unwrap();
    eventually(Duration::from_secs(5), "the new tool is listed", || {
        hub.tools().iter().any(|t| t.name == "paged__t10")
    })
    .await;
    let out = hub.call("paged__t10", Map::new()).await.unwrap();
    assert_eq!(first_text(&out), "called t10");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_unrepresentable_results_are_refused() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let hub = McpHub::start(
        vec![stdio("paged", "node", &[server.to_str().unwrap()])],
        config(),
    )
    .await;
    assert_eq!(
        hub.call("paged__big", Map::new()).await.unwrap_err(),
        McpError::TooLarge { limit: 1 << 20 }
    );
    assert_eq!(
        hub.call("paged__huge_int", Map::new()).await.unwrap_err(),
        McpError::Result(JsonError::IntegerOutOfRange { at: "/n".into() })
    );
    // The server is fine afterwards.
    assert_eq!(
        first_text(&hub.call("paged__t1", Map::new()).await.unwrap()),
        "called t1"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_and_the_server_sees_it_cancelled() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let config = McpConfig {
        call_timeout: Duration::from_millis(700),
        ..config()
    };
    let hub = McpHub::start(
        vec![stdio("paged", "node", &[server.to_str().unwrap()])],
        config,
    )
    .await;
    let started = Instant::now();
    let err = hub
        .call("paged__slow", args(json!({"ms": 30000})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, McpError::Timeout { ref server, .. } if server == "paged"),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut seen = Value::Null;
    eventually(
        Duration::from_secs(5),
        "the server saw the cancellation",
        || {
            let hub = hub.clone();
            let out = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(async move { hub.call("paged__seen", Map::new()).await })
            })
            .join()
            .unwrap()
            .unwrap();
            seen = serde_json::from_str(first_text(&out)).unwrap();
            seen["cancelled"].as_array().is_some_and(|c| !c.is_empty())
        },
    )
    .await;
    assert_eq!(
        seen["cancelled"], seen["started"],
        "the slow call's own request id"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_concurrency_bound_wait_for_a_free_slot() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let config = McpConfig {
        call_timeout: Duration::from_millis(1500),
        max_concurrent_calls: 1,
        ..config()
    };
    let hub = McpHub::start(
        vec![stdio("paged", "node", &[server.to_str().unwrap()])],
        config,
    )
    .await;
    let marker = dir.path().join("slow-started").to_str().unwrap().to_owned();
    let slow_asked = Instant::now();
    let slow = {
        let hub = hub.clone();
        let marker = marker.clone();
        tokio::spawn(async move {
            hub.call("paged__slow", args(json!({"ms": 5000, "marker": marker})))
                .await
        })
    };
    eventually(Duration::from_secs(5), "the slow call runs", || {
        Path::new(&marker).exists()
    })
    .await;
    // The one slot is taken until the slow call times out: this call waits
    // for it (its own timeout, started later, leaves room), then runs.
    let out = hub.call("paged__t0", Map::new()).await.unwrap();
    assert_eq!(first_text(&out), "called t0");
    assert!(
        slow_asked.elapsed() >= Duration::from_millis(1500),
        "t0 ran only once the slow call gave its slot back"
    );
    assert!(matches!(slow.await.unwrap(), Err(McpError::Timeout { .. })));
    hub.shutdown().await;
}

// ---------------------------------------------------------------- failure, restart, shutdown

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_down_and_the_others_still_serve() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let started = Instant::now();
    let hub = McpHub::start(
        vec![
            stdio("ghost", "/nonexistent/mcp-server", &["--flag"]),
            stdio("paged", "node", &[server.to_str().unwrap()]),
        ],
        config(),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(15));
    let (up, err) = server_state(&hub, "ghost");
    assert!(!up);
    assert!(
        err.contains("cannot start /nonexistent/mcp-server"),
        "{err}"
    );
    assert!(server_state(&hub, "paged").0);
    let t0 = Instant::now();
    let err = hub.call("ghost__anything", Map::new()).await.unwrap_err();
    assert!(
        matches!(err, McpError::ServerDown { ref server, .. } if server == "ghost"),
        "{err:?}"
    );
    assert!(t0.elapsed() < Duration::from_millis(100), "fails promptly");
    assert!(hub.call("paged__t0", Map::new()).await.is_ok());
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_stdio_child_is_marked_down_then_restarted() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let hub = McpHub::start(
        vec![stdio("paged", "node", &[server.to_str().unwrap()])],
        config(),
    )
    .await;
    let mut changes = hub.changes();
    changes.borrow_and_update();
    let pid = hub.server_pid("paged").expect("a pid while up");
    kill9(pid);
    let mut why = String::new();
    eventually(Duration::from_secs(5), "the server is down", || {
        let (up, err) = server_state(&hub, "paged");
        why = err;
        !up
    })
    .await;
    assert!(why.starts_with("connection closed"), "{why}");
    assert!(changes.has_changed().unwrap());
    assert!(hub.tools().iter().all(|t| !t.up) || server_state(&hub, "paged").0);
    // Calls while down fail promptly (unless the restart already won).
    if let Err(e) = hub.call("paged__t0", Map::new()).await {
        assert!(matches!(e, McpError::ServerDown { .. }), "{e:?}");
    }
    eventually(Duration::from_secs(15), "the server is back", || {
        server_state(&hub, "paged").0
    })
    .await;
    let new_pid = hub.server_pid("paged").unwrap();
    assert_ne!(new_pid, pid);
    assert!(!alive_or_ours(pid), "the killed child is reaped");
    assert_eq!(
        first_text(&hub.call("paged__t0", Map::new()).await.unwrap()),
        "called t0"
    );
    assert!(hub.tools().iter().all(|t| t.up));
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_wrapper_whose_child_holds_the_pipes_is_noticed_and_its_group_stopped() {
    // Like `npx`: the process we spawn runs the server as its own child,
    // which inherits the pipes, so killing the wrapper closes nothing.
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let script = format!("node '{}'; exit 0", server.display());
    let hub = McpHub::start(vec![stdio("wrapped", "sh", &["-c", &script])], config()).await;
    assert!(server_state(&hub, "wrapped").0, "{:?}", hub.servers());
    let leader = hub.server_pid("wrapped").unwrap();
    let members = group_members(leader);
    let inner: Vec<u32> = members.iter().copied().filter(|&m| m != leader).collect();
    assert!(
        !inner.is_empty(),
        "the wrapper's node child is in its group: {members:?}"
    );
    kill9(leader);
    let mut why = String::new();
    eventually(Duration::from_secs(5), "the server is down", || {
        let (up, err) = server_state(&hub, "wrapped");
        why = err;
        !up
    })
    .await;
    assert!(why.starts_with("process exited"), "{why}");
    eventually(Duration::from_secs(15), "the server is back", || {
        server_state(&hub, "wrapped").0
    })
    .await;
    assert!(
        inner.iter().all(|&pid| !alive_or_ours(pid)),
        "the old node child is stopped"
    );
    assert!(!alive_or_ours(leader), "the wrapper is reaped");
    assert_eq!(
        first_text(&hub.call("wrapped__t0", Map::new()).await.unwrap()),
        "called t0"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_child_processes() {
    let p = peers_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let server = paged_server(p, dir.path());
    let fs = p.filesystem.to_str().unwrap();
    // The second server leaves a background grandchild in its group.
    let script = format!("sleep 300 & exec node '{}'", server.display());
    let hub = McpHub::start(
        vec![
            stdio("fs", "node", &[fs, dir.path().to_str().unwrap()]),
            stdio("paged", "sh", &["-c", &script]),
        ],
        config(),
    )
    .await;
    let mut pids = Vec::new();
    for name in ["fs", "paged"] {
        let pid = hub
            .server_pid(name)
            .unwrap_or_else(|| panic!("{name} up: {:?}", hub.servers()));
        pids.extend(group_members(pid));
        pids.push(pid);
    }
    let paged = hub.server_pid("paged").unwrap();
    assert!(group_members(paged).len() >= 2, "node and its sleep");

    let started = Instant::now();
    hub.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(10));
    for pid in &pids {
        assert!(
            !alive_or_ours(*pid),
            "pid {pid} outlived shutdown: {:?}",
            proc_stat(*pid)
        );
    }
    assert!(hub.servers().iter().all(|(_, up, _)| !up));
    assert!(matches!(
        hub.call("fs__read_file", Map::new()).await,
        Err(McpError::ServerDown { .. })
    ));
    hub.shutdown().await; // twice is fine
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_children_get_only_allowlisted_environment() {
    let p = peers_or_skip!();
    let every = p.everything.to_str().unwrap();
    // cargo sets CARGO_MANIFEST_DIR for the test process; the child must
    // not see it unless asked for.
    let hub = McpHub::start(vec![stdio("every", "node", &[every, "stdio"])], config()).await;
    let env = hub.call("every__get-env", Map::new()).await.unwrap();
    let text = first_text(&env);
    assert!(text.contains("\"PATH\""), "{text}");
    assert!(!text.contains("CARGO_MANIFEST_DIR"), "{text}");
    hub.shutdown().await;

    let config = McpConfig {
        child_env: vec!["CARGO_MANIFEST_DIR".into()],
        ..config()
    };
    let hub = McpHub::start(vec![stdio("every", "node", &[every, "stdio"])], config).await;
    let env = hub.call("every__get-env", Map::new()).await.unwrap();
    assert!(first_text(&env).contains("CARGO_MANIFEST_DIR"));
    hub.shutdown().await;
}
