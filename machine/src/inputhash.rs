//! Go-compatible model input hash.
//!
//! The Go host fingerprints every model request as the SHA-256 of Go's
//! `encoding/json` encoding of its `api.ModelRequest` struct, and journals
//! that hex digest in `ModelCall.input_hash`. Replaying a Go-written journal
//! means producing the very same bytes, so this module re-creates that
//! encoder for the request shape: Go field names in declaration order, `null`
//! for nil slices, maps and pointers, sorted map keys, Go's string escaping
//! (HTML-safe) and Go's float formatting.
//!
//! The request is built from proto types, which cannot tell a nil list from
//! an empty one. Go sees a nil after decoding proto, so an empty list or map
//! encodes as `null`, and an absent Struct as `null` (a present one, even an
//! empty one, as an object).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use agentsessions_proto::v1::{
    FilePart, Mediation, Message, ModelCall, Part, ReasoningPart, ToolCall, ToolChoice,
    ToolDefinition, ToolResult, file_part, part, reasoning_part, tool_choice,
};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Why a request has no Go JSON encoding.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputHashError {
    /// Go's encoder refuses NaN and infinities.
    #[error("unsupported number {value} in a struct value")]
    NonFiniteNumber { value: f64 },
    /// The Go host rejects a tool choice mode it does not know.
    #[error("unknown tool choice mode {mode}")]
    UnknownToolChoiceMode { mode: i32 },
    /// Only hand-built values get this deep; decoded protobuf stops at 100.
    #[error("request nests deeper than {limit}")]
    TooDeep { limit: usize },
}

/// Deepest part or Struct nesting encoded; it keeps a hand-built value from
/// exhausting the stack.
pub const MAX_DEPTH: usize = 512;

/// The fields of Go's `api.ModelRequest`, borrowed from proto values.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    pub params: &'a BTreeMap<String, String>,
    pub tools: &'a [ToolDefinition],
    pub tool_choice: Option<&'a ToolChoice>,
}

impl<'a> ModelRequest<'a> {
    /// The request a wire `ModelCall` describes (its wire-only messages,
    /// tools and tool choice included).
    pub fn from_model_call(call: &'a ModelCall) -> Self {
        Self {
            model: &call.model,
            messages: &call.messages,
            params: &call.params,
            tools: &call.tools,
            tool_choice: call.tool_choice.as_ref(),
        }
    }
}

/// Shorthand for [`ModelRequest::from_model_call`].
pub fn from_model_call(call: &ModelCall) -> ModelRequest<'_> {
    ModelRequest::from_model_call(call)
}

/// The input hash: lowercase hex SHA-256 of [`encode_go_json`].
pub fn input_hash(req: &ModelRequest<'_>) -> Result<String, InputHashError> {
    let bytes = encode_go_json(req)?;
    let digest = Sha256::digest(&bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    debug_assert!(
        out.len() == 64 && out.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "an input hash is 64 lowercase hex digits"
    );
    Ok(out)
}

/// The exact bytes Go's `json.Marshal(api.ModelRequest)` produces.
pub fn encode_go_json(req: &ModelRequest<'_>) -> Result<Vec<u8>, InputHashError> {
    let mut w = GoJson::default();
    w.raw("{\"Model\":");
    w.string(req.model);
    w.raw(",\"Messages\":");
    w.list(req.messages, GoJson::message)?;
    w.raw(",\"Params\":");
    if req.params.is_empty() {
        w.raw("null");
    } else {
        w.raw("{");
        for (i, (k, v)) in req.params.iter().enumerate() {
            if i > 0 {
                w.raw(",");
            }
            w.string(k);
            w.raw(":");
            w.string(v);
        }
        w.raw("}");
    }
    // Both fields are omitempty in Go, which keeps the hashes of requests
    // made before tools existed unchanged.
    if !req.tools.is_empty() {
        w.raw(",\"Tools\":");
        w.list(req.tools, GoJson::tool_definition)?;
    }
    if let Some(choice) = req.tool_choice {
        w.raw(",\"ToolChoice\":");
        w.tool_choice(choice)?;
    }
    w.raw("}");
    debug_assert_eq!(w.depth, 0, "every level entered was left");
    Ok(w.out.into_bytes())
}

/// An append-only writer that follows Go `encoding/json` output rules.
#[derive(Default)]
struct GoJson {
    out: String,
    depth: usize,
}

impl GoJson {
    fn enter(&mut self) -> Result<(), InputHashError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(InputHashError::TooDeep { limit: MAX_DEPTH });
        }
        Ok(())
    }

    fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn field(&mut self, first: bool, name: &str) {
        debug_assert!(
            name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.bytes().all(|b| b.is_ascii_alphanumeric()),
            "an exported Go field name needs no escaping"
        );
        // No value ends in `{`, so only a first member follows one.
        debug_assert_eq!(first, self.out.ends_with('{'), "first member of its object");
        if !first {
            self.out.push(',');
        }
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
    }

    fn bool(&mut self, b: bool) {
        self.raw(if b { "true" } else { "false" });
    }

    fn int(&mut self, n: i64) {
        let _ = write!(self.out, "{n}");
    }

    /// A Go string: `"` and `\` escaped, the short escapes Go knows, other
    /// control characters as `\u00xx`, `<` `>` `&` escaped so the output is
    /// safe inside HTML, and U+2028/U+2029 escaped for JavaScript.
    fn string(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let start = self.out.len();
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                '\u{2028}' => self.out.push_str("\\u2028"),
                '\u{2029}' => self.out.push_str("\\u2029"),
                c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                    let b = c as u32 as usize;
                    self.out.push_str("\\u00");
                    self.out.push(char::from(HEX[b >> 4]));
                    self.out.push(char::from(HEX[b & 0xf]));
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
        // A byte is copied, or escaped in at most six (`\u003c`).
        debug_assert!(
            (s.len() + 2..=6 * s.len() + 2).contains(&(self.out.len() - start)),
            "a string literal is its text, escaped, in quotes"
        );
    }

    /// A Go `[]byte`: padded standard base64, `null` for nil (empty).
    fn bytes(&mut self, b: &[u8]) {
        if b.is_empty() {
            self.raw("null");
        } else {
            let start = self.out.len();
            self.out.push('"');
            self.out
                .push_str(&base64::engine::general_purpose::STANDARD.encode(b));
            self.out.push('"');
            debug_assert_eq!(
                self.out.len() - start,
                b.len().div_ceil(3) * 4 + 2,
                "padded base64 in quotes"
            );
        }
    }

    /// A Go float64 as `encoding/json` writes it: plain decimal between 1e-6
    /// and 1e21, otherwise exponent form with a signed exponent. The digits
    /// are the shortest that round-trip, a tie going to the even digit as in
    /// Go's strconv (ryu's digits; Rust's own `Display` rounds such a tie
    /// up, so -594132965547100.25 came out as ….3 instead of Go's ….2).
    fn float(&mut self, f: f64) -> Result<(), InputHashError> {
        if !f.is_finite() {
            return Err(InputHashError::NonFiniteNumber { value: f });
        }
        let (digits, point) = shortest_digits(f);
        let start = self.out.len();
        // Go keeps the sign of -0 too ("-0").
        if f.is_sign_negative() {
            self.out.push('-');
        }
        if digits.is_empty() {
            self.out.push('0');
            return Ok(());
        }
        let n = digits.len() as i32;
        let abs = f.abs();
        if (1e-6..1e21).contains(&abs) {
            if point <= 0 {
                self.out.push_str("0.");
                self.out.extend(std::iter::repeat_n('0', (-point) as usize));
                self.out.push_str(&digits);
            } else if point >= n {
                self.out.push_str(&digits);
                self.out
                    .extend(std::iter::repeat_n('0', (point - n) as usize));
            } else {
                let (int, frac) = digits.split_at(point as usize);
                let _ = write!(self.out, "{int}.{frac}");
            }
        } else {
            let (first, rest) = digits.split_at(1);
            let e = point - 1;
            let dot = if rest.is_empty() { "" } else { "." };
            let sign = if e < 0 { '-' } else { '+' };
            let _ = write!(self.out, "{first}{dot}{rest}e{sign}{}", e.abs());
        }
        debug_assert_eq!(
            self.out[start..].parse::<f64>().ok(),
            Some(f),
            "the shortest digits read back as the same float"
        );
        Ok(())
    }

    /// A Go slice: `null` when empty (nil after proto decoding), else `[...]`.
    fn list<T>(
        &mut self,
        items: &[T],
        mut each: impl FnMut(&mut Self, &T) -> Result<(), InputHashError>,
    ) -> Result<(), InputHashError> {
        if items.is_empty() {
            self.raw("null");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            each(self, item)?;
        }
        self.out.push(']');
        Ok(())
    }

    fn message(&mut self, m: &Message) -> Result<(), InputHashError> {
        self.raw("{\"Role\":");
        self.string(&m.role);
        self.raw(",\"Parts\":");
        self.list(&m.parts, Self::part)?;
        self.raw("}");
        Ok(())
    }

    /// The first four members are always written (null when unset); the
    /// tool members are omitempty.
    fn part(&mut self, p: &Part) -> Result<(), InputHashError> {
        self.enter()?;
        let depth = self.depth;
        self.part_members(p)?;
        debug_assert_eq!(self.depth, depth, "nested levels were left");
        self.depth -= 1;
        Ok(())
    }

    fn part_members(&mut self, p: &Part) -> Result<(), InputHashError> {
        let member = p.part.as_ref();
        self.raw("{\"Text\":");
        match member {
            Some(part::Part::Text(t)) => {
                self.raw("{\"Text\":");
                self.string(&t.text);
                self.raw("}");
            }
            _ => self.raw("null"),
        }
        self.raw(",\"File\":");
        match member {
            Some(part::Part::File(f)) => self.file(f),
            _ => self.raw("null"),
        }
        self.raw(",\"Data\":");
        match member {
            Some(part::Part::Data(d)) => self.opt_struct(d.data.as_ref())?,
            _ => self.raw("null"),
        }
        self.raw(",\"Reasoning\":");
        match member {
            Some(part::Part::Reasoning(r)) => self.reasoning(r)?,
            _ => self.raw("null"),
        }
        match member {
            Some(part::Part::ToolCall(c)) => {
                self.raw(",\"ToolCall\":");
                self.tool_call(c)?;
            }
            Some(part::Part::ToolResult(r)) => {
                self.raw(",\"ToolResult\":");
                self.tool_result(r)?;
            }
            _ => {}
        }
        self.raw("}");
        Ok(())
    }

    fn file(&mut self, f: &FilePart) {
        let (bytes, uri): (&[u8], &str) = match &f.source {
            Some(file_part::Source::Bytes(b)) => (b, ""),
            Some(file_part::Source::Uri(u)) => (&[], u),
            None => (&[], ""),
        };
        self.raw("{");
        self.field(true, "MIME");
        self.string(&f.mime);
        self.field(false, "Bytes");
        self.bytes(bytes);
        self.field(false, "URI");
        self.string(uri);
        self.field(false, "Digest");
        self.string(&f.digest);
        self.field(false, "Name");
        self.string(&f.name);
        self.raw("}");
    }

    fn reasoning(&mut self, r: &ReasoningPart) -> Result<(), InputHashError> {
        let (opaque, uri): (&[u8], &str) = match &r.opaque {
            Some(reasoning_part::Opaque::OpaqueBytes(b)) => (b, ""),
            Some(reasoning_part::Opaque::OpaqueUri(u)) => (&[], u),
            None => (&[], ""),
        };
        self.raw("{");
        self.field(true, "Provider");
        self.string(&r.provider);
        self.field(false, "ModelID");
        self.string(&r.model_id);
        self.field(false, "Opaque");
        self.bytes(opaque);
        self.field(false, "OpaqueURI");
        self.string(uri);
        self.field(false, "OpaqueDigest");
        self.string(&r.opaque_digest);
        self.field(false, "Summary");
        self.list(&r.summary, Self::part)?;
        self.field(false, "ItemID");
        self.string(&r.item_id);
        self.field(false, "Ordinal");
        self.int(i64::from(r.ordinal));
        self.field(false, "ValidityScope");
        self.string(&r.validity_scope);
        self.raw("}");
        Ok(())
    }

    fn tool_definition(&mut self, t: &ToolDefinition) -> Result<(), InputHashError> {
        self.raw("{");
        self.field(true, "Name");
        self.string(&t.name);
        self.field(false, "Description");
        self.string(&t.description);
        self.field(false, "InputSchema");
        self.opt_struct(t.input_schema.as_ref())?;
        self.raw("}");
        Ok(())
    }

    fn tool_choice(&mut self, c: &ToolChoice) -> Result<(), InputHashError> {
        let mode = match tool_choice::Mode::try_from(c.mode) {
            Ok(tool_choice::Mode::Unspecified) => "",
            Ok(tool_choice::Mode::Auto) => "AUTO",
            Ok(tool_choice::Mode::None) => "NONE",
            Ok(tool_choice::Mode::Required) => "REQUIRED",
            Err(_) => return Err(InputHashError::UnknownToolChoiceMode { mode: c.mode }),
        };
        self.raw("{");
        self.field(true, "Mode");
        self.string(mode);
        self.field(false, "Name");
        self.string(&c.name);
        self.raw("}");
        Ok(())
    }

    fn tool_call(&mut self, c: &ToolCall) -> Result<(), InputHashError> {
        // An unknown mediation is "" in Go, like the unspecified one.
        let mediation = match Mediation::try_from(c.mediation) {
            Ok(Mediation::InHarnessReported) => "IN_HARNESS_REPORTED",
            Ok(Mediation::ControllerMediated) => "CONTROLLER_MEDIATED",
            Ok(Mediation::RequiresApproval) => "REQUIRES_APPROVAL",
            Ok(Mediation::Unspecified) | Err(_) => "",
        };
        self.raw("{");
        self.field(true, "ID");
        self.string(&c.id);
        self.field(false, "Tool");
        self.string(&c.tool);
        self.field(false, "Args");
        self.opt_struct(c.args.as_ref())?;
        self.field(false, "Mediation");
        self.string(mediation);
        self.field(false, "IdempotencyKey");
        self.string(&c.idempotency_key);
        self.raw("}");
        Ok(())
    }

    fn tool_result(&mut self, r: &ToolResult) -> Result<(), InputHashError> {
        self.raw("{");
        self.field(true, "ID");
        self.string(&r.id);
        self.field(false, "Output");
        self.opt_struct(r.output.as_ref())?;
        self.field(false, "OutputURI");
        self.string(&r.output_uri);
        self.field(false, "OutputDigest");
        self.string(&r.output_digest);
        self.field(false, "IsError");
        self.bool(r.is_error);
        self.field(false, "Error");
        self.string(&r.error);
        // The later fields are omitempty so older hashes stay stable.
        if !r.content.is_empty() {
            self.field(false, "Content");
            self.list(&r.content, Self::part)?;
        }
        if r.code != 0 {
            self.field(false, "Code");
            self.int(i64::from(r.code));
        }
        if r.approval_request_seq != 0 {
            self.field(false, "ApprovalRequestSeq");
            self.int(r.approval_request_seq);
        }
        if r.approval_decision_seq != 0 {
            self.field(false, "ApprovalDecisionSeq");
            self.int(r.approval_decision_seq);
        }
        self.raw("}");
        Ok(())
    }

    fn opt_struct(&mut self, s: Option<&pbjson_types::Struct>) -> Result<(), InputHashError> {
        match s {
            None => {
                self.raw("null");
                Ok(())
            }
            Some(s) => self.object(s),
        }
    }

    /// A Go `map[string]any`: keys in byte order, whatever the map's order.
    fn object(&mut self, s: &pbjson_types::Struct) -> Result<(), InputHashError> {
        let mut keys: Vec<&String> = s.fields.keys().collect();
        keys.sort_unstable();
        debug_assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "map keys are distinct, so sorted strictly"
        );
        self.out.push('{');
        for (i, k) in keys.into_iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.string(k);
            self.out.push(':');
            self.value(&s.fields[k])?;
        }
        self.out.push('}');
        Ok(())
    }

    fn value(&mut self, v: &pbjson_types::Value) -> Result<(), InputHashError> {
        self.enter()?;
        let depth = self.depth;
        self.value_inner(v)?;
        debug_assert_eq!(self.depth, depth, "nested levels were left");
        self.depth -= 1;
        Ok(())
    }

    fn value_inner(&mut self, v: &pbjson_types::Value) -> Result<(), InputHashError> {
        use pbjson_types::value::Kind;
        match &v.kind {
            None | Some(Kind::NullValue(_)) => self.raw("null"),
            Some(Kind::NumberValue(n)) => self.float(*n)?,
            Some(Kind::StringValue(s)) => self.string(s),
            Some(Kind::BoolValue(b)) => self.bool(*b),
            Some(Kind::StructValue(s)) => self.object(s)?,
            Some(Kind::ListValue(l)) => {
                // A list value is a non-nil Go slice: `[]` even when empty.
                self.out.push('[');
                for (i, item) in l.values.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item)?;
                }
                self.out.push(']');
            }
        }
        Ok(())
    }
}

/// The shortest round-trip decimal digits of finite `f` (no leading or
/// trailing zeros; empty for zero) and the decimal point's position:
/// |f| = 0.DIGITS × 10^point.
fn shortest_digits(f: f64) -> (String, i32) {
    assert!(f.is_finite(), "only finite floats have digits");
    let mut buf = ryu_js::Buffer::new();
    let text = buf.format_finite(f.abs());
    let (mantissa, exp) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu writes a decimal exponent")),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{int}{frac}");
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0').trim_end_matches('0').to_owned();
    let point = int.len() as i32 - lead as i32 + exp;
    debug_assert_eq!(digits.is_empty(), f == 0.0, "only zero has no digits");
    debug_assert!(digits.bytes().all(|b| b.is_ascii_digit()));
    (digits, point)
}
