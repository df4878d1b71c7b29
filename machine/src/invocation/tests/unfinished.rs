//! The unknown-outcome rule: a tool run an earlier host left unfinished
//! (its executor's ledger says started, never done) runs again only when
//! its tool may run twice (it says it is idempotent, or it is built into
//! the host and checks for its own effect). Otherwise its durable receipt
//! says the outcome is unknown, and the tool is not called again.

use std::sync::Arc;

use super::*;
use crate::vocab::{Catalog, CatalogTool, Policy, ToolGate, ToolRule};

/// A live rig whose catalog serves `tool` (run at once by a rule), with
/// its call's intent durable and its execution asked for.
fn executing(tool: &str, server: &str, idempotent: bool) -> (Rig, ToolCall) {
    let mut s = setup(Mode::Live, vec![], 0);
    s.tools = ToolGate {
        rules: vec![ToolRule {
            pattern: tool.into(),
            policy: Policy::Auto,
            expiry_ms: None,
        }],
        catalog: Some(Arc::new(Catalog::new([CatalogTool {
            name: tool.into(),
            server: server.into(),
            read_only: false,
            idempotent,
            destructive: true,
            open_world: false,
            description: String::new(),
            up: true,
        }]))),
        approval_expiry_ms: None,
    };
    let mut rig = Rig::new(s, vec![]);
    let call = ToolCall {
        id: "c1".into(),
        tool: tool.into(),
        mediation: Mediation::ControllerMediated as i32,
        idempotency_key: "key-c1".into(),
        ..Default::default()
    };
    let out = rig.event(EventKind::EventToolCall, Body::Tool(call.clone()));
    let out = rig.appended(&out[0]);
    assert!(
        matches!(
            &out[..],
            [
                Action::Recorded(_),
                Action::ExecuteTool { again: false, .. }
            ]
        ),
        "{out:?}"
    );
    (rig, call)
}

/// The receipt a lone TOOL_RESULT append carries.
fn receipt_of(out: &[Action]) -> ToolResult {
    let [Action::Append { events: evs, .. }] = out else {
        panic!("want one append, got {out:?}")
    };
    let [ev] = &evs[..] else { panic!("{evs:?}") };
    assert_eq!(events::kind_of(ev), EventKind::EventToolResult);
    let Some(Body::Result(r)) = &ev.body else {
        panic!("{ev:?}")
    };
    r.clone()
}

fn assert_outcome_unknown(r: &ToolResult) {
    assert_eq!(r.id, "c1");
    assert!(r.is_error);
    assert_eq!(r.code, tool_result::Code::ExecutorError as i32);
    assert!(r.error.contains("outcome unknown"), "{}", r.error);
    assert_eq!(
        events::message_text(&agentsessions_proto::v1::Message {
            role: "tool".into(),
            parts: r.content.clone(),
        }),
        r.error,
        "the model reads the same text"
    );
}

#[test]
fn an_unfinished_run_of_a_tool_that_is_not_idempotent_ends_outcome_unknown() {
    let (mut rig, _) = executing("fs__edit_file", "fs", false);
    let out = rig.tool_outcome(Err(ToolFailure::Unfinished));
    let receipt = receipt_of(&out);
    assert_outcome_unknown(&receipt);
    // Once durable it is the harness's answer, like any receipt.
    let out = rig.appended(&out[0]);
    let Some(Action::Send(f)) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(f.frame, Some(Frame::Tool(receipt)));
}

#[test]
fn an_unfinished_run_of_an_idempotent_tool_runs_again_once() {
    let (mut rig, call) = executing("fs__write_file", "fs", true);
    let out = rig.tool_outcome(Err(ToolFailure::Unfinished));
    let [
        Action::ExecuteTool {
            intent,
            call: c,
            again: true,
            repeatable: true,
        },
    ] = &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!((c, intent.record().seq), (&call, 1));
    // A re-run still reported unfinished is not run a third time.
    let out = rig.tool_outcome(Err(ToolFailure::Unfinished));
    assert_outcome_unknown(&receipt_of(&out));
}

#[test]
fn an_unfinished_run_of_a_built_in_tool_runs_again() {
    let (mut rig, _) = executing("append_note", "", false);
    let out = rig.tool_outcome(Err(ToolFailure::Unfinished));
    assert!(
        matches!(
            &out[..],
            [Action::ExecuteTool {
                again: true,
                repeatable: false,
                ..
            }]
        ),
        "{out:?}"
    );
}
