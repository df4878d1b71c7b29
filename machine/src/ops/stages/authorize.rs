//! Authorization: whether a caller may make a call, decided before the
//! call's operation starts.
//!
//! Invariant: a refused call has no effect but its reply, and the reply
//! is the same whether or not the session exists. A caller whose roles do
//! not settle the question alone (a role on some projects, not all) waits
//! for one read of the session row; a missing row and a row of another
//! project are refused with the same status and text, so the read reveals
//! nothing. Only an admitted call reaches its operation, so every journal
//! read and write, NOT_FOUND and ABORTED among them, comes after the check.

use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::vocab::caller::{Caller, Principal, Role};
use crate::vocab::shown;
use crate::vocab::{EffectId, Outcome, Request, RequestId, Status, StoreOutcome};

/// The verdict on a call before anything is read.
#[derive(Debug, PartialEq)]
pub(crate) enum Gate {
    /// Permitted.
    Open,
    /// Refused: PERMISSION_DENIED.
    Refused(Status),
    /// Permitted only if the session's project grants `role`.
    ByProject { session: String, role: Role },
}

/// What a call needs.
enum Need<'a> {
    /// `role` on this project (known from the request).
    InProject(Role, String),
    /// `role` on the project of this session.
    OnSession(Role, &'a str),
    /// `role` on every project (the registry is host-wide).
    Everywhere(Role),
    /// `role` on at least one project (what is host-wide but harmless to
    /// read, like the tool catalog).
    Somewhere(Role),
    /// Only the host itself sends it.
    HostOnly,
}

fn need<'a>(call: &'a Request, default_project: &str) -> Need<'a> {
    let project = |p: &str| {
        if p.is_empty() {
            default_project.to_owned()
        } else {
            p.to_owned()
        }
    };
    match call {
        Request::CreateSession(r) => {
            let p = r
                .session
                .as_ref()
                .and_then(|s| s.metadata.as_ref())
                .map_or("", |m| m.project.as_str());
            Need::InProject(Role::Writer, project(p))
        }
        Request::ListSessions(r) => Need::InProject(Role::Reader, project(&r.project)),
        Request::GetSession(r) => Need::OnSession(Role::Reader, &r.uid),
        Request::Replay(r) => Need::OnSession(Role::Reader, &r.session),
        Request::ReplayHarness { session } | Request::Decided { session } => {
            Need::OnSession(Role::Reader, session)
        }
        Request::DeleteSession(r) => Need::OnSession(Role::Writer, &r.uid),
        Request::Exec(r) => Need::OnSession(Role::Writer, &r.session),
        Request::Fork(r) => Need::OnSession(Role::Writer, &r.session),
        Request::Suspend(r) => Need::OnSession(Role::Writer, &r.session),
        Request::Resume(r) => Need::OnSession(Role::Writer, &r.session),
        Request::Cancel(r) => Need::OnSession(Role::Writer, &r.session),
        Request::Approve(r) => Need::OnSession(Role::Approver, &r.session),
        Request::RegisterHarness(_)
        | Request::GetHarness(_)
        | Request::ListHarnesses(_)
        | Request::RetireHarness(_) => Need::Everywhere(Role::Admin),
        Request::ListTools => Need::Somewhere(Role::Reader),
        Request::Boot | Request::Retain { .. } => Need::HostOnly,
    }
}

/// The roles any one of which admits `call` where `role` is needed. An
/// approver may Resume: the resume that carries out a decision it made
/// possible. What such a resume may do is narrowed by the operation
/// (`ResumeOp`: exactly a decided gate's execution, nothing else).
fn admitting(role: Role, call: &Request) -> &'static [Role] {
    let roles: &'static [Role] = match (role, call) {
        (Role::Writer, Request::Resume(_)) => &[Role::Writer, Role::Approver],
        (Role::Reader, _) => &[Role::Reader],
        (Role::Writer, _) => &[Role::Writer],
        (Role::Approver, _) => &[Role::Approver],
        (Role::Admin, _) => &[Role::Admin],
    };
    debug_assert!(roles.contains(&role), "the role needed always admits");
    roles
}

/// The status of every refusal on a session: one text for a missing
/// session and a session of another project.
pub(crate) fn denied_on_session(p: &Principal, role: Role) -> Status {
    Status::new(
        crate::vocab::Code::PermissionDenied,
        format!(
            "permission denied: {:?} holds no {} role on this session's project",
            shown(&p.name),
            role.name()
        ),
    )
}

/// Decides what can be decided from the caller and the request alone.
pub(crate) fn gate(caller: &Caller, call: &Request, default_project: &str) -> Gate {
    let Caller::Verified(p) = caller else {
        return Gate::Open;
    };
    let denied = |text: String| {
        Gate::Refused(Status::new(
            crate::vocab::Code::PermissionDenied,
            format!("permission denied: {text}"),
        ))
    };
    match need(call, default_project) {
        Need::InProject(role, project) if p.may(role, &project) => Gate::Open,
        Need::InProject(role, project) => denied(format!(
            "{:?} holds no {} role in project {:?}",
            shown(&p.name),
            role.name(),
            shown(&project)
        )),
        Need::OnSession(role, _) if admitting(role, call).iter().any(|&r| p.may_everywhere(r)) => {
            Gate::Open
        }
        Need::OnSession(role, _) if !admitting(role, call).iter().any(|&r| p.may_somewhere(r)) => {
            Gate::Refused(denied_on_session(p, role))
        }
        Need::OnSession(role, session) => Gate::ByProject {
            session: session.to_owned(),
            role,
        },
        Need::Somewhere(role) if p.may_somewhere(role) => Gate::Open,
        Need::Somewhere(role) => denied(format!(
            "{:?} holds no {} role on any project",
            shown(&p.name),
            role.name()
        )),
        Need::Everywhere(role) if p.may_everywhere(role) => Gate::Open,
        Need::Everywhere(role) => denied(format!(
            "{:?} holds no {} role on every project (\"*:{}\")",
            shown(&p.name),
            role.name(),
            role.name()
        )),
        Need::HostOnly => denied("only the host sends this call".to_owned()),
    }
}

/// A call waiting for its session's project before it may start.
pub(crate) struct GateOp {
    request: RequestId,
    principal: Principal,
    role: Role,
    read: EffectId,
    call: Option<Request>,
    admitted: bool,
}

impl GateOp {
    /// Starts by reading the session's row.
    pub(crate) fn start(
        cx: &mut Cx<'_>,
        request: RequestId,
        principal: Principal,
        call: Request,
        session: &str,
        role: Role,
    ) -> Self {
        Self {
            request,
            principal,
            role,
            read: cx.get_session(session),
            call: Some(call),
            admitted: false,
        }
    }

    /// The call, once the check let it through (taken once).
    pub(crate) fn take_admitted(&mut self) -> Option<(Caller, Request)> {
        if !self.admitted {
            return None;
        }
        self.admitted = false;
        let call = self.call.take().expect("an admitted gate holds its call");
        Some((Caller::Verified(self.principal.clone()), call))
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        assert_eq!(id, self.read, "a gate waits for its one read");
        assert!(self.call.is_some() && !self.admitted, "a gate decides once");
        let Outcome::Store(StoreOutcome::Session(row)) = outcome else {
            unexpected("authorize", &outcome)
        };
        let call = self.call.as_ref().expect("checked above");
        let admits = |project: &str| {
            admitting(self.role, call)
                .iter()
                .any(|&r| self.principal.may(r, project))
        };
        match row {
            Ok(Some(row)) if admits(&row.project) || crate::planted!(SkipProjectCheck) => {
                self.admitted = true;
                Flow::Continue
            }
            Ok(_) => {
                let status = denied_on_session(&self.principal, self.role);
                cx.reply(self.request, Err(status));
                Flow::Done
            }
            Err(fault) => {
                cx.reply(self.request, Err(fault.status("authorize")));
                Flow::Done
            }
        }
    }

    /// The client went away before the check finished.
    pub(crate) fn on_cancel(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(
            self.call.is_some() && !self.admitted,
            "only a gate still waiting for its read is cancelled"
        );
        let status = Status::new(crate::vocab::Code::Cancelled, "client cancelled");
        cx.reply(self.request, Err(status));
        Flow::Done
    }
}
