//! Driving an [`Invocation`] with real effects, and the park handoff.

use agentsessions_proto::v1::{
    ApprovalRef, CancelRequest, ControllerFrame, Delta, IdentityRef, LogRecord, SnapshotRef,
};

use crate::ops::stages::present::{Render, Rendered};

use crate::error::{LogError, TurnError};
use crate::events;
use crate::invocation::{Action, CancelRefusal, Ending, Finish, Invocation, Mode};
use crate::journal::approval;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::unexpected;
use crate::vocab::shown;
use crate::vocab::{
    Committed, ConnId, Effect, EffectId, ExecuteTool, HarnessEffect, HarnessInput, History,
    InvokeModel, Nanos, Outcome, RequestId, Response, Route, RuntimeCall, RuntimeOp, RuntimeReply,
    Signal, Status, StoreOutcome, StreamItem, TurnOutcome,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    Append,
    Model,
    Tool,
}

/// An invocation bound to a connection and a fence.
pub(crate) struct Run {
    pub(crate) inv: Invocation,
    conn: ConnId,
    fence: i64,
    stream_to: Option<RequestId>,
    pending: Option<(EffectId, Pending)>,
    /// The run's last append is its operation's last write too, and ends
    /// the lease (see [`Run::ending_the_operation`]).
    releases: bool,
    /// When the Start frame went out: a turn's duration runs from here.
    started: Nanos,
}

impl Run {
    /// Sends `start` on `conn` and begins serving the harness.
    pub(crate) fn start(
        cx: &mut Cx<'_>,
        inv: Invocation,
        conn: ConnId,
        start: ControllerFrame,
        history: History,
        stream_to: Option<RequestId>,
    ) -> Self {
        let mode = inv.setup().mode;
        assert!(
            inv.setup().fence > 0 || mode == Mode::Replay,
            "a run that writes holds a minted fence"
        );
        assert!(
            mode != Mode::Replay || stream_to.is_none(),
            "a replay streams nothing to a client"
        );
        cx.emit(Effect::Harness(HarnessEffect::Send {
            conn,
            frame: start,
            history: Some(history),
        }));
        let fence = inv.setup().fence;
        Self {
            inv,
            conn,
            fence,
            stream_to,
            pending: None,
            releases: false,
            started: cx.now(),
        }
    }

    /// Signals how this finished live run on `harness` ended (a replay is
    /// not a turn). A park also marks the session awaiting: its
    /// APPROVAL_REQUEST is durable by now.
    pub(crate) fn signal_end(&self, cx: &mut Cx<'_>, harness: &str) {
        let finish = self.finished().expect("signalled once finished");
        assert_ne!(
            self.inv.setup().mode,
            Mode::Replay,
            "a replay is not a turn"
        );
        let outcome = match finish.ending {
            Ending::Completed => TurnOutcome::Completed,
            Ending::Parked(_) => TurnOutcome::Parked,
            Ending::Failed(_) => TurnOutcome::Failed,
            Ending::Canceled => TurnOutcome::Canceled,
        };
        if outcome == TurnOutcome::Parked {
            cx.signal_awaiting(&self.inv.setup().session, true);
        }
        let took = cx.now().saturating_sub(self.started);
        cx.signal(Signal::TurnEnded {
            harness: harness.to_owned(),
            outcome,
            took,
        });
    }

    /// Marks the run's end as its operation's end: the run's last append
    /// (END, the cancel records, an ERROR) carries the lease release.
    pub(crate) fn ending_the_operation(mut self) -> Self {
        assert!(!self.releases, "marked once");
        assert_ne!(
            self.inv.setup().mode,
            Mode::Replay,
            "a replay writes nothing"
        );
        self.releases = true;
        self
    }

    /// The final report, once the run is over.
    pub(crate) fn finished(&self) -> Option<&Finish> {
        // A run is over only when nothing of it is outstanding.
        self.inv.finished().filter(|_| self.pending.is_none())
    }

    /// True when `id` is this run's outstanding effect.
    pub(crate) fn owns(&self, id: EffectId) -> bool {
        self.pending.is_some_and(|(p, _)| p == id)
    }

    /// Input from the harness connection.
    pub(crate) fn on_harness(&mut self, cx: &mut Cx<'_>, input: HarnessInput) {
        debug_assert!(self.finished().is_none(), "a finished run is not fed");
        let mut out = Vec::new();
        self.inv.on_harness(input, cx.ids(), &mut out);
        self.apply(cx, out);
    }

    /// A streamed model chunk: forwarded to the client as a delta.
    pub(crate) fn on_chunk(&mut self, cx: &mut Cx<'_>, chunk: String) {
        assert!(
            matches!(self.pending, Some((_, Pending::Model))),
            "chunks stream only from the outstanding model call"
        );
        debug_assert!(
            self.stream_to.is_some(),
            "only a streaming run wants chunks"
        );
        if chunk.is_empty() {
            return;
        }
        if let Some(request) = self.stream_to {
            let execution_id = self.inv.setup().wire_id.clone();
            cx.stream(
                request,
                StreamItem::Delta(Delta {
                    execution_id,
                    part_index: 0,
                    chunk,
                    done: false,
                }),
            );
        }
    }

    /// A client's Cancel: see `invocation::cancel`. An outstanding model
    /// call is abandoned here, so its answer never reaches the run; an
    /// outstanding tool call is interrupted and its answer still awaited.
    pub(crate) fn cancel(
        &mut self,
        cx: &mut Cx<'_>,
        reason: &str,
        actor: Option<&IdentityRef>,
    ) -> Result<(), CancelRefusal> {
        let mut out = Vec::new();
        self.inv.cancel_by(reason, actor, &mut out)?;
        // Only a first Cancel can meet a model call: once canceling, the
        // run invokes nothing.
        if let Some((id, Pending::Model)) = self.pending {
            self.pending = None;
            cx.abandon_model(id);
        }
        self.apply(cx, out);
        Ok(())
    }

    /// Ends the run from outside (deadline, cancellation).
    pub(crate) fn abort(&mut self, cx: &mut Cx<'_>, err: TurnError) {
        let mut out = Vec::new();
        self.inv.abort(err, &mut out);
        self.apply(cx, out);
    }

    /// The outcome of this run's outstanding effect.
    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) {
        let (want, kind) = self
            .pending
            .take()
            .expect("an outcome needs an outstanding effect");
        assert_eq!(want, id);
        let mut out = Vec::new();
        match (kind, outcome) {
            (Pending::Append, Outcome::Store(StoreOutcome::Appended(r))) => {
                self.inv.on_appended(r, cx.ids(), &mut out)
            }
            (Pending::Model, Outcome::Model(r)) => {
                if r.is_ok()
                    && let Some(request) = self.stream_to
                {
                    let execution_id = self.inv.setup().wire_id.clone();
                    cx.stream(
                        request,
                        StreamItem::Delta(Delta {
                            execution_id,
                            part_index: 0,
                            chunk: String::new(),
                            done: true,
                        }),
                    );
                }
                self.inv.on_model(r, cx.ids(), &mut out)
            }
            (Pending::Tool, Outcome::Tool(r)) => self.inv.on_tool(r, cx.ids(), &mut out),
            (_, other) => unexpected("run", &other),
        }
        self.apply(cx, out);
    }

    fn apply(&mut self, cx: &mut Cx<'_>, actions: Vec<Action>) {
        let session = self.inv.setup().session.clone();
        for action in actions {
            match action {
                Action::Append {
                    expected_last_seq,
                    events,
                    last,
                } => {
                    let (session, fence) = (session.clone(), self.fence);
                    let id = if last && self.releases {
                        cx.append_last(&session, expected_last_seq, fence, events)
                    } else {
                        cx.append(&session, expected_last_seq, fence, events)
                    };
                    self.set_pending(id, Pending::Append);
                }
                Action::InvokeModel(request) => {
                    let (session, execution_id) =
                        (session.clone(), self.inv.setup().wire_id.clone());
                    let id = cx.request(|id| {
                        Effect::Model(InvokeModel {
                            id,
                            session,
                            execution_id,
                            request,
                        })
                    });
                    if self.stream_to.is_some() {
                        cx.want_chunks(id);
                    }
                    self.set_pending(id, Pending::Model);
                }
                Action::ExecuteTool {
                    intent,
                    call,
                    again,
                    repeatable,
                } => {
                    let session = session.clone();
                    let id = cx.request(|id| {
                        Effect::Tool(ExecuteTool {
                            id,
                            session,
                            intent,
                            call,
                            again,
                            repeatable,
                        })
                    });
                    self.set_pending(id, Pending::Tool);
                }
                Action::InterruptTool => {
                    let Some((id, Pending::Tool)) = self.pending else {
                        unreachable!("an interrupt names the outstanding tool call")
                    };
                    // The outcome stays routed here: the run records it.
                    cx.emit(Effect::InterruptTool { id });
                }
                Action::Send(frame) => cx.emit(Effect::Harness(HarnessEffect::Send {
                    conn: self.conn,
                    frame,
                    history: None,
                })),
                Action::Close => cx.close(self.conn),
                Action::Recorded(record) => {
                    if let Some(request) = self.stream_to {
                        cx.stream(request, StreamItem::Record(record));
                    }
                }
            }
        }
    }

    fn set_pending(&mut self, id: EffectId, kind: Pending) {
        assert!(self.pending.is_none(), "one outstanding effect per run");
        self.pending = Some((id, kind));
    }
}

/// Cancel calls waiting on one run's cancel: an Exec turn's or a
/// recovery's (see `invocation::cancel`).
#[derive(Debug, Default)]
pub(crate) struct CancelCalls(Vec<RequestId>);

impl CancelCalls {
    /// Offers Cancel call `request` to `run`. A Cancel naming another
    /// execution, or one the run cannot take, is answered now; a taken one
    /// waits for the run to end.
    pub(crate) fn offer(
        &mut self,
        cx: &mut Cx<'_>,
        run: &mut Run,
        request: RequestId,
        req: &CancelRequest,
        actor: Option<&IdentityRef>,
    ) {
        let current = run.inv.setup().execution_id.clone();
        let refusal = if !req.execution_id.is_empty() && req.execution_id != current {
            Status::failed_precondition(format!(
                "cancel: execution {:?} is not the session's current one ({:?})",
                shown(&req.execution_id),
                shown(&current)
            ))
        } else {
            match run.cancel(cx, &req.reason, actor) {
                Ok(()) => {
                    self.0.push(request);
                    return;
                }
                Err(CancelRefusal::Parking) => {
                    Status::aborted("cancel: the execution is parking on an approval; retry")
                }
                Err(CancelRefusal::Ended | CancelRefusal::Replaying) => {
                    Status::failed_precondition(format!(
                        "cancel: execution {:?} already ended",
                        shown(&current)
                    ))
                }
            }
        };
        cx.reply(request, Err(refusal));
    }

    /// The run ended other than by its cancel: every waiting call is
    /// refused (`failed` maps the run's error when it failed).
    pub(crate) fn settle(
        &mut self,
        cx: &mut Cx<'_>,
        ending: &Ending,
        failed: impl Fn(&TurnError) -> Status,
    ) {
        debug_assert!(
            !matches!(ending, Ending::Canceled) || !self.0.is_empty(),
            "only a Cancel call cancels a run"
        );
        let status = match ending {
            Ending::Canceled => return,
            Ending::Failed(e) => failed(e),
            _ => Status::failed_precondition("cancel: the execution already ended"),
        };
        for request in std::mem::take(&mut self.0) {
            cx.reply(request, Err(status.clone()));
        }
    }

    /// Advances the render of the canceled session; once it is done (or
    /// failed) every waiting call gets it. `Some` hands a pending render
    /// back to its stage.
    pub(crate) fn on_render(
        &mut self,
        cx: &mut Cx<'_>,
        mut render: Render,
        id: EffectId,
        outcome: Outcome,
    ) -> Option<Render> {
        assert!(render.owns(id), "the render of the canceled session");
        let result = match render.on_outcome(cx, id, outcome) {
            Rendered::Pending => return Some(render),
            Rendered::Done(s) => Ok(Response::Session(*s)),
            Rendered::NotFound => Err(Status::internal("session vanished")),
            Rendered::Failed(status) => Err(status),
        };
        assert!(!self.0.is_empty(), "a canceled run has a Cancel call");
        for request in std::mem::take(&mut self.0) {
            cx.reply(request, result.clone());
        }
        None
    }
}

/// After a park: confirm the request is still the owned pending one, take
/// the session cold, and record SUSPEND with the invocation's fence at the
/// head the check saw. Any failure reports its own cause and leaves the
/// committed request in place (a later Resume parks again).
pub(crate) struct Handoff {
    session: String,
    harness: String,
    route: Route,
    park: ApprovalRef,
    fence: i64,
    step: HandoffStep,
    head: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandoffStep {
    Read(EffectId),
    Snapshot(EffectId),
    Append(EffectId),
}

/// Progress of a handoff.
pub(crate) enum Handed {
    Pending,
    /// SUSPEND is durable.
    Done(Vec<Committed>),
    Failed(TurnError),
}

impl Handoff {
    pub(crate) fn start(
        cx: &mut Cx<'_>,
        session: &str,
        harness: &str,
        route: &Route,
        park: ApprovalRef,
        fence: i64,
    ) -> Self {
        assert!(fence > 0, "a parked run wrote under a minted fence");
        assert!(!park.tool_call_id.is_empty(), "a park names its gated call");
        let s = session.to_owned();
        let id = cx.read_log(&s, 1, 0);
        Self {
            session: session.to_owned(),
            harness: harness.to_owned(),
            route: route.clone(),
            park,
            fence,
            step: HandoffStep::Read(id),
            head: 0,
        }
    }

    pub(crate) fn owns(&self, id: EffectId) -> bool {
        matches!(self.step,
            HandoffStep::Read(x) | HandoffStep::Snapshot(x) | HandoffStep::Append(x) if x == id)
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Handed {
        assert!(self.owns(id));
        match (self.step, outcome) {
            (HandoffStep::Read(_), Outcome::Store(StoreOutcome::Log(r))) => {
                let records: Vec<LogRecord> = match r {
                    Ok(r) => r,
                    Err(e) => return Handed::Failed(TurnError::Store(e.within("read"))),
                };
                let scan = match approval::scan(&records, 0) {
                    Ok(s) => s,
                    Err(e) => return Handed::Failed(e.into()),
                };
                let owned = scan.selected().filter(|s| {
                    !s.inherited
                        && !s.has_receipt()
                        && s.is_pending_request()
                        && s.call.id == self.park.tool_call_id
                        && s.request_seq() == Some(self.park.request_seq)
                });
                let Some(state) = owned else {
                    return Handed::Failed(
                        LogError::diverged("park does not match the pending approval request")
                            .into(),
                    );
                };
                self.head = state.head;
                let (harness, backend, session) = (
                    self.harness.clone(),
                    self.route.backend.clone(),
                    self.session.clone(),
                );
                self.step = HandoffStep::Snapshot(cx.request(|id| {
                    Effect::Runtime(RuntimeCall {
                        id,
                        harness,
                        backend,
                        op: RuntimeOp::Snapshot { session },
                    })
                }));
                Handed::Pending
            }
            (HandoffStep::Snapshot(_), Outcome::Runtime(r)) => {
                let snapshot = match r {
                    Ok(RuntimeReply::Snapshot(s)) => s,
                    Ok(other) => {
                        return Handed::Failed(TurnError::Sink(format!(
                            "runtime returned {other:?} where a snapshot was expected"
                        )));
                    }
                    Err(e) => return Handed::Failed(TurnError::Sink(format!("snapshot: {e}"))),
                };
                let (session, fence, head) = (self.session.clone(), self.fence, self.head);
                let event = suspend_event(&snapshot);
                // The park's SUSPEND is the last write of the operation.
                let append = cx.append_last(&session, head, fence, vec![event]);
                self.step = HandoffStep::Append(append);
                Handed::Pending
            }
            (HandoffStep::Append(_), Outcome::Store(StoreOutcome::Appended(r))) => match r {
                Ok(records) => Handed::Done(records.into_iter().map(Committed::new).collect()),
                Err(e) => Handed::Failed(TurnError::Append(e)),
            },
            (_, other) => unexpected("handoff", &other),
        }
    }
}

/// LIFECYCLE{SUSPEND} carrying the snapshot inline, so the chain covers it.
pub(crate) fn suspend_event(snapshot: &SnapshotRef) -> agentsessions_proto::v1::Event {
    let mut ev = events::lifecycle(
        agentsessions_proto::v1::lifecycle::Kind::LifecycleSuspend,
        "",
    );
    if let Some(agentsessions_proto::v1::event::Body::Lifecycle(l)) = &mut ev.body {
        l.snapshot_local = snapshot.local.clone();
        l.snapshot_external_uri = snapshot.external_uri.clone();
        l.snapshot_memory = snapshot.memory;
        l.snapshot_sealed = snapshot.sealed;
    }
    debug_assert!(
        events::body::lifecycle(&ev).is_some_and(|l| l.snapshot_local == snapshot.local
            && l.snapshot_external_uri == snapshot.external_uri),
        "the marker carries the snapshot"
    );
    ev
}
