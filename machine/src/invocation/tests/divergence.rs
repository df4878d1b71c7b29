//! One test per divergence rule of controller.md §4.6, each failing when
//! that one check is removed: a Replay serves a recorded stream, the
//! harness asks for something else, and the run must end diverged with the
//! rule's own message (a removed check lets the run go on or end for
//! another reason). Each rule's matching request is also served, so the
//! tests pin the check itself, not a broken fixture.

use super::*;

/// A Replay rig over `evs`, recorded at seqs 1.. as execution E's effects.
fn replay(evs: Vec<Event>) -> Rig {
    let stream: Vec<_> = evs
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let head = stream.len() as i64;
    Rig::new(setup(Mode::Replay, stream, head), vec![])
}

/// The same, with the approval states the host's scan finds in `evs`.
fn replay_gated(evs: Vec<Event>) -> Rig {
    let mut rig = replay(evs);
    let log = rig.inv.setup().stream.clone();
    rig.inv = Invocation::new(Setup {
        approvals: approval::scan(&log, 0).expect("valid gate").states,
        ..rig.inv.setup().clone()
    });
    rig
}

/// Appends `extra` to the served stream without rescanning: evidence the
/// host's scan would refuse, which only a broken or raced read could hand
/// to an invocation.
fn with_tail(mut rig: Rig, extra: Vec<Event>) -> Rig {
    let mut stream = rig.inv.setup().stream.clone();
    for ev in extra {
        stream.push(record(stream.len() as i64 + 1, ev));
    }
    rig.inv = Invocation::new(Setup {
        stream,
        ..rig.inv.setup().clone()
    });
    rig
}

#[track_caller]
fn assert_diverged(rig: &Rig, want: &str) {
    match rig.inv.finished().map(|f| &f.ending) {
        Some(Ending::Failed(e)) => {
            assert!(e.is_divergence(), "not a divergence: {e}");
            assert!(e.to_string().contains(want), "{e} lacks {want:?}");
        }
        other => panic!("expected a divergence {want:?}, got {other:?}"),
    }
}

/// The harness asks for the gated call `c1`.
fn gated_c1(rig: &mut Rig) -> Vec<Action> {
    rig.event(
        EventKind::EventToolCall,
        Body::Tool(keyed_call("c1", Mediation::RequiresApproval)),
    )
}

#[track_caller]
fn assert_running(rig: &Rig) {
    assert!(rig.inv.finished().is_none(), "{:?}", rig.inv.finished());
}

fn text_output(text: &str) -> Event {
    events::output(E, events::assistant_text(text))
}

fn usage(input_tokens: i64) -> Usage {
    Usage {
        input_tokens,
        ..Default::default()
    }
}

fn tool_call_ev(call: ToolCall) -> Event {
    events::event(E, EventKind::EventToolCall, Body::Tool(call))
}

fn result_ev(result: ToolResult) -> Event {
    events::event(E, EventKind::EventToolResult, Body::Result(result))
}

/// One field change of a call, named by the divergence it causes.
type Change = fn(&mut ToolCall);

fn ordinary(id: &str) -> ToolCall {
    keyed_call(id, Mediation::ControllerMediated)
}

fn ok_result(id: &str) -> ToolResult {
    ToolResult {
        id: id.into(),
        ..Default::default()
    }
}

// --- a wrong next kind for Model, Output, Usage or Report -------------------

#[test]
fn a_model_call_where_an_output_was_recorded_diverges() {
    let mut rig = replay(vec![text_output("a")]);
    rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert_diverged(&rig, "expected a recorded model call");
}

#[test]
fn an_output_where_a_model_call_was_recorded_diverges() {
    let mut rig = replay(recorded_echo("hi"));
    rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("x")),
    );
    assert_diverged(&rig, "expected a recorded output");
}

#[test]
fn a_usage_where_an_output_was_recorded_diverges() {
    let mut rig = replay(vec![text_output("a")]);
    rig.event(EventKind::EventUsage, Body::Usage(usage(1)));
    assert_diverged(&rig, "expected a recorded usage");
}

#[test]
fn a_report_where_an_output_was_recorded_diverges() {
    let mut rig = replay(vec![text_output("a")]);
    rig.event(EventKind::EventToolResult, Body::Result(ok_result("c9")));
    assert_diverged(&rig, "expected a recorded tool result");
}

// --- input-hash, output-text and usage mismatch -----------------------------

#[test]
fn a_model_call_with_another_input_diverges_and_the_same_input_is_served() {
    let mut rig = replay(recorded_echo("hi"));
    rig.event(EventKind::EventModelCall, Body::Model(echo_call("bye")));
    assert_diverged(&rig, "model input hash mismatch");
    let mut rig = replay(recorded_echo("hi"));
    rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert_running(&rig);
}

#[test]
fn an_output_with_other_text_diverges_and_the_same_text_is_served() {
    let mut rig = replay(vec![text_output("recorded")]);
    rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("other")),
    );
    assert_diverged(&rig, "output mismatch");
    let mut rig = replay(vec![text_output("recorded")]);
    rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("recorded")),
    );
    assert_running(&rig);
    rig.event(EventKind::EventEnd, end());
    assert_eq!(rig.ending(), Ending::Completed);
}

#[test]
fn a_usage_with_other_counts_diverges_and_the_same_usage_is_served() {
    let usage_ev = |n| events::event(E, EventKind::EventUsage, Body::Usage(usage(n)));
    let mut rig = replay(vec![usage_ev(1)]);
    rig.event(EventKind::EventUsage, Body::Usage(usage(2)));
    assert_diverged(&rig, "usage mismatch");
    let mut rig = replay(vec![usage_ev(1)]);
    rig.event(EventKind::EventUsage, Body::Usage(usage(1)));
    assert_running(&rig);
}

// --- tool identity, mediation and key ---------------------------------------

#[test]
fn a_tool_call_differing_in_any_identity_field_diverges_naming_it() {
    let recorded = || vec![tool_call_ev(ordinary("c1")), result_ev(ok_result("c1"))];
    let changes: [(&str, Change); 4] = [
        ("tool differs", |c| c.tool = "delete".into()),
        ("idempotency key differs", |c| {
            c.idempotency_key = "key-other".into()
        }),
        ("args differs", |c| {
            c.args = Some(pbjson_types::Struct::default());
        }),
        ("id differs", |c| c.id = "c2".into()),
    ];
    for (want, change) in changes {
        let mut call = ordinary("c1");
        change(&mut call);
        let mut rig = replay(recorded());
        rig.event(EventKind::EventToolCall, Body::Tool(call));
        assert_diverged(&rig, want);
    }
    let mut rig = replay(recorded());
    let out = rig.event(EventKind::EventToolCall, Body::Tool(ordinary("c1")));
    assert_eq!(out, vec![Action::Send(frame(Frame::Tool(ok_result("c1"))))]);
}

#[test]
fn a_tool_call_with_other_mediation_diverges() {
    let mut rig = replay(vec![
        tool_call_ev(ordinary("c1")),
        result_ev(ok_result("c1")),
    ]);
    let mut call = ordinary("c1");
    call.mediation = Mediation::RequiresApproval as i32;
    rig.event(EventKind::EventToolCall, Body::Tool(call));
    assert_diverged(&rig, "mediation differs");
}

// --- malformed recorded tool evidence ---------------------------------------

#[test]
fn malformed_recorded_tool_evidence_diverges() {
    let no_call = events::event(E, EventKind::EventToolCall, Body::Usage(usage(0)));
    let mut keyless = ordinary("c1");
    keyless.idempotency_key.clear();
    let mut unmediated = ordinary("c1");
    unmediated.mediation = Mediation::Unspecified as i32;
    let no_result = events::event(E, EventKind::EventToolResult, Body::Usage(usage(0)));
    let cases = [
        (
            vec![no_call, result_ev(ok_result("c1"))],
            "recorded tool call has no payload",
        ),
        (
            vec![tool_call_ev(keyless), result_ev(ok_result("c1"))],
            "no idempotency key",
        ),
        (
            vec![tool_call_ev(unmediated), result_ev(ok_result("c1"))],
            "has mediation",
        ),
        (
            vec![tool_call_ev(ordinary("c1")), no_result],
            "recorded tool result has no payload",
        ),
        (
            vec![tool_call_ev(ordinary("c1")), result_ev(ok_result("c2"))],
            "answers another call",
        ),
    ];
    for (evs, want) in cases {
        let mut rig = replay(evs);
        rig.event(EventKind::EventToolCall, Body::Tool(ordinary("c1")));
        assert_diverged(&rig, want);
    }
}

// --- missing approval evidence, receipt mismatch ----------------------------

/// A decided, receipted gate on `c1` (request at 2, decision at 3).
fn gated_turn(receipt: ToolResult) -> Vec<Event> {
    vec![
        tool_call_ev(keyed_call("c1", Mediation::RequiresApproval)),
        events::approval_request(E, "c1"),
        events::approval_result(
            E,
            ApprovalResult {
                tool_call_id: "c1".into(),
                approved: true,
                reason: String::new(),
                request_seq: 2,
            },
            None,
            agentsessions_proto::wkt::Timestamp::new(1, 0),
        ),
        result_ev(receipt),
    ]
}

fn receipt(request_seq: i64, decision_seq: i64) -> ToolResult {
    ToolResult {
        id: "c1".into(),
        approval_request_seq: request_seq,
        approval_decision_seq: decision_seq,
        ..Default::default()
    }
}

#[test]
fn a_gated_call_without_scanned_approval_evidence_diverges() {
    // The stream holds the evidence, but the host's scan found none for it.
    let mut rig = replay(gated_turn(receipt(2, 3)));
    gated_c1(&mut rig);
    assert_diverged(&rig, "approval evidence missing");
}

#[test]
fn a_receipt_that_does_not_match_its_decision_diverges_and_a_matching_one_is_served() {
    let evs = gated_turn(receipt(2, 3));
    // A receipt with the wrong decision seq after the scanned evidence.
    let mut rig = with_tail(
        replay_gated(evs[..3].to_vec()),
        vec![result_ev(receipt(2, 2))],
    );
    gated_c1(&mut rig);
    assert_diverged(&rig, "approval receipt does not match its decision");
    let mut rig = replay_gated(evs);
    let out = gated_c1(&mut rig);
    assert_eq!(out.len(), 2, "decision, then receipt: {out:?}");
}

// --- Report consuming a receipt, Report reusing a gated id ------------------

#[test]
fn a_report_that_would_consume_an_approval_receipt_diverges() {
    let mut rig = replay(vec![result_ev(receipt(2, 3))]);
    rig.event(EventKind::EventToolResult, Body::Result(ok_result("c9")));
    assert_diverged(&rig, "report cannot consume an approval receipt");
}

#[test]
fn a_report_reusing_a_served_gated_call_id_diverges() {
    // With a recorded result still to serve, and with the stream spent.
    let served = replay_gated(gated_turn(receipt(2, 3)));
    let tailed = with_tail(
        replay_gated(gated_turn(receipt(2, 3))),
        vec![result_ev(ok_result("c1"))],
    );
    for mut rig in [tailed, served] {
        gated_c1(&mut rig);
        assert_running(&rig);
        rig.event(EventKind::EventToolResult, Body::Result(ok_result("c1")));
        assert_diverged(&rig, "report reuses approval call id");
    }
}

// --- under-consumption -------------------------------------------------------

#[test]
fn ending_before_every_recorded_effect_is_served_diverges() {
    let mut rig = replay(vec![text_output("a"), text_output("b")]);
    rig.event(
        EventKind::EventOutput,
        Body::Message(events::assistant_text("a")),
    );
    rig.event(EventKind::EventEnd, end());
    assert_diverged(&rig, "consumed 1 of 2");
}

// --- not divergence: a keyless CONTROLLER_MEDIATED call ---------------------

#[test]
fn a_keyless_mediated_call_is_refused_as_live_and_consumes_nothing() {
    let mut keyless = ordinary("c1");
    keyless.idempotency_key.clear();
    // Whether the next recorded call is another one or this id ungated.
    for recorded in ["c2", "c1"] {
        let evs = vec![
            tool_call_ev(ordinary(recorded)),
            result_ev(ok_result(recorded)),
        ];
        let mut rig = replay(evs);
        rig.event(EventKind::EventToolCall, Body::Tool(keyless.clone()));
        match rig.inv.finished().map(|f| &f.ending) {
            Some(Ending::Failed(e)) => {
                assert!(!e.is_divergence(), "not a divergence: {e}");
                assert!(
                    matches!(e, TurnError::Log(LogError::MissingIdempotencyKey)),
                    "{e:?}"
                );
            }
            other => panic!("expected the live refusal, got {other:?}"),
        }
    }
}

#[test]
fn a_keyless_mediated_call_where_its_gate_was_recorded_diverges_on_mediation() {
    // The live refusal is reproduced only when the journal holds no gate
    // for that call: here it does, so the call is checked against it.
    let mut keyless = ordinary("c1");
    keyless.idempotency_key.clear();
    let mut rig = replay_gated(gated_turn(receipt(2, 3)));
    rig.event(EventKind::EventToolCall, Body::Tool(keyless));
    assert_diverged(&rig, "mediation differs");
}

// --- what a replay or recovery may re-drive, and what it refuses -----------
// (found by cargo-mutants: each guard below survived the tests above)

fn has_invoke(out: &[Action]) -> bool {
    out.iter().any(|a| matches!(a, Action::InvokeModel(_)))
}

fn has_execute(out: &[Action]) -> bool {
    out.iter().any(|a| matches!(a, Action::ExecuteTool { .. }))
}

/// Commits the ERROR append a failing Live or Resume run asks for.
fn settle(rig: &mut Rig, out: &[Action]) {
    if let Some(append @ Action::Append { .. }) = out.last() {
        rig.appended(append);
    }
}

#[track_caller]
fn assert_failed_with(rig: &Rig, want: &str) {
    match rig.inv.finished().map(|f| &f.ending) {
        Some(Ending::Failed(e)) => assert!(e.to_string().contains(want), "{e} lacks {want:?}"),
        other => panic!("expected a failure {want:?}, got {other:?}"),
    }
}

/// A run in `mode` over `evs`, recorded at seqs 1...
fn rig_in(mode: Mode, evs: Vec<Event>, legacy: bool, has_executor: bool) -> Rig {
    let stream: Vec<_> = evs
        .into_iter()
        .enumerate()
        .map(|(i, e)| record(i as i64 + 1, e))
        .collect();
    let head = stream.len() as i64;
    let log = stream.clone();
    let mut s = setup(mode, stream, head);
    s.legacy = legacy;
    s.has_executor = has_executor;
    Rig::new(s, log)
}

#[test]
fn a_replay_never_asks_the_model_for_an_unanswered_recorded_call() {
    let call = recorded_echo("hi").remove(0);
    let mut rig = rig_in(Mode::Replay, vec![call], false, true);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert!(!has_invoke(&out), "{out:?}");
    assert_failed_with(&rig, "expected a recorded completion");
}

#[test]
fn a_recovery_asks_the_model_again_only_for_a_trailing_modern_call() {
    let call = || recorded_echo("hi").remove(0);
    let usage_ev = events::event(E, EventKind::EventUsage, Body::Usage(usage(1)));
    // Not trailing: evidence follows the unanswered call.
    let mut rig = rig_in(Mode::Resume, vec![call(), usage_ev], false, true);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert!(!has_invoke(&out), "{out:?}");
    settle(&mut rig, &out);
    assert_failed_with(&rig, "recorded completion missing");
    // Trailing but legacy: legacy turns re-drive tools only.
    let mut rig = rig_in(Mode::Resume, vec![call()], true, true);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert!(!has_invoke(&out), "{out:?}");
    // Trailing and modern: asked once.
    let mut rig = rig_in(Mode::Resume, vec![call()], false, true);
    let out = rig.event(EventKind::EventModelCall, Body::Model(echo_call("hi")));
    assert!(has_invoke(&out), "{out:?}");
}

#[test]
fn a_replay_never_executes_an_unanswered_recorded_tool_call() {
    let mut rig = rig_in(
        Mode::Replay,
        vec![tool_call_ev(ordinary("c1"))],
        false,
        true,
    );
    let out = rig.event(EventKind::EventToolCall, Body::Tool(ordinary("c1")));
    assert!(!has_execute(&out), "{out:?}");
    assert_failed_with(&rig, "recorded tool call has no result");
}

#[test]
fn a_recovery_reruns_a_trailing_tool_intent_only_with_an_executor() {
    let mut rig = rig_in(
        Mode::Resume,
        vec![tool_call_ev(ordinary("c1"))],
        false,
        true,
    );
    let out = rig.event(EventKind::EventToolCall, Body::Tool(ordinary("c1")));
    assert!(has_execute(&out), "{out:?}");
    let mut rig = rig_in(
        Mode::Resume,
        vec![tool_call_ev(ordinary("c1"))],
        false,
        false,
    );
    let out = rig.event(EventKind::EventToolCall, Body::Tool(ordinary("c1")));
    assert!(!has_execute(&out), "{out:?}");
    settle(&mut rig, &out);
    assert_failed_with(&rig, "no tool executor");
}

#[test]
fn a_call_the_live_host_refused_is_refused_again_before_its_recorded_fallback() {
    // Live, the unmediated c1 was refused before any write and the harness
    // fell back to the ordinary c2: replay refuses c1 the same way.
    let mut unmediated = ordinary("c1");
    unmediated.mediation = Mediation::Unspecified as i32;
    let fallback = vec![tool_call_ev(ordinary("c2")), result_ev(ok_result("c2"))];
    let mut rig = replay(fallback);
    rig.event(EventKind::EventToolCall, Body::Tool(unmediated.clone()));
    match rig.inv.finished().map(|f| &f.ending) {
        Some(Ending::Failed(e)) => {
            assert!(
                !e.is_divergence(),
                "the live refusal, not a divergence: {e}"
            );
            assert!(e.to_string().contains("MEDIATION_UNSPECIFIED"), "{e}");
        }
        other => panic!("expected the live refusal, got {other:?}"),
    }
    // A recorded gated call is no fallback: c1 is checked against it.
    let mut rig = replay(gated_turn(receipt(2, 3)));
    unmediated.id = "c0".into();
    rig.event(EventKind::EventToolCall, Body::Tool(unmediated));
    assert_diverged(&rig, "differs from the record");
}

#[test]
fn an_undecided_recorded_gate_is_missing_evidence_for_a_replay() {
    let mut rig = replay_gated(gated_turn(receipt(2, 3))[..2].to_vec());
    gated_c1(&mut rig);
    assert_diverged(&rig, "approval evidence missing for gated call");
}

#[test]
fn approval_evidence_other_than_the_scanned_evidence_diverges() {
    let evs = gated_turn(receipt(2, 3));
    let mut rig = replay_gated(evs.clone());
    // The same decision with another reason, in place of the scanned one.
    let mut other = rig.inv.setup().stream.clone();
    if let Some(Body::ApprovalResult(d)) = other[2].event.as_mut().and_then(|e| e.body.as_mut()) {
        d.reason = "changed".into();
    } else {
        panic!("seq 3 is the decision: {:?}", other[2]);
    }
    rig.inv = Invocation::new(Setup {
        stream: std::mem::take(&mut other),
        ..rig.inv.setup().clone()
    });
    gated_c1(&mut rig);
    assert_diverged(&rig, "approval evidence out of order");
}

// --- reports and usage once the recorded stream is spent --------------------

#[test]
fn a_report_carrying_any_receipt_field_is_refused_as_host_owned() {
    let fields: [fn(&mut ToolResult); 3] = [
        |r| r.approval_request_seq = 2,
        |r| r.approval_decision_seq = 3,
        |r| r.code = tool_result::Code::ApprovalDenied as i32,
    ];
    for set in fields {
        let mut report = ok_result("c9");
        set(&mut report);
        let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
        let out = rig.event(EventKind::EventToolResult, Body::Result(report.clone()));
        settle(&mut rig, &out);
        assert_eq!(
            rig.ending(),
            Ending::Failed(TurnError::ApprovalReceiptReport),
            "{report:?}"
        );
    }
}

#[test]
fn a_spent_replay_diverges_on_a_report_or_a_modern_usage_and_ignores_a_legacy_usage() {
    let mut rig = replay(vec![]);
    rig.event(EventKind::EventToolResult, Body::Result(ok_result("c9")));
    assert_diverged(&rig, "expected a recorded tool result");
    let mut rig = replay(vec![]);
    rig.event(EventKind::EventUsage, Body::Usage(usage(1)));
    assert_diverged(&rig, "expected a recorded usage");
    // Legacy journals never recorded usage: served or spent, it is ignored.
    for evs in [vec![], vec![text_output("a")]] {
        let mut rig = rig_in(Mode::Replay, evs, true, true);
        let out = rig.event(EventKind::EventUsage, Body::Usage(usage(1)));
        assert!(out.is_empty(), "{out:?}");
        assert_running(&rig);
    }
}

#[test]
fn a_live_report_is_journaled_as_the_harness_sent_it() {
    let mut rig = Rig::new(setup(Mode::Live, vec![], 0), vec![]);
    let out = rig.event(EventKind::EventToolResult, Body::Result(ok_result("r1")));
    let [Action::Append { events, .. }] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(events[0].body, Some(Body::Result(ok_result("r1"))));
}
