//! SQLite journal benchmarks (`cargo bench -p agentsessions-shells --bench journal`).
//!
//! Prints, from one run:
//! 1. single-session durable append latency (p50/p99), ours (committed in
//!    place by an idle caller, and through the writer thread) vs a raw
//!    rusqlite insert+commit of an equally sized row with the same pragmas;
//! 2. aggregate durable appends/s at 1, 8 and 64 concurrent sessions, group
//!    commit vs one transaction per append (the same store, `max_batch = 1`)
//!    and vs a raw batched baseline (rusqlite alone, N rows per commit at N
//!    sessions, same pragmas);
//! 3. `list_sessions` page latency with 1M sessions, and process RSS;
//! 4. a fork (the child's fence mint and its one write) of a 100,000-record
//!    session vs of a 10-record one, through the store, with the ratio;
//!    the records each fork wrote; what the copying fork it replaced cost
//!    (the prefix read and appended under the child); and a whole read of
//!    a child vs of its parent.
//!
//! Databases live in a temp dir on the real disk (`JOURNAL_BENCH_DIR`
//! overrides). `JOURNAL_BENCH_SCALE` (default 1.0) scales iteration counts,
//! durations and the session count, e.g. 0.1 for a quick smoke run;
//! `JOURNAL_BENCH_ONLY=latency|throughput|listing|fork` runs one section.

use std::path::Path;
use std::time::{Duration, Instant};

use agentsessions_proto::v1::{Event, EventKind, Message, Part, TextPart, event, part};
use agentsessions_shells::journal::encode::encode_event;
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions, schema};
use agentsessions_shells::journal::{
    AppendBatch, ForkBatch, JournalStore, ListSessions, page_token,
};
use rusqlite::{Connection, params};

fn scale() -> f64 {
    std::env::var("JOURNAL_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

fn scaled(n: f64) -> usize {
    ((n * scale()) as usize).max(1)
}

fn ev(i: usize) -> Event {
    Event {
        execution_id: "exec-bench".into(),
        kind: EventKind::EventOutput as i32,
        body: Some(event::Body::Message(Message {
            role: "assistant".into(),
            parts: vec![Part {
                part: Some(part::Part::Text(TextPart {
                    text: format!("{i:08} {}", "y".repeat(200)),
                })),
            }],
        })),
        ..Default::default()
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn raw_conn(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    schema::configure(&c).unwrap();
    schema::enable_wal(&c).unwrap();
    schema::enable_full_sync(&c).unwrap();
    c.execute_batch(schema::SCHEMA_V1).unwrap();
    c
}

fn latency(dir: &Path, rt: &tokio::runtime::Runtime) {
    let n = scaled(2000.0);
    let store = SqliteJournal::open(dir.join("latency.db"), SqliteOptions::default()).unwrap();
    let raw = raw_conn(&dir.join("raw.db"));
    let blob_len = encode_event(&ev(0)).len();
    let hash = "a".repeat(64);
    let (mut queued, mut in_place, mut base) = (Vec::new(), Vec::new(), Vec::new());
    let mut head = 0i64;
    let mut given_back = 0usize;
    let batch = |head: i64, i: usize| AppendBatch {
        session: "lat".into(),
        expected_last_seq: head,
        fence: 0,
        // Every bench event is an OUTPUT: the machine would say LIVE.
        compute_state: Some(agentsessions_proto::v1::ComputeState::ComputeLive),
        events: vec![ev(i)],
        now_unix_nanos: 1,
        release_lease: None,
    };
    // Interleave blocks so disk and neighbour noise hit all sides alike.
    for block in 0..n.div_ceil(50) {
        let m = 50.min(n - block * 50);
        for i in 0..m {
            // Through the writer thread (`append`).
            let b = batch(head, block * 50 + i);
            let t = Instant::now();
            let recs = rt.block_on(store.append(b)).unwrap();
            queued.push(t.elapsed());
            head = recs[0].seq;
        }
        for i in 0..m {
            // An idle caller committing in place (`try_append_now`), as the
            // daemon's drive loop does when it has nothing else to do.
            let b = batch(head, block * 50 + i);
            let t = Instant::now();
            let recs = match store.try_append_now(b) {
                Ok(r) => r.unwrap(),
                Err(b) => {
                    given_back += 1;
                    rt.block_on(store.append(b)).unwrap()
                }
            };
            in_place.push(t.elapsed());
            head = recs[0].seq;
        }
        for i in 0..m {
            let seq = (block * 50 + i + 1) as i64;
            let blob = vec![0x5au8; blob_len];
            let t = Instant::now();
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            raw.prepare_cached("INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, 0, ?5)")
                .unwrap()
                .execute(params!["lat", seq, hash, hash, blob])
                .unwrap();
            raw.execute_batch("COMMIT").unwrap();
            base.push(t.elapsed());
        }
    }
    queued.sort();
    in_place.sort();
    base.sort();
    let (b50, b99) = (pct(&base, 0.5), pct(&base, 0.99));
    println!(
        "## 1. single-session durable append latency ({n} appends each, {blob_len} B event blob)"
    );
    println!("| | p50 µs | p99 µs | p50 ratio | p99 ratio |");
    println!("|---|---|---|---|---|");
    for (label, d) in [
        ("journal append, idle caller in place", &in_place),
        ("journal append through the writer thread", &queued),
        ("raw rusqlite insert+commit", &base),
    ] {
        let (p50, p99) = (pct(d, 0.5), pct(d, 0.99));
        println!(
            "| {label} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
            us(p50),
            us(p99),
            p50.as_secs_f64() / b50.as_secs_f64(),
            p99.as_secs_f64() / b99.as_secs_f64()
        );
    }
    assert_eq!(given_back, 0, "an idle writer takes every in-place append");
    println!(
        "ratio p50 in place {:.2}x, through the writer {:.2}x (goal <= 1.2x)\n",
        pct(&in_place, 0.5).as_secs_f64() / b50.as_secs_f64(),
        pct(&queued, 0.5).as_secs_f64() / b50.as_secs_f64()
    );
}

fn throughput_one(
    dir: &Path,
    rt: &tokio::runtime::Runtime,
    sessions: usize,
    max_batch: usize,
    secs: f64,
) -> (f64, f64) {
    // A fresh file per cell, so every cell starts from empty sessions.
    static CELL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let cell = CELL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("tp-{cell}-{sessions}-{max_batch}.db");
    let store = SqliteJournal::open(
        dir.join(name),
        SqliteOptions {
            max_batch,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let total: usize = rt.block_on(async {
        let tasks: Vec<_> = (0..sessions)
            .map(|s| {
                let store = store.clone();
                tokio::spawn(async move {
                    let session = format!("s{s}");
                    let mut head = 0;
                    while Instant::now() < deadline {
                        let recs = store
                            .append(AppendBatch {
                                session: session.clone(),
                                expected_last_seq: head,
                                fence: 0,
                                // Every bench event is an OUTPUT: the machine would say LIVE.
                                compute_state: Some(
                                    agentsessions_proto::v1::ComputeState::ComputeLive,
                                ),
                                events: vec![ev(head as usize)],
                                now_unix_nanos: 1,
                                release_lease: None,
                            })
                            .await
                            .unwrap();
                        head = recs[0].seq;
                    }
                    head as usize
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    let stats = store.writer_stats();
    let per_commit = stats.jobs as f64 / stats.batches.max(1) as f64;
    (total as f64 / started.elapsed().as_secs_f64(), per_commit)
}

/// The raw batched baseline: rusqlite alone, `rows` event rows per
/// transaction on `rows` sessions, with the store's pragmas — what the disk
/// and SQLite allow a group commit that did nothing else.
fn raw_batched(dir: &Path, rows: usize, secs: f64) -> f64 {
    static CELL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let cell = CELL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let raw = raw_conn(&dir.join(format!("raw-batched-{cell}.db")));
    let blob = vec![0x5au8; encode_event(&ev(0)).len()];
    let hash = "a".repeat(64);
    let sessions: Vec<String> = (0..rows).map(|s| format!("s{s}")).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut seq = 0i64;
    while Instant::now() < deadline {
        seq += 1;
        raw.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut insert = raw
            .prepare_cached("INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, 0, ?5)")
            .unwrap();
        for session in &sessions {
            insert
                .execute(params![session, seq, hash, hash, blob])
                .unwrap();
        }
        drop(insert);
        raw.execute_batch("COMMIT").unwrap();
    }
    (seq as usize * rows) as f64 / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn throughput(dir: &Path, rt: &tokio::runtime::Runtime) {
    // Short alternating rounds, medians reported: neighbours on a shared
    // machine (and their fsyncs) then hit both modes alike.
    let rounds = 5;
    let secs = 0.6 * scale();
    // An unmeasured warm-up, so the first cell does not pay for cold caches.
    let _ = throughput_one(dir, rt, 8, 512, 0.5 * scale());
    println!(
        "## 2. aggregate durable appends/s (median of {rounds} alternating {secs:.1} s rounds)"
    );
    println!(
        "| concurrent sessions | group commit | txn per append | ratio | raw batched (N rows per commit) | group / raw |"
    );
    println!("|---|---|---|---|---|---|");
    for sessions in [1, 8, 64] {
        let (mut grouped, mut single, mut raw) = (Vec::new(), Vec::new(), Vec::new());
        let mut sizes = Vec::new();
        for _ in 0..rounds {
            let (rate, size) = throughput_one(dir, rt, sessions, 512, secs);
            grouped.push(rate);
            sizes.push(size);
            single.push(throughput_one(dir, rt, sessions, 1, secs).0);
            raw.push(raw_batched(dir, sessions, secs));
        }
        let (g, s, r) = (median(grouped), median(single), median(raw));
        println!(
            "| {sessions} | {g:.0} ({:.1} per commit) | {s:.0} | {:.1}x | {r:.0} | {:.2}x |",
            median(sizes),
            g / s,
            g / r
        );
    }
    println!("(goals at 64: group / txn per append >= 10x, group / raw batched >= 0.5x)\n");
}

fn uid_of(i: usize) -> String {
    // Multiplying by an odd constant is a bijection on u64: unique, unordered.
    format!(
        "sess-{:016x}",
        (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

fn ts_of(i: usize) -> i64 {
    1_700_000_000_000_000_000 + (i / 3) as i64 * 1000
}

fn listing(dir: &Path, rt: &tokio::runtime::Runtime, n: usize) {
    let path = dir.join(format!("list-{n}.db"));
    drop(SqliteJournal::open(&path, SqliteOptions::default()).unwrap());
    let load = Instant::now();
    {
        // Bulk load directly: the benchmark is about reading, not writing.
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA synchronous=OFF; BEGIN").unwrap();
        let mut stmt = c
            .prepare("INSERT INTO sessions(session, fence, project, name, compute_state, created_at, updated_at) VALUES (?1, 0, ?2, 'n', 'NONE', ?3, ?3)")
            .unwrap();
        for i in 0..n {
            // Three sessions per timestamp, so ties exercise the uid order;
            // one in ten in another project.
            let project = if i % 10 == 0 { "other" } else { "bench" };
            stmt.execute(params![uid_of(i), project, ts_of(i)]).unwrap();
        }
        drop(stmt);
        c.execute_batch("COMMIT").unwrap();
    }
    let load = load.elapsed();
    let store = SqliteJournal::open(&path, SqliteOptions::default()).unwrap();
    let list = |token: String| {
        rt.block_on(store.list_sessions(ListSessions {
            project: "bench".into(),
            page_size: 50,
            page_token: token,
        }))
        .unwrap()
    };
    // Resume tokens at random rows across the whole keyspace (built from the
    // same formulas as the load), so deep pages are as deep as they get.
    let mut rng = fastrand::Rng::with_seed(7);
    let tokens: Vec<String> = (0..256)
        .map(|_| {
            loop {
                // Not among the last rows, so every resumed page is a full one.
                let i = rng.usize(..n.saturating_sub(200).max(1));
                if !i.is_multiple_of(10) {
                    break page_token::encode(ts_of(i), &uid_of(i));
                }
            }
        })
        .collect();
    let _ = list(String::new());
    let rss_before = rss_kib();
    let mut first = Vec::new();
    let mut deep = Vec::new();
    let rounds = scaled(400.0);
    for i in 0..rounds {
        let t = Instant::now();
        let p = list(String::new());
        first.push(t.elapsed());
        assert_eq!(p.sessions.len(), 50);
        let tok = tokens[i % tokens.len()].clone();
        let t = Instant::now();
        let p = list(tok);
        deep.push(t.elapsed());
        assert!(!p.sessions.is_empty());
    }
    let rss_after = rss_kib();
    first.sort();
    deep.sort();
    println!("## 3. list_sessions with {n} sessions (bulk load {load:.1?})");
    println!("| page | p50 µs | p99 µs |");
    println!("|---|---|---|");
    println!(
        "| first page (50) | {:.0} | {:.0} |",
        us(pct(&first, 0.5)),
        us(pct(&first, 0.99))
    );
    println!(
        "| resumed deep page (50) | {:.0} | {:.0} |",
        us(pct(&deep, 0.5)),
        us(pct(&deep, 0.99))
    );
    println!(
        "RSS before listing {rss_before} KiB, after {} pages {rss_after} KiB (delta {} KiB); goal p50 <= 5 ms\n",
        rounds * 2,
        rss_after as i64 - rss_before as i64
    );
}

/// `n` records in `session`, a thousand per append.
fn fill(rt: &tokio::runtime::Runtime, store: &SqliteJournal, session: &str, n: usize) {
    rt.block_on(async {
        let fence = store.mint_fence(session, 1, None).await.unwrap();
        let mut head = 0;
        while head < n {
            let events: Vec<Event> = (head..n.min(head + 1000)).map(ev).collect();
            let len = events.len();
            store
                .append(AppendBatch {
                    session: session.into(),
                    expected_last_seq: head as i64,
                    fence,
                    events,
                    compute_state: None,
                    now_unix_nanos: 1,
                    release_lease: None,
                })
                .await
                .unwrap();
            head += len;
        }
    });
}

fn event_rows(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .unwrap()
}

/// One fork as the machine does it: the child's fence, then its write
/// (the parent's records up to `at` by reference, then the marker).
async fn fork_once(store: &SqliteJournal, child: &str, parent: &str, at: i64) -> Duration {
    let t = Instant::now();
    let fence = store.mint_fence(child, 2, None).await.unwrap();
    let marker = agentsessions_machine::events::fork_marker(at);
    let written = store
        .fork(ForkBatch {
            child: child.into(),
            parent: parent.into(),
            at_seq: at,
            fence,
            compute_state: None,
            events: vec![marker],
            now_unix_nanos: 3,
        })
        .await
        .unwrap();
    assert_eq!(written.len(), 1);
    t.elapsed()
}

fn forks(dir: &Path, rt: &tokio::runtime::Runtime) {
    let path = dir.join("fork.db");
    let store = SqliteJournal::open(&path, SqliteOptions::default()).unwrap();
    let (small, big) = (10, scaled(100_000.0));
    let t = Instant::now();
    fill(rt, &store, "parent-small", small);
    fill(rt, &store, "parent-big", big);
    println!(
        "## Fork: {big} vs {small} records (SQLite store; parents written in {:.1?})\n",
        t.elapsed()
    );
    // Alternating, so the disk's and neighbours' noise hits both alike.
    let rounds = scaled(200.0).max(20);
    let before = event_rows(&path);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        rt.block_on(async {
            a.push(
                fork_once(
                    &store,
                    &format!("child-small-{i}"),
                    "parent-small",
                    small as i64,
                )
                .await,
            );
            b.push(fork_once(&store, &format!("child-big-{i}"), "parent-big", big as i64).await);
        });
    }
    let written = event_rows(&path) - before;
    a.sort();
    b.sort();
    let ratio = us(pct(&b, 0.5)) / us(pct(&a, 0.5));
    println!("| parent | forks | p50 (us) | p99 (us) |");
    println!("|---|---|---|---|");
    for (name, d) in [(small, &a), (big, &b)] {
        println!(
            "| {name} records | {rounds} | {:.0} | {:.0} |",
            us(pct(d, 0.5)),
            us(pct(d, 0.99))
        );
    }
    println!(
        "ratio {big}/{small} at p50: {ratio:.2}x (goal <= 2x); event rows written by {} forks: {written}",
        rounds * 2
    );

    // The copying fork this replaced: read the prefix, append it all under
    // the child (re-hashing every record), in one transaction.
    let copy = rt.block_on(async {
        let mut times = Vec::new();
        for i in 0..3 {
            let t = Instant::now();
            let prefix = store.read("parent-big", 1, 0).await.unwrap();
            let child = format!("copied-{i}");
            let fence = store.mint_fence(&child, 2, None).await.unwrap();
            let mut events: Vec<Event> = prefix.into_iter().filter_map(|r| r.event).collect();
            events.push(agentsessions_machine::events::fork_marker(big as i64));
            store
                .append(AppendBatch {
                    session: child,
                    expected_last_seq: 0,
                    fence,
                    events,
                    compute_state: None,
                    now_unix_nanos: 3,
                    release_lease: None,
                })
                .await
                .unwrap();
            times.push(t.elapsed());
        }
        times.sort();
        times[1]
    });
    println!(
        "copying fork of {big} records (the path replaced; median of 3): {:.1?}, {:.0}x the referencing fork",
        copy,
        us(copy) / us(pct(&b, 0.5))
    );

    // Reading a child resolves its prefix through the parent's rows.
    let (parent_read, child_read) = rt.block_on(async {
        let (mut p, mut c) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let t = Instant::now();
            assert_eq!(store.read("parent-big", 1, 0).await.unwrap().len(), big);
            p.push(t.elapsed());
            let t = Instant::now();
            assert_eq!(
                store.read("child-big-0", 1, 0).await.unwrap().len(),
                big + 1
            );
            c.push(t.elapsed());
        }
        p.sort();
        c.sort();
        (p[2], c[2])
    });
    println!(
        "whole read (median of 5): parent {parent_read:.1?}, child {child_read:.1?} ({:.2}x)\n",
        us(child_read) / us(parent_read)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument, if any, is ignored.
    let base = std::env::var_os("JOURNAL_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("journal-bench-")
        .tempdir_in(base)
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "# journal bench (scale {}, dir {})\n",
        scale(),
        dir.path().display()
    );
    println!("RSS at start {} KiB\n", rss_kib());
    let t = Instant::now();
    // JOURNAL_BENCH_ONLY=latency|throughput|listing runs one section.
    let only = std::env::var("JOURNAL_BENCH_ONLY").unwrap_or_default();
    let run = |name: &str| only.is_empty() || only == name;
    if run("latency") {
        latency(dir.path(), &rt);
    }
    if run("throughput") {
        throughput(dir.path(), &rt);
    }
    if run("listing") {
        // A small journal first, then 100x more sessions: if memory does not
        // depend on the session count, RSS stays flat between the two.
        listing(dir.path(), &rt, scaled(10_000.0));
        listing(dir.path(), &rt, scaled(1_000_000.0));
    }
    if run("fork") {
        forks(dir.path(), &rt);
    }
    println!("total {:.1?}", t.elapsed());
}
