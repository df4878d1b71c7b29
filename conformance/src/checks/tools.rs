//! Tool mediation over the wire: the host executes mediated calls exactly
//! once, refuses what it must not execute before writing an intent, and
//! never re-executes on recovery.

use agentsessions_proto::v1::{EventKind, ExecRequest, LogRecord, exec_update::Update};
use serde_json::json;

use super::support::{HOLD_WAIT, extends, log, resume_ok, session, turn_ok, turn_records};
use super::{Check, CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts, count, kind_names};
use crate::env::Env;
use crate::harnesses::TOOL;
use crate::host::BoxFuture;

pub(super) fn checks() -> Vec<Check> {
    vec![
        check!(
            "wire_controller_mediated_tool",
            "wire_test controller-mediated tool",
            mediated_tool
        ),
        check!("crash_mid_tool_call_at_most_once", "§3.7", crash_mid_tool),
        check!(
            "controller_mediated_tool_requires_key",
            "§3.8",
            requires_key
        ),
        check!("unmediated_tool_call_rejected", "§3.9", unmediated),
        check!(
            "wire_tool_arguments_rejected_before_effects",
            "tool_args_test",
            argument_hygiene
        ),
        check!(
            "wire_tool_request_changes_fail_recovery",
            "tool_args_test request changes",
            request_change
        ),
    ]
}

fn config(v: serde_json::Value) -> ExecOpts {
    ExecOpts {
        config: v.to_string().into_bytes(),
        ..ExecOpts::default()
    }
}

/// Checks the host-specific effect count when it is observable.
fn effects(env: &mut Env, sid: &str, want: usize) -> Result<(), Failure> {
    match env.effect_count(sid) {
        Some(n) => ensure!(
            n == want,
            "the tool's side effect happened {n} times, want {want}"
        ),
        None => env.note("effect count not observable for this host (no notes beside the journal)"),
    }
    Ok(())
}

fn one_tool_round(records: &[LogRecord]) -> Result<(), Failure> {
    ensure!(
        count(records, EventKind::EventToolCall) == 1,
        "want one TOOL_CALL: {}",
        kind_names(records)
    );
    ensure!(
        count(records, EventKind::EventToolResult) == 1,
        "want one TOOL_RESULT: {}",
        kind_names(records)
    );
    ensure!(
        client::end_state(records) == "COMPLETED",
        "want END COMPLETED: {}",
        kind_names(records)
    );
    Ok(())
}

async fn mediated_tool(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, TOOL).await?;
    turn_ok(env, &sid, &["note one"], config(json!({}))).await?;
    let records = log(env, &sid).await?;
    one_tool_round(&records)?;
    let receipts = env.peers.control.receipts();
    ensure!(
        receipts.len() == 1 && receipts[0].result.as_ref().is_ok_and(|r| !r.is_error),
        "the harness got {receipts:?}"
    );
    effects(env, &sid, 1)?;
    env.restart().await?;
    ensure!(
        log(env, &sid).await? == records,
        "replay after a restart differs"
    );
    resume_ok(env, &sid).await?;
    ensure!(
        count(&log(env, &sid).await?, EventKind::EventToolResult) == 1,
        "Resume re-ran the tool"
    );
    effects(env, &sid, 1)?;
    env.snapshot("controller_mediated_tool", &[&sid], &records);
    Ok(Verdict::Pass)
}

/// Runs an Exec until its stream carries a TOOL_CALL record, then kills
/// the host at once: the tool may or may not have run.
async fn kill_at_intent(env: &mut Env, sid: &str) -> Result<(), Failure> {
    let mut c = env.client()?;
    let req = ExecRequest {
        session: sid.to_owned(),
        inputs: vec![client::user("race")],
        config: b"{}".to_vec(),
        ..ExecRequest::default()
    };
    let saw = tokio::time::timeout(HOLD_WAIT, async {
        let mut s = c.exec(req).await?.into_inner();
        while let Some(u) = s.message().await? {
            if let Some(Update::Record(r)) = u.update
                && client::kind(&r) == EventKind::EventToolCall
            {
                return Ok::<bool, tonic::Status>(true);
            }
        }
        Ok(false)
    })
    .await;
    env.crash().await?;
    match saw {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(Failure("the turn ended without a TOOL_CALL".into())),
        Ok(Err(s)) => Err(s.into()),
        Err(_) => Err(Failure("no TOOL_CALL within the wait".into())),
    }
}

async fn crash_mid_tool(env: &mut Env) -> CheckResult {
    env.start().await?;
    // Cut 1: the receipt is durable and the harness holds the turn.
    let sid = super::support::crash_while_held(
        env,
        TOOL,
        "held note",
        config(json!({})),
        &[EventKind::EventToolResult],
    )
    .await?;
    let before = log(env, &sid).await?;
    ensure!(
        count(&before, EventKind::EventToolResult) == 1 && client::end_state(&before).is_empty(),
        "before recovery: {}",
        kind_names(&before)
    );
    resume_ok(env, &sid).await?;
    let after = log(env, &sid).await?;
    one_tool_round(&after)?;
    effects(env, &sid, 1)?;
    let receipts = env.peers.control.receipts();
    ensure!(
        receipts.len() == 2 && receipts[0].result == receipts[1].result,
        "the recovered run must be served the recorded receipt: {receipts:?}"
    );
    env.snapshot("crash_mid_tool_recovered", &[&sid], &after);

    // Cut 2: killed as soon as the intent is visible (a race with the tool).
    let sid2 = session(env, TOOL).await?;
    kill_at_intent(env, &sid2).await?;
    resume_ok(env, &sid2).await?;
    let after = log(env, &sid2).await?;
    one_tool_round(&after)?;
    effects(env, &sid2, 1)?;
    Ok(Verdict::Pass)
}

/// An Exec the host must refuse before any intent is written.
async fn refused_before_intent(
    env: &mut Env,
    plan: serde_json::Value,
    what: &str,
) -> Result<String, Failure> {
    let sid = session(env, TOOL).await?;
    let mut c = env.client()?;
    let t = client::exec(&mut c, &sid, &["refuse me"], config(plan)).await;
    let records = log(env, &sid).await?;
    ensure!(
        !t.ok() || client::end_state(&records) != "COMPLETED",
        "{what}: the turn completed"
    );
    ensure!(
        count(&records, EventKind::EventToolCall) == 0,
        "{what}: an intent was recorded: {}",
        kind_names(&records)
    );
    ensure!(
        count(&records, EventKind::EventToolResult) == 0,
        "{what}: a result was recorded: {}",
        kind_names(&records)
    );
    let allowed = [
        EventKind::EventExecutionStart,
        EventKind::EventInput,
        EventKind::EventError,
    ];
    ensure!(
        turn_records(&records)
            .iter()
            .all(|r| allowed.contains(&client::kind(r))),
        "{what}: only EXECUTION_START, INPUT and ERROR may be written: {}",
        kind_names(&records)
    );
    ensure!(
        client::end_state(&records) != "COMPLETED",
        "{what}: END COMPLETED was written"
    );
    effects(env, &sid, 0)?;
    Ok(t.describe())
}

async fn requires_key(env: &mut Env) -> CheckResult {
    env.start().await?;
    let said = refused_before_intent(env, json!({"key": "none"}), "no idempotency key").await?;
    ensure!(
        said.to_lowercase().contains("idempotency"),
        "the error should name the missing idempotency key: {said}"
    );
    Ok(Verdict::Pass)
}

async fn unmediated(env: &mut Env) -> CheckResult {
    env.start().await?;
    refused_before_intent(
        env,
        json!({"mediation": "unspecified"}),
        "MEDIATION_UNSPECIFIED",
    )
    .await?;
    refused_before_intent(
        env,
        json!({"mediation": "reported"}),
        "IN_HARNESS_REPORTED sent as a call",
    )
    .await?;
    Ok(Verdict::Pass)
}

async fn argument_hygiene(env: &mut Env) -> CheckResult {
    env.start().await?;
    for bad in ["nan", "inf", "-inf", "nested_nan"] {
        for swallow in [false, true] {
            let what = format!("{bad} (swallowed: {swallow})");
            refused_before_intent(env, json!({"bad_arg": bad, "swallow": swallow}), &what).await?;
        }
    }
    env.note("Go-only argument types (channels, structs, >2^53 ints) cannot be expressed in a protobuf Struct");
    Ok(Verdict::Pass)
}

async fn request_change(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = super::support::crash_while_held(
        env,
        TOOL,
        "changing",
        config(json!({"mutate_on_redrive": true})),
        &[EventKind::EventToolResult],
    )
    .await?;
    let before = log(env, &sid).await?;
    let mut c = env.client()?;
    let r = client::resume(&mut c, &sid).await;
    ensure!(
        r.is_err(),
        "recovery with changed tool arguments must fail (replay diverged)"
    );
    let after = log(env, &sid).await?;
    ensure!(
        count(&after, EventKind::EventToolResult) == 1,
        "the tool ran again: {}",
        kind_names(&after)
    );
    ensure!(
        client::end_state(&after) != "COMPLETED",
        "the diverged turn completed"
    );
    ensure!(extends(&after, &before), "recovery rewrote records");
    effects(env, &sid, 1)?;
    Ok(Verdict::Pass)
}
