//! The daemon's start, in named stages, each returning what the next one
//! needs: the listeners' TLS (checked before anything else), the ports
//! (journal, tool ledger and executor, MCP servers, harnesses, runtimes,
//! model), the drive loops, the host's boot, and the listeners.
//!
//! Invariant: nothing is served before the host has booted: a static
//! harness name that collides with a stored registration fails the start
//! before any listener is bound.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentsessions_machine::host::Host;

use agentsessions_machine::vocab::{Caller, HostConfig, ModelFailure, Request, Response};
use tokio::sync::mpsc;

use super::config::{DaemonConfig, RandomIds, model_router};
use super::drive_loop::DriveLoop;
use super::driver::{Driver, DriverHandle, ModelPort, PortFuture, Ports, ToolPort};
use super::harness_client::GrpcHarnesses;
use super::inproc::{Harnesses, InProcess};
use super::runtime::Runtimes;
use super::security::{Security, check_listen};
use super::start_error::StartError;
use crate::journal::JournalStore;
use crate::metrics::Metrics;
use crate::model::ModelClient;
use crate::tools::{LedgerExecutor, LedgerStore, ToolExecutor, ToolRegistry, ledger::ToolLedger};

/// The Sessions listener's and the registry's TLS settings, once every
/// listener rule has been checked (loopback unless TLS or an explicit
/// opt-in; the registry on loopback only).
pub(super) fn listener_tls(
    config: &DaemonConfig,
) -> Result<
    (
        Option<tonic::transport::ServerTlsConfig>,
        Option<tonic::transport::ServerTlsConfig>,
    ),
    StartError,
> {
    let security = &config.security;
    check_listen(
        "--addr",
        config.addr,
        security.tls.is_some(),
        security.insecure_listen,
    )?;
    let tls = match &security.tls {
        Some(files) => Some(files.server_config("tls")?),
        None => None,
    };
    let registry_tls = match &security.registry_tls {
        Some(files) => Some(files.server_config("registry-tls")?),
        None => None,
    };
    if let Some(addr) = config.registry_addr
        && !addr.ip().is_loopback()
    {
        return Err(StartError::Config(format!(
            "--registry-addr {addr}: the registry is served on loopback only"
        )));
    }
    Ok((tls, registry_tls))
}

/// What the ports stage built.
pub(super) struct Built<S> {
    /// The ports every drive loop shares.
    pub(super) ports: Ports<S>,
    /// The MCP servers, when any is configured.
    pub(super) mcp: Option<crate::mcp::McpHub>,
    /// The tools built into the host, by name.
    pub(super) builtin_tools: Vec<String>,
}

/// The ports: the journal given, the tool ledger (shared, or a file beside
/// the journal) purged of deleted sessions, the executor over the built-in
/// tools and the MCP servers, the harness clients, the runtimes and the
/// model router.
pub(super) async fn ports<S: JournalStore + 'static>(
    config: &DaemonConfig,
    store: Arc<S>,
    shared_ledger: Option<Arc<dyn LedgerStore>>,
) -> Result<Built<S>, StartError> {
    let security = &config.security;
    let tools_path = config
        .ledger
        .clone()
        .unwrap_or_else(|| ToolLedger::path_for_journal(&config.journal));
    let ledger: Arc<dyn LedgerStore> = match shared_ledger {
        Some(shared) => shared,
        None => {
            Arc::new(ToolLedger::open(&tools_path).map_err(|e| StartError::Journal(e.to_string()))?)
        }
    };
    let notes = tools_path
        .parent()
        .map(|p| p.join("notes"))
        .unwrap_or_else(|| PathBuf::from("notes"));
    forget_deleted_tools(&ledger, &*store).await?;
    let registry = ToolRegistry::with_builtins(notes);
    let builtin_tools: Vec<String> = registry.names().map(str::to_owned).collect();
    let mcp = super::tool_catalog::start(&config.mcp, config.mcp_config.clone()).await?;
    let mut executor = LedgerExecutor::with_store(registry, ledger);
    if let Some(hub) = &mcp {
        executor = executor.with_mcp(hub.clone());
    }
    // Built-in harnesses run in this process (see `inproc`).
    let local = Arc::new(InProcess::default());
    let ports = Ports {
        store,
        harness: Arc::new(Harnesses::with_wire(
            local.clone(),
            GrpcHarnesses::with_tls(match &security.harness_tls {
                files if files.is_empty() => None,
                files => Some(files.client_config("harness")?),
            }),
        )),
        runtime: Arc::new(
            Runtimes::new(local, super::config::chat_model(config)).with_agent_tools(
                super::runtime::mcp_tools(mcp.clone(), config.tool_rules.clone()),
            ),
        ),
        model: Arc::new(Model(Arc::new(model_router(config)?))),
        tools: Arc::new(Tools(Arc::new(executor))),
    };
    Ok(Built {
        ports,
        mcp,
        builtin_tools,
    })
}

/// The drive loops: each a host of its own over the shared ports (so group
/// commit spans them all), the first on this runtime, the others on
/// threads of their own; and the handle that routes calls among them.
pub(super) fn drive_loops<S: JournalStore + 'static>(
    config: &DaemonConfig,
    host_config: &HostConfig,
    ports: &Ports<S>,
    metrics: &Option<Arc<Metrics>>,
) -> Result<(DriverHandle, Vec<DriveLoop>), StartError> {
    if config.drive_loops == 0 {
        return Err(StartError::Config(
            "--drive-loops: at least one drive loop".into(),
        ));
    }
    // The record budget is the daemon's: each loop caches its share.
    let cache_share = (config.journal_cache_records / config.drive_loops).max(1);
    let mut loops = Vec::with_capacity(config.drive_loops);
    let mut lanes = Vec::with_capacity(config.drive_loops);
    for i in 0..config.drive_loops {
        let host = Host::new(host_config.clone(), Box::new(RandomIds));
        let (mut driver, lane) = Driver::new(host, ports.clone());
        driver = driver.with_log_cache(cache_share);
        if let Some(m) = metrics {
            driver = driver.with_metrics(m.clone());
        }
        loops.push(if i == 0 {
            DriveLoop::start(driver)?
        } else {
            DriveLoop::start_on_thread(driver)?
        });
        lanes.push(lane);
    }
    assert_eq!(loops.len(), config.drive_loops, "one loop per lane");
    Ok((DriverHandle::join(lanes), loops))
}

/// The host's boot: static names are reserved for good (a stored
/// registration under one fails the start) and stored registrations are
/// loaded; one the host cannot serve is isolated and logged.
pub(super) async fn boot(handle: &DriverHandle) -> Result<(), StartError> {
    match handle.unary(Caller::Open, Request::Boot).await {
        Ok(Response::Booted(report)) => {
            for (name, reason) in &report.isolated {
                tracing::warn!(harness = %name, %reason, "stored registration not served");
            }
            Ok(())
        }
        Ok(other) => Err(StartError::Registry(format!("boot answered {other:?}"))),
        Err(status) => Err(StartError::Registry(status.message)),
    }
}

/// A listener on `addr` and the address it bound (port 0 picks one).
pub(super) async fn bind(
    addr: SocketAddr,
) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let failed = |e: std::io::Error| StartError::Listen {
        addr,
        reason: e.to_string(),
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// The web console on `addr`: HTTPS with the Sessions listener's
/// certificate when TLS is configured; plain HTTP is loopback only unless
/// the operator says otherwise. Its bound address and its server task.
pub(super) async fn console(
    addr: SocketAddr,
    security: &Security,
    handle: &DriverHandle,
    metrics: &Option<Arc<Metrics>>,
    stop: &tokio::sync::watch::Sender<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), StartError> {
    check_listen(
        "--console-addr",
        addr,
        security.tls.is_some(),
        security.insecure_listen,
    )?;
    let tls = match &security.tls {
        Some(files) => Some(super::console_tls::server_config(files)?),
        None => None,
    };
    let (listener, bound) = bind(addr).await?;
    let csrf = crate::console::CsrfKey::random()
        .map_err(|e| StartError::Config(format!("--console-addr: random key: {e}")))?;
    let console = crate::console::Console::new(
        Arc::new(handle.clone()),
        security.auth.clone(),
        csrf,
        stop.subscribe(),
        tls.is_some(),
    )
    .with_metrics(metrics.clone());
    let task = crate::console::serve(listener, tls, console, stop.subscribe()).map_err(|e| {
        StartError::Listen {
            addr,
            reason: e.to_string(),
        }
    })?;
    Ok((bound, task))
}

struct Model(Arc<dyn ModelClient>);

impl ModelPort for Model {
    fn invoke(
        &self,
        request: agentsessions_proto::v1::ModelCall,
        chunks: mpsc::UnboundedSender<String>,
    ) -> PortFuture<'_, Result<agentsessions_machine::vocab::ModelReply, ModelFailure>> {
        Box::pin(async move {
            let mut forward = move |chunk: String| {
                let _ = chunks.send(chunk);
            };
            self.0
                .invoke(&request, &mut forward)
                .await
                .map_err(|e| e.to_failure())
        })
    }
}

struct Tools(Arc<dyn ToolExecutor>);

impl ToolPort for Tools {
    fn execute(
        &self,
        session: String,
        call: agentsessions_proto::v1::ToolCall,
        ask: crate::tools::Ask,
        interrupt: crate::tools::Interrupt,
    ) -> PortFuture<
        '_,
        Result<agentsessions_proto::v1::ToolResult, agentsessions_machine::vocab::ToolFailure>,
    > {
        Box::pin(async move {
            let done = self
                .0
                .execute_interruptible(&session, &call, ask, interrupt)
                .await;
            crate::tools::tool_failure(done)
        })
    }

    fn forget(&self, session: String) -> PortFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.0
                .forget(&session)
                .await
                .map_err(|e| e.to_outcome_string())
        })
    }
}

/// Runs a ledger call on a blocking thread: it blocks (a file's fsync, or a
/// database round trip driven by this very runtime).
async fn on_ledger<T: Send + 'static>(
    ledger: &Arc<dyn LedgerStore>,
    f: impl FnOnce(&dyn LedgerStore) -> Result<T, crate::tools::ledger::LedgerError> + Send + 'static,
) -> Result<T, StartError> {
    let ledger = Arc::clone(ledger);
    let fail = |e: String| StartError::Journal(format!("tool ledger: {e}"));
    tokio::task::spawn_blocking(move || f(&*ledger))
        .await
        .map_err(|e| fail(e.to_string()))?
        .map_err(|e| fail(e.to_string()))
}

/// A deletion commits in the journal before its tool-ledger entries are
/// purged (two files, no shared transaction); a crash in between leaves
/// entries of a deleted session, which this start-up pass removes.
async fn forget_deleted_tools<S: JournalStore>(
    ledger: &Arc<dyn LedgerStore>,
    store: &S,
) -> Result<(), StartError> {
    let fail = |e: String| StartError::Journal(format!("tool ledger: {e}"));
    let mut purged = 0usize;
    for session in on_ledger(ledger, |l| l.sessions()).await? {
        if store
            .tombstone(&session)
            .await
            .map_err(|e| fail(e.to_string()))?
            .is_some()
        {
            purged += on_ledger(ledger, move |l| l.forget(&session)).await?;
        }
    }
    if purged > 0 {
        tracing::info!(purged, "tool ledger: dropped entries of deleted sessions");
    }
    Ok(())
}
