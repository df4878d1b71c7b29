//! The host with harnesses written in Python (grpcio), attached by address
//! like any foreign peer: turns and replay, a crash mid-turn, the approval
//! gate both ways, fork inheritance, a failing harness, and the harness of
//! docs/harness-authoring.md as it stands.

use agentsessions_proto::v1::{
    ApprovalRef, ApproveRequest, EventKind, GetSessionRequest, LogRecord, ToolResult, event::Body,
    tool_result::Code,
};
use serde_json::Value as Json;

use super::support::{
    HOLD_WAIT, extends, failing_turn, log, of_execution, parked_turn, resume_ok, same_entry,
    session, turn_ok, turn_records,
};
use super::{Check, CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts, count, kind_names, outputs};
use crate::env::Env;
use crate::host::BoxFuture;
use crate::python::{self, APPROVAL, DOC, ECHO, FAIL, PythonPeers};

pub(super) fn checks() -> Vec<Check> {
    vec![
        check!(
            "python_harness_turns_replay_without_the_model",
            "issue 13: python peers (turns, replay)",
            turns_and_replay
        ),
        check!(
            "python_harness_crash_mid_turn_redrive_at_most_once",
            "issue 13: python peers (crash mid-turn)",
            crash_mid_turn
        ),
        check!(
            "python_harness_approval_denied_then_approved",
            "issue 13: python peers (approval gate)",
            approval_flow
        ),
        check!(
            "python_harness_fork_child_inherits_history",
            "issue 13: python peers (fork)",
            fork_inherits
        ),
        check!(
            "python_harness_failure_journaled_as_error",
            "issue 13: python peers (END FAILED)",
            failure
        ),
        check!(
            "python_doc_harness_runs_an_echo_turn",
            "issue 13: docs/harness-authoring.md python harness",
            doc_harness
        ),
    ]
}

/// None when the Python peers run; else the verdict of a check that
/// cannot: a skip, or in CI a failure.
fn unavailable(env: &Env) -> Result<Option<Verdict>, Failure> {
    match &env.peers.python {
        Ok(_) => Ok(None),
        Err(why) if python::required() => Err(Failure(format!(
            "python harness peers unavailable with CI=true: {why}"
        ))),
        Err(why) => {
            eprintln!("SKIPPED: python harness peers unavailable: {why}");
            Ok(Some(Verdict::Skip(format!(
                "python harness peers unavailable: {why}"
            ))))
        }
    }
}

fn py(env: &Env) -> Result<&PythonPeers, Failure> {
    env.peers
        .python
        .as_ref()
        .map_err(|why| Failure(format!("python harness peers unavailable: {why}")))
}

fn text<'a>(v: &'a Json, key: &str) -> &'a str {
    v.get(key).and_then(Json::as_str).unwrap_or_default()
}

fn int(v: &Json, key: &str) -> i64 {
    v.get(key).and_then(Json::as_i64).unwrap_or_default()
}

/// One echo turn, a second one on the recorded history, and replay and
/// resume after a restart with zero model calls and the same records.
async fn turns_and_replay(env: &mut Env) -> CheckResult {
    if let Some(skip) = unavailable(env)? {
        return Ok(skip);
    }
    env.start().await?;
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["one"], ExecOpts::default()).await?;
    turn_ok(env, &sid, &["two"], ExecOpts::default()).await?;
    let live = log(env, &sid).await?;
    let outs = outputs(&live);
    ensure!(
        outs.len() == 2 && outs[0].starts_with("echo:one") && outs[1].starts_with("echo:two"),
        "want the echoes of one and two, got {outs:?}"
    );
    ensure!(
        count(&live, EventKind::EventEnd) == 2 && client::end_state(&live) == "COMPLETED",
        "want two END COMPLETED: {}",
        kind_names(&live)
    );
    let calls = env.model_requests();
    ensure!(calls == 2, "2 turns made {calls} model requests");
    let starts = py(env)?.starts();
    ensure!(starts.len() == 2, "the harness saw {} Starts", starts.len());
    ensure!(
        python::json_strings(&starts[0], "inputs") == ["one"]
            && python::json_strings(&starts[1], "inputs") == ["two"],
        "Start inputs {:?} then {:?}",
        python::json_strings(&starts[0], "inputs"),
        python::json_strings(&starts[1], "inputs")
    );
    ensure!(
        python::json_strings(&starts[1], "history_texts").contains(&outs[0]),
        "the second Start's history lacks the first output {:?}: {:?}",
        outs[0],
        python::json_strings(&starts[1], "history_texts")
    );

    env.restart().await?;
    ensure!(
        log(env, &sid).await? == live,
        "replay after a restart differs from the live records"
    );
    resume_ok(env, &sid).await?;
    let after = log(env, &sid).await?;
    ensure!(
        turn_records(&after).len() == turn_records(&live).len(),
        "Resume of a completed session added records: {}",
        kind_names(&after)
    );
    ensure!(
        outputs(&after) == outs,
        "the outputs changed after a restart"
    );
    ensure!(
        env.model_requests() == calls,
        "replay or resume asked the model"
    );
    ensure!(
        py(env)?.starts().len() == 2,
        "replay or resume ran the harness"
    );
    Ok(Verdict::Pass)
}

/// The host is killed with OUTPUT durable but no END; a fresh host re-drives
/// the same execution on the Python harness once, with the completion served.
async fn crash_mid_turn(env: &mut Env) -> CheckResult {
    if let Some(skip) = unavailable(env)? {
        return Ok(skip);
    }
    env.start().await?;
    let sid = session(env, ECHO).await?;
    py(env)?.arm_hold().await?;
    let mut c = env.client()?;
    let s = sid.clone();
    let task =
        tokio::spawn(
            async move { client::exec(&mut c, &s, &["hello"], ExecOpts::default()).await },
        );
    ensure!(
        py(env)?.wait_held(HOLD_WAIT).await,
        "the python harness never reached its hold point"
    );
    // The host answers the model call only after OUTPUT is durable.
    let before = log(env, &sid).await?;
    env.crash().await?;
    task.abort();
    let k = client::kinds(&before);
    ensure!(
        k.contains(&EventKind::EventOutput) && !k.contains(&EventKind::EventEnd),
        "before the crash the turn must hold OUTPUT but no END: {}",
        kind_names(&before)
    );
    ensure!(
        log(env, &sid).await? == before,
        "the crash changed the journal"
    );
    ensure!(
        env.model_requests() == 1,
        "{} model requests",
        env.model_requests()
    );

    resume_ok(env, &sid).await?;
    let after = log(env, &sid).await?;
    ensure!(
        extends(&after, &before),
        "recovery rewrote committed records"
    );
    let outs = outputs(&after);
    ensure!(
        outs.len() == 1 && outs[0].starts_with("echo:hello"),
        "want one echo of hello, got {outs:?}"
    );
    ensure!(
        count(&after, EventKind::EventEnd) == 1
            && count(&after, EventKind::EventModelCall) == 1
            && client::end_state(&after) == "COMPLETED",
        "want one MODEL_CALL and one END COMPLETED: {}",
        kind_names(&after)
    );
    ensure!(
        env.model_requests() == 1,
        "the re-drive asked the model again"
    );
    let starts = py(env)?.starts();
    ensure!(
        starts.len() == 2,
        "want the live Start and one recovery Start, saw {}",
        starts.len()
    );
    ensure!(
        text(&starts[0], "execution_id") == text(&starts[1], "execution_id")
            && python::json_strings(&starts[1], "inputs") == ["hello"],
        "the recovery Start is another execution or lost its input: {starts:?}"
    );
    resume_ok(env, &sid).await?;
    ensure!(
        turn_records(&log(env, &sid).await?).len() == turn_records(&after).len(),
        "a second Resume added turn records"
    );
    ensure!(
        py(env)?.starts().len() == 2 && env.model_requests() == 1,
        "a second Resume ran the harness or the model"
    );
    Ok(Verdict::Pass)
}

fn effects(env: &mut Env, sid: &str, want: usize) -> Result<(), Failure> {
    match env.effect_count(sid) {
        Some(n) => ensure!(
            n == want,
            "the gated tool's effect happened {n} times, want {want}"
        ),
        None => env.note("effect count not observable for this host"),
    }
    Ok(())
}

/// Records of one execution.
/// Runs a gated turn that must park, and checks what the park left.
async fn park(env: &mut Env, sid: &str, input: &str) -> Result<ApprovalRef, Failure> {
    let (pending, _) = parked_turn(env, sid, &[input], ExecOpts::default()).await?;
    let mut c = env.client()?;
    let got = c
        .get_session(GetSessionRequest {
            uid: sid.to_owned(),
        })
        .await?
        .into_inner();
    ensure!(
        got.pending_approval.as_ref() == Some(&pending),
        "GetSession reports pending_approval {:?}, want {pending:?}",
        got.pending_approval
    );
    Ok(pending)
}

/// Approves or denies `pending`; returns the decision's seq.
async fn decide(
    env: &Env,
    sid: &str,
    pending: &ApprovalRef,
    approved: bool,
) -> Result<i64, Failure> {
    let mut c = env.client()?;
    let decided = c
        .approve(ApproveRequest {
            session: sid.to_owned(),
            execution_id: pending.execution_id.clone(),
            tool_call_id: pending.tool_call_id.clone(),
            request_seq: pending.request_seq,
            approved: Some(approved),
            reason: if approved { "yes" } else { "no" }.into(),
            identity: None,
        })
        .await?
        .into_inner();
    let decision = decided
        .decision
        .ok_or_else(|| Failure("Approve returned no decision record".into()))?;
    ensure!(
        client::kind(&decision) == EventKind::EventApprovalResult,
        "the decision is {}",
        kind_names(std::slice::from_ref(&decision))
    );
    Ok(decision.seq)
}

/// After Resume: the execution's one receipt, bound to the decision, as the
/// journal and the Python harness both saw it, and the turn's output.
fn receipt_of(
    env: &Env,
    records: &[LogRecord],
    pending: &ApprovalRef,
    decision_seq: i64,
) -> Result<(ToolResult, String), Failure> {
    let turn = of_execution(records, &pending.execution_id);
    ensure!(
        count(&turn, EventKind::EventToolResult) == 1 && client::end_state(&turn) == "COMPLETED",
        "want one receipt and END COMPLETED: {}",
        kind_names(&turn)
    );
    let receipt = turn
        .iter()
        .find_map(|r| match r.event.as_ref().and_then(|e| e.body.as_ref()) {
            Some(Body::Result(tr)) => Some(tr.clone()),
            _ => None,
        })
        .ok_or_else(|| Failure("no receipt body".into()))?;
    ensure!(
        receipt.approval_request_seq == pending.request_seq
            && receipt.approval_decision_seq == decision_seq,
        "receipt binds to {}/{}, want {}/{decision_seq}",
        receipt.approval_request_seq,
        receipt.approval_decision_seq,
        pending.request_seq
    );
    let seen = py(env)?.receipts();
    let mine = seen
        .iter()
        .find(|r| text(r, "execution_id") == pending.execution_id)
        .ok_or_else(|| Failure("the python harness saw no receipt".into()))?;
    ensure!(
        int(mine, "code") == i64::from(receipt.code)
            && mine.get("is_error").and_then(Json::as_bool) == Some(receipt.is_error)
            && int(mine, "approval_request_seq") == pending.request_seq
            && int(mine, "approval_decision_seq") == decision_seq
            && int(mine, "decision_request_seq") == pending.request_seq,
        "the python harness's receipt {mine} differs from the journaled {receipt:?}"
    );
    let output = outputs(&turn).pop().unwrap_or_default();
    Ok((receipt, output))
}

/// Two gated turns on one session: the first parks and is denied, the
/// second parks and is approved; each completes on Resume with its receipt.
async fn approval_flow(env: &mut Env) -> CheckResult {
    if let Some(skip) = unavailable(env)? {
        return Ok(skip);
    }
    env.start().await?;
    let sid = session(env, APPROVAL).await?;

    let denied = park(env, &sid, "deny me").await?;
    effects(env, &sid, 0)?;
    let decision = decide(env, &sid, &denied, false).await?;
    resume_ok(env, &sid).await?;
    let records = log(env, &sid).await?;
    let (receipt, output) = receipt_of(env, &records, &denied, decision)?;
    ensure!(
        receipt.is_error && receipt.code == Code::ApprovalDenied as i32,
        "a denial's receipt: code {} is_error {}",
        receipt.code,
        receipt.is_error
    );
    ensure!(
        output.starts_with(&format!("tool error ({})", Code::ApprovalDenied as i32)),
        "the denied turn's output {output:?}"
    );
    effects(env, &sid, 0)?;

    let approved = park(env, &sid, "approve me").await?;
    ensure!(
        approved.execution_id != denied.execution_id,
        "the second gated turn reused the first execution"
    );
    let decision = decide(env, &sid, &approved, true).await?;
    effects(env, &sid, 0)?;
    // A fresh controller completes the decided gate.
    env.restart().await?;
    resume_ok(env, &sid).await?;
    let done = log(env, &sid).await?;
    let (receipt, output) = receipt_of(env, &done, &approved, decision)?;
    ensure!(
        !receipt.is_error && receipt.code == Code::Unspecified as i32,
        "an approval's receipt: code {} is_error {} error {:?}",
        receipt.code,
        receipt.is_error,
        receipt.error
    );
    ensure!(output == "tool ok", "the approved turn's output {output:?}");
    effects(env, &sid, 1)?;

    // Nothing is left to re-drive: no harness run, no effect, no records.
    let starts = py(env)?.starts().len();
    resume_ok(env, &sid).await?;
    ensure!(
        turn_records(&log(env, &sid).await?).len() == turn_records(&done).len(),
        "a further Resume wrote turn records"
    );
    ensure!(
        py(env)?.starts().len() == starts,
        "a further Resume ran the harness"
    );
    effects(env, &sid, 1)?;
    ensure!(
        env.model_requests() == 0,
        "the approval harness never asks the model"
    );
    Ok(Verdict::Pass)
}

/// A child forked at the parent's head continues on the Python harness,
/// which is started with the inherited history.
async fn fork_inherits(env: &mut Env) -> CheckResult {
    if let Some(skip) = unavailable(env)? {
        return Ok(skip);
    }
    env.start().await?;
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["one"], ExecOpts::default()).await?;
    let parent = log(env, &sid).await?;
    let mut c = env.client()?;
    let children = client::fork(&mut c, &sid, 0, 1).await?;
    let child = children
        .first()
        .ok_or_else(|| Failure("fork returned no child".into()))?
        .clone();
    let inherited = log(env, &child).await?;
    ensure!(
        inherited.len() >= parent.len()
            && parent.iter().zip(&inherited).all(|(a, b)| same_entry(a, b)),
        "the child does not share the parent's records: {}",
        kind_names(&inherited)
    );
    let calls = env.model_requests();
    turn_ok(env, &child, &["two"], ExecOpts::default()).await?;
    let continued = log(env, &child).await?;
    ensure!(
        outputs(&continued)
            .last()
            .is_some_and(|o| o.starts_with("echo:two")),
        "the child did not continue: {:?}",
        outputs(&continued)
    );
    ensure!(
        env.model_requests() == calls + 1,
        "the child's turn made {} model requests",
        env.model_requests() - calls
    );
    let starts = py(env)?.starts();
    let last = starts
        .last()
        .ok_or_else(|| Failure("the python harness saw no Start".into()))?;
    ensure!(
        text(last, "session") == child,
        "the child's turn ran on session {:?}",
        text(last, "session")
    );
    let history = python::json_strings(last, "history_texts");
    ensure!(
        history.contains(&"one".to_owned()) && outputs(&parent).iter().all(|o| history.contains(o)),
        "the child's Start lacks the parent's turn: {history:?}"
    );
    ensure!(
        log(env, &sid).await? == parent,
        "the child's turn changed the parent"
    );
    Ok(Verdict::Pass)
}

async fn failure(env: &mut Env) -> CheckResult {
    if let Some(skip) = unavailable(env)? {
        return Ok(skip);
    }
    env.start().await?;
    let sid = session(env, FAIL).await?;
    failing_turn(env, &sid).await?;
    Ok(Verdict::Pass)
}

/// The doc's harness, byte for byte, serves an echo turn and its replay.
async fn doc_harness(env: &mut Env) -> CheckResult {
    python::doc_matches_harness().map_err(Failure)?;
    if let Some(skip) = unavailable(env)? {
        return Ok(skip);
    }
    env.start().await?;
    let sid = session(env, DOC).await?;
    turn_ok(env, &sid, &["hello"], ExecOpts::default()).await?;
    let live = log(env, &sid).await?;
    let outs = outputs(&live);
    ensure!(
        outs.len() == 1 && outs[0].starts_with("echo:hello"),
        "want the echo of hello, got {outs:?}"
    );
    ensure!(
        client::end_state(&live) == "COMPLETED",
        "the turn did not complete: {}",
        kind_names(&live)
    );
    // The documented harness names model "echo", which a host may answer
    // itself or send to its provider: what counts is that nothing asks again.
    let calls = env.model_requests();
    env.restart().await?;
    ensure!(
        log(env, &sid).await? == live,
        "replay differs after a restart"
    );
    resume_ok(env, &sid).await?;
    ensure!(
        env.model_requests() == calls,
        "replay or resume asked the model"
    );
    ensure!(
        turn_records(&log(env, &sid).await?).len() == turn_records(&live).len(),
        "resume added records"
    );
    Ok(Verdict::Pass)
}
