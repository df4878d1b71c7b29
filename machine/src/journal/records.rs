//! Small readers over a committed record, shared by the projections.
//!
//! A record whose event is absent is read as an event with no id, no kind and
//! no body, so malformed input turns into a journal error downstream instead
//! of a panic here.

use agentsessions_proto::v1::{Event, EventKind, LogRecord, Mediation, ToolCall, lifecycle};

use crate::events::{body, kind_of};

/// The record's event, if it has one.
pub(crate) fn event(r: &LogRecord) -> Option<&Event> {
    r.event.as_ref()
}

/// The record's event kind; unknown numbers and missing events read as
/// unspecified.
pub(crate) fn kind(r: &LogRecord) -> EventKind {
    event(r).map_or(EventKind::Unspecified, kind_of)
}

/// The record's execution id ("" when absent).
pub(crate) fn exec_id(r: &LogRecord) -> &str {
    event(r).map_or("", |e| e.execution_id.as_str())
}

/// The tool call payload of a record, if it carries one.
pub(crate) fn tool_call(r: &LogRecord) -> Option<&ToolCall> {
    event(r).and_then(body::tool)
}

/// True when the call asks for a human decision before the host runs it.
pub(crate) fn is_gated(call: &ToolCall) -> bool {
    call.mediation == Mediation::RequiresApproval as i32
}

/// The journal spelling of a kind (`INPUT`, `TOOL_CALL`, ...), used in error
/// details so they read like the reference's.
pub(crate) fn kind_name(kind: EventKind) -> &'static str {
    let full = kind.as_str_name();
    let name = full.strip_prefix("EVENT_").unwrap_or(full);
    debug_assert!(!name.is_empty(), "every kind has a name past its prefix");
    name
}

/// True for a LIFECYCLE{FORK} marker.
pub(crate) fn is_fork(r: &LogRecord) -> bool {
    kind(r) == EventKind::EventLifecycle
        && event(r)
            .and_then(body::lifecycle)
            .is_some_and(|l| l.kind == lifecycle::Kind::LifecycleFork as i32)
}
