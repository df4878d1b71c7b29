//! What a daemon is configured with, and what follows from it alone: the
//! machine's host configuration (its routes by the machine's route policy),
//! the model router, and the OS's ids. No listener, store or task here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentsessions_machine::vocab::routes::static_routes;
use agentsessions_machine::vocab::{HostConfig, IdSource, LeaseConfig};

use super::harness_client::parse_address;
use super::security::Security;
use super::start_error::StartError;
use crate::model::ModelRouter;

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
    pub tool_rules: Vec<agentsessions_machine::vocab::ToolRule>,
    /// `--mcp NAME=COMMAND…|URL`: MCP servers whose tools the host runs.
    pub mcp: Vec<String>,
    /// Bounds on MCP calls: `--mcp-call-timeout`, `--mcp-max-calls`,
    /// `--tool-result-max-bytes`.
    pub mcp_config: crate::mcp::McpConfig,
    /// `--session-token-budget`: tokens a session may use (see the
    /// machine's `HostConfig::session_token_budget`).
    pub session_token_budget: Option<i64>,
    /// Approval expiry and notifications.
    pub approvals: Approvals,
}

/// How long approval requests may wait, and who is told about them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvals {
    /// `--approval-timeout`: how long any request may stay undecided
    /// (`None`: forever, unless a `--tool-policy` rule says).
    pub timeout: Option<std::time::Duration>,
    /// `--approval-rescan`: how often every session is looked at again for
    /// a deadline this daemon did not arm (one another daemon armed before
    /// it stopped); `None`: only at boot.
    pub rescan: Option<std::time::Duration>,
    /// `--notify …`.
    pub notify: crate::notify::NotifySettings,
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
    let router = model_router(config)?;
    host.models = Some(router.ids().map(str::to_owned).collect());
    host.tools.rules = config.tool_rules.clone();
    host.tools.approval_expiry_ms = match config.approvals.timeout {
        None => None,
        Some(d) if d >= std::time::Duration::from_secs(1) => {
            Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }
        Some(d) => {
            return Err(StartError::Config(format!(
                "--approval-timeout {d:?}: want 1s or more"
            )));
        }
    };
    if let Some(problem) = config.approvals.notify.problem() {
        return Err(StartError::Config(problem));
    }
    host.session_token_budget = config.session_token_budget;
    // Addresses are parsed here; which names may be routed is the
    // machine's rule (`vocab::routes`).
    for (name, address) in &config.harnesses {
        parse_address(address).map_err(|e| StartError::Config(format!("--harness {name}: {e}")))?;
    }
    (host.harnesses, host.reserved) = static_routes(!config.models.is_empty(), &config.harnesses)
        .map_err(|e| StartError::Config(e.to_string()))?;
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
pub(crate) fn chat_model(config: &DaemonConfig) -> String {
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
