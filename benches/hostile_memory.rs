//! What a hostile caller can make the daemon hold (`cargo bench --bench
//! hostile_memory`): the built `agentsessionsd --auth` as a child process
//! on its embedded defaults, a writer and a reader.
//!
//! 1. The writer makes the heaviest session it can: `HOSTILE_HEAVY_TURNS`
//!    (default 8) Execs of one maximal message each (1 024 parts, just
//!    under the 4 MiB request limit; the echo harness answers in kind).
//! 2. The reader opens `HOSTILE_REPLAYS` (default 40) Replays of it at
//!    once, each on its own connection, reading slowly.
//! 3. The writer sends `HOSTILE_EXECS` (default 32) maximal Execs at once.
//!
//! Printed for 2 and 3: the daemon's peak RSS growth over the phase
//! (VmHWM, reset through /proc/PID/clear_refs), calls admitted and refused,
//! whether the daemon is alive, and another caller's GetSession p50 during
//! the flood against its idle p50. The targets: growth ≤ 256 MB,
//! p50 ≤ 5× idle.

#[path = "../tests/support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ExecRequest, GetSessionRequest, Message, Part, ReplayRequest, TextPart, part,
};
use cli::Daemon;
use sha2::{Digest, Sha256};
use support::authed;
use tonic::transport::Channel;

const WES: &str = "wes-writer-key-for-the-memory-bench";
const RITA: &str = "rita-reader-key-for-the-memory-bench";
const GUS: &str = "gus-other-reader-key-for-the-bench";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn auth_file(dir: &Path) -> String {
    let digest = |k: &str| hex::encode(Sha256::digest(k.as_bytes()));
    let text = format!(
        "[[api_key]]\nprincipal = \"wes\"\nsha256 = \"{}\"\nroles = [\"*:writer\"]\n\n\
         [[api_key]]\nprincipal = \"rita\"\nsha256 = \"{}\"\nroles = [\"*:reader\"]\n\n\
         [[api_key]]\nprincipal = \"gus\"\nsha256 = \"{}\"\nroles = [\"*:reader\"]\n",
        digest(WES),
        digest(RITA),
        digest(GUS)
    );
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A client that takes the maximal records back.
async fn client(addr: &str) -> SessionsClient<Channel> {
    support::client_at(addr)
        .await
        .max_decoding_message_size(64 << 20)
}

/// One message as large as a request may carry: 1 024 parts of 4 000
/// bytes (~4.0 MB, under the 4 MiB limit).
fn maximal(session: &str) -> ExecRequest {
    let part = Part {
        part: Some(part::Part::Text(TextPart {
            text: "m".repeat(4_000),
        })),
    };
    ExecRequest {
        session: session.into(),
        inputs: vec![Message {
            role: "user".into(),
            parts: vec![part; 1024],
        }],
        ..Default::default()
    }
}

/// Runs an Exec to its end: the session uid, or the status code.
async fn exec(c: &mut SessionsClient<Channel>, req: ExecRequest) -> Result<String, tonic::Code> {
    let mut stream = c
        .exec(authed(req, WES))
        .await
        .map_err(|s| s.code())?
        .into_inner();
    let mut uid = String::new();
    loop {
        match stream.message().await {
            Ok(Some(u)) => {
                if let Some(agentsessions_proto::v1::exec_update::Update::Session(s)) = u.update {
                    uid = s.metadata.unwrap().uid;
                }
            }
            Ok(None) => return Ok(uid),
            Err(s) => return Err(s.code()),
        }
    }
}

fn status_kb(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Resets the peak RSS and returns the current RSS, in kB.
fn reset_peak(pid: u32) -> u64 {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
    status_kb(pid, "VmRSS:")
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// GetSession round trips by another principal until `stop`; their
/// latencies.
async fn probe(
    addr: String,
    uid: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Duration> {
    let mut c = client(&addr).await;
    let mut took = Vec::new();
    while !*stop.borrow() {
        let t = Instant::now();
        let r = c
            .get_session(authed(GetSessionRequest { uid: uid.clone() }, GUS))
            .await;
        if r.is_ok() {
            took.push(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

async fn idle_p50(addr: &str, uid: &str) -> Duration {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(probe(addr.to_owned(), uid.to_owned(), stop));
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_tx.send(true).unwrap();
    p50(task.await.unwrap())
}

/// Runs `n` calls made by `call` (given the daemon's address) at once
/// against daemon `pid`, with another caller's GetSession of `probe_uid`
/// timed throughout; each call says whether it was admitted and finished.
async fn flood<F, Fut>(pid: u32, addr: &str, probe_uid: &str, n: usize, call: F) -> Phase
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let before = reset_peak(pid);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let prober = tokio::spawn(probe(addr.to_owned(), probe_uid.to_owned(), stop));
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(call(addr.to_owned())))
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    stop_tx.send(true).unwrap();
    let peak = status_kb(pid, "VmHWM:");
    Phase {
        growth_mb: peak.saturating_sub(before) as f64 / 1024.0,
        admitted,
        refused: n - admitted,
        alive: alive(pid),
        p50: p50(prober.await.unwrap()),
    }
}

struct Phase {
    growth_mb: f64,
    admitted: usize,
    refused: usize,
    alive: bool,
    p50: Duration,
}

fn print(name: &str, p: &Phase, idle: Duration) {
    println!(
        "{name}: peak RSS growth {:.0} MB (target <= 256), {} admitted, {} refused, daemon alive: {}, \
         GetSession p50 {:.2} ms = {:.2}x idle (target <= 5x)",
        p.growth_mb,
        p.admitted,
        p.refused,
        p.alive,
        p.p50.as_secs_f64() * 1e3,
        p.p50.as_secs_f64() / idle.as_secs_f64().max(1e-9),
    );
}

#[tokio::main]
async fn main() {
    let heavy_turns = env_usize("HOSTILE_HEAVY_TURNS", 8);
    let replays = env_usize("HOSTILE_REPLAYS", 40);
    let execs = env_usize("HOSTILE_EXECS", 32);
    let dir = tempfile::tempdir().unwrap();
    let auth = auth_file(dir.path());
    let d = Daemon::start_with(dir.path().join("j.db").as_os_str(), &["--auth", &auth]);
    let pid = d.pid();
    let mut w = client(&d.sessions).await;

    let small = exec(
        &mut w,
        ExecRequest {
            inputs: vec![support::text("hi")],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut heavy = String::new();
    for _ in 0..heavy_turns {
        heavy = exec(&mut w, maximal(&heavy)).await.expect("a maximal turn");
    }
    let idle = idle_p50(&d.sessions, &small).await;
    println!(
        "heaviest session: {heavy_turns} maximal turns; idle GetSession p50 {:.2} ms",
        idle.as_secs_f64() * 1e3
    );

    // Phase 2: slow Replays by a reader.
    let phase = flood(pid, &d.sessions, &small, replays, |addr| {
        let uid = heavy.clone();
        async move {
            let mut c = client(&addr).await;
            let req = ReplayRequest {
                session: uid,
                ..Default::default()
            };
            let mut stream = match c.replay(authed(req, RITA)).await {
                Ok(s) => s.into_inner(),
                Err(_) => return false,
            };
            loop {
                match stream.message().await {
                    Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        }
    })
    .await;
    print(
        &format!("{replays} concurrent slow Replays by a reader"),
        &phase,
        idle,
    );

    // Phase 3: maximal Execs by a writer, all at once.
    let phase = flood(pid, &d.sessions, &small, execs, |addr| async move {
        let mut c = client(&addr).await;
        exec(&mut c, maximal("")).await.is_ok()
    })
    .await;
    print(
        &format!("{execs} concurrent maximal Execs by a writer"),
        &phase,
        idle,
    );
}
