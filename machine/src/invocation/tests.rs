//! Exact-action tests of the invocation engine, one harness input or
//! completion at a time.

use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, Capabilities, ControllerFrame, Event, EventKind,
    HarnessDescriptor, HarnessEnd, LogRecord, Mediation, ModelCall, ModelResult, Resumability,
    ToolCall, ToolResult, Usage, controller_frame::Frame, event::Body, tool_result,
};

mod divergence;
mod unfinished;

use super::*;
use crate::events;
use crate::journal::approval;
use crate::vocab::{CountingIds, HarnessInput, ModelReply};

const S: &str = "sess-1";
const E: &str = "e1";

fn descriptor(resumability: Resumability) -> HarnessDescriptor {
    HarnessDescriptor {
        id: "echo".into(),
        version: "1".into(),
        capabilities: Some(Capabilities {
            resumability: resumability as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn setup(mode: Mode, stream: Vec<LogRecord>, head: i64) -> Setup {
    Setup {
        session: S.into(),
        execution_id: E.into(),
        wire_id: E.into(),
        mode,
        legacy: false,
        stream,
        approvals: Vec::new(),
        descriptor: Some(descriptor(Resumability::StatelessReplay)),
        fence: 1,
        head,
        head_hash: None,
        has_executor: true,
        tools: crate::vocab::ToolGate::default(),
        budget: None,
    }
}

/// Drives one invocation and keeps the journal it would have written.
struct Rig {
    inv: Invocation,
    ids: CountingIds,
    log: Vec<LogRecord>,
}

impl Rig {
    fn new(setup: Setup, log: Vec<LogRecord>) -> Self {
        Self {
            inv: Invocation::new(setup),
            ids: CountingIds::default(),
            log,
        }
    }

    fn harness(&mut self, input: HarnessInput) -> Vec<Action> {
        let mut out = Vec::new();
        self.inv.on_harness(input, &mut self.ids, &mut out);
        out
    }

    fn event(&mut self, kind: EventKind, body: Body) -> Vec<Action> {
        self.harness(HarnessInput::Event(events::event(E, kind, body)))
    }

    /// Commits an append action as a store would and returns the records.
    fn commit(&mut self, action: &Action) -> Vec<LogRecord> {
        let Action::Append {
            expected_last_seq,
            events,
            last,
        } = action
        else {
            panic!("not an append: {action:?}")
        };
        // The run's last write (END, its cancel records, its ERROR) and
        // nothing else may carry its operation's lease release.
        let ends = events.last().map(events::kind_of);
        let terminal = matches!(ends, Some(EventKind::EventEnd | EventKind::EventError));
        assert_eq!(
            *last, terminal,
            "last marks exactly the terminal write: {events:?}"
        );
        assert_eq!(*expected_last_seq, self.log.len() as i64, "CAS at the head");
        events
            .iter()
            .map(|ev| {
                let seq = self.log.len() as i64 + 1;
                let r = record(seq, ev.clone());
                self.log.push(r.clone());
                r
            })
            .collect()
    }

    fn appended(&mut self, action: &Action) -> Vec<Action> {
        let records = self.commit(action);
        let mut out = Vec::new();
        self.inv.on_appended(Ok(records), &mut self.ids, &mut out);
        out
    }

    fn model(&mut self, reply: Result<ModelReply, ModelFailure>) -> Vec<Action> {
        let mut out = Vec::new();
        self.inv.on_model(reply, &mut self.ids, &mut out);
        out
    }

    fn tool(&mut self, result: Result<ToolResult, String>) -> Vec<Action> {
        self.tool_outcome(result.map_err(ToolFailure::Error))
    }

    fn tool_outcome(&mut self, result: Result<ToolResult, ToolFailure>) -> Vec<Action> {
        let mut out = Vec::new();
        self.inv.on_tool(result, &mut self.ids, &mut out);
        out
    }

    fn kinds(&self) -> Vec<EventKind> {
        self.log
            .iter()
            .map(|r| events::kind_of(r.event.as_ref().unwrap()))
            .collect()
    }

    fn ending(&self) -> Ending {
        self.inv.finished().expect("finished").ending.clone()
    }
}

/// A committed record whose hashes link seq to seq (`h{seq-1}` → `h{seq}`).
fn record(seq: i64, ev: Event) -> LogRecord {
    LogRecord {
        seq,
        prev_hash: if seq > 1 {
            format!("h{}", seq - 1)
        } else {
            String::new()
        },
        content_hash: format!("h{seq}"),
        fence: 1,
        event: Some(ev),
    }
}

fn echo_call(text: &str) -> ModelCall {
    ModelCall {
        model: "echo".into(),
        id: "wire-call-1".into(),
        messages: vec![events::text_message("user", text)],
        ..Default::default()
    }
}

fn frame(f: Frame) -> ControllerFrame {
    ControllerFrame {
        session: S.into(),
        execution_id: E.into(),
        frame: Some(f),
    }
}

fn end() -> Body {
    Body::End(HarnessEnd {
        state: "COMPLETED".into(),
        error: None,
    })
}

fn recorded(out: &[Action]) -> Vec<i64> {
    out.iter()
        .filter_map(|a| match a {
            Action::Recorded(c) => Some(c.record().seq),
            _ => None,
        })
        .collect()
}

/// A recorded echo turn's effects: MODEL_CALL then OUTPUT.
fn recorded_echo(text: &str) -> Vec<Event> {
    let hash = input_hash(&echo_call(text)).unwrap();
    vec![
        events::event(
            E,
            EventKind::EventModelCall,
            Body::Model(ModelCall {
                model: "echo".into(),
                input_hash: hash,
                id: "0000000000000001".into(),
                ..Default::default()
            }),
        ),
        events::output(E, events::assistant_text(&format!("echo:{text}"))),
    ]
}

#[test]
fn live_model_call_records_intent_before_invoking_then_output_before_answering() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    // A stray hash from the harness is neither journaled nor passed on.
    let call = ModelCall {
        input_hash: "stray".into(),
        ..echo_call("hi")
    };
    let out = rig.event(EventKind::EventModelCall, Body::Model(call));
    assert_eq!(out.len(), 1, "only the MODEL_CALL append: {out:?}");
    let Action::Append { events: evs, .. } = &out[0] else {
        panic!()
    };
    let Body::Model(mc) = evs[0].body.clone().unwrap() else {
        panic!()
    };
    assert_eq!(mc.model, "echo");
    assert_eq!(mc.input_hash, input_hash(&echo_call("hi")).unwrap());
    assert!(mc.messages.is_empty(), "messages are wire-only");
    assert!(
        !mc.id.is_empty() && mc.id != "wire-call-1",
        "the journal names the call by a host-minted id: {mc:?}"
    );

    let out = rig.appended(&out[0]);
    let Action::InvokeModel(request) = &out[1] else {
        panic!("{out:?}")
    };
    assert_eq!(recorded(&out), vec![1]);
    assert_eq!(request.messages, echo_call("hi").messages);
    assert!(
        request.id.is_empty() && request.input_hash.is_empty(),
        "the provider sees no wire id or journal hash: {request:?}"
    );

    let reply = events::assistant_text("echo:hi");
    let out = rig.model(Ok(ModelReply {
        message: Some(reply.clone()),
        usage: None,
    }));
    assert!(
        matches!(
            &out[..],
            [Action::Append {
                expected_last_seq: 1,
                ..
            }]
        ),
        "the answer is recorded before it is sent: {out:?}"
    );
    let out = rig.appended(&out[0]);
    assert_eq!(
        out,
        vec![
            Action::Recorded(Committed::new(rig.log[1].clone())),
            Action::Send(frame(Frame::Model(ModelResult {
                message: Some(reply),
                usage: None,
                model_call_id: "wire-call-1".into(),
            }))),
        ]
    );

    let out = rig.event(EventKind::EventEnd, end());
    let out = rig.appended(&out[0]);
    assert_eq!(out[1], Action::Close);
    assert_eq!(rig.ending(), Ending::Completed);
    assert_eq!(
        rig.kinds(),
        vec![
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventEnd
        ]
    );
    assert_eq!(rig.inv.finished().unwrap().model_calls, 1);
}

#[test]
fn replay_serves_the_recorded_completion_without_appending_or_invoking() {
    let stream: Vec<_> = recorded_echo("hi")
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 3, e))
        .collect();
    let mut rig = Rig::new(setup(Mode::Replay, stream, 5), vec![]);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert_eq!(
        out,
        vec![Action::Send(frame(Frame::Model(ModelResult {
            message: Some(events::assistant_text("echo:hi")),
            usage: None,
            model_call_id: "wire-call-1".into(),
        })))]
    );
    let out = rig.event(EventKind::EventEnd, end());
    assert_eq!(out, vec![Action::Close]);
    let finish = rig.inv.finished().unwrap();
    assert_eq!(finish.ending, Ending::Completed);
    assert_eq!(finish.outputs, vec!["echo:hi".to_string()]);
    assert_eq!(finish.model_calls, 0);
    assert!(rig.log.is_empty());
}

#[test]
fn replay_with_a_changed_model_input_diverges_and_closes_without_appending() {
    let stream: Vec<_> = recorded_echo("hi")
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let mut rig = Rig::new(setup(Mode::Replay, stream, 2), vec![]);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("bye")));
    assert_eq!(out, vec![Action::Close]);
    let Ending::Failed(e) = rig.ending() else {
        panic!()
    };
    assert!(e.is_divergence());
    assert!(e.to_string().contains("I0"), "{e}");
}

#[test]
fn replay_that_leaves_recorded_effects_unconsumed_diverges() {
    let stream: Vec<_> = recorded_echo("hi")
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let mut rig = Rig::new(setup(Mode::Replay, stream, 2), vec![]);
    rig.event(EventKind::EventEnd, end());
    let Ending::Failed(e) = rig.ending() else {
        panic!()
    };
    assert!(e.to_string().contains("consumed 0 of 2"), "{e}");
}

#[test]
fn resume_redrives_a_trailing_model_call_once_and_records_only_the_output() {
    let mut log: Vec<LogRecord> = Vec::new();
    let mc = recorded_echo("hi").remove(0);
    log.push(record(1, mc));
    let stream = log.clone();
    let mut rig = Rig::new(setup(Mode::Resume, stream, 1), log);
    // A stray hash from the harness is not passed on either.
    let call = ModelCall {
        input_hash: "stray".into(),
        ..echo_call("hi")
    };
    let out = rig.event(EventKind::EventModelCall, Body::Model(call));
    let [Action::InvokeModel(request)] = &out[..] else {
        panic!("{out:?}")
    };
    assert!(
        request.id.is_empty() && request.input_hash.is_empty(),
        "the re-driven request carries no wire id or journal hash: {request:?}"
    );
    let out = rig.model(Ok(ModelReply {
        message: Some(events::assistant_text("echo:hi")),
        usage: None,
    }));
    let out = rig.appended(&out[0]);
    assert!(matches!(out.last(), Some(Action::Send(_))));
    let out = rig.event(EventKind::EventEnd, end());
    rig.appended(&out[0]);
    assert_eq!(rig.ending(), Ending::Completed);
    assert_eq!(
        rig.kinds(),
        vec![
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventEnd
        ],
        "no second MODEL_CALL"
    );
    assert_eq!(rig.inv.finished().unwrap().model_calls, 1);
}

#[test]
fn resume_after_output_serves_it_and_appends_only_end() {
    let log: Vec<LogRecord> = recorded_echo("hi")
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let mut rig = Rig::new(setup(Mode::Resume, log.clone(), 2), log);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert!(matches!(&out[..], [Action::Send(_)]));
    let out = rig.event(EventKind::EventEnd, end());
    rig.appended(&out[0]);
    assert_eq!(rig.ending(), Ending::Completed);
    assert_eq!(rig.inv.finished().unwrap().model_calls, 0);
    assert_eq!(rig.kinds().last(), Some(&EventKind::EventEnd));
}

fn keyed_call(id: &str, mediation: Mediation) -> ToolCall {
    ToolCall {
        id: id.into(),
        tool: "write".into(),
        mediation: mediation as i32,
        idempotency_key: format!("key-{id}"),
        ..Default::default()
    }
}

#[test]
fn live_mediated_tool_executes_only_after_its_intent_is_durable() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let call = keyed_call("c1", Mediation::ControllerMediated);
    let out = rig.event(EventKind::EventToolCall, Body::Tool(call.clone()));
    assert!(matches!(&out[..], [Action::Append { .. }]), "{out:?}");
    let out = rig.appended(&out[0]);
    let [
        Action::Recorded(r),
        Action::ExecuteTool {
            intent,
            call: c,
            again: false,
            repeatable: false,
        },
    ] = &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(intent, r);
    assert_eq!(c, &call);
    let out = rig.tool(Ok(ToolResult {
        id: "forged".into(),
        ..Default::default()
    }));
    let out = rig.appended(&out[0]);
    let Some(Action::Send(f)) = out.last() else {
        panic!()
    };
    let Some(Frame::Tool(receipt)) = &f.frame else {
        panic!()
    };
    assert_eq!(receipt.id, "c1", "the executor cannot choose the id");
}

#[test]
fn live_unmediated_tool_call_fails_the_turn_with_an_error_record_and_no_intent() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::InHarnessReported)),
    );
    assert_eq!(out[0], Action::Close);
    let Action::Append { events: evs, .. } = &out[1] else {
        panic!()
    };
    assert_eq!(events::kind_of(&evs[0]), EventKind::EventError);
    rig.appended(&out[1]);
    assert!(matches!(
        rig.ending(),
        Ending::Failed(TurnError::Log(LogError::UnmediatedToolCall(_)))
    ));
    assert_eq!(rig.kinds(), vec![EventKind::EventError]);
}

#[test]
fn live_gated_call_commits_intent_and_request_together_then_parks() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 2), vec![]);
    rig.log.push(record(
        1,
        events::input(E, events::text_message("user", "x")),
    ));
    rig.log.push(record(
        2,
        events::input(E, events::text_message("user", "y")),
    ));
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    );
    let Action::Append { events: evs, .. } = &out[0] else {
        panic!()
    };
    assert_eq!(evs.len(), 2, "intent and request in one transaction");
    let out = rig.appended(&out[0]);
    let park = ApprovalRef {
        execution_id: E.into(),
        tool_call_id: "c1".into(),
        request_seq: 4,
    };
    assert_eq!(
        out.last(),
        Some(&Action::Send(frame(Frame::Park(park.clone()))))
    );
    let mut ack = events::event(E, EventKind::EventParked, Body::Parked(park.clone()));
    ack.execution_id = E.into();
    assert!(rig.harness(HarnessInput::Event(ack)).is_empty());
    assert_eq!(rig.harness(HarnessInput::Closed), vec![Action::Close]);
    assert_eq!(rig.ending(), Ending::Parked(park));
    assert_eq!(
        rig.kinds().last(),
        Some(&EventKind::EventApprovalRequest),
        "no END or ERROR after a park"
    );
}

#[test]
fn a_mismatched_park_acknowledgement_fails_without_an_error_record() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    );
    rig.appended(&out[0]);
    let wrong = ApprovalRef {
        execution_id: E.into(),
        tool_call_id: "c2".into(),
        request_seq: 2,
    };
    let out = rig.event(EventKind::EventParked, Body::Parked(wrong));
    assert_eq!(out, vec![Action::Close]);
    assert!(matches!(
        rig.ending(),
        Ending::Failed(TurnError::ParkAck(_))
    ));
    assert_eq!(
        rig.log.len(),
        2,
        "the committed request stays; nothing added"
    );
}

#[test]
fn gating_on_a_memory_snapshot_harness_is_refused_before_any_intent() {
    let mut s = setup(Mode::Live, vec![], 0);
    s.descriptor = Some(descriptor(Resumability::RequiresMemorySnapshot));
    let mut rig = Rig::new(s, vec![]);
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    );
    rig.appended(&out[1]);
    assert_eq!(rig.ending(), Ending::Failed(TurnError::ApprovalUnavailable));
    assert_eq!(rig.kinds(), vec![EventKind::EventError]);
}

/// A journal cut at a decided gate: START, INPUT, TOOL_CALL, REQUEST, RESULT.
fn decided_gate(approved: bool) -> (Vec<LogRecord>, Vec<approval::ApprovalState>) {
    let call = keyed_call("c1", Mediation::RequiresApproval);
    let evs = vec![
        events::execution_start(
            E,
            agentsessions_proto::v1::ExecutionStart {
                input_count: Some(1),
                ..Default::default()
            },
        ),
        events::input(E, events::text_message("user", "go")),
        events::event(E, EventKind::EventToolCall, Body::Tool(call)),
        events::approval_request(E, "c1"),
        events::approval_result(
            E,
            ApprovalResult {
                tool_call_id: "c1".into(),
                approved,
                reason: String::new(),
                request_seq: 4,
            },
            None,
            agentsessions_proto::wkt::Timestamp::new(1, 0),
        ),
    ];
    let log: Vec<_> = evs
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let scan = approval::scan(&log, 0).expect("valid gate");
    (log, scan.states)
}

#[test]
fn resume_of_an_approved_gate_executes_the_recorded_call_and_sends_decision_then_receipt() {
    let (log, states) = decided_gate(true);
    let mut s = setup(Mode::Resume, log[2..].to_vec(), 5);
    s.approvals = states;
    let mut rig = Rig::new(s, log);
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    );
    let [Action::ExecuteTool { intent, .. }] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(intent.record().seq, 3);
    let out = rig.tool(Err("disk full".into()));
    let out = rig.appended(&out[0]);
    let frames: Vec<_> = out
        .iter()
        .filter_map(|a| match a {
            Action::Send(f) => f.frame.clone(),
            _ => None,
        })
        .collect();
    let [Frame::Approval(d), Frame::Tool(receipt)] = &frames[..] else {
        panic!("{frames:?}")
    };
    assert!(d.approved);
    assert!(receipt.is_error, "an executor failure is a durable receipt");
    assert_eq!(
        receipt.code,
        agentsessions_proto::v1::tool_result::Code::ExecutorError as i32
    );
    assert_eq!(
        (receipt.approval_request_seq, receipt.approval_decision_seq),
        (4, 5)
    );
}

#[test]
fn resume_of_a_denied_gate_never_executes_and_records_a_denial_receipt() {
    let (log, states) = decided_gate(false);
    let mut s = setup(Mode::Resume, log[2..].to_vec(), 5);
    s.approvals = states;
    let mut rig = Rig::new(s, log);
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    );
    assert!(
        !out.iter().any(|a| matches!(a, Action::ExecuteTool { .. })),
        "{out:?}"
    );
    let Action::Append { events: evs, .. } = &out[0] else {
        panic!()
    };
    let Some(Body::Result(receipt)) = &evs[0].body else {
        panic!()
    };
    assert!(receipt.is_error);
    assert_eq!(
        receipt.code,
        agentsessions_proto::v1::tool_result::Code::ApprovalDenied as i32
    );
}

#[test]
fn resume_of_an_approved_gate_without_an_executor_seals_without_writing() {
    let (log, states) = decided_gate(true);
    let mut s = setup(Mode::Resume, log[2..].to_vec(), 5);
    s.approvals = states;
    s.has_executor = false;
    let mut rig = Rig::new(s, log);
    let out = rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    );
    assert_eq!(out, vec![Action::Close]);
    assert_eq!(rig.ending(), Ending::Failed(TurnError::MissingToolExecutor));
    assert_eq!(rig.log.len(), 5);
}

#[test]
fn events_queued_while_an_append_is_outstanding_are_processed_in_order() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let first = rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("a")),
    );
    assert!(
        rig.event(
            EventKind::EventOutput,
            Body::Message(events::assistant_text("b"))
        )
        .is_empty(),
        "the second output waits for the first append"
    );
    let out = rig.appended(&first[0]);
    let Some(Action::Append {
        expected_last_seq: 1,
        ..
    }) = out.last()
    else {
        panic!("{out:?}")
    };
}

#[test]
fn an_event_for_another_execution_fails_the_turn() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let mut ev = events::output("other", events::assistant_text("x"));
    ev.execution_id = "other".into();
    let out = rig.harness(HarnessInput::Event(ev));
    assert_eq!(out[0], Action::Close);
    assert!(matches!(&out[1], Action::Append { .. }));
}

/// Found by cargo-mutants: `abort` could do nothing and every machine test
/// stayed green.
#[test]
fn an_abort_between_actions_closes_and_journals_the_error_at_once() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let mut out = Vec::new();
    rig.inv.abort(TurnError::DeadlineExceeded, &mut out);
    assert_eq!(out[0], Action::Close, "{out:?}");
    rig.appended(&out[1]);
    assert_eq!(rig.ending(), Ending::Failed(TurnError::DeadlineExceeded));
    assert_eq!(rig.kinds(), vec![EventKind::EventError]);
    // Later harness input is ignored.
    let out = rig.event(EventKind::EventEnd, end());
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn an_abort_during_a_model_call_closes_now_and_journals_the_error_after_it() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    rig.appended(&out[0]);
    let mut out = Vec::new();
    rig.inv.abort(TurnError::DeadlineExceeded, &mut out);
    assert_eq!(
        out,
        vec![Action::Close],
        "nothing is written while the call is out"
    );
    assert!(rig.inv.finished().is_none());
    // The answer is ignored; the audit ERROR follows it.
    let out = rig.model(Ok(ModelReply {
        message: Some(events::assistant_text("echo:hi")),
        usage: None,
    }));
    let [Action::Append { events, .. }] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(events::kind_of(&events[0]), EventKind::EventError);
    rig.appended(&out[0]);
    assert_eq!(rig.ending(), Ending::Failed(TurnError::DeadlineExceeded));
    assert_eq!(
        rig.kinds(),
        vec![EventKind::EventModelCall, EventKind::EventError]
    );
}

#[test]
fn under_consumption_names_the_execution_on_replay_and_the_recovery_on_resume() {
    let stream: Vec<_> = recorded_echo("hi")
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let mut replay = Rig::new(setup(Mode::Replay, stream.clone(), 2), vec![]);
    replay.event(EventKind::EventEnd, end());
    let Ending::Failed(e) = replay.ending() else {
        panic!()
    };
    assert!(
        e.to_string().contains(&format!("execution {E} consumed")),
        "{e}"
    );
    let mut resume = Rig::new(setup(Mode::Resume, stream.clone(), 2), stream);
    let out = resume.event(EventKind::EventEnd, end());
    // A recovery journals its failure: the ERROR record lands first.
    let error = out.iter().find(|a| matches!(a, Action::Append { .. }));
    let error = error.cloned().expect("an ERROR append");
    resume.appended(&error);
    let Ending::Failed(e) = resume.ending() else {
        panic!()
    };
    assert!(e.to_string().contains("recovery consumed 0 of 2"), "{e}");
}

/// A failed append of `after`'s events must stop the run without an ERROR
/// record (the committed part is recovered later); any other failed append
/// fails it with one.
fn fail_the_append(rig: &mut Rig, append: &Action) -> Vec<Action> {
    assert!(matches!(append, Action::Append { .. }), "{append:?}");
    let mut out = Vec::new();
    let err = AppendError::Failed("disk gone".into());
    rig.inv.on_appended(Err(err), &mut rig.ids, &mut out);
    out
}

#[test]
fn a_failed_request_or_end_append_stops_without_an_error_record() {
    // The gated call's intent and request.
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let call = keyed_call("c1", Mediation::RequiresApproval);
    let out = rig.event(EventKind::EventToolCall, Body::Tool(call));
    let out = fail_the_append(&mut rig, &out[0]);
    assert_eq!(
        out,
        vec![Action::Close],
        "no ERROR append after the request"
    );
    assert!(matches!(rig.ending(), Ending::Failed(_)));
    // The END.
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(EventKind::EventEnd, end());
    let out = fail_the_append(&mut rig, &out[0]);
    assert_eq!(out, vec![Action::Close], "no ERROR append after END");
    // An OUTPUT: the run fails and journals why.
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("a")),
    );
    let out = fail_the_append(&mut rig, &out[0]);
    assert!(
        out.iter().any(|a| matches!(a, Action::Append { .. })),
        "an ERROR record: {out:?}"
    );
}

#[test]
fn the_head_follows_every_append() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    assert_eq!(rig.inv.head(), 0);
    let out = rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("a")),
    );
    rig.appended(&out[0]);
    assert_eq!(rig.inv.head(), 1);
    let out = rig.event(EventKind::EventEnd, end());
    rig.appended(&out[0]);
    assert_eq!(rig.inv.head(), 2);
}

#[test]
fn a_flood_while_an_append_is_outstanding_fails_the_run_once_the_queue_drains() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let output = || Body::Message(events::assistant_text("x"));
    let mut pending = rig.event(EventKind::EventOutput, output());
    // The first OUTPUT waits for its append; the flood queues behind it up
    // to the limit, then one marker, then nothing more.
    for _ in 0..INBOX_LIMIT + 10 {
        assert!(rig.event(EventKind::EventOutput, output()).is_empty());
    }
    let mut appends = 0;
    while let Some(action) = pending.iter().find(|a| matches!(a, Action::Append { .. })) {
        let action = action.clone();
        appends += 1;
        pending = rig.appended(&action);
        if rig.inv.finished().is_some() {
            break;
        }
    }
    let Ending::Failed(e) = rig.ending() else {
        panic!("the flood must fail the run")
    };
    assert!(e.to_string().contains("too many events"), "{e}");
    // The first output, every queued one, then the ERROR record.
    assert_eq!(appends, 1 + INBOX_LIMIT + 1);
    assert_eq!(rig.kinds().last(), Some(&EventKind::EventError));
}

#[test]
fn input_after_the_run_finished_is_ignored() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(EventKind::EventEnd, end());
    rig.appended(&out[0]);
    assert_eq!(rig.ending(), Ending::Completed);
    let late = rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("late")),
    );
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(rig.kinds(), vec![EventKind::EventEnd]);
}

#[test]
fn events_after_an_abort_closed_the_connection_are_dropped() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    rig.appended(&out[0]);
    let mut out = Vec::new();
    rig.inv.abort(TurnError::DeadlineExceeded, &mut out);
    assert_eq!(out, vec![Action::Close]);
    // The harness had more to say; the connection is closed, so it is not
    // heard, neither now nor once the outstanding call returns.
    let late = rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("late")),
    );
    assert!(late.is_empty(), "{late:?}");
    let out = rig.model(Err(ModelFailure::other("gone")));
    let [Action::Append { events, .. }] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(events.len(), 1);
    assert_eq!(events::kind_of(&events[0]), EventKind::EventError);
    let after = rig.appended(&out[0]);
    assert!(
        after.iter().all(|a| matches!(a, Action::Recorded(_))),
        "{after:?}"
    );
    assert_eq!(
        rig.kinds(),
        vec![EventKind::EventModelCall, EventKind::EventError]
    );
}

#[test]
fn a_second_abort_while_the_first_waits_adds_nothing_and_the_first_journals_once() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("a")),
    );
    let mut first = Vec::new();
    rig.inv.abort(TurnError::DeadlineExceeded, &mut first);
    assert_eq!(first, vec![Action::Close], "the append is still out");
    let mut second = Vec::new();
    rig.inv
        .abort(TurnError::Harness("client cancelled".into()), &mut second);
    assert!(second.is_empty(), "{second:?}");
    // The outstanding append lands; then the first cause is journaled.
    let after = rig.appended(&out[0]);
    let error = after.iter().find(|a| matches!(a, Action::Append { .. }));
    let error = error.cloned().expect("the ERROR record");
    rig.appended(&error);
    assert_eq!(rig.ending(), Ending::Failed(TurnError::DeadlineExceeded));
    assert_eq!(
        rig.kinds(),
        vec![EventKind::EventOutput, EventKind::EventError]
    );
}

#[test]
fn host_owned_and_payloadless_events_fail_the_turn_each_with_its_reason() {
    for (kind, body, why) in [
        (
            EventKind::EventApprovalRequest,
            None,
            "host-owned control event",
        ),
        (
            EventKind::EventParked,
            Some(Body::Parked(ApprovalRef::default())),
            "host-owned control event",
        ),
        (EventKind::EventOutput, None, "EVENT_OUTPUT has no payload"),
        (
            EventKind::EventModelCall,
            Some(end()),
            "EVENT_MODEL_CALL has no payload",
        ),
    ] {
        let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
        let mut ev = events::event(E, kind, end());
        ev.body = body;
        let out = rig.harness(HarnessInput::Event(ev));
        let error = out.iter().find(|a| matches!(a, Action::Append { .. }));
        let error = error
            .cloned()
            .unwrap_or_else(|| panic!("{kind:?}: {out:?}"));
        rig.appended(&error);
        let Ending::Failed(e) = rig.ending() else {
            panic!("{kind:?}")
        };
        assert!(e.to_string().contains(why), "{kind:?}: {e}");
    }
}
