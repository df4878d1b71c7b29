//! Daemon benchmark (`cargo bench -p agentsessions-shells --bench daemon`).
//!
//! Echo turns over gRPC on loopback against a real daemon (SQLite journal on
//! the real disk, the built-in echo harness run in process by the local
//! runtime, the echo model), next to the durable-append latency of the same
//! journal measured in the same run:
//!
//! 1. one session, turns awaited one at a time, interleaved in blocks with
//!    single-event appends through the daemon's own `SqliteJournal` (to a
//!    session of their own), so disk noise hits both alike; the appends are
//!    made by a task on the daemon's runtime, the same vantage point as the
//!    drive loop whose writes they are compared with;
//! 2. 64 sessions, one client task each, turns back to back for a fixed
//!    time.
//!
//! The clients run on a runtime of their own, on a thread of their own, as
//! a client process would.
//!
//! A turn's durable writes are counted, not assumed: the writer's job
//! counter over the measured turns divided by the turns (a fence mint and
//! the turn's appends). The headline ratio is
//! `turn p50 / (writes per turn × append p50)`. A second line divides by
//! what the turn's own writes took instead (the writer's queued-to-reply
//! time summed over the turn's jobs), which is immune to the disk changing
//! speed between the turns and the baseline appends.
//!
//! `DAEMON_BENCH_DIR` picks the disk (default: the temp dir);
//! `DAEMON_BENCH_SCALE` (default 1.0) scales turn counts and durations;
//! `DAEMON_BENCH_SESSIONS` (default 64) sizes the concurrent phase, 0 skips it;
//! `DAEMON_BENCH_WORKERS` (default 0: one current-thread runtime, as
//! agentsessionsd runs) sets tokio worker threads instead;
//! `DAEMON_BENCH_MARKS=1` prints, per turn, when each frame arrived (µs
//! after the call), to see where a turn spends its time;
//! `DAEMON_BENCH_ONLY=loops` runs only the one-loop 64-session phase.

#[path = "../tests/support/daemon.rs"]
mod support;

// The allocator agentsessionsd runs on, so the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    Event, EventKind, ExecRequest, Message, Part, TextPart, event, part,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::journal::{AppendBatch, JournalStore};
use tonic::transport::Channel;

fn scale() -> f64 {
    std::env::var("DAEMON_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

/// `DAEMON_BENCH_SESSIONS`: the concurrent phase's sessions (0 skips it).
fn sessions() -> usize {
    std::env::var("DAEMON_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn scaled(n: f64) -> usize {
    ((n * scale()) as usize).max(1)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// An OUTPUT event the size of an echo turn's.
fn output_event(i: usize) -> Event {
    Event {
        execution_id: "0123456789abcdef".into(),
        kind: EventKind::EventOutput as i32,
        body: Some(event::Body::Message(Message {
            role: "assistant".into(),
            parts: vec![Part {
                part: Some(part::Part::Text(TextPart {
                    text: format!("echo:hello {i:08}"),
                })),
            }],
        })),
        ..Default::default()
    }
}

async fn channel(daemon: &Daemon) -> Channel {
    Channel::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

async fn connect(daemon: &Daemon) -> SessionsClient<Channel> {
    SessionsClient::new(channel(daemon).await)
}

/// One echo turn, read to EOF; returns its latency.
async fn turn(c: &mut SessionsClient<Channel>, session: &str) -> Duration {
    let t = Instant::now();
    let mut stream = c
        .exec(ExecRequest {
            session: session.into(),
            inputs: vec![support::text("hello")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    use agentsessions_proto::v1::exec_update::Update;
    let mut records = 0;
    let mut marks = vec![("call", t.elapsed())];
    while let Some(u) = stream.message().await.unwrap() {
        let what = match &u.update {
            Some(Update::Record(_)) => {
                records += 1;
                "record"
            }
            Some(Update::Session(_)) => "session",
            Some(Update::Delta(_)) => "delta",
            _ => "other",
        };
        marks.push((what, t.elapsed()));
    }
    let elapsed = t.elapsed();
    if std::env::var_os("DAEMON_BENCH_MARKS").is_some() {
        marks.push(("eof", elapsed));
        let line: Vec<String> = marks
            .iter()
            .map(|(w, d)| format!("{w}@{}", d.as_micros()))
            .collect();
        eprintln!("{}", line.join(" "));
    }
    assert_eq!(records, 5, "an echo turn journals 5 records");
    elapsed
}

#[derive(Default)]
struct Figures {
    p50: Duration,
    p99: Duration,
    per_sec: f64,
}

fn figures(mut lat: Vec<Duration>, wall: Duration) -> Figures {
    lat.sort();
    Figures {
        p50: pct(&lat, 0.5),
        p99: pct(&lat, 0.99),
        per_sec: lat.len() as f64 / wall.as_secs_f64(),
    }
}

/// What the single-session phase measured.
struct Single {
    turns: Figures,
    appends: Figures,
    /// Writer jobs per turn.
    writes_per_turn: f64,
    /// Per turn, the summed queue-to-reply time of its own writer jobs.
    own_writes: Figures,
    /// A health check, made where each turn starts.
    unary: Figures,
}

/// Runs on the client's own runtime; `server` is the daemon's runtime, on
/// which the baseline appends are made (where the drive loop makes its).
async fn single_session(daemon: &Daemon, server: tokio::runtime::Handle) -> Single {
    let mut c = connect(daemon).await;
    let session = support::create(&mut c, "echo").await;
    for _ in 0..50 {
        turn(&mut c, &session).await;
    }
    // A call the drive loop never sees (a gRPC health check), timed at the
    // same moments a turn starts: the transport's share of a turn.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel(daemon).await);
    let mut unary = Vec::new();
    let store = daemon.journal().clone();
    let mut head = 0i64;
    let blocks = scaled(20.0);
    let (mut turns, mut appends) = (Vec::new(), Vec::new());
    let (mut turn_wall, mut append_wall) = (Duration::ZERO, Duration::ZERO);
    let mut writes = 0u64;
    let mut in_place = 0u64;
    let mut own_writes = Vec::new();
    let one_session = std::env::var_os("DAEMON_BENCH_ONE_SESSION").is_some();
    for block in 0..blocks {
        // Every turn reads the whole journal of its session (the history
        // the harness is started with), so a block gets a fresh session:
        // the figures are for sessions of up to 50 turns. With
        // DAEMON_BENCH_ONE_SESSION=1 every block continues the same session
        // instead: the warm-up session, grown to ~1 050 turns at scale 1.
        let session = if one_session {
            session.clone()
        } else {
            let s = support::create(&mut c, "echo").await;
            turn(&mut c, &s).await;
            s
        };
        // One turn, then five single appends: both sides see the same disk,
        // checkpoints and neighbours at the same moments.
        for i in 0..50 {
            let before = store.writer_stats();
            let d = turn(&mut c, &session).await;
            let after = store.writer_stats();
            writes += after.jobs - before.jobs;
            in_place += after.jobs_in_place - before.jobs_in_place;
            own_writes.push(after.job_wait - before.job_wait);
            turns.push(d);
            turn_wall += d;
            let store = store.clone();
            let first = (block * 50 + i) * 5;
            let timed = server
                .spawn(async move {
                    let mut timed = Vec::with_capacity(5);
                    for j in 0..5 {
                        let batch = AppendBatch {
                            session: "bench-append".into(),
                            expected_last_seq: head,
                            fence: 0,
                            // Every bench event is an OUTPUT: the machine would say LIVE.
                            compute_state: Some(agentsessions_proto::v1::ComputeState::ComputeLive),
                            events: vec![output_event(first + j)],
                            now_unix_nanos: 1,
                            release_lease: None,
                        };
                        // The path the drive loop takes: in place when the
                        // writer is idle, else through the writer thread.
                        let a = Instant::now();
                        let recs = match store.try_append_now(batch) {
                            Ok(r) => r.unwrap(),
                            Err(batch) => store.append(batch).await.unwrap(),
                        };
                        timed.push(a.elapsed());
                        head = recs[0].seq;
                    }
                    (timed, head)
                })
                .await
                .unwrap();
            head = timed.1;
            append_wall += timed.0.iter().sum::<Duration>();
            appends.extend(timed.0);
            let t = Instant::now();
            health
                .check(tonic_health::pb::HealthCheckRequest::default())
                .await
                .unwrap();
            unary.push(t.elapsed());
        }
        if one_session || block + 1 == blocks {
            let mut last: Vec<Duration> = turns[turns.len() - 50..].to_vec();
            last.sort();
            eprintln!(
                "block {block}: turn p50 {:.0} µs over the last 50 turns",
                us(pct(&last, 0.5))
            );
        }
    }
    let writes_per_turn = writes as f64 / turns.len() as f64;
    eprintln!("turn writes committed in place by the idle drive loop: {in_place} of {writes}");
    let own_wall = own_writes.iter().sum();
    let unary_wall = unary.iter().sum();
    Single {
        unary: figures(unary, unary_wall),
        turns: figures(turns, turn_wall),
        appends: figures(appends, append_wall),
        writes_per_turn,
        own_writes: figures(own_writes, own_wall),
    }
}

/// One session grown turn by turn: the p50 of the turns around turn 20
/// against the p50 around turn 2 000 (~10 000 records), the in-process
/// echo harness started with the whole history each time; then Forks of
/// it at its head against Forks of a 10-record session ([`forks`]).
async fn long_session(daemon: &Daemon) -> (Duration, Duration, (Duration, Duration)) {
    let mut c = connect(daemon).await;
    let session = support::create(&mut c, "echo").await;
    let window = |lat: &mut Vec<Duration>| {
        lat.sort();
        pct(lat, 0.5)
    };
    let mut early = Vec::new();
    let mut late = Vec::new();
    for i in 1..=2_030 {
        let d = turn(&mut c, &session).await;
        if (1..=40).contains(&i) {
            early.push(d);
        } else if i > 1_980 {
            late.push(d);
        }
    }
    let fork = forks(&mut c, &session).await;
    (window(&mut early), window(&mut late), fork)
}

/// A Fork over gRPC (one child, at the head, the reply rendered) of
/// `long` against one of a fresh 10-record session, alternating, 40 each:
/// the p50s. A fork shares its prefix by reference, so it should cost
/// about the same whatever the prefix's length.
async fn forks(c: &mut SessionsClient<Channel>, long: &str) -> (Duration, Duration) {
    let short = support::create(c, "echo").await;
    for _ in 0..2 {
        turn(c, &short).await;
    }
    let mut fork = async |session: &str| {
        let t = Instant::now();
        let req = agentsessions_proto::v1::ForkRequest {
            session: session.to_owned(),
            count: 1,
            ..Default::default()
        };
        c.fork(req).await.unwrap();
        t.elapsed()
    };
    let (mut of_long, mut of_short) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        of_long.push(fork(long).await);
        of_short.push(fork(&short).await);
    }
    of_long.sort();
    of_short.sort();
    (pct(&of_long, 0.5), pct(&of_short, 0.5))
}

async fn concurrent(daemon: &Daemon, sessions: usize) -> Figures {
    let secs = 4.0 * scale();
    let mut clients = Vec::new();
    // One HTTP/2 connection per 16 sessions, as a pool of clients would.
    for _ in 0..sessions.div_ceil(16) {
        clients.push(connect(daemon).await);
    }
    let mut tasks = Vec::new();
    let start = Instant::now() + Duration::from_millis(300);
    let stop = start + Duration::from_secs_f64(secs);
    for i in 0..sessions {
        let mut c = clients[i / 16].clone();
        tasks.push(tokio::spawn(async move {
            let session = support::create(&mut c, "echo").await;
            turn(&mut c, &session).await;
            tokio::time::sleep_until(start.into()).await;
            let mut lat = Vec::new();
            while Instant::now() < stop {
                lat.push(turn(&mut c, &session).await);
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let wall = Instant::now().saturating_duration_since(start);
    figures(lat, wall)
}

/// Durable single-event appends per second with `sessions` writers at once
/// (one session each, back to back) through `daemon`'s own journal: what
/// group commit gives the turns of that many sessions.
async fn appends_at(daemon: &Daemon, sessions: usize) -> f64 {
    let store = daemon.journal().clone();
    let stop = Instant::now() + Duration::from_secs_f64(2.0 * scale());
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (mut head, mut n) = (0i64, 0usize);
            while Instant::now() < stop {
                let batch = AppendBatch {
                    session: format!("bench-group-{s}"),
                    expected_last_seq: head,
                    fence: 0,
                    compute_state: Some(agentsessions_proto::v1::ComputeState::ComputeLive),
                    events: vec![output_event(n)],
                    now_unix_nanos: 1,
                    release_lease: None,
                };
                head = store.append(batch).await.unwrap()[0].seq;
                n += 1;
            }
            n
        }));
    }
    let start = Instant::now();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Echo turns/s at `sessions` sessions on a fresh daemon with `loops`
/// drive loops (its own journal under `dir`).
async fn with_loops(dir: &std::path::Path, loops: usize, sessions: usize) -> Figures {
    let sub = dir.join(format!("loops-{loops}"));
    std::fs::create_dir_all(&sub).unwrap();
    let daemon = Daemon::start(DaemonConfig {
        drive_loops: loops,
        ..support::config(&sub)
    })
    .await
    .unwrap();
    let daemon = std::sync::Arc::new(daemon);
    let before = daemon.journal().writer_stats();
    let figures = {
        let daemon = daemon.clone();
        on_client_thread(move || async move { concurrent(&daemon, sessions).await }).await
    };
    if std::env::var_os("DAEMON_BENCH_ONLY").is_some() {
        let after = daemon.journal().writer_stats();
        let (batches, jobs) = (after.batches - before.batches, after.jobs - before.jobs);
        let wait = (after.job_wait - before.job_wait).as_secs_f64() * 1e6;
        eprintln!(
            "writer: {jobs} jobs in {batches} batches ({:.1} per batch), wait {:.0} µs per job",
            jobs as f64 / batches as f64,
            wait / jobs as f64
        );
    }
    match std::sync::Arc::try_unwrap(daemon) {
        Ok(daemon) => daemon.shutdown().await,
        Err(_) => panic!("the measuring task still holds the daemon"),
    }
    figures
}

/// Runs `client` on a current-thread runtime on a thread of its own, as a
/// client process would, and waits for it without blocking the daemon.
async fn on_client_thread<F, Fut, T>(client: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    let thread = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(client())
    });
    tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap()
}

fn main() {
    let base = std::env::var_os("DAEMON_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("daemon-bench-")
        .tempdir_in(base)
        .unwrap();
    // agentsessionsd's runtime: one thread for the listener and the drive
    // loop. DAEMON_BENCH_WORKERS=N > 0 runs the listener on N workers
    // instead, and the loop on a thread of its own.
    let workers: usize = std::env::var("DAEMON_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rt = match workers {
        0 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()
            .unwrap(),
    };
    println!(
        "# daemon bench (scale {}, dir {}, {})\n",
        scale(),
        dir.path().display(),
        match workers {
            0 => "one runtime thread".to_owned(),
            n => format!("{n} runtime workers, the loop on its own thread"),
        }
    );
    rt.block_on(async {
        // DAEMON_BENCH_ONLY=loops runs only one drive loop at 64 sessions
        // (to profile the concurrent turn alone).
        if std::env::var("DAEMON_BENCH_ONLY").as_deref() == Ok("loops") {
            let sessions = sessions();
            let f = with_loops(dir.path(), 1, sessions).await;
            println!(
                "echo turns/s at {sessions} sessions, 1 drive loop: {:.0} (p50 {:.0} µs)",
                f.per_sec,
                us(f.p50)
            );
            return;
        }
        let daemon = Daemon::start(support::config(dir.path())).await.unwrap();

        // The measuring client runs on a runtime of its own, on its own
        // thread, as a client process would; the baseline appends are made
        // by tasks on the daemon's runtime, like the drive loop's appends
        // they are compared with.
        let daemon = std::sync::Arc::new(daemon);
        let single = {
            let (daemon, server) = (daemon.clone(), tokio::runtime::Handle::current());
            on_client_thread(move || async move { single_session(&daemon, server).await }).await
        };
        let (one, append, per_turn) = (&single.turns, &single.appends, single.writes_per_turn);
        let (early, late, (fork_long, fork_short)) = {
            let daemon = daemon.clone();
            on_client_thread(move || async move { long_session(&daemon).await }).await
        };
        // DAEMON_BENCH_SESSIONS=0 skips the concurrent phase (to profile
        // the single-session turn alone).
        let sessions = sessions();
        let many = if sessions > 0 {
            let daemon = daemon.clone();
            on_client_thread(move || async move { concurrent(&daemon, sessions).await }).await
        } else {
            Figures::default()
        };
        let budget = per_turn * us(append.p50);
        println!("| | p50 µs | p99 µs | per second |");
        println!("|---|---|---|---|");
        println!(
            "| durable append (1 event, same journal) | {:.0} | {:.0} | {:.0} |",
            us(append.p50),
            us(append.p99),
            append.per_sec
        );
        println!(
            "| echo turn, 1 session | {:.0} | {:.0} | {:.0} |",
            us(one.p50),
            us(one.p99),
            one.per_sec
        );
        println!(
            "| gRPC health check (transport only) | {:.0} | {:.0} | {:.0} |",
            us(single.unary.p50),
            us(single.unary.p99),
            single.unary.per_sec
        );
        if sessions > 0 {
            println!(
                "| echo turn, {sessions} sessions | {:.0} | {:.0} | {:.0} |",
                us(many.p50),
                us(many.p99),
                many.per_sec
            );
        }
        println!();
        println!("durable writes per turn (writer jobs / turns): {per_turn:.2}");
        println!(
            "turn p50 / ({per_turn:.2} × append p50) = {:.0} / {:.0} = **{:.2}×** (goal ≤ 1.5×)",
            us(one.p50),
            budget,
            us(one.p50) / budget
        );
        println!(
            "one long session: turn p50 {:.0} µs over turns 1-40, {:.0} µs over turns 1 981-2 030 \
             (~10 000 records): **{:.2}×** (goal ≤ 1.3×)",
            us(early),
            us(late),
            us(late) / us(early)
        );
        println!(
            "Fork over gRPC at the head, ~10 000 vs 10 records: p50 {:.0} vs {:.0} µs: **{:.2}×** \
             (goal ≤ 2×)",
            us(fork_long),
            us(fork_short),
            us(fork_long) / us(fork_short)
        );
        let own = us(single.own_writes.p50);
        println!(
            "its own writes (queued to durable, summed per turn): p50 {own:.0} µs; \
             turn p50 / that = **{:.2}×**",
            us(one.p50) / own
        );
        let group = if sessions > 0 {
            appends_at(&daemon, sessions).await
        } else {
            0.0
        };
        match std::sync::Arc::try_unwrap(daemon) {
            Ok(daemon) => daemon.shutdown().await,
            Err(_) => panic!("the measuring task still holds the daemon"),
        }
        if sessions == 0 {
            return;
        }
        // All cores: the same 64-session load with one drive loop and with
        // two, each on a fresh daemon, against what the journal takes.
        let one_loop = with_loops(dir.path(), 1, sessions).await;
        let two_loops = with_loops(dir.path(), 2, sessions).await;
        println!();
        println!(
            "journal group commit at {sessions} writers: {group:.0} appends/s = {:.0} turns/s \
             at {per_turn:.2} writes per turn",
            group / per_turn
        );
        println!(
            "echo turns/s at {sessions} sessions: 1 drive loop {:.0} (p50 {:.0} µs), \
             2 drive loops {:.0} (p50 {:.0} µs): **{:.2}×**",
            one_loop.per_sec,
            us(one_loop.p50),
            two_loops.per_sec,
            us(two_loops.p50),
            two_loops.per_sec / one_loop.per_sec
        );
        let best = one_loop.per_sec.max(two_loops.per_sec);
        println!(
            "best turns/s vs the journal's bound (appends/s ÷ writes per turn): **{:.2}×** (goal ≥ 0.5×)",
            best / (group / per_turn)
        );
    });
}
