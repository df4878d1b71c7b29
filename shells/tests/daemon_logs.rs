//! What the daemon logs: one start and one finish event per RPC with the
//! stable fields, correlated by `x-request-id` (adopted from the caller or
//! generated, and echoed back) — and never a payload. A turn runs with a
//! secret-looking input, config and tool-free echo model; the captured
//! logs, at TRACE for every target, must not contain any of it.
//!
//! This file installs the process-wide subscriber, so it holds one test.

#[path = "support/capture.rs"]
mod capture;
#[path = "support/daemon.rs"]
mod support;

use agentsessions_proto::v1::{CreateSessionRequest, ExecRequest, GetSessionRequest, Session};
use agentsessions_shells::daemon::app::Daemon;
use capture::Capture;

const SECRET_INPUT: &str = "sk-live-INPUT-7f3a9c1e5b2d4f60";
const SECRET_CONFIG: &str = "sk-live-CONFIG-0e4b8a2c6d1f3579";

fn events<'a>(
    lines: &'a [serde_json::Value],
    operation: &str,
    phase: &str,
) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["target"] == "agentsessions::grpc")
        .filter(|l| l["operation"] == operation && l["phase"] == phase)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpcs_log_start_and_finish_with_correlation_and_never_payloads() {
    let capture = Capture::default();
    let writer = capture.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .init();

    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(support::config(dir.path())).await.unwrap();
    let mut c = support::client(&daemon).await;

    let created = c
        .create_session(CreateSessionRequest {
            session: Some(Session::default()),
        })
        .await
        .unwrap();
    let generated = created
        .metadata()
        .get("x-request-id")
        .expect("a generated request id is echoed")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(generated.len(), 24);
    let uid = created.into_inner().metadata.unwrap().uid;

    // A caller's id is adopted and echoed.
    let mut exec = tonic::Request::new(ExecRequest {
        session: uid.clone(),
        inputs: vec![support::text(SECRET_INPUT)],
        config: format!("{{\"api_key\":\"{SECRET_CONFIG}\"}}").into_bytes(),
        ..Default::default()
    });
    exec.metadata_mut()
        .insert("x-request-id", "turn-42.a_b".parse().unwrap());
    let response = c.exec(exec).await.unwrap();
    assert_eq!(
        response.metadata().get("x-request-id").unwrap(),
        "turn-42.a_b"
    );
    let mut stream = response.into_inner();
    let mut frames = 0;
    while stream.message().await.unwrap().is_some() {
        frames += 1;
    }
    assert!(frames >= 6, "Session + 5 records, got {frames}");

    // A malformed id is replaced, and a failure carries it in its status.
    let mut get = tonic::Request::new(GetSessionRequest {
        uid: "sess-000000000000000000000000".into(),
    });
    get.metadata_mut()
        .insert("x-request-id", "bad id!".parse().unwrap());
    let err = c.get_session(get).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let replaced = err
        .metadata()
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(replaced, "bad id!");
    daemon.shutdown().await;

    let lines = capture.lines();
    if std::env::var_os("SHOW_LOGS").is_some() {
        eprintln!("{}", capture.text());
    }
    let create_finish = events(&lines, "CreateSession", "finish");
    assert_eq!(create_finish.len(), 1, "{lines:#?}");
    let f = create_finish[0];
    assert_eq!(f["request_id"], generated.as_str());
    assert_eq!(f["session_uid"], uid.as_str(), "the created uid is named");
    assert_eq!(f["outcome"], "success");
    assert_eq!(f["level"], "INFO");
    assert!(f["duration_ms"].as_f64().is_some());
    assert_eq!(events(&lines, "CreateSession", "start").len(), 1);

    let exec_start = events(&lines, "Exec", "start");
    let exec_finish = events(&lines, "Exec", "finish");
    assert_eq!((exec_start.len(), exec_finish.len()), (1, 1));
    for e in [exec_start[0], exec_finish[0]] {
        assert_eq!(e["request_id"], "turn-42.a_b");
        assert_eq!(e["session_uid"], uid.as_str());
        assert_eq!(e["rpc_method"], "/agentsessions.v1.Sessions/Exec");
        assert_eq!(e["rpc_kind"], "server_stream");
    }
    assert_eq!(exec_finish[0]["grpc_code"], "OK");
    assert_eq!(exec_finish[0]["frames"], frames);

    let get_finish = events(&lines, "GetSession", "finish");
    assert_eq!(get_finish.len(), 1);
    let g = get_finish[0];
    assert_eq!(g["request_id"], replaced.as_str());
    assert_eq!(g["error_kind"], "not_found");
    assert_eq!(g["outcome"], "error");
    assert_eq!(g["level"], "INFO", "a caller's mistake is not an error");

    // Nothing the caller sent as content, nor anything derived from it,
    // appears anywhere in the logs (every target, TRACE level).
    let text = capture.text();
    for needle in [
        SECRET_INPUT,
        SECRET_CONFIG,
        "INPUT-7f3a9c1e5b2d4f60",
        "api_key",
        "bad id!",
    ] {
        assert!(!text.contains(needle), "{needle:?} leaked into the logs");
    }
    // Nor any raw error text.
    assert!(!text.contains(err.message()), "raw error text was logged");
}
