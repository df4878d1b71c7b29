//! agentsessionsd: the durable agent sessions daemon.
//!
//! Serves the `Sessions` API (plus gRPC health and reflection) on `--addr`
//! and, when `--registry-addr` is given, the `HarnessRegistry` admin API on
//! a literal-loopback listener. SIGINT or SIGTERM stops accepting calls and
//! lets the turns in flight finish before exiting.

// A turn allocates many small strings and vectors; see the root
// Cargo.toml and docs/performance.md.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use agentsessions_shells::auth::{AuthFile, Authenticator};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig, HarnessTimeouts};
use agentsessions_shells::daemon::limits::Limits;
use agentsessions_shells::daemon::otlp::Otlp;
use agentsessions_shells::daemon::security::{ClientTlsFiles, Security, TlsFiles};
use anyhow::Context as _;
use clap::Parser;

/// Durable agent sessions: a hash-chained journal, replay, fork, approvals.
#[derive(Debug, Parser)]
#[command(name = "agentsessionsd", version, about)]
struct Args {
    /// Sessions API listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// The journal: a SQLite file (created if missing), or a PostgreSQL
    /// database, `postgres://user@host:port/db` (schema created if missing).
    #[arg(long, default_value = "agentsessions.db")]
    journal: String,
    /// PEM file of the CA that signed the PostgreSQL server's certificate:
    /// the connection is then TLS, the server verified (`sslmode=require`
    /// in the URL needs it).
    #[arg(long, env = "AGENTSESSIONS_JOURNAL_CA", value_name = "FILE")]
    journal_ca: Option<PathBuf>,
    /// PostgreSQL only: longest a statement may run or wait on another
    /// client's lock before it is canceled and the call answered
    /// UNAVAILABLE (the store stays up).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    journal_statement_timeout: Duration,
    /// The tool ledger file (default: `<journal>.tools.db` beside a SQLite
    /// journal). With a PostgreSQL journal the ledger is a table in that
    /// database, shared by every daemon on it, unless this names a file.
    #[arg(long)]
    tools_ledger: Option<PathBuf>,
    /// Project for sessions created without one.
    #[arg(long, default_value = "default")]
    project: String,
    /// Serve a model id from an OpenAI-compatible provider: `ID` (at
    /// --model-base-url) or `ID=BASE_URL`. Repeatable. Calls are routed by
    /// the id the harness names; `echo` is always the built-in echo model.
    /// The first id is the `chat` harness's.
    #[arg(long = "model", value_name = "ID[=BASE_URL]")]
    models: Vec<String>,
    /// Base URL of the OpenAI-compatible provider for ids given without one.
    #[arg(long)]
    model_base_url: Option<String>,
    /// Request path under the base URL.
    #[arg(long)]
    model_path: Option<String>,
    /// Header carrying the API key ("Authorization" sends "Bearer <key>").
    #[arg(long, default_value = "Authorization")]
    model_auth_header: String,
    /// Attach a remote harness: NAME=ADDRESS (host:port, dns:///host:port,
    /// unix:path). Repeatable.
    #[arg(long = "harness", value_name = "NAME=ADDRESS")]
    harnesses: Vec<String>,
    /// Serve an MCP server's tools as `NAME__TOOL`: `NAME=COMMAND [ARGS…]`
    /// (split as a POSIX shell would; a child process on stdio) or
    /// `NAME=http://HOST:PORT/PATH` (streamable HTTP). NAME is
    /// `[a-z0-9-]{1,32}`. Repeatable.
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL")]
    mcp: Vec<String>,
    /// Bound on one MCP call (waiting for a free slot included); past it
    /// the call is cancelled on its server and gets an error receipt.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    mcp_call_timeout: Duration,
    /// Calls in flight to one MCP server at once; more wait their turn.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    mcp_max_calls: usize,
    /// Largest MCP result a receipt takes; a larger one is refused with an
    /// error receipt naming the limit.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=(64 << 20)))]
    tool_result_max_bytes: usize,
    /// How the host treats calls to a tool: `PATTERN=auto|approval|deny`,
    /// `*` matching any run of characters; the most specific pattern wins.
    /// Without a rule an MCP tool that says it is read-only runs at once
    /// and any other waits for approval. Repeatable.
    /// `approval:DURATION` also bounds how long such a call may wait for a
    /// decision (`fs__write_file=approval:30m`).
    #[arg(long = "tool-policy", value_name = "PATTERN=POLICY")]
    tool_policy: Vec<agentsessions_machine::vocab::ToolRule>,
    /// Deny an approval request nobody decided within this long (from the
    /// request's journaled time), then resume its turn so the agent reads
    /// the denial. Off by default; a `--tool-policy` `approval:DURATION`
    /// overrides it for the tools it covers.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    approval_timeout: Option<Duration>,
    /// With expiry on: how often every session is looked at again for a
    /// deadline this daemon did not arm (another daemon's, on a shared
    /// journal). 0 looks only at boot.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    approval_rescan: Duration,
    /// POST a JSON event to this URL when an approval is requested,
    /// decided or expired, or a turn fails (at least once, from an outbox
    /// in the journal). Repeatable.
    #[arg(long = "notify", value_name = "URL")]
    notify: Vec<String>,
    /// Sign each notification: HMAC-SHA256 of "TIMESTAMP.BODY" in
    /// X-Agentsessions-Signature (see docs/operations.md).
    #[arg(
        long,
        value_name = "SECRET",
        env = "AGENTSESSIONS_NOTIFY_SECRET",
        hide_env_values = true
    )]
    notify_secret: Option<String>,
    /// Notification bodies: `json` (the event) or `slack` (an incoming
    /// webhook's `{"text": …}`).
    #[arg(long, value_name = "FORMAT", default_value = "json")]
    notify_format: agentsessions_shells::notify::Format,
    /// Put the tool call's arguments in approval notifications (left out
    /// by default: they may hold what should not leave the host).
    #[arg(long)]
    notify_include_arguments: bool,
    /// Tokens (input + output, as reported in USAGE records) a session may
    /// use; past it model calls are refused with RESOURCE_EXHAUSTED and a
    /// durable ERROR. A session's `token-budget` label overrides it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    session_token_budget: Option<i64>,
    /// Serve the HarnessRegistry admin API on this loopback address.
    #[arg(long)]
    registry_addr: Option<SocketAddr>,
    /// Serve gRPC on this many worker threads, with the drive loop on a
    /// thread of its own. 0 runs the listener and the drive loop on one
    /// thread (the faster layout on the 2-core machines measured; see
    /// docs/architecture.md).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    workers: u16,
    /// Drive loops: each a host of its own on a thread of its own, with the
    /// sessions partitioned over them by uid and one journal writer shared
    /// by all. 0 (the default) runs one per core.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    drive_loops: u16,
    /// Bound on each Describe of a harness, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    harness_describe_timeout_ms: u64,
    /// Bound from sending Start until a harness's first event, in
    /// milliseconds; a silent harness ends the turn UNAVAILABLE.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    harness_connect_timeout_ms: u64,
    /// Most client calls in flight at once; a call past it gets
    /// RESOURCE_EXHAUSTED before it touches the journal.
    #[arg(long, default_value_t = agentsessions_machine::vocab::config::DEFAULT_MAX_IN_FLIGHT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_in_flight: usize,
    /// Most parts in one message of a request (reasoning summaries and
    /// tool-result content included); more is INVALID_ARGUMENT.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_parts_per_message, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_parts_per_message: usize,
    /// Most messages, parts and struct values in one Exec request;
    /// more is INVALID_ARGUMENT.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_request_elements, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_request_elements: usize,
    /// Largest request accepted, in encoded bytes (gRPC's decode limit).
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_request_bytes, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    max_request_bytes: usize,
    /// Most Exec and Replay streams one verified principal has open; more
    /// is RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_streams_per_principal, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_streams_per_principal: usize,
    /// Most calls one verified principal has in flight; more is
    /// RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_calls_per_principal, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_calls_per_principal: usize,
    /// Most calls in flight on one client connection; more is
    /// RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_calls_per_connection, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_calls_per_connection: usize,
    /// Most request bytes held by calls in flight across all callers; a
    /// call past it is RESOURCE_EXHAUSTED (one call always runs alone).
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().request_memory, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    request_memory_bytes: usize,
    /// Delete sessions whose last write is older than this (e.g. 30d, 12h)
    /// and that have nothing in flight or pending. Off by default.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    retain_completed: Option<Duration>,
    /// Pause between retention passes over the whole journal.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    retention_interval: Duration,
    /// This daemon's id as a session lease owner; keep it stable across
    /// restarts so a restarted daemon takes its own leases back at once.
    /// Default: `<hostname>:<port of --addr>` (with `--addr` on port 0, one
    /// unique to the process: set it to keep leases across restarts).
    #[arg(long, value_name = "ID")]
    host_id: Option<String>,
    /// How long a session lease lasts; another daemon on the same journal
    /// takes over a session only after its holder's lease lapses. Default:
    /// 15s on a PostgreSQL journal, off (0s) on SQLite, which has one host.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    lease: Option<Duration>,
    /// How often a held lease is renewed. Default: a third of --lease.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    heartbeat: Option<Duration>,
    /// Serve the Sessions API over TLS with this PEM certificate chain.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA (mTLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Serve the registry over TLS with this PEM certificate chain.
    #[arg(long, value_name = "FILE", requires_all = ["registry_tls_key", "registry_addr"])]
    registry_tls_cert: Option<PathBuf>,
    /// The PEM private key of --registry-tls-cert.
    #[arg(long, value_name = "FILE", requires = "registry_tls_cert")]
    registry_tls_key: Option<PathBuf>,
    /// Require registry client certificates signed by this PEM CA.
    #[arg(long, value_name = "FILE", requires = "registry_tls_cert")]
    registry_tls_client_ca: Option<PathBuf>,
    /// CA that `https://` harnesses' certificates chain to (default: the
    /// bundled web roots).
    #[arg(long, value_name = "FILE")]
    harness_ca: Option<PathBuf>,
    /// Client certificate presented to `https://` harnesses (mTLS).
    #[arg(long, value_name = "FILE", requires = "harness_key")]
    harness_cert: Option<PathBuf>,
    /// The PEM private key of --harness-cert.
    #[arg(long, value_name = "FILE", requires = "harness_cert")]
    harness_key: Option<PathBuf>,
    /// Serve Prometheus metrics at /metrics (and readiness at /readyz) on
    /// this address; loopback unless --insecure-listen. Off by default.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<SocketAddr>,
    /// Most committed records the daemon keeps in memory across sessions,
    /// so an operation on a session reads only what it has not seen; a
    /// session longer than its loop's share (this divided by
    /// --drive-loops) is read whole by every call on it.
    #[arg(long, value_name = "N", default_value_t = agentsessions_shells::daemon::log_cache::MAX_RECORDS)]
    journal_cache_records: usize,
    /// Serve the web console (sessions, journals, fork trees, approvals)
    /// on this address; loopback unless --insecure-listen. With --auth it
    /// asks for a token. Off by default.
    #[arg(long, value_name = "HOST:PORT")]
    console_addr: Option<SocketAddr>,
    /// Export trace spans over OTLP/gRPC to this collector, e.g.
    /// `http://127.0.0.1:4317`: one span per RPC and children for journal
    /// writes, harness connections, model calls and tool executions.
    /// Off by default; a collector that is gone costs dropped spans only.
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// Allow plaintext on a non-loopback --addr (otherwise a startup error).
    #[arg(long)]
    insecure_listen: bool,
    /// Check credentials on every call (TOML: [[api_key]], [jwt], [mtls];
    /// see docs/security.md). Without it every caller may do everything.
    /// SIGHUP re-reads the JWKS file it names.
    #[arg(long, value_name = "FILE")]
    auth: Option<PathBuf>,
    /// Read flags from this TOML file: keys are the flags' long names,
    /// e.g. `metrics-addr = "127.0.0.1:8083"`, `harness = ["a=host:1"]`.
    /// A flag or environment variable given as well wins over the file; an
    /// unknown key is an error.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration (as a file --config accepts, each
    /// value's source noted, secrets redacted) and exit.
    #[arg(long)]
    print_config: bool,
}

/// The flags, with those of `--config FILE` merged in; `--print-config`
/// prints them and exits.
fn parse_args() -> anyhow::Result<Args> {
    use agentsessions::cli::daemon_config;
    use clap::{CommandFactory as _, FromArgMatches as _};
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let (program, cli) = raw.split_first().context("no program name")?;
    let cmd = Args::command();
    let mut argv = vec![program.clone()];
    let mut from_file = std::collections::BTreeSet::new();
    if let Some(path) = daemon_config::config_path(cli) {
        let extra = daemon_config::file_args(&cmd, std::path::Path::new(&path), cli)?;
        from_file = daemon_config::named_on(&extra);
        argv.extend(extra);
    }
    argv.extend(cli.iter().cloned());
    let matches = cmd.clone().get_matches_from(argv);
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if args.print_config {
        print!("{}", daemon_config::render(&cmd, &matches, &from_file));
        let key = ["MODEL_API_KEY", "OPENAI_API_KEY"]
            .into_iter()
            .find(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
        if let Some(k) = key {
            println!("# model API key: {} (from {k})", daemon_config::REDACTED);
        }
        std::process::exit(0);
    }
    Ok(args)
}

/// The TLS and authentication settings the flags ask for.
fn security(args: &Args) -> anyhow::Result<Security> {
    let auth = match &args.auth {
        None => Authenticator::Off,
        Some(path) => {
            let file = AuthFile::load(path)?;
            Authenticator::from_file(&file).with_context(|| format!("--auth {}", path.display()))?
        }
    };
    let files = |cert: &Option<PathBuf>, key: &Option<PathBuf>, ca: &Option<PathBuf>| {
        Some(TlsFiles {
            cert: cert.clone()?,
            key: key.clone()?,
            client_ca: ca.clone(),
        })
    };
    Ok(Security {
        auth: Arc::new(auth),
        tls: files(&args.tls_cert, &args.tls_key, &args.tls_client_ca),
        registry_tls: files(
            &args.registry_tls_cert,
            &args.registry_tls_key,
            &args.registry_tls_client_ca,
        ),
        insecure_listen: args.insecure_listen,
        harness_tls: ClientTlsFiles {
            ca: args.harness_ca.clone(),
            identity: args.harness_cert.clone().zip(args.harness_key.clone()),
        },
    })
}

/// Re-reads the JWKS file on every SIGHUP; a bad file keeps the old keys.
fn reload_on_hangup(auth: Arc<Authenticator>) -> anyhow::Result<()> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("install SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match auth.reload() {
                Some(Ok(keys)) => eprintln!("agentsessionsd: JWKS reloaded ({keys} keys)"),
                Some(Err(e)) => {
                    eprintln!("agentsessionsd: JWKS reload failed, keeping the old keys: {e}")
                }
                None => {}
            }
        }
    });
    Ok(())
}

/// The lease settings the flags ask for (`None`: no leases).
fn lease_settings(
    args: &Args,
    postgres: bool,
) -> anyhow::Result<Option<agentsessions_shells::daemon::app::LeaseSettings>> {
    let default = Duration::from_nanos(agentsessions_machine::vocab::DEFAULT_LEASE.unsigned_abs());
    let ttl = match args.lease {
        Some(d) => d,
        None if postgres => default,
        None => Duration::ZERO,
    };
    if ttl.is_zero() {
        anyhow::ensure!(
            args.heartbeat.is_none(),
            "--heartbeat needs a lease (--lease is off)"
        );
        return Ok(None);
    }
    let host_id = match &args.host_id {
        Some(id) => id.clone(),
        None => {
            let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            let name = if name.is_empty() {
                "localhost".into()
            } else {
                name
            };
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            default_host_id(&name, args.addr.port(), std::process::id(), nanos)
        }
    };
    Ok(Some(agentsessions_shells::daemon::app::LeaseSettings {
        host_id,
        ttl,
        heartbeat: args.heartbeat.unwrap_or(ttl / 3),
    }))
}

/// `<hostname>:<port>`, stable across restarts so a restarted daemon takes
/// its own leases back. On port 0 there is no stable id, and two such
/// daemons must never share one: the process id and start time tell them
/// apart.
fn default_host_id(name: &str, port: u16, pid: u32, nanos: u32) -> String {
    match port {
        0 => format!("{name}:0-{pid}-{nanos:09}"),
        port => format!("{name}:{port}"),
    }
}

fn parse_harness(spec: &str) -> anyhow::Result<(String, String)> {
    let (name, address) = spec
        .split_once('=')
        .with_context(|| format!("--harness {spec:?}: want NAME=ADDRESS"))?;
    anyhow::ensure!(
        !name.is_empty() && !address.is_empty(),
        "--harness {spec:?}: want NAME=ADDRESS"
    );
    Ok((name.to_owned(), address.to_owned()))
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let runtime = match args.workers {
        0 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .build(),
    }
    .context("agentsessionsd: tokio runtime")?;
    // Spans go to their own export thread, never through the runtime.
    let otlp = args
        .otlp_endpoint
        .as_deref()
        .map(Otlp::start)
        .transpose()
        .context("agentsessionsd: --otlp-endpoint")?;
    // RUST_LOG filters; AGENTSESSIONS_LOG_FORMAT=json switches to JSON lines.
    agentsessions_shells::daemon::observe::init_logging(otlp.as_ref());
    let served = runtime.block_on(serve(args));
    if let Some(otlp) = otlp {
        // What is queued goes out before the process does (bounded).
        if let Err(e) = otlp.shutdown() {
            eprintln!("agentsessionsd: trace export at exit: {e}");
        }
    }
    served
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let harnesses = args
        .harnesses
        .iter()
        .map(|h| parse_harness(h))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The key comes only from the environment, never from a flag, so it
    // does not show up in process listings.
    let model_api_key = std::env::var("MODEL_API_KEY")
        .ok()
        .or_else(|| std::env::var("OPENAI_API_KEY").ok())
        .filter(|k| !k.is_empty());
    let postgres =
        args.journal.starts_with("postgres://") || args.journal.starts_with("postgresql://");
    let ledger = args.tools_ledger.clone();
    let lease = lease_settings(&args, postgres)?;
    let security = security(&args)?;
    reload_on_hangup(security.auth.clone())?;
    let config = DaemonConfig {
        addr: args.addr,
        registry_addr: args.registry_addr,
        journal: if postgres {
            PathBuf::from("agentsessions.db")
        } else {
            PathBuf::from(&args.journal)
        },
        ledger,
        project: args.project,
        models: args.models,
        model_base_url: args.model_base_url,
        model_path: args.model_path,
        model_auth_header: args.model_auth_header,
        model_api_key,
        harnesses,
        harness_timeouts: HarnessTimeouts {
            describe: Duration::from_millis(args.harness_describe_timeout_ms),
            connect: Duration::from_millis(args.harness_connect_timeout_ms),
        },
        max_in_flight: args.max_in_flight,
        retain_completed: args.retain_completed,
        retention_interval: args.retention_interval,
        lease,
        security,
        metrics_addr: args.metrics_addr,
        drive_loops: match args.drive_loops {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => usize::from(n),
        },
        console_addr: args.console_addr,
        journal_cache_records: args.journal_cache_records,
        limits: Limits {
            max_parts_per_message: args.max_parts_per_message,
            max_request_elements: args.max_request_elements,
            max_request_bytes: args.max_request_bytes,
            max_streams_per_principal: args.max_streams_per_principal,
            max_calls_per_principal: args.max_calls_per_principal,
            max_calls_per_connection: args.max_calls_per_connection,
            request_memory: args.request_memory_bytes,
        },
        tool_rules: args.tool_policy.clone(),
        mcp: args.mcp.clone(),
        mcp_config: agentsessions_shells::mcp::McpConfig {
            call_timeout: args.mcp_call_timeout,
            max_concurrent_calls: args.mcp_max_calls,
            max_result_bytes: args.tool_result_max_bytes,
            ..Default::default()
        },
        session_token_budget: args.session_token_budget,
        approvals: agentsessions_shells::daemon::config::Approvals {
            timeout: args.approval_timeout,
            rescan: (!args.approval_rescan.is_zero()).then_some(args.approval_rescan),
            notify: agentsessions_shells::notify::NotifySettings {
                urls: args.notify.clone(),
                secret: args.notify_secret.clone(),
                format: args.notify_format,
                include_arguments: args.notify_include_arguments,
                console: None,
            },
        },
    };
    let daemon = if postgres {
        let store = agentsessions_pg::PgJournal::open_reopening(
            &args.journal,
            agentsessions_pg::PgOptions {
                default_project: config.project.clone(),
                ca_file: args.journal_ca.clone(),
                statement_timeout: Some(args.journal_statement_timeout),
                ..Default::default()
            },
        )
        .await
        .context("agentsessionsd: open the PostgreSQL journal")?;
        match &args.tools_ledger {
            Some(_) => Daemon::start_reopening(config, store).await,
            None => {
                let shared = store
                    .current()
                    .context("agentsessionsd: the journal just opened")?
                    .tool_ledger();
                Daemon::start_shared(config, store, std::sync::Arc::new(shared)).await
            }
        }
        .context("agentsessionsd")?
    } else {
        Daemon::start(config).await.context("agentsessionsd")?
    };
    println!("agentsessionsd listening on {}", daemon.addr);
    if let Some(r) = daemon.registry_addr {
        println!("harness registry listening on {r}");
    }
    if let Some(m) = daemon.metrics_addr {
        println!("metrics listening on {m}");
    }
    if let Some(c) = daemon.console_addr {
        // With --tls-cert the console serves HTTPS on the Sessions
        // listener's certificate (Daemon::start); plain http gets nothing.
        let scheme = if args.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        println!("console listening on {scheme}://{c}");
    }
    // Launchers pass port 0 and read the bound ports from these lines.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    shutdown_signal().await;
    eprintln!("agentsessionsd: draining in-flight calls");
    daemon.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::default_host_id;

    #[test]
    fn a_fixed_port_gives_a_stable_lease_owner_and_port_0_a_unique_one() {
        assert_eq!(default_host_id("h", 8080, 1, 2), "h:8080");
        assert_eq!(default_host_id("h", 8080, 3, 4), "h:8080", "stable");
        assert_ne!(
            default_host_id("h", 0, 1, 2),
            default_host_id("h", 0, 3, 2),
            "two daemons on any port never share a lease owner"
        );
    }
}
