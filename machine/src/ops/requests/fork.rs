//! Fork: branch a session at a seq into N children.
//!
//! Order: refuse a supplied identity before anything else; validate the
//! request; read the parent's row (its head is all the fork needs of the
//! journal, so a fork never reads the parent's records) and refuse a seq
//! past that head (OUT_OF_RANGE); route and admit
//! its harness (Describe and the gate, nothing provisioned). The source of
//! the clones is the parent's journal for a stateless-replay harness, and a
//! fresh memory checkpoint (fence, head re-check, Snapshot, SUSPEND at the
//! fork seq) for one that needs memory snapshots — only at the head, since
//! memory cannot be rewound. Then each child in order: clone the snapshot,
//! mint the child's fence, then one write that gives the child the
//! parent's records up to the fork seq by reference (the store keeps them
//! once, shared; the child's reads return them verbatim) and appends the
//! FORK marker after them, so a fork costs the same whatever the prefix's
//! length. Any failure stops every child already provisioned and replies
//! the cause. Rows are written only once every child exists, so a refused
//! fork leaves no child a client can list. Fork takes no session guard: it
//! never writes the parent except for the memory checkpoint, which is
//! fenced.

use std::collections::BTreeSet;

use agentsessions_proto::v1::{
    ForkRequest, ForkResponse, IdentityRef, LogRecord, Session, SnapshotRef,
};

use crate::events;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::placement::{Placed, Placement, Provision, needs_memory};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::routing::{for_turn, mapping};
use crate::ops::stages::run::suspend_event;
use crate::vocab::config::MAX_FORK_CHILDREN;
use crate::vocab::shown;
use crate::vocab::{
    AppendError, Code, Effect, EffectId, Outcome, PutError, RequestId, Response, Route,
    RuntimeCall, RuntimeOp, RuntimeReply, SessionRow, Status, StoreFault, StoreOutcome,
};

/// The fixed refusal for a supplied identity (children would not get their
/// own principals, so accepting one would be a silent lie).
pub(crate) const IDENTITY_UNSUPPORTED: &str =
    "ForkRequest.identity is unsupported: per-child principals are not enforced";

enum Stage {
    Row(EffectId),
    Admit(Box<Placement>),
    /// Memory checkpoint: the parent's new fence.
    Fence(EffectId),
    /// Memory checkpoint: the head after the fence, which must not move.
    Head(EffectId, i64),
    /// Memory checkpoint: the parent's snapshot.
    Snapshot(EffectId, i64),
    /// Memory checkpoint: SUSPEND recording the snapshot.
    Checkpoint(EffectId, SnapshotRef),
    /// Child `next`: its clone of the snapshot.
    Clone(EffectId),
    /// Child `next`: its own fence.
    ChildFence(EffectId),
    /// Child `next`: the referenced prefix and the FORK marker.
    Copy(EffectId),
    /// Stopping provisioned children; the reply waits for every Stop.
    Rollback(BTreeSet<EffectId>, Status),
    /// Child `next`: its metadata row.
    Record(EffectId),
    /// Child `next`: rendering the reply.
    Render(Render),
    Over,
}

/// One Fork call. See the module docs.
pub(crate) struct ForkOp {
    request: RequestId,
    /// The verified caller, recorded as each child's creator.
    actor: Option<IdentityRef>,
    req: ForkRequest,
    count: usize,
    stage: Stage,
    parent: SessionRow,
    /// The seq the FORK marker names.
    at_seq: i64,
    /// The parent's head as its row said.
    head: i64,
    harness: String,
    route: Option<Route>,
    snapshot: SnapshotRef,
    children: Vec<String>,
    /// Index of the child the current stage works on.
    next: usize,
    /// Children whose incarnation exists (they are stopped on failure).
    provisioned: Vec<String>,
    rendered: Vec<Session>,
}

/// Internal failures carry the operation's name, as the reference does.
fn internal(detail: impl std::fmt::Display) -> Status {
    Status::internal(format!("fork: {detail}"))
}

/// A store failure while doing `what`, named like [`internal`].
fn store_failed(e: &StoreFault, what: impl std::fmt::Display) -> Status {
    e.status(format_args!("fork: {what}"))
}

impl ForkOp {
    pub(crate) fn new(request: RequestId, req: ForkRequest, actor: Option<IdentityRef>) -> Self {
        Self {
            actor,
            request,
            req,
            count: 0,
            stage: Stage::Over,
            parent: SessionRow::default(),
            at_seq: 0,
            head: 0,
            harness: String::new(),
            route: None,
            snapshot: SnapshotRef::default(),
            children: Vec::new(),
            next: 0,
            provisioned: Vec::new(),
            rendered: Vec::new(),
        }
    }

    fn fail(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        self.stage = Stage::Over;
        cx.reply(self.request, Err(status));
        Flow::Done
    }

    /// Checks that need nothing but the request, in the reference's order.
    fn validate(&mut self) -> Result<(), Status> {
        if self.req.identity.is_some() {
            return Err(Status::invalid_argument(IDENTITY_UNSUPPORTED));
        }
        if self.req.session.is_empty() {
            return Err(Status::invalid_argument("session is required"));
        }
        let count = self.req.count.max(1);
        if count > MAX_FORK_CHILDREN {
            return Err(Status::invalid_argument(format!(
                "count {count} exceeds the maximum of {MAX_FORK_CHILDREN} children"
            )));
        }
        // Bounded by the check above, so the conversion cannot fail.
        self.count = usize::try_from(count).unwrap_or(1);
        assert!(
            (1..=MAX_FORK_CHILDREN as usize).contains(&self.count),
            "a fork makes at least one child and a bounded number"
        );
        let names = self.req.child_names.len();
        if names != 0 && names != self.count {
            return Err(Status::invalid_argument(format!(
                "child_names has {names} entries; it must be empty or have exactly count ({}) names",
                self.count
            )));
        }
        Ok(())
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if let Err(status) = self.validate() {
            return self.fail(cx, status);
        }
        let session = self.req.session.clone();
        self.stage = Stage::Row(cx.get_session(&session));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match (std::mem::replace(&mut self.stage, Stage::Over), outcome) {
            (Stage::Row(want), Outcome::Store(StoreOutcome::Session(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(Some(row)) => self.routed(cx, row),
                    Ok(None) => {
                        let msg = format!("session {:?} not found", shown(&self.req.session));
                        self.fail(cx, Status::not_found(msg))
                    }
                    Err(e) => self.fail(cx, store_failed(&e, "session")),
                }
            }
            (Stage::Admit(mut placement), outcome) => match placement.on_outcome(cx, id, outcome) {
                Placed::Pending => {
                    self.stage = Stage::Admit(placement);
                    Flow::Continue
                }
                Placed::Failed(status) => self.fail(cx, admission_error(status)),
                Placed::Ready => self.source(cx, &placement),
            },
            (Stage::Fence(want), Outcome::Store(StoreOutcome::Fence(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(fence) => {
                        // The head is read after the fence: a writer that
                        // landed before it shows up here, one after it is
                        // refused by the fence.
                        let session = self.req.session.clone();
                        let get = cx.get_session(&session);
                        self.stage = Stage::Head(get, fence);
                        Flow::Continue
                    }
                    Err(e) => self.fail(cx, store_failed(&e, "mint fence")),
                }
            }
            (Stage::Head(want, fence), Outcome::Store(StoreOutcome::Session(r))) => {
                assert_eq!(want, id);
                self.on_head(cx, fence, r)
            }
            (Stage::Snapshot(want, fence), Outcome::Runtime(r)) => {
                assert_eq!(want, id);
                self.on_snapshot(cx, fence, r)
            }
            (Stage::Checkpoint(want, snapshot), Outcome::Store(StoreOutcome::Appended(r))) => {
                assert_eq!(want, id);
                self.on_checkpoint(cx, snapshot, r)
            }
            (Stage::Clone(want), Outcome::Runtime(r)) => {
                assert_eq!(want, id);
                self.on_clone(cx, r)
            }
            (Stage::ChildFence(want), Outcome::Store(StoreOutcome::Fence(r))) => {
                assert_eq!(want, id);
                match r {
                    Ok(fence) => self.copy(cx, fence),
                    Err(e) => self.roll_back(cx, store_failed(&e, "mint child fence")),
                }
            }
            (Stage::Copy(want), Outcome::Store(StoreOutcome::Appended(r))) => {
                assert_eq!(want, id);
                self.on_copied(cx, r)
            }
            (Stage::Rollback(mut pending, status), Outcome::Runtime(_)) => {
                // Stop errors are ignored: the reply is the original cause.
                assert!(pending.remove(&id), "a stop this rollback issued");
                if pending.is_empty() {
                    return self.fail(cx, status);
                }
                self.stage = Stage::Rollback(pending, status);
                Flow::Continue
            }
            (Stage::Record(want), Outcome::Store(StoreOutcome::Put(r))) => {
                assert_eq!(want, id);
                self.on_recorded(cx, r)
            }
            (Stage::Render(render), outcome) => self.on_render(cx, render, id, outcome),
            (_, other) => unexpected("fork", &other),
        }
    }

    /// A child's row is stored: the next child, or render them all.
    fn on_recorded(&mut self, cx: &mut Cx<'_>, r: Result<(), PutError>) -> Flow {
        assert!(self.next < self.children.len(), "a row per child");
        if let Err(e) = r {
            let what = format!("record child {:?}", self.children[self.next]);
            let status = match e {
                PutError::Failed(f) => store_failed(&f, what),
                PutError::Refused(why) => internal(format!("{what}: refused: {why:?}")),
            };
            return self.fail(cx, status);
        }
        self.next += 1;
        if self.next < self.children.len() {
            self.record_child(cx)
        } else {
            self.next = 0;
            self.render_child(cx)
        }
    }

    /// A child's rendering advanced; once all are rendered, reply.
    fn on_render(
        &mut self,
        cx: &mut Cx<'_>,
        mut render: Render,
        id: EffectId,
        outcome: Outcome,
    ) -> Flow {
        match render.on_outcome(cx, id, outcome) {
            Rendered::Pending => {
                self.stage = Stage::Render(render);
                Flow::Continue
            }
            Rendered::Done(s) => {
                self.rendered.push(*s);
                self.next += 1;
                assert_eq!(self.rendered.len(), self.next, "children render in order");
                if self.next < self.children.len() {
                    return self.render_child(cx);
                }
                let children = std::mem::take(&mut self.rendered);
                assert_eq!(children.len(), self.count, "the reply names every child");
                cx.reply(self.request, Ok(Response::Fork(ForkResponse { children })));
                Flow::Done
            }
            Rendered::NotFound => self.fail(cx, internal("a recorded child vanished")),
            Rendered::Failed(status) => self.fail(cx, status),
        }
    }

    /// The parent's head, read after its fence: the fork point must still
    /// be the head, then the parent is snapshotted.
    fn on_head(
        &mut self,
        cx: &mut Cx<'_>,
        fence: i64,
        r: Result<Option<SessionRow>, StoreFault>,
    ) -> Flow {
        assert!(fence > 0, "fences start at 1");
        assert_eq!(self.at_seq, self.head, "a memory harness forks at the head");
        let head = match r {
            Ok(Some(row)) => row.last_seq,
            Ok(None) => 0,
            Err(e) => return self.fail(cx, store_failed(&e, "head")),
        };
        if head != self.at_seq {
            let msg = format!("fork: seq conflict (journal head is {head})");
            return self.fail(cx, Status::aborted(msg));
        }
        let (harness, backend, session) = self.runtime_target(&self.req.session);
        let snap = cx.request(|id| {
            Effect::Runtime(RuntimeCall {
                id,
                harness,
                backend,
                op: RuntimeOp::Snapshot { session },
            })
        });
        self.stage = Stage::Snapshot(snap, fence);
        Flow::Continue
    }

    /// The parent's snapshot: checkpoint it in the parent's journal.
    fn on_snapshot(
        &mut self,
        cx: &mut Cx<'_>,
        fence: i64,
        r: Result<RuntimeReply, String>,
    ) -> Flow {
        let snapshot = match r {
            Ok(RuntimeReply::Snapshot(s)) => s,
            Ok(other) => {
                let msg = format!("runtime returned {other:?} where a snapshot was expected");
                return self.fail(cx, internal(msg));
            }
            Err(e) => return self.fail(cx, internal(format!("snapshot: {e}"))),
        };
        let (session, at_seq) = (self.req.session.clone(), self.at_seq);
        debug_assert!(
            self.children.is_empty(),
            "the checkpoint precedes the children"
        );
        let event = suspend_event(&snapshot);
        let append = cx.append(&session, at_seq, fence, vec![event]);
        self.stage = Stage::Checkpoint(append, snapshot);
        Flow::Continue
    }

    /// The parent's checkpoint is durable: fan out to the children.
    fn on_checkpoint(
        &mut self,
        cx: &mut Cx<'_>,
        snapshot: SnapshotRef,
        r: Result<Vec<LogRecord>, AppendError>,
    ) -> Flow {
        if let Err(e) = r {
            return self.fail(cx, mapping::append(&e, "fork"));
        }
        // Checked only now, as the reference does: the parent is already
        // cold and says so; a retry forks at the new head.
        if snapshot.external_uri.is_empty() {
            let msg = format!(
                "harness {:?}: snapshot of {:?} produced no external snapshot handle",
                shown(&self.harness),
                shown(&self.req.session)
            );
            return self.fail(cx, Status::failed_precondition(msg));
        }
        self.snapshot = snapshot;
        self.fan_out(cx)
    }

    /// A child's clone is provisioned: mint its first fence.
    fn on_clone(&mut self, cx: &mut Cx<'_>, r: Result<RuntimeReply, String>) -> Flow {
        match r {
            Ok(RuntimeReply::Incarnation { .. }) => {
                assert!(self.next < self.children.len());
                debug_assert_eq!(
                    self.provisioned.len(),
                    self.next,
                    "children are provisioned in order"
                );
                let child = self.children[self.next].clone();
                self.provisioned.push(child.clone());
                let fence = cx.mint_fence(&child);
                self.stage = Stage::ChildFence(fence);
                Flow::Continue
            }
            Ok(other) => {
                let msg = format!("runtime returned {other:?} where a clone was expected");
                self.roll_back(cx, internal(msg))
            }
            Err(e) => self.roll_back(cx, internal(format!("clone: {e}"))),
        }
    }

    /// A child's prefix is copied: the next child, or record them all.
    fn on_copied(&mut self, cx: &mut Cx<'_>, r: Result<Vec<LogRecord>, AppendError>) -> Flow {
        let records = match r {
            Ok(records) => records,
            Err(e) => return self.roll_back(cx, mapping::append(&e, "fork")),
        };
        if let Err(status) = self.check_copy(&records) {
            return self.roll_back(cx, status);
        }
        self.next += 1;
        assert!(self.next <= self.children.len(), "one copy per child");
        if self.next < self.children.len() {
            self.clone_child(cx)
        } else {
            self.next = 0;
            self.record_child(cx)
        }
    }

    fn runtime_target(&self, session: &str) -> (String, crate::vocab::Backend, String) {
        let route = self.route.as_ref().expect("routed before any runtime call");
        (
            self.harness.clone(),
            route.backend.clone(),
            session.to_owned(),
        )
    }

    fn routed(&mut self, cx: &mut Cx<'_>, row: SessionRow) -> Flow {
        // A seq the parent never had would make the child's FORK marker
        // name a record that does not exist: a false journal entry. The Go
        // reference accepts it; this host refuses on purpose.
        if self.req.at_seq > row.last_seq {
            let msg = format!(
                "at_seq {} is past the session's head ({})",
                self.req.at_seq, row.last_seq
            );
            return self.fail(cx, Status::new(Code::OutOfRange, msg));
        }
        match for_turn(cx, &self.req.session, &row.harness, "") {
            Ok((harness, route)) => {
                self.harness = harness;
                self.route = Some(route);
            }
            Err(status) => return self.fail(cx, status),
        }
        let head = row.last_seq;
        self.parent = row;
        self.head = head;
        self.at_seq = if self.req.at_seq <= 0 {
            head
        } else {
            self.req.at_seq
        };
        assert!(self.at_seq <= self.head, "a fork point the parent has");
        let route = self.route.clone().expect("routed");
        let placement = Placement::start(
            cx,
            self.harness.clone(),
            route,
            &self.req.session,
            Provision::AdmitOnly,
            false,
        );
        self.stage = Stage::Admit(Box::new(placement));
        Flow::Continue
    }

    /// Admitted: choose the clone source.
    fn source(&mut self, cx: &mut Cx<'_>, placement: &Placement) -> Flow {
        let descriptor = placement.descriptor.as_ref().expect("admission described");
        assert_eq!(placement.fence, 0, "admission mints no fence");
        if !needs_memory(descriptor) {
            // A stateless harness is rebuilt from the journal; the parent
            // keeps running undisturbed.
            self.snapshot = SnapshotRef {
                local: self.req.session.clone(),
                ..SnapshotRef::default()
            };
            return self.fan_out(cx);
        }
        let head = self.head;
        if self.at_seq != head {
            // Refused before any fence: a historical fork of a memory
            // harness must have no side effects at all.
            let msg = format!(
                "harness {:?} can only fork at the log head ({head}), not seq {}",
                shown(&self.harness),
                self.at_seq
            );
            return self.fail(cx, Status::failed_precondition(msg));
        }
        self.stage = Stage::Fence(cx.mint_fence(&self.req.session));
        Flow::Continue
    }

    fn fan_out(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(
            self.children.is_empty() && self.provisioned.is_empty(),
            "one fan-out"
        );
        self.children = (0..self.count).map(|_| cx.ids().session_uid()).collect();
        assert_eq!(self.children.len(), self.count);
        self.next = 0;
        self.clone_child(cx)
    }

    fn clone_child(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.next < self.children.len(), "a clone per child");
        let child = self.children[self.next].clone();
        let (harness, backend, _) = self.runtime_target(&child);
        let snapshot = self.snapshot.clone();
        self.stage = Stage::Clone(cx.request(|id| {
            Effect::Runtime(RuntimeCall {
                id,
                harness,
                backend,
                op: RuntimeOp::Fork { snapshot, child },
            })
        }));
        Flow::Continue
    }

    /// The last parent record the children share: every record up to the
    /// fork seq, which [`Self::routed`] keeps at or below the head.
    fn shared(&self) -> i64 {
        debug_assert!(self.at_seq <= self.head);
        self.at_seq
    }

    /// One write: the parent's records up to [`Self::shared`] by
    /// reference, then the FORK marker.
    fn copy(&mut self, cx: &mut Cx<'_>, fence: i64) -> Flow {
        assert!(fence > 0, "fences start at 1");
        debug_assert_eq!(
            self.provisioned.len(),
            self.next + 1,
            "the child copied into was provisioned"
        );
        let marker = vec![events::fork_marker(self.at_seq)];
        let (child, shared) = (self.children[self.next].clone(), self.shared());
        let write = cx.fork_append(&child, &self.req.session, shared, fence, marker);
        self.stage = Stage::Copy(write);
        Flow::Continue
    }

    /// The store answers with the marker alone, right after the prefix.
    fn check_copy(&self, records: &[LogRecord]) -> Result<(), Status> {
        let child = &self.children[self.next];
        match records {
            [marker] if marker.seq == self.shared() + 1 => Ok(()),
            _ => Err(internal(format!(
                "child {child:?} committed {} records, expected the marker at seq {}",
                records.len(),
                self.shared() + 1
            ))),
        }
    }

    /// Stops every provisioned child, then replies `status`.
    fn roll_back(&mut self, cx: &mut Cx<'_>, status: Status) -> Flow {
        debug_assert!(self.provisioned.len() <= self.children.len());
        let mut pending = BTreeSet::new();
        for child in std::mem::take(&mut self.provisioned) {
            let (harness, backend, session) = self.runtime_target(&child);
            pending.insert(cx.request(|id| {
                Effect::Runtime(RuntimeCall {
                    id,
                    harness,
                    backend,
                    op: RuntimeOp::Stop { session },
                })
            }));
        }
        if pending.is_empty() {
            return self.fail(cx, status);
        }
        self.stage = Stage::Rollback(pending, status);
        Flow::Continue
    }

    fn record_child(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.next < self.children.len());
        debug_assert_eq!(
            self.provisioned.len(),
            self.children.len(),
            "rows are written once every child exists"
        );
        let p = &self.parent;
        let row = SessionRow {
            uid: self.children[self.next].clone(),
            project: p.project.clone(),
            name: self
                .req
                .child_names
                .get(self.next)
                .cloned()
                .unwrap_or_default(),
            harness: p.harness.clone(),
            model: p.model.clone(),
            parent_uid: p.uid.clone(),
            fork_seq: self.at_seq,
            created_at: cx.now(),
            updated_at: cx.now(),
            // The request's labels replace the parent's, never merge.
            labels: self.req.labels.clone(),
            annotations: p.annotations.clone(),
            origin: p.origin.clone(),
            // A verified forker is the child's creator (none when auth
            // is off, as before).
            identity: self.actor.clone(),
            ..SessionRow::default()
        };
        self.stage = Stage::Record(cx.put_session(row, None));
        Flow::Continue
    }

    fn render_child(&mut self, cx: &mut Cx<'_>) -> Flow {
        assert!(self.next < self.children.len());
        let uid = self.children[self.next].clone();
        self.stage = Stage::Render(Render::start(cx, &uid));
        Flow::Continue
    }
}

/// Admission failures keep their class; anything the gate did not classify
/// is reported as a fork failure.
fn admission_error(status: Status) -> Status {
    if status.code == Code::Internal {
        internal(status.message)
    } else {
        status
    }
}
