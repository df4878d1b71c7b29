//! The sink entry points (one per harness request) and their live paths.
//!
//! Each entry point first decides whether the request is served from the
//! recorded stream (see `serve.rs`), answered as an exhausted replay, or
//! performed live. Live paths follow record-before-effect: the intent is
//! appended and only its append completion releases the effect.

use agentsessions_proto::v1::{
    EventKind, Mediation, ModelCall, Resumability, ToolCall, ToolResult, Usage, event::Body,
    tool_result::Code,
};

use super::{AfterAppend, CallKind, Fault, Invocation, Mode, input_hash};
use crate::error::{LogError, TurnError};
use crate::events;
use crate::vocab::shown;
use crate::vocab::{IdSource, Policy, Verdict};

/// The mediation of a call, unknown numbers read as unspecified.
pub(super) fn mediation_of(tc: &ToolCall) -> Mediation {
    Mediation::try_from(tc.mediation).unwrap_or(Mediation::Unspecified)
}

/// True when a result carries fields only the host may write.
pub(super) fn carries_receipt(tr: &ToolResult) -> bool {
    tr.approval_request_seq != 0
        || tr.approval_decision_seq != 0
        || tr.code == Code::ApprovalDenied as i32
}

/// The durable answer to a call whose earlier run started and never
/// finished, when running it again is not safe: nobody knows whether its
/// effect happened, and it is not called a second time.
pub(super) fn outcome_unknown(call: &ToolCall) -> ToolResult {
    let why = format!(
        "outcome unknown: the host stopped while {} ran, and the tool does not say it is idempotent, so it is not called again",
        shown(&call.tool)
    );
    events::error_receipt(&call.id, why)
}

/// The rejection a call with this mediation would have met live before any
/// intent was written, if any. Replay and recovery reproduce it so that a
/// harness's historical fallback keeps its evidence.
pub(super) fn pre_intent_rejection(mediation: Mediation) -> Option<TurnError> {
    match mediation {
        Mediation::ControllerMediated => None,
        Mediation::RequiresApproval => Some(TurnError::ApprovalUnavailable),
        other => Some(LogError::UnmediatedToolCall(other.as_str_name().to_owned()).into()),
    }
}

impl Invocation {
    /// Exhausted replay: nothing left to serve for this request.
    fn exhausted(&self, what: &str) -> Fault {
        LogError::diverged(format!("expected a recorded {what}")).into()
    }

    /// `sink.Model`.
    pub(super) fn model(
        &mut self,
        mc: ModelCall,
        ids: &mut dyn IdSource,
        out: &mut Vec<super::Action>,
    ) -> Result<(), Fault> {
        if self.serving() {
            return self.serve_model(mc, out);
        }
        if self.setup.mode == Mode::Replay {
            return Err(self.exhausted("model call"));
        }
        // Refused before its intent: nothing reaches the provider once the
        // session's committed usage has reached its budget.
        if let Some(b) = self.setup.budget
            && self.tokens_used >= b.limit
        {
            return Err(TurnError::TokenBudget {
                used: self.tokens_used,
                limit: b.limit,
            }
            .into());
        }
        let recorded = ModelCall {
            model: mc.model.clone(),
            input_hash: input_hash(&mc)?,
            id: ids.model_call_id(),
            ..ModelCall::default()
        };
        let ev = events::event(
            &self.setup.execution_id,
            EventKind::EventModelCall,
            Body::Model(recorded),
        );
        // The provider gets the whole request; the journal only its hash.
        let reply_to = mc.id.clone();
        let request = ModelCall {
            id: String::new(),
            input_hash: String::new(),
            ..mc
        };
        self.append(
            vec![ev],
            AfterAppend::InvokeModel { reply_to, request },
            out,
        );
        Ok(())
    }

    /// `sink.Output`: the harness's own assistant text.
    pub(super) fn output(
        &mut self,
        text: String,
        out: &mut Vec<super::Action>,
    ) -> Result<(), Fault> {
        if self.serving() {
            return self.serve_output(text);
        }
        if self.setup.mode == Mode::Replay {
            return Err(self.exhausted("output"));
        }
        let ev = events::output(&self.setup.execution_id, events::assistant_text(&text));
        self.outputs.push(text);
        self.append(vec![ev], AfterAppend::Continue, out);
        Ok(())
    }

    /// `sink.Usage`.
    pub(super) fn usage(&mut self, u: Usage, out: &mut Vec<super::Action>) -> Result<(), Fault> {
        if self.setup.legacy && self.setup.mode != Mode::Live && self.serving() {
            // Legacy journals never recorded usage in the served stream.
            return Ok(());
        }
        if self.serving() {
            return self.serve_usage(u);
        }
        if self.setup.mode == Mode::Replay {
            if self.setup.legacy {
                return Ok(());
            }
            return Err(self.exhausted("usage"));
        }
        self.tokens_used = self
            .tokens_used
            .saturating_add(crate::journal::usage_tokens(&u));
        let ev = events::event(
            &self.setup.execution_id,
            EventKind::EventUsage,
            Body::Usage(u),
        );
        self.append(vec![ev], AfterAppend::Continue, out);
        Ok(())
    }

    /// `sink.Report`: a result of a tool the harness ran itself.
    pub(super) fn report(
        &mut self,
        tr: ToolResult,
        out: &mut Vec<super::Action>,
    ) -> Result<(), Fault> {
        if self.calls.get(&tr.id) == Some(&CallKind::Gated) {
            if self.serving() || self.setup.mode == Mode::Replay {
                let mut d = crate::error::Divergence::new(format!(
                    "report reuses approval call id {:?}",
                    tr.id
                ));
                d.receipt_report = true;
                return Err(LogError::ReplayDiverged(d).into());
            }
            return Err(Fault::Stop(TurnError::ApprovalReceiptReport));
        }
        if carries_receipt(&tr) {
            return Err(TurnError::ApprovalReceiptReport.into());
        }
        if self.serving() {
            return self.serve_report();
        }
        if self.setup.mode == Mode::Replay {
            return Err(self.exhausted("tool result"));
        }
        let ev = events::event(
            &self.setup.execution_id,
            EventKind::EventToolResult,
            Body::Result(tr),
        );
        self.append(vec![ev], AfterAppend::Continue, out);
        Ok(())
    }

    /// `sink.ToolCall`: a call the host must execute (or gate).
    pub(super) fn tool_call(
        &mut self,
        tc: ToolCall,
        out: &mut Vec<super::Action>,
    ) -> Result<(), Fault> {
        let mediation = mediation_of(&tc);
        if self.setup.mode != Mode::Live
            && mediation == Mediation::ControllerMediated
            && tc.idempotency_key.is_empty()
            && !self.next_is_gate_for(&tc.id)
        {
            // Reproduces the live pre-intent rejection; nothing is consumed.
            return Err(LogError::MissingIdempotencyKey.into());
        }
        if self.serving() {
            return self.serve_tool_call(tc, mediation, out);
        }
        if self.setup.mode == Mode::Replay {
            if let Some(rejection) = pre_intent_rejection(mediation) {
                return Err(rejection.into());
            }
            return Err(self.exhausted("tool call"));
        }
        // The host's policy, never the harness's mediation, decides last.
        let (tc, mediation) = match self.setup.tools.verdict(&tc.tool) {
            Verdict::Policy(Policy::Deny) => {
                let why = format!("tool {:?} is denied by the host's policy", shown(&tc.tool));
                return self.refuse_tool(tc, why, out);
            }
            Verdict::Unknown => {
                let why = format!("unknown tool {:?}", shown(&tc.tool));
                return self.refuse_tool(tc, why, out);
            }
            Verdict::Policy(Policy::Approval)
                if mediation == Mediation::ControllerMediated
                    && !crate::planted!(SkipPolicyFloor) =>
            {
                let gated = ToolCall {
                    mediation: Mediation::RequiresApproval as i32,
                    ..tc
                };
                (gated, Mediation::RequiresApproval)
            }
            _ => (tc, mediation),
        };
        if mediation == Mediation::RequiresApproval {
            return self.park_tool(tc, out);
        }
        if self.calls.get(&tc.id) == Some(&CallKind::Gated) {
            return Err(TurnError::InvalidApprovalCall(format!(
                "call id {:?} was used by an approval call",
                tc.id
            ))
            .into());
        }
        if mediation != Mediation::ControllerMediated {
            return Err(LogError::UnmediatedToolCall(mediation.as_str_name().to_owned()).into());
        }
        if tc.idempotency_key.is_empty() {
            return Err(LogError::MissingIdempotencyKey.into());
        }
        self.calls.insert(tc.id.clone(), CallKind::Ordinary);
        let ev = events::event(
            &self.setup.execution_id,
            EventKind::EventToolCall,
            Body::Tool(tc.clone()),
        );
        if crate::planted!(ExecuteBeforeDurable) {
            // The planted bug: run the tool on an intent nobody committed.
            let unsaved = agentsessions_proto::v1::LogRecord {
                seq: self.head + 1,
                event: Some(ev),
                ..Default::default()
            };
            self.execute(crate::vocab::Committed::new(unsaved), tc, None, false, out);
            return Ok(());
        }
        self.append(vec![ev], AfterAppend::ExecuteTool { call: tc }, out);
        Ok(())
    }

    /// A call the policy will not run (denied, or no such tool): its intent
    /// and an error receipt commit together, nothing is executed, and the
    /// receipt is the harness's answer, so a model can be told and go on.
    fn refuse_tool(
        &mut self,
        tc: ToolCall,
        why: String,
        out: &mut Vec<super::Action>,
    ) -> Result<(), Fault> {
        if tc.idempotency_key.is_empty() {
            return Err(LogError::MissingIdempotencyKey.into());
        }
        if self.calls.contains_key(&tc.id) {
            return Err(TurnError::InvalidApprovalCall(format!(
                "call id {:?} was already used in this invocation",
                tc.id
            ))
            .into());
        }
        self.calls.insert(tc.id.clone(), CallKind::Ordinary);
        let receipt = events::error_receipt(&tc.id, why);
        // An ordinary call's intent: the refusal is its receipt.
        let intent = ToolCall {
            mediation: Mediation::ControllerMediated as i32,
            ..tc
        };
        let exec = &self.setup.execution_id;
        let events = vec![
            events::event(exec, EventKind::EventToolCall, Body::Tool(intent)),
            events::event(
                exec,
                EventKind::EventToolResult,
                Body::Result(receipt.clone()),
            ),
        ];
        let frame = self.frame(agentsessions_proto::v1::controller_frame::Frame::Tool(
            receipt,
        ));
        self.append(events, AfterAppend::Send(vec![frame]), out);
        Ok(())
    }

    /// Live gating: validate, then commit the intent and the request
    /// together and park. Every refusal happens before anything is written.
    fn park_tool(&mut self, tc: ToolCall, out: &mut Vec<super::Action>) -> Result<(), Fault> {
        let stateless = self.setup.descriptor.as_ref().is_some_and(|d| {
            d.capabilities
                .as_ref()
                .is_none_or(|c| c.resumability != Resumability::RequiresMemorySnapshot as i32)
        });
        if !stateless {
            return Err(TurnError::ApprovalUnavailable.into());
        }
        if self.setup.session.is_empty() {
            return Err(LogError::MissingSessionUid.into());
        }
        if self.setup.legacy {
            return Err(TurnError::InvalidApprovalCall("legacy turns cannot gate".into()).into());
        }
        if tc.id.is_empty() {
            return Err(TurnError::InvalidApprovalCall("approval call has no id".into()).into());
        }
        if tc.idempotency_key.is_empty() {
            return Err(LogError::MissingIdempotencyKey.into());
        }
        if self.calls.contains_key(&tc.id) {
            return Err(TurnError::InvalidApprovalCall(format!(
                "call id {:?} was already used in this invocation",
                tc.id
            ))
            .into());
        }
        self.calls.insert(tc.id.clone(), CallKind::Gated);
        let call_id = tc.id.clone();
        let exec = self.setup.execution_id.clone();
        let intent = events::event(&exec, EventKind::EventToolCall, Body::Tool(tc));
        // One transaction: a crash can no longer leave a call without its
        // request (the reference repairs that cut on Resume; we still do,
        // for journals written elsewhere).
        let request = events::approval_request(&exec, &call_id);
        self.append(vec![intent, request], AfterAppend::Park { call_id }, out);
        Ok(())
    }
}
