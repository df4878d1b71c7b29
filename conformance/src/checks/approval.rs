//! The approval gate over the wire: park, decision, receipt and replay for
//! an approved, a denied and an approved-but-failing call, and a park
//! acknowledgement for the wrong tuple.

use std::sync::atomic::Ordering;
use std::time::Duration;

use agentsessions_proto::v1::{
    ApproveRequest, EventKind, GetSessionRequest, event::Body, tool_result::Code,
};
use serde_json::json;

use super::support::{log, parked_turn, resume_ok, session, turn_records};
use super::{Check, CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts, count, kind_names};
use crate::env::Env;
use crate::harnesses::{APPROVAL, FOREIGN_PARK};
use crate::host::BoxFuture;

pub(super) fn checks() -> Vec<Check> {
    vec![
        check!(
            "wire_approval_approved",
            "approval_wire_test (approved)",
            approved
        ),
        check!(
            "wire_approval_denied",
            "approval_wire_test (denied)",
            denied
        ),
        check!(
            "wire_approval_executor_error",
            "approval_wire_test (executor fails)",
            executor_error
        ),
        check!(
            "wire_approval_failed_ack_keeps_durable_request",
            "approval_wire_test failed ack",
            foreign_ack
        ),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Approved,
    Denied,
    ExecutorError,
}

async fn approved(env: &mut Env) -> CheckResult {
    cycle(env, Variant::Approved).await
}

async fn denied(env: &mut Env) -> CheckResult {
    cycle(env, Variant::Denied).await
}

async fn executor_error(env: &mut Env) -> CheckResult {
    cycle(env, Variant::ExecutorError).await
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

async fn cycle(env: &mut Env, variant: Variant) -> CheckResult {
    env.start().await?;
    let sid = session(env, APPROVAL).await?;
    let plan = match variant {
        Variant::ExecutorError => json!({"tool": "conf_no_such_tool"}),
        _ => json!({}),
    };
    let opts = ExecOpts {
        config: plan.to_string().into_bytes(),
        ..ExecOpts::default()
    };
    let (pending, _) = parked_turn(env, &sid, &["gate me"], opts).await?;
    effects(env, &sid, 0)?;

    let mut c = env.client()?;
    let req = ApproveRequest {
        session: sid.clone(),
        execution_id: pending.execution_id.clone(),
        tool_call_id: pending.tool_call_id.clone(),
        request_seq: pending.request_seq,
        approved: Some(variant != Variant::Denied),
        reason: format!("{variant:?}"),
        identity: None,
    };
    let decided = c.approve(req.clone()).await?.into_inner();
    let decision = decided
        .decision
        .ok_or_else(|| Failure("Approve returned no decision record".into()))?;
    ensure!(
        client::kind(&decision) == EventKind::EventApprovalResult,
        "the decision is {}",
        kind_names(std::slice::from_ref(&decision))
    );
    let retry = c.approve(req).await?.into_inner();
    ensure!(
        retry.decision.as_ref() == Some(&decision),
        "a retried Approve must return the same decision"
    );
    effects(env, &sid, 0)?;

    // A fresh controller completes the decided gate.
    env.restart().await?;
    resume_ok(env, &sid).await?;
    let done = log(env, &sid).await?;
    ensure!(
        count(&done, EventKind::EventToolResult) == 1,
        "want one receipt: {}",
        kind_names(&done)
    );
    ensure!(
        client::end_state(&done) == "COMPLETED",
        "the decided turn must complete: {}",
        kind_names(&done)
    );
    let receipt = done
        .iter()
        .find_map(|r| match r.event.as_ref().and_then(|e| e.body.as_ref()) {
            Some(Body::Result(tr)) => Some(tr.clone()),
            _ => None,
        })
        .ok_or_else(|| Failure("no receipt body".into()))?;
    ensure!(
        receipt.approval_request_seq == pending.request_seq,
        "receipt request_seq {} != {}",
        receipt.approval_request_seq,
        pending.request_seq
    );
    ensure!(
        receipt.approval_decision_seq == decision.seq,
        "receipt decision_seq {} != {}",
        receipt.approval_decision_seq,
        decision.seq
    );
    let (want_code, want_error, want_effects) = match variant {
        Variant::Approved => (Code::Unspecified, false, 1),
        Variant::Denied => (Code::ApprovalDenied, true, 0),
        Variant::ExecutorError => (Code::ExecutorError, true, 0),
    };
    ensure!(
        receipt.code == want_code as i32 && receipt.is_error == want_error,
        "receipt code {} is_error {}, want {want_code:?}",
        receipt.code,
        receipt.is_error
    );
    if variant != Variant::ExecutorError {
        effects(env, &sid, want_effects)?;
    }
    let seen = env.peers.control.receipts();
    let last = seen
        .last()
        .ok_or_else(|| Failure("the harness saw no receipt".into()))?;
    let frame = last
        .decision
        .as_ref()
        .ok_or_else(|| Failure("the harness got no decision frame".into()))?;
    ensure!(
        frame.request_seq == pending.request_seq,
        "decision frame request_seq {}",
        frame.request_seq
    );
    ensure!(
        last.result.as_ref().ok() == Some(&receipt),
        "the harness's receipt differs from the journaled one"
    );

    // Replay and a further Resume touch neither the journal nor the executor.
    let runs = env.peers.control.runs();
    resume_ok(env, &sid).await?;
    let again = log(env, &sid).await?;
    ensure!(
        turn_records(&again).len() == turn_records(&done).len(),
        "a further Resume wrote turn records"
    );
    ensure!(
        env.peers.control.runs() == runs,
        "a further Resume ran the harness"
    );
    if variant == Variant::Approved {
        effects(env, &sid, 1)?;
    }
    env.snapshot(
        &format!("approval_{variant:?}").to_lowercase(),
        &[&sid],
        &done,
    );
    Ok(Verdict::Pass)
}

async fn foreign_ack(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, FOREIGN_PARK).await?;
    let mut c = env.client()?;
    let started = std::time::Instant::now();
    let t = client::exec(&mut c, &sid, &["gate"], ExecOpts::default()).await;
    ensure!(
        !t.ok(),
        "a park acknowledged with a foreign tuple was accepted"
    );
    ensure!(
        !t.describe()
            .contains("conformance: the host did not answer"),
        "the host never refused the bad acknowledgement"
    );
    let records = log(env, &sid).await?;
    ensure!(
        count(&records, EventKind::EventApprovalRequest) == 1,
        "the durable APPROVAL_REQUEST is gone: {}",
        kind_names(&records)
    );
    for k in [
        EventKind::EventEnd,
        EventKind::EventError,
        EventKind::EventParked,
        EventKind::EventToolResult,
    ] {
        ensure!(
            count(&records, k) == 0,
            "no terminal event may be written, found {}",
            client::short_kind(k)
        );
    }
    let log_seen = &env.peers.foreign_park.log;
    ensure!(
        log_seen.parks.load(Ordering::SeqCst) == 1,
        "the host sent {} park frames",
        log_seen.parks.load(Ordering::SeqCst)
    );
    // The stream must be torn down; give the transport a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while log_seen.ended_after_ack.load(Ordering::SeqCst) == 0
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ensure!(
        log_seen.ended_after_ack.load(Ordering::SeqCst) > 0,
        "the host kept the harness stream open after refusing the ack"
    );
    let s = c
        .get_session(GetSessionRequest { uid: sid.clone() })
        .await?
        .into_inner();
    ensure!(
        s.pending_approval.is_some(),
        "the session no longer reports the pending approval"
    );
    env.note(format!(
        "refused in {:.1}s: {}",
        started.elapsed().as_secs_f64(),
        t.describe()
    ));
    Ok(Verdict::Pass)
}
