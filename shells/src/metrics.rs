//! Prometheus metrics of a daemon, exposed at `/metrics` (Prometheus text
//! format 0.0.4, encoded by `prometheus-client`).
//!
//! Invariant: every label value comes from a closed set — an RPC method
//! name, a status code name — so the number of series is bounded whatever
//! the traffic. Session ids, principals, content and arguments are never
//! labels (`tests/metrics` checks the exposition for them).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One RPC's method and outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// The RPC method name, e.g. `Exec` (unique across both services).
    pub method: &'static str,
    /// The gRPC status code name, e.g. `OK`, `NOT_FOUND`.
    pub code: &'static str,
}

/// One RPC's method.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// The RPC method name.
    pub method: &'static str,
}

/// The daemon's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: Family<MethodLabels, Histogram>,
}

/// Latency buckets from 100 µs to about 54 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 2.0, 20)
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("agentsessions");
        let rpc_requests = Family::<RpcLabels, Counter>::default();
        registry.register(
            "rpc_requests",
            "RPCs finished, by method and gRPC status code",
            rpc_requests.clone(),
        );
        let rpc_duration = Family::<MethodLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(latency_buckets())
        });
        registry.register(
            "rpc_duration_seconds",
            "RPC latency from arrival to the final status, by method",
            rpc_duration.clone(),
        );
        Self {
            registry,
            rpc_requests,
            rpc_duration,
        }
    }
}

impl Metrics {
    /// Counts one finished RPC.
    pub fn rpc_finished(&self, method: &'static str, code: &'static str, took: Duration) {
        self.rpc_requests
            .get_or_create(&RpcLabels { method, code })
            .inc();
        self.rpc_duration
            .get_or_create(&MethodLabels { method })
            .observe(took.as_secs_f64());
    }

    /// The exposition text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_rpcs_are_counted_by_method_and_code() {
        let m = Metrics::default();
        m.rpc_finished("Exec", "OK", Duration::from_millis(3));
        m.rpc_finished("Exec", "OK", Duration::from_millis(5));
        m.rpc_finished("GetSession", "NOT_FOUND", Duration::from_micros(200));
        let text = m.encode();
        assert!(
            text.contains("agentsessions_rpc_requests_total{method=\"Exec\",code=\"OK\"} 2\n"),
            "{text}"
        );
        assert!(text.contains(
            "agentsessions_rpc_requests_total{method=\"GetSession\",code=\"NOT_FOUND\"} 1\n"
        ));
        assert!(text.contains("agentsessions_rpc_duration_seconds_count{method=\"Exec\"} 2\n"));
    }
}
