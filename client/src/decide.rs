//! The decision workflow, written once: commit the decision (Approve),
//! then Resume, so the host runs (or refuses) the gated call and the turn
//! goes on. `agentctl approve|deny`, the console's decide form and
//! [`Client::approve`](crate::Client::approve) all run it, each over its
//! own transport ([`DecideCalls`]).
//!
//! Invariant: once Approve answered, the decision is durable; a Resume that
//! fails afterwards is reported as such ([`Decided::resumed`] holds the
//! error) and never makes the caller decide again.

use agentsessions_proto::v1::{ApproveRequest, ApproveResponse, LogRecord, Session};

/// The two calls a decision needs, over whatever carries them.
pub trait DecideCalls {
    /// What a call fails with.
    type Error;
    /// Commits the decision.
    fn approve(
        &mut self,
        request: ApproveRequest,
    ) -> impl Future<Output = Result<ApproveResponse, Self::Error>> + Send;
    /// Resumes the session so the decided call is carried out.
    fn resume(
        &mut self,
        session: &str,
    ) -> impl Future<Output = Result<Session, Self::Error>> + Send;
}

/// A committed decision and what resuming after it came to.
#[derive(Debug)]
pub struct Decided<E> {
    /// The APPROVAL_RESULT record (an exact retry answers the same one).
    pub decision: LogRecord,
    /// The session once the decision was in.
    pub decided: Session,
    /// The session after the Resume; `None` when none was asked for.
    pub resumed: Option<Result<Session, E>>,
}

impl<E> Decided<E> {
    /// Where the log ended once the decision was in: the resumed turn's
    /// records follow it.
    pub fn decided_at(&self) -> i64 {
        self.decided.last_seq.max(self.decision.seq)
    }
}

/// Commits `request`'s decision and, when `resume`, resumes its session.
/// Approve's failure is the error (nothing was decided); a Resume failure
/// is in [`Decided::resumed`].
pub async fn decide<C: DecideCalls>(
    calls: &mut C,
    request: ApproveRequest,
    resume: bool,
) -> Result<Decided<C::Error>, C::Error> {
    let session = request.session.clone();
    assert!(request.approved.is_some(), "a decision names its verdict");
    let answer = calls.approve(request).await?;
    let decision = answer.decision.unwrap_or_default();
    let decided = answer.session.unwrap_or_default();
    let resumed = if resume {
        Some(calls.resume(&session).await)
    } else {
        None
    };
    Ok(Decided {
        decision,
        decided,
        resumed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the calls made; each answers as scripted.
    #[derive(Default)]
    struct Script {
        calls: Vec<String>,
        refuse_approve: bool,
        refuse_resume: bool,
    }

    impl DecideCalls for Script {
        type Error = &'static str;

        async fn approve(&mut self, r: ApproveRequest) -> Result<ApproveResponse, Self::Error> {
            self.calls
                .push(format!("approve {} {:?}", r.session, r.approved));
            if self.refuse_approve {
                return Err("decided elsewhere");
            }
            Ok(ApproveResponse {
                decision: Some(LogRecord {
                    seq: 5,
                    ..Default::default()
                }),
                session: Some(Session {
                    last_seq: 5,
                    ..Default::default()
                }),
            })
        }

        async fn resume(&mut self, session: &str) -> Result<Session, Self::Error> {
            self.calls.push(format!("resume {session}"));
            if self.refuse_resume {
                return Err("unavailable");
            }
            Ok(Session {
                last_seq: 9,
                ..Default::default()
            })
        }
    }

    fn request() -> ApproveRequest {
        ApproveRequest {
            session: "s".into(),
            approved: Some(false),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_decision_is_committed_then_resumed() {
        let mut s = Script::default();
        let d = decide(&mut s, request(), true).await.unwrap();
        assert_eq!(s.calls, ["approve s Some(false)", "resume s"]);
        assert_eq!((d.decision.seq, d.decided_at()), (5, 5));
        assert_eq!(d.resumed.unwrap().unwrap().last_seq, 9);
    }

    #[tokio::test]
    async fn a_refused_decision_resumes_nothing() {
        let mut s = Script {
            refuse_approve: true,
            ..Default::default()
        };
        assert_eq!(
            decide(&mut s, request(), true).await.unwrap_err(),
            "decided elsewhere"
        );
        assert_eq!(s.calls, ["approve s Some(false)"]);
    }

    #[tokio::test]
    async fn a_failed_resume_keeps_the_committed_decision() {
        let mut s = Script {
            refuse_resume: true,
            ..Default::default()
        };
        let d = decide(&mut s, request(), true).await.unwrap();
        assert_eq!(d.decision.seq, 5);
        assert_eq!(d.resumed.unwrap().unwrap_err(), "unavailable");
        let mut s = Script::default();
        let d = decide(&mut s, request(), false).await.unwrap();
        assert!(d.resumed.is_none());
        assert_eq!(s.calls, ["approve s Some(false)"]);
    }
}
