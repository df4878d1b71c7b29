//! A real OTLP/gRPC trace receiver (the collector's `TraceService` from
//! `opentelemetry-proto`, served by tonic) and a remote harness that notes
//! the `traceparent` its Connect calls carry: the two foreign ends a
//! daemon's spans and trace context reach. Shared by the in-process and
//! the child-process trace tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentsessions_proto::grpc::harness_server::{Harness as HarnessRpc, HarnessServer};
use agentsessions_proto::v1::{
    Capabilities, ControllerFrame, DescribeRequest, HarnessDescriptor, Mediation, Resumability,
    ToolCall,
};
use agentsessions_shells::harness::{Harness, HarnessError, HarnessService, Sink, StartInfo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tonic::{Request, Response, Status, Streaming};

/// The caller's trace: W3C ids a client would send.
pub const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The `traceparent` of a sampled call from [`CALLER_SPAN`].
pub fn caller_traceparent() -> String {
    format!("00-{TRACE_ID}-{CALLER_SPAN}-01")
}

/// Lower-case hex of span or trace id bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span as the test reads it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub name: String,
    pub trace: String,
    pub id: String,
    pub parent: String,
    pub kind: i32,
    pub attrs: BTreeMap<String, String>,
}

impl Seen {
    fn of(span: &Span) -> Self {
        let attrs = span
            .attributes
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Value::StringValue(s)) => s.clone(),
                    Some(Value::IntValue(i)) => i.to_string(),
                    Some(Value::BoolValue(b)) => b.to_string(),
                    Some(Value::DoubleValue(d)) => d.to_string(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), v)
            })
            .collect();
        Self {
            name: span.name.clone(),
            trace: hex(&span.trace_id),
            id: hex(&span.span_id),
            parent: hex(&span.parent_span_id),
            kind: span.kind,
            attrs,
        }
    }

    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }
}

/// Collects every exported span (or, [`Receiver::counting`], counts them).
#[derive(Clone, Default)]
pub struct Receiver {
    spans: Arc<Mutex<Vec<Seen>>>,
    service_names: Arc<Mutex<Vec<String>>>,
    count_only: bool,
    counted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Receiver {
    /// A receiver that only counts spans, as cheap as a receiver can be.
    pub fn counting() -> Self {
        Self {
            count_only: true,
            ..Self::default()
        }
    }

    /// Spans received so far.
    pub fn count(&self) -> usize {
        self.counted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Serves the receiver on a free loopback port; returns its endpoint.
    pub async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = TraceServiceServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        format!("http://{addr}")
    }

    /// The spans of `trace` received so far.
    pub fn trace(&self, trace: &str) -> Vec<Seen> {
        let spans = self.spans.lock().unwrap();
        spans.iter().filter(|s| s.trace == trace).cloned().collect()
    }

    /// Every span received so far.
    pub fn all(&self) -> Vec<Seen> {
        self.spans.lock().unwrap().clone()
    }

    /// The `service.name` of every resource received.
    pub fn service_names(&self) -> Vec<String> {
        self.service_names.lock().unwrap().clone()
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        for rs in request.into_inner().resource_spans {
            let n: usize = rs.scope_spans.iter().map(|ss| ss.spans.len()).sum();
            self.counted
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            if self.count_only {
                continue;
            }
            if let Some(resource) = &rs.resource {
                for kv in &resource.attributes {
                    if kv.key == "service.name"
                        && let Some(Value::StringValue(s)) =
                            kv.value.as_ref().and_then(|v| v.value.as_ref())
                    {
                        self.service_names.lock().unwrap().push(s.clone());
                    }
                }
            }
            let mut spans = self.spans.lock().unwrap();
            for ss in rs.scope_spans {
                spans.extend(ss.spans.iter().map(Seen::of));
            }
        }
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A harness that asks the host for one model call and one host-run tool
/// call (`echo_args`), then completes.
pub struct Traced;

/// The model the traced harness asks for.
pub const MODEL: &str = "gpt-test";

/// The name the daemon knows the traced harness by.
pub const HARNESS: &str = "traced";

#[tonic::async_trait]
impl Harness for Traced {
    fn describe(&self) -> HarnessDescriptor {
        HarnessDescriptor {
            id: HARNESS.into(),
            version: "1".into(),
            capabilities: Some(Capabilities {
                resumability: Resumability::StatelessReplay as i32,
                fork_safe: true,
                ..Capabilities::default()
            }),
            ..HarnessDescriptor::default()
        }
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let model = agentsessions_shells::harness::ModelRequest::new(MODEL, start.inputs.clone());
        sink.model(model).await?;
        sink.tool_call(ToolCall {
            id: "call-1".into(),
            tool: "echo_args".into(),
            args: None,
            mediation: Mediation::ControllerMediated as i32,
            idempotency_key: "traced-call-1".into(),
        })
        .await?;
        Ok(())
    }
}

/// [`Traced`] served over gRPC, noting each Connect's `traceparent`.
#[derive(Clone)]
pub struct Noting {
    inner: HarnessService<Traced>,
    pub traceparents: Arc<Mutex<Vec<String>>>,
}

impl Noting {
    /// Serves the harness on a free loopback port; returns its address.
    pub async fn start() -> (Self, String) {
        let me = Self {
            inner: HarnessService::new(Arc::new(Traced)),
            traceparents: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(HarnessServer::new(me.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (me, format!("http://{addr}"))
    }

    pub fn seen(&self) -> Vec<String> {
        self.traceparents.lock().unwrap().clone()
    }
}

#[tonic::async_trait]
impl HarnessRpc for Noting {
    async fn describe(
        &self,
        request: Request<DescribeRequest>,
    ) -> Result<Response<HarnessDescriptor>, Status> {
        self.inner.describe(request).await
    }

    type ConnectStream = <HarnessService<Traced> as HarnessRpc>::ConnectStream;

    async fn connect(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        if let Some(tp) = request.metadata().get("traceparent") {
            let tp = tp.to_str().unwrap_or("not ascii").to_owned();
            self.traceparents.lock().unwrap().push(tp);
        }
        self.inner.connect(request).await
    }
}
