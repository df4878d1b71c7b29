//! Go record conversion rule by rule, on hand-written Go JSON: every body
//! type, the first-body-wins order, the dropped zero values, the enum
//! string mappings and the typed errors.

use agentsessions_machine::canon;
use agentsessions_proto::v1::{Event, LogRecord, event};
use agentsessions_proto::wkt::Timestamp;
use agentsessions_testkit::interop::{
    GoEvent, GoEventError, GoRecordError, GoValue, go_event_to_proto, go_types::GoToolResult,
    parse_go_records,
};

/// Parses one Go record whose `Event` object is `event` and returns it.
fn one(event: &str) -> LogRecord {
    let json = format!(r#"[{{"Seq":1,"PrevHash":"","Hash":"h","Fence":1,"Event":{event}}}]"#);
    let mut records = parse_go_records(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(records.len(), 1);
    records.remove(0)
}

fn event_of(event: &str) -> Event {
    one(event).event.unwrap()
}

/// The canonical (hashed) form of the converted event.
fn canonical(event: &str) -> String {
    String::from_utf8(canon::canonical_event(&event_of(event)).unwrap()).unwrap()
}

#[test]
fn record_fields_are_carried_verbatim() {
    let json = r#"[{"Seq":7,"PrevHash":"p","Hash":"h","Fence":3,"Event":{"Kind":"INPUT"}}]"#;
    let r = &parse_go_records(json).unwrap()[0];
    assert_eq!(
        (
            r.seq,
            r.prev_hash.as_str(),
            r.content_hash.as_str(),
            r.fence
        ),
        (7, "p", "h", 3)
    );
}

#[test]
fn empty_and_null_documents_are_empty_journals() {
    assert_eq!(parse_go_records("[]").unwrap(), vec![]);
    assert_eq!(parse_go_records("null").unwrap(), vec![]);
}

#[test]
fn header_fields() {
    assert_eq!(
        canonical(
            r#"{"ExecutionID":"e1","Timestamp":"2023-11-14T22:13:20Z","SchemaVersion":1,"Kind":"OUTPUT",
               "Message":{"Role":"assistant","Parts":[{"Text":{"Text":"hello"}}]},
               "Actor":{"Principal":"agent://a","Issuer":"entra","Subject":"sub-1"}}"#
        ),
        r#"{"actor":{"issuer":"entra","principal":"agent://a","subject":"sub-1"},"execution_id":"e1","kind":"EVENT_OUTPUT","message":{"parts":[{"text":{"text":"hello"}}],"role":"assistant"},"schema_version":1,"ts":"2023-11-14T22:13:20Z"}"#
    );
    // The published golden vector (journal.md §1.5).
    let r = one(
        r#"{"ExecutionID":"exec-1","Timestamp":"2023-11-14T22:13:20Z","SchemaVersion":1,"Kind":"OUTPUT",
            "Message":{"Role":"assistant","Parts":[{"Text":{"Text":"hello"}}]},
            "Actor":{"Principal":"agent://a","Issuer":"entra","Subject":"sub-1"}}"#,
    );
    assert_eq!(
        canon::content_hash("", 1, r.event.as_ref().unwrap()).unwrap(),
        "551bd146050c8d630b0c3b999a4445f3792a470db9bca443d8d4a67706283fcc"
    );
}

#[test]
fn zero_time_and_empty_actor_are_dropped() {
    let e = event_of(
        r#"{"Timestamp":"0001-01-01T00:00:00Z","Kind":"END","End":{"State":"COMPLETED"},
            "Actor":{"Principal":"","Issuer":"","Subject":""}}"#,
    );
    assert_eq!((e.ts, e.actor), (None, None));
    // The same instant in another zone is still Go's zero time.
    assert_eq!(
        event_of(r#"{"Timestamp":"0001-01-01T02:00:00+02:00"}"#).ts,
        None
    );
    // A partly filled actor keeps only what is set.
    assert_eq!(
        canonical(r#"{"Actor":{"Principal":"human"}}"#),
        r#"{"actor":{"principal":"human"}}"#
    );
    let e = event_of(r#"{"Timestamp":"2024-01-01T00:00:00.25-01:00"}"#);
    assert_eq!(e.ts, Some(Timestamp::new(1_704_070_800, 250_000_000)));
}

#[test]
fn null_and_missing_fields_are_zero_values() {
    let e = event_of(
        r#"{"ExecutionID":null,"Timestamp":null,"SchemaVersion":null,"Kind":null,"Actor":null,"Unknown":[1]}"#,
    );
    assert_eq!(e, Event::default());
    assert_eq!(event_of("{}"), Event::default());
    assert_eq!(event_of("null"), Event::default());
}

#[test]
fn kind_strings_map_by_prefix() {
    for (go, proto) in [
        ("INPUT", "EVENT_INPUT"),
        ("MODEL_CALL", "EVENT_MODEL_CALL"),
        ("OUTPUT", "EVENT_OUTPUT"),
        ("TOOL_CALL", "EVENT_TOOL_CALL"),
        ("TOOL_RESULT", "EVENT_TOOL_RESULT"),
        ("APPROVAL_REQUEST", "EVENT_APPROVAL_REQUEST"),
        ("APPROVAL_RESULT", "EVENT_APPROVAL_RESULT"),
        ("USAGE", "EVENT_USAGE"),
        ("LIFECYCLE", "EVENT_LIFECYCLE"),
        ("END", "EVENT_END"),
        ("ERROR", "EVENT_ERROR"),
        ("EXECUTION_START", "EVENT_EXECUTION_START"),
        ("PARKED", "EVENT_PARKED"),
    ] {
        assert_eq!(
            canonical(&format!(r#"{{"Kind":"{go}"}}"#)),
            format!(r#"{{"kind":"{proto}"}}"#)
        );
    }
    // Unknown, proto-style and empty kinds are unspecified, so absent.
    for odd in ["", "EVENT_INPUT", "input", "BOGUS", "KIND_UNSPECIFIED"] {
        assert_eq!(event_of(&format!(r#"{{"Kind":"{odd}"}}"#)).kind, 0, "{odd}");
    }
}

/// Every body, in Go's precedence order, as a Go JSON member and the
/// canonical form it must produce.
const BODIES: [(&str, &str); 12] = [
    (
        r#""Message":{"Role":"user","Parts":null}"#,
        r#""message":{"role":"user"}"#,
    ),
    (
        r#""ModelCall":{"Model":"m","Params":{"t":"0"},"InputHash":"ih","ID":"id"}"#,
        r#""model":{"id":"id","input_hash":"ih","model":"m","params":{"t":"0"}}"#,
    ),
    (
        r#""ToolCall":{"ID":"c1","Tool":"t","Args":{"n":2,"s":"x"},"Mediation":"CONTROLLER_MEDIATED","IdempotencyKey":"k"}"#,
        r#""tool":{"args":{"n":2,"s":"x"},"id":"c1","idempotency_key":"k","mediation":"MEDIATION_CONTROLLER_MEDIATED","tool":"t"}"#,
    ),
    (
        r#""Result":{"ID":"c1","Output":{"ok":true},"OutputURI":"u","OutputDigest":"d","IsError":true,"Error":"e","Content":[{"Text":{"Text":"c"}}],"Code":1,"ApprovalRequestSeq":9007199254740993,"ApprovalDecisionSeq":5}"#,
        r#""result":{"approval_decision_seq":"5","approval_request_seq":"9007199254740993","code":"APPROVAL_DENIED","content":[{"text":{"text":"c"}}],"error":"e","id":"c1","is_error":true,"output":{"ok":true},"output_digest":"d","output_uri":"u"}"#,
    ),
    (
        r#""Approval":{"ToolCallID":"c1","Reason":"why"}"#,
        r#""approval":{"reason":"why","tool_call_id":"c1"}"#,
    ),
    (
        r#""ApprovalResult":{"ToolCallID":"c1","Approved":true,"Reason":"ok","RequestSeq":4}"#,
        r#""approval_result":{"approved":true,"reason":"ok","request_seq":"4","tool_call_id":"c1"}"#,
    ),
    (
        r#""Usage":{"Model":"m","InputTokens":1,"OutputTokens":2,"ReasoningTokens":3}"#,
        r#""usage":{"input_tokens":"1","model":"m","output_tokens":"2","reasoning_tokens":"3"}"#,
    ),
    (
        r#""Lifecycle":{"Kind":"SUSPEND","Detail":"d","Snapshot":{"Local":"l","ExternalURI":"x","Memory":true,"Sealed":true}}"#,
        r#""lifecycle":{"detail":"d","kind":"LIFECYCLE_SUSPEND","snapshot_external_uri":"x","snapshot_local":"l","snapshot_memory":true,"snapshot_sealed":true}"#,
    ),
    (
        r#""End":{"State":"FAILED","Error":{"Code":3,"Description":"boom"}}"#,
        r#""end":{"error":{"code":3,"description":"boom"},"state":"FAILED"}"#,
    ),
    (
        r#""Err":{"Code":0,"Description":"bad"}"#,
        r#""error":{"description":"bad"}"#,
    ),
    (
        r#""ExecutionStart":{"Config":"AP8gCgk=","ResumeFromSeq":9007199254740993,"InputCount":2,"Harness":"echo","HarnessVersion":"1"}"#,
        r#""execution_start":{"config":"AP8gCgk=","harness":"echo","harness_version":"1","input_count":"2","resume_from_seq":"9007199254740993"}"#,
    ),
    (
        r#""Parked":{"ExecutionID":"e","ToolCallID":"c1","RequestSeq":3}"#,
        r#""parked":{"execution_id":"e","request_seq":"3","tool_call_id":"c1"}"#,
    ),
];

#[test]
fn every_body_converts() {
    for (go, want) in BODIES {
        assert_eq!(
            canonical(&format!("{{{go}}}")),
            format!("{{{want}}}"),
            "{go}"
        );
    }
}

/// With bodies i.. all set, body i is the one carried; the rest are dropped.
#[test]
fn first_non_nil_body_wins() {
    for i in 0..BODIES.len() {
        let members: Vec<&str> = BODIES[i..].iter().map(|(go, _)| *go).collect();
        // Go writes the members in declaration order; reversing them shows
        // the precedence does not depend on key order.
        let mut reversed = members.clone();
        reversed.reverse();
        for order in [members, reversed] {
            assert_eq!(
                canonical(&format!("{{{}}}", order.join(","))),
                format!("{{{}}}", BODIES[i].1),
                "from body {i}"
            );
        }
    }
}

#[test]
fn set_but_empty_bodies_are_still_carried() {
    assert_eq!(canonical(r#"{"Err":{}}"#), r#"{"error":{}}"#);
    assert_eq!(
        canonical(
            r#"{"Kind":"EXECUTION_START","ExecutionStart":{"Config":null,"ResumeFromSeq":0,"InputCount":null}}"#
        ),
        r#"{"execution_start":{},"kind":"EVENT_EXECUTION_START"}"#
    );
    assert_eq!(
        canonical(r#"{"ExecutionStart":{"InputCount":0}}"#),
        r#"{"execution_start":{"input_count":"0"}}"#
    );
    assert!(matches!(
        event_of(r#"{"Message":null,"End":{}}"#).body,
        Some(event::Body::End(_))
    ));
}

#[test]
fn enum_strings_of_lifecycle_and_mediation() {
    for (go, proto) in [
        ("SUSPEND", "LIFECYCLE_SUSPEND"),
        ("RESUME", "LIFECYCLE_RESUME"),
        ("FORK", "LIFECYCLE_FORK"),
        ("BASELINE", "LIFECYCLE_BASELINE"),
        ("CANCEL", "LIFECYCLE_CANCEL"),
    ] {
        assert_eq!(
            canonical(&format!(r#"{{"Lifecycle":{{"Kind":"{go}"}}}}"#)),
            format!(r#"{{"lifecycle":{{"kind":"{proto}"}}}}"#)
        );
    }
    assert_eq!(
        canonical(r#"{"Lifecycle":{"Kind":"NAP","Detail":"x","Snapshot":null}}"#),
        r#"{"lifecycle":{"detail":"x"}}"#
    );
    for (go, proto) in [
        ("IN_HARNESS_REPORTED", "MEDIATION_IN_HARNESS_REPORTED"),
        ("CONTROLLER_MEDIATED", "MEDIATION_CONTROLLER_MEDIATED"),
        ("REQUIRES_APPROVAL", "MEDIATION_REQUIRES_APPROVAL"),
    ] {
        assert_eq!(
            canonical(&format!(
                r#"{{"ToolCall":{{"ID":"c","Mediation":"{go}"}}}}"#
            )),
            format!(r#"{{"tool":{{"id":"c","mediation":"{proto}"}}}}"#)
        );
    }
    assert_eq!(
        canonical(r#"{"ToolCall":{"ID":"c","Mediation":"SOMEONE"}}"#),
        r#"{"tool":{"id":"c"}}"#
    );
}

fn part(go_part: &str) -> String {
    let c = canonical(&format!(
        r#"{{"Message":{{"Role":"r","Parts":[{go_part}]}}}}"#
    ));
    c.strip_prefix(r#"{"message":{"parts":["#)
        .and_then(|s| s.strip_suffix(r#"],"role":"r"}}"#))
        .unwrap_or_else(|| panic!("{c}"))
        .to_owned()
}

#[test]
fn parts() {
    assert_eq!(
        part(r#"{"Text":{"Text":""},"File":null,"Data":null,"Reasoning":null}"#),
        r#"{"text":{}}"#
    );
    assert_eq!(
        part(r#"{"Text":null,"File":null,"Data":null,"Reasoning":null}"#),
        "{}"
    );
    // Bytes win over a URI; an empty byte string falls back to the URI.
    assert_eq!(
        part(
            r#"{"File":{"MIME":"image/png","Bytes":"AQI=","URI":"s3://x","Digest":"sha256:aa","Name":"img"}}"#
        ),
        r#"{"file":{"bytes":"AQI=","digest":"sha256:aa","mime":"image/png","name":"img"}}"#
    );
    assert_eq!(
        part(r#"{"File":{"MIME":"m","Bytes":"","URI":"s3://x"}}"#),
        r#"{"file":{"mime":"m","uri":"s3://x"}}"#
    );
    assert_eq!(
        part(r#"{"File":{"Bytes":null,"URI":""}}"#),
        r#"{"file":{}}"#
    );
    assert_eq!(
        part(r#"{"Data":{"b":1.5,"a":"x","n":null,"l":[1,{"z":false}],"o":{}}}"#),
        r#"{"data":{"data":{"a":"x","b":1.5,"l":[1,{"z":false}],"n":null,"o":{}}}}"#
    );
    assert_eq!(part(r#"{"Data":{}}"#), r#"{"data":{"data":{}}}"#);
    assert_eq!(
        part(
            r#"{"Reasoning":{"Provider":"p","ModelID":"m","Opaque":"cg==","OpaqueURI":"u","OpaqueDigest":"d",
                "Summary":[{"Text":{"Text":"brief"}}],"ItemID":"rs_1","Ordinal":1,"ValidityScope":"e1"}}"#
        ),
        r#"{"reasoning":{"item_id":"rs_1","model_id":"m","opaque_bytes":"cg==","opaque_digest":"d","ordinal":1,"provider":"p","summary":[{"text":{"text":"brief"}}],"validity_scope":"e1"}}"#
    );
    assert_eq!(
        part(r#"{"Reasoning":{"Opaque":null,"OpaqueURI":"u"}}"#),
        r#"{"reasoning":{"opaque_uri":"u"}}"#
    );
    assert_eq!(
        part(r#"{"ToolCall":{"ID":"c1","Tool":"t","Args":null}}"#),
        r#"{"tool_call":{"id":"c1","tool":"t"}}"#
    );
    assert_eq!(
        part(r#"{"ToolResult":{"ID":"c1","Output":{}}}"#),
        r#"{"tool_result":{"id":"c1","output":{}}}"#
    );
    // Several members set: the first in declaration order is carried.
    assert_eq!(
        part(r#"{"ToolResult":{"ID":"r"},"Data":{"k":1},"File":{"URI":"u"}}"#),
        r#"{"file":{"uri":"u"}}"#
    );
}

#[test]
fn base64_follows_go_decoding() {
    // Go ignores line breaks inside base64 text.
    assert_eq!(
        canonical(r#"{"ExecutionStart":{"Config":"AP8g\r\nCgk="}}"#),
        r#"{"execution_start":{"config":"AP8gCgk="}}"#
    );
    for bad in [r#""AP8gCgk""#, r#""A===""#, r#""*""#, "12"] {
        let json = format!(r#"[{{"Event":{{"ExecutionStart":{{"Config":{bad}}}}}}}]"#);
        assert!(
            matches!(
                parse_go_records(&json),
                Err(GoRecordError::Decode { index: 0, .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn struct_integers_beyond_2_pow_53_are_refused() {
    // 2^53 itself is exact.
    assert_eq!(
        part(r#"{"Data":{"n":9007199254740992,"m":-9007199254740992}}"#),
        r#"{"data":{"data":{"m":-9007199254740992,"n":9007199254740992}}}"#
    );
    let json = r#"[{"Seq":1,"Event":{}},{"Seq":5,"Event":{"ToolCall":{"Args":{"deep":[{"n":9007199254740993}]}}}}]"#;
    let err = parse_go_records(json).unwrap_err();
    assert_eq!(
        err,
        GoRecordError::Convert {
            index: 1,
            seq: 5,
            source: GoEventError::UnsafeInteger {
                field: "ToolCall.Args",
                value: 9_007_199_254_740_993,
            },
        }
    );
    assert_eq!(
        err.to_string(),
        "record 1 (seq 5): integer 9007199254740993 in ToolCall.Args is beyond 2^53"
    );
    // Hand-built values can hold what JSON cannot.
    let ev = GoEvent {
        result: Some(GoToolResult {
            output: Some([("x".to_owned(), GoValue::Number(f64::NAN))].into()),
            ..GoToolResult::default()
        }),
        ..GoEvent::default()
    };
    assert_eq!(
        go_event_to_proto(&ev),
        Err(GoEventError::NonFiniteNumber {
            field: "ToolResult.Output"
        })
    );
}

#[test]
fn struct_floats_are_correctly_rounded() {
    // Inputs whose nearest double is hard to find by a fast path.
    for lit in [
        "0.1",
        "2.2250738585072011e-308",
        "9007199254740993.0",
        "1.7976931348623157e308",
        "0.30000000000000004440892098500626161694526672363281",
        "123456789012345678901234567890",
        "4.9406564584124654e-324",
        "7.038531e-26",
    ] {
        let e = event_of(&format!(
            r#"{{"Message":{{"Parts":[{{"Data":{{"v":{lit}}}}}]}}}}"#
        ));
        let Some(event::Body::Message(m)) = e.body else {
            panic!()
        };
        let Some(agentsessions_proto::v1::part::Part::Data(d)) = &m.parts[0].part else {
            panic!()
        };
        let v = &d.data.as_ref().unwrap().fields["v"];
        let Some(pbjson_types::value::Kind::NumberValue(n)) = v.kind else {
            panic!()
        };
        assert_eq!(n.to_bits(), lit.parse::<f64>().unwrap().to_bits(), "{lit}");
    }
}

#[test]
fn errors_name_the_record() {
    let cases: [(&str, &str); 6] = [
        ("{", "go journal is not a json array: "),
        (r#"{"Seq":1}"#, "go journal is not a json array: "),
        (
            r#"[{"Seq":1},{"Seq":"2"}]"#,
            "record 1: invalid type: string \"2\"",
        ),
        (r#"[{"Seq":1.5}]"#, "record 0: invalid type: floating point"),
        (
            r#"[{},{},{"Event":{"Timestamp":"yesterday"}}]"#,
            "record 2: invalid timestamp \"yesterday\"",
        ),
        (
            r#"[{"Event":{"SchemaVersion":4294967296}}]"#,
            "record 0: invalid value: integer `4294967296`",
        ),
    ];
    for (json, prefix) in cases {
        let msg = parse_go_records(json).unwrap_err().to_string();
        assert!(msg.starts_with(prefix), "{json}: {msg}");
    }
}

#[test]
fn repeated_keys_keep_the_last_value_as_go_does() {
    let e = event_of(
        r#"{"ExecutionID":"a","ExecutionID":"b","Message":{"Parts":[{"Data":{"k":1,"k":2}}]}}"#,
    );
    assert_eq!(e.execution_id, "b");
    assert_eq!(
        canonical(r#"{"Message":{"Parts":[{"Data":{"k":1,"k":2}}]}}"#),
        r#"{"message":{"parts":[{"data":{"data":{"k":2}}}]}}"#
    );
}
