//! Helpers the checks share: calls that must succeed, journal reads that
//! verify the chain, and the crash-while-held choreography.

use std::time::Duration;

use agentsessions_proto::v1::{ApprovalRef, EventKind, LogRecord};

use super::Failure;
use crate::client::{self, ExecOpts, Turn};
use crate::env::Env;

/// How long a harness may take to reach its hold point.
pub(super) const HOLD_WAIT: Duration = Duration::from_secs(20);

/// Runs an Exec that must succeed.
pub(super) async fn turn_ok(
    env: &Env,
    sid: &str,
    inputs: &[&str],
    opts: ExecOpts,
) -> Result<Turn, Failure> {
    let mut c = env.client()?;
    let t = client::exec(&mut c, sid, inputs, opts).await;
    ensure!(t.ok(), "Exec {inputs:?} on {sid}: {}", t.describe());
    Ok(t)
}

/// The records of one execution, in journal order.
pub(super) fn of_execution(records: &[LogRecord], execution: &str) -> Vec<LogRecord> {
    records
        .iter()
        .filter(|r| client::event(r).execution_id == execution)
        .cloned()
        .collect()
}

/// Runs a gated turn that must park and checks what the park left: a
/// pending approval on the final Session frame, its APPROVAL_REQUEST at the
/// named seq, and no PARKED, END, ERROR or TOOL_RESULT of that execution.
/// Returns the pending approval and the whole journal.
pub(super) async fn parked_turn(
    env: &Env,
    sid: &str,
    inputs: &[&str],
    opts: ExecOpts,
) -> Result<(ApprovalRef, Vec<LogRecord>), Failure> {
    let t = turn_ok(env, sid, inputs, opts).await?;
    let pending = t
        .last_session()
        .and_then(|s| s.pending_approval.clone())
        .ok_or_else(|| {
            Failure("the parked turn's final Session frame has no pending_approval".into())
        })?;
    let records = log(env, sid).await?;
    let at = usize::try_from(pending.request_seq - 1).unwrap_or(usize::MAX);
    ensure!(
        records.get(at).map(client::kind) == Some(EventKind::EventApprovalRequest),
        "no APPROVAL_REQUEST at the park's seq {}: {}",
        pending.request_seq,
        client::kind_names(&records)
    );
    let turn = of_execution(&records, &pending.execution_id);
    for k in [
        EventKind::EventParked,
        EventKind::EventEnd,
        EventKind::EventError,
        EventKind::EventToolResult,
    ] {
        ensure!(
            client::count(&turn, k) == 0,
            "a parked turn must not journal {}: {}",
            client::short_kind(k),
            client::kind_names(&turn)
        );
    }
    Ok((pending, records))
}

/// Creates a session on `harness`.
pub(super) async fn session(env: &Env, harness: &str) -> Result<String, Failure> {
    let mut c = env.client()?;
    Ok(client::create(&mut c, harness).await?)
}

/// Runs a turn on a harness that ends FAILED "boom" and checks the host
/// failed the call with that text and journaled ERROR, not END COMPLETED.
pub(super) async fn failing_turn(env: &Env, sid: &str) -> Result<Vec<LogRecord>, Failure> {
    let mut c = env.client()?;
    let t = client::exec(&mut c, sid, &["go"], ExecOpts::default()).await;
    ensure!(!t.ok(), "a failing harness's Exec returned OK");
    ensure!(
        t.describe().contains("boom"),
        "the error does not carry the harness's text: {}",
        t.describe()
    );
    let records = log(env, sid).await?;
    ensure!(
        client::kinds(&records).last() == Some(&EventKind::EventError),
        "the failed turn must end in ERROR: {}",
        client::kind_names(&records)
    );
    ensure!(
        client::end_state(&records) != "COMPLETED",
        "a failed turn was journaled as END COMPLETED"
    );
    Ok(records)
}

/// The whole journal through Replay, chain-verified.
pub(super) async fn log(env: &Env, sid: &str) -> Result<Vec<LogRecord>, Failure> {
    let mut c = env.client()?;
    let records = client::replay(&mut c, sid).await?;
    client::verify(&records).map_err(|e| Failure(format!("{sid}: {e}")))?;
    Ok(records)
}

/// Resume that must succeed.
pub(super) async fn resume_ok(env: &Env, sid: &str) -> Result<(), Failure> {
    let mut c = env.client()?;
    client::resume(&mut c, sid)
        .await
        .map_err(|s| Failure(format!("Resume {sid}: {:?}: {}", s.code(), s.message())))?;
    Ok(())
}

/// Records a turn's journal records would add: everything but lifecycle
/// markers, which a host may write around recoveries.
pub(super) fn turn_records(records: &[LogRecord]) -> Vec<&LogRecord> {
    records
        .iter()
        .filter(|r| client::kind(r) != EventKind::EventLifecycle)
        .collect()
}

/// The same journal entry: seq, links, hash and event. The fence is the
/// writer's token, and a fork child writes its copies under its own.
pub(super) fn same_entry(a: &LogRecord, b: &LogRecord) -> bool {
    a.seq == b.seq
        && a.prev_hash == b.prev_hash
        && a.content_hash == b.content_hash
        && a.event == b.event
}

/// Starts an Exec that holds at the harness, waits for the hold and for
/// `durable` kinds to be in the journal (an event the harness sent just
/// before holding may still be on its way), kills the host and starts a
/// new one. Returns the session.
pub(super) async fn crash_while_held(
    env: &mut Env,
    harness: &str,
    input: &str,
    opts: ExecOpts,
    durable: &[EventKind],
) -> Result<String, Failure> {
    let sid = session(env, harness).await?;
    env.peers.control.arm_hold();
    let mut c = env.client()?;
    let (s, text) = (sid.clone(), input.to_owned());
    let task = tokio::spawn(async move { client::exec(&mut c, &s, &[&text], opts).await });
    ensure!(
        env.peers.control.wait_held(HOLD_WAIT).await,
        "the harness never reached its hold point (is {harness} attached?)"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let k = client::kinds(&log(env, &sid).await?);
        if durable.iter().all(|d| k.contains(d)) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "held turn never journaled {durable:?}: {k:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.crash().await?;
    task.abort();
    Ok(sid)
}

/// True when `after` starts with exactly the records of `before` (a host
/// may append, never rewrite).
pub(super) fn extends(after: &[LogRecord], before: &[LogRecord]) -> bool {
    after.get(..before.len()) == Some(before)
}
