//! Call ids around the approval gate through the host: reuse of an approval
//! call id, reports that collide with a gate, recorded reports before a
//! gate, and gates the live host refused before writing (controller.md
//! §6.10 and the approval_safety entries of the catalog).
//!
//! Each case re-runs a recorded gated turn with a scripted harness
//! ([`harness::steps`]) on Replay and on Resume of a journal cut at the
//! decision or at the receipt.

mod common;
#[path = "support/rerun.rs"]
mod rerun;

use agentsessions_machine::vocab::{Code, Request};
use agentsessions_proto::v1::{EventKind, Mediation, ToolResult};
use agentsessions_testkit::World;
use agentsessions_testkit::harness::{Step, keyed_call};
use common::*;
use rerun::*;

use EventKind::*;

// ---- reuse of an approval call id ------------------------------------------------

/// Runs `steps` and checks the run was refused as an invalid approval call
/// with only the first use of the id journaled as a TOOL_CALL.
fn assert_invalid_reuse(world: &mut World, sid: &str, call: Request, what: &str) {
    let call = world.call(call);
    let err = status(&call);
    assert_eq!(err.code, Code::FailedPrecondition, "{what}: {err:?}");
    assert!(
        err.message.contains("invalid approval call"),
        "{what}: {err:?}"
    );
    assert_eq!(count(world, sid, EventToolCall), 1, "{what}");
    assert_eq!(kinds(world, sid).last(), Some(&EventError), "{what}");
}

#[test]
fn reusing_a_call_id_across_the_gate_is_an_invalid_approval_call() {
    // Live: an ordinary c1, then a gate with the same id.
    let mut world = World::default();
    play(
        &mut world,
        "tools",
        vec![Step::Call(ordinary("c1")), Step::Call(gate("c1"))],
    );
    let sid = create(&mut world, "tools");
    assert_invalid_reuse(&mut world, &sid, exec(&sid, "", "go"), "exec ordinary→gate");
    assert_eq!(count(&world, &sid, EventApprovalRequest), 0);

    // Resume: the recorded ordinary c1 is served, then c1 comes back gated.
    let (store, sid) = ordinary_turn(ordinary("c1"));
    let steps = vec![Step::Call(ordinary("c1")), Step::Call(gate("c1"))];
    let mut world = over(&store, &sid, Some(4), "tools", steps);
    assert_invalid_reuse(&mut world, &sid, resume(&sid), "resume ordinary→gate");
    assert_eq!(world.executor.attempts, 0);

    // Resume at the receipt: the served gate c1, then c1 again, gated or not.
    let (_, done, sid) = gated_default();
    for (second, what) in [
        (gate("c1"), "resume gate→gate"),
        (
            keyed_call("c1", Mediation::ControllerMediated),
            "resume gate→ordinary",
        ),
    ] {
        let steps = vec![Step::Call(gate("c1")), Step::Call(second)];
        let mut world = over(&done, &sid, Some(7), "approval", steps);
        assert_invalid_reuse(&mut world, &sid, resume(&sid), what);
        assert_eq!(world.executor.attempts, 0, "{what}");
    }
}

fn report(id: &str) -> Step {
    Step::Report(ToolResult {
        id: id.into(),
        ..ToolResult::default()
    })
}

#[test]
fn a_report_reusing_a_completed_gate_id_stops_the_run_and_the_next_resume_completes() {
    let (decided, done, sid) = gated_default();
    // (journal, cut, tool effects the stopped recovery performs)
    for (store, keep, effects) in [(&decided, 6, 1), (&done, 7, 0)] {
        let steps = vec![
            Step::Call(gate("c1")),
            report("c1"),
            Step::Output("x".into()),
        ];
        let mut world = over(store, &sid, Some(keep), "approval", steps);
        let call = world.call(resume(&sid));
        let err = status(&call);
        assert_eq!(err.code, Code::FailedPrecondition, "cut {keep}: {err:?}");
        assert!(err.message.contains("approval receipt report"), "{err:?}");
        assert_eq!(world.executor.effects, effects, "cut {keep}");
        // A sticky stop: the receipt (completed here, or recorded) stays the
        // last record — no ERROR, no report, no END.
        let k = kinds(&world, &sid);
        assert_eq!(k.len(), 7, "cut {keep}: {k:?}");
        assert_eq!(k.last(), Some(&EventToolResult));
        agentsessions_machine::chain::verify(&world.store.records(&sid)).expect("chain");
        assert!(session(&mut world, &sid).pending_approval.is_none());

        // The next recovery serves the receipt and runs an ordinary report.
        let steps = vec![
            Step::Call(gate("c1")),
            report("ordinary"),
            Step::Output("done".into()),
        ];
        play(&mut world, "approval", steps);
        let call = world.call(resume(&sid));
        assert_eq!(call.code(), Code::Ok, "cut {keep}: {call:?}");
        assert_eq!(
            world.executor.attempts, effects,
            "the gate is not re-driven"
        );
        assert!(replay_harness(&mut world, &sid).is_ok());

        // Ids are per invocation: a later turn may report c1 freely.
        let steps = vec![
            report("c1"),
            report("c1"),
            report(""),
            Step::Output("y".into()),
        ];
        play(&mut world, "approval", steps);
        assert_eq!(world.call(exec(&sid, "", "again")).code(), Code::Ok);
        assert_eq!(session(&mut world, &sid).last_seq, 18);
    }
}

#[test]
fn recorded_reports_around_a_gate_keep_kind_only_semantics() {
    // A report of c1 before the gate c1 in the same turn, and an ordinary
    // report after it.
    let (_, done, sid) = gated_turn(vec![
        report("c1"),
        Step::Call(gate("c1")),
        report("ordinary-b"),
        Step::Output("done".into()),
    ]);
    // Reports are matched by kind only: a changed ordinary report serves.
    let changed = || {
        vec![
            report("c1"),
            Step::Call(gate("c1")),
            report("ordinary-changed"),
            Step::Output("done".into()),
        ]
    };
    let mut world = over(&done, &sid, None, "approval", changed());
    assert!(replay_harness(&mut world, &sid).is_ok());
    // Recovery of the turn cut before END serves everything and ends it.
    // (START, INPUT, report, TOOL_CALL, REQUEST, SUSPEND, decision,
    // receipt, report, OUTPUT | END)
    let mut world = over(&done, &sid, Some(10), "approval", changed());
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(
        kinds(&world, &sid)[10..].to_vec(),
        vec![EventEnd, EventLifecycle]
    );
    assert_eq!(world.executor.attempts, 0);

    // The same turn without its EXECUTION_START (a markerless execution);
    // a neutral LIFECYCLE takes its place so every seq the evidence names
    // stays where it was.
    let mut events: Vec<_> = done
        .records(&sid)
        .iter()
        .filter_map(|r| r.event.clone())
        .collect();
    events[0] = agentsessions_machine::events::lifecycle(
        agentsessions_proto::v1::lifecycle::Kind::LifecycleResume,
        "",
    );
    let mut world = World::default();
    play(&mut world, "approval", changed());
    let markerless = create(&mut world, "approval");
    world
        .store
        .append(&markerless, 0, 1, &events, world.now)
        .unwrap();
    let result = replay_harness(&mut world, &markerless);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(world.executor.attempts, 0);
}

#[test]
fn a_gate_the_live_host_would_have_refused_is_refused_again_without_consuming() {
    // The journal holds an ordinary fallback c2 where a refused gate c1
    // once stood; nothing of c1 was written.
    let (store, sid) = ordinary_turn(ordinary("c2"));
    let steps = || vec![Step::Call(gate("c1"))];
    for keep in [None, Some(3), Some(4)] {
        let mut world = over(&store, &sid, keep, "tools", steps());
        let err = match keep {
            None => replay_harness(&mut world, &sid).expect_err("refused"),
            Some(_) => status(&world.call(resume(&sid))),
        };
        assert_eq!(err.code, Code::FailedPrecondition, "{keep:?}: {err:?}");
        assert!(err.message.contains("approval unavailable"), "{err:?}");
        assert_eq!(count(&world, &sid, EventApprovalRequest), 0);
        assert_eq!(world.executor.attempts, 0);
    }
    // An exhausted replay answers a late gate the same way.
    let steps = vec![
        Step::Call(ordinary("c2")),
        Step::Output("done".into()),
        Step::Call(gate("c1")),
    ];
    let mut world = over(&store, &sid, None, "tools", steps);
    let err = replay_harness(&mut world, &sid).expect_err("refused");
    assert!(err.message.contains("approval unavailable"), "{err:?}");
    assert_eq!(world.executor.attempts, 0);
}
