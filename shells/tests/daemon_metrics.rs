//! `/metrics` and `/readyz` of a real daemon, scraped over HTTP after a
//! scripted workload: exact RPC counts by method and code, one duration
//! sample per call, and labels from closed sets only (no session id ever).

#[path = "support/daemon.rs"]
mod support;

use std::collections::BTreeSet;

use agentsessions_proto::v1::{ExecRequest, GetSessionRequest};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};

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
    assert_eq!(count("GetSession", "OK"), None, "no such call was made");
    let durations = |method: &str| {
        sample(
            &text,
            &format!("agentsessions_rpc_duration_seconds_count{{method=\"{method}\"}}"),
        )
    };
    assert_eq!(durations("CreateSession"), Some(3.0));
    assert_eq!(durations("Exec"), Some(2.0));

    // Bounded cardinality: every label is a method or a code, from closed
    // sets, and no session id appears anywhere.
    let methods: BTreeSet<&str> = [
        "CreateSession",
        "GetSession",
        "ListSessions",
        "DeleteSession",
        "Exec",
        "Replay",
        "Approve",
        "Cancel",
        "Suspend",
        "Resume",
        "Fork",
    ]
    .into();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, labels)) = line.split_once('{') else {
            continue;
        };
        let labels = labels.split_once('}').unwrap().0;
        for pair in labels.split(',') {
            let (key, value) = pair.split_once('=').unwrap();
            let value = value.trim_matches('"');
            match key {
                "method" => assert!(methods.contains(value), "{line}"),
                "code" => assert!(
                    value.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
                    "{line}"
                ),
                "le" => {}
                other => panic!("unexpected label {other:?}: {line}"),
            }
        }
    }
    for uid in &uids {
        assert!(!text.contains(uid.as_str()), "a session id in the metrics");
    }
    drop(c);
    daemon.shutdown().await;
}
