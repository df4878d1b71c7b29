//! `harnessnode`: serves one built-in harness (the `Harness` gRPC service
//! only) on TCP or a unix socket, as a sandbox would run it.
//!
//! Flags fall back to the environment the reference node reads
//! (`HARNESS_KIND`, `HARNESS_MODEL`, `HARNESS_ADDR`, `HARNESS_READYZ`).
//! Unlike the reference, an unknown kind is fatal: serving echo in its place
//! would journal sessions under the wrong harness.
//!
//! Stdout gets one line per listener, `harnessnode: serving <kind> on
//! <addr>` and `harnessnode: readyz on <addr>`, so a supervisor (or a test)
//! can learn the ports bound for `:0`. Any startup error exits 1.

// A turn allocates many small strings and vectors; see the root
// Cargo.toml and docs/performance.md.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;
use std::time::Duration;

use agentsessions_shells::daemon::security::TlsFiles;
use agentsessions_shells::harness::HarnessService;
use agentsessions_shells::harness::builtin;
use agentsessions_shells::harness::serve::{ListenAddr, Listener};
use anyhow::{Context, bail};
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// How long open streams may drain after SIGINT/SIGTERM.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves one built-in harness over Harness.Connect.
#[derive(Debug, Parser)]
#[command(name = "harnessnode", version)]
struct Args {
    /// The harness: echo, counter, chat or approval.
    #[arg(long, env = "HARNESS_KIND", default_value = "echo")]
    kind: String,
    /// Model id the chat harness calls; required for chat and checked
    /// before any listener opens.
    #[arg(long, env = "HARNESS_MODEL", default_value = "")]
    model: String,
    /// Harness listener: host:port, :port (every interface), or a unix
    /// socket as unix:///abs/path or unix:path (locked via <path>.lock).
    /// Loopback by default: without --tls-cert the link is plaintext and
    /// unauthenticated.
    #[arg(long, env = "HARNESS_ADDR", default_value = "127.0.0.1:9000")]
    addr: String,
    /// Readiness HTTP listener (host:port) answering "ok"; empty disables it.
    #[arg(long, env = "HARNESS_READYZ", default_value = "127.0.0.1:9001")]
    readyz: String,
    /// Serve TLS with this PEM certificate chain (a TCP --addr only).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Require the host to present a client certificate signed by this CA.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<std::path::PathBuf>,
}

/// The TLS settings of the flags, if any; read before a port is taken.
fn tls(args: &Args) -> anyhow::Result<Option<tonic::transport::ServerTlsConfig>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let files = TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: args.tls_client_ca.clone(),
    };
    Ok(Some(files.server_config("tls")?))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harnessnode: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Everything that can be refused is refused before a port is taken.
    let harness = builtin::build(&args.kind, &args.model)?;
    let addr: ListenAddr = args.addr.parse()?;
    let tls = tls(&args)?;
    if tls.is_some() && matches!(addr, ListenAddr::Unix(_)) {
        bail!(
            "--tls-cert serves TCP only; --addr {} is a unix socket",
            args.addr
        );
    }
    let readyz_addr = match args.readyz.as_str() {
        "" => None,
        s => match s.parse::<ListenAddr>()? {
            ListenAddr::Tcp(a) => Some(a),
            ListenAddr::Unix(_) => bail!("--readyz must be host:port"),
        },
    };

    let mut listener = Listener::bind(&addr).await?;
    if let Some(tls) = tls {
        listener = listener.with_tls(tls);
    }
    println!(
        "harnessnode: serving {} on {}",
        args.kind,
        listener.local_addr()
    );
    let readyz = match readyz_addr {
        Some(a) => {
            let l = TcpListener::bind(&a)
                .await
                .with_context(|| format!("bind readyz {a}"))?;
            println!("harnessnode: readyz on {}", l.local_addr()?);
            Some(tokio::spawn(readyz_loop(l)))
        }
        None => None,
    };

    let (stop, stopped) = oneshot::channel::<()>();
    let mut server = tokio::spawn(listener.serve(HarnessService::new(harness), async {
        let _ = stopped.await;
    }));
    tokio::select! {
        ended = &mut server => {
            ended.context("server task")??;
            bail!("server stopped unexpectedly");
        }
        signal = shutdown_signal() => signal?,
    }
    eprintln!("harnessnode: shutting down");
    if let Some(r) = readyz {
        r.abort();
    }
    let _ = stop.send(());
    match tokio::time::timeout(DRAIN, &mut server).await {
        Ok(ended) => ended.context("server task")??,
        Err(_) => {
            eprintln!("harnessnode: streams still open after {DRAIN:?}; closing them");
            // Waiting for the aborted task runs its drops, which remove a
            // unix socket file before the lock is released.
            server.abort();
            let _ = server.await;
        }
    }
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// Answers every HTTP request with 200 "ok": being able to accept is
/// readiness, since the harness listener is bound before this one.
async fn readyz_loop(listener: TcpListener) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            // Out of descriptors and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(async move {
            // Read the request head (bounded), then answer and close.
            let mut buf = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await;
            let _ = conn
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                )
                .await;
            let _ = conn.shutdown().await;
        });
    }
}
