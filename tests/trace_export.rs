//! `agentsessionsd --otlp-endpoint` run as a child process: an Exec called
//! with a W3C `traceparent` reaches a real OTLP receiver as a span tree in
//! the caller's trace, and the harness's Connect and the model provider's
//! request carry the same trace;
//! with a collector that is gone, turns still complete and the dropped
//! spans are counted in `/metrics`.

#[path = "support/cli.rs"]
mod cli;
#[path = "../shells/tests/openai_fake/mod.rs"]
#[allow(dead_code)]
mod openai_fake;
#[path = "../shells/tests/support/otlp.rs"]
mod otlp;
#[path = "support/scrape.rs"]
mod scrape;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::time::Duration;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::ExecRequest;
use otlp::{CALLER_SPAN, HARNESS, Noting, Receiver, TRACE_ID};
use scrape::{metrics as scrape, sample};
use support::{client_at, create, text};
use tonic::transport::Channel;

/// Runs one Exec with `metadata` to its end; returns the stream's code.
async fn exec(
    c: &mut SessionsClient<Channel>,
    uid: &str,
    metadata: &[(&'static str, String)],
) -> tonic::Code {
    let mut request = tonic::Request::new(ExecRequest {
        session: uid.into(),
        inputs: vec![text("hello")],
        ..Default::default()
    });
    for (k, v) in metadata {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    let mut stream = match c.exec(request).await {
        Ok(s) => s.into_inner(),
        Err(status) => return status.code(),
    };
    loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => return tonic::Code::Ok,
            Err(status) => return status.code(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_daemon_exports_an_execs_span_tree_in_the_callers_trace() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (harness, harness_url) = Noting::start().await;
    let model = openai_fake::serve(openai_fake::sse(
        &[serde_json::json!({"choices": [{"delta": {"content": "hi"}}]})],
        true,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("{HARNESS}={harness_url}");
    let base = format!("{}/v1", model.base);
    let daemon = cli::Daemon::start_in(
        dir.path(),
        dir.path().join("j.db").as_os_str(),
        &[
            "--otlp-endpoint",
            &endpoint,
            "--harness",
            &spec,
            "--model",
            otlp::MODEL,
            "--model-base-url",
            &base,
        ],
    );
    let mut c = client_at(&daemon.sessions).await;
    let uid = create(&mut c, HARNESS).await;
    let traceparent = ("traceparent", otlp::caller_traceparent());
    assert_eq!(exec(&mut c, &uid, &[traceparent]).await, tonic::Code::Ok);

    // The child exports on its own schedule (a batch at least every 200 ms).
    let mut spans = Vec::new();
    for _ in 0..100 {
        spans = receiver.trace(TRACE_ID);
        if ["Sessions/Exec", "harness.connect", "tool.execute"]
            .iter()
            .all(|n| spans.iter().any(|s| s.name == *n))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let named = |name: &str| {
        let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "one {name} span: {spans:#?}");
        found[0].clone()
    };
    let rpc = named("Sessions/Exec");
    assert_eq!(rpc.parent, CALLER_SPAN);
    assert_eq!(rpc.attr("session.uid"), Some(uid.as_str()));
    for name in ["harness.connect", "model.call", "tool.execute"] {
        assert_eq!(named(name).parent, rpc.id, "{name} under the RPC");
    }
    let appends = spans.iter().filter(|s| s.name == "journal.append");
    assert!(appends.clone().count() >= 2, "{spans:#?}");
    assert!(appends.clone().all(|a| a.parent == rpc.id));
    let seen = harness.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let connect = named("harness.connect");
    assert_eq!(
        seen[0],
        format!("00-{TRACE_ID}-{}-01", connect.id),
        "the harness joins the trace under the connection's span"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("traceparent"),
        Some(format!("00-{TRACE_ID}-{}-01", named("model.call").id).as_str()),
        "so does the model provider, under the model call's"
    );
    assert!(receiver.service_names().contains(&"agentsessionsd".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_drops_and_counts_spans_and_turns_go_on() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: every export fails at connect.
    let daemon = cli::Daemon::start_in(
        dir.path(),
        dir.path().join("j.db").as_os_str(),
        &[
            "--otlp-endpoint",
            "http://127.0.0.1:1",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    let metrics = daemon.metrics.clone().unwrap();
    let dropped = |text: &str| sample(text, "agentsessions_trace_spans_dropped_total");
    assert_eq!(dropped(&scrape(&metrics)), Some(0.0), "none yet");
    let mut c = client_at(&daemon.sessions).await;
    let uid = create(&mut c, "echo").await;
    for _ in 0..3 {
        assert_eq!(exec(&mut c, &uid, &[]).await, tonic::Code::Ok);
    }
    let mut text = scrape(&metrics);
    for _ in 0..100 {
        if dropped(&text).unwrap_or(0.0) > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        text = scrape(&metrics);
    }
    assert!(
        dropped(&text).unwrap() >= 4.0,
        "the spans are counted: {text}"
    );
    assert_eq!(
        sample(
            &text,
            "agentsessions_turns_total{harness=\"echo\",outcome=\"completed\"}"
        ),
        Some(3.0)
    );
}
