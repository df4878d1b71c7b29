//! What a notification says: the JSON event, or a Slack message, built
//! from an outbox row and the records it points at.
//!
//! Invariant: tool arguments and message content never appear unless the
//! operator asked for arguments (`--notify-include-arguments`); a reason
//! a human typed on a decision is part of the decision, not content.

use agentsessions_journal::outbox::{Notice, NoticeKind};
use agentsessions_machine::events::body;
use agentsessions_proto::v1::LogRecord;
use serde_json::{Map, Value, json};

/// How bodies are written (`--notify-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// The JSON event (docs/operations.md).
    #[default]
    Json,
    /// `{"text": …}` for a Slack incoming webhook.
    Slack,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Self::Json),
            "slack" => Ok(Self::Slack),
            other => Err(format!("notify format {other:?}: want json or slack")),
        }
    }
}

/// What the body may carry besides the notice itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// The session's project ("" when the session is gone).
    pub project: String,
    /// The console's base URL (`http://host:port`), when one is served.
    pub console: Option<String>,
    /// `--notify-include-arguments`.
    pub include_arguments: bool,
}

/// The event as JSON: the notice, then what the records around it say.
/// `records` holds the announced record and, for an approval, its call.
pub fn event(notice: &Notice, records: &[LogRecord], cx: &Context) -> Value {
    let mut e = Map::new();
    e.insert("id".into(), json!(notice.event_id));
    e.insert("kind".into(), json!(notice.kind.as_str()));
    e.insert("session".into(), json!(notice.session));
    e.insert("project".into(), json!(cx.project));
    e.insert("seq".into(), json!(notice.seq));
    e.insert("time".into(), json!(rfc3339(notice.created_at)));
    if let Some(base) = &cx.console {
        let link = format!("{}/sessions/{}", base.trim_end_matches('/'), notice.session);
        e.insert("console".into(), json!(link));
    }
    let announced = records.iter().find(|r| r.seq == notice.seq);
    if let Some(ev) = announced.and_then(|r| r.event.as_ref()) {
        e.insert("execution_id".into(), json!(ev.execution_id));
        if let Some(a) = body::approval(ev) {
            e.insert("tool_call_id".into(), json!(a.tool_call_id));
            e.insert("request_seq".into(), json!(notice.seq));
        }
        if let Some(d) = body::approval_result(ev) {
            e.insert("tool_call_id".into(), json!(d.tool_call_id));
            e.insert("request_seq".into(), json!(d.request_seq));
            e.insert("approved".into(), json!(d.approved));
            e.insert("reason".into(), json!(d.reason));
            let actor = ev.actor.as_ref().map(|a| a.principal.clone());
            e.insert("actor".into(), json!(actor.unwrap_or_default()));
        }
        if ev.kind == agentsessions_proto::v1::EventKind::EventError as i32
            && let Some(agentsessions_proto::v1::event::Body::Error(err)) = &ev.body
        {
            e.insert("reason".into(), json!(err.description));
        }
    }
    let call_id = e
        .get("tool_call_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let call = call_id.and_then(|id| {
        records
            .iter()
            .filter_map(|r| r.event.as_ref().and_then(body::tool))
            .find(|c| c.id == id)
    });
    if let Some(call) = call {
        e.insert("tool".into(), json!(call.tool));
        if cx.include_arguments {
            let args = call.args.as_ref().map(struct_json).unwrap_or(Value::Null);
            e.insert("arguments".into(), args);
        }
    }
    debug_assert!(
        cx.include_arguments || !e.contains_key("arguments"),
        "arguments only when asked for"
    );
    Value::Object(e)
}

/// The bytes POSTed for `event` in `format`.
pub fn render(event: &Value, format: Format) -> Vec<u8> {
    let value = match format {
        Format::Json => event.clone(),
        Format::Slack => json!({ "text": slack_text(event) }),
    };
    let bytes = serde_json::to_vec(&value).expect("a JSON value serializes");
    debug_assert!(!bytes.is_empty());
    bytes
}

/// One line a person reads in a channel.
fn slack_text(e: &Value) -> String {
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let tool = match s("tool").as_str() {
        "" => "a tool call".to_owned(),
        t => format!("`{t}`"),
    };
    let session = format!("session `{}`", s("session"));
    let mut text = match NoticeKind::parse(&s("kind")) {
        Some(NoticeKind::ApprovalRequested) => {
            format!(":raised_hand: {tool} waits for approval in {session}")
        }
        Some(NoticeKind::ApprovalDecided) => {
            let verdict = if e.get("approved").and_then(Value::as_bool) == Some(true) {
                "approved"
            } else {
                "denied"
            };
            format!(
                ":white_check_mark: {tool} was {verdict} by {} in {session}",
                s("actor")
            )
        }
        Some(NoticeKind::ApprovalExpired) => {
            format!(
                ":hourglass: {tool} was denied by the host in {session}: {}",
                s("reason")
            )
        }
        Some(NoticeKind::TurnFailed) => format!(":x: a turn failed in {session}: {}", s("reason")),
        None => format!("{} in {session}", s("kind")),
    };
    if let Some(link) = e.get("console").and_then(Value::as_str) {
        text.push_str(&format!(" <{link}|open>"));
    }
    text
}

fn rfc3339(unix_nanos: i64) -> String {
    let secs = unix_nanos.div_euclid(1_000_000_000);
    let nanos = unix_nanos.rem_euclid(1_000_000_000) as u32;
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::new(u64::try_from(secs).unwrap_or(0), nanos);
    humantime::format_rfc3339_millis(t).to_string()
}

fn struct_json(s: &pbjson_types::Struct) -> Value {
    crate::mcp::json::args_to_json(s).map_or(Value::Null, Value::Object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_machine::events;
    use agentsessions_proto::v1::{ApprovalResult, IdentityRef, ToolCall, event::Body};

    fn record(seq: i64, ev: agentsessions_proto::v1::Event) -> LogRecord {
        LogRecord {
            seq,
            event: Some(ev),
            ..Default::default()
        }
    }

    fn call() -> agentsessions_proto::v1::Event {
        let args =
            crate::mcp::json::json_to_struct(json!({"path": "/etc/secret"}).as_object().unwrap())
                .unwrap();
        events::event(
            "e1",
            agentsessions_proto::v1::EventKind::EventToolCall,
            Body::Tool(ToolCall {
                id: "c1".into(),
                tool: "fs__write_file".into(),
                args: Some(args),
                ..Default::default()
            }),
        )
    }

    fn notice(kind: NoticeKind, seq: i64) -> Notice {
        Notice {
            event_id: format!("sess-1/{seq}"),
            session: "sess-1".into(),
            seq,
            kind,
            created_at: 1_700_000_000_000_000_000,
            attempts: 0,
        }
    }

    #[test]
    fn a_request_names_its_tool_and_links_the_console_but_never_shows_arguments_unasked() {
        let records = [
            record(4, call()),
            record(5, events::approval_request("e1", "c1")),
        ];
        let mut cx = Context {
            project: "p".into(),
            console: Some("http://127.0.0.1:8080/".into()),
            include_arguments: false,
        };
        let e = event(&notice(NoticeKind::ApprovalRequested, 5), &records, &cx);
        assert_eq!(e["kind"], "approval.requested");
        assert_eq!(e["tool"], "fs__write_file");
        assert_eq!(e["tool_call_id"], "c1");
        assert_eq!(e["console"], "http://127.0.0.1:8080/sessions/sess-1");
        assert_eq!(e["time"], "2023-11-14T22:13:20.000Z");
        assert!(e.get("arguments").is_none());
        assert!(
            !String::from_utf8(render(&e, Format::Json))
                .unwrap()
                .contains("/etc/secret")
        );
        cx.include_arguments = true;
        let e = event(&notice(NoticeKind::ApprovalRequested, 5), &records, &cx);
        assert_eq!(e["arguments"]["path"], "/etc/secret");
    }

    #[test]
    fn an_expiry_reads_as_the_hosts_denial_in_slack() {
        let decision = ApprovalResult {
            tool_call_id: "c1".into(),
            approved: false,
            reason: "expired after 30m".into(),
            request_seq: 5,
        };
        let actor = IdentityRef {
            principal: agentsessions_machine::vocab::HOST_PRINCIPAL.into(),
            ..Default::default()
        };
        let ts = agentsessions_proto::wkt::Timestamp::new(1, 0);
        let records = [
            record(4, call()),
            record(7, events::approval_result("e1", decision, Some(actor), ts)),
        ];
        let e = event(
            &notice(NoticeKind::ApprovalExpired, 7),
            &records,
            &Context::default(),
        );
        assert_eq!(
            (e["approved"].as_bool(), e["request_seq"].as_i64()),
            (Some(false), Some(5))
        );
        let slack: Value = serde_json::from_slice(&render(&e, Format::Slack)).unwrap();
        let text = slack["text"].as_str().unwrap();
        assert!(
            text.contains("`fs__write_file` was denied by the host"),
            "{text}"
        );
        assert!(text.contains("expired after 30m"), "{text}");
        assert_eq!(slack.as_object().unwrap().len(), 1, "only text");
    }
}
