//! Core items of surface.md §3: replay, restarts, fork, single writer,
//! golden vectors, provider isolation, streaming, and a failing harness.

use agentsessions_proto::v1::{EventKind, event::Body};

use super::support::{failing_turn, log, resume_ok, same_entry, session, turn_ok, turn_records};
use super::{Check, CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts, Turn, count, kind_names, outputs};
use crate::env::Env;
use crate::harnesses::{APPROVAL, ECHO, FAIL, NONDET};
use crate::host::BoxFuture;

pub(super) fn checks() -> Vec<Check> {
    vec![
        check!(
            "replay_reconstructs_nondeterministic_output",
            "§3.1, wire nondeterministic replay",
            replay_nondeterministic
        ),
        check!(
            "multi_turn_continue_across_restarts",
            "§3.2",
            multi_turn_restarts
        ),
        check!(
            "crash_mid_turn_redrive_at_most_once",
            "§3.3",
            super::recovery::crash_mid_turn
        ),
        check!(
            "crash_after_usage_does_not_duplicate_accounting",
            "§3.3 (usage)",
            super::recovery::crash_after_usage
        ),
        check!("fork_equivalence", "§3.4", fork_equivalence),
        check!("single_writer", "§3.5", single_writer),
        check!("golden_vectors", "§3.6", golden_vectors),
        check!(
            "replay_never_reaches_the_provider",
            "§3.13",
            replay_never_reaches_provider
        ),
        check!(
            "streaming_does_not_change_the_journal",
            "§3.14",
            streaming_same_journal
        ),
        check!("replay_emits_no_deltas", "§3.15", replay_no_deltas),
        check!(
            "wire_failed_harness_journaled_as_error",
            "wire_test failed harness",
            failed_harness
        ),
        check!(
            "wire_execution_start_reopen_resume_replay_fork",
            "execution_start_test",
            super::recovery::execution_start
        ),
        check!(
            "memory_snapshot_session_refuses_a_stateless_override",
            "api-reference ExecRequest.harness",
            memory_session_refuses_stateless_override
        ),
    ]
}

async fn replay_nondeterministic(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, NONDET).await?;
    turn_ok(env, &sid, &["alpha"], ExecOpts::default()).await?;
    let live = log(env, &sid).await?;
    let outs = outputs(&live);
    ensure!(
        outs.len() == 2,
        "want the harness's nonce and the model's output, got {outs:?}"
    );
    let calls = env.model_requests();
    ensure!(calls == 1, "live turn made {calls} model requests, want 1");

    env.restart().await?;
    let again = log(env, &sid).await?;
    ensure!(
        again == live,
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
        env.model_requests() == calls,
        "replay or resume asked the model"
    );

    // The next turn starts from the recorded history, not a new guess.
    turn_ok(env, &sid, &["beta"], ExecOpts::default()).await?;
    let starts = env.peers.control.starts();
    let last = starts
        .last()
        .ok_or_else(|| Failure("no Start seen".into()))?;
    let history_text: Vec<String> = last
        .start
        .history
        .iter()
        .filter_map(|e| match &e.body {
            Some(Body::Message(m)) => Some(agentsessions_machine::events::message_text(m)),
            _ => None,
        })
        .collect();
    ensure!(
        outs.iter().all(|o| history_text.contains(o)),
        "the second turn's history lacks the recorded outputs {outs:?}: {history_text:?}"
    );
    env.snapshot("replay_nondeterministic", &[&sid], &live);
    Ok(Verdict::Pass)
}

async fn multi_turn_restarts(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, ECHO).await?;
    for (i, word) in ["one", "two", "three"].into_iter().enumerate() {
        match i {
            0 => {}
            1 => env.restart().await?,
            _ => env.crash().await?,
        }
        turn_ok(env, &sid, &[word], ExecOpts::default()).await?;
    }
    let records = log(env, &sid).await?;
    let outs = outputs(&records);
    ensure!(outs.len() == 3, "want 3 outputs, got {outs:?}");
    for (o, word) in outs.iter().zip(["one", "two", "three"]) {
        ensure!(
            o.starts_with(&format!("echo:{word}")),
            "output {o:?} is not the echo of {word:?}"
        );
    }
    ensure!(
        env.model_requests() == 3,
        "3 turns made {} model requests",
        env.model_requests()
    );
    let ends = count(&records, EventKind::EventEnd);
    ensure!(ends == 3, "want 3 END records, got {ends}");
    let fences: Vec<i64> = records
        .iter()
        .filter(|r| client::kind(r) == EventKind::EventEnd)
        .map(|r| r.fence)
        .collect();
    ensure!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "each incarnation must write under a newer fence: {fences:?}"
    );
    env.snapshot("multi_turn_restarts", &[&sid], &records);
    Ok(Verdict::Pass)
}

async fn fork_equivalence(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["one"], ExecOpts::default()).await?;
    turn_ok(env, &sid, &["two"], ExecOpts::default()).await?;
    let parent = log(env, &sid).await?;
    let at = parent
        .iter()
        .find(|r| client::kind(r) == EventKind::EventEnd)
        .map(|r| r.seq)
        .ok_or_else(|| Failure("no END in the parent".into()))?;
    let mut c = env.client()?;
    let historical = client::fork(&mut c, &sid, at, 2).await?;
    let head = client::fork(&mut c, &sid, 0, 1).await?;
    ensure!(
        historical.len() == 2 && head.len() == 1,
        "fork returned {historical:?} and {head:?}"
    );
    let calls = env.model_requests();
    let mut first_child = Vec::new();
    for (child, cut) in historical
        .iter()
        .map(|c| (c, at))
        .chain(head.iter().map(|c| (c, parent.len() as i64)))
    {
        let records = log(env, child).await?;
        let cut = cut as usize;
        ensure!(
            records.len() >= cut,
            "child {child} holds {} records, fewer than the fork point {cut}",
            records.len()
        );
        if let Some(i) = (0..cut).find(|i| !same_entry(&records[*i], &parent[*i])) {
            return Err(Failure(format!(
                "child {child} does not share the parent's prefix at seq {}",
                i + 1
            )));
        }
        if let Some(next) = records.get(cut) {
            ensure!(
                next.prev_hash == parent[cut - 1].content_hash,
                "child {child}'s first own record does not link to parent@{cut}"
            );
        }
        if first_child.is_empty() {
            first_child = records;
        }
    }
    ensure!(env.model_requests() == calls, "forking asked the model");
    let child = &historical[0];
    turn_ok(env, child, &["three"], ExecOpts::default()).await?;
    let continued = log(env, child).await?;
    ensure!(
        outputs(&continued)
            .last()
            .is_some_and(|o| o.starts_with("echo:three")),
        "the child did not continue: {:?}",
        outputs(&continued)
    );
    ensure!(
        log(env, &sid).await? == parent,
        "the child's turn changed the parent"
    );
    env.snapshot("fork_child_continued", &[child, &sid], &continued);
    Ok(Verdict::Pass)
}

async fn single_writer(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["one"], ExecOpts::default()).await?;
    let head = log(env, &sid).await?.len() as i64;
    let mut tasks = Vec::new();
    for i in 0..4 {
        let mut c = env.client()?;
        let s = sid.clone();
        tasks.push(tokio::spawn(async move {
            let opts = ExecOpts {
                expected_last_seq: Some(head),
                ..ExecOpts::default()
            };
            client::exec(&mut c, &s, &[&format!("racer {i}")], opts).await
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(
            t.await
                .map(|t| t.code())
                .map_err(|e| Failure(format!("racer: {e}")))?,
        );
    }
    let ok = codes.iter().filter(|c| **c == tonic::Code::Ok).count();
    let aborted = codes.iter().filter(|c| **c == tonic::Code::Aborted).count();
    ensure!(
        ok == 1 && aborted == 3,
        "4 Execs at expected_last_seq={head}: want 1 OK and 3 ABORTED, got {codes:?}"
    );
    let after = log(env, &sid).await?;
    ensure!(
        outputs(&after).len() == 2,
        "want 2 outputs (first turn and the winner), got {:?}",
        outputs(&after)
    );

    let mut c = env.client()?;
    let stale = ExecOpts {
        expected_last_seq: Some(head),
        ..ExecOpts::default()
    };
    let t = client::exec(&mut c, &sid, &["stale"], stale).await;
    ensure!(
        t.code() == tonic::Code::Aborted,
        "a stale expected_last_seq: want ABORTED, got {}",
        t.describe()
    );
    let zero = ExecOpts {
        expected_last_seq: Some(0),
        ..ExecOpts::default()
    };
    let t = client::exec(&mut c, &sid, &["zero"], zero).await;
    ensure!(
        t.code() == tonic::Code::Aborted,
        "expected_last_seq=0 on a non-empty session: want ABORTED, got {}",
        t.describe()
    );
    ensure!(
        log(env, &sid).await? == after,
        "a refused Exec wrote records"
    );
    Ok(Verdict::Pass)
}

async fn golden_vectors(env: &mut Env) -> CheckResult {
    let vectors = super::interop::golden_events();
    let mut sessions = Vec::new();
    for (i, (event, want)) in vectors.iter().enumerate() {
        let uid = format!("sess-{:024x}", 0x60_1de0 + i);
        let rec = super::interop::preload(env.journal(), &uid, "echo", std::slice::from_ref(event))
            .await?;
        ensure!(
            rec[0].content_hash == *want,
            "our store hashed vector {i} to {}, want {want}",
            rec[0].content_hash
        );
        sessions.push((uid, want.clone(), event.clone()));
    }
    env.start().await?;
    for (uid, want, event) in &sessions {
        let records = log(env, uid).await?;
        ensure!(
            records.len() == 1,
            "{uid}: want 1 record, got {}",
            records.len()
        );
        ensure!(
            records[0].content_hash == *want,
            "{uid}: Replay returned hash {}, want {want}",
            records[0].content_hash
        );
        ensure!(
            records[0].event.as_ref() == Some(event),
            "{uid}: Replay changed the event"
        );
        let recomputed = agentsessions_machine::canon::content_hash("", 1, event)
            .map_err(|e| Failure(format!("canon: {e}")))?;
        ensure!(
            recomputed == *want,
            "machine::canon computes {recomputed}, want {want}"
        );
    }
    env.note("python verifier not run; hashes recomputed with machine::canon");
    Ok(Verdict::Pass)
}

async fn replay_never_reaches_provider(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["hello"], ExecOpts::default()).await?;
    ensure!(
        env.model_requests() == 1,
        "the live turn made {} provider requests, want exactly 1",
        env.model_requests()
    );
    let body = env.peers.model.bodies().pop().unwrap_or_default();
    ensure!(
        body.get("messages").is_some(),
        "the provider request has no messages: {body}"
    );
    env.restart().await?;
    let _ = log(env, &sid).await?;
    resume_ok(env, &sid).await?;
    let mut c = env.client()?;
    let children = client::fork(&mut c, &sid, 0, 1).await?;
    for child in &children {
        let _ = log(env, child).await?;
    }
    ensure!(
        env.model_requests() == 1,
        "replay, resume or fork reached the provider ({} requests)",
        env.model_requests()
    );
    Ok(Verdict::Pass)
}

/// Concatenated delta chunks of a turn.
fn delta_text(t: &Turn) -> String {
    t.deltas.iter().map(|d| d.chunk.as_str()).collect()
}

async fn streaming_same_journal(env: &mut Env) -> CheckResult {
    env.start().await?;
    let coarse = session(env, ECHO).await?;
    let fine = session(env, ECHO).await?;
    let a = turn_ok(env, &coarse, &["same"], ExecOpts::default()).await?;
    let b = turn_ok(
        env,
        &fine,
        &[&format!("same {}", crate::model::CHUNKS)],
        ExecOpts::default(),
    )
    .await?;
    let (la, lb) = (log(env, &coarse).await?, log(env, &fine).await?);
    ensure!(
        client::kinds(&la) == client::kinds(&lb),
        "chunking changed the journal: {} vs {}",
        kind_names(&la),
        kind_names(&lb)
    );
    for (l, t, name) in [(&la, &a, "coarse"), (&lb, &b, "fine")] {
        let outs = outputs(l);
        ensure!(
            outs.len() == 1,
            "{name}: want one finalized OUTPUT, got {outs:?}"
        );
        if !t.deltas.is_empty() {
            ensure!(
                delta_text(t) == outs[0],
                "{name}: deltas {:?} do not add up to the OUTPUT {:?}",
                delta_text(t),
                outs[0]
            );
        }
    }
    if b.deltas.len() < 2 {
        return Ok(Verdict::Skip(format!(
            "the host streamed {} deltas for a chunked completion; nothing to compare",
            b.deltas.len()
        )));
    }
    Ok(Verdict::Pass)
}

async fn replay_no_deltas(env: &mut Env) -> CheckResult {
    env.start().await?;
    // The only streamed recovery is an inputless Exec on a decided gate:
    // the model call before the gate is then served, so it must not
    // stream again.
    let sid = session(env, APPROVAL).await?;
    let opts = ExecOpts {
        config: br#"{"model_first": true}"#.to_vec(),
        ..ExecOpts::default()
    };
    let live = turn_ok(
        env,
        &sid,
        &[&format!("live {}", crate::model::CHUNKS)],
        opts,
    )
    .await?;
    let exec_id = live
        .records
        .iter()
        .map(client::event)
        .find(|e| !e.execution_id.is_empty())
        .map(|e| e.execution_id)
        .unwrap_or_default();
    if live.deltas.is_empty() {
        return Ok(Verdict::Skip(
            "the host emitted no deltas on a live streamed turn".into(),
        ));
    }
    ensure!(
        live.deltas.iter().all(|d| d.execution_id == exec_id),
        "live deltas are not tagged with the execution id {exec_id}"
    );
    let pending = live
        .last_session()
        .and_then(|s| s.pending_approval.clone())
        .ok_or_else(|| Failure("the gated turn did not park".into()))?;
    let mut c = env.client()?;
    c.approve(agentsessions_proto::v1::ApproveRequest {
        session: sid.clone(),
        execution_id: pending.execution_id,
        tool_call_id: pending.tool_call_id,
        request_seq: pending.request_seq,
        approved: Some(true),
        reason: "ok".into(),
        identity: None,
    })
    .await?;
    let calls = env.model_requests();
    let redrive = client::exec(&mut c, &sid, &[], ExecOpts::default()).await;
    ensure!(
        redrive.ok(),
        "inputless Exec recovery: {}",
        redrive.describe()
    );
    ensure!(
        redrive.deltas.is_empty(),
        "the recovery emitted {} deltas for a served completion",
        redrive.deltas.len()
    );
    ensure!(
        env.model_requests() == calls,
        "the recovery asked the model"
    );
    let records = log(env, &sid).await?;
    ensure!(
        client::end_state(&records) == "COMPLETED"
            && count(&records, EventKind::EventModelCall) == 1,
        "recovery: {}",
        kind_names(&records)
    );
    env.note("Replay streams LogRecords only, so it cannot carry a delta by construction");
    Ok(Verdict::Pass)
}

async fn failed_harness(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, FAIL).await?;
    let records = failing_turn(env, &sid).await?;
    env.snapshot("failed_harness", &[&sid], &records);
    Ok(Verdict::Pass)
}

/// The host's memory-snapshot harness, when it has one by this name (our
/// daemon's built-in `counter`); hosts without one skip the check.
const MEMORY_HARNESS: &str = "counter";

async fn memory_session_refuses_stateless_override(env: &mut Env) -> CheckResult {
    env.start().await?;
    let mut c = env.client()?;
    let sid = match client::create(&mut c, MEMORY_HARNESS).await {
        Ok(sid) => sid,
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            return Ok(Verdict::Skip(format!(
                "the host serves no memory-snapshot harness named {MEMORY_HARNESS:?}"
            )));
        }
        Err(s) => return Err(s.into()),
    };
    let opts = ExecOpts {
        harness: ECHO.to_owned(),
        ..ExecOpts::default()
    };
    let t = client::exec(&mut c, &sid, &["hi"], opts).await;
    ensure!(
        t.code() == tonic::Code::FailedPrecondition,
        "a STATELESS_REPLAY override of a memory-snapshot session must be FAILED_PRECONDITION: {}",
        t.describe()
    );
    let records = log(env, &sid).await?;
    ensure!(
        records.is_empty(),
        "the refused override wrote {}",
        kind_names(&records)
    );
    // The session's own harness still runs.
    turn_ok(env, &sid, &["hi"], ExecOpts::default()).await?;
    Ok(Verdict::Pass)
}
