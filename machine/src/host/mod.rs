//! The host state machine: client requests and harness events in, effects
//! out.
//!
//! # Shape
//!
//! Inputs enter through the `handle_*` methods, each taking `now`; effects
//! leave through [`Host::poll_effect`], and the next deadline through
//! [`Host::poll_timeout`]. **Drain contract:** after every input, call
//! `poll_effect` until it returns `None` before giving the next input (the
//! machine refuses input while effects are undrained, which catches a shell
//! that forgets). Effects that expect an answer carry an [`EffectId`]; the
//! answer comes back through [`Host::handle_outcome`] — exactly once.
//!
//! # Operations
//!
//! Every client request becomes an *operation*: a small state machine in
//! `crate::ops` that issues effects and advances on their outcomes. The host
//! routes each outcome to the operation that issued the effect, each
//! harness input to the operation that owns the connection, and enforces the
//! per-session overlap guard (Exec, Resume, Suspend and Approve on one
//! session never overlap; a second one is ABORTED before it touches
//! anything). An operation holds the only state the host keeps for a
//! session; when it finishes, the session costs no memory again.

pub mod config;
pub mod io;
pub mod registry;
pub mod render;
pub mod status;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use config::{Backend, HostConfig, Route};
pub use io::*;
pub use status::{Code, Status};

use crate::ops::{Flow, Op};

/// Identifies one operation (one client request in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// Everything but the operations themselves, so an operation can be taken
/// out of the table and given mutable access to the rest.
pub(crate) struct Core {
    pub(crate) now: Nanos,
    pub(crate) config: HostConfig,
    pub(crate) routes: BTreeMap<String, Route>,
    pub(crate) unservable: BTreeMap<String, String>,
    pub(crate) ids: Box<dyn IdSource + Send>,
    next_effect: u64,
    next_conn: u64,
    effects: VecDeque<Effect>,
    waiting: BTreeMap<EffectId, OpId>,
    chunks: BTreeMap<EffectId, OpId>,
    conns: BTreeMap<ConnId, OpId>,
    guards: BTreeMap<String, OpId>,
    timers: BTreeSet<(Nanos, OpId)>,
}

impl Core {
    fn add_route(&mut self, name: &str, route: Route) -> bool {
        if self.routes.contains_key(name) || self.unservable.contains_key(name) {
            return false;
        }
        self.routes.insert(name.to_owned(), route);
        true
    }

    /// True for a configured (not registered) harness name.
    pub(crate) fn is_static(&self, name: &str) -> bool {
        self.routes.get(name).is_some_and(|r| !r.registered)
    }

    /// True for a name registration can never take: static or reserved.
    pub(crate) fn is_reserved(&self, name: &str) -> bool {
        self.is_static(name) || self.config.reserved.iter().any(|r| r == name)
    }
}

/// An operation's handle on the host while it runs.
pub(crate) struct Cx<'a> {
    pub(crate) core: &'a mut Core,
    pub(crate) op: OpId,
}

impl Cx<'_> {
    /// Current time.
    pub(crate) fn now(&self) -> Nanos {
        self.core.now
    }

    /// Host configuration.
    pub(crate) fn config(&self) -> &HostConfig {
        &self.core.config
    }

    /// Id source.
    pub(crate) fn ids(&mut self) -> &mut dyn IdSource {
        self.core.ids.as_mut()
    }

    /// Emits an effect that expects an outcome; returns its id.
    pub(crate) fn request(&mut self, make: impl FnOnce(EffectId) -> Effect) -> EffectId {
        self.core.next_effect += 1;
        let id = EffectId(self.core.next_effect);
        let effect = make(id);
        debug_assert_eq!(effect.id(), Some(id));
        self.core.waiting.insert(id, self.op);
        self.core.effects.push_back(effect);
        id
    }

    /// Reads the session row.
    pub(crate) fn get_session(&mut self, session: &str) -> EffectId {
        let session = session.to_owned();
        self.request(|id| Effect::GetSession { id, session })
    }

    /// Reads records `from_seq..=to_seq` (0 = to the head).
    pub(crate) fn read_log(&mut self, session: &str, from_seq: i64, to_seq: i64) -> EffectId {
        let session = session.to_owned();
        self.request(|id| Effect::ReadLog {
            id,
            session,
            from_seq,
            to_seq,
        })
    }

    /// Mints the session's next fence.
    pub(crate) fn mint_fence(&mut self, session: &str) -> EffectId {
        let session = session.to_owned();
        self.request(|id| Effect::MintFence { id, session })
    }

    /// Appends `events` after `expected_last_seq` under `fence`.
    pub(crate) fn append(
        &mut self,
        session: &str,
        expected_last_seq: i64,
        fence: i64,
        events: Vec<agentsessions_proto::v1::Event>,
    ) -> EffectId {
        let session = session.to_owned();
        self.request(|id| Effect::Append {
            id,
            session,
            expected_last_seq,
            fence,
            events,
        })
    }

    /// Emits an effect that expects no outcome.
    pub(crate) fn emit(&mut self, effect: Effect) {
        debug_assert_eq!(effect.id(), None);
        self.core.effects.push_back(effect);
    }

    /// Allocates a connection id owned by this operation.
    pub(crate) fn new_conn(&mut self) -> ConnId {
        self.core.next_conn += 1;
        let conn = ConnId(self.core.next_conn);
        self.core.conns.insert(conn, self.op);
        conn
    }

    /// Closes a connection and stops routing its input.
    pub(crate) fn close(&mut self, conn: ConnId) {
        if self.core.conns.remove(&conn).is_some() {
            self.core.effects.push_back(Effect::Close { conn });
        }
    }

    /// Routes streamed model chunks of `effect` to this operation.
    pub(crate) fn want_chunks(&mut self, effect: EffectId) {
        self.core.chunks.insert(effect, self.op);
    }

    /// Takes the session's overlap guard; false if another operation holds it.
    pub(crate) fn try_guard(&mut self, session: &str) -> bool {
        match self.core.guards.get(session) {
            Some(holder) => *holder == self.op,
            None => {
                self.core.guards.insert(session.to_owned(), self.op);
                true
            }
        }
    }

    /// Arms a deadline for this operation.
    pub(crate) fn set_deadline(&mut self, at: Nanos) {
        self.core.timers.insert((at, self.op));
    }

    /// The route of a harness name, if this host serves it.
    pub(crate) fn route(&self, name: &str) -> Option<&Route> {
        self.core.routes.get(name)
    }

    /// Adds a route for a harness registered while the host runs; false
    /// (and no change) when the name is already served or unservable, so a
    /// concurrent identical registration keeps the first route.
    pub(crate) fn add_route(&mut self, name: &str, route: Route) -> bool {
        self.core.add_route(name, route)
    }

    /// Streams a frame to the client.
    pub(crate) fn stream(&mut self, request: RequestId, item: StreamItem) {
        self.emit(Effect::Stream { request, item });
    }

    /// Finishes the client call.
    pub(crate) fn reply(&mut self, request: RequestId, result: Result<Response, Status>) {
        self.emit(Effect::Reply { request, result });
    }
}

/// Refusal to take input while effects are undrained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("effects not drained: call poll_effect until None before the next input")]
pub struct NotDrained;

/// The host state machine. See the module docs.
pub struct Host {
    core: Core,
    // Boxed: an operation is large (request, rows, stage), and it is taken
    // out of the table and put back on every input it handles.
    ops: BTreeMap<OpId, Box<Op>>,
    next_op: u64,
    requests: BTreeMap<RequestId, OpId>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("ops", &self.ops.len())
            .field("waiting", &self.core.waiting.len())
            .field("conns", &self.core.conns.len())
            .field("guards", &self.core.guards)
            .finish()
    }
}

impl Host {
    /// A host with `config`, drawing ids from `ids`.
    pub fn new(config: HostConfig, ids: Box<dyn IdSource + Send>) -> Self {
        let routes = config.harnesses.clone();
        Self {
            core: Core {
                now: 0,
                config,
                routes,
                unservable: BTreeMap::new(),
                ids,
                next_effect: 0,
                next_conn: 0,
                effects: VecDeque::new(),
                waiting: BTreeMap::new(),
                chunks: BTreeMap::new(),
                conns: BTreeMap::new(),
                guards: BTreeMap::new(),
                timers: BTreeSet::new(),
            },
            ops: BTreeMap::new(),
            next_op: 0,
            requests: BTreeMap::new(),
        }
    }

    /// A client call arrived.
    pub fn handle_request(
        &mut self,
        now: Nanos,
        request: RequestId,
        call: Request,
    ) -> Result<(), NotDrained> {
        self.enter(now)?;
        assert!(
            !self.requests.contains_key(&request),
            "request ids are unique while in flight"
        );
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.requests.insert(request, id);
        let mut op = Box::new(Op::new(request, call));
        let flow = op.start(&mut Cx {
            core: &mut self.core,
            op: id,
        });
        self.settle(id, op, flow);
        Ok(())
    }

    /// The answer to an effect.
    pub fn handle_outcome(
        &mut self,
        now: Nanos,
        effect: EffectId,
        outcome: Outcome,
    ) -> Result<(), NotDrained> {
        self.enter(now)?;
        let Some(id) = self.core.waiting.remove(&effect) else {
            panic!("outcome for unknown effect {effect:?}: each effect is answered once");
        };
        self.core.chunks.remove(&effect);
        self.dispatch(id, |op, cx| op.on_outcome(cx, effect, outcome));
        Ok(())
    }

    /// A chunk of a streamed model completion (for client deltas only; the
    /// completion itself arrives as the effect's outcome).
    pub fn handle_model_chunk(
        &mut self,
        now: Nanos,
        effect: EffectId,
        chunk: String,
    ) -> Result<(), NotDrained> {
        self.enter(now)?;
        if let Some(id) = self.core.chunks.get(&effect).copied() {
            self.dispatch(id, |op, cx| op.on_chunk(cx, effect, chunk));
        }
        Ok(())
    }

    /// Input from a harness connection.
    pub fn handle_harness(
        &mut self,
        now: Nanos,
        conn: ConnId,
        input: HarnessInput,
    ) -> Result<(), NotDrained> {
        self.enter(now)?;
        // Input on a closed connection is late and meaningless.
        if let Some(id) = self.core.conns.get(&conn).copied() {
            self.dispatch(id, |op, cx| op.on_harness(cx, conn, input));
        }
        Ok(())
    }

    /// The client of a streamed call went away.
    pub fn handle_cancel(&mut self, now: Nanos, request: RequestId) -> Result<(), NotDrained> {
        self.enter(now)?;
        if let Some(id) = self.requests.get(&request).copied() {
            self.dispatch(id, |op, cx| op.on_cancel(cx));
        }
        Ok(())
    }

    /// Time passed; fires every deadline at or before `now`.
    pub fn handle_timeout(&mut self, now: Nanos) -> Result<(), NotDrained> {
        self.enter(now)?;
        while let Some(&(at, id)) = self.core.timers.first() {
            if at > now {
                break;
            }
            self.core.timers.pop_first();
            if self.ops.contains_key(&id) {
                self.dispatch(id, |op, cx| op.on_deadline(cx));
            }
        }
        Ok(())
    }

    /// The next effect to perform, if any.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.core.effects.pop_front()
    }

    /// When `handle_timeout` must next be called, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.core.timers.first().map(|(at, _)| *at)
    }

    /// Operations in flight (a host at rest holds none).
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Registers a harness route at run time (startup loading of stored
    /// registrations goes through here too).
    pub fn add_route(&mut self, name: &str, route: Route) -> bool {
        self.core.add_route(name, route)
    }

    /// True for a configured (not registered) harness name.
    pub fn is_static(&self, name: &str) -> bool {
        self.core.is_static(name)
    }

    /// The names to reserve in the store at boot: every static route name
    /// and `config.reserved`, sorted and de-duplicated. See
    /// [`registry`] for why a collision must fail startup.
    pub fn reserved_names(&self) -> Vec<String> {
        let statics = self
            .core
            .routes
            .iter()
            .filter(|(_, r)| !r.registered)
            .map(|(n, _)| n.clone());
        let all: BTreeSet<String> = statics
            .chain(self.core.config.reserved.iter().cloned())
            .filter(|n| !n.is_empty())
            .collect();
        all.into_iter().collect()
    }

    /// Why this host cannot serve a stored registration, if it was marked.
    pub fn unservable_reason(&self, name: &str) -> Option<&str> {
        self.core.unservable.get(name).map(String::as_str)
    }

    /// Marks a stored registration this host cannot serve.
    pub fn mark_unservable(&mut self, name: &str, reason: &str) {
        self.core
            .unservable
            .insert(name.to_owned(), reason.to_owned());
    }

    fn enter(&mut self, now: Nanos) -> Result<(), NotDrained> {
        if !self.core.effects.is_empty() {
            return Err(NotDrained);
        }
        // Time never runs backwards inside the machine.
        self.core.now = self.core.now.max(now);
        Ok(())
    }

    fn dispatch(&mut self, id: OpId, f: impl FnOnce(&mut Op, &mut Cx<'_>) -> Flow) {
        let Some(mut op) = self.ops.remove(&id) else {
            return;
        };
        let flow = f(
            &mut op,
            &mut Cx {
                core: &mut self.core,
                op: id,
            },
        );
        self.settle(id, op, flow);
    }

    fn settle(&mut self, id: OpId, op: Box<Op>, flow: Flow) {
        match flow {
            Flow::Continue => {
                self.ops.insert(id, op);
            }
            Flow::Done => {
                self.core.guards.retain(|_, holder| *holder != id);
                self.core.timers.retain(|(_, holder)| *holder != id);
                self.core.chunks.retain(|_, holder| *holder != id);
                let conns: Vec<ConnId> = self
                    .core
                    .conns
                    .iter()
                    .filter(|(_, holder)| **holder == id)
                    .map(|(c, _)| *c)
                    .collect();
                for conn in conns {
                    self.core.conns.remove(&conn);
                    self.core.effects.push_back(Effect::Close { conn });
                }
                self.requests.retain(|_, op| *op != id);
                // Effects still outstanding (an op cut short by a deadline or
                // a cancel) stay in `waiting`; their outcomes are dropped.
            }
        }
    }
}
