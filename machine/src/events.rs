//! Constructors and accessors for the events the host reads and writes.
//!
//! Host-owned records (EXECUTION_START, INPUT, END, ERROR, APPROVAL_*,
//! LIFECYCLE) are built only here, so their exact shape — which fields are
//! set, which stay empty — is decided once. That shape is part of the hash
//! chain: the reference leaves `ts` unset on everything but decisions.

use agentsessions_proto::v1::{
    ApprovalRequest, ApprovalResult, Error, Event, EventKind, ExecutionStart, HarnessEnd,
    IdentityRef, Lifecycle, Message, Part, TextPart, ToolResult, event::Body, lifecycle, part,
};
use agentsessions_proto::wkt::Timestamp;

/// Builds an event of `kind` with `body` for execution `execution_id`.
pub fn event(execution_id: &str, kind: EventKind, body: Body) -> Event {
    Event {
        execution_id: execution_id.to_owned(),
        kind: kind as i32,
        body: Some(body),
        ..Event::default()
    }
}

/// EXECUTION_START: the header of every new execution.
pub fn execution_start(execution_id: &str, start: ExecutionStart) -> Event {
    event(
        execution_id,
        EventKind::EventExecutionStart,
        Body::ExecutionStart(start),
    )
}

/// INPUT carrying one caller message.
pub fn input(execution_id: &str, message: Message) -> Event {
    event(execution_id, EventKind::EventInput, Body::Message(message))
}

/// OUTPUT carrying an assistant message.
pub fn output(execution_id: &str, message: Message) -> Event {
    event(execution_id, EventKind::EventOutput, Body::Message(message))
}

/// END{COMPLETED}: the only terminal state the host writes.
pub fn end_completed(execution_id: &str) -> Event {
    let ev = event(
        execution_id,
        EventKind::EventEnd,
        Body::End(HarnessEnd {
            state: "COMPLETED".to_owned(),
            error: None,
        }),
    );
    debug_assert!(
        !is_canceled_end(&ev),
        "a completed END never reads as canceled"
    );
    ev
}

/// The END state of a canceled execution.
pub const CANCELED: &str = "CANCELED";

/// END{CANCELED}: a Cancel ended the execution.
pub fn end_canceled(execution_id: &str) -> Event {
    let ev = event(
        execution_id,
        EventKind::EventEnd,
        Body::End(HarnessEnd {
            state: CANCELED.to_owned(),
            error: None,
        }),
    );
    debug_assert!(
        is_canceled_end(&ev),
        "the END a Cancel writes reads as canceled"
    );
    ev
}

/// True for an END that a Cancel wrote.
pub fn is_canceled_end(ev: &Event) -> bool {
    matches!(&ev.body, Some(Body::End(end)) if end.state == CANCELED)
}

/// True for a LIFECYCLE{CANCEL} marker.
pub fn is_cancel_marker(ev: &Event) -> bool {
    body::lifecycle(ev).is_some_and(|l| l.kind == lifecycle::Kind::LifecycleCancel as i32)
}

/// ERROR with code 0 and the failure text, as an audit record.
pub fn error(execution_id: &str, description: &str) -> Event {
    event(
        execution_id,
        EventKind::EventError,
        Body::Error(Error {
            code: 0,
            description: description.to_owned(),
        }),
    )
}

/// APPROVAL_REQUEST for a gated call; the host never sets a reason.
pub fn approval_request(execution_id: &str, tool_call_id: &str) -> Event {
    event(
        execution_id,
        EventKind::EventApprovalRequest,
        Body::Approval(ApprovalRequest {
            tool_call_id: tool_call_id.to_owned(),
            reason: String::new(),
        }),
    )
}

/// APPROVAL_RESULT: a decision, stamped with the decider and the time.
pub fn approval_result(
    execution_id: &str,
    decision: ApprovalResult,
    actor: Option<IdentityRef>,
    now: Timestamp,
) -> Event {
    // The machine's clock is Unix nanos from 0, well inside 0001..9999.
    debug_assert!(
        now.validate().is_ok(),
        "a decision's time has a canonical form"
    );
    let mut ev = event(
        execution_id,
        EventKind::EventApprovalResult,
        Body::ApprovalResult(decision),
    );
    ev.ts = Some(now);
    // An all-empty identity is the same as none, and must hash the same.
    ev.actor = actor.filter(|a| !identity_is_empty(a));
    ev
}

/// `ev` attributed to `actor` (the verified caller whose request wrote it;
/// none when authentication is off, which leaves the bytes as before).
pub fn by(mut ev: Event, actor: Option<&IdentityRef>) -> Event {
    ev.actor = actor.filter(|a| !identity_is_empty(a)).cloned();
    ev
}

/// A session-scoped LIFECYCLE marker (no execution id).
pub fn lifecycle(kind: lifecycle::Kind, detail: &str) -> Event {
    let ev = event(
        "",
        EventKind::EventLifecycle,
        Body::Lifecycle(Lifecycle {
            kind: kind as i32,
            detail: detail.to_owned(),
            ..Lifecycle::default()
        }),
    );
    debug_assert_eq!(
        is_cancel_marker(&ev),
        kind == lifecycle::Kind::LifecycleCancel,
        "a marker reads as a cancel exactly when it is one"
    );
    ev
}

/// LIFECYCLE{FORK} written as a child's first new record.
pub fn fork_marker(at_seq: i64) -> Event {
    lifecycle(lifecycle::Kind::LifecycleFork, &format!("parent@{at_seq}"))
}

/// An assistant text message.
pub fn assistant_text(text: &str) -> Message {
    text_message("assistant", text)
}

/// An EXECUTOR_ERROR receipt for call `id` saying `why`, in its error and
/// its content (so a model reading only content is told too).
pub fn error_receipt(id: &str, why: String) -> ToolResult {
    let receipt = ToolResult {
        id: id.to_owned(),
        is_error: true,
        content: text_message("tool", &why).parts,
        error: why,
        code: agentsessions_proto::v1::tool_result::Code::ExecutorError as i32,
        ..ToolResult::default()
    };
    debug_assert!(
        matches!(receipt.content.as_slice(),
            [Part { part: Some(part::Part::Text(t)), .. }] if t.text == receipt.error),
        "the content tells a model what the error tells the host"
    );
    receipt
}

/// A message with one text part.
pub fn text_message(role: &str, text: &str) -> Message {
    Message {
        role: role.to_owned(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart {
                text: text.to_owned(),
            })),
        }],
    }
}

/// The concatenated text parts of a message; other parts are ignored.
pub fn message_text(message: &Message) -> String {
    let mut out = String::new();
    for p in &message.parts {
        if let Some(part::Part::Text(t)) = &p.part {
            out.push_str(&t.text);
        }
    }
    out
}

/// True when an identity carries no principal, issuer or subject.
pub fn identity_is_empty(id: &IdentityRef) -> bool {
    id.principal.is_empty() && id.issuer.is_empty() && id.subject.is_empty()
}

/// The event's kind, with unknown numbers read as unspecified.
pub fn kind_of(ev: &Event) -> EventKind {
    EventKind::try_from(ev.kind).unwrap_or(EventKind::Unspecified)
}

/// Borrowing accessors for each body, so projection code reads naturally.
pub mod body {
    use super::*;
    use agentsessions_proto::v1::{ModelCall, ToolCall, ToolResult, Usage};

    /// The message of an INPUT or OUTPUT.
    pub fn message(ev: &Event) -> Option<&Message> {
        match &ev.body {
            Some(Body::Message(m)) => Some(m),
            _ => None,
        }
    }
    /// The recorded model call.
    pub fn model(ev: &Event) -> Option<&ModelCall> {
        match &ev.body {
            Some(Body::Model(m)) => Some(m),
            _ => None,
        }
    }
    /// The tool call of a TOOL_CALL.
    pub fn tool(ev: &Event) -> Option<&ToolCall> {
        match &ev.body {
            Some(Body::Tool(t)) => Some(t),
            _ => None,
        }
    }
    /// The receipt of a TOOL_RESULT.
    pub fn result(ev: &Event) -> Option<&ToolResult> {
        match &ev.body {
            Some(Body::Result(r)) => Some(r),
            _ => None,
        }
    }
    /// The request of an APPROVAL_REQUEST.
    pub fn approval(ev: &Event) -> Option<&ApprovalRequest> {
        match &ev.body {
            Some(Body::Approval(a)) => Some(a),
            _ => None,
        }
    }
    /// The decision of an APPROVAL_RESULT.
    pub fn approval_result(ev: &Event) -> Option<&ApprovalResult> {
        match &ev.body {
            Some(Body::ApprovalResult(a)) => Some(a),
            _ => None,
        }
    }
    /// The usage of a USAGE.
    pub fn usage(ev: &Event) -> Option<&Usage> {
        match &ev.body {
            Some(Body::Usage(u)) => Some(u),
            _ => None,
        }
    }
    /// The lifecycle marker of a LIFECYCLE.
    pub fn lifecycle(ev: &Event) -> Option<&Lifecycle> {
        match &ev.body {
            Some(Body::Lifecycle(l)) => Some(l),
            _ => None,
        }
    }
    /// The header of an EXECUTION_START.
    pub fn execution_start(ev: &Event) -> Option<&ExecutionStart> {
        match &ev.body {
            Some(Body::ExecutionStart(s)) => Some(s),
            _ => None,
        }
    }
}
