//! What the console shows of sessions and records: plain strings, HTML
//! escaped by the templates, never here.

use agentsessions_machine::events::{body, kind_of, message_text};
use agentsessions_proto::v1::{
    ComputeState, EventKind, ExecState, IdentityRef, LogRecord, Session, lifecycle, tool_result,
};

/// Longest formatted body shown on the page; the rest is elided (the
/// record itself is whole in the journal).
const MAX_DETAIL: usize = 16 * 1024;

/// One row of the sessions list.
pub struct SessionRow {
    pub uid: String,
    pub name: String,
    pub harness: String,
    pub last_seq: i64,
    pub compute: &'static str,
    pub exec: &'static str,
    pub updated: String,
    pub waiting: bool,
}

impl SessionRow {
    /// `decided`: the session's approval is decided but not carried out.
    pub fn of(s: &Session, decided: bool) -> Self {
        let meta = s.metadata.clone().unwrap_or_default();
        Self {
            uid: meta.uid,
            name: meta.name,
            harness: s.harness.clone(),
            last_seq: s.last_seq,
            compute: compute(s),
            exec: shown_state(s, decided),
            updated: meta.update_time.as_ref().map(time).unwrap_or_default(),
            waiting: s.pending_approval.is_some() || decided,
        }
    }
}

/// The state the console shows: the wire's, except DECIDED for an approval
/// that is decided but whose tool has not run (the wire's COMPLETED there
/// is a compatibility fallback, not an end).
pub fn shown_state(s: &Session, decided: bool) -> &'static str {
    if decided { DECIDED } else { exec_state(s) }
}

/// See [`shown_state`].
pub const DECIDED: &str = "DECIDED";

/// The compute state without its prefix (`COLD`).
pub fn compute(s: &Session) -> &'static str {
    let name = ComputeState::try_from(s.compute_state)
        .unwrap_or(ComputeState::Unspecified)
        .as_str_name();
    name.strip_prefix("COMPUTE_").unwrap_or(name)
}

/// The execution state without its prefix (`AWAITING`).
pub fn exec_state(s: &Session) -> &'static str {
    let name = ExecState::try_from(s.exec_state)
        .unwrap_or(ExecState::Unspecified)
        .as_str_name();
    name.strip_prefix("EXEC_").unwrap_or(name)
}

/// A protobuf timestamp as `2026-01-02 15:04:05.123Z`.
pub fn time(ts: &agentsessions_proto::wkt::Timestamp) -> String {
    let nanos = u32::try_from(ts.nanos).unwrap_or(0);
    match chrono::DateTime::from_timestamp(ts.seconds, nanos) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string(),
        None => String::new(),
    }
}

/// `principal (issuer)`, or empty for no actor.
pub fn actor(id: Option<&IdentityRef>) -> String {
    match id {
        None => String::new(),
        Some(id) if id.principal.is_empty() && id.issuer.is_empty() => id.subject.clone(),
        Some(id) if id.issuer.is_empty() => id.principal.clone(),
        Some(id) => format!("{} ({})", id.principal, id.issuer),
    }
}

/// One record of the timeline.
pub struct RecordRow {
    pub seq: i64,
    pub kind: &'static str,
    pub time: String,
    pub actor: String,
    /// One readable line.
    pub summary: String,
    /// Formatted JSON (arguments, outputs, other bodies), if any.
    pub detail: Option<String>,
}

/// Pretty JSON of a serializable value, bounded.
pub fn pretty<T: serde::Serialize>(value: &T) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("({e})"));
    bounded(text)
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_DETAIL {
        let mut cut = MAX_DETAIL;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let rest = text.len() - cut;
        text.truncate(cut);
        text.push_str(&format!("\n… ({rest} more bytes)"));
    }
    text
}

/// The event's body as JSON, without the fields the row shows already.
fn other_body(ev: &agentsessions_proto::v1::Event) -> Option<String> {
    let mut value = serde_json::to_value(ev).ok()?;
    let map = value.as_object_mut()?;
    for key in ["execution_id", "ts", "kind", "schema_version", "actor"] {
        map.remove(key);
    }
    (!map.is_empty()).then(|| pretty(&value))
}

impl RecordRow {
    pub fn of(r: &LogRecord) -> Self {
        let Some(ev) = r.event.as_ref() else {
            return Self {
                seq: r.seq,
                kind: "NO_EVENT",
                time: String::new(),
                actor: String::new(),
                summary: String::new(),
                detail: None,
            };
        };
        let kind = kind_of(ev);
        let name = kind.as_str_name();
        let (summary, detail) = describe(kind, ev);
        Self {
            seq: r.seq,
            kind: name.strip_prefix("EVENT_").unwrap_or(name),
            time: ev.ts.as_ref().map(time).unwrap_or_default(),
            actor: actor(ev.actor.as_ref()),
            summary: bounded(summary),
            detail,
        }
    }
}

fn describe(kind: EventKind, ev: &agentsessions_proto::v1::Event) -> (String, Option<String>) {
    let described = match kind {
        EventKind::EventInput | EventKind::EventOutput => body::message(ev).map(|m| {
            let text = message_text(m);
            let only_text = m.parts.iter().all(|p| {
                matches!(
                    p.part,
                    Some(agentsessions_proto::v1::part::Part::Text(_)) | None
                )
            });
            (
                format!("{}: {text}", m.role),
                (!only_text).then(|| pretty(m)),
            )
        }),
        EventKind::EventToolCall => body::tool(ev).map(|t| {
            (
                format!("call {} → {}", t.id, t.tool),
                Some(t.args.as_ref().map_or_else(|| "{}".into(), pretty)),
            )
        }),
        EventKind::EventToolResult => body::result(ev).map(|t| {
            let line = if t.code == tool_result::Code::ApprovalDenied as i32 {
                format!("call {} denied: {}", t.id, t.error)
            } else if t.is_error {
                format!("call {} error: {}", t.id, t.error)
            } else {
                format!("call {} ok", t.id)
            };
            let text_only = t.content.iter().all(|p| {
                matches!(
                    p.part,
                    Some(agentsessions_proto::v1::part::Part::Text(_)) | None
                )
            });
            let detail = match &t.output {
                Some(o) => Some(pretty(o)),
                None if t.content.is_empty() => None,
                None if !text_only => Some(pretty(&t.content)),
                None => {
                    let text = message_text(&agentsessions_proto::v1::Message {
                        role: String::new(),
                        parts: t.content.clone(),
                    });
                    (text != t.error).then(|| bounded(text))
                }
            };
            (line, detail)
        }),
        EventKind::EventApprovalRequest => body::approval(ev).map(|a| {
            let mut line = format!("call {} waits for approval", a.tool_call_id);
            if !a.reason.is_empty() {
                line.push_str(&format!(": {}", a.reason));
            }
            (line, None)
        }),
        EventKind::EventApprovalResult => body::approval_result(ev).map(|a| {
            let verdict = if a.approved { "approved" } else { "denied" };
            let mut line = format!(
                "call {} {verdict} (request seq {})",
                a.tool_call_id, a.request_seq
            );
            if !a.reason.is_empty() {
                line.push_str(&format!(": {}", a.reason));
            }
            (line, None)
        }),
        EventKind::EventLifecycle => body::lifecycle(ev).map(|l| {
            let k =
                lifecycle::Kind::try_from(l.kind).unwrap_or(lifecycle::Kind::LifecycleUnspecified);
            let k = k.as_str_name();
            let k = k.strip_prefix("LIFECYCLE_").unwrap_or(k);
            let line = if l.detail.is_empty() {
                k.to_owned()
            } else {
                format!("{k} {}", l.detail)
            };
            (line, None)
        }),
        EventKind::EventEnd => match &ev.body {
            Some(agentsessions_proto::v1::event::Body::End(end)) => {
                let mut line = if end.state.is_empty() {
                    "COMPLETED".to_owned()
                } else {
                    end.state.clone()
                };
                if let Some(e) = &end.error {
                    line.push_str(&format!(": {} (code {})", e.description, e.code));
                }
                Some((line, None))
            }
            _ => None,
        },
        EventKind::EventExecutionStart => body::execution_start(ev).map(|x| {
            let mut line = format!("harness {}", x.harness);
            if !x.harness_version.is_empty() {
                line.push_str(&format!(" v{}", x.harness_version));
            }
            if let Some(n) = x.input_count {
                line.push_str(&format!(", {n} input(s)"));
            }
            (line, None)
        }),
        EventKind::EventError => match &ev.body {
            Some(agentsessions_proto::v1::event::Body::Error(e)) => {
                Some((format!("{} (code {})", e.description, e.code), None))
            }
            _ => None,
        },
        _ => None,
    };
    described.unwrap_or_else(|| (String::new(), other_body(ev)))
}

/// A catalog tool as one line: `server fs, policy approval, hints
/// destructive, idempotent` (MCP's destructive hint only counts when the
/// tool is not read-only).
pub fn catalog_line(t: &agentsessions_proto::v1::CatalogEntry) -> String {
    let hints = agentsessions_machine::vocab::hints(t);
    let server = if t.server.is_empty() {
        "host"
    } else {
        &t.server
    };
    format!(
        "server {server}, policy {}, hints {}",
        t.policy,
        if hints.is_empty() {
            "none".to_owned()
        } else {
            hints.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use agentsessions_machine::events::{input, text_message};

    use super::*;

    #[test]
    fn a_message_row_keeps_markup_as_text_for_the_template_to_escape() {
        let r = LogRecord {
            seq: 7,
            event: Some(input("e1", text_message("user", "<script>x()</script>"))),
            ..Default::default()
        };
        let row = RecordRow::of(&r);
        assert_eq!(row.kind, "INPUT");
        assert_eq!(row.summary, "user: <script>x()</script>");
        assert!(row.detail.is_none());
    }

    #[test]
    fn a_long_body_is_cut_on_a_char_boundary_and_says_how_much_is_left() {
        let text = "é".repeat(MAX_DETAIL);
        let out = bounded(text.clone());
        assert!(out.len() < text.len());
        assert!(
            out.ends_with(&format!("({} more bytes)", MAX_DETAIL)),
            "{out:.40}"
        );
    }
}
