//! The Go-compatible model input hash against the Go host's pinned vectors
//! and the encoding rules of Go's `encoding/json`.

use std::collections::{BTreeMap, HashMap};

use agentsessions_machine::inputhash::{
    InputHashError, ModelRequest, encode_go_json, from_model_call, input_hash,
};
use agentsessions_proto::v1::{
    DataPart, FilePart, Mediation, Message, ModelCall, Part, ReasoningPart, TextPart, ToolCall,
    ToolChoice, ToolDefinition, ToolResult, file_part, part, reasoning_part, tool_choice,
};
use pbjson_types::{ListValue, Struct, Value, value::Kind};

fn text(t: &str) -> Part {
    Part {
        part: Some(part::Part::Text(TextPart { text: t.into() })),
    }
}

fn msg(role: &str, parts: Vec<Part>) -> Message {
    Message {
        role: role.into(),
        parts,
    }
}

fn num(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn obj(entries: Vec<(&str, Value)>) -> Struct {
    Struct {
        fields: entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    }
}

fn data(s: Struct) -> Part {
    Part {
        part: Some(part::Part::Data(DataPart { data: Some(s) })),
    }
}

fn req<'a>(messages: &'a [Message], params: &'a BTreeMap<String, String>) -> ModelRequest<'a> {
    ModelRequest {
        model: "m",
        messages,
        params,
        tools: &[],
        tool_choice: None,
    }
}

fn encoded(r: &ModelRequest<'_>) -> String {
    String::from_utf8(encode_go_json(r).unwrap()).unwrap()
}

/// The Go host's "legacy request" (controller.md §4.4), pinned upstream.
#[test]
fn legacy_request_vector() {
    let messages = vec![
        msg("system", vec![text("be brief")]),
        msg(
            "user",
            vec![
                text("hi"),
                Part {
                    part: Some(part::Part::File(FilePart {
                        mime: "image/png".into(),
                        name: "img".into(),
                        digest: "sha256:aa".into(),
                        source: Some(file_part::Source::Bytes(vec![1, 2])),
                    })),
                },
                data(obj(vec![("b", num(1.5)), ("a", string("x"))])),
            ],
        ),
        msg(
            "assistant",
            vec![
                Part {
                    part: Some(part::Part::Reasoning(ReasoningPart {
                        provider: "p".into(),
                        model_id: "m".into(),
                        summary: vec![text("brief")],
                        item_id: "rs_1".into(),
                        ordinal: 1,
                        validity_scope: String::new(),
                        opaque_digest: String::new(),
                        opaque: Some(reasoning_part::Opaque::OpaqueBytes(b"r".to_vec())),
                    })),
                },
                text("yo"),
            ],
        ),
    ];
    let params = BTreeMap::from([("temperature".to_owned(), "0".to_owned())]);
    let r = req(&messages, &params);
    let want = r#"{"Model":"m","Messages":[{"Role":"system","Parts":[{"Text":{"Text":"be brief"},"File":null,"Data":null,"Reasoning":null}]},{"Role":"user","Parts":[{"Text":{"Text":"hi"},"File":null,"Data":null,"Reasoning":null},{"Text":null,"File":{"MIME":"image/png","Bytes":"AQI=","URI":"","Digest":"sha256:aa","Name":"img"},"Data":null,"Reasoning":null},{"Text":null,"File":null,"Data":{"a":"x","b":1.5},"Reasoning":null}]},{"Role":"assistant","Parts":[{"Text":null,"File":null,"Data":null,"Reasoning":{"Provider":"p","ModelID":"m","Opaque":"cg==","OpaqueURI":"","OpaqueDigest":"","Summary":[{"Text":{"Text":"brief"},"File":null,"Data":null,"Reasoning":null}],"ItemID":"rs_1","Ordinal":1,"ValidityScope":""}},{"Text":{"Text":"yo"},"File":null,"Data":null,"Reasoning":null}]}],"Params":{"temperature":"0"}}"#;
    assert_eq!(encoded(&r), want);
    assert_eq!(
        input_hash(&r).unwrap(),
        "210636379d42235ed6d7b2b1e9c7d7e59c8f887a851ec502ac50f82e36867256"
    );
}

/// wire.md §7.3: a tool-result part, showing the omitempty receipt fields.
#[test]
fn tool_result_part_vector() {
    let messages = vec![msg(
        "tool",
        vec![Part {
            part: Some(part::Part::ToolResult(ToolResult {
                id: "c1".into(),
                ..ToolResult::default()
            })),
        }],
    )];
    let params = BTreeMap::new();
    let r = req(&messages, &params);
    assert_eq!(
        encoded(&r),
        r#"{"Model":"m","Messages":[{"Role":"tool","Parts":[{"Text":null,"File":null,"Data":null,"Reasoning":null,"ToolResult":{"ID":"c1","Output":null,"OutputURI":"","OutputDigest":"","IsError":false,"Error":""}}]}],"Params":null}"#
    );
    assert_eq!(
        input_hash(&r).unwrap(),
        "e519b8f957d02755a004b638c9d819f925e8bb9b65fa06a71bfd4f121b95472a"
    );
}

/// The request the Go echo harness sends for "hello" (completed.json).
#[test]
fn echo_request_vector_and_model_call_shorthand() {
    let call = ModelCall {
        model: "echo".into(),
        messages: vec![msg("user", vec![text("hello")])],
        ..ModelCall::default()
    };
    let r = from_model_call(&call);
    assert_eq!(
        encoded(&r),
        r#"{"Model":"echo","Messages":[{"Role":"user","Parts":[{"Text":{"Text":"hello"},"File":null,"Data":null,"Reasoning":null}]}],"Params":null}"#
    );
    assert_eq!(
        input_hash(&r).unwrap(),
        "2611c24a1a665deca46265ed96d1e1efc699260c9cba9c07f22cda7939232c30"
    );
}

#[test]
fn empty_request_is_all_null() {
    let params = BTreeMap::new();
    let r = ModelRequest {
        model: "",
        messages: &[],
        params: &params,
        tools: &[],
        tool_choice: None,
    };
    assert_eq!(encoded(&r), r#"{"Model":"","Messages":null,"Params":null}"#);
    let m = [msg("user", vec![]), msg("user", vec![Part::default()])];
    assert_eq!(
        encoded(&req(&m, &params)),
        r#"{"Model":"m","Messages":[{"Role":"user","Parts":null},{"Role":"user","Parts":[{"Text":null,"File":null,"Data":null,"Reasoning":null}]}],"Params":null}"#
    );
}

fn schema(entries: Vec<(&str, Value)>) -> Option<Struct> {
    Some(obj(entries))
}

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.into(),
        description: "d".into(),
        input_schema: schema(vec![("type", string("object"))]),
    }
}

#[test]
fn tools_and_tool_choice_are_encoded_and_hashed() {
    let messages = vec![msg("user", vec![text("hi")])];
    let params = BTreeMap::new();
    let base = req(&messages, &params);
    let tools = vec![tool("a"), tool("b")];
    let with_tools = ModelRequest {
        tools: &tools,
        ..base
    };
    let choice = ToolChoice {
        mode: tool_choice::Mode::Required as i32,
        name: "a".into(),
    };
    let with_choice = ModelRequest {
        tool_choice: Some(&choice),
        ..with_tools
    };
    assert_eq!(
        encoded(&with_choice),
        r#"{"Model":"m","Messages":[{"Role":"user","Parts":[{"Text":{"Text":"hi"},"File":null,"Data":null,"Reasoning":null}]}],"Params":null,"Tools":[{"Name":"a","Description":"d","InputSchema":{"type":"object"}},{"Name":"b","Description":"d","InputSchema":{"type":"object"}}],"ToolChoice":{"Mode":"REQUIRED","Name":"a"}}"#
    );

    let mut hashes = vec![
        input_hash(&base).unwrap(),
        input_hash(&with_tools).unwrap(),
        input_hash(&with_choice).unwrap(),
    ];
    // Each change to a tool definition changes the hash.
    let variants: Vec<Vec<ToolDefinition>> = vec![
        vec![tool("b"), tool("a")],
        vec![tool("a")],
        vec![
            ToolDefinition {
                description: "e".into(),
                ..tool("a")
            },
            tool("b"),
        ],
        vec![
            ToolDefinition {
                input_schema: schema(vec![("type", string("array"))]),
                ..tool("a")
            },
            tool("b"),
        ],
        vec![
            ToolDefinition {
                input_schema: None,
                ..tool("a")
            },
            tool("b"),
        ],
    ];
    for v in &variants {
        hashes.push(
            input_hash(&ModelRequest {
                tools: v,
                ..with_tools
            })
            .unwrap(),
        );
    }
    let choices = [
        ToolChoice {
            mode: tool_choice::Mode::Auto as i32,
            name: String::new(),
        },
        ToolChoice {
            mode: tool_choice::Mode::None as i32,
            name: String::new(),
        },
        ToolChoice {
            mode: tool_choice::Mode::Unspecified as i32,
            name: String::new(),
        },
        ToolChoice {
            mode: tool_choice::Mode::Required as i32,
            name: "b".into(),
        },
    ];
    for c in &choices {
        hashes.push(
            input_hash(&ModelRequest {
                tool_choice: Some(c),
                ..with_tools
            })
            .unwrap(),
        );
    }
    assert_distinct(&hashes);
}

#[test]
fn unknown_tool_choice_mode_is_an_error() {
    let params = BTreeMap::new();
    let choice = ToolChoice {
        mode: 9,
        name: String::new(),
    };
    let r = ModelRequest {
        tool_choice: Some(&choice),
        ..req(&[], &params)
    };
    assert_eq!(
        input_hash(&r),
        Err(InputHashError::UnknownToolChoiceMode { mode: 9 })
    );
}

fn call_part(c: ToolCall) -> Part {
    Part {
        part: Some(part::Part::ToolCall(c)),
    }
}

fn result_part(r: ToolResult) -> Part {
    Part {
        part: Some(part::Part::ToolResult(r)),
    }
}

fn base_call() -> ToolCall {
    ToolCall {
        id: "c1".into(),
        tool: "t".into(),
        args: Some(obj(vec![("x", num(1.0))])),
        mediation: 0,
        idempotency_key: String::new(),
    }
}

fn base_result() -> ToolResult {
    ToolResult {
        id: "c1".into(),
        output: Some(obj(vec![(
            "ok",
            Value {
                kind: Some(Kind::BoolValue(true)),
            },
        )])),
        ..ToolResult::default()
    }
}

#[test]
fn tool_call_and_result_parts_are_encoded_and_hashed() {
    let params = BTreeMap::new();
    let call = ToolCall {
        mediation: Mediation::RequiresApproval as i32,
        idempotency_key: "k".into(),
        ..base_call()
    };
    let result = ToolResult {
        is_error: true,
        error: "e".into(),
        content: vec![text("c")],
        code: 1,
        approval_request_seq: 3,
        approval_decision_seq: 4,
        ..base_result()
    };
    let m = [
        msg("assistant", vec![call_part(call)]),
        msg("tool", vec![result_part(result)]),
    ];
    assert_eq!(
        encoded(&req(&m, &params)),
        concat!(
            r#"{"Model":"m","Messages":[{"Role":"assistant","Parts":[{"Text":null,"File":null,"Data":null,"Reasoning":null,"#,
            r#""ToolCall":{"ID":"c1","Tool":"t","Args":{"x":1},"Mediation":"REQUIRES_APPROVAL","IdempotencyKey":"k"}}]},"#,
            r#"{"Role":"tool","Parts":[{"Text":null,"File":null,"Data":null,"Reasoning":null,"#,
            r#""ToolResult":{"ID":"c1","Output":{"ok":true},"OutputURI":"","OutputDigest":"","IsError":true,"Error":"e","#,
            r#""Content":[{"Text":{"Text":"c"},"File":null,"Data":null,"Reasoning":null}],"Code":1,"ApprovalRequestSeq":3,"ApprovalDecisionSeq":4}}]}],"Params":null}"#
        )
    );

    let calls = [
        base_call(),
        ToolCall {
            id: "c2".into(),
            ..base_call()
        },
        ToolCall {
            tool: "u".into(),
            ..base_call()
        },
        ToolCall {
            args: Some(obj(vec![("x", num(2.0))])),
            ..base_call()
        },
        ToolCall {
            args: None,
            ..base_call()
        },
        ToolCall {
            mediation: Mediation::ControllerMediated as i32,
            ..base_call()
        },
    ];
    let results = [
        ToolResult {
            id: "c2".into(),
            ..base_result()
        },
        ToolResult {
            content: vec![text("c")],
            ..base_result()
        },
        ToolResult {
            is_error: true,
            ..base_result()
        },
        ToolResult {
            output: None,
            ..base_result()
        },
        base_result(),
    ];
    let mut hashes = Vec::new();
    for c in &calls {
        let m = [msg("assistant", vec![call_part(c.clone())])];
        hashes.push(input_hash(&req(&m, &params)).unwrap());
    }
    for r in &results {
        let m = [msg("tool", vec![result_part(r.clone())])];
        hashes.push(input_hash(&req(&m, &params)).unwrap());
    }
    assert_distinct(&hashes);
}

fn assert_distinct(hashes: &[String]) {
    for (i, a) in hashes.iter().enumerate() {
        for (j, b) in hashes.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "variants {i} and {j} hash equally");
        }
    }
}

/// Struct maps are unordered; Go sorts keys, so insertion order must not
/// matter, and an integer-valued float is written as an integer.
#[test]
fn json_equal_structs_hash_equally() {
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let forward: HashMap<String, Value> = keys.iter().map(|k| (k.clone(), num(2.0))).collect();
    let mut backward = HashMap::new();
    for k in keys.iter().rev() {
        backward.insert(k.clone(), num(2.0));
    }
    let nested = |fields: HashMap<String, Value>| {
        data(obj(vec![
            (
                "z",
                Value {
                    kind: Some(Kind::StructValue(Struct { fields })),
                },
            ),
            ("a", num(2.0)),
        ]))
    };
    let params = BTreeMap::new();
    let m1 = [msg("user", vec![nested(forward)])];
    let m2 = [msg("user", vec![nested(backward)])];
    let e1 = encoded(&req(&m1, &params));
    assert_eq!(e1, encoded(&req(&m2, &params)));
    assert!(
        e1.contains(r#""Data":{"a":2,"z":{"k0":2,"k1":2,"k10":2,"#),
        "{e1}"
    );
}

fn data_json(v: Value) -> String {
    let params = BTreeMap::new();
    let m = [msg("u", vec![data(obj(vec![("v", v)]))])];
    let s = encoded(&req(&m, &params));
    let start = s.find(r#""Data":{"v":"#).unwrap() + r#""Data":{"v":"#.len();
    let end = s[start..].find(r#"},"Reasoning""#).unwrap();
    s[start..start + end].to_owned()
}

#[test]
fn go_float_formatting() {
    let cases: &[(f64, &str)] = &[
        (2.0, "2"),
        (1.5, "1.5"),
        (0.0, "0"),
        (-0.0, "-0"),
        (-3.25, "-3.25"),
        (0.1, "0.1"),
        (1e20, "100000000000000000000"),
        (123456789.0, "123456789"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (-2e22, "-2e+22"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.25e-7, "1.25e-7"),
        (1e-10, "1e-10"),
        (5e-324, "5e-324"),
        (f64::MAX, "1.7976931348623157e+308"),
        (9007199254740993.0, "9007199254740992"),
        (0.30000000000000004, "0.30000000000000004"),
        // Exactly halfway between two shortest candidates: Go (and ryu)
        // keep the even digit. The fuzz finding
        // `regressions/input_hash/float-tie-rounds-to-even`.
        (-594132965547100.0 - 0.25, "-594132965547100.2"),
        (594132965547100.0 + 0.75, "594132965547100.8"),
    ];
    for (f, want) in cases {
        assert_eq!(data_json(num(*f)), *want, "{f:?}");
    }
}

#[test]
fn non_finite_numbers_are_errors() {
    for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let params = BTreeMap::new();
        let m = [msg("u", vec![data(obj(vec![("v", num(f))]))])];
        assert!(matches!(
            input_hash(&req(&m, &params)),
            Err(InputHashError::NonFiniteNumber { .. })
        ));
    }
}

#[test]
fn struct_value_shapes() {
    assert_eq!(data_json(Value { kind: None }), "null");
    assert_eq!(
        data_json(Value {
            kind: Some(Kind::NullValue(0))
        }),
        "null"
    );
    assert_eq!(
        data_json(Value {
            kind: Some(Kind::ListValue(ListValue { values: vec![] }))
        }),
        "[]"
    );
    assert_eq!(
        data_json(Value {
            kind: Some(Kind::ListValue(ListValue {
                values: vec![
                    num(1.0),
                    string("a"),
                    Value {
                        kind: Some(Kind::BoolValue(false))
                    }
                ]
            }))
        }),
        r#"[1,"a",false]"#
    );
    assert_eq!(
        data_json(Value {
            kind: Some(Kind::StructValue(Struct::default()))
        }),
        "{}"
    );
    // An absent Struct is a nil map; a present empty one is `{}`.
    let params = BTreeMap::new();
    let m = [msg(
        "u",
        vec![
            Part {
                part: Some(part::Part::Data(DataPart { data: None })),
            },
            data(Struct::default()),
        ],
    )];
    let s = encoded(&req(&m, &params));
    assert!(s.contains(r#"{"Text":null,"File":null,"Data":null,"Reasoning":null},{"Text":null,"File":null,"Data":{},"Reasoning":null}"#), "{s}");
}

#[test]
fn go_string_escaping() {
    let cases: &[(&str, &str)] = &[
        (
            "<a href=\"x\">&</a>",
            r#""\u003ca href=\"x\"\u003e\u0026\u003c/a\u003e""#,
        ),
        ("line\u{2028}para\u{2029}", r#""line\u2028para\u2029""#),
        ("\n\r\t\\", r#""\n\r\t\\""#),
        ("\u{8}\u{c}", r#""\b\f""#),
        ("\u{0}\u{1f}\u{1b}", r#""\u0000\u001f\u001b""#),
        ("\u{7f}é😀'", "\"\u{7f}é😀'\""),
    ];
    for (input, want) in cases {
        assert_eq!(data_json(string(input)), *want, "{input:?}");
    }
    // Keys are escaped the same way, and sorted by their raw bytes.
    let params = BTreeMap::from([("<k>".to_owned(), "&".to_owned())]);
    let r = req(&[], &params);
    assert_eq!(
        encoded(&r),
        r#"{"Model":"m","Messages":null,"Params":{"\u003ck\u003e":"\u0026"}}"#
    );
}

#[test]
fn bytes_are_padded_base64_and_uri_is_the_alternative() {
    let file = |source| Part {
        part: Some(part::Part::File(FilePart {
            mime: String::new(),
            name: String::new(),
            digest: String::new(),
            source,
        })),
    };
    let params = BTreeMap::new();
    let m = [msg(
        "u",
        vec![
            file(Some(file_part::Source::Bytes(vec![
                0, 255, b' ', b'\n', b'\t',
            ]))),
            file(Some(file_part::Source::Bytes(vec![0xfb, 0xff]))),
            file(Some(file_part::Source::Uri("s3://x".into()))),
            file(Some(file_part::Source::Bytes(vec![]))),
            file(None),
        ],
    )];
    let s = encoded(&req(&m, &params));
    for want in [
        r#""Bytes":"AP8gCgk=","URI":"""#,
        r#""Bytes":"+/8=","URI":"""#,
        r#""Bytes":null,"URI":"s3://x""#,
    ] {
        assert!(s.contains(want), "{want} not in {s}");
    }
    assert_eq!(s.matches(r#""Bytes":null,"URI":"""#).count(), 2, "{s}");
}

#[test]
fn hand_built_nesting_is_bounded() {
    let nest = |depth: usize| {
        let mut v = num(1.0);
        for _ in 0..depth {
            v = Value {
                kind: Some(Kind::ListValue(ListValue { values: vec![v] })),
            };
        }
        v
    };
    let params = BTreeMap::new();
    let ok = [msg("u", vec![data(obj(vec![("v", nest(500))]))])];
    assert!(input_hash(&req(&ok, &params)).is_ok());
    let deep = [msg("u", vec![data(obj(vec![("v", nest(2_000))]))])];
    assert_eq!(
        input_hash(&req(&deep, &params)),
        Err(InputHashError::TooDeep {
            limit: agentsessions_machine::inputhash::MAX_DEPTH
        })
    );
    // Parts nest through reasoning summaries too.
    let mut p = text("x");
    for _ in 0..600 {
        p = Part {
            part: Some(part::Part::Reasoning(ReasoningPart {
                summary: vec![p],
                ..ReasoningPart::default()
            })),
        };
    }
    let m = [msg("u", vec![p])];
    assert!(matches!(
        input_hash(&req(&m, &params)),
        Err(InputHashError::TooDeep { .. })
    ));
}
