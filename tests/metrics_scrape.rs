//! `/metrics` of agentsessionsd run as a child process from a `--config`
//! file, the way CI runs the binaries: after a scripted workload over gRPC
//! (turns, a park, an approval and its resume) the scrape reads exactly
//! what was done, and no session id appears in it.

#[path = "support/scrape.rs"]
mod scrape;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, ExecRequest, ResumeRequest, Session, exec_update::Update,
};
use scrape::{http_get, sample};
use support::create;
use tonic::transport::Channel;

const DAEMON: &str = env!("CARGO_BIN_EXE_agentsessionsd");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs one Exec; returns the last Session frame.
async fn exec(c: &mut SessionsClient<Channel>, uid: &str) -> Session {
    let mut stream = c
        .exec(ExecRequest {
            session: uid.into(),
            inputs: vec![support::text("hi")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(u) = stream.message().await.unwrap() {
        if let Some(Update::Session(s)) = u.update {
            last = Some(s);
        }
    }
    last.expect("a Session frame")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_daemon_counts_turns_and_approvals_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentsessionsd.toml");
    std::fs::write(
        &config,
        format!(
            "addr = \"127.0.0.1:0\"\nmetrics-addr = \"127.0.0.1:0\"\njournal = \"{}\"\n",
            dir.path().join("j.db").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(DAEMON)
        .current_dir(dir.path())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _child = Killed(child);
    let mut addr_of = |prefix: &str| {
        let line = lines.next().unwrap().unwrap();
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_owned()
    };
    let sessions = addr_of("agentsessionsd listening on ");
    let metrics = addr_of("metrics listening on ");
    assert_eq!(http_get(&metrics, "/readyz").0, 200);

    let mut c = support::client_at(&sessions).await;
    let echo = create(&mut c, "echo").await;
    for _ in 0..2 {
        exec(&mut c, &echo).await;
    }
    let gated = create(&mut c, "approval").await;
    let parked = exec(&mut c, &gated).await;
    let pending = parked.pending_approval.expect("parked");
    let (_, text) = http_get(&metrics, "/metrics");
    assert_eq!(
        sample(&text, "agentsessions_approvals_pending"),
        Some(1.0),
        "{text}"
    );

    c.approve(ApproveRequest {
        session: gated.clone(),
        execution_id: pending.execution_id,
        tool_call_id: pending.tool_call_id,
        request_seq: pending.request_seq,
        approved: Some(true),
        reason: "ok".into(),
        identity: None,
    })
    .await
    .unwrap();
    #[allow(deprecated)]
    c.resume(ResumeRequest {
        session: gated.clone(),
        boot: false,
    })
    .await
    .unwrap();

    let (status, text) = http_get(&metrics, "/metrics");
    assert_eq!(status, 200);
    let turns = |harness: &str, outcome: &str| {
        sample(
            &text,
            &format!("agentsessions_turns_total{{harness=\"{harness}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(turns("echo", "completed"), Some(2.0), "{text}");
    assert_eq!(turns("approval", "parked"), Some(1.0));
    assert_eq!(turns("approval", "completed"), Some(1.0));
    assert_eq!(sample(&text, "agentsessions_approvals_pending"), Some(0.0));
    assert_eq!(
        sample(
            &text,
            "agentsessions_tool_calls_total{server=\"host\",tool=\"append_note\",outcome=\"ok\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "agentsessions_rpc_requests_total{method=\"Exec\",code=\"OK\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "agentsessions_rpc_requests_total{method=\"Approve\",code=\"OK\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "agentsessions_journal_group_commit_size_count"),
        sample(&text, "agentsessions_journal_commit_duration_seconds_count"),
    );
    assert_eq!(
        sample(&text, "agentsessions_operations_in_flight"),
        Some(0.0)
    );
    for uid in [&echo, &gated] {
        assert!(!text.contains(uid.as_str()), "a session id in the metrics");
    }
}

#[test]
fn every_known_series_is_scraped_at_zero_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(DAEMON)
        .current_dir(dir.path())
        .args(["--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .args(["--console-addr", "127.0.0.1:0", "--journal"])
        .arg(dir.path().join("j.db"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _child = Killed(child);
    let metrics = lines
        .by_ref()
        .map(Result::unwrap)
        .find_map(|l| l.strip_prefix("metrics listening on ").map(str::to_owned))
        .expect("a metrics line");
    // Keep reading, so the console's line never meets a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));

    let text = scrape::metrics(&metrics);
    for series in [
        "agentsessions_rpc_requests_total{method=\"Exec\",code=\"OK\"}",
        "agentsessions_rpc_requests_total{method=\"RegisterHarness\",code=\"OK\"}",
        "agentsessions_rpc_duration_seconds_count{method=\"Approve\"}",
        "agentsessions_rpc_requests_total{method=\"console.approve\",code=\"OK\"}",
        "agentsessions_rpc_duration_seconds_count{method=\"console.live\"}",
        "agentsessions_limit_refusals_total{bound=\"principal_calls\"}",
        "agentsessions_limit_refusals_total{bound=\"request_memory\"}",
        "agentsessions_approvals_pending",
        "agentsessions_operations_in_flight",
    ] {
        assert_eq!(sample(&text, series), Some(0.0), "{series} in\n{text}");
    }
}
