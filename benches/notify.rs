//! What notifications cost turns (`cargo bench --bench notify`).
//!
//! The real daemon binary on a fresh SQLite journal, `NOTIFY_SESSIONS`
//! (default 16) clients each running `NOTIFY_CYCLES` (default 60) approval
//! cycles at once: an Exec that parks on the `approval` harness's gated
//! call, an Approve, and a Resume that runs the call (two turns, two
//! notices: requested and decided). Phases alternate without and with
//! `--notify` pointed at a receiver that accepts connections and never
//! answers (each POST waits out its timeout), four rounds, each phase
//! first in two of them, so warm-up and drift on the machine hit both
//! alike. Printed: cycles/s of each phase and the ratio
//! of the with-notify phases to the without ones, from one run.

#[path = "../tests/support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::time::Instant;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{ApproveRequest, ExecRequest, ResumeRequest, exec_update::Update};
use cli::Daemon;
use tonic::transport::Channel;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One approval cycle: park, approve, resume.
async fn cycle(c: &mut SessionsClient<Channel>, session: &str) {
    let mut stream = c
        .exec(ExecRequest {
            session: session.into(),
            inputs: vec![support::text("remember milk")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut pending = None;
    while let Some(u) = stream.message().await.unwrap() {
        if let Some(Update::Session(s)) = u.update {
            pending = s.pending_approval;
        }
    }
    let gate = pending.expect("the turn parked");
    c.approve(ApproveRequest {
        session: session.into(),
        execution_id: gate.execution_id,
        tool_call_id: gate.tool_call_id,
        request_seq: gate.request_seq,
        approved: Some(true),
        ..Default::default()
    })
    .await
    .unwrap();
    c.resume(ResumeRequest {
        session: session.into(),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Cycles/s of `sessions` clients on a daemon started with `extra`.
async fn phase(extra: &[&str], sessions: usize, cycles: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let daemon = Daemon::start_in(dir.path(), journal.as_os_str(), extra);
    let mut clients = Vec::new();
    for _ in 0..sessions {
        let mut c = support::client_at(&daemon.sessions).await;
        let uid = support::create(&mut c, "approval").await;
        cycle(&mut c, &uid).await; // warm
        clients.push((c, uid));
    }
    let t = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(mut c, uid)| {
            tokio::spawn(async move {
                for _ in 0..cycles {
                    cycle(&mut c, &uid).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let rate = (sessions * cycles) as f64 / t.elapsed().as_secs_f64();
    drop(daemon);
    rate
}

/// A receiver that takes every connection and never answers.
fn black_hole() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    format!("http://{addr}/hook")
}

fn main() {
    let sessions = env_usize("NOTIFY_SESSIONS", 16);
    let cycles = env_usize("NOTIFY_CYCLES", 60);
    let url = black_hole();
    let with = ["--notify", url.as_str(), "--notify-secret", "bench"];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut without_rates = Vec::new();
    let mut with_rates = Vec::new();
    // ABBA: whichever phase runs second in a round gains from the first's
    // warm caches, so each goes second equally often.
    for round in 0..4 {
        let (a, b) = if round % 2 == 0 {
            let a = rt.block_on(phase(&[], sessions, cycles));
            (a, rt.block_on(phase(&with, sessions, cycles)))
        } else {
            let b = rt.block_on(phase(&with, sessions, cycles));
            (rt.block_on(phase(&[], sessions, cycles)), b)
        };
        println!(
            "round {round}: without --notify {a:.1} cycles/s, with a silent receiver {b:.1} cycles/s"
        );
        without_rates.push(a);
        with_rates.push(b);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "notify: {sessions} sessions x {cycles} approval cycles; with/without = {:.2}x",
        mean(&with_rates) / mean(&without_rates)
    );
}
