//! One connection to one MCP server: start it (spawn the stdio child or
//! open the HTTP session), initialize, list its tools, notice when it goes
//! away, and tear it down.
//!
//! Invariants: a stdio child leads a process group of its own and gets only
//! a small allowlisted environment (the daemon's secrets stay home);
//! teardown closes the session (which closes stdin, then SIGTERMs and
//! SIGKILLs the group if it lingers, and reaps the child), then SIGKILLs
//! whatever is left of the group, so neither the child nor anything it
//! spawned outlives the connection. Everything read from the server is
//! bounded: tool pages and tools per listing, stderr lines kept.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, Tool};
use rmcp::service::{
    ClientCacheConfig, NotificationContext, QuitReason, RunningService,
    RunningServiceCancellationToken,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::spec::{ServerSpec, Target};
use super::{McpConfig, McpTool};

/// What a stdio child inherits of the daemon's environment (as the MCP
/// TypeScript SDK does), plus `McpConfig::child_env`.
pub const CHILD_ENV: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR",
];
/// Pages of `tools/list` followed before the listing is cut off.
const MAX_PAGES: usize = 64;
/// Tools kept from one server.
const MAX_TOOLS: usize = 1024;
/// Longest tool name offered to a model, `SERVER__` included.
const MAX_TOOL_NAME: usize = 64;
/// Lines of a child's stderr kept for the error text, and bytes per line.
const STDERR_LINES: usize = 8;
const STDERR_LINE_BYTES: usize = 256;
/// How long teardown waits for the session to close and the child to be
/// reaped before killing the group outright (rmcp's own close takes up to
/// 3 s for stdin-close, then 3 s after SIGTERM).
const CLOSE_WAIT: Duration = Duration::from_secs(8);

/// The task reading a child's stderr, and the last lines it kept.
pub(super) struct StderrTail {
    task: JoinHandle<()>,
    lines: Arc<Mutex<VecDeque<String>>>,
}

type Waiting = Pin<Box<dyn Future<Output = Result<QuitReason, tokio::task::JoinError>> + Send>>;

/// Hands the hub the server's "tools changed" notifications (coalesced:
/// one pending is enough to trigger a relisting).
struct Handler {
    info: ClientConfig,
    list_changed: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        let _ = self.list_changed.try_send(());
    }
}

/// A live connection.
pub(super) struct Conn {
    pub peer: Peer<RoleClient>,
    /// The stdio child's pid (and process group id).
    pub pid: Option<u32>,
    /// Ticks when the server says its tools changed.
    pub list_changed: mpsc::Receiver<()>,
    pub session: Session,
    cancel: Option<RunningServiceCancellationToken>,
    stderr: Option<StderrTail>,
}

impl Conn {
    /// Starts `spec`, initializes, and lists its tools; on failure, the text
    /// of why (everything started is torn down when dropped).
    pub async fn open(
        spec: &ServerSpec,
        config: &McpConfig,
    ) -> Result<(Self, Vec<McpTool>), String> {
        let (tx, rx) = mpsc::channel(1);
        let handler = Handler {
            info: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("agentsessions", env!("CARGO_PKG_VERSION")),
            ),
            list_changed: tx,
        };
        let (running, pid, stderr) = match &spec.target {
            Target::Stdio { program, args } => {
                let mut cmd = CommandWrap::with_new(program, |c| {
                    c.args(args).env_clear().kill_on_drop(true);
                    for key in CHILD_ENV
                        .iter()
                        .copied()
                        .chain(config.child_env.iter().map(String::as_str))
                    {
                        if let Some(v) = std::env::var_os(key) {
                            c.env(key, v);
                        }
                    }
                });
                cmd.wrap(ProcessGroup::leader());
                let (child, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start {program}: {e}"))?;
                let pid = child.id();
                let stderr = stderr.map(|s| {
                    let lines = Arc::new(Mutex::new(VecDeque::new()));
                    let task = tokio::spawn(read_stderr(spec.name.clone(), s, Arc::clone(&lines)));
                    StderrTail { task, lines }
                });
                match handler.serve(child).await {
                    Ok(r) => (r, pid, stderr),
                    Err(e) => {
                        // The child, dropped with the failed handshake, is
                        // killed; give its last words a moment to arrive.
                        let why =
                            with_stderr(&format!("initialize failed: {e}"), stderr.as_ref()).await;
                        if let Some(pid) = pid {
                            kill_group(pid);
                        }
                        return Err(why);
                    }
                }
            }
            Target::Http { url } => {
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .max_concurrent_requests(config.max_concurrent_calls.saturating_add(2)),
                );
                let r = handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("initialize failed: {e}"))?;
                (r, None, None)
            }
        };
        let peer = running.peer().clone();
        // The hub keeps the catalog; rmcp's response cache would only serve
        // stale listings when the server is failing.
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let mut conn = Self::new(running, peer, pid, rx, stderr);
        match list_tools(&conn.peer, &spec.name).await {
            Ok(tools) => Ok((conn, tools)),
            Err(e) => {
                let why = conn
                    .close_with_reason(&format!("listing tools failed: {e}"))
                    .await;
                Err(why)
            }
        }
    }

    fn new(
        running: RunningService<RoleClient, Handler>,
        peer: Peer<RoleClient>,
        pid: Option<u32>,
        list_changed: mpsc::Receiver<()>,
        stderr: Option<StderrTail>,
    ) -> Self {
        let cancel = Some(running.cancellation_token());
        Self {
            peer,
            pid,
            list_changed,
            session: Session {
                waiting: Box::pin(running.waiting()),
                closed: false,
            },
            cancel,
            stderr,
        }
    }

    /// Whether the stdio child is gone although its pipes are still open
    /// (a grandchild holding them): only a watch on the pid tells.
    pub fn child_gone(&self) -> bool {
        self.pid.is_some_and(process_gone)
    }

    /// Tears the connection down (see the module docs) and returns `reason`
    /// with the child's last stderr lines, if any.
    pub async fn close_with_reason(&mut self, reason: &str) -> String {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        if !self.session.closed {
            let _ = tokio::time::timeout(CLOSE_WAIT, &mut self.session.waiting).await;
            self.session.closed = true;
        }
        if let Some(pid) = self.pid {
            kill_group(pid);
        }
        let why = with_stderr(reason, self.stderr.as_ref()).await;
        if let Some(tail) = self.stderr.take() {
            tail.task.abort();
        }
        why
    }
}

/// The rmcp session's task, awaited once.
pub(super) struct Session {
    waiting: Waiting,
    closed: bool,
}

impl Session {
    /// Resolves when the session ended on its own (the child exited, the
    /// transport closed). Cancel-safe.
    pub async fn ended(&mut self) {
        if self.closed {
            return std::future::pending().await;
        }
        let _ = (&mut self.waiting).await;
        self.closed = true;
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Dropped without close (the hub itself dropped): rmcp's drop guard
        // closes the session; the group goes too.
        if let Some(pid) = self.pid.filter(|_| !self.session.closed) {
            kill_group(pid);
        }
        if let Some(tail) = self.stderr.take() {
            tail.task.abort();
        }
    }
}

/// SIGKILL to the whole process group `pgid`. After the leader is reaped
/// the group id stays reserved while any member lives, so this reaches only
/// what the child left behind (or nothing: ESRCH, ignored).
fn kill_group(pgid: u32) {
    let Some(pid) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}

/// Whether `pid` has exited (a zombie waiting to be reaped counts). Reads
/// Linux's /proc; elsewhere it never says so and the pipes' EOF decides.
fn process_gone(pid: u32) -> bool {
    if !std::path::Path::new("/proc/self/stat").exists() {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // "pid (comm) S …": comm may hold anything, so the state is the first
    // field after the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, Some('Z' | 'X') | None)
}

/// Lists every tool of the server: pages followed up to [`MAX_PAGES`],
/// tools kept up to [`MAX_TOOLS`]; tools whose name models would refuse are
/// left out.
pub(super) async fn list_tools(
    peer: &Peer<RoleClient>,
    server: &str,
) -> Result<Vec<McpTool>, ServiceError> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await?;
        for tool in page.tools {
            if out.len() >= MAX_TOOLS {
                tracing::warn!(
                    server,
                    "mcp server lists more than {MAX_TOOLS} tools; the rest are left out"
                );
                return Ok(out);
            }
            match offered(server, tool) {
                Some(t) => out.push(t),
                None => tracing::warn!(
                    server,
                    "mcp tool left out: its name is not [A-Za-z0-9_-] or too long"
                ),
            }
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(out),
        }
    }
    tracing::warn!(
        server,
        "mcp server's tool list has more than {MAX_PAGES} pages; the rest are left out"
    );
    Ok(out)
}

/// The tool as the host offers it, or None when `SERVER__TOOL` would not
/// be a valid function name for model APIs (`^[a-zA-Z0-9_-]{1,64}$`).
fn offered(server: &str, tool: Tool) -> Option<McpTool> {
    let name = format!("{server}__{}", tool.name);
    let valid = !tool.name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && tool
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid {
        return None;
    }
    // Absent hints take the most conservative value (MCP's defaults).
    let a = tool.annotations.as_ref();
    Some(McpTool {
        name,
        server: server.to_owned(),
        tool: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        read_only: a.and_then(|a| a.read_only_hint).unwrap_or(false),
        destructive: a.and_then(|a| a.destructive_hint).unwrap_or(true),
        idempotent: a.and_then(|a| a.idempotent_hint).unwrap_or(false),
        open_world: a.and_then(|a| a.open_world_hint).unwrap_or(true),
        up: true,
    })
}

/// Keeps the child's last stderr lines (each cut to a bound) and logs them
/// at debug level; ends at EOF.
async fn read_stderr(
    server: String,
    mut stderr: impl AsyncRead + Unpin,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut chunk = [0u8; 4096];
    let mut line = Vec::with_capacity(STDERR_LINE_BYTES);
    let flush = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line).trim_end().to_owned();
        line.clear();
        if text.is_empty() {
            return;
        }
        tracing::debug!(server = %server, line = %text, "mcp server stderr");
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        if tail.len() == STDERR_LINES {
            tail.pop_front();
        }
        tail.push_back(text);
    };
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                flush(&mut line);
            } else if line.len() < STDERR_LINE_BYTES {
                line.push(b);
            }
        }
    }
    flush(&mut line);
}

/// `reason`, then the child's last stderr line if it left one. First waits
/// briefly for the reader to reach EOF, so what a dying child printed is
/// there.
async fn with_stderr(reason: &str, stderr: Option<&StderrTail>) -> String {
    let Some(StderrTail { task, lines }) = stderr else {
        return reason.to_owned();
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while !task.is_finished() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lines = lines.lock().unwrap_or_else(|e| e.into_inner());
    match lines.back() {
        Some(last) => format!("{reason}; stderr: {last}"),
        None => reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, annotations: Option<serde_json::Value>) -> Tool {
        let mut v = serde_json::json!({"name": name, "inputSchema": {"type": "object"}});
        if let Some(a) = annotations {
            v["annotations"] = a;
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn absent_annotations_are_the_most_conservative() {
        let t = offered("s", tool("t", None)).unwrap();
        assert_eq!(t.name, "s__t");
        assert!(!t.read_only && t.destructive && !t.idempotent && t.open_world);
        let t = offered(
            "s",
            tool("t", Some(serde_json::json!({"readOnlyHint": true}))),
        )
        .unwrap();
        assert!(t.read_only && t.destructive && !t.idempotent && t.open_world);
        let t = offered(
            "s",
            tool(
                "t",
                Some(serde_json::json!({"destructiveHint": false, "idempotentHint": true, "openWorldHint": false})),
            ),
        )
        .unwrap();
        assert!(!t.read_only && !t.destructive && t.idempotent && !t.open_world);
    }

    #[test]
    fn tools_models_would_refuse_are_left_out() {
        assert!(offered("s", tool("a.b", None)).is_none());
        assert!(offered("s", tool("a b", None)).is_none());
        assert!(offered("s", tool(&"x".repeat(62), None)).is_none());
        assert!(offered("s", tool(&"x".repeat(61), None)).is_some());
        assert!(offered("s", tool("with__double-dash_ok", None)).is_some());
    }

    #[test]
    fn a_live_process_is_not_gone_and_a_reaped_one_is() {
        assert!(!process_gone(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(process_gone(pid));
    }
}
