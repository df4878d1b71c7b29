//! The model clients against a fake OpenAI-compatible server on loopback
//! (see `openai_fake`).

mod openai_fake;

use std::time::Duration;

use agentsessions_proto::v1::{
    DataPart, FilePart, Message, ModelCall, Part, ReasoningPart, TextPart, ToolCall, ToolChoice,
    ToolDefinition, ToolResult, part, reasoning_part, tool_choice,
};
use agentsessions_shells::model::{
    EchoModel, ModelClient, ModelError, OpenAiClient, OpenAiConfig, message_text, model_outcome,
};
use openai_fake::{MODEL, Reply, ok, serve, sse};
use serde_json::{Value, json};
use tokio::net::TcpListener;

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

fn call(model: &str, messages: Vec<Message>) -> ModelCall {
    ModelCall {
        model: model.into(),
        messages,
        ..ModelCall::default()
    }
}

fn hello() -> Value {
    json!({"choices": [{"message": {"role": "assistant", "content": "hi"}}]})
}

fn struct_of(v: Value) -> pbjson_types::Struct {
    serde_json::from_value(v).unwrap()
}

async fn invoke(
    client: &dyn ModelClient,
    req: &ModelCall,
) -> (
    Result<agentsessions_machine::vocab::ModelReply, ModelError>,
    Vec<String>,
) {
    let mut chunks = Vec::new();
    let mut sink = |c: String| chunks.push(c);
    let r = client.invoke(req, &mut sink).await;
    (r, chunks)
}

#[tokio::test]
async fn request_shape_roles_text_and_dropped_reasoning() {
    let fake = serve(ok(hello())).await;
    let reasoning = Part {
        part: Some(part::Part::Reasoning(ReasoningPart {
            provider: "openai".into(),
            opaque: Some(reasoning_part::Opaque::OpaqueBytes(b"secret".to_vec())),
            ..ReasoningPart::default()
        })),
    };
    let req = call(
        "",
        vec![
            msg("system", vec![text("be brief")]),
            msg("", vec![text("a"), reasoning.clone(), text("b")]),
            msg("assistant", vec![reasoning]),
        ],
    );
    let reply = fake.client().complete(&req).await.unwrap();
    assert_eq!(message_text(reply.message.as_ref().unwrap()), "hi");
    let seen = fake.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/v1/chat/completions");
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(
        seen[0].json(),
        json!({"model": MODEL, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "ab"},
            {"role": "assistant", "content": ""},
        ]})
    );
}

#[tokio::test]
async fn model_override_rules() {
    let fake = serve(ok(hello())).await;
    let client = fake.client();
    for (asked, sent) in [("", MODEL), ("echo", MODEL), ("other-model", "other-model")] {
        client.complete(&call(asked, vec![])).await.unwrap();
        assert_eq!(fake.requests().last().unwrap().json()["model"], sent);
    }
}

#[tokio::test]
async fn base_url_trailing_slash_and_path_with_query() {
    let fake = serve(ok(hello())).await;
    let config = OpenAiConfig::new(MODEL)
        .with_base_url(format!("{}/v1///", fake.base))
        .with_path("deployments/x/chat?api-version=2")
        .with_stream(false);
    OpenAiClient::new(config)
        .unwrap()
        .complete(&call("", vec![]))
        .await
        .unwrap();
    assert_eq!(
        fake.requests()[0].target,
        "/v1/deployments/x/chat?api-version=2"
    );
}

#[tokio::test]
async fn tools_and_tool_choice_encoding() {
    let fake = serve(ok(hello())).await;
    let client = fake.client();
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let tools = vec![
        ToolDefinition {
            name: "search".into(),
            description: "look things up".into(),
            input_schema: Some(struct_of(schema.clone())),
        },
        ToolDefinition {
            name: "noop".into(),
            ..ToolDefinition::default()
        },
    ];
    let cases = [
        (tool_choice::Mode::Unspecified, "", None),
        (tool_choice::Mode::Auto, "", Some(json!("auto"))),
        (tool_choice::Mode::None, "", Some(json!("none"))),
        (tool_choice::Mode::Required, "", Some(json!("required"))),
        (
            tool_choice::Mode::Required,
            "search",
            Some(json!({"type": "function", "function": {"name": "search"}})),
        ),
    ];
    for (mode, name, want) in cases {
        let mut req = call("", vec![msg("user", vec![text("x")])]);
        req.tools = tools.clone();
        req.tool_choice = Some(ToolChoice {
            mode: mode as i32,
            name: name.into(),
        });
        client.complete(&req).await.unwrap();
        let body = fake.requests().last().unwrap().json();
        assert_eq!(
            body["tools"],
            json!([
                {"type": "function", "function": {
                    "name": "search", "description": "look things up", "parameters": schema}},
                {"type": "function", "function": {"name": "noop"}},
            ])
        );
        assert_eq!(body.get("tool_choice").cloned(), want, "{mode:?} {name}");
    }
    // Without tools, neither field is sent.
    let mut req = call("", vec![]);
    req.tool_choice = Some(ToolChoice {
        mode: tool_choice::Mode::Auto as i32,
        name: String::new(),
    });
    client.complete(&req).await.unwrap();
    let body = fake.requests().last().unwrap().json();
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}

#[tokio::test]
async fn tool_call_and_result_parts_are_threaded() {
    let fake = serve(ok(hello())).await;
    let asked = Part {
        part: Some(part::Part::ToolCall(ToolCall {
            id: "c1".into(),
            tool: "search".into(),
            args: Some(struct_of(json!({"q": "rust"}))),
            ..ToolCall::default()
        })),
    };
    let answered = Part {
        part: Some(part::Part::ToolResult(ToolResult {
            id: "c1".into(),
            content: vec![text("found it")],
            ..ToolResult::default()
        })),
    };
    let structured = Part {
        part: Some(part::Part::ToolResult(ToolResult {
            id: "c2".into(),
            output: Some(struct_of(json!({"n": 1.5}))),
            ..ToolResult::default()
        })),
    };
    let req = call(
        "",
        vec![
            msg("assistant", vec![asked]),
            msg("tool", vec![answered, structured]),
        ],
    );
    fake.client().complete(&req).await.unwrap();
    assert_eq!(
        fake.requests()[0].json()["messages"],
        json!([
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "search", "arguments": "{\"q\":\"rust\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "found it"},
            {"role": "tool", "tool_call_id": "c2", "content": "{\"n\":1.5}"},
        ])
    );
}

#[tokio::test]
async fn auth_header_rules() {
    let fake = serve(ok(hello())).await;
    let cases: [(Option<&str>, &str, &str, Option<&str>); 4] = [
        (None, "sk-1", "authorization", Some("Bearer sk-1")),
        (
            Some("AUTHORIZATION"),
            "sk-2",
            "authorization",
            Some("Bearer sk-2"),
        ),
        (Some("api-key"), "sk-3", "api-key", Some("sk-3")),
        (None, "", "authorization", None),
    ];
    for (header, key, look, want) in cases {
        let mut config = fake.config().with_api_key(key);
        if let Some(h) = header {
            config = config.with_auth_header(h);
        }
        let config = config.with_header("x-extra", "1");
        OpenAiClient::new(config)
            .unwrap()
            .complete(&call("", vec![]))
            .await
            .unwrap();
        let seen = fake.requests().pop().unwrap();
        assert_eq!(seen.header(look), want, "{header:?}");
        assert_eq!(seen.header("x-extra"), Some("1"));
        if header.is_some_and(|h| h != "AUTHORIZATION") {
            assert_eq!(seen.header("authorization"), None);
        }
    }
}

#[tokio::test]
async fn config_errors_and_debug_hides_the_key() {
    assert_eq!(
        OpenAiClient::new(OpenAiConfig::new("")).unwrap_err(),
        ModelError::MissingModel
    );
    let bad = OpenAiConfig::new(MODEL)
        .with_auth_header("bad header")
        .with_api_key("k");
    assert_eq!(
        OpenAiClient::new(bad).unwrap_err(),
        ModelError::InvalidHeader
    );
    let bad = OpenAiConfig::new(MODEL).with_base_url("not a url");
    assert_eq!(OpenAiClient::new(bad).unwrap_err(), ModelError::InvalidUrl);
    let config = OpenAiConfig::new(MODEL)
        .with_api_key("sk-very-secret")
        .with_header("x-k", "v-secret");
    let shown = format!(
        "{config:?} {:?}",
        OpenAiClient::new(config.clone()).unwrap()
    );
    assert!(
        !shown.contains("sk-very-secret") && !shown.contains("v-secret"),
        "{shown}"
    );
}

#[tokio::test]
async fn non_200_error_texts() {
    let long = "x".repeat(300);
    let cases = [
        (
            Reply::Full(
                401,
                br#"{"error":{"message":"bad key sk-live-123"}}"#.to_vec(),
            ),
            "openai: gpt-test: bad key <redacted> (http 401)".to_owned(),
        ),
        (
            Reply::Full(502, format!("  {long}").into_bytes()),
            format!("openai: gpt-test: {} (http 502)", "x".repeat(200)),
        ),
        (
            Reply::Full(503, Vec::new()),
            "openai: gpt-test: http 503".to_owned(),
        ),
    ];
    for (reply, want) in cases {
        let fake = serve(reply).await;
        let client = OpenAiClient::new(fake.config().with_api_key("sk-live-123")).unwrap();
        let err = client.complete(&call("", vec![])).await.unwrap_err();
        assert!(matches!(err, ModelError::Status { .. }));
        assert_eq!(err.to_outcome_string(), want);
        // The streaming path checks the status the same way.
        let client = OpenAiClient::new(fake.config().with_api_key("sk-live-123").with_stream(true));
        let (r, chunks) = invoke(&client.unwrap(), &call("", vec![])).await;
        assert_eq!(r.unwrap_err().to_string(), want);
        assert!(chunks.is_empty());
    }
}

#[tokio::test]
async fn no_choices_and_garbled_bodies_are_errors() {
    for (body, want) in [
        (
            json!({"choices": []}).to_string(),
            ModelError::NoChoices {
                model: MODEL.into(),
            },
        ),
        (
            json!({"usage": null}).to_string(),
            ModelError::NoChoices {
                model: MODEL.into(),
            },
        ),
        (
            "not json".to_owned(),
            ModelError::InvalidBody {
                model: MODEL.into(),
            },
        ),
        (
            json!({"choices": 3}).to_string(),
            ModelError::InvalidBody {
                model: MODEL.into(),
            },
        ),
    ] {
        let fake = serve(Reply::Full(200, body.into_bytes())).await;
        let err = fake.client().complete(&call("", vec![])).await.unwrap_err();
        assert_eq!(err, want);
    }
    // Content that is neither a string nor text items carries no text.
    let fake = serve(ok(json!({"choices": [{"message": {"content": 5}}]}))).await;
    let reply = fake.client().complete(&call("", vec![])).await.unwrap();
    assert!(reply.message.unwrap().parts.is_empty());
}

#[tokio::test]
async fn reasoning_content_text_and_usage() {
    let fake = serve(ok(json!({
        "choices": [{"message": {"content": "answer", "reasoning_content": "thinking"}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7,
                  "completion_tokens_details": {"reasoning_tokens": 3}},
    })))
    .await;
    let reply = fake.client().complete(&call("echo", vec![])).await.unwrap();
    let message = reply.message.unwrap();
    assert_eq!(message.role, "assistant");
    assert_eq!(message.parts.len(), 2);
    let Some(part::Part::Reasoning(r)) = &message.parts[0].part else {
        panic!("{message:?}")
    };
    assert_eq!(
        (r.provider.as_str(), r.model_id.as_str()),
        ("openai", MODEL)
    );
    assert_eq!(
        r.opaque,
        Some(reasoning_part::Opaque::OpaqueBytes(b"thinking".to_vec()))
    );
    assert_eq!(message.parts[1], text("answer"));
    let usage = reply.usage.unwrap();
    assert_eq!(usage.model, MODEL);
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.reasoning_tokens
        ),
        (11, 7, 3)
    );
}

#[tokio::test]
async fn empty_content_gives_no_text_part_and_no_usage() {
    let fake = serve(ok(json!({"choices": [{"message": {"content": ""}}]}))).await;
    let reply = fake.client().complete(&call("", vec![])).await.unwrap();
    assert!(reply.message.unwrap().parts.is_empty());
    assert_eq!(reply.usage, None);
}

fn tool_call_part(id: &str, tool: &str, args: Value) -> Part {
    Part {
        part: Some(part::Part::ToolCall(ToolCall {
            id: id.into(),
            tool: tool.into(),
            args: Some(struct_of(args)),
            ..ToolCall::default()
        })),
    }
}

#[tokio::test]
async fn tool_calls_become_parts() {
    let fake = serve(ok(json!({"choices": [{"message": {"content": "calling", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"x\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "noop", "arguments": ""}},
    ]}}]})))
    .await;
    let message = fake
        .client()
        .complete(&call("", vec![]))
        .await
        .unwrap()
        .message
        .unwrap();
    assert_eq!(
        message.parts,
        vec![
            text("calling"),
            tool_call_part("c1", "search", json!({"q": "x"})),
            tool_call_part("c2", "noop", json!({})),
        ]
    );
}

#[tokio::test]
async fn invalid_tool_arguments_are_typed_errors() {
    for args in ["{not json", "[1,2]", "\"s\""] {
        let fake = serve(ok(json!({"choices": [{"message": {"tool_calls": [
            {"id": "c1", "function": {"name": "t", "arguments": args}}]}}]})))
        .await;
        let err = fake.client().complete(&call("", vec![])).await.unwrap_err();
        assert_eq!(
            err,
            ModelError::InvalidToolArguments {
                model: MODEL.into()
            }
        );
        assert!(!err.to_outcome_string().contains(args));
    }
}

#[tokio::test]
async fn file_and_data_parts_are_refused_before_sending() {
    let fake = serve(ok(hello())).await;
    let file = Part {
        part: Some(part::Part::File(FilePart::default())),
    };
    let data = Part {
        part: Some(part::Part::Data(DataPart::default())),
    };
    for (p, kind) in [(file, "file"), (data, "data")] {
        let req = call("", vec![msg("user", vec![text("look"), p])]);
        for client in [fake.client(), fake.streaming()] {
            let (r, _) = invoke(&client, &req).await;
            assert_eq!(r.unwrap_err(), ModelError::UnsupportedPart { kind });
        }
    }
    assert!(fake.requests().is_empty());
}

fn delta(d: Value) -> Value {
    json!({"choices": [{"index": 0, "delta": d}]})
}

#[tokio::test]
async fn streaming_forwards_chunks_and_returns_the_whole_completion() {
    let fake = serve(sse(
        &[
            delta(json!({"role": "assistant", "content": ""})),
            delta(json!({"reasoning_content": "hmm "})),
            delta(json!({"reasoning_content": "ok"})),
            delta(json!({"content": "Hel"})),
            delta(json!({"content": "lo"})),
            delta(json!({"content": ", world"})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3,
                   "completion_tokens_details": {"reasoning_tokens": 2}}}),
        ],
        true,
    ))
    .await;
    let (r, chunks) = invoke(
        &fake.streaming(),
        &call("", vec![msg("user", vec![text("hi")])]),
    )
    .await;
    let reply = r.unwrap();
    assert_eq!(chunks, ["Hel", "lo", ", world"]);
    let message = reply.message.unwrap();
    assert_eq!(message_text(&message), chunks.concat());
    let Some(part::Part::Reasoning(rp)) = &message.parts[0].part else {
        panic!()
    };
    assert_eq!(
        rp.opaque,
        Some(reasoning_part::Opaque::OpaqueBytes(b"hmm ok".to_vec()))
    );
    let usage = reply.usage.unwrap();
    assert_eq!(
        (
            usage.model.as_str(),
            usage.input_tokens,
            usage.output_tokens,
            usage.reasoning_tokens
        ),
        (MODEL, 5, 3, 2)
    );
    let body = fake.requests()[0].json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn streaming_stops_at_done_without_waiting_for_close() {
    let Reply::Stream(mut pieces, _) = sse(&[delta(json!({"content": "a"}))], true) else {
        unreachable!()
    };
    pieces.push(b"data: {garbage after done\n\n".to_vec());
    let fake = serve(Reply::Stream(pieces, true)).await;
    let client = fake.streaming();
    let req = call("", vec![]);
    let run = invoke(&client, &req);
    let (r, chunks) = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("returns at [DONE]");
    assert_eq!(message_text(&r.unwrap().message.unwrap()), "a");
    assert_eq!(chunks, ["a"]);
}

#[tokio::test]
async fn streaming_accumulates_tool_call_deltas_by_index() {
    let fake = serve(sse(
        &[
            delta(json!({"tool_calls": [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "search", "arguments": ""}},
            ]})),
            delta(json!({"tool_calls": [
                {"index": 1, "id": "c2", "function": {"name": "noop", "arguments": "{}"}},
                {"index": 0, "function": {"arguments": "{\"q\":"}},
            ]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"x\"}"}}]})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ],
        true,
    ))
    .await;
    let (r, chunks) = invoke(&fake.streaming(), &call("", vec![])).await;
    assert!(chunks.is_empty());
    assert_eq!(
        r.unwrap().message.unwrap().parts,
        vec![
            tool_call_part("c1", "search", json!({"q": "x"})),
            tool_call_part("c2", "noop", json!({})),
        ]
    );
}

#[tokio::test]
async fn streaming_failures_are_typed() {
    let model = || MODEL.to_owned();
    let mut long = b"data: ".to_vec();
    long.resize(8 * 1024 * 1024 + 16, b'a');
    let cases = [
        (
            Reply::Stream(vec![long], false),
            ModelError::LineTooLong {
                model: model(),
                limit: 8 << 20,
            },
        ),
        (
            Reply::Stream(vec![b"data: {\"choices\": [\n\n".to_vec()], false),
            ModelError::InvalidFrame { model: model() },
        ),
        (
            Reply::Stream(vec![b"data: \xff\xfe\n\n".to_vec()], false),
            ModelError::InvalidFrame { model: model() },
        ),
        (
            sse(&[delta(json!({"content": "cut"}))], false),
            ModelError::StreamTruncated { model: model() },
        ),
        (
            sse(&[json!({"error": {"message": "overloaded"}})], true),
            ModelError::Provider {
                model: model(),
                detail: "overloaded".into(),
            },
        ),
        (
            sse(
                &[delta(
                    json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t", "arguments": "{"}}]}),
                )],
                true,
            ),
            ModelError::InvalidToolArguments { model: model() },
        ),
    ];
    for (reply, want) in cases {
        let fake = serve(reply).await;
        let (r, _) = invoke(&fake.streaming(), &call("", vec![])).await;
        assert_eq!(r.unwrap_err(), want);
    }
}

#[tokio::test]
async fn streaming_without_done_is_accepted_after_a_finish_reason() {
    let fake = serve(sse(
        &[
            delta(json!({"content": "full"})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ],
        false,
    ))
    .await;
    let (r, _) = invoke(&fake.streaming(), &call("", vec![])).await;
    assert_eq!(message_text(&r.unwrap().message.unwrap()), "full");
}

#[tokio::test]
async fn oversized_body_is_refused() {
    let mut body = b"{\"choices\": [], \"pad\": \"".to_vec();
    body.resize(32 * 1024 * 1024 + 1, b' ');
    let fake = serve(Reply::Full(200, body)).await;
    let err = fake.client().complete(&call("", vec![])).await.unwrap_err();
    assert_eq!(
        err,
        ModelError::TooLarge {
            model: MODEL.into(),
            limit: 32 << 20
        }
    );
}

#[tokio::test]
async fn transport_failure_names_no_url() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let config = OpenAiConfig::new(MODEL)
        .with_base_url(format!("http://{addr}/v1"))
        .with_path("/chat?key=query-secret")
        .with_stream(false);
    let err = OpenAiClient::new(config)
        .unwrap()
        .complete(&call("", vec![]))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert!(
        err.is_unavailable(),
        "a provider that cannot be reached is retried"
    );
    let text = err.to_outcome_string();
    assert!(
        !text.contains("query-secret") && !text.contains(&addr.to_string()),
        "{text}"
    );
}

#[tokio::test]
async fn echo_model_answers_the_last_message() {
    let req = call(
        "echo",
        vec![
            msg("user", vec![text("first")]),
            msg("user", vec![text("sec"), text("ond")]),
        ],
    );
    let (r, chunks) = invoke(&EchoModel, &req).await;
    let reply = r.unwrap();
    assert!(chunks.is_empty());
    assert_eq!(reply.usage, None);
    assert_eq!(
        reply.message,
        Some(msg("assistant", vec![text("echo:second")]))
    );
    let (r, _) = invoke(&EchoModel, &call("", vec![])).await;
    assert_eq!(message_text(&r.unwrap().message.unwrap()), "echo:");
    assert!(matches!(
        model_outcome(Err(ModelError::NoChoices { model: "m".into() })),
        agentsessions_machine::vocab::Outcome::Model(Err(f))
            if f.message == "openai: m: no choices in response" && !f.unavailable
    ));
}

#[test]
fn overloaded_and_unreachable_providers_are_unavailable_and_refusals_are_not() {
    let status = |status: u16| ModelError::Status {
        model: "m".into(),
        status,
        detail: String::new(),
    };
    for code in [408, 429, 500, 502, 503, 504] {
        assert!(status(code).is_unavailable(), "http {code}");
    }
    for code in [400, 401, 403, 404, 422] {
        assert!(!status(code).is_unavailable(), "http {code}");
    }
    assert!(ModelError::StreamTruncated { model: "m".into() }.is_unavailable());
    assert!(!ModelError::InvalidBody { model: "m".into() }.is_unavailable());
    assert!(!ModelError::NotServed { model: "m".into() }.is_unavailable());
}
