//! Harness scripts: the testkit's kinds plus three the simulator needs.
//!
//! - `reporter` runs a tool itself and reports the result (an in-harness
//!   tool: the host journals the report, executes nothing), then makes one
//!   model call.
//! - `drift` is the echo harness whose prompt changes once it has been
//!   started before for the same session (as a harness that reads a clock
//!   would): recovery and replay must refuse to serve its recorded answers.
//! - `policed` asks to run `guarded` at once, a tool the hosts' policy
//!   gates: the machine must park it anyway (the policy floor).
//! - `actor` asks to run `mcp__act`, an MCP tool that does not say it is
//!   idempotent (so the policy gates it and a run cut by a crash is never
//!   made again: the unknown-outcome rule); `reader` runs `mcp__get`, a
//!   read-only idempotent one, at once (a cut run is simply made again).
//! - `looper` is an agent loop: a model call, then `mcp__act` (which the
//!   policy gates, so the turn parks mid-loop), then, with the receipt, a
//!   second model call whose answer is the output. Resumed after the
//!   decision it replays its first step from the journal and goes on.
//! - `chatter` writes its own OUTPUT (no model call), and its text changes
//!   once it has been started before for the same session, as a foreign
//!   harness that is nondeterministic in its text: replay must diverge on
//!   the output text alone.

use agentsessions_machine::events;
use agentsessions_proto::v1::{
    ControllerFrame, Event, EventKind, ModelCall, ToolResult, controller_frame::Frame, event::Body,
};
use agentsessions_testkit::harness::{self, FnScript, Reply, Script, ev};

/// The in-harness tool harness.
pub const REPORTER: &str = "reporter";
/// The drifting echo harness.
pub const DRIFT: &str = "drift";
/// The harness whose own output text drifts.
pub const CHATTER: &str = "chatter";
/// The harness that asks to run, at once, a tool the host's policy gates.
pub const POLICED: &str = "policed";
/// The tool it calls; `world::config` gates it (`guarded=approval`).
pub const GUARDED: &str = "guarded";
/// The harness that calls [`ACT`].
pub const ACTOR: &str = "actor";
/// The harness that calls [`GET`].
pub const READER: &str = "reader";
/// An MCP tool with MCP's default hints: not read-only, not idempotent.
pub const ACT: &str = "mcp__act";
/// An MCP tool that says it is read-only and idempotent.
pub const GET: &str = "mcp__get";
/// The agent-loop harness.
pub const LOOPER: &str = "looper";
/// Kinds defined here (the testkit defines the rest).
pub const KINDS: &[&str] = &[REPORTER, DRIFT, CHATTER, POLICED, ACTOR, READER, LOOPER];

/// True for the tools an MCP server serves (which cannot check whether an
/// earlier run of theirs happened).
pub fn is_remote(tool: &str) -> bool {
    tool == ACT || tool == GET
}

/// True for a tool that says running it twice is harmless.
pub fn is_idempotent(tool: &str) -> bool {
    tool == GET
}

/// The catalog every simulated host serves: the scripts' tools.
pub fn catalog() -> agentsessions_machine::vocab::Catalog {
    use agentsessions_machine::vocab::CatalogTool;
    let tool = |name: &str, server: &str, read_only: bool| CatalogTool {
        name: name.into(),
        server: server.into(),
        read_only,
        idempotent: is_idempotent(name),
        destructive: !read_only,
        open_world: false,
        description: String::new(),
        up: true,
    };
    agentsessions_machine::vocab::Catalog::new([
        tool("write", "", false),
        tool(GUARDED, "", false),
        tool(ACT, "mcp", false),
        tool(GET, "mcp", true),
    ])
}

/// A fresh script for a connection to `kind`.
pub fn by_kind(kind: &str) -> Option<Box<dyn Script>> {
    match kind {
        REPORTER => Some(Box::new(FnScript::new(REPORTER, reporter()))),
        DRIFT => harness::by_kind("echo"),
        CHATTER => Some(Box::new(FnScript::new(CHATTER, chatter()))),
        POLICED => Some(Box::new(harness::ToolUser::calling(
            GUARDED,
            agentsessions_proto::v1::Mediation::ControllerMediated,
        ))),
        ACTOR => Some(Box::new(harness::ToolUser::calling(
            ACT,
            agentsessions_proto::v1::Mediation::ControllerMediated,
        ))),
        READER => Some(Box::new(harness::ToolUser::calling(
            GET,
            agentsessions_proto::v1::Mediation::ControllerMediated,
        ))),
        LOOPER => Some(Box::new(FnScript::new(LOOPER, looper()))),
        other => harness::by_kind(other),
    }
}

/// See the module docs: model → gated tool → model → output.
fn looper() -> impl FnMut(&ControllerFrame) -> Reply + Send {
    let (mut exec, mut answers) = (String::new(), 0);
    let model = |id: &str, text: String| ModelCall {
        model: "echo".into(),
        id: id.into(),
        messages: vec![events::text_message("user", &text)],
        ..ModelCall::default()
    };
    move |frame| match &frame.frame {
        Some(Frame::Start(start)) => {
            exec = frame.execution_id.clone();
            answers = 0;
            let text = start
                .inputs
                .last()
                .map(events::message_text)
                .unwrap_or_default();
            let call = model("m1", format!("plan {text}"));
            Reply::send(vec![ev(
                &exec,
                EventKind::EventModelCall,
                Body::Model(call),
            )])
        }
        Some(Frame::Model(_)) => {
            answers += 1;
            if answers == 1 {
                let act = agentsessions_proto::v1::ToolCall {
                    id: "c1".into(),
                    tool: ACT.into(),
                    args: None,
                    mediation: agentsessions_proto::v1::Mediation::ControllerMediated as i32,
                    idempotency_key: "k1".into(),
                };
                Reply::send(vec![ev(&exec, EventKind::EventToolCall, Body::Tool(act))])
            } else {
                let said = events::assistant_text("done");
                Reply::finish(vec![events::output(&exec, said), harness::end(&exec)])
            }
        }
        Some(Frame::Park(park)) => Reply::finish(vec![ev(
            &exec,
            EventKind::EventParked,
            Body::Parked(park.clone()),
        )]),
        Some(Frame::Tool(receipt)) => {
            let seen = if receipt.is_error {
                format!("tool failed: {}", receipt.error)
            } else {
                "tool ok".to_owned()
            };
            let call = model("m2", seen);
            Reply::send(vec![ev(
                &exec,
                EventKind::EventModelCall,
                Body::Model(call),
            )])
        }
        _ => Reply::default(),
    }
}

fn reporter() -> impl FnMut(&ControllerFrame) -> Reply + Send {
    let mut exec = String::new();
    move |frame| match &frame.frame {
        Some(Frame::Start(start)) => {
            exec = frame.execution_id.clone();
            let text = start
                .inputs
                .last()
                .map(events::message_text)
                .unwrap_or_default();
            let report = ToolResult {
                id: "r1".into(),
                ..ToolResult::default()
            };
            let call = ModelCall {
                model: "echo".into(),
                id: "m1".into(),
                messages: vec![events::text_message("user", &format!("ran r1 for {text}"))],
                ..ModelCall::default()
            };
            Reply::send(vec![
                ev(&exec, EventKind::EventToolResult, Body::Result(report)),
                ev(&exec, EventKind::EventModelCall, Body::Model(call)),
            ])
        }
        Some(Frame::Model(_)) => Reply::finish(vec![harness::end(&exec)]),
        _ => Reply::default(),
    }
}

fn chatter() -> impl FnMut(&ControllerFrame) -> Reply + Send {
    move |frame| match &frame.frame {
        Some(Frame::Start(start)) => {
            let exec = frame.execution_id.clone();
            let text = start
                .inputs
                .last()
                .map(events::message_text)
                .unwrap_or_default();
            let said = events::assistant_text(&format!("said {text}"));
            Reply::finish(vec![events::output(&exec, said), harness::end(&exec)])
        }
        _ => Reply::default(),
    }
}

/// Changes a chatter harness's own output text on start `ordinal` (> 1)
/// of its session.
pub fn chatter_drift(ev: &mut Event, ordinal: u32) {
    if let Some(Body::Message(m)) = &mut ev.body {
        let text = format!("{} (start {ordinal})", events::message_text(m));
        *m = events::assistant_text(&text);
    }
}

/// Changes the prompt of a drifting harness's model call on start
/// `ordinal` (> 1) of its session.
pub fn drift(ev: &mut Event, ordinal: u32) {
    if let Some(Body::Model(mc)) = &mut ev.body
        && let Some(last) = mc.messages.last_mut()
    {
        let text = format!("{} (start {ordinal})", events::message_text(last));
        *last = events::text_message("user", &text);
    }
}
