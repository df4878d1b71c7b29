//! A deterministic world around one [`Host`]: an in-memory store, scripted
//! harnesses, an echo model and a deduplicating tool executor. Every effect
//! is performed in order and every resulting input is delivered FIFO, so a
//! run is a pure function of the calls made.

use std::collections::{BTreeMap, VecDeque};

use agentsessions_proto::v1::{SnapshotRef, ToolResult};

use super::harness::{self, Script};
use super::store::MemStore;
use crate::events;
use crate::host::{
    Backend, ConnId, CountingIds, Effect, EffectId, HarnessFailure, HarnessInput, Host, HostConfig,
    ModelReply, Nanos, Outcome, Request, RequestId, Response, Route, RuntimeOp, RuntimeReply,
    Status, StreamItem,
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
    pub fn code(&self) -> crate::host::Code {
        match &self.reply {
            Ok(_) => crate::host::Code::Ok,
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
}

/// The world. See the module docs.
pub struct World {
    /// The machine under test.
    pub host: Host,
    /// The journal.
    pub store: MemStore,
    /// Virtual time (unix nanos).
    pub now: Nanos,
    /// Live harness connections.
    conns: BTreeMap<ConnId, (String, Box<dyn Script>)>,
    /// Remote addresses and the script kind behind each.
    pub remote: BTreeMap<String, String>,
    /// Per-session RAM of memory harnesses (the counter).
    ram: BTreeMap<String, u64>,
    /// Live model invocations.
    pub model_calls: usize,
    /// When set, the next model call fails with this text.
    pub model_fail_next: Option<String>,
    /// The executor.
    pub executor: Executor,
    /// Describe answers to fail, by route name.
    pub describe_fail: BTreeMap<String, HarnessFailure>,
    /// Every effect the host emitted, in order.
    pub trace: Vec<Effect>,
    queue: VecDeque<Input>,
    replies: BTreeMap<RequestId, Call>,
    next_request: u64,
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
        Self {
            host: Host::new(config, Box::new(CountingIds::default())),
            store: MemStore::new(),
            now: 1_700_000_000_000_000_000,
            conns: BTreeMap::new(),
            remote: BTreeMap::new(),
            ram: BTreeMap::new(),
            model_calls: 0,
            model_fail_next: None,
            executor: Executor::default(),
            describe_fail: BTreeMap::new(),
            trace: Vec::new(),
            queue: VecDeque::new(),
            replies: BTreeMap::new(),
            next_request: 0,
        }
    }

    /// Makes one call and runs the world until it is idle.
    pub fn call(&mut self, request: Request) -> Call {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        self.replies.insert(
            id,
            Call {
                items: Vec::new(),
                reply: Err(Status::internal("no reply")),
            },
        );
        self.now += 1_000_000;
        self.host
            .handle_request(self.now, id, request)
            .expect("drained");
        self.run();
        let call = self.replies.remove(&id).expect("registered above");
        assert_eq!(
            self.host.in_flight(),
            0,
            "the world is idle only when every call has replied"
        );
        call
    }

    /// Delivers queued inputs until nothing is left.
    pub fn run(&mut self) {
        self.drain();
        while let Some(input) = self.queue.pop_front() {
            self.now += 1_000;
            match input {
                Input::Outcome(id, outcome) => self.host.handle_outcome(self.now, id, outcome),
                Input::Harness(conn, input) => self.host.handle_harness(self.now, conn, input),
            }
            .expect("drained");
            self.drain();
        }
    }

    fn drain(&mut self) {
        while let Some(effect) = self.host.poll_effect() {
            self.trace.push(effect.clone());
            self.perform(effect);
        }
    }

    fn script_kind(backend: &Backend, remote: &BTreeMap<String, String>) -> String {
        match backend {
            Backend::Local { kind } | Backend::Memory { kind } => kind.clone(),
            Backend::Remote { address } => remote.get(address).cloned().unwrap_or_default(),
        }
    }

    fn perform(&mut self, effect: Effect) {
        if let Some(outcome) = self.store.perform(&effect, self.now) {
            let id = effect.id().expect("store effects expect outcomes");
            self.queue.push_back(Input::Outcome(id, outcome));
            return;
        }
        match effect {
            Effect::Describe {
                id,
                harness,
                backend,
                ..
            } => {
                let outcome = match self.describe_fail.get(&harness) {
                    Some(f) => Err(f.clone()),
                    None => {
                        let kind = Self::script_kind(&backend, &self.remote);
                        harness::by_kind(&kind)
                            .map(|s| s.descriptor())
                            .ok_or_else(|| {
                                HarnessFailure::Unavailable(format!("no harness {kind}"))
                            })
                    }
                };
                self.queue
                    .push_back(Input::Outcome(id, Outcome::Described(outcome)));
            }
            Effect::Runtime {
                id, backend, op, ..
            } => {
                let kind = Self::script_kind(&backend, &self.remote);
                let reply = match op {
                    RuntimeOp::Create { .. }
                    | RuntimeOp::Restore { .. }
                    | RuntimeOp::Fork { .. } => RuntimeReply::Incarnation {
                        address: format!("local://{kind}"),
                    },
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
                };
                self.queue
                    .push_back(Input::Outcome(id, Outcome::Runtime(Ok(reply))));
            }
            Effect::Dial {
                id, backend, conn, ..
            } => {
                let kind = Self::script_kind(&backend, &self.remote);
                let outcome = match harness::by_kind(&kind) {
                    Some(script) => {
                        self.conns.insert(conn, (kind, script));
                        Ok(())
                    }
                    None => Err(HarnessFailure::Unavailable(format!("no harness {kind}"))),
                };
                self.queue
                    .push_back(Input::Outcome(id, Outcome::Dialed(outcome)));
            }
            Effect::Send { conn, frame } => {
                if let Some((_, script)) = self.conns.get_mut(&conn) {
                    let reply = script.on_frame(&frame);
                    for ev in reply.events {
                        self.queue
                            .push_back(Input::Harness(conn, HarnessInput::Event(ev)));
                    }
                    if reply.close {
                        self.queue
                            .push_back(Input::Harness(conn, HarnessInput::Closed));
                    }
                }
            }
            Effect::Close { conn } => {
                self.conns.remove(&conn);
            }
            Effect::InvokeModel { id, request, .. } => {
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
                self.queue
                    .push_back(Input::Outcome(id, Outcome::Model(outcome)));
            }
            Effect::ExecuteTool {
                id, session, call, ..
            } => {
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
                        Ok(result.clone())
                    }
                };
                self.queue
                    .push_back(Input::Outcome(id, Outcome::Tool(outcome)));
            }
            Effect::Stream { request, item } => {
                if let Some(call) = self.replies.get_mut(&request) {
                    call.items.push(item);
                }
            }
            Effect::Reply { request, result } => {
                if let Some(call) = self.replies.get_mut(&request) {
                    call.reply = result;
                }
            }
            other => panic!("world cannot perform {other:?}"),
        }
        let _ = &self.ram;
    }
}
