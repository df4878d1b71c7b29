//! Target `canonical`: the fast canonical writer against the slow oracle.
//!
//! The oracle is pbjson's generated proto3-JSON serde for `Event`, into a
//! `serde_json::Value`, then `serde_jcs`: independent of the hand-written
//! writer in `canon`, which the chain hash depends on. Events come from the
//! structured generator (valid or wild) or from arbitrary protobuf bytes.

use agentsessions_proto::v1::Event;
use arbitrary::{Result, Unstructured};
use prost::Message as _;

use super::draw;
use agentsessions_machine::canon::{self, CanonError};

/// The target body.
pub fn canonical(data: &[u8]) {
    // Out of data is the only error; it just ends the input.
    let _ = run(&mut Unstructured::new(data));
}

#[derive(serde::Serialize)]
struct Envelope<'a> {
    event: &'a Event,
    prev_hash: &'a str,
    seq: String,
}

/// JCS(proto3-JSON(event)) by way of pbjson and serde_jcs.
pub fn oracle_event(ev: &Event) -> Result<Vec<u8>, String> {
    let v = serde_json::to_value(ev).map_err(|e| e.to_string())?;
    serde_jcs::to_vec(&v).map_err(|e| e.to_string())
}

/// The canonical record bytes by way of pbjson and serde_jcs.
pub fn oracle_record(prev_hash: &str, seq: i64, ev: &Event) -> Result<Vec<u8>, String> {
    let env = Envelope {
        event: ev,
        prev_hash,
        seq: seq.to_string(),
    };
    let v = serde_json::to_value(&env).map_err(|e| e.to_string())?;
    serde_jcs::to_vec(&v).map_err(|e| e.to_string())
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mode = u.int_in_range(0..=3u8)?;
    let wild = mode >= 2;
    let ev = match mode {
        0 | 1 => draw::event(u, false)?,
        2 => draw::event(u, true)?,
        _ => {
            let split = u.int_in_range(0..=u.len())?;
            let bytes = u.bytes(split)?;
            match Event::decode(bytes) {
                Ok(ev) => ev,
                Err(_) => return Ok(()),
            }
        }
    };
    let prev = match u.int_in_range(0..=2u8)? {
        0 => String::new(),
        1 => canon::hex_lower(u.bytes(32)?),
        _ => draw::text(u)?,
    };
    let seq = if u.arbitrary()? {
        u.arbitrary()?
    } else {
        u.int_in_range(1..=1000)?
    };
    check(&ev, &prev, seq, wild);
    Ok(())
}

/// Every property of one event's canonical form.
fn check(ev: &Event, prev: &str, seq: i64, wild: bool) {
    let fast_event = canon::canonical_event(ev);
    let fast_record = canon::canonical_record(prev, seq, ev);
    assert_eq!(
        fast_event.is_ok(),
        fast_record.is_ok(),
        "the event form fails exactly when the record form does"
    );
    let slow_event = oracle_event(ev);
    let slow_record = oracle_record(prev, seq, ev);
    if !wild {
        // A valid event has a canonical form on both paths.
        assert!(fast_record.is_ok(), "valid event refused: {fast_record:?}");
        assert!(slow_record.is_ok(), "oracle refused: {slow_record:?}");
    }
    agree(&fast_event, &slow_event);
    agree(&fast_record, &slow_record);
    if let Ok(bytes) = &fast_record {
        let parsed: Result<serde_json::Value, _> = serde_json::from_slice(bytes);
        assert!(parsed.is_ok(), "canonical bytes are JSON: {parsed:?}");
        assert_eq!(
            canon::content_hash(prev, seq, ev).as_deref().ok(),
            Some(canon::sha256_hex(bytes).as_str()),
            "the content hash is the SHA-256 of the canonical record"
        );
    }
    // The generic JSON writer (spec digests) agrees on what pbjson emits.
    if let (Ok(fast), Ok(v)) = (&fast_event, serde_json::to_value(ev))
        && let Ok(generic) = canon::canonical_json_value(&v)
    {
        assert_eq!(show(&generic), show(fast), "generic writer agrees");
    }
    // Protobuf is the stored form: the canonical bytes must survive it.
    let back = Event::decode(ev.encode_to_vec().as_slice()).expect("prost decodes its own");
    assert_eq!(
        canon::canonical_record(prev, seq, &back),
        fast_record,
        "canonical bytes survive a protobuf round trip"
    );
}

/// Where both paths produce bytes they are equal. Where only the fast path
/// refuses, its refusal is a typed canonical-form error (protojson would
/// refuse the same event); where only the oracle refuses, the event holds
/// an enum number pbjson cannot name but protojson prints as a number.
fn agree(fast: &Result<Vec<u8>, CanonError>, slow: &Result<Vec<u8>, String>) {
    match (fast, slow) {
        (Ok(f), Ok(s)) => assert_eq!(show(f), show(s), "fast writer equals the oracle"),
        (Err(CanonError::Proto3Json(e)), _) => panic!("fast path used the slow serializer: {e}"),
        (Err(e), _) => assert!(!e.to_string().is_empty()),
        (Ok(_), Err(_)) => {}
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
