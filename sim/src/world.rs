//! The simulated world around one or more hosts sharing one journal.
//!
//! Unlike the testkit world, nothing happens on its own: every effect with
//! an outcome waits as an [`Item`] until it is chosen and performed, and
//! every outcome or harness event waits until it is chosen and delivered.
//! The default choice (item 0) reproduces the testkit world's FIFO order;
//! an explorer may pick any enabled item instead, or crash.
//!
//! Effects without an outcome happen when they are emitted: a `Send` is
//! answered by the scripted harness at once (its events become items), a
//! `Stream` or `Reply` is the client seeing an answer.
//!
//! Everything that survives a crash lives in [`Durable`] (the store's
//! durable part, the executor's dedup table, the oracle), which is cheap to
//! clone, so an explorer can branch at a crash without replaying.

use std::collections::{BTreeMap, BTreeSet};

use agentsessions_machine::events;
use agentsessions_machine::host::Host;
use agentsessions_machine::vocab::{
    Backend, Caller, ClientEffect, ConnId, CountingIds, Effect, EffectId, ExecuteTool,
    HarnessEffect, HarnessInput, HarnessOutcome, History, HostConfig, InvokeModel, ModelReply,
    Nanos, Outcome, Request, RequestId, Response, Route, RuntimeCall, RuntimeOp, RuntimeReply,
    Status, StoreEffect, StoreOutcome, StreamItem, ToolFailure,
};
use agentsessions_proto::v1::{
    ControllerFrame, EventKind, ModelCall, SnapshotRef, ToolResult, controller_frame::Frame,
    event::Body,
};
use agentsessions_testkit::harness::Script;
use agentsessions_testkit::world as testworld;

use crate::digest::Fnv;
use crate::oracle::{Check, Oracle};
use crate::scripts;
use crate::store::{CrashVariant, SimStore};
use crate::trace::{digest_effect, hash_input, hash_outcome};

/// A tool executor with a durable ledger, as the daemon's: a key is
/// marked started before its effect and finished (with its result) after,
/// in a step of its own, so a crash can cut between the two. A finished key
/// is answered from the ledger; a started one is answered "unfinished"
/// unless the host says to run it again.
#[derive(Debug, Clone, Default)]
pub struct Executor {
    done: BTreeMap<(String, String), ToolResult>,
    /// Keys started and not finished.
    started: BTreeSet<(String, String)>,
    /// Keys whose effect happened (at least once).
    effected: BTreeSet<(String, String)>,
    /// Calls received (re-drives included).
    pub attempts: u64,
    /// Effects performed (every run that reached the tool).
    pub effects: u64,
    /// Keys whose first attempt fails with an executor error.
    pub fail_first: BTreeSet<String>,
}

impl Executor {
    /// Keys of `session` whose effect happened.
    pub fn effects_for(&self, session: &str) -> usize {
        self.effected.iter().filter(|(s, _)| s == session).count()
    }
}

/// Everything a crash leaves behind.
#[derive(Debug, Clone)]
pub struct Durable {
    /// The journal.
    pub store: SimStore,
    /// The external tool executor (its dedup rows survive).
    pub executor: Executor,
    /// Live model invocations so far.
    pub model_calls: u64,
    /// The rules and their memory.
    pub oracle: Oracle,
    /// Virtual time.
    pub now: Nanos,
    /// Host incarnations started so far (ids never repeat).
    pub incarnations: u64,
    /// Harness starts per session (the drift harness changes after one).
    pub starts: BTreeMap<String, u32>,
    /// Digest of every effect performed so far.
    pub digest: Fnv,
}

impl Default for Durable {
    fn default() -> Self {
        Self {
            store: SimStore::new(),
            executor: Executor::default(),
            model_calls: 0,
            oracle: Oracle::default(),
            now: 1_700_000_000_000_000_000,
            incarnations: 0,
            starts: BTreeMap::new(),
            digest: Fnv::default(),
        }
    }
}

/// Something waiting to be performed or delivered.
#[derive(Debug, Clone)]
pub struct Item {
    /// The host it belongs to.
    pub host: usize,
    /// What it is.
    pub what: What,
}

/// The kinds of [`Item`].
#[derive(Debug, Clone)]
pub enum What {
    /// An effect the host emitted, not performed yet.
    Effect(Effect),
    /// An effect's answer, not delivered yet, with its store transaction
    /// and, for journal reads and appends, the session.
    Outcome(EffectId, Outcome, Option<u64>, Option<String>),
    /// A harness frame or stream end, not delivered yet.
    Harness(ConnId, HarnessInput),
    /// A tool run that reached its tool: the executor's ledger has not
    /// recorded its result yet (a crash now leaves the key unfinished).
    /// Stepping it records the result and queues the outcome.
    ToolDone(EffectId, String, String, ToolResult),
}

struct Conn {
    kind: String,
    script: Box<dyn Script>,
    session: String,
    ordinal: u32,
    requests: Vec<ModelCall>,
    answers: usize,
}

struct Slot {
    host: Host,
    inc: u64,
    next_request: u64,
    /// Digest of every input this incarnation took, in order: with the
    /// host deterministic, it stands for the host's whole state.
    hist: Fnv,
}

/// A client call as the client sees it.
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// The session the call is about (for acknowledged records).
    pub session: String,
    /// Frames streamed so far.
    pub items: Vec<StreamItem>,
    /// The reply, once sent.
    pub reply: Option<Result<Response, Status>>,
}

/// The world. See the module docs.
pub struct Sim {
    /// What survives crashes.
    pub d: Durable,
    config: HostConfig,
    hosts: Vec<Slot>,
    items: Vec<Item>,
    conns: BTreeMap<(usize, ConnId), Conn>,
    calls: BTreeMap<(usize, RequestId), Call>,
}

/// How long an approval request may wait in the simulator: far beyond any
/// run's own clock (1 µs per step), so only a race's
/// [`crate::scenario::RaceOp::Expire`] reaches it.
pub const EXPIRY_MS: u64 = 3_600_000;

/// The host configuration every simulated host runs with: the testkit
/// routes plus the simulator's own harness kinds.
pub fn config() -> HostConfig {
    let mut config = testworld::config();
    config.tools.approval_expiry_ms = Some(EXPIRY_MS);
    // The operator gates `guarded`, whatever mediation a harness asks for.
    config
        .tools
        .rules
        .push(agentsessions_machine::vocab::ToolRule {
            pattern: scripts::GUARDED.into(),
            policy: agentsessions_machine::vocab::Policy::Approval,
            expiry_ms: None,
        });
    config.tools.catalog = Some(std::sync::Arc::new(scripts::catalog()));
    for kind in scripts::KINDS {
        config.harnesses.entry((*kind).into()).or_insert(Route {
            backend: Backend::Local {
                kind: (*kind).into(),
            },
            descriptor_id: String::new(),
            registered: false,
            spec: None,
        });
    }
    config
}

fn backend_kind(backend: &Backend) -> String {
    match backend {
        Backend::Local { kind } | Backend::Memory { kind } => kind.clone(),
        Backend::Remote { address } => address.clone(),
    }
}

impl Sim {
    /// A world of `hosts` fresh hosts over `d`.
    pub fn new(mut d: Durable, hosts: usize) -> Self {
        let config = config();
        let slots = (0..hosts).map(|_| Self::slot(&mut d, &config)).collect();
        Self {
            d,
            config,
            hosts: slots,
            items: Vec::new(),
            conns: BTreeMap::new(),
            calls: BTreeMap::new(),
        }
    }

    fn slot(d: &mut Durable, config: &HostConfig) -> Slot {
        d.incarnations += 1;
        let inc = d.incarnations;
        Slot {
            host: Host::new(
                config.clone(),
                Box::new(CountingIds::starting_at(inc << 40)),
            ),
            inc,
            next_request: 0,
            hist: Fnv::default(),
        }
    }

    /// Items waiting, in FIFO order.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// True when nothing waits and no call is open.
    pub fn quiescent(&self) -> bool {
        self.items.is_empty() && self.calls.values().all(|c| c.reply.is_some())
    }

    /// The call `(host, id)`, if it was made by the current incarnation.
    pub fn call(&self, host: usize, id: RequestId) -> Option<&Call> {
        self.calls.get(&(host, id))
    }

    /// Forgets a finished call.
    pub fn forget(&mut self, host: usize, id: RequestId) {
        self.calls.remove(&(host, id));
    }

    /// Makes a client call on `host`.
    pub fn request(
        &mut self,
        host: usize,
        session: &str,
        req: Request,
    ) -> Result<RequestId, crate::oracle::Violation> {
        self.request_as(host, session, Caller::Open, req)
    }

    /// Makes a client call on `host` as `caller`.
    pub fn request_as(
        &mut self,
        host: usize,
        session: &str,
        caller: Caller,
        req: Request,
    ) -> Result<RequestId, crate::oracle::Violation> {
        self.d.now += 1_000;
        let slot = &mut self.hosts[host];
        slot.next_request += 1;
        let id = RequestId(slot.next_request);
        slot.hist.str("req").u64(id.0);
        self.calls.insert(
            (host, id),
            Call {
                session: session.to_owned(),
                ..Call::default()
            },
        );
        slot.host
            .handle_request(self.d.now, id, caller, req)
            .expect("the world drains after every input");
        self.drain(host)?;
        Ok(id)
    }

    /// Moves the clock `by` forward and lets `host` fire whatever fell due
    /// (an approval deadline, a lease renewal).
    pub fn pass_time(&mut self, host: usize, by: Nanos) -> Check {
        assert!(by > 0, "time moves forward");
        self.d.now += by;
        let slot = &mut self.hosts[host];
        slot.hist.str("time").u64(by.unsigned_abs());
        slot.host
            .handle_timeout(self.d.now)
            .expect("the world drains after every input");
        self.drain(host)
    }

    /// Indices of the items that may go next. Without `interleave` only the
    /// FIFO head; with it, any outcome, the oldest effect of each host (a
    /// shell performs one host's effects in order) and the oldest frame of
    /// each connection (a stream is ordered).
    pub fn enabled(&self, interleave: bool) -> Vec<usize> {
        if self.items.is_empty() {
            return Vec::new();
        }
        if !interleave {
            return vec![0];
        }
        let mut seen_effect = std::collections::BTreeSet::new();
        let mut seen_conn = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for (i, item) in self.items.iter().enumerate() {
            let ok = match &item.what {
                What::Effect(_) => seen_effect.insert(item.host),
                What::Harness(conn, _) => seen_conn.insert((item.host, *conn)),
                What::Outcome(..) | What::ToolDone(..) => true,
            };
            if ok {
                out.push(i);
            }
        }
        out
    }

    /// Performs or delivers item `index`.
    pub fn step(&mut self, index: usize) -> Check {
        let item = self.items.remove(index);
        self.d.now += 1_000;
        let host = item.host;
        match item.what {
            What::Effect(effect) => self.perform(host, effect),
            What::Outcome(id, outcome, tx, session) => {
                if let Some(tx) = tx {
                    self.d.store.delivered(tx);
                }
                if let Some(session) = session {
                    self.observe(host, &session, &outcome)?;
                }
                let slot = &mut self.hosts[host];
                slot.hist.str("out").u64(id.0);
                hash_outcome(&mut slot.hist, &outcome);
                slot.host
                    .handle_outcome(self.d.now, id, outcome)
                    .expect("drained");
                self.drain(host)
            }
            What::Harness(conn, input) => {
                let slot = &mut self.hosts[host];
                slot.hist.str("harness").u64(conn.0);
                hash_input(&mut slot.hist, &input);
                slot.host
                    .handle_harness(self.d.now, conn, input)
                    .expect("drained");
                self.drain(host)
            }
            What::ToolDone(id, session, key, result) => {
                let ex = &mut self.d.executor;
                let dedup = (session, key);
                ex.started.remove(&dedup);
                let first = ex.done.entry(dedup).or_insert(result).clone();
                self.push(
                    host,
                    What::Outcome(id, Outcome::Tool(Ok(first)), None, None),
                );
                Ok(())
            }
        }
    }

    /// True when the pending write is an append (or fork) whose answer
    /// still waits to be delivered: its answer can be lost.
    pub fn answer_losable(&self) -> bool {
        self.d
            .store
            .pending_tx()
            .is_some_and(|tx| self.lost_answer_index(tx).is_some())
    }

    fn lost_answer_index(&self, tx: u64) -> Option<usize> {
        self.items.iter().position(|it| {
            matches!(
                &it.what,
                What::Outcome(_, Outcome::Store(StoreOutcome::Appended(Ok(_))), Some(t), _)
                    if *t == tx
            )
        })
    }

    /// The pending write's answer is lost on its way to a live host (the
    /// connection died at COMMIT, and reading it back found nothing
    /// readable): the write is kept (`committed`) or dropped, and the host
    /// is told only that the store failed, an outcome it does not know.
    /// Nothing crashes; the host goes on from there.
    pub fn lose_answer(&mut self, committed: bool) -> Check {
        let tx = self.d.store.pending_tx().expect("a pending write");
        let i = self.lost_answer_index(tx).expect("its answer waits");
        let What::Outcome(_, outcome, t, _) = &mut self.items[i].what else {
            unreachable!("found as an outcome")
        };
        *outcome = Outcome::Store(StoreOutcome::Appended(Err(
            agentsessions_machine::vocab::AppendError::Failed(
                agentsessions_machine::vocab::StoreFault::transient("commit answer lost"),
            ),
        )));
        *t = None;
        if committed {
            self.d.store.commit();
        } else {
            self.d.store.crash(CrashVariant::Drop);
        }
        assert!(!self.d.store.has_pending(), "the write is settled one way");
        self.d
            .digest
            .str("lose")
            .str(if committed { "kept" } else { "dropped" });
        self.d.oracle.note(if committed {
            "answer lost on a live host: write committed"
        } else {
            "answer lost on a live host: write not committed"
        });
        self.d.oracle.on_crash(&self.d.store)
    }

    /// Crashes every host: in-flight calls, connections and waiting items
    /// are lost, the store applies `variant` to its pending write, and fresh
    /// incarnations start over the durable journal.
    pub fn crash(&mut self, variant: CrashVariant) -> Check {
        let result = crash_durable(&mut self.d, variant);
        self.items.clear();
        self.conns.clear();
        self.calls.clear();
        let n = self.hosts.len();
        self.hosts = (0..n)
            .map(|_| Self::slot(&mut self.d, &self.config))
            .collect();
        result
    }

    /// What a crash with `variant` would leave, without touching `self`.
    pub fn crashed(&self, variant: CrashVariant) -> Result<Durable, crate::oracle::Violation> {
        let mut d = self.d.clone();
        crash_durable(&mut d, variant)?;
        Ok(d)
    }

    /// Restarts every host without losing anything (a clean restart).
    pub fn restart(&mut self) {
        assert!(self.items.is_empty(), "a clean restart needs a quiet world");
        self.d.store.commit();
        self.conns.clear();
        self.calls.clear();
        let n = self.hosts.len();
        self.hosts = (0..n)
            .map(|_| Self::slot(&mut self.d, &self.config))
            .collect();
    }

    /// Mixes the world's state into `h` (for state deduplication).
    pub fn digest_state(&self, h: &mut Fnv) {
        self.d.store.digest(h);
        for slot in &self.hosts {
            h.u64(slot.hist.finish());
        }
        for item in &self.items {
            h.u64(item.host as u64);
            match &item.what {
                What::Effect(e) => {
                    h.str("e").u64(e.id().map_or(0, |i| i.0));
                }
                What::Outcome(id, o, ..) => {
                    h.str("o").u64(id.0);
                    hash_outcome(h, o);
                }
                What::Harness(c, i) => {
                    h.str("h").u64(c.0);
                    hash_input(h, i);
                }
                What::ToolDone(id, s, k, _) => {
                    h.str("t").u64(id.0).str(s).str(k);
                }
            }
        }
        for ((host, id), call) in &self.calls {
            h.u64(*host as u64).u64(id.0).u64(call.items.len() as u64);
            match &call.reply {
                None => h.str("open"),
                Some(Ok(_)) => h.str("ok"),
                Some(Err(s)) => h.str("err").i64(s.code as i64),
            };
        }
        for (key, r) in &self.d.executor.done {
            h.str(&key.0).str(&key.1).u64(u64::from(r.is_error));
        }
        for key in &self.d.executor.started {
            h.str("started").str(&key.0).str(&key.1);
        }
        for key in &self.d.executor.effected {
            h.str("effected").str(&key.0).str(&key.1);
        }
        for (session, n) in &self.d.starts {
            h.str(session).u64(u64::from(*n));
        }
    }

    fn drain(&mut self, host: usize) -> Check {
        let mut fresh = Vec::new();
        while let Some(effect) = self.hosts[host].host.poll_effect() {
            digest_effect(&mut self.d.digest, host, &effect);
            // Frames, closes and client frames expect no answer and happen
            // at once, as a shell performs them; an effect with an outcome
            // waits for the explorer to pick it.
            if effect.id().is_none() {
                self.perform(host, effect)?;
            } else {
                fresh.push(Item {
                    host,
                    what: What::Effect(effect),
                });
            }
        }
        // New effects go first, in order: FIFO then performs them before
        // anything else, as a shell that drains and performs would.
        self.items.splice(0..0, fresh);
        Ok(())
    }

    /// Tells the oracle how far the host has now seen a journal.
    fn observe(&mut self, host: usize, session: &str, outcome: &Outcome) -> Check {
        let last = match outcome {
            Outcome::Store(StoreOutcome::Appended(Ok(r)))
            | Outcome::Store(StoreOutcome::Log(Ok(r))) => r.last(),
            Outcome::Store(StoreOutcome::Journal(Ok(j))) => {
                self.d.oracle.check_summary(session, j)?;
                j.last()
            }
            _ => return Ok(()),
        };
        if let Some(last) = last {
            self.d
                .oracle
                .on_observed(self.hosts[host].inc, session, last.seq);
        }
        Ok(())
    }

    fn push(&mut self, host: usize, what: What) {
        self.items.push(Item { host, what });
    }

    fn send(&mut self, host: usize, conn: ConnId, frame: ControllerFrame) -> Check {
        let Some(c) = self.conns.get_mut(&(host, conn)) else {
            return Ok(()); // closed: the frame is lost
        };
        match &frame.frame {
            Some(Frame::Start(_)) => {
                c.session = frame.session.clone();
                let n = self.d.starts.entry(frame.session.clone()).or_default();
                *n += 1;
                c.ordinal = *n;
            }
            Some(Frame::Model(_)) => {
                let k = c.answers;
                c.answers += 1;
                let request = c.requests.get(k).cloned().unwrap_or_default();
                let session = c.session.clone();
                self.d.oracle.on_model_answer(
                    &self.d.store,
                    &session,
                    &frame.execution_id,
                    k,
                    &request,
                )?;
            }
            Some(Frame::Tool(tr)) => {
                let session = c.session.clone();
                self.d.oracle.on_tool_answer(
                    &self.d.store,
                    &session,
                    &frame.execution_id,
                    &tr.id,
                )?;
            }
            _ => {}
        }
        let c = self.conns.get_mut(&(host, conn)).expect("checked above");
        let reply = c.script.on_frame(&frame);
        let (kind, ordinal) = (c.kind.clone(), c.ordinal);
        for mut ev in reply.events {
            if kind == scripts::CHATTER
                && ordinal > 1
                && events::kind_of(&ev) == EventKind::EventOutput
            {
                scripts::chatter_drift(&mut ev, ordinal);
            }
            if events::kind_of(&ev) == EventKind::EventModelCall {
                if kind == scripts::DRIFT && ordinal > 1 {
                    scripts::drift(&mut ev, ordinal);
                }
                if let Some(Body::Model(mc)) = &ev.body {
                    c.requests.push(mc.clone());
                }
            }
            self.items.push(Item {
                host,
                what: What::Harness(conn, HarnessInput::Event(ev)),
            });
        }
        if let Some(e) = reply.fail {
            self.push(host, What::Harness(conn, HarnessInput::Failed(e)));
        } else if reply.close {
            self.push(host, What::Harness(conn, HarnessInput::Closed));
        }
        Ok(())
    }

    fn perform(&mut self, host: usize, effect: Effect) -> Check {
        let inc = self.hosts[host].inc;
        let (id, outcome) = match effect {
            Effect::Harness(HarnessEffect::Describe {
                id, backend, conn, ..
            }) => {
                let live = conn.and_then(|c| self.conns.get(&(host, c)));
                let d = match live {
                    Some(c) => Ok(c.script.descriptor()),
                    None => scripts::by_kind(&backend_kind(&backend))
                        .map(|s| s.descriptor())
                        .ok_or_else(|| {
                            agentsessions_machine::vocab::HarnessFailure::Unavailable(
                                "no such harness".into(),
                            )
                        }),
                };
                (id, Outcome::Harness(HarnessOutcome::Described(d)))
            }
            Effect::Runtime(RuntimeCall {
                id, backend, op, ..
            }) => (id, Outcome::Runtime(Ok(runtime(&backend, op)))),
            Effect::Harness(HarnessEffect::Dial {
                id, backend, conn, ..
            }) => {
                let kind = backend_kind(&backend);
                let outcome = match scripts::by_kind(&kind) {
                    Some(script) => {
                        self.conns.insert(
                            (host, conn),
                            Conn {
                                kind,
                                script,
                                session: String::new(),
                                ordinal: 0,
                                requests: Vec::new(),
                                answers: 0,
                            },
                        );
                        Ok(())
                    }
                    None => Err(agentsessions_machine::vocab::HarnessFailure::Unavailable(
                        "no such harness".into(),
                    )),
                };
                (id, Outcome::Harness(HarnessOutcome::Dialed(outcome)))
            }
            Effect::Model(InvokeModel {
                id,
                session,
                execution_id,
                request,
            }) => {
                self.d
                    .oracle
                    .on_invoke_model(&self.d.store, inc, &session, &execution_id)?;
                self.d.model_calls += 1;
                let text = request
                    .messages
                    .last()
                    .map(events::message_text)
                    .unwrap_or_default();
                let reply = ModelReply {
                    message: Some(events::assistant_text(&format!("echo:{text}"))),
                    usage: None,
                };
                (id, Outcome::Model(Ok(reply)))
            }
            Effect::Tool(ExecuteTool {
                id,
                session,
                intent,
                call,
                again,
                repeatable,
            }) => {
                self.d.oracle.on_execute_tool(
                    &self.d.store,
                    inc,
                    &session,
                    intent.record(),
                    &call,
                )?;
                match self.execute(&session, &call, again, repeatable)? {
                    Ran::Answer(outcome) => (id, Outcome::Tool(outcome)),
                    Ran::Reached(result) => {
                        let key = call.idempotency_key.clone();
                        self.push(host, What::ToolDone(id, session, key, result));
                        return Ok(());
                    }
                }
            }
            Effect::Store(effect) => return self.perform_store(host, effect),
            Effect::Harness(HarnessEffect::Send {
                conn,
                mut frame,
                history,
            }) => {
                History::attach(&mut frame, history.as_ref());
                return self.send(host, conn, frame);
            }
            Effect::Harness(HarnessEffect::Close { conn }) => {
                self.conns.remove(&(host, conn));
                return Ok(());
            }
            Effect::Client(effect) => return self.deliver(host, effect),
            // The simulated executor's results are keyed by session; a
            // deleted session runs nothing more, so there is nothing to drop.
            Effect::ForgetTools { .. } => return Ok(()),
            // The simulated provider answers at once; the host drops it.
            Effect::AbandonModel { .. } => return Ok(()),
            // So does the simulated executor: no call is left to stop, and
            // its outcome is recorded as the machine expects.
            Effect::InterruptTool { .. } => return Ok(()),
        };
        self.push(host, What::Outcome(id, outcome, None, None));
        Ok(())
    }

    fn perform_store(&mut self, host: usize, effect: StoreEffect) -> Check {
        let inc = self.hosts[host].inc;
        let now = self.d.now;
        let id = effect.id();
        let stored = match &effect {
            StoreEffect::Append { session, fence, .. }
            | StoreEffect::Fork { session, fence, .. } => {
                self.d.oracle.on_append(inc, session, *fence)?;
                self.d.store.live_fence(session)
            }
            _ => 0,
        };
        let (outcome, tx) = self.d.store.perform(&effect, now);
        match (&effect, &outcome) {
            (
                StoreEffect::Append {
                    session,
                    expected_last_seq,
                    fence,
                    ..
                },
                StoreOutcome::Appended(r),
            ) => {
                self.d
                    .oracle
                    .on_commit(session, *expected_last_seq, *fence, stored, r)?;
            }
            // A fork's write is the child's first append, after the shared
            // prefix.
            (
                StoreEffect::Fork {
                    session,
                    at_seq,
                    fence,
                    ..
                },
                StoreOutcome::Appended(r),
            ) => {
                self.d
                    .oracle
                    .on_commit(session, *at_seq, *fence, stored, r)?;
            }
            (StoreEffect::MintFence { session, .. }, StoreOutcome::Fence(Ok(f))) => {
                self.d.oracle.on_mint(inc, session, *f);
            }
            _ => {}
        }
        let session = match &effect {
            StoreEffect::Append { session, .. }
            | StoreEffect::Fork { session, .. }
            | StoreEffect::ReadLog { session, .. }
            | StoreEffect::ReadJournal { session, .. } => Some(session.clone()),
            _ => None,
        };
        self.push(
            host,
            What::Outcome(id, Outcome::Store(outcome), tx, session),
        );
        Ok(())
    }

    /// Hands a client frame or reply to its call, telling the oracle what
    /// the client now holds.
    fn deliver(&mut self, host: usize, effect: ClientEffect) -> Check {
        match effect {
            ClientEffect::Stream { request, item } => {
                let Some(call) = self.calls.get_mut(&(host, request)) else {
                    return Ok(());
                };
                if let StreamItem::Record(r) = &item {
                    let session = call.session.clone();
                    self.d.oracle.on_ack(&self.d.store, &session, r.record())?;
                }
                if let Some(call) = self.calls.get_mut(&(host, request)) {
                    call.items.push(item);
                }
            }
            ClientEffect::Reply { request, result } => {
                let Some(call) = self.calls.get_mut(&(host, request)) else {
                    return Ok(());
                };
                assert!(call.reply.is_none(), "a call replies once");
                if let Ok(Response::Approve(a)) = &result
                    && let Some(record) = &a.decision
                {
                    let session = call.session.clone();
                    self.d.oracle.on_ack(&self.d.store, &session, record)?;
                }
                if let Some(call) = self.calls.get_mut(&(host, request)) {
                    call.reply = Some(result);
                }
            }
        }
        Ok(())
    }

    /// One execution: answered from the ledger, refused as unfinished,
    /// failed, or run (its result recorded by a later `ToolDone` step). A
    /// `repeatable` call skips the ledger's check and mark, as the
    /// daemon's executor does.
    fn execute(
        &mut self,
        session: &str,
        call: &agentsessions_proto::v1::ToolCall,
        again: bool,
        repeatable: bool,
    ) -> Result<Ran, crate::oracle::Violation> {
        let ex = &mut self.d.executor;
        ex.attempts += 1;
        let key = call.idempotency_key.clone();
        let dedup = (session.to_owned(), key.clone());
        if let Some(done) = ex.done.get(&dedup).filter(|_| !repeatable) {
            self.d.oracle.note("executor deduplicated a re-drive");
            let mut result = done.clone();
            result.id = call.id.clone();
            return Ok(Ran::Answer(Ok(result)));
        }
        let unfinished = !repeatable && !ex.started.insert(dedup.clone());
        if unfinished && !again {
            self.d.oracle.note("executor found an unfinished run");
            return Ok(Ran::Answer(Err(ToolFailure::Unfinished)));
        }
        if !unfinished && ex.fail_first.remove(&key) {
            // As the daemon's ledger: the started mark stays after a failure.
            return Ok(Ran::Answer(Err(ToolFailure::Error(format!(
                "executor failed on {key}"
            )))));
        }
        // A built-in checks for its own earlier effect when run again; an
        // MCP tool cannot, so a second run is a second effect.
        let checks_itself = !scripts::is_remote(&call.tool);
        if unfinished && checks_itself && ex.effected.contains(&dedup) {
            self.d.oracle.note("a re-run found its effect already made");
        } else {
            ex.effects += 1;
            let again = !ex.effected.insert(dedup);
            let harmless = scripts::is_idempotent(&call.tool);
            if again && harmless {
                self.d.oracle.note("an idempotent tool ran again");
            }
            self.d.oracle.on_tool_effect(session, &key, harmless)?;
        }
        Ok(Ran::Reached(ToolResult {
            id: call.id.clone(),
            ..ToolResult::default()
        }))
    }
}

/// What one execution did.
enum Ran {
    /// Answered at once (from the ledger, or refused, or failed).
    Answer(Result<ToolResult, ToolFailure>),
    /// Reached its tool; the ledger records this result next.
    Reached(ToolResult),
}

/// What a crash does to the durable part of the world.
fn crash_durable(d: &mut Durable, variant: CrashVariant) -> Check {
    d.store.crash(variant);
    d.digest.str("crash").str(&variant.label());
    d.oracle.note(match variant {
        CrashVariant::Drop => "crash: pending write lost (or none)",
        CrashVariant::Keep => "crash: write committed, answer lost",
        CrashVariant::Tear(_) => "crash: torn transaction",
    });
    d.oracle.on_crash(&d.store)
}

fn runtime(backend: &Backend, op: RuntimeOp) -> RuntimeReply {
    let kind = backend_kind(backend);
    match op {
        RuntimeOp::Create { .. } | RuntimeOp::Restore { .. } | RuntimeOp::Fork { .. } => {
            RuntimeReply::Incarnation {
                address: format!("local://{kind}"),
            }
        }
        RuntimeOp::Snapshot { session } => RuntimeReply::Snapshot(SnapshotRef {
            external_uri: if backend.memory_snapshot() {
                format!("snap://{session}")
            } else {
                String::new()
            },
            local: session,
            memory: backend.memory_snapshot(),
            sealed: false,
        }),
        RuntimeOp::Stop { .. } => RuntimeReply::Done,
    }
}
