//! Assembling a daemon: the configuration, the routing table, and
//! [`Daemon`], which runs the start's stages (`start.rs`) and owns what
//! they started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentsessions_machine::host::{Backend, HostConfig, IdSource, LeaseConfig, Route};
use agentsessions_proto::grpc::harness_registry_server::HarnessRegistryServer;
use agentsessions_proto::grpc::sessions_server::SessionsServer;
use agentsessions_proto::grpc::tools_server::ToolsServer;

use super::drive_loop::DriveLoop;
use super::driver::DriverHandle;
use super::grpc::{RegistryService, SessionsService, ToolsService};
use super::harness_client::parse_address;
use super::retention;
use super::security::{Security, check_listen};
use super::start;
use crate::journal::reopen::{Backoff, Opener, Reopening};
use crate::journal::sqlite::{SqliteJournal, SqliteOptions};
use crate::journal::{JournalStore, StoreError};

use crate::model::ModelRouter;
use crate::tools::LedgerStore;

/// Everything a daemon is configured with.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Sessions API listen address.
    pub addr: SocketAddr,
    /// HarnessRegistry listen address (literal loopback only), if served.
    pub registry_addr: Option<SocketAddr>,
    /// The SQLite journal file (for a store opened by the caller, see
    /// [`Daemon::start_on`], only where the ledger goes by default).
    pub journal: PathBuf,
    /// The tool ledger file; `None`: `<journal>.tools.db`.
    pub ledger: Option<PathBuf>,
    /// Default project.
    pub project: String,
    /// Provider models, each `ID` (served at `model_base_url`) or
    /// `ID=BASE_URL`. The built-in `echo` model is always served besides;
    /// the first id is the `chat` harness's and the default for a call
    /// that names no model.
    pub models: Vec<String>,
    /// OpenAI-compatible base URL for ids given without one.
    pub model_base_url: Option<String>,
    /// Path under the base URL.
    pub model_path: Option<String>,
    /// Header carrying the key.
    pub model_auth_header: String,
    /// The key (from MODEL_API_KEY or OPENAI_API_KEY; never logged).
    pub model_api_key: Option<String>,
    /// Remote harnesses: (name, address).
    pub harnesses: Vec<(String, String)>,
    /// Bounds on Describe and on a harness's first answer.
    pub harness_timeouts: HarnessTimeouts,
    /// Most client calls in flight; past it a call is RESOURCE_EXHAUSTED
    /// before it touches the journal (`HostConfig::max_in_flight`).
    pub max_in_flight: usize,
    /// Delete sessions last written longer ago than this, with nothing in
    /// flight or pending (`None`: keep everything).
    pub retain_completed: Option<std::time::Duration>,
    /// Pause between retention passes over the whole table.
    pub retention_interval: std::time::Duration,
    /// Session leases, for daemons sharing a journal (`None`: this daemon
    /// is the journal's only writer).
    pub lease: Option<LeaseSettings>,
    /// TLS and authentication (default: plaintext, loopback, auth off).
    pub security: Security,
    /// Serve `/metrics` and `/readyz` on this address (loopback unless
    /// `--insecure-listen`); `None`: no metrics are kept.
    pub metrics_addr: Option<SocketAddr>,
    /// Drive loops, each a host of its own on a thread of its own, with the
    /// sessions partitioned over them (at least 1; see `DriverHandle`).
    pub drive_loops: usize,
    /// Most committed records kept in the drive loop's journal cache
    /// ([`super::log_cache::MAX_RECORDS`] by default).
    pub journal_cache_records: usize,
    /// Serve the web console on this address (loopback unless
    /// `--insecure-listen`); `None`: no console.
    pub console_addr: Option<SocketAddr>,
    /// Bounds on what callers can make the daemon hold.
    pub limits: super::limits::Limits,
    /// `--tool-policy` rules, in flag order (see the machine's `ToolGate`).
    pub tool_rules: Vec<agentsessions_machine::host::ToolRule>,
    /// `--mcp NAME=COMMAND…|URL`: MCP servers whose tools the host runs.
    pub mcp: Vec<String>,
    /// Bounds on MCP calls: `--mcp-call-timeout`, `--mcp-max-calls`,
    /// `--tool-result-max-bytes`.
    pub mcp_config: crate::mcp::McpConfig,
    /// `--session-token-budget`: tokens a session may use (see the
    /// machine's `HostConfig::session_token_budget`).
    pub session_token_budget: Option<i64>,
}

/// How a daemon leases the sessions it runs (see the machine's
/// `vocab::lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// This daemon's lease owner id; stable across restarts.
    pub host_id: String,
    /// How long a lease lasts after it is taken or renewed.
    pub ttl: std::time::Duration,
    /// How often a held lease is renewed; shorter than `ttl`.
    pub heartbeat: std::time::Duration,
}

impl LeaseSettings {
    /// The machine's lease settings, or why these cannot hold a lease.
    pub fn to_machine(&self) -> Result<LeaseConfig, StartError> {
        let nanos = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        let config = LeaseConfig {
            host_id: self.host_id.clone(),
            ttl: nanos(self.ttl),
            heartbeat: nanos(self.heartbeat),
        };
        match config.problem() {
            None => Ok(config),
            Some(p) => Err(StartError::Config(format!(
                "--host-id {:?} --lease {:?} --heartbeat {:?}: {p}",
                self.host_id, self.ttl, self.heartbeat
            ))),
        }
    }
}

/// Default [`DaemonConfig::retention_interval`].
pub const DEFAULT_RETENTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a harness may take to answer, so a silent peer ends a turn as
/// unavailable instead of holding its session until the client gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HarnessTimeouts {
    /// Bound on each Describe call.
    pub describe: std::time::Duration,
    /// Bound from sending Start until the harness's first event.
    pub connect: std::time::Duration,
}

impl Default for HarnessTimeouts {
    fn default() -> Self {
        let machine = HostConfig::default();
        Self {
            describe: std::time::Duration::from_millis(machine.describe_timeout_ms),
            connect: std::time::Duration::from_millis(machine.connect_timeout_ms),
        }
    }
}

pub use super::start_error::StartError;

/// Built-in harness names this host serves locally.
const BUILTINS: [&str; 3] = ["echo", "approval", "counter"];

/// A timeout in whole milliseconds; zero would fail every call at once.
fn millis(d: std::time::Duration) -> Result<u64, StartError> {
    match u64::try_from(d.as_millis()) {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(StartError::Config(format!(
            "harness timeout {d:?}: want 1 ms or more"
        ))),
    }
}

/// The routing table of a daemon.
pub fn host_config(config: &DaemonConfig) -> Result<HostConfig, StartError> {
    let mut host = HostConfig {
        default_project: config.project.clone(),
        describe_timeout_ms: millis(config.harness_timeouts.describe)?,
        connect_timeout_ms: millis(config.harness_timeouts.connect)?,
        max_in_flight: config.max_in_flight,
        retain_completed: match config.retain_completed {
            None => None,
            Some(d) => match i64::try_from(d.as_nanos()) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    return Err(StartError::Config(format!(
                        "--retain-completed {d:?}: want more than zero and under 292 years"
                    )));
                }
            },
        },
        lease: config
            .lease
            .as_ref()
            .map(LeaseSettings::to_machine)
            .transpose()?,
        ..HostConfig::default()
    };
    host.harnesses.clear();
    let local = |kind: &str| Route {
        backend: Backend::Local { kind: kind.into() },
        descriptor_id: String::new(),
        registered: false,
        spec: None,
    };
    for kind in BUILTINS {
        host.harnesses.insert(kind.into(), local(kind));
    }
    // The counter keeps its state in RAM only, so it always runs on the
    // in-process memory-snapshot runtime (one instance per session).
    host.harnesses.insert(
        "counter".into(),
        Route {
            backend: Backend::Memory {
                kind: "counter".into(),
            },
            ..local("counter")
        },
    );
    let router = model_router(config)?;
    host.models = Some(router.ids().map(str::to_owned).collect());
    host.tools.rules = config.tool_rules.clone();
    host.session_token_budget = config.session_token_budget;
    if !config.models.is_empty() {
        host.harnesses.insert("chat".into(), local("chat"));
        host.harnesses.insert("agent".into(), local("agent"));
    }
    // Built-in names stay reserved even when not served here, so no other
    // host can register them under a different contract.
    host.reserved = vec!["chat".into(), "agent".into()];
    for (name, address) in &config.harnesses {
        if BUILTINS.contains(&name.as_str()) || name == "chat" || name == "agent" {
            return Err(StartError::Config(format!(
                "--harness {name}: the name is a built-in harness"
            )));
        }
        if host.harnesses.contains_key(name) {
            return Err(StartError::Config(format!(
                "--harness {name}: duplicate name"
            )));
        }
        parse_address(address).map_err(|e| StartError::Config(format!("--harness {name}: {e}")))?;
        host.harnesses.insert(
            name.clone(),
            Route {
                backend: Backend::Remote {
                    address: address.clone(),
                },
                descriptor_id: String::new(),
                registered: false,
                spec: None,
            },
        );
    }
    Ok(host)
}

/// Random ids from the OS, in the reference's formats.
#[derive(Debug, Default)]
pub struct RandomIds;

fn hex(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    for _ in 0..bytes {
        out.push_str(&format!("{:02x}", fastrand::u8(..)));
    }
    out
}

impl IdSource for RandomIds {
    fn session_uid(&mut self) -> String {
        format!("sess-{}", hex(12))
    }
    fn execution_id(&mut self) -> String {
        hex(8)
    }
    fn model_call_id(&mut self) -> String {
        hex(8)
    }
    fn harness_uid(&mut self) -> String {
        format!("harness-{}", hex(12))
    }
}

/// The chat harness's model: the first provider id ("" when none).
pub(super) fn chat_model(config: &DaemonConfig) -> String {
    config
        .models
        .first()
        .map(|spec| model_spec(spec).0.to_owned())
        .unwrap_or_default()
}

/// `ID` or `ID=BASE_URL`.
fn model_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once('=') {
        Some((id, url)) => (id, Some(url)),
        None => (spec, None),
    }
}

/// Every model this daemon serves, by id: `echo` and each `--model`.
pub fn model_router(config: &DaemonConfig) -> Result<ModelRouter, StartError> {
    let mut router = ModelRouter::new();
    for spec in &config.models {
        let (id, url) = model_spec(spec);
        let mut c = crate::model::openai::OpenAiConfig::new(id.to_owned())
            .with_auth_header(config.model_auth_header.clone())
            .with_stream(true);
        if let Some(url) = url.or(config.model_base_url.as_deref()) {
            c = c.with_base_url(url.to_owned());
        }
        if let Some(path) = &config.model_path {
            c = c.with_path(path.clone());
        }
        if let Some(key) = &config.model_api_key {
            c = c.with_api_key(key.clone());
        }
        let client = crate::model::openai::OpenAiClient::new(c)
            .map_err(|e| StartError::Config(format!("--model {id:?}: {e}")))?;
        router
            .serve(id, Arc::new(client))
            .map_err(|e| StartError::Config(e.to_string()))?;
    }
    Ok(router)
}

/// A running daemon.
pub struct Daemon {
    /// Submits calls to the host.
    pub driver: DriverHandle,
    /// The bound Sessions address.
    pub addr: SocketAddr,
    /// The bound registry address, if served.
    pub registry_addr: Option<SocketAddr>,
    /// The bound `/metrics` address, if served.
    pub metrics_addr: Option<SocketAddr>,
    /// The bound web console address, if served.
    pub console_addr: Option<SocketAddr>,
    journal: Option<Reopening<SqliteJournal>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    stop: tokio::sync::watch::Sender<bool>,
    drive_loops: Vec<DriveLoop>,
    /// The MCP servers, stopped (children reaped) at shutdown.
    mcp: Option<crate::mcp::McpHub>,
}

impl Daemon {
    /// Opens the SQLite journal, loads the registry and starts serving.
    /// The journal reopens itself after a failed commit (see [`Reopening`]).
    pub async fn start(config: DaemonConfig) -> Result<Self, StartError> {
        let journal = SqliteJournal::open(&config.journal, SqliteOptions::default())
            .map_err(|e| StartError::Journal(e.to_string()))?;
        let path = config.journal.clone();
        let opener: Opener<SqliteJournal> = Arc::new(move || {
            let path = path.clone();
            Box::pin(async move {
                // Opening runs the schema checks: file I/O, off the runtime.
                tokio::task::spawn_blocking(move || {
                    SqliteJournal::open(&path, SqliteOptions::default())
                })
                .await
                .map_err(|e| StoreError::Unavailable(format!("open: {e}")))?
            })
        });
        let journal = Reopening::new(journal, opener, Backoff::default());
        let mut daemon = Self::start_reopening(config, journal.clone()).await?;
        daemon.journal = Some(journal);
        Ok(daemon)
    }

    /// Starts serving on a self-reopening store the caller opened
    /// (PostgreSQL); health follows the store's.
    pub async fn start_reopening<S: JournalStore + 'static>(
        config: DaemonConfig,
        store: Reopening<S>,
    ) -> Result<Self, StartError> {
        let health = store.health();
        Self::start_with(config, Arc::new(store), Some(health), None).await
    }

    /// [`Daemon::start_reopening`] with the tool ledger in `ledger` rather
    /// than a local file: the ledger in the shared database, so every
    /// daemon on it deduplicates tool calls against the same entries.
    pub async fn start_shared<S: JournalStore + 'static>(
        config: DaemonConfig,
        store: Reopening<S>,
        ledger: Arc<dyn LedgerStore>,
    ) -> Result<Self, StartError> {
        let health = store.health();
        Self::start_with(config, Arc::new(store), Some(health), Some(ledger)).await
    }

    /// Starts serving on a journal store the caller opened; the tool ledger
    /// stays a local file ([`DaemonConfig::ledger`]). Health is SERVING for
    /// the daemon's life.
    pub async fn start_on<S: JournalStore + 'static>(
        config: DaemonConfig,
        store: Arc<S>,
    ) -> Result<Self, StartError> {
        Self::start_with(config, store, None, None).await
    }

    async fn start_with<S: JournalStore + 'static>(
        config: DaemonConfig,
        store: Arc<S>,
        store_health: Option<tokio::sync::watch::Receiver<bool>>,
        shared_ledger: Option<Arc<dyn LedgerStore>>,
    ) -> Result<Self, StartError> {
        let host_config = host_config(&config)?;
        let security = &config.security;
        let (tls, registry_tls) = start::listener_tls(&config)?;
        let built = start::ports(&config, store.clone(), shared_ledger).await?;
        let metrics = config
            .metrics_addr
            .map(|_| Arc::new(crate::metrics::Metrics::default()));
        let (handle, loops) = start::drive_loops(&config, &host_config, &built.ports, &metrics)?;
        // Nothing is served before the host has booted.
        start::boot(&handle).await?;

        let (stop, _) = tokio::sync::watch::channel(false);
        let mut servers = Vec::new();
        if let Some(hub) = &built.mcp {
            servers.push(super::tool_catalog::follow(
                hub.clone(),
                built.builtin_tools,
                handle.clone(),
                metrics.clone(),
                stop.subscribe(),
            ));
        }
        if config.retain_completed.is_some() {
            servers.push(tokio::spawn(retention::run(
                handle.clone(),
                config.retention_interval,
                stop.subscribe(),
            )));
        }
        let (listener, addr) = start::bind(config.addr).await?;
        let metrics_addr = match (config.metrics_addr, &metrics) {
            (Some(maddr), Some(m)) => {
                check_listen("--metrics-addr", maddr, false, security.insecure_listen)?;
                let (listener, bound) = start::bind(maddr).await?;
                servers.push(tokio::spawn(super::boot_count::count_awaiting(
                    handle.clone(),
                    store.clone(),
                    m.clone(),
                )));
                servers.push(super::http::serve(
                    listener,
                    m.clone(),
                    store_health.clone(),
                    stop.subscribe(),
                ));
                Some(bound)
            }
            _ => None,
        };
        let console_addr = match config.console_addr {
            Some(caddr) => {
                let console = start::console(caddr, security, &handle, &metrics, &stop).await?;
                servers.push(console.1);
                Some(console.0)
            }
            None => None,
        };
        let admission = Arc::new(super::limits::Admission::new(
            config.limits,
            metrics.clone(),
        ));
        let guard = Guard {
            tls,
            auth: security.auth.clone(),
            metrics: metrics.clone(),
            admission: admission.clone(),
        };
        servers.push(serve_sessions(
            listener,
            handle.clone(),
            guard,
            store_health,
            stop.subscribe(),
        )?);
        let registry_addr = match config.registry_addr {
            Some(raddr) => {
                let (listener, bound) = start::bind(raddr).await?;
                let guard = Guard {
                    tls: registry_tls,
                    auth: security.auth.clone(),
                    metrics: metrics.clone(),
                    admission,
                };
                servers.push(serve_registry(
                    listener,
                    handle.clone(),
                    guard,
                    stop.subscribe(),
                )?);
                Some(bound)
            }
            None => None,
        };
        Ok(Self {
            driver: handle,
            addr,
            registry_addr,
            metrics_addr,
            console_addr,
            journal: None,
            servers,
            stop,
            drive_loops: loops,
            mcp: built.mcp,
        })
    }

    /// The journal the daemon writes (benchmarks time appends and read
    /// writer counters through it); the handle open now.
    pub fn journal(&self) -> Arc<SqliteJournal> {
        self.journal
            .as_ref()
            .expect("a daemon started on its SQLite journal")
            .current()
            .expect("the journal is up")
    }

    /// Stops accepting calls, lets the calls in flight finish, and exits.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for s in self.servers {
            let _ = s.await;
        }
        self.driver.drain().await;
        for l in &mut self.drive_loops {
            l.finished().await;
        }
        if let Some(hub) = &self.mcp {
            hub.shutdown().await;
        }
    }
}

async fn until_stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Keeps the health service's answer equal to the journal's: NOT_SERVING
/// (overall and for Sessions) while it is down.
async fn follow_store_health(
    reporter: tonic_health::server::HealthReporter,
    mut up: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let status = if *up.borrow_and_update() {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        reporter.set_service_status("", status).await;
        reporter
            .set_service_status(
                <SessionsServer<SessionsService> as tonic::server::NamedService>::NAME,
                status,
            )
            .await;
        if up.changed().await.is_err() {
            return;
        }
    }
}

/// What one listener checks: its TLS settings and the credentials.
struct Guard {
    tls: Option<tonic::transport::ServerTlsConfig>,
    auth: Arc<crate::auth::Authenticator>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    admission: Arc<super::limits::Admission>,
}

impl Guard {
    fn builder(&mut self, what: &str) -> Result<tonic::transport::Server, StartError> {
        let builder = tonic::transport::Server::builder();
        match self.tls.take() {
            None => Ok(builder),
            Some(tls) => builder
                .tls_config(tls)
                .map_err(|e| StartError::Config(format!("{what} TLS: {e}"))),
        }
    }
}

fn serve_sessions(
    listener: tokio::net::TcpListener,
    driver: DriverHandle,
    mut guard: Guard,
    store_health: Option<tokio::sync::watch::Receiver<bool>>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    let builder = guard.builder("sessions")?;
    Ok(tokio::spawn(async move {
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<SessionsServer<SessionsService>>()
            .await;
        let follower = store_health.map(|up| tokio::spawn(follow_store_health(health, up)));
        // Both reflection versions: grpcurl and grpc-go speak v1, while
        // Python's grpcio-reflection, Postman and Evans still ask v1alpha.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(agentsessions_proto::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1().ok();
        let reflection_v1alpha = reflection().build_v1alpha().ok();
        // Without TCP_NODELAY every streamed frame waits out Nagle against
        // the client's delayed ACK (~40 ms per Exec or Replay).
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut builder = builder;
        let tools = ToolsServer::new(
            ToolsService::new(driver.clone(), guard.auth.clone())
                .with_metrics(guard.metrics.clone())
                .with_admission(guard.admission.clone()),
        );
        let mut router = builder
            .add_service(health_service)
            .add_service(
                SessionsServer::new(
                    SessionsService::new(driver, guard.auth)
                        .with_metrics(guard.metrics)
                        .with_admission(guard.admission.clone()),
                )
                .max_decoding_message_size(guard.admission.limits().max_request_bytes),
            )
            .add_service(tools);
        if let Some(service) = reflection_v1 {
            router = router.add_service(service);
        }
        if let Some(service) = reflection_v1alpha {
            router = router.add_service(service);
        }
        let _ = router
            .serve_with_incoming_shutdown(incoming, until_stopped(stop))
            .await;
        if let Some(f) = follower {
            f.abort();
        }
    }))
}

fn serve_registry(
    listener: tokio::net::TcpListener,
    driver: DriverHandle,
    mut guard: Guard,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    let mut builder = guard.builder("registry")?;
    Ok(tokio::spawn(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let limit = guard.admission.limits().max_request_bytes;
        let service = RegistryService::new(driver, guard.auth)
            .with_metrics(guard.metrics)
            .with_admission(guard.admission);
        let _ = builder
            .add_service(HarnessRegistryServer::new(service).max_decoding_message_size(limit))
            .serve_with_incoming_shutdown(incoming, until_stopped(stop))
            .await;
    }))
}
