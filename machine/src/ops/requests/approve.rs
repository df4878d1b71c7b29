//! Approve: the only writer of APPROVAL_RESULT.
//!
//! It decides, it never resumes: no harness, no compute. An exact retry
//! (same tuple, verdict, reason and identity) returns the committed record
//! without fencing anyone; any other decision on a decided request is
//! refused. A new decision mints a fence and appends at the head its scan
//! saw, so a racing writer turns it into ABORTED.
//!
//! With authentication on, the decider is the verified caller: its
//! identity replaces whatever the request named, both on the record and in
//! the exact-retry comparison, and a caller marked `separate_approver` may
//! not decide calls of a session it created.
//!
//! A request whose wait ran out (see `stages::expiry`) is the host's to
//! deny: a human decision arriving after its deadline is refused with
//! FAILED_PRECONDITION, and the host's own denial is the only writer that
//! may decide it then.

use crate::vocab::StoreOutcome;
use agentsessions_proto::v1::{
    ApprovalRef, ApprovalResult, ApproveRequest, ApproveResponse, IdentityRef, LogRecord,
};

use crate::events;
use crate::journal::approval::{self, ApprovalState};
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::load::{Load, Loaded};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::render::timestamp;
use crate::ops::stages::routing::mapping;
use crate::vocab::caller::{Caller, HOST_PRINCIPAL};
use crate::vocab::{Code, EffectId, Outcome, RequestId, Response, SessionRow, Status};

enum Stage {
    Load(Load),
    Fence(EffectId, i64),
    Append(EffectId),
    Final(Render, LogRecord),
    Over,
}

pub(crate) struct ApproveOp {
    request: RequestId,
    req: ApproveRequest,
    stage: Stage,
    /// Set for a verified caller that may not approve its own sessions.
    separate: bool,
    /// The host's own denial at expiry ([`ApproveOp::expiring`]).
    host: bool,
}

fn same_identity(a: Option<&IdentityRef>, b: Option<&IdentityRef>) -> bool {
    let empty = IdentityRef::default();
    a.unwrap_or(&empty) == b.unwrap_or(&empty)
}

impl ApproveOp {
    pub(crate) fn new(request: RequestId, mut req: ApproveRequest, caller: &Caller) -> Self {
        let separate = match caller {
            Caller::Open => false,
            Caller::Verified(p) => {
                req.identity = Some(p.identity());
                p.separate_approver
            }
        };
        Self {
            request,
            req,
            stage: Stage::Over,
            separate,
            host: false,
        }
    }

    /// The host's own denial of a request whose wait ran out.
    pub(crate) fn expiring(request: RequestId, req: ApproveRequest) -> Self {
        assert!(request.is_host(), "only the host denies at expiry");
        assert_eq!(req.approved, Some(false), "an expiry denies");
        Self {
            request,
            req,
            stage: Stage::Over,
            separate: false,
            host: true,
        }
    }

    /// The refusal of a human decision on a request whose wait of
    /// `after_ms` ran out.
    fn late(&mut self, cx: &mut Cx<'_>, after_ms: u64) -> Flow {
        self.expired(cx, &crate::ops::stages::expiry::reason(after_ms))
    }

    /// The refusal of a human decision on a request the host denied (or
    /// denies now) with `reason` (`expired after 30m`).
    fn expired(&mut self, cx: &mut Cx<'_>, reason: &str) -> Flow {
        debug_assert!(!self.host, "the host is never late for itself");
        debug_assert!(reason.starts_with("expired after "));
        let text = format!("approve: request {reason}: the host denied it");
        self.fail(cx, Status::failed_precondition(text))
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = Stage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        let r = &self.req;
        let invalid = if r.session.is_empty() {
            Some("session is required")
        } else if r.execution_id.is_empty() {
            Some("execution_id is required")
        } else if r.tool_call_id.is_empty() {
            Some("tool_call_id is required")
        } else if r.request_seq <= 0 {
            Some("request_seq must be positive")
        } else if r.approved.is_none() {
            Some("approved is required (false denies)")
        } else if !self.host
            && r.identity
                .as_ref()
                .is_some_and(|i| i.principal == HOST_PRINCIPAL)
        {
            Some("the decider may not name itself agentsessions:host: that is the host's own")
        } else {
            None
        };
        if let Some(msg) = invalid {
            return self.fail(cx, Status::invalid_argument(msg));
        }
        // Look the session up before anything that could create it.
        self.stage = Stage::Load(Load::start_guarded(cx, &self.req.session));
        Flow::Continue
    }

    /// Why this decider may not decide on `row`'s session: only a
    /// separate approver is bound, and it may not when it created the
    /// session or the session records no creator (made before auth was
    /// on, or by an open caller), which rules nobody out.
    fn creator_refusal(&self, row: &SessionRow) -> Option<&'static str> {
        let decider = self.req.identity.as_ref();
        if !self.separate {
            None
        } else if row.identity.as_ref().is_none_or(|i| i.principal.is_empty()) {
            Some(
                "permission denied: the session records no creator, so a separate approver may not decide its calls",
            )
        } else if decider.is_some() && same_identity(row.identity.as_ref(), decider) {
            Some("permission denied: the session's creator may not approve its calls")
        } else {
            None
        }
    }

    /// The decision rules over the scanned journal; `canceled`: a Cancel
    /// marker follows the request.
    fn decide(&mut self, cx: &mut Cx<'_>, log: &[LogRecord], canceled: bool) -> Flow {
        let scan = match approval::scan(log, 0) {
            Ok(s) => s,
            Err(e) => return self.fail(cx, Status::failed_precondition(format!("approve: {e}"))),
        };
        let r = &self.req;
        let Some(index) = scan.states.iter().position(|s| {
            s.execution_id == r.execution_id
                && s.call.id == r.tool_call_id
                && s.request_seq() == Some(r.request_seq)
        }) else {
            return self.fail(
                cx,
                Status::failed_precondition("approve: request is not owned by this session"),
            );
        };
        let target = &scan.states[index];
        assert!(
            target.request.is_some() && r.request_seq > 0,
            "found by its (validated) request seq"
        );
        if target.inherited {
            return self.fail(
                cx,
                Status::failed_precondition(
                    "approve: request is not owned by this session (inherited through fork)",
                ),
            );
        }
        let approved = r.approved.expect("validated");
        if let Some(decision) = &target.decision
            && !(self.host && crate::planted!(ExpiryIgnoresDecision))
        {
            let body = target.decision_body().cloned().unwrap_or_default();
            let actor = decision.event.as_ref().and_then(|e| e.actor.as_ref());
            if body.approved == approved
                && body.reason == r.reason
                && same_identity(actor, r.identity.as_ref())
            {
                let record = decision.clone();
                self.stage = Stage::Final(Render::start(cx, &self.req.session), record);
                return Flow::Continue;
            }
            if !self.host && actor.is_some_and(|a| a.principal == HOST_PRINCIPAL) && !body.approved
            {
                return self.expired(cx, &body.reason);
            }
            return self.fail(
                cx,
                Status::failed_precondition("approve: request already has a different decision"),
            );
        }

        // A Cancel cut before its END (a torn write) leaves the gate looking
        // open; the canceled execution is over all the same, and nothing of
        // it may follow the CANCEL (an exact retry above still answers).
        if canceled {
            return self.fail(
                cx,
                Status::failed_precondition(
                    "approve: request is superseded or completed (its execution was canceled)",
                ),
            );
        }
        if scan.selected != Some(index) || target.completed || target.has_receipt() {
            return self.fail(
                cx,
                Status::failed_precondition("approve: request is superseded or completed"),
            );
        }
        if !self.host
            && let Some(after_ms) = self.ran_out(cx, target)
        {
            return self.late(cx, after_ms);
        }
        let head = scan.head;
        debug_assert!(
            target.is_pending_request() || crate::planted!(ExpiryIgnoresDecision),
            "an undecided, owned request"
        );
        self.stage = Stage::Fence(cx.mint_fence(&self.req.session), head);
        Flow::Continue
    }

    /// The wait of the host's expiry running on this session now, if any.
    fn running_expiry(&self, cx: &Cx<'_>) -> Option<u64> {
        let ms = cx.core.expiries.running(&self.req.session)?;
        (!self.host).then_some(ms)
    }

    /// The wait that ran out for pending `target`, if its deadline has
    /// passed: counted from its journaled time, or,
    /// for a request journaled without one, from the deadline this host
    /// armed. A late request is armed to expire at once, so the host's
    /// denial follows the refusal.
    fn ran_out(&self, cx: &mut Cx<'_>, target: &ApprovalState) -> Option<u64> {
        use crate::ops::stages::expiry::{Armed, deadline, requested_at};
        let after_ms = cx.config().tools.expiry_ms(&target.call.tool)?;
        let now = cx.now();
        let armed = cx.core.expiries.armed(&self.req.session);
        let deadline = match requested_at(target) {
            Some(since) => deadline(since, after_ms),
            None => armed
                .filter(|a| a.gate.request_seq == self.req.request_seq)
                .map(|a| a.at)?,
        };
        if now < deadline {
            return None;
        }
        debug_assert!(target.is_pending_request() && !target.inherited);
        let gate = ApprovalRef {
            execution_id: target.execution_id.clone(),
            tool_call_id: target.call.id.clone(),
            request_seq: self.req.request_seq,
        };
        cx.core.expiries.arm(
            &self.req.session,
            Armed {
                at: now,
                gate,
                after_ms,
            },
        );
        Some(after_ms)
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match (std::mem::replace(&mut self.stage, Stage::Over), outcome) {
            (Stage::Load(load), outcome) => match load.on_outcome(cx, id, outcome) {
                Loaded::Pending(load) => {
                    self.stage = Stage::Load(load);
                    Flow::Continue
                }
                Loaded::Ready(row, log) => match self.creator_refusal(&row) {
                    Some(text) => self.fail(cx, Status::new(Code::PermissionDenied, text)),
                    None => {
                        let seq = self.req.request_seq.min(log.head()).max(1);
                        let canceled = crate::ops::stages::expiry::canceled_after(&log, seq);
                        self.decide(cx, &log.to_vec(), canceled)
                    }
                },
                Loaded::Busy(_) if let Some(ms) = self.running_expiry(cx) => self.late(cx, ms),
                Loaded::NotFound(status) | Loaded::Busy(status) => self.fail(cx, status),
                Loaded::Failed(status) => {
                    self.fail(cx, Status::internal(format!("approve: {}", status.message)))
                }
            },
            (Stage::Fence(want, head), Outcome::Store(StoreOutcome::Fence(r))) => {
                assert_eq!(want, id);
                let fence = match r {
                    Ok(f) => f,
                    Err(e) => {
                        return self.fail(cx, e.status("approve: fence"));
                    }
                };
                assert!(fence > 0, "fences start at 1");
                let r = &self.req;
                let decision = ApprovalResult {
                    tool_call_id: r.tool_call_id.clone(),
                    approved: r.approved.expect("validated"),
                    reason: r.reason.clone(),
                    request_seq: r.request_seq,
                };
                let now = timestamp(cx.now()).unwrap_or_default();
                let event =
                    events::approval_result(&r.execution_id, decision, r.identity.clone(), now);
                self.stage = Stage::Append(cx.append(&r.session, head, fence, vec![event]));
                Flow::Continue
            }
            (Stage::Append(want), Outcome::Store(StoreOutcome::Appended(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(mut records) => {
                        let record = records.pop().expect("one decision appended");
                        cx.signal_awaiting(&self.req.session, false);
                        self.stage = Stage::Final(Render::start(cx, &self.req.session), record);
                        Flow::Continue
                    }
                    Err(e) => self.fail(cx, mapping::append(&e, "approve")),
                }
            }
            (Stage::Final(mut render, record), outcome) => match render.on_outcome(cx, id, outcome)
            {
                Rendered::Pending => {
                    self.stage = Stage::Final(render, record);
                    Flow::Continue
                }
                Rendered::Done(s) => {
                    cx.reply(
                        self.request,
                        Ok(Response::Approve(ApproveResponse {
                            session: Some(*s),
                            decision: Some(record),
                        })),
                    );
                    Flow::Done
                }
                Rendered::NotFound => self.fail(cx, Status::internal("session vanished")),
                Rendered::Failed(status) => self.fail(cx, status),
            },
            (_, other) => unexpected("approve", &other),
        }
    }
}
