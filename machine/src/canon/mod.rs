//! Canonical form (proto3-JSON + RFC 8785) and content hashes.
//!
//! The chain hash of a record is
//! `hex(sha256(JCS({"event": proto3-JSON(event), "prev_hash": prev, "seq": "N"})))`
//! with proto field names, enum names and unpopulated fields omitted, which
//! is byte-identical with the Go host (protojson + gowebpki/jcs).
//!
//! The event is written straight from the prost structs into a byte buffer,
//! with keys in sorted order, instead of building a JSON tree and sorting it:
//! every append and every verification pays for this, so it is the hot path.
//! The pbjson serde impls plus a generic JCS pass produce the same bytes and
//! serve as the test oracle.

mod event;
pub mod jcs;
mod value;

use agentsessions_proto::v1::{Event, HarnessSpec};
use sha2::{Digest, Sha256};

pub use jcs::{cmp_utf16, hex_lower, is_sha256_hex};

/// Deepest nesting (messages, Struct/List levels) the writers descend into.
/// Protobuf decoding already stops at 100 message levels; the limit only
/// guards hand-built values against exhausting the stack.
pub const MAX_DEPTH: usize = 512;

/// Why an event (or JSON value) has no canonical form.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CanonError {
    /// A Struct number (or JSON number) that is NaN or infinite.
    #[error("non-finite number at {path}")]
    NonFiniteNumber { path: String },
    /// A `google.protobuf.Value` with no kind set; protojson refuses these.
    #[error("value without a kind at {path}")]
    MissingValueKind { path: String },
    /// A timestamp outside 0001-01-01..9999-12-31 or with nanos outside 0..1e9.
    #[error("timestamp out of range: {seconds}s {nanos}ns")]
    TimestampOutOfRange { seconds: i64, nanos: i32 },
    /// A JSON integer a double cannot hold exactly (beyond 2^53).
    #[error("integer {value} is not json-safe")]
    IntegerNotJsonSafe { value: String },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {limit}")]
    TooDeep { limit: usize },
    /// The pbjson serializer refused the message (slow path only).
    #[error("proto3-json: {0}")]
    Proto3Json(String),
}

impl CanonError {
    /// Prefixes the error's path with an object key or field name. Keys
    /// that are not plain identifiers are quoted (`["a b"]`) so the path
    /// stays unambiguous.
    pub(crate) fn at_key(self, key: &str) -> Self {
        self.map_path(|p| {
            let plain =
                !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            let seg = if plain {
                key.to_owned()
            } else {
                format!("[{key:?}]")
            };
            debug_assert_eq!(
                seg.starts_with('['),
                !plain,
                "a key is bracketed exactly when it is not a plain identifier"
            );
            join(seg, p)
        })
    }

    /// Prefixes the error's path with an array index.
    pub(crate) fn at_index(self, i: usize) -> Self {
        self.map_path(|p| join(format!("[{i}]"), p))
    }

    fn map_path(self, f: impl FnOnce(String) -> String) -> Self {
        let kind = std::mem::discriminant(&self);
        let mapped = match self {
            Self::NonFiniteNumber { path } => Self::NonFiniteNumber { path: f(path) },
            Self::MissingValueKind { path } => Self::MissingValueKind { path: f(path) },
            other => other,
        };
        debug_assert_eq!(
            std::mem::discriminant(&mapped),
            kind,
            "a path prefix keeps the error's kind"
        );
        mapped
    }
}

fn join(head: String, tail: String) -> String {
    debug_assert!(!head.is_empty(), "a path segment is never empty");
    let dot = !tail.is_empty() && !tail.starts_with('[');
    let len = head.len() + usize::from(dot) + tail.len();
    let joined = if tail.is_empty() {
        head
    } else if tail.starts_with('[') {
        head + &tail
    } else {
        head + "." + &tail
    };
    debug_assert_eq!(
        joined.len(),
        len,
        "a dot only between a name and what follows"
    );
    joined
}

/// Canonical bytes of an event alone: JCS(proto3-JSON(event)). Used as an
/// event fingerprint; the chain hash covers [`canonical_record`] instead.
pub fn canonical_event(ev: &Event) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::with_capacity(512);
    event::write_event(&mut out, ev)?;
    debug_assert!(
        out.first() == Some(&b'{') && out.last() == Some(&b'}'),
        "an event is a JSON object"
    );
    debug_assert!(std::str::from_utf8(&out).is_ok(), "JCS output is UTF-8");
    Ok(out)
}

/// Canonical bytes of a chain record:
/// `{"event":…,"prev_hash":"…","seq":"N"}`.
pub fn canonical_record(prev_hash: &str, seq: i64, ev: &Event) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::with_capacity(512 + prev_hash.len());
    canonical_record_into(&mut out, prev_hash, seq, ev)?;
    debug_assert!(std::str::from_utf8(&out).is_ok(), "JCS output is UTF-8");
    Ok(out)
}

/// Like [`canonical_record`] but appends to `out`, so a caller hashing many
/// records can reuse one buffer. On error `out` may hold a partial record.
pub fn canonical_record_into(
    out: &mut Vec<u8>,
    prev_hash: &str,
    seq: i64,
    ev: &Event,
) -> Result<(), CanonError> {
    // The three envelope keys are already in sorted order.
    let start = out.len();
    out.extend_from_slice(b"{\"event\":");
    event::write_event(out, ev)?;
    debug_assert!(
        out[start..].starts_with(b"{\"event\":{") && out.last() == Some(&b'}'),
        "the event member is an object"
    );
    out.extend_from_slice(b",\"prev_hash\":");
    jcs::write_str(out, prev_hash);
    out.extend_from_slice(b",\"seq\":");
    jcs::write_i64_string(out, seq);
    out.push(b'}');
    Ok(())
}

/// The record's content hash: lowercase hex SHA-256 of [`canonical_record`].
pub fn content_hash(prev_hash: &str, seq: i64, ev: &Event) -> Result<String, CanonError> {
    let bytes = canonical_record(prev_hash, seq, ev)?;
    Ok(sha256_hex(&bytes))
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let hex = hex_lower(&Sha256::digest(bytes));
    debug_assert!(is_sha256_hex(&hex), "a SHA-256 is 64 lowercase hex digits");
    hex
}

/// Registry digest of a harness spec: `"sha256:" + hex(sha256(JCS(proto3-JSON(spec))))`.
///
/// Registration is rare, so this goes through the pbjson serializer and the
/// generic JCS writer rather than a dedicated fast path.
pub fn spec_digest(spec: &HarnessSpec) -> Result<String, CanonError> {
    let value = serde_json::to_value(spec).map_err(|e| CanonError::Proto3Json(e.to_string()))?;
    let bytes = canonical_json_value(&value)?;
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    debug_assert!(
        digest.strip_prefix("sha256:").is_some_and(is_sha256_hex),
        "a spec digest is \"sha256:\" and 64 lowercase hex digits"
    );
    Ok(digest)
}

/// RFC 8785 canonical bytes of an arbitrary JSON value.
pub fn canonical_json_value(v: &serde_json::Value) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::new();
    jcs::write_json_value(&mut out, v, 0)?;
    debug_assert!(!out.is_empty(), "every JSON value has a non-empty form");
    Ok(out)
}

/// RFC 8785 canonical bytes of a `google.protobuf.Struct`, as it appears
/// inside an event (for callers that fingerprint tool arguments etc.).
pub fn canonical_struct(s: &pbjson_types::Struct) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::new();
    value::write_struct(&mut out, s, 0)?;
    debug_assert!(
        out.first() == Some(&b'{') && out.last() == Some(&b'}'),
        "a Struct is a JSON object"
    );
    Ok(out)
}
