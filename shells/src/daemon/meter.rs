//! What the drive loop tells the metrics: the machine's signals, timings
//! of the effects it performs (model calls, tool calls, dials), tokens of
//! committed USAGE records, and the host's gauges after every input.
//!
//! Invariant: every entry of the timing maps belongs to an effect in
//! flight and goes when its outcome arrives, so the maps are bounded by
//! the host's effects in flight. Nothing here decides anything.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentsessions_machine::events::body;
use agentsessions_machine::host::{
    Caller, Effect, EffectId, ExecuteTool, HarnessEffect, HarnessFailure, HarnessOutcome, Host,
    InvokeModel, Outcome, Request, Response, Signal, StoreOutcome,
};
use agentsessions_proto::v1::tool_result::Code;
use agentsessions_proto::v1::{ExecState, GetSessionRequest};

use super::driver::{DriverHandle, Input};
use crate::journal::{JournalStore, StaleScan};
use crate::metrics::{Metrics, ToolOutcome};

/// The drive loop's side of the metrics.
pub(super) struct Meter {
    metrics: Arc<Metrics>,
    /// Model calls in flight: model name, start.
    models: HashMap<EffectId, (String, Instant)>,
    /// Tool calls in flight: tool name.
    tools: HashMap<EffectId, String>,
    /// Dials and Describes in flight: harness name.
    harnesses: HashMap<EffectId, String>,
}

impl Meter {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            models: HashMap::new(),
            tools: HashMap::new(),
            harnesses: HashMap::new(),
        }
    }

    /// An effect about to be performed.
    pub(super) fn effect(&mut self, effect: &Effect) {
        match effect {
            Effect::Model(InvokeModel { id, request, .. }) => {
                self.models
                    .insert(*id, (request.model.clone(), Instant::now()));
            }
            Effect::Tool(ExecuteTool { id, call, .. }) => {
                self.tools.insert(*id, call.tool.clone());
            }
            Effect::Harness(
                HarnessEffect::Dial { id, harness, .. }
                | HarnessEffect::Describe { id, harness, .. },
            ) => {
                self.harnesses.insert(*id, harness.clone());
            }
            _ => {}
        }
    }

    /// An input about to be handled.
    pub(super) fn input(&mut self, input: &Input) {
        match input {
            Input::Outcome(id, Outcome::Model(reply)) => {
                if let Some((model, started)) = self.models.remove(id) {
                    self.metrics
                        .model_call(&model, reply.is_ok(), started.elapsed());
                }
            }
            Input::Outcome(id, Outcome::Tool(done)) => {
                if let Some(tool) = self.tools.remove(id) {
                    let outcome = match done {
                        Ok(r) if r.is_error || r.code == Code::ExecutorError as i32 => {
                            ToolOutcome::Error
                        }
                        Ok(_) => ToolOutcome::Ok,
                        Err(_) => ToolOutcome::Failed,
                    };
                    self.metrics.tool_executed(&tool, outcome);
                }
            }
            Input::Outcome(id, Outcome::Harness(HarnessOutcome::Described(r))) => {
                self.harness_done(*id, r.as_ref().err());
            }
            Input::Dialed { id, result, .. } => self.harness_done(*id, result.as_ref().err()),
            Input::Appended(_, _, Outcome::Store(StoreOutcome::Appended(Ok(records)))) => {
                for usage in records
                    .iter()
                    .filter_map(|r| r.event.as_ref().and_then(body::usage))
                {
                    self.metrics.tokens(
                        &usage.model,
                        usage.input_tokens,
                        usage.output_tokens,
                        usage.reasoning_tokens,
                    );
                }
            }
            _ => {}
        }
    }

    fn harness_done(&mut self, id: EffectId, failure: Option<&HarnessFailure>) {
        let Some(harness) = self.harnesses.remove(&id) else {
            return;
        };
        let reason = match failure {
            None => return,
            Some(HarnessFailure::Unavailable(_)) => "unavailable",
            Some(HarnessFailure::Timeout) => "timeout",
            Some(HarnessFailure::Other { .. }) => "error",
        };
        self.metrics.dial_failed(&harness, reason);
    }

    /// After an input and its effects: the machine's signals and gauges.
    pub(super) fn settle(&mut self, host: &mut Host, cached_records: usize) {
        while let Some(signal) = host.poll_signal() {
            match signal {
                Signal::TurnEnded {
                    harness,
                    outcome,
                    took,
                } => {
                    let took = Duration::from_nanos(u64::try_from(took).unwrap_or(0));
                    self.metrics.turn_ended(&harness, outcome.as_str(), took);
                }
                Signal::Awaiting { session, awaiting } => self.metrics.awaiting(&session, awaiting),
            }
        }
        self.metrics.host_gauges(host.in_flight(), cached_records);
        debug_assert!(self.models.len() + self.tools.len() + self.harnesses.len() <= 1 << 20);
    }
}

/// Sessions looked at per step of the boot count.
const COUNT_PAGE: usize = 500;

/// Sets the approvals gauge from the journal: every session the machine
/// renders as AWAITING is counted, a page at a time, while the daemon
/// already serves (a decision signalled meanwhile outranks what the count
/// read; see [`Metrics::boot_count_started`]). A store failure ends the
/// count early and says so.
pub(super) async fn count_awaiting<S: JournalStore>(
    handle: DriverHandle,
    store: Arc<S>,
    metrics: Arc<Metrics>,
) {
    metrics.boot_count_started();
    let mut after = String::new();
    let mut counted = 0usize;
    loop {
        let scan = StaleScan {
            after: after.clone(),
            before: i64::MAX,
            scan: COUNT_PAGE,
        };
        let page = match store.stale_sessions(scan).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "approvals_pending: boot count stopped early");
                break;
            }
        };
        for uid in &page.stale {
            let get = Request::GetSession(GetSessionRequest { uid: uid.clone() });
            if let Ok(Response::Session(s)) = handle.unary(Caller::Open, get).await
                && s.exec_state == ExecState::ExecAwaiting as i32
            {
                metrics.counted_awaiting(uid);
                counted += 1;
            }
        }
        if page.next.is_empty() {
            break;
        }
        assert!(page.next > after, "the scan moves forward");
        after = page.next;
    }
    metrics.boot_count_finished();
    tracing::debug!(counted, "approvals_pending counted from the journal");
}
