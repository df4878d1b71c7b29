//! Resume: recover the latest execution of a session.
//!
//! Every check that depends only on the journal runs before any side
//! effect: the approval gate (an inherited unreceipted gate is refused; an
//! undecided request parks with no runtime IO; a call without its request is
//! repaired and parks), input completeness, and the fork-inherited tool
//! intent guard. Then the recorded harness is placed (restored from the
//! session's own latest SUSPEND), its identity and version are checked, and
//! the pending execution runs in Resume mode. Success appends RESUME.
//!
//! The same operation serves an inputless Exec on an approval-bearing turn;
//! it then streams like Exec (Session frame first, records, a final Session
//! frame) and honours Exec's `expected_last_seq`.

mod cancel;

use crate::vocab::{History, StoreOutcome};
use agentsessions_proto::v1::{
    ControllerFrame, IdentityRef, LogRecord, SnapshotRef, Start, controller_frame::Frame, lifecycle,
};

use crate::error::{LogError, TurnError};
use crate::events::{self, body};
use crate::invocation::{Ending, Invocation, Mode, Setup, TokenBudget};
use crate::journal::approval::{self, ApprovalScan, ApprovalState};
use crate::journal::executions::{self, ExecKind, Execution};
use crate::journal::legacy;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::load::{Load, Loaded};
use crate::ops::stages::override_check::{Checked, OverrideCheck};
use crate::ops::stages::placement::{Placed, Placement, Provision, needs_memory};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::render;
use crate::ops::stages::routing::{check_resumed, mapping, resolve, resolve_recorded};
use crate::ops::stages::run::{CancelCalls, Handed, Handoff, Run};
use crate::vocab::caller::{Caller, Principal, Role};
use crate::vocab::shown;
use crate::vocab::{
    Code, Committed, ConnId, EffectId, HarnessInput, Outcome, RequestId, Response, Route,
    SessionRow, Status, StreamItem,
};

/// How the caller is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// Sessions.Resume: one Session.
    Unary,
    /// Exec recovery: frames, then a final Session frame.
    ExecStream { expected: Option<i64> },
}

enum Stage {
    Load(Load),
    /// The memory-snapshot override rule, with the gate found by `decide`.
    Check(Box<OverrideCheck>, Option<ApprovalState>),
    Repair {
        fence: Option<EffectId>,
        append: Option<EffectId>,
        call_id: String,
        exec_id: String,
        head: i64,
    },
    Place(Box<Placement>, Option<Execution>),
    /// Fenced with an execution to run: the journal re-read past the head
    /// `decide` saw, since another writer may have appended before the mint.
    Recheck(Box<Placement>, Execution, EffectId),
    /// A Cancel cut between its marker and its END: the END is written
    /// under a new fence (`append` once the fence is minted); nothing runs.
    EndCancel {
        fence: EffectId,
        append: Option<EffectId>,
        exec_id: String,
    },
    Marker(EffectId),
    Running(Box<Run>),
    Handoff(Box<Handoff>),
    Final(Render),
    /// The recovery run was canceled: the Cancel callers get the session.
    Canceled(Render),
    Over,
}

/// One recovery. See the module docs.
pub(crate) struct ResumeOp {
    request: RequestId,
    style: Style,
    session: String,
    row: Option<SessionRow>,
    log: Vec<LogRecord>,
    scan: ApprovalScan,
    harness: String,
    route: Option<Route>,
    stage: Stage,
    deadline: Option<Status>,
    /// Cancel calls waiting for this recovery's cancel to be durable.
    cancels: CancelCalls,
    /// The verified caller, recorded on the RESUME marker.
    actor: Option<IdentityRef>,
    /// A caller admitted as an approver (see `authorize::admitting`): it
    /// is refused unless it is writer on the session's project or the
    /// resume carries out a decided gate.
    approver: Option<Principal>,
}

/// The session's own latest snapshot; a ref copied from a fork parent names
/// another session and is skipped.
pub(crate) fn last_suspend_ref(log: &[LogRecord], uid: &str) -> SnapshotRef {
    let snapshot = log
        .iter()
        .rev()
        .filter_map(|r| r.event.as_ref().and_then(body::lifecycle))
        .find(|l| l.kind == lifecycle::Kind::LifecycleSuspend as i32 && l.snapshot_local == uid)
        .map(|l| SnapshotRef {
            local: l.snapshot_local.clone(),
            external_uri: l.snapshot_external_uri.clone(),
            memory: l.snapshot_memory,
            sealed: l.snapshot_sealed,
        })
        .unwrap_or_else(|| SnapshotRef {
            local: uid.to_owned(),
            ..SnapshotRef::default()
        });
    debug_assert_eq!(snapshot.local, uid, "the session's own snapshot");
    snapshot
}

impl ResumeOp {
    pub(crate) fn unary(request: RequestId, session: String, caller: &Caller) -> Self {
        let mut op = Self::new(request, session, Style::Unary, caller.actor());
        if let Caller::Verified(p) = caller {
            op.approver = Some(p.clone());
        }
        op
    }

    pub(crate) fn exec_recovery(
        request: RequestId,
        session: String,
        expected: Option<i64>,
        actor: Option<IdentityRef>,
    ) -> Self {
        assert!(!session.is_empty(), "an Exec recovers a loaded session");
        Self::new(request, session, Style::ExecStream { expected }, actor)
    }

    fn new(request: RequestId, session: String, style: Style, actor: Option<IdentityRef>) -> Self {
        Self {
            actor,
            request,
            style,
            session,
            row: None,
            log: Vec::new(),
            scan: ApprovalScan::default(),
            harness: String::new(),
            route: None,
            stage: Stage::Over,
            deadline: None,
            cancels: CancelCalls::default(),
            approver: None,
        }
    }

    fn head(&self) -> i64 {
        self.log.last().map_or(0, |r| r.seq)
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = Stage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    fn fail_turn(&mut self, cx: &mut Cx<'_>, e: &TurnError) -> Flow {
        let status = self.deadline.take().unwrap_or_else(|| mapping::resume(e));
        self.fail(cx, status)
    }

    fn stream(&self, cx: &mut Cx<'_>, record: Committed) {
        if matches!(self.style, Style::ExecStream { .. }) {
            cx.stream(self.request, StreamItem::Record(record));
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.session.is_empty() {
            return self.fail(cx, Status::invalid_argument("session is required"));
        }
        if !cx.try_guard(&self.session) {
            let msg = format!("session {:?} is busy", shown(&self.session));
            return self.fail(cx, Status::aborted(msg));
        }
        self.stage = Stage::Load(Load::start(cx, &self.session));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Load(load) => match load.on_outcome(cx, id, outcome) {
                Loaded::Pending(load) => {
                    self.stage = Stage::Load(load);
                    Flow::Continue
                }
                Loaded::Ready(row, log) => {
                    assert!(self.row.is_none() && self.log.is_empty(), "one load");
                    self.row = Some(row);
                    self.log = log.to_vec();
                    self.decide(cx)
                }
                Loaded::NotFound(status) | Loaded::Busy(status) | Loaded::Failed(status) => {
                    self.fail(cx, status)
                }
            },
            Stage::Check(mut check, gate) => match check.on_outcome(cx, id, outcome) {
                Checked::Pending => {
                    self.stage = Stage::Check(check, gate);
                    Flow::Continue
                }
                Checked::Allowed => self.recover(cx, gate),
                Checked::Refused(status) => self.fail(cx, status),
            },
            Stage::Repair {
                fence,
                append,
                call_id,
                exec_id,
                head,
            } => self.on_repair(cx, id, outcome, fence, append, call_id, exec_id, head),
            Stage::Place(mut placement, pending) => match placement.on_outcome(cx, id, outcome) {
                Placed::Pending => {
                    self.stage = Stage::Place(placement, pending);
                    Flow::Continue
                }
                Placed::Failed(status) => self.fail(cx, status),
                Placed::Ready => match pending {
                    Some(exec) => {
                        let read = cx.read_log(&self.session, self.head() + 1, 0);
                        self.stage = Stage::Recheck(placement, exec, read);
                        Flow::Continue
                    }
                    None => self.placed(cx, *placement, None),
                },
            },
            Stage::EndCancel {
                fence,
                append,
                exec_id,
            } => self.on_end_cancel(cx, id, outcome, fence, append, exec_id),
            Stage::Recheck(placement, exec, want) => {
                assert_eq!(want, id);
                self.rechecked(cx, *placement, exec, outcome)
            }
            Stage::Marker(want) => {
                assert_eq!(want, id);
                match outcome {
                    Outcome::Store(StoreOutcome::Appended(Ok(records))) => {
                        for r in records {
                            self.log.push(r.clone());
                            self.stream(cx, Committed::new(r));
                        }
                        self.reply_session(cx)
                    }
                    Outcome::Store(StoreOutcome::Appended(Err(e))) => {
                        self.fail(cx, mapping::append(&e, "resume"))
                    }
                    other => unexpected("resume", &other),
                }
            }
            Stage::Running(mut run) => {
                run.on_outcome(cx, id, outcome);
                self.after_run(cx, run)
            }
            Stage::Handoff(mut handoff) => match handoff.on_outcome(cx, id, outcome) {
                Handed::Pending => {
                    self.stage = Stage::Handoff(handoff);
                    Flow::Continue
                }
                Handed::Failed(e) => self.fail_turn(cx, &e),
                Handed::Done(records) => {
                    for r in records {
                        self.log.push(r.record().clone());
                        self.stream(cx, r);
                    }
                    self.reply_session(cx)
                }
            },
            Stage::Canceled(render) => self.on_canceled(cx, render, id, outcome),
            Stage::Final(mut render) => match render.on_outcome(cx, id, outcome) {
                Rendered::Pending => {
                    self.stage = Stage::Final(render);
                    Flow::Continue
                }
                Rendered::Done(s) => {
                    match self.style {
                        Style::Unary => cx.reply(self.request, Ok(Response::Session(*s))),
                        Style::ExecStream { .. } => {
                            cx.stream(self.request, StreamItem::Session(*s));
                            cx.reply(self.request, Ok(Response::StreamEnd));
                        }
                    }
                    Flow::Done
                }
                Rendered::NotFound => self.fail(cx, Status::internal("session vanished")),
                Rendered::Failed(status) => self.fail(cx, status),
            },
            // A finished operation is dropped by the host; nothing reaches it.
            Stage::Over => unreachable!("input for a finished operation"),
        }
    }

    /// Everything decided from the journal alone.
    fn decide(&mut self, cx: &mut Cx<'_>) -> Flow {
        let row = self.row.clone().expect("row loaded");
        if let Style::ExecStream { .. } = self.style {
            match render::session(&row, &self.log) {
                Ok(s) => cx.stream(self.request, StreamItem::Session(s)),
                Err(status) => return self.fail(cx, status),
            }
        }
        let scan = match approval::scan(&self.log, 0) {
            Ok(s) => s,
            Err(e) => return self.fail_turn(cx, &e.into()),
        };
        // A canceled execution's gate is resolved, receipt or not.
        let gate = scan
            .selected()
            .filter(|s| !s.has_receipt() && !s.completed)
            .cloned();
        self.scan = scan;
        if let Some(status) = self.approver_refusal(&row, gate.as_ref()) {
            return self.fail(cx, status);
        }
        if gate.as_ref().is_some_and(|g| g.inherited) {
            return self.fail_turn(cx, &LogError::InheritedToolIntent(String::new()).into());
        }
        let marker = match executions::resume_invocation(&self.log) {
            Ok(m) => m,
            Err(e) => return self.fail_turn(cx, &e.into()),
        };
        let recorded = marker
            .as_ref()
            .map(|m| m.harness.clone())
            .unwrap_or_default();
        let routed = if recorded.is_empty() {
            resolve(cx, &row.harness)
        } else {
            resolve_recorded(cx, &recorded)
        };
        let (harness, route) = match routed {
            Ok(r) => r,
            Err(status) => return self.fail(cx, status),
        };
        if let Style::ExecStream {
            expected: Some(expected),
        } = self.style
            && expected != self.head()
        {
            let msg = format!("resume: seq conflict (journal head is {})", self.head());
            return self.fail(cx, Status::aborted(msg));
        }
        if let Err(status) = check_resumed(cx, &self.session, &row.harness, &harness) {
            return self.fail(cx, status);
        }
        self.harness = harness.clone();
        self.route = Some(route.clone());
        // A recorded override is checked before the gate is repaired or
        // reported, and before any compute changes.
        if let Some(check) = OverrideCheck::start(cx, &row.harness, &harness, &route) {
            self.stage = Stage::Check(Box::new(check), gate);
            return Flow::Continue;
        }
        self.recover(cx, gate)
    }

    /// Why this caller may not resume: it holds no writer role on the
    /// session's project, only the approver role the gate admitted it by,
    /// and there is no decided, owned gate whose execution it would carry
    /// out. Decided before anything is provisioned or written.
    fn approver_refusal(&self, row: &SessionRow, gate: Option<&ApprovalState>) -> Option<Status> {
        let p = self.approver.as_ref()?;
        if p.may(Role::Writer, &row.project) {
            return None;
        }
        let decided =
            gate.is_some_and(|g| !g.inherited && g.request.is_some() && g.decision.is_some());
        if decided && p.may(Role::Approver, &row.project) {
            return None;
        }
        Some(Status::new(
            Code::PermissionDenied,
            format!(
                "permission denied: {:?} holds no writer role on this session's project; an approver may resume only an execution whose approval was decided and not yet carried out",
                shown(&p.name)
            ),
        ))
    }

    /// The journal allows recovery: repair or report the gate, or place the
    /// recorded harness and run the pending execution.
    fn recover(&mut self, cx: &mut Cx<'_>, gate: Option<ApprovalState>) -> Flow {
        let (harness, route) = (
            self.harness.clone(),
            self.route.clone().expect("routed before recovery"),
        );
        let canceled = executions::project(&self.log)
            .ok()
            .and_then(|p| executions::select_pending(&self.log, &p).ok().flatten())
            .filter(|e| e.canceled && !e.completed);
        if let Some(exec) = canceled {
            let fence = cx.mint_fence(&self.session);
            self.stage = Stage::EndCancel {
                fence,
                append: None,
                exec_id: exec.id,
            };
            return Flow::Continue;
        }
        if let Some(g) = gate {
            assert!(!g.inherited, "an inherited gate is refused before");
            debug_assert!(!g.has_receipt() && !g.completed);
            if g.request.is_none() {
                debug_assert!(g.decision.is_none(), "a decision follows its request");
                // A call-only cut: write the missing request, then park.
                let fence = cx.mint_fence(&self.session);
                self.stage = Stage::Repair {
                    fence: Some(fence),
                    append: None,
                    call_id: g.call.id.clone(),
                    exec_id: g.execution_id.clone(),
                    head: g.head,
                };
                return Flow::Continue;
            }
            if g.decision.is_none() {
                // Waiting for a human: nothing to run, nothing to write.
                return self.reply_session(cx);
            }
        }
        let projection = match executions::project(&self.log) {
            Ok(p) => p,
            Err(e) => return self.fail_turn(cx, &e.into()),
        };
        let pending = match executions::select_pending(&self.log, &projection) {
            Ok(p) => p,
            Err(e) => return self.fail_turn(cx, &e.into()),
        };
        if let Some(exec) = &pending {
            if let Err(e) = executions::check_inherited_intent(&self.log, exec) {
                return self.fail_turn(cx, &e.into());
            }
            if exec.kind == ExecKind::Legacy && self.session.is_empty() {
                return self.fail_turn(cx, &LogError::MissingSessionUid.into());
            }
        }
        let snapshot = last_suspend_ref(&self.log, &self.session);
        let placement = Placement::start(
            cx,
            harness,
            route,
            &self.session,
            Provision::Restore(snapshot),
            !crate::planted!(ResumeWithoutFence),
        );
        self.stage = Stage::Place(Box::new(placement), pending);
        Flow::Continue
    }

    #[allow(clippy::too_many_arguments)]
    fn on_repair(
        &mut self,
        cx: &mut Cx<'_>,
        id: EffectId,
        outcome: Outcome,
        fence: Option<EffectId>,
        append: Option<EffectId>,
        call_id: String,
        exec_id: String,
        head: i64,
    ) -> Flow {
        if fence == Some(id) {
            debug_assert!(append.is_none(), "the request is appended once fenced");
            let fence = match outcome {
                Outcome::Store(StoreOutcome::Fence(Ok(f))) => f,
                Outcome::Store(StoreOutcome::Fence(Err(e))) => {
                    return self.fail(cx, e.status("mint fence"));
                }
                other => unexpected("resume repair", &other),
            };
            assert!(fence > 0, "fences start at 1");
            let event = events::approval_request(&exec_id, &call_id);
            let append = cx.append(&self.session, head, fence, vec![event]);
            self.stage = Stage::Repair {
                fence: None,
                append: Some(append),
                call_id,
                exec_id,
                head,
            };
            return Flow::Continue;
        }
        assert_eq!(append, Some(id));
        assert!(fence.is_none(), "the fence was minted first");
        match outcome {
            Outcome::Store(StoreOutcome::Appended(Ok(records))) => {
                for r in records {
                    self.log.push(r.clone());
                    self.stream(cx, Committed::new(r));
                }
                self.reply_session(cx)
            }
            Outcome::Store(StoreOutcome::Appended(Err(e))) => {
                self.fail(cx, mapping::append(&e, "resume"))
            }
            other => unexpected("resume repair", &other),
        }
    }

    /// The journal past the decided head, read under the new fence. Only
    /// an unchanged journal lets the execution run: the recovery re-drives
    /// its trailing tool or model call before it appends anything, so a
    /// result another writer appended between the load and the mint would
    /// otherwise be executed twice (the append's CAS comes too late).
    fn rechecked(
        &mut self,
        cx: &mut Cx<'_>,
        placement: Placement,
        exec: Execution,
        outcome: Outcome,
    ) -> Flow {
        let conn = placement.conn.expect("placement dialed");
        assert!(
            !exec.id.is_empty() || exec.kind == ExecKind::Legacy,
            "a pending execution has an id unless it is legacy"
        );
        match outcome {
            Outcome::Store(StoreOutcome::Log(Ok(later))) if later.is_empty() => {
                self.placed(cx, placement, Some(exec))
            }
            Outcome::Store(StoreOutcome::Log(Ok(later))) => {
                cx.close(conn);
                let head = later.last().map_or(0, |r| r.seq);
                assert!(
                    head > self.head(),
                    "a read past the head returns later seqs"
                );
                let msg = format!(
                    "resume: seq conflict (journal head moved to {head} while this host fenced it)"
                );
                self.fail(cx, Status::aborted(msg))
            }
            Outcome::Store(StoreOutcome::Log(Err(e))) => {
                cx.close(conn);
                self.fail(cx, e.status("resume: read log"))
            }
            other => unexpected("resume recheck", &other),
        }
    }

    /// Placed and fenced: run the pending execution, or just mark RESUME.
    fn placed(
        &mut self,
        cx: &mut Cx<'_>,
        mut placement: Placement,
        pending: Option<Execution>,
    ) -> Flow {
        let conn = placement.conn.expect("placement dialed");
        if crate::planted!(ResumeWithoutFence) {
            // The planted bug skipped the mint in `decide`: it writes under
            // the previous incarnation's fence.
            placement.fence = self.log.iter().map(|r| r.fence).max().unwrap_or(1);
        }
        let Some(exec) = pending else {
            cx.close(conn);
            return self.append_resume(cx, placement.fence, self.head());
        };
        let descriptor = placement.descriptor.clone().expect("described");
        if let Some(marker) = &exec.marker {
            let check = if !marker.harness.is_empty() && marker.harness != self.harness {
                Some(TurnError::HarnessMismatch {
                    recorded: marker.harness.clone(),
                    serving: self.harness.clone(),
                })
            } else if !marker.harness_version.is_empty()
                && marker.harness_version != descriptor.version
            {
                Some(TurnError::HarnessVersionMismatch {
                    recorded: marker.harness_version.clone(),
                    serving: descriptor.version.clone(),
                })
            } else {
                None
            };
            if let Some(e) = check {
                cx.close(conn);
                return self.fail_turn(cx, &e);
            }
        }
        let approvals: Vec<_> = self.scan.for_execution(&exec.id).cloned().collect();
        if !approvals.is_empty() && needs_memory(&descriptor) {
            cx.close(conn);
            return self.fail_turn(cx, &TurnError::ApprovalUnavailable);
        }
        let legacy_turn = exec.kind == ExecKind::Legacy;
        let wire_id = if legacy_turn {
            let anchor = exec.anchor.and_then(|i| self.log.get(i));
            match anchor.map(|r| legacy::compat_invocation_id(&self.session, r)) {
                Some(Ok(id)) => id,
                Some(Err(e)) => {
                    cx.close(conn);
                    return self.fail_turn(cx, &e.into());
                }
                None => {
                    cx.close(conn);
                    return self
                        .fail_turn(cx, &LogError::invalid("legacy turn has no anchor").into());
                }
            }
        } else {
            exec.id.clone()
        };
        let marker = exec.marker.clone().unwrap_or_default();
        let history = History::from_events(
            self.log[..exec.start]
                .iter()
                .filter_map(|r| r.event.clone()),
        );
        debug_assert!(
            exec.start <= self.log.len()
                && exec
                    .stream
                    .iter()
                    .all(|i| (exec.start..self.log.len()).contains(i)),
            "the execution was projected from this journal"
        );
        let stream = exec.stream.iter().map(|&i| self.log[i].clone()).collect();
        let setup = Setup {
            session: self.session.clone(),
            execution_id: exec.id.clone(),
            wire_id: wire_id.clone(),
            mode: Mode::Resume,
            legacy: legacy_turn,
            stream,
            approvals,
            descriptor: Some(descriptor),
            fence: placement.fence,
            head: self.head(),
            head_hash: self.log.last().map(|r| r.content_hash.clone()),
            has_executor: cx.config().has_executor,
            tools: cx.config().tools.clone(),
            budget: self
                .row
                .as_ref()
                .and_then(|r| cx.config().token_budget(&r.labels))
                .map(|limit| TokenBudget {
                    limit,
                    used: crate::journal::tokens_in(&self.log),
                }),
        };
        let start = ControllerFrame {
            session: self.session.clone(),
            execution_id: wire_id,
            frame: Some(Frame::Start(Start {
                config: marker.config,
                history: Vec::new(),
                inputs: exec.inputs.clone(),
                identity: None,
                resume_from_seq: marker.resume_from_seq,
            })),
        };
        let stream_to = match self.style {
            Style::ExecStream { .. } => Some(self.request),
            Style::Unary => None,
        };
        let run = Run::start(cx, Invocation::new(setup), conn, start, history, stream_to);
        self.stage = Stage::Running(Box::new(run));
        Flow::Continue
    }

    fn append_resume(&mut self, cx: &mut Cx<'_>, fence: i64, head: i64) -> Flow {
        let marker = events::lifecycle(lifecycle::Kind::LifecycleResume, "");
        let event = events::by(marker, self.actor.as_ref());
        let append = cx.append_last(&self.session, head, fence, vec![event]);
        self.stage = Stage::Marker(append);
        Flow::Continue
    }

    fn after_run(&mut self, cx: &mut Cx<'_>, run: Box<Run>) -> Flow {
        let Some(finish) = run.finished().cloned() else {
            self.stage = Stage::Running(run);
            return Flow::Continue;
        };
        assert_eq!(run.inv.setup().mode, Mode::Resume, "a recovery resumes");
        run.signal_end(cx, &self.harness);
        self.cancels.settle(cx, &finish.ending, mapping::resume);
        match finish.ending {
            Ending::Completed => self.append_resume(cx, run.inv.setup().fence, finish.head),
            Ending::Failed(e) => self.fail_turn(cx, &e),
            Ending::Canceled => {
                let id = &run.inv.setup().execution_id;
                let msg = format!("execution {:?} canceled", shown(id));
                cx.reply(self.request, Err(Status::new(Code::Cancelled, msg)));
                self.stage = Stage::Canceled(Render::start(cx, &self.session));
                Flow::Continue
            }
            Ending::Parked(park) => {
                let route = self.route.clone().expect("routed");
                let handoff = Handoff::start(
                    cx,
                    &self.session,
                    &self.harness,
                    &route,
                    park,
                    run.inv.setup().fence,
                );
                self.stage = Stage::Handoff(Box::new(handoff));
                Flow::Continue
            }
        }
    }

    /// Replies with the session as it is now (unary), or the final frame.
    fn reply_session(&mut self, cx: &mut Cx<'_>) -> Flow {
        debug_assert!(
            matches!(self.stage, Stage::Over),
            "the session is rendered once, after every other stage"
        );
        self.stage = Stage::Final(Render::start(cx, &self.session));
        Flow::Continue
    }

    pub(crate) fn on_harness(
        &mut self,
        cx: &mut Cx<'_>,
        _conn: ConnId,
        input: HarnessInput,
    ) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Running(mut run) => {
                run.on_harness(cx, input);
                self.after_run(cx, run)
            }
            other => {
                self.stage = other;
                Flow::Continue
            }
        }
    }

    pub(crate) fn on_chunk(&mut self, cx: &mut Cx<'_>, id: EffectId, chunk: String) -> Flow {
        if let Stage::Running(run) = &mut self.stage
            && run.owns(id)
        {
            run.on_chunk(cx, chunk);
        }
        Flow::Continue
    }

    pub(crate) fn on_deadline(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Running(mut run) => {
                run.abort(cx, TurnError::DeadlineExceeded);
                self.deadline = Some(status);
                self.after_run(cx, run)
            }
            Stage::Place(p, _) => {
                if let Some(conn) = p.conn {
                    cx.close(conn);
                }
                self.fail(cx, status)
            }
            Stage::Recheck(p, _, _) => {
                cx.close(p.conn.expect("placement dialed"));
                self.fail(cx, status)
            }
            // A finished operation is dropped by the host; nothing reaches it.
            Stage::Over => unreachable!("input for a finished operation"),
            _ => self.fail(cx, status),
        }
    }
}
