//! A tiny journal builder for the projection tests: events are appended as
//! records with consecutive seqs (from 1) and real chain hashes, so the
//! records look exactly like committed ones.
#![allow(dead_code)]

use agentsessions_machine::canon;
use agentsessions_machine::events;
use agentsessions_proto::v1::{
    ApprovalResult, Event, EventKind, ExecutionStart, IdentityRef, LogRecord, Mediation, ModelCall,
    ToolCall, ToolResult, Usage, event::Body, lifecycle, part, tool_result::Code,
};
use agentsessions_proto::wkt::Timestamp;

#[derive(Debug, Clone, Default)]
pub struct Log {
    pub records: Vec<LogRecord>,
}

impl Log {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `ev`; returns its seq.
    pub fn push(&mut self, ev: Event) -> i64 {
        let seq = self.head() + 1;
        let prev = self
            .records
            .last()
            .map(|r| r.content_hash.clone())
            .unwrap_or_default();
        let hash = canon::content_hash(&prev, seq, &ev).unwrap_or_default();
        self.records.push(LogRecord {
            seq,
            prev_hash: prev,
            content_hash: hash,
            fence: 1,
            event: Some(ev),
        });
        seq
    }

    /// Appends every event in order.
    pub fn extend(&mut self, evs: impl IntoIterator<Item = Event>) {
        for ev in evs {
            self.push(ev);
        }
    }

    pub fn with(mut self, ev: Event) -> Self {
        self.push(ev);
        self
    }

    pub fn head(&self) -> i64 {
        self.records.last().map_or(0, |r| r.seq)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn get(&self, seq: i64) -> LogRecord {
        self.records
            .iter()
            .find(|r| r.seq == seq)
            .cloned()
            .expect("seq in log")
    }

    /// A fork child: the same records plus a FORK marker.
    pub fn fork(&self) -> Log {
        let mut child = self.clone();
        let at = child.head();
        child.push(events::fork_marker(at));
        child
    }
}

/// A full start marker, as an identity-recording host writes it.
pub fn marker(input_count: Option<i64>) -> ExecutionStart {
    ExecutionStart {
        config: b"opaque".to_vec(),
        resume_from_seq: 17,
        input_count,
        harness: "echo".to_owned(),
        harness_version: "v1".to_owned(),
    }
}

pub fn start(id: &str, input_count: Option<i64>) -> Event {
    events::execution_start(id, marker(input_count))
}

pub fn start_with(id: &str, m: ExecutionStart) -> Event {
    events::execution_start(id, m)
}

/// An EXECUTION_START with no body.
pub fn bodiless(id: &str, kind: EventKind) -> Event {
    Event {
        execution_id: id.to_owned(),
        kind: kind as i32,
        body: None,
        ..Event::default()
    }
}

pub fn input(id: &str, text: &str) -> Event {
    events::input(id, events::text_message("user", text))
}

pub fn output(id: &str, text: &str) -> Event {
    events::output(id, events::assistant_text(text))
}

pub fn model_call(id: &str) -> Event {
    events::event(
        id,
        EventKind::EventModelCall,
        Body::Model(ModelCall {
            model: "echo".to_owned(),
            input_hash: "0".repeat(64),
            id: "0123456789abcdef".to_owned(),
            ..ModelCall::default()
        }),
    )
}

pub fn usage(id: &str) -> Event {
    events::event(
        id,
        EventKind::EventUsage,
        Body::Usage(Usage {
            model: "echo".to_owned(),
            input_tokens: 1,
            output_tokens: 2,
            reasoning_tokens: 0,
        }),
    )
}

pub fn call(call_id: &str, mediation: Mediation, key: &str) -> ToolCall {
    ToolCall {
        id: call_id.to_owned(),
        tool: "write".to_owned(),
        args: None,
        mediation: mediation as i32,
        idempotency_key: key.to_owned(),
    }
}

pub fn tool_call_ev(id: &str, c: ToolCall) -> Event {
    events::event(id, EventKind::EventToolCall, Body::Tool(c))
}

/// An ordinary host-mediated call.
pub fn ordinary_call(id: &str, call_id: &str) -> Event {
    tool_call_ev(
        id,
        call(
            call_id,
            Mediation::ControllerMediated,
            &format!("k-{call_id}"),
        ),
    )
}

/// A gated (REQUIRES_APPROVAL) call.
pub fn gated_call(id: &str, call_id: &str) -> Event {
    tool_call_ev(
        id,
        call(
            call_id,
            Mediation::RequiresApproval,
            &format!("k-{call_id}"),
        ),
    )
}

pub fn result_ev(id: &str, r: ToolResult) -> Event {
    events::event(id, EventKind::EventToolResult, Body::Result(r))
}

/// An ordinary tool result.
pub fn result(id: &str, call_id: &str) -> Event {
    result_ev(
        id,
        ToolResult {
            id: call_id.to_owned(),
            ..ToolResult::default()
        },
    )
}

/// A receipt with explicit status.
pub fn receipt_with(
    id: &str,
    call_id: &str,
    request_seq: i64,
    decision_seq: i64,
    is_error: bool,
    code: Code,
) -> Event {
    result_ev(
        id,
        ToolResult {
            id: call_id.to_owned(),
            is_error,
            code: code as i32,
            approval_request_seq: request_seq,
            approval_decision_seq: decision_seq,
            ..ToolResult::default()
        },
    )
}

/// A successful receipt for an approved gate.
pub fn receipt(id: &str, call_id: &str, request_seq: i64, decision_seq: i64) -> Event {
    receipt_with(
        id,
        call_id,
        request_seq,
        decision_seq,
        false,
        Code::Unspecified,
    )
}

pub fn request(id: &str, call_id: &str) -> Event {
    events::approval_request(id, call_id)
}

pub fn decision(id: &str, call_id: &str, request_seq: i64, approved: bool) -> Event {
    events::approval_result(
        id,
        ApprovalResult {
            tool_call_id: call_id.to_owned(),
            approved,
            reason: if approved { "ok" } else { "no" }.to_owned(),
            request_seq,
        },
        Some(IdentityRef {
            principal: "alice".to_owned(),
            issuer: "idp".to_owned(),
            subject: "u1".to_owned(),
        }),
        Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        },
    )
}

pub fn end(id: &str) -> Event {
    events::end_completed(id)
}

pub fn error(id: &str) -> Event {
    events::error(id, "provider failed")
}

pub fn lifecycle(kind: lifecycle::Kind) -> Event {
    events::lifecycle(kind, "")
}

/// The texts of messages.
pub fn texts(ms: &[agentsessions_proto::v1::Message]) -> Vec<String> {
    ms.iter().map(events::message_text).collect()
}

/// Text of a record's message, if any.
pub fn record_text(r: &LogRecord) -> Option<String> {
    let ev = r.event.as_ref()?;
    events::body::message(ev).map(events::message_text)
}

/// True when a part is a text part.
pub fn is_text(p: &agentsessions_proto::v1::Part) -> bool {
    matches!(p.part, Some(part::Part::Text(_)))
}
