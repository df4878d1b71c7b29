//! Assembling a daemon: the configuration, the routing table, and
//! [`Daemon`], which runs the start's stages (`start.rs`) and owns what
//! they started.

use std::net::SocketAddr;
use std::sync::Arc;

use agentsessions_proto::grpc::harness_registry_server::HarnessRegistryServer;
use agentsessions_proto::grpc::sessions_server::SessionsServer;
use agentsessions_proto::grpc::tools_server::ToolsServer;

use super::drive_loop::DriveLoop;
use super::driver::DriverHandle;
use super::grpc::{RegistryService, SessionsService, ToolsService};
use super::retention;
use super::security::check_listen;
use super::start;
use crate::journal::reopen::{Backoff, Opener, Reopening};
use crate::journal::sqlite::{SqliteJournal, SqliteOptions};
use crate::journal::{JournalStore, StoreError};

use crate::tools::LedgerStore;
use agentsessions_journal::outbox::Outbox;

pub use super::config::{
    DEFAULT_RETENTION_INTERVAL, DaemonConfig, HarnessTimeouts, LeaseSettings, RandomIds,
    host_config, model_router,
};
pub use super::start_error::StartError;

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
    pub async fn start_reopening<S: JournalStore + Outbox + 'static>(
        config: DaemonConfig,
        store: Reopening<S>,
    ) -> Result<Self, StartError> {
        let health = store.health();
        Self::start_with(config, Arc::new(store), Some(health), None).await
    }

    /// [`Daemon::start_reopening`] with the tool ledger in `ledger` rather
    /// than a local file: the ledger in the shared database, so every
    /// daemon on it deduplicates tool calls against the same entries.
    pub async fn start_shared<S: JournalStore + Outbox + 'static>(
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
    pub async fn start_on<S: JournalStore + Outbox + 'static>(
        config: DaemonConfig,
        store: Arc<S>,
    ) -> Result<Self, StartError> {
        Self::start_with(config, store, None, None).await
    }

    async fn start_with<S: JournalStore + Outbox + 'static>(
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
        let approvals = &config.approvals;
        if !approvals.notify.urls.is_empty() {
            store.set_outbox(true);
            let mut settings = approvals.notify.clone();
            if settings.console.is_none() {
                settings.console = console_addr.map(|a| format!("http://{a}"));
            }
            // A stable owner, so a restart lets go of the claims its last
            // run died holding: the lease's host id, or, for the journal's
            // only writer, one fixed name.
            let owner = config
                .lease
                .as_ref()
                .map_or_else(|| "local".to_owned(), |l| l.host_id.clone());
            servers.push(tokio::spawn(crate::notify::deliver::run(
                store.clone(),
                settings,
                owner,
                metrics.as_ref().map(|m| m.notify()),
                stop.subscribe(),
            )));
        }
        // Some request may expire: look for deadlines at boot and on every
        // rescan.
        if host_config.tools.expires() {
            // With metrics on, the boot count reads every session already.
            let booted = metrics_addr.is_some();
            servers.push(tokio::spawn(super::boot_count::find_deadlines(
                handle.clone(),
                store.clone(),
                (booted, approvals.rescan),
                stop.subscribe(),
            )));
        }
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
