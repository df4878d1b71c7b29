//! What an operation may touch while it runs: the shared core of the host
//! (time, config, routes, ids, the effect queue and the routing tables) and
//! the handle [`Cx`] an operation gets on it.
//!
//! Invariants kept here: every effect with an id is in `waiting` exactly
//! until its outcome arrives; a connection, chunk stream, guard or timer
//! belongs to exactly one operation and is dropped with it ([`Core::release`]).

use crate::ops::stages::expiry::{self, Expiries};
use crate::ops::stages::first_event::FirstEvents;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::ops::stages::leases::Leases;
use crate::vocab::{
    ClientEffect, Code, ConnId, Effect, EffectId, HarnessCheck, HarnessEffect, HostConfig,
    IdSource, Nanos, Outcome, RequestId, Response, Route, SIGNAL_QUEUE, SessionRow, Signal, Status,
    StoreEffect, StreamItem,
};

/// Identifies one operation (one client request in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

impl OpId {
    /// Owns abandoned effects: never an operation (those count from 1).
    pub const NOBODY: OpId = OpId(0);
}

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
    pub(crate) leases: Leases<OpId>,
    /// Lease releases in flight, by session.
    releasing: BTreeMap<EffectId, String>,
    /// Replies held until the releases of these sessions are answered.
    deferred: Vec<(BTreeSet<String>, Vec<Effect>)>,
    /// Bounded by [`SIGNAL_QUEUE`]: the oldest go first.
    signals: VecDeque<Signal>,
    /// Connections whose harness owes its first event.
    pub(crate) first_events: FirstEvents,
    /// Approval requests the host denies when their wait runs out.
    pub(crate) expiries: Expiries,
    /// Replies to the host's own calls ([`RequestId::is_host`]), until the
    /// operation that made the call takes them; one per call in flight.
    host_replies: BTreeMap<RequestId, Result<Response, Status>>,
}

impl Core {
    /// A core at time zero serving `config`'s static routes.
    pub(crate) fn new(config: HostConfig, ids: Box<dyn IdSource + Send>) -> Self {
        let routes = config.harnesses.clone();
        let leases = Leases::new(config.lease.clone());
        Self {
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
            leases,
            releasing: BTreeMap::new(),
            deferred: Vec::new(),
            signals: VecDeque::new(),
            first_events: FirstEvents::default(),
            expiries: Expiries::default(),
            host_replies: BTreeMap::new(),
        }
    }

    /// Hands a client effect on, unless it answers one of the host's own
    /// calls: a reply is kept for the operation that made the call, a
    /// streamed item has no reader and goes.
    fn tell_client(&mut self, effect: ClientEffect) {
        let (ClientEffect::Reply { request, .. } | ClientEffect::Stream { request, .. }) = &effect;
        let request = *request;
        if !request.is_host() {
            self.effects.push_back(Effect::Client(effect));
            return;
        }
        if let ClientEffect::Reply { request, result } = effect {
            let earlier = self.host_replies.insert(request, result);
            assert!(earlier.is_none(), "a call is answered once");
        }
        debug_assert!(self.host_replies.len() <= self.config.max_in_flight + 1);
    }

    /// The reply to the host's own call `request`, once it came.
    pub(crate) fn take_host_reply(
        &mut self,
        request: RequestId,
    ) -> Option<Result<Response, Status>> {
        assert!(request.is_host(), "only the host's own calls are kept");
        self.host_replies.remove(&request)
    }

    /// The oldest signal not yet polled.
    pub(crate) fn poll_signal(&mut self) -> Option<Signal> {
        debug_assert!(self.signals.len() <= SIGNAL_QUEUE);
        self.signals.pop_front()
    }

    /// True while effects wait to be polled.
    pub(crate) fn undrained(&self) -> bool {
        !self.effects.is_empty()
    }

    /// The next effect to perform, if any.
    pub(crate) fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The operation waiting for `effect`, which stops waiting: an outcome
    /// arrives once. Chunks of that effect stop being routed too.
    pub(crate) fn take_waiter(&mut self, effect: EffectId) -> Option<OpId> {
        self.chunks.remove(&effect);
        self.waiting.remove(&effect)
    }

    /// The operation that wants `effect`'s streamed chunks, if any.
    pub(crate) fn chunk_owner(&self, effect: EffectId) -> Option<OpId> {
        let owner = self.chunks.get(&effect).copied();
        debug_assert!(
            owner.is_none_or(|op| self.waiting.get(&effect) == Some(&op)),
            "chunks are routed only while their effect waits for the same operation"
        );
        owner
    }

    /// The operation owning open connection `conn`, if any.
    pub(crate) fn conn_owner(&self, conn: ConnId) -> Option<OpId> {
        let owner = self.conns.get(&conn).copied();
        debug_assert!(owner != Some(OpId::NOBODY), "a connection has an owner");
        owner
    }

    /// Removes and returns the earliest deadline at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<OpId> {
        let &(at, id) = self.timers.first()?;
        if at > now {
            return None;
        }
        self.timers.pop_first();
        assert_ne!(id, OpId::NOBODY, "deadlines belong to operations");
        Some(id)
    }

    /// The earliest armed deadline, first-event bound or lease renewal.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        let op = self.timers.first().map(|(at, _)| *at);
        [
            op,
            self.first_events.next_due(),
            self.leases.next_due(),
            self.expiries.next_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Sends every lease renewal due by `now`. A renewal's outcome is
    /// nobody's but the lease table's.
    pub(crate) fn renew_due(&mut self, now: Nanos) {
        while let Some((session, fence, ttl)) = self.leases.pop_due(now) {
            assert!(ttl > 0, "a renewal holds; only a release has ttl 0");
            let id = self.hold_lease(session.clone(), fence, ttl);
            self.leases.renewing(id, session, fence);
        }
    }

    /// Lets the lease table see an outcome before its operation does.
    pub(crate) fn observe_leases(&mut self, effect: EffectId, outcome: &Outcome, alive: bool) {
        if let Some(session) = self.releasing.remove(&effect) {
            // Whatever the answer: a failed release lapses by itself.
            self.released(&session);
            return;
        }
        let now = self.now;
        if let Some((session, fence)) = self.leases.observe(now, effect, outcome, alive) {
            self.release_lease(session, fence);
        }
    }

    fn release_lease(&mut self, session: String, fence: i64) {
        let id = self.hold_lease(session.clone(), fence, 0);
        let fresh = self.releasing.insert(id, session).is_none();
        assert!(fresh, "one release per effect id");
    }

    /// `session`'s release was answered: sends the replies that waited
    /// for nothing else.
    fn released(&mut self, session: &str) {
        let mut waiting = Vec::with_capacity(self.deferred.len());
        for (mut sessions, replies) in std::mem::take(&mut self.deferred) {
            sessions.remove(session);
            if sessions.is_empty() {
                self.effects.extend(replies);
            } else {
                waiting.push((sessions, replies));
            }
        }
        self.deferred = waiting;
        debug_assert!(
            self.deferred
                .iter()
                .all(|(sessions, _)| !sessions.is_empty()),
            "replies wait only for releases still unanswered"
        );
    }

    /// Emits a HoldLease (ttl 0 releases) owned by no operation.
    fn hold_lease(&mut self, session: String, fence: i64, ttl: Nanos) -> EffectId {
        self.next_effect += 1;
        let id = EffectId(self.next_effect);
        let effect = self.leases.hold_effect(id, session, fence, ttl, self.now);
        let fresh = self.waiting.insert(id, OpId::NOBODY).is_none();
        assert!(fresh, "effect ids are never reused");
        self.effects.push_back(effect);
        id
    }

    /// Effects waiting for an outcome (for reports).
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Open connections (for reports).
    pub(crate) fn open_conns(&self) -> usize {
        self.conns.len()
    }

    /// Session guards and their holders (for reports).
    pub(crate) fn guards(&self) -> &BTreeMap<String, OpId> {
        debug_assert!(self.guards.values().all(|op| *op != OpId::NOBODY));
        &self.guards
    }

    /// Replies `status` to a call no operation was made for.
    pub(crate) fn refuse(&mut self, request: RequestId, status: Status) {
        assert_ne!(status.code, Code::Ok, "a refusal is an error");
        let reply = ClientEffect::Reply {
            request,
            result: Err(status),
        };
        self.tell_client(reply);
    }

    /// Drops everything finished operation `id` held: its guards, timers and
    /// chunk routes, its connections, each closed, and its leases, each
    /// released, with the replies to `requests` held back until those
    /// releases are answered. Effects it left outstanding (cut short by a
    /// deadline or a cancel) stay in `waiting`; their outcomes are dropped
    /// on arrival.
    pub(crate) fn release(&mut self, id: OpId, requests: &[RequestId]) {
        assert_ne!(id, OpId::NOBODY, "only an operation finishes");
        self.guards.retain(|_, holder| *holder != id);
        self.timers.retain(|(_, holder)| *holder != id);
        self.chunks.retain(|_, holder| *holder != id);
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, holder)| **holder == id)
            .map(|(c, _)| *c)
            .collect();
        for conn in conns {
            self.conns.remove(&conn);
            self.first_events.heard(conn);
            self.effects
                .push_back(Effect::Harness(HarnessEffect::Close { conn }));
        }
        debug_assert!(self.conns.values().all(|holder| *holder != id));
        let (now, later) = self.leases.release(id);
        let sessions: BTreeSet<String> = now.iter().map(|(s, _)| s.clone()).chain(later).collect();
        for (session, fence) in now {
            self.release_lease(session, fence);
        }
        if sessions.is_empty() || requests.is_empty() {
            return;
        }
        let (replies, rest): (VecDeque<Effect>, VecDeque<Effect>) =
            std::mem::take(&mut self.effects)
                .into_iter()
                .partition(|e| {
                    matches!(e, Effect::Client(ClientEffect::Reply { request, .. })
                    if requests.contains(request))
                });
        self.effects = rest;
        if !replies.is_empty() {
            self.deferred.push((sessions, replies.into()));
        }
        debug_assert!(self.deferred.iter().all(|(s, _)| !s.is_empty()));
    }

    pub(crate) fn add_route(&mut self, name: &str, route: Route) -> bool {
        if self.routes.contains_key(name) || self.unservable.contains_key(name) {
            return false;
        }
        let fresh = self.routes.insert(name.to_owned(), route).is_none();
        debug_assert!(fresh, "a route is added once and never replaced");
        true
    }

    /// True for a configured (not registered) harness name.
    pub(crate) fn is_static(&self, name: &str) -> bool {
        self.routes.get(name).is_some_and(|r| !r.registered)
    }

    /// The names to reserve in the store at boot: every static route name
    /// and `config.reserved`, sorted and de-duplicated.
    pub(crate) fn reserved_names(&self) -> Vec<String> {
        let statics = self
            .routes
            .iter()
            .filter(|(_, r)| !r.registered)
            .map(|(n, _)| n.clone());
        let all: BTreeSet<String> = statics
            .chain(self.config.reserved.iter().cloned())
            .filter(|n| !n.is_empty())
            .collect();
        all.into_iter().collect()
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
        assert_ne!(self.op, OpId::NOBODY, "only an operation waits");
        let effect = make(id);
        debug_assert_eq!(effect.id(), Some(id));
        let fresh = self.core.waiting.insert(id, self.op).is_none();
        assert!(fresh, "effect ids are never reused");
        self.core.effects.push_back(effect);
        id
    }

    /// Reads the session row.
    pub(crate) fn get_session(&mut self, session: &str) -> EffectId {
        let session = session.to_owned();
        self.request(|id| Effect::Store(StoreEffect::GetSession { id, session }))
    }

    /// Reads the session's whole journal, summarized.
    pub(crate) fn read_journal(&mut self, session: &str) -> EffectId {
        let session = session.to_owned();
        self.request(|id| Effect::Store(StoreEffect::ReadJournal { id, session }))
    }

    /// Reads records `from_seq..=to_seq` (0 = to the head).
    pub(crate) fn read_log(&mut self, session: &str, from_seq: i64, to_seq: i64) -> EffectId {
        assert_eq!(to_seq, 0, "a log read runs to the head");
        self.read_records(session, from_seq, to_seq, None)
    }

    /// Reads one page of `request`'s stream, paced by its client (see
    /// [`Pace`](crate::vocab::Pace)).
    pub(crate) fn read_page(
        &mut self,
        request: RequestId,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> EffectId {
        assert!(to_seq >= from_seq, "a page covers at least one seq");
        let pace = crate::vocab::Pace {
            request,
            max_bytes: crate::vocab::config::REPLAY_PAGE_BYTES,
        };
        self.read_records(session, from_seq, to_seq, Some(pace))
    }

    fn read_records(
        &mut self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
        pace: Option<crate::vocab::Pace>,
    ) -> EffectId {
        assert!(from_seq >= 1, "seqs count from 1");
        let session = session.to_owned();
        self.request(|id| {
            Effect::Store(StoreEffect::ReadLog {
                id,
                session,
                from_seq,
                to_seq,
                pace,
            })
        })
    }

    /// Mints the session's next fence (and takes its lease, when this host
    /// takes leases; another host's live lease refuses it).
    pub(crate) fn mint_fence(&mut self, session: &str) -> EffectId {
        self.mint(session, false)
    }

    /// Mints the session's next fence taking its lease even from a live
    /// holder on another host: Cancel exists to stop a live execution.
    pub(crate) fn mint_fence_forced(&mut self, session: &str) -> EffectId {
        self.mint(session, true)
    }

    fn mint(&mut self, session: &str, force: bool) -> EffectId {
        assert!(!session.is_empty(), "a fence is minted for a session");
        let lease = self.core.leases.claim(force);
        let now = self.core.now;
        let owned = session.to_owned();
        let id = self.request(|id| {
            Effect::Store(StoreEffect::MintFence {
                id,
                session: owned,
                now,
                lease,
            })
        });
        self.core.leases.minting(id, self.op, session);
        id
    }

    /// Appends `events` after `expected_last_seq` under `fence`.
    pub(crate) fn append(
        &mut self,
        session: &str,
        expected_last_seq: i64,
        fence: i64,
        events: Vec<agentsessions_proto::v1::Event>,
    ) -> EffectId {
        self.append_with(session, expected_last_seq, fence, events, None)
    }

    /// Like [`Cx::append`] for the operation's last write to `session`:
    /// the append also ends the lease this operation holds on it, in the
    /// same transaction, so the reply need not wait for a release of its
    /// own. Once it commits, nothing more may be written under `fence`
    /// without risking a fence conflict with the next holder.
    pub(crate) fn append_last(
        &mut self,
        session: &str,
        expected_last_seq: i64,
        fence: i64,
        events: Vec<agentsessions_proto::v1::Event>,
    ) -> EffectId {
        let owner = self.core.leases.releasable(self.op, session, fence);
        let releasing = owner.is_some();
        debug_assert!(!events.is_empty(), "a last write writes something");
        let id = self.append_with(session, expected_last_seq, fence, events, owner);
        if releasing {
            self.core.leases.ending(id, session, fence);
        }
        id
    }

    /// A fork child's first write: `parent`'s records `1..=at_seq` by
    /// reference, then `events` (see [`StoreEffect::Fork`]).
    pub(crate) fn fork_append(
        &mut self,
        session: &str,
        parent: &str,
        at_seq: i64,
        fence: i64,
        events: Vec<agentsessions_proto::v1::Event>,
    ) -> EffectId {
        assert!(fence > 0, "a child's first write is under its minted fence");
        debug_assert!(!events.is_empty(), "the FORK marker follows the prefix");
        let (session, parent) = (session.to_owned(), parent.to_owned());
        let now = self.core.now;
        let compute_state = crate::journal::projection::batch_compute_state(&events);
        self.request(|id| {
            Effect::Store(StoreEffect::Fork {
                id,
                session,
                parent,
                at_seq,
                fence,
                events,
                compute_state,
                now,
            })
        })
    }

    fn append_with(
        &mut self,
        session: &str,
        expected_last_seq: i64,
        fence: i64,
        events: Vec<agentsessions_proto::v1::Event>,
        release: Option<String>,
    ) -> EffectId {
        assert!(fence > 0, "appends are fenced by a minted fence");
        assert!(!events.is_empty(), "an append writes records");
        let mut events = events;
        let core = &mut *self.core;
        expiry::stamp(
            &mut core.expiries,
            (&core.config.tools, core.now),
            (session, expected_last_seq),
            &mut events,
        );
        let session = session.to_owned();
        let now = self.core.now;
        let compute_state = crate::journal::projection::batch_compute_state(&events);
        self.request(|id| {
            Effect::Store(StoreEffect::Append {
                id,
                now,
                compute_state,
                session,
                expected_last_seq,
                fence,
                events,
                release,
            })
        })
    }

    /// Upserts a session row, checking the registry when `check` is set.
    pub(crate) fn put_session(&mut self, row: SessionRow, check: Option<HarnessCheck>) -> EffectId {
        assert!(!row.uid.is_empty(), "a stored row has a uid");
        let now = self.core.now;
        self.request(|id| {
            Effect::Store(StoreEffect::PutSession {
                id,
                row,
                check,
                now,
            })
        })
    }

    /// Emits an effect that expects no outcome.
    pub(crate) fn emit(&mut self, effect: Effect) {
        debug_assert_eq!(effect.id(), None);
        if let Effect::Harness(HarnessEffect::Send { conn, .. }) = &effect {
            let (now, bound) = (self.core.now, self.core.config.connect_timeout_ms);
            self.core.first_events.sent(*conn, now, bound);
        }
        self.core.effects.push_back(effect);
    }

    /// Allocates a connection id owned by this operation.
    pub(crate) fn new_conn(&mut self) -> ConnId {
        self.core.next_conn += 1;
        let conn = ConnId(self.core.next_conn);
        let fresh = self.core.conns.insert(conn, self.op).is_none();
        assert!(fresh, "connection ids are never reused");
        self.core.first_events.opened(conn);
        conn
    }

    /// Closes a connection and stops routing its input.
    pub(crate) fn close(&mut self, conn: ConnId) {
        debug_assert!(
            self.core.conns.get(&conn).is_none_or(|op| *op == self.op),
            "an operation closes only its own connections"
        );
        if self.core.conns.remove(&conn).is_some() {
            self.core.first_events.heard(conn);
            self.core
                .effects
                .push_back(Effect::Harness(HarnessEffect::Close { conn }));
        }
    }

    /// Stops routing model call `effect`'s outcome and chunks to this
    /// operation, which goes on without it (a canceled run), and tells the
    /// provider to stop it: its outcome is dropped on arrival, as for a
    /// finished operation.
    pub(crate) fn abandon_model(&mut self, effect: EffectId) {
        let waiter = self
            .core
            .waiting
            .get_mut(&effect)
            .expect("an outstanding effect");
        assert_eq!(
            *waiter, self.op,
            "an operation abandons only its own effects"
        );
        *waiter = OpId::NOBODY;
        self.core.chunks.remove(&effect);
        self.core
            .effects
            .push_back(Effect::AbandonModel { id: effect });
    }

    /// Routes streamed model chunks of `effect` to this operation.
    pub(crate) fn want_chunks(&mut self, effect: EffectId) {
        assert_eq!(
            self.core.waiting.get(&effect),
            Some(&self.op),
            "chunks of an effect this operation waits for"
        );
        self.core.chunks.insert(effect, self.op);
    }

    /// Takes the session's overlap guard; false if another operation holds it.
    pub(crate) fn try_guard(&mut self, session: &str) -> bool {
        assert!(!session.is_empty(), "a guard names a session");
        match self.core.guards.get(session) {
            Some(holder) => *holder == self.op,
            None => {
                self.core.guards.insert(session.to_owned(), self.op);
                true
            }
        }
    }

    /// Gives back the session's guard, held by this operation (an
    /// operation that works through several sessions one at a time).
    /// Does nothing if this operation does not hold it.
    pub(crate) fn unguard(&mut self, session: &str) {
        if self.core.guards.get(session) == Some(&self.op) {
            self.core.guards.remove(session);
        }
    }

    /// Deletes `session` if its head is still `expected_last_seq`.
    pub(crate) fn delete_session(
        &mut self,
        session: &str,
        expected_last_seq: i64,
        principal: &str,
    ) -> EffectId {
        assert!(expected_last_seq >= 0, "a seq or 0");
        let session = session.to_owned();
        let principal = principal.to_owned();
        let now = self.core.now;
        self.request(|id| {
            Effect::Store(StoreEffect::DeleteSession {
                id,
                session,
                expected_last_seq,
                now,
                principal,
            })
        })
    }

    /// Arms a deadline for this operation.
    pub(crate) fn set_deadline(&mut self, at: Nanos) {
        assert!(at > 0, "a deadline is a point in time");
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
        self.core
            .tell_client(ClientEffect::Stream { request, item });
    }

    /// Finishes the client call.
    pub(crate) fn reply(&mut self, request: RequestId, result: Result<Response, Status>) {
        debug_assert!(
            result.as_ref().err().is_none_or(|s| s.code != Code::Ok),
            "a failed call replies an error status"
        );
        self.core
            .tell_client(ClientEffect::Reply { request, result });
    }

    /// Tells the shell of a decision (see [`Signal`]).
    pub(crate) fn signal(&mut self, signal: Signal) {
        let queue = &mut self.core.signals;
        if queue.len() == SIGNAL_QUEUE {
            queue.pop_front();
        }
        queue.push_back(signal);
        debug_assert!(queue.len() <= SIGNAL_QUEUE);
    }

    /// `session` waits for a decision, or no longer does.
    pub(crate) fn signal_awaiting(&mut self, session: &str, awaiting: bool) {
        assert!(!session.is_empty());
        if !awaiting {
            // Decided, canceled or deleted: nothing is left to expire.
            self.core.expiries.disarm(session);
        }
        self.signal(Signal::Awaiting {
            session: session.to_owned(),
            awaiting,
        });
    }
}
