//! `google.protobuf.Struct` / `Value` / `ListValue` in canonical form.
//!
//! proto3-JSON maps these to plain JSON; JCS then sorts the keys by UTF-16
//! code units and prints numbers in ECMAScript form. protojson refuses NaN,
//! infinities and a Value with no kind, so those are errors here too.

use std::cmp::Ordering;

use pbjson_types::value::Kind;
use pbjson_types::{ListValue, Struct, Value};

use super::jcs::{cmp_utf16, write_f64, write_str};
use super::{CanonError, MAX_DEPTH};

pub(crate) fn write_struct(out: &mut Vec<u8>, s: &Struct, depth: usize) -> Result<(), CanonError> {
    if depth > MAX_DEPTH {
        return Err(CanonError::TooDeep { limit: MAX_DEPTH });
    }
    out.push(b'{');
    match s.fields.len() {
        0 => {}
        1 => {
            // The common tiny object needs no sort buffer.
            if let Some((k, v)) = s.fields.iter().next() {
                write_entry(out, k, v, depth)?;
            }
        }
        _ => {
            let mut entries: Vec<(&String, &Value)> = s.fields.iter().collect();
            entries.sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
            debug_assert!(
                entries
                    .windows(2)
                    .all(|w| cmp_utf16(w[0].0, w[1].0) == Ordering::Less),
                "map keys are distinct, so sorted strictly"
            );
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_entry(out, k, v, depth)?;
            }
        }
    }
    out.push(b'}');
    Ok(())
}

fn write_entry(out: &mut Vec<u8>, k: &str, v: &Value, depth: usize) -> Result<(), CanonError> {
    debug_assert!(depth <= MAX_DEPTH, "write_struct checked the depth");
    write_str(out, k);
    out.push(b':');
    write_value(out, v, depth + 1).map_err(|e| e.at_key(k))
}

pub(crate) fn write_value(out: &mut Vec<u8>, v: &Value, depth: usize) -> Result<(), CanonError> {
    // Callers are one level below a checked struct or list.
    debug_assert!(depth <= MAX_DEPTH + 1);
    match &v.kind {
        None => Err(CanonError::MissingValueKind {
            path: String::new(),
        }),
        // protojson writes null for any NullValue number.
        Some(Kind::NullValue(_)) => {
            out.extend_from_slice(b"null");
            Ok(())
        }
        Some(Kind::NumberValue(n)) => write_f64(out, *n),
        Some(Kind::StringValue(s)) => {
            write_str(out, s);
            Ok(())
        }
        Some(Kind::BoolValue(b)) => {
            out.extend_from_slice(if *b { b"true" } else { b"false" });
            Ok(())
        }
        Some(Kind::StructValue(s)) => write_struct(out, s, depth),
        Some(Kind::ListValue(l)) => write_list(out, l, depth),
    }
}

fn write_list(out: &mut Vec<u8>, l: &ListValue, depth: usize) -> Result<(), CanonError> {
    if depth > MAX_DEPTH {
        return Err(CanonError::TooDeep { limit: MAX_DEPTH });
    }
    let start = out.len();
    out.push(b'[');
    for (i, item) in l.values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_value(out, item, depth + 1).map_err(|e| e.at_index(i))?;
    }
    out.push(b']');
    // Brackets, a comma between items, and at least one byte per item.
    debug_assert!(out.len() - start >= 2 * l.values.len().max(1));
    Ok(())
}
