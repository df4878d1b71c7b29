//! Echo turns/s with one and with two `agentsessionsd` processes on one
//! PostgreSQL database (`cargo bench --bench two_daemons`).
//!
//! A throwaway cluster (`scripts/pg-cluster.sh`, fsync on), the real
//! daemon binary as child processes, and `TWO_DAEMONS_SESSIONS` (default 32)
//! clients each running `TWO_DAEMONS_TURNS` (default 40) echo turns on a
//! session of its own, all at once. With two daemons the sessions are
//! split between them. A third phase runs one daemon with `--lease 0s`, for
//! what the session leases cost. Each phase gets a fresh database.
//! Printed: turns/s of each phase and their ratios, from one run.

#[path = "../tests/support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/pg.rs"]
mod pg;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::time::Instant;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::ExecRequest;
use cli::Daemon;
use tonic::transport::Channel;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One turn, read to the end; the records it streamed.
async fn turn(c: &mut SessionsClient<Channel>, session: &str) -> usize {
    let mut stream = c
        .exec(ExecRequest {
            session: session.into(),
            inputs: vec![support::text("hello")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut frames = 0;
    while stream.message().await.unwrap().is_some() {
        frames += 1;
    }
    frames
}

/// Turns/s of `sessions` clients spread over `daemons`, `turns` each.
async fn phase(daemons: &[Daemon], sessions: usize, turns: usize) -> f64 {
    let mut clients = Vec::new();
    for s in 0..sessions {
        let addr = format!("http://{}", daemons[s % daemons.len()].sessions);
        let channel = Channel::from_shared(addr).unwrap().connect().await.unwrap();
        let mut c = SessionsClient::new(channel);
        let uid = support::create(&mut c, "").await;
        // Warm: the harness link, the statements, the session's caches.
        assert!(turn(&mut c, &uid).await >= 5);
        clients.push((c, uid));
    }
    let t = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(mut c, uid)| {
            tokio::spawn(async move {
                for _ in 0..turns {
                    assert!(turn(&mut c, &uid).await >= 5);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    (sessions * turns) as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sessions = env_usize("TWO_DAEMONS_SESSIONS", 32);
        let turns = env_usize("TWO_DAEMONS_TURNS", 40);
        let dir = tempfile::tempdir().unwrap();
        let start_with = |url: &str, name: &str, extra: &[&str]| {
            let ledger = dir.path().join(format!("{name}.tools.db"));
            let mut flags = vec!["--tools-ledger", ledger.to_str().unwrap()];
            flags.extend_from_slice(extra);
            Daemon::start_with(url.as_ref(), &flags)
        };
        let start = |url: &str, name: &str| start_with(url, name, &[]);

        // The lease's cost: one daemon without leases (`--lease 0s`).
        let Some(url) = pg::fresh_database().await else {
            return;
        };
        let bare = [start_with(&url, "bare", &["--lease", "0s"])];
        let unleased = phase(&bare, sessions, turns).await;
        drop(bare);

        let Some(url) = pg::fresh_database().await else {
            return;
        };
        let one = [start(&url, "one")];
        let single = phase(&one, sessions, turns).await;
        drop(one);

        let Some(url) = pg::fresh_database().await else {
            return;
        };
        let two = [start(&url, "a"), start(&url, "b")];
        let double = phase(&two, sessions, turns).await;
        drop(two);

        println!("echo turns, {sessions} sessions x {turns} turns at once, PostgreSQL journal");
        println!("  one daemon   {single:8.1} turns/s");
        println!("  two daemons  {double:8.1} turns/s");
        println!("  two / one    {:.2}x", double / single);
        println!("  one daemon without leases (--lease 0s) {unleased:8.1} turns/s");
        println!(
            "  one daemon, leases / no leases  {:.2}x",
            single / unleased
        );
    });
}
