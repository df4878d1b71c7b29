//! Go journal records to `agentsessions.v1` records.
//!
//! The conversion reproduces the Go host's domain-to-proto step, because the
//! content hash is computed over the proto form: two journals that differ
//! only in what that step drops (a second body, an all-empty actor, the zero
//! time) must hash the same here as they did in Go.

use agentsessions_proto::v1::{
    self, ApprovalRef, ApprovalRequest, ApprovalResult, Event, EventKind, ExecutionStart,
    HarnessEnd, IdentityRef, Lifecycle, LogRecord, Mediation, Message, ModelCall, Part, ToolCall,
    ToolResult, Usage, event, file_part, lifecycle, part, reasoning_part,
};
use agentsessions_proto::wkt::Timestamp;

use super::go_types::{
    GoEvent, GoFilePart, GoMap, GoMessage, GoPart, GoReasoningPart, GoRecord, GoToolCall,
    GoToolResult, GoValue,
};

/// Why a Go event has no proto form.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GoEventError {
    /// float64 cannot hold the integer, so Go would have hashed another value.
    #[error("integer {value} in {field} is beyond 2^53")]
    UnsafeInteger { field: &'static str, value: i128 },
    /// Only reachable from hand-built values: JSON has no NaN or infinity.
    #[error("non-finite number in {field}")]
    NonFiniteNumber { field: &'static str },
}

/// Why a Go journal could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GoRecordError {
    /// The text is not a JSON array (or `null`).
    #[error("go journal is not a json array: {reason}")]
    NotAnArray { reason: String },
    /// One element does not have the shape of a Go record.
    #[error("record {index}: {reason}")]
    Decode { index: usize, reason: String },
    /// One event has no proto form.
    #[error("record {index} (seq {seq}): {source}")]
    Convert {
        index: usize,
        seq: i64,
        #[source]
        source: GoEventError,
    },
}

/// Decodes a Go `[]eventlog.Record` JSON document (as the Go fixtures store
/// it) into proto log records.
///
/// Stored hashes, links and fences are carried over verbatim and not
/// checked here; `chain::verify` is the check.
pub fn parse_go_records(json: &str) -> Result<Vec<LogRecord>, GoRecordError> {
    // Decode element by element so an error can name the record it is in.
    // Going through `Value` also makes a repeated key keep its last value,
    // as Go's decoder does, instead of being a duplicate-field error.
    let raw: Option<Vec<serde_json::Value>> =
        serde_json::from_str(json).map_err(|e| GoRecordError::NotAnArray {
            reason: e.to_string(),
        })?;
    raw.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let rec: GoRecord =
                serde_json::from_value(item).map_err(|e| GoRecordError::Decode {
                    index,
                    reason: e.to_string(),
                })?;
            go_record_to_proto(&rec).map_err(|source| GoRecordError::Convert {
                index,
                seq: rec.seq,
                source,
            })
        })
        .collect()
}

/// Converts one decoded Go record.
pub fn go_record_to_proto(rec: &GoRecord) -> Result<LogRecord, GoEventError> {
    Ok(LogRecord {
        seq: rec.seq,
        prev_hash: rec.prev_hash.clone(),
        content_hash: rec.hash.clone(),
        fence: rec.fence,
        event: Some(go_event_to_proto(&rec.event)?),
    })
}

/// Converts one Go event with the Go host's domain-to-proto rules.
pub fn go_event_to_proto(ev: &GoEvent) -> Result<Event, GoEventError> {
    let a = &ev.actor;
    let actor = if a.principal.is_empty() && a.issuer.is_empty() && a.subject.is_empty() {
        None
    } else {
        Some(IdentityRef {
            principal: a.principal.clone(),
            issuer: a.issuer.clone(),
            subject: a.subject.clone(),
        })
    };
    let ts = (!ev.timestamp.is_zero()).then_some(Timestamp {
        seconds: ev.timestamp.seconds,
        nanos: ev.timestamp.nanos,
    });
    Ok(Event {
        execution_id: ev.execution_id.clone(),
        ts,
        schema_version: ev.schema_version,
        kind: prefixed_enum("EVENT_", &ev.kind, |n| {
            EventKind::from_str_name(n).map(|k| k as i32)
        }),
        actor,
        body: body_to_proto(ev)?,
    })
}

/// Looks a Go enum string up as `<prefix><value>`; anything unknown is the
/// unspecified value (0), which Go neither reports nor writes.
fn prefixed_enum(prefix: &str, value: &str, lookup: impl Fn(&str) -> Option<i32>) -> i32 {
    lookup(&format!("{prefix}{value}")).unwrap_or(0)
}

/// The first non-nil body in Go's order; any later body is dropped, exactly
/// as the Go host drops it before hashing.
fn body_to_proto(ev: &GoEvent) -> Result<Option<event::Body>, GoEventError> {
    if let Some(m) = &ev.message {
        return Ok(Some(event::Body::Message(message_to_proto(m)?)));
    }
    if let Some(m) = &ev.model_call {
        return Ok(Some(event::Body::Model(ModelCall {
            model: m.model.clone(),
            params: m.params.clone(),
            input_hash: m.input_hash.clone(),
            id: m.id.clone(),
            ..ModelCall::default()
        })));
    }
    if let Some(c) = &ev.tool_call {
        return Ok(Some(event::Body::Tool(tool_call_to_proto(c)?)));
    }
    if let Some(r) = &ev.result {
        return Ok(Some(event::Body::Result(tool_result_to_proto(r)?)));
    }
    if let Some(a) = &ev.approval {
        return Ok(Some(event::Body::Approval(ApprovalRequest {
            tool_call_id: a.tool_call_id.clone(),
            reason: a.reason.clone(),
        })));
    }
    if let Some(a) = &ev.approval_result {
        return Ok(Some(event::Body::ApprovalResult(ApprovalResult {
            tool_call_id: a.tool_call_id.clone(),
            approved: a.approved,
            reason: a.reason.clone(),
            request_seq: a.request_seq,
        })));
    }
    if let Some(u) = &ev.usage {
        return Ok(Some(event::Body::Usage(Usage {
            model: u.model.clone(),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            reasoning_tokens: u.reasoning_tokens,
        })));
    }
    if let Some(l) = &ev.lifecycle {
        let snap = l.snapshot.clone().unwrap_or_default();
        return Ok(Some(event::Body::Lifecycle(Lifecycle {
            kind: prefixed_enum("LIFECYCLE_", &l.kind, |n| {
                lifecycle::Kind::from_str_name(n).map(|k| k as i32)
            }),
            detail: l.detail.clone(),
            snapshot_local: snap.local,
            snapshot_external_uri: snap.external_uri,
            snapshot_memory: snap.memory,
            snapshot_sealed: snap.sealed,
        })));
    }
    if let Some(e) = &ev.end {
        return Ok(Some(event::Body::End(HarnessEnd {
            state: e.state.clone(),
            error: e.error.as_ref().map(|x| v1::Error {
                code: x.code,
                description: x.description.clone(),
            }),
        })));
    }
    if let Some(e) = &ev.err {
        return Ok(Some(event::Body::Error(v1::Error {
            code: e.code,
            description: e.description.clone(),
        })));
    }
    if let Some(s) = &ev.execution_start {
        return Ok(Some(event::Body::ExecutionStart(ExecutionStart {
            config: s.config.clone(),
            resume_from_seq: s.resume_from_seq,
            input_count: s.input_count,
            harness: s.harness.clone(),
            harness_version: s.harness_version.clone(),
        })));
    }
    if let Some(p) = &ev.parked {
        return Ok(Some(event::Body::Parked(ApprovalRef {
            execution_id: p.execution_id.clone(),
            tool_call_id: p.tool_call_id.clone(),
            request_seq: p.request_seq,
        })));
    }
    Ok(None)
}

fn message_to_proto(m: &GoMessage) -> Result<Message, GoEventError> {
    Ok(Message {
        role: m.role.clone(),
        parts: parts_to_proto(&m.parts)?,
    })
}

fn parts_to_proto(parts: &[GoPart]) -> Result<Vec<Part>, GoEventError> {
    parts.iter().map(part_to_proto).collect()
}

/// A part carries one member; if several are set the first in declaration
/// order wins, and a part with none becomes an empty proto part.
fn part_to_proto(p: &GoPart) -> Result<Part, GoEventError> {
    let member = if let Some(t) = &p.text {
        Some(part::Part::Text(v1::TextPart {
            text: t.text.clone(),
        }))
    } else if let Some(f) = &p.file {
        Some(part::Part::File(file_to_proto(f)))
    } else if let Some(d) = &p.data {
        Some(part::Part::Data(v1::DataPart {
            data: Some(map_to_struct(d, "Part.Data")?),
        }))
    } else if let Some(r) = &p.reasoning {
        Some(part::Part::Reasoning(reasoning_to_proto(r)?))
    } else if let Some(c) = &p.tool_call {
        Some(part::Part::ToolCall(tool_call_to_proto(c)?))
    } else if let Some(r) = &p.tool_result {
        Some(part::Part::ToolResult(tool_result_to_proto(r)?))
    } else {
        None
    };
    Ok(Part { part: member })
}

fn file_to_proto(f: &GoFilePart) -> v1::FilePart {
    // Inline bytes win; a reference is used only when there are none.
    let source = if !f.bytes.is_empty() {
        Some(file_part::Source::Bytes(f.bytes.clone()))
    } else if !f.uri.is_empty() {
        Some(file_part::Source::Uri(f.uri.clone()))
    } else {
        None
    };
    v1::FilePart {
        mime: f.mime.clone(),
        name: f.name.clone(),
        digest: f.digest.clone(),
        source,
    }
}

fn reasoning_to_proto(r: &GoReasoningPart) -> Result<v1::ReasoningPart, GoEventError> {
    let opaque = if !r.opaque.is_empty() {
        Some(reasoning_part::Opaque::OpaqueBytes(r.opaque.clone()))
    } else if !r.opaque_uri.is_empty() {
        Some(reasoning_part::Opaque::OpaqueUri(r.opaque_uri.clone()))
    } else {
        None
    };
    Ok(v1::ReasoningPart {
        provider: r.provider.clone(),
        model_id: r.model_id.clone(),
        summary: parts_to_proto(&r.summary)?,
        item_id: r.item_id.clone(),
        ordinal: r.ordinal,
        validity_scope: r.validity_scope.clone(),
        opaque_digest: r.opaque_digest.clone(),
        opaque,
    })
}

fn tool_call_to_proto(c: &GoToolCall) -> Result<ToolCall, GoEventError> {
    Ok(ToolCall {
        id: c.id.clone(),
        tool: c.tool.clone(),
        args: c
            .args
            .as_ref()
            .map(|m| map_to_struct(m, "ToolCall.Args"))
            .transpose()?,
        mediation: prefixed_enum("MEDIATION_", &c.mediation, |n| {
            Mediation::from_str_name(n).map(|m| m as i32)
        }),
        idempotency_key: c.idempotency_key.clone(),
    })
}

fn tool_result_to_proto(r: &GoToolResult) -> Result<ToolResult, GoEventError> {
    Ok(ToolResult {
        id: r.id.clone(),
        output: r
            .output
            .as_ref()
            .map(|m| map_to_struct(m, "ToolResult.Output"))
            .transpose()?,
        output_uri: r.output_uri.clone(),
        output_digest: r.output_digest.clone(),
        is_error: r.is_error,
        error: r.error.clone(),
        content: parts_to_proto(&r.content)?,
        // Go's code is a plain int32 carried through unchanged.
        code: r.code,
        approval_request_seq: r.approval_request_seq,
        approval_decision_seq: r.approval_decision_seq,
    })
}

/// A non-nil Go map becomes a Struct, even when empty.
fn map_to_struct(m: &GoMap, field: &'static str) -> Result<pbjson_types::Struct, GoEventError> {
    let mut fields = std::collections::HashMap::with_capacity(m.len());
    for (k, v) in m {
        fields.insert(k.clone(), value_to_proto(v, field)?);
    }
    Ok(pbjson_types::Struct { fields })
}

fn value_to_proto(v: &GoValue, field: &'static str) -> Result<pbjson_types::Value, GoEventError> {
    use pbjson_types::value::Kind;
    let kind = match v {
        GoValue::Null => Kind::NullValue(0),
        GoValue::Bool(b) => Kind::BoolValue(*b),
        GoValue::Number(n) if n.is_finite() => Kind::NumberValue(*n),
        GoValue::Number(_) => return Err(GoEventError::NonFiniteNumber { field }),
        GoValue::UnsafeInteger(value) => {
            return Err(GoEventError::UnsafeInteger {
                field,
                value: *value,
            });
        }
        GoValue::String(s) => Kind::StringValue(s.clone()),
        GoValue::Array(items) => Kind::ListValue(pbjson_types::ListValue {
            values: items
                .iter()
                .map(|x| value_to_proto(x, field))
                .collect::<Result<_, _>>()?,
        }),
        GoValue::Object(m) => Kind::StructValue(map_to_struct(m, field)?),
    };
    Ok(pbjson_types::Value { kind: Some(kind) })
}
