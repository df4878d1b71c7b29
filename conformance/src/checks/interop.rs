//! Go interop: the nine v0.1.2 fixtures, written into the journal before
//! the host starts, then verified, replayed and resumed through the API
//! with the outcomes the reference's v0.1.2 tests state
//! (controller.md §10, v012_journal_test).

use std::path::Path;

use agentsessions_proto::v1::{
    Event, EventKind, ExecutionStart, IdentityRef, LogRecord, Message, Part, TextPart, event, part,
};
use agentsessions_proto::wkt::Timestamp;
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};
use agentsessions_shells::journal::{AppendBatch, JournalStore, SessionMeta};
use agentsessions_testkit::interop::parse_go_records;

use super::support::{extends, log, resume_ok, turn_ok, turn_records};
use super::{Check, CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts, kind_names, outputs};
use crate::env::Env;
use crate::host::BoxFuture;

pub(super) fn checks() -> Vec<Check> {
    vec![
        check!(
            "go_v012_completed",
            "TestV012JournalReplayAndCompletedResume",
            completed
        ),
        check!(
            "go_v012_crashed_input",
            "TestV012CrashedJournalUpgradeResumeThenExec",
            crashed_input
        ),
        check!(
            "go_v012_crashed_output",
            "TestV012CrashedJournalUpgradeResumeThenExec",
            crashed_output
        ),
        check!(
            "go_v012_crashed_model",
            "TestV012ReplayUnfinishedLogAndMissingModelCompletion",
            crashed_model
        ),
        check!(
            "go_v012_multi_turn",
            "TestV012MultiTurnReplayKeepsHistoricalLimitation",
            multi_turn
        ),
        check!(
            "go_v012_multi_turn_crashed_output",
            "TestV012ResumeUsesOnlyLastInput",
            multi_turn_crashed_output
        ),
        check!(
            "go_v012_upgraded_resume",
            "TestV012CommittedUpgradeFixtures",
            upgraded_resume
        ),
        check!(
            "go_v012_mixed_completed",
            "TestV012CommittedUpgradeFixtures",
            mixed_completed
        ),
        check!(
            "go_v012_mixed_interrupted",
            "TestV012CommittedUpgradeFixtures",
            mixed_interrupted
        ),
    ]
}

pub use agentsessions_testkit::interop::fixture_dir;

fn required() -> bool {
    std::env::var("AGENTSESSIONS_REQUIRE_FIXTURES").is_ok_and(|v| v == "1")
}

/// The fixture's records, or the verdict to return when it is missing.
fn load(name: &str) -> Result<Vec<LogRecord>, CheckResult> {
    let path = fixture_dir().join(format!("{name}.json"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if required() => {
            return Err(Err(Failure(format!(
                "{}: {e} (AGENTSESSIONS_REQUIRE_FIXTURES=1)",
                path.display()
            ))));
        }
        Err(e) => return Err(Ok(Verdict::Skip(format!("{}: {e}", path.display())))),
    };
    parse_go_records(&text).map_err(|e| Err(Failure(format!("{name}: {e}"))))
}

/// Writes events as records of a new session (one fence) and returns them.
pub async fn preload(
    journal: &Path,
    uid: &str,
    harness: &str,
    events: &[Event],
) -> Result<Vec<LogRecord>, Failure> {
    let records: Vec<LogRecord> = events
        .iter()
        .enumerate()
        .map(|(i, e)| LogRecord {
            seq: i as i64 + 1,
            fence: 1,
            event: Some(e.clone()),
            ..LogRecord::default()
        })
        .collect();
    preload_records(journal, uid, harness, &records, false).await
}

/// Appends each record under its own fence, minting fences up to it, as
/// the Go fixtures were written. With `exact`, each stored record must
/// equal the given one, hashes included.
pub async fn preload_records(
    journal: &Path,
    uid: &str,
    harness: &str,
    records: &[LogRecord],
    exact: bool,
) -> Result<Vec<LogRecord>, Failure> {
    let store = SqliteJournal::open(journal, SqliteOptions::default())
        .map_err(|e| Failure(format!("open {}: {e}", journal.display())))?;
    let now = agentsessions_shells::journal::system_now_unix_nanos();
    let meta = SessionMeta {
        uid: uid.to_owned(),
        harness: harness.to_owned(),
        ..SessionMeta::default()
    };
    store
        .put_session(meta, now)
        .await
        .map_err(|e| Failure(format!("put_session: {e}")))?;
    let mut fence = 0;
    let mut out = Vec::new();
    for rec in records {
        while fence < rec.fence {
            fence = store
                .mint_fence(uid, now, None)
                .await
                .map_err(|e| Failure(format!("mint_fence: {e}")))?;
        }
        let event = rec.event.clone().unwrap_or_default();
        let got = store
            .append(AppendBatch {
                session: uid.to_owned(),
                expected_last_seq: rec.seq - 1,
                fence: rec.fence,
                compute_state: agentsessions_machine::journal::projection::batch_compute_state(
                    std::slice::from_ref(&event),
                ),
                events: vec![event],
                now_unix_nanos: now,
                release_lease: None,
            })
            .await
            .map_err(|e| Failure(format!("append seq {}: {e}", rec.seq)))?;
        if exact {
            ensure!(
                got.as_slice() == std::slice::from_ref(rec),
                "{uid} seq {}: the store wrote a different record",
                rec.seq
            );
        }
        out.extend(got);
    }
    drop(store);
    Ok(out)
}

fn text_message(role: &str, text: &str) -> Message {
    Message {
        role: role.into(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart { text: text.into() })),
        }],
    }
}

fn start_event(exec: &str, start: ExecutionStart) -> Event {
    Event {
        execution_id: exec.into(),
        kind: EventKind::EventExecutionStart as i32,
        body: Some(event::Body::ExecutionStart(start)),
        ..Event::default()
    }
}

/// The published golden vectors (journal.md §1.5), each at seq 1.
pub fn golden_events() -> Vec<(Event, String)> {
    let output = Event {
        execution_id: "exec-1".into(),
        ts: Some(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        schema_version: 1,
        kind: EventKind::EventOutput as i32,
        body: Some(event::Body::Message(text_message("assistant", "hello"))),
        actor: Some(IdentityRef {
            principal: "agent://a".into(),
            issuer: "entra".into(),
            subject: "sub-1".into(),
        }),
    };
    let config = start_event(
        "exec-config",
        ExecutionStart {
            config: vec![0x00, 0xff, 0x20, 0x0a, 0x09],
            resume_from_seq: 9_007_199_254_740_993,
            input_count: Some(2),
            ..ExecutionStart::default()
        },
    );
    let count = |n| {
        start_event(
            "exec-default",
            ExecutionStart {
                input_count: Some(n),
                ..ExecutionStart::default()
            },
        )
    };
    vec![
        (
            output,
            "551bd146050c8d630b0c3b999a4445f3792a470db9bca443d8d4a67706283fcc".into(),
        ),
        (
            config,
            "aa1f42a26b7a227836d32d31608ebb69c59f3b1c57eadd8537b6faf88a01c790".into(),
        ),
        (
            count(0),
            "b09cbff45d5a30990c3b72be8b06af6bc509d5a29a849aab5fd42153ef10ec65".into(),
        ),
        (
            count(2),
            "f06c25ee5b3673ee23b8f91883c7f1c6c5682d94986caf5bc067908a61b2ac4f".into(),
        ),
    ]
}

/// The recorded head-hash prefixes of the fixtures (journal.md §4).
fn head_prefix(name: &str) -> &'static str {
    match name {
        "completed" => "1b0f72670340",
        "crashed-input" => "62daf59c5c1e",
        "crashed-model" => "98d192d2ce6f",
        "crashed-output" => "61bd39e558e7",
        "multi-turn" => "a7c7e91da528",
        "multi-turn-crashed-output" => "6b56c2735a72",
        "upgraded-resume" => "f926dbb0a943",
        "mixed-completed" => "efdfe2a4c045",
        "mixed-interrupted" => "5ff8c4ecc5ea",
        _ => "",
    }
}

/// A loaded fixture: its session and the records as written.
struct Loaded {
    sid: String,
    records: Vec<LogRecord>,
}

/// Preloads fixture `name`, starts the host and checks that Replay returns
/// it verbatim and that it verifies. Ok(Err(verdict)) when it is missing.
async fn open(env: &mut Env, name: &str) -> Result<Result<Loaded, Verdict>, Failure> {
    let records = match load(name) {
        Ok(r) => r,
        Err(Ok(v)) => return Ok(Err(v)),
        Err(Err(f)) => return Err(f),
    };
    // A fixed, valid-looking uid per fixture.
    let sid = format!(
        "sess-{:024x}",
        name.bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
    );
    preload_records(env.journal(), &sid, "echo", &records, true).await?;
    env.start().await?;
    let got = log(env, &sid).await?;
    ensure!(
        got == records,
        "Replay of {name} differs from the fixture (hashes are returned verbatim)"
    );
    let head = &got
        .last()
        .map(|r| r.content_hash.clone())
        .unwrap_or_default();
    ensure!(
        head.starts_with(head_prefix(name)),
        "{name}: head hash {head} lacks the recorded prefix"
    );
    Ok(Ok(Loaded { sid, records }))
}

macro_rules! open_or_skip {
    ($env:expr, $name:literal) => {
        match open($env, $name).await? {
            Ok(l) => l,
            Err(v) => return Ok(v),
        }
    };
}

/// Resume is a no-op: no turn records, no model request.
async fn resume_noop(env: &Env, l: &Loaded) -> Result<(), Failure> {
    let calls = env.model_requests();
    resume_ok(env, &l.sid).await?;
    let after = log(env, &l.sid).await?;
    ensure!(
        turn_records(&after).len() == turn_records(&l.records).len(),
        "Resume wrote turn records: {}",
        kind_names(&after)
    );
    ensure!(env.model_requests() == calls, "Resume asked the model");
    Ok(())
}

/// Model requests the fake provider should have seen for `added`: the
/// fixtures' harness asks model id "echo", which a host may answer with
/// its own echo model (this host: always) or send to its provider (the
/// reference, configured with one). The answer tells which: the provider
/// numbers its replies (`echo:<text> #<n>`), the built-in model does not.
fn provider_calls(added: &[LogRecord], want: usize) -> usize {
    let outs = outputs(added);
    let local = !outs.is_empty() && outs.iter().all(|o| !o.contains(" #"));
    if local { 0 } else { want }
}

/// Resume completes the interrupted turn; returns the new records.
async fn resume_completes(
    env: &Env,
    l: &Loaded,
    want_calls: usize,
) -> Result<Vec<LogRecord>, Failure> {
    let calls = env.model_requests();
    resume_ok(env, &l.sid).await?;
    let after = log(env, &l.sid).await?;
    ensure!(
        extends(&after, &l.records),
        "Resume rewrote fixture records"
    );
    let added = after.get(l.records.len()..).unwrap_or_default().to_vec();
    ensure!(
        client::count(&added, EventKind::EventEnd) == 1 && client::end_state(&added) == "COMPLETED",
        "Resume must finish the turn with END COMPLETED, added {}",
        kind_names(&added)
    );
    let made = env.model_requests() - calls;
    let want_calls = provider_calls(&added, want_calls);
    ensure!(
        made == want_calls,
        "Resume made {made} model requests, want {want_calls}"
    );
    Ok(added)
}

/// A new Exec "new" on the fixture: one model request, an EXECUTION_START
/// boundary, and outputs `want` (prefixes) on Replay.
async fn exec_new(env: &mut Env, l: &Loaded, want: &[&str]) -> Result<(), Failure> {
    let calls = env.model_requests();
    turn_ok(env, &l.sid, &["new"], ExecOpts::default()).await?;
    let records = log(env, &l.sid).await?;
    let added = records.get(l.records.len()..).unwrap_or_default();
    ensure!(
        env.model_requests() == calls + provider_calls(added, 1),
        "the new Exec made {} model requests",
        env.model_requests() - calls
    );
    ensure!(
        extends(&records, &l.records),
        "the new Exec rewrote fixture records"
    );
    ensure!(
        records[l.records.len()..]
            .iter()
            .any(|r| client::kind(r) == EventKind::EventExecutionStart),
        "the new Exec wrote no EXECUTION_START boundary"
    );
    let outs = outputs(&records);
    let ok = outs.len() == want.len() && outs.iter().zip(want).all(|(o, w)| o.starts_with(w));
    ensure!(ok, "outputs {outs:?}, want prefixes {want:?}");
    let calls = env.model_requests();
    env.restart().await?;
    ensure!(
        log(env, &l.sid).await? == records,
        "the mixed log changed across a restart"
    );
    resume_noop(
        env,
        &Loaded {
            sid: l.sid.clone(),
            records,
        },
    )
    .await?;
    ensure!(
        env.model_requests() == calls,
        "replaying the mixed log asked the model"
    );
    Ok(())
}

async fn completed(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "completed");
    ensure!(outputs(&l.records) == ["echo:hello"], "fixture outputs");
    resume_noop(env, &l).await?;
    exec_new(env, &l, &["echo:hello", "echo:new"]).await?;
    env.snapshot("go_completed_then_new", &[&l.sid], &log(env, &l.sid).await?);
    Ok(Verdict::Pass)
}

async fn crashed_input(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "crashed-input");
    let added = resume_completes(env, &l, 1).await?;
    let ids: Vec<String> = added
        .iter()
        .filter(|r| client::kind(r) != EventKind::EventLifecycle)
        .map(|r| client::event(r).execution_id)
        .collect();
    ensure!(
        ids.iter().all(String::is_empty),
        "a legacy recovery writes ID-less records, got ids {ids:?}"
    );
    let now = log(env, &l.sid).await?;
    resume_noop(
        env,
        &Loaded {
            sid: l.sid.clone(),
            records: now.clone(),
        },
    )
    .await?;
    let l = Loaded {
        sid: l.sid,
        records: now,
    };
    exec_new(env, &l, &["echo:hello", "echo:new"]).await?;
    env.snapshot(
        "go_crashed_input_recovered_then_new",
        &[&l.sid],
        &log(env, &l.sid).await?,
    );
    Ok(Verdict::Pass)
}

async fn crashed_output(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "crashed-output");
    resume_completes(env, &l, 0).await?;
    let now = log(env, &l.sid).await?;
    ensure!(
        outputs(&now) == ["echo:hello"],
        "outputs {:?}",
        outputs(&now)
    );
    let l = Loaded {
        sid: l.sid,
        records: now,
    };
    resume_noop(env, &l).await?;
    exec_new(env, &l, &["echo:hello", "echo:new"]).await?;
    env.snapshot(
        "go_crashed_output_recovered_then_new",
        &[&l.sid],
        &log(env, &l.sid).await?,
    );
    Ok(Verdict::Pass)
}

async fn crashed_model(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "crashed-model");
    let mut c = env.client()?;
    let calls = env.model_requests();
    let r = client::resume(&mut c, &l.sid).await;
    ensure!(
        r.is_err(),
        "Resume of a turn whose recorded completion is missing must fail"
    );
    ensure!(
        env.model_requests() == calls,
        "Resume asked the model for the missing completion"
    );
    let now = log(env, &l.sid).await?;
    ensure!(
        client::end_state(&now) != "COMPLETED",
        "the turn was completed anyway: {}",
        kind_names(&now)
    );
    let l = Loaded {
        sid: l.sid,
        records: now,
    };
    exec_new(env, &l, &["echo:new"]).await?;
    Ok(Verdict::Pass)
}

async fn multi_turn(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "multi-turn");
    resume_noop(env, &l).await?;
    env.note(
        "harness-level replay (\"model input hash mismatch\") has no RPC; records replay verbatim",
    );
    exec_new(env, &l, &["echo:first", "echo:second", "echo:new"]).await?;
    Ok(Verdict::Pass)
}

async fn multi_turn_crashed_output(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "multi-turn-crashed-output");
    resume_completes(env, &l, 0).await?;
    let now = log(env, &l.sid).await?;
    ensure!(
        outputs(&now) == ["echo:first", "echo:second"],
        "outputs {:?}",
        outputs(&now)
    );
    env.snapshot("go_multi_turn_crashed_output_recovered", &[&l.sid], &now);
    Ok(Verdict::Pass)
}

async fn upgraded_resume(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "upgraded-resume");
    resume_noop(env, &l).await?;
    ensure!(outputs(&l.records) == ["echo:hello"], "fixture outputs");
    Ok(Verdict::Pass)
}

async fn mixed_completed(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "mixed-completed");
    resume_noop(env, &l).await?;
    ensure!(
        outputs(&l.records) == ["echo:hello", "echo:new"],
        "fixture outputs"
    );
    Ok(Verdict::Pass)
}

async fn mixed_interrupted(env: &mut Env) -> CheckResult {
    let l = open_or_skip!(env, "mixed-interrupted");
    let added = resume_completes(env, &l, 0).await?;
    let ids: Vec<String> = added
        .iter()
        .filter(|r| client::kind(r) != EventKind::EventLifecycle)
        .map(|r| client::event(r).execution_id)
        .collect();
    ensure!(
        ids.iter().all(|i| i == "d3594a8cff91d240"),
        "Resume must finish the modern turn d3594a8cff91d240, wrote ids {ids:?}"
    );
    let now = log(env, &l.sid).await?;
    ensure!(
        outputs(&now) == ["echo:hello", "echo:new"],
        "outputs {:?}",
        outputs(&now)
    );
    env.snapshot("go_mixed_interrupted_recovered", &[&l.sid], &now);
    Ok(Verdict::Pass)
}
