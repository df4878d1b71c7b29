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

/// Waits until `addr` answers a Sessions call. Any status but
/// UNIMPLEMENTED counts (the server is up); UNIMPLEMENTED is some other
/// gRPC server, which fails at once rather than certify the wrong process
/// (issue #41).
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
            match tokio::time::timeout(Duration::from_secs(2), probe).await {
                Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                    return Err(format!(
                        "{addr} is not a Sessions server: GetSession is UNIMPLEMENTED ({:?})",
                        status.message()
                    ));
                }
                Ok(_) => return Ok(()),
                Err(_) => {}
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
                models: [spec.model.clone()]
                    .into_iter()
                    .filter(|m| !m.is_empty())
                    .collect(),
                model_base_url: Some(spec.model_url.clone()),
                model_path: None,
                model_auth_header: "Authorization".into(),
                model_api_key: None,
                harnesses: spec.harnesses.clone(),
                harness_timeouts: Default::default(),
                max_in_flight: agentsessions_machine::vocab::config::DEFAULT_MAX_IN_FLIGHT,
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
                tool_rules: Vec::new(),
                mcp: Vec::new(),
                mcp_config: Default::default(),
                session_token_budget: None,
                approvals: Default::default(),
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
/// The host is given `{addr}` = `127.0.0.1:0` and must print (stdout or
/// stderr, flushed) a line ending in `listening on HOST:PORT` with the port
/// it bound, its Sessions address first; the first such line is used.
/// Picking a free port for it instead would race other processes for it.
///
/// Placeholders: `{addr}` (`127.0.0.1:0`), `{journal}`,
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
    pub fn argv(&self, spec: &HostSpec) -> Result<Vec<String>, String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
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

/// The address a `… listening on HOST:PORT` line reports (an `http://` or
/// `https://` URL's host and port too), if `line` is one with a real port.
/// An unspecified IP (`0.0.0.0`, `[::]`) is reached on loopback.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line.rsplit_once("listening on ")?;
    let rest = rest.trim();
    let rest = rest
        .strip_prefix("http://")
        .or_else(|| rest.strip_prefix("https://"))
        .unwrap_or(rest);
    let mut addr: SocketAddr = rest.trim_end_matches('/').parse().ok()?;
    if addr.port() == 0 {
        // The flag echoed back, not the port the host got.
        return None;
    }
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Some(addr)
}

/// Waits for the host's first `listening on` line in `log`, which only
/// the child writes: so the address is the one the child itself bound.
async fn wait_listening(
    log: &std::path::Path,
    mut alive: impl FnMut() -> Result<(), String>,
) -> Result<SocketAddr, String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // Whole lines only: a line still being written may end mid-port.
        let found = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .find_map(listening_addr);
        if let Some(addr) = found {
            return Ok(addr);
        }
        alive()?;
        if Instant::now() > deadline {
            return Err(format!(
                "host printed no `listening on HOST:PORT` line within {READY_TIMEOUT:?}; log: {}",
                tail(log)
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Numbers the host logs of this process (the port is not known yet).
static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct ChildHost {
    addr: SocketAddr,
    child: tokio::process::Child,
}

impl Launcher for CommandHost {
    fn start<'a>(&'a self, spec: &'a HostSpec) -> BoxFuture<'a, Result<Box<dyn Running>, String>> {
        Box::pin(async move {
            let argv = self.argv(spec)?;
            let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let log_path = spec.dir.join(format!("host-{n}.log"));
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
            let mut alive = || match child.try_wait() {
                Ok(Some(status)) => Err(format!(
                    "host exited with {status} before serving; log: {}",
                    tail(&log_path)
                )),
                Ok(None) => Ok(()),
                Err(e) => Err(e.to_string()),
            };
            let ready = match wait_listening(&log_path, &mut alive).await {
                Ok(addr) => wait_ready(addr, &mut alive).await.map(|()| addr),
                Err(e) => Err(e),
            };
            let addr = match ready {
                Ok(addr) => addr,
                Err(e) => {
                    let _ = child.kill().await;
                    return Err(e);
                }
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &std::path::Path) -> HostSpec {
        HostSpec {
            journal: dir.join("journal.db"),
            // Never called: no check runs.
            model_url: "http://127.0.0.1:9/v1".into(),
            model: String::new(),
            harnesses: Vec::new(),
            dir: dir.to_path_buf(),
        }
    }

    /// A "host" that only prints `line` and waits: whatever answers is
    /// found through the printed address alone.
    fn printing(line: &str) -> CommandHost {
        CommandHost::new(format!("sh -c 'echo \"{line}\"; exec sleep 60'"))
    }

    #[test]
    fn listening_lines_give_the_bound_address() {
        let a = |s: &str| listening_addr(s).map(|a| a.to_string());
        assert_eq!(
            a("agentsessionsd listening on 127.0.0.1:4100\n").as_deref(),
            Some("127.0.0.1:4100")
        );
        assert_eq!(
            a("console listening on http://127.0.0.1:4101").as_deref(),
            Some("127.0.0.1:4101")
        );
        assert_eq!(
            a("listening on 0.0.0.0:4102").as_deref(),
            Some("127.0.0.1:4102")
        );
        assert_eq!(a("listening on [::]:4103").as_deref(), Some("[::1]:4103"));
        // The requested port 0 echoed back is not an address to reach.
        assert_eq!(a("agentsessionsd listening on 127.0.0.1:0"), None);
        assert_eq!(a("listening on 127.0.0.1:4104 (tls)"), None);
        assert_eq!(a("ready"), None);
    }

    #[test]
    fn the_addr_placeholder_asks_for_any_port() {
        let dir = tempfile::tempdir().unwrap();
        let host = CommandHost::new("d --addr {addr} --journal {journal}");
        let argv = host.argv(&spec(dir.path())).unwrap();
        assert_eq!(argv[..3], ["d", "--addr", "127.0.0.1:0"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_child_host_is_reached_at_the_address_it_prints() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(dir.path());
        // A real Sessions server, which the child merely announces.
        let real = InProcess.start(&spec).await.unwrap();
        let addr = real.addr();
        let child = printing(&format!("fake host listening on {addr}"))
            .start(&spec)
            .await
            .unwrap();
        assert_eq!(child.addr(), addr);
        child.kill().await;
        real.stop().await;
    }

    /// Issue #41: a client that reached some other gRPC server saw
    /// UNIMPLEMENTED mid-suite; now such a server fails the start.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_printed_address_that_is_not_a_sessions_server_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(crate::rawpark::ForeignPark::default().into_server())
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let err = printing(&format!("listening on {other}"))
            .start(&spec(dir.path()))
            .await
            .err()
            .expect("a start on a harness server fails");
        assert!(err.contains("not a Sessions server"), "{err}");
    }

    #[tokio::test]
    async fn a_host_that_exits_without_listening_fails_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let err = CommandHost::new("sh -c 'echo no such flag >&2; exit 3'")
            .start(&spec(dir.path()))
            .await
            .err()
            .expect("the start fails");
        assert!(
            err.contains("exited") && err.contains("no such flag"),
            "{err}"
        );
    }
}
