//! The host's tool policy (issue #36): decided by the machine from the
//! operator's rules and the catalog, never by the harness. A gated tool is
//! gated whatever mediation the harness put on its call; a denied or
//! unknown tool gets a durable error receipt and never reaches the
//! executor; and replay serves every one of those answers.

mod common;

use std::sync::Arc;

use agentsessions_machine::vocab::{
    Catalog, CatalogTool, Code, Request, Response, ToolGate, ToolRule,
};
use agentsessions_proto::v1::{EventKind, tool_result};
use agentsessions_testkit::{World, world};
use common::*;

/// A world whose catalog holds the test harness's tool `write`, served by
/// an MCP server `fs`, under `rules`.
fn world_with(read_only: bool, rules: &[&str], listed: bool) -> World {
    let mut config = world::config();
    let tools = listed.then(|| CatalogTool {
        name: "write".into(),
        server: "fs".into(),
        read_only,
        idempotent: false,
        destructive: true,
        open_world: true,
        description: String::new(),
        up: true,
    });
    config.tools = ToolGate {
        rules: rules
            .iter()
            .map(|r| r.parse::<ToolRule>().unwrap())
            .collect(),
        catalog: Some(Arc::new(Catalog::new(tools))),
        approval_expiry_ms: None,
    };
    World::new(config)
}

fn outputs(world: &mut World, sid: &str) -> Vec<String> {
    match world
        .call(Request::ReplayHarness {
            session: sid.into(),
        })
        .reply
    {
        Ok(Response::Replayed(r)) => r.outputs,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_tool_that_is_not_read_only_is_gated_even_when_the_harness_asks_to_run_it() {
    let mut world = world_with(false, &[], true);
    let sid = create(&mut world, "tools");
    let parked = world.call(exec(&sid, "", "go"));
    assert_eq!(parked.code(), Code::Ok);
    let pending = parked
        .session()
        .and_then(|s| s.pending_approval)
        .expect("the floor gated the call");
    assert_eq!(world.executor.attempts, 0, "nothing ran before a decision");

    let decide = approve(&sid, &pending.execution_id, "c1", pending.request_seq, true);
    assert_eq!(world.call(decide).code(), Code::Ok);
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.effects, 1, "run once, after the decision");
    assert!(kinds(&world, &sid).contains(&EventKind::EventToolResult));

    // The harness re-asks with its own mediation; the record's gate is
    // served, and nothing runs again.
    let attempts = world.executor.attempts;
    assert_eq!(
        outputs(&mut world, &sid).last().map(String::as_str),
        Some("tool ok")
    );
    assert_eq!(world.executor.attempts, attempts);
}

#[test]
fn a_read_only_tool_runs_without_a_gate() {
    let mut world = world_with(true, &[], true);
    let sid = create(&mut world, "tools");
    let turn = world.call(exec(&sid, "", "go"));
    assert_eq!(turn.code(), Code::Ok);
    assert!(turn.session().unwrap().pending_approval.is_none());
    assert_eq!(world.executor.effects, 1);
}

#[test]
fn a_rule_overrides_the_hint_and_a_harness_may_ask_for_more_care_never_less() {
    let mut world = world_with(true, &["w*=approval"], true);
    let sid = create(&mut world, "tools");
    let turn = world.call(exec(&sid, "", "go"));
    assert!(turn.session().unwrap().pending_approval.is_some());

    let mut world = world_with(false, &["write=auto"], true);
    let sid = create(&mut world, "approval");
    let turn = world.call(exec(&sid, "", "go"));
    assert!(
        turn.session().unwrap().pending_approval.is_some(),
        "the harness's own gate stands under an auto policy"
    );
}

/// The turn completed with the tool's error receipt, the executor never
/// saw the call, and replay serves the same answer.
fn refused_with(world: &mut World, sid: &str, why: &str) {
    assert_eq!(world.executor.attempts, 0, "the executor never saw it");
    let records = world.store.records(sid).to_vec();
    let kinds = kinds_of(&records);
    let at = kinds
        .iter()
        .position(|k| *k == EventKind::EventToolCall)
        .expect("the intent is journaled");
    assert_eq!(
        kinds[at + 1],
        EventKind::EventToolResult,
        "with its receipt"
    );
    let receipt =
        agentsessions_machine::events::body::result(records[at + 1].event.as_ref().unwrap())
            .unwrap()
            .clone();
    assert!(
        receipt.is_error && receipt.error.contains(why),
        "{receipt:?}"
    );
    assert_eq!(receipt.code, tool_result::Code::ExecutorError as i32);
    let outs = outputs(world, sid);
    assert!(
        outs.last().is_some_and(|o| o.contains(why)),
        "the harness was told: {outs:?}"
    );
    assert_eq!(world.executor.attempts, 0, "replay ran nothing");
}

#[test]
fn a_denied_tool_gets_a_durable_error_receipt_and_never_reaches_the_executor() {
    let mut world = world_with(true, &["*=auto", "write=deny"], true);
    let sid = create(&mut world, "tools");
    assert_eq!(world.call(exec(&sid, "", "go")).code(), Code::Ok);
    refused_with(&mut world, &sid, "denied by the host's policy");

    // A gated ask for a denied tool is refused the same way, and replays.
    let mut world = world_with(true, &["write=deny"], true);
    let sid = create(&mut world, "approval");
    assert_eq!(world.call(exec(&sid, "", "go")).code(), Code::Ok);
    refused_with(&mut world, &sid, "denied by the host's policy");
}

#[test]
fn an_unknown_tool_gets_a_durable_error_receipt() {
    let mut world = world_with(true, &[], false);
    let sid = create(&mut world, "tools");
    assert_eq!(world.call(exec(&sid, "", "go")).code(), Code::Ok);
    refused_with(&mut world, &sid, "unknown tool");
}
