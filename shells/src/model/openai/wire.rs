//! The Chat Completions wire shapes: request encoding and reply decoding.
//!
//! Kept free of I/O so the mapping rules (roles, text concatenation, refused
//! parts, tools, tool choice, tool calls) are plain functions over values.
//!
//! Invariant: a recorded conversation encodes to the same bytes every time.
//! Tool call ids go back verbatim; a Struct (arguments, structured output,
//! schemas) is written canonically: keys sorted, integral numbers within
//! ±2^53 as integers. The proto keeps arguments as a Struct, not as the
//! provider's text, so this is as close to the original text as it gets.

use std::collections::BTreeMap;

use agentsessions_machine::vocab::ModelReply;
use agentsessions_proto::v1::{
    Message, ModelCall, Part, ReasoningPart, TextPart, ToolCall, ToolChoice, ToolDefinition,
    ToolResult, Usage, part, reasoning_part, tool_choice,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::model::ModelError;

/// Provider tag of reasoning parts this client produces.
pub const PROVIDER: &str = "openai";

/// Encodes the request body. `stream` adds the streaming fields.
pub fn encode_request(model: &str, call: &ModelCall, stream: bool) -> Result<Value, ModelError> {
    let mut messages = Vec::with_capacity(call.messages.len());
    for m in &call.messages {
        encode_message(m, &mut messages)?;
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model));
    body.insert("messages".into(), Value::Array(messages));
    if !call.tools.is_empty() {
        let tools = call
            .tools
            .iter()
            .map(encode_tool)
            .collect::<Result<Vec<_>, _>>()?;
        body.insert("tools".into(), Value::Array(tools));
        // Providers reject tool_choice without tools, so it rides only with them.
        if let Some(choice) = call.tool_choice.as_ref().and_then(encode_tool_choice) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(body))
}

/// Appends the wire messages for `m`: usually one, but each tool result
/// becomes its own `tool` message because that is how the API threads them.
fn encode_message(m: &Message, out: &mut Vec<Value>) -> Result<(), ModelError> {
    let role = if m.role.is_empty() {
        "user"
    } else {
        m.role.as_str()
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for p in &m.parts {
        match &p.part {
            Some(part::Part::Text(t)) => text.push_str(&t.text),
            // Reasoning is provider-private; it never goes back out.
            Some(part::Part::Reasoning(_)) | None => {}
            Some(part::Part::File(_)) => return Err(ModelError::UnsupportedPart { kind: "file" }),
            Some(part::Part::Data(_)) => return Err(ModelError::UnsupportedPart { kind: "data" }),
            Some(part::Part::ToolCall(c)) => calls.push(encode_tool_call(c)?),
            Some(part::Part::ToolResult(r)) => results.push(encode_tool_result(r)?),
        }
    }
    // Tool answers must directly follow the assistant turn that asked for
    // them, so they go first; any text of the same message follows.
    let only_results = !results.is_empty() && calls.is_empty() && text.is_empty();
    out.extend(results);
    if only_results {
        return Ok(());
    }
    if calls.is_empty() {
        out.push(json!({"role": role, "content": text}));
    } else {
        // The API wants null, not "", beside tool calls that come without text.
        let content = if text.is_empty() {
            Value::Null
        } else {
            Value::from(text)
        };
        out.push(json!({"role": role, "content": content, "tool_calls": calls}));
    }
    Ok(())
}

fn encode_tool_call(c: &ToolCall) -> Result<Value, ModelError> {
    let args = match &c.args {
        Some(s) => canonical(s)?.to_string(),
        None => "{}".to_owned(),
    };
    Ok(json!({
        "id": c.id,
        "type": "function",
        "function": {"name": c.tool, "arguments": args},
    }))
}

/// What the model is shown for a tool result: its text content, else its
/// structured output as JSON, else its error text.
fn encode_tool_result(r: &ToolResult) -> Result<Value, ModelError> {
    let mut text = String::new();
    for p in &r.content {
        match &p.part {
            Some(part::Part::Text(t)) => text.push_str(&t.text),
            Some(part::Part::File(_)) => return Err(ModelError::UnsupportedPart { kind: "file" }),
            Some(part::Part::Data(_)) => return Err(ModelError::UnsupportedPart { kind: "data" }),
            _ => {}
        }
    }
    if text.is_empty() {
        if let Some(out) = &r.output {
            text = canonical(out)?.to_string();
        } else if r.is_error {
            text.clone_from(&r.error);
        }
    }
    Ok(json!({"role": "tool", "tool_call_id": r.id, "content": text}))
}

fn encode_tool(t: &ToolDefinition) -> Result<Value, ModelError> {
    let mut function = Map::new();
    function.insert("name".into(), Value::from(t.name.as_str()));
    if !t.description.is_empty() {
        function.insert("description".into(), Value::from(t.description.as_str()));
    }
    if let Some(schema) = &t.input_schema {
        function.insert("parameters".into(), canonical(schema)?);
    }
    Ok(json!({"type": "function", "function": function}))
}

/// Deepest Struct nesting encoded; decoded protobuf stops well before it.
const MAX_STRUCT_DEPTH: usize = 128;

/// Largest integer an f64 carries exactly (2^53).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// `s` as a JSON object in canonical form: keys sorted (serde_json's map is
/// ordered), integral numbers within ±2^53 as integers, as the provider
/// wrote them. Non-finite numbers have no JSON form.
fn canonical(s: &pbjson_types::Struct) -> Result<Value, ModelError> {
    canonical_struct(s, 0)
}

fn canonical_struct(s: &pbjson_types::Struct, depth: usize) -> Result<Value, ModelError> {
    if depth > MAX_STRUCT_DEPTH {
        return Err(ModelError::EncodeArgs);
    }
    let mut map = Map::new();
    for (k, v) in &s.fields {
        map.insert(k.clone(), canonical_value(v, depth + 1)?);
    }
    Ok(Value::Object(map))
}

fn canonical_value(v: &pbjson_types::Value, depth: usize) -> Result<Value, ModelError> {
    use pbjson_types::value::Kind;
    if depth > MAX_STRUCT_DEPTH {
        return Err(ModelError::EncodeArgs);
    }
    Ok(match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StringValue(s)) => Value::from(s.as_str()),
        Some(Kind::NumberValue(n)) if !n.is_finite() => return Err(ModelError::EncodeArgs),
        // In range, the cast is exact.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER => {
            Value::from(*n as i64)
        }
        Some(Kind::NumberValue(n)) => Value::from(*n),
        Some(Kind::StructValue(s)) => canonical_struct(s, depth)?,
        Some(Kind::ListValue(l)) => Value::Array(
            l.values
                .iter()
                .map(|v| canonical_value(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
    })
}

fn encode_tool_choice(c: &ToolChoice) -> Option<Value> {
    match tool_choice::Mode::try_from(c.mode).ok()? {
        tool_choice::Mode::Unspecified => None,
        tool_choice::Mode::Auto => Some(Value::from("auto")),
        tool_choice::Mode::None => Some(Value::from("none")),
        tool_choice::Mode::Required if c.name.is_empty() => Some(Value::from("required")),
        tool_choice::Mode::Required => {
            Some(json!({"type": "function", "function": {"name": c.name}}))
        }
    }
}

/// A non-streamed response body.
#[derive(Debug, Deserialize)]
pub struct ChatResponse {
    #[serde(default)]
    pub choices: Option<Vec<Choice>>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

/// One choice of a non-streamed response.
#[derive(Debug, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub message: Option<WireMessage>,
}

/// The assistant message of a choice.
#[derive(Debug, Default, Deserialize)]
pub struct WireMessage {
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

/// A complete tool call of a non-streamed message.
#[derive(Debug, Deserialize)]
pub struct WireToolCall {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunction>,
}

/// The function of a tool call (or a fragment of one, when streamed).
#[derive(Debug, Default, Deserialize)]
pub struct WireFunction {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

/// Token accounting.
#[derive(Debug, Default, Deserialize)]
pub struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: Option<i64>,
    #[serde(default)]
    pub completion_tokens: Option<i64>,
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
}

/// The reasoning share of completion tokens.
#[derive(Debug, Default, Deserialize)]
pub struct CompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<i64>,
}

/// The provider's `{"error": {"message": ...}}` envelope.
#[derive(Debug, Deserialize)]
pub struct ErrorEnvelope {
    #[serde(default)]
    pub error: Option<ErrorBody>,
}

/// The inner error object.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub message: Option<String>,
}

/// Text of a `content` value: a string, or the text items of an array (some
/// compatible servers answer with content parts).
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// A tool call as accumulated from the wire: id, function name, raw
/// arguments text.
#[derive(Debug, Default, Clone)]
pub struct RawToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Everything a completion is built from, streamed or not.
#[derive(Debug, Default)]
pub struct Completion {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<RawToolCall>,
    pub usage: Option<WireUsage>,
}

impl Completion {
    /// Gathers a non-streamed message.
    pub fn from_message(msg: WireMessage, usage: Option<WireUsage>) -> Self {
        let tool_calls = msg
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let f = c.function.unwrap_or_default();
                RawToolCall {
                    id: c.id.unwrap_or_default(),
                    name: f.name.unwrap_or_default(),
                    arguments: f.arguments.unwrap_or_default(),
                }
            })
            .collect();
        Self {
            content: content_text(msg.content.as_ref()),
            reasoning: msg.reasoning_content.unwrap_or_default(),
            tool_calls,
            usage,
        }
    }

    /// The reply: assistant message = [reasoning] + [text] + tool calls.
    /// A call the provider gave no id gets a fresh one: a harness needs an
    /// id to run it and to thread its result back, and the reply is
    /// recorded, so a replay sees the same id.
    pub fn into_reply(self, model: &str) -> Result<ModelReply, ModelError> {
        let mut parts = Vec::new();
        if !self.reasoning.is_empty() {
            parts.push(Part {
                part: Some(part::Part::Reasoning(ReasoningPart {
                    provider: PROVIDER.to_owned(),
                    model_id: model.to_owned(),
                    opaque: Some(reasoning_part::Opaque::OpaqueBytes(
                        self.reasoning.into_bytes(),
                    )),
                    ..ReasoningPart::default()
                })),
            });
        }
        if !self.content.is_empty() {
            parts.push(Part {
                part: Some(part::Part::Text(TextPart { text: self.content })),
            });
        }
        for c in self.tool_calls {
            let args =
                parse_arguments(&c.arguments).ok_or_else(|| ModelError::InvalidToolArguments {
                    model: model.to_owned(),
                })?;
            let id = if c.id.is_empty() {
                format!("call_{:016x}", fastrand::u64(..))
            } else {
                c.id
            };
            parts.push(Part {
                part: Some(part::Part::ToolCall(ToolCall {
                    id,
                    tool: c.name,
                    args: Some(args),
                    ..ToolCall::default()
                })),
            });
        }
        let usage = self.usage.map(|u| Usage {
            model: model.to_owned(),
            input_tokens: u.prompt_tokens.unwrap_or(0),
            output_tokens: u.completion_tokens.unwrap_or(0),
            reasoning_tokens: u
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        });
        Ok(ModelReply {
            message: Some(Message {
                role: "assistant".to_owned(),
                parts,
            }),
            usage,
        })
    }
}

/// Parses tool arguments; blank text means "no arguments". Anything but a
/// JSON object is refused.
fn parse_arguments(text: &str) -> Option<pbjson_types::Struct> {
    if text.trim().is_empty() {
        return Some(pbjson_types::Struct::default());
    }
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Object(map) => serde_json::from_value(Value::Object(map)).ok(),
        _ => None,
    }
}

/// Tool-call fragments of a stream, merged by their `index`.
#[derive(Debug, Default)]
pub struct ToolCallAccumulator {
    calls: BTreeMap<u64, RawToolCall>,
}

impl ToolCallAccumulator {
    /// Merges one fragment: id and name are taken when first seen, argument
    /// text is appended.
    pub fn push(&mut self, index: u64, id: Option<String>, function: Option<WireFunction>) {
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id.filter(|s| !s.is_empty())
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(f) = function {
            if let Some(name) = f.name.filter(|s| !s.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(a) = f.arguments {
                call.arguments.push_str(&a);
            }
        }
    }

    /// Bytes accumulated so far (for the size bound).
    pub fn byte_len(&self) -> usize {
        self.calls
            .values()
            .map(|c| c.arguments.len() + c.name.len() + c.id.len())
            .sum()
    }

    /// The calls in index order.
    pub fn finish(self) -> Vec<RawToolCall> {
        self.calls.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn struct_of(v: Value) -> pbjson_types::Struct {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn arguments_go_back_canonical_and_ids_verbatim() {
        let text = r#"{"path":"/tmp/a","n":3,"deep":{"z":[1,2.5,null],"a":true}}"#;
        let reply = Completion {
            tool_calls: vec![
                RawToolCall {
                    id: "call_Xy9".into(),
                    name: "fs__read".into(),
                    arguments: text.into(),
                },
                RawToolCall {
                    id: String::new(),
                    name: "noop".into(),
                    arguments: String::new(),
                },
            ],
            ..Completion::default()
        }
        .into_reply("m")
        .unwrap();
        let message = reply.message.unwrap();
        let calls: Vec<&ToolCall> = message
            .parts
            .iter()
            .filter_map(|p| match &p.part {
                Some(part::Part::ToolCall(c)) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(calls[0].id, "call_Xy9");
        assert!(calls[1].id.starts_with("call_"), "an id-less call gets one");
        let mut out = Vec::new();
        // Twice: the encoding must not depend on the Struct's map order.
        for _ in 0..2 {
            out.clear();
            encode_message(&message, &mut out).unwrap();
            assert_eq!(
                out[0]["tool_calls"][0],
                json!({"id": "call_Xy9", "type": "function", "function": {
                    "name": "fs__read",
                    "arguments": r#"{"deep":{"a":true,"z":[1,2.5,null]},"n":3,"path":"/tmp/a"}"#}})
            );
        }
        let result = ToolResult {
            id: "c".into(),
            output: Some(struct_of(json!({"b": 2, "a": 1.5}))),
            ..ToolResult::default()
        };
        assert_eq!(
            encode_tool_result(&result).unwrap()["content"],
            r#"{"a":1.5,"b":2}"#
        );
        let nan = pbjson_types::Struct::from_iter([(
            "x".to_owned(),
            pbjson_types::Value::from(f64::NAN),
        )]);
        assert!(matches!(canonical(&nan), Err(ModelError::EncodeArgs)));
    }
}
