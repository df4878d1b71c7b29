//! MCP tools and the agent loop through the host (issue #36):
//! `cargo bench -p agentsessions-shells --bench mcp_tools`.
//!
//! One in-process daemon (SQLite journal on the real disk, one runtime
//! thread as agentsessionsd runs) with npm's
//! `@modelcontextprotocol/server-filesystem` as its MCP server `fs`, a
//! remote harness `caller` and an OpenAI-compatible fake provider `fake`
//! that streams. Three measures, each against a raw baseline in the same
//! run, in alternating blocks so drift hits both alike:
//!
//! 1. *Tool call.* The `caller` harness makes one TOOL_CALL of
//!    `fs__read_text_file` (read-only: policy `auto`) per turn, on a new
//!    session each; its latency is timed inside the harness around
//!    `sink.tool_call` (TOOL_CALL sent → durable receipt back). Baselines:
//!    the same call through [`McpHub::call`] and through raw rmcp
//!    (`Peer::call_tool`), each to a server child of its own started the
//!    same way, on the same file. Also printed: the host's call cut in
//!    three at the moments its TOOL_CALL and TOOL_RESULT records reach the
//!    client, and what the path's durable writes cost alone: two one-event
//!    journal appends on the daemon's journal (a read-only tool makes no
//!    synced ledger commit); a tool-ledger commit in a ledger file beside
//!    it is printed for the calls that do make two.
//! 2. *First token.* The built-in `chat` harness on the fake: from Exec
//!    sent to the first `Delta` on the Exec stream, against the same HTTP
//!    request (the bytes the host sent) POSTed straight to the fake with
//!    reqwest, to the first body chunk carrying a content delta. Also
//!    printed: when the request reached the fake, both ways.
//! 3. *Per-step host CPU.* One `agent` turn whose model asks for
//!    `fs__read_text_file` `MCP_BENCH_STEPS` times (default 16), then
//!    answers. The fake samples the daemon's CPU time (every thread of this
//!    process except the fake's, the client's and the harness's, summed
//!    from `/proc/self/task/*/schedstat`) when each model request arrives,
//!    the moment the host sits waiting on the provider; step k is request
//!    k to request k+1 (the model's reply, the TOOL_CALL, the MCP call,
//!    the receipt and the next request). Medians per step over the turns;
//!    the slope of the medians; the request's and its MODEL_CALL record's
//!    sizes at the first and the last step.
//!
//! The fake, the client and the harness each run on a current-thread
//! runtime on a thread of their own, as separate processes would.
//!
//! Env: `MCP_BENCH_CALLS` (default 300) calls per path in (1);
//! `MCP_BENCH_FIRST` (default 300) requests per path in (2);
//! `MCP_BENCH_TURNS` (default 12, plus one warm-up) agent turns in (3);
//! `MCP_BENCH_STEPS` (default 16); `MCP_BENCH_DIR` the journal's disk
//! (default: the temp dir). Without node/npm it prints SKIPPED and exits 0.

#[allow(dead_code)]
#[path = "../tests/support/caller.rs"]
mod caller;
#[allow(dead_code)]
#[path = "../tests/support/mcp_peers.rs"]
mod mcp_peers;
#[path = "../tests/support/daemon.rs"]
mod support;

// The allocator agentsessionsd runs on, so the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    Event, EventKind, ExecRequest, HarnessDescriptor, ToolResult, event, exec_update::Update,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::harness::{Harness, HarnessError, Sink, StartInfo};
use agentsessions_shells::journal::sqlite::SqliteJournal;
use agentsessions_shells::journal::{AppendBatch, JournalStore};
use agentsessions_shells::mcp::{McpConfig, McpHub, ServerSpec};
use agentsessions_shells::tools::{LedgerStore, ToolLedger};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// What the read tool returns: 1 KiB of text starting with this marker.
const MARKER: &str = "bench-file-marker";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Figures {
    p50: Duration,
    p99: Duration,
}

fn figures(mut v: Vec<Duration>) -> Figures {
    v.sort();
    Figures {
        p50: pct(&v, 0.5),
        p99: pct(&v, 0.99),
    }
}

// ---------------------------------------------------------------------------
// Threads of their own, and the daemon's CPU time.

/// Threads that are not the daemon's (the fake's, the client's, the
/// harness's): left out of [`daemon_cpu_ns`].
static NOT_DAEMON: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// This thread's id, from `/proc/thread-self` (`PID/task/TID`).
fn tid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .expect("/proc/thread-self")
}

/// CPU time of every thread of this process but [`NOT_DAEMON`], in ns
/// (`sum_exec_runtime` from each task's schedstat).
fn daemon_cpu_ns() -> u64 {
    let skip = NOT_DAEMON.lock().unwrap().clone();
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let tid = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok());
        if tid.is_none_or(|t| skip.contains(&t)) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// A current-thread runtime on a thread of its own (not the daemon's),
/// alive until dropped.
struct Side {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Side {
    fn new(name: &str) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                NOT_DAEMON.lock().unwrap().push(tid());
                tx.send(rt.handle().clone()).unwrap();
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .unwrap();
        Self {
            handle: rx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Runs `f` on this thread and waits for it without blocking the
    /// caller's runtime.
    async fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        self.handle.spawn(f).await.unwrap()
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------
// The fake provider: HTTP/1.1 keep-alive, chunked server-sent events.

/// One request the fake answered.
#[derive(Clone)]
struct Seen {
    /// When its body was read.
    at: Instant,
    /// [`daemon_cpu_ns`] then (agent requests only).
    cpu_ns: u64,
    /// It offered tools (the agent's requests do, the chat's do not).
    agent: bool,
    /// `tool` messages in it, and how many of them hold the file's text.
    tool_results: usize,
    good_results: usize,
    target: String,
    body: Vec<u8>,
}

struct Fake {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fake {
    /// The chat request it answered last.
    fn last_chat(&self) -> Seen {
        let seen = self.seen.lock().unwrap();
        seen.iter().rfind(|s| !s.agent).cloned().unwrap()
    }
}

/// Starts the fake on the current runtime. An agent request with fewer than
/// `steps` tool results is answered with one call of `fs__read_text_file`
/// on `file`; with `steps`, with a text answer. A chat request is answered
/// with text: the first delta at once, three more 1 ms apart.
async fn fake(file: String, steps: usize) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            conn.set_nodelay(true).unwrap();
            let (record, file) = (Arc::clone(&record), file.clone());
            tokio::spawn(async move {
                let _ = connection(conn, record, file, steps).await;
            });
        }
    });
    Fake { base, seen }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn connection(
    mut conn: tokio::net::TcpStream,
    seen: Arc<Mutex<Vec<Seen>>>,
    file: String,
    steps: usize,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let n = conn.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let target = head.split(' ').nth(1).unwrap_or("").to_owned();
        let len = head
            .split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let n = conn.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body: Vec<u8> = buf.drain(..head_end + len).skip(head_end).collect();
        let at = Instant::now();
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let agent = request["tools"].as_array().is_some_and(|t| !t.is_empty());
        let tools: Vec<&Value> = request["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "tool").collect())
            .unwrap_or_default();
        let good_results = tools
            .iter()
            .filter(|m| m.to_string().contains(MARKER))
            .count();
        let cpu_ns = if agent { daemon_cpu_ns() } else { 0 };
        seen.lock().unwrap().push(Seen {
            at,
            cpu_ns,
            agent,
            tool_results: tools.len(),
            good_results,
            target,
            body: body.clone(),
        });
        let frames = match (agent, tools.len()) {
            (true, n) if n < steps => tool_call_frames(n, &file),
            (true, _) => text_frames(&["all read"]),
            (false, _) => text_frames(&["Hello", " from", " the", " fake"]),
        };
        let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
            Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
        for (i, frame) in frames.iter().enumerate() {
            let data = format!("data: {frame}\n\n");
            out.extend_from_slice(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes());
            // A chat's later deltas come 1 ms apart; the first goes with
            // the headers.
            if !agent && (1..=3).contains(&i) {
                conn.write_all(&out).await?;
                out.clear();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        out.extend_from_slice(b"0\r\n\r\n");
        conn.write_all(&out).await?;
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
           "model": "fake",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

fn usage() -> String {
    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
           "model": "fake", "choices": [],
           "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}})
    .to_string()
}

fn tool_call_frames(n: usize, file: &str) -> Vec<String> {
    let call = json!({"index": 0, "id": format!("call_{n}"), "type": "function",
                      "function": {"name": "fs__read_text_file",
                                   "arguments": json!({"path": file}).to_string()}});
    vec![
        chunk(json!({"role": "assistant", "tool_calls": [call]}), None),
        chunk(json!({}), Some("tool_calls")),
        usage(),
        "[DONE]".into(),
    ]
}

fn text_frames(words: &[&str]) -> Vec<String> {
    let mut frames: Vec<String> = words
        .iter()
        .enumerate()
        .map(|(i, w)| match i {
            0 => chunk(json!({"role": "assistant", "content": w}), None),
            _ => chunk(json!({"content": w}), None),
        })
        .collect();
    frames.push(chunk(json!({}), Some("stop")));
    frames.push(usage());
    frames.push("[DONE]".into());
    frames
}

// ---------------------------------------------------------------------------
// The harness of (1).

/// The tests' caller harness ([`caller::Caller`]), recording when it sent
/// its call and when the receipt came back.
struct Caller {
    took: Arc<Mutex<Vec<(Instant, Instant)>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl Harness for Caller {
    fn describe(&self) -> HarnessDescriptor {
        caller::descriptor()
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let call = caller::asked_call(&start)?;
        let t = Instant::now();
        let receipt = sink.tool_call(call).await?;
        let took = (t, Instant::now());
        if receipt.is_error {
            self.errors.lock().unwrap().push(receipt.error.clone());
        }
        self.took.lock().unwrap().push(took);
        sink.output("done").await
    }
}

// ---------------------------------------------------------------------------
// The client side.

async fn connect(addr: std::net::SocketAddr) -> SessionsClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    SessionsClient::new(channel)
}

/// What the client saw of one Exec.
struct ExecSeen {
    /// When the call was made.
    sent: Instant,
    /// When the first Delta came.
    first_delta: Option<Instant>,
    /// Each record's event kind, when it came, and its encoded size.
    records: Vec<(i32, Instant, usize)>,
}

impl ExecSeen {
    /// When the first record of `kind` came.
    fn at(&self, kind: EventKind) -> Instant {
        self.records
            .iter()
            .find(|r| r.0 == kind as i32)
            .map(|r| r.1)
            .unwrap_or_else(|| panic!("no {kind:?} record"))
    }
}

/// Runs an Exec to its end.
async fn exec(c: &mut SessionsClient<Channel>, req: ExecRequest) -> ExecSeen {
    let sent = Instant::now();
    let mut stream = c.exec(req).await.unwrap().into_inner();
    let (mut first_delta, mut records) = (None, Vec::new());
    while let Some(u) = stream.message().await.unwrap() {
        match u.update {
            Some(Update::Delta(_)) if first_delta.is_none() => first_delta = Some(Instant::now()),
            Some(Update::Record(r)) => {
                let size = prost::Message::encoded_len(&r);
                records.push((r.event.map_or(0, |e| e.kind), Instant::now(), size));
            }
            _ => {}
        }
    }
    ExecSeen {
        sent,
        first_delta,
        records,
    }
}

struct ToolFigures {
    host: Vec<Duration>,
    /// The host's call in three parts, with the records' arrival at the
    /// client as marks: TOOL_CALL sent → its record; its record → the
    /// TOOL_RESULT record; that record → the receipt at the harness.
    to_call: Vec<Duration>,
    between: Vec<Duration>,
    back: Vec<Duration>,
    hub: Vec<Duration>,
    raw: Vec<Duration>,
    turn: Vec<Duration>,
    /// One-event journal appends, and ledger commits (start or finish).
    appends: Vec<Duration>,
    commits: Vec<Duration>,
}

/// The durable writes the host's path makes, alone: a journal append of
/// one 1 KiB event as the drive loop makes it (in place when the writer is
/// idle, else through the writer thread), on the daemon's runtime; and a
/// tool-ledger start and finish from a blocking thread, as the executor
/// makes them, in a ledger file beside the daemon's.
struct Writes {
    server: tokio::runtime::Handle,
    store: Arc<SqliteJournal>,
    ledger: Arc<ToolLedger>,
    head: i64,
    made: usize,
}

impl Writes {
    async fn block(&mut self, n: usize) -> (Vec<Duration>, Vec<Duration>) {
        let (store, ledger) = (Arc::clone(&self.store), Arc::clone(&self.ledger));
        let (mut head, first) = (self.head, self.made);
        self.made += n;
        let text = "x".repeat(1024);
        let (appends, commits, head) = self
            .server
            .spawn(async move {
                let mut appends = Vec::with_capacity(n);
                for i in first..first + n {
                    let batch = AppendBatch {
                        session: "bench-append".into(),
                        expected_last_seq: head,
                        fence: 0,
                        compute_state: Some(agentsessions_proto::v1::ComputeState::ComputeLive),
                        events: vec![Event {
                            execution_id: "0123456789abcdef".into(),
                            kind: EventKind::EventOutput as i32,
                            body: Some(event::Body::Message(support::text(&format!(
                                "{i:08} {text}"
                            )))),
                            ..Default::default()
                        }],
                        now_unix_nanos: 1,
                        release_lease: None,
                    };
                    let t = Instant::now();
                    let records = match store.try_append_now(batch) {
                        Ok(r) => r.unwrap(),
                        Err(batch) => store.append(batch).await.unwrap(),
                    };
                    appends.push(t.elapsed());
                    head = records[0].seq;
                }
                let commits = tokio::task::spawn_blocking(move || {
                    let result = ToolResult {
                        id: "c1".into(),
                        content: vec![support::text(&text).parts.remove(0)],
                        ..ToolResult::default()
                    };
                    let mut commits = Vec::with_capacity(2 * n);
                    for i in first..first + n {
                        let key = format!("k{i}");
                        let t = Instant::now();
                        ledger.start("bench", &key, "fs__read_text_file").unwrap();
                        commits.push(t.elapsed());
                        let t = Instant::now();
                        ledger
                            .finish("bench", &key, "fs__read_text_file", &result)
                            .unwrap();
                        commits.push(t.elapsed());
                    }
                    commits
                })
                .await
                .unwrap();
                (appends, commits, head)
            })
            .await
            .unwrap();
        self.head = head;
        (appends, commits)
    }
}

/// (1): host, hub and raw rmcp calls in alternating blocks.
async fn tool_calls(
    addr: std::net::SocketAddr,
    server: String,
    file: String,
    took: Arc<Mutex<Vec<(Instant, Instant)>>>,
    mut writes: Writes,
    n: usize,
) -> ToolFigures {
    let mut c = connect(addr).await;
    let args = json!({"path": file});
    let input = json!({"tool": "fs__read_text_file", "args": args}).to_string();
    let hub = McpHub::start(
        vec![format!("fs={server}").parse::<ServerSpec>().unwrap()],
        McpConfig::default(),
    )
    .await;
    let words = shlex::split(&server).unwrap();
    let mut cmd = tokio::process::Command::new(&words[0]);
    cmd.args(&words[1..]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let raw = ().serve(transport).await.unwrap();
    let params = CallToolRequestParams::new("read_text_file")
        .with_arguments(args.as_object().unwrap().clone());

    let block = 20;
    let mut f = ToolFigures {
        host: Vec::new(),
        to_call: Vec::new(),
        between: Vec::new(),
        back: Vec::new(),
        hub: Vec::new(),
        raw: Vec::new(),
        turn: Vec::new(),
        appends: Vec::new(),
        commits: Vec::new(),
    };
    let warm = block;
    for round in 0..(warm + n).div_ceil(block) {
        let keep = round * block >= warm;
        for _ in 0..block {
            let uid = support::create(&mut c, "caller").await;
            let seen = exec(
                &mut c,
                ExecRequest {
                    session: uid,
                    inputs: vec![support::text(&input)],
                    ..Default::default()
                },
            )
            .await;
            let end = Instant::now();
            // The harness recorded its call before it output, so before the
            // turn ended.
            let (sent, back) = *took.lock().unwrap().last().unwrap();
            let (call, result) = (
                seen.at(EventKind::EventToolCall),
                seen.at(EventKind::EventToolResult),
            );
            if keep {
                f.host.push(back - sent);
                f.to_call.push(call - sent);
                f.between.push(result - call);
                f.back.push(back.saturating_duration_since(result));
                f.turn.push(end - seen.sent);
            }
        }
        for _ in 0..block {
            let t = Instant::now();
            let out = hub
                .call("fs__read_text_file", args.as_object().unwrap().clone())
                .await
                .unwrap();
            let d = t.elapsed();
            assert!(!out.is_error);
            if keep {
                f.hub.push(d);
            }
        }
        for _ in 0..block {
            let t = Instant::now();
            let out = raw.call_tool(params.clone()).await.unwrap();
            let d = t.elapsed();
            assert_ne!(out.is_error, Some(true));
            if keep {
                f.raw.push(d);
            }
        }
        let (a, c) = writes.block(block).await;
        if keep {
            f.appends.extend(a);
            f.commits.extend(c);
        }
    }
    hub.shutdown().await;
    let _ = raw.cancel().await;
    f
}

struct FirstFigures {
    /// Exec sent → first Delta; Exec sent → the request at the fake.
    host: Vec<Duration>,
    host_request: Vec<Duration>,
    /// Exec sent → the MODEL_CALL record at the client.
    host_model_call: Vec<Duration>,
    /// POST sent → first content chunk; POST sent → the request at the fake.
    direct: Vec<Duration>,
    direct_request: Vec<Duration>,
    request_bytes: usize,
}

/// (2): chat turns through the host and the same request straight to the
/// fake, in alternating blocks.
async fn first_tokens(addr: std::net::SocketAddr, fake: Arc<Fake>, n: usize) -> FirstFigures {
    let mut c = connect(addr).await;
    let http = reqwest::Client::new();
    let mut f = FirstFigures {
        host: Vec::new(),
        host_request: Vec::new(),
        host_model_call: Vec::new(),
        direct: Vec::new(),
        direct_request: Vec::new(),
        request_bytes: 0,
    };
    let block = 20;
    let warm = block;
    let mut sent: Option<Seen> = None;
    for round in 0..(warm + n).div_ceil(block) {
        let keep = round * block >= warm;
        for _ in 0..block {
            let uid = support::create(&mut c, "chat").await;
            let turn = exec(
                &mut c,
                ExecRequest {
                    session: uid,
                    inputs: vec![support::text("hi")],
                    ..Default::default()
                },
            )
            .await;
            let (t, first) = (turn.sent, turn.first_delta.expect("the chat turn streamed"));
            let seen = fake.last_chat();
            if keep {
                f.host.push(first - t);
                f.host_request.push(seen.at - t);
                f.host_model_call
                    .push(turn.at(EventKind::EventModelCall) - t);
            }
            sent.get_or_insert(seen);
        }
        let sent = sent.as_ref().unwrap();
        f.request_bytes = sent.body.len();
        for _ in 0..block {
            let t = Instant::now();
            let mut r = http
                .post(format!("{}{}", fake.base, sent.target))
                .header("content-type", "application/json")
                .body(sent.body.clone())
                .send()
                .await
                .unwrap();
            let mut first = None;
            while let Some(bytes) = r.chunk().await.unwrap() {
                if first.is_none() && find(&bytes, b"\"content\"").is_some() {
                    first = Some(Instant::now());
                }
            }
            let seen = fake.last_chat();
            if keep {
                f.direct.push(first.expect("a content delta") - t);
                f.direct_request.push(seen.at - t);
            }
        }
    }
    f
}

/// One agent turn's steps: host CPU and wall µs per step; the model
/// request's bytes and its MODEL_CALL record's at step 1 and at the last.
struct Turn {
    cpu: Vec<f64>,
    wall: Vec<f64>,
    bytes: (usize, usize),
    record_bytes: (usize, usize),
}

/// (3): agent turns of `steps` tool calls each.
async fn agent_turns(
    addr: std::net::SocketAddr,
    fake: Arc<Fake>,
    turns: usize,
    steps: usize,
) -> Vec<Turn> {
    let mut c = connect(addr).await;
    let config = json!({"tools": ["fs__read_text_file"], "max_steps": steps + 8});
    let mut out = Vec::new();
    for i in 0..=turns {
        let from = fake.seen.lock().unwrap().len();
        let uid = support::create(&mut c, "agent").await;
        let turn = exec(
            &mut c,
            ExecRequest {
                session: uid,
                inputs: vec![support::text("read the file, again and again")],
                config: config.to_string().into_bytes(),
                ..Default::default()
            },
        )
        .await;
        let seen: Vec<Seen> = fake.seen.lock().unwrap()[from..]
            .iter()
            .filter(|s| s.agent)
            .cloned()
            .collect();
        let results: Vec<usize> = seen.iter().map(|s| s.tool_results).collect();
        assert_eq!(
            results,
            (0..=steps).collect::<Vec<_>>(),
            "one model request per step ({} records)",
            turn.records.len()
        );
        assert!(
            seen.iter().all(|s| s.good_results == s.tool_results),
            "every receipt holds the file's text"
        );
        let model_calls: Vec<usize> = turn
            .records
            .iter()
            .filter(|r| r.0 == EventKind::EventModelCall as i32)
            .map(|r| r.2)
            .collect();
        assert_eq!(model_calls.len(), steps + 1);
        if i == 0 {
            continue; // warm-up
        }
        let pairs = seen.windows(2);
        out.push(Turn {
            cpu: pairs
                .clone()
                .map(|w| w[1].cpu_ns.saturating_sub(w[0].cpu_ns) as f64 / 1e3)
                .collect(),
            wall: pairs.map(|w| us(w[1].at - w[0].at)).collect(),
            bytes: (seen[0].body.len(), seen[steps - 1].body.len()),
            record_bytes: (model_calls[0], model_calls[steps - 1]),
        });
    }
    out
}

fn main() {
    let Some(peers) = mcp_peers::peers("mcp_tools bench") else {
        println!("SKIPPED: node/npm or the MCP peers are missing (see stderr)");
        return;
    };
    let calls = env_usize("MCP_BENCH_CALLS", 300);
    let firsts = env_usize("MCP_BENCH_FIRST", 300);
    let turns = env_usize("MCP_BENCH_TURNS", 12).max(1);
    let steps = env_usize("MCP_BENCH_STEPS", 16).max(4);
    let base = std::env::var_os("MCP_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("mcp-bench-")
        .tempdir_in(base)
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    // The filesystem server reports canonical paths.
    let root = files.path().canonicalize().unwrap();
    let file = root.join("hello.txt");
    let mut text = format!("{MARKER}\n");
    while text.len() < 1024 {
        text.push_str("the quick brown fox jumps over the lazy dog\n");
    }
    std::fs::write(&file, &text[..1024]).unwrap();
    let file = file.display().to_string();
    let server = format!(
        "node {} {}",
        shlex::try_quote(&peers.filesystem.display().to_string()).unwrap(),
        shlex::try_quote(&root.display().to_string()).unwrap()
    );

    let (fake_side, client, harness) =
        (Side::new("fake"), Side::new("client"), Side::new("harness"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "# mcp_tools bench (journal in {}; {calls} tool calls, {firsts} first tokens, \
         {turns} agent turns of {steps} steps)\n",
        dir.path().display()
    );
    rt.block_on(async {
        let fake = {
            let file = file.clone();
            Arc::new(fake_side.run(async move { fake(file, steps).await }).await)
        };
        let took = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let caller = Arc::new(Caller {
            took: Arc::clone(&took),
            errors: Arc::clone(&errors),
        });
        let (caller_addr, _stop_harness) = harness
            .run(async move { support::serve_harness(caller).await })
            .await;
        let daemon = Daemon::start(DaemonConfig {
            harnesses: vec![("caller".into(), caller_addr)],
            mcp: vec![format!("fs={server}")],
            models: vec![format!("fake={}/v1", fake.base)],
            ..support::config(dir.path())
        })
        .await
        .unwrap();
        let addr = daemon.addr;

        // (1) Tool calls.
        let writes = Writes {
            server: tokio::runtime::Handle::current(),
            store: daemon.journal(),
            ledger: Arc::new(ToolLedger::open(dir.path().join("bench.tools.db")).unwrap()),
            head: 0,
            made: 0,
        };
        let tools = {
            let (server, file, took) = (server.clone(), file.clone(), Arc::clone(&took));
            client
                .run(async move { tool_calls(addr, server, file, took, writes, calls).await })
                .await
        };
        let errors = errors.lock().unwrap().clone();
        assert!(errors.is_empty(), "error receipts: {errors:?}");
        let (host, hub, raw, turn) = (
            figures(tools.host.clone()),
            figures(tools.hub),
            figures(tools.raw),
            figures(tools.turn),
        );
        let (append, commit) = (figures(tools.appends), figures(tools.commits));
        let (to_call, between, back) = (
            figures(tools.to_call),
            figures(tools.between),
            figures(tools.back),
        );
        println!("## 1. An auto MCP call: TOOL_CALL → durable receipt vs straight to the server\n");
        println!("| path | calls | p50 µs | p99 µs |");
        println!("| --- | --- | --- | --- |");
        println!(
            "| through the host (inside the harness, around sink.tool_call) | {} | {:.0} | {:.0} |",
            tools.host.len(),
            us(host.p50),
            us(host.p99)
        );
        println!(
            "| McpHub::call, the host's client alone | {calls} | {:.0} | {:.0} |",
            us(hub.p50),
            us(hub.p99)
        );
        println!(
            "| raw rmcp Peer::call_tool | {calls} | {:.0} | {:.0} |",
            us(raw.p50),
            us(raw.p99)
        );
        println!(
            "| (the whole Exec turn, client side) | {calls} | {:.0} | {:.0} |",
            us(turn.p50),
            us(turn.p99)
        );
        println!(
            "| (a durable journal append, one 1 KiB event) | {calls} | {:.0} | {:.0} |",
            us(append.p50),
            us(append.p99)
        );
        println!(
            "| (a tool-ledger commit, start or finish) | {} | {:.0} | {:.0} |",
            2 * calls,
            us(commit.p50),
            us(commit.p99)
        );
        println!();
        println!(
            "host p50 / raw rmcp p50 = {:.0} / {:.0} = **{:.2}×** (goal ≤ 1.3×), \
             +{:.0} µs; p99 {:.2}×",
            us(host.p50),
            us(raw.p50),
            us(host.p50) / us(raw.p50),
            us(host.p50) - us(raw.p50),
            us(host.p99) / us(raw.p99)
        );
        println!(
            "host p50 / McpHub p50 = **{:.2}×**, +{:.0} µs; McpHub / raw rmcp = {:.2}×",
            us(host.p50) / us(hub.p50),
            us(host.p50) - us(hub.p50),
            us(hub.p50) / us(raw.p50)
        );
        println!(
            "the host's call in parts, p50 (marks: the records' arrival at the client): \
             TOOL_CALL sent → its record {:.0} µs; → the TOOL_RESULT record {:.0} µs \
             (McpHub alone {:.0}); → the receipt at the harness {:.0} µs",
            us(to_call.p50),
            us(between.p50),
            us(hub.p50),
            us(back.p50)
        );
        // A read-only tool is harmless to call twice: no synced ledger
        // commit on its path (a tool that is not makes two more).
        let durable = 2.0 * us(append.p50);
        println!(
            "the host path's durable writes (TOOL_CALL and TOOL_RESULT appends; no synced ledger \
             commit for a read-only tool) at their p50s: {durable:.0} µs; the rest of the added \
             time: {:.0} µs; a tool that is not harmless twice adds two ledger commits, {:.0} µs\n",
            us(host.p50) - us(raw.p50) - durable,
            2.0 * us(commit.p50)
        );

        // (2) First token.
        let first = {
            let fake = Arc::clone(&fake);
            client
                .run(async move { first_tokens(addr, fake, firsts).await })
                .await
        };
        let (h, hr, hm, d, dr) = (
            figures(first.host.clone()),
            figures(first.host_request),
            figures(first.host_model_call),
            figures(first.direct.clone()),
            figures(first.direct_request),
        );
        println!("## 2. Time to first streamed token: through the host vs straight from the provider\n");
        println!(
            "| path | requests | to the request at the provider, p50 µs | to the first token, p50 µs | p99 µs |"
        );
        println!("| --- | --- | --- | --- | --- |");
        println!(
            "| Exec → first Delta (chat harness) | {} | {:.0} | {:.0} | {:.0} |",
            first.host.len(),
            us(hr.p50),
            us(h.p50),
            us(h.p99)
        );
        println!(
            "| the same {}-byte POST with reqwest → first content chunk | {} | {:.0} | {:.0} | {:.0} |",
            first.request_bytes,
            first.direct.len(),
            us(dr.p50),
            us(d.p50),
            us(d.p99)
        );
        println!();
        println!(
            "first token p50: {:.0} vs {:.0} µs = **+{:.2} ms** (goal ≤ +2 ms), {:.2}×",
            us(h.p50),
            us(d.p50),
            (us(h.p50) - us(d.p50)) / 1e3,
            us(h.p50) / us(d.p50)
        );
        println!(
            "through the host, p50 after Exec sent: the MODEL_CALL record at the client {:.0} µs, \
             the request at the provider {:.0} µs, the first Delta {:.0} µs\n",
            us(hm.p50),
            us(hr.p50),
            us(h.p50)
        );

        // (3) Host CPU per agent step.
        let turns = {
            let fake = Arc::clone(&fake);
            client
                .run(async move { agent_turns(addr, fake, turns, steps).await })
                .await
        };
        let per_step = |k: usize, cpu: bool| {
            median(
                turns
                    .iter()
                    .map(|t| if cpu { t.cpu[k] } else { t.wall[k] })
                    .collect(),
            )
        };
        let mean = |r: std::ops::Range<usize>, cpu: bool| {
            let n = r.len() as f64;
            r.map(|k| per_step(k, cpu)).sum::<f64>() / n
        };
        println!(
            "## 3. Host CPU per step of one agent turn ({steps} tool calls, then an answer; \
             medians over {} turns)\n",
            turns.len()
        );
        println!("| step | host CPU µs | wall µs |");
        println!("| --- | --- | --- |");
        for k in 0..steps {
            println!(
                "| {} | {:.0} | {:.0} |",
                k + 1,
                per_step(k, true),
                per_step(k, false)
            );
        }
        let ((b1, bn), (r1, rn)) = (turns[0].bytes, turns[0].record_bytes);
        // Least-squares slope of the per-step medians.
        let (xs, ys): (Vec<f64>, Vec<f64>) = (0..steps)
            .map(|k| ((k + 1) as f64, per_step(k, true)))
            .unzip();
        let (mx, my) = (
            xs.iter().sum::<f64>() / steps as f64,
            ys.iter().sum::<f64>() / steps as f64,
        );
        let slope = xs
            .iter()
            .zip(&ys)
            .map(|(x, y)| (x - mx) * (y - my))
            .sum::<f64>()
            / xs.iter().map(|x| (x - mx) * (x - mx)).sum::<f64>();
        println!();
        println!(
            "model request: {b1} bytes at step 1, {bn} at step {steps}; its MODEL_CALL record \
             {r1} and {rn} bytes"
        );
        println!(
            "host CPU grows by {slope:.1} µs per step (least-squares slope of the medians)"
        );
        println!(
            "host CPU step {steps} / step 1 = {:.0} / {:.0} = **{:.2}×** (goal ≤ 1.2×); \
             steps {}-{steps} / 1-4 = **{:.2}×**; wall {:.2}× and {:.2}×",
            per_step(steps - 1, true),
            per_step(0, true),
            per_step(steps - 1, true) / per_step(0, true),
            steps - 3,
            mean(steps - 4..steps, true) / mean(0..4, true),
            per_step(steps - 1, false) / per_step(0, false),
            mean(steps - 4..steps, false) / mean(0..4, false),
        );
        daemon.shutdown().await;
    });
    drop((client, harness, fake_side));
}
