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
use agentsessions_machine::host::Host;
use agentsessions_machine::vocab::{
    Effect, EffectId, ExecuteTool, HarnessEffect, HarnessFailure, HarnessOutcome, InvokeModel,
    Outcome, Signal, StoreOutcome,
};
use agentsessions_proto::v1::tool_result::Code;

use super::handle::Input;
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
    /// This loop's share of the host gauges as last reported.
    gauges: (usize, usize),
}

impl Meter {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            models: HashMap::new(),
            tools: HashMap::new(),
            harnesses: HashMap::new(),
            gauges: (0, 0),
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
            // A call a cancel abandons neither succeeded nor failed: it is
            // not observed (its stand-in error outcome finds no entry).
            Effect::AbandonModel { id } => {
                self.models.remove(id);
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
                Signal::ApprovalExpired { .. } => self.metrics.notify().expired(),
            }
        }
        let now = (host.in_flight(), cached_records);
        if now != self.gauges {
            self.metrics.host_gauges(self.gauges, now);
            self.gauges = now;
        }
        debug_assert!(self.models.len() + self.tools.len() + self.harnesses.len() <= 1 << 20);
    }
}
