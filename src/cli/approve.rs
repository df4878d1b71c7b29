//! `agentctl approve` / `deny`: which approval a command decides, the
//! request that decides it, and what it prints.
//!
//! The binary commits the decision (Approve), then resumes the session so
//! the host runs (or refuses) the tool and the harness reports the receipt,
//! as the reference CLI does; `--no-resume` stops after the commit.

use agentsessions_machine::journal::{approval, executions};
use agentsessions_proto::v1::{ApprovalRef, ApproveRequest, IdentityRef, LogRecord, Session};

use crate::cli::args::Decide;
use crate::cli::render;

/// The session a command decides for: `--session` or the positional UID.
pub fn session(d: &Decide) -> Option<&str> {
    d.session.as_deref().or(d.uid.as_deref())
}

/// The approval named on the command line, when the whole tuple was given.
/// Without it the command decides the session's `pending_approval`.
pub fn explicit_target(d: &Decide) -> Option<ApprovalRef> {
    match (&d.execution, &d.call, d.request_seq) {
        (Some(execution_id), Some(tool_call_id), Some(request_seq)) => Some(ApprovalRef {
            execution_id: execution_id.clone(),
            tool_call_id: tool_call_id.clone(),
            request_seq,
        }),
        _ => None,
    }
}

/// Why `session` has nothing to decide, read from its records (`None`
/// when they could not be read). `resume` is suggested only when it would
/// re-drive an unfinished turn of this session: on a finished one it
/// changes nothing.
pub fn nothing_pending(session: &str, records: Option<&[LogRecord]>) -> String {
    let head = format!("session {session} has no pending approval");
    let Some(records) = records else {
        return head;
    };
    let resume = format!("run `agentctl resume --session {session}` to finish it");
    // The turn recovery would continue; corrupt evidence means none.
    let unfinished = executions::project(records)
        .and_then(|p| executions::select_pending(records, &p))
        .is_ok_and(|e| e.is_some());
    let gate = approval::scan(records, 0)
        .ok()
        .and_then(|scan| scan.selected().cloned());
    let why = match gate {
        Some(g) => {
            let call = &g.call.id;
            let decided = g.decision_seq().zip(g.decision_body()).map(|(seq, d)| {
                format!(
                    "call {call} was already decided at seq {seq} (approved={})",
                    d.approved
                )
            });
            match decided {
                // A gate copied by a fork belongs to the parent.
                Some(what) if g.inherited => format!("{what}, before the fork"),
                Some(what) if unfinished => {
                    format!("{what}, but its turn has not finished: {resume}")
                }
                Some(what) => format!("{what} and its turn is over"),
                None if g.inherited => {
                    format!("call {call} was asked for before the fork; decide it in the parent")
                }
                None if unfinished => {
                    format!(
                        "its last turn stopped before call {call} was put to a decision: {resume}"
                    )
                }
                None => format!("the turn that asked about call {call} ended without a decision"),
            }
        }
        None if unfinished => format!("its last turn was interrupted: {resume}"),
        None => "none of its turns is waiting for a decision".to_owned(),
    };
    format!("{head}: {why}")
}

/// The Approve request deciding `target`. The identity is sent only when
/// some part of it was given, so an anonymous decision records no actor.
pub fn request(session: &str, target: ApprovalRef, approved: bool, d: &Decide) -> ApproveRequest {
    let identity = IdentityRef {
        principal: d.actor.clone(),
        issuer: d.identity_issuer.clone(),
        subject: d.identity_subject.clone(),
    };
    let anonymous =
        identity.principal.is_empty() && identity.issuer.is_empty() && identity.subject.is_empty();
    ApproveRequest {
        session: session.to_owned(),
        execution_id: target.execution_id,
        tool_call_id: target.tool_call_id,
        request_seq: target.request_seq,
        approved: Some(approved),
        reason: d.reason.clone(),
        identity: (!anonymous).then_some(identity),
    }
}

/// The error context of a resume that failed after the commit. The
/// decision is durable whatever happens next; saying so keeps anyone from
/// deciding twice, and names the command that finishes the job.
pub fn resume_failed(session: &str, decision_seq: i64) -> String {
    format!(
        "the decision was committed at seq {decision_seq}, but resuming failed (retry with \
         `agentctl resume --session {session}`)"
    )
}

/// The summary line, in the reference's format: where the decision landed
/// and the state the session is in now (resumed, unless `--no-resume`).
pub fn decision_line(session: &str, decision_seq: i64, approved: bool, now: &Session) -> String {
    format!(
        "session {session} decision committed seq={decision_seq} approved={approved} compute={} \
         last_seq={}",
        render::compute(now),
        now.last_seq
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::args::{Cli, Command};

    fn decide(args: &[&str]) -> Decide {
        match Cli::try_parse_from(["agentctl", "approve"].iter().chain(args))
            .unwrap()
            .command
        {
            Command::Approve(d) => d,
            _ => panic!("approve"),
        }
    }

    #[test]
    fn a_full_tuple_names_the_call_and_none_means_the_pending_one() {
        let d = decide(&["s", "--execution", "e", "--call", "c", "--request-seq", "4"]);
        assert_eq!(session(&d), Some("s"));
        let t = explicit_target(&d).unwrap();
        assert_eq!(
            (
                t.execution_id.as_str(),
                t.tool_call_id.as_str(),
                t.request_seq
            ),
            ("e", "c", 4)
        );
        assert!(explicit_target(&decide(&["--session", "s", "--pending"])).is_none());
    }

    #[test]
    fn the_identity_is_sent_only_when_given() {
        let target = ApprovalRef::default();
        let r = request(
            "s",
            target.clone(),
            false,
            &decide(&["s", "--reason", "no"]),
        );
        assert_eq!((r.approved, r.reason.as_str()), (Some(false), "no"));
        assert!(r.identity.is_none());
        let r = request("s", target, true, &decide(&["s", "--actor", "alice"]));
        assert_eq!(r.identity.unwrap().principal, "alice");
    }
}
