//! Deterministic binary protobuf for journal blobs.
//!
//! The `events.event` column holds a binary `agentsessions.v1.Event`. Go's
//! deterministic marshal writes every message's fields in ascending field
//! number order and map entries sorted by key. prost differs in two ways:
//!
//! - it writes a oneof at the position of its *lowest* tag, so an `Event` whose
//!   body is `execution_start` (19) or `parked` (20) comes out before `actor`
//!   (18);
//! - `google.protobuf.Struct.fields` is a `HashMap` in `pbjson_types`, so its
//!   entries come out in a random order.
//!
//! Rather than hand-encoding every message, we encode with prost and then
//! rewrite the bytes, guided by the contract's own descriptor set: fields are
//! stably sorted by number (repeated elements keep their relative order), map
//! entries are sorted by key, and every embedded message is normalised the same
//! way. The result decodes to the same message and is byte-stable across runs.
//! The blob is never hashed (the content hash covers the canonical JSON), so
//! this is about reproducible files and Go-identical bytes, not chain validity.

use std::collections::HashMap;
use std::sync::OnceLock;

use agentsessions_proto::v1::Event;
use prost::Message as _;
use prost_types::field_descriptor_proto::Type;

const EVENT_TYPE: &str = ".agentsessions.v1.Event";

/// Why bytes could not be normalised (they are not a well-formed encoding of
/// the message the descriptor describes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed protobuf: {0}")]
pub struct EncodeError(&'static str);

/// Encodes `ev` as deterministic binary protobuf (ascending field numbers,
/// sorted map keys, at every nesting level).
pub fn encode_event(ev: &Event) -> Vec<u8> {
    let raw = ev.encode_to_vec();
    let mut out = Vec::with_capacity(raw.len());
    // prost's output is always well formed, so normalising it cannot fail;
    // a failure here would be a bug in this module or in the descriptor.
    normalize(schema(), EVENT_TYPE, &raw, &mut out)
        .expect("prost output of an Event must normalise");
    debug_assert_eq!(out.len(), raw.len(), "normalising only reorders bytes");
    out
}

/// Normalises an already-encoded `Event` (used by tests and tools that want
/// to compare foreign blobs with ours).
pub fn normalize_event_bytes(raw: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(raw.len());
    normalize(schema(), EVENT_TYPE, raw, &mut out)?;
    Ok(out)
}

/// What the normaliser needs to know about one message type.
#[derive(Debug, Default)]
struct MessageInfo {
    /// Field number -> fully qualified type name, for message-typed fields.
    message_fields: HashMap<u32, String>,
    /// Field number -> key type, for map fields (repeated map-entry messages).
    map_fields: HashMap<u32, Type>,
}

type Schema = HashMap<String, MessageInfo>;

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(build_schema)
}

fn build_schema() -> Schema {
    let fds = prost_types::FileDescriptorSet::decode(agentsessions_proto::FILE_DESCRIPTOR_SET)
        .expect("the embedded descriptor set decodes");
    // First pass: remember which types are map entries and their key type.
    let mut map_entries: HashMap<String, Type> = HashMap::new();
    let mut all: Vec<(String, &prost_types::DescriptorProto)> = Vec::new();
    for file in &fds.file {
        let prefix = match file.package() {
            "" => String::new(),
            p => format!(".{p}"),
        };
        for msg in &file.message_type {
            collect(&prefix, msg, &mut all);
        }
    }
    for (name, msg) in &all {
        if msg.options.as_ref().is_some_and(|o| o.map_entry()) {
            let key = msg
                .field
                .iter()
                .find(|f| f.number() == 1)
                .map_or(Type::String, |f| f.r#type());
            map_entries.insert(name.clone(), key);
        }
    }
    let mut schema = Schema::new();
    for (name, msg) in &all {
        let mut info = MessageInfo::default();
        for f in &msg.field {
            if f.r#type() != Type::Message {
                continue;
            }
            let number = u32::try_from(f.number()).expect("field numbers are positive");
            let ty = f.type_name().to_string();
            if let Some(key) = map_entries.get(&ty) {
                info.map_fields.insert(number, *key);
            }
            info.message_fields.insert(number, ty);
        }
        schema.insert(name.clone(), info);
    }
    assert!(
        schema.contains_key(EVENT_TYPE),
        "descriptor set lacks Event"
    );
    schema
}

fn collect<'a>(
    prefix: &str,
    msg: &'a prost_types::DescriptorProto,
    out: &mut Vec<(String, &'a prost_types::DescriptorProto)>,
) {
    let name = format!("{prefix}.{}", msg.name());
    for nested in &msg.nested_type {
        collect(&name, nested, out);
    }
    out.push((name, msg));
}

/// One top-level field occurrence in an encoded message.
struct Field<'a> {
    number: u32,
    wire_type: u8,
    /// The tag varint as it appeared.
    tag: &'a [u8],
    /// Everything after the tag (for LEN: the length prefix and payload).
    rest: &'a [u8],
    /// For LEN fields, the payload alone.
    payload: &'a [u8],
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, EncodeError> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *buf.get(*pos).ok_or(EncodeError("truncated varint"))?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(EncodeError("varint too long"))
}

fn split_fields(buf: &[u8]) -> Result<Vec<Field<'_>>, EncodeError> {
    let mut fields = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let start = pos;
        let key = read_varint(buf, &mut pos)?;
        let tag_end = pos;
        let number = u32::try_from(key >> 3).map_err(|_| EncodeError("field number too large"))?;
        if number == 0 {
            return Err(EncodeError("field number 0"));
        }
        let wire_type = (key & 7) as u8;
        let mut payload: &[u8] = &[];
        match wire_type {
            0 => {
                read_varint(buf, &mut pos)?;
            }
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let len = usize::try_from(read_varint(buf, &mut pos)?)
                    .map_err(|_| EncodeError("length too large"))?;
                let end = pos.checked_add(len).ok_or(EncodeError("length overflow"))?;
                payload = buf.get(pos..end).ok_or(EncodeError("truncated field"))?;
                pos = end;
            }
            _ => return Err(EncodeError("unsupported wire type")),
        }
        if pos > buf.len() {
            return Err(EncodeError("truncated field"));
        }
        fields.push(Field {
            number,
            wire_type,
            tag: &buf[start..tag_end],
            rest: &buf[tag_end..pos],
            payload,
        });
    }
    Ok(fields)
}

fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends the normalised form of `buf` (a `ty` message) to `out`.
fn normalize(schema: &Schema, ty: &str, buf: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let info = schema.get(ty);
    let mut fields = split_fields(buf)?;
    // Stable: repeated elements and packed chunks keep their order.
    fields.sort_by_key(|f| f.number);

    let mut i = 0;
    while i < fields.len() {
        let number = fields[i].number;
        let run_end = fields[i..]
            .iter()
            .position(|f| f.number != number)
            .map_or(fields.len(), |n| i + n);
        let run = &fields[i..run_end];
        let msg_type = info.and_then(|m| m.message_fields.get(&number));
        match msg_type {
            Some(sub) if run.iter().all(|f| f.wire_type == 2) => {
                let mut encoded: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(run.len());
                for f in run {
                    let mut body = Vec::with_capacity(f.payload.len());
                    normalize(schema, sub, f.payload, &mut body)?;
                    encoded.push((map_sort_key(f.payload)?, body));
                }
                if let Some(key_type) = info.and_then(|m| m.map_fields.get(&number)) {
                    sort_map_entries(&mut encoded, *key_type);
                }
                for (_, body) in encoded {
                    out.extend_from_slice(run[0].tag);
                    write_varint(body.len() as u64, out);
                    out.extend_from_slice(&body);
                }
            }
            _ => {
                for f in run {
                    out.extend_from_slice(f.tag);
                    out.extend_from_slice(f.rest);
                }
            }
        }
        i = run_end;
    }
    Ok(())
}

/// The raw key of a map entry: the bytes of field 1 after its tag (the LEN
/// payload for strings, the varint or fixed-width bytes for numbers). An
/// absent key is the default value and sorts as empty/zero.
fn map_sort_key(entry: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let fields = split_fields(entry)?;
    Ok(match fields.iter().rev().find(|f| f.number == 1) {
        Some(f) if f.wire_type == 2 => f.payload.to_vec(),
        Some(f) => f.rest.to_vec(),
        None => Vec::new(),
    })
}

/// Sorts map entries by key value, as Go's deterministic marshal does. The
/// key type (from the descriptor) says how to read the raw key bytes.
fn sort_map_entries(entries: &mut [(Vec<u8>, Vec<u8>)], key_type: Type) {
    match key_type {
        // Bytewise order of UTF-8 is code point order.
        Type::String => entries.sort_by(|a, b| a.0.cmp(&b.0)),
        Type::Fixed32 | Type::Fixed64 => entries.sort_by_key(|e| little_endian(&e.0)),
        Type::Sfixed32 => entries.sort_by_key(|e| little_endian(&e.0) as u32 as i32),
        Type::Sfixed64 => entries.sort_by_key(|e| little_endian(&e.0) as i64),
        Type::Bool | Type::Uint32 | Type::Uint64 => entries.sort_by_key(|e| varint(&e.0)),
        Type::Sint32 | Type::Sint64 => entries.sort_by_key(|e| {
            let v = varint(&e.0);
            ((v >> 1) as i64) ^ -((v & 1) as i64)
        }),
        // int32/int64: two's complement in a varint (negative int32 values
        // are sign-extended to 64 bits on the wire).
        _ => entries.sort_by_key(|e| varint(&e.0) as i64),
    }
}

fn varint(raw: &[u8]) -> u64 {
    let mut pos = 0;
    // The bytes came out of `split_fields`, which already parsed the varint.
    read_varint(raw, &mut pos).unwrap_or(0)
}

fn little_endian(raw: &[u8]) -> u64 {
    raw.iter()
        .take(8)
        .enumerate()
        .fold(0, |v, (i, b)| v | (u64::from(*b) << (8 * i)))
}

/// A record from its stored columns, the event decoded from its blob (the
/// same in every backend; a blob that does not decode names its seq).
pub fn record_of_columns(
    session: &str,
    seq: i64,
    prev_hash: String,
    content_hash: String,
    fence: i64,
    blob: &[u8],
) -> Result<agentsessions_proto::v1::LogRecord, crate::StoreError> {
    debug_assert!(seq >= 1, "stored records start at seq 1");
    let event =
        agentsessions_proto::v1::Event::decode(blob).map_err(|e| crate::StoreError::Decode {
            session: session.to_owned(),
            seq,
            reason: e.to_string(),
        })?;
    Ok(agentsessions_proto::v1::LogRecord {
        seq,
        prev_hash,
        content_hash,
        fence,
        event: Some(event),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_proto::v1::{
        DataPart, EventKind, ExecutionStart, IdentityRef, Message, Part, ToolResult, event, part,
    };

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn matches_go_vectors() {
        // wire.md §7.2 vectors.
        let ev = Event {
            kind: EventKind::EventToolResult as i32,
            body: Some(event::Body::Result(ToolResult {
                id: "c1".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(hex(&encode_event(&ev)), "38055a040a026331");
    }

    #[test]
    fn actor_precedes_execution_start() {
        let ev = Event {
            execution_id: "e".into(),
            kind: EventKind::EventExecutionStart as i32,
            actor: Some(IdentityRef {
                principal: "p".into(),
                ..Default::default()
            }),
            body: Some(event::Body::ExecutionStart(ExecutionStart {
                input_count: Some(1),
                ..Default::default()
            })),
            ..Default::default()
        };
        // 12 01 65          execution_id(2) "e"
        // 38 0c             kind(7) = 12
        // 92 01 03 0a 01 70 actor(18) {principal "p"}
        // 9a 01 02 18 01    execution_start(19) {input_count 1}
        let want = "120165380c920103 0a0170 9a01021801".replace(' ', "");
        let got = encode_event(&ev);
        assert_eq!(hex(&got), want);
        assert_ne!(
            hex(&ev.encode_to_vec()),
            want,
            "prost alone orders differently"
        );
        assert_eq!(Event::decode(got.as_slice()).unwrap(), ev);
    }

    #[test]
    fn struct_keys_sorted_and_round_trip() {
        let mut fields = std::collections::HashMap::new();
        for k in ["zeta", "alpha", "mid", "beta", "omega", "k9", "k1"] {
            fields.insert(k.to_string(), pbjson_value(k.len() as f64));
        }
        let ev = Event {
            kind: EventKind::EventInput as i32,
            body: Some(event::Body::Message(Message {
                role: "user".into(),
                parts: vec![Part {
                    part: Some(part::Part::Data(DataPart {
                        data: Some(pbjson_types::Struct { fields }),
                    })),
                }],
            })),
            ..Default::default()
        };
        let a = encode_event(&ev);
        for _ in 0..20 {
            // A fresh clone re-hashes the HashMap; bytes must not change.
            let again = encode_event(&Event::decode(a.as_slice()).unwrap());
            assert_eq!(a, again);
        }
        assert_eq!(Event::decode(a.as_slice()).unwrap(), ev);
        let text = String::from_utf8_lossy(&a);
        let order: Vec<usize> = ["alpha", "beta", "k1", "k9", "mid", "omega", "zeta"]
            .iter()
            .map(|k| text.find(k).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }

    fn pbjson_value(n: f64) -> pbjson_types::Value {
        pbjson_types::Value {
            kind: Some(pbjson_types::value::Kind::NumberValue(n)),
        }
    }

    #[test]
    fn integer_map_keys_sort_numerically() {
        let mut v: Vec<(Vec<u8>, Vec<u8>)> = [300u64, 5, 70_000]
            .iter()
            .map(|k| {
                let mut b = Vec::new();
                write_varint(*k, &mut b);
                (b, Vec::new())
            })
            .collect();
        sort_map_entries(&mut v, Type::Uint64);
        let keys: Vec<u64> = v.iter().map(|e| varint(&e.0)).collect();
        assert_eq!(keys, [5, 300, 70_000]);
        let mut f: Vec<(Vec<u8>, Vec<u8>)> = [(-2i32), 1, -7]
            .iter()
            .map(|k| (k.to_le_bytes().to_vec(), Vec::new()))
            .collect();
        sort_map_entries(&mut f, Type::Sfixed32);
        let keys: Vec<i32> = f
            .iter()
            .map(|e| little_endian(&e.0) as u32 as i32)
            .collect();
        assert_eq!(keys, [-7, -2, 1]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(normalize_event_bytes(&[0xff, 0xff]).is_err());
        assert!(normalize_event_bytes(&[0x12, 0x05, 0x61]).is_err());
    }
}
