//! Recovery over the wire: the host is killed while a harness holds the
//! turn, and a fresh host must finish it from the journal, at most once.

use agentsessions_proto::v1::{EventKind, LogRecord, event::Body};

use super::support::{
    HOLD_WAIT, crash_while_held, extends, log, resume_ok, same_entry, session, turn_ok,
    turn_records,
};
use super::{CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts, count, kind_names, outputs};
use crate::env::Env;
use crate::harnesses::{ECHO, USAGE};

/// Shared by the crash checks: after the re-drive, exactly one turn with
/// one output and one END COMPLETED, all under one execution id.
fn one_completed_turn(records: &[LogRecord]) -> Result<String, Failure> {
    let turn = turn_records(records);
    let outs = outputs(records);
    ensure!(outs.len() == 1, "want exactly one OUTPUT, got {outs:?}");
    ensure!(
        count(records, EventKind::EventEnd) == 1,
        "want one END: {}",
        kind_names(records)
    );
    ensure!(
        client::end_state(records) == "COMPLETED",
        "END is {:?}",
        client::end_state(records)
    );
    ensure!(
        count(records, EventKind::EventModelCall) == 1,
        "want one MODEL_CALL: {}",
        kind_names(records)
    );
    let ids: std::collections::BTreeSet<String> =
        turn.iter().map(|r| client::event(r).execution_id).collect();
    ensure!(
        ids.len() == 1 && !ids.contains(""),
        "the turn's events must share one non-empty execution id: {ids:?}"
    );
    Ok(outs[0].clone())
}

pub(super) async fn crash_mid_turn(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = crash_while_held(
        env,
        ECHO,
        "hello",
        ExecOpts::default(),
        &[EventKind::EventOutput],
    )
    .await?;
    let before = log(env, &sid).await?;
    let k = client::kinds(&before);
    ensure!(
        k.contains(&EventKind::EventOutput) && !k.contains(&EventKind::EventEnd),
        "before recovery the turn must hold OUTPUT but no END: {}",
        kind_names(&before)
    );
    ensure!(
        env.model_requests() == 1,
        "{} model requests before recovery",
        env.model_requests()
    );
    let runs = env.peers.control.runs();
    resume_ok(env, &sid).await?;
    let after = log(env, &sid).await?;
    ensure!(
        extends(&after, &before),
        "recovery rewrote committed records"
    );
    let out = one_completed_turn(&after)?;
    ensure!(out.starts_with("echo:hello"), "output {out:?}");
    ensure!(
        env.model_requests() == 1,
        "the re-drive asked the model again"
    );
    ensure!(
        env.peers.control.runs() == runs + 1,
        "the harness ran {} times during recovery, want once",
        env.peers.control.runs() - runs
    );
    // A second Resume has nothing to re-drive.
    resume_ok(env, &sid).await?;
    let again = log(env, &sid).await?;
    ensure!(
        turn_records(&again).len() == turn_records(&after).len(),
        "a second Resume added turn records: {}",
        kind_names(&again)
    );
    ensure!(
        env.model_requests() == 1,
        "the second Resume asked the model"
    );
    env.snapshot("crash_mid_turn_recovered", &[&sid], &after);
    Ok(Verdict::Pass)
}

pub(super) async fn crash_after_usage(env: &mut Env) -> CheckResult {
    env.start().await?;
    let input = format!("hello {USAGE}");
    let sid = crash_while_held(
        env,
        ECHO,
        &input,
        ExecOpts::default(),
        &[EventKind::EventUsage],
    )
    .await?;
    let before = log(env, &sid).await?;
    let usage: Vec<&LogRecord> = before
        .iter()
        .filter(|r| client::kind(r) == EventKind::EventUsage)
        .collect();
    ensure!(
        usage.len() == 1,
        "before recovery want one USAGE: {}",
        kind_names(&before)
    );
    let usage = usage[0].clone();
    ensure!(
        client::end_state(&before).is_empty(),
        "the turn already ended: {}",
        kind_names(&before)
    );
    resume_ok(env, &sid).await?;
    let after = log(env, &sid).await?;
    let usages: Vec<&LogRecord> = after
        .iter()
        .filter(|r| client::kind(r) == EventKind::EventUsage)
        .collect();
    ensure!(
        usages.len() == 1 && *usages[0] == usage,
        "usage was duplicated or changed: {}",
        kind_names(&after)
    );
    one_completed_turn(&after)?;
    ensure!(env.model_requests() == 1, "recovery asked the model");
    env.restart().await?;
    let _ = log(env, &sid).await?;
    ensure!(env.model_requests() == 1, "a later replay asked the model");
    env.snapshot("crash_after_usage_recovered", &[&sid], &after);
    Ok(Verdict::Pass)
}

/// Odd bytes: NUL, 0xff, whitespace, invalid UTF-8 on purpose.
const ODD_CONFIG: &[u8] = b"\x00\xff \n\t{not json}\r\n  ";
const CURSOR: i64 = 9_007_199_254_740_993;

pub(super) async fn execution_start(env: &mut Env) -> CheckResult {
    env.start().await?;
    let opts = ExecOpts {
        config: ODD_CONFIG.to_vec(),
        resume_from_seq: CURSOR,
        ..ExecOpts::default()
    };
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["first"], ExecOpts::default()).await?;
    let start_count = env.peers.control.starts().len();
    // The second turn is interrupted, then resumed by a fresh host.
    env.peers.control.arm_hold();
    let mut c = env.client()?;
    let s = sid.clone();
    let o = opts.clone();
    let task = tokio::spawn(async move { client::exec(&mut c, &s, &["second"], o).await });
    ensure!(
        env.peers.control.wait_held(HOLD_WAIT).await,
        "the harness never held"
    );
    env.crash().await?;
    task.abort();
    let calls = env.model_requests();
    resume_ok(env, &sid).await?;
    ensure!(
        env.model_requests() == calls,
        "resume repeated a model call"
    );
    let starts = env.peers.control.starts();
    ensure!(
        starts.len() == start_count + 2,
        "want the interrupted Start and one recovery Start, saw {}",
        starts.len() - start_count
    );
    let (live, rebuilt) = (&starts[start_count].start, &starts[start_count + 1].start);
    ensure!(
        rebuilt.config == ODD_CONFIG,
        "recovery lost the config bytes: {:?}",
        rebuilt.config
    );
    ensure!(
        rebuilt.resume_from_seq == CURSOR,
        "recovery cursor {} != {CURSOR}",
        rebuilt.resume_from_seq
    );
    ensure!(rebuilt.inputs == live.inputs, "recovery inputs differ");
    ensure!(
        rebuilt.history == live.history,
        "recovery history boundary differs ({} vs {} events)",
        rebuilt.history.len(),
        live.history.len()
    );
    ensure!(
        rebuilt.execution_id == live.execution_id,
        "recovery ran another execution"
    );

    let records = log(env, &sid).await?;
    let starts_rec: Vec<_> = records
        .iter()
        .filter_map(|r| match r.event.as_ref().and_then(|e| e.body.as_ref()) {
            Some(Body::ExecutionStart(s)) => Some(s.clone()),
            _ => None,
        })
        .collect();
    ensure!(
        starts_rec.len() == 2,
        "want 2 EXECUTION_START records: {}",
        kind_names(&records)
    );
    ensure!(
        starts_rec[1].config == ODD_CONFIG && starts_rec[1].resume_from_seq == CURSOR,
        "EXECUTION_START did not journal the config and cursor verbatim"
    );
    ensure!(
        starts_rec[1].input_count == Some(1),
        "input_count {:?}",
        starts_rec[1].input_count
    );
    ensure!(log(env, &sid).await? == records, "Replay is not read-only");

    let first_end = records
        .iter()
        .find(|r| client::kind(r) == EventKind::EventEnd)
        .map(|r| r.seq)
        .unwrap_or(0);
    let mut c = env.client()?;
    for at in [first_end, 0] {
        let children = client::fork(&mut c, &sid, at, 1).await?;
        for child in children {
            let cr = log(env, &child).await?;
            let cut = if at == 0 { records.len() } else { at as usize };
            ensure!(
                cr.len() >= cut
                    && cr[..cut]
                        .iter()
                        .zip(&records[..cut])
                        .all(|(a, b)| same_entry(a, b)),
                "fork at {at}: the child's inherited records differ"
            );
        }
    }
    env.snapshot("execution_start_resumed", &[&sid], &records);
    Ok(Verdict::Pass)
}
