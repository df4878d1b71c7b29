//! Helpers the checks share: calls that must succeed, journal reads that
//! verify the chain, and the crash-while-held choreography.

use std::time::Duration;

use agentsessions_proto::v1::{EventKind, LogRecord};

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
