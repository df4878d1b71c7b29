//! The harness's side of one Connect stream: every host callback a harness
//! makes goes through [`Sink`], which enforces the correlation rules so a
//! harness author cannot get them wrong.

use agentsessions_machine::events;
use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, ControllerFrame, Event, EventKind, Mediation, ModelCall,
    ModelResult, ToolCall, ToolResult, Usage, controller_frame::Frame, event::Body,
    tool_result::Code,
};
use tokio::sync::{mpsc, watch};
use tonic::Status;

use super::{HarnessError, ModelRequest};

/// Why the stream stopped underneath a running harness.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stop {
    /// The host sent Cancel with this reason.
    Canceled(String),
    /// The host went away (transport error or response stream dropped).
    Gone,
}

impl Stop {
    pub(crate) fn error(&self) -> HarnessError {
        match self {
            Stop::Canceled(reason) => HarnessError::Canceled(reason.clone()),
            Stop::Gone => HarnessError::Closed,
        }
    }
}

/// The host callbacks of one execution.
///
/// Calls are strictly sequential (`&mut self`). After a park or a protocol
/// failure the sink refuses everything with that same error, so a harness
/// that ignores an error cannot cause a second effect.
#[derive(Debug)]
pub struct Sink {
    execution_id: String,
    session: String,
    out: mpsc::Sender<Result<Event, Status>>,
    frames: mpsc::Receiver<ControllerFrame>,
    stop: watch::Receiver<Option<Stop>>,
    parked: Option<ApprovalRef>,
    failed: Option<HarnessError>,
}

impl Sink {
    pub(crate) fn new(
        execution_id: String,
        session: String,
        out: mpsc::Sender<Result<Event, Status>>,
        frames: mpsc::Receiver<ControllerFrame>,
        stop: watch::Receiver<Option<Stop>>,
    ) -> Self {
        Self {
            execution_id,
            session,
            out,
            frames,
            stop,
            parked: None,
            failed: None,
        }
    }

    /// The execution this sink serves.
    pub fn execution_id(&self) -> &str {
        &self.execution_id
    }

    /// The session uid from the Start envelope ("" when the host sent none).
    pub fn session(&self) -> &str {
        &self.session
    }

    pub(crate) fn parked(&self) -> Option<&ApprovalRef> {
        self.parked.as_ref()
    }

    pub(crate) fn sticky_failure(&self) -> Option<&HarnessError> {
        self.failed.as_ref()
    }

    /// Asks the host for a completion and waits for it. The host records the
    /// completion as the turn's output, so do not also [`Sink::output`] it.
    pub async fn model(&mut self, req: ModelRequest) -> Result<ModelResult, HarnessError> {
        self.check()?;
        let id = format!("{:016x}", fastrand::u64(..));
        let call = ModelCall {
            model: req.model,
            params: req.params,
            input_hash: String::new(),
            id: id.clone(),
            messages: req.messages,
            tools: req.tools,
            tool_choice: req.tool_choice,
        };
        self.emit(EventKind::EventModelCall, Body::Model(call))
            .await?;
        let reply = self.await_model(&id).await;
        self.stick(reply)
    }

    async fn await_model(&mut self, id: &str) -> Result<ModelResult, HarnessError> {
        match self.await_frame().await?.frame {
            Some(Frame::Model(result)) if result.model_call_id == id => Ok(result),
            Some(Frame::Model(_)) => {
                Err(HarnessError::protocol("model result correlation mismatch"))
            }
            other => Err(unexpected("a model result", &other)),
        }
    }

    /// Streams assistant text of the harness's own.
    pub async fn output(&mut self, text: &str) -> Result<(), HarnessError> {
        self.check()?;
        self.emit(
            EventKind::EventOutput,
            Body::Message(events::assistant_text(text)),
        )
        .await
    }

    /// Reports the result of a tool the harness ran itself
    /// (IN_HARNESS_REPORTED). Approval fields are the host's to write.
    pub async fn report(&mut self, result: ToolResult) -> Result<(), HarnessError> {
        self.check()?;
        reject_approval_fields(&result)?;
        self.emit(EventKind::EventToolResult, Body::Result(result))
            .await
    }

    /// Reports token usage.
    pub async fn usage(&mut self, usage: Usage) -> Result<(), HarnessError> {
        self.check()?;
        self.emit(EventKind::EventUsage, Body::Usage(usage)).await
    }

    /// Asks the host to run a CONTROLLER_MEDIATED or REQUIRES_APPROVAL call
    /// and waits for its receipt. A gated call may instead park: the result
    /// is then [`HarnessError::Parked`], which `run` must return.
    pub async fn tool_call(&mut self, call: ToolCall) -> Result<ToolResult, HarnessError> {
        self.tool_call_decided(call).await.map(|(result, _)| result)
    }

    /// Like [`Sink::tool_call`], also returning the host's decision for a
    /// gated call (None for an ordinary one).
    pub async fn tool_call_decided(
        &mut self,
        call: ToolCall,
    ) -> Result<(ToolResult, Option<ApprovalResult>), HarnessError> {
        self.check()?;
        let gated = call.mediation == Mediation::RequiresApproval as i32;
        if gated {
            // The host could never correlate a decision without these.
            if self.session.is_empty() {
                return Err(HarnessError::invalid("approval call outside a session"));
            }
            if call.id.is_empty() {
                return Err(HarnessError::invalid("approval call without an id"));
            }
        }
        let id = call.id.clone();
        self.emit(EventKind::EventToolCall, Body::Tool(call))
            .await?;
        // The host's policy may gate an ordinary call too (a floor no
        // harness can lower), so a park or a decision can answer either.
        let reply = self.await_reply(&id, gated).await;
        self.stick(reply)
    }

    async fn await_reply(
        &mut self,
        id: &str,
        gated: bool,
    ) -> Result<(ToolResult, Option<ApprovalResult>), HarnessError> {
        let decision = match self.await_tool_frame().await? {
            Some(Frame::Tool(result)) if !gated => {
                check_result_id(&result, id)?;
                reject_approval_fields(&result)?;
                return Ok((result, None));
            }
            Some(Frame::Park(park)) => {
                if park.execution_id != self.execution_id
                    || park.tool_call_id != id
                    || park.request_seq <= 0
                {
                    return Err(HarnessError::protocol("park correlation mismatch"));
                }
                self.parked = Some(park.clone());
                return Err(HarnessError::Parked(park));
            }
            Some(Frame::Approval(decision)) => decision,
            other if gated => return Err(unexpected("an approval decision or park", &other)),
            other => return Err(unexpected("a tool result", &other)),
        };
        if decision.tool_call_id != id || decision.request_seq <= 0 {
            return Err(HarnessError::protocol("approval correlation mismatch"));
        }
        let result = match self.await_tool_frame().await? {
            Some(Frame::Tool(result)) => result,
            other => return Err(unexpected("the receipt after a decision", &other)),
        };
        check_result_id(&result, id)?;
        check_receipt(&result, &decision)?;
        Ok((result, Some(decision)))
    }

    /// A reply to a tool call: it must also name this stream's session.
    async fn await_tool_frame(&mut self) -> Result<Option<Frame>, HarnessError> {
        let frame = self.await_frame().await?;
        if frame.session != self.session {
            return Err(HarnessError::protocol("tool reply for another session"));
        }
        Ok(frame.frame)
    }

    /// The next host frame for this execution.
    async fn await_frame(&mut self) -> Result<ControllerFrame, HarnessError> {
        let frame = tokio::select! {
            biased;
            _ = stopped(&mut self.stop) => None,
            frame = self.frames.recv() => frame,
        };
        // A frame that raced a stop loses: the harness must not act on it.
        self.check()?;
        let frame = frame.ok_or(HarnessError::Closed)?;
        if frame.execution_id != self.execution_id {
            return Err(HarnessError::protocol("reply for another execution"));
        }
        Ok(frame)
    }

    /// Refuses every call after a park, a failure or a stop.
    fn check(&self) -> Result<(), HarnessError> {
        if let Some(park) = &self.parked {
            return Err(HarnessError::Parked(park.clone()));
        }
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        if let Some(stop) = self.stop.borrow().as_ref() {
            return Err(stop.error());
        }
        Ok(())
    }

    /// Once a request is on the wire the harness's view and the host's may
    /// differ, so any failure from then on is final.
    fn stick<T>(&mut self, reply: Result<T, HarnessError>) -> Result<T, HarnessError> {
        match &reply {
            Err(e) if !matches!(e, HarnessError::Parked(_)) && self.failed.is_none() => {
                self.failed = Some(e.clone());
            }
            _ => {}
        }
        reply
    }

    async fn emit(&mut self, kind: EventKind, body: Body) -> Result<(), HarnessError> {
        let ev = events::event(&self.execution_id, kind, body);
        if self.out.send(Ok(ev)).await.is_err() {
            return self.stick(Err(HarnessError::Closed));
        }
        Ok(())
    }

    /// Sends one event outside any sink call (END, PARKED); best effort,
    /// since the host may already be gone.
    pub(crate) async fn send_final(&self, kind: EventKind, body: Body) {
        let ev = events::event(&self.execution_id, kind, body);
        let _ = self.out.send(Ok(ev)).await;
    }

    pub(crate) async fn send_status(&self, status: Status) {
        let _ = self.out.send(Err(status)).await;
    }
}

/// Resolves once the stream is stopped; never, if it ends without a stop
/// (the pump dropping its sender is not a stop).
pub(crate) async fn stopped(stop: &mut watch::Receiver<Option<Stop>>) -> Stop {
    // The borrow guard is not Send, so it must be gone before any await.
    let seen = stop
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|s| s.clone());
    match seen {
        Some(stop) => stop,
        None => std::future::pending().await,
    }
}

fn unexpected(wanted: &str, got: &Option<Frame>) -> HarnessError {
    let got = match got {
        None => "an empty frame",
        Some(Frame::Start(_)) => "start",
        Some(Frame::Cancel(_)) => "cancel",
        Some(Frame::Approval(_)) => "approval",
        Some(Frame::Tool(_)) => "tool",
        Some(Frame::Model(_)) => "model",
        Some(Frame::Park(_)) => "park",
    };
    HarnessError::protocol(format!("expected {wanted}, got {got}"))
}

fn check_result_id(result: &ToolResult, id: &str) -> Result<(), HarnessError> {
    if result.id != id {
        return Err(HarnessError::protocol("tool result correlation mismatch"));
    }
    Ok(())
}

/// Approval fields and the denial code belong to the host's receipts of
/// gated calls; anywhere else they would forge approval evidence.
fn reject_approval_fields(result: &ToolResult) -> Result<(), HarnessError> {
    if result.approval_request_seq != 0
        || result.approval_decision_seq != 0
        || result.code == Code::ApprovalDenied as i32
    {
        return Err(HarnessError::protocol(
            "ungated tool result carries approval fields",
        ));
    }
    Ok(())
}

/// A receipt must bind to the decision it follows, and its outcome must be
/// one the decision allows.
fn check_receipt(result: &ToolResult, decision: &ApprovalResult) -> Result<(), HarnessError> {
    if result.approval_request_seq != decision.request_seq || result.approval_decision_seq <= 0 {
        return Err(HarnessError::protocol(
            "receipt does not bind to the decision",
        ));
    }
    let code = Code::try_from(result.code).ok();
    let consistent = if decision.approved {
        matches!(
            (result.is_error, code),
            (false, Some(Code::Unspecified)) | (true, Some(Code::ExecutorError))
        )
    } else {
        result.is_error && code == Some(Code::ApprovalDenied)
    };
    if !consistent {
        return Err(HarnessError::protocol(
            "receipt outcome contradicts the decision",
        ));
    }
    Ok(())
}
