//! Trace spans of the work the drive loop performs, each the child of the
//! RPC whose call caused it.
//!
//! Causality follows effect ids: the effects the machine emits while it
//! handles an input belong to that input's call; an outcome belongs to the
//! call of the effect it answers; harness input belongs to the call of the
//! dial that opened the connection. So no session id is needed to find a
//! parent, and a span never outlives the effect (or connection) it times.
//! Spans carry ids, names and seqs as attributes, never content.
//!
//! Invariant: every map here holds only effects, connections and calls in
//! flight. With no trace subscriber the tracer is off and keeps nothing.

use std::collections::HashMap;

use agentsessions_machine::vocab::{
    ClientEffect, ConnId, Effect, EffectId, ExecuteTool, HarnessEffect, HarnessInput, InvokeModel,
    RequestId, StoreEffect,
};
use tracing::{Level, Span};

use super::handle::Input;

/// The target of every span the daemon exports.
pub use crate::telemetry::propagation::TARGET;

/// The drive loop's spans.
pub(super) struct Tracer {
    on: bool,
    /// RPC spans of the calls in flight.
    calls: HashMap<RequestId, Span>,
    /// The call whose input is being handled.
    cause: Option<RequestId>,
    /// Effects in flight: their call and their span, if they get one.
    effects: HashMap<EffectId, (Option<RequestId>, Span)>,
    /// Open harness connections: their call and their span.
    conns: HashMap<ConnId, (Option<RequestId>, Span)>,
}

impl Tracer {
    /// A tracer that records only if a subscriber wants the spans.
    pub(super) fn new() -> Self {
        Self {
            on: tracing::enabled!(target: TARGET, Level::INFO),
            calls: HashMap::new(),
            cause: None,
            effects: HashMap::new(),
            conns: HashMap::new(),
        }
    }

    /// A client call the loop took as `id`, with its RPC span: what it
    /// causes is traced under that span.
    pub(super) fn call(&mut self, id: RequestId, span: Span) {
        if !self.on {
            return;
        }
        self.calls.insert(id, span);
        self.cause = Some(id);
    }

    /// An input about to be handled. Outcomes end the spans of the effects
    /// they answer. (A call's cause is set by [`Tracer::call`] once the
    /// loop has given it an id.)
    pub(super) fn input(&mut self, input: &Input) {
        if !self.on {
            return;
        }
        self.cause = match input {
            Input::Call(..) => None,
            // A dial that connected: its span goes on timing the connection.
            Input::Dialed {
                id, conn, result, ..
            } => {
                let dial = self.effects.remove(id);
                let cause = dial.as_ref().and_then(|(cause, _)| *cause);
                if let (Some(dial), true) = (dial, result.is_ok()) {
                    self.conns.insert(*conn, dial);
                }
                cause
            }
            Input::Outcome(id, _) | Input::LogRead { id, .. } | Input::Appended(id, _, _) => {
                self.effects.remove(id).and_then(|(cause, _)| cause)
            }
            Input::Chunk(id, _) => self.effects.get(id).and_then(|(cause, _)| *cause),
            Input::Harness(conn, input) => {
                let cause = self.conns.get(conn).and_then(|(cause, _)| *cause);
                if matches!(input, HarnessInput::Closed | HarnessInput::Failed(_)) {
                    self.conns.remove(conn);
                }
                cause
            }
            Input::Cancel(call) => Some(*call),
            Input::Drain(_) | Input::Catalog(_) => None,
        };
    }

    /// The deadline timer fired: what follows has no call.
    pub(super) fn timeout(&mut self) {
        self.cause = None;
    }

    /// An effect the machine just emitted; returns the span to perform it
    /// in (`Span::none()` when it gets none).
    pub(super) fn effect(&mut self, effect: &Effect) -> Span {
        if !self.on {
            return Span::none();
        }
        let parent = self
            .cause
            .and_then(|c| self.calls.get(&c))
            .cloned()
            .unwrap_or_else(Span::none);
        let span = match effect {
            Effect::Store(StoreEffect::Append {
                session,
                expected_last_seq,
                events,
                ..
            }) => {
                let execution = events.first().map_or("", |e| e.execution_id.as_str());
                tracing::info_span!(target: TARGET, parent: &parent, "journal.append",
                    session.uid = %session, execution.id = %execution,
                    seq = expected_last_seq + 1, records = events.len())
            }
            Effect::Store(StoreEffect::Fork {
                session,
                parent: from,
                at_seq,
                ..
            }) => {
                tracing::info_span!(target: TARGET, parent: &parent, "journal.fork",
                    session.uid = %session, fork.parent = %from, seq = at_seq + 1)
            }
            Effect::Store(StoreEffect::MintFence { session, .. }) => {
                tracing::info_span!(target: TARGET, parent: &parent, "journal.mint_fence",
                    session.uid = %session)
            }
            Effect::Store(StoreEffect::DeleteSession { session, .. }) => {
                tracing::info_span!(target: TARGET, parent: &parent, "journal.delete",
                    session.uid = %session)
            }
            // From the dial to the connection's close.
            Effect::Harness(HarnessEffect::Dial { harness, .. }) => {
                tracing::info_span!(target: TARGET, parent: &parent, "harness.connect",
                    harness = %harness)
            }
            Effect::Harness(HarnessEffect::Describe { harness, .. }) => {
                tracing::info_span!(target: TARGET, parent: &parent, "harness.describe",
                    harness = %harness)
            }
            Effect::Model(InvokeModel {
                session,
                execution_id,
                request,
                ..
            }) => tracing::info_span!(target: TARGET, parent: &parent, "model.call",
                session.uid = %session, execution.id = %execution_id, model = %request.model),
            Effect::Tool(ExecuteTool {
                session,
                call,
                intent,
                ..
            }) => {
                let record = intent.record();
                let execution = record
                    .event
                    .as_ref()
                    .map_or("", |e| e.execution_id.as_str());
                tracing::info_span!(target: TARGET, parent: &parent, "tool.execute",
                    session.uid = %session, execution.id = %execution, seq = record.seq,
                    tool = %call.tool, tool_call.id = %call.id)
            }
            Effect::Harness(HarnessEffect::Close { conn }) => {
                self.conns.remove(conn);
                Span::none()
            }
            Effect::Client(ClientEffect::Reply { request, .. }) => {
                self.calls.remove(request);
                Span::none()
            }
            _ => Span::none(),
        };
        if let Some(id) = effect.id() {
            self.effects.insert(id, (self.cause, span.clone()));
        }
        debug_assert!(
            self.effects.len() <= 1 << 20,
            "effects in flight are bounded"
        );
        span
    }
}
