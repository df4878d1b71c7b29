//! Id-less v0.1.2 journals: where the legacy prefix ends, which shapes are
//! refused, the replay and resume projections over the Go fixtures, and the
//! compatibility invocation id.

#[path = "support/journal_log.rs"]
mod jl;

use agentsessions_machine::canon;
use agentsessions_machine::error::LogError;
use agentsessions_machine::journal::executions::{
    ExecKind, Execution, Projection, check_inherited_intent, needs_describe, project,
    replay_selection, resume_invocation, select_pending,
};
use agentsessions_machine::journal::legacy::{compat_invocation_id, legacy_prefix};
use agentsessions_proto::v1::{
    Event, EventKind, ExecutionStart, IdentityRef, LogRecord, lifecycle,
};
use agentsessions_testkit::interop::parse_go_records;
use jl::*;
use sha2::{Digest, Sha256};

const E1: &str = "e1aaaaaaaaaaaaaa";
const UID: &str = "3f0c2a4e-9b1d-4c7e-8f00-0123456789ab";

fn log_of(evs: impl IntoIterator<Item = Event>) -> Log {
    let mut log = Log::new();
    log.extend(evs);
    log
}

fn pending(records: &[LogRecord]) -> Result<Option<Execution>, LogError> {
    let p = project(records)?;
    select_pending(records, &p)
}

// ---- legacy prefix -----------------------------------------------------------

#[test]
fn legacy_prefix_boundaries() {
    let cases: Vec<(&str, Vec<Event>, usize)> = vec![
        ("empty", vec![], 0),
        (
            "lifecycle only is not legacy",
            vec![lifecycle(lifecycle::Kind::LifecycleFork)],
            0,
        ),
        ("modern only", vec![start(E1, Some(1)), input(E1, "x")], 0),
        (
            "lifecycle then modern",
            vec![lifecycle(lifecycle::Kind::LifecycleFork), input(E1, "x")],
            0,
        ),
        (
            "pure legacy, unfinished",
            vec![input("", "x"), model_call(""), usage("")],
            3,
        ),
        (
            "pure legacy with trailing lifecycle",
            vec![
                input("", "x"),
                end(""),
                lifecycle(lifecycle::Kind::LifecycleFork),
            ],
            3,
        ),
        (
            "finished legacy then bare id-bearing record",
            vec![input("", "x"), end(""), input(E1, "y")],
            2,
        ),
        (
            "legacy ended by ERROR then id-bearing record",
            vec![input("", "x"), model_call(""), error(""), output(E1, "y")],
            3,
        ),
        (
            "explicit start supersedes an unfinished tail",
            vec![input("", "x"), model_call(""), start(E1, Some(1))],
            2,
        ),
        (
            "lifecycle between legacy and start",
            vec![
                input("", "x"),
                end(""),
                lifecycle(lifecycle::Kind::LifecycleFork),
                start(E1, Some(0)),
            ],
            3,
        ),
    ];
    for (name, evs, want) in cases {
        let log = log_of(evs);
        assert_eq!(legacy_prefix(&log.records), Ok(want), "{name}");
    }
}

#[test]
fn malformed_legacy_shapes_and_upgrade_boundaries_fail_closed() {
    let shapes: Vec<(&str, Vec<Event>, &str)> = vec![
        (
            "id-less START",
            vec![start("", Some(1)), input("", "x")],
            "no execution_id",
        ),
        (
            "id-less START after legacy",
            vec![input("", "x"), end(""), start("", Some(1))],
            "no execution_id",
        ),
        (
            "bodiless START after legacy",
            vec![
                input("", "x"),
                end(""),
                bodiless(E1, EventKind::EventExecutionStart),
            ],
            "invalid start event",
        ),
        (
            "invalid kind",
            vec![input("", "x"), bodiless("", EventKind::Unspecified)],
            "not a legacy event",
        ),
        (
            "id-less approval",
            vec![input("", "x"), request("", "c1")],
            "not a legacy event",
        ),
        (
            "unfinished legacy then id-bearing INPUT",
            vec![input("", "x"), input(E1, "y")],
            "unfinished legacy prefix",
        ),
        (
            "id-less END after modern",
            vec![start(E1, Some(1)), input(E1, "y"), end("")],
            "no execution_id",
        ),
    ];
    for (name, evs, detail) in shapes {
        let log = log_of(evs);
        for (what, got) in [
            ("project", project(&log.records).map(|_| ())),
            ("pending", pending(&log.records).map(|_| ())),
            (
                "resume_invocation",
                resume_invocation(&log.records).map(|_| ()),
            ),
        ] {
            let err = got.expect_err(name);
            assert!(
                matches!(err, LogError::InvalidExecutionLog(_)),
                "{name}/{what}: {err}"
            );
            assert!(err.to_string().contains(detail), "{name}/{what}: {err}");
        }
    }
}

#[test]
fn parked_kind_is_not_a_legacy_event() {
    let log = log_of([bodiless("", EventKind::EventParked)]);
    let err = legacy_prefix(&log.records).expect_err("parked");
    assert!(
        err.to_string()
            .contains("event 1 (PARKED) is not a legacy event"),
        "{err}"
    );
}

// ---- legacy projections over built logs -----------------------------------------

#[test]
fn legacy_replay_anchors_on_first_input_and_resume_on_last() {
    let log = log_of([
        lifecycle(lifecycle::Kind::LifecycleResume), // 0
        usage(""),                                   // 1: not the anchor
        input("", "first"),                          // 2
        model_call(""),                              // 3
        output("", "echo:first"),                    // 4
        end(""),                                     // 5
        input("", "second"),                         // 6
        usage(""),                                   // 7
        model_call(""),                              // 8
    ]);
    let p = project(&log.records).expect("valid");
    assert_eq!(p.prefix_end, 9);
    let replay = replay_selection(&p);
    assert_eq!(replay.len(), 1);
    let lg = replay[0];
    assert_eq!(lg.kind, ExecKind::Legacy);
    assert_eq!(lg.id, "");
    assert_eq!(lg.anchor, Some(2));
    assert_eq!((lg.start, lg.history_end), (0, 9));
    assert_eq!(texts(&lg.inputs), ["first", "second"]);
    assert_eq!(lg.stream, [3, 4, 8], "USAGE is not a legacy effect");
    assert!(!lg.completed);

    let e = select_pending(&log.records, &p).unwrap().expect("pending");
    assert_eq!(e.kind, ExecKind::Legacy);
    assert_eq!(e.anchor, Some(6));
    assert_eq!((e.start, e.history_end), (6, 6));
    assert_eq!(texts(&e.inputs), ["second"]);
    assert_eq!(e.stream, [8]);
    assert_eq!(e.marker, None);
    assert_eq!(resume_invocation(&log.records), Ok(None));
}

#[test]
fn a_modern_turn_after_a_legacy_prefix_replays_the_prefix_through_its_last_end() {
    let mut log = log_of([
        input("", "first"),       // 0
        model_call(""),           // 1
        output("", "echo:first"), // 2
        end(""),                  // 3
        input("", "abandoned"),   // 4: an unfinished legacy tail
    ]);
    log.extend([
        start(E1, Some(1)),
        input(E1, "new"),
        model_call(E1),
        output(E1, "echo:new"),
        end(E1),
    ]);
    let p = project(&log.records).expect("valid");
    let replay = replay_selection(&p);
    let legacy = replay
        .iter()
        .find(|e| e.kind == ExecKind::Legacy)
        .expect("the finished legacy part replays");
    // Through the END at 3, not past it and not short of it.
    assert_eq!((legacy.start, legacy.history_end), (0, 4));
    assert_eq!(texts(&legacy.inputs), ["first"]);
}

#[test]
fn legacy_replay_without_input_anchors_on_first_record() {
    let log = log_of([
        lifecycle(lifecycle::Kind::LifecycleResume),
        model_call(""),
        output("", "x"),
        end(""),
    ]);
    let p = project(&log.records).unwrap();
    assert_eq!(p.executions[0].anchor, Some(1));
    assert_eq!(pending(&log.records), Ok(None));
}

#[test]
fn inputless_legacy_has_no_pending_turn() {
    for evs in [vec![end("")], vec![error("")]] {
        let log = log_of(evs);
        assert_eq!(pending(&log.records), Ok(None));
        assert_eq!(resume_invocation(&log.records), Ok(None));
    }
}

#[test]
fn legacy_error_finishes_the_turn() {
    // The model-error shape: INPUT, MODEL_CALL, ERROR.
    let log = log_of([input("", "hello"), model_call(""), error("")]);
    assert_eq!(pending(&log.records), Ok(None));
    // ERROR does not count as a turn end for the replay trim, though.
    let mut mixed = log.clone();
    mixed.extend([start(E1, Some(1)), input(E1, "new"), model_call(E1)]);
    let p = project(&mixed.records).unwrap();
    assert_eq!(p.executions.len(), 1);
    assert_eq!(p.executions[0].id, E1);
}

#[test]
fn legacy_tool_intent_guard_applies_to_idless_records() {
    let log = log_of([input("", "x"), model_call(""), ordinary_call("", "t1")]);
    let e = pending(&log.records).unwrap().expect("pending");
    assert_eq!(check_inherited_intent(&log.records, &e), Ok(()));
    let child = log.fork();
    let e = pending(&child.records).unwrap().expect("pending");
    assert!(matches!(
        check_inherited_intent(&child.records, &e),
        Err(LogError::InheritedToolIntent(_))
    ));
    for after_fork in [false, true] {
        let mut l = log.clone();
        if !after_fork {
            l.push(result("", "t1"));
        }
        let mut child = l.fork();
        if after_fork {
            child.push(result("", "t1"));
        }
        let e = pending(&child.records).unwrap().expect("pending");
        assert_eq!(
            check_inherited_intent(&child.records, &e),
            Ok(()),
            "{after_fork}"
        );
    }
    // Legacy turns never need a Describe.
    assert!(!needs_describe(&[&e], &child_records(&log)));
}

fn child_records(log: &Log) -> Vec<LogRecord> {
    log.fork().records
}

// ---- the Go fixtures ------------------------------------------------------------

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/go-v0.1.2"
);

/// Loads a Go fixture, or returns None (with a visible SKIPPED line) when the
/// fixture directory is absent and fixtures are not required.
fn fixture(name: &str) -> Option<Vec<LogRecord>> {
    let path = format!("{FIXTURES}/{name}.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(parse_go_records(&text).unwrap_or_else(|e| panic!("{name}: {e}"))),
        Err(e) => {
            if std::env::var_os("AGENTSESSIONS_REQUIRE_FIXTURES").is_some() {
                panic!("fixture {path} required but unreadable: {e}");
            }
            println!("SKIPPED: fixture {path} unavailable ({e})");
            None
        }
    }
}

/// What recovery would do with a fixture.
#[derive(Debug, PartialEq)]
struct Selection {
    kind: Option<ExecKind>,
    inputs: Vec<String>,
    history: usize,
    stream_kinds: Vec<EventKind>,
}

fn kinds(records: &[LogRecord], idx: &[usize]) -> Vec<EventKind> {
    idx.iter()
        .map(|&i| EventKind::try_from(records[i].event.as_ref().unwrap().kind).unwrap())
        .collect()
}

fn selection(records: &[LogRecord]) -> Option<Selection> {
    let e = pending(records).expect("valid fixture")?;
    Some(Selection {
        kind: Some(e.kind),
        inputs: texts(&e.inputs),
        history: e.start,
        stream_kinds: kinds(records, &e.stream),
    })
}

/// (inputs, history_end, stream kinds) of each replayed execution.
fn replayed(records: &[LogRecord], p: &Projection) -> Vec<(Vec<String>, usize, Vec<EventKind>)> {
    replay_selection(p)
        .iter()
        .map(|e| (texts(&e.inputs), e.history_end, kinds(records, &e.stream)))
        .collect()
}

use EventKind::{EventModelCall as MC, EventOutput as OUT};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn go_fixtures_resume_selection_matches_recovery_rules() {
    let legacy = |inputs: &[&str], history, stream: &[EventKind]| {
        Some(Selection {
            kind: Some(ExecKind::Legacy),
            inputs: s(inputs),
            history,
            stream_kinds: stream.to_vec(),
        })
    };
    let cases: Vec<(&str, Option<Selection>)> = vec![
        ("completed", None),
        ("upgraded-resume", None),
        ("multi-turn", None),
        ("mixed-completed", None),
        ("crashed-input", legacy(&["hello"], 0, &[])),
        ("crashed-model", legacy(&["hello"], 0, &[MC])),
        ("crashed-output", legacy(&["hello"], 0, &[MC, OUT])),
        (
            "multi-turn-crashed-output",
            legacy(&["second"], 4, &[MC, OUT]),
        ),
        (
            "mixed-interrupted",
            Some(Selection {
                kind: Some(ExecKind::Modern),
                inputs: s(&["new"]),
                history: 4,
                stream_kinds: vec![MC, OUT],
            }),
        ),
    ];
    for (name, want) in cases {
        let Some(records) = fixture(name) else {
            continue;
        };
        assert_eq!(selection(&records), want, "{name}");
        // ResumeInvocation: nil for legacy, the default-identity marker for
        // the interrupted modern turn.
        let inv = resume_invocation(&records).expect(name);
        if name == "mixed-interrupted" {
            let m = inv.expect("marker");
            assert_eq!(
                m,
                ExecutionStart {
                    input_count: Some(1),
                    ..ExecutionStart::default()
                }
            );
            let p = project(&records).unwrap();
            let e = select_pending(&records, &p).unwrap().unwrap();
            assert_eq!(e.id, "d3594a8cff91d240");
            assert!(!needs_describe(&[&e], &records));
        } else {
            assert_eq!(inv, None, "{name}");
        }
    }
}

#[test]
fn go_fixtures_replay_projection() {
    type Replay = Vec<(Vec<String>, usize, Vec<EventKind>)>;
    let cases: Vec<(&str, usize, Replay)> = vec![
        ("completed", 4, vec![(s(&["hello"]), 4, vec![MC, OUT])]),
        (
            "upgraded-resume",
            4,
            vec![(s(&["hello"]), 4, vec![MC, OUT])],
        ),
        ("crashed-input", 1, vec![(s(&["hello"]), 1, vec![])]),
        ("crashed-model", 2, vec![(s(&["hello"]), 2, vec![MC])]),
        ("crashed-output", 3, vec![(s(&["hello"]), 3, vec![MC, OUT])]),
        (
            "multi-turn",
            8,
            vec![(s(&["first", "second"]), 8, vec![MC, OUT, MC, OUT])],
        ),
        (
            "multi-turn-crashed-output",
            7,
            vec![(s(&["first", "second"]), 7, vec![MC, OUT, MC, OUT])],
        ),
        (
            "mixed-completed",
            4,
            vec![
                (s(&["hello"]), 4, vec![MC, OUT]),
                (s(&["new"]), 4, vec![MC, OUT]),
            ],
        ),
        (
            "mixed-interrupted",
            4,
            vec![(s(&["hello"]), 4, vec![MC, OUT])],
        ),
    ];
    for (name, prefix_end, want) in cases {
        let Some(records) = fixture(name) else {
            continue;
        };
        let p = project(&records).expect(name);
        assert_eq!(p.prefix_end, prefix_end, "{name}");
        assert_eq!(replayed(&records, &p), want, "{name}");
        let legacy = replay_selection(&p)[0];
        assert_eq!(legacy.kind, ExecKind::Legacy, "{name}");
        assert_eq!(legacy.anchor, Some(0), "{name}");
    }
}

#[test]
fn new_exec_after_a_fixture_supersedes_the_abandoned_legacy_tail() {
    // (fixture, legacy records kept for replay: None when nothing is)
    let cases = [
        ("completed", Some(4)),
        ("crashed-input", None),
        ("crashed-model", None),
        ("crashed-output", None),
        ("multi-turn-crashed-output", Some(4)),
    ];
    for (name, kept) in cases {
        let Some(records) = fixture(name) else {
            continue;
        };
        let mut log = Log {
            records: records.clone(),
        };
        let old = log.len();
        log.extend([start(E1, Some(1)), input(E1, "new")]);
        // Interrupted modern turn: recovery picks it, with the whole old log
        // as History and no legacy effects.
        let e = pending(&log.records).expect(name).expect("pending");
        assert_eq!((e.kind, e.start), (ExecKind::Modern, old), "{name}");
        assert!(e.stream.is_empty(), "{name}");
        // Completed: replay runs the trimmed legacy part, then the new turn.
        log.extend([model_call(E1), output(E1, "echo:new"), end(E1)]);
        let p = project(&log.records).expect(name);
        assert_eq!(pending(&log.records), Ok(None), "{name}");
        let sel = replay_selection(&p);
        let legacy_end: Vec<usize> = sel
            .iter()
            .filter(|e| e.kind == ExecKind::Legacy)
            .map(|e| e.history_end)
            .collect();
        assert_eq!(legacy_end, kept.into_iter().collect::<Vec<_>>(), "{name}");
        let modern = sel.last().expect("modern turn");
        assert_eq!(
            (modern.id.as_str(), modern.history_end),
            (E1, old),
            "{name}"
        );
    }
}

#[test]
fn lifecycle_only_fork_does_not_invent_a_legacy_invocation() {
    let log = log_of([lifecycle(lifecycle::Kind::LifecycleFork)]);
    let p = project(&log.records).unwrap();
    assert!(p.executions.is_empty());
    assert!(replay_selection(&p).is_empty());
    assert_eq!(pending(&log.records), Ok(None));
}

// ---- compatibility invocation id ------------------------------------------------

fn is_compat_id(id: &str) -> bool {
    id.strip_prefix("legacy-").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[test]
fn compat_id_is_stable_and_scoped() {
    let log = log_of([input("", "hello"), model_call(""), output("", "x")]);
    let r = &log.records[0];
    let a = compat_invocation_id(UID, r).expect("id");
    assert!(is_compat_id(&a), "{a}");
    assert_eq!(compat_invocation_id(UID, r), Ok(a.clone()), "stable");
    assert_eq!(compat_invocation_id(UID, &r.clone()), Ok(a.clone()));
    // Never the modern 16-hex shape.
    assert_ne!(a.len(), 16);
    assert!(!a.bytes().all(|b| b.is_ascii_hexdigit()));

    let other = compat_invocation_id("another-session", r).unwrap();
    assert_ne!(other, a, "scoped to the session uid");

    let mut moved = r.clone();
    moved.seq = 7;
    assert_ne!(compat_invocation_id(UID, &moved).unwrap(), a, "seq matters");

    let mut changed = r.clone();
    changed.event = Some(input("", "hello!"));
    assert_ne!(
        compat_invocation_id(UID, &changed).unwrap(),
        a,
        "content matters"
    );

    let mut acted = r.clone();
    if let Some(ev) = acted.event.as_mut() {
        ev.actor = Some(IdentityRef {
            principal: "bob".into(),
            ..IdentityRef::default()
        });
    }
    assert_ne!(
        compat_invocation_id(UID, &acted).unwrap(),
        a,
        "actor matters"
    );

    // Hashes and fences are not part of it: only position and content.
    let mut rehashed = r.clone();
    rehashed.content_hash = "x".into();
    rehashed.fence = 9;
    assert_eq!(compat_invocation_id(UID, &rehashed), Ok(a));
}

#[test]
fn compat_id_requires_a_session_uid() {
    let log = log_of([input("", "hello")]);
    assert_eq!(
        compat_invocation_id("", &log.records[0]),
        Err(LogError::MissingSessionUid)
    );
}

#[test]
fn compat_id_hashes_the_go_marshalled_document() {
    // Text that Go's encoder escapes when it embeds the canonical event.
    let log = log_of([input("", "a<b>&c\u{2028}d\u{2029}é")]);
    let r = &log.records[0];
    // A space stays verbatim; a control character below it is escaped.
    let uid = "s <&>\"\\\n\u{1f}";
    let canonical =
        String::from_utf8(canon::canonical_event(r.event.as_ref().unwrap()).unwrap()).unwrap();
    let escaped = canonical
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let doc = format!(
        "{{\"session_uid\":\"s \\u003c\\u0026\\u003e\\\"\\\\\\n\\u001f\",\"seq\":\"1\",\"event\":{escaped}}}"
    );
    let want = format!("legacy-{}", hex::encode(Sha256::digest(doc.as_bytes())));
    assert_eq!(compat_invocation_id(uid, r), Ok(want));
}

#[test]
fn compat_id_anchors_agree_for_a_single_turn() {
    let Some(records) = fixture("crashed-output") else {
        return;
    };
    let p = project(&records).unwrap();
    let replay_anchor = replay_selection(&p)[0].anchor.expect("anchor");
    let resume_anchor = select_pending(&records, &p)
        .unwrap()
        .expect("pending")
        .anchor
        .expect("anchor");
    assert_eq!(replay_anchor, resume_anchor);
    let id = compat_invocation_id(UID, &records[replay_anchor]).unwrap();
    assert!(is_compat_id(&id), "{id}");
    // The same bytes in another session give another id.
    assert_ne!(
        compat_invocation_id("other", &records[resume_anchor]).unwrap(),
        id
    );
}
