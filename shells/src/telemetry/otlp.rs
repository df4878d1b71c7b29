//! OTLP/gRPC export of the daemon's trace spans (`--otlp-endpoint`).
//!
//! Invariant: export never blocks a turn. A span that ends is pushed on a
//! bounded buffer under a short lock (no thread is woken per span); a full
//! buffer, a failed export or a
//! collector that is gone drops spans, and every dropped span is counted
//! in [`SPANS_DROPPED`] (`agentsessions_trace_spans_dropped_total`). The
//! exporter runs on a thread of its own with its own small runtime, so a
//! slow collector holds neither the drive loop nor a tokio worker.

use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

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
/// The bound on a flush or shutdown waiting for the export thread.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The endpoint is not a plaintext http URL.
    #[error(
        "otlp endpoint {0:?}: want http://host:port (TLS to the collector is not supported; run a collector beside the daemon)"
    )]
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
        // Plaintext only: an https collector would need roots and client
        // certificates of its own, and a silent TLS failure would only
        // show as dropped spans.
        if !endpoint.starts_with("http://") || endpoint.len() == "http://".len() {
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
            .with_filter(
                Targets::new().with_target(super::propagation::TARGET, tracing::Level::INFO),
            )
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

/// The spans waiting for export and the requests to the export thread.
#[derive(Default)]
struct State {
    spans: Vec<SpanData>,
    resource: Option<Resource>,
    /// Flushes asked for, and the last one the thread has done.
    flushes_asked: u64,
    flushes_done: u64,
    shutdown: bool,
    stopped: bool,
}

/// What the span processor and the export thread share. A span's end only
/// takes the lock and pushes: the thread is woken when a batch is full or
/// something is asked, not per span, and otherwise wakes every [`LINGER`].
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the export thread.
    work: Condvar,
    /// Wakes those waiting for a flush or the stop.
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The span processor: a bounded buffer in front of the export thread.
struct Queue {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

impl Queue {
    fn start(endpoint: String) -> Result<Self, OtlpError> {
        let shared = Arc::new(Shared::default());
        let (built_tx, built_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || export_thread(&endpoint, &shared, &built_tx)
            })
            .map_err(|e| OtlpError::Build(e.to_string()))?;
        match built_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                shared,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(OtlpError::Build("export thread ended".into())),
        }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        let mut state = self.shared.lock();
        if state.spans.len() >= QUEUE || state.stopped {
            drop(state);
            SPANS_DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        state.spans.push(span);
        let full = state.spans.len() == BATCH;
        drop(state);
        if full {
            self.shared.work.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let mut state = self.shared.lock();
        state.flushes_asked += 1;
        let asked = state.flushes_asked;
        self.shared.work.notify_one();
        let (state, _) = self
            .shared
            .done
            .wait_timeout_while(state, ACK_TIMEOUT, |s| s.flushes_done < asked && !s.stopped)
            .unwrap_or_else(PoisonError::into_inner);
        if state.flushes_done >= asked {
            Ok(())
        } else if state.stopped {
            Err(OTelSdkError::AlreadyShutdown)
        } else {
            Err(OTelSdkError::Timeout(ACK_TIMEOUT))
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let mut state = self.shared.lock();
        state.shutdown = true;
        self.shared.work.notify_one();
        let (state, _) = self
            .shared
            .done
            .wait_timeout_while(state, timeout.min(ACK_TIMEOUT), |s| !s.stopped)
            .unwrap_or_else(PoisonError::into_inner);
        if !state.stopped {
            return Err(OTelSdkError::Timeout(timeout));
        }
        drop(state);
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.shared.lock().resource = Some(resource.clone());
        self.shared.work.notify_one();
    }
}

/// Builds the exporter (reporting the outcome on `built`), then exports
/// what is buffered whenever a batch is full, a flush is asked or
/// [`LINGER`] passes, until shut down.
fn export_thread(endpoint: &str, shared: &Shared, built: &SyncSender<Result<(), OtlpError>>) {
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
    let mut state = shared.lock();
    loop {
        (state, _) = shared
            .work
            .wait_timeout_while(state, LINGER, |s| {
                s.spans.len() < BATCH
                    && s.flushes_done == s.flushes_asked
                    && !s.shutdown
                    && s.resource.is_none()
            })
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(resource) = state.resource.take() {
            exporter.set_resource(&resource);
        }
        let mut spans = std::mem::replace(&mut state.spans, Vec::with_capacity(BATCH));
        let (flushed, shutdown) = (state.flushes_asked, state.shutdown);
        drop(state);
        while !spans.is_empty() {
            let rest = spans.split_off(spans.len().min(BATCH));
            let n = spans.len() as u64;
            let sent = runtime.block_on(async {
                tokio::time::timeout(EXPORT_TIMEOUT * 2, exporter.export(spans)).await
            });
            if !matches!(sent, Ok(Ok(()))) {
                SPANS_DROPPED.fetch_add(n, Ordering::Relaxed);
            }
            spans = rest;
        }
        if shutdown {
            let _ = exporter.shutdown();
        }
        state = shared.lock();
        debug_assert!(state.flushes_done <= flushed, "flushes are done in order");
        state.flushes_done = flushed;
        state.stopped = shutdown;
        shared.done.notify_all();
        if shutdown {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{Span as _, Tracer as _};

    use super::*;

    #[test]
    fn only_plaintext_http_endpoints_are_taken() {
        for bad in ["https://collector:4317", "127.0.0.1:4317", "http://", ""] {
            let err = Otlp::start(bad).unwrap_err();
            assert!(matches!(err, OtlpError::Endpoint(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn a_full_buffer_drops_and_counts_without_waiting_for_the_exporter() {
        // A collector that never answers (connections wait in the backlog):
        // the first batch's export hangs, so what follows fills the buffer.
        let collector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let queue = Queue::start(format!("http://{}", collector.local_addr().unwrap())).unwrap();
        let shared = Arc::clone(&queue.shared);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .build();
        let tracer = provider.tracer("test");
        let end = |n: usize| {
            for _ in 0..n {
                tracer.start("span").end();
            }
        };
        end(BATCH);
        for _ in 0..1000 {
            if shared.lock().spans.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(shared.lock().spans.is_empty(), "the thread took the batch");

        let before = SPANS_DROPPED.load(Ordering::Relaxed);
        let started = std::time::Instant::now();
        end(QUEUE + 10);
        let dropped = SPANS_DROPPED.load(Ordering::Relaxed) - before;
        assert!(
            started.elapsed() < EXPORT_TIMEOUT,
            "ending spans never waits"
        );
        assert_eq!(dropped, 10, "exactly the spans past the bound");
        assert_eq!(shared.lock().spans.len(), QUEUE);
        // Gone for good: the hung export fails, and so does the rest.
        drop(collector);
        let _ = provider.shutdown();
    }
}
