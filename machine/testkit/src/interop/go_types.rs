//! The Go host's domain types as its `encoding/json` writes them.
//!
//! The Go structs carry no JSON tags, so every key is the Go field name. These
//! mirrors decode with Go's leniencies where they change what a journal means:
//! a missing key or a `null` scalar is the zero value, unknown keys are
//! ignored, `[]byte` is padded standard base64, `time.Time` is RFC 3339, and a
//! `map[string]any` keeps every number as a float64.
//!
//! Go's case-insensitive key matching is not mirrored: Go's own writer always
//! emits the exact field names, and a near-miss key would silently drop data.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// Decodes a Go value field: `null` leaves the zero value, as Go does.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// One `eventlog.Record`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoRecord {
    #[serde(rename = "Seq", deserialize_with = "nullable")]
    pub seq: i64,
    #[serde(rename = "PrevHash", deserialize_with = "nullable")]
    pub prev_hash: String,
    #[serde(rename = "Hash", deserialize_with = "nullable")]
    pub hash: String,
    #[serde(rename = "Fence", deserialize_with = "nullable")]
    pub fence: i64,
    #[serde(rename = "Event", deserialize_with = "nullable")]
    pub event: GoEvent,
}

/// `api.Event`: a header plus at most one meaningful body pointer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoEvent {
    #[serde(rename = "ExecutionID", deserialize_with = "nullable")]
    pub execution_id: String,
    #[serde(rename = "Timestamp", deserialize_with = "nullable")]
    pub timestamp: GoTime,
    #[serde(rename = "SchemaVersion", deserialize_with = "nullable")]
    pub schema_version: i32,
    /// The Go `EventKind` string, e.g. `"INPUT"`.
    #[serde(rename = "Kind", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(rename = "Message")]
    pub message: Option<GoMessage>,
    #[serde(rename = "ModelCall")]
    pub model_call: Option<GoModelCall>,
    #[serde(rename = "ToolCall")]
    pub tool_call: Option<GoToolCall>,
    #[serde(rename = "Result")]
    pub result: Option<GoToolResult>,
    #[serde(rename = "Approval")]
    pub approval: Option<GoApprovalRequest>,
    #[serde(rename = "ApprovalResult")]
    pub approval_result: Option<GoApprovalResult>,
    #[serde(rename = "Usage")]
    pub usage: Option<GoUsage>,
    #[serde(rename = "Lifecycle")]
    pub lifecycle: Option<GoLifecycle>,
    #[serde(rename = "End")]
    pub end: Option<GoHarnessEnd>,
    #[serde(rename = "Err")]
    pub err: Option<GoError>,
    #[serde(rename = "ExecutionStart")]
    pub execution_start: Option<GoExecutionStart>,
    /// Transport-only park acknowledgement; converted like the rest, last.
    #[serde(rename = "Parked")]
    pub parked: Option<GoApprovalRef>,
    #[serde(rename = "Actor", deserialize_with = "nullable")]
    pub actor: GoIdentityRef,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoIdentityRef {
    #[serde(rename = "Principal", deserialize_with = "nullable")]
    pub principal: String,
    #[serde(rename = "Issuer", deserialize_with = "nullable")]
    pub issuer: String,
    #[serde(rename = "Subject", deserialize_with = "nullable")]
    pub subject: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoMessage {
    #[serde(rename = "Role", deserialize_with = "nullable")]
    pub role: String,
    #[serde(rename = "Parts", deserialize_with = "nullable")]
    pub parts: Vec<GoPart>,
}

/// `api.Part`: exactly one member is meant to be set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoPart {
    #[serde(rename = "Text")]
    pub text: Option<GoTextPart>,
    #[serde(rename = "File")]
    pub file: Option<GoFilePart>,
    #[serde(rename = "Data")]
    pub data: Option<GoMap>,
    #[serde(rename = "Reasoning")]
    pub reasoning: Option<GoReasoningPart>,
    #[serde(rename = "ToolCall")]
    pub tool_call: Option<GoToolCall>,
    #[serde(rename = "ToolResult")]
    pub tool_result: Option<GoToolResult>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoTextPart {
    #[serde(rename = "Text", deserialize_with = "nullable")]
    pub text: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoFilePart {
    #[serde(rename = "MIME", deserialize_with = "nullable")]
    pub mime: String,
    #[serde(rename = "Bytes", deserialize_with = "go_bytes")]
    pub bytes: Vec<u8>,
    #[serde(rename = "URI", deserialize_with = "nullable")]
    pub uri: String,
    #[serde(rename = "Digest", deserialize_with = "nullable")]
    pub digest: String,
    #[serde(rename = "Name", deserialize_with = "nullable")]
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoReasoningPart {
    #[serde(rename = "Provider", deserialize_with = "nullable")]
    pub provider: String,
    #[serde(rename = "ModelID", deserialize_with = "nullable")]
    pub model_id: String,
    #[serde(rename = "Opaque", deserialize_with = "go_bytes")]
    pub opaque: Vec<u8>,
    #[serde(rename = "OpaqueURI", deserialize_with = "nullable")]
    pub opaque_uri: String,
    #[serde(rename = "OpaqueDigest", deserialize_with = "nullable")]
    pub opaque_digest: String,
    #[serde(rename = "Summary", deserialize_with = "nullable")]
    pub summary: Vec<GoPart>,
    #[serde(rename = "ItemID", deserialize_with = "nullable")]
    pub item_id: String,
    #[serde(rename = "Ordinal", deserialize_with = "nullable")]
    pub ordinal: i32,
    #[serde(rename = "ValidityScope", deserialize_with = "nullable")]
    pub validity_scope: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoModelCall {
    #[serde(rename = "Model", deserialize_with = "nullable")]
    pub model: String,
    #[serde(rename = "Params", deserialize_with = "nullable")]
    pub params: BTreeMap<String, String>,
    #[serde(rename = "InputHash", deserialize_with = "nullable")]
    pub input_hash: String,
    #[serde(rename = "ID", deserialize_with = "nullable")]
    pub id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoToolCall {
    #[serde(rename = "ID", deserialize_with = "nullable")]
    pub id: String,
    #[serde(rename = "Tool", deserialize_with = "nullable")]
    pub tool: String,
    #[serde(rename = "Args")]
    pub args: Option<GoMap>,
    /// The Go `Mediation` string, e.g. `"CONTROLLER_MEDIATED"`.
    #[serde(rename = "Mediation", deserialize_with = "nullable")]
    pub mediation: String,
    #[serde(rename = "IdempotencyKey", deserialize_with = "nullable")]
    pub idempotency_key: String,
}

/// `api.ToolResult`. Its transient `Approval` member is tagged `json:"-"` in
/// Go, so it never appears here.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GoToolResult {
    #[serde(rename = "ID", deserialize_with = "nullable")]
    pub id: String,
    #[serde(rename = "Output")]
    pub output: Option<GoMap>,
    #[serde(rename = "OutputURI", deserialize_with = "nullable")]
    pub output_uri: String,
    #[serde(rename = "OutputDigest", deserialize_with = "nullable")]
    pub output_digest: String,
    #[serde(rename = "IsError", deserialize_with = "nullable")]
    pub is_error: bool,
    #[serde(rename = "Error", deserialize_with = "nullable")]
    pub error: String,
    #[serde(rename = "Content", deserialize_with = "nullable")]
    pub content: Vec<GoPart>,
    #[serde(rename = "Code", deserialize_with = "nullable")]
    pub code: i32,
    #[serde(rename = "ApprovalRequestSeq", deserialize_with = "nullable")]
    pub approval_request_seq: i64,
    #[serde(rename = "ApprovalDecisionSeq", deserialize_with = "nullable")]
    pub approval_decision_seq: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoApprovalRequest {
    #[serde(rename = "ToolCallID", deserialize_with = "nullable")]
    pub tool_call_id: String,
    #[serde(rename = "Reason", deserialize_with = "nullable")]
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoApprovalResult {
    #[serde(rename = "ToolCallID", deserialize_with = "nullable")]
    pub tool_call_id: String,
    #[serde(rename = "Approved", deserialize_with = "nullable")]
    pub approved: bool,
    #[serde(rename = "Reason", deserialize_with = "nullable")]
    pub reason: String,
    #[serde(rename = "RequestSeq", deserialize_with = "nullable")]
    pub request_seq: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoApprovalRef {
    #[serde(rename = "ExecutionID", deserialize_with = "nullable")]
    pub execution_id: String,
    #[serde(rename = "ToolCallID", deserialize_with = "nullable")]
    pub tool_call_id: String,
    #[serde(rename = "RequestSeq", deserialize_with = "nullable")]
    pub request_seq: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoUsage {
    #[serde(rename = "Model", deserialize_with = "nullable")]
    pub model: String,
    #[serde(rename = "InputTokens", deserialize_with = "nullable")]
    pub input_tokens: i64,
    #[serde(rename = "OutputTokens", deserialize_with = "nullable")]
    pub output_tokens: i64,
    #[serde(rename = "ReasoningTokens", deserialize_with = "nullable")]
    pub reasoning_tokens: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoLifecycle {
    /// The Go `LifecycleKind` string, e.g. `"FORK"`.
    #[serde(rename = "Kind", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(rename = "Detail", deserialize_with = "nullable")]
    pub detail: String,
    #[serde(rename = "Snapshot")]
    pub snapshot: Option<GoSnapshotRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoSnapshotRef {
    #[serde(rename = "Local", deserialize_with = "nullable")]
    pub local: String,
    #[serde(rename = "ExternalURI", deserialize_with = "nullable")]
    pub external_uri: String,
    #[serde(rename = "Memory", deserialize_with = "nullable")]
    pub memory: bool,
    #[serde(rename = "Sealed", deserialize_with = "nullable")]
    pub sealed: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoHarnessEnd {
    #[serde(rename = "State", deserialize_with = "nullable")]
    pub state: String,
    #[serde(rename = "Error")]
    pub error: Option<GoError>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoError {
    #[serde(rename = "Code", deserialize_with = "nullable")]
    pub code: i32,
    #[serde(rename = "Description", deserialize_with = "nullable")]
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GoExecutionStart {
    #[serde(rename = "Config", deserialize_with = "go_bytes")]
    pub config: Vec<u8>,
    #[serde(rename = "ResumeFromSeq", deserialize_with = "nullable")]
    pub resume_from_seq: i64,
    /// `*int64` in Go: `null` means "unknown", distinct from 0.
    #[serde(rename = "InputCount")]
    pub input_count: Option<i64>,
    #[serde(rename = "Harness", deserialize_with = "nullable")]
    pub harness: String,
    #[serde(rename = "HarnessVersion", deserialize_with = "nullable")]
    pub harness_version: String,
}

/// Go's `[]byte` JSON form. Go's decoder skips CR and LF inside the text and
/// does not insist that unused trailing bits are zero, so neither do we.
fn go_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    const ENGINE: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
    );
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(Vec::new());
    };
    let cleaned: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    ENGINE
        .decode(cleaned.as_bytes())
        .map_err(|e| de::Error::custom(format_args!("invalid base64: {e}")))
}

/// A decoded Go `time.Time`, reduced to the instant it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoTime {
    /// Seconds since the Unix epoch.
    pub seconds: i64,
    /// Nanoseconds within the second, 0..1e9.
    pub nanos: i32,
}

impl GoTime {
    /// Go's zero `time.Time`: 0001-01-01T00:00:00Z.
    pub const ZERO: GoTime = GoTime {
        seconds: -62_135_596_800,
        nanos: 0,
    };

    /// Whether this is Go's zero time, which the wire layer leaves unset.
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// Parses RFC 3339 as Go's `time.Time` JSON decoder accepts it: a
    /// four-digit year, an optional fraction (digits past nanoseconds are
    /// dropped), and `Z` or a `±hh:mm` offset.
    pub fn parse_rfc3339(s: &str) -> Option<GoTime> {
        let b = s.as_bytes();
        let num = |from: usize, len: usize| -> Option<i64> {
            let digits = b.get(from..from + len)?;
            digits.iter().try_fold(0i64, |acc, c| {
                c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
            })
        };
        let sep = |at: usize, want: u8| b.get(at) == Some(&want);
        if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
            return None;
        }
        let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
        let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        let mut at = 19;
        let mut nanos = 0i64;
        if sep(at, b'.') {
            at += 1;
            let start = at;
            while b.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            if at == start {
                return None;
            }
            for i in 0..9 {
                let digit = if start + i < at {
                    i64::from(b[start + i] - b'0')
                } else {
                    0
                };
                nanos = nanos * 10 + digit;
            }
        }
        let offset = match b.get(at)? {
            b'Z' if at + 1 == b.len() => 0,
            sign @ (b'+' | b'-') if at + 6 == b.len() && sep(at + 3, b':') => {
                let (oh, om) = (num(at + 1, 2)?, num(at + 4, 2)?);
                if oh > 23 || om > 59 {
                    return None;
                }
                let off = oh * 3600 + om * 60;
                if *sign == b'-' { -off } else { off }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
        Some(GoTime {
            seconds,
            nanos: i32::try_from(nanos).ok()?,
        })
    }
}

impl Default for GoTime {
    fn default() -> Self {
        Self::ZERO
    }
}

impl<'de> Deserialize<'de> for GoTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(GoTime::ZERO),
            Some(text) => GoTime::parse_rfc3339(&text)
                .ok_or_else(|| de::Error::custom(format_args!("invalid timestamp {text:?}"))),
        }
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A Go `map[string]any` decoded from JSON.
pub type GoMap = BTreeMap<String, GoValue>;

/// A value inside a Go `map[string]any`.
///
/// Go decodes every JSON number into a float64. An integer literal whose
/// magnitude exceeds 2^53 would be silently rounded there; it is kept apart
/// here so the conversion can refuse it instead of hashing a different value
/// than the one written. An integer literal too long for 64 bits reaches
/// the decoder only as a float, so it is taken as one (rounded, as in Go).
#[derive(Debug, Clone, PartialEq)]
pub enum GoValue {
    Null,
    Bool(bool),
    Number(f64),
    /// An integer literal beyond ±2^53, which float64 cannot hold exactly.
    UnsafeInteger(i128),
    String(String),
    Array(Vec<GoValue>),
    Object(GoMap),
}

/// 2^53: the largest magnitude below which every integer is a float64.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

impl<'de> Deserialize<'de> for GoValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(GoValueVisitor)
    }
}

struct GoValueVisitor;

impl<'de> Visitor<'de> for GoValueVisitor {
    type Value = GoValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a json value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<GoValue, E> {
        Ok(GoValue::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<GoValue, E> {
        if v.unsigned_abs() > MAX_SAFE_INTEGER {
            Ok(GoValue::UnsafeInteger(i128::from(v)))
        } else {
            // Exact: the magnitude is at most 2^53.
            Ok(GoValue::Number(v as f64))
        }
    }

    fn visit_u64<E>(self, v: u64) -> Result<GoValue, E> {
        if v > MAX_SAFE_INTEGER {
            Ok(GoValue::UnsafeInteger(i128::from(v)))
        } else {
            Ok(GoValue::Number(v as f64))
        }
    }

    fn visit_f64<E>(self, v: f64) -> Result<GoValue, E> {
        Ok(GoValue::Number(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<GoValue, E> {
        Ok(GoValue::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<GoValue, E> {
        Ok(GoValue::String(v))
    }

    fn visit_unit<E>(self) -> Result<GoValue, E> {
        Ok(GoValue::Null)
    }

    fn visit_none<E>(self) -> Result<GoValue, E> {
        Ok(GoValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<GoValue, D::Error> {
        GoValue::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GoValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(GoValue::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<GoValue, A::Error> {
        // A repeated key keeps its last value, as in Go.
        let mut out = GoMap::new();
        while let Some((k, v)) = map.next_entry::<String, GoValue>()? {
            out.insert(k, v);
        }
        Ok(GoValue::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_time_parses_as_zero() {
        assert!(
            GoTime::parse_rfc3339("0001-01-01T00:00:00Z")
                .unwrap()
                .is_zero()
        );
        // Same instant written with an offset.
        assert!(
            GoTime::parse_rfc3339("0001-01-01T01:30:00+01:30")
                .unwrap()
                .is_zero()
        );
    }

    #[test]
    fn time_fields() {
        let t = GoTime::parse_rfc3339("2023-11-14T22:13:20Z").unwrap();
        assert_eq!((t.seconds, t.nanos), (1_700_000_000, 0));
        let t = GoTime::parse_rfc3339("2023-11-14T23:13:20.5+01:00").unwrap();
        assert_eq!((t.seconds, t.nanos), (1_700_000_000, 500_000_000));
        let t = GoTime::parse_rfc3339("1970-01-01T00:00:00.1234567891Z").unwrap();
        assert_eq!((t.seconds, t.nanos), (0, 123_456_789));
        let t = GoTime::parse_rfc3339("1969-12-31T23:59:59.999999999Z").unwrap();
        assert_eq!((t.seconds, t.nanos), (-1, 999_999_999));
        let t = GoTime::parse_rfc3339("2024-02-29T00:00:00-00:00").unwrap();
        assert_eq!(t.seconds, 1_709_164_800);
    }

    #[test]
    fn bad_times_are_rejected() {
        for bad in [
            "",
            "2023-11-14",
            "2023-11-14 22:13:20Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:60Z",
            "2023-11-14T22:13:20+0100",
            "2023-11-14T22:13:20Zjunk",
            "२०२३-11-14T22:13:20Z",
        ] {
            assert_eq!(GoTime::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn numbers_decode_as_go_does() {
        // 1e400 overflows float64; Go refuses it too.
        assert!(serde_json::from_str::<GoValue>("1e400").is_err());
        let v: GoValue = serde_json::from_str(
            "[1, -2, 1.5, 9007199254740992, 9007199254740993, -9007199254740993]",
        )
        .unwrap();
        assert_eq!(
            v,
            GoValue::Array(vec![
                GoValue::Number(1.0),
                GoValue::Number(-2.0),
                GoValue::Number(1.5),
                GoValue::Number(9_007_199_254_740_992.0),
                GoValue::UnsafeInteger(9_007_199_254_740_993),
                GoValue::UnsafeInteger(-9_007_199_254_740_993),
            ])
        );
    }
}
