//! Property tests: the fast canonical writer against the pbjson + serde_jcs
//! oracle, stability across protobuf round trips, and no panics on input
//! protojson would refuse.

mod support;

use agentsessions_machine::canon::{self, CanonError};
use agentsessions_proto::v1::{Event, ToolCall, event};
use pbjson_types::value::Kind;
use pbjson_types::{Struct, Value};
use proptest::prelude::*;
use prost::Message as _;
use support::{arb, oracle};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn record_matches_oracle(ev in arb::event(false), prev in arb::prev_hash(), seq in any::<i64>()) {
        let fast = canon::canonical_record(&prev, seq, &ev).expect("valid event");
        let slow = oracle::record(&prev, seq, &ev).expect("oracle accepts valid event");
        prop_assert_eq!(oracle::show(&fast), oracle::show(&slow));
    }

    #[test]
    fn event_matches_oracle(ev in arb::event(false)) {
        let fast = canon::canonical_event(&ev).expect("valid event");
        let slow = oracle::event(&ev).expect("oracle accepts valid event");
        prop_assert_eq!(oracle::show(&fast), oracle::show(&slow));
    }

    #[test]
    fn generic_json_writer_matches_oracle(ev in arb::event(false)) {
        let v = serde_json::to_value(&ev).expect("pbjson serializes valid event");
        let generic = canon::canonical_json_value(&v).expect("generic writer");
        let fast = canon::canonical_event(&ev).expect("valid event");
        prop_assert_eq!(oracle::show(&generic), oracle::show(&fast));
    }

    #[test]
    fn stable_across_protobuf_round_trip(ev in arb::event(false), seq in 1i64..1_000_000) {
        let before = canon::canonical_record("", seq, &ev).expect("valid event");
        let wire = ev.encode_to_vec();
        let back = Event::decode(wire.as_slice()).expect("prost decodes its own output");
        let after = canon::canonical_record("", seq, &back).expect("decoded event");
        prop_assert_eq!(oracle::show(&before), oracle::show(&after));
    }

    #[test]
    fn hash_is_sha256_of_record(ev in arb::event(false), prev in arb::prev_hash(), seq in any::<i64>()) {
        let bytes = canon::canonical_record(&prev, seq, &ev).expect("valid event");
        let hash = canon::content_hash(&prev, seq, &ev).expect("valid event");
        prop_assert_eq!(hash.len(), 64);
        prop_assert_eq!(hash, canon::sha256_hex(&bytes));
    }

    /// Arbitrary (also invalid) events never panic; they canonicalize or
    /// yield a typed error. Where both paths succeed they agree.
    #[test]
    fn wild_events_never_panic(ev in arb::event(true), prev in arb::prev_hash(), seq in any::<i64>()) {
        let fast = canon::canonical_record(&prev, seq, &ev);
        let slow = oracle::record(&prev, seq, &ev);
        match (&fast, &slow) {
            (Ok(f), Ok(s)) => prop_assert_eq!(oracle::show(f), oracle::show(s)),
            (Err(e), _) => prop_assert!(!e.to_string().is_empty()),
            (Ok(_), Err(_)) => {} // unknown enum numbers: pbjson refuses, protojson prints them
        }
        // The event-only form fails exactly when the record form does.
        prop_assert_eq!(canon::canonical_event(&ev).is_ok(), fast.is_ok());
    }

    /// Any non-finite number anywhere in a Struct is a typed error that names
    /// where it sat.
    #[test]
    fn non_finite_numbers_are_typed_errors(
        mut args in arb::structure(false),
        key in arb::text(),
        bad in prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)],
    ) {
        args.fields.insert(key.clone(), Value { kind: Some(Kind::NumberValue(bad)) });
        let ev = Event {
            body: Some(event::Body::Tool(ToolCall { args: Some(args), ..Default::default() })),
            ..Default::default()
        };
        let err = canon::canonical_record("", 1, &ev).unwrap_err();
        let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let path = if plain { format!("tool.args.{key}") } else { format!("tool.args[{key:?}]") };
        prop_assert_eq!(err, CanonError::NonFiniteNumber { path });
        prop_assert!(oracle::record("", 1, &ev).is_err());
    }

    /// Timestamps: the fast path uses the same RFC 3339 form as the wkt type.
    #[test]
    fn timestamps_match_wkt(ts in arb::timestamp(true)) {
        let ev = Event { ts: Some(ts), ..Default::default() };
        match (canon::canonical_event(&ev), ts.to_rfc3339()) {
            (Ok(bytes), Ok(s)) => prop_assert_eq!(oracle::show(&bytes), format!("{{\"ts\":\"{s}\"}}")),
            (Err(e), Err(_)) => prop_assert_eq!(e, CanonError::TimestampOutOfRange { seconds: ts.seconds, nanos: ts.nanos }),
            (fast, wkt) => prop_assert!(false, "fast {:?} vs wkt {:?}", fast, wkt),
        }
    }

    /// Struct key order is UTF-16 code-unit order at every level.
    #[test]
    fn struct_keys_sorted_by_utf16(keys in proptest::collection::vec(arb::text(), 0..8)) {
        let s = Struct {
            fields: keys.iter().map(|k| (k.clone(), Value { kind: Some(Kind::BoolValue(true)) })).collect(),
        };
        let bytes = canon::canonical_struct(&s).expect("plain struct");
        let mut want: Vec<&String> = s.fields.keys().collect();
        want.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
        let mut expected = String::from("{");
        for (i, k) in want.iter().enumerate() {
            if i > 0 { expected.push(','); }
            expected.push_str(&String::from_utf8(serde_jcs::to_vec(k).unwrap()).unwrap());
            expected.push_str(":true");
        }
        expected.push('}');
        prop_assert_eq!(oracle::show(&bytes), expected);
    }
}

/// Calendar edges: every 37th day across years 1..=9999 plus fixed corners
/// (leap days, century rules, the range ends) format like the wkt type.
#[test]
fn timestamp_sweep_matches_wkt() {
    use agentsessions_proto::wkt::{MAX_SECONDS, MIN_SECONDS, Timestamp};
    let corners = [
        (MIN_SECONDS, 0),
        (MAX_SECONDS, 999_999_999),
        (0, 0),
        (-1, 999_999_999),
        (951_782_400, 1_000_000), // 2000-02-29
        (-2_203_891_200, 1_000),  // 1900-03-01
        (1_709_164_800, 1),       // 2024-02-29
    ];
    let sweep = (0..)
        .map(|i: i64| MIN_SECONDS + i * (37 * 86_400 + 3_607))
        .take_while(|s| *s <= MAX_SECONDS)
        .map(|s| (s, (s.rem_euclid(4) * 250_000_000) as i32));
    for (s, n) in corners.into_iter().chain(sweep) {
        let ts = Timestamp::new(s, n);
        let ev = Event {
            ts: Some(ts),
            ..Default::default()
        };
        let got = canon::canonical_event(&ev).unwrap();
        let want = format!("{{\"ts\":\"{}\"}}", ts.to_rfc3339().unwrap());
        assert_eq!(oracle::show(&got), want, "{s} {n}");
    }
}

#[test]
fn value_without_kind_is_a_typed_error() {
    let mut args = Struct::default();
    args.fields.insert(
        "list".into(),
        Value {
            kind: Some(Kind::ListValue(pbjson_types::ListValue {
                values: vec![Value { kind: None }],
            })),
        },
    );
    let ev = Event {
        body: Some(event::Body::Tool(ToolCall {
            args: Some(args),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(
        canon::canonical_event(&ev),
        Err(CanonError::MissingValueKind {
            path: "tool.args.list[0]".into()
        })
    );
}

#[test]
fn deep_nesting_is_a_typed_error_not_a_stack_overflow() {
    let mut v = Value {
        kind: Some(Kind::BoolValue(true)),
    };
    for _ in 0..(canon::MAX_DEPTH + 10) {
        v = Value {
            kind: Some(Kind::ListValue(pbjson_types::ListValue { values: vec![v] })),
        };
    }
    let mut args = Struct::default();
    args.fields.insert("deep".into(), v);
    let ev = Event {
        body: Some(event::Body::Tool(ToolCall {
            args: Some(args),
            ..Default::default()
        })),
        ..Default::default()
    };
    let r = std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(move || {
            let r = canon::canonical_event(&ev);
            drop(ev);
            r
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(
        r,
        Err(CanonError::TooDeep {
            limit: canon::MAX_DEPTH
        })
    );
}
