//! ReplayHarness through the deterministic world: completed executions are
//! re-run with every recorded effect served (no model or tool calls, no
//! writes), the Go v0.1.2 journals replay to what the released host
//! produced, and divergence or bad evidence fails with the right code.

use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    Code, Effect, ExecuteTool, HarnessEffect, HarnessFailure, InvokeModel, ReplayReport, Request,
    Response, RuntimeCall, RuntimeOp, StoreEffect,
};
use agentsessions_proto::v1::{
    ApproveRequest, CreateSessionRequest, ExecRequest, LogRecord, ResumeRequest, Session,
    controller_frame::Frame,
};
use agentsessions_testkit::World;
use agentsessions_testkit::interop::parse_go_records;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/go-v0.1.2"
);

fn exec(session: &str, text: &str) -> Request {
    Request::Exec(ExecRequest {
        session: session.into(),
        inputs: vec![events::text_message("user", text)],
        ..Default::default()
    })
}

fn create(world: &mut World, harness: &str) -> String {
    let call = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: harness.into(),
            ..Default::default()
        }),
    }));
    call.session().expect("created").metadata.unwrap().uid
}

fn replay(
    world: &mut World,
    sid: &str,
) -> Result<ReplayReport, agentsessions_machine::vocab::Status> {
    let call = world.call(Request::ReplayHarness {
        session: sid.into(),
    });
    match call.reply {
        Ok(Response::Replayed(report)) => Ok(report),
        Ok(other) => panic!("unexpected reply {other:?}"),
        Err(status) => Err(status),
    }
}

/// Replays and asserts nothing was written, fenced or invoked.
fn replay_read_only(
    world: &mut World,
    sid: &str,
) -> Result<ReplayReport, agentsessions_machine::vocab::Status> {
    let records = world.store.records(sid).to_vec();
    let fence = world.store.fence(sid);
    let (models, attempts) = (world.model_calls, world.executor.attempts);
    let before = world.trace.len();
    let result = replay(world, sid);
    assert_eq!(&*world.store.records(sid), records, "replay never appends");
    assert_eq!(world.store.fence(sid), fence, "replay never fences");
    assert_eq!(world.model_calls, models, "replay never invokes the model");
    assert_eq!(world.executor.attempts, attempts, "nor any tool");
    let forbidden = world.trace[before..].iter().find(|e| {
        matches!(
            e,
            Effect::Store(StoreEffect::Append { .. })
                | Effect::Store(StoreEffect::MintFence { .. })
                | Effect::Model(InvokeModel { .. })
                | Effect::Tool(ExecuteTool { .. })
                | Effect::Store(StoreEffect::PutSession { .. })
        )
    });
    assert_eq!(forbidden, None);
    result
}

fn outputs(report: &ReplayReport) -> Vec<&str> {
    report.outputs.iter().map(String::as_str).collect()
}

#[test]
fn a_completed_echo_turn_replays_its_output_without_calling_the_model() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    assert_eq!(world.call(exec(&sid, "hello")).code(), Code::Ok);
    let report = replay_read_only(&mut world, &sid).expect("replays");
    assert_eq!(report.executions, 1);
    assert_eq!(outputs(&report), vec!["echo:hello"]);
}

#[test]
fn two_turns_replay_in_order_each_on_its_own_connection() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "one"));
    world.call(exec(&sid, "two"));
    let before = world.trace.len();
    let report = replay_read_only(&mut world, &sid).expect("replays");
    assert_eq!(report.executions, 2);
    assert_eq!(outputs(&report), vec!["echo:one", "echo:two"]);
    let creates = world.trace[before..]
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Runtime(RuntimeCall {
                    op: RuntimeOp::Create { .. },
                    ..
                })
            )
        })
        .count();
    let closes = world.trace[before..]
        .iter()
        .filter(|e| matches!(e, Effect::Harness(HarnessEffect::Close { .. })))
        .count();
    assert_eq!((creates, closes), (2, 2));
    // Unpinned echo turns still record the harness name and version, so the
    // route is described exactly once, before the first run.
    let describes: Vec<usize> = world.trace[before..]
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Effect::Harness(HarnessEffect::Describe { .. })))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(describes.len(), 1);
    let first_dial = world.trace[before..]
        .iter()
        .position(|e| matches!(e, Effect::Harness(HarnessEffect::Dial { .. })))
        .unwrap();
    assert!(describes[0] < first_dial);
}

#[test]
fn an_interrupted_trailing_turn_is_skipped() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "done"));
    world.call(exec(&sid, "cut"));
    // Keep the second turn only up to its MODEL_CALL, as a crash would.
    let cut: Vec<LogRecord> = world.store.records(&sid)[..8].to_vec();
    let mut fresh = World::default();
    fresh.store.import(&sid, cut, fresh.now);
    let report = replay_read_only(&mut fresh, &sid).expect("replays");
    assert_eq!(report.executions, 1);
    assert_eq!(outputs(&report), vec!["echo:done"]);
}

#[test]
fn an_empty_session_replays_nothing_and_an_unknown_one_is_not_found() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let report = replay_read_only(&mut world, &sid).expect("replays");
    assert_eq!(report, ReplayReport::default());
    let err = replay(&mut world, "sess-nobody").unwrap_err();
    assert_eq!(err.code, Code::NotFound);
}

#[allow(deprecated)]
fn resume(sid: &str) -> Request {
    Request::Resume(ResumeRequest {
        session: sid.into(),
        boot: false,
    })
}

#[test]
fn a_completed_approval_turn_replays_decision_then_receipt_without_the_executor() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    let call = world.call(exec(&sid, "go"));
    let pending = call.session().unwrap().pending_approval.unwrap();
    let call = world.call(Request::Approve(ApproveRequest {
        session: sid.clone(),
        execution_id: pending.execution_id.clone(),
        tool_call_id: pending.tool_call_id.clone(),
        request_seq: pending.request_seq,
        approved: Some(true),
        reason: "ok".into(),
        identity: None,
    }));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.executor.effects, 1);

    let before = world.trace.len();
    let report = replay_read_only(&mut world, &sid).expect("replays");
    assert_eq!(outputs(&report), vec!["tool ok"]);
    let served: Vec<&'static str> = world.trace[before..]
        .iter()
        .filter_map(|e| match e {
            Effect::Harness(HarnessEffect::Send { frame, .. }) => match &frame.frame {
                Some(Frame::Start(_)) => Some("start"),
                Some(Frame::Approval(_)) => Some("decision"),
                Some(Frame::Tool(_)) => Some("receipt"),
                _ => Some("other"),
            },
            _ => None,
        })
        .collect();
    assert_eq!(served, vec!["start", "decision", "receipt"]);
}

#[test]
fn a_recorded_version_the_harness_no_longer_serves_stops_replay_before_any_run() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "one"));
    world.call(exec(&sid, "two"));
    // Rewrite the second turn's recorded version (re-hashed by the store).
    let mut records = world.store.records(&sid).to_vec();
    let events: Vec<_> = records.drain(..).map(|r| r.event.unwrap()).collect();
    let mut edited = World::default();
    let mut events = events;
    if let Some(agentsessions_proto::v1::event::Body::ExecutionStart(s)) = &mut events[5].body {
        s.harness_version = "2".into();
    } else {
        panic!("record 6 opens the second turn");
    }
    edited
        .store
        .append(&sid, 0, 1, &events, edited.now)
        .expect("rewritten journal");
    let before = edited.trace.len();
    let err = replay_read_only(&mut edited, &sid).unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err:?}");
    assert!(err.message.contains("version mismatch"), "{}", err.message);
    assert!(
        !edited.trace[before..].iter().any(|e| matches!(
            e,
            Effect::Runtime(RuntimeCall { .. }) | Effect::Harness(HarnessEffect::Dial { .. })
        )),
        "the first turn did not run either"
    );
}

#[test]
fn a_harness_that_no_longer_reproduces_its_journal_diverges_as_internal() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "hello"));
    // Change the recorded input: the harness now asks a different question.
    let mut events: Vec<_> = world
        .store
        .records(&sid)
        .iter()
        .map(|r| r.event.clone().unwrap())
        .collect();
    if let Some(agentsessions_proto::v1::event::Body::Message(m)) = &mut events[1].body {
        *m = events::text_message("user", "goodbye");
    }
    let mut edited = World::default();
    edited
        .store
        .append(&sid, 0, 1, &events, edited.now)
        .unwrap();
    let err = replay_read_only(&mut edited, &sid).unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err:?}");
    assert!(
        err.message.contains("model input hash mismatch"),
        "{}",
        err.message
    );
}

#[test]
fn an_invalid_journal_is_a_failed_precondition_before_any_harness_io() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "hello"));
    // A completed turn whose start announced two inputs but recorded one.
    let mut events: Vec<_> = world
        .store
        .records(&sid)
        .iter()
        .map(|r| r.event.clone().unwrap())
        .collect();
    if let Some(agentsessions_proto::v1::event::Body::ExecutionStart(s)) = &mut events[0].body {
        s.input_count = Some(2);
    }
    let mut edited = World::default();
    edited
        .store
        .append(&sid, 0, 1, &events, edited.now)
        .unwrap();
    let before = edited.trace.len();
    let err = replay_read_only(&mut edited, &sid).unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err:?}");
    assert!(!edited.trace[before..].iter().any(|e| matches!(
        e,
        Effect::Harness(HarnessEffect::Describe { .. }) | Effect::Runtime(RuntimeCall { .. })
    )),);
}

#[test]
fn a_describe_outage_is_unavailable() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "hello"));
    world
        .describe_fail
        .insert("echo".into(), HarnessFailure::Unavailable("down".into()));
    let err = replay_read_only(&mut world, &sid).unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err:?}");
}

// ---- the Go v0.1.2 journals -------------------------------------------------

/// Loads a fixture, or `None` after a visible SKIPPED line when the fixture
/// directory is absent and fixtures are not required.
fn fixture(name: &str) -> Option<Vec<LogRecord>> {
    if !std::path::Path::new(FIXTURES).is_dir() {
        assert!(
            std::env::var_os("AGENTSESSIONS_REQUIRE_FIXTURES").is_none(),
            "fixtures required but not found at {FIXTURES}"
        );
        println!("SKIPPED: fixtures not found at {FIXTURES}");
        return None;
    }
    let path = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Some(parse_go_records(&text).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// Imports a fixture into a fresh world and replays it read-only.
fn replay_fixture(
    name: &str,
) -> Option<Result<ReplayReport, agentsessions_machine::vocab::Status>> {
    let records = fixture(name)?;
    let mut world = World::default();
    let sid = "sess-00000000000000000000f1x7";
    world.store.import(sid, records, world.now);
    Some(replay_read_only(&mut world, sid))
}

#[test]
fn go_fixtures_replay_to_the_released_outputs_without_model_calls() {
    let cases: [(&str, &[&str]); 5] = [
        ("completed", &["echo:hello"]),
        ("crashed-output", &["echo:hello"]),
        ("upgraded-resume", &["echo:hello"]),
        ("mixed-completed", &["echo:hello", "echo:new"]),
        ("mixed-interrupted", &["echo:hello"]),
    ];
    for (name, want) in cases {
        let Some(result) = replay_fixture(name) else {
            return;
        };
        let report = result.unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(outputs(&report), want, "{name}");
    }
}

#[test]
fn the_go_multi_turn_journal_keeps_its_historical_input_hash_mismatch() {
    let Some(result) = replay_fixture("multi-turn") else {
        return;
    };
    let err = result.unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err:?}");
    assert!(
        err.message.contains("model input hash mismatch"),
        "{}",
        err.message
    );
}

#[test]
fn the_go_crashed_model_journal_has_no_recorded_completion_to_serve() {
    let Some(result) = replay_fixture("crashed-model") else {
        return;
    };
    let err = result.unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err:?}");
    assert!(
        err.message.contains("expected a recorded completion"),
        "{err:?}"
    );
}
