//! Scripted harnesses: the harness side of `Harness.Connect` as small state
//! machines (frames in, events out), for tests and simulation.

use agentsessions_proto::v1::{
    Capabilities, ControllerFrame, Event, EventKind, HarnessDescriptor, HarnessEnd, Mediation,
    Message, ModelCall, Resumability, ToolCall, ToolResult, Usage, controller_frame::Frame,
    event::Body,
};

use agentsessions_machine::events;

/// What a harness sends in answer to one frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// Events to send, in order.
    pub events: Vec<Event>,
    /// Close the send side after them.
    pub close: bool,
    /// Fail the stream after them (takes precedence over `close`).
    pub fail: Option<String>,
}

impl Reply {
    /// Sends `events` and keeps the stream open.
    pub fn send(events: Vec<Event>) -> Self {
        Self {
            events,
            ..Self::default()
        }
    }

    /// Sends `events`, then closes cleanly.
    pub fn finish(events: Vec<Event>) -> Self {
        Self {
            events,
            close: true,
            fail: None,
        }
    }
}

/// A harness's side of one connection.
pub trait Script: Send {
    /// The harness's static contract.
    fn descriptor(&self) -> HarnessDescriptor;
    /// Answers one controller frame.
    fn on_frame(&mut self, frame: &ControllerFrame) -> Reply;
}

/// A descriptor with `id`, version "1" and `resumability`.
pub fn descriptor(id: &str, resumability: Resumability) -> HarnessDescriptor {
    HarnessDescriptor {
        id: id.into(),
        version: "1".into(),
        models: vec!["echo".into()],
        tools: Vec::new(),
        capabilities: Some(Capabilities {
            resumability: resumability as i32,
            fork_safe: true,
            ..Capabilities::default()
        }),
    }
}

/// An event of `kind` for execution `exec`.
pub fn ev(exec: &str, kind: EventKind, body: Body) -> Event {
    events::event(exec, kind, body)
}

/// A COMPLETED end event.
pub fn end(exec: &str) -> Event {
    ev(
        exec,
        EventKind::EventEnd,
        Body::End(HarnessEnd {
            state: "COMPLETED".into(),
            error: None,
        }),
    )
}

fn last_input_text(inputs: &[Message]) -> String {
    inputs.last().map(events::message_text).unwrap_or_default()
}

/// The reference echo harness: one model call with the last input's text,
/// then END. The host records MODEL_CALL and the completion as OUTPUT.
#[derive(Debug, Default)]
pub struct Echo {
    exec: String,
}

impl Script for Echo {
    fn descriptor(&self) -> HarnessDescriptor {
        descriptor("echo", Resumability::StatelessReplay)
    }

    fn on_frame(&mut self, frame: &ControllerFrame) -> Reply {
        match &frame.frame {
            Some(Frame::Start(start)) => {
                self.exec = frame.execution_id.clone();
                let call = ModelCall {
                    model: "echo".into(),
                    id: "m1".into(),
                    messages: vec![events::text_message(
                        "user",
                        &last_input_text(&start.inputs),
                    )],
                    ..ModelCall::default()
                };
                Reply::send(vec![ev(
                    &self.exec,
                    EventKind::EventModelCall,
                    Body::Model(call),
                )])
            }
            Some(Frame::Model(_)) => Reply::finish(vec![end(&self.exec)]),
            _ => Reply::default(),
        }
    }
}

/// Calls one tool with the given mediation, then reports the receipt's
/// outcome as output. Under REQUIRES_APPROVAL it acknowledges a park.
#[derive(Debug)]
pub struct ToolUser {
    exec: String,
    mediation: Mediation,
    tool: &'static str,
}

impl ToolUser {
    /// A harness whose tool calls use `mediation`.
    pub fn new(mediation: Mediation) -> Self {
        Self::calling("write", mediation)
    }

    /// A harness calling `tool` with `mediation`.
    pub fn calling(tool: &'static str, mediation: Mediation) -> Self {
        Self {
            exec: String::new(),
            mediation,
            tool,
        }
    }

    /// The call this harness makes.
    pub fn call(&self) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            tool: self.tool.into(),
            args: None,
            mediation: self.mediation as i32,
            idempotency_key: "k1".into(),
        }
    }
}

impl Script for ToolUser {
    fn descriptor(&self) -> HarnessDescriptor {
        descriptor("tools", Resumability::StatelessReplay)
    }

    fn on_frame(&mut self, frame: &ControllerFrame) -> Reply {
        match &frame.frame {
            Some(Frame::Start(_)) => {
                self.exec = frame.execution_id.clone();
                Reply::send(vec![ev(
                    &self.exec,
                    EventKind::EventToolCall,
                    Body::Tool(self.call()),
                )])
            }
            Some(Frame::Park(park)) => Reply::finish(vec![ev(
                &self.exec,
                EventKind::EventParked,
                Body::Parked(park.clone()),
            )]),
            Some(Frame::Approval(_)) => Reply::default(),
            Some(Frame::Tool(receipt)) => {
                let text = if receipt.is_error {
                    format!("tool failed: {}", receipt.error)
                } else {
                    "tool ok".to_owned()
                };
                Reply::finish(vec![
                    ev(
                        &self.exec,
                        EventKind::EventOutput,
                        Body::Message(events::assistant_text(&text)),
                    ),
                    end(&self.exec),
                ])
            }
            _ => Reply::default(),
        }
    }
}

/// A harness that needs memory snapshots: it outputs a counter it keeps in
/// RAM (`count` is restored by the world from snapshots).
#[derive(Debug)]
pub struct Counter {
    /// The in-memory count.
    pub count: u64,
}

impl Script for Counter {
    fn descriptor(&self) -> HarnessDescriptor {
        let mut d = descriptor("counter", Resumability::RequiresMemorySnapshot);
        d.models.clear();
        d
    }

    fn on_frame(&mut self, frame: &ControllerFrame) -> Reply {
        match &frame.frame {
            Some(Frame::Start(_)) => {
                self.count += 1;
                let exec = frame.execution_id.clone();
                Reply::finish(vec![
                    ev(
                        &exec,
                        EventKind::EventOutput,
                        Body::Message(events::assistant_text(&self.count.to_string())),
                    ),
                    end(&exec),
                ])
            }
            _ => Reply::default(),
        }
    }
}

/// A script written as a closure over each frame, with a fixed descriptor;
/// the closure may keep state across frames.
pub struct FnScript<F> {
    descriptor: HarnessDescriptor,
    on_frame: F,
}

impl<F> FnScript<F>
where
    F: FnMut(&ControllerFrame) -> Reply + Send + 'static,
{
    /// A stateless-replay script with descriptor id `id`.
    pub fn new(id: &str, on_frame: F) -> Self {
        Self::with_descriptor(descriptor(id, Resumability::StatelessReplay), on_frame)
    }

    /// A script with an explicit descriptor.
    pub fn with_descriptor(descriptor: HarnessDescriptor, on_frame: F) -> Self {
        Self {
            descriptor,
            on_frame,
        }
    }
}

impl<F> Script for FnScript<F>
where
    F: FnMut(&ControllerFrame) -> Reply + Send,
{
    fn descriptor(&self) -> HarnessDescriptor {
        self.descriptor.clone()
    }

    fn on_frame(&mut self, frame: &ControllerFrame) -> Reply {
        (self.on_frame)(frame)
    }
}

/// A keyed call `id` with `mediation` (key `k-<id>`).
pub fn keyed_call(id: &str, mediation: Mediation) -> ToolCall {
    ToolCall {
        id: id.into(),
        tool: "write".into(),
        args: None,
        mediation: mediation as i32,
        idempotency_key: format!("k-{id}"),
    }
}

/// Makes gated calls `ids` one after another: each next call follows the
/// previous call's receipt, and after the last receipt it outputs the
/// receipts' outcomes and ends. Acknowledges parks.
pub fn gates(ids: &'static [&'static str]) -> impl FnMut(&ControllerFrame) -> Reply + Send {
    let mut exec = String::new();
    let mut next = 0usize;
    let mut seen = Vec::new();
    move |frame| match &frame.frame {
        Some(Frame::Start(_)) => {
            exec = frame.execution_id.clone();
            next = 1;
            let call = keyed_call(ids[0], Mediation::RequiresApproval);
            Reply::send(vec![ev(&exec, EventKind::EventToolCall, Body::Tool(call))])
        }
        Some(Frame::Park(park)) => Reply::finish(vec![ev(
            &exec,
            EventKind::EventParked,
            Body::Parked(park.clone()),
        )]),
        Some(Frame::Tool(receipt)) => {
            seen.push(if receipt.is_error { "denied" } else { "ok" });
            if next < ids.len() {
                let call = keyed_call(ids[next], Mediation::RequiresApproval);
                next += 1;
                return Reply::send(vec![ev(&exec, EventKind::EventToolCall, Body::Tool(call))]);
            }
            let text = seen.join(",");
            Reply::finish(vec![
                ev(
                    &exec,
                    EventKind::EventOutput,
                    Body::Message(events::assistant_text(&text)),
                ),
                end(&exec),
            ])
        }
        _ => Reply::default(),
    }
}

/// One step of a [`steps`] harness.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A tool call; the harness then waits for its receipt (or a park).
    Call(ToolCall),
    /// A model call with this user text; the harness waits for the answer.
    Model(String),
    /// A result of a tool the harness ran itself (no answer expected).
    Report(ToolResult),
    /// A usage report (no answer expected).
    Usage(Usage),
    /// Assistant text (no answer expected).
    Output(String),
}

/// A harness that plays `steps` in order: it emits steps up to and
/// including the next one that needs an answer (a call or a model call),
/// resumes on that answer, acknowledges parks, and after the last step sends
/// END and closes. Replay and recovery tests use it to re-emit a recorded
/// turn with one request changed.
pub fn steps(steps: Vec<Step>) -> impl FnMut(&ControllerFrame) -> Reply + Send {
    let mut exec = String::new();
    let mut next = 0usize;
    move |frame| {
        let advance = match &frame.frame {
            Some(Frame::Start(_)) => {
                exec = frame.execution_id.clone();
                next = 0;
                true
            }
            Some(Frame::Tool(_) | Frame::Model(_)) => true,
            Some(Frame::Park(park)) => {
                return Reply::finish(vec![ev(
                    &exec,
                    EventKind::EventParked,
                    Body::Parked(park.clone()),
                )]);
            }
            _ => false,
        };
        if !advance {
            return Reply::default();
        }
        let mut out = Vec::new();
        while let Some(step) = steps.get(next) {
            next += 1;
            let (kind, body, waits) = match step.clone() {
                Step::Call(call) => (EventKind::EventToolCall, Body::Tool(call), true),
                Step::Model(text) => {
                    let call = ModelCall {
                        model: "echo".into(),
                        id: format!("m{next}"),
                        messages: vec![events::text_message("user", &text)],
                        ..ModelCall::default()
                    };
                    (EventKind::EventModelCall, Body::Model(call), true)
                }
                Step::Report(result) => (EventKind::EventToolResult, Body::Result(result), false),
                Step::Usage(usage) => (EventKind::EventUsage, Body::Usage(usage), false),
                Step::Output(text) => (
                    EventKind::EventOutput,
                    Body::Message(events::assistant_text(&text)),
                    false,
                ),
            };
            out.push(ev(&exec, kind, body));
            if waits {
                return Reply::send(out);
            }
        }
        out.push(end(&exec));
        Reply::finish(out)
    }
}

/// Builds a script for a backend kind.
pub fn by_kind(kind: &str) -> Option<Box<dyn Script>> {
    Some(match kind {
        "echo" => Box::new(Echo::default()),
        "tools" => Box::new(ToolUser::new(Mediation::ControllerMediated)),
        "approval" => Box::new(ToolUser::new(Mediation::RequiresApproval)),
        "unmediated" => Box::new(ToolUser::new(Mediation::InHarnessReported)),
        "counter" => Box::new(Counter { count: 0 }),
        _ => return None,
    })
}
