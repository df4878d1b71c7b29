//! Serving recorded effects (Replay, and the prefix of a Resume).
//!
//! Every harness request must match the next recorded effect. A mismatch is
//! a divergence; a request the live host would have refused before writing
//! anything is refused the same way, so a historical fallback still replays.
//! A trailing unanswered model call or tool intent is re-driven once on
//! Resume (modern turns; legacy turns re-drive tools only).

use agentsessions_proto::v1::{
    EventKind, LogRecord, Mediation, Message, ModelCall, ModelResult, ToolCall, ToolResult, Usage,
    controller_frame::Frame,
};

use super::sink::{carries_receipt, mediation_of, pre_intent_rejection};
use super::{Action, CallKind, Fault, GateSeqs, Invocation, Mode, input_hash};
use crate::error::{Divergence, LogError, TurnError};
use crate::events::{self, body};
use crate::journal::approval::{denial_receipt, receipt_matches_decision};
use crate::vocab::Committed;

impl Invocation {
    /// The next recorded effect, if any.
    fn peek(&self) -> Option<&LogRecord> {
        self.setup.stream.get(self.cursor)
    }

    fn peek_kind(&self) -> Option<EventKind> {
        self.peek()
            .and_then(|r| r.event.as_ref())
            .map(events::kind_of)
    }

    /// Consumes the next recorded effect if it has `kind`.
    fn next_of(&mut self, kind: EventKind) -> Option<LogRecord> {
        if self.peek_kind() == Some(kind) {
            self.cursor += 1;
            Some(self.setup.stream[self.cursor - 1].clone())
        } else {
            None
        }
    }

    /// True when the next recorded effect is a gated TOOL_CALL with `id`.
    pub(super) fn next_is_gate_for(&self, id: &str) -> bool {
        self.peek()
            .and_then(|r| r.event.as_ref())
            .and_then(body::tool)
            .is_some_and(|t| t.id == id && mediation_of(t) == Mediation::RequiresApproval)
    }

    fn resume(&self) -> bool {
        self.setup.mode == Mode::Resume
    }

    /// Serves a model call from the journal (I0: the request must hash to
    /// the recorded input hash).
    pub(super) fn serve_model(
        &mut self,
        mc: ModelCall,
        out: &mut Vec<Action>,
    ) -> Result<(), Fault> {
        let Some(rec) = self.next_of(EventKind::EventModelCall) else {
            return Err(LogError::diverged("expected a recorded model call").into());
        };
        let recorded_hash = rec
            .event
            .as_ref()
            .and_then(body::model)
            .map(|m| m.input_hash.clone());
        let hash = input_hash(&mc)?;
        if recorded_hash.as_deref() != Some(hash.as_str()) && !crate::planted!(SkipInputHashCheck) {
            return Err(LogError::diverged("model input hash mismatch (I0)").into());
        }
        if let Some(answer) = self.next_of(EventKind::EventOutput) {
            let message: Option<Message> = answer.event.as_ref().and_then(body::message).cloned();
            self.note_output(message.as_ref());
            // A served completion carries no usage: the turn already paid.
            let frame = self.frame(Frame::Model(ModelResult {
                message,
                usage: None,
                model_call_id: mc.id,
            }));
            out.push(Action::Send(frame));
            return Ok(());
        }
        let trailing = self.peek().is_none();
        if self.resume() && trailing && !self.setup.legacy {
            // The provider answered (or not) but the answer never landed:
            // ask again, once, and record only the OUTPUT.
            self.model_calls += 1;
            self.wait = super::Wait::Model {
                reply_to: mc.id.clone(),
            };
            out.push(Action::InvokeModel(ModelCall {
                id: String::new(),
                input_hash: String::new(),
                ..mc
            }));
            return Ok(());
        }
        let text = if self.resume() {
            "resume: recorded completion missing"
        } else {
            "replay: expected a recorded completion, found none"
        };
        Err(TurnError::Sink(text.into()).into())
    }

    /// Serves an Output delta: it must equal the recorded text.
    pub(super) fn serve_output(&mut self, text: String) -> Result<(), Fault> {
        let Some(rec) = self.next_of(EventKind::EventOutput) else {
            return Err(LogError::diverged("expected a recorded output").into());
        };
        let recorded = rec
            .event
            .as_ref()
            .and_then(body::message)
            .map(events::message_text);
        if recorded.as_deref() != Some(text.as_str()) {
            return Err(LogError::diverged("output mismatch (I0)").into());
        }
        self.outputs.push(text);
        Ok(())
    }

    /// Serves a Usage report: it must equal the recorded usage.
    pub(super) fn serve_usage(&mut self, u: Usage) -> Result<(), Fault> {
        let Some(rec) = self.next_of(EventKind::EventUsage) else {
            return Err(LogError::diverged("expected a recorded usage").into());
        };
        if rec.event.as_ref().and_then(body::usage) != Some(&u) {
            return Err(LogError::diverged("usage mismatch (I0)").into());
        }
        Ok(())
    }

    /// Serves an in-harness Report: kind-only, as the reference does.
    pub(super) fn serve_report(&mut self) -> Result<(), Fault> {
        let next = self.peek().and_then(|r| r.event.as_ref());
        if next.and_then(body::result).is_some_and(carries_receipt) {
            let mut d = Divergence::new("report cannot consume an approval receipt");
            d.receipt_report = true;
            return Err(LogError::ReplayDiverged(d).into());
        }
        if self.next_of(EventKind::EventToolResult).is_none() {
            return Err(LogError::diverged("expected a recorded tool result").into());
        }
        Ok(())
    }

    /// Serves (or, on Resume, completes) a tool call from the journal.
    pub(super) fn serve_tool_call(
        &mut self,
        tc: ToolCall,
        mediation: Mediation,
        out: &mut Vec<Action>,
    ) -> Result<(), Fault> {
        // A distinct recorded ordinary call means this request was refused
        // live and the harness fell back; refuse it again, consume nothing.
        if let Some(next) = self
            .peek()
            .and_then(|r| r.event.as_ref())
            .and_then(body::tool)
        {
            let next_gated = mediation_of(next) == Mediation::RequiresApproval;
            if next.id != tc.id
                && !next_gated
                && let Some(rejection) = pre_intent_rejection(mediation)
            {
                return Err(rejection.into());
            }
        }
        let Some(intent) = self.next_of(EventKind::EventToolCall) else {
            if let Some(rejection) = pre_intent_rejection(mediation) {
                return Err(rejection.into());
            }
            let who = if self.resume() {
                "resume expected"
            } else {
                "expected"
            };
            return Err(LogError::diverged(format!("{who} a recorded tool call")).into());
        };
        let recorded = intent.event.as_ref().and_then(body::tool).cloned();
        // A policy refusal records its call as ordinary whatever the
        // harness asked, with the error receipt right after it.
        let refused = self
            .peek()
            .and_then(|r| r.event.as_ref())
            .and_then(body::result)
            .is_some_and(|r| {
                Some(&r.id) == recorded.as_ref().map(|c| &c.id)
                    && r.is_error
                    && r.code == agentsessions_proto::v1::tool_result::Code::ExecutorError as i32
            });
        // A host that gates by policy may have raised the call's mediation;
        // one that leaves it to the harness checks it strictly.
        let policed = self.setup.tools.verdict(&tc.tool) != crate::vocab::Verdict::Harness;
        let recorded = match_tool_call(&tc, recorded.as_ref(), refused, policed)?;
        let gated = mediation_of(&recorded) == Mediation::RequiresApproval;
        let kind = if gated {
            CallKind::Gated
        } else {
            CallKind::Ordinary
        };
        self.calls.insert(recorded.id.clone(), kind);
        if gated {
            return self.serve_gate(intent, recorded, out);
        }
        if let Some(result) = self.next_of(EventKind::EventToolResult) {
            if self.setup.mode == Mode::Replay && crate::planted!(ReexecuteOnReplay) {
                self.execute(Committed::new(intent), recorded, None, false, out);
                return Ok(());
            }
            let receipt = recorded_result(&result, &recorded)?;
            out.push(Action::Send(self.frame(Frame::Tool(receipt))));
            return Ok(());
        }
        let trailing = self.peek().is_none();
        if self.resume() && trailing {
            // The intent is durable but its result never landed: run the
            // recorded call once more under its key; the executor dedups.
            if !self.setup.has_executor {
                return Err(
                    TurnError::Sink("controller: no tool executor configured".into()).into(),
                );
            }
            self.execute(Committed::new(intent), recorded, None, false, out);
            return Ok(());
        }
        Err(TurnError::Sink("controller: recorded tool call has no result".into()).into())
    }

    /// A recorded gated call: its request and decision must follow; then
    /// the receipt is served, or (Resume, no receipt yet) produced.
    fn serve_gate(
        &mut self,
        intent: LogRecord,
        call: ToolCall,
        out: &mut Vec<Action>,
    ) -> Result<(), Fault> {
        let state = self
            .approval(&call.id)
            .cloned()
            .filter(|s| s.request.is_some() && s.decision.is_some())
            .ok_or_else(|| LogError::diverged("approval evidence missing for gated call"))?;
        let request = self.next_of(EventKind::EventApprovalRequest);
        let decision = self.next_of(EventKind::EventApprovalResult);
        let (Some(request), Some(decision)) = (request, decision) else {
            return Err(
                LogError::diverged("expected recorded approval request and decision").into(),
            );
        };
        if Some(&request) != state.request.as_ref() || Some(&decision) != state.decision.as_ref() {
            return Err(LogError::diverged("approval evidence out of order").into());
        }
        let seqs = GateSeqs {
            request: request.seq,
            decision: decision.seq,
        };
        if self.resume() && state.receipt.is_none() {
            return self.complete_gate(intent, call, seqs, out);
        }
        let Some(receipt) = self.next_of(EventKind::EventToolResult) else {
            if self.resume() {
                return Err(LogError::diverged("missing approval receipt").into());
            }
            return Err(
                TurnError::Sink("controller: recorded tool call has no result".into()).into(),
            );
        };
        let body = receipt.event.as_ref().and_then(body::result).cloned();
        let decision_body = state
            .decision_body()
            .cloned()
            .ok_or_else(|| LogError::diverged("approval decision has no payload"))?;
        let receipt_body = match body {
            Some(r)
                if r.id == call.id
                    && r.approval_request_seq == seqs.request
                    && r.approval_decision_seq == seqs.decision
                    && receipt_matches_decision(&decision_body, &r) =>
            {
                r
            }
            _ => {
                return Err(
                    LogError::diverged("approval receipt does not match its decision").into(),
                );
            }
        };
        out.push(Action::Send(self.frame(Frame::Approval(decision_body))));
        out.push(Action::Send(self.frame(Frame::Tool(receipt_body))));
        Ok(())
    }

    /// Resume of a decided gate with no receipt: deny, or execute the
    /// recorded call, then write the receipt. Failures seal the sink.
    fn complete_gate(
        &mut self,
        intent: LogRecord,
        call: ToolCall,
        seqs: GateSeqs,
        out: &mut Vec<Action>,
    ) -> Result<(), Fault> {
        let stateless = self.setup.descriptor.as_ref().is_some_and(|d| {
            d.capabilities.as_ref().is_none_or(|c| {
                c.resumability
                    != agentsessions_proto::v1::Resumability::RequiresMemorySnapshot as i32
            })
        });
        if !stateless {
            return Err(Fault::Stop(TurnError::ApprovalUnavailable));
        }
        if self.setup.session.is_empty() {
            return Err(Fault::Stop(LogError::MissingSessionUid.into()));
        }
        let approved = self
            .approval(&call.id)
            .and_then(|s| s.decision_body())
            .map(|d| d.approved)
            .ok_or_else(|| LogError::diverged("approval decision has no payload"))?;
        if !approved && !crate::planted!(DenialExecutes) {
            let receipt = denial_receipt(&call.id, seqs.request, seqs.decision);
            self.record_receipt(receipt, Some(seqs), out);
            return Ok(());
        }
        if !self.setup.has_executor {
            return Err(Fault::Stop(TurnError::MissingToolExecutor));
        }
        self.execute(Committed::new(intent), call, Some(seqs), false, out);
        Ok(())
    }
}

/// True when the recorded call is the emitted one gated by the host's
/// policy floor: the harness asked to run it at once, the host made it
/// wait for a decision (see `sink::Invocation::tool_call`). A floor only
/// raises, so the reverse is a divergence.
fn floor_raised(emitted: &ToolCall, recorded: &ToolCall) -> bool {
    mediation_of(emitted) == Mediation::ControllerMediated
        && mediation_of(recorded) == Mediation::RequiresApproval
}

/// Checks a re-emitted call against the recorded one (tool identity).
/// The recorded call must itself be a valid host-mediated call.
pub(super) fn match_tool_call(
    emitted: &ToolCall,
    recorded: Option<&ToolCall>,
    refused: bool,
    policed: bool,
) -> Result<ToolCall, LogError> {
    let Some(recorded) = recorded else {
        return Err(LogError::diverged("recorded tool call has no payload"));
    };
    let recorded_mediation = mediation_of(recorded);
    let valid_mediation = recorded_mediation == Mediation::ControllerMediated
        || (recorded_mediation == Mediation::RequiresApproval && !recorded.id.is_empty());
    if !valid_mediation {
        let mut d = Divergence::new(format!(
            "recorded tool call has mediation {}",
            recorded_mediation.as_str_name()
        ));
        d.unmediated = true;
        return Err(LogError::ReplayDiverged(d));
    }
    if recorded.idempotency_key.is_empty() {
        let mut d = Divergence::new("recorded tool call has no idempotency key");
        d.missing_key = true;
        return Err(LogError::ReplayDiverged(d));
    }
    let field = if emitted.id != recorded.id {
        Some("id")
    } else if emitted.tool != recorded.tool {
        Some("tool")
    } else if emitted.mediation != recorded.mediation
        && !(policed && floor_raised(emitted, recorded))
        && !(refused && mediation_of(recorded) == Mediation::ControllerMediated)
    {
        Some("mediation")
    } else if emitted.idempotency_key != recorded.idempotency_key {
        Some("idempotency key")
    } else if emitted.args != recorded.args {
        // Struct equality is structural over f64 numbers, so 2 and 2.0 are
        // equal, while absent args and an empty object stay distinct.
        Some("args")
    } else {
        None
    };
    match field {
        Some(f) => Err(LogError::diverged(format!(
            "tool call {f} differs from the record"
        ))),
        None => Ok(recorded.clone()),
    }
}

/// The recorded result of an ordinary call, correlated to it by id.
fn recorded_result(result: &LogRecord, call: &ToolCall) -> Result<ToolResult, LogError> {
    match result.event.as_ref().and_then(body::result) {
        Some(r) if r.id == call.id => Ok(r.clone()),
        Some(_) => Err(LogError::diverged(
            "recorded tool result answers another call",
        )),
        None => Err(LogError::diverged("recorded tool result has no payload")),
    }
}
