//! OTLP/gRPC export of the daemon's trace spans (`--otlp-endpoint`).
//!
//! Invariant: export never blocks a turn. A span that ends is handed to a
//! bounded queue with `try_send`; a full queue, a failed export or a
//! collector that is gone drops spans, and every dropped span is counted
//! in [`SPANS_DROPPED`] (`agentsessions_trace_spans_dropped_total`). The
//! exporter runs on a thread of its own with its own small runtime, so a
//! slow collector holds neither the drive loop nor a tokio worker.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

use crate::metrics::SPANS_DROPPED;

/// Ended spans waiting for export; past this, spans are dropped.
pub const QUEUE: usize = 2048;
/// Spans per export request.
const BATCH: usize = 512;
/// How long a span may wait for a batch to fill.
const LINGER: Duration = Duration::from_millis(200);
/// The bound on one export request (connect included).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// The bound on a flush or shutdown waiting for the exporter.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The endpoint is not an http(s) URL.
    #[error("otlp endpoint {0:?}: want http://host:port or https://host:port")]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("otlp exporter: {0}")]
    Build(String),
}

/// An installed span exporter; [`Otlp::shutdown`] flushes what is queued.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkTracerProvider,
}

impl Otlp {
    /// Starts exporting to `endpoint` (e.g. `http://127.0.0.1:4317`) and
    /// sets the W3C trace-context propagator for `traceparent` in and out.
    pub fn start(endpoint: &str) -> Result<Self, OtlpError> {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(OtlpError::Endpoint(endpoint.to_owned()));
        }
        let processor = Queue::start(endpoint.to_owned())?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name("agentsessionsd")
                    .build(),
            )
            .build();
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        Ok(Self { provider })
    }

    /// The subscriber layer that turns the daemon's trace spans (and only
    /// those) into exported spans.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("agentsessionsd");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(Targets::new().with_target(super::trace::TARGET, tracing::Level::INFO))
    }

    /// Exports what is queued now.
    pub fn flush(&self) -> OTelSdkResult {
        self.provider.force_flush()
    }

    /// Exports what is queued and stops the exporter.
    pub fn shutdown(&self) -> OTelSdkResult {
        self.provider.shutdown()
    }
}

/// What the span processor tells the export thread.
enum Msg {
    Span(Box<SpanData>),
    Resource(Resource),
    Flush(SyncSender<()>),
    Shutdown(SyncSender<()>),
}

/// The span processor: a bounded queue in front of the export thread.
#[derive(Debug)]
struct Queue {
    tx: SyncSender<Msg>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Queue {
    fn start(endpoint: String) -> Result<Self, OtlpError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let (built_tx, built_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_thread(&endpoint, &rx, &built_tx))
            .map_err(|e| OtlpError::Build(e.to_string()))?;
        match built_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                tx,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(OtlpError::Build("export thread ended".into())),
        }
    }

    /// Sends a control message and waits (bounded) for its answer.
    fn ask(&self, make: fn(SyncSender<()>) -> Msg) -> OTelSdkResult {
        let (ack, acked) = std::sync::mpsc::sync_channel(1);
        // A control message waits for room: the thread drains the queue
        // within an export timeout.
        self.tx
            .send(make(ack))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        acked
            .recv_timeout(ACK_TIMEOUT)
            .map_err(|_| OTelSdkError::Timeout(ACK_TIMEOUT))
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                SPANS_DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Msg::Flush)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        let asked = self.ask(Msg::Shutdown);
        let thread = self.thread.lock().map(|mut t| t.take());
        if let (Ok(()), Ok(Some(thread))) = (&asked, thread) {
            let _ = thread.join();
        }
        asked
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Before any span: the queue is empty, so this cannot fail for room.
        let _ = self.tx.try_send(Msg::Resource(resource.clone()));
    }
}

/// Builds the exporter (reporting the outcome on `built`), then exports
/// batches of up to [`BATCH`] spans, each at most [`LINGER`] old, until
/// shut down or disconnected.
fn export_thread(endpoint: &str, rx: &Receiver<Msg>, built: &SyncSender<Result<(), OtlpError>>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = built.send(Err(OtlpError::Build(e.to_string())));
            return;
        }
    };
    // The tonic channel connects lazily, inside this runtime.
    let exporter = runtime.block_on(async {
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
    });
    let mut exporter = match exporter {
        Ok(exporter) => {
            let _ = built.send(Ok(()));
            exporter
        }
        Err(e) => {
            let _ = built.send(Err(OtlpError::Build(e.to_string())));
            return;
        }
    };
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
    let mut oldest: Option<Instant> = None;
    let send = |batch: &mut Vec<SpanData>, exporter: &opentelemetry_otlp::SpanExporter| {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::replace(batch, Vec::with_capacity(BATCH));
        let n = spans.len() as u64;
        let sent = runtime.block_on(async {
            tokio::time::timeout(EXPORT_TIMEOUT * 2, exporter.export(spans)).await
        });
        if !matches!(sent, Ok(Ok(()))) {
            SPANS_DROPPED.fetch_add(n, Ordering::Relaxed);
        }
    };
    loop {
        let wait = oldest.map_or(Duration::from_secs(3600), |t| {
            LINGER.saturating_sub(t.elapsed())
        });
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(span)) => {
                batch.push(*span);
                oldest.get_or_insert_with(Instant::now);
                if batch.len() >= BATCH {
                    send(&mut batch, &exporter);
                    oldest = None;
                }
            }
            Ok(Msg::Resource(resource)) => exporter.set_resource(&resource),
            Ok(Msg::Flush(ack)) => {
                send(&mut batch, &exporter);
                oldest = None;
                let _ = ack.send(());
            }
            Ok(Msg::Shutdown(ack)) => {
                send(&mut batch, &exporter);
                let _ = exporter.shutdown();
                let _ = ack.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&mut batch, &exporter);
                oldest = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&mut batch, &exporter);
                return;
            }
        }
        debug_assert!(batch.len() < BATCH, "a full batch is sent at once");
    }
}
