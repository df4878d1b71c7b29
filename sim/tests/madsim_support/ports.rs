//! The host's ports in the simulation, each reporting to the one oracle:
//! the memory journal (fences, appends, reads), a deduplicating tool
//! executor, the echo model, and the real gRPC harness client with the
//! frames it sends checked on their way out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentsessions_machine::events::body;
use agentsessions_machine::vocab::{HarnessFailure, ModelReply, SessionRow};
use agentsessions_proto::v1::controller_frame::Frame;
use agentsessions_proto::v1::{
    Capabilities, EventKind, HarnessDescriptor, LogRecord, Mediation, ModelCall, Resumability,
    ToolCall, ToolResult, ToolSpec,
};
use agentsessions_shells::daemon::convert::row_of;
use agentsessions_shells::daemon::driver::{
    Connection, DriverHandle, HarnessPort, Interrupt, ModelPort, PortFuture, ToolPort,
};
use agentsessions_shells::daemon::harness_client::GrpcHarnesses;
use agentsessions_shells::harness::{Harness, HarnessError, Outbound, Sink, StartInfo};
use agentsessions_shells::journal::memory::{DurableImage, MemoryDisk, MemoryJournal};
use agentsessions_shells::journal::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions, RegisterOutcome,
    RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan, StoreError,
    Tombstone, VerifyError,
};
use agentsessions_shells::model::EchoModel;
use agentsessions_sim::digest::Fnv;
use agentsessions_sim::oracle::{Check, JournalView, Oracle, Rule, violation};
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;

/// Everything that outlives the nodes of one run: the disk, the oracle,
/// the executor's ledger and the trace.
pub struct Shared {
    pub disk: Arc<MemoryDisk>,
    oracle: Mutex<Oracle>,
    violations: Mutex<Vec<String>>,
    trace: Mutex<(Fnv, Vec<String>)>,
    /// The executor's durable results by (session, idempotency key).
    ledger: Mutex<BTreeMap<(String, String), ToolResult>>,
    /// Each host's current drive loop, for the in-process harness replay
    /// (not a wire RPC, as `agentctl verify --replay` submits it).
    pub drivers: Mutex<BTreeMap<usize, DriverHandle>>,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A violation is reported, never panicked, so a poisoned lock only
    // follows a bug in this file; keep going to print the trace.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The durable journal as the oracle reads it.
pub struct View(DurableImage);

impl JournalView for View {
    fn sessions(&self) -> Vec<String> {
        self.0.sessions()
    }
    fn records(&self, session: &str) -> std::borrow::Cow<'_, [LogRecord]> {
        self.0.records(session)
    }
    fn row(&self, session: &str) -> Option<SessionRow> {
        self.0
            .info(session)
            .map(|i| row_of(i).expect("the memory store keeps rows decodable"))
    }
    fn fence(&self, session: &str) -> i64 {
        self.0.info(session).map_or(0, |i| i.fence)
    }
    fn deleted(&self) -> Vec<String> {
        self.0.deleted()
    }
}

impl Shared {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            disk: Arc::new(MemoryDisk::default()),
            oracle: Mutex::new(Oracle::default()),
            violations: Mutex::new(Vec::new()),
            trace: Mutex::new((Fnv::default(), Vec::new())),
            ledger: Mutex::new(BTreeMap::new()),
            drivers: Mutex::new(BTreeMap::new()),
        })
    }

    /// The durable journal now.
    pub fn view(&self) -> View {
        View(self.disk.durable())
    }

    /// Runs a rule against the oracle; a violation is kept for the end of
    /// the run (panicking inside a node would only kill that node).
    pub fn check(&self, rule: impl FnOnce(&mut Oracle, &View) -> Check) {
        let view = self.view();
        let result = rule(&mut lock(&self.oracle), &view);
        if let Err(v) = result {
            self.log(format!("VIOLATION {v}"));
            lock(&self.violations).push(v.to_string());
        }
    }

    /// Counts a coverage event.
    pub fn note(&self, what: &'static str) {
        lock(&self.oracle).note(what);
    }

    /// Appends a line to the trace (and its digest).
    pub fn log(&self, line: String) {
        let mut t = lock(&self.trace);
        t.0.str(&line);
        t.1.push(line);
    }

    pub fn digest(&self) -> u64 {
        lock(&self.trace).0.finish()
    }

    pub fn trace_tail(&self, n: usize) -> Vec<String> {
        let t = lock(&self.trace);
        t.1[t.1.len().saturating_sub(n)..].to_vec()
    }

    pub fn violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }

    pub fn coverage(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.oracle).coverage.clone()
    }
}

/// The journal of one host incarnation (the memory journal in process, or
/// the store node over the network), reporting to the oracle.
pub struct ObservedStore<S = MemoryJournal> {
    pub inner: S,
    pub inc: u64,
    pub shared: Arc<Shared>,
}

impl<S> ObservedStore<S> {
    fn observed(&self, session: &str, records: &[LogRecord]) {
        if let Some(last) = records.last() {
            let (inc, seq) = (self.inc, last.seq);
            self.shared.check(|o, _| {
                o.on_observed(inc, session, seq);
                Ok(())
            });
        }
    }
}

impl<S: JournalStore> JournalStore for ObservedStore<S> {
    fn set_outbox(&self, on: bool) {
        self.inner.set_outbox(on);
    }

    async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        let (inc, session, expected, fence) = (
            self.inc,
            batch.session.clone(),
            batch.expected_last_seq,
            batch.fence,
        );
        self.shared.check(|o, _| o.on_append(inc, &session, fence));
        // The stored fence before the write: a newer mint can only raise it
        // later, so this never blames an append that was legal when applied.
        let stored = self.shared.view().fence(&session);
        let result = self.inner.append(batch).await;
        if let Err(AppendError::Failed(StoreError::CommitFailed { .. })) = &result {
            self.shared.note("append outcome unknown");
        }
        self.shared
            .check(|o, _| o.on_commit(&session, expected, fence, stored, &map_err(&result)));
        if let Ok(records) = &result {
            self.observed(&session, records);
        }
        result
    }

    async fn fork(&self, batch: ForkBatch) -> Result<Vec<LogRecord>, AppendError> {
        // The child's first append, after the shared prefix.
        let (inc, session, expected, fence) =
            (self.inc, batch.child.clone(), batch.at_seq, batch.fence);
        self.shared.check(|o, _| o.on_append(inc, &session, fence));
        let stored = self.shared.view().fence(&session);
        let result = self.inner.fork(batch).await;
        if let Err(AppendError::Failed(StoreError::CommitFailed { .. })) = &result {
            self.shared.note("fork outcome unknown");
        }
        self.shared
            .check(|o, _| o.on_commit(&session, expected, fence, stored, &map_err(&result)));
        if let Ok(records) = &result {
            self.observed(&session, records);
        }
        result
    }

    async fn mint_fence(
        &self,
        session: &str,
        now: i64,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        let r = self.inner.mint_fence(session, now, lease).await;
        if let Err(StoreError::Leased { .. }) = &r {
            self.shared.note("mint refused: leased to another host");
        }
        if let Ok(f) = r {
            let inc = self.inc;
            self.shared.check(|o, _| {
                o.on_mint(inc, session, f);
                Ok(())
            });
        }
        r
    }

    async fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let r = self.inner.hold_lease(session, owner, fence, ttl, now).await;
        if matches!(r, Ok(false)) && ttl > 0 {
            self.shared.note("lease lost while held");
        }
        r
    }

    async fn head(&self, session: &str) -> Result<i64, StoreError> {
        self.inner.head(session).await
    }

    async fn read(&self, session: &str, from: i64, to: i64) -> Result<Vec<LogRecord>, StoreError> {
        let r = self.inner.read(session, from, to).await;
        if let Ok(records) = &r {
            self.observed(session, records);
        }
        r
    }

    async fn verify(&self, session: &str) -> Result<(), VerifyError> {
        self.inner.verify(session).await
    }

    async fn put_session(&self, meta: SessionMeta, now: i64) -> Result<(), StoreError> {
        self.inner.put_session(meta, now).await
    }

    async fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        self.inner.session_info(uid).await
    }

    async fn list_sessions(&self, req: ListSessions) -> Result<SessionPage, StoreError> {
        self.inner.list_sessions(req).await
    }

    async fn register_harness(
        &self,
        reg: HarnessRegistration,
        now: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        self.inner.register_harness(reg, now).await
    }

    async fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now: i64,
    ) -> Result<HarnessRow, RegistryError> {
        self.inner.retire_harness(name, reason, now).await
    }

    async fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        self.inner.harness(name).await
    }

    async fn list_harnesses(&self, req: ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        self.inner.list_harnesses(req).await
    }

    async fn reserve_harness_names(
        &self,
        names: Vec<String>,
        now: i64,
    ) -> Result<(), RegistryError> {
        self.inner.reserve_harness_names(names, now).await
    }

    async fn delete_session(&self, req: DeleteSession) -> Result<Tombstone, DeleteError> {
        self.inner.delete_session(req).await
    }

    async fn tombstone(&self, uid: &str) -> Result<Option<Tombstone>, StoreError> {
        self.inner.tombstone(uid).await
    }

    async fn stale_sessions(&self, scan: StaleScan) -> Result<StalePage, StoreError> {
        self.inner.stale_sessions(scan).await
    }

    async fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now: i64,
    ) -> Result<(), RegistryError> {
        self.inner
            .put_session_on_active_harness(meta, registered, now)
            .await
    }
}

/// The store's append result in the machine's terms (what the oracle reads).
fn map_err(
    r: &Result<Vec<LogRecord>, AppendError>,
) -> Result<Vec<LogRecord>, agentsessions_machine::vocab::AppendError> {
    use agentsessions_machine::vocab::AppendError as M;
    match r {
        Ok(v) => Ok(v.clone()),
        Err(AppendError::Conflict { head }) => Err(M::Conflict { head: *head }),
        Err(AppendError::Fenced { current }) => Err(M::Fenced { current: *current }),
        Err(AppendError::Failed(StoreError::SessionDeleted { .. })) => Err(M::Deleted),
        Err(AppendError::Failed(e)) => Err(M::Failed(e.to_string().into())),
    }
}

/// The durable record that owns `pred` in `session`, latest first.
fn find(view: &View, session: &str, pred: impl Fn(&LogRecord) -> bool) -> Option<LogRecord> {
    view.records(session)
        .iter()
        .rev()
        .find(|r| pred(r))
        .cloned()
}

/// The port sees only the request, so its owner is found by the input
/// hash its durable MODEL_CALL must record. Forks copy MODEL_CALLs, so a
/// hash can have several owners; the call is legal if it is for one.
fn invoked(o: &mut Oracle, view: &View, inc: u64, request: &ModelCall) -> Check {
    use agentsessions_machine::inputhash::{from_model_call, input_hash};
    let want = input_hash(&from_model_call(request)).unwrap_or_default();
    let mut owners: Vec<(String, String)> = Vec::new();
    for s in view.sessions() {
        for r in view.records(&s).iter() {
            let Some(ev) = r.event.as_ref() else { continue };
            if body::model(ev).is_some_and(|m| m.input_hash == want) {
                let owner = (s.clone(), ev.execution_id.clone());
                if !owners.contains(&owner) {
                    owners.push(owner);
                }
            }
        }
    }
    let mut first = None;
    for (s, exec) in owners {
        let mut trial = o.clone();
        match trial.on_invoke_model(view, inc, &s, &exec) {
            Ok(()) => {
                *o = trial;
                return Ok(());
            }
            Err(v) => {
                first.get_or_insert(v);
            }
        }
    }
    Err(first.unwrap_or_else(|| {
        violation(
            Rule::RecordBeforeEffect,
            format!("model invoked with no durable MODEL_CALL for input hash {want}"),
        )
    }))
}

/// The echo model; each call is checked against the durable MODEL_CALL
/// that must precede it (found by the recorded call id).
pub struct SimModel {
    pub inc: u64,
    pub shared: Arc<Shared>,
}

impl ModelPort for SimModel {
    fn invoke(
        &self,
        request: ModelCall,
        _chunks: mpsc::UnboundedSender<String>,
    ) -> PortFuture<'_, Result<ModelReply, agentsessions_machine::vocab::ModelFailure>> {
        Box::pin(async move {
            let inc = self.inc;
            self.shared.check(|o, view| invoked(o, view, inc, &request));
            // The provider's latency: a crash can land between the answer
            // and its OUTPUT record.
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok(EchoModel::reply(&request))
        })
    }
}

/// A tool executor that deduplicates by (session, idempotency key) in a
/// ledger outside the host, as an idempotent external service would.
pub struct SimTools {
    pub inc: u64,
    pub shared: Arc<Shared>,
}

impl ToolPort for SimTools {
    fn execute(
        &self,
        session: String,
        call: ToolCall,
        // Never asked: this ledger writes a key's result with its effect,
        // so no key is left unfinished (the explorer sweeps that window).
        _ask: agentsessions_shells::tools::Ask,
        // Ignored: the simulated call is brief, and a Cancel that meets it
        // still gets its receipt recorded, as the machine expects.
        _interrupt: Interrupt,
    ) -> PortFuture<'_, Result<ToolResult, agentsessions_machine::vocab::ToolFailure>> {
        Box::pin(async move {
            let inc = self.inc;
            self.shared.check(|o, view| {
                let intent = find(view, &session, |r| {
                    r.event.as_ref().and_then(body::tool).is_some_and(|t| {
                        t.id == call.id && t.idempotency_key == call.idempotency_key
                    })
                });
                match intent {
                    Some(intent) => o.on_execute_tool(view, inc, &session, &intent, &call),
                    None => Err(violation(
                        Rule::RecordBeforeEffect,
                        format!("{session}: tool {} ran with no durable TOOL_CALL", call.id),
                    )),
                }
            });
            let key = (session.clone(), call.idempotency_key.clone());
            let fresh = !lock(&self.shared.ledger).contains_key(&key);
            if fresh {
                self.shared
                    .check(|o, _| o.on_tool_effect(&session, &call.idempotency_key, false));
                lock(&self.shared.ledger).insert(
                    key.clone(),
                    ToolResult {
                        id: call.id.clone(),
                        ..ToolResult::default()
                    },
                );
            } else {
                self.shared.note("executor deduplicated a re-drive");
            }
            // The receipt travels back after the effect: a crash here is
            // "tool executed, receipt unrecorded".
            tokio::time::sleep(Duration::from_millis(3)).await;
            let mut result = lock(&self.shared.ledger)[&key].clone();
            result.id = call.id.clone();
            Ok(result)
        })
    }
}

/// The real gRPC harness client; every frame it sends is checked first:
/// a model answer needs its durable MODEL_CALL (with this request's input
/// hash) and OUTPUT, a tool receipt its durable TOOL_RESULT.
pub struct ObservedHarnesses {
    pub inner: GrpcHarnesses,
    pub shared: Arc<Shared>,
}

impl HarnessPort for ObservedHarnesses {
    fn describe(
        &self,
        address: String,
    ) -> PortFuture<'_, Result<HarnessDescriptor, HarnessFailure>> {
        self.inner.describe(address)
    }

    fn connect(&self, address: String) -> PortFuture<'_, Result<Connection, HarnessFailure>> {
        Box::pin(async move {
            let Connection { frames, events } = self.inner.connect(address).await?;
            let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<Outbound>();
            // The model requests the harness made on this stream, in order,
            // noted as the driver takes each event (before it can answer).
            let requests = Arc::new(Mutex::new(Vec::<ModelCall>::new()));
            let seen = Arc::clone(&requests);
            let events = events.map(move |ev| {
                if let Ok(e) = &ev
                    && e.kind == EventKind::EventModelCall as i32
                    && let Some(m) = body::model(e)
                {
                    lock(&seen).push(m.clone());
                }
                ev
            });
            let shared = Arc::clone(&self.shared);
            tokio::spawn(async move {
                let mut answers = 0;
                while let Some(outbound) = frames_rx.recv().await {
                    let frame = &outbound.frame;
                    let (session, exec) = (frame.session.clone(), frame.execution_id.clone());
                    match &frame.frame {
                        Some(Frame::Model(_)) => {
                            let k = answers;
                            answers += 1;
                            let request = lock(&requests).get(k).cloned().unwrap_or_default();
                            shared.check(|o, v| o.on_model_answer(v, &session, &exec, k, &request));
                        }
                        Some(Frame::Tool(t)) => {
                            shared.check(|o, v| o.on_tool_answer(v, &session, &exec, &t.id));
                        }
                        _ => {}
                    }
                    if frames.send(outbound).is_err() {
                        return;
                    }
                }
            });
            Ok(Connection {
                frames: frames_tx,
                events: Box::pin(events),
            })
        })
    }
}

/// A harness that has the host run one ordinary (ungated) tool and
/// outputs its receipt: the controller-mediated path the built-ins lack.
pub struct ToolUser;

#[tonic::async_trait]
impl Harness for ToolUser {
    fn describe(&self) -> HarnessDescriptor {
        HarnessDescriptor {
            id: "tools".into(),
            version: "1".into(),
            tools: vec![ToolSpec {
                name: "echo_args".into(),
                description: "echoes its args".into(),
                mediation: Mediation::ControllerMediated as i32,
            }],
            capabilities: Some(Capabilities {
                resumability: Resumability::StatelessReplay as i32,
                fork_safe: true,
                ..Capabilities::default()
            }),
            ..HarnessDescriptor::default()
        }
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let call = ToolCall {
            id: "t1".into(),
            tool: "echo_args".into(),
            args: None,
            mediation: Mediation::ControllerMediated as i32,
            // Stable across re-drives of one execution, distinct per turn.
            idempotency_key: format!("tools/{}/t1", start.execution_id),
        };
        let receipt = sink.tool_call(call).await?;
        sink.output(&format!("ran {} error={}", receipt.id, receipt.is_error))
            .await
    }
}
