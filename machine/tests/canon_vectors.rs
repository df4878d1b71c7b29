//! Fixed vectors for the canonical form and content hash, taken from the Go
//! host's tests, its v0.1.2 fixtures and the wire notes. Any difference here
//! means a journal written by one host would not verify on the other.

mod support;

use agentsessions_machine::canon::{self, CanonError};
use agentsessions_proto::v1::{
    ApprovalResult, Capabilities, DataPart, Event, EventKind, ExecutionStart, FilePart, HarnessEnd,
    HarnessSpec, IdentityRef, Lifecycle, Message, ModelCall, Part, ReasoningPart, RemotePlacement,
    Resumability, TextPart, ToolCall, ToolResult, event, file_part, harness_spec, lifecycle, part,
    reasoning_part, tool_result,
};
use agentsessions_proto::wkt::Timestamp;
use pbjson_types::value::Kind;
use pbjson_types::{Struct, Value};
use prost::Message as _;
use support::oracle;

const GOLDEN_HASH: &str = "551bd146050c8d630b0c3b999a4445f3792a470db9bca443d8d4a67706283fcc";

fn record_str(prev: &str, seq: i64, ev: &Event) -> String {
    String::from_utf8(canon::canonical_record(prev, seq, ev).unwrap()).unwrap()
}

fn event_str(ev: &Event) -> String {
    String::from_utf8(canon::canonical_event(ev).unwrap()).unwrap()
}

fn hash(prev: &str, seq: i64, ev: &Event) -> String {
    canon::content_hash(prev, seq, ev).unwrap()
}

/// Checks bytes and hash, and that the oracle agrees on the bytes.
fn check(prev: &str, seq: i64, ev: &Event, bytes: &str, want_hash: &str) {
    assert_eq!(record_str(prev, seq, ev), bytes);
    assert_eq!(oracle::show(&oracle::record(prev, seq, ev).unwrap()), bytes);
    assert_eq!(hash(prev, seq, ev), want_hash);
}

fn text_part(t: &str) -> Part {
    Part {
        part: Some(part::Part::Text(TextPart { text: t.into() })),
    }
}

fn message_event(kind: EventKind, role: &str, text: &str) -> Event {
    Event {
        kind: kind as i32,
        body: Some(event::Body::Message(Message {
            role: role.into(),
            parts: vec![text_part(text)],
        })),
        ..Default::default()
    }
}

fn golden_event() -> Event {
    Event {
        execution_id: "exec-1".into(),
        schema_version: 1,
        ts: Some(Timestamp::new(1_700_000_000, 0)),
        actor: Some(IdentityRef {
            principal: "agent://a".into(),
            issuer: "entra".into(),
            subject: "sub-1".into(),
        }),
        ..message_event(EventKind::EventOutput, "assistant", "hello")
    }
}

fn start_event(id: &str, start: ExecutionStart) -> Event {
    Event {
        execution_id: id.into(),
        kind: EventKind::EventExecutionStart as i32,
        body: Some(event::Body::ExecutionStart(start)),
        ..Default::default()
    }
}

fn input_count(n: Option<i64>) -> ExecutionStart {
    ExecutionStart {
        input_count: n,
        ..Default::default()
    }
}

#[test]
fn golden_output_event() {
    check(
        "",
        1,
        &golden_event(),
        r#"{"event":{"actor":{"issuer":"entra","principal":"agent://a","subject":"sub-1"},"execution_id":"exec-1","kind":"EVENT_OUTPUT","message":{"parts":[{"text":{"text":"hello"}}],"role":"assistant"},"schema_version":1,"ts":"2023-11-14T22:13:20Z"},"prev_hash":"","seq":"1"}"#,
        GOLDEN_HASH,
    );
}

#[test]
fn golden_execution_start_with_config() {
    let ev = start_event(
        "exec-config",
        ExecutionStart {
            config: vec![0x00, 0xff, 0x20, 0x0a, 0x09],
            resume_from_seq: 9_007_199_254_740_993,
            input_count: Some(2),
            ..Default::default()
        },
    );
    check(
        "",
        1,
        &ev,
        r#"{"event":{"execution_id":"exec-config","execution_start":{"config":"AP8gCgk=","input_count":"2","resume_from_seq":"9007199254740993"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"","seq":"1"}"#,
        "aa1f42a26b7a227836d32d31608ebb69c59f3b1c57eadd8537b6faf88a01c790",
    );
}

#[test]
fn golden_execution_start_input_counts() {
    let zero = start_event("exec-default", input_count(Some(0)));
    check(
        "",
        1,
        &zero,
        r#"{"event":{"execution_id":"exec-default","execution_start":{"input_count":"0"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"","seq":"1"}"#,
        "b09cbff45d5a30990c3b72be8b06af6bc509d5a29a849aab5fd42153ef10ec65",
    );
    let two = start_event("exec-default", input_count(Some(2)));
    check(
        "",
        1,
        &two,
        r#"{"event":{"execution_id":"exec-default","execution_start":{"input_count":"2"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"","seq":"1"}"#,
        "f06c25ee5b3673ee23b8f91883c7f1c6c5682d94986caf5bc067908a61b2ac4f",
    );
}

#[test]
fn execution_start_input_count_presence() {
    let form = |n| record_str("", 1, &start_event("", input_count(n)));
    assert_eq!(
        form(None),
        r#"{"event":{"execution_start":{},"kind":"EVENT_EXECUTION_START"},"prev_hash":"","seq":"1"}"#
    );
    assert_eq!(
        form(Some(0)),
        r#"{"event":{"execution_start":{"input_count":"0"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"","seq":"1"}"#
    );
    assert_eq!(
        form(Some(9_007_199_254_740_993)),
        r#"{"event":{"execution_start":{"input_count":"9007199254740993"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"","seq":"1"}"#
    );
}

#[test]
fn every_execution_start_field_is_bound_into_the_hash() {
    let base = ExecutionStart {
        config: vec![0x00, 0xff, 0x20, 0x0a, 0x09],
        resume_from_seq: 9_007_199_254_740_993,
        input_count: Some(2),
        ..Default::default()
    };
    let h = |s: ExecutionStart| hash("", 1, &start_event("exec-config", s));
    let reference = h(base.clone());
    let variants = [
        ExecutionStart {
            config: base.config[..4].to_vec(),
            ..base.clone()
        },
        ExecutionStart {
            resume_from_seq: base.resume_from_seq + 1,
            ..base.clone()
        },
        ExecutionStart {
            input_count: Some(3),
            ..base.clone()
        },
        ExecutionStart {
            input_count: None,
            ..base.clone()
        },
        ExecutionStart {
            harness: "echo".into(),
            ..base.clone()
        },
        ExecutionStart {
            harness_version: "v1".into(),
            ..base.clone()
        },
    ];
    for v in variants {
        assert_ne!(h(v.clone()), reference, "{v:?}");
    }
}

/// The first four records of `completed.json`, hashed from hand-built events.
pub fn completed_events() -> Vec<Event> {
    vec![
        message_event(EventKind::EventInput, "user", "hello"),
        Event {
            kind: EventKind::EventModelCall as i32,
            body: Some(event::Body::Model(ModelCall {
                id: "49072a2a845249ea".into(),
                input_hash: "2611c24a1a665deca46265ed96d1e1efc699260c9cba9c07f22cda7939232c30"
                    .into(),
                model: "echo".into(),
                ..Default::default()
            })),
            ..Default::default()
        },
        message_event(EventKind::EventOutput, "assistant", "echo:hello"),
        Event {
            kind: EventKind::EventEnd as i32,
            body: Some(event::Body::End(HarnessEnd {
                state: "COMPLETED".into(),
                error: None,
            })),
            ..Default::default()
        },
    ]
}

const COMPLETED_HASHES: [&str; 4] = [
    "62daf59c5c1e5062b1b0d47d5665b34aa52bf7ed0ca8a0b016af2c9827b5d8f6",
    "699f567f01dcee2cd3bcf8a6dd4eb4c14400a4b85f5cfd0d285dbb99687dd868",
    "ac9431332cbf3d0d3c6bd24dc7c3d41be4226e5494d24eeaa603cb7a2c895ce7",
    "1b0f72670340a5c139b39a2922bca9fa202e191a4d610f2211f53a501f3ab5fa",
];

#[test]
fn fixture_completed_json_records() {
    let events = completed_events();
    let bodies = [
        r#"{"kind":"EVENT_INPUT","message":{"parts":[{"text":{"text":"hello"}}],"role":"user"}}"#,
        r#"{"kind":"EVENT_MODEL_CALL","model":{"id":"49072a2a845249ea","input_hash":"2611c24a1a665deca46265ed96d1e1efc699260c9cba9c07f22cda7939232c30","model":"echo"}}"#,
        r#"{"kind":"EVENT_OUTPUT","message":{"parts":[{"text":{"text":"echo:hello"}}],"role":"assistant"}}"#,
        r#"{"end":{"state":"COMPLETED"},"kind":"EVENT_END"}"#,
    ];
    let mut prev = String::new();
    for (i, ev) in events.iter().enumerate() {
        let seq = i as i64 + 1;
        let bytes = format!(
            r#"{{"event":{},"prev_hash":"{prev}","seq":"{seq}"}}"#,
            bodies[i]
        );
        check(&prev, seq, ev, &bytes, COMPLETED_HASHES[i]);
        prev = COMPLETED_HASHES[i].to_owned();
    }
}

#[test]
fn fixture_mixed_completed_execution_start() {
    let ev = start_event("721cca6eababd5be", input_count(Some(1)));
    let prev = "f926dbb0a94376a5c8bd1bd9adb73013b1a56411f56df175946cad6b178a4874";
    check(
        prev,
        5,
        &ev,
        r#"{"event":{"execution_id":"721cca6eababd5be","execution_start":{"input_count":"1"},"kind":"EVENT_EXECUTION_START"},"prev_hash":"f926dbb0a94376a5c8bd1bd9adb73013b1a56411f56df175946cad6b178a4874","seq":"5"}"#,
        "40f6b0ad1e0b3db9f22ea475fdc74f38b2fef8e10a4b1996a0c204b98ab59c31",
    );
}

#[test]
fn fork_marker_after_completed_json() {
    let ev = Event {
        kind: EventKind::EventLifecycle as i32,
        body: Some(event::Body::Lifecycle(Lifecycle {
            kind: lifecycle::Kind::LifecycleFork as i32,
            detail: "parent@4".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let prev = COMPLETED_HASHES[3];
    check(
        prev,
        5,
        &ev,
        &format!(
            r#"{{"event":{{"kind":"EVENT_LIFECYCLE","lifecycle":{{"detail":"parent@4","kind":"LIFECYCLE_FORK"}}}},"prev_hash":"{prev}","seq":"5"}}"#
        ),
        "f1ba0ef364ed9bf64dfca3506a0b6e14703d94413e476a5a2484472ebd2d6e44",
    );
}

#[test]
fn chain_binding_golden_rehashed_at_seq_2() {
    let ev = golden_event();
    let at2 = hash(GOLDEN_HASH, 2, &ev);
    assert_eq!(
        at2,
        "a87f4d643fdd0104e49878c5259c26a13160c9bb980ef70888ed7975ae11d992"
    );
    assert_ne!(at2, hash("", 1, &ev));
    assert_eq!(at2, hash(GOLDEN_HASH, 2, &ev));
    // prev and seq each matter on their own.
    assert_ne!(hash(GOLDEN_HASH, 1, &ev), hash("", 1, &ev));
    assert_ne!(hash("", 2, &ev), hash("", 1, &ev));
}

fn tool_result_c1() -> Event {
    Event {
        kind: EventKind::EventToolResult as i32,
        body: Some(event::Body::Result(ToolResult {
            id: "c1".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn approval_result_c1() -> Event {
    Event {
        kind: EventKind::EventApprovalResult as i32,
        body: Some(event::Body::ApprovalResult(ApprovalResult {
            tool_call_id: "c1".into(),
            reason: "no".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[test]
fn wire_tool_result_and_approval_result_vectors() {
    check(
        "",
        1,
        &tool_result_c1(),
        r#"{"event":{"kind":"EVENT_TOOL_RESULT","result":{"id":"c1"}},"prev_hash":"","seq":"1"}"#,
        "2eddf9826b382796691c15da8ee7dd6af7b41dbab55c949f131ed2933e0b0d8e",
    );
    check(
        "",
        1,
        &approval_result_c1(),
        r#"{"event":{"approval_result":{"reason":"no","tool_call_id":"c1"},"kind":"EVENT_APPROVAL_RESULT"},"prev_hash":"","seq":"1"}"#,
        "c36a909b1ea5f243536ff6b4f1770e99e47b35cb1dfb94c2e943b85a42206bea",
    );
}

#[test]
fn wire_event_only_forms() {
    let denial = Event {
        execution_id: "e1".into(),
        kind: EventKind::EventToolResult as i32,
        body: Some(event::Body::Result(ToolResult {
            id: "c1".into(),
            is_error: true,
            code: tool_result::Code::ApprovalDenied as i32,
            approval_request_seq: 9_007_199_254_740_993,
            approval_decision_seq: 9_007_199_254_740_994,
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(
        event_str(&denial),
        r#"{"execution_id":"e1","kind":"EVENT_TOOL_RESULT","result":{"approval_decision_seq":"9007199254740994","approval_request_seq":"9007199254740993","code":"APPROVAL_DENIED","id":"c1","is_error":true}}"#
    );
    let decision = Event {
        execution_id: "e1".into(),
        kind: EventKind::EventApprovalResult as i32,
        actor: Some(IdentityRef {
            principal: "human".into(),
            ..Default::default()
        }),
        body: Some(event::Body::ApprovalResult(ApprovalResult {
            tool_call_id: "c1".into(),
            reason: "no".into(),
            request_seq: 9_007_199_254_740_993,
            approved: false,
        })),
        ..Default::default()
    };
    assert_eq!(
        event_str(&decision),
        r#"{"actor":{"principal":"human"},"approval_result":{"reason":"no","request_seq":"9007199254740993","tool_call_id":"c1"},"execution_id":"e1","kind":"EVENT_APPROVAL_RESULT"}"#
    );
}

/// Go's deterministic marshal writes fields in ascending number order. prost
/// writes a oneof at the position of its lowest tag (8 for `body`), so an
/// event with both `actor` (18) and `execution_start` (19) would differ from
/// Go byte-wise; these single-body vectors are not affected.
#[test]
fn wire_binary_protobuf_vectors() {
    assert_eq!(
        hex::encode(tool_result_c1().encode_to_vec()),
        "38055a040a026331"
    );
    assert_eq!(
        hex::encode(approval_result_c1().encode_to_vec()),
        "38076a080a0263311a026e6f"
    );
}

#[test]
fn registry_spec_digest_vector() {
    let spec = HarnessSpec {
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            ..Default::default()
        }),
        descriptor_id: "echo".into(),
        placement: Some(harness_spec::Placement::Remote(RemotePlacement {
            address: "127.0.0.1:9000".into(),
        })),
    };
    assert_eq!(
        canon::spec_digest(&spec).unwrap(),
        "sha256:f0c96c8b67d5dc75be557f64ccd59496eaf9cfb102754ee54e9d4c571eb2eafc"
    );
    let v = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        String::from_utf8(canon::canonical_json_value(&v).unwrap()).unwrap(),
        r#"{"capabilities":{"resumability":"RESUMABILITY_STATELESS_REPLAY"},"descriptor_id":"echo","remote":{"address":"127.0.0.1:9000"}}"#
    );
}

fn num(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

#[test]
fn jcs_edge_cases_in_struct_values() {
    let fields = [
        ("big", num(1e21)),
        ("ctl", string("a\u{1}\u{7f}\"\\/\u{2028}<")),
        ("e20", num(1e20)),
        ("frac", num(0.1 + 0.2)),
        ("micro", num(0.000001)),
        ("negzero", num(-0.0)),
        ("one", num(1.0)),
        ("p53", num(9_007_199_254_740_992.0)),
        ("small", num(1e-7)),
        ("é", string("e-acute")),
        ("😀", string("astral")),
        ("\u{e000}", string("pua")),
        ("tabs\t\n\r\u{8}\u{c}\u{0}", string("\u{1f}")),
    ];
    let ev = Event {
        body: Some(event::Body::Result(ToolResult {
            id: "edge".into(),
            output: Some(Struct {
                fields: fields
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            }),
            ..Default::default()
        })),
        ..Default::default()
    };
    let want = concat!(
        r#"{"result":{"id":"edge","output":{"big":1e+21,"ctl":"a\u0001"#,
        "\u{7f}",
        r#"\"\\/"#,
        "\u{2028}",
        r#"<","e20":100000000000000000000,"frac":0.30000000000000004,"micro":0.000001,"negzero":0,"one":1,"p53":9007199254740992,"small":1e-7,"tabs\t\n\r\b\f\u0000":"\u001f","é":"e-acute","😀":"astral","#,
        "\"\u{e000}\"",
        r#":"pua"}}}"#
    );
    assert_eq!(event_str(&ev), want);
    assert_eq!(oracle::show(&oracle::event(&ev).unwrap()), want);
}

#[test]
fn set_oneof_members_are_written_even_when_empty() {
    let parts = vec![
        Part {
            part: Some(part::Part::Text(TextPart::default())),
        },
        Part {
            part: Some(part::Part::File(FilePart {
                source: Some(file_part::Source::Uri(String::new())),
                ..Default::default()
            })),
        },
        Part {
            part: Some(part::Part::File(FilePart {
                source: Some(file_part::Source::Bytes(Vec::new())),
                ..Default::default()
            })),
        },
        Part {
            part: Some(part::Part::Reasoning(ReasoningPart {
                opaque: Some(reasoning_part::Opaque::OpaqueUri(String::new())),
                summary: vec![Part::default()],
                ..Default::default()
            })),
        },
        Part {
            part: Some(part::Part::Data(DataPart {
                data: Some(Struct::default()),
            })),
        },
        Part { part: None },
    ];
    let ev = Event {
        body: Some(event::Body::Message(Message {
            role: String::new(),
            parts,
        })),
        ..Default::default()
    };
    let want = r#"{"message":{"parts":[{"text":{}},{"file":{"uri":""}},{"file":{"bytes":""}},{"reasoning":{"opaque_uri":"","summary":[{}]}},{"data":{"data":{}}},{}]}}"#;
    assert_eq!(event_str(&ev), want);
    assert_eq!(oracle::show(&oracle::event(&ev).unwrap()), want);
    let empty_end = Event {
        body: Some(event::Body::End(HarnessEnd {
            state: String::new(),
            error: Some(Default::default()),
        })),
        actor: Some(IdentityRef::default()),
        ..Default::default()
    };
    assert_eq!(event_str(&empty_end), r#"{"actor":{},"end":{"error":{}}}"#);
    assert_eq!(event_str(&Event::default()), "{}");
}

#[test]
fn unknown_enum_numbers_are_written_as_numbers() {
    // protojson prints an enum number without a name as a bare JSON number.
    let ev = Event {
        kind: 99,
        schema_version: -7,
        body: Some(event::Body::Tool(ToolCall {
            mediation: -2,
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(
        event_str(&ev),
        r#"{"kind":99,"schema_version":-7,"tool":{"mediation":-2}}"#
    );
}

#[test]
fn string_map_keys_sorted_by_utf16() {
    let ev = Event {
        body: Some(event::Body::Model(ModelCall {
            params: [
                ("\u{e000}", "pua"),
                ("😀", "astral"),
                ("a", "x"),
                ("B", "y"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(
        event_str(&ev),
        "{\"model\":{\"params\":{\"B\":\"y\",\"a\":\"x\",\"😀\":\"astral\",\"\u{e000}\":\"pua\"}}}"
    );
}

#[test]
fn out_of_range_timestamp_is_a_typed_error() {
    let ev = Event {
        ts: Some(Timestamp::new(i64::MAX, 0)),
        ..Default::default()
    };
    assert_eq!(
        canon::content_hash("", 1, &ev),
        Err(CanonError::TimestampOutOfRange {
            seconds: i64::MAX,
            nanos: 0
        })
    );
    let ev = Event {
        ts: Some(Timestamp::new(0, -1)),
        ..Default::default()
    };
    assert!(matches!(
        canon::canonical_event(&ev),
        Err(CanonError::TimestampOutOfRange { .. })
    ));
}

#[test]
fn generic_writer_refuses_unsafe_integers() {
    let v = serde_json::json!({"a": 9_007_199_254_740_993u64});
    assert!(matches!(
        canon::canonical_json_value(&v),
        Err(CanonError::IntegerNotJsonSafe { .. })
    ));
    let v = serde_json::json!({"b": [1, -9_007_199_254_740_992i64, 1.5, null, "x"], "a": {}});
    assert_eq!(
        String::from_utf8(canon::canonical_json_value(&v).unwrap()).unwrap(),
        r#"{"a":{},"b":[1,-9007199254740992,1.5,null,"x"]}"#
    );
}

#[test]
fn deterministic_over_200_runs() {
    let mut ev = golden_event();
    if let Some(event::Body::Message(m)) = &mut ev.body {
        m.parts.push(Part {
            part: Some(part::Part::Data(DataPart {
                data: Some(Struct {
                    fields: (0..20)
                        .map(|i| (format!("k{i}"), num(f64::from(i) / 3.0)))
                        .collect(),
                }),
            })),
        });
    }
    let first = canon::canonical_record(GOLDEN_HASH, 2, &ev).unwrap();
    let first_hash = canon::sha256_hex(&first);
    for _ in 0..200 {
        // A fresh clone rebuilds the HashMap with a new random iteration order.
        let again = ev.clone();
        assert_eq!(
            canon::canonical_record(GOLDEN_HASH, 2, &again).unwrap(),
            first
        );
        assert_eq!(
            canon::content_hash(GOLDEN_HASH, 2, &again).unwrap(),
            first_hash
        );
    }
}
