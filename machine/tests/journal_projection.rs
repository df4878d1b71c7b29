//! The journal as executions: grouping, start markers, input completeness,
//! pending selection, the start marker recovery would use, the fork guard
//! for inherited tool intents, and the session projections.

#[path = "support/journal_log.rs"]
mod jl;

use agentsessions_machine::error::LogError;
use agentsessions_machine::events;
use agentsessions_machine::journal::executions::{
    ExecKind, Execution, check_inherited_intent, needs_describe, project, replay_selection,
    resume_invocation, select_pending, validate_inputs,
};
use agentsessions_machine::journal::projection::{
    batch_compute_state, compute_state_after, session_status,
};
use agentsessions_proto::v1::{
    ApprovalRef, ComputeState, Event, EventKind, ExecState, ExecutionStart, lifecycle,
};
use jl::*;

const E1: &str = "e1aaaaaaaaaaaaaa";
const E2: &str = "e2bbbbbbbbbbbbbb";
const E3: &str = "e3cccccccccccccc";

fn pending(log: &Log) -> Result<Option<Execution>, LogError> {
    let p = project(&log.records)?;
    select_pending(&log.records, &p)
}

fn turn(log: &mut Log, id: &str, text: &str) {
    log.extend([
        start(id, Some(1)),
        input(id, text),
        model_call(id),
        output(id, text),
        end(id),
    ]);
}

#[test]
fn executions_group_by_id_in_first_seen_order() {
    let mut log = Log::new();
    log.push(start(E1, Some(2))); // 0
    log.push(input(E1, "a")); // 1
    log.push(start(E2, Some(1))); // 2
    log.push(input(E2, "b")); // 3
    log.push(input(E1, "a2")); // 4
    log.push(model_call(E2)); // 5
    log.push(usage(E2)); // 6
    log.push(lifecycle(lifecycle::Kind::LifecycleSuspend)); // 7
    log.push(output(E2, "b")); // 8
    log.push(end(E2)); // 9
    log.push(model_call(E1)); // 10
    let p = project(&log.records).expect("valid");
    assert_eq!(p.prefix_end, 0);
    let ids: Vec<&str> = p.executions.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, [E1, E2]);
    let (e1, e2) = (&p.executions[0], &p.executions[1]);
    assert_eq!((e1.start, e1.history_end), (0, 0));
    assert_eq!((e2.start, e2.history_end), (2, 2));
    assert_eq!(texts(&e1.inputs), ["a", "a2"]);
    assert_eq!(e1.input_records, 2);
    assert_eq!(e1.stream, [10]);
    assert_eq!(e2.stream, [5, 6, 8]);
    assert!(!e1.completed && e2.completed);
    assert_eq!(e1.kind, ExecKind::Modern);
    assert_eq!(e1.marker, Some(marker(Some(2))));
    assert_eq!(e1.anchor, None);
}

#[test]
fn effect_stream_holds_every_effect_kind_but_not_error() {
    let mut log = Log::new();
    log.extend([
        start(E1, Some(0)),
        model_call(E1),
        error(E1),
        output(E1, "x"),
        ordinary_call(E1, "t"),
        result(E1, "t"),
        usage(E1),
        gated_call(E1, "g"),
        request(E1, "g"),
        decision(E1, "g", 9, true),
        receipt(E1, "g", 9, 10),
        end(E1),
    ]);
    let p = project(&log.records).expect("valid");
    let e = &p.executions[0];
    assert_eq!(e.stream, [1, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert!(e.completed);
}

#[test]
fn error_records_do_not_complete_an_execution() {
    let mut log = Log::new();
    log.extend([
        start(E1, Some(1)),
        input(E1, "x"),
        model_call(E1),
        error(E1),
    ]);
    let got = pending(&log).expect("valid").expect("still pending");
    assert_eq!(got.id, E1);
    assert!(!got.completed);
    assert_eq!(got.stream, [2]);
}

#[test]
fn start_must_open_its_execution_with_a_body() {
    let shapes: [(&str, Vec<Event>); 3] = [
        (
            "bodiless start",
            vec![bodiless(E1, EventKind::EventExecutionStart), input(E1, "x")],
        ),
        (
            "input before start",
            vec![input(E1, "x"), start(E1, Some(1))],
        ),
        ("second start", vec![start(E1, Some(0)), start(E1, Some(0))]),
    ];
    for (name, evs) in shapes {
        let mut log = Log::new();
        log.extend(evs);
        let err = project(&log.records).expect_err(name);
        assert!(
            matches!(err, LogError::InvalidExecutionLog(_)),
            "{name}: {err}"
        );
        assert!(
            err.to_string().contains("invalid start event"),
            "{name}: {err}"
        );
        assert_eq!(resume_invocation(&log.records).expect_err(name), err);
    }
}

#[test]
fn event_without_execution_id_is_rejected_with_its_position() {
    for marked in [true, false] {
        for (kind, ev) in [
            ("INPUT", input("", "x")),
            ("OUTPUT", output("", "x")),
            ("END", end("")),
        ] {
            let mut log = Log::new();
            if marked {
                log.push(start(E1, Some(1)));
            }
            log.push(input(E1, "x"));
            log.push(ev);
            let err = project(&log.records).expect_err(kind);
            let n = log.len();
            assert!(matches!(err, LogError::InvalidExecutionLog(_)), "{err}");
            assert!(
                err.to_string()
                    .contains(&format!("event {n} ({kind}) has no execution_id")),
                "{err}"
            );
        }
    }
}

#[test]
fn lifecycle_records_are_session_scoped() {
    let mut log = Log::new();
    log.push(lifecycle(lifecycle::Kind::LifecycleResume));
    log.extend([start(E1, Some(1)), input(E1, "x")]);
    log.push(events::fork_marker(3));
    let p = project(&log.records).expect("valid");
    assert_eq!(p.executions.len(), 1);
    assert_eq!(p.executions[0].start, 1);
    assert!(p.executions[0].stream.is_empty());
}

#[test]
fn late_end_of_an_old_execution_does_not_redirect_recovery() {
    let mut log = Log::new();
    log.extend([start(E1, Some(1)), input(E1, "old")]);
    log.extend([start(E2, Some(1)), input(E2, "new"), model_call(E2)]);
    log.push(end(E1));
    log.push(events::fork_marker(log.head()));
    let got = pending(&log).expect("valid").expect("pending");
    assert_eq!(got.id, E2);
    assert_eq!(got.start, 2);
    assert_eq!(texts(&got.inputs), ["new"]);

    // And a late record of the old turn does not make it the latest.
    let mut log = Log::new();
    turn(&mut log, E1, "one");
    log.extend([start(E2, Some(1)), input(E2, "two")]);
    log.push(error(E1));
    assert_eq!(pending(&log).unwrap().map(|e| e.id), Some(E2.to_owned()));
}

#[test]
fn completed_last_execution_means_nothing_to_do() {
    let mut log = Log::new();
    log.extend([start(E1, Some(1)), input(E1, "abandoned")]);
    turn(&mut log, E2, "done");
    assert_eq!(pending(&log).expect("valid"), None);
    assert_eq!(resume_invocation(&log.records).expect("valid"), None);
    assert_eq!(pending(&Log::new()).expect("empty"), None);
}

#[test]
fn markerless_execution_runs_with_defaults_and_no_checks() {
    let mut log = Log::new();
    log.extend([input(E1, "hello"), model_call(E1)]);
    let got = pending(&log).expect("valid").expect("pending");
    assert_eq!(got.kind, ExecKind::Markerless);
    assert_eq!(got.marker, None);
    assert_eq!(got.start, 0);
    assert_eq!(texts(&got.inputs), ["hello"]);
    assert_eq!(validate_inputs(&got), Ok(()));
    assert_eq!(resume_invocation(&log.records).expect("valid"), None);
}

#[test]
fn replay_selects_completed_executions_only() {
    let mut log = Log::new();
    turn(&mut log, E1, "one");
    log.extend([start(E2, Some(2)), input(E2, "partial")]); // incomplete, malformed tail
    turn(&mut log, E3, "three");
    log.extend([input("e4dddddddddddddd", "open")]);
    let p = project(&log.records).expect("incomplete ones are not validated");
    let ids: Vec<&str> = replay_selection(&p).iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, [E1, E3]);
    assert_eq!(replay_selection(&p)[1].history_end, 7);
}

/// A turn with the given declared count, inputs (None = INPUT without a
/// message) and completion.
fn counted(count: Option<i64>, inputs: &[Option<&str>], completed: bool) -> Log {
    let mut log = Log::new();
    turn(&mut log, E1, "prefix");
    log.push(start(E2, count));
    for i in inputs {
        match i {
            Some(t) => log.push(input(E2, t)),
            None => log.push(bodiless(E2, EventKind::EventInput)),
        };
    }
    log.push(model_call(E2));
    if completed {
        log.push(end(E2));
    }
    log
}

#[derive(Debug, PartialEq)]
enum Want {
    Ok,
    Invalid,
    Incomplete,
}

#[test]
fn input_completeness_rules() {
    type Case<'a> = (&'a str, Option<i64>, &'a [Option<&'a str>], Want);
    let cases: [Case; 9] = [
        ("nil count", None, &[Some("a")], Want::Invalid),
        ("nil count, no inputs", None, &[], Want::Invalid),
        ("negative count", Some(-1), &[], Want::Invalid),
        ("missing payload", Some(2), &[None], Want::Invalid),
        (
            "missing payload with exact count",
            Some(1),
            &[None],
            Want::Invalid,
        ),
        ("fewer inputs", Some(2), &[Some("a")], Want::Incomplete),
        (
            "excess inputs",
            Some(1),
            &[Some("a"), Some("b")],
            Want::Invalid,
        ),
        ("exact", Some(2), &[Some("a"), Some("b")], Want::Ok),
        ("explicit zero", Some(0), &[], Want::Ok),
    ];
    for (name, count, inputs, want) in cases {
        for completed in [false, true] {
            let log = counted(count, inputs, completed);
            // A completed short turn is corruption, not an unfinished append.
            let want = match want {
                Want::Incomplete if completed => &Want::Invalid,
                ref w => w,
            };
            let got = pending(&log);
            let ctx = format!("{name} completed={completed}");
            match (want, got) {
                (Want::Ok, Ok(p)) => assert_eq!(p.is_some(), !completed, "{ctx}"),
                (Want::Invalid, Err(e)) => {
                    assert!(matches!(e, LogError::InvalidExecutionLog(_)), "{ctx}: {e}")
                }
                (Want::Incomplete, Err(e)) => {
                    assert!(matches!(e, LogError::IncompleteInvocation(_)), "{ctx}: {e}");
                    assert!(e.is_invalid_log(), "{ctx}");
                }
                (w, g) => panic!("{ctx}: want {w:?}, got {g:?}"),
            }
            // Projection alone fails only for completed executions.
            assert_eq!(
                project(&log.records).is_err(),
                completed && *want != Want::Ok,
                "{ctx}"
            );
            // ResumeInvocation agrees with recovery.
            assert_eq!(
                resume_invocation(&log.records).err(),
                pending(&log).err(),
                "{ctx}"
            );
        }
    }
}

#[test]
fn resume_invocation_returns_a_copy_of_the_pending_marker() {
    let pinned = ExecutionStart {
        config: b"{\"k\": 1}".to_vec(),
        resume_from_seq: 37,
        input_count: Some(1),
        harness: "alias".to_owned(),
        harness_version: "build-sha".to_owned(),
    };
    let mut log = Log::new();
    log.extend([start(E1, Some(1)), input(E1, "old")]);
    log.extend([start_with(E2, pinned.clone()), input(E2, "pending")]);
    log.push(end(E1));
    log.push(events::fork_marker(log.head()));
    let before = log.clone();
    let mut got = resume_invocation(&log.records)
        .expect("valid")
        .expect("marker");
    assert_eq!(got, pinned);
    got.config.clear();
    assert_eq!(log.records, before.records);
    assert_eq!(resume_invocation(&log.records).unwrap(), Some(pinned));
}

#[test]
fn resume_invocation_is_none_without_a_marked_pending_turn() {
    let lifecycle_only = Log::new().with(events::fork_marker(0));
    let markerless = Log::new().with(input(E1, "x"));
    let mut complete = Log::new();
    turn(&mut complete, E1, "x");
    let mut last_complete = Log::new();
    last_complete.extend([start(E1, Some(1)), input(E1, "x")]);
    turn(&mut last_complete, E2, "y");
    for (name, log) in [
        ("empty", Log::new()),
        ("lifecycle only", lifecycle_only),
        ("markerless", markerless),
        ("complete", complete),
        ("last first-seen complete", last_complete),
    ] {
        assert_eq!(resume_invocation(&log.records), Ok(None), "{name}");
    }
}

#[test]
fn resume_invocation_fails_on_bad_approval_evidence_like_recovery() {
    let mut log = Log::new();
    log.extend([start(E1, Some(1)), input(E1, "x"), gated_call(E1, "c1")]);
    log.push(request(E1, "other"));
    let err = resume_invocation(&log.records).expect_err("divergent evidence");
    assert!(matches!(err, LogError::ReplayDiverged(_)), "{err}");
}

// ---- inherited tool intent -------------------------------------------------

fn intent_guard(log: &Log) -> Result<(), LogError> {
    let e = pending(log).expect("valid").expect("pending");
    check_inherited_intent(&log.records, &e)
}

fn tool_prefix() -> Log {
    let mut log = Log::new();
    log.extend([
        start(E1, Some(1)),
        input(E1, "x"),
        model_call(E1),
        ordinary_call(E1, "t1"),
    ]);
    log
}

#[test]
fn fork_at_a_tool_call_refuses_recovery() {
    let child = tool_prefix().fork();
    let err = intent_guard(&child).expect_err("inherited intent");
    assert!(matches!(err, LogError::InheritedToolIntent(_)), "{err}");
    assert!(err.is_invalid_log());
    assert!(err.to_string().contains(E1), "{err}");
    // The parent itself may re-drive its own trailing intent.
    assert_eq!(intent_guard(&tool_prefix()), Ok(()));
}

#[test]
fn fork_after_the_tool_result_allows_recovery() {
    let mut log = tool_prefix();
    log.push(result(E1, "t1"));
    assert_eq!(intent_guard(&log.fork()), Ok(()));
}

#[test]
fn result_written_after_the_fork_resolves_the_inherited_intent() {
    let mut child = tool_prefix().fork();
    child.push(result(E1, "t1"));
    assert_eq!(intent_guard(&child), Ok(()));
    // A result for some other call does not.
    let mut child = tool_prefix().fork();
    child.push(result(E1, "t2"));
    assert!(intent_guard(&child).is_err());
}

#[test]
fn handled_failure_intent_before_the_fork_is_refused() {
    let mut log = tool_prefix(); // t1 never got a result
    log.extend([model_call(E1), output(E1, "handled"), usage(E1)]);
    log.push(ordinary_call(E1, "t2"));
    log.push(result(E1, "t2"));
    assert_eq!(intent_guard(&log), Ok(()), "own unresolved calls are fine");
    let err = intent_guard(&log.fork()).expect_err("earlier dangling intent");
    assert!(matches!(err, LogError::InheritedToolIntent(_)));
    // A result arriving late, after other effects, does not answer it.
    let mut log = tool_prefix();
    log.push(output(E1, "x"));
    log.push(result(E1, "t1"));
    assert!(intent_guard(&log.fork()).is_err());
}

#[test]
fn intents_of_other_executions_and_approval_records_are_transparent() {
    let mut log = Log::new();
    log.push(start(E1, Some(0))); // 0
    log.push(start(E2, Some(0))); // 1
    log.push(ordinary_call(E2, "x")); // 2: dangling, but not E1's
    log.push(gated_call(E1, "c1")); // 3
    let r = log.push(request(E1, "c1"));
    log.push(output(E2, "other turn")); // does not clear E1's adjacency
    let d = log.push(decision(E1, "c1", r, true));
    log.push(error(E1));
    log.push(receipt(E1, "c1", r, d));
    let child = log.fork();
    assert!(agentsessions_machine::journal::approval::scan(&child.records, 0).is_ok());
    let e = project(&child.records).unwrap().executions[0].clone();
    assert_eq!(e.id, E1);
    assert_eq!(check_inherited_intent(&child.records, &e), Ok(()));
    // Without the receipt the gated intent is inherited and unresolved.
    let mut cut = Log::new();
    cut.records = log.records[..log.len() - 1].to_vec();
    let child = cut.fork();
    let e = project(&child.records).unwrap().executions[0].clone();
    assert!(check_inherited_intent(&child.records, &e).is_err());
}

#[test]
fn needs_describe_only_for_pinned_or_gated_executions() {
    let mut pinned = Log::new();
    turn(&mut pinned, E1, "x");
    let p = project(&pinned.records).unwrap();
    assert!(needs_describe(&replay_selection(&p), &pinned.records));

    let mut unpinned = Log::new();
    unpinned.push(start_with(
        E1,
        ExecutionStart {
            input_count: Some(1),
            ..ExecutionStart::default()
        },
    ));
    unpinned.extend([
        input(E1, "x"),
        ordinary_call(E1, "t"),
        result(E1, "t"),
        end(E1),
    ]);
    let p = project(&unpinned.records).unwrap();
    assert!(!needs_describe(&replay_selection(&p), &unpinned.records));

    let version_only = ExecutionStart {
        input_count: Some(0),
        harness_version: "v2".into(),
        ..ExecutionStart::default()
    };
    let log = Log::new().with(start_with(E1, version_only)).with(end(E1));
    let p = project(&log.records).unwrap();
    assert!(needs_describe(&replay_selection(&p), &log.records));

    let mut gated = Log::new();
    gated.extend([input(E1, "x"), gated_call(E1, "g")]);
    let e = pending(&gated).unwrap().expect("pending");
    assert_eq!(e.kind, ExecKind::Markerless);
    assert!(needs_describe(&[&e], &gated.records));
    assert!(!needs_describe(&[], &gated.records));
}

// ---- session projections ---------------------------------------------------

#[test]
fn compute_state_table() {
    use ComputeState::*;
    use lifecycle::Kind as L;
    let lc = |k: L| events::lifecycle(k, "");
    let nil_lifecycle = bodiless("", EventKind::EventLifecycle);
    let cases: Vec<(Event, ComputeState, ComputeState)> = vec![
        (request(E1, "c"), ComputeCold, ComputeCold),
        (decision(E1, "c", 1, true), ComputeCold, ComputeCold),
        (request(E1, "c"), ComputeLive, ComputeLive),
        (input(E1, "x"), ComputeCold, ComputeLive),
        (output(E1, "x"), Unspecified, ComputeLive),
        (start(E1, Some(0)), ComputeNone, ComputeLive),
        (end(E1), ComputeCold, ComputeLive),
        (error(E1), ComputeCold, ComputeLive),
        (lc(L::LifecycleSuspend), ComputeLive, ComputeCold),
        (events::fork_marker(3), ComputeLive, ComputeCold),
        (lc(L::LifecycleResume), ComputeCold, ComputeLive),
        (lc(L::LifecycleBaseline), ComputeCold, ComputeCold),
        (lc(L::LifecycleCancel), ComputeLive, ComputeLive),
        (lc(L::LifecycleUnspecified), ComputeNone, ComputeNone),
        (nil_lifecycle, ComputeCold, ComputeCold),
    ];
    for (ev, from, to) in cases {
        assert_eq!(compute_state_after(from, &ev), to, "{ev:?} from {from:?}");
    }
}

#[test]
fn a_batch_leaves_the_state_of_its_last_moving_event_or_none() {
    use ComputeState::*;
    use lifecycle::Kind as L;
    let lc = |k: L| events::lifecycle(k, "");
    // Approval records written after a suspend leave the row cold.
    assert_eq!(
        batch_compute_state(&[lc(L::LifecycleSuspend), request(E1, "c")]),
        Some(ComputeCold)
    );
    assert_eq!(
        batch_compute_state(&[input(E1, "x"), lc(L::LifecycleSuspend)]),
        Some(ComputeCold)
    );
    assert_eq!(
        batch_compute_state(&[lc(L::LifecycleFork), lc(L::LifecycleResume)]),
        Some(ComputeLive)
    );
    assert_eq!(batch_compute_state(&[request(E1, "c")]), None);
    assert_eq!(batch_compute_state(&[lc(L::LifecycleBaseline)]), None);
    assert_eq!(batch_compute_state(&[]), None);
}

fn awaiting_log() -> (Log, i64, i64) {
    let mut log = Log::new();
    log.extend([start(E1, Some(1)), input(E1, "x"), gated_call(E1, "c1")]);
    let r = log.push(request(E1, "c1"));
    let d = log.push(decision(E1, "c1", r, true));
    (log, r, d)
}

#[test]
fn session_status_uses_the_captured_cursor() {
    let (log, r, d) = awaiting_log();
    let got = session_status(&log.records, r).expect("valid");
    assert_eq!(got.exec_state, ExecState::ExecAwaiting);
    assert_eq!(
        got.pending_approval,
        Some(ApprovalRef {
            execution_id: E1.into(),
            tool_call_id: "c1".into(),
            request_seq: r,
        })
    );
    // Decided: not awaiting, even without a receipt.
    let got = session_status(&log.records, d).expect("valid");
    assert_eq!(got.exec_state, ExecState::ExecCompleted);
    assert_eq!(got.pending_approval, None);
    // Call-only cut: nothing to decide yet.
    let got = session_status(&log.records, r - 1).expect("valid");
    assert_eq!(got.exec_state, ExecState::ExecCompleted);
}

#[test]
fn session_status_zero_cursor_is_pending_without_scanning() {
    let mut bad = Log::new();
    bad.push(request(E1, "nothing"));
    let got = session_status(&bad.records, 0).expect("not inspected");
    assert_eq!(got.exec_state, ExecState::ExecPending);
    assert_eq!(got.pending_approval, None);
    assert!(session_status(&bad.records, 1).is_err());
}

#[test]
fn session_status_inherited_gate_is_not_pending() {
    let (log, r, _) = awaiting_log();
    let mut parent = Log::new();
    parent.records = log.records[..usize::try_from(r).unwrap()].to_vec();
    let child = parent.fork();
    let got = session_status(&child.records, child.head()).expect("valid");
    assert_eq!(got.exec_state, ExecState::ExecCompleted);
    assert_eq!(got.pending_approval, None);
    assert_eq!(
        session_status(&parent.records, parent.head())
            .unwrap()
            .exec_state,
        ExecState::ExecAwaiting
    );
}

#[test]
fn session_status_ordinary_successor_clears_awaiting() {
    let (log, r, _) = awaiting_log();
    let mut log2 = Log::new();
    log2.records = log.records[..usize::try_from(r).unwrap()].to_vec();
    log2.push(input(E2, "new turn"));
    let got = session_status(&log2.records, log2.head()).expect("valid");
    assert_eq!(got.exec_state, ExecState::ExecCompleted);
}
