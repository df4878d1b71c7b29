//! The human (non-`--json`) lines `agentctl` prints.
//!
//! Each line leads with a fixed keyword and carries `key=value` fields, so
//! the output reads well and stays easy to grep or `cut`.

use agentsessions_machine::events::{body, kind_of, message_text};
use agentsessions_proto::v1::{
    ApprovalRef, ComputeState, EventKind, HarnessRegistration, HarnessSource, HarnessState,
    LogRecord, RegisterOutcome, Session, lifecycle,
};

/// The session's UID (empty when the server sent no metadata).
pub fn uid(s: &Session) -> &str {
    s.metadata.as_ref().map_or("", |m| m.uid.as_str())
}

/// The session's name.
pub fn name(s: &Session) -> &str {
    s.metadata.as_ref().map_or("", |m| m.name.as_str())
}

/// The session's project.
pub fn project(s: &Session) -> &str {
    s.metadata.as_ref().map_or("", |m| m.project.as_str())
}

/// The compute state's enum name, e.g. `COMPUTE_COLD`.
pub fn compute(s: &Session) -> &'static str {
    ComputeState::try_from(s.compute_state)
        .unwrap_or(ComputeState::Unspecified)
        .as_str_name()
}

/// The compute state without its `COMPUTE_` prefix, as `list` shows it.
pub fn compute_short(s: &Session) -> &'static str {
    let full = compute(s);
    full.strip_prefix("COMPUTE_").unwrap_or(full)
}

/// `get`: one line of metadata.
pub fn session_line(s: &Session) -> String {
    format!(
        "session {} project={} name={} harness={} last_seq={} compute={}",
        uid(s),
        project(s),
        name(s),
        s.harness,
        s.last_seq,
        compute(s)
    )
}

/// `list`: one tab-separated row.
pub fn list_row(s: &Session) -> String {
    format!(
        "{}\tlast_seq={}\tcompute={}\tharness={}\tname={}",
        uid(s),
        s.last_seq,
        compute_short(s),
        s.harness,
        name(s)
    )
}

/// One tool of `agentctl tools`: name, server (`-` for a built-in), the
/// policy its calls meet, its hints, and whether its server is up.
pub fn tool_row(t: &agentsessions_proto::v1::CatalogEntry) -> String {
    format!(
        "{}\tserver={}\tpolicy={}\thints={}\t{}",
        t.name,
        server_of(t),
        t.policy,
        hint_list(t),
        if t.up { "up" } else { "down" }
    )
}

/// A tool's server, `-` for one built into the host.
fn server_of(t: &agentsessions_proto::v1::CatalogEntry) -> &str {
    if t.server.is_empty() { "-" } else { &t.server }
}

/// A tool's hints, comma-separated, `-` for none.
fn hint_list(t: &agentsessions_proto::v1::CatalogEntry) -> String {
    let hints = agentsessions_machine::vocab::hints(t);
    if hints.is_empty() {
        "-".to_owned()
    } else {
        hints.join(",")
    }
}

/// The gated call a decision is about: its tool and its arguments as
/// proto3 JSON.
pub fn pending_call_line(call: &agentsessions_proto::v1::ToolCall) -> String {
    let args = call
        .args
        .as_ref()
        .and_then(|a| serde_json::to_string(a).ok())
        .unwrap_or_else(|| "{}".to_owned());
    format!("pending_call tool={} args={args}", call.tool)
}

/// What the catalog says of a gated call's tool: its server, the policy
/// its calls meet (the operator's rule or the hints' default) and its
/// hints, as the console's approval card shows them.
pub fn pending_tool_line(t: &agentsessions_proto::v1::CatalogEntry) -> String {
    format!(
        "pending_tool tool={} server={} policy={} hints={}",
        t.name,
        server_of(t),
        t.policy,
        hint_list(t)
    )
}

/// The approval a parked turn waits for, with the flags that decide it.
pub fn pending_line(p: &ApprovalRef) -> String {
    format!(
        "pending_approval execution={} call={} request_seq={}",
        p.execution_id, p.tool_call_id, p.request_seq
    )
}

/// `suspend` / `resume`: the transition and where the log now ends.
pub fn transition_line(s: &Session, verb: &str) -> String {
    format!(
        "session {} {verb} compute={} last_seq={}",
        uid(s),
        compute(s),
        s.last_seq
    )
}

/// `fork`: one line per child.
pub fn child_line(child: &Session) -> String {
    format!(
        "child {} parent={} fork_seq={} name={}",
        uid(child),
        child.parent_uid,
        child.fork_seq,
        name(child)
    )
}

/// `exec` / `replay`: one committed record. Message events add
/// `role: text`; tool, approval and lifecycle events add what identifies
/// them, so a decision and its receipt can be read off a replay.
pub fn record_line(r: &LogRecord) -> String {
    let Some(ev) = r.event.as_ref() else {
        return format!("seq={:<3} (no event)", r.seq);
    };
    let kind = kind_of(ev);
    let head = format!("seq={:<3} {}", r.seq, kind.as_str_name());
    let detail = match kind {
        EventKind::EventInput | EventKind::EventOutput => {
            body::message(ev).map(|m| format!("{}: {}", m.role, message_text(m)))
        }
        EventKind::EventToolCall => {
            body::tool(ev).map(|t| format!("call={} tool={}", t.id, t.tool))
        }
        EventKind::EventToolResult => body::result(ev).map(|t| {
            if t.is_error {
                format!("call={} error: {}", t.id, t.error)
            } else {
                format!("call={} ok", t.id)
            }
        }),
        EventKind::EventApprovalRequest => {
            body::approval(ev).map(|a| format!("call={}", a.tool_call_id))
        }
        EventKind::EventApprovalResult => body::approval_result(ev).map(|a| {
            format!(
                "call={} approved={} request_seq={} reason={}",
                a.tool_call_id, a.approved, a.request_seq, a.reason
            )
        }),
        EventKind::EventLifecycle => body::lifecycle(ev).map(|l| {
            let k =
                lifecycle::Kind::try_from(l.kind).unwrap_or(lifecycle::Kind::LifecycleUnspecified);
            let k = k.as_str_name();
            let k = k.strip_prefix("LIFECYCLE_").unwrap_or(k);
            if l.detail.is_empty() {
                k.to_owned()
            } else {
                format!("{k} {}", l.detail)
            }
        }),
        // Only an END that is not plain COMPLETED (a Cancel's) says more.
        EventKind::EventEnd => match &ev.body {
            Some(agentsessions_proto::v1::event::Body::End(end))
                if !end.state.is_empty() && end.state != "COMPLETED" =>
            {
                Some(end.state.clone())
            }
            _ => None,
        },
        _ => None,
    };
    match detail {
        Some(d) => format!("{head}  {d}"),
        None => head,
    }
}

fn harness_state(h: &HarnessRegistration) -> &'static str {
    let s = HarnessState::try_from(h.state).unwrap_or(HarnessState::Unspecified);
    let s = s.as_str_name();
    s.strip_prefix("HARNESS_STATE_").unwrap_or(s)
}

fn harness_source(h: &HarnessRegistration) -> &'static str {
    let s = HarnessSource::try_from(h.source).unwrap_or(HarnessSource::Unspecified);
    let s = s.as_str_name();
    s.strip_prefix("HARNESS_SOURCE_").unwrap_or(s)
}

fn harness_name(h: &HarnessRegistration) -> &str {
    h.metadata.as_ref().map_or("", |m| m.name.as_str())
}

/// `harness list`: one tab-separated row per registration.
pub fn harness_row(h: &HarnessRegistration) -> String {
    format!(
        "{}\tstate={}\tsource={}\tdigest={}",
        harness_name(h),
        harness_state(h),
        harness_source(h),
        h.spec_digest
    )
}

/// `harness get` / `retire`: the registration, plus what a live Describe
/// observed when one was asked for.
pub fn harness_line(h: &HarnessRegistration) -> String {
    let mut line = format!(
        "harness {} state={} source={} digest={}",
        harness_name(h),
        harness_state(h),
        harness_source(h),
        h.spec_digest
    );
    if !h.retire_reason.is_empty() {
        line.push_str(&format!(" retire_reason={}", h.retire_reason));
    }
    if !h.unservable_reason.is_empty() {
        line.push_str(&format!(" unservable={}", h.unservable_reason));
    }
    if let Some(d) = &h.observed {
        line.push_str(&format!(" observed={}", d.id));
    }
    if !h.observe_error.is_empty() {
        line.push_str(&format!(" observe_error={}", h.observe_error));
    }
    line
}

/// `harness register`: the outcome and the registration.
pub fn register_line(h: &HarnessRegistration, outcome: i32) -> String {
    let o = RegisterOutcome::try_from(outcome).unwrap_or(RegisterOutcome::Unspecified);
    let o = o.as_str_name();
    format!(
        "{} outcome={}",
        harness_line(h),
        o.strip_prefix("REGISTER_OUTCOME_").unwrap_or(o)
    )
}
