//! Starting, stopping and killing the host under test.
//!
//! Two launchers: [`InProcess`] runs our daemon (`Daemon::start`) on a
//! runtime of its own, so that "killing" it drops every task at once the
//! way a crash would; [`CommandHost`] runs any host as a child process from
//! a command template.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::GetSessionRequest;
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use tokio::sync::oneshot;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How long a host may take to answer its first call.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop may take before the host is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the host is started with.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// The SQLite journal file.
    pub journal: PathBuf,
    /// The fake model's base URL.
    pub model_url: String,
    /// The model id to configure.
    pub model: String,
    /// (name, address) of the suite's harnesses.
    pub harnesses: Vec<(String, String)>,
    /// A private scratch directory (logs).
    pub dir: PathBuf,
}

/// Starts hosts.
pub trait Launcher: Send + Sync {
    /// Starts a host and waits until it answers on its Sessions address.
    fn start<'a>(&'a self, spec: &'a HostSpec) -> BoxFuture<'a, Result<Box<dyn Running>, String>>;
    /// A short description for reports.
    fn describe(&self) -> String;
    /// True when the host is known to write `append_note` effects to
    /// `<journal dir>/notes/<session>.notes` (our daemon does).
    fn notes_beside_journal(&self) -> bool {
        false
    }
}

/// A started host.
pub trait Running: Send + Sync {
    /// Its Sessions address.
    fn addr(&self) -> SocketAddr;
    /// Stops it gracefully: calls in flight finish.
    fn stop(self: Box<Self>) -> BoxFuture<'static, ()>;
    /// Ends it abruptly, as a crash would.
    fn kill(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Waits until `addr` answers a Sessions call (any status counts: the
/// server is up).
async fn wait_ready(
    addr: SocketAddr,
    mut alive: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        alive()?;
        if let Ok(channel) = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(1))
            .connect()
            .await
        {
            let mut c = SessionsClient::new(channel);
            let probe = c.get_session(GetSessionRequest {
                uid: "sess-000000000000000000000000".into(),
            });
            if tokio::time::timeout(Duration::from_secs(2), probe)
                .await
                .is_ok()
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "host did not answer on {addr} within {READY_TIMEOUT:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Our daemon, in this process.
#[derive(Debug, Default, Clone, Copy)]
pub struct InProcess;

enum Ending {
    Graceful,
    Crash,
}

struct InProcessHost {
    addr: SocketAddr,
    end: oneshot::Sender<Ending>,
    thread: std::thread::JoinHandle<()>,
}

impl Launcher for InProcess {
    fn start<'a>(&'a self, spec: &'a HostSpec) -> BoxFuture<'a, Result<Box<dyn Running>, String>> {
        Box::pin(async move {
            let config = DaemonConfig {
                addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                registry_addr: None,
                journal: spec.journal.clone(),
                project: "default".into(),
                model: spec.model.clone(),
                model_base_url: Some(spec.model_url.clone()),
                model_path: None,
                model_auth_header: "Authorization".into(),
                model_api_key: None,
                harnesses: spec.harnesses.clone(),
                harness_timeouts: Default::default(),
                max_in_flight: agentsessions_machine::host::config::DEFAULT_MAX_IN_FLIGHT,
                retain_completed: None,
                ledger: None,
                retention_interval: agentsessions_shells::daemon::app::DEFAULT_RETENTION_INTERVAL,
                lease: None,
                security: Default::default(),
                metrics_addr: None,
                // Two loops, so the suite certifies the partitioned host.
                drive_loops: 2,
                console_addr: None,
                limits: Default::default(),
                journal_cache_records: agentsessions_shells::daemon::log_cache::MAX_RECORDS,
            };
            let (ready_tx, ready_rx) = oneshot::channel();
            let (end_tx, end_rx) = oneshot::channel();
            let thread = std::thread::Builder::new()
                .name("host-under-test".into())
                .spawn(move || run_daemon(config, ready_tx, end_rx))
                .map_err(|e| format!("spawn host thread: {e}"))?;
            let addr = ready_rx
                .await
                .map_err(|_| "host thread exited".to_owned())??;
            wait_ready(addr, || Ok(())).await?;
            Ok(Box::new(InProcessHost {
                addr,
                end: end_tx,
                thread,
            }) as Box<dyn Running>)
        })
    }

    fn describe(&self) -> String {
        "agentsessionsd in process (Daemon::start)".into()
    }

    fn notes_beside_journal(&self) -> bool {
        true
    }
}

/// The host thread: its own runtime, so a crash can drop every task.
fn run_daemon(
    config: DaemonConfig,
    ready: oneshot::Sender<Result<SocketAddr, String>>,
    end: oneshot::Receiver<Ending>,
) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("host runtime: {e}")));
            return;
        }
    };
    let crashed = rt.block_on(async move {
        let daemon = match Daemon::start(config).await {
            Ok(d) => d,
            Err(e) => {
                let _ = ready.send(Err(format!("Daemon::start: {e}")));
                return None;
            }
        };
        let _ = ready.send(Ok(daemon.addr));
        match end.await {
            Ok(Ending::Graceful) => {
                daemon.shutdown().await;
                None
            }
            // The daemon outlives this future so its stop signal is not
            // sent: its tasks must die with the runtime, mid-whatever, like
            // a killed process.
            Ok(Ending::Crash) | Err(_) => Some(daemon),
        }
    });
    if let Some(daemon) = crashed {
        // The drive loop stops first (it runs on a thread of its own here):
        // it must not see the listener's calls end as clients going away.
        drop(daemon);
        rt.shutdown_background();
    }
}

impl Running for InProcessHost {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, ()> {
        self.end_with(Ending::Graceful)
    }

    fn kill(self: Box<Self>) -> BoxFuture<'static, ()> {
        self.end_with(Ending::Crash)
    }
}

impl InProcessHost {
    fn end_with(self, ending: Ending) -> BoxFuture<'static, ()> {
        let _ = self.end.send(ending);
        let thread = self.thread;
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        })
    }
}

/// Any host, started as a child process from a command template.
///
/// Placeholders: `{addr}` (a free loopback host:port), `{journal}`,
/// `{model}` (the model id), `{model_url}`, `{dir}`, `{harness_addr}` (the
/// echo harness), `{<name>_addr}` for every harness with `conf-` dropped and
/// `-` as `_` (e.g. `{tool_addr}`), and `{harnesses}`, which expands to one
/// `--harness name=address` pair per suite harness.
#[derive(Debug, Clone)]
pub struct CommandHost {
    template: String,
    notes_beside_journal: bool,
}

impl CommandHost {
    /// A launcher for `template`.
    pub fn new(template: impl Into<String>) -> Self {
        Self {
            template: template.into(),
            notes_beside_journal: false,
        }
    }

    /// Declares that the host writes `append_note` effects where our
    /// daemon does, so effect counts are checked, not skipped.
    pub fn with_notes_beside_journal(mut self, yes: bool) -> Self {
        self.notes_beside_journal = yes;
        self
    }

    /// The argv for one start.
    pub fn argv(&self, spec: &HostSpec, addr: SocketAddr) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for word in split_words(&self.template)? {
            if word == "{harnesses}" {
                for (name, a) in &spec.harnesses {
                    out.push("--harness".into());
                    out.push(format!("{name}={a}"));
                }
                continue;
            }
            out.push(fill(&word, spec, addr));
        }
        if out.is_empty() {
            return Err("empty --host-cmd".into());
        }
        Ok(out)
    }
}

fn fill(word: &str, spec: &HostSpec, addr: SocketAddr) -> String {
    let mut w = word
        .replace("{addr}", &addr.to_string())
        .replace("{journal}", &spec.journal.display().to_string())
        .replace("{model_url}", &spec.model_url)
        .replace("{model}", &spec.model)
        .replace("{dir}", &spec.dir.display().to_string());
    for (name, a) in &spec.harnesses {
        let key = name.trim_start_matches("conf-").replace('-', "_");
        w = w.replace(&format!("{{{key}_addr}}"), a);
        if name == crate::harnesses::ECHO {
            w = w.replace("{harness_addr}", a);
        }
    }
    w
}

/// Splits a command template into words: whitespace separates, single or
/// double quotes group, backslash escapes the next character.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') | (None, '\\') => {
                cur.push(chars.next().ok_or("trailing backslash in --host-cmd")?);
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unbalanced quote in --host-cmd".into());
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// A free loopback port (bound, then released for the child to take).
fn free_addr() -> Result<SocketAddr, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("pick a port: {e}"))
}

struct ChildHost {
    addr: SocketAddr,
    child: tokio::process::Child,
}

impl Launcher for CommandHost {
    fn start<'a>(&'a self, spec: &'a HostSpec) -> BoxFuture<'a, Result<Box<dyn Running>, String>> {
        Box::pin(async move {
            let addr = free_addr()?;
            let argv = self.argv(spec, addr)?;
            let log_path = spec.dir.join(format!("host-{}.log", addr.port()));
            let log = std::fs::File::create(&log_path)
                .map_err(|e| format!("{}: {e}", log_path.display()))?;
            let err_log = log.try_clone().map_err(|e| e.to_string())?;
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err_log)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("spawn {:?}: {e}", argv[0]))?;
            let ready = wait_ready(addr, || match child.try_wait() {
                Ok(Some(status)) => Err(format!(
                    "host exited with {status} before serving; log: {}",
                    tail(&log_path)
                )),
                Ok(None) => Ok(()),
                Err(e) => Err(e.to_string()),
            })
            .await;
            if let Err(e) = ready {
                let _ = child.kill().await;
                return Err(e);
            }
            Ok(Box::new(ChildHost { addr, child }) as Box<dyn Running>)
        })
    }

    fn describe(&self) -> String {
        format!("child process: {}", self.template)
    }

    fn notes_beside_journal(&self) -> bool {
        self.notes_beside_journal
    }
}

fn tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(600);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[start..].trim().to_owned()
}

impl Running for ChildHost {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, ()> {
        let mut child = self.child;
        Box::pin(async move {
            if let Some(pid) = child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            if tokio::time::timeout(STOP_TIMEOUT, child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        })
    }

    fn kill(self: Box<Self>) -> BoxFuture<'static, ()> {
        let mut child = self.child;
        Box::pin(async move {
            let _ = child.kill().await;
        })
    }
}
