//! Retention benchmark (`cargo bench -p agentsessions-shells --bench retention`).
//!
//! Durable append latency (p50/p99) on one session while the retention
//! task deletes 100,000 stale sessions in the background, next to the same
//! appends on the same journal with retention off, measured in one run:
//!
//! 1. a journal is bulk-loaded with `RETENTION_BENCH_SESSIONS` (default
//!    100,000) completed sessions of 4 records each, all last written long
//!    ago, and copied, so both phases start from the same file;
//! 2. baseline: a daemon with retention off; `appends` single-event
//!    appends through its `SqliteJournal`, one at a time;
//! 3. a daemon with `--retain-completed 1h` on the copy: its first pass
//!    starts at once; the same appends run while it deletes, and then the
//!    pass is timed to its end (every tombstone written).
//!
//! The ratio line is phase 3 over phase 2. `RETENTION_BENCH_DIR` picks the
//! disk (default: the temp dir).

#[path = "../tests/support/daemon.rs"]
mod support;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;
use std::time::{Duration, Instant};

use agentsessions_machine::{canon, events};
use agentsessions_proto::v1::{Event, ExecutionStart};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::journal::encode::encode_event;
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};
use agentsessions_shells::journal::{AppendBatch, JournalStore};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One completed echo-shaped execution: START, INPUT, OUTPUT, END.
fn turn(exec: &str) -> Vec<Event> {
    let start = ExecutionStart {
        input_count: Some(1),
        harness: "echo".into(),
        harness_version: "1".into(),
        ..ExecutionStart::default()
    };
    vec![
        events::execution_start(exec, start),
        events::input(exec, events::text_message("user", "hello")),
        events::output(exec, events::assistant_text("echo:hello")),
        events::end_completed(exec),
    ]
}

/// `n` stale sessions written straight into the file in one transaction
/// (a store append per session would take minutes and measure nothing).
fn bulk_load(db: &Path, n: usize) {
    drop(SqliteJournal::open(db, SqliteOptions::default()).unwrap());
    let mut conn = rusqlite::Connection::open(db).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut session = tx
            .prepare(
                "INSERT INTO sessions(session, fence, project, harness, compute_state, created_at, updated_at)
                 VALUES (?1, 1, 'default', 'echo', 'LIVE', 1, 1)",
            )
            .unwrap();
        let mut event = tx
            .prepare(
                "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, 1, ?5)",
            )
            .unwrap();
        let evs = turn("e0000000000000001");
        for i in 0..n {
            let uid = format!("sess-stale{i:019}");
            session.execute([&uid]).unwrap();
            let mut prev = String::new();
            for (k, ev) in evs.iter().enumerate() {
                let seq = k as i64 + 1;
                let hash = canon::content_hash(&prev, seq, ev).unwrap();
                event
                    .execute(rusqlite::params![uid, seq, prev, hash, encode_event(ev)])
                    .unwrap();
                prev = hash;
            }
        }
    }
    tx.commit().unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
}

fn deleted(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM deleted_sessions", [], |r| r.get(0))
        .unwrap()
}

/// `n` single-event appends to a session of their own, one at a time.
async fn appends(daemon: &Daemon, n: usize) -> Vec<Duration> {
    let store = daemon.journal();
    let session = "sess-appender000000000000000";
    let fence = store
        .mint_fence(
            session,
            agentsessions_shells::journal::system_now_unix_nanos(),
            None,
        )
        .await
        .unwrap();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let batch = AppendBatch {
            session: session.into(),
            expected_last_seq: i as i64,
            fence,
            events: vec![events::output("e1", events::assistant_text("x"))],
            compute_state: None,
            now_unix_nanos: agentsessions_shells::journal::system_now_unix_nanos(),
            release_lease: None,
        };
        let t = Instant::now();
        store.append(batch).await.unwrap();
        out.push(t.elapsed());
    }
    out.sort();
    out
}

fn main() {
    let n = env_usize("RETENTION_BENCH_SESSIONS", 100_000);
    let m = env_usize("RETENTION_BENCH_APPENDS", 2_000);
    let base = std::env::var_os("RETENTION_BENCH_DIR").map(std::path::PathBuf::from);
    let dir = match &base {
        Some(b) => tempfile::tempdir_in(b).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let t = Instant::now();
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    bulk_load(&plain.join("journal.db"), n);
    let retained = dir.path().join("retained");
    std::fs::create_dir(&retained).unwrap();
    std::fs::copy(plain.join("journal.db"), retained.join("journal.db")).unwrap();
    let loaded = t.elapsed();

    let baseline = rt.block_on(async {
        let daemon = Daemon::start(support::config(&plain)).await.unwrap();
        let d = appends(&daemon, m).await;
        daemon.shutdown().await;
        d
    });

    let db = retained.join("journal.db");
    let (during, pass, after_appends) = rt.block_on(async {
        let cfg = DaemonConfig {
            retain_completed: Some(Duration::from_secs(3600)),
            retention_interval: Duration::from_secs(3600),
            lease: None,
            ..support::config(&retained)
        };
        let started = Instant::now();
        let daemon = Daemon::start(cfg).await.unwrap();
        let d = appends(&daemon, m).await;
        let after_appends = deleted(&db);
        while deleted(&db) < n as i64 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let pass = started.elapsed();
        daemon.shutdown().await;
        (d, pass, after_appends)
    });
    assert_eq!(deleted(&db), n as i64, "every stale session deleted");
    assert!(
        after_appends < n as i64,
        "the appends ran while retention was still deleting"
    );

    println!("## append latency while retention deletes {n} sessions ({m} appends each)");
    println!();
    println!("| | p50 µs | p99 µs | max µs |");
    println!("| --- | --- | --- | --- |");
    for (name, d) in [
        ("appends, retention off (baseline)", &baseline),
        ("appends while retention deletes", &during),
    ] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            us(pct(d, 0.5)),
            us(pct(d, 0.99)),
            us(*d.last().unwrap())
        );
    }
    println!(
        "| ratio (during / baseline) | {:.2} | {:.2} | |",
        pct(&during, 0.5).as_secs_f64() / pct(&baseline, 0.5).as_secs_f64(),
        pct(&during, 0.99).as_secs_f64() / pct(&baseline, 0.99).as_secs_f64()
    );
    println!();
    println!(
        "retention pass: {n} sessions ({} records) deleted in {:.1} s = {:.0} sessions/s; \
         {after_appends} were gone when the appends finished; bulk load {:.1} s",
        n * 4,
        pass.as_secs_f64(),
        n as f64 / pass.as_secs_f64(),
        loaded.as_secs_f64()
    );
}
