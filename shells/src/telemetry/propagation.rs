//! Trace context across the daemon's edges: the caller's W3C
//! `traceparent` adopted as a span's parent, and the current span's headers
//! for a request that leaves the daemon (Harness.Connect, a model call).

use tracing::Span;

/// The `tracing` target of the spans the trace exporter takes.
pub const TARGET: &str = "agentsessions::trace";

/// Makes the caller's W3C `traceparent` (and `tracestate`) in `metadata`
/// the parent of `span`, when a trace exporter is installed.
pub fn adopt_parent(span: &Span, metadata: &tonic::metadata::MetadataMap) {
    #[cfg(not(madsim))]
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        if span.is_disabled() || metadata.get("traceparent").is_none() {
            return;
        }
        let get = |k: &str| {
            metadata
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let carrier: std::collections::HashMap<String, String> = ["traceparent", "tracestate"]
            .into_iter()
            .filter_map(|k| Some((k.to_owned(), get(k)?)))
            .collect();
        let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
        let _ = span.set_parent(cx);
    }
    #[cfg(madsim)]
    let _ = (span, metadata);
}

/// The W3C trace headers (`traceparent`, `tracestate`) of the current
/// span, for a request that leaves the daemon (Harness.Connect, a model
/// call); empty when nothing is traced.
pub fn outgoing_headers() -> Vec<(String, String)> {
    #[cfg(not(madsim))]
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let span = Span::current();
        if span.is_disabled() {
            return Vec::new();
        }
        let cx = span.context();
        let mut carrier: std::collections::HashMap<String, String> =
            std::collections::HashMap::new();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut carrier));
        let mut out: Vec<_> = carrier.into_iter().collect();
        out.sort();
        out
    }
    #[cfg(madsim)]
    Vec::new()
}
