//! Prometheus metrics of a daemon, exposed at `/metrics` (Prometheus text
//! format 0.0.4, encoded by `prometheus-client`).
//!
//! Invariant: every label value comes from a bounded set — an RPC method,
//! a status code, an outcome or kind from a closed list, or a name (harness,
//! model, tool) passed through [`Bounded`] — so the number of series is
//! bounded whatever the traffic. Session ids, principals, content and
//! arguments are never labels (`tests/daemon_metrics` checks the exposition).
//!
//! Every series whose labels are known in advance exists from the start
//! at zero — each RPC method (and, with the console, each console action)
//! with code `OK`, each limit bound — and a name (harness, model, tool)
//! brings all its outcome, kind and reason series at once when first seen,
//! so a rate or a ratio reads 0 instead of "no data".

mod bound;
mod bounded;
mod journal;
mod notify;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use bound::Bound;
pub use bounded::{Bounded, OTHER};
pub use journal::JournalMeter;
pub use notify::NotifyMeter;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use agentsessions_machine::vocab::TurnOutcome;

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Spans the trace exporter dropped, process-wide: the exporter is
/// installed with the process's subscriber, before any daemon exists.
pub static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);

/// [`SPANS_DROPPED`] as a counter of every registry.
#[derive(Debug)]
struct SpansDropped;

impl TypedMetric for SpansDropped {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for SpansDropped {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let dropped = SPANS_DROPPED.load(Ordering::Relaxed);
        encoder.encode_counter::<NoLabelSet, _, u64>(&dropped, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The server label of a tool name: the `SERVER` of `SERVER__TOOL`, else
/// `host` (a built-in, or the overflow label).
fn server_of(tool: &str) -> String {
    match tool.split_once("__") {
        Some((server, _)) if !server.is_empty() => server.to_owned(),
        _ => "host".to_owned(),
    }
}

/// Distinct names kept per peer-chosen label (harness, model, tool).
const NAMES_PER_LABEL: usize = 128;

/// Every gRPC method of the Sessions, HarnessRegistry and Tools services (a
/// test checks this against the contract).
pub const RPC_METHODS: [&str; 16] = [
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
    "RegisterHarness",
    "GetHarness",
    "ListHarnesses",
    "RetireHarness",
    "ListTools",
];

/// Every limit bound, as [`Metrics::limit_refused`] is told it.
const BOUNDS: [Bound; 6] = [
    Bound::PartsPerMessage,
    Bound::RequestElements,
    Bound::PrincipalStreams,
    Bound::PrincipalCalls,
    Bound::ConnectionCalls,
    Bound::RequestMemory,
];

/// Fails to compile when a bound is added without listing it in [`BOUNDS`].
const _: fn(Bound) = |b| match b {
    Bound::PartsPerMessage
    | Bound::RequestElements
    | Bound::PrincipalStreams
    | Bound::PrincipalCalls
    | Bound::ConnectionCalls
    | Bound::RequestMemory => {}
};

/// Every turn outcome, as [`Metrics::turn_ended`] is told it.
const TURN_OUTCOMES: [TurnOutcome; 4] = [
    TurnOutcome::Completed,
    TurnOutcome::Parked,
    TurnOutcome::Failed,
    TurnOutcome::Canceled,
];

/// Fails to compile when an outcome is added without listing it above.
const _: fn(TurnOutcome) = |o| match o {
    TurnOutcome::Completed | TurnOutcome::Parked | TurnOutcome::Failed | TurnOutcome::Canceled => {}
};

/// Every reason [`Metrics::dial_failed`] is told.
const DIAL_REASONS: [&str; 3] = ["unavailable", "timeout", "error"];
const MODEL_OUTCOMES: [&str; 2] = ["ok", "error"];
const TOKEN_KINDS: [&str; 3] = ["input", "output", "reasoning"];
const TOOL_OUTCOMES: [&str; 3] = ["ok", "error", "failed"];

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    harness: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HarnessLabels {
    harness: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    /// The MCP server of a `SERVER__TOOL` name; `host` for a built-in.
    server: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    bound: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DialLabels {
    harness: String,
    reason: &'static str,
}

/// Latency buckets from 100 µs to about 54 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 2.0, 20)
}

fn latency() -> Histogram {
    Histogram::new(latency_buckets())
}

/// The daemon's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Each MCP server: 1 while connected.
    mcp_up: Family<ServerLabels, Gauge>,
    /// The same, for `/readyz` to name the servers that are down.
    mcp_state: std::sync::Mutex<std::collections::BTreeMap<String, bool>>,
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: Family<MethodLabels, Histogram>,
    turns: Family<TurnLabels, Counter>,
    turn_duration: Family<HarnessLabels, Histogram>,
    model_duration: Family<ModelLabels, Histogram>,
    model_tokens: Family<TokenLabels, Counter>,
    tool_executions: Family<ToolLabels, Counter>,
    dial_failures: Family<DialLabels, Counter>,
    limit_refusals: Family<LimitLabels, Counter>,
    request_bytes: Gauge,
    operations_in_flight: Gauge,
    approvals_pending: Gauge,
    record_cache_records: Gauge,
    journal: JournalMeter,
    notify: NotifyMeter,
    awaiting: Mutex<Awaiting>,
    harnesses: Bounded,
    models: Bounded,
    tools: Bounded,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("agentsessions");
        let rpc_requests = Family::<RpcLabels, Counter>::default();
        r.register(
            "rpc_requests",
            "RPCs finished, by method and gRPC status code",
            rpc_requests.clone(),
        );
        let rpc_duration = Family::<MethodLabels, Histogram>::new_with_constructor(latency);
        r.register(
            "rpc_duration_seconds",
            "RPC latency from arrival to the final status, by method",
            rpc_duration.clone(),
        );
        let turns = Family::<TurnLabels, Counter>::default();
        r.register(
            "turns",
            "Live turns (Exec or Resume runs) ended, by harness and outcome: completed, parked, failed, canceled",
            turns.clone(),
        );
        let turn_duration = Family::<HarnessLabels, Histogram>::new_with_constructor(latency);
        r.register(
            "turn_duration_seconds",
            "From a turn's Start frame to its end, by harness",
            turn_duration.clone(),
        );
        let journal = JournalMeter::default();
        journal.register(&mut r);
        let notify = NotifyMeter::default();
        notify.register(&mut r);
        let model_duration = Family::<ModelLabels, Histogram>::new_with_constructor(latency);
        r.register(
            "model_call_duration_seconds",
            "Model provider calls, by model and outcome (ok, error)",
            model_duration.clone(),
        );
        let model_tokens = Family::<TokenLabels, Counter>::default();
        r.register(
            "model_tokens",
            "Tokens from committed USAGE records, by model and kind (input, output, reasoning)",
            model_tokens.clone(),
        );
        let tool_executions = Family::<ToolLabels, Counter>::default();
        r.register(
            "tool_calls",
            "Host-executed tool calls, by server (host for a built-in), tool and outcome (ok, error, failed)",
            tool_executions.clone(),
        );
        let dial_failures = Family::<DialLabels, Counter>::default();
        r.register(
            "harness_dial_failures",
            "Failed harness connections and Describes, by harness and reason (unavailable, timeout, error)",
            dial_failures.clone(),
        );
        let limit_refusals = Family::<LimitLabels, Counter>::default();
        r.register(
            "limit_refusals",
            "Calls refused by a bound on what callers may make the daemon hold, by bound (see docs/security.md)",
            limit_refusals.clone(),
        );
        let request_bytes = Gauge::default();
        r.register(
            "request_bytes_in_flight",
            "Request bytes held by calls in flight (bounded by --request-memory-bytes)",
            request_bytes.clone(),
        );
        let operations_in_flight = Gauge::default();
        r.register(
            "operations_in_flight",
            "Client operations the host machine holds",
            operations_in_flight.clone(),
        );
        let mcp_up = Family::<ServerLabels, Gauge>::default();
        r.register(
            "mcp_server_up",
            "Each --mcp server: 1 while connected, 0 while down (its tools get error receipts)",
            mcp_up.clone(),
        );
        let approvals_pending = Gauge::default();
        r.register(
            "approvals_pending",
            "Sessions waiting for an approval decision",
            approvals_pending.clone(),
        );
        let record_cache_records = Gauge::default();
        r.register(
            "record_cache_records",
            "Journal records held by the record cache",
            record_cache_records.clone(),
        );
        r.register(
            "trace_spans_dropped",
            "Trace spans dropped because the exporter could not keep up or reach its collector",
            SpansDropped,
        );
        let m = Self {
            registry: r,
            rpc_requests,
            rpc_duration,
            turns,
            turn_duration,
            model_duration,
            model_tokens,
            tool_executions,
            dial_failures,
            limit_refusals,
            request_bytes,
            operations_in_flight,
            approvals_pending,
            mcp_up,
            mcp_state: std::sync::Mutex::default(),
            record_cache_records,
            journal,
            notify,
            awaiting: Mutex::new(Awaiting::default()),
            harnesses: Bounded::new(NAMES_PER_LABEL),
            models: Bounded::new(NAMES_PER_LABEL),
            tools: Bounded::new(NAMES_PER_LABEL),
        };
        m.expect_methods(&RPC_METHODS);
        for bound in BOUNDS {
            zero(
                &m.limit_refusals,
                &LimitLabels {
                    bound: bound.name().0,
                },
            );
        }
        m
    }
}

/// Sessions waiting for a decision; the gauge is the size of `waiting`.
#[derive(Debug, Default)]
struct Awaiting {
    waiting: BTreeSet<String>,
    /// While the boot count runs: sessions a decision moved since it
    /// began, whose state the count (read earlier, maybe) must not undo.
    moved: Option<BTreeSet<String>>,
}

/// Outcome of a host-executed tool call, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// A result that is not an error.
    Ok,
    /// A result marked as an error (the tool ran and failed).
    Error,
    /// The executor gave no result at all.
    Failed,
}

impl Metrics {
    /// Creates the series of `methods` (each with code `OK`) at zero, so
    /// they are scraped before the first call.
    pub fn expect_methods(&self, methods: &[&'static str]) {
        for &method in methods {
            zero(&self.rpc_requests, &RpcLabels { method, code: "OK" });
            zero(&self.rpc_duration, &MethodLabels { method });
        }
    }

    /// The label of harness `name`; its first time, with every series a
    /// harness has, at zero.
    fn harness(&self, name: &str) -> String {
        let (harness, new) = self.harnesses.label_new(name);
        if new {
            for outcome in TURN_OUTCOMES {
                zero(
                    &self.turns,
                    &TurnLabels {
                        harness: harness.clone(),
                        outcome: outcome.as_str(),
                    },
                );
            }
            zero(
                &self.turn_duration,
                &HarnessLabels {
                    harness: harness.clone(),
                },
            );
            for reason in DIAL_REASONS {
                zero(
                    &self.dial_failures,
                    &DialLabels {
                        harness: harness.clone(),
                        reason,
                    },
                );
            }
        }
        harness
    }

    /// The label of model `name`; its first time, with every series a
    /// model has, at zero.
    fn model(&self, name: &str) -> String {
        let (model, new) = self.models.label_new(name);
        if new {
            for outcome in MODEL_OUTCOMES {
                zero(
                    &self.model_duration,
                    &ModelLabels {
                        model: model.clone(),
                        outcome,
                    },
                );
            }
            for kind in TOKEN_KINDS {
                zero(
                    &self.model_tokens,
                    &TokenLabels {
                        model: model.clone(),
                        kind,
                    },
                );
            }
        }
        model
    }

    /// The label of tool `name`; its first time, with every outcome at zero.
    fn tool(&self, name: &str) -> String {
        let (tool, new) = self.tools.label_new(name);
        if new {
            for outcome in TOOL_OUTCOMES {
                zero(
                    &self.tool_executions,
                    &ToolLabels {
                        server: server_of(&tool),
                        tool: tool.clone(),
                        outcome,
                    },
                );
            }
        }
        tool
    }

    /// Counts one call refused by `bound`.
    pub fn limit_refused(&self, bound: &'static str) {
        self.limit_refusals
            .get_or_create(&LimitLabels { bound })
            .inc();
    }

    /// Sets the request bytes held by calls in flight.
    pub fn request_bytes_in_flight(&self, bytes: usize) {
        self.request_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts one finished RPC.
    pub fn rpc_finished(&self, method: &'static str, code: &'static str, took: Duration) {
        self.rpc_requests
            .get_or_create(&RpcLabels { method, code })
            .inc();
        self.rpc_duration
            .get_or_create(&MethodLabels { method })
            .observe(took.as_secs_f64());
    }

    /// Counts one ended turn.
    pub fn turn_ended(&self, harness: &str, outcome: &'static str, took: Duration) {
        debug_assert!(
            TURN_OUTCOMES.iter().any(|o| o.as_str() == outcome),
            "unlisted turn outcome {outcome}"
        );
        let harness = self.harness(harness);
        self.turns
            .get_or_create(&TurnLabels {
                harness: harness.clone(),
                outcome,
            })
            .inc();
        self.turn_duration
            .get_or_create(&HarnessLabels { harness })
            .observe(took.as_secs_f64());
    }

    /// MCP server `server` is up or down now.
    pub fn mcp_server(&self, server: &str, up: bool) {
        // Server names come from the operator's flags: a bounded set.
        self.mcp_up
            .get_or_create(&ServerLabels {
                server: server.to_owned(),
            })
            .set(i64::from(up));
        let mut state = self.mcp_state.lock().unwrap_or_else(|p| p.into_inner());
        state.insert(server.to_owned(), up);
    }

    /// The MCP servers that are down, by name.
    pub fn mcp_down(&self) -> Vec<String> {
        let state = self.mcp_state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .iter()
            .filter(|(_, up)| !**up)
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// `session` waits for a decision, or no longer does (the machine's
    /// signal).
    pub fn awaiting(&self, session: &str, awaiting: bool) {
        let mut a = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(moved) = a.moved.as_mut() {
            moved.insert(session.to_owned());
        }
        if awaiting {
            a.waiting.insert(session.to_owned());
        } else {
            a.waiting.remove(session);
        }
        self.approvals_pending.set(count(a.waiting.len()));
    }

    /// The boot count of waiting sessions begins: from now on a signal's
    /// word on a session outranks what the count read.
    pub fn boot_count_started(&self) {
        let mut a = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        a.moved = Some(BTreeSet::new());
    }

    /// The boot count read `session` as waiting.
    pub fn counted_awaiting(&self, session: &str) {
        let mut a = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        if a.moved.as_ref().is_some_and(|m| m.contains(session)) {
            return;
        }
        a.waiting.insert(session.to_owned());
        self.approvals_pending.set(count(a.waiting.len()));
    }

    /// The boot count is over; signals alone move the gauge again.
    pub fn boot_count_finished(&self) {
        let mut a = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        a.moved = None;
    }

    /// One finished model call.
    pub fn model_call(&self, model: &str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.model_duration
            .get_or_create(&ModelLabels {
                model: self.model(model),
                outcome,
            })
            .observe(took.as_secs_f64());
    }

    /// Tokens of one committed USAGE record.
    pub fn tokens(&self, model: &str, input: i64, output: i64, reasoning: i64) {
        let model = self.model(model);
        for (kind, n) in [
            ("input", input),
            ("output", output),
            ("reasoning", reasoning),
        ] {
            // A negative count (a harness's bug) adds nothing.
            if let Ok(n) = u64::try_from(n)
                && n > 0
            {
                self.model_tokens
                    .get_or_create(&TokenLabels {
                        model: model.clone(),
                        kind,
                    })
                    .inc_by(n);
            }
        }
    }

    /// One host-executed tool call.
    pub fn tool_executed(&self, tool: &str, outcome: ToolOutcome) {
        let outcome = match outcome {
            ToolOutcome::Ok => "ok",
            ToolOutcome::Error => "error",
            ToolOutcome::Failed => "failed",
        };
        let tool = self.tool(tool);
        self.tool_executions
            .get_or_create(&ToolLabels {
                server: server_of(&tool),
                tool,
                outcome,
            })
            .inc();
    }

    /// One failed dial or Describe of `harness`.
    pub fn dial_failed(&self, harness: &str, reason: &'static str) {
        debug_assert!(
            DIAL_REASONS.contains(&reason),
            "unlisted dial reason {reason}"
        );
        self.dial_failures
            .get_or_create(&DialLabels {
                harness: self.harness(harness),
                reason,
            })
            .inc();
    }

    /// One drive loop's operations in flight and record cache size moved
    /// from `before` to `after` (each as that loop last reported it): the
    /// gauges are sums over every loop, so each adds only its own change.
    pub fn host_gauges(&self, before: (usize, usize), after: (usize, usize)) {
        self.operations_in_flight
            .inc_by(count(after.0) - count(before.0));
        self.record_cache_records
            .inc_by(count(after.1) - count(before.1));
    }

    /// The journal's half, handed to the store.
    pub fn journal(&self) -> JournalMeter {
        self.journal.clone()
    }

    /// The expiry and notification figures, for the deliverer.
    pub fn notify(&self) -> NotifyMeter {
        self.notify.clone()
    }

    /// The exposition text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// Creates the series of `labels` in `family`, at zero.
fn zero<L, M, C>(family: &Family<L, M, C>, labels: &L)
where
    L: Clone + std::hash::Hash + Eq,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    drop(family.get_or_create(labels));
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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

    #[test]
    fn known_series_are_scraped_at_zero_before_any_call() {
        let m = Metrics::default();
        m.expect_methods(&["console.view"]);
        let text = m.encode();
        for method in RPC_METHODS.iter().chain(&["console.view"]) {
            let ok =
                format!("agentsessions_rpc_requests_total{{method=\"{method}\",code=\"OK\"}} 0\n");
            assert!(text.contains(&ok), "no {ok:?} in\n{text}");
            let count =
                format!("agentsessions_rpc_duration_seconds_count{{method=\"{method}\"}} 0\n");
            assert!(text.contains(&count), "no {count:?}");
        }
        for bound in BOUNDS {
            let zero = format!(
                "agentsessions_limit_refusals_total{{bound=\"{}\"}} 0\n",
                bound.name().0
            );
            assert!(text.contains(&zero), "no {zero:?}");
        }
    }

    #[test]
    fn a_name_brings_all_its_outcome_series_at_zero() {
        let m = Metrics::default();
        m.turn_ended("echo", "completed", Duration::from_millis(1));
        m.model_call("gpt", true, Duration::from_millis(1));
        m.tool_executed("append_note", ToolOutcome::Ok);
        let text = m.encode();
        for zero in [
            "agentsessions_turns_total{harness=\"echo\",outcome=\"failed\"} 0\n",
            "agentsessions_turns_total{harness=\"echo\",outcome=\"canceled\"} 0\n",
            "agentsessions_harness_dial_failures_total{harness=\"echo\",reason=\"timeout\"} 0\n",
            "agentsessions_model_call_duration_seconds_count{model=\"gpt\",outcome=\"error\"} 0\n",
            "agentsessions_model_tokens_total{model=\"gpt\",kind=\"reasoning\"} 0\n",
            "agentsessions_tool_calls_total{server=\"host\",tool=\"append_note\",outcome=\"failed\"} 0\n",
        ] {
            assert!(text.contains(zero), "no {zero:?} in\n{text}");
        }
        assert!(
            text.contains("agentsessions_turns_total{harness=\"echo\",outcome=\"completed\"} 1\n")
        );
    }

    #[test]
    fn the_method_list_is_every_method_of_the_contract() {
        use prost::Message as _;
        let set = prost_types::FileDescriptorSet::decode(agentsessions_proto::FILE_DESCRIPTOR_SET)
            .unwrap();
        let mut contract: Vec<String> = set
            .file
            .iter()
            .flat_map(|f| &f.service)
            .filter(|s| matches!(s.name(), "Sessions" | "HarnessRegistry" | "Tools"))
            .flat_map(|s| &s.method)
            .map(|m| m.name().to_owned())
            .collect();
        contract.sort();
        let mut listed: Vec<String> = RPC_METHODS.iter().map(|m| m.to_string()).collect();
        listed.sort();
        assert_eq!(listed, contract);
    }

    #[test]
    fn approvals_pending_counts_sessions_not_signals() {
        let m = Metrics::default();
        m.awaiting("a", true);
        m.awaiting("a", true);
        m.awaiting("b", true);
        m.awaiting("c", false);
        assert!(m.encode().contains("agentsessions_approvals_pending 2\n"));
        m.awaiting("a", false);
        m.awaiting("b", false);
        assert!(m.encode().contains("agentsessions_approvals_pending 0\n"));
    }

    #[test]
    fn the_boot_count_never_undoes_a_decision_signalled_while_it_ran() {
        let m = Metrics::default();
        m.boot_count_started();
        m.awaiting("decided", false);
        m.counted_awaiting("decided");
        m.counted_awaiting("old");
        m.boot_count_finished();
        assert!(m.encode().contains("agentsessions_approvals_pending 1\n"));
    }

    #[test]
    fn tokens_are_counted_by_kind_and_negative_counts_add_nothing() {
        let m = Metrics::default();
        m.tokens("gpt", 10, 4, -3);
        m.tokens("gpt", 1, 0, 2);
        let text = m.encode();
        assert!(
            text.contains("agentsessions_model_tokens_total{model=\"gpt\",kind=\"input\"} 11\n")
        );
        assert!(
            text.contains("agentsessions_model_tokens_total{model=\"gpt\",kind=\"output\"} 4\n")
        );
        assert!(
            text.contains("agentsessions_model_tokens_total{model=\"gpt\",kind=\"reasoning\"} 2\n")
        );
    }

    #[test]
    fn invented_model_names_fold_into_other() {
        let m = Metrics::default();
        for i in 0..NAMES_PER_LABEL + 50 {
            m.model_call(&format!("m{i}"), true, Duration::from_millis(1));
        }
        let text = m.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("agentsessions_model_call_duration_seconds_count"))
            .filter(|l| l.contains("outcome=\"ok\""))
            .count();
        assert_eq!(series, NAMES_PER_LABEL + 1, "the cap plus \"other\"");
        assert!(text.contains(
            "agentsessions_model_call_duration_seconds_count{model=\"other\",outcome=\"ok\"} 50\n"
        ));
    }
}
