//! Which harness serves a session, and how failures map to status codes.

use crate::error::{LogError, TurnError};
use crate::ops::stages::cx::Cx;
use crate::vocab::shown;
use crate::vocab::{AppendError, Route, Status};

/// Resolves a harness name ("" = the host default) to its route.
pub(crate) fn resolve(cx: &Cx<'_>, name: &str) -> Result<(String, Route), Status> {
    let name = if name.is_empty() {
        cx.config().default_harness.clone()
    } else {
        name.to_owned()
    };
    if let Some(reason) = cx.core.unservable.get(&name) {
        return Err(Status::failed_precondition(format!(
            "harness {:?} is unservable on this host: {reason}",
            shown(&name)
        )));
    }
    match cx.route(&name) {
        Some(route) => Ok((name, route.clone())),
        None => Err(Status::invalid_argument(format!(
            "unknown harness {:?} (registered: {:?})",
            shown(&name),
            cx.core.routes.keys().collect::<Vec<_>>()
        ))),
    }
}

/// True when `name` is a registered (not static) harness on this host.
pub(crate) fn is_registered(cx: &Cx<'_>, name: &str) -> bool {
    cx.core.unservable.contains_key(name) || cx.route(name).is_some_and(|r| r.registered)
}

/// The harness a new turn runs on: the session's, or a one-turn override.
/// A session pinned to a registered harness refuses any override, and no
/// session may move onto a registered one.
pub(crate) fn for_turn(
    cx: &Cx<'_>,
    uid: &str,
    stored: &str,
    override_name: &str,
) -> Result<(String, Route), Status> {
    let stored_name = if stored.is_empty() {
        cx.config().default_harness.clone()
    } else {
        stored.to_owned()
    };
    if !override_name.is_empty() && override_name != stored_name {
        if is_registered(cx, &stored_name) || is_registered(cx, override_name) {
            return Err(Status::failed_precondition(format!(
                "session {:?} is pinned to harness {:?}; a turn cannot run on {:?}",
                shown(uid),
                shown(&stored_name),
                shown(override_name)
            )));
        }
        return resolve(cx, override_name);
    }
    resolve(cx, &stored_name)
}

/// Checks that a recovery may run on `name` when the session's harness is
/// `stored` (a turn recorded on a different static harness still recovers).
pub(crate) fn check_resumed(
    cx: &Cx<'_>,
    uid: &str,
    stored: &str,
    name: &str,
) -> Result<(), Status> {
    let stored_name = if stored.is_empty() {
        cx.config().default_harness.as_str()
    } else {
        stored
    };
    if name == stored_name {
        return Ok(());
    }
    if is_registered(cx, stored_name) || is_registered(cx, name) {
        return Err(Status::failed_precondition(format!(
            "session {:?} is pinned to harness {:?}; its pending turn was recorded on {:?} and cannot resume there",
            shown(uid),
            shown(stored_name),
            shown(name)
        )));
    }
    Ok(())
}

/// Resolves the harness a pending turn recorded (no fallback when this host
/// does not serve it).
pub(crate) fn resolve_recorded(cx: &Cx<'_>, name: &str) -> Result<(String, Route), Status> {
    resolve(cx, name).map_err(|s| {
        if s.code == crate::vocab::Code::InvalidArgument {
            Status::failed_precondition(format!(
                "recorded harness {:?} is not served by this host",
                shown(name)
            ))
        } else {
            s
        }
    })
}

/// Status mappings, one per RPC family, in the reference's precedence.
pub(crate) mod mapping {
    use super::*;

    /// CAS and fence refusals are contention; a store that is down is
    /// UNAVAILABLE; anything else is internal.
    pub(crate) fn append(e: &AppendError, what: &str) -> Status {
        let status = match e {
            AppendError::Conflict { head } => {
                Status::aborted(format!("{what}: seq conflict (journal head is {head})"))
            }
            AppendError::Fenced { .. } => Status::aborted(format!(
                "{what}: stale fencing token (incarnation superseded)"
            )),
            AppendError::Deleted => Status::not_found(format!("{what}: the session was deleted")),
            AppendError::Failed(f) => f.status(what),
        };
        debug_assert_ne!(status.code, crate::vocab::Code::Ok);
        status
    }

    /// Failures the session's state explains (the caller can fix them).
    fn precondition(e: &TurnError) -> bool {
        match e {
            TurnError::Log(l) => l.is_invalid_log(),
            TurnError::ApprovalBlocked
            | TurnError::ApprovalUnavailable
            | TurnError::MissingToolExecutor
            | TurnError::InvalidApprovalCall(_)
            | TurnError::ApprovalReceiptReport
            | TurnError::HarnessMismatch { .. }
            | TurnError::HarnessVersionMismatch { .. } => true,
            _ => false,
        }
    }

    /// Exec.
    pub(crate) fn exec(e: &TurnError) -> Status {
        let status = match e {
            TurnError::Append(a) => append(a, "exec"),
            TurnError::Store(f) => f.status("exec"),
            TurnError::DeadlineExceeded => {
                Status::new(crate::vocab::Code::DeadlineExceeded, e.to_string())
            }
            TurnError::HarnessUnavailable(_) | TurnError::ModelUnavailable(_) => {
                Status::unavailable(e.to_string())
            }
            TurnError::TokenBudget { .. } => {
                Status::new(crate::vocab::Code::ResourceExhausted, e.to_string())
            }
            _ if precondition(e) => Status::failed_precondition(e.to_string()),
            _ => Status::internal(e.to_string()),
        };
        debug_assert_ne!(status.code, crate::vocab::Code::Ok, "a failed turn fails");
        status
    }

    /// Resume (and Exec recovery), with its hints.
    pub(crate) fn resume(e: &TurnError) -> Status {
        let status = match e {
            TurnError::Append(a) => append(a, "resume"),
            TurnError::Store(f) => f.status("resume"),
            TurnError::DeadlineExceeded => {
                Status::new(crate::vocab::Code::DeadlineExceeded, e.to_string())
            }
            TurnError::HarnessUnavailable(_) | TurnError::ModelUnavailable(_) => {
                Status::unavailable(format!("resume: {e}"))
            }
            TurnError::TokenBudget { .. } => Status::new(
                crate::vocab::Code::ResourceExhausted,
                format!("resume: {e}"),
            ),
            TurnError::Log(LogError::InheritedToolIntent(_)) => Status::failed_precondition(
                format!("resume: {e}; fork at or after the TOOL_RESULT, or Exec a new turn"),
            ),
            TurnError::Log(LogError::IncompleteInvocation(_)) => {
                Status::failed_precondition(format!(
                    "resume: {e}; the incomplete turn never reached the harness and you should call Exec again with all inputs"
                ))
            }
            _ if precondition(e) => Status::failed_precondition(format!("resume: {e}")),
            _ => Status::internal(format!("resume: {e}")),
        };
        debug_assert_ne!(status.code, crate::vocab::Code::Ok, "a failed turn fails");
        status
    }
}
