//! agentctl: the command-line client of the Sessions and HarnessRegistry
//! APIs.
//!
//! With `--server host:port` it talks to a running `agentsessionsd`.
//! Without it, it starts a daemon in this process on a loopback port, backed
//! by `--journal` (default `agentsessions.db`), talks to it over real gRPC
//! and stops it before exiting: every invocation reopens the journal, so each
//! command also exercises the restart path.
//!
//! Exit codes (see `agentsessions::cli::exit`): 0 ok, 1 local failure,
//! 2 usage, 3 chain verification failed, 10 + N for gRPC status code N
//! (NOT_FOUND exits 15, UNAVAILABLE 24, ...).

// A turn allocates many small strings and vectors; see the root
// Cargo.toml and docs/performance.md.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use agentsessions::cli::args::{Cli, Command, Common, Decide, HarnessCommand, JournalCommand};
use agentsessions::cli::connect::{Conn, bearer, connect, tls};
use agentsessions::cli::exit::{self, RpcError, UsageError};
use agentsessions::cli::verify::{ChainCheck, VerifyError};
use agentsessions::cli::{approve, json_line, progress, render};
use agentsessions_machine::events::text_message;
use agentsessions_proto::grpc::harness_registry_client::HarnessRegistryClient;
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::grpc::tools_client::ToolsClient;
use agentsessions_proto::v1::{
    ApproveResponse, CancelRequest, CreateSessionRequest, DeleteSessionRequest, ExecRequest,
    ForkRequest, GetHarnessRequest, GetSessionRequest, HarnessSpec, ListHarnessesRequest,
    ListHarnessesResponse, ListSessionsRequest, ListSessionsResponse, LogRecord,
    RegisterHarnessRequest, ReplayRequest, ResourceMetadata, ResumeRequest, RetireHarnessRequest,
    Session, SuspendRequest, exec_update::Update,
};
use agentsessions_shells::causes;
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use anyhow::Context as _;
use clap::Parser as _;
use tonic::transport::Channel;

/// How long dialing a server may take before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Registry calls are short admin calls; a hung one should not hang a script.
const REGISTRY_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to
            // stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE));
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentctl: tokio runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) if broken_pipe(&err) => ExitCode::from(exit::OK),
        Err(err) => {
            eprintln!("agentctl: {}", causes::chain(err.as_ref()));
            ExitCode::from(exit_code(&err))
        }
    }
}

/// The exit code of a failed command: the first typed cause decides.
fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(rpc) = cause.downcast_ref::<RpcError>() {
            return rpc.exit_code();
        }
        if cause.is::<VerifyError>() {
            return exit::VERIFY_FAILED;
        }
        if cause.is::<UsageError>() {
            return exit::USAGE;
        }
    }
    exit::FAILURE
}

/// A reader that closed the pipe early (`agentctl replay | head`) is not an
/// error of ours.
fn broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes a line to stdout, returning write errors instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), $($arg)*)?
    };
}

fn rpc(call: &'static str) -> impl FnOnce(tonic::Status) -> RpcError {
    move |status| RpcError::new(call, status)
}

/// A typed client's failure as agentctl reports an RPC's (exit code and
/// message by status).
fn client_error(e: agentsessions_client::ClientError) -> anyhow::Error {
    match e {
        agentsessions_client::ClientError::Status { call, status } => {
            RpcError::new(call, status).into()
        }
        other => anyhow::anyhow!(other),
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let Cli { common, command } = cli;
    match command {
        Command::Version => {
            out!("agentctl {}", env!("CARGO_PKG_VERSION"));
            Ok(exit::OK)
        }
        Command::Journal { command } => journal(command).await,
        Command::Tools => {
            let link = Link::open(&common, Want::Sessions).await?;
            let mut client = ToolsClient::with_interceptor(link.channel.clone(), bearer(&common)?);
            let result = tools(&mut client, common.json).await;
            drop(client);
            link.close().await;
            result.map(|()| exit::OK)
        }
        Command::Harness {
            registry, command, ..
        } => {
            let registry = common.registry_target(registry)?;
            let link = Link::open(&common, Want::Registry(registry)).await?;
            let mut client =
                HarnessRegistryClient::with_interceptor(link.channel.clone(), bearer(&common)?);
            let result = harness(&mut client, &common, command).await;
            drop(client);
            link.close().await;
            result.map(|()| exit::OK)
        }
        command => {
            let link = Link::open(&common, Want::Sessions).await?;
            let mut client =
                SessionsClient::with_interceptor(link.channel.clone(), bearer(&common)?);
            let mut tools = ToolsClient::with_interceptor(link.channel.clone(), bearer(&common)?);
            let mut typed = agentsessions_client::Client::from_stub(client.clone());
            let mut clients = Clients {
                tools: &mut tools,
                typed: &mut typed,
            };
            let result = sessions(&mut client, &mut clients, &common, command).await;
            drop((client, tools, typed));
            link.close().await;
            result
        }
    }
}

enum Want {
    Sessions,
    Registry(Option<String>),
}

/// A channel to the server, and the embedded daemon behind it if this
/// process runs one.
struct Link {
    channel: Channel,
    daemon: Option<Daemon>,
}

impl Link {
    async fn open(common: &Common, want: Want) -> anyhow::Result<Self> {
        let remote = match &want {
            Want::Sessions => common.server.clone(),
            Want::Registry(registry) => registry.clone(),
        };
        if let Some(addr) = remote {
            let channel = connect(&addr, tls(common, &addr)?, CONNECT_TIMEOUT).await?;
            return Ok(Self {
                channel,
                daemon: None,
            });
        }
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let config = DaemonConfig {
            addr: loopback,
            registry_addr: matches!(want, Want::Registry(_)).then_some(loopback),
            journal: common.journal.clone(),
            project: common.project.clone(),
            models: Vec::new(),
            model_base_url: None,
            model_path: None,
            model_auth_header: "Authorization".to_owned(),
            model_api_key: None,
            harnesses: Vec::new(),
            // No remote harnesses here, so the bounds never come into play.
            harness_timeouts: Default::default(),
            max_in_flight: agentsessions_machine::vocab::config::DEFAULT_MAX_IN_FLIGHT,
            retain_completed: None,
            ledger: None,
            retention_interval: agentsessions_shells::daemon::app::DEFAULT_RETENTION_INTERVAL,
            lease: None,
            security: Default::default(),
            metrics_addr: None,
            // One process per command: one loop is plenty.
            drive_loops: 1,
            console_addr: None,
            limits: Default::default(),
            tool_rules: Vec::new(),
            mcp: Vec::new(),
            mcp_config: Default::default(),
            session_token_budget: None,
            approvals: Default::default(),
            journal_cache_records: agentsessions_shells::daemon::log_cache::MAX_RECORDS,
        };
        let daemon = Daemon::start(config)
            .await
            .with_context(|| format!("embedded daemon on {}", common.journal.display()))?;
        let addr = match want {
            Want::Sessions => Some(daemon.addr),
            Want::Registry(_) => daemon.registry_addr,
        };
        let Some(addr) = addr else {
            anyhow::bail!("embedded daemon: the registry listener did not bind");
        };
        let channel = match connect(&addr.to_string(), None, CONNECT_TIMEOUT).await {
            Ok(channel) => channel,
            Err(e) => {
                daemon.shutdown().await;
                return Err(e);
            }
        };
        Ok(Self {
            channel,
            daemon: Some(daemon),
        })
    }

    /// Drops the channel first so the embedded daemon's graceful stop does
    /// not wait on our own idle connection.
    async fn close(self) {
        drop(self.channel);
        if let Some(daemon) = self.daemon {
            daemon.shutdown().await;
        }
    }
}

fn no_session(flag: &str) -> anyhow::Error {
    UsageError(format!("{flag}: a session is required")).into()
}

/// The other clients a sessions command may need, over the same channel.
struct Clients<'a> {
    tools: &'a mut ToolsClient<Conn>,
    typed: &'a mut agentsessions_client::Client,
}

async fn sessions(
    c: &mut SessionsClient<Conn>,
    clients: &mut Clients<'_>,
    common: &Common,
    command: Command,
) -> anyhow::Result<u8> {
    let json = common.json;
    match command {
        Command::Create {
            name,
            harness,
            model,
        } => {
            let s = create(c, common, name, harness, model).await?;
            if json {
                out!("{}", json_line(&s));
            } else {
                out!("{}", render::uid(&s));
            }
        }
        Command::List { page_size } => {
            let mut all = ListSessionsResponse::default();
            loop {
                let page = c
                    .list_sessions(ListSessionsRequest {
                        project: common.project.clone(),
                        page_size,
                        page_token: all.next_page_token.clone(),
                    })
                    .await
                    .map_err(rpc("ListSessions"))?
                    .into_inner();
                all.sessions.extend(page.sessions);
                all.next_page_token = page.next_page_token;
                if all.next_page_token.is_empty() {
                    break;
                }
            }
            if json {
                out!("{}", json_line(&all));
            } else {
                for s in &all.sessions {
                    out!("{}", render::list_row(s));
                }
            }
        }
        Command::Get { session } => {
            let s = get(c, &session).await?;
            if json {
                out!("{}", json_line(&s));
            } else {
                out!("{}", render::session_line(&s));
                if let Some(p) = &s.pending_approval {
                    out!("{}", render::pending_line(p));
                    // What the decision is about: the call and its arguments.
                    let records = records(c, &session, p.request_seq).await?;
                    if let Some(call) = records
                        .iter()
                        .rev()
                        .filter_map(|r| r.event.as_ref())
                        .filter_map(agentsessions_machine::events::body::tool)
                        .find(|t| t.id == p.tool_call_id)
                    {
                        out!("{}", render::pending_call_line(call));
                        // Its server, the policy its calls meet and its
                        // hints, from the catalog; a host without one (or a
                        // caller who may not list it) says nothing more.
                        if let Ok(listing) = clients
                            .tools
                            .list_tools(agentsessions_proto::v1::ListToolsRequest {})
                            .await
                            && let Some(t) =
                                listing.get_ref().tools.iter().find(|t| t.name == call.tool)
                        {
                            out!("{}", render::pending_tool_line(t));
                        }
                    }
                }
            }
        }
        Command::Exec {
            session,
            input,
            harness,
        } => exec(c, common, session, input, harness).await?,
        Command::Replay { session, from, to } => replay(c, json, &session, from, to).await?,
        Command::Verify { session } => verify(c, json, &session).await?,
        Command::Fork {
            session,
            at,
            count,
            names,
        } => {
            let count = count.unwrap_or(names.len().max(1) as i32);
            if !names.is_empty() && names.len() != count as usize {
                return Err(UsageError(format!(
                    "--names has {} names but --count is {count}",
                    names.len()
                ))
                .into());
            }
            let forked = c
                .fork(ForkRequest {
                    session,
                    at_seq: at,
                    count,
                    child_names: names,
                    ..Default::default()
                })
                .await
                .map_err(rpc("Fork"))?
                .into_inner();
            if json {
                out!("{}", json_line(&forked));
            } else {
                for child in &forked.children {
                    out!("{}", render::child_line(child));
                }
            }
        }
        Command::Suspend { session } => {
            let s = c
                .suspend(SuspendRequest { session })
                .await
                .map_err(rpc("Suspend"))?
                .into_inner();
            transition(json, &s, "suspend")?;
        }
        Command::Resume { session } => {
            let s = resume(c, session).await?;
            transition(json, &s, "resume")?;
        }
        Command::Cancel {
            session,
            execution,
            reason,
        } => {
            let s = c
                .cancel(CancelRequest {
                    session,
                    execution_id: execution,
                    reason,
                })
                .await
                .map_err(rpc("Cancel"))?
                .into_inner();
            transition(json, &s, "cancel")?;
        }
        Command::Delete { session } => {
            let s = c
                .delete_session(DeleteSessionRequest { uid: session })
                .await
                .map_err(rpc("DeleteSession"))?
                .into_inner();
            transition(json, &s, "deleted")?;
        }
        Command::Approve(d) => decide(c, clients.typed, json, d, true).await?,
        Command::Deny(d) => decide(c, clients.typed, json, d, false).await?,
        // `run` handles these before opening a Sessions link.
        Command::Harness { .. } | Command::Journal { .. } | Command::Tools | Command::Version => {
            anyhow::bail!("internal: command dispatched to the Sessions client")
        }
    }
    Ok(exit::OK)
}

/// `agentctl tools`: the catalog, one tool per line (or one JSON line).
async fn tools(c: &mut ToolsClient<Conn>, json: bool) -> anyhow::Result<()> {
    let listing = c
        .list_tools(agentsessions_proto::v1::ListToolsRequest {})
        .await
        .map_err(rpc("ListTools"))?
        .into_inner();
    if json {
        out!("{}", json_line(&listing));
        return Ok(());
    }
    for t in &listing.tools {
        out!("{}", render::tool_row(t));
    }
    Ok(())
}

/// `agentctl journal`: straight on the store, no daemon involved.
async fn journal(command: JournalCommand) -> anyhow::Result<u8> {
    use agentsessions_pg::copy::{self, CopyError, Side};
    match command {
        JournalCommand::Copy {
            from,
            to,
            journal_ca,
        } => {
            let ca = journal_ca.as_deref();
            let source = Side::source(&from, ca)
                .await
                .with_context(|| format!("open {from}"))?;
            let mut target = Side::target(&to, ca)
                .await
                .with_context(|| format!("open {to}"))?;
            let r = copy::copy(
                &source,
                &mut target,
                |_| std::ops::ControlFlow::Continue(()),
            )
            .await
            .context("copy")?;
            out!(
                "copied {} sessions: {} records written, {} already there; {} harnesses, {} reservations, {} tombstones",
                r.sessions,
                r.records_copied,
                r.records_present,
                r.harnesses,
                r.reservations,
                r.tombstones
            );
            let v = copy::verify(&target).await.context("verify the target")?;
            out!(
                "target verified: {} sessions, {} records",
                v.sessions,
                v.records
            );
            Ok(exit::OK)
        }
        JournalCommand::Verify { store, journal_ca } => {
            let side = Side::source(&store, journal_ca.as_deref())
                .await
                .with_context(|| format!("open {store}"))?;
            match copy::verify(&side).await {
                Ok(v) => {
                    out!("verified: {} sessions, {} records", v.sessions, v.records);
                    Ok(exit::OK)
                }
                Err(e @ (CopyError::Chain { .. } | CopyError::Decode { .. })) => {
                    eprintln!("agentctl: {e}");
                    Ok(exit::VERIFY_FAILED)
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

async fn create(
    c: &mut SessionsClient<Conn>,
    common: &Common,
    name: String,
    harness: String,
    model: String,
) -> anyhow::Result<Session> {
    let request = CreateSessionRequest {
        session: Some(Session {
            metadata: Some(ResourceMetadata {
                project: common.project.clone(),
                name,
                ..Default::default()
            }),
            harness,
            model,
            ..Default::default()
        }),
    };
    Ok(c.create_session(request)
        .await
        .map_err(rpc("CreateSession"))?
        .into_inner())
}

async fn get(c: &mut SessionsClient<Conn>, uid: &str) -> anyhow::Result<Session> {
    if uid.is_empty() {
        return Err(no_session("--session"));
    }
    Ok(c.get_session(GetSessionRequest {
        uid: uid.to_owned(),
    })
    .await
    .map_err(rpc("GetSession"))?
    .into_inner())
}

async fn resume(c: &mut SessionsClient<Conn>, session: String) -> anyhow::Result<Session> {
    // `boot` is deprecated and ignored by servers; it is left at its default.
    let request = ResumeRequest {
        session,
        ..Default::default()
    };
    Ok(c.resume(request).await.map_err(rpc("Resume"))?.into_inner())
}

fn transition(json: bool, s: &Session, verb: &str) -> anyhow::Result<()> {
    if json {
        out!("{}", json_line(s));
    } else {
        out!("{}", render::transition_line(s, verb));
    }
    Ok(())
}

async fn exec(
    c: &mut SessionsClient<Conn>,
    common: &Common,
    mut session: String,
    input: Option<String>,
    mut harness: String,
) -> anyhow::Result<()> {
    let json = common.json;
    if session.is_empty() {
        // Created up front rather than by Exec itself so the new session
        // lands in --project on a remote server too.
        let created = create(
            c,
            common,
            String::new(),
            std::mem::take(&mut harness),
            String::new(),
        )
        .await?;
        session = render::uid(&created).to_owned();
        if !json {
            out!("session {session}");
        }
    }
    let request = ExecRequest {
        session,
        inputs: input.iter().map(|t| text_message("user", t)).collect(),
        harness,
        ..Default::default()
    };
    let mut stream = c.exec(request).await.map_err(rpc("Exec"))?.into_inner();
    let mut last: Option<Session> = None;
    let mut stdout = Stdout::default();
    // Whether a delta line was started and not yet ended by `done`.
    let mut open_delta = false;
    while let Some(update) = stream.message().await.map_err(rpc("Exec"))? {
        if json {
            stdout.write(&format!("{}\n", json_line(&update)))?;
            if let Some(Update::Session(s)) = update.update {
                last = Some(s);
            }
            continue;
        }
        match update.update {
            Some(Update::Record(r)) => {
                if std::mem::take(&mut open_delta) {
                    stdout.write("\n")?;
                }
                stdout.write(&format!("{}\n", render::record_line(&r)))?;
            }
            Some(Update::Delta(d)) => {
                // Chunks print raw as they stream; `done` ends the line, if
                // any text was streamed on it.
                if !d.chunk.is_empty() {
                    stdout.write(&d.chunk)?;
                    open_delta = true;
                }
                if d.done && std::mem::take(&mut open_delta) {
                    stdout.write("\n")?;
                }
            }
            Some(Update::Session(s)) => last = Some(s),
            None => {}
        }
    }
    if open_delta {
        stdout.write("\n")?;
    }
    if !json && let Some(p) = last.as_ref().and_then(|s| s.pending_approval.as_ref()) {
        stdout.write(&format!("{}\n", render::pending_line(p)))?;
    }
    Ok(())
}

/// Stdout for a turn in flight. A reader that goes away early
/// (`agentctl exec … | head -1`) must not cut the turn short: dropping the
/// stream would interrupt it, and in embedded mode stop it half-way. So a
/// closed pipe only silences the output, and the stream is drained to the
/// end.
#[derive(Default)]
struct Stdout {
    gone: bool,
}

impl Stdout {
    fn write(&mut self, text: &str) -> std::io::Result<()> {
        if self.gone {
            return Ok(());
        }
        let mut out = std::io::stdout();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.gone = true;
                Ok(())
            }
            other => other,
        }
    }
}

async fn replay(
    c: &mut SessionsClient<Conn>,
    json: bool,
    session: &str,
    from: i64,
    to: i64,
) -> anyhow::Result<()> {
    // Replay of an unknown session is an empty stream; asking first turns
    // a mistyped UID into NOT_FOUND and gives the bar its length.
    let head = get(c, session).await?.last_seq;
    let end = if to <= 0 { head } else { to.min(head) };
    let total = u64::try_from(end - from.max(1) + 1).unwrap_or(0);
    // Record lines and a bar would tangle on one terminal, so the bar only
    // shows while stdout goes to a file or pipe.
    let show = progress::wanted(json) && !std::io::stdout().is_terminal();
    let bar = progress::bar(total, show, "replay");
    let mut stream = c
        .replay(ReplayRequest {
            session: session.to_owned(),
            from_seq: from,
            to_seq: to,
        })
        .await
        .map_err(rpc("Replay"))?
        .into_inner();
    while let Some(r) = stream.message().await.map_err(rpc("Replay"))? {
        if json {
            out!("{}", json_line(&r));
        } else {
            out!("{}", render::record_line(&r));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

async fn verify(c: &mut SessionsClient<Conn>, json: bool, session: &str) -> anyhow::Result<()> {
    let last_seq = get(c, session).await?.last_seq;
    let mut check = ChainCheck::new(last_seq);
    let outcome = if last_seq == 0 {
        check.finish()
    } else {
        let bar = progress::bar(
            u64::try_from(last_seq).unwrap_or(0),
            progress::wanted(json),
            "verify",
        );
        let mut stream = replay_all(c, session, last_seq).await?;
        let mut result = Ok(());
        while let Some(r) = stream.message().await.map_err(rpc("Replay"))? {
            result = check.push(&r);
            if result.is_err() {
                break;
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        result.and_then(|()| check.finish())
    };
    match outcome {
        Ok(n) => {
            if json {
                let v = serde_json::json!({"session": session, "verified": true, "records": n});
                out!("{v}");
            } else {
                out!("session {session} chain verified ({n} records)");
            }
            Ok(())
        }
        Err(e) => {
            if json {
                let v = serde_json::json!({
                    "session": session, "verified": false, "seq": e.seq(), "error": e.to_string(),
                });
                out!("{v}");
            }
            Err(anyhow::Error::new(e).context(format!("session {session}")))
        }
    }
}

/// The session's records 1..=`last_seq`.
async fn records(
    c: &mut SessionsClient<Conn>,
    session: &str,
    last_seq: i64,
) -> anyhow::Result<Vec<LogRecord>> {
    let mut out = Vec::new();
    if last_seq <= 0 {
        return Ok(out);
    }
    let mut stream = replay_all(c, session, last_seq).await?;
    while let Some(r) = stream.message().await.map_err(rpc("Replay"))? {
        out.push(r);
    }
    Ok(out)
}

/// The Replay stream of records 1..=`last_seq`.
async fn replay_all(
    c: &mut SessionsClient<Conn>,
    session: &str,
    last_seq: i64,
) -> anyhow::Result<tonic::Streaming<LogRecord>> {
    Ok(c.replay(ReplayRequest {
        session: session.to_owned(),
        from_seq: 1,
        to_seq: last_seq,
    })
    .await
    .map_err(rpc("Replay"))?
    .into_inner())
}

/// Commits the decision, then (unless `--no-resume`) resumes the session
/// and prints the records the resume committed, as `exec` prints a turn's.
async fn decide(
    c: &mut SessionsClient<Conn>,
    typed: &mut agentsessions_client::Client,
    json: bool,
    d: Decide,
    approved: bool,
) -> anyhow::Result<()> {
    let session = approve::session(&d)
        .ok_or_else(|| no_session("--session or SESSION"))?
        .to_owned();
    let target = match approve::explicit_target(&d) {
        Some(target) => target,
        None => {
            let now = get(c, &session).await?;
            match now.pending_approval {
                Some(pending) => pending,
                None => {
                    // The records say why and whether resume would help;
                    // failing to read them only loses that advice.
                    let records = records(c, &session, now.last_seq).await.ok();
                    anyhow::bail!(approve::nothing_pending(&session, records.as_deref()));
                }
            }
        }
    };
    let request = approve::request(&session, target, approved, &d);
    let decided = agentsessions_client::decide(typed, request, !d.no_resume)
        .await
        .map_err(client_error)?;
    let decision_seq = decided.decision.seq;
    let decided_at = decided.decided_at();
    let mut response = ApproveResponse {
        decision: Some(decided.decision),
        session: Some(decided.decided),
    };
    if let Some(resumed) = decided.resumed {
        let resumed = resumed
            .map_err(client_error)
            .with_context(|| approve::resume_failed(&session, decision_seq))?;
        response.session = Some(resumed);
    }
    // --json keeps the reference's one ApproveResponse (the decision record
    // and the session as it is now); `replay --json` has the records.
    if json {
        out!("{}", json_line(&response));
        return Ok(());
    }
    let now = response.session.unwrap_or_default();
    out!(
        "{}",
        approve::decision_line(&session, decision_seq, approved, &now)
    );
    if let Some(r) = &response.decision {
        out!("{}", render::record_line(r));
    }
    if now.last_seq > decided_at {
        let mut stream = c
            .replay(ReplayRequest {
                session: session.clone(),
                from_seq: decided_at + 1,
                to_seq: now.last_seq,
            })
            .await
            .map_err(rpc("Replay"))?
            .into_inner();
        while let Some(r) = stream.message().await.map_err(rpc("Replay"))? {
            out!("{}", render::record_line(&r));
        }
    }
    // The resumed turn may have parked again on another gated call.
    if let Some(p) = &now.pending_approval {
        out!("{}", render::pending_line(p));
    }
    Ok(())
}

async fn harness(
    c: &mut HarnessRegistryClient<Conn>,
    common: &Common,
    command: HarnessCommand,
) -> anyhow::Result<()> {
    let json = common.json;
    fn timed<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(REGISTRY_TIMEOUT);
        request
    }
    match command {
        HarnessCommand::Register { name, spec } => {
            let text = std::fs::read_to_string(&spec)
                .with_context(|| format!("--spec {}", spec.display()))?;
            let spec: HarnessSpec = serde_json::from_str(&text).with_context(|| {
                format!("--spec {}: not a proto-JSON HarnessSpec", spec.display())
            })?;
            let r = c
                .register_harness(timed(RegisterHarnessRequest {
                    name,
                    spec: Some(spec),
                }))
                .await
                .map_err(rpc("RegisterHarness"))?
                .into_inner();
            if json {
                out!("{}", json_line(&r));
            } else {
                let h = r.harness.unwrap_or_default();
                out!("{}", render::register_line(&h, r.outcome));
            }
        }
        HarnessCommand::Get { name, observe } => {
            let h = c
                .get_harness(timed(GetHarnessRequest { name, observe }))
                .await
                .map_err(rpc("GetHarness"))?
                .into_inner();
            if json {
                out!("{}", json_line(&h));
            } else {
                out!("{}", render::harness_line(&h));
            }
        }
        HarnessCommand::List {
            include_retired,
            page_size,
        } => {
            let mut all = ListHarnessesResponse::default();
            loop {
                let page = c
                    .list_harnesses(timed(ListHarnessesRequest {
                        page_size,
                        page_token: all.next_page_token.clone(),
                        include_retired,
                    }))
                    .await
                    .map_err(rpc("ListHarnesses"))?
                    .into_inner();
                all.harnesses.extend(page.harnesses);
                all.next_page_token = page.next_page_token;
                if all.next_page_token.is_empty() {
                    break;
                }
            }
            if json {
                out!("{}", json_line(&all));
            } else {
                for h in &all.harnesses {
                    out!("{}", render::harness_row(h));
                }
            }
        }
        HarnessCommand::Retire { name, reason } => {
            let h = c
                .retire_harness(timed(RetireHarnessRequest { name, reason }))
                .await
                .map_err(rpc("RetireHarness"))?
                .into_inner();
            if json {
                out!("{}", json_line(&h));
            } else {
                out!("{}", render::harness_line(&h));
            }
        }
    }
    Ok(())
}
