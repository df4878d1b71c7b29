//! One harness run over one `Harness.Connect` stream.
//!
//! An [`Invocation`] is the host-side sink of the reference controller as a
//! state machine. It runs in one of three [`Mode`]s:
//!
//! - **Live** (a new turn): every harness request becomes a journaled effect.
//! - **Replay**: every request must match the recorded effects, which are
//!   served back; nothing is appended and nothing is invoked.
//! - **Resume**: the recorded prefix is served as in Replay, a trailing
//!   unanswered model call or tool intent is re-driven once, and the rest
//!   runs live.
//!
//! It consumes harness events ([`HarnessInput`]) and the completions of the
//! actions it asked for, and emits [`Action`]s. At most one asynchronous
//! action (an append, a model call or a tool execution) is outstanding at a
//! time: events that arrive meanwhile wait in an inbox, which serializes the
//! harness's effects exactly as the reference's sink guard does.
//!
//! Over the wire a harness cannot handle a sink error (no frame carries
//! one), so the first error ends the run: the connection is closed and, in
//! Live and Resume, an audit ERROR is appended. A park ends the run without
//! ERROR or END.

mod cancel;
mod serve;
mod sink;

pub use cancel::CancelRefusal;

use std::collections::{BTreeMap, VecDeque};

use agentsessions_proto::v1::{
    ApprovalRef, ControllerFrame, Event, EventKind, HarnessDescriptor, LogRecord, ModelCall,
    ModelResult, ToolCall, ToolResult, controller_frame::Frame, event::Body,
};

use crate::error::{LogError, TurnError};
use crate::events;
use crate::journal::approval::ApprovalState;
use crate::vocab::{
    AppendError, Committed, HarnessInput, IdSource, ModelFailure, ModelReply, ToolFailure,
};
use sink::outcome_unknown;

/// How recorded effects are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A new turn: everything is live.
    Live,
    /// Serve the recorded effects; never append or invoke.
    Replay,
    /// Serve the recorded prefix, re-drive a trailing intent, then go live.
    Resume,
}

/// Everything an invocation needs to know up front.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Session uid (the executor's dedup scope).
    pub session: String,
    /// The execution id stamped on journaled events ("" for legacy turns).
    pub execution_id: String,
    /// The id the harness sees (differs only for legacy compatibility ids).
    pub wire_id: String,
    /// Live, Replay or Resume.
    pub mode: Mode,
    /// The turn is a v0.1.2 id-less turn (legacy rules apply).
    pub legacy: bool,
    /// Recorded effect records to serve, in order (empty when Live).
    pub stream: Vec<LogRecord>,
    /// Scanned approval states of this execution's gated calls.
    pub approvals: Vec<ApprovalState>,
    /// The connected harness's descriptor, if it was described.
    pub descriptor: Option<HarnessDescriptor>,
    /// Fence for appends.
    pub fence: i64,
    /// The journal head when the run starts (CAS for the first append).
    pub head: i64,
    /// The head record's content_hash, when the caller holds it: the first
    /// append must chain from it.
    pub head_hash: Option<String>,
    /// Whether this host can execute host-mediated tools.
    pub has_executor: bool,
    /// The tool policy and catalog live calls are gated by.
    pub tools: crate::vocab::ToolGate,
    /// The session's token budget and the tokens its journal had used
    /// when the run started; `None`: no budget.
    pub budget: Option<TokenBudget>,
}

/// A session's token budget as a run sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBudget {
    /// The most tokens the session may use.
    pub limit: i64,
    /// Tokens committed in its USAGE records.
    pub used: i64,
}

/// What the invocation asks its host to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Append events after `expected_last_seq`; answer with
    /// [`Invocation::on_appended`].
    Append {
        /// CAS.
        expected_last_seq: i64,
        /// Events, in order.
        events: Vec<Event>,
        /// Once this commits the run writes nothing more (its END, its
        /// cancel records, its ERROR): its owner may end the lease with it.
        last: bool,
    },
    /// Invoke the model; answer with [`Invocation::on_model`].
    InvokeModel(ModelCall),
    /// Execute a tool whose intent is durable; answer with
    /// [`Invocation::on_tool`].
    ExecuteTool {
        /// The durable TOOL_CALL record.
        intent: Committed,
        /// The call as recorded.
        call: ToolCall,
        /// Run it although an earlier run started and never finished.
        again: bool,
        /// Running it twice is harmless (see `ExecuteTool::repeatable`).
        repeatable: bool,
    },
    /// A Cancel met the outstanding tool execution: its executor may stop
    /// it early. Advisory; the execution's completion is still awaited and
    /// answered with [`Invocation::on_tool`].
    InterruptTool,
    /// Send a frame to the harness.
    Send(ControllerFrame),
    /// Close the harness connection.
    Close,
    /// A record committed by this invocation (for the caller's stream).
    Recorded(Committed),
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The run completed (END appended, or replay fully consumed).
    Completed,
    /// The run parked on an approval request; nothing more was appended.
    Parked(ApprovalRef),
    /// The run failed.
    Failed(TurnError),
    /// A Cancel ended it: CANCEL and END{CANCELED} are durable.
    Canceled,
}

/// The final report of an invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// How it ended.
    pub ending: Ending,
    /// The head after the last append this invocation made.
    pub head: i64,
    /// Text of served completions and outputs, in order.
    pub outputs: Vec<String>,
    /// Live model invocations made (zero on replay: invariant I1).
    pub model_calls: usize,
    /// Tool executions requested.
    pub tool_calls: usize,
}

/// Which kind of call an id was used for in this invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallKind {
    Ordinary,
    Gated,
}

/// What to do once the outstanding append commits.
#[derive(Debug, Clone, PartialEq)]
enum AfterAppend {
    /// Nothing: take the next harness event.
    Continue,
    /// Send these frames, then continue.
    Send(Vec<ControllerFrame>),
    /// Like `Send`, but a failed append seals the sink (no ERROR record):
    /// used for an approved gate's receipt, whose effect may have happened.
    SendSealed(Vec<ControllerFrame>),
    /// MODEL_CALL is durable: invoke the model, answer `reply_to`.
    InvokeModel {
        reply_to: String,
        request: ModelCall,
    },
    /// TOOL_CALL is durable: execute it.
    ExecuteTool { call: ToolCall },
    /// TOOL_CALL + APPROVAL_REQUEST are durable: park.
    Park { call_id: String },
    /// The terminal END is durable: finish.
    Finish,
    /// CANCEL and END{CANCELED} are durable: close and finish canceled.
    Canceled,
}

/// The single outstanding asynchronous action.
#[derive(Debug, Clone, PartialEq)]
enum Wait {
    /// Nothing outstanding.
    Idle,
    /// An append.
    Append(AfterAppend),
    /// A model invocation whose completion answers `reply_to`.
    Model { reply_to: String },
    /// A tool execution; `gate` set when it completes an approved call,
    /// `again` when it re-runs a call whose earlier run never finished.
    Tool {
        intent: Committed,
        call: ToolCall,
        gate: Option<GateSeqs>,
        again: bool,
    },
    /// A best-effort ERROR append; the run already failed with this error.
    ErrorRecord(TurnError),
}

/// How a sink entry point failed.
#[derive(Debug)]
enum Fault {
    /// End the run; Live and Resume append an audit ERROR.
    Fail(TurnError),
    /// Seal the sink: end the run and append nothing more.
    Stop(TurnError),
}

impl From<TurnError> for Fault {
    fn from(e: TurnError) -> Self {
        Self::Fail(e)
    }
}

impl From<LogError> for Fault {
    fn from(e: LogError) -> Self {
        Self::Fail(e.into())
    }
}

/// Sequence numbers that bind a receipt to its approval evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GateSeqs {
    request: i64,
    decision: i64,
}

/// Where the park handshake stands.
#[derive(Debug, Clone, PartialEq)]
enum Park {
    /// Waiting for EVENT_PARKED.
    AwaitAck(ApprovalRef),
    /// Waiting for the harness to close its side.
    AwaitClose(ApprovalRef),
}

/// One harness run. See the module docs.
#[derive(Debug)]
pub struct Invocation {
    setup: Setup,
    cursor: usize,
    head: i64,
    /// The head record's content_hash, once known.
    head_hash: Option<String>,
    calls: BTreeMap<String, CallKind>,
    inbox: VecDeque<HarnessInput>,
    wait: Wait,
    park: Option<Park>,
    finish: Option<Finish>,
    outputs: Vec<String>,
    model_calls: usize,
    tool_calls: usize,
    closed: bool,
    aborting: Option<TurnError>,
    /// The reason of a Cancel being carried out.
    canceling: Option<(String, Option<agentsessions_proto::v1::IdentityRef>)>,
    /// Tokens the session has used, this run's USAGE records included
    /// (counted only when it has a budget).
    tokens_used: i64,
}

/// Most harness events the inbox holds before the run is failed; a harness
/// that floods the host without waiting for answers is misbehaving.
pub const INBOX_LIMIT: usize = 4096;

impl Invocation {
    /// Creates the invocation. The caller sends the Start frame.
    pub fn new(setup: Setup) -> Self {
        assert!(
            setup.mode != Mode::Live || setup.stream.is_empty(),
            "a live invocation serves nothing"
        );
        let head = setup.head;
        assert!(head >= 0, "a journal head is never negative");
        let head_hash = setup.head_hash.clone();
        let tokens_used = setup.budget.map_or(0, |b| b.used);
        Self {
            tokens_used,
            setup,
            cursor: 0,
            head,
            head_hash,
            calls: BTreeMap::new(),
            inbox: VecDeque::new(),
            wait: Wait::Idle,
            park: None,
            finish: None,
            outputs: Vec::new(),
            model_calls: 0,
            tool_calls: 0,
            closed: false,
            aborting: None,
            canceling: None,
        }
    }

    /// The final report, once the run is over.
    pub fn finished(&self) -> Option<&Finish> {
        self.finish.as_ref()
    }

    /// The setup this invocation runs with.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The current head as this invocation knows it.
    pub fn head(&self) -> i64 {
        self.head
    }

    /// A frame on this invocation's connection, envelope filled in.
    pub(crate) fn frame(&self, frame: Frame) -> ControllerFrame {
        ControllerFrame {
            session: self.setup.session.clone(),
            execution_id: self.setup.wire_id.clone(),
            frame: Some(frame),
        }
    }

    /// Ends the run from outside (deadline, cancellation): the connection
    /// closes now; the audit ERROR is written once the outstanding action,
    /// if any, has completed (its result is then ignored).
    pub fn abort(&mut self, err: TurnError, out: &mut Vec<Action>) {
        // A Cancel already under way ends the run its own way.
        if self.finish.is_some() || self.aborting.is_some() || self.canceling.is_some() {
            return;
        }
        self.inbox.clear();
        self.park = None;
        if self.wait == Wait::Idle {
            self.fail(err, out);
        } else {
            self.close(out);
            self.aborting = Some(err);
        }
    }

    /// After an outstanding action completes during an abort.
    fn resolve_abort(&mut self, out: &mut Vec<Action>) -> bool {
        match self.aborting.take() {
            Some(err) => {
                self.wait = Wait::Idle;
                self.fail(err, out);
                true
            }
            None => false,
        }
    }

    /// Takes one harness input.
    pub fn on_harness(
        &mut self,
        input: HarnessInput,
        ids: &mut dyn IdSource,
        out: &mut Vec<Action>,
    ) {
        if self.finish.is_some() || self.closed_for_input() || self.canceling.is_some() {
            return;
        }
        if self.inbox.len() >= INBOX_LIMIT {
            // Drop the flood; the run fails when the queue reaches this mark.
            if !matches!(self.inbox.back(), Some(HarnessInput::Failed(_))) {
                self.inbox.push_back(HarnessInput::Failed(
                    "harness sent too many events without waiting".into(),
                ));
            }
            return;
        }
        self.inbox.push_back(input);
        self.pump(ids, out);
    }

    /// Completion of an [`Action::Append`].
    pub fn on_appended(
        &mut self,
        result: Result<Vec<LogRecord>, AppendError>,
        ids: &mut dyn IdSource,
        out: &mut Vec<Action>,
    ) {
        let wait = std::mem::replace(&mut self.wait, Wait::Idle);
        if self.aborting.is_some() {
            if let (Ok(records), Wait::Append(_)) = (&result, &wait) {
                self.note_appended(records, out);
            }
            if !matches!(wait, Wait::ErrorRecord(_)) {
                self.resolve_abort(out);
                return;
            }
        }
        let records = match (result, wait) {
            (result, Wait::ErrorRecord(err)) => {
                // Best effort: the run failed already, whatever happened here.
                if let Ok(records) = result {
                    self.note_appended(&records, out);
                }
                self.conclude(Ending::Failed(err));
                return;
            }
            (Ok(records), Wait::Append(after)) => (records, after),
            (Err(e), Wait::Append(after)) => {
                let err = TurnError::Append(e);
                if self.canceling.is_some() {
                    // Whatever failed (the cancel records or the append
                    // before them), nothing more is written.
                    self.stop(err, out);
                    return;
                }
                match after {
                    // A failed request append seals the sink: nothing more
                    // is written and the committed call is recovered later.
                    AfterAppend::Park { .. } | AfterAppend::SendSealed(_) => self.stop(err, out),
                    // A failed END leaves the turn for Resume to finish.
                    AfterAppend::Finish => self.stop(err, out),
                    _ => self.fail(err, out),
                }
                return;
            }
            (_, other) => panic!("append completion while waiting for {other:?}"),
        };
        let (records, after) = records;
        self.note_appended(&records, out);
        if self.canceling.is_some() {
            match after {
                AfterAppend::Canceled => {
                    self.close(out);
                    self.conclude(Ending::Canceled);
                }
                // The turn's END won the race: it stays completed.
                AfterAppend::Finish => {
                    self.close(out);
                    self.conclude(Ending::Completed);
                }
                // What the append was for (a model call, a tool, a park,
                // frames to the harness) does not happen.
                _ => self.write_cancel(out),
            }
            return;
        }
        match after {
            AfterAppend::Continue => {}
            AfterAppend::Send(frames) | AfterAppend::SendSealed(frames) => {
                out.extend(frames.into_iter().map(Action::Send))
            }
            AfterAppend::InvokeModel { reply_to, request } => {
                self.model_calls += 1;
                self.wait = Wait::Model { reply_to };
                out.push(Action::InvokeModel(request));
                return;
            }
            AfterAppend::ExecuteTool { call } => {
                if !self.setup.has_executor {
                    self.fail(
                        TurnError::Sink("controller: no tool executor configured".into()),
                        out,
                    );
                    return;
                }
                let intent = records.last().cloned().expect("a tool intent was appended");
                self.execute(Committed::new(intent), call, None, false, out);
                return;
            }
            AfterAppend::Park { call_id } => {
                let request_seq = records.last().map(|r| r.seq).expect("request appended");
                let park = ApprovalRef {
                    execution_id: self.setup.wire_id.clone(),
                    tool_call_id: call_id,
                    request_seq,
                };
                out.push(Action::Send(self.frame(Frame::Park(park.clone()))));
                self.park = Some(Park::AwaitAck(park));
                self.pump(ids, out);
                return;
            }
            AfterAppend::Finish => {
                self.close(out);
                self.conclude(Ending::Completed);
                return;
            }
            AfterAppend::Canceled => {
                unreachable!("cancel records are written only while canceling")
            }
        }
        self.pump(ids, out);
    }

    /// Completion of an [`Action::InvokeModel`].
    pub fn on_model(
        &mut self,
        result: Result<ModelReply, ModelFailure>,
        ids: &mut dyn IdSource,
        out: &mut Vec<Action>,
    ) {
        assert!(
            self.canceling.is_none(),
            "an abandoned model call's answer is dropped by the caller"
        );
        let Wait::Model { reply_to } = std::mem::replace(&mut self.wait, Wait::Idle) else {
            panic!("model completion without an outstanding model call");
        };
        if self.resolve_abort(out) {
            return;
        }
        match result {
            Err(e) if e.unavailable => self.fail(TurnError::ModelUnavailable(e.message), out),
            Err(e) => self.fail(TurnError::Model(e.message), out),
            Ok(reply) => {
                let message = reply.message.clone().unwrap_or_default();
                self.note_output(reply.message.as_ref());
                let frame = self.frame(Frame::Model(ModelResult {
                    message: reply.message,
                    usage: reply.usage,
                    model_call_id: reply_to,
                }));
                let ev = events::output(&self.setup.execution_id, message);
                self.append(vec![ev], AfterAppend::Send(vec![frame]), out);
                let _ = ids;
            }
        }
    }

    /// Completion of an [`Action::ExecuteTool`].
    pub fn on_tool(
        &mut self,
        result: Result<ToolResult, ToolFailure>,
        ids: &mut dyn IdSource,
        out: &mut Vec<Action>,
    ) {
        let Wait::Tool {
            intent,
            call,
            gate,
            again,
        } = std::mem::replace(&mut self.wait, Wait::Idle)
        else {
            panic!("tool completion without an outstanding tool call");
        };
        if self.resolve_abort(out) {
            return;
        }
        let result = match result {
            Err(ToolFailure::Unfinished) if self.canceling.is_none() => {
                // The unknown-outcome rule: run it again only where that is
                // safe; otherwise its durable answer is that nobody knows.
                let rerun = !again
                    && (self.setup.tools.may_rerun(&call.tool) || crate::planted!(RerunUnfinished));
                if rerun {
                    self.execute(intent, call, gate, true, out);
                    return;
                }
                Ok(outcome_unknown(&call))
            }
            Err(e) => Err(e.message()),
            Ok(r) => Ok(r),
        };
        match gate {
            None => match result {
                // Canceling: the failure is not recorded; the cancel is.
                Err(_) if self.canceling.is_some() => self.write_cancel(out),
                // An ordinary executor failure writes no result; the intent
                // stays unresolved and the run ends with the error.
                Err(e) => self.fail(TurnError::Sink(e), out),
                Ok(mut receipt) => {
                    receipt.id = call.id.clone();
                    self.record_receipt(receipt, None, out);
                }
            },
            Some(seqs) => {
                // An approved gate's executor failure is a durable receipt.
                let receipt = crate::journal::approval::executor_receipt(
                    &call.id,
                    seqs.request,
                    seqs.decision,
                    result,
                );
                self.record_receipt(receipt, Some(seqs), out);
            }
        }
        let _ = ids;
    }

    /// Appends a tool receipt and, once durable, sends it (after the
    /// decision frame for gated calls).
    fn record_receipt(
        &mut self,
        receipt: ToolResult,
        gate: Option<GateSeqs>,
        out: &mut Vec<Action>,
    ) {
        let mut frames = Vec::new();
        if let Some(seqs) = gate {
            let decision = self
                .approval(&receipt.id)
                .and_then(|s| s.decision_body().cloned())
                .expect("a completed gate has a decision");
            debug_assert_eq!(decision.request_seq, seqs.request);
            frames.push(self.frame(Frame::Approval(decision)));
        }
        frames.push(self.frame(Frame::Tool(receipt.clone())));
        let ev = events::event(
            &self.setup.execution_id,
            EventKind::EventToolResult,
            Body::Result(receipt),
        );
        let after = if gate.is_some() {
            AfterAppend::SendSealed(frames)
        } else {
            AfterAppend::Send(frames)
        };
        self.append(vec![ev], after, out);
    }

    /// Asks for a tool execution of a durable intent; `again` re-runs one
    /// whose earlier run never finished.
    fn execute(
        &mut self,
        intent: Committed,
        call: ToolCall,
        gate: Option<GateSeqs>,
        again: bool,
        out: &mut Vec<Action>,
    ) {
        assert_eq!(
            crate::events::kind_of(intent.record().event.as_ref().expect("intent has an event")),
            EventKind::EventToolCall,
            "a tool executes only after its TOOL_CALL is durable"
        );
        assert!(
            !again || self.setup.mode != Mode::Replay,
            "replay runs nothing"
        );
        if !again {
            self.tool_calls += 1;
        }
        self.wait = Wait::Tool {
            intent: intent.clone(),
            call: call.clone(),
            gate,
            again,
        };
        let repeatable = self.setup.tools.harmless_twice(&call.tool);
        out.push(Action::ExecuteTool {
            intent,
            call,
            again,
            repeatable,
        });
    }

    /// Issues an append at the current head.
    fn append(&mut self, events: Vec<Event>, after: AfterAppend, out: &mut Vec<Action>) {
        assert_eq!(self.wait, Wait::Idle, "one outstanding action at a time");
        assert!(
            self.setup.mode != Mode::Replay,
            "replay never appends (invariant I5)"
        );
        let last = matches!(after, AfterAppend::Finish | AfterAppend::Canceled);
        self.wait = Wait::Append(after);
        out.push(Action::Append {
            expected_last_seq: self.head,
            events,
            last,
        });
    }

    /// Processes queued harness events until one needs to wait.
    fn pump(&mut self, ids: &mut dyn IdSource, out: &mut Vec<Action>) {
        while self.wait == Wait::Idle && self.finish.is_none() {
            let Some(input) = self.inbox.pop_front() else {
                return;
            };
            if let Some(park) = self.park.clone() {
                self.on_park_input(park, input, out);
                continue;
            }
            match input {
                HarnessInput::Closed => self.run_ended(None, out),
                HarnessInput::Failed(e) => self.run_ended(Some(TurnError::Harness(e)), out),
                HarnessInput::Unavailable(e) => {
                    self.run_ended(Some(TurnError::HarnessUnavailable(e)), out)
                }
                HarnessInput::Event(ev) => self.on_event(ev, ids, out),
            }
        }
    }

    /// Routes one harness event to its sink entry point.
    fn on_event(&mut self, ev: Event, ids: &mut dyn IdSource, out: &mut Vec<Action>) {
        if ev.execution_id != self.setup.wire_id {
            self.fail(
                TurnError::Harness(format!(
                    "harness event for execution {:?}, expected {:?}",
                    ev.execution_id, self.setup.wire_id
                )),
                out,
            );
            return;
        }
        let kind = events::kind_of(&ev);
        let result: Result<(), Fault> = match (kind, ev.body) {
            (EventKind::EventModelCall, Some(Body::Model(mc))) => self.model(mc, ids, out),
            (EventKind::EventOutput, Some(Body::Message(m))) => {
                self.output(events::message_text(&m), out)
            }
            (EventKind::EventToolCall, Some(Body::Tool(tc))) => self.tool_call(tc, out),
            (EventKind::EventToolResult, Some(Body::Result(tr))) => self.report(tr, out),
            (EventKind::EventUsage, Some(Body::Usage(u))) => self.usage(u, out),
            (EventKind::EventEnd, body) => {
                let end = match body {
                    Some(Body::End(end)) => end,
                    _ => Default::default(),
                };
                if end.state == "COMPLETED" {
                    self.run_ended(None, out);
                } else {
                    let mut text = format!("remote harness ended {}", end.state);
                    if let Some(e) = end.error.filter(|e| !e.description.is_empty()) {
                        text.push_str(": ");
                        text.push_str(&e.description);
                    }
                    self.run_ended(Some(TurnError::Harness(text)), out);
                }
                Ok(())
            }
            (
                EventKind::EventApprovalRequest
                | EventKind::EventApprovalResult
                | EventKind::EventExecutionStart
                | EventKind::EventParked,
                _,
            ) => Err(TurnError::Harness("harness emitted host-owned control event".into()).into()),
            (
                EventKind::EventModelCall
                | EventKind::EventOutput
                | EventKind::EventToolCall
                | EventKind::EventToolResult
                | EventKind::EventUsage,
                _,
            ) => Err(TurnError::Harness(format!(
                "harness event {} has no payload",
                kind.as_str_name()
            ))
            .into()),
            // Other kinds carry nothing the host acts on.
            _ => Ok(()),
        };
        match result {
            Ok(()) => {}
            Err(Fault::Fail(e)) => self.fail(e, out),
            Err(Fault::Stop(e)) => self.stop(e, out),
        }
    }

    /// The harness finished its run (cleanly when `error` is None).
    fn run_ended(&mut self, error: Option<TurnError>, out: &mut Vec<Action>) {
        if let Some(e) = error {
            self.fail(e, out);
            return;
        }
        let remaining = self.setup.stream.len() - self.cursor;
        if self.setup.mode != Mode::Live && remaining > 0 {
            let what = if self.setup.mode == Mode::Replay {
                "execution"
            } else {
                "recovery"
            };
            let detail = if self.setup.mode == Mode::Replay {
                format!(
                    "{what} {} consumed {} of {} recorded effects",
                    self.setup.wire_id,
                    self.cursor,
                    self.setup.stream.len()
                )
            } else {
                format!(
                    "recovery consumed {} of {} recorded effects",
                    self.cursor,
                    self.setup.stream.len()
                )
            };
            self.fail(LogError::diverged(detail).into(), out);
            return;
        }
        match self.setup.mode {
            Mode::Replay => {
                assert_eq!(self.model_calls, 0, "replay never invokes the model (I1)");
                self.close(out);
                self.conclude(Ending::Completed);
            }
            Mode::Live | Mode::Resume => {
                let ev = events::end_completed(&self.setup.execution_id);
                self.append(vec![ev], AfterAppend::Finish, out);
            }
        }
    }

    /// Advances the head over committed records and reports them.
    fn note_appended(&mut self, records: &[LogRecord], out: &mut Vec<Action>) {
        for r in records {
            assert_eq!(r.seq, self.head + 1, "appended records follow the head");
            if let Some(head_hash) = &self.head_hash {
                assert_eq!(
                    &r.prev_hash, head_hash,
                    "appended records chain from the head hash"
                );
            }
            self.head = r.seq;
            self.head_hash = Some(r.content_hash.clone());
            out.push(Action::Recorded(Committed::new(r.clone())));
        }
    }

    /// Ends the run with `err`: close, then (Live/Resume) an audit ERROR.
    fn fail(&mut self, err: TurnError, out: &mut Vec<Action>) {
        assert!(self.finish.is_none(), "a finished run cannot fail again");
        assert_eq!(self.wait, Wait::Idle, "a run fails between actions");
        self.close(out);
        if self.setup.mode == Mode::Replay {
            self.conclude(Ending::Failed(err));
            return;
        }
        let ev = events::error(&self.setup.execution_id, &err.to_string());
        self.wait = Wait::ErrorRecord(err);
        out.push(Action::Append {
            expected_last_seq: self.head,
            events: vec![ev],
            last: true,
        });
    }

    /// Ends the run with a sticky stop: close, append nothing.
    fn stop(&mut self, err: TurnError, out: &mut Vec<Action>) {
        self.close(out);
        self.conclude(Ending::Failed(err));
    }

    /// The park handshake: one matching EVENT_PARKED, then a clean close.
    fn on_park_input(&mut self, park: Park, input: HarnessInput, out: &mut Vec<Action>) {
        match (park, input) {
            (Park::AwaitAck(want), HarnessInput::Event(ev)) => {
                let ok = events::kind_of(&ev) == EventKind::EventParked
                    && ev.execution_id == want.execution_id
                    && matches!(&ev.body, Some(Body::Parked(r)) if *r == want);
                if ok {
                    self.park = Some(Park::AwaitClose(want));
                } else {
                    self.park_failed("correlation mismatch".into(), out);
                }
            }
            (Park::AwaitClose(want), HarnessInput::Closed) => {
                self.close(out);
                self.conclude(Ending::Parked(want));
            }
            (Park::AwaitClose(_), HarnessInput::Event(ev)) => self.park_failed(
                format!(
                    "expected stream closure after park acknowledgement, got {}",
                    events::kind_of(&ev).as_str_name()
                ),
                out,
            ),
            (_, HarnessInput::Closed) => self.park_failed("stream closed before ack".into(), out),
            (_, HarnessInput::Failed(e) | HarnessInput::Unavailable(e)) => self.park_failed(e, out),
        }
    }

    fn park_failed(&mut self, detail: String, out: &mut Vec<Action>) {
        // The request stays committed; a later Resume parks again.
        self.stop(TurnError::ParkAck(detail), out);
    }

    fn close(&mut self, out: &mut Vec<Action>) {
        if !self.closed {
            self.closed = true;
            out.push(Action::Close);
        }
    }

    fn closed_for_input(&self) -> bool {
        self.closed && self.park.is_none()
    }

    fn conclude(&mut self, ending: Ending) {
        assert!(self.finish.is_none(), "an invocation finishes once");
        self.inbox.clear();
        self.finish = Some(Finish {
            ending,
            head: self.head,
            outputs: std::mem::take(&mut self.outputs),
            model_calls: self.model_calls,
            tool_calls: self.tool_calls,
        });
    }

    /// Records the text of a served or live completion for the report.
    fn note_output(&mut self, message: Option<&agentsessions_proto::v1::Message>) {
        if let Some(m) = message {
            self.outputs.push(events::message_text(m));
        }
    }

    /// The scanned approval state of a gated call in this execution.
    fn approval(&self, call_id: &str) -> Option<&ApprovalState> {
        self.setup.approvals.iter().find(|s| s.call.id == call_id)
    }

    /// True while recorded effects remain to be served.
    fn serving(&self) -> bool {
        self.setup.mode != Mode::Live && self.cursor < self.setup.stream.len()
    }
}

/// The model input hash the host records and checks (invariant I0).
pub(crate) fn input_hash(mc: &ModelCall) -> Result<String, TurnError> {
    crate::inputhash::input_hash(&crate::inputhash::from_model_call(mc))
        .map_err(|e| TurnError::Sink(format!("model input cannot be hashed: {e}")))
}

#[cfg(test)]
mod tests;
