//! A deterministic world around one [`Host`]: an in-memory store, scripted
//! harnesses, an echo model and a deduplicating tool executor. Every effect
//! is performed in order and every resulting input is delivered FIFO, so a
//! run is a pure function of the calls made.

use std::collections::{BTreeMap, VecDeque};

use agentsessions_proto::v1::{HarnessDescriptor, SnapshotRef, ToolResult};

use super::harness::{self, Script};
use super::store::MemStore;
use agentsessions_machine::events;
use agentsessions_machine::host::Host;
use agentsessions_machine::vocab::{
    AppendError, Backend, BootReport, Caller, ClientEffect, ConnId, CountingIds, Effect, EffectId,
    ExecuteTool, HarnessEffect, HarnessFailure, HarnessInput, HarnessOutcome, History, HostConfig,
    InvokeModel, ModelReply, Nanos, Outcome, Request, RequestId, Response, Route, RuntimeCall,
    RuntimeOp, RuntimeReply, Status, StoreEffect, StoreOutcome, StreamItem,
};

/// The end of one client call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Frames streamed before the reply.
    pub items: Vec<StreamItem>,
    /// The reply.
    pub reply: Result<Response, Status>,
}

impl Call {
    /// The reply's status code (`Ok` on success).
    pub fn code(&self) -> agentsessions_machine::vocab::Code {
        match &self.reply {
            Ok(_) => agentsessions_machine::vocab::Code::Ok,
            Err(s) => s.code,
        }
    }

    /// The session of a Session reply (or of the last Session frame).
    pub fn session(&self) -> Option<agentsessions_proto::v1::Session> {
        match &self.reply {
            Ok(Response::Session(s)) => Some(s.clone()),
            _ => self.items.iter().rev().find_map(|i| match i {
                StreamItem::Session(s) => Some(s.clone()),
                _ => None,
            }),
        }
    }

    /// Seqs of streamed records.
    pub fn record_seqs(&self) -> Vec<i64> {
        self.items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Record(r) => Some(r.record().seq),
                _ => None,
            })
            .collect()
    }
}

enum Input {
    Outcome(EffectId, Outcome),
    Harness(ConnId, HarnessInput),
}

/// Tool executor that deduplicates by (session, idempotency key), as the
/// Go reference requires executors to.
#[derive(Debug, Default)]
pub struct Executor {
    done: BTreeMap<(String, String), ToolResult>,
    /// Calls received (re-drives included).
    pub attempts: usize,
    /// Effects actually performed (after dedup).
    pub effects: usize,
    /// When set, the next attempt fails with this text.
    pub fail_next: Option<String>,
    /// When set, the next attempt performs its effect and then reports this
    /// failure, as an executor whose answer was lost would.
    pub lose_next: Option<String>,
}

impl Executor {
    /// Drops every remembered result of `session`.
    pub fn forget(&mut self, session: &str) {
        self.done.retain(|(s, _), _| s != session);
    }

    /// Sessions with remembered results.
    pub fn sessions(&self) -> Vec<String> {
        let mut out: Vec<String> = self.done.keys().map(|(s, _)| s.clone()).collect();
        out.dedup();
        out
    }
}

/// One-shot failures injected into effects the world performs. Each knob
/// fires once and then clears, so a retry sees a healthy world.
#[derive(Debug, Default)]
pub struct Faults {
    /// Fail an append after letting this many more succeed: `(skip, error)`.
    pub append: Option<(usize, AppendError)>,
    /// Fail the next MintFence.
    pub fence: Option<String>,
    /// Fail a ReadLog or ReadJournal after letting this many more succeed.
    pub read: Option<(usize, String)>,
    /// Fail a GetSession after letting this many more succeed.
    pub get: Option<(usize, String)>,
    /// Fail the next Runtime Snapshot.
    pub snapshot: Option<String>,
    /// Fail the next Runtime Create or Restore.
    pub provision: Option<String>,
    /// Fail the next Dial.
    pub dial: Option<HarnessFailure>,
    /// Fail the next Describe of an open connection (the live recheck).
    pub recheck: Option<HarnessFailure>,
}

/// A hook run just before the world performs an effect, with the store;
/// tests use it to race another writer against a step of an operation.
pub type BeforeEffect = Box<dyn FnMut(&Effect, &mut MemStore) + Send>;

/// Chooses the effect whose answer [`World::pause_on`] holds back.
pub type PausePredicate = Box<dyn FnMut(&Effect) -> bool + Send>;

/// Builds a fresh script for each connection to a harness kind.
pub type ScriptFactory = Box<dyn Fn() -> Box<dyn Script> + Send>;

/// A call's streamed frames so far and, once it has replied, its reply.
type Pending = (Vec<StreamItem>, Option<Result<Response, Status>>);

/// The world. See the module docs.
pub struct World {
    /// The machine under test.
    pub host: Host,
    /// The journal.
    pub store: MemStore,
    /// Virtual time (unix nanos).
    pub now: Nanos,
    config: HostConfig,
    /// Live harness connections.
    conns: BTreeMap<ConnId, (String, Box<dyn Script>)>,
    /// Remote addresses and the script kind behind each.
    pub remote: BTreeMap<String, String>,
    /// Scripts for harness kinds beyond the built-in ones (checked first).
    pub scripts: BTreeMap<String, ScriptFactory>,
    /// Descriptor answers overriding a kind's own, by kind.
    pub descriptors: BTreeMap<String, HarnessDescriptor>,
    /// Live model invocations.
    pub model_calls: usize,
    /// When set, the next model call fails with this text.
    pub model_fail_next: Option<agentsessions_machine::vocab::ModelFailure>,
    /// The executor.
    pub executor: Executor,
    /// Describe answers to fail, by route name.
    pub describe_fail: BTreeMap<String, HarnessFailure>,
    /// One-shot failures.
    pub faults: Faults,
    /// Runs before every effect is performed.
    pub before_effect: Option<BeforeEffect>,
    /// While set, events harnesses send are held back (see [`World::release`]).
    pub hold: bool,
    /// One-shot: the first effect matching this predicate has its answer
    /// (outcome, or the harness's events for a Send) held back until
    /// [`World::release`], pausing whichever operation waits on it.
    pub pause_on: Option<PausePredicate>,
    pausing: bool,
    held: VecDeque<Input>,
    /// Every effect the host emitted, in order.
    pub trace: Vec<Effect>,
    /// Runtime calls performed, in order (`create`, `restore`, `snapshot`, …).
    pub runtime_calls: Vec<String>,
    queue: VecDeque<Input>,
    replies: BTreeMap<RequestId, Pending>,
    next_request: u64,
    generation: u64,
}
/// A host config with the test harness kinds as static local routes.
pub fn config() -> HostConfig {
    let mut config = HostConfig::default();
    for kind in ["tools", "approval", "unmediated"] {
        config.harnesses.insert(
            kind.into(),
            Route {
                backend: Backend::Local { kind: kind.into() },
                descriptor_id: String::new(),
                registered: false,
                spec: None,
            },
        );
    }
    config.harnesses.insert(
        "counter".into(),
        Route {
            backend: Backend::Memory {
                kind: "counter".into(),
            },
            descriptor_id: String::new(),
            registered: false,
            spec: None,
        },
    );
    config
}

impl Default for World {
    fn default() -> Self {
        Self::new(config())
    }
}

impl World {
    /// A world around a host with `config`.
    pub fn new(config: HostConfig) -> Self {
        Self::with_store(config, MemStore::new())
    }

    /// A world around a fresh host with `config` over an existing journal,
    /// as a restarted daemon finds it.
    pub fn with_store(config: HostConfig, store: MemStore) -> Self {
        Self {
            host: Host::new(config.clone(), Box::new(CountingIds::default())),
            store,
            now: 1_700_000_000_000_000_000,
            config,
            conns: BTreeMap::new(),
            remote: BTreeMap::new(),
            scripts: BTreeMap::new(),
            descriptors: BTreeMap::new(),
            model_calls: 0,
            model_fail_next: None,
            executor: Executor::default(),
            describe_fail: BTreeMap::new(),
            faults: Faults::default(),
            before_effect: None,
            hold: false,
            pause_on: None,
            pausing: false,
            held: VecDeque::new(),
            trace: Vec::new(),
            runtime_calls: Vec::new(),
            queue: VecDeque::new(),
            replies: BTreeMap::new(),
            next_request: 0,
            generation: 0,
        }
    }

    /// Crashes the host and starts a fresh one over the same journal (and
    /// the same external executor, whose dedup rows survive a crash). Calls
    /// in flight, connections and undelivered inputs are lost. Ids continue
    /// from a new range so the new host never reuses the old one's.
    pub fn restart(&mut self) {
        self.generation += 1;
        let ids = CountingIds::starting_at(self.generation << 40);
        self.host = Host::new(self.config.clone(), Box::new(ids));
        self.conns.clear();
        self.queue.clear();
        self.held.clear();
        self.replies.clear();
        self.hold = false;
        self.pause_on = None;
    }

    /// Boots the host as the daemon does before it serves ([`Request::Boot`]:
    /// reserve the static and reserved names, load every stored row).
    pub fn boot(&mut self) -> Result<BootReport, Status> {
        match self.call(Request::Boot).reply {
            Ok(Response::Booted(report)) => Ok(report),
            Ok(other) => panic!("boot answered {other:?}"),
            Err(status) => Err(status),
        }
    }

    /// The config the host runs with.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Adds a route served by script kind `kind` (a local backend).
    pub fn add_local(&mut self, name: &str, kind: &str) {
        let route = Route {
            backend: Backend::Local { kind: kind.into() },
            descriptor_id: String::new(),
            registered: false,
            spec: None,
        };
        self.config.harnesses.insert(name.into(), route.clone());
        self.host.add_route(name, route);
    }

    /// Adds a route served by script kind `kind` on a runtime with memory
    /// snapshots.
    pub fn add_memory(&mut self, name: &str, kind: &str) {
        let route = Route {
            backend: Backend::Memory { kind: kind.into() },
            descriptor_id: String::new(),
            registered: false,
            spec: None,
        };
        self.config.harnesses.insert(name.into(), route.clone());
        self.host.add_route(name, route);
    }

    /// Makes one call and runs the world until it is idle; the call must
    /// have replied by then.
    pub fn call(&mut self, request: Request) -> Call {
        self.call_as(Caller::Open, request)
    }

    /// [`World::call`] made by `caller`.
    pub fn call_as(&mut self, caller: Caller, request: Request) -> Call {
        let id = self.start_as(caller, request);
        let call = self.take(id);
        assert_eq!(
            self.host.in_flight(),
            self.replies.len(),
            "the world is idle only when every call has replied or is held"
        );
        call
    }

    /// Starts a call and runs the world until it is idle, without requiring
    /// a reply (a call waiting on held harness events stays open).
    pub fn start(&mut self, request: Request) -> RequestId {
        self.start_as(Caller::Open, request)
    }

    /// [`World::start`] made by `caller`.
    pub fn start_as(&mut self, caller: Caller, request: Request) -> RequestId {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        self.replies.insert(id, (Vec::new(), None));
        self.now += 1_000_000;
        self.host
            .handle_request(self.now, id, caller, request)
            .expect("drained");
        self.run();
        id
    }

    /// True once call `id` has replied.
    pub fn replied(&self, id: RequestId) -> bool {
        self.replies.get(&id).is_some_and(|(_, r)| r.is_some())
    }

    /// Takes the finished call `id`. Panics if it has not replied.
    pub fn take(&mut self, id: RequestId) -> Call {
        let (items, reply) = self.replies.remove(&id).expect("a call started here");
        let Some(reply) = reply else {
            panic!("call {id:?} has not replied (held harness events?)");
        };
        Call { items, reply }
    }

    /// Cancels call `id` (the client went away) and runs until idle.
    pub fn cancel(&mut self, id: RequestId) {
        self.now += 1_000;
        self.host.handle_cancel(self.now, id).expect("drained");
        self.run();
    }

    /// True while answers are held back.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Stops holding harness events and delivers everything held back.
    pub fn release(&mut self) {
        self.hold = false;
        self.queue.extend(self.held.drain(..));
        self.run();
    }

    /// Open harness connections, in id order.
    pub fn connections(&self) -> Vec<ConnId> {
        self.conns.keys().copied().collect()
    }

    /// Delivers `input` on `conn` as if its harness had sent it, bypassing
    /// the script, then runs until idle. Fuzzing uses it to forge frames;
    /// input on a closed connection is delivered too (the host ignores it).
    pub fn inject(&mut self, conn: ConnId, input: HarnessInput) {
        self.queue.push_back(Input::Harness(conn, input));
        self.run();
    }

    /// Delivers queued inputs until nothing is left, then fires the
    /// deadlines due by then. Inputs go first on purpose: the machine fires
    /// a due deadline itself before it takes an input.
    pub fn run(&mut self) {
        self.drain();
        loop {
            while let Some(input) = self.queue.pop_front() {
                self.now += 1_000;
                match input {
                    Input::Outcome(id, outcome) => self.host.handle_outcome(self.now, id, outcome),
                    Input::Harness(conn, input) => self.host.handle_harness(self.now, conn, input),
                }
                .expect("drained");
                self.drain();
            }
            self.fire_timers();
            if self.queue.is_empty() {
                return;
            }
        }
    }

    /// The host's signals since the last call, oldest first.
    pub fn signals(&mut self) -> Vec<agentsessions_machine::vocab::Signal> {
        std::iter::from_fn(|| self.host.poll_signal()).collect()
    }

    /// Moves virtual time forward by `nanos`, firing due deadlines.
    pub fn advance(&mut self, nanos: Nanos) {
        self.now += nanos;
        self.run();
    }

    /// Fires every deadline that is due at the current time.
    fn fire_timers(&mut self) {
        while self.host.poll_timeout().is_some_and(|at| at <= self.now) {
            self.host.handle_timeout(self.now).expect("drained");
            self.drain();
        }
    }

    fn drain(&mut self) {
        while let Some(effect) = self.host.poll_effect() {
            self.trace.push(effect.clone());
            if let Some(hook) = self.before_effect.as_mut() {
                hook(&effect, &mut self.store);
            }
            if self.pause_on.as_mut().is_some_and(|p| p(&effect)) {
                self.pause_on = None;
                self.pausing = true;
            }
            self.perform(effect);
            self.pausing = false;
        }
    }

    fn script(&self, kind: &str) -> Option<Box<dyn Script>> {
        match self.scripts.get(kind) {
            Some(make) => Some(make()),
            None => harness::by_kind(kind),
        }
    }

    fn describe(&self, kind: &str) -> Result<HarnessDescriptor, HarnessFailure> {
        if let Some(d) = self.descriptors.get(kind) {
            return Ok(d.clone());
        }
        self.script(kind)
            .map(|s| s.descriptor())
            .ok_or_else(|| HarnessFailure::Unavailable(format!("no harness {kind}")))
    }

    fn harness_input(&mut self, conn: ConnId, input: HarnessInput) {
        let input = Input::Harness(conn, input);
        if self.hold || self.pausing {
            self.held.push_back(input);
        } else {
            self.queue.push_back(input);
        }
    }

    fn outcome(&mut self, id: EffectId, outcome: Outcome) {
        let input = Input::Outcome(id, outcome);
        if self.pausing {
            self.held.push_back(input);
        } else {
            self.queue.push_back(input);
        }
    }

    /// Fires a counted one-shot fault: true when it fires now.
    fn countdown<T>(slot: &mut Option<(usize, T)>) -> Option<T> {
        match slot.take() {
            Some((0, v)) => Some(v),
            Some((n, v)) => {
                *slot = Some((n - 1, v));
                None
            }
            None => None,
        }
    }

    fn script_kind(backend: &Backend, remote: &BTreeMap<String, String>) -> String {
        match backend {
            Backend::Local { kind } | Backend::Memory { kind } => kind.clone(),
            Backend::Remote { address } => remote.get(address).cloned().unwrap_or_default(),
        }
    }

    /// A store effect's injected failure, if one fires for it.
    fn store_fault(&mut self, effect: &StoreEffect) -> Option<StoreOutcome> {
        match effect {
            // A fork's write is the child's first append.
            StoreEffect::Append { .. } | StoreEffect::Fork { .. } => {
                Self::countdown(&mut self.faults.append).map(|e| StoreOutcome::Appended(Err(e)))
            }
            StoreEffect::MintFence { .. } => self
                .faults
                .fence
                .take()
                .map(|e| StoreOutcome::Fence(Err(e.into()))),
            StoreEffect::ReadLog { .. } => {
                Self::countdown(&mut self.faults.read).map(|e| StoreOutcome::Log(Err(e.into())))
            }
            StoreEffect::ReadJournal { .. } => {
                Self::countdown(&mut self.faults.read).map(|e| StoreOutcome::Journal(Err(e.into())))
            }
            StoreEffect::GetSession { .. } => {
                Self::countdown(&mut self.faults.get).map(|e| StoreOutcome::Session(Err(e.into())))
            }
            _ => None,
        }
    }

    fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::Store(effect) => self.perform_store(effect),
            Effect::Harness(effect) => self.perform_harness(effect),
            Effect::Runtime(call) => self.perform_runtime(call),
            Effect::Model(call) => self.perform_model(call),
            Effect::Tool(call) => self.perform_tool(call),
            Effect::Client(effect) => self.perform_client(effect),
            Effect::ForgetTools { session } => self.executor.forget(&session),
            // The held answer is still delivered (and dropped by the host).
            Effect::AbandonModel { .. } => {}
            // The executor answers at once (or, paused, when released):
            // there is no running call to stop. `trace` keeps the effect.
            Effect::InterruptTool { .. } => {}
        }
    }

    fn perform_store(&mut self, effect: StoreEffect) {
        let id = effect.id();
        let outcome = match self.store_fault(&effect) {
            Some(failed) => failed,
            None => self.store.perform(&effect),
        };
        self.outcome(id, Outcome::Store(outcome));
    }

    fn perform_harness(&mut self, effect: HarnessEffect) {
        match effect {
            HarnessEffect::Describe {
                id,
                harness,
                backend,
                conn,
                ..
            } => {
                let recheck = conn.and_then(|_| self.faults.recheck.take());
                let outcome = match (recheck, self.describe_fail.get(&harness).cloned()) {
                    (Some(f), _) | (None, Some(f)) => Err(f),
                    // The turn's own connection answers for the harness
                    // actually behind it.
                    (None, None) => match conn.and_then(|c| self.conns.get(&c)) {
                        Some((_, script)) => Ok(script.descriptor()),
                        None => self.describe(&Self::script_kind(&backend, &self.remote)),
                    },
                };
                self.outcome(id, Outcome::Harness(HarnessOutcome::Described(outcome)));
            }
            HarnessEffect::Dial {
                id, backend, conn, ..
            } => {
                let kind = Self::script_kind(&backend, &self.remote);
                let outcome = match (self.faults.dial.take(), self.script(&kind)) {
                    (Some(f), _) => Err(f),
                    (None, Some(script)) => {
                        self.conns.insert(conn, (kind, script));
                        Ok(())
                    }
                    (None, None) => Err(HarnessFailure::Unavailable(format!("no harness {kind}"))),
                };
                self.outcome(id, Outcome::Harness(HarnessOutcome::Dialed(outcome)));
            }
            HarnessEffect::Send {
                conn,
                mut frame,
                history,
            } => {
                History::attach(&mut frame, history.as_ref());
                if let Some((_, script)) = self.conns.get_mut(&conn) {
                    let reply = script.on_frame(&frame);
                    for ev in reply.events {
                        self.harness_input(conn, HarnessInput::Event(ev));
                    }
                    if let Some(e) = reply.fail {
                        self.harness_input(conn, HarnessInput::Failed(e));
                    } else if reply.close {
                        self.harness_input(conn, HarnessInput::Closed);
                    }
                }
            }
            HarnessEffect::Close { conn } => {
                self.conns.remove(&conn);
            }
        }
    }

    fn perform_runtime(&mut self, effect: RuntimeCall) {
        let RuntimeCall {
            id, backend, op, ..
        } = effect;
        let kind = Self::script_kind(&backend, &self.remote);
        let reply = match op {
            RuntimeOp::Create { .. } | RuntimeOp::Restore { .. } => {
                let name = if matches!(op, RuntimeOp::Create { .. }) {
                    "create"
                } else {
                    "restore"
                };
                self.runtime_calls.push(name.into());
                match self.faults.provision.take() {
                    Some(e) => Err(e),
                    None => Ok(RuntimeReply::Incarnation {
                        address: format!("local://{kind}"),
                    }),
                }
            }
            RuntimeOp::Fork { .. } => {
                self.runtime_calls.push("fork".into());
                Ok(RuntimeReply::Incarnation {
                    address: format!("local://{kind}"),
                })
            }
            RuntimeOp::Snapshot { session } => {
                self.runtime_calls.push("snapshot".into());
                match self.faults.snapshot.take() {
                    Some(e) => Err(e),
                    None => Ok(RuntimeReply::Snapshot(SnapshotRef {
                        external_uri: if backend.memory_snapshot() {
                            format!("snap://{session}")
                        } else {
                            String::new()
                        },
                        local: session,
                        memory: backend.memory_snapshot(),
                        sealed: false,
                    })),
                }
            }
            RuntimeOp::Stop { .. } => {
                self.runtime_calls.push("stop".into());
                Ok(RuntimeReply::Done)
            }
        };
        self.outcome(id, Outcome::Runtime(reply));
    }

    fn perform_model(&mut self, effect: InvokeModel) {
        let InvokeModel { id, request, .. } = effect;
        let outcome = match self.model_fail_next.take() {
            Some(e) => Err(e),
            None => {
                self.model_calls += 1;
                let text = request
                    .messages
                    .last()
                    .map(events::message_text)
                    .unwrap_or_default();
                Ok(ModelReply {
                    message: Some(events::assistant_text(&format!("echo:{text}"))),
                    usage: None,
                })
            }
        };
        self.outcome(id, Outcome::Model(outcome));
    }

    fn perform_tool(&mut self, effect: ExecuteTool) {
        let ExecuteTool {
            id, session, call, ..
        } = effect;
        let ex = &mut self.executor;
        ex.attempts += 1;
        let outcome = match ex.fail_next.take() {
            Some(e) => Err(e),
            None => {
                let key = (session, call.idempotency_key.clone());
                let result = ex.done.entry(key).or_insert_with(|| {
                    ex.effects += 1;
                    ToolResult {
                        id: call.id.clone(),
                        ..ToolResult::default()
                    }
                });
                match ex.lose_next.take() {
                    Some(e) => Err(e),
                    None => Ok(result.clone()),
                }
            }
        };
        self.outcome(
            id,
            Outcome::Tool(outcome.map_err(agentsessions_machine::vocab::ToolFailure::Error)),
        );
    }

    fn perform_client(&mut self, effect: ClientEffect) {
        match effect {
            ClientEffect::Stream { request, item } => {
                if let Some((items, _)) = self.replies.get_mut(&request) {
                    items.push(item);
                }
            }
            ClientEffect::Reply { request, result } => {
                if let Some((_, reply)) = self.replies.get_mut(&request) {
                    assert!(reply.is_none(), "a call replies once");
                    *reply = Some(result);
                }
            }
        }
    }
}
