//! Reading a Go journal never panics: any text, any JSON built from the Go
//! field names, and any byte-level corruption of a valid journal either
//! converts or fails with a typed error.

use agentsessions_machine::{canon, chain};
use agentsessions_testkit::interop;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Every key the Go record format uses, plus a few strangers.
const KEYS: &[&str] = &[
    "Seq",
    "PrevHash",
    "Hash",
    "Fence",
    "Event",
    "ExecutionID",
    "Timestamp",
    "SchemaVersion",
    "Kind",
    "Message",
    "ModelCall",
    "ToolCall",
    "Result",
    "Approval",
    "ApprovalResult",
    "Usage",
    "Lifecycle",
    "End",
    "Err",
    "ExecutionStart",
    "Parked",
    "Actor",
    "Principal",
    "Issuer",
    "Subject",
    "Role",
    "Parts",
    "Text",
    "File",
    "Data",
    "Reasoning",
    "ToolResult",
    "MIME",
    "Bytes",
    "URI",
    "Digest",
    "Name",
    "Provider",
    "ModelID",
    "Opaque",
    "OpaqueURI",
    "OpaqueDigest",
    "Summary",
    "ItemID",
    "Ordinal",
    "ValidityScope",
    "Model",
    "Params",
    "InputHash",
    "ID",
    "Tool",
    "Args",
    "Mediation",
    "IdempotencyKey",
    "Output",
    "OutputURI",
    "OutputDigest",
    "IsError",
    "Error",
    "Content",
    "Code",
    "ApprovalRequestSeq",
    "ApprovalDecisionSeq",
    "ToolCallID",
    "Reason",
    "Approved",
    "RequestSeq",
    "InputTokens",
    "OutputTokens",
    "ReasoningTokens",
    "Detail",
    "Snapshot",
    "Local",
    "ExternalURI",
    "Memory",
    "Sealed",
    "State",
    "Description",
    "Config",
    "ResumeFromSeq",
    "InputCount",
    "Harness",
    "HarnessVersion",
    "seq",
    "",
    "\u{2028}",
];

/// Strings that are meaningful somewhere in the format.
const STRINGS: &[&str] = &[
    "INPUT",
    "OUTPUT",
    "MODEL_CALL",
    "END",
    "EXECUTION_START",
    "FORK",
    "REQUIRES_APPROVAL",
    "0001-01-01T00:00:00Z",
    "2023-11-14T22:13:20.123456789+05:30",
    "9999-12-31T23:59:59Z",
    "0000-01-01T00:00:00Z",
    "AP8gCgk=",
    "cg==",
    "not base64",
    "",
    "<&>",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("json numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(STRINGS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_ish() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// An event object whose members are mostly bodies, each an object of
/// Go-named fields, so conversion gets past decoding often.
fn event_ish() -> impl Strategy<Value = Value> {
    let member = prop::collection::vec((prop::sample::select(KEYS), json_ish()), 0..6)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    let body = prop_oneof![
        4 => member,
        1 => json_ish(),
    ];
    prop::collection::vec((prop::sample::select(&KEYS[5..22]), body), 0..4)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// Converts, and when that succeeds hashes and verifies too: none of it may
/// panic, whatever the outcome.
fn exercise(text: &str) {
    if let Ok(records) = interop::parse_go_records(text) {
        for r in &records {
            if let Some(ev) = &r.event {
                let _ = canon::content_hash(&r.prev_hash, r.seq, ev);
            }
        }
        let _ = chain::verify(&records);
    }
}

const SAMPLE: &str = r#"[
  {"Seq": 1, "PrevHash": "", "Hash": "62daf59c5c1e5062b1b0d47d5665b34aa52bf7ed0ca8a0b016af2c9827b5d8f6", "Fence": 1,
   "Event": {"ExecutionID": "", "Timestamp": "0001-01-01T00:00:00Z", "SchemaVersion": 0, "Kind": "INPUT",
     "Message": {"Role": "user", "Parts": [{"Text": {"Text": "hello"}, "File": null, "Data": {"a": [1.5, "x"]}, "Reasoning": null}]},
     "ModelCall": null, "ToolCall": {"ID": "c", "Args": {"n": 2}}, "Result": null, "Approval": null,
     "ApprovalResult": null, "Usage": null, "Lifecycle": null, "End": null, "Err": null,
     "ExecutionStart": {"Config": "AP8gCgk=", "ResumeFromSeq": 0, "InputCount": 1},
     "Actor": {"Principal": "", "Issuer": "", "Subject": ""}}}
]"#;

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,256}") {
        exercise(&text);
    }

    #[test]
    fn arbitrary_json_never_panics(records in prop::collection::vec(json_ish(), 0..4)) {
        exercise(&Value::Array(records).to_string());
    }

    #[test]
    fn record_shaped_json_never_panics(event in prop_oneof![json_ish(), event_ish()], seq in any::<i64>(), fence in any::<i64>()) {
        let doc = serde_json::json!([{"Seq": seq, "PrevHash": "", "Hash": "", "Fence": fence, "Event": event}]);
        exercise(&doc.to_string());
    }

    #[test]
    fn corrupted_journal_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)
    ) {
        let mut bytes = SAMPLE.as_bytes().to_vec();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        exercise(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn sample_is_valid() {
    let records = interop::parse_go_records(SAMPLE).unwrap();
    assert_eq!(records.len(), 1);
}
