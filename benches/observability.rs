//! What metrics and tracing cost a turn
//! (`cargo bench --bench observability`).
//!
//! Two `agentsessionsd` child processes in one run, each on its own SQLite
//! journal in the same directory: one bare (the baseline), one with
//! `--metrics-addr` and `--otlp-endpoint` exporting every span to a real
//! OTLP receiver in this process (the collector's trace service), which
//! also scrapes `/metrics` once a second as Prometheus would.
//!
//! 1. One session on each, echo turns awaited one at a time, in alternating
//!    blocks so disk noise hits both alike: turn p50 and p99, and the ratio.
//! 2. 64 sessions on each (one daemon after the other), turns back to back
//!    for a fixed time: turns per second and the ratio.
//!
//! `OBSERVABILITY_BENCH_SCALE` (default 1.0) scales turn counts and times.

#[path = "../tests/support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/otlp.rs"]
mod otlp;
#[path = "../tests/support/scrape.rs"]
mod scrape;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::time::{Duration, Instant};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::ExecRequest;
use tonic::transport::Channel;

fn scale() -> f64 {
    std::env::var("OBSERVABILITY_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

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
    let mut frames = 0;
    while stream.message().await.unwrap().is_some() {
        frames += 1;
    }
    assert!(
        frames >= 6,
        "an echo turn streams its session and 5 records"
    );
    t.elapsed()
}

/// Turns per second over `sessions` sessions for `secs`.
async fn concurrent(addr: &str, sessions: usize, secs: f64) -> f64 {
    let mut clients = Vec::new();
    for _ in 0..sessions.div_ceil(16) {
        clients.push(support::client_at(addr).await);
    }
    let start = Instant::now() + Duration::from_millis(300);
    let stop = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..sessions {
        let mut c = clients[i / 16].clone();
        tasks.push(tokio::spawn(async move {
            let session = support::create(&mut c, "echo").await;
            turn(&mut c, &session).await;
            tokio::time::sleep_until(start.into()).await;
            let mut n = 0usize;
            while Instant::now() < stop {
                turn(&mut c, &session).await;
                n += 1;
            }
            n
        }));
    }
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    n as f64
        / Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let receiver = otlp::Receiver::counting();
    let endpoint = runtime.block_on(receiver.start());
    let bare = cli::Daemon::start_in(dir.path(), dir.path().join("bare.db").as_os_str(), &[]);
    let observed = cli::Daemon::start_in(
        dir.path(),
        dir.path().join("observed.db").as_os_str(),
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--otlp-endpoint",
            &endpoint,
        ],
    );
    let metrics = observed.metrics.clone().unwrap();
    let scraping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let scraper = {
        let (scraping, metrics) = (scraping.clone(), metrics.clone());
        std::thread::spawn(move || {
            let mut scrapes = 0;
            while scraping.load(std::sync::atomic::Ordering::Relaxed) {
                scrape::metrics(&metrics);
                scrapes += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            scrapes
        })
    };
    let addrs = [bare.sessions.clone(), observed.sessions.clone()];
    let blocks = ((20.0 * scale()) as usize).max(2);
    let per_block = 25;
    let (lat, rates) = runtime.block_on(async {
        let mut conns = Vec::new();
        for a in &addrs {
            let mut c = support::client_at(a).await;
            let s = support::create(&mut c, "echo").await;
            turn(&mut c, &s).await;
            conns.push((c, s));
        }
        let mut lat = [Vec::new(), Vec::new()];
        for b in 0..blocks {
            for k in [b % 2, (b + 1) % 2] {
                let (c, s) = &mut conns[k];
                for _ in 0..per_block {
                    lat[k].push(turn(c, s).await);
                }
            }
        }
        let secs = 4.0 * scale();
        let mut rates = [0.0; 2];
        for (k, a) in addrs.iter().enumerate() {
            rates[k] = concurrent(a, 64, secs).await;
        }
        (lat, rates)
    });
    scraping.store(false, std::sync::atomic::Ordering::Relaxed);
    let scrapes = scraper.join().unwrap();
    // Let the last batches arrive before counting them.
    std::thread::sleep(Duration::from_millis(500));
    let spans = receiver.count();
    let [bare_lat, observed_lat] = lat.map(|mut l| {
        l.sort();
        (pct(&l, 0.5), pct(&l, 0.99))
    });
    println!("## Metrics and tracing on vs off (one run)");
    println!();
    println!("| | turn p50 µs | turn p99 µs | 64 sessions, turns/s |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| bare | {:.0} | {:.0} | {:.1} |",
        us(bare_lat.0),
        us(bare_lat.1),
        rates[0]
    );
    println!(
        "| --metrics-addr + --otlp-endpoint | {:.0} | {:.0} | {:.1} |",
        us(observed_lat.0),
        us(observed_lat.1),
        rates[1]
    );
    println!();
    println!(
        "turn p50 ratio (observed / bare): {:.3}x (goal <= 1.05x); 64-session throughput ratio: {:.3}x",
        us(observed_lat.0) / us(bare_lat.0),
        rates[1] / rates[0]
    );
    println!(
        "spans received: {spans}; scrapes: {scrapes}; spans dropped: {}",
        scrape::sample(
            &scrape::metrics(&metrics),
            "agentsessions_trace_spans_dropped_total"
        )
        .unwrap()
    );
    assert!(spans > 0, "the observed daemon exported its spans");
    // The children go with their handles.
    drop((bare, observed));
    std::process::exit(0);
}
