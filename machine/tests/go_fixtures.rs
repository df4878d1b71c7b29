//! The journals the Go host v0.1.2 (and its upgrade path) wrote, read back
//! through `interop`, re-hashed with `canon`, and walked with `chain`.
//!
//! Fixtures come from `$AGENTSESSIONS_FIXTURES` or, by default, the shared
//! copy next to the repository. When they are missing the tests say so and
//! pass, unless `AGENTSESSIONS_REQUIRE_FIXTURES` is set.

use std::path::PathBuf;

use agentsessions_machine::chain::{self, ChainError};
use agentsessions_machine::{canon, inputhash};
use agentsessions_proto::v1::{
    Event, EventKind, LogRecord, Message, ModelCall, Part, TextPart, event, part,
};
use agentsessions_testkit::interop;

fn fixtures_dir() -> PathBuf {
    match std::env::var_os("AGENTSESSIONS_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/go-v0.1.2"
        )),
    }
}

/// The text of `<name>.json`; `None` (after saying so) when the fixture
/// directory is absent and fixtures are not required.
fn read_text(name: &str) -> Option<String> {
    let dir = fixtures_dir();
    if !dir.is_dir() {
        assert!(
            std::env::var_os("AGENTSESSIONS_REQUIRE_FIXTURES").is_none(),
            "fixtures required but not found at {}",
            dir.display()
        );
        eprintln!("SKIPPED: fixtures not found at {}", dir.display());
        return None;
    }
    let path = dir.join(format!("{name}.json"));
    Some(
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display())),
    )
}

/// Reads and converts `<name>.json`.
fn load(name: &str) -> Option<Vec<LogRecord>> {
    let text = read_text(name)?;
    Some(interop::parse_go_records(&text).unwrap_or_else(|e| panic!("converting {name}: {e}")))
}

fn ev(r: &LogRecord) -> &Event {
    r.event
        .as_ref()
        .expect("every converted record has an event")
}

fn kind(r: &LogRecord) -> EventKind {
    EventKind::try_from(ev(r).kind).expect("known kind")
}

fn text_of(r: &LogRecord) -> Option<(&str, String)> {
    match &ev(r).body {
        Some(event::Body::Message(m)) => {
            let mut s = String::new();
            for p in &m.parts {
                if let Some(part::Part::Text(t)) = &p.part {
                    s.push_str(&t.text);
                }
            }
            Some((m.role.as_str(), s))
        }
        _ => None,
    }
}

fn model_call(r: &LogRecord) -> Option<&ModelCall> {
    match &ev(r).body {
        Some(event::Body::Model(m)) => Some(m),
        _ => None,
    }
}

use EventKind::{
    EventEnd as End, EventExecutionStart as Start, EventInput as Input, EventModelCall as Call,
    EventOutput as Output,
};

/// What journal.md §4 states about one fixture.
struct Expect<'a> {
    /// (kind, fence, execution_id) per record, seq 1 first.
    records: &'a [(EventKind, i64, &'a str)],
    /// Model call ids in order.
    model_ids: &'a [&'a str],
    /// (role, text) of the INPUT and OUTPUT records in order.
    texts: &'a [(&'a str, &'a str)],
    /// Prefix of the last record's hash.
    head: &'a str,
}

/// Every check one fixture gets: shape, stored hashes, links, chain, and the
/// recorded model input hashes.
fn check(records: &[LogRecord], want: &Expect<'_>) {
    let got: Vec<(EventKind, i64, &str)> = records
        .iter()
        .map(|r| (kind(r), r.fence, ev(r).execution_id.as_str()))
        .collect();
    assert_eq!(got, want.records, "kinds, fences and execution ids");
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.seq, i as i64 + 1, "seqs run from 1 without gaps");
        // Go's zero time and all-empty actor leave these unset.
        assert_eq!(ev(r).ts, None, "seq {}", r.seq);
        assert_eq!(ev(r).actor, None, "seq {}", r.seq);
    }
    let ids: Vec<&str> = records
        .iter()
        .filter_map(model_call)
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, want.model_ids);
    let texts: Vec<(&str, String)> = records.iter().filter_map(text_of).collect();
    let texts: Vec<(&str, &str)> = texts.iter().map(|(r, t)| (*r, t.as_str())).collect();
    assert_eq!(texts, want.texts);
    for r in records {
        if kind(r) == End {
            match &ev(r).body {
                Some(event::Body::End(e)) => assert_eq!(e.state, "COMPLETED"),
                other => panic!("END body {other:?}"),
            }
        }
    }

    let mut prev = String::new();
    for r in records {
        assert_eq!(r.prev_hash, prev, "prev_hash link at seq {}", r.seq);
        let computed = canon::content_hash(&r.prev_hash, r.seq, ev(r)).unwrap();
        assert_eq!(computed, r.content_hash, "content_hash at seq {}", r.seq);
        prev = computed;
    }
    assert!(prev.starts_with(want.head), "head {prev}");
    chain::verify(records).unwrap();

    check_input_hashes(records);
    tamper_each_record(records);
}

/// The echo harness sends one request per turn: model "echo" and the turn's
/// input as a single user text message (controller.md / service.md §8). The
/// hash recorded on each MODEL_CALL must be that request's Go JSON hash.
fn check_input_hashes(records: &[LogRecord]) {
    let mut last_input = None;
    for r in records {
        if kind(r) == Input {
            last_input = text_of(r).map(|(_, t)| t);
        }
        if let Some(call) = model_call(r) {
            let input = last_input
                .clone()
                .expect("an INPUT precedes the MODEL_CALL");
            let request = ModelCall {
                model: call.model.clone(),
                params: call.params.clone(),
                messages: vec![user_text(&input)],
                ..ModelCall::default()
            };
            let hash = inputhash::input_hash(&inputhash::from_model_call(&request)).unwrap();
            assert_eq!(hash, call.input_hash, "input hash at seq {}", r.seq);
        }
    }
}

fn user_text(t: &str) -> Message {
    Message {
        role: "user".into(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart { text: t.into() })),
        }],
    }
}

/// Flips one ASCII byte of a string the event's hash covers.
fn flip_one_byte(s: &mut String) {
    let mut bytes = std::mem::take(s).into_bytes();
    let last = bytes.last_mut().expect("non-empty string to tamper with");
    *last ^= 1;
    *s = String::from_utf8(bytes).expect("still ascii");
}

fn tamper(e: &mut Event) {
    match &mut e.body {
        Some(event::Body::Message(m)) => match &mut m.parts[0].part {
            Some(part::Part::Text(t)) => flip_one_byte(&mut t.text),
            other => panic!("unexpected part {other:?}"),
        },
        Some(event::Body::Model(m)) => flip_one_byte(&mut m.id),
        Some(event::Body::End(end)) => flip_one_byte(&mut end.state),
        _ => flip_one_byte(&mut e.execution_id),
    }
}

/// Changing one byte of any single event is caught at exactly its seq, even
/// though every stored link still matches.
fn tamper_each_record(records: &[LogRecord]) {
    for (i, original) in records.iter().enumerate() {
        let mut copy = records.to_vec();
        tamper(copy[i].event.as_mut().unwrap());
        match chain::verify(&copy) {
            Err(ChainError::ContentMismatch {
                seq,
                stored,
                computed,
            }) => {
                assert_eq!(seq, original.seq);
                assert_eq!(stored, original.content_hash);
                assert_ne!(computed, stored);
            }
            other => panic!("tampered seq {}: {other:?}", original.seq),
        }
    }
}

/// Tampering the fixture text itself, before conversion, is caught too.
fn tamper_text(name: &str, from: &str, to: &str, seq: i64) {
    let Some(text) = read_text(name) else { return };
    assert_eq!(from.len(), to.len(), "same-length edit");
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} is unique in {name}"
    );
    let records = interop::parse_go_records(&text.replacen(from, to, 1)).unwrap();
    match chain::verify(&records) {
        Err(ChainError::ContentMismatch { seq: got, .. }) => assert_eq!(got, seq),
        other => panic!("{name}: {other:?}"),
    }
}

const HELLO: [(&str, &str); 2] = [("user", "hello"), ("assistant", "echo:hello")];

#[test]
fn completed() {
    let Some(r) = load("completed") else { return };
    check(
        &r,
        &Expect {
            records: &[(Input, 1, ""), (Call, 1, ""), (Output, 1, ""), (End, 1, "")],
            model_ids: &["49072a2a845249ea"],
            texts: &HELLO,
            head: "1b0f72670340",
        },
    );
    // journal.md §1.5 spells out these canonical records in full.
    let canonical = |i: usize| {
        String::from_utf8(canon::canonical_record(&r[i].prev_hash, r[i].seq, ev(&r[i])).unwrap())
            .unwrap()
    };
    assert_eq!(
        canonical(0),
        r#"{"event":{"kind":"EVENT_INPUT","message":{"parts":[{"text":{"text":"hello"}}],"role":"user"}},"prev_hash":"","seq":"1"}"#
    );
    assert_eq!(
        canonical(1),
        format!(
            r#"{{"event":{{"kind":"EVENT_MODEL_CALL","model":{{"id":"49072a2a845249ea","input_hash":"2611c24a1a665deca46265ed96d1e1efc699260c9cba9c07f22cda7939232c30","model":"echo"}}}},"prev_hash":"{}","seq":"2"}}"#,
            r[0].content_hash
        )
    );
    assert_eq!(
        canonical(3),
        format!(
            r#"{{"event":{{"end":{{"state":"COMPLETED"}},"kind":"EVENT_END"}},"prev_hash":"{}","seq":"4"}}"#,
            r[2].content_hash
        )
    );
}

#[test]
fn tamper_completed() {
    tamper_text("completed", "\"echo:hello\"", "\"echo:hellp\"", 3);
}

#[test]
fn crashed_input() {
    let Some(r) = load("crashed-input") else {
        return;
    };
    check(
        &r,
        &Expect {
            records: &[(Input, 1, "")],
            model_ids: &[],
            texts: &HELLO[..1],
            head: "62daf59c5c1e",
        },
    );
}

#[test]
fn tamper_crashed_input() {
    tamper_text("crashed-input", "\"hello\"", "\"jello\"", 1);
}

#[test]
fn crashed_model() {
    let Some(r) = load("crashed-model") else {
        return;
    };
    check(
        &r,
        &Expect {
            records: &[(Input, 1, ""), (Call, 1, "")],
            model_ids: &["c0891e06be0e112d"],
            texts: &HELLO[..1],
            head: "98d192d2ce6f",
        },
    );
}

#[test]
fn tamper_crashed_model() {
    tamper_text("crashed-model", "c0891e06be0e112d", "c0891e06be0e112e", 2);
}

#[test]
fn crashed_output() {
    let Some(r) = load("crashed-output") else {
        return;
    };
    check(
        &r,
        &Expect {
            records: &[(Input, 1, ""), (Call, 1, ""), (Output, 1, "")],
            model_ids: &["3845894835dd7ca5"],
            texts: &HELLO,
            head: "61bd39e558e7",
        },
    );
}

#[test]
fn tamper_crashed_output() {
    tamper_text("crashed-output", "\"echo:hello\"", "\"Echo:hello\"", 3);
}

#[test]
fn multi_turn() {
    let Some(r) = load("multi-turn") else { return };
    check(
        &r,
        &Expect {
            records: &[
                (Input, 1, ""),
                (Call, 1, ""),
                (Output, 1, ""),
                (End, 1, ""),
                (Input, 1, ""),
                (Call, 1, ""),
                (Output, 1, ""),
                (End, 1, ""),
            ],
            model_ids: &["ceb52e247186c64c", "7bb748c601a7b81e"],
            texts: &[
                ("user", "first"),
                ("assistant", "echo:first"),
                ("user", "second"),
                ("assistant", "echo:second"),
            ],
            head: "a7c7e91da528",
        },
    );
    assert!(r[0].content_hash.starts_with("8bcc03d6"));
}

#[test]
fn tamper_multi_turn() {
    tamper_text("multi-turn", "\"echo:second\"", "\"echo:secone\"", 7);
}

#[test]
fn multi_turn_crashed_output() {
    let Some(r) = load("multi-turn-crashed-output") else {
        return;
    };
    check(
        &r,
        &Expect {
            records: &[
                (Input, 1, ""),
                (Call, 1, ""),
                (Output, 1, ""),
                (End, 1, ""),
                (Input, 1, ""),
                (Call, 1, ""),
                (Output, 1, ""),
            ],
            model_ids: &["d6b1e214869838cb", "ebdd6db5859f0790"],
            texts: &[
                ("user", "first"),
                ("assistant", "echo:first"),
                ("user", "second"),
                ("assistant", "echo:second"),
            ],
            head: "6b56c2735a72",
        },
    );
    assert!(r[0].content_hash.starts_with("8bcc03d6"));
}

#[test]
fn tamper_multi_turn_crashed_output() {
    tamper_text("multi-turn-crashed-output", "\"second\"", "\"secons\"", 5);
}

const UPGRADED: [(EventKind, i64, &str); 4] =
    [(Input, 1, ""), (Call, 1, ""), (Output, 1, ""), (End, 2, "")];

#[test]
fn upgraded_resume() {
    let Some(r) = load("upgraded-resume") else {
        return;
    };
    check(
        &r,
        &Expect {
            records: &UPGRADED,
            model_ids: &["3845894835dd7ca5"],
            texts: &HELLO,
            head: "f926dbb0a943",
        },
    );
    // The resumed prefix is crashed-output's records, hashes unchanged.
    let crashed = load("crashed-output").unwrap();
    assert_eq!(r[..3], crashed[..]);
}

#[test]
fn tamper_upgraded_resume() {
    tamper_text("upgraded-resume", "\"COMPLETED\"", "\"COMPLETEE\"", 4);
}

#[test]
fn mixed_completed() {
    let Some(r) = load("mixed-completed") else {
        return;
    };
    let x = "721cca6eababd5be";
    let mut records = UPGRADED.to_vec();
    records.extend([
        (Start, 3, x),
        (Input, 3, x),
        (Call, 3, x),
        (Output, 3, x),
        (End, 3, x),
    ]);
    check(
        &r,
        &Expect {
            records: &records,
            model_ids: &["3845894835dd7ca5", "4c42ee2f6d3d2939"],
            texts: &[
                HELLO[0],
                HELLO[1],
                ("user", "new"),
                ("assistant", "echo:new"),
            ],
            head: "efdfe2a4c045",
        },
    );
    assert_eq!(r[..4], load("upgraded-resume").unwrap()[..]);
    // journal.md §1.5 spells out the EXECUTION_START record.
    assert_eq!(
        String::from_utf8(canon::canonical_record(&r[4].prev_hash, 5, ev(&r[4])).unwrap()).unwrap(),
        r#"{"event":{"execution_id":"721cca6eababd5be","execution_start":{"input_count":"1"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"f926dbb0a94376a5c8bd1bd9adb73013b1a56411f56df175946cad6b178a4874","seq":"5"}"#
    );
    assert_eq!(
        r[4].content_hash,
        "40f6b0ad1e0b3db9f22ea475fdc74f38b2fef8e10a4b1996a0c204b98ab59c31"
    );
}

#[test]
fn tamper_mixed_completed() {
    tamper_text(
        "mixed-completed",
        "\"InputCount\": 1",
        "\"InputCount\": 2",
        5,
    );
}

#[test]
fn mixed_interrupted() {
    let Some(r) = load("mixed-interrupted") else {
        return;
    };
    let x = "d3594a8cff91d240";
    let mut records = UPGRADED.to_vec();
    records.extend([(Start, 3, x), (Input, 3, x), (Call, 3, x), (Output, 3, x)]);
    check(
        &r,
        &Expect {
            records: &records,
            model_ids: &["3845894835dd7ca5", "a2221b5babdbb3c3"],
            texts: &[
                HELLO[0],
                HELLO[1],
                ("user", "new"),
                ("assistant", "echo:new"),
            ],
            head: "5ff8c4ecc5ea",
        },
    );
    assert_eq!(r[..4], load("upgraded-resume").unwrap()[..]);
}

#[test]
fn tamper_mixed_interrupted() {
    tamper_text(
        "mixed-interrupted",
        "a2221b5babdbb3c3",
        "a2221b5babdbb3c2",
        7,
    );
}

/// The four model input hashes the fixtures record (journal.md §4), each
/// rebuilt from the echo harness's request alone.
#[test]
fn recorded_input_hashes() {
    for (input, want) in [
        (
            "hello",
            "2611c24a1a665deca46265ed96d1e1efc699260c9cba9c07f22cda7939232c30",
        ),
        (
            "first",
            "4b650e7caba2b20b67e47b9f3f4314475101bab622ea3d94170222e7705cfd50",
        ),
        (
            "second",
            "a37db3f59391a4d63e846aa58b017c49c59d55e2e03da73849ddcd2a1a74b5ce",
        ),
        (
            "new",
            "403e89a947b27e8d1ce3838a7481b8fc33e51c0e03489bdb745ceab8b02f260d",
        ),
    ] {
        let call = ModelCall {
            model: "echo".into(),
            messages: vec![user_text(input)],
            ..ModelCall::default()
        };
        assert_eq!(
            inputhash::input_hash(&inputhash::from_model_call(&call)).unwrap(),
            want,
            "{input}"
        );
    }
}
