//! `/metrics` and `/readyz` of a real daemon, scraped over HTTP after a
//! scripted workload: exact RPC counts by method and code, turns by harness
//! and outcome, the approvals gauge moving 1 → 0 across a restart (counted
//! from the journal at boot), tool executions, model calls that fail, tokens
//! from USAGE records, dial failures, group-commit figures that match the
//! writer's own counters, and labels from bounded sets only (no session id
//! ever).

#[path = "support/daemon.rs"]
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, Capabilities, ExecRequest, GetSessionRequest, HarnessDescriptor, Resumability,
    ResumeRequest, Usage,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::harness::{Harness, HarnessError, Sink, StartInfo};
use tonic::transport::Channel;

async fn get(url: String) -> (u16, String) {
    let r = reqwest::get(url).await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// The value of the sample line that starts with `series` (exactly).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The sum of every sample of `name` whose labels include all of `having`.
fn sum(text: &str, name: &str, having: &[&str]) -> f64 {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            having
                .iter()
                .all(|h| labels.split(',').any(|p| p == *h))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// A remote harness that reports token usage and completes.
struct Counting;

#[tonic::async_trait]
impl Harness for Counting {
    fn describe(&self) -> HarnessDescriptor {
        HarnessDescriptor {
            id: "counting".into(),
            version: "1".into(),
            capabilities: Some(Capabilities {
                resumability: Resumability::StatelessReplay as i32,
                fork_safe: true,
                ..Capabilities::default()
            }),
            ..HarnessDescriptor::default()
        }
    }

    async fn run(&self, _start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        sink.usage(Usage {
            model: "m1".into(),
            input_tokens: 7,
            output_tokens: 3,
            reasoning_tokens: 0,
        })
        .await
    }
}

async fn exec(c: &mut SessionsClient<Channel>, uid: &str) -> tonic::Code {
    support::exec_code(
        c,
        ExecRequest {
            session: uid.into(),
            inputs: vec![support::text("hello")],
            ..Default::default()
        },
    )
    .await
}

async fn scrape(daemon: &Daemon) -> String {
    let (status, text) = get(format!("http://{}/metrics", daemon.metrics_addr.unwrap())).await;
    assert_eq!(status, 200);
    text
}

/// Scrapes until `series` reads `want` (the boot count runs beside the
/// first calls), or fails after a bound.
async fn scrape_until(daemon: &Daemon, series: &str, want: f64) -> String {
    for _ in 0..100 {
        let text = scrape(daemon).await;
        if sample(&text, series) == Some(want) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{series} never read {want}: {}", scrape(daemon).await);
}

const PENDING: &str = "agentsessions_approvals_pending";

/// Every label key a series may carry, and no value may be a session id.
fn assert_bounded(text: &str, uids: &[String]) {
    let keys: BTreeSet<&str> = [
        "method", "code", "harness", "outcome", "model", "kind", "tool", "server", "reason",
        "bound", "le",
    ]
    .into();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, labels)) = line.split_once('{') else {
            continue;
        };
        let labels = labels.split_once('}').unwrap().0;
        for pair in labels.split(',') {
            let (key, _) = pair.split_once('=').unwrap();
            assert!(keys.contains(key), "unexpected label {key:?}: {line}");
        }
    }
    for uid in uids {
        assert!(!text.contains(uid.as_str()), "a session id in the metrics");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_across_a_restart_reads_exactly_in_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (peer, _stop) = support::serve_harness(Arc::new(Counting)).await;
    // First life, on the echo model: three echo turns and a park.
    let daemon = Daemon::start(DaemonConfig {
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let mut c = support::client(&daemon).await;
    let echo = support::create(&mut c, "echo").await;
    for _ in 0..3 {
        assert_eq!(exec(&mut c, &echo).await, tonic::Code::Ok);
    }
    let parked = support::create(&mut c, "approval").await;
    assert_eq!(exec(&mut c, &parked).await, tonic::Code::Ok);

    let text = scrape(&daemon).await;
    let turns = |text: &str, harness: &str, outcome: &str| {
        sum(
            text,
            "agentsessions_turns_total",
            &[
                &format!("harness=\"{harness}\""),
                &format!("outcome=\"{outcome}\""),
            ],
        )
    };
    assert_eq!(turns(&text, "echo", "completed"), 3.0, "{text}");
    assert_eq!(turns(&text, "approval", "parked"), 1.0);
    assert_eq!(
        sum(&text, "agentsessions_turns_total", &[]),
        4.0,
        "no other turn"
    );
    assert_eq!(
        sum(&text, "agentsessions_turn_duration_seconds_count", &[]),
        4.0
    );
    assert_eq!(sample(&text, PENDING), Some(1.0));
    assert_eq!(
        sum(
            &text,
            "agentsessions_model_call_duration_seconds_count",
            &["outcome=\"ok\""]
        ),
        3.0,
        "one model call per echo turn"
    );
    // The journal's figures are the writer's own.
    let stats = daemon.journal().writer_stats();
    assert_eq!(
        sample(&text, "agentsessions_journal_group_commit_size_count"),
        Some(stats.batches as f64)
    );
    assert_eq!(
        sample(&text, "agentsessions_journal_group_commit_size_sum"),
        Some(stats.jobs as f64)
    );
    assert_eq!(
        sample(&text, "agentsessions_journal_commit_duration_seconds_count"),
        Some(stats.batches as f64)
    );
    assert_eq!(
        sample(&text, "agentsessions_journal_append_duration_seconds_count"),
        Some(stats.jobs as f64)
    );
    assert_eq!(
        sample(&text, "agentsessions_journal_commits_in_place_total"),
        Some(stats.jobs_in_place as f64),
        "one job per in-place commit"
    );
    drop(c);
    daemon.shutdown().await;

    // Second life, with a model provider that is gone and two remote
    // harnesses: the park is counted from the journal, decided and
    // resumed; a turn reports usage, a harness cannot be reached, and a
    // chat turn fails on the model (echo keeps its built-in model).
    let daemon = Daemon::start(DaemonConfig {
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        harnesses: vec![
            ("counting".into(), format!("http://{peer}")),
            ("dead".into(), "http://127.0.0.1:1".into()),
        ],
        models: vec!["gone".into()],
        model_base_url: Some("http://127.0.0.1:1".into()),
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    scrape_until(&daemon, PENDING, 1.0).await;
    let mut c = support::client(&daemon).await;
    let counting = support::create(&mut c, "counting").await;
    assert_eq!(exec(&mut c, &counting).await, tonic::Code::Ok);
    let dead = support::create(&mut c, "dead").await;
    assert_ne!(exec(&mut c, &dead).await, tonic::Code::Ok);
    let pending = c
        .get_session(GetSessionRequest {
            uid: parked.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .pending_approval
        .expect("still parked");
    c.approve(ApproveRequest {
        session: parked.clone(),
        execution_id: pending.execution_id,
        tool_call_id: pending.tool_call_id,
        request_seq: pending.request_seq,
        approved: Some(true),
        reason: "fine".into(),
        identity: None,
    })
    .await
    .unwrap();
    assert_eq!(sample(&scrape(&daemon).await, PENDING), Some(0.0));
    #[allow(deprecated)]
    c.resume(ResumeRequest {
        session: parked.clone(),
        boot: false,
    })
    .await
    .unwrap();
    let chat = support::create(&mut c, "chat").await;
    assert_eq!(
        exec(&mut c, &chat).await,
        tonic::Code::Unavailable,
        "a provider that cannot be reached"
    );

    let text = scrape(&daemon).await;
    assert_eq!(turns(&text, "approval", "completed"), 1.0, "{text}");
    assert_eq!(turns(&text, "chat", "failed"), 1.0);
    assert_eq!(turns(&text, "counting", "completed"), 1.0);
    assert_eq!(sum(&text, "agentsessions_turns_total", &[]), 3.0);
    let tokens = |kind: &str| {
        sum(
            &text,
            "agentsessions_model_tokens_total",
            &["model=\"m1\"", &format!("kind=\"{kind}\"")],
        )
    };
    assert_eq!((tokens("input"), tokens("output")), (7.0, 3.0));
    assert_eq!(tokens("reasoning"), 0.0, "a zero adds nothing");
    assert!(
        sum(
            &text,
            "agentsessions_harness_dial_failures_total",
            &["harness=\"dead\""]
        ) >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "agentsessions_tool_calls_total{server=\"host\",tool=\"append_note\",outcome=\"ok\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sum(
            &text,
            "agentsessions_model_call_duration_seconds_count",
            &["outcome=\"error\""]
        ),
        1.0
    );
    assert_eq!(
        sample(&text, "agentsessions_operations_in_flight"),
        Some(0.0)
    );
    assert!(sample(&text, "agentsessions_record_cache_records").unwrap() > 0.0);
    assert_bounded(&text, &[echo, counting, dead, parked]);
    drop(c);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_every_rpc_by_method_and_code_with_bounded_labels() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(DaemonConfig {
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let base = format!("http://{}", daemon.metrics_addr.unwrap());
    let (status, body) = get(format!("{base}/readyz")).await;
    assert_eq!((status, body.trim()), (200, "ready"));

    let mut c = support::client(&daemon).await;
    let mut uids = Vec::new();
    for _ in 0..3 {
        uids.push(support::create(&mut c, "echo").await);
    }
    for uid in &uids[..2] {
        let mut stream = c
            .exec(ExecRequest {
                session: uid.clone(),
                inputs: vec![support::text("hello")],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        while stream.message().await.unwrap().is_some() {}
    }
    let missing = c
        .get_session(GetSessionRequest {
            uid: "sess-missing".into(),
        })
        .await;
    assert_eq!(missing.unwrap_err().code(), tonic::Code::NotFound);

    let (status, text) = get(format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    let count = |method: &str, code: &str| {
        let series =
            format!("agentsessions_rpc_requests_total{{method=\"{method}\",code=\"{code}\"}}");
        sample(&text, &series)
    };
    assert_eq!(count("CreateSession", "OK"), Some(3.0), "{text}");
    assert_eq!(count("Exec", "OK"), Some(2.0));
    assert_eq!(count("GetSession", "NOT_FOUND"), Some(1.0));
    assert_eq!(
        count("GetSession", "OK"),
        Some(0.0),
        "no such call was made, and the series is there from the start"
    );
    let durations = |method: &str| {
        sample(
            &text,
            &format!("agentsessions_rpc_duration_seconds_count{{method=\"{method}\"}}"),
        )
    };
    assert_eq!(durations("CreateSession"), Some(3.0));
    assert_eq!(durations("Exec"), Some(2.0));

    assert_bounded(&text, &uids);
    drop(c);
    daemon.shutdown().await;
}
