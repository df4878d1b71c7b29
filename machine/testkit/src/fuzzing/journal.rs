//! Target `journal_verify`: journals from disk and from other hosts.
//!
//! Three input shapes, chosen by the first byte:
//!
//! - text starting with `[` (the Go fixtures as they are), or any input
//!   whose first byte is 2 mod 3: a Go `[]eventlog.Record` document for
//!   [`interop::parse_go_records`];
//! - first byte 0 mod 3: protobuf bytes, decoded as one `LogRecord`, as one
//!   `Event` and as a length-delimited stream of `LogRecord`s;
//! - first byte 1 mod 3: a valid chain built from arbitrary events, then
//!   tampered with.
//!
//! Whatever is decoded is verified with [`chain`] (compared with a
//! straightforward reference verifier) and projected with every
//! `journal::*` function the host runs on a loaded journal. Nothing may
//! panic; every failure must be a typed error.

use agentsessions_proto::v1::{Event, LogRecord};
use arbitrary::{Result, Unstructured};
use prost::Message as _;

use super::draw;
use crate::interop;
use agentsessions_machine::canon;
use agentsessions_machine::chain::{self, ChainError, ChainVerifier};
use agentsessions_machine::host::render;
use agentsessions_machine::journal::{approval, executions, legacy, projection};
use agentsessions_machine::vocab::SessionRow;

/// Most records decoded from one protobuf stream.
const MAX_STREAM: usize = 64;

/// The target body.
pub fn journal_verify(data: &[u8]) {
    match data.first() {
        None => {}
        Some(b'[') => go_json(data),
        Some(b) => match b % 3 {
            0 => protobuf(&data[1..]),
            1 => {
                // Out of data is the only error; it just ends the input.
                let _ = tampered(&mut Unstructured::new(&data[1..]));
            }
            _ => go_json(&data[1..]),
        },
    }
}

/// A Go journal document: parsed, verified, round-tripped through protobuf.
fn go_json(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let records = match interop::parse_go_records(&text) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "errors explain themselves");
            return;
        }
    };
    check_records(&records);
    // A converted journal survives the protobuf form it is stored in.
    let back: Vec<LogRecord> = records
        .iter()
        .map(|r| LogRecord::decode(r.encode_to_vec().as_slice()).expect("prost decodes its own"))
        .collect();
    assert_eq!(
        chain::verify(&records),
        chain::verify(&back),
        "verification survives a protobuf round trip"
    );
}

/// Arbitrary protobuf bytes as a record, an event and a record stream.
fn protobuf(data: &[u8]) {
    if let Ok(rec) = LogRecord::decode(data) {
        check_records(std::slice::from_ref(&rec));
    }
    if let Ok(ev) = Event::decode(data) {
        check_event(&ev);
    }
    let mut buf = data;
    let mut records = Vec::new();
    while !buf.is_empty() && records.len() < MAX_STREAM {
        match LogRecord::decode_length_delimited(&mut buf) {
            Ok(r) => records.push(r),
            Err(_) => break,
        }
    }
    check_records(&records);
}

/// An event has a canonical form alone exactly when it has one in a record,
/// and the record embeds the event's bytes verbatim.
fn check_event(ev: &Event) {
    let alone = canon::canonical_event(ev);
    let record = canon::canonical_record("", 1, ev);
    match (&alone, &record) {
        (Ok(a), Ok(r)) => {
            assert_eq!(&r[..9], b"{\"event\":");
            assert_eq!(&r[9..9 + a.len()], a.as_slice(), "record embeds the event");
        }
        (Err(a), Err(r)) => assert_eq!(a, r, "same refusal alone and in a record"),
        _ => panic!("event and record canonicalization disagree: {alone:?} / {record:?}"),
    }
    let again = Event::decode(ev.encode_to_vec().as_slice()).expect("prost decodes its own");
    assert_eq!(
        canon::canonical_event(&again),
        alone,
        "canonical bytes survive a protobuf round trip"
    );
}

/// A valid chain, tampered with up to four times.
fn tampered(u: &mut Unstructured<'_>) -> Result<()> {
    let mut records = draw::chain(u, 8)?;
    assert_eq!(chain::verify(&records), Ok(()), "a built chain verifies");
    let mut hashed_change = false;
    for _ in 0..u.int_in_range(0..=4u8)? {
        if records.is_empty() {
            break;
        }
        let i = u.choose_index(records.len())?;
        let rec = &mut records[i];
        match u.int_in_range(0..=9u8)? {
            0 => rec.seq = rec.seq.wrapping_add(draw::int64(u)?),
            1 => rec.prev_hash = draw::text(u)?,
            2 => rec.content_hash = draw::text(u)?,
            3 => {
                // One hex digit off, or upper case: both must fail.
                let pos = u.choose_index(rec.content_hash.len().max(1))?;
                let flipped: String = rec
                    .content_hash
                    .char_indices()
                    .map(|(j, c)| match (j == pos, c) {
                        (true, '0') => '1',
                        (true, c) if c.is_ascii_hexdigit() => c.to_ascii_uppercase(),
                        (true, _) => '0',
                        (false, c) => c,
                    })
                    .collect();
                rec.content_hash = flipped;
            }
            4 => rec.event = Some(draw::event(u, true)?),
            5 => rec.event = None,
            6 => {
                records.remove(i);
            }
            7 => {
                let copy = records[i].clone();
                records.insert(i, copy);
            }
            8 => {
                let j = u.choose_index(records.len())?;
                records.swap(i, j);
            }
            _ => {
                // The fence is not hashed: this alone keeps the chain valid.
                rec.fence = draw::int64(u)?;
                continue;
            }
        }
        hashed_change = true;
    }
    if !hashed_change {
        assert_eq!(chain::verify(&records), Ok(()), "fences are not hashed");
    }
    let first_seq = if u.arbitrary()? { 1 } else { draw::int64(u)? };
    let prev = if first_seq == 1 {
        String::new()
    } else {
        draw::text(u)?
    };
    assert_eq!(
        chain::verify_from(&prev, first_seq, &records),
        reference_verify(&prev, first_seq, &records),
        "chain verification agrees with the reference"
    );
    check_records(&records);
    Ok(())
}

/// Verification written out plainly from the rules in `chain`'s docs:
/// seqs without gaps, each link to the previous stored hash, and the stored
/// hash equal to the recomputed one, checked in that order per record.
fn reference_verify(
    prev_hash: &str,
    first_seq: i64,
    records: &[LogRecord],
) -> Result<(), ChainError> {
    let mut expected = Some(first_seq);
    let mut prev = prev_hash.to_owned();
    for rec in records {
        if expected != Some(rec.seq) {
            return Err(ChainError::Gap {
                seq: rec.seq,
                expected: expected.unwrap_or(i64::MIN),
            });
        }
        if rec.prev_hash != prev {
            return Err(ChainError::BrokenLink { seq: rec.seq });
        }
        let Some(ev) = &rec.event else {
            return Err(ChainError::Undecodable {
                seq: rec.seq,
                reason: "missing event".into(),
            });
        };
        let computed =
            canon::content_hash(&prev, rec.seq, ev).map_err(|e| ChainError::Undecodable {
                seq: rec.seq,
                reason: e.to_string(),
            })?;
        if computed != rec.content_hash {
            return Err(ChainError::ContentMismatch {
                seq: rec.seq,
                stored: rec.content_hash.clone(),
                computed,
            });
        }
        prev = rec.content_hash.clone();
        expected = rec.seq.checked_add(1);
    }
    Ok(())
}

/// Verifies `records` and runs every projection the host runs on a loaded
/// journal. None may panic, whatever the records hold.
pub(super) fn check_records(records: &[LogRecord]) {
    let whole = chain::verify(records);
    let mut v = ChainVerifier::new();
    let stepwise = records.iter().try_for_each(|r| v.push(r));
    assert_eq!(
        whole, stepwise,
        "one-shot and incremental verification agree"
    );
    match &whole {
        Ok(()) => {
            // Any split point verifies from the hash before it.
            if records.len() >= 2 {
                let head = &records[records.len() / 2 - 1];
                let rest = &records[records.len() / 2..];
                assert_eq!(
                    chain::verify_from(&head.content_hash, head.seq + 1, rest),
                    Ok(())
                );
            }
        }
        Err(e) => {
            assert!(
                records.iter().any(|r| r.seq == e.seq()),
                "the error names a record's seq: {e:?}"
            );
        }
    }
    for ev in records.iter().filter_map(|r| r.event.as_ref()).take(8) {
        check_event(ev);
    }
    project_all(records);
}

/// The host's journal projections, for their no-panic property.
fn project_all(records: &[LogRecord]) {
    let last_seq = records.last().map_or(0, |r| r.seq);
    let _ = legacy::legacy_prefix(records);
    for r in records.iter().take(8) {
        let _ = legacy::compat_invocation_id("sess-fuzz", r);
        let _ = legacy::compat_invocation_id("", r);
    }
    assert!(approval::scan_agrees_with_grouped_scan(records, 0));
    if let Some(mid) = records.get(records.len() / 2) {
        assert!(approval::scan_agrees_with_grouped_scan(records, mid.seq));
    }
    let _ = projection::session_status(records, last_seq);
    let _ = executions::resume_invocation(records);
    let row = SessionRow {
        uid: "sess-fuzz".into(),
        last_seq,
        ..SessionRow::default()
    };
    let _ = render::session(&row, records);
    let Ok(p) = executions::project(records) else {
        return;
    };
    let selected = executions::replay_selection(&p);
    let _ = executions::needs_describe(&selected, records);
    for e in &p.executions {
        let _ = executions::validate_inputs(e);
        let _ = executions::check_inherited_intent(records, e);
    }
    let _ = executions::select_pending(records, &p);
}
