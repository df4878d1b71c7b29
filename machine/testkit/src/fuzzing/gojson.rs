//! Target `input_hash`: the Go-compatible model input encoding against an
//! independent reference encoder.
//!
//! The reference is written from the rules in the controller reference
//! (§4.4) in the most direct way: serde structs that mirror Go's
//! `api.ModelRequest` field for field, serialized by `serde_json` through
//! a formatter that applies Go's string escaping and float layout. It
//! shares no code with `inputhash`: floats come from ryu's shortest digits
//! (the machine uses the standard library's), base64 is written out here,
//! and escaping is layered on serde_json's own.

use std::collections::BTreeMap;
use std::io;

use agentsessions_proto::v1::{
    FilePart, Mediation, Message, ModelCall, Part, ReasoningPart, ToolCall, ToolChoice,
    ToolDefinition, ToolResult, file_part, part, reasoning_part, tool_choice,
};
use arbitrary::{Result, Unstructured};
use pbjson_types::value::Kind;
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::draw;
use agentsessions_machine::inputhash;

/// The target body.
pub fn input_hash(data: &[u8]) {
    // Out of data is the only error; it just ends the input.
    let _ = run(&mut Unstructured::new(data));
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let wild = u.ratio(1, 4)?;
    let call = draw::model_call(u, wild)?;
    let request = inputhash::from_model_call(&call);
    let fast = inputhash::encode_go_json(&request);
    let reference = encode(&call);
    match (&fast, &reference) {
        (Ok(f), Ok(r)) => assert_eq!(
            String::from_utf8_lossy(f),
            String::from_utf8_lossy(r),
            "the Go encoding equals the reference"
        ),
        (Err(_), Err(_)) => {}
        _ => panic!("only one encoder refused: {fast:?} / {reference:?}"),
    }
    if let Ok(bytes) = &fast {
        assert_eq!(
            inputhash::input_hash(&request).ok(),
            Some(agentsessions_machine::canon::sha256_hex(bytes)),
            "the input hash is the SHA-256 of the encoding"
        );
    }
    Ok(())
}

/// Go's `json.Marshal(api.ModelRequest)` for `call`, by way of serde.
pub fn encode(call: &ModelCall) -> Result<Vec<u8>, String> {
    let choice = match &call.tool_choice {
        None => None,
        Some(c) => Some(GoToolChoice::new(c)?),
    };
    let request = GoRequest {
        model: &call.model,
        messages: nil_if_empty(&call.messages, GoMessage),
        params: (!call.params.is_empty()).then_some(&call.params),
        tools: nil_if_empty(&call.tools, GoToolDefinition),
        tool_choice: choice,
    };
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    request.serialize(&mut ser).map_err(|e| e.to_string())?;
    Ok(out)
}

/// A Go slice decoded from proto: nil (`null`) when empty.
fn nil_if_empty<'a, T, G>(items: &'a [T], wrap: impl Fn(&'a T) -> G) -> Option<Vec<G>> {
    (!items.is_empty()).then(|| items.iter().map(wrap).collect())
}

#[derive(Serialize)]
struct GoRequest<'a> {
    #[serde(rename = "Model")]
    model: &'a str,
    #[serde(rename = "Messages")]
    messages: Option<Vec<GoMessage<'a>>>,
    #[serde(rename = "Params")]
    params: Option<&'a BTreeMap<String, String>>,
    #[serde(rename = "Tools", skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<GoToolDefinition<'a>>>,
    #[serde(rename = "ToolChoice", skip_serializing_if = "Option::is_none")]
    tool_choice: Option<GoToolChoice<'a>>,
}

struct GoMessage<'a>(&'a Message);

impl Serialize for GoMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("Role", &self.0.role)?;
        m.serialize_entry("Parts", &nil_if_empty(&self.0.parts, GoPart))?;
        m.end()
    }
}

/// Text, File, Data and Reasoning are always present (null when unset);
/// ToolCall and ToolResult are omitempty pointers.
struct GoPart<'a>(&'a Part);

impl Serialize for GoPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0.part.as_ref();
        let mut m = s.serialize_map(None)?;
        let text = match p {
            Some(part::Part::Text(t)) => Some(BTreeMap::from([("Text", &t.text)])),
            _ => None,
        };
        m.serialize_entry("Text", &text)?;
        let file = match p {
            Some(part::Part::File(f)) => Some(GoFile(f)),
            _ => None,
        };
        m.serialize_entry("File", &file)?;
        let data = match p {
            Some(part::Part::Data(d)) => d.data.as_ref().map(GoStruct),
            _ => None,
        };
        m.serialize_entry("Data", &data)?;
        let reasoning = match p {
            Some(part::Part::Reasoning(r)) => Some(GoReasoning(r)),
            _ => None,
        };
        m.serialize_entry("Reasoning", &reasoning)?;
        match p {
            Some(part::Part::ToolCall(c)) => m.serialize_entry("ToolCall", &GoToolCall(c))?,
            Some(part::Part::ToolResult(r)) => m.serialize_entry("ToolResult", &GoToolResult(r))?,
            _ => {}
        }
        m.end()
    }
}

struct GoFile<'a>(&'a FilePart);

impl Serialize for GoFile<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let f = self.0;
        let (bytes, uri): (&[u8], &str) = match &f.source {
            Some(file_part::Source::Bytes(b)) => (b, ""),
            Some(file_part::Source::Uri(u)) => (&[], u),
            None => (&[], ""),
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("MIME", &f.mime)?;
        m.serialize_entry("Bytes", &base64(bytes))?;
        m.serialize_entry("URI", uri)?;
        m.serialize_entry("Digest", &f.digest)?;
        m.serialize_entry("Name", &f.name)?;
        m.end()
    }
}

struct GoReasoning<'a>(&'a ReasoningPart);

impl Serialize for GoReasoning<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let (opaque, uri): (&[u8], &str) = match &r.opaque {
            Some(reasoning_part::Opaque::OpaqueBytes(b)) => (b, ""),
            Some(reasoning_part::Opaque::OpaqueUri(u)) => (&[], u),
            None => (&[], ""),
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("Provider", &r.provider)?;
        m.serialize_entry("ModelID", &r.model_id)?;
        m.serialize_entry("Opaque", &base64(opaque))?;
        m.serialize_entry("OpaqueURI", uri)?;
        m.serialize_entry("OpaqueDigest", &r.opaque_digest)?;
        m.serialize_entry("Summary", &nil_if_empty(&r.summary, GoPart))?;
        m.serialize_entry("ItemID", &r.item_id)?;
        m.serialize_entry("Ordinal", &r.ordinal)?;
        m.serialize_entry("ValidityScope", &r.validity_scope)?;
        m.end()
    }
}

struct GoToolDefinition<'a>(&'a ToolDefinition);

impl Serialize for GoToolDefinition<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("Name", &t.name)?;
        m.serialize_entry("Description", &t.description)?;
        m.serialize_entry("InputSchema", &t.input_schema.as_ref().map(GoStruct))?;
        m.end()
    }
}

#[derive(Serialize)]
struct GoToolChoice<'a> {
    #[serde(rename = "Mode")]
    mode: &'static str,
    #[serde(rename = "Name")]
    name: &'a str,
}

impl<'a> GoToolChoice<'a> {
    /// The Go host refuses a mode it does not know.
    fn new(c: &'a ToolChoice) -> Result<Self, String> {
        let mode = match tool_choice::Mode::try_from(c.mode) {
            Ok(tool_choice::Mode::Unspecified) => "",
            Ok(tool_choice::Mode::Auto) => "AUTO",
            Ok(tool_choice::Mode::None) => "NONE",
            Ok(tool_choice::Mode::Required) => "REQUIRED",
            Err(_) => return Err(format!("unknown tool choice mode {}", c.mode)),
        };
        Ok(Self {
            mode,
            name: &c.name,
        })
    }
}

struct GoToolCall<'a>(&'a ToolCall);

impl Serialize for GoToolCall<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mediation = match Mediation::try_from(c.mediation) {
            Ok(Mediation::InHarnessReported) => "IN_HARNESS_REPORTED",
            Ok(Mediation::ControllerMediated) => "CONTROLLER_MEDIATED",
            Ok(Mediation::RequiresApproval) => "REQUIRES_APPROVAL",
            _ => "",
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("ID", &c.id)?;
        m.serialize_entry("Tool", &c.tool)?;
        m.serialize_entry("Args", &c.args.as_ref().map(GoStruct))?;
        m.serialize_entry("Mediation", mediation)?;
        m.serialize_entry("IdempotencyKey", &c.idempotency_key)?;
        m.end()
    }
}

/// The receipt fields after Content are omitempty, as the machine decided
/// (upstream does not say); Content is omitempty per the reference.
struct GoToolResult<'a>(&'a ToolResult);

impl Serialize for GoToolResult<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("ID", &r.id)?;
        m.serialize_entry("Output", &r.output.as_ref().map(GoStruct))?;
        m.serialize_entry("OutputURI", &r.output_uri)?;
        m.serialize_entry("OutputDigest", &r.output_digest)?;
        m.serialize_entry("IsError", &r.is_error)?;
        m.serialize_entry("Error", &r.error)?;
        if !r.content.is_empty() {
            m.serialize_entry("Content", &nil_if_empty(&r.content, GoPart))?;
        }
        if r.code != 0 {
            m.serialize_entry("Code", &r.code)?;
        }
        if r.approval_request_seq != 0 {
            m.serialize_entry("ApprovalRequestSeq", &r.approval_request_seq)?;
        }
        if r.approval_decision_seq != 0 {
            m.serialize_entry("ApprovalDecisionSeq", &r.approval_decision_seq)?;
        }
        m.end()
    }
}

/// A `map[string]any` from a Struct: keys sorted, as Go sorts map keys.
struct GoStruct<'a>(&'a pbjson_types::Struct);

impl Serialize for GoStruct<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let sorted: BTreeMap<&String, GoAny<'_>> =
            self.0.fields.iter().map(|(k, v)| (k, GoAny(v))).collect();
        sorted.serialize(s)
    }
}

/// A value inside a Struct: Go's `any` as decoded from JSON.
struct GoAny<'a>(&'a pbjson_types::Value);

impl Serialize for GoAny<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0.kind {
            None | Some(Kind::NullValue(_)) => s.serialize_unit(),
            Some(Kind::BoolValue(b)) => s.serialize_bool(*b),
            Some(Kind::NumberValue(n)) if n.is_finite() => s.serialize_f64(*n),
            Some(Kind::NumberValue(n)) => Err(S::Error::custom(format!("unsupported value {n}"))),
            Some(Kind::StringValue(v)) => s.serialize_str(v),
            Some(Kind::StructValue(v)) => GoStruct(v).serialize(s),
            Some(Kind::ListValue(l)) => {
                let mut seq = s.serialize_seq(Some(l.values.len()))?;
                for v in &l.values {
                    seq.serialize_element(&GoAny(v))?;
                }
                seq.end()
            }
        }
    }
}

/// Standard base64 with padding; a nil (empty) `[]byte` is `null`.
fn base64(bytes: &[u8]) -> Option<String> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if bytes.is_empty() {
        return None;
    }
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    Some(out)
}

/// serde_json's output with Go's differences: `<`, `>`, `&`, U+2028 and
/// U+2029 escaped, and floats laid out as `encoding/json` lays them out.
/// serde_json already escapes quotes, backslashes and controls the way Go
/// 1.22+ does (short forms for `\b \f \n \r \t`, lowercase `\u00xx`).
struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        for c in fragment.chars() {
            match c {
                '<' => writer.write_all(b"\\u003c")?,
                '>' => writer.write_all(b"\\u003e")?,
                '&' => writer.write_all(b"\\u0026")?,
                '\u{2028}' => writer.write_all(b"\\u2028")?,
                '\u{2029}' => writer.write_all(b"\\u2029")?,
                c => writer.write_all(c.encode_utf8(&mut [0; 4]).as_bytes())?,
            }
        }
        Ok(())
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(go_float(value).as_bytes())
    }
}

/// Go's float64 layout: plain decimal when 1e-6 <= |f| < 1e21 (or zero),
/// otherwise `d[.ddd]e±x` with no leading zeros in the exponent; the
/// digits are the shortest that round-trip, taken here from ryu by way of
/// serde_json.
fn go_float(f: f64) -> String {
    let shortest = serde_json::to_string(&f).expect("finite floats serialize");
    let (negative, unsigned) = match shortest.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, shortest.as_str()),
    };
    let (mantissa, exp) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu writes a decimal exponent")),
        None => (unsigned, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // value = 0.DIGITS × 10^point
    let all = format!("{int}{frac}");
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0').trim_end_matches('0');
    let sign = if negative { "-" } else { "" };
    if digits.is_empty() {
        return format!("{sign}0");
    }
    let point = int.len() as i32 - lead as i32 + exp;
    let abs = f.abs();
    if (1e-6..1e21).contains(&abs) {
        let n = digits.len() as i32;
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point >= n {
            format!("{digits}{}", "0".repeat((point - n) as usize))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        return format!("{sign}{body}");
    }
    let e = point - 1;
    let (first, rest) = digits.split_at(1);
    let dot = if rest.is_empty() { "" } else { "." };
    let esign = if e < 0 { '-' } else { '+' };
    format!("{sign}{first}{dot}{rest}e{esign}{}", e.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_follow_go() {
        for (f, want) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (1.5, "1.5"),
            (100.0, "100"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (-2.5e-10, "-2.5e-10"),
            (123456789.125, "123456789.125"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
        ] {
            assert_eq!(go_float(f), want, "{f:e}");
        }
    }

    /// The reference reproduces the Go host's pinned "legacy request"
    /// (controller reference §4.4), so it is a reference and not a copy.
    #[test]
    fn legacy_request_vector() {
        use agentsessions_proto::v1::{DataPart, TextPart};
        use pbjson_types::{Struct, Value};
        let text = |t: &str| Part {
            part: Some(part::Part::Text(TextPart { text: t.into() })),
        };
        let value = |k: Kind| Value { kind: Some(k) };
        let data = Struct {
            fields: [
                ("b".to_owned(), value(Kind::NumberValue(1.5))),
                ("a".to_owned(), value(Kind::StringValue("x".into()))),
            ]
            .into_iter()
            .collect(),
        };
        let file = FilePart {
            mime: "image/png".into(),
            name: "img".into(),
            digest: "sha256:aa".into(),
            source: Some(file_part::Source::Bytes(vec![1, 2])),
        };
        let reasoning = ReasoningPart {
            provider: "p".into(),
            model_id: "m".into(),
            summary: vec![text("brief")],
            item_id: "rs_1".into(),
            ordinal: 1,
            opaque: Some(reasoning_part::Opaque::OpaqueBytes(b"r".to_vec())),
            ..ReasoningPart::default()
        };
        let message = |role: &str, parts: Vec<Part>| Message {
            role: role.into(),
            parts,
        };
        let call = ModelCall {
            model: "m".into(),
            params: [("temperature".to_owned(), "0".to_owned())].into(),
            messages: vec![
                message("system", vec![text("be brief")]),
                message(
                    "user",
                    vec![
                        text("hi"),
                        Part {
                            part: Some(part::Part::File(file)),
                        },
                        Part {
                            part: Some(part::Part::Data(DataPart { data: Some(data) })),
                        },
                    ],
                ),
                message(
                    "assistant",
                    vec![
                        Part {
                            part: Some(part::Part::Reasoning(reasoning)),
                        },
                        text("yo"),
                    ],
                ),
            ],
            ..ModelCall::default()
        };
        let bytes = encode(&call).expect("encodes");
        assert_eq!(
            agentsessions_machine::canon::sha256_hex(&bytes),
            "210636379d42235ed6d7b2b1e9c7d7e59c8f887a851ec502ac50f82e36867256"
        );
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(&[]), None);
        assert_eq!(base64(&[1, 2]).as_deref(), Some("AQI="));
        assert_eq!(base64(b"r").as_deref(), Some("cg=="));
        assert_eq!(base64(b"abc").as_deref(), Some("YWJj"));
    }
}
