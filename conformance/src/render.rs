//! A normalizing printer for replay outputs, used by the snapshots.
//!
//! Replay output is mostly deterministic, but a few fields are minted at
//! random or from the clock: execution ids, model-call ids, session uids,
//! timestamps, and every hash that covers them. The printer drops
//! timestamps and hashes (chains are verified separately, by recomputation)
//! and replaces each random id by a stable alias in order of first
//! appearance (`E1`, `M1`, `S1`), everywhere it occurs, so idempotency keys
//! that embed an execution id normalize too. What remains (kinds, order,
//! fences, texts, tool calls and receipts, approval tuples) is exactly what
//! a reviewer should see change.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use agentsessions_proto::v1::{LogRecord, Mediation, event::Body, lifecycle, tool_result};

use crate::client::{kind, short_kind};

#[derive(Default)]
struct Aliases {
    map: BTreeMap<String, String>,
    order: Vec<String>,
    counts: BTreeMap<char, usize>,
}

impl Aliases {
    fn alias(&mut self, prefix: char, id: &str) -> String {
        if id.is_empty() {
            return "-".into();
        }
        if let Some(a) = self.map.get(id) {
            return a.clone();
        }
        let n = self.counts.entry(prefix).or_default();
        *n += 1;
        let a = format!("{prefix}{n}");
        self.map.insert(id.to_owned(), a.clone());
        self.order.push(id.to_owned());
        a
    }

    /// Replaces every known id inside free text, longest first so no id
    /// is replaced inside a longer one.
    fn scrub(&self, text: &str) -> String {
        let mut ids: Vec<&String> = self.order.iter().collect();
        ids.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut out = text.to_owned();
        for id in ids {
            if id.len() >= 6 {
                out = out.replace(id.as_str(), &self.map[id]);
            }
        }
        out
    }
}

/// Struct arguments as JSON (pbjson's proto3-JSON).
fn json(v: &pbjson_types::Struct) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}

/// Renders `records` with the given session uids aliased as `S1..`.
pub fn render(sessions: &[&str], records: &[LogRecord]) -> String {
    let mut a = Aliases::default();
    for s in sessions {
        a.alias('S', s);
    }
    let mut out = String::new();
    for r in records {
        let ev = r.event.clone().unwrap_or_default();
        let exec = a.alias('E', &ev.execution_id);
        let body = match &ev.body {
            None => String::new(),
            Some(Body::Message(m)) => {
                format!(
                    "{} {:?}",
                    m.role,
                    agentsessions_machine::events::message_text(m)
                )
            }
            Some(Body::Model(m)) => format!(
                "model={} input_hash={} id={}",
                m.model,
                m.input_hash.get(..12).unwrap_or(&m.input_hash),
                a.alias('M', &m.id)
            ),
            Some(Body::Tool(t)) => format!(
                "id={} tool={} mediation={} key={:?} args={}",
                t.id,
                t.tool,
                Mediation::try_from(t.mediation)
                    .map(|m| m.as_str_name())
                    .unwrap_or("?"),
                t.idempotency_key,
                t.args.as_ref().map(json).unwrap_or_default()
            ),
            Some(Body::Result(t)) => format!(
                "id={} is_error={} code={} error={:?} output={} request_seq={} decision_seq={}",
                t.id,
                t.is_error,
                tool_result::Code::try_from(t.code)
                    .map(|c| c.as_str_name())
                    .unwrap_or("?"),
                t.error,
                t.output.as_ref().map(json).unwrap_or_default(),
                t.approval_request_seq,
                t.approval_decision_seq
            ),
            Some(Body::Approval(q)) => {
                format!("tool_call_id={} reason={:?}", q.tool_call_id, q.reason)
            }
            Some(Body::ApprovalResult(d)) => format!(
                "tool_call_id={} approved={} reason={:?} request_seq={}",
                d.tool_call_id, d.approved, d.reason, d.request_seq
            ),
            Some(Body::Usage(u)) => format!(
                "model={} in={} out={} reasoning={}",
                u.model, u.input_tokens, u.output_tokens, u.reasoning_tokens
            ),
            Some(Body::Lifecycle(l)) => format!(
                "{} detail={:?}{}",
                lifecycle::Kind::try_from(l.kind)
                    .map(|k| k.as_str_name())
                    .unwrap_or("?"),
                l.detail,
                if l.snapshot_local.is_empty() && l.snapshot_external_uri.is_empty() {
                    ""
                } else {
                    " snapshot=<redacted>"
                }
            ),
            Some(Body::End(e)) => format!(
                "{} {}",
                e.state,
                e.error
                    .as_ref()
                    .map(|e| format!("error={:?}", e.description))
                    .unwrap_or_default()
            ),
            Some(Body::Error(e)) => format!("code={} {:?}", e.code, e.description),
            Some(Body::ExecutionStart(s)) => format!(
                "config=\"{}\" resume_from_seq={} input_count={:?} harness={:?} version={:?}",
                s.config.escape_ascii(),
                s.resume_from_seq,
                s.input_count,
                s.harness,
                s.harness_version
            ),
            Some(Body::Parked(p)) => format!(
                "exec={} tool_call_id={} request_seq={}",
                a.alias('E', &p.execution_id),
                p.tool_call_id,
                p.request_seq
            ),
        };
        let line = format!(
            "{:>3} f{} {:<18} {:<3} {}",
            r.seq,
            r.fence,
            short_kind(kind(r)),
            exec,
            body
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    redact_nonces(&a.scrub(&out))
}

/// The nondeterministic harness's own output is random by design:
/// `nonce:<16 hex>` becomes `nonce:[random]`.
fn redact_nonces(text: &str) -> String {
    const TAG: &str = "nonce:";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(TAG) {
        let after = &rest[i + TAG.len()..];
        let hex = after.bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(&rest[..i + TAG.len()]);
        if hex == 16 {
            out.push_str("[random]");
            rest = &after[16..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
