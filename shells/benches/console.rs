//! Console page-time benchmark (`cargo bench -p agentsessions-shells
//! --bench console`).
//!
//! The web console must page a huge session's timeline instead of
//! rendering it whole. A journal is bulk-loaded with one session of
//! `CONSOLE_BENCH_RECORDS` (default 100,000) records (echo-shaped turns)
//! and one of 12 records as the baseline; a daemon with `--console-addr`
//! serves both, and each page is fetched `CONSOLE_BENCH_ROUNDS` (default
//! 50) times over loopback HTTP, one at a time, after one warm-up fetch:
//!
//! - the huge session's page (its last 100 records, the default view);
//! - the same session paged to the middle of its journal (`?from=`);
//! - the baseline session's page, which also verifies its chain inline;
//! - the sessions list;
//!
//! and the huge session's full chain check (`/verify`) is timed a few
//! times. Two daemons run in turn on the same file: one with a journal
//! cache (`--journal-cache-records`) that holds the huge session, one with
//! the default, which does not (every GetSession and ListSessions row then
//! reads the whole journal). The ratio lines are the huge page's p50 over
//! the baseline's, and the default cache's over the large one's.
//! `CONSOLE_BENCH_DIR` picks the disk (default: the temp dir).

#[path = "../tests/support/daemon.rs"]
mod support;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;
use std::time::{Duration, Instant};

use agentsessions_machine::{canon, events};
use agentsessions_proto::v1::{Event, ExecutionStart};
use agentsessions_shells::daemon::app::Daemon;
use agentsessions_shells::daemon::log_cache::MAX_RECORDS;
use agentsessions_shells::journal::encode::encode_event;
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};

const HUGE: &str = "sess-huge00000000000000000000";
const SMALL: &str = "sess-small0000000000000000000";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One completed echo-shaped turn of execution `exec`: 4 records.
fn turn(exec: &str, i: usize) -> Vec<Event> {
    let start = ExecutionStart {
        input_count: Some(1),
        harness: "echo".into(),
        harness_version: "1".into(),
        ..ExecutionStart::default()
    };
    let text = format!("message {i} of a long session");
    vec![
        events::execution_start(exec, start),
        events::input(exec, events::text_message("user", &text)),
        events::output(exec, events::assistant_text(&format!("echo:{text}"))),
        events::end_completed(exec),
    ]
}

/// Sessions of `records` records each, written straight into the file in
/// one transaction (a turn per 4 records through the daemon would take
/// minutes and measure nothing of the console).
fn bulk_load(db: &Path, sessions: &[(&str, usize)]) {
    drop(SqliteJournal::open(db, SqliteOptions::default()).unwrap());
    let mut conn = rusqlite::Connection::open(db).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut session = tx
            .prepare(
                "INSERT INTO sessions(session, fence, project, harness, compute_state, created_at, updated_at)
                 VALUES (?1, 1, 'default', 'echo', 'COLD', 1, 1)",
            )
            .unwrap();
        let mut event = tx
            .prepare(
                "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, 1, ?5)",
            )
            .unwrap();
        for (uid, records) in sessions {
            session.execute([uid]).unwrap();
            let mut prev = String::new();
            let mut seq = 0i64;
            for t in 0..records.div_ceil(4) {
                let exec = format!("{t:016x}");
                for ev in turn(&exec, t) {
                    seq += 1;
                    if seq as usize > *records {
                        break;
                    }
                    let hash = canon::content_hash(&prev, seq, &ev).unwrap();
                    event
                        .execute(rusqlite::params![uid, seq, prev, hash, encode_event(&ev)])
                        .unwrap();
                    prev = hash;
                }
            }
        }
    }
    tx.commit().unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
}

/// Fetches `url` `rounds` times (after one warm-up); sorted page times.
async fn times(http: &reqwest::Client, url: &str, rounds: usize, expect: &str) -> Vec<Duration> {
    let mut out = Vec::with_capacity(rounds);
    for i in 0..=rounds {
        let t = Instant::now();
        let response = http.get(url).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let body = response.text().await.unwrap();
        let took = t.elapsed();
        assert!(body.contains(expect), "{url}: no {expect:?}");
        if i > 0 {
            out.push(took);
        }
    }
    out.sort();
    out
}

fn line(what: &str, t: &[Duration]) -> f64 {
    let p50 = ms(pct(t, 0.5));
    println!(
        "{what:<44} p50 {p50:>8.2} ms   p90 {:>8.2} ms   max {:>8.2} ms",
        ms(pct(t, 0.9)),
        ms(pct(t, 1.0))
    );
    p50
}

/// The resident set of this process, in MiB (Linux).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One daemon with a journal cache of `cache` records on `db`: every page
/// timed; the huge and baseline p50s.
async fn phase(dir: &Path, db: &Path, cache: usize, records: usize, rounds: usize) -> (f64, f64) {
    let rss_before = rss_mib();
    let mut config = support::config(dir);
    config.journal = db.to_owned();
    config.console_addr = Some("127.0.0.1:0".parse().unwrap());
    config.journal_cache_records = cache;
    let daemon = Daemon::start(config).await.unwrap();
    let console = format!("http://{}", daemon.console_addr.unwrap());
    let http = reqwest::Client::new();

    let huge = times(
        &http,
        &format!("{console}/sessions/{HUGE}"),
        rounds,
        &format!("seq {}–{records} of {records}", records - 99),
    )
    .await;
    let middle = times(
        &http,
        &format!("{console}/sessions/{HUGE}?from={}", records / 2),
        rounds,
        "id=\"timeline\"",
    )
    .await;
    let small = times(
        &http,
        &format!("{console}/sessions/{SMALL}"),
        rounds,
        "chain verified (12 records)",
    )
    .await;
    let list = times(&http, &format!("{console}/sessions"), rounds, HUGE).await;
    let verify = times(
        &http,
        &format!("{console}/sessions/{HUGE}/verify"),
        3,
        &format!("chain verified ({records} records)"),
    )
    .await;

    println!(
        "--journal-cache-records {cache}: page times over loopback HTTP, {rounds} fetches each (one warm-up)"
    );
    let p_huge = line(
        &format!("session page, {records} records (last 100)"),
        &huge,
    );
    line("same session, page at the middle (?from=)", &middle);
    let p_small = line("baseline: 12-record session (+ inline verify)", &small);
    line("sessions list", &list);
    line(&format!("full chain check of {records} records"), &verify);
    println!(
        "resident memory: {:.0} MiB before the daemon, {:.0} MiB after its pages",
        rss_before,
        rss_mib()
    );
    daemon.shutdown().await;
    (p_huge, p_small)
}

fn main() {
    let records = env_usize("CONSOLE_BENCH_RECORDS", 100_000);
    let rounds = env_usize("CONSOLE_BENCH_ROUNDS", 50);
    let base = std::env::var_os("CONSOLE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let db = dir.path().join("journal.db");
    let t = Instant::now();
    bulk_load(&db, &[(HUGE, records), (SMALL, 12)]);
    println!(
        "console bench: {records} records in one session, bulk-loaded in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let big_cache = 2 * records;
        let (huge_cached, small_cached) =
            phase(dir.path(), &db, big_cache, records, rounds).await;
        let (huge_default, small_default) =
            phase(dir.path(), &db, MAX_RECORDS, records, rounds).await;
        println!(
            "ratio: huge page p50 / baseline page p50 = {:.2}x with --journal-cache-records {big_cache}, \
             {:.2}x with the default {MAX_RECORDS}",
            huge_cached / small_cached,
            huge_default / small_default
        );
        println!(
            "ratio: huge page p50, default cache / large cache = {:.0}x",
            huge_default / huge_cached
        );
    });
}
