//! The memory-snapshot override rule (api-reference, ExecRequest.harness and
//! Resume): a session whose stored harness requires MEMORY_SNAPSHOT refuses
//! a turn on a STATELESS_REPLAY harness, whether an Exec names it as an
//! override or a Resume finds it recorded, before any fence, journal write,
//! repair or runtime change. Overrides the rule does not cover still run,
//! and a stored harness that cannot be described refuses (fails closed).

mod common;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{Code, HarnessFailure, Response};
use agentsessions_proto::v1::{EventKind, ExecutionStart, Mediation, ToolCall, event::Body};
use agentsessions_testkit::World;
use common::*;

/// The world's `counter` route runs on a memory-snapshot runtime and
/// describes itself REQUIRES_MEMORY_SNAPSHOT; `echo` and `approval` are
/// STATELESS_REPLAY.
const MEMORY: &str = "counter";

fn no_fence_write_or_compute(world: &World, mark: usize, what: &str) {
    assert!(
        !any_of(
            since(world, mark),
            &[
                "Runtime",
                "MintFence",
                "Append",
                "Dial",
                "Send",
                "InvokeModel"
            ]
        ),
        "{what}: {:?}",
        effect_names(since(world, mark))
    );
}

/// A session stored on the memory-snapshot harness whose journal holds a
/// turn `e1` recorded on `recorded`, followed by `more`.
fn recorded_on(
    world: &mut World,
    recorded: &str,
    more: Vec<agentsessions_proto::v1::Event>,
) -> String {
    let sid = create(world, MEMORY);
    let start = ExecutionStart {
        input_count: Some(1),
        harness: recorded.into(),
        ..ExecutionStart::default()
    };
    let mut evs = vec![
        events::execution_start("e1", start),
        events::input("e1", events::text_message("user", "hi")),
    ];
    evs.extend(more);
    world.store.append(&sid, 0, 1, &evs, world.now).unwrap();
    sid
}

#[test]
fn exec_overriding_a_memory_snapshot_harness_with_a_stateless_one_is_refused_before_any_fence_or_write()
 {
    let mut world = World::default();
    let sid = create(&mut world, MEMORY);
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "echo", "hi"));
    let status = call.reply.clone().expect_err("refused");
    assert_eq!(status.code, Code::FailedPrecondition, "{status:?}");
    assert!(status.message.contains("MEMORY_SNAPSHOT"), "{status:?}");
    assert_eq!(
        described(&world, mark),
        [MEMORY, "echo"],
        "both harnesses described"
    );
    no_fence_write_or_compute(&world, mark, "refused override");
    assert!(kinds(&world, &sid).is_empty(), "nothing journaled");
    // The session's own harness still runs its turns.
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
}

#[test]
fn overrides_the_rule_does_not_cover_run_with_their_usual_describes() {
    let mut world = World::default();
    // A stored route that cannot snapshot memory: no extra Describe.
    let sid = create(&mut world, "echo");
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "tools", "hi"));
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
    assert_eq!(described(&world, mark), ["tools"]);
    // A memory-snapshot override of a memory-snapshot harness is allowed.
    world.add_memory("counter-b", "counter");
    let sid = create(&mut world, MEMORY);
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "counter-b", "hi"));
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
    assert_eq!(described(&world, mark), [MEMORY, "counter-b", "counter-b"]);
    // Memory-snapshot stored harness without an override: no check.
    let sid = create(&mut world, MEMORY);
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "", "hi"));
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
    assert_eq!(described(&world, mark), [MEMORY]);
}

#[test]
fn an_override_fails_closed_when_the_stored_harness_cannot_be_described() {
    let mut world = World::default();
    let sid = create(&mut world, MEMORY);
    world
        .describe_fail
        .insert(MEMORY.into(), HarnessFailure::Unavailable("down".into()));
    let mark = world.trace.len();
    let call = world.call(exec(&sid, "echo", "hi"));
    let status = call.reply.clone().expect_err("refused");
    assert_eq!(status.code, Code::Unavailable, "{status:?}");
    no_fence_write_or_compute(&world, mark, "fail closed");
}

#[test]
fn resume_of_a_recorded_stateless_override_on_a_memory_snapshot_session_is_refused_before_compute()
{
    let mut world = World::default();
    let sid = recorded_on(&mut world, "echo", Vec::new());
    let before = kinds(&world, &sid);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    let status = call.reply.clone().expect_err("refused");
    assert_eq!(status.code, Code::FailedPrecondition, "{status:?}");
    assert!(status.message.contains("MEMORY_SNAPSHOT"), "{status:?}");
    no_fence_write_or_compute(&world, mark, "refused recovery");
    assert_eq!(kinds(&world, &sid), before, "the journal is unchanged");
}

#[test]
fn resume_of_a_recorded_stateless_override_is_refused_before_a_call_only_cut_is_repaired() {
    let mut world = World::default();
    let gated = ToolCall {
        id: "c1".into(),
        tool: "write".into(),
        args: None,
        mediation: Mediation::RequiresApproval as i32,
        idempotency_key: "k-c1".into(),
    };
    let call_only = events::event("e1", EventKind::EventToolCall, Body::Tool(gated));
    let sid = recorded_on(&mut world, "approval", vec![call_only]);
    let before = kinds(&world, &sid);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    let status = call.reply.clone().expect_err("refused");
    assert_eq!(status.code, Code::FailedPrecondition, "{status:?}");
    no_fence_write_or_compute(&world, mark, "no repair");
    assert_eq!(
        kinds(&world, &sid),
        before,
        "no APPROVAL_REQUEST was written"
    );
}
