//! The approval scan: gate states, selection, fork inheritance, and every
//! kind of evidence a correct host could not have written.

#[path = "support/journal_log.rs"]
mod jl;

use agentsessions_machine::error::LogError;
use agentsessions_machine::journal::approval::{
    DENIED_TEXT, denial_receipt, executor_receipt, receipt_matches_decision, scan,
    scan_agrees_with_grouped_scan,
};
use agentsessions_proto::v1::{
    ApprovalResult, Event, EventKind, Mediation, ToolResult, lifecycle, tool_result::Code,
};
use jl::*;

const E1: &str = "e1aaaaaaaaaaaaaa";
const E2: &str = "e2bbbbbbbbbbbbbb";

#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum Cut {
    Call,
    Request,
    Decision,
    Receipt,
    End,
}
const CUTS: [Cut; 5] = [
    Cut::Call,
    Cut::Request,
    Cut::Decision,
    Cut::Receipt,
    Cut::End,
];

/// Seqs of the gate records written by [`gate_log`].
#[derive(Debug, Default, Clone, Copy)]
struct Seqs {
    call: i64,
    request: i64,
    decision: i64,
    receipt: i64,
}

/// One execution that reaches a gated call `c1` and is cut after `cut`.
fn gate_log(marked: bool, cut: Cut) -> (Log, Seqs) {
    let mut log = Log::new();
    if marked {
        log.push(start(E1, Some(1)));
    }
    log.push(input(E1, "hi"));
    log.push(model_call(E1));
    log.push(output(E1, "calling"));
    let mut s = Seqs {
        call: log.push(gated_call(E1, "c1")),
        ..Seqs::default()
    };
    if cut == Cut::Call {
        return (log, s);
    }
    s.request = log.push(request(E1, "c1"));
    if cut == Cut::Request {
        return (log, s);
    }
    s.decision = log.push(decision(E1, "c1", s.request, true));
    if cut == Cut::Decision {
        return (log, s);
    }
    s.receipt = log.push(receipt(E1, "c1", s.request, s.decision));
    if cut == Cut::Receipt {
        return (log, s);
    }
    log.push(output(E1, "done"));
    log.push(end(E1));
    (log, s)
}

#[test]
fn scan_reports_each_cut_of_a_gated_call() {
    for marked in [true, false] {
        for cut in CUTS {
            let (log, s) = gate_log(marked, cut);
            let got = scan(&log.records, 0).expect("valid gate evidence");
            let st = got.selected().expect("gate selected");
            let ctx = format!("marked={marked} cut={cut:?}");
            assert_eq!(got.states.len(), 1, "{ctx}");
            assert_eq!(st.execution_id, E1, "{ctx}");
            assert_eq!(
                st.call,
                call("c1", Mediation::RequiresApproval, "k-c1"),
                "{ctx}"
            );
            assert_eq!(st.call_seq, s.call, "{ctx}");
            assert_eq!(st.head, log.head(), "{ctx}");
            assert_eq!(got.head, log.head(), "{ctx}");
            assert!(!st.inherited, "{ctx}");
            assert_eq!(st.completed, cut == Cut::End, "{ctx}");
            if marked {
                assert_eq!(st.invocation, Some(marker(Some(1))), "{ctx}");
            } else {
                assert_eq!(st.invocation, None, "{ctx}");
            }
            let want = |seq: i64| (seq > 0).then(|| log.get(seq));
            assert_eq!(st.request, want(s.request), "{ctx}");
            assert_eq!(st.decision, want(s.decision), "{ctx}");
            assert_eq!(st.receipt, want(s.receipt), "{ctx}");
            assert_eq!(st.is_pending_request(), cut == Cut::Request, "{ctx}");
            assert_eq!(
                st.has_receipt(),
                matches!(cut, Cut::Receipt | Cut::End),
                "{ctx}"
            );
            if cut >= Cut::Decision {
                assert!(st.decision_body().is_some_and(|d| d.approved), "{ctx}");
            }
        }
    }
}

#[test]
fn captured_prefix_ignores_later_records() {
    let (mut log, s) = gate_log(true, Cut::Request);
    log.push(decision(E1, "c1", s.request, true));
    // A bogus request in another execution: invalid evidence past the cursor.
    log.push(request(E2, "c9"));

    let got = scan(&log.records, s.request).expect("prefix is valid");
    let st = got.selected().expect("gate");
    assert_eq!(st.head, s.request);
    assert!(st.decision.is_none());
    assert!(st.is_pending_request());

    let err = scan(&log.records, 0).expect_err("whole log is invalid");
    assert!(matches!(err, LogError::InvalidExecutionLog(_)), "{err}");
    let err = scan(&log.records, log.head()).expect_err("cursor at head");
    assert!(matches!(err, LogError::InvalidExecutionLog(_)), "{err}");
}

#[test]
fn negative_cursor_is_invalid() {
    let (log, _) = gate_log(true, Cut::Request);
    let err = scan(&log.records, -1).expect_err("negative cursor");
    assert!(matches!(err, LogError::InvalidExecutionLog(_)), "{err}");
    assert_eq!(scan(&[], 0), Ok(Default::default()));
}

/// The fuzz finding `scan-of-a-gated-call-with-nan-args`: both scans give
/// the same answer for a call whose args hold a NaN, which `==` on the
/// answers cannot see (NaN is unequal to itself).
#[test]
fn scans_agree_on_a_gated_call_whose_args_hold_a_nan() {
    let mut call = gated_call(E1, "c1");
    if let Some(agentsessions_proto::v1::event::Body::Tool(tc)) = call.body.as_mut() {
        tc.args = Some(pbjson_types::Struct::from_iter([(
            "x".to_owned(),
            pbjson_types::Value::from(f64::NAN),
        )]));
    }
    let mut log = Log::new();
    log.push(call);
    assert!(scan_agrees_with_grouped_scan(&log.records, 0));
    assert_eq!(scan(&log.records, 0).unwrap().states.len(), 1);
}

/// The fuzz finding `scan-of-a-gated-call-at-a-non-positive-seq`: a
/// tampered journal whose gated TOOL_CALL carries seq 0 (or below) reached
/// an internal assertion in the scan; it is invalid evidence instead.
#[test]
fn a_gated_call_at_a_non_positive_seq_is_invalid_evidence() {
    for seq in [0, -3] {
        let (mut log, s) = gate_log(true, Cut::Call);
        log.records[s.call as usize - 1].seq = seq;
        let err = scan(&log.records, 0).expect_err("a gate at a non-positive seq");
        assert!(matches!(err, LogError::InvalidExecutionLog(_)), "{err}");
        assert!(scan_agrees_with_grouped_scan(&log.records, 0));
    }
}

/// The fuzz finding `scan-cut-at-a-negative-seq`: a tampered journal whose
/// middle record has a negative seq, cut there. The shortcut (no gated
/// record) refused the cursor while the grouped scan read it as "no bound"
/// and scanned the whole journal; both now refuse it, gated or not.
#[test]
fn negative_cursor_is_refused_by_both_scans() {
    let (gated, _) = gate_log(true, Cut::Request);
    let mut plain = Log::new();
    plain.push(input(E1, "hi"));
    plain.push(output(E1, "no gate"));
    plain.push(end(E1));
    for log in [&gated, &plain] {
        assert!(scan_agrees_with_grouped_scan(&log.records, -5));
        assert!(scan(&log.records, -5).is_err());
    }
    assert!(scan_agrees_with_grouped_scan(&[], -1));
}

#[test]
fn first_seen_selection_skips_malformed_ordinary_successor() {
    let (mut log, _) = gate_log(true, Cut::Request);
    log.push(bodiless(E2, EventKind::EventExecutionStart));
    log.push(error(E1)); // late record of the older execution
    log.push(lifecycle(lifecycle::Kind::LifecycleSuspend));
    let got = scan(&log.records, 0).expect("ordinary successor is not validated");
    assert_eq!(got.selected, None);
    assert_eq!(got.states.len(), 1);
    assert!(
        got.for_call(E1, "c1")
            .is_some_and(|s| s.is_pending_request())
    );
}

#[test]
fn sequential_calls_select_the_last_gate() {
    let mut log = Log::new();
    log.push(start(E1, Some(0)));
    for c in ["c1", "c2"] {
        log.push(gated_call(E1, c));
        let r = log.push(request(E1, c));
        let d = log.push(decision(E1, c, r, true));
        log.push(receipt(E1, c, r, d));
    }
    log.push(gated_call(E1, "c3"));
    let r3 = log.push(request(E1, "c3"));
    let got = scan(&log.records, 0).expect("valid");
    assert_eq!(got.states.len(), 3);
    let st = got.selected().expect("c3");
    assert_eq!(st.call.id, "c3");
    assert_eq!(st.request_seq(), Some(r3));
    assert!(st.decision.is_none() && st.receipt.is_none());
    let c1 = got.for_call(E1, "c1").expect("c1");
    assert!(c1.has_receipt());
    // Both the execution and the call id must match.
    assert_eq!(
        got.for_call(E1, "c2").map(|s| s.call.id.as_str()),
        Some("c2")
    );
    assert_eq!(got.for_call(E2, "c1"), None);
    assert_eq!(got.find(E1, "c1", c1.request_seq().unwrap_or(0)), Some(c1));
    assert_eq!(got.find(E1, "c1", r3), None);
    assert_eq!(got.find(E2, "c3", r3), None);
    assert_eq!(got.for_execution(E1).count(), 3);
}

#[test]
fn latest_gate_wins_over_late_records_of_an_older_execution() {
    let (mut log, s) = gate_log(true, Cut::Decision);
    log.push(start(E2, Some(0)));
    log.push(gated_call(E2, "c1")); // same id and key, another execution
    let r2 = log.push(request(E2, "c1"));
    log.push(receipt(E1, "c1", s.request, s.decision));
    log.push(end(E1));
    log.push(error(E1));
    log.push(lifecycle(lifecycle::Kind::LifecycleResume));
    let got = scan(&log.records, 0).expect("valid");
    let st = got.selected().expect("e2 gate");
    assert_eq!(st.execution_id, E2);
    assert_eq!(st.request_seq(), Some(r2));
    assert!(!st.completed);
    let old = got.for_call(E1, "c1").expect("e1 gate");
    assert!(old.completed && old.has_receipt());
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    Invalid,
    Diverged,
    MissingKey,
}

fn classify(e: &LogError) -> Class {
    match e {
        LogError::InvalidLogMissingKey(_) => Class::MissingKey,
        LogError::ReplayDiverged(_) => Class::Diverged,
        e if e.is_invalid_log() => Class::Invalid,
        other => panic!("unexpected error class: {other:?}"),
    }
}

/// (name, expected error class, the mutated journal's events).
type Mutation = (&'static str, Class, fn() -> Vec<Event>);

fn base() -> Vec<Event> {
    vec![start(E1, Some(1)), input(E1, "hi")]
}

/// Full valid evidence: call @3, request @4, decision @5, receipt @6.
fn good() -> Vec<Event> {
    let mut v = base();
    v.extend([
        gated_call(E1, "c1"),
        request(E1, "c1"),
        decision(E1, "c1", 4, true),
        receipt(E1, "c1", 4, 5),
    ]);
    v
}

/// `good()` with record at position `i` replaced (or removed with None).
fn replace(i: usize, ev: Option<Event>) -> Vec<Event> {
    let mut v = good();
    match ev {
        Some(ev) => v[i] = ev,
        None => {
            v.remove(i);
        }
    }
    v
}

fn nil(id: &str, kind: EventKind) -> Event {
    bodiless(id, kind)
}

const MUTATIONS: &[Mutation] = &[
    ("missing call", Class::Invalid, || replace(2, None)),
    ("duplicate open call", Class::Invalid, || {
        let mut v = good();
        v.insert(3, gated_call(E1, "c1"));
        v
    }),
    ("duplicate call after receipt", Class::Invalid, || {
        let mut v = good();
        v.push(gated_call(E1, "c1"));
        v
    }),
    ("ordinary reuse of a gated id", Class::Invalid, || {
        let mut v = good();
        v.push(ordinary_call(E1, "c1"));
        v
    }),
    ("missing request", Class::Invalid, || {
        let mut v = base();
        v.extend([gated_call(E1, "c1"), decision(E1, "c1", 4, true)]);
        v
    }),
    ("duplicate request", Class::Invalid, || {
        let mut v = good();
        v.insert(4, request(E1, "c1"));
        v
    }),
    ("missing decision", Class::Invalid, || {
        let mut v = base();
        v.extend([
            gated_call(E1, "c1"),
            request(E1, "c1"),
            receipt(E1, "c1", 4, 5),
        ]);
        v
    }),
    ("duplicate identical decision", Class::Invalid, || {
        let mut v = good();
        v.insert(5, decision(E1, "c1", 4, true));
        v
    }),
    ("conflicting duplicate decision", Class::Invalid, || {
        let mut v = good();
        v.insert(5, decision(E1, "c1", 4, false));
        v
    }),
    ("missing receipt before END", Class::Invalid, || {
        replace(5, Some(end(E1)))
    }),
    ("duplicate receipt", Class::Invalid, || {
        let mut v = good();
        v.push(receipt(E1, "c1", 4, 5));
        v
    }),
    ("unbound receipt seqs", Class::Invalid, || {
        let mut v = good();
        v.push(receipt(E1, "other", 4, 5));
        v
    }),
    ("nil call payload", Class::Invalid, || {
        let mut v = base();
        v.extend([nil(E1, EventKind::EventToolCall), request(E1, "c1")]);
        v
    }),
    ("nil request payload", Class::Invalid, || {
        replace(3, Some(nil(E1, EventKind::EventApprovalRequest)))
    }),
    ("nil decision payload", Class::Invalid, || {
        replace(4, Some(nil(E1, EventKind::EventApprovalResult)))
    }),
    ("nil receipt payload", Class::Invalid, || {
        replace(5, Some(nil(E1, EventKind::EventToolResult)))
    }),
    ("empty call id", Class::Invalid, || {
        replace(
            2,
            Some(tool_call_ev(E1, call("", Mediation::RequiresApproval, "k"))),
        )
    }),
    ("controller-mediated gate", Class::Invalid, || {
        replace(2, Some(ordinary_call(E1, "c1")))
    }),
    ("id-less gate", Class::Invalid, || {
        vec![input("", "hi"), gated_call("", "c1"), request("", "c1")]
    }),
    ("request in another execution", Class::Invalid, || {
        let mut v = base();
        v.extend([gated_call(E1, "c1"), request(E2, "c1")]);
        v
    }),
    ("missing idempotency key", Class::MissingKey, || {
        replace(
            2,
            Some(tool_call_ev(
                E1,
                call("c1", Mediation::RequiresApproval, ""),
            )),
        )
    }),
    ("request names another call", Class::Diverged, || {
        replace(3, Some(request(E1, "c2")))
    }),
    ("decision names another call", Class::Diverged, || {
        replace(4, Some(decision(E1, "c2", 4, true)))
    }),
    (
        "decision names another request seq",
        Class::Diverged,
        || replace(4, Some(decision(E1, "c1", 3, true))),
    ),
    ("decision with zero request seq", Class::Diverged, || {
        replace(4, Some(decision(E1, "c1", 0, true)))
    }),
    ("receipt names another call", Class::Diverged, || {
        replace(5, Some(receipt(E1, "c2", 4, 5)))
    }),
    ("receipt with wrong request seq", Class::Diverged, || {
        replace(5, Some(receipt(E1, "c1", 3, 5)))
    }),
    ("receipt with zero decision seq", Class::Diverged, || {
        replace(5, Some(receipt(E1, "c1", 4, 0)))
    }),
    ("receipt contradicts approval", Class::Diverged, || {
        replace(
            5,
            Some(receipt_with(E1, "c1", 4, 5, true, Code::ApprovalDenied)),
        )
    }),
    // A START must open its execution's records.
    ("start after an input", Class::Invalid, || {
        let mut v = good();
        v.swap(0, 1);
        v
    }),
    // A receipt-shaped result with no gate: either seq alone makes it one.
    ("unbound receipt with both seqs", Class::Invalid, || {
        let mut v = base();
        v.push(receipt(E1, "c9", 2, 2));
        v
    }),
    (
        "unbound receipt with a request seq only",
        Class::Invalid,
        || {
            let mut v = base();
            v.push(receipt(E1, "c9", 2, 0));
            v
        },
    ),
    (
        "unbound receipt with a decision seq only",
        Class::Invalid,
        || {
            let mut v = base();
            v.push(receipt(E1, "c9", 0, 2));
            v
        },
    ),
    ("receipt contradicts denial", Class::Diverged, || {
        let mut v = replace(4, Some(decision(E1, "c1", 4, false)));
        v[5] = receipt(E1, "c1", 4, 5);
        v
    }),
];

#[test]
fn bad_evidence_is_rejected_with_its_error_class() {
    let mut ok = Log::new();
    ok.extend(good());
    assert!(
        scan(&ok.records, 0).is_ok(),
        "the unmutated evidence is valid"
    );
    for (name, want, build) in MUTATIONS {
        let mut log = Log::new();
        log.extend(build());
        let err = match scan(&log.records, 0) {
            Ok(s) => panic!("{name}: accepted: {s:?}"),
            Err(e) => e,
        };
        assert_eq!(classify(&err), *want, "{name}: {err}");
        if *want == Class::MissingKey {
            assert!(err.is_invalid_log() && err.is_missing_key(), "{name}");
        }
    }
}

#[test]
fn continuation_past_an_open_gate_is_rejected() {
    type Extra = (&'static str, fn() -> Event);
    let extras: [Extra; 6] = [
        ("model call", || model_call(E1)),
        ("output", || output(E1, "x")),
        ("another gate", || gated_call(E1, "c2")),
        ("usage", || usage(E1)),
        ("input", || input(E1, "more")),
        ("end", || end(E1)),
    ];
    for cut in [Cut::Call, Cut::Request, Cut::Decision] {
        for (name, extra) in extras {
            let (mut log, _) = gate_log(true, cut);
            log.push(extra());
            let err = scan(&log.records, 0).expect_err(name);
            assert!(
                matches!(err, LogError::InvalidExecutionLog(_)),
                "{cut:?} {name}: {err}"
            );
            assert!(
                err.to_string()
                    .contains("continued past an unresolved approval call"),
                "{cut:?} {name}: {err}"
            );
        }
    }
}

#[test]
fn gated_call_after_end_is_a_continuation() {
    let (mut log, _) = gate_log(true, Cut::End);
    log.push(gated_call(E1, "c2"));
    let err = scan(&log.records, 0).expect_err("gate after END");
    assert!(err.to_string().contains("continued past"), "{err}");
}

#[test]
fn error_and_lifecycle_do_not_resolve_a_gate() {
    let (mut log, s) = gate_log(true, Cut::Request);
    log.push(error(E1));
    log.push(lifecycle(lifecycle::Kind::LifecycleSuspend));
    log.push(lifecycle(lifecycle::Kind::LifecycleResume));
    let got = scan(&log.records, 0).expect("valid");
    let st = got.selected().expect("still selected");
    assert!(st.is_pending_request());
    assert!(!st.completed && !st.has_receipt());
    assert_eq!(st.request_seq(), Some(s.request));
    assert_eq!(st.head, log.head());
}

#[test]
fn ordinary_id_reuse_is_fine_and_a_result_before_the_gate_is_ordinary() {
    let mut log = Log::new();
    log.push(start(E1, Some(0)));
    log.push(ordinary_call(E1, "c0"));
    log.push(result(E1, "c0"));
    log.push(ordinary_call(E1, "c0"));
    log.push(result(E1, "c0"));
    log.push(result(E1, "c1")); // a report that happens to use the gate's id
    log.push(gated_call(E1, "c1"));
    log.push(request(E1, "c1"));
    let got = scan(&log.records, 0).expect("valid");
    assert!(got.selected().is_some_and(|s| s.call.id == "c1"));

    let mut bad = Log::new();
    bad.extend([
        start(E1, Some(0)),
        ordinary_call(E1, "c1"),
        gated_call(E1, "c1"),
    ]);
    let err = scan(&bad.records, 0).expect_err("gate reusing an ordinary id");
    assert!(
        err.to_string().contains("duplicate approval call identity"),
        "{err}"
    );
}

#[test]
fn fork_inherits_gates_at_every_cut() {
    for cut in CUTS {
        let (parent, _) = gate_log(true, cut);
        let child = parent.fork();
        let got = scan(&child.records, 0).expect("valid");
        let st = got.selected().expect("inherited gate still selected");
        assert!(st.inherited, "{cut:?}");
        assert!(!scan(&parent.records, 0).unwrap().states[0].inherited);
    }
    // A receipt written in the child after the marker keeps it inherited.
    let (parent, s) = gate_log(true, Cut::Decision);
    let mut child = parent.fork();
    child.push(receipt(E1, "c1", s.request, s.decision));
    let got = scan(&child.records, 0).expect("valid");
    let st = got.selected().expect("gate");
    assert!(st.inherited && st.has_receipt());
    // A new execution in the child clears the selection.
    let (parent, _) = gate_log(true, Cut::Request);
    let mut child = parent.fork();
    child.push(input(E2, "new turn"));
    let got = scan(&child.records, 0).expect("valid");
    assert_eq!(got.selected, None);
}

#[test]
fn gate_after_the_fork_is_owned() {
    let mut log = Log::new();
    log.extend([start(E1, Some(0)), output(E1, "before")]);
    let mut child = log.fork();
    child.push(gated_call(E1, "c1"));
    child.push(request(E1, "c1"));
    let got = scan(&child.records, 0).expect("valid");
    assert!(got.selected().is_some_and(|s| !s.inherited));
}

#[test]
fn invocation_validation_is_scoped_to_gated_executions() {
    // (name, start marker input count, number of INPUT records, nil INPUT?, want)
    type Case = (&'static str, Option<i64>, usize, bool, Option<bool>);
    let cases: [Case; 6] = [
        ("missing count", None, 1, false, Some(false)),
        ("negative count", Some(-1), 0, false, Some(false)),
        ("incomplete", Some(2), 1, false, Some(true)),
        ("excess", Some(1), 2, false, Some(false)),
        ("payload-less", Some(1), 0, true, Some(false)),
        ("complete", Some(1), 1, false, None),
    ];
    for (name, count, n, nil_input, want) in cases {
        for gated in [true, false] {
            let mut log = Log::new();
            log.push(start(E1, count));
            for _ in 0..n {
                log.push(input(E1, "x"));
            }
            if nil_input {
                log.push(bodiless(E1, EventKind::EventInput));
            }
            if gated {
                log.push(gated_call(E1, "c1"));
                log.push(request(E1, "c1"));
            } else {
                log.push(ordinary_call(E1, "c1"));
            }
            let got = scan(&log.records, 0);
            match (gated, want) {
                (true, Some(incomplete)) => {
                    let err = got.expect_err(name);
                    assert!(err.is_invalid_log(), "{name}: {err}");
                    assert_eq!(
                        matches!(err, LogError::IncompleteInvocation(_)),
                        incomplete,
                        "{name}: {err}"
                    );
                }
                (true, None) => assert!(got.is_ok_and(|s| s.selected.is_some()), "{name}"),
                (false, _) => assert!(got.is_ok_and(|s| s.selected.is_none()), "{name}"),
            }
        }
    }
}

#[test]
fn receipt_status_rule_table() {
    let decision = |approved| ApprovalResult {
        tool_call_id: "c1".into(),
        approved,
        reason: String::new(),
        request_seq: 4,
    };
    let res = |is_error, code: i32| ToolResult {
        id: "c1".into(),
        is_error,
        code,
        ..ToolResult::default()
    };
    let (u, d, x) = (
        Code::Unspecified as i32,
        Code::ApprovalDenied as i32,
        Code::ExecutorError as i32,
    );
    // (approved, is_error, code, valid)
    let table = [
        (false, true, d, true),
        (false, false, d, false),
        (false, true, u, false),
        (false, true, x, false),
        (false, false, u, false),
        (true, false, u, true),
        (true, true, x, true),
        (true, true, u, false),
        (true, false, x, false),
        (true, false, d, false),
        (true, true, d, false),
        (true, false, 99, false),
        (false, true, 99, false),
    ];
    for (approved, is_error, code, valid) in table {
        assert_eq!(
            receipt_matches_decision(&decision(approved), &res(is_error, code)),
            valid,
            "approved={approved} is_error={is_error} code={code}"
        );
    }
}

#[test]
fn host_receipts_bind_to_the_scanned_evidence() {
    let denied = ApprovalResult {
        approved: false,
        ..ApprovalResult::default()
    };
    let approved = ApprovalResult {
        approved: true,
        ..ApprovalResult::default()
    };

    let r = denial_receipt("c1", 4, 5);
    assert_eq!(
        (
            r.id.as_str(),
            r.approval_request_seq,
            r.approval_decision_seq
        ),
        ("c1", 4, 5)
    );
    assert!(r.is_error);
    assert_eq!(r.code, Code::ApprovalDenied as i32);
    assert_eq!(r.error, DENIED_TEXT);
    assert_eq!(DENIED_TEXT, "Tool execution denied by approval decision.");
    assert_eq!(r.content.len(), 1);
    assert!(is_text(&r.content[0]));
    assert!(receipt_matches_decision(&denied, &r));

    let forged = ToolResult {
        id: "forged".into(),
        approval_request_seq: 99,
        approval_decision_seq: 98,
        code: Code::ApprovalDenied as i32,
        ..ToolResult::default()
    };
    let r = executor_receipt("c1", 4, 5, Ok(forged));
    assert_eq!(
        (
            r.id.as_str(),
            r.approval_request_seq,
            r.approval_decision_seq
        ),
        ("c1", 4, 5)
    );
    assert!(!r.is_error);
    assert_eq!(r.code, Code::Unspecified as i32);
    assert!(receipt_matches_decision(&approved, &r));

    let failed = ToolResult {
        is_error: true,
        error: "boom".into(),
        ..ToolResult::default()
    };
    let r = executor_receipt("c1", 4, 5, Ok(failed));
    assert_eq!(r.code, Code::ExecutorError as i32);
    assert_eq!(r.error, "boom");
    assert!(receipt_matches_decision(&approved, &r));

    let r = executor_receipt("c1", 4, 5, Err("executor unreachable".into()));
    assert!(r.is_error);
    assert_eq!(r.error, "executor unreachable");
    assert_eq!(r.code, Code::ExecutorError as i32);
    assert_eq!(r.id, "c1");
    assert!(receipt_matches_decision(&approved, &r));
    assert!(!receipt_matches_decision(&denied, &r));
}

#[test]
fn scanned_states_are_owned_copies() {
    let (log, _) = gate_log(true, Cut::Receipt);
    let mut got = scan(&log.records, 0).expect("valid");
    let before = log.clone();
    if let Some(st) = got.states.first_mut() {
        st.call.id = "mutated".into();
        if let Some(r) = st.receipt.as_mut() {
            r.seq = 0;
        }
    }
    assert_eq!(log.records, before.records);
    assert_eq!(scan(&log.records, 0).unwrap().states[0].call.id, "c1");
}
