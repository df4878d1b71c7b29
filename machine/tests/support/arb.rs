//! proptest strategies for arbitrary `agentsessions.v1` events.
//!
//! Every strategy takes `wild`: with `false` it yields only events that have
//! a proto3-JSON form (finite numbers, known enum names, timestamps in range,
//! every Value with a kind), which the pbjson oracle can serialize; with
//! `true` it also yields values protojson would refuse or print as numbers,
//! for no-panic tests.

use agentsessions_proto::v1::{
    ApprovalRef, ApprovalRequest, ApprovalResult, DataPart, Error, Event, ExecutionStart, FilePart,
    HarnessEnd, IdentityRef, Lifecycle, LogRecord, Message, ModelCall, Part, ReasoningPart,
    TextPart, ToolCall, ToolChoice, ToolDefinition, ToolResult, Usage, event, file_part, part,
    reasoning_part,
};
use agentsessions_proto::wkt::{MAX_SECONDS, MIN_SECONDS, Timestamp};
use pbjson_types::value::Kind;
use pbjson_types::{ListValue, Struct, Value};
use proptest::collection::{btree_map, hash_map, vec};
use proptest::prelude::*;

// The characters that stress JCS, shared with the fuzz targets.
use agentsessions_testkit::fuzzing::SPECIAL;

pub fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range('a', 'e'),
        2 => proptest::sample::select(SPECIAL),
        1 => any::<char>(),
    ]
}

/// A short string, often empty, drawing on [`SPECIAL`].
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        4 => vec(any_char(), 0..8).prop_map(String::from_iter),
    ]
}

/// A finite double, weighted towards the values whose ES6 form is tricky.
pub fn finite_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        2 => proptest::sample::select(vec![
            0.0, -0.0, 1.0, -1.0, 1e21, 1e20, 1e-7, 1e-6, 0.1 + 0.2, 9007199254740992.0,
            9007199254740993.0, 5e-324, f64::MAX, f64::MIN, f64::MIN_POSITIVE, 123456789.125,
        ]),
        2 => (-1_000_000i64..1_000_000).prop_map(|i| i as f64),
        3 => any::<f64>().prop_filter("finite", |f| f.is_finite()),
    ]
}

pub fn number(wild: bool) -> BoxedStrategy<f64> {
    if wild {
        prop_oneof![
            8 => finite_f64(),
            1 => proptest::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY]),
        ]
        .boxed()
    } else {
        finite_f64().boxed()
    }
}

pub fn value(wild: bool) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(Kind::NullValue),
        any::<bool>().prop_map(Kind::BoolValue),
        number(wild).prop_map(Kind::NumberValue),
        text().prop_map(Kind::StringValue),
    ]
    .prop_map(|k| Value { kind: Some(k) });
    let leaf = if wild {
        prop_oneof![9 => leaf, 1 => Just(Value { kind: None })].boxed()
    } else {
        leaf.boxed()
    };
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|values| Value {
                kind: Some(Kind::ListValue(ListValue { values }))
            }),
            hash_map(text(), inner, 0..4).prop_map(|fields| Value {
                kind: Some(Kind::StructValue(Struct { fields }))
            }),
        ]
    })
    .boxed()
}

pub fn structure(wild: bool) -> BoxedStrategy<Struct> {
    hash_map(text(), value(wild), 0..5)
        .prop_map(|fields| Struct { fields })
        .boxed()
}

pub fn opt_struct(wild: bool) -> BoxedStrategy<Option<Struct>> {
    proptest::option::of(structure(wild)).boxed()
}

/// An enum field: a known number (0..=max), or with `wild` any number.
pub fn enumeration(max: i32, wild: bool) -> BoxedStrategy<i32> {
    if wild {
        prop_oneof![3 => 0..=max, 1 => any::<i32>()].boxed()
    } else {
        (0..=max).boxed()
    }
}

pub fn int64() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), -3i64..100, any::<i64>()]
}

pub fn int32() -> impl Strategy<Value = i32> {
    prop_oneof![Just(0i32), -3i32..100, any::<i32>()]
}

pub fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..10)
}

pub fn timestamp(wild: bool) -> BoxedStrategy<Timestamp> {
    let nanos = prop_oneof![
        Just(0i32),
        (0i32..1000).prop_map(|m| m * 1_000_000),
        (0i32..1_000_000).prop_map(|u| u * 1000),
        0i32..1_000_000_000,
    ];
    let valid = (MIN_SECONDS..=MAX_SECONDS, nanos).prop_map(|(s, n)| Timestamp::new(s, n));
    if wild {
        prop_oneof![
            2 => valid,
            1 => (any::<i64>(), any::<i32>()).prop_map(|(s, n)| Timestamp::new(s, n)),
        ]
        .boxed()
    } else {
        valid.boxed()
    }
}

pub fn identity() -> impl Strategy<Value = IdentityRef> {
    (text(), text(), text()).prop_map(|(principal, issuer, subject)| IdentityRef {
        principal,
        issuer,
        subject,
    })
}

pub fn tool_call(wild: bool) -> BoxedStrategy<ToolCall> {
    (
        text(),
        text(),
        opt_struct(wild),
        enumeration(3, wild),
        text(),
    )
        .prop_map(|(id, tool, args, mediation, idempotency_key)| ToolCall {
            id,
            tool,
            args,
            mediation,
            idempotency_key,
        })
        .boxed()
}

/// A ToolResult whose `content` parts come from `parts`.
fn tool_result_with(wild: bool, parts: BoxedStrategy<Vec<Part>>) -> BoxedStrategy<ToolResult> {
    (
        (text(), opt_struct(wild), text(), text(), any::<bool>()),
        (text(), parts, enumeration(2, wild), int64(), int64()),
    )
        .prop_map(
            |(
                (id, output, output_uri, output_digest, is_error),
                (error, content, code, approval_request_seq, approval_decision_seq),
            )| ToolResult {
                id,
                output,
                output_uri,
                output_digest,
                is_error,
                error,
                content,
                code,
                approval_request_seq,
                approval_decision_seq,
            },
        )
        .boxed()
}

pub fn tool_result(wild: bool) -> BoxedStrategy<ToolResult> {
    tool_result_with(wild, vec(part(wild), 0..3).boxed())
}

fn file_part() -> impl Strategy<Value = FilePart> {
    let source = proptest::option::of(prop_oneof![
        bytes().prop_map(file_part::Source::Bytes),
        text().prop_map(file_part::Source::Uri),
    ]);
    (text(), source, text(), text()).prop_map(|(mime, source, name, digest)| FilePart {
        mime,
        source,
        name,
        digest,
    })
}

/// A Part; reasoning summaries and tool-result contents nest further parts.
pub fn part(wild: bool) -> BoxedStrategy<Part> {
    let leaf = prop_oneof![
        Just(None),
        text().prop_map(|text| Some(part::Part::Text(TextPart { text }))),
        file_part().prop_map(|f| Some(part::Part::File(f))),
        opt_struct(wild).prop_map(|data| Some(part::Part::Data(DataPart { data }))),
        tool_call(wild).prop_map(|t| Some(part::Part::ToolCall(t))),
    ]
    .prop_map(|part| Part { part });
    leaf.prop_recursive(3, 12, 3, move |inner| {
        let opaque = proptest::option::of(prop_oneof![
            bytes().prop_map(reasoning_part::Opaque::OpaqueBytes),
            text().prop_map(reasoning_part::Opaque::OpaqueUri),
        ]);
        prop_oneof![
            (
                (text(), text(), opaque, vec(inner.clone(), 0..3)),
                (text(), int32(), text(), text()),
            )
                .prop_map(
                    |(
                        (provider, model_id, opaque, summary),
                        (item_id, ordinal, validity_scope, opaque_digest),
                    )| Part {
                        part: Some(part::Part::Reasoning(ReasoningPart {
                            provider,
                            model_id,
                            opaque,
                            summary,
                            item_id,
                            ordinal,
                            validity_scope,
                            opaque_digest,
                        })),
                    }
                ),
            tool_result_with(wild, vec(inner, 0..2).boxed()).prop_map(|r| Part {
                part: Some(part::Part::ToolResult(r)),
            }),
        ]
    })
    .boxed()
}

pub fn message(wild: bool) -> BoxedStrategy<Message> {
    (text(), vec(part(wild), 0..4))
        .prop_map(|(role, parts)| Message { role, parts })
        .boxed()
}

pub fn model_call(wild: bool) -> BoxedStrategy<ModelCall> {
    let tool_def =
        (text(), text(), opt_struct(wild)).prop_map(|(name, description, s)| ToolDefinition {
            name,
            description,
            input_schema: s,
        });
    let choice = (enumeration(3, wild), text()).prop_map(|(mode, name)| ToolChoice { mode, name });
    (
        (text(), btree_map(text(), text(), 0..4), text(), text()),
        (
            vec(message(wild), 0..2),
            vec(tool_def, 0..2),
            proptest::option::of(choice),
        ),
    )
        .prop_map(
            |((model, params, input_hash, id), (messages, tools, tool_choice))| ModelCall {
                model,
                params,
                input_hash,
                id,
                messages,
                tools,
                tool_choice,
            },
        )
        .boxed()
}

fn error() -> impl Strategy<Value = Error> {
    (int32(), text()).prop_map(|(code, description)| Error { code, description })
}

pub fn body(wild: bool) -> BoxedStrategy<Option<event::Body>> {
    use event::Body;
    let lifecycle = (
        enumeration(5, wild),
        text(),
        text(),
        text(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(kind, detail, local, uri, memory, sealed)| Lifecycle {
            kind,
            detail,
            snapshot_local: local,
            snapshot_external_uri: uri,
            snapshot_memory: memory,
            snapshot_sealed: sealed,
        });
    let start = (
        bytes(),
        int64(),
        proptest::option::of(int64()),
        text(),
        text(),
    )
        .prop_map(
            |(config, resume_from_seq, input_count, harness, harness_version)| ExecutionStart {
                config,
                resume_from_seq,
                input_count,
                harness,
                harness_version,
            },
        );
    prop_oneof![
        Just(None),
        message(wild).prop_map(|m| Some(Body::Message(m))),
        model_call(wild).prop_map(|m| Some(Body::Model(m))),
        tool_call(wild).prop_map(|t| Some(Body::Tool(t))),
        tool_result(wild).prop_map(|r| Some(Body::Result(r))),
        (text(), text()).prop_map(
            |(tool_call_id, reason)| Some(Body::Approval(ApprovalRequest {
                tool_call_id,
                reason
            }))
        ),
        (text(), any::<bool>(), text(), int64()).prop_map(
            |(tool_call_id, approved, reason, request_seq)| Some(Body::ApprovalResult(
                ApprovalResult {
                    tool_call_id,
                    approved,
                    reason,
                    request_seq
                }
            ))
        ),
        (text(), int64(), int64(), int64()).prop_map(|(model, i, o, r)| Some(Body::Usage(Usage {
            model,
            input_tokens: i,
            output_tokens: o,
            reasoning_tokens: r
        }))),
        lifecycle.prop_map(|l| Some(Body::Lifecycle(l))),
        (text(), proptest::option::of(error()))
            .prop_map(|(state, error)| Some(Body::End(HarnessEnd { state, error }))),
        error().prop_map(|e| Some(Body::Error(e))),
        start.prop_map(|s| Some(Body::ExecutionStart(s))),
        (text(), text(), int64()).prop_map(|(execution_id, tool_call_id, request_seq)| Some(
            Body::Parked(ApprovalRef {
                execution_id,
                tool_call_id,
                request_seq
            })
        )),
    ]
    .boxed()
}

/// An arbitrary Event covering every body kind.
pub fn event(wild: bool) -> BoxedStrategy<Event> {
    (
        text(),
        proptest::option::of(timestamp(wild)),
        int32(),
        enumeration(13, wild),
        body(wild),
        proptest::option::of(identity()),
    )
        .prop_map(
            |(execution_id, ts, schema_version, kind, body, actor)| Event {
                execution_id,
                ts,
                schema_version,
                kind,
                body,
                actor,
            },
        )
        .boxed()
}

/// A prev_hash as it may appear in a record (usually hex, sometimes odd).
pub fn prev_hash() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[0-9a-f]{64}", text(),]
}

/// A valid chain of `1..max` records built from arbitrary valid events.
pub fn chain(max: usize) -> BoxedStrategy<Vec<LogRecord>> {
    vec(event(false), 1..max)
        .prop_map(|events| {
            let mut prev = String::new();
            let mut out = Vec::with_capacity(events.len());
            for (i, ev) in events.into_iter().enumerate() {
                let seq = i as i64 + 1;
                let hash = agentsessions_machine::canon::content_hash(&prev, seq, &ev)
                    .expect("valid events canonicalize");
                out.push(LogRecord {
                    seq,
                    prev_hash: std::mem::replace(&mut prev, hash.clone()),
                    content_hash: hash,
                    fence: 1,
                    event: Some(ev),
                });
            }
            out
        })
        .boxed()
}
