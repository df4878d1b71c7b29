//! Direct canonical writer for `agentsessions.v1.Event`.
//!
//! Each message writes its fields in JCS order. Proto field names are fixed
//! ASCII, so their sorted order is known and written out per message below;
//! only map keys and Struct keys are sorted at run time.
//!
//! proto3-JSON rules applied (Go protojson with UseProtoNames, enum names,
//! EmitUnpopulated=false):
//! - implicit-presence scalars are omitted when zero/empty; a message field
//!   or oneof member that is set is always written, even when empty or zero;
//! - int64 as a decimal string, int32 as a number, bytes as padded base64;
//! - an enum number with no name is written as a bare number, like protojson.

use agentsessions_proto::v1::{
    ApprovalRef, ApprovalRequest, ApprovalResult, Error, Event, EventKind, ExecutionStart,
    FilePart, HarnessEnd, IdentityRef, Lifecycle, Mediation, Message, ModelCall, Part,
    ReasoningPart, ToolCall, ToolChoice, ToolDefinition, ToolResult, Usage, event, file_part,
    lifecycle, part, reasoning_part, tool_choice, tool_result,
};
use agentsessions_proto::wkt::Timestamp;
use base64::Engine as _;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::jcs::{cmp_utf16, needs_utf16_resort, write_i64, write_i64_string, write_str};
use super::value::write_struct;
use super::{CanonError, MAX_DEPTH};

/// Writes one JSON object, adding commas between members. Callers must call
/// the member methods in sorted key order.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    /// The last member's key, to check the order.
    last: &'static str,
}

impl<'a> Obj<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Obj {
            out,
            first: true,
            last: "",
        }
    }

    fn close(self) {
        // Every member goes through `key`, so an object without one is bare.
        debug_assert!(!self.first || self.out.last() == Some(&b'{'));
        self.out.push(b'}');
    }

    /// Starts a member; `k` is a proto field name, which needs no escaping.
    fn key(&mut self, k: &'static str) -> &mut Vec<u8> {
        debug_assert!(
            !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "a proto field name needs no escaping"
        );
        // ASCII names: byte order is JCS's UTF-16 order.
        debug_assert!(
            self.first || self.last < k,
            "members in sorted key order: {:?} after {:?}",
            k,
            self.last
        );
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.last = k;
        self.out.push(b'"');
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    fn string(&mut self, k: &'static str, v: &str) {
        if !v.is_empty() {
            self.string_set(k, v);
        }
    }

    /// A string with explicit presence (oneof member): written even if empty.
    fn string_set(&mut self, k: &'static str, v: &str) {
        let out = self.key(k);
        write_str(out, v);
    }

    fn int64(&mut self, k: &'static str, v: i64) {
        if v != 0 {
            self.int64_set(k, v);
        }
    }

    fn int64_set(&mut self, k: &'static str, v: i64) {
        let out = self.key(k);
        write_i64_string(out, v);
    }

    fn int32(&mut self, k: &'static str, v: i32) {
        if v != 0 {
            let out = self.key(k);
            write_i64(out, i64::from(v));
        }
    }

    fn boolean(&mut self, k: &'static str, v: bool) {
        if v {
            self.key(k).extend_from_slice(b"true");
        }
    }

    fn bytes(&mut self, k: &'static str, v: &[u8]) {
        if !v.is_empty() {
            self.bytes_set(k, v);
        }
    }

    fn bytes_set(&mut self, k: &'static str, v: &[u8]) {
        let out = self.key(k);
        write_base64(out, v);
    }

    /// An enum field: omitted at 0, its name when known, else the number.
    fn enumeration(&mut self, k: &'static str, v: i32, name: Option<&'static str>) {
        if v == 0 {
            return;
        }
        let out = self.key(k);
        match name {
            // Enum value names are identifiers: no escaping needed.
            Some(n) => {
                debug_assert!(
                    n.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                    "an enum value name needs no escaping"
                );
                out.push(b'"');
                out.extend_from_slice(n.as_bytes());
                out.push(b'"');
            }
            None => write_i64(out, i64::from(v)),
        }
    }

    fn repeated<T>(
        &mut self,
        k: &'static str,
        items: &[T],
        depth: usize,
        mut write: impl FnMut(&mut Vec<u8>, &T, usize) -> Result<(), CanonError>,
    ) -> Result<(), CanonError> {
        if items.is_empty() {
            return Ok(());
        }
        debug_assert!(depth <= MAX_DEPTH, "every caller checked its depth");
        let out = self.key(k);
        out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write(out, item, depth + 1).map_err(|e| e.at_index(i).at_key(k))?;
        }
        out.push(b']');
        Ok(())
    }

    fn structure(
        &mut self,
        k: &'static str,
        v: Option<&pbjson_types::Struct>,
        depth: usize,
    ) -> Result<(), CanonError> {
        // One level past a checked message at most; write_struct checks.
        debug_assert!(depth <= MAX_DEPTH + 1);
        match v {
            Some(s) => {
                let out = self.key(k);
                write_struct(out, s, depth + 1).map_err(|e| e.at_key(k))
            }
            None => Ok(()),
        }
    }
}

fn write_base64(out: &mut Vec<u8>, v: &[u8]) {
    let start = out.len();
    // Padded encoding of n bytes is 4*ceil(n/3) bytes; this cannot overflow
    // for any slice that fits in memory.
    let len = v.len().div_ceil(3) * 4;
    out.push(b'"');
    out.resize(start + 1 + len, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(v, &mut out[start + 1..])
        .unwrap_or(0);
    // The buffer was sized exactly, so `written == len` always holds.
    debug_assert_eq!(written, len);
    debug_assert!(
        out[start + 1..start + 1 + written]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')),
        "base64 needs no JSON escaping"
    );
    out.truncate(start + 1 + written);
    out.push(b'"');
}

fn check_depth(depth: usize) -> Result<(), CanonError> {
    if depth > MAX_DEPTH {
        Err(CanonError::TooDeep { limit: MAX_DEPTH })
    } else {
        Ok(())
    }
}

fn body_key(b: &event::Body) -> &'static str {
    use event::Body;
    match b {
        Body::Message(_) => "message",
        Body::Model(_) => "model",
        Body::Tool(_) => "tool",
        Body::Result(_) => "result",
        Body::Approval(_) => "approval",
        Body::ApprovalResult(_) => "approval_result",
        Body::Usage(_) => "usage",
        Body::Lifecycle(_) => "lifecycle",
        Body::End(_) => "end",
        Body::Error(_) => "error",
        Body::ExecutionStart(_) => "execution_start",
        Body::Parked(_) => "parked",
    }
}

fn write_body(out: &mut Vec<u8>, b: &event::Body, depth: usize) -> Result<(), CanonError> {
    use event::Body;
    let start = out.len();
    match b {
        Body::Message(m) => write_message(out, m, depth)?,
        Body::Model(m) => write_model_call(out, m, depth)?,
        Body::Tool(t) => write_tool_call(out, t, depth)?,
        Body::Result(r) => write_tool_result(out, r, depth)?,
        Body::Approval(a) => write_approval_request(out, a),
        Body::ApprovalResult(a) => write_approval_result(out, a),
        Body::Usage(u) => write_usage(out, u),
        Body::Lifecycle(l) => write_lifecycle(out, l),
        Body::End(e) => write_harness_end(out, e),
        Body::Error(e) => write_error(out, e),
        Body::ExecutionStart(e) => write_execution_start(out, e),
        Body::Parked(p) => write_approval_ref(out, p),
    }
    debug_assert_eq!(out.get(start), Some(&b'{'), "every body is a message");
    Ok(())
}

pub(crate) fn write_event(out: &mut Vec<u8>, ev: &Event) -> Result<(), CanonError> {
    let depth = 0;
    let mut o = Obj::open(out);
    // The body's key lands between the fixed fields; it is written just
    // before the first fixed field whose name sorts after it.
    let mut body = ev.body.as_ref().map(|b| (body_key(b), b));
    let mut body_before = |o: &mut Obj<'_>, next: &str| -> Result<(), CanonError> {
        if let Some((k, b)) = body
            && k < next
        {
            body = None;
            let out = o.key(k);
            write_body(out, b, depth + 1).map_err(|e| e.at_key(k))?;
        }
        Ok(())
    };

    body_before(&mut o, "actor")?;
    if let Some(a) = &ev.actor {
        write_identity(o.key("actor"), a);
    }
    body_before(&mut o, "execution_id")?;
    o.string("execution_id", &ev.execution_id);
    body_before(&mut o, "kind")?;
    o.enumeration(
        "kind",
        ev.kind,
        EventKind::try_from(ev.kind).ok().map(|k| k.as_str_name()),
    );
    body_before(&mut o, "schema_version")?;
    o.int32("schema_version", ev.schema_version);
    body_before(&mut o, "ts")?;
    if let Some(ts) = &ev.ts {
        write_timestamp(o.key("ts"), ts)?;
    }
    // Anything sorting after "ts" ("usage"): the sentinel is above every key.
    body_before(&mut o, "\u{7f}")?;
    debug_assert!(body.is_none(), "the body was written");
    o.close();
    Ok(())
}

/// RFC 3339 in UTC with a `Z` suffix and 0, 3, 6 or 9 fraction digits, the
/// form protojson writes (same output as `wkt::Timestamp::to_rfc3339`, which
/// a property test checks). Formatted by hand because this runs once per
/// hashed record and the general-purpose path allocates.
fn write_timestamp(out: &mut Vec<u8>, ts: &Timestamp) -> Result<(), CanonError> {
    if ts.validate().is_err() {
        return Err(CanonError::TimestampOutOfRange {
            seconds: ts.seconds,
            nanos: ts.nanos,
        });
    }
    let days = ts.seconds.div_euclid(86_400);
    let secs_of_day = ts.seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut b = [0u8; 32];
    // validate() bounds the year to 1..=9999, so four digits suffice.
    debug_assert!((1..=9999).contains(&year), "validate() bounds the year");
    put_digits(&mut b[0..4], year as u64);
    b[4] = b'-';
    put_digits(&mut b[5..7], month);
    b[7] = b'-';
    put_digits(&mut b[8..10], day);
    b[10] = b'T';
    put_digits(&mut b[11..13], (secs_of_day / 3600) as u64);
    b[13] = b':';
    put_digits(&mut b[14..16], (secs_of_day / 60 % 60) as u64);
    b[16] = b':';
    put_digits(&mut b[17..19], (secs_of_day % 60) as u64);
    let mut n = 19;
    // Fraction digits come in groups of three, trailing zero groups dropped.
    debug_assert!((0..1_000_000_000).contains(&ts.nanos));
    let nanos = ts.nanos as u64; // validate() guarantees 0..1e9
    let (frac, width) = if nanos == 0 {
        (0, 0)
    } else if nanos.is_multiple_of(1_000_000) {
        (nanos / 1_000_000, 3)
    } else if nanos.is_multiple_of(1_000) {
        (nanos / 1_000, 6)
    } else {
        (nanos, 9)
    };
    if width > 0 {
        b[n] = b'.';
        put_digits(&mut b[n + 1..n + 1 + width], frac);
        n += 1 + width;
    }
    b[n] = b'Z';
    n += 1;
    debug_assert!(
        matches!(n, 20 | 24 | 27 | 30),
        "seconds and 0, 3, 6 or 9 fraction digits"
    );
    out.push(b'"');
    out.extend_from_slice(&b[..n]);
    out.push(b'"');
    Ok(())
}

/// Writes `v` as exactly `dst.len()` decimal digits, zero-padded.
fn put_digits(dst: &mut [u8], mut v: u64) {
    for d in dst.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    debug_assert_eq!(v, 0, "the value fits its width");
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01,
/// by the era-based method of H. Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365
    let mp = (5 * doy + 2) / 153; // March-based month, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let year = yoe + era * 400 + i64::from(month <= 2);
    debug_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
    (year, month, day)
}

fn write_identity(out: &mut Vec<u8>, a: &IdentityRef) {
    let mut o = Obj::open(out);
    o.string("issuer", &a.issuer);
    o.string("principal", &a.principal);
    o.string("subject", &a.subject);
    o.close();
}

fn write_message(out: &mut Vec<u8>, m: &Message, depth: usize) -> Result<(), CanonError> {
    check_depth(depth)?;
    let mut o = Obj::open(out);
    o.repeated("parts", &m.parts, depth, write_part)?;
    o.string("role", &m.role);
    o.close();
    Ok(())
}

fn write_part(out: &mut Vec<u8>, p: &Part, depth: usize) -> Result<(), CanonError> {
    use part::Part as P;
    check_depth(depth)?;
    let mut o = Obj::open(out);
    if let Some(member) = &p.part {
        let (k, r) = match member {
            P::Text(t) => ("text", write_text(o.key("text"), &t.text)),
            P::File(f) => ("file", write_file(o.key("file"), f)),
            P::Data(d) => (
                "data",
                write_data(o.key("data"), d.data.as_ref(), depth + 1),
            ),
            P::Reasoning(r) => (
                "reasoning",
                write_reasoning(o.key("reasoning"), r, depth + 1),
            ),
            P::ToolCall(t) => (
                "tool_call",
                write_tool_call(o.key("tool_call"), t, depth + 1),
            ),
            P::ToolResult(t) => (
                "tool_result",
                write_tool_result(o.key("tool_result"), t, depth + 1),
            ),
        };
        r.map_err(|e| e.at_key(k))?;
    }
    o.close();
    Ok(())
}

fn write_text(out: &mut Vec<u8>, text: &str) -> Result<(), CanonError> {
    let mut o = Obj::open(out);
    o.string("text", text);
    o.close();
    Ok(())
}

fn write_file(out: &mut Vec<u8>, f: &FilePart) -> Result<(), CanonError> {
    // Sorted: bytes, digest, mime, name, uri.
    let mut o = Obj::open(out);
    if let Some(file_part::Source::Bytes(b)) = &f.source {
        o.bytes_set("bytes", b);
    }
    o.string("digest", &f.digest);
    o.string("mime", &f.mime);
    o.string("name", &f.name);
    if let Some(file_part::Source::Uri(u)) = &f.source {
        o.string_set("uri", u);
    }
    o.close();
    Ok(())
}

fn write_data(
    out: &mut Vec<u8>,
    data: Option<&pbjson_types::Struct>,
    depth: usize,
) -> Result<(), CanonError> {
    let mut o = Obj::open(out);
    o.structure("data", data, depth)?;
    o.close();
    Ok(())
}

fn write_reasoning(out: &mut Vec<u8>, r: &ReasoningPart, depth: usize) -> Result<(), CanonError> {
    use reasoning_part::Opaque;
    check_depth(depth)?;
    // Sorted: item_id, model_id, opaque_bytes, opaque_digest, opaque_uri,
    // ordinal, provider, summary, validity_scope.
    let mut o = Obj::open(out);
    o.string("item_id", &r.item_id);
    o.string("model_id", &r.model_id);
    if let Some(Opaque::OpaqueBytes(b)) = &r.opaque {
        o.bytes_set("opaque_bytes", b);
    }
    o.string("opaque_digest", &r.opaque_digest);
    if let Some(Opaque::OpaqueUri(u)) = &r.opaque {
        o.string_set("opaque_uri", u);
    }
    o.int32("ordinal", r.ordinal);
    o.string("provider", &r.provider);
    o.repeated("summary", &r.summary, depth, write_part)?;
    o.string("validity_scope", &r.validity_scope);
    o.close();
    Ok(())
}

fn write_model_call(out: &mut Vec<u8>, m: &ModelCall, depth: usize) -> Result<(), CanonError> {
    check_depth(depth)?;
    // Sorted: id, input_hash, messages, model, params, tool_choice, tools.
    let mut o = Obj::open(out);
    o.string("id", &m.id);
    o.string("input_hash", &m.input_hash);
    o.repeated("messages", &m.messages, depth, write_message)?;
    o.string("model", &m.model);
    if !m.params.is_empty() {
        write_string_map(o.key("params"), &m.params);
    }
    if let Some(tc) = &m.tool_choice {
        write_tool_choice(o.key("tool_choice"), tc);
    }
    o.repeated("tools", &m.tools, depth, write_tool_definition)?;
    o.close();
    Ok(())
}

/// A `map<string,string>`. The BTreeMap is in UTF-8 byte order, which is
/// already UTF-16 order unless a key holds U+E000..U+FFFF or astral
/// characters; only then is a sorted copy of the entries made.
fn write_string_map(out: &mut Vec<u8>, map: &BTreeMap<String, String>) {
    let write = |out: &mut Vec<u8>, i: usize, k: &str, v: &str| {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        write_str(out, v);
    };
    out.push(b'{');
    if map.keys().any(|k| needs_utf16_resort(k)) {
        let mut entries: Vec<(&String, &String)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
        debug_assert!(
            entries
                .windows(2)
                .all(|w| cmp_utf16(w[0].0, w[1].0) == Ordering::Less),
            "map keys are distinct, so sorted strictly"
        );
        for (i, (k, v)) in entries.into_iter().enumerate() {
            write(out, i, k, v);
        }
    } else {
        debug_assert!(
            map.keys()
                .zip(map.keys().skip(1))
                .all(|(a, b)| cmp_utf16(a, b) == Ordering::Less),
            "without such keys, byte order is UTF-16 order"
        );
        for (i, (k, v)) in map.iter().enumerate() {
            write(out, i, k, v);
        }
    }
    out.push(b'}');
}

fn write_tool_choice(out: &mut Vec<u8>, tc: &ToolChoice) {
    let mut o = Obj::open(out);
    o.enumeration(
        "mode",
        tc.mode,
        tool_choice::Mode::try_from(tc.mode)
            .ok()
            .map(|m| m.as_str_name()),
    );
    o.string("name", &tc.name);
    o.close();
}

fn write_tool_definition(
    out: &mut Vec<u8>,
    t: &ToolDefinition,
    depth: usize,
) -> Result<(), CanonError> {
    let mut o = Obj::open(out);
    o.string("description", &t.description);
    o.structure("input_schema", t.input_schema.as_ref(), depth)?;
    o.string("name", &t.name);
    o.close();
    Ok(())
}

fn write_tool_call(out: &mut Vec<u8>, t: &ToolCall, depth: usize) -> Result<(), CanonError> {
    // Sorted: args, id, idempotency_key, mediation, tool.
    let mut o = Obj::open(out);
    o.structure("args", t.args.as_ref(), depth)?;
    o.string("id", &t.id);
    o.string("idempotency_key", &t.idempotency_key);
    o.enumeration(
        "mediation",
        t.mediation,
        Mediation::try_from(t.mediation)
            .ok()
            .map(|m| m.as_str_name()),
    );
    o.string("tool", &t.tool);
    o.close();
    Ok(())
}

fn write_tool_result(out: &mut Vec<u8>, r: &ToolResult, depth: usize) -> Result<(), CanonError> {
    check_depth(depth)?;
    // Sorted: approval_decision_seq, approval_request_seq, code, content,
    // error, id, is_error, output, output_digest, output_uri.
    let mut o = Obj::open(out);
    o.int64("approval_decision_seq", r.approval_decision_seq);
    o.int64("approval_request_seq", r.approval_request_seq);
    o.enumeration(
        "code",
        r.code,
        tool_result::Code::try_from(r.code)
            .ok()
            .map(|c| c.as_str_name()),
    );
    o.repeated("content", &r.content, depth, write_part)?;
    o.string("error", &r.error);
    o.string("id", &r.id);
    o.boolean("is_error", r.is_error);
    o.structure("output", r.output.as_ref(), depth)?;
    o.string("output_digest", &r.output_digest);
    o.string("output_uri", &r.output_uri);
    o.close();
    Ok(())
}

fn write_approval_request(out: &mut Vec<u8>, a: &ApprovalRequest) {
    let mut o = Obj::open(out);
    o.string("reason", &a.reason);
    o.string("tool_call_id", &a.tool_call_id);
    o.close();
}

fn write_approval_result(out: &mut Vec<u8>, a: &ApprovalResult) {
    // Sorted: approved, reason, request_seq, tool_call_id.
    let mut o = Obj::open(out);
    o.boolean("approved", a.approved);
    o.string("reason", &a.reason);
    o.int64("request_seq", a.request_seq);
    o.string("tool_call_id", &a.tool_call_id);
    o.close();
}

fn write_approval_ref(out: &mut Vec<u8>, a: &ApprovalRef) {
    let mut o = Obj::open(out);
    o.string("execution_id", &a.execution_id);
    o.int64("request_seq", a.request_seq);
    o.string("tool_call_id", &a.tool_call_id);
    o.close();
}

fn write_usage(out: &mut Vec<u8>, u: &Usage) {
    let mut o = Obj::open(out);
    o.int64("input_tokens", u.input_tokens);
    o.string("model", &u.model);
    o.int64("output_tokens", u.output_tokens);
    o.int64("reasoning_tokens", u.reasoning_tokens);
    o.close();
}

fn write_lifecycle(out: &mut Vec<u8>, l: &Lifecycle) {
    // Sorted: detail, kind, snapshot_external_uri, snapshot_local,
    // snapshot_memory, snapshot_sealed.
    let mut o = Obj::open(out);
    o.string("detail", &l.detail);
    o.enumeration(
        "kind",
        l.kind,
        lifecycle::Kind::try_from(l.kind)
            .ok()
            .map(|k| k.as_str_name()),
    );
    o.string("snapshot_external_uri", &l.snapshot_external_uri);
    o.string("snapshot_local", &l.snapshot_local);
    o.boolean("snapshot_memory", l.snapshot_memory);
    o.boolean("snapshot_sealed", l.snapshot_sealed);
    o.close();
}

fn write_harness_end(out: &mut Vec<u8>, e: &HarnessEnd) {
    let mut o = Obj::open(out);
    if let Some(err) = &e.error {
        write_error(o.key("error"), err);
    }
    o.string("state", &e.state);
    o.close();
}

fn write_error(out: &mut Vec<u8>, e: &Error) {
    let mut o = Obj::open(out);
    o.int32("code", e.code);
    o.string("description", &e.description);
    o.close();
}

fn write_execution_start(out: &mut Vec<u8>, e: &ExecutionStart) {
    // Sorted: config, harness, harness_version, input_count, resume_from_seq.
    let mut o = Obj::open(out);
    o.bytes("config", &e.config);
    o.string("harness", &e.harness);
    o.string("harness_version", &e.harness_version);
    // proto3 `optional`: present means written, zero included.
    if let Some(n) = e.input_count {
        o.int64_set("input_count", n);
    }
    o.int64("resume_from_seq", e.resume_from_seq);
    o.close();
}
