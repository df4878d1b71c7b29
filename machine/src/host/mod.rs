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

use std::collections::BTreeMap;

pub use crate::ops::requests::registry::rules as registry;
pub use crate::ops::stages::cx::OpId;
pub use crate::ops::stages::render;
pub use crate::vocab::*;
pub use crate::vocab::{config, status};

use crate::ops::stages::authorize::{self, Gate, GateOp};
use crate::ops::stages::cx::{Core, Cx};
use crate::ops::{Flow, Op};

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
    /// Counts the host's own calls ([`RequestId::HOST`] set).
    next_host_call: u64,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("ops", &self.ops.len())
            .field("waiting", &self.core.waiting())
            .field("conns", &self.core.open_conns())
            .field("guards", self.core.guards())
            .field("leases", &self.core.leases.sessions().collect::<Vec<_>>())
            .finish()
    }
}

impl Host {
    /// A host with `config`, drawing ids from `ids`.
    pub fn new(config: HostConfig, ids: Box<dyn IdSource + Send>) -> Self {
        // The shells refuse such settings at startup (LeaseConfig::problem).
        assert!(
            config.lease.as_ref().is_none_or(|l| l.problem().is_none()),
            "a lease config that can hold a lease"
        );
        Self {
            core: Core::new(config, ids),
            ops: BTreeMap::new(),
            next_op: 0,
            requests: BTreeMap::new(),
            next_host_call: 0,
        }
    }

    /// A client call arrived from `caller` (see [`Caller`]: the shell
    /// verified it; whether it may make this call is decided here).
    pub fn handle_request(
        &mut self,
        now: Nanos,
        request: RequestId,
        caller: Caller,
        call: Request,
    ) -> Result<(), NotDrained> {
        self.enter(now)?;
        assert!(
            !self.requests.contains_key(&request),
            "request ids are unique while in flight"
        );
        assert!(
            !request.is_host(),
            "the top half of request ids is the host's"
        );
        match authorize::gate(&caller, &call, &self.core.config.default_project) {
            Gate::Open => self.admit(request, caller, call),
            Gate::Refused(status) => self.core.refuse(request, status),
            Gate::ByProject { session, role } => {
                let Caller::Verified(principal) = caller else {
                    unreachable!("an open caller is never gated")
                };
                let Some(id) = self.new_op(request) else {
                    return Ok(());
                };
                let mut cx = Cx {
                    core: &mut self.core,
                    op: id,
                };
                let gate = GateOp::start(&mut cx, request, principal, call, &session, role);
                self.ops.insert(id, Box::new(Op::Gate(gate)));
            }
        }
        Ok(())
    }

    /// The tools the shell can run now (MCP servers listed or changed
    /// theirs, went up or down). Turns placed from now on are gated by it;
    /// one already running keeps the catalog it started with.
    pub fn set_catalog(&mut self, catalog: crate::vocab::Catalog) {
        assert!(
            catalog.iter().all(|t| !t.name.is_empty()),
            "catalog tools are named"
        );
        self.core.config.tools.catalog = Some(std::sync::Arc::new(catalog));
    }

    /// Starts the operation of a permitted call.
    fn admit(&mut self, request: RequestId, caller: Caller, call: Request) {
        // A Cancel goes to the operation holding its session, if any: only
        // that operation can stop what it runs. Taken even at the in-flight
        // cap, since it makes room.
        if let Request::Cancel(req) = &call
            && let Some(&holder) = self.core.guards().get(&req.session)
            && self.ops.contains_key(&holder)
        {
            let actor = caller.actor();
            self.dispatch(holder, |op, cx| {
                op.on_cancel_request(cx, request, req, actor.as_ref())
            });
            return;
        }
        let Some(id) = self.new_op(request) else {
            return;
        };
        let mut op = Box::new(Op::new(request, caller, call));
        let flow = op.start(&mut Cx {
            core: &mut self.core,
            op: id,
        });
        self.settle(id, op, flow);
    }

    /// A fresh operation id for `request`, or None (and a refusal) at the
    /// in-flight cap.
    fn new_op(&mut self, request: RequestId) -> Option<OpId> {
        if self.ops.len() >= self.core.config.max_in_flight {
            let status = Status::new(
                Code::ResourceExhausted,
                format!(
                    "{} calls in flight, the most this host takes; retry later",
                    self.ops.len()
                ),
            );
            self.core.refuse(request, status);
            return None;
        }
        self.next_op += 1;
        let id = OpId(self.next_op);
        debug_assert!(!self.ops.contains_key(&id), "operation ids are fresh");
        let earlier = self.requests.insert(request, id);
        assert!(earlier.is_none(), "request ids are unique while in flight");
        Some(id)
    }

    /// The answer to an effect.
    pub fn handle_outcome(
        &mut self,
        now: Nanos,
        effect: EffectId,
        outcome: Outcome,
    ) -> Result<(), NotDrained> {
        self.enter(now)?;
        let Some(id) = self.core.take_waiter(effect) else {
            panic!("outcome for unknown effect {effect:?}: each effect is answered once");
        };
        let alive = self.ops.contains_key(&id);
        self.core.observe_leases(effect, &outcome, alive);
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
        if let Some(id) = self.core.chunk_owner(effect) {
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
        self.core.first_events.heard(conn);
        // Input on a closed connection is late and meaningless.
        if let Some(id) = self.core.conn_owner(conn) {
            self.dispatch(id, |op, cx| op.on_harness(cx, conn, input));
        }
        Ok(())
    }

    /// The client of a streamed call went away.
    pub fn handle_cancel(&mut self, now: Nanos, request: RequestId) -> Result<(), NotDrained> {
        self.enter(now)?;
        if let Some(id) = self.requests.get(&request).copied() {
            debug_assert!(self.ops.contains_key(&id), "a request's operation is live");
            self.dispatch(id, |op, cx| op.on_cancel(cx));
        }
        Ok(())
    }

    /// Time passed; fires every deadline at or before `now`. Every other
    /// `handle_*` does the same first, so a shell need not order its timer
    /// before queued input.
    pub fn handle_timeout(&mut self, now: Nanos) -> Result<(), NotDrained> {
        self.enter(now)
    }

    /// The next effect to perform, if any.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.core.poll_effect()
    }

    /// The oldest decision not yet told (see [`Signal`]). Unlike effects,
    /// signals need not be drained: the queue keeps the newest
    /// [`SIGNAL_QUEUE`].
    #[must_use]
    pub fn poll_signal(&mut self) -> Option<Signal> {
        self.core.poll_signal()
    }

    /// When `handle_timeout` must next be called, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.core.next_deadline()
    }

    /// Sessions whose lease this host holds (a host at rest holds none).
    pub fn leased(&self) -> Vec<String> {
        self.core.leases.sessions().map(str::to_owned).collect()
    }

    /// Operations in flight (a host at rest holds none).
    pub fn in_flight(&self) -> usize {
        debug_assert!(
            self.ops.len() <= self.requests.len(),
            "every operation serves a request"
        );
        self.ops.len()
    }

    /// Registers a harness route at run time (startup loading of stored
    /// registrations goes through here too).
    pub fn add_route(&mut self, name: &str, route: Route) -> bool {
        let registered = route.registered;
        let added = self.core.add_route(name, route);
        debug_assert!(
            !added || self.is_static(name) != registered,
            "an added route is served under its name"
        );
        added
    }

    /// True for a configured (not registered) harness name.
    pub fn is_static(&self, name: &str) -> bool {
        self.core.is_static(name)
    }

    /// The names a boot reserves in the store: every static route name and
    /// `config.reserved`, sorted and de-duplicated. See [`registry`] for why
    /// a collision must fail the boot.
    pub fn reserved_names(&self) -> Vec<String> {
        let names = self.core.reserved_names();
        debug_assert!(
            names.windows(2).all(|w| w[0] < w[1]) && names.iter().all(|n| !n.is_empty()),
            "reserved names are named, sorted and distinct"
        );
        names
    }

    /// Loads stored registration rows at boot; returns the (name, reason)
    /// pairs this host could not serve. See [`registry`] for the rules.
    pub fn load_registrations(&mut self, rows: &[HarnessRow]) -> Vec<(String, String)> {
        let isolated =
            crate::ops::requests::registry::rules::load_registrations(&mut self.core, rows);
        debug_assert!(
            isolated.len() <= rows.len(),
            "a row is isolated once at most"
        );
        isolated
    }

    /// Why this host cannot serve a stored registration, if it was marked.
    pub fn unservable_reason(&self, name: &str) -> Option<&str> {
        self.core.unservable.get(name).map(String::as_str)
    }

    /// Takes `now` and fires every deadline due by then, before the input
    /// itself: an answer that arrives after its call's deadline must not
    /// carry the call on to its next effect (a fence mint, an append).
    fn enter(&mut self, now: Nanos) -> Result<(), NotDrained> {
        if self.core.undrained() {
            return Err(NotDrained);
        }
        // Time never runs backwards inside the machine.
        self.core.now = self.core.now.max(now);
        let now = self.core.now;
        while let Some(id) = self.core.pop_due(now) {
            if self.ops.contains_key(&id) {
                self.dispatch(id, |op, cx| op.on_deadline(cx));
            }
        }
        // A harness silent past its first-event bound: its connection
        // fails as if the harness had said it was unavailable.
        let bound_ms = self.core.config.connect_timeout_ms;
        while let Some(conn) = self.core.first_events.pop_due(now) {
            if let Some(id) = self.core.conn_owner(conn) {
                let text = format!("no event within {bound_ms} ms of Start");
                self.dispatch(id, |op, cx| {
                    op.on_harness(cx, conn, HarnessInput::Unavailable(text))
                });
            }
        }
        self.core.renew_due(now);
        self.expire_due(now);
        debug_assert!(self.core.next_deadline().is_none_or(|at| at > now));
        debug_assert!(
            self.requests.values().all(|id| self.ops.contains_key(id)),
            "every request in flight has its operation"
        );
        Ok(())
    }

    /// Starts the host's own expiry of every approval request whose wait
    /// ran out by `now`. At the in-flight cap the rest wait a moment: an
    /// expiry is never refused, only delayed.
    fn expire_due(&mut self, now: Nanos) {
        while self.ops.len() < self.core.config.max_in_flight {
            let Some((session, armed)) = self.core.expiries.pop_due(now) else {
                return;
            };
            self.next_host_call += 1;
            let request = RequestId(RequestId::HOST | self.next_host_call);
            let id = self.new_op(request).expect("below the in-flight cap");
            let mut op = Box::new(Op::Expire(crate::ops::requests::expire::ExpireOp::new(
                request, session, armed,
            )));
            let flow = op.start(&mut Cx {
                core: &mut self.core,
                op: id,
            });
            self.settle(id, op, flow);
        }
        // Full: whatever is due now goes again in a second.
        while let Some((session, armed)) = self.core.expiries.pop_due(now) {
            let later = crate::ops::stages::expiry::Armed {
                at: now.saturating_add(1_000_000_000),
                ..armed
            };
            self.core.expiries.arm(&session, later);
        }
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
        debug_assert!(
            !self.ops.contains_key(&id),
            "an operation runs out of the table"
        );
        self.settle(id, op, flow);
    }

    fn settle(&mut self, id: OpId, mut op: Box<Op>, flow: Flow) {
        // A gate that let its call through hands it on: the gate ends and
        // the call's own operation starts.
        if let Op::Gate(gate) = &mut *op
            && let Some((caller, call)) = gate.take_admitted()
        {
            let request = self.finish(id);
            assert_eq!(request.len(), 1, "a gate serves one request");
            self.admit(request[0], caller, call);
            return;
        }
        match flow {
            Flow::Continue => {
                self.ops.insert(id, op);
            }
            Flow::Done => {
                self.finish(id);
            }
        }
        debug_assert!(
            self.ops.len() <= self.core.config.max_in_flight,
            "the in-flight cap holds"
        );
    }

    /// Drops finished operation `id`; returns the requests it served.
    fn finish(&mut self, id: OpId) -> Vec<RequestId> {
        debug_assert!(
            !self.ops.contains_key(&id),
            "a finishing operation left the table"
        );
        let requests: Vec<RequestId> = self
            .requests
            .iter()
            .filter(|(_, op)| **op == id)
            .map(|(r, _)| *r)
            .collect();
        self.core.release(id, &requests);
        self.requests.retain(|_, op| *op != id);
        requests
    }
}
