//! The hub: every configured MCP server, each kept connected by a
//! supervisor task, and the calls made to them.
//!
//! Invariants: the supervisor is the only writer of its server's state, so
//! "up" always means a live session whose tools were listed; a server goes
//! down before its connection is torn down, so calls fail fast rather than
//! queue on a dying session; reconnection backs off (100 ms doubling to
//! 30 s, back to 100 ms after a connection that lasted); the catalog watch
//! ticks exactly when what `tools()` returns may have changed; no lock is
//! held across an await.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ResourceContents,
};
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::{Notify, Semaphore, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conn::{Conn, list_tools};
use super::json::json_value_to_struct;
use super::receipt::check_size;
use super::spec::ServerSpec;
use super::{CallOutcome, Content, McpConfig, McpError, McpTool};

const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the backoff.
const STABLE: Duration = Duration::from_secs(10);
/// How often a stdio child's pid is checked (see `Conn::child_gone`).
const CHILD_WATCH: Duration = Duration::from_millis(500);

/// Every configured MCP server and its tools. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub")
            .field("servers", &self.servers())
            .finish()
    }
}

struct Inner {
    config: McpConfig,
    /// Sorted by name.
    servers: Vec<Arc<Server>>,
    changes: Arc<watch::Sender<u64>>,
    /// `true` asks every supervisor to stop; dropping it does too.
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

struct Server {
    spec: ServerSpec,
    /// Calls in flight to this server.
    calls: Semaphore,
    state: Mutex<State>,
    /// A call saw the transport fail or timed out: the supervisor checks
    /// the session with a tools/list.
    suspect: Notify,
}

#[derive(Default)]
struct State {
    up: bool,
    error: String,
    /// The last successful listing (kept while down).
    tools: Vec<McpTool>,
    peer: Option<Peer<RoleClient>>,
    pid: Option<u32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Server {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn down(&self, reason: impl Into<String>) -> McpError {
        McpError::ServerDown {
            server: self.spec.name.clone(),
            reason: reason.into(),
        }
    }

    /// The live session, or why there is none.
    fn peer(&self) -> Result<Peer<RoleClient>, McpError> {
        let st = lock(&self.state);
        match (&st.peer, st.up) {
            (Some(p), true) => Ok(p.clone()),
            _ => Err(self.down(if st.error.is_empty() {
                "not connected"
            } else {
                &st.error
            })),
        }
    }

    /// Applies `f` to the state; ticks `changes` if the catalog moved.
    fn update(&self, changes: &watch::Sender<u64>, f: impl FnOnce(&mut State)) {
        let moved = {
            let mut st = lock(&self.state);
            let (up, tools) = (st.up, st.tools.clone());
            f(&mut st);
            up != st.up || tools != st.tools
        };
        if moved {
            changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl McpHub {
    /// Starts every server (initialize, list tools with pagination); a
    /// server that fails to start is kept as down and retried in the
    /// background with backoff (this call does not fail). Returns once
    /// every server has either listed its tools or failed its first
    /// attempt. A name given twice keeps only its first spec (see
    /// [`ServerSpec::check_unique`]).
    pub async fn start(specs: Vec<ServerSpec>, config: McpConfig) -> Self {
        let mut seen = HashSet::new();
        let mut servers = Vec::new();
        for spec in specs {
            if !seen.insert(spec.name.clone()) {
                tracing::warn!(server = %spec.name, "mcp server given twice; the first is kept");
                continue;
            }
            let permits = config.max_concurrent_calls.clamp(1, Semaphore::MAX_PERMITS);
            servers.push(Arc::new(Server {
                spec,
                calls: Semaphore::new(permits),
                state: Mutex::new(State::default()),
                suspect: Notify::new(),
            }));
        }
        servers.sort_by(|a, b| a.name().cmp(b.name()));
        let changes = Arc::new(watch::channel(0u64).0);
        let stop = watch::channel(false).0;
        let mut tasks = Vec::with_capacity(servers.len());
        let mut firsts = Vec::with_capacity(servers.len());
        for server in &servers {
            let (first, first_rx) = oneshot::channel();
            tasks.push(tokio::spawn(supervise(
                Arc::clone(server),
                config.clone(),
                Arc::clone(&changes),
                stop.subscribe(),
                first,
            )));
            firsts.push(first_rx);
        }
        for first in firsts {
            let _ = first.await;
        }
        Self {
            inner: Arc::new(Inner {
                config,
                servers,
                changes,
                stop,
                tasks: Mutex::new(tasks),
            }),
        }
    }

    /// The current catalog, sorted by name. Tools of a down server are
    /// listed with `up=false`, from its last successful listing.
    pub fn tools(&self) -> Vec<McpTool> {
        let mut out = Vec::new();
        for server in &self.inner.servers {
            let st = lock(&server.state);
            out.extend(st.tools.iter().map(|t| McpTool {
                up: st.up,
                ..t.clone()
            }));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Per server, by name: (name, up, last error text or "").
    pub fn servers(&self) -> Vec<(String, bool, String)> {
        self.inner
            .servers
            .iter()
            .map(|s| {
                let st = lock(&s.state);
                (s.spec.name.clone(), st.up, st.error.clone())
            })
            .collect()
    }

    /// The pid of a stdio server's child (its process group id too), while
    /// it is up. For operators and tests.
    pub fn server_pid(&self, server: &str) -> Option<u32> {
        let s = self.server(server)?;
        let st = lock(&s.state);
        st.up.then_some(st.pid).flatten()
    }

    /// A watch that ticks whenever the catalog changes (a server's
    /// `tools/list_changed`, a server going up or down).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    fn server(&self, name: &str) -> Option<&Arc<Server>> {
        let servers = &self.inner.servers;
        servers
            .binary_search_by(|s| s.name().cmp(name))
            .ok()
            .map(|i| &servers[i])
    }

    /// Calls `name` (`SERVER__TOOL`) with `arguments`, bounded by the call
    /// timeout (which includes waiting for one of the server's concurrency
    /// slots). Dropping the future, or the timeout, cancels the call: MCP
    /// `notifications/cancelled` is sent for its request.
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallOutcome, McpError> {
        let unknown = || McpError::UnknownTool {
            name: name.to_owned(),
        };
        let (server_name, tool) = name.split_once("__").ok_or_else(unknown)?;
        let server = self.server(server_name).ok_or_else(unknown)?;
        server.peer()?;
        if !lock(&server.state).tools.iter().any(|t| t.tool == tool) {
            return Err(unknown());
        }
        let after = self.inner.config.call_timeout;
        let timeout = || McpError::Timeout {
            server: server.spec.name.clone(),
            after,
        };
        let deadline = Instant::now() + after;
        let _slot = match tokio::time::timeout_at(deadline, server.calls.acquire()).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) => return Err(server.down("stopped")),
            Err(_) => return Err(timeout()),
        };
        // It may have gone down while this call waited for a slot.
        let peer = server.peer()?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // rmcp's call_tool_once sends notifications/cancelled when its
        // future is dropped before the answer: on our timeout, and when our
        // own caller drops us.
        let response = match tokio::time::timeout_at(deadline, peer.call_tool_once(params)).await {
            Err(_) => {
                // A slow tool, or a server gone quiet: a tools/list tells.
                server.suspect.notify_one();
                return Err(timeout());
            }
            Ok(Err(e)) => return Err(service_error(server, e, timeout)),
            Ok(Ok(r)) => r,
        };
        let CallToolResponse::Complete(result) = response else {
            return Err(McpError::Protocol(
                "server asked for more input or started a task (not supported)".into(),
            ));
        };
        outcome(result, self.inner.config.max_result_bytes)
    }

    /// Stops every server: sessions closed, stdio children (and anything
    /// they spawned) terminated and reaped, supervisors ended.
    pub async fn shutdown(&self) {
        self.inner.stop.send_replace(true);
        let tasks = std::mem::take(&mut *lock(&self.inner.tasks));
        for task in tasks {
            let _ = task.await;
        }
    }
}

fn service_error(server: &Server, e: ServiceError, timeout: impl FnOnce() -> McpError) -> McpError {
    match e {
        ServiceError::McpError(d) => McpError::Server {
            code: d.code.0,
            message: d.message.into_owned(),
        },
        ServiceError::TransportClosed => {
            server.suspect.notify_one();
            server.down("connection closed")
        }
        ServiceError::TransportSend(_) => {
            server.suspect.notify_one();
            server.down("sending to the server failed")
        }
        ServiceError::Timeout { .. } => {
            server.suspect.notify_one();
            timeout()
        }
        ServiceError::UnexpectedResponse => McpError::Protocol("unexpected response".into()),
        ServiceError::Cancelled { .. } => McpError::Protocol("cancelled by the server".into()),
        other => McpError::Protocol(other.to_string()),
    }
}

/// The call's result as an outcome, refused when it is too large or when
/// its structured content cannot become a Struct.
fn outcome(result: CallToolResult, limit: usize) -> Result<CallOutcome, McpError> {
    let mut content = Vec::with_capacity(result.content.len());
    for block in result.content {
        content.push(match block {
            ContentBlock::Text(t) => Content::Text(t.text),
            ContentBlock::Image(i) => Content::Image {
                mime: i.mime_type,
                data_base64: i.data,
            },
            ContentBlock::Audio(a) => Content::Audio {
                mime: a.mime_type,
                data_base64: a.data,
            },
            ContentBlock::ResourceLink(r) => Content::ResourceLink {
                uri: r.uri,
                name: r.name,
                mime: r.mime_type,
            },
            ContentBlock::Resource(r) => match r.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Content::Resource {
                    uri,
                    mime: mime_type,
                    text: Some(text),
                    blob_base64: None,
                },
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Content::Resource {
                    uri,
                    mime: mime_type,
                    text: None,
                    blob_base64: Some(blob),
                },
                _ => return Err(McpError::Protocol("unsupported resource contents".into())),
            },
            // rmcp's enum is non-exhaustive.
            _ => return Err(McpError::Protocol("unsupported content block".into())),
        });
    }
    let structured = result.structured_content.filter(|v| !v.is_null());
    let outcome = CallOutcome {
        is_error: result.is_error.unwrap_or(false),
        content,
        structured,
    };
    check_size(&outcome, limit)?;
    if let Some(s) = &outcome.structured {
        json_value_to_struct(s).map_err(McpError::Result)?;
    }
    Ok(outcome)
}

/// Resolves once the hub asks to stop (or is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Keeps one server connected until the hub stops; see the module docs.
async fn supervise(
    server: Arc<Server>,
    config: McpConfig,
    changes: Arc<watch::Sender<u64>>,
    mut stop: watch::Receiver<bool>,
    first: oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut backoff = INITIAL_BACKOFF;
    loop {
        let attempt = tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            r = tokio::time::timeout(config.start_timeout, Conn::open(&server.spec, &config)) => {
                r.unwrap_or_else(|_| Err(format!("no answer within {:?}", config.start_timeout)))
            }
        };
        match attempt {
            Ok((mut conn, tools)) => {
                let since = Instant::now();
                tracing::info!(server = %server.name(), tools = tools.len(), "mcp server up");
                server.update(&changes, |st| {
                    st.up = true;
                    st.error.clear();
                    st.tools = tools;
                    st.peer = Some(conn.peer.clone());
                    st.pid = conn.pid;
                });
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
                let lost = watch_conn(&server, &mut conn, &config, &changes, &mut stop).await;
                let reason = lost.as_deref().unwrap_or("stopped");
                // Down first, so calls fail fast while the teardown runs.
                server.update(&changes, |st| {
                    st.up = false;
                    st.peer = None;
                    st.pid = None;
                    reason.clone_into(&mut st.error);
                });
                let why = conn.close_with_reason(reason).await;
                if lost.is_none() {
                    return;
                }
                tracing::warn!(server = %server.name(), reason = %why, "mcp server down");
                server.update(&changes, |st| st.error = why);
                if since.elapsed() >= STABLE {
                    backoff = INITIAL_BACKOFF;
                }
            }
            Err(why) => {
                tracing::warn!(server = %server.name(), reason = %why, "mcp server did not start");
                server.update(&changes, |st| {
                    st.up = false;
                    st.peer = None;
                    st.error = why;
                });
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
            }
        }
        tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    server.update(&changes, |st| {
        st.up = false;
        st.peer = None;
        "stopped".clone_into(&mut st.error);
    });
}

/// Watches a live connection; returns why it was lost, or None when the
/// hub stops.
async fn watch_conn(
    server: &Server,
    conn: &mut Conn,
    config: &McpConfig,
    changes: &watch::Sender<u64>,
    stop: &mut watch::Receiver<bool>,
) -> Option<String> {
    let watch_child = conn.pid.is_some();
    loop {
        let relist = tokio::select! {
            biased;
            () = stopped(stop) => return None,
            () = conn.session.ended() => return Some("connection closed".into()),
            Some(()) = conn.list_changed.recv() => true,
            () = server.suspect.notified() => false,
            () = tokio::time::sleep(CHILD_WATCH), if watch_child => {
                if conn.child_gone() {
                    return Some("process exited".into());
                }
                continue;
            }
        };
        // A relisting after tools/list_changed, or a health check after a
        // call saw the transport fail: both are a fresh tools/list.
        let listed = tokio::select! {
            biased;
            () = stopped(stop) => return None,
            r = tokio::time::timeout(config.start_timeout, list_tools(&conn.peer, server.name())) => r,
        };
        match listed {
            Ok(Ok(tools)) => server.update(changes, |st| st.tools = tools),
            Ok(Err(e)) => {
                let what = if relist {
                    "relisting tools failed"
                } else {
                    "health check failed"
                };
                return Some(format!("{what}: {e}"));
            }
            Err(_) => return Some("tools/list timed out".into()),
        }
    }
}
