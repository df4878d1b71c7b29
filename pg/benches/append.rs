//! PostgreSQL append benchmark (`cargo bench -p agentsessions-pg --bench append`).
//!
//! Against a throwaway cluster (`scripts/pg-cluster.sh`, fsync on, local
//! socket over TCP loopback), measured in one run:
//!
//! 1. single-session latency: `PG_BENCH_APPENDS` (default 2,000) one-event
//!    `PgJournal::append`s one after another, with group commit and with
//!    one transaction per append, next to the raw baseline of the same row
//!    written by plain `tokio-postgres` (BEGIN, INSERT of seq + hash +
//!    blob, COMMIT);
//! 2. throughput: 64 sessions appending `PG_BENCH_EACH` (default 1,000) each at once through one `PgJournal`
//!    (its pool of 8 connections), grouped and not, next to 64 raw writers
//!    on 8 connections.
//!
//! Each journal and the raw table get a database of their own.
//! `AGENTSESSIONS_PG_URL` points at an existing server instead.

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentsessions_journal::{AppendBatch, JournalStore};
use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};

const SESSIONS: usize = 64;
const CONNECTIONS: usize = 8;

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

fn one_event(session: &str, head: i64, fence: i64) -> AppendBatch {
    let ev = events::input("x-1", events::text_message("user", "hello"));
    AppendBatch {
        session: session.into(),
        expected_last_seq: head,
        fence,
        events: vec![ev],
        compute_state: None,
        now_unix_nanos: 1_700_000_000_000_000_000 + head,
        release_lease: None,
    }
}

/// The raw baseline's table: one row per record, the journal's key.
const RAW_TABLE: &str = "CREATE TABLE raw_events (session text NOT NULL, seq bigint NOT NULL, \
     prev_hash bytea NOT NULL, hash bytea NOT NULL, event bytea NOT NULL, \
     PRIMARY KEY (session, seq))";

async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

const RAW_INSERT: &str = "INSERT INTO raw_events VALUES ($1, $2, $3, $4, $5)";

/// One raw record write: its own transaction, a prepared INSERT.
async fn raw_append(
    c: &mut tokio_postgres::Client,
    insert: &tokio_postgres::Statement,
    session: &str,
    seq: i64,
    blob: &[u8],
) {
    let tx = c.transaction().await.unwrap();
    tx.execute(
        insert,
        &[&session, &seq, &vec![0u8; 32], &vec![1u8; 32], &blob],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

async fn journal_latency(store: &PgJournal, n: usize) -> Vec<Duration> {
    let fence = store.mint_fence("lat", 1, None).await.unwrap();
    let mut head = 0;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let recs = store.append(one_event("lat", head, fence)).await.unwrap();
        out.push(t.elapsed());
        head = recs.last().unwrap().seq;
    }
    out.sort();
    out
}

async fn raw_latency(url: &str, n: usize) -> Vec<Duration> {
    let mut c = raw_client(url).await;
    let insert = c.prepare(RAW_INSERT).await.unwrap();
    let blob = vec![7u8; 64];
    let mut out = Vec::with_capacity(n);
    for seq in 1..=n as i64 {
        let t = Instant::now();
        raw_append(&mut c, &insert, "lat", seq, &blob).await;
        out.push(t.elapsed());
    }
    out.sort();
    out
}

/// Appends/s with every session appending `each` records at once.
async fn journal_throughput(store: Arc<PgJournal>, each: usize) -> f64 {
    let t = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let session = format!("tp-{s}");
            let fence = store.mint_fence(&session, 1, None).await.unwrap();
            let mut head = 0;
            for _ in 0..each {
                let recs = store
                    .append(one_event(&session, head, fence))
                    .await
                    .unwrap();
                head = recs.last().unwrap().seq;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (SESSIONS * each) as f64 / t.elapsed().as_secs_f64()
}

async fn raw_throughput(url: &str, each: usize) -> f64 {
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let c = raw_client(url).await;
        let insert = c.prepare(RAW_INSERT).await.unwrap();
        clients.push(Arc::new(tokio::sync::Mutex::new((c, insert))));
    }
    let t = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let client = clients[s % CONNECTIONS].clone();
        tasks.push(tokio::spawn(async move {
            let session = format!("tp-{s}");
            let blob = vec![7u8; 64];
            for seq in 1..=each as i64 {
                let mut guard = client.lock().await;
                let (c, insert) = &mut *guard;
                raw_append(c, insert, &session, seq, &blob).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (SESSIONS * each) as f64 / t.elapsed().as_secs_f64()
}

fn report_latency(name: &str, d: &[Duration]) {
    println!(
        "  {name:<28} p50 {:8.1} us   p99 {:8.1} us",
        us(pct(d, 0.5)),
        us(pct(d, 0.99))
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut urls = Vec::new();
        for _ in 0..3 {
            let Some(url) = pg::fresh_database().await else {
                return;
            };
            urls.push(url);
        }
        let (grouped_url, single_url, raw_url) = (&urls[0], &urls[1], &urls[2]);
        let raw = raw_client(raw_url).await;
        raw.batch_execute(RAW_TABLE).await.unwrap();
        let mut options = PgOptions {
            pool_size: CONNECTIONS,
            ..PgOptions::default()
        };
        if let (Some(limits), Ok(v)) = (
            &mut options.group_commit,
            std::env::var("PG_BENCH_IN_FLIGHT"),
        ) {
            limits.in_flight = v.parse().unwrap();
        }
        let grouped = Arc::new(PgJournal::open(grouped_url, options.clone()).await.unwrap());
        let single = PgOptions {
            group_commit: None,
            ..options
        };
        let single = Arc::new(PgJournal::open(single_url, single).await.unwrap());
        let n = env_usize("PG_BENCH_APPENDS", 2_000);
        let each = env_usize("PG_BENCH_EACH", 1_000);

        // Warm both paths (connections, plans) before timing.
        let _ = raw_latency(raw_url, 1).await;
        raw.batch_execute("TRUNCATE raw_events").await.unwrap();

        let g = journal_latency(&grouped, n).await;
        let o = journal_latency(&single, n).await;
        let r = raw_latency(raw_url, n).await;
        println!("single-session append, {n} one-event appends, one at a time");
        report_latency("PgJournal, group commit", &g);
        report_latency("PgJournal, one tx per append", &o);
        report_latency("raw INSERT+COMMIT", &r);
        println!(
            "  group commit / raw: p50 {:.2}x   p99 {:.2}x",
            us(pct(&g, 0.5)) / us(pct(&r, 0.5)),
            us(pct(&g, 0.99)) / us(pct(&r, 0.99))
        );

        raw.batch_execute("TRUNCATE raw_events").await.unwrap();
        let before = grouped.group_stats();
        let gt = journal_throughput(grouped.clone(), each).await;
        let stats = grouped.group_stats();
        let ot = journal_throughput(single.clone(), each).await;
        let rt_ = raw_throughput(raw_url, each).await;
        let (commits, appends) = (
            stats.commits - before.commits,
            stats.appends - before.appends,
        );
        println!("aggregate, {SESSIONS} sessions x {each} appends, {CONNECTIONS} connections");
        println!(
            "  PgJournal, group commit       {gt:9.0} appends/s  ({:.1} appends per commit)",
            appends as f64 / commits.max(1) as f64
        );
        println!("  PgJournal, one tx per append  {ot:9.0} appends/s");
        println!("  raw INSERT+COMMIT             {rt_:9.0} appends/s");
        println!(
            "  group commit / one tx per append {:.2}x   group commit / raw {:.2}x",
            gt / ot,
            gt / rt_
        );
    });
}
