//! Exec: run one turn and stream it.
//!
//! Order (errors before the first frame come back as a plain status):
//! auto-create or load the session; take the overlap guard; read the
//! journal; the approval preflight (new inputs wait while an owned gated
//! call lacks its receipt; no inputs recover it instead, see [`ResumeOp`]);
//! route the harness; send the Session frame; check the legacy boundary;
//! place (admit, provision, dial, fence); append EXECUTION_START and the
//! inputs in one transaction; run the harness; on a park, hand off.

use crate::vocab::StoreOutcome;
use crate::vocab::shown;
use agentsessions_proto::v1::{
    CancelRequest, ControllerFrame, ExecRequest, ExecutionStart, IdentityRef, LogRecord, Start,
    controller_frame::Frame,
};

use super::resume::ResumeOp;
use super::session::{new_row, put_error};
use crate::error::TurnError;
use crate::events;
use crate::invocation::{Ending, Invocation, Mode, Setup, TokenBudget};
use crate::journal::Journal;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::load::{Load, Loaded};
use crate::ops::stages::override_check::{Checked, OverrideCheck};
use crate::ops::stages::placement::{Placed, Placement, Provision};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::render;
use crate::ops::stages::routing::{for_turn, mapping, resolve};
use crate::ops::stages::run::{CancelCalls, Handed, Handoff, Run};
use crate::vocab::{
    Code, Committed, ConnId, EffectId, HarnessInput, Outcome, RequestId, Response, Route,
    SessionRow, Status, StreamItem,
};

enum Stage {
    Creating(EffectId, Box<SessionRow>),
    Load(Load),
    Check(Box<OverrideCheck>),
    Place(Box<Placement>),
    Starting(EffectId, Box<Placement>),
    Running(Box<Run>),
    Handoff(Box<Handoff>),
    Final(Render),
    /// The run was canceled: the Cancel callers get the session.
    Canceled(Render),
    Recovery(Box<ResumeOp>),
    Over,
}

/// One Exec call. See the module docs.
pub(crate) struct ExecOp {
    request: RequestId,
    req: ExecRequest,
    session: String,
    row: Option<SessionRow>,
    /// The journal as loaded (shared, with its summary); its events are
    /// the harness's history when the turn starts (empty from then on).
    log: Journal,
    harness: String,
    route: Option<Route>,
    stage: Stage,
    execution_id: String,
    deadline: Option<Status>,
    /// Cancel calls waiting for this turn's cancel to be durable.
    cancels: CancelCalls,
    /// The verified caller, recorded on the turn's header and inputs.
    actor: Option<IdentityRef>,
}

impl ExecOp {
    pub(crate) fn new(request: RequestId, req: ExecRequest, actor: Option<IdentityRef>) -> Self {
        Self {
            request,
            session: req.session.clone(),
            req,
            row: None,
            log: Journal::new(),
            harness: String::new(),
            route: None,
            stage: Stage::Over,
            execution_id: String::new(),
            deadline: None,
            cancels: CancelCalls::default(),
            actor,
        }
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = Stage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.req.deadline_unix > 0 {
            cx.set_deadline(self.req.deadline_unix.saturating_mul(1_000_000_000));
        }
        if self.session.is_empty() {
            // The verified caller is the creator however the session is
            // made; an implicit session must not be creatorless (a
            // separate approver's check needs it).
            let row = SessionRow {
                harness: self.req.harness.clone(),
                identity: self.actor.clone(),
                ..SessionRow::default()
            };
            let uid = cx.ids().session_uid();
            return match new_row(cx, uid, row) {
                Err(status) => self.fail(cx, status),
                Ok((row, check)) => {
                    assert!(!row.uid.is_empty(), "a new session has its uid");
                    self.session = row.uid.clone();
                    let put = row.clone();
                    let id = cx.put_session(put, Some(check));
                    self.stage = Stage::Creating(id, Box::new(row));
                    Flow::Continue
                }
            };
        }
        if !cx.try_guard(&self.session) {
            return self.fail(
                cx,
                Status::aborted(format!("session {:?} is busy", shown(&self.session))),
            );
        }
        self.stage = Stage::Load(Load::start(cx, &self.session));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Creating(want, row) => {
                assert_eq!(want, id);
                match outcome {
                    Outcome::Store(StoreOutcome::Put(Ok(()))) => {
                        let took = cx.try_guard(&self.session);
                        assert!(took, "a new session is free");
                        debug_assert!(self.row.is_none());
                        self.row = Some(*row);
                        self.routed(cx)
                    }
                    Outcome::Store(StoreOutcome::Put(Err(e))) => {
                        let status = put_error(&e, &row.harness);
                        self.fail(cx, status)
                    }
                    other => unexpected("exec", &other),
                }
            }
            Stage::Load(load) => {
                let loaded = load.on_outcome(cx, id, outcome);
                self.on_loaded(cx, loaded)
            }
            Stage::Check(mut check) => match check.on_outcome(cx, id, outcome) {
                Checked::Pending => {
                    self.stage = Stage::Check(check);
                    Flow::Continue
                }
                Checked::Allowed => self.place(cx),
                Checked::Refused(status) => self.fail(cx, status),
            },
            Stage::Place(mut placement) => match placement.on_outcome(cx, id, outcome) {
                Placed::Pending => {
                    self.stage = Stage::Place(placement);
                    Flow::Continue
                }
                Placed::Failed(status) => self.fail(cx, status),
                Placed::Ready => self.begin_turn(cx, *placement),
            },
            Stage::Starting(want, placement) => {
                assert_eq!(want, id);
                match outcome {
                    Outcome::Store(StoreOutcome::Appended(Ok(records))) => {
                        self.run_turn(cx, *placement, records)
                    }
                    Outcome::Store(StoreOutcome::Appended(Err(e))) => {
                        if let Some(conn) = placement.conn {
                            cx.close(conn);
                        }
                        self.fail(cx, mapping::append(&e, "exec"))
                    }
                    other => unexpected("exec", &other),
                }
            }
            Stage::Running(mut run) => {
                run.on_outcome(cx, id, outcome);
                self.after_run(cx, run)
            }
            Stage::Handoff(handoff) => self.on_handoff(cx, handoff, id, outcome),
            Stage::Final(render) => self.on_final(cx, render, id, outcome),
            Stage::Canceled(render) => self.on_canceled(cx, render, id, outcome),
            Stage::Recovery(mut op) => {
                let flow = op.on_outcome(cx, id, outcome);
                self.stage = Stage::Recovery(op);
                flow
            }
            // A finished operation is dropped by the host; nothing reaches it.
            Stage::Over => unreachable!("input for a finished operation"),
        }
    }

    /// The row and journal are read (or the load ended).
    fn on_loaded(&mut self, cx: &mut Cx<'_>, loaded: Loaded) -> Flow {
        match loaded {
            Loaded::Pending(load) => {
                self.stage = Stage::Load(load);
                Flow::Continue
            }
            Loaded::Ready(row, log) => {
                assert!(self.row.is_none(), "one load per Exec");
                self.row = Some(row);
                self.log = log;
                self.preflight(cx)
            }
            Loaded::NotFound(status) => {
                // An unknown override is the caller's first mistake.
                if !self.req.harness.is_empty()
                    && let Err(unknown) = resolve(cx, &self.req.harness)
                {
                    return self.fail(cx, unknown);
                }
                self.fail(cx, status)
            }
            Loaded::Busy(status) | Loaded::Failed(status) => self.fail(cx, status),
        }
    }

    /// The park handoff advanced; once done, the final Session frame.
    fn on_handoff(
        &mut self,
        cx: &mut Cx<'_>,
        mut handoff: Box<Handoff>,
        id: EffectId,
        outcome: Outcome,
    ) -> Flow {
        match handoff.on_outcome(cx, id, outcome) {
            Handed::Pending => {
                self.stage = Stage::Handoff(handoff);
                Flow::Continue
            }
            Handed::Failed(e) => self.fail(cx, mapping::exec(&e)),
            Handed::Done(records) => {
                for r in records {
                    cx.stream(self.request, StreamItem::Record(r));
                }
                self.stage = Stage::Final(Render::start(cx, &self.session));
                Flow::Continue
            }
        }
    }

    /// The final Session frame is rendered: stream it and end the call.
    fn on_final(
        &mut self,
        cx: &mut Cx<'_>,
        mut render: Render,
        id: EffectId,
        outcome: Outcome,
    ) -> Flow {
        match render.on_outcome(cx, id, outcome) {
            Rendered::Pending => {
                self.stage = Stage::Final(render);
                Flow::Continue
            }
            Rendered::Done(s) => {
                cx.stream(self.request, StreamItem::Session(*s));
                cx.reply(self.request, Ok(Response::StreamEnd));
                Flow::Done
            }
            Rendered::NotFound => self.fail(cx, Status::internal("session vanished")),
            Rendered::Failed(status) => self.fail(cx, status),
        }
    }

    /// The canceled session is rendered: every Cancel call gets it.
    fn on_canceled(
        &mut self,
        cx: &mut Cx<'_>,
        render: Render,
        id: EffectId,
        outcome: Outcome,
    ) -> Flow {
        match self.cancels.on_render(cx, render, id, outcome) {
            Some(render) => {
                self.stage = Stage::Canceled(render);
                Flow::Continue
            }
            None => Flow::Done,
        }
    }

    /// A Cancel for this session while this Exec holds it: only a running
    /// turn (or the recovery it runs) takes one (see `invocation::cancel`);
    /// it answers once the cancel records are durable.
    pub(crate) fn on_cancel_request(
        &mut self,
        cx: &mut Cx<'_>,
        request: RequestId,
        req: &CancelRequest,
        actor: Option<&IdentityRef>,
    ) -> Flow {
        debug_assert_eq!(
            req.session, self.session,
            "a Cancel is routed by the guard of its session"
        );
        match &mut self.stage {
            Stage::Recovery(op) => op.on_cancel_request(cx, request, req, actor),
            Stage::Running(_) => {
                let Stage::Running(mut run) = std::mem::replace(&mut self.stage, Stage::Over)
                else {
                    unreachable!("matched above");
                };
                self.cancels.offer(cx, &mut run, request, req, actor);
                self.after_run(cx, run)
            }
            _ => {
                let busy = format!(
                    "cancel: session {:?} is starting or finishing a turn; retry",
                    shown(&self.session)
                );
                cx.reply(request, Err(Status::aborted(busy)));
                Flow::Continue
            }
        }
    }

    /// The approval preflight and routing, then the first frame.
    fn preflight(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.row.is_some(), "the preflight reads the loaded journal");
        // From the summary: the whole journal is not rescanned per turn.
        let selected = match self.log.summary().selected_gate() {
            Ok(s) => s,
            Err(e) => return self.fail(cx, mapping::exec(&e.into())),
        };
        if let Some(state) = selected.filter(|s| !s.completed) {
            if self.req.inputs.is_empty() {
                // An inputless Exec on an approval-bearing turn recovers it.
                let mut op = ResumeOp::exec_recovery(
                    self.request,
                    self.session.clone(),
                    self.req.expected_last_seq,
                    self.actor.clone(),
                );
                let flow = op.start(cx);
                self.stage = Stage::Recovery(Box::new(op));
                return flow;
            }
            if !state.inherited && !state.has_receipt() {
                return self.fail(cx, mapping::exec(&TurnError::ApprovalBlocked));
            }
        }
        self.routed(cx)
    }

    fn routed(&mut self, cx: &mut Cx<'_>) -> Flow {
        let row = self.row.clone().expect("row loaded");
        assert!(self.route.is_none(), "an Exec routes once");
        let (harness, route) = match for_turn(cx, &self.session, &row.harness, &self.req.harness) {
            Ok(r) => r,
            Err(status) => return self.fail(cx, status),
        };
        self.harness = harness;
        self.route = Some(route.clone());
        match render::session_of(&row, &self.log) {
            Ok(s) => cx.stream(self.request, StreamItem::Session(s)),
            Err(status) => return self.fail(cx, status),
        }
        // An ambiguous legacy boundary is refused before any harness work.
        if let Err(e) = self.log.summary().legacy_prefix() {
            return self.fail(cx, mapping::exec(&e.into()));
        }
        if let Some(check) = OverrideCheck::start(cx, &row.harness, &self.harness, &route) {
            self.stage = Stage::Check(Box::new(check));
            return Flow::Continue;
        }
        self.place(cx)
    }

    /// Admit, provision, dial and fence the turn's harness.
    fn place(&mut self, cx: &mut Cx<'_>) -> Flow {
        let route = self.route.clone().expect("routed");
        let placement = Placement::start(
            cx,
            self.harness.clone(),
            route,
            &self.session,
            Provision::Create,
            true,
        );
        self.stage = Stage::Place(Box::new(placement));
        Flow::Continue
    }

    /// Placement is ready: write the turn's header and inputs, then run.
    fn begin_turn(&mut self, cx: &mut Cx<'_>, placement: Placement) -> Flow {
        assert!(
            placement.fence > 0,
            "a turn writes under the fence it minted"
        );
        assert!(placement.conn.is_some(), "a turn's harness is dialed");
        assert!(self.execution_id.is_empty(), "one execution per Exec");
        let head = self.log.head();
        let expected = self.req.expected_last_seq.unwrap_or(head);
        let descriptor = placement.descriptor.clone().expect("placement described");
        self.execution_id = cx.ids().execution_id();
        let start = ExecutionStart {
            config: self.req.config.clone(),
            resume_from_seq: self.req.resume_from_seq,
            input_count: Some(self.req.inputs.len() as i64),
            harness: self.harness.clone(),
            harness_version: descriptor.version.clone(),
        };
        let actor = self.actor.as_ref();
        let header = events::execution_start(&self.execution_id, start);
        let mut batch = vec![events::by(header, actor)];
        batch.extend(
            self.req
                .inputs
                .iter()
                .map(|m| events::by(events::input(&self.execution_id, m.clone()), actor)),
        );
        let id = cx.append(&self.session, expected, placement.fence, batch);
        self.stage = Stage::Starting(id, Box::new(placement));
        Flow::Continue
    }

    /// The header and inputs are durable: send Start and serve the harness.
    fn run_turn(&mut self, cx: &mut Cx<'_>, placement: Placement, records: Vec<LogRecord>) -> Flow {
        let labels = self.row.as_ref().map(|r| &r.labels);
        let budget = labels
            .and_then(|l| cx.config().token_budget(l))
            .map(|limit| TokenBudget {
                limit,
                used: self.log.summary().tokens(),
            });
        assert!(
            !self.execution_id.is_empty(),
            "the header named the execution"
        );
        // The loaded journal is not read again in this turn (a stateless
        // harness gets the whole history every turn).
        let history = std::mem::take(&mut self.log).history();
        let head = records.last().map_or(0, |r| r.seq);
        let head_hash = records.last().map(|r| r.content_hash.clone());
        for r in records {
            cx.stream(self.request, StreamItem::Record(Committed::new(r)));
        }
        let conn = placement.conn.expect("placement dialed");
        let setup = Setup {
            session: self.session.clone(),
            execution_id: self.execution_id.clone(),
            wire_id: self.execution_id.clone(),
            mode: Mode::Live,
            legacy: false,
            stream: Vec::new(),
            approvals: Vec::new(),
            descriptor: placement.descriptor.clone(),
            fence: placement.fence,
            head,
            head_hash,
            has_executor: cx.config().has_executor,
            tools: cx.config().tools.clone(),
            budget,
        };
        let start = ControllerFrame {
            session: self.session.clone(),
            execution_id: self.execution_id.clone(),
            frame: Some(Frame::Start(Start {
                config: self.req.config.clone(),
                history: Vec::new(),
                inputs: self.req.inputs.clone(),
                identity: None,
                resume_from_seq: self.req.resume_from_seq,
            })),
        };
        // Whatever ends the run ends the Exec: its last append may release.
        let run = Run::start(
            cx,
            Invocation::new(setup),
            conn,
            start,
            history,
            Some(self.request),
        )
        .ending_the_operation();
        self.stage = Stage::Running(Box::new(run));
        Flow::Continue
    }

    /// After any step of the run: finish when the invocation is over.
    fn after_run(&mut self, cx: &mut Cx<'_>, run: Box<Run>) -> Flow {
        let Some(finish) = run.finished().cloned() else {
            self.stage = Stage::Running(run);
            return Flow::Continue;
        };
        assert_eq!(
            run.inv.setup().execution_id,
            self.execution_id,
            "the run is this Exec's turn"
        );
        // The turn ended on its own (or the cancel could not be written).
        run.signal_end(cx, &self.harness);
        self.cancels.settle(cx, &finish.ending, mapping::exec);
        match finish.ending {
            Ending::Completed => {
                cx.reply(self.request, Ok(Response::StreamEnd));
                Flow::Done
            }
            Ending::Canceled => {
                let msg = format!("execution {:?} canceled", shown(&self.execution_id));
                cx.reply(self.request, Err(Status::new(Code::Cancelled, msg)));
                self.stage = Stage::Canceled(Render::start(cx, &self.session));
                Flow::Continue
            }
            Ending::Failed(e) => {
                let status = self.deadline.take().unwrap_or_else(|| mapping::exec(&e));
                self.fail(cx, status)
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

    pub(crate) fn on_harness(
        &mut self,
        cx: &mut Cx<'_>,
        conn: ConnId,
        input: HarnessInput,
    ) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Running(mut run) => {
                run.on_harness(cx, input);
                self.after_run(cx, run)
            }
            Stage::Recovery(mut op) => {
                let flow = op.on_harness(cx, conn, input);
                self.stage = Stage::Recovery(op);
                flow
            }
            // Input before Start was sent, or after the run ended, is noise.
            other => {
                self.stage = other;
                Flow::Continue
            }
        }
    }

    pub(crate) fn on_chunk(&mut self, cx: &mut Cx<'_>, id: EffectId, chunk: String) -> Flow {
        match &mut self.stage {
            Stage::Running(run) if run.owns(id) => run.on_chunk(cx, chunk),
            Stage::Recovery(op) => return op.on_chunk(cx, id, chunk),
            _ => {}
        }
        Flow::Continue
    }

    /// The caller's deadline passed or it went away.
    pub(crate) fn on_deadline(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        match std::mem::replace(&mut self.stage, Stage::Over) {
            Stage::Running(mut run) => {
                let err = if status.code == crate::vocab::Code::DeadlineExceeded {
                    TurnError::DeadlineExceeded
                } else {
                    TurnError::Harness("client cancelled".into())
                };
                run.abort(cx, err);
                self.deadline = Some(status);
                self.after_run(cx, run)
            }
            Stage::Recovery(mut op) => {
                let flow = op.on_deadline(cx, status);
                self.stage = Stage::Recovery(op);
                flow
            }
            Stage::Place(p) => {
                if let Some(conn) = p.conn {
                    cx.close(conn);
                }
                self.fail(cx, status)
            }
            // The turn already answered CANCELLED; the render is the Cancel
            // calls', which a deadline or a gone client does not cut.
            Stage::Canceled(render) => {
                self.stage = Stage::Canceled(render);
                Flow::Continue
            }
            // A finished operation is dropped by the host; nothing reaches it.
            Stage::Over => unreachable!("input for a finished operation"),
            _ => self.fail(cx, status),
        }
    }
}
