//! An MCP call's outcome as the durable receipt (`agentsessions.v1.ToolResult`).
//!
//! The mapping, content block by content block, in order:
//! - text → `TextPart`;
//! - image, audio → `FilePart{mime, bytes}` with the base64 decoded; data
//!   that is not valid base64 is kept verbatim as a `data:` URI in `uri`;
//! - resource link → `FilePart{mime, uri, name}` (no digest: the host never
//!   fetched what it points at);
//! - embedded text resource → `TextPart` with its text (what the model is
//!   shown; the resource's uri is not kept);
//! - embedded blob resource → `FilePart{mime or application/octet-stream,
//!   bytes, name = its uri}`.
//!
//! `structuredContent` → `output` (a Struct); `isError` → `is_error`, code
//! `EXECUTOR_ERROR`, and `error` = the first text block (or a fixed text).
//!
//! Invariant: the receipt says exactly what the server said or that the
//! call failed; it never holds a changed number or a value that would not
//! decode. An outcome that cannot be carried (an integer past ±2^53, nesting
//! too deep, non-object structured content) becomes an error receipt.

use agentsessions_proto::v1::{
    FilePart, Part, TextPart, ToolResult, file_part, part, tool_result::Code,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::json::{JsonError, json_value_to_struct};
use super::{CallOutcome, Content, McpError};

/// Shown as `error` when a failing tool gave no text.
const NO_ERROR_TEXT: &str = "tool reported an error";

/// The receipt of a call that returned `outcome`; see the module docs.
pub fn to_tool_result(call_id: &str, outcome: &CallOutcome) -> ToolResult {
    try_to_tool_result(call_id, outcome)
        .unwrap_or_else(|e| error_result(call_id, &McpError::Result(e)))
}

/// As [`to_tool_result`], but refusing what cannot be carried.
pub fn try_to_tool_result(call_id: &str, outcome: &CallOutcome) -> Result<ToolResult, JsonError> {
    let output = outcome
        .structured
        .as_ref()
        .map(json_value_to_struct)
        .transpose()?;
    let content = outcome.content.iter().map(to_part).collect();
    let mut result = ToolResult {
        id: call_id.to_owned(),
        output,
        content,
        ..ToolResult::default()
    };
    if outcome.is_error {
        result.is_error = true;
        result.code = Code::ExecutorError as i32;
        result.error = outcome
            .content
            .iter()
            .find_map(|c| match c {
                Content::Text(t) => Some(t.clone()),
                _ => None,
            })
            .unwrap_or_else(|| NO_ERROR_TEXT.to_owned());
    }
    Ok(result)
}

/// The receipt of a call that failed before a tool answered (unknown tool,
/// server down, timeout, result refused, protocol error).
pub fn error_result(call_id: &str, err: &McpError) -> ToolResult {
    ToolResult {
        id: call_id.to_owned(),
        is_error: true,
        code: Code::ExecutorError as i32,
        error: err.receipt_text(),
        ..ToolResult::default()
    }
}

fn text(t: &str) -> Part {
    Part {
        part: Some(part::Part::Text(TextPart { text: t.to_owned() })),
    }
}

fn file(mime: &str, source: file_part::Source, name: &str) -> Part {
    Part {
        part: Some(part::Part::File(FilePart {
            mime: mime.to_owned(),
            source: Some(source),
            name: name.to_owned(),
            digest: String::new(),
        })),
    }
}

/// Decoded bytes, or the base64 kept verbatim as a data URI.
fn inline(mime: &str, data_base64: &str) -> file_part::Source {
    match STANDARD.decode(data_base64) {
        Ok(bytes) => file_part::Source::Bytes(bytes),
        Err(_) => file_part::Source::Uri(format!("data:{mime};base64,{data_base64}")),
    }
}

fn to_part(c: &Content) -> Part {
    match c {
        Content::Text(t) => text(t),
        Content::Image { mime, data_base64 } | Content::Audio { mime, data_base64 } => {
            file(mime, inline(mime, data_base64), "")
        }
        Content::ResourceLink { uri, name, mime } => file(
            mime.as_deref().unwrap_or_default(),
            file_part::Source::Uri(uri.clone()),
            name,
        ),
        Content::Resource {
            uri,
            mime,
            text: t,
            blob_base64,
        } => match (t, blob_base64) {
            (Some(t), _) => text(t),
            (None, Some(b)) => {
                let mime = mime.as_deref().unwrap_or("application/octet-stream");
                file(mime, inline(mime, b), uri)
            }
            (None, None) => text(""),
        },
    }
}

/// Bytes an outcome holds: text, base64 and strings as sent, structured
/// content as compact JSON.
pub fn outcome_size(outcome: &CallOutcome) -> usize {
    let mut n = 0usize;
    for c in &outcome.content {
        n = n.saturating_add(match c {
            Content::Text(t) => t.len(),
            Content::Image { mime, data_base64 } | Content::Audio { mime, data_base64 } => {
                mime.len() + data_base64.len()
            }
            Content::ResourceLink { uri, name, mime } => {
                uri.len() + name.len() + mime.as_ref().map_or(0, String::len)
            }
            Content::Resource {
                uri,
                mime,
                text,
                blob_base64,
            } => {
                uri.len()
                    + mime.as_ref().map_or(0, String::len)
                    + text.as_ref().map_or(0, String::len)
                    + blob_base64.as_ref().map_or(0, String::len)
            }
        });
    }
    if let Some(s) = &outcome.structured {
        n = n.saturating_add(json_len(s));
    }
    n
}

/// Refuses an outcome past `limit` bytes (see [`outcome_size`]).
pub fn check_size(outcome: &CallOutcome, limit: usize) -> Result<(), McpError> {
    if outcome_size(outcome) > limit {
        return Err(McpError::TooLarge { limit });
    }
    Ok(())
}

/// Length of `v` as compact JSON, counted without building the text.
fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a Value into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome(content: Vec<Content>) -> CallOutcome {
        CallOutcome {
            is_error: false,
            content,
            structured: None,
        }
    }

    fn only_part(r: &ToolResult) -> &part::Part {
        assert_eq!(r.content.len(), 1);
        r.content[0].part.as_ref().unwrap()
    }

    #[test]
    fn text_becomes_a_text_part() {
        let r = to_tool_result("c1", &outcome(vec![Content::Text("hi".into())]));
        assert_eq!(r.id, "c1");
        assert!(!r.is_error);
        assert_eq!(r.code, Code::Unspecified as i32);
        assert_eq!(
            only_part(&r),
            &part::Part::Text(TextPart { text: "hi".into() })
        );
    }

    #[test]
    fn an_image_becomes_a_file_part_with_its_bytes() {
        let r = to_tool_result(
            "c",
            &outcome(vec![Content::Image {
                mime: "image/png".into(),
                data_base64: STANDARD.encode([0x89, b'P', b'N', b'G']),
            }]),
        );
        let part::Part::File(f) = only_part(&r) else {
            panic!("not a file part")
        };
        assert_eq!(f.mime, "image/png");
        assert_eq!(
            f.source,
            Some(file_part::Source::Bytes(vec![0x89, b'P', b'N', b'G']))
        );
    }

    #[test]
    fn media_that_is_not_base64_is_kept_verbatim_as_a_data_uri() {
        let r = to_tool_result(
            "c",
            &outcome(vec![Content::Audio {
                mime: "audio/wav".into(),
                data_base64: "not base64!".into(),
            }]),
        );
        let part::Part::File(f) = only_part(&r) else {
            panic!("not a file part")
        };
        assert_eq!(
            f.source,
            Some(file_part::Source::Uri(
                "data:audio/wav;base64,not base64!".into()
            ))
        );
    }

    #[test]
    fn resources_map_to_links_text_or_bytes() {
        let r = to_tool_result(
            "c",
            &outcome(vec![
                Content::ResourceLink {
                    uri: "file:///a".into(),
                    name: "a".into(),
                    mime: Some("text/plain".into()),
                },
                Content::Resource {
                    uri: "file:///b".into(),
                    mime: None,
                    text: Some("body".into()),
                    blob_base64: None,
                },
                Content::Resource {
                    uri: "file:///c".into(),
                    mime: None,
                    text: None,
                    blob_base64: Some(STANDARD.encode(b"xyz")),
                },
            ]),
        );
        let parts: Vec<_> = r.content.iter().map(|p| p.part.clone().unwrap()).collect();
        let part::Part::File(link) = &parts[0] else {
            panic!()
        };
        assert_eq!(
            (link.mime.as_str(), link.name.as_str(), &link.source),
            (
                "text/plain",
                "a",
                &Some(file_part::Source::Uri("file:///a".into()))
            )
        );
        assert_eq!(
            parts[1],
            part::Part::Text(TextPart {
                text: "body".into()
            })
        );
        let part::Part::File(blob) = &parts[2] else {
            panic!()
        };
        assert_eq!(
            (blob.mime.as_str(), blob.name.as_str(), &blob.source),
            (
                "application/octet-stream",
                "file:///c",
                &Some(file_part::Source::Bytes(b"xyz".to_vec()))
            )
        );
    }

    #[test]
    fn structured_content_becomes_the_output_struct() {
        let mut o = outcome(vec![Content::Text("{\"sum\":3}".into())]);
        o.structured = Some(json!({"sum": 3, "parts": [1, 2]}));
        let r = to_tool_result("c", &o);
        let out = r.output.expect("output");
        assert_eq!(
            crate::mcp::args_to_json(&out).unwrap(),
            json!({"sum": 3, "parts": [1, 2]})
                .as_object()
                .unwrap()
                .clone()
        );
        assert!(!r.is_error);
    }

    #[test]
    fn is_error_gives_executor_error_with_the_first_text() {
        let mut o = outcome(vec![
            Content::Image {
                mime: "image/png".into(),
                data_base64: String::new(),
            },
            Content::Text("path outside allowed directories".into()),
            Content::Text("second".into()),
        ]);
        o.is_error = true;
        let r = to_tool_result("c", &o);
        assert!(r.is_error);
        assert_eq!(r.code, Code::ExecutorError as i32);
        assert_eq!(r.error, "path outside allowed directories");
        assert_eq!(r.content.len(), 3);

        o.content.clear();
        assert_eq!(to_tool_result("c", &o).error, NO_ERROR_TEXT);
    }

    #[test]
    fn an_integer_past_two_to_the_53_gives_an_error_receipt() {
        let mut o = outcome(vec![]);
        o.structured = Some(json!({"id": 9_007_199_254_740_993_u64}));
        assert_eq!(
            try_to_tool_result("c", &o),
            Err(JsonError::IntegerOutOfRange { at: "/id".into() })
        );
        let r = to_tool_result("c", &o);
        assert!(r.is_error);
        assert_eq!(r.code, Code::ExecutorError as i32);
        assert!(r.output.is_none());
        assert_eq!(
            r.error,
            "result: integer at /id is beyond ±2^53 and would be rounded"
        );
    }

    #[test]
    fn oversized_outcomes_are_refused() {
        let o = outcome(vec![Content::Text("x".repeat(10))]);
        assert_eq!(check_size(&o, 10), Ok(()));
        assert_eq!(check_size(&o, 9), Err(McpError::TooLarge { limit: 9 }));
        let mut o = outcome(vec![]);
        o.structured = Some(json!({"a": "bc"}));
        assert_eq!(outcome_size(&o), r#"{"a":"bc"}"#.len());
        let r = error_result("c", &check_size(&o, 4).unwrap_err());
        assert_eq!(r.error, "mcp result larger than 4 bytes");
    }

    #[test]
    fn a_server_error_receipt_keeps_the_server_text_apart_from_the_message() {
        let e = McpError::Server {
            code: -32602,
            message: "bad params".into(),
        };
        assert_eq!(e.to_string(), "mcp server returned error -32602");
        assert_eq!(
            error_result("c", &e).error,
            "mcp server returned error -32602: bad params"
        );
    }
}
