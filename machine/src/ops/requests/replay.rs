//! Replay (read-only record stream) and ReplayHarness (re-run the harness
//! over the journal with every effect served).

use agentsessions_proto::v1::{
    ControllerFrame, HarnessDescriptor, LogRecord, ReplayRequest, Start, controller_frame::Frame,
};

use crate::error::{LogError, TurnError};
use crate::invocation::{Ending, Invocation, Mode, Setup};
use crate::journal::approval::{self, ApprovalScan};
use crate::journal::executions::{self, ExecKind, Execution};
use crate::journal::legacy;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::placement::{Placed, Placement, Provision, needs_memory};
use crate::ops::stages::routing::resolve;
use crate::ops::stages::run::Run;
use crate::vocab::PageFill;
use crate::vocab::config::{REPLAY_PAGE, REPLAY_PAGE_BYTES};
use crate::vocab::shown;
use crate::vocab::{AppendError, History};
use crate::vocab::{
    Committed, ConnId, Effect, EffectId, HarnessEffect, HarnessFailure, HarnessInput,
    HarnessOutcome, Outcome, ReplayReport, RequestId, Response, Route, RuntimeCall, RuntimeOp,
    RuntimeReply, Status, StoreOutcome, StreamItem,
};

/// Sessions.Replay: committed records, verbatim, in pages. No validation:
/// an unknown session is an empty stream.
pub(crate) struct ReplayOp {
    request: RequestId,
    req: ReplayRequest,
    next: i64,
    read: Option<EffectId>,
}

impl ReplayOp {
    pub(crate) fn new(request: RequestId, req: ReplayRequest) -> Self {
        Self {
            request,
            next: req.from_seq.max(1),
            req,
            read: None,
        }
    }

    fn read_page(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.next >= 1, "seqs count from 1");
        assert!(self.read.is_none(), "one page in flight");
        let last = self.next + REPLAY_PAGE - 1;
        let to_seq = if self.req.to_seq > 0 {
            last.min(self.req.to_seq)
        } else {
            last
        };
        if self.req.to_seq > 0 && self.next > self.req.to_seq {
            cx.reply(self.request, Ok(Response::StreamEnd));
            return Flow::Done;
        }
        let (session, from_seq) = (self.req.session.clone(), self.next);
        self.read = Some(cx.read_page(self.request, &session, from_seq, to_seq));
        Flow::Continue
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        self.read_page(cx)
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        assert_eq!(self.read.take(), Some(id));
        let records = match outcome {
            Outcome::Store(StoreOutcome::Log(Ok(r))) => r,
            Outcome::Store(StoreOutcome::Log(Err(e))) => {
                cx.reply(self.request, Err(e.status("read")));
                return Flow::Done;
            }
            other => unexpected("replay", &other),
        };
        // A page stops at REPLAY_PAGE records or once past its byte bound;
        // anything shorter is the end (see `Pace`).
        let mut fill = PageFill::new(REPLAY_PAGE_BYTES);
        let full = records.len() as i64 == REPLAY_PAGE || records.iter().any(|r| fill.add(r));
        for r in records {
            assert!(r.seq >= self.next, "reads come back in seq order");
            self.next = r.seq + 1;
            cx.stream(self.request, StreamItem::Record(Committed::new(r)));
        }
        if full {
            return self.read_page(cx);
        }
        cx.reply(self.request, Ok(Response::StreamEnd));
        Flow::Done
    }
}

/// ReplayHarness: re-runs the harness over every completed execution with
/// every recorded effect served back (controller replay, invariants I0–I5).
///
/// Everything that depends only on the journal (projection, approval scan,
/// selection) is decided first; then, when some execution pinned a harness
/// identity or gates a call, the route is described once and *every*
/// selected execution is checked before the first one runs, so a mismatch
/// late in the log leaves nothing half-replayed. Each execution then gets
/// its own incarnation and connection and runs in [`Mode::Replay`], which
/// cannot append; no fence is minted, so replay never supersedes a writer.
pub(crate) struct ReplayHarnessOp {
    request: RequestId,
    session: String,
    stage: HarnessStage,
    log: Vec<LogRecord>,
    scan: ApprovalScan,
    selected: Vec<Execution>,
    harness: String,
    route: Option<Route>,
    descriptor: Option<HarnessDescriptor>,
    /// Index into `selected` of the execution being replayed.
    next: usize,
    outputs: Vec<String>,
}

enum HarnessStage {
    Row(EffectId),
    Log(EffectId),
    Describe(Box<Placement>),
    Create(EffectId),
    Dial(EffectId, ConnId),
    Running(Box<Run>),
    Over,
}

/// How a replay failure reaches the caller: evidence the journal itself
/// contradicts (or a harness that cannot serve it) is the caller's
/// precondition; a harness that no longer reproduces its own journal is a
/// divergence, reported as INTERNAL with its text.
fn replay_status(e: &TurnError) -> Status {
    let precondition = match e {
        TurnError::Log(l) => l.is_invalid_log() || matches!(l, LogError::MissingSessionUid),
        TurnError::HarnessMismatch { .. }
        | TurnError::HarnessVersionMismatch { .. }
        | TurnError::ApprovalUnavailable => true,
        _ => false,
    };
    let status = if precondition {
        Status::failed_precondition(format!("replay: {e}"))
    } else if let TurnError::Store(f) | TurnError::Append(AppendError::Failed(f)) = e {
        f.status("replay")
    } else if matches!(e, TurnError::HarnessUnavailable(_)) {
        Status::unavailable(format!("replay: {e}"))
    } else {
        Status::internal(format!("replay: {e}"))
    };
    debug_assert_ne!(status.code, crate::vocab::Code::Ok, "a failed replay fails");
    status
}

/// The identity check of one execution against the described harness.
fn check_identity(
    exec: &Execution,
    serving: &str,
    descriptor: &HarnessDescriptor,
    gated: bool,
) -> Result<(), TurnError> {
    if let Some(marker) = &exec.marker {
        if !marker.harness.is_empty() && marker.harness != serving {
            return Err(TurnError::HarnessMismatch {
                recorded: marker.harness.clone(),
                serving: serving.to_owned(),
            });
        }
        // Exact comparison: an empty served version mismatches too.
        if !marker.harness_version.is_empty() && marker.harness_version != descriptor.version {
            return Err(TurnError::HarnessVersionMismatch {
                recorded: marker.harness_version.clone(),
                serving: descriptor.version.clone(),
            });
        }
    }
    if gated && needs_memory(descriptor) {
        return Err(TurnError::ApprovalUnavailable);
    }
    Ok(())
}

impl ReplayHarnessOp {
    pub(crate) fn new(request: RequestId, session: String) -> Self {
        Self {
            request,
            session,
            stage: HarnessStage::Over,
            log: Vec::new(),
            scan: ApprovalScan::default(),
            selected: Vec::new(),
            harness: String::new(),
            route: None,
            descriptor: None,
            next: 0,
            outputs: Vec::new(),
        }
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = HarnessStage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.session.is_empty() {
            return self.fail(cx, Status::invalid_argument("session is required"));
        }
        let session = self.session.clone();
        self.stage = HarnessStage::Row(cx.get_session(&session));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match (
            std::mem::replace(&mut self.stage, HarnessStage::Over),
            outcome,
        ) {
            (HarnessStage::Row(want), Outcome::Store(StoreOutcome::Session(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(Some(row)) => self.routed(cx, &row.harness),
                    Ok(None) => {
                        let msg = format!("session {:?} not found", shown(&self.session));
                        self.fail(cx, Status::not_found(msg))
                    }
                    Err(e) => self.fail(cx, e.status("session")),
                }
            }
            (HarnessStage::Log(want), Outcome::Store(StoreOutcome::Log(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(log) => self.select(cx, log),
                    Err(e) => self.fail(cx, e.status("replay: read")),
                }
            }
            (HarnessStage::Describe(mut placement), outcome) => {
                match placement.on_outcome(cx, id, outcome) {
                    Placed::Pending => {
                        self.stage = HarnessStage::Describe(placement);
                        Flow::Continue
                    }
                    Placed::Failed(status) => self.fail(cx, status),
                    Placed::Ready => {
                        let descriptor = placement.descriptor.clone().expect("described");
                        self.preflight(cx, descriptor)
                    }
                }
            }
            (HarnessStage::Create(want), Outcome::Runtime(r)) => {
                assert_eq!(want, id);
                assert!(
                    self.next < self.selected.len(),
                    "an incarnation per execution"
                );
                let address = match r {
                    Ok(RuntimeReply::Incarnation { address }) => address,
                    Ok(other) => {
                        let msg = format!(
                            "replay: runtime returned {other:?} where an incarnation was expected"
                        );
                        return self.fail(cx, Status::internal(msg));
                    }
                    Err(e) => return self.fail(cx, Status::internal(format!("replay: {e}"))),
                };
                let conn = cx.new_conn();
                let route = self.route.clone().expect("routed");
                let harness = self.harness.clone();
                let dial = cx.request(|id| {
                    Effect::Harness(HarnessEffect::Dial {
                        id,
                        harness,
                        backend: route.backend,
                        address,
                        conn,
                    })
                });
                self.stage = HarnessStage::Dial(dial, conn);
                Flow::Continue
            }
            (HarnessStage::Dial(want, conn), Outcome::Harness(HarnessOutcome::Dialed(r))) => {
                assert_eq!(want, id);
                debug_assert!(self.next < self.selected.len());
                match r {
                    Ok(()) => self.run(cx, conn),
                    Err(e) => {
                        cx.close(conn);
                        let status = match e {
                            HarnessFailure::Unavailable(_) | HarnessFailure::Timeout => {
                                Status::unavailable(format!("replay: dial harness: {e:?}"))
                            }
                            HarnessFailure::Other { .. } => {
                                Status::internal(format!("replay: dial harness: {e:?}"))
                            }
                        };
                        self.fail(cx, status)
                    }
                }
            }
            (HarnessStage::Running(mut run), outcome) => {
                // A replay run issues no effects; only a broken shell lands
                // here, and `Run` rejects an outcome it did not ask for.
                run.on_outcome(cx, id, outcome);
                self.after_run(cx, run)
            }
            (_, other) => unexpected("replay harness", &other),
        }
    }

    pub(crate) fn on_harness(&mut self, cx: &mut Cx<'_>, _c: ConnId, input: HarnessInput) -> Flow {
        match std::mem::replace(&mut self.stage, HarnessStage::Over) {
            HarnessStage::Running(mut run) => {
                run.on_harness(cx, input);
                self.after_run(cx, run)
            }
            other => {
                self.stage = other;
                Flow::Continue
            }
        }
    }

    fn routed(&mut self, cx: &mut Cx<'_>, stored: &str) -> Flow {
        match resolve(cx, stored) {
            Ok((harness, route)) => {
                self.harness = harness;
                self.route = Some(route);
            }
            Err(status) => return self.fail(cx, status),
        }
        self.stage = HarnessStage::Log(cx.read_log(&self.session, 1, 0));
        Flow::Continue
    }

    /// Projection, approval scan and selection: all before any harness IO.
    fn select(&mut self, cx: &mut Cx<'_>, log: Vec<LogRecord>) -> Flow {
        let projection = match executions::project(&log) {
            Ok(p) => p,
            Err(e) => return self.fail(cx, replay_status(&e.into())),
        };
        self.scan = match approval::scan(&log, 0) {
            Ok(s) => s,
            Err(e) => return self.fail(cx, replay_status(&e.into())),
        };
        let selected = executions::replay_selection(&projection);
        debug_assert!(
            selected.iter().all(|e| !e.canceled),
            "a canceled execution is never replayed"
        );
        assert_eq!(self.next, 0, "replay starts at the first execution");
        let describe = executions::needs_describe(&selected, &log);
        self.selected = selected.into_iter().cloned().collect();
        self.log = log;
        if !describe {
            return self.next_execution(cx);
        }
        let route = self.route.clone().expect("routed");
        let placement = Placement::start(
            cx,
            self.harness.clone(),
            route,
            &self.session,
            Provision::AdmitOnly,
            false,
        );
        self.stage = HarnessStage::Describe(Box::new(placement));
        Flow::Continue
    }

    /// Checks every selected execution against the one Describe.
    fn preflight(&mut self, cx: &mut Cx<'_>, descriptor: HarnessDescriptor) -> Flow {
        assert!(self.descriptor.is_none(), "described once, before any run");
        for exec in &self.selected {
            let gated = self.scan.for_execution(&exec.id).next().is_some();
            if let Err(e) = check_identity(exec, &self.harness, &descriptor, gated) {
                return self.fail(cx, replay_status(&e));
            }
        }
        self.descriptor = Some(descriptor);
        self.next_execution(cx)
    }

    /// Provisions the next execution's incarnation, or replies when all ran.
    fn next_execution(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.next <= self.selected.len());
        if self.next >= self.selected.len() {
            let report = ReplayReport {
                executions: self.selected.len(),
                outputs: std::mem::take(&mut self.outputs),
            };
            cx.reply(self.request, Ok(Response::Replayed(report)));
            return Flow::Done;
        }
        let route = self.route.clone().expect("routed");
        let (harness, session) = (self.harness.clone(), self.session.clone());
        self.stage = HarnessStage::Create(cx.request(|id| {
            Effect::Runtime(RuntimeCall {
                id,
                harness,
                backend: route.backend,
                op: RuntimeOp::Create { session },
            })
        }));
        Flow::Continue
    }

    /// Connected: rebuild the execution's Start and serve it.
    fn run(&mut self, cx: &mut Cx<'_>, conn: ConnId) -> Flow {
        assert!(
            self.next < self.selected.len(),
            "a run per selected execution"
        );
        let exec = &self.selected[self.next];
        debug_assert!(
            exec.history_end <= self.log.len() && exec.stream.iter().all(|&i| i < self.log.len()),
            "the execution was projected from this journal"
        );
        let legacy_turn = exec.kind == ExecKind::Legacy;
        let wire_id = if legacy_turn {
            // A v0.1.2 harness saw no id; replay hands it the same derived
            // compatibility id a resumed legacy turn gets.
            let anchor = exec.anchor.and_then(|i| self.log.get(i));
            match anchor.map(|r| legacy::compat_invocation_id(&self.session, r)) {
                Some(Ok(id)) => id,
                Some(Err(e)) => {
                    cx.close(conn);
                    return self.fail(cx, replay_status(&e.into()));
                }
                None => {
                    cx.close(conn);
                    let e = LogError::invalid("legacy turn has no anchor record");
                    return self.fail(cx, replay_status(&e.into()));
                }
            }
        } else {
            exec.id.clone()
        };
        let marker = exec.marker.clone().unwrap_or_default();
        // Legacy replay hands over the whole trimmed prefix, turn included
        // (what the released host did); everything else the records before
        // the execution. `history_end` encodes both.
        let history = History::from_events(
            self.log[..exec.history_end]
                .iter()
                .filter_map(|r| r.event.clone()),
        );
        let stream = exec.stream.iter().map(|&i| self.log[i].clone()).collect();
        let approvals = self.scan.for_execution(&exec.id).cloned().collect();
        let setup = Setup {
            session: self.session.clone(),
            execution_id: exec.id.clone(),
            wire_id: wire_id.clone(),
            mode: Mode::Replay,
            legacy: legacy_turn,
            stream,
            approvals,
            descriptor: self.descriptor.clone(),
            fence: 0,
            head: self.log.last().map_or(0, |r| r.seq),
            head_hash: self.log.last().map(|r| r.content_hash.clone()),
            has_executor: cx.config().has_executor,
            tools: cx.config().tools.clone(),
            // Replay serves recorded calls; it never asks a model.
            budget: None,
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
        let run = Run::start(cx, Invocation::new(setup), conn, start, history, None);
        self.stage = HarnessStage::Running(Box::new(run));
        Flow::Continue
    }

    fn after_run(&mut self, cx: &mut Cx<'_>, run: Box<Run>) -> Flow {
        let Some(finish) = run.finished().cloned() else {
            self.stage = HarnessStage::Running(run);
            return Flow::Continue;
        };
        assert_eq!(
            run.inv.setup().mode,
            Mode::Replay,
            "a replay runs in replay mode"
        );
        match finish.ending {
            Ending::Completed => {
                assert_eq!(finish.model_calls, 0, "replay never invokes the model (I1)");
                assert_eq!(finish.tool_calls, 0, "replay never executes a tool (I3)");
                self.outputs.extend(finish.outputs);
                self.next += 1;
                self.next_execution(cx)
            }
            Ending::Failed(e) => self.fail(cx, replay_status(&e)),
            Ending::Canceled => unreachable!("a replay refuses a Cancel"),
            Ending::Parked(_) => {
                let msg = "replay: a replayed execution parked; replay serves recorded decisions";
                self.fail(cx, Status::internal(msg))
            }
        }
    }
}
