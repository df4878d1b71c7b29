//! Spans of an in-process daemon exported over OTLP/gRPC to a real
//! receiver: one Exec called with a W3C `traceparent` makes a tree in the
//! caller's trace — the RPC span, and under it the journal writes, the
//! harness connection, the model call and the tool execution, with ids and
//! seqs as attributes and never content — and the harness (Connect
//! metadata) and the model provider (HTTP header) see the same trace.

#[allow(dead_code)]
mod openai_fake;
#[path = "support/otlp.rs"]
mod otlp;
#[path = "support/daemon.rs"]
mod support;

use std::time::Duration;

use agentsessions_proto::v1::ExecRequest;
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::daemon::otlp::Otlp;
use otlp::{CALLER_SPAN, HARNESS, Noting, Receiver, Seen, TRACE_ID};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Content the turn carries, which no span may repeat.
const SECRET: &str = "the-secret-input-text";

/// The only span of `spans` named `name`.
fn one<'a>(spans: &'a [Seen], name: &str) -> &'a Seen {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span: {spans:#?}");
    found[0]
}

/// The `traceparent` header's (trace id, parent span id).
fn parts(traceparent: &str) -> (String, String) {
    let p: Vec<_> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    (p[1].to_owned(), p[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_exec_makes_a_span_tree_in_the_callers_trace() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    // The exporter's thread builds its client; keep that off the runtime.
    let exporter = tokio::task::spawn_blocking(move || Otlp::start(&endpoint).unwrap())
        .await
        .unwrap();
    tracing_subscriber::registry().with(exporter.layer()).init();

    let (harness, harness_url) = Noting::start().await;
    let model = openai_fake::serve(openai_fake::sse(
        &[json!({"choices": [{"delta": {"role": "assistant", "content": "hi"}}]})],
        true,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(DaemonConfig {
        harnesses: vec![(HARNESS.into(), harness_url)],
        models: vec![otlp::MODEL.into()],
        model_base_url: Some(format!("{}/v1", model.base)),
        model_api_key: Some("k".into()),
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let mut c = support::client(&daemon).await;
    let uid = support::create(&mut c, HARNESS).await;

    let mut request = tonic::Request::new(ExecRequest {
        session: uid.clone(),
        inputs: vec![support::text(SECRET)],
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("traceparent", otlp::caller_traceparent().parse().unwrap());
    let mut stream = c.exec(request).await.unwrap().into_inner();
    while stream.message().await.unwrap().is_some() {}

    // The RPC span ends as the server finishes the stream: wait for it.
    let mut spans = Vec::new();
    for _ in 0..100 {
        exporter.flush().unwrap();
        spans = receiver.trace(TRACE_ID);
        if spans.iter().any(|s| s.name == "Sessions/Exec")
            && spans.iter().any(|s| s.name == "harness.connect")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rpc = one(&spans, "Sessions/Exec");
    assert_eq!(rpc.parent, CALLER_SPAN, "the caller's span is the parent");
    assert_eq!(rpc.kind, 2, "a server span");
    assert_eq!(rpc.attr("session.uid"), Some(uid.as_str()));
    assert_eq!(rpc.attr("rpc.method"), Some("Exec"));
    assert_eq!(rpc.attr("rpc.grpc.status_code"), Some("0"), "OK");

    let appends: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "journal.append")
        .collect();
    assert!(appends.len() >= 2, "the turn's writes: {spans:#?}");
    let mut seqs = Vec::new();
    for a in &appends {
        assert_eq!(a.parent, rpc.id, "a write under the RPC");
        assert_eq!(a.attr("session.uid"), Some(uid.as_str()));
        assert!(!a.attr("execution.id").unwrap_or("").is_empty());
        seqs.push(a.attr("seq").unwrap().parse::<i64>().unwrap());
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(
        seqs.len(),
        appends.len(),
        "each write starts at its own seq"
    );
    assert!(seqs[0] >= 1);

    let connect = one(&spans, "harness.connect");
    assert_eq!(connect.parent, rpc.id);
    assert_eq!(connect.attr("harness"), Some(HARNESS));
    let call = one(&spans, "model.call");
    assert_eq!(call.parent, rpc.id);
    assert_eq!(call.attr("model"), Some(otlp::MODEL));
    assert_eq!(call.attr("session.uid"), Some(uid.as_str()));
    let tool = one(&spans, "tool.execute");
    assert_eq!(tool.parent, rpc.id);
    assert_eq!(tool.attr("tool"), Some("echo_args"));
    assert_eq!(tool.attr("tool_call.id"), Some("call-1"));
    assert!(!tool.attr("execution.id").unwrap_or("").is_empty());
    let tool_seq: i64 = tool.attr("seq").unwrap().parse().unwrap();
    assert!(tool_seq > seqs[0], "the seq of the tool call's record");

    // The harness joined the trace under the connection's span ...
    let seen = harness.seen();
    assert_eq!(seen.len(), 1, "one Connect: {seen:?}");
    assert_eq!(parts(&seen[0]), (TRACE_ID.to_owned(), connect.id.clone()));
    // ... and so did the model provider, under the model call's.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    let tp = requests[0].header("traceparent").expect("a traceparent");
    assert_eq!(parts(tp), (TRACE_ID.to_owned(), call.id.clone()));

    // No span carries content, and the resource names the daemon.
    for s in receiver.all() {
        for v in s.attrs.values() {
            assert!(!v.contains(SECRET), "content in a span: {s:?}");
        }
    }
    assert!(
        receiver
            .service_names()
            .iter()
            .all(|n| n == "agentsessionsd")
    );
    drop(c);
    daemon.shutdown().await;
    tokio::task::spawn_blocking(move || exporter.shutdown().unwrap())
        .await
        .unwrap();
}
