//! The drive loop: one task owns the sans-io [`Host`] and performs its
//! effects.
//!
//! Every input (a client call, an effect's outcome, a harness event, a model
//! chunk, a cancellation, a deadline) is handed to the host with the
//! wall-clock time; the host's effects are then drained and each is
//! started. Client calls arrive on one channel. Store work, dials,
//! describes, runtime and model calls are polled by the loop itself, so
//! their completion wakes it without a task in between (a model call yields
//! its chunks, then its outcome); tool calls, which may block on their own
//! I/O, run on spawned tasks that send their outcome back on the channel.
//! Client and harness frames go out in order on their own channels, and
//! harness events are polled by the loop, one stream per open connection.
//! Reads from a journal's first record go through a bounded record cache
//! ([`super::log_cache`]) that only saves decoding: the store is still read
//! from the cached head (or the read's last seq) on every load. The loop
//! decides nothing: every branch here is a translation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::harness::Outbound;
use agentsessions_machine::host::Host;
use agentsessions_machine::journal::Journal;
use agentsessions_machine::vocab::{
    ClientEffect, ConnId, Effect, EffectId, ExecuteTool, HarnessEffect, HarnessFailure,
    HarnessInput, HarnessOutcome, InvokeModel, ModelFailure, ModelReply, Nanos, Outcome, RequestId,
    RuntimeCall, Status, StoreEffect, StoreOutcome,
};
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;

use super::stream_set::StreamSet;

use super::convert::{self, append_error_of};
use super::log_cache::{Completed, LogCache, ReadPlan};
use super::meter::Meter;
use super::store_effects::{append_of, perform_store, text};
use super::trace::Tracer;
use crate::journal::{AppendBatch, JournalStore};
use crate::metrics::Metrics;
use tracing::Instrument as _;

pub use super::handle::{DriverHandle, Input};

/// The inputs an effect in flight yields to the loop.
type InputStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Input> + Send>>;
pub use super::ports::{
    ClientSink, Connection, EventStream, HarnessPort, Interrupt, ModelPort, PortFuture,
    RuntimePort, ToolPort,
};

struct Conn {
    frames: mpsc::UnboundedSender<Outbound>,
    address: String,
}

/// A connection's inbound events as host input: every event, then one
/// failure or one clean close, then the end. (The bound on the first event
/// is the machine's timer, not this stream's.)
struct ConnEvents {
    events: EventStream,
    done: bool,
}

impl tokio_stream::Stream for ConnEvents {
    type Item = HarnessInput;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<HarnessInput>> {
        use std::task::Poll;
        if self.done {
            return Poll::Ready(None);
        }
        let input = match std::task::ready!(self.events.as_mut().poll_next(cx)) {
            Some(Ok(ev)) => HarnessInput::Event(ev),
            Some(Err(e)) => HarnessInput::Failed(e),
            None => HarnessInput::Closed,
        };
        self.done = !matches!(input, HarnessInput::Event(_));
        Poll::Ready(Some(input))
    }
}

/// The ports a driver performs effects with.
pub struct Ports<S> {
    /// The journal.
    pub store: Arc<S>,
    /// Harness client.
    pub harness: Arc<dyn HarnessPort>,
    /// Runtime backends.
    pub runtime: Arc<dyn RuntimePort>,
    /// Model provider.
    pub model: Arc<dyn ModelPort>,
    /// Tool executor.
    pub tools: Arc<dyn ToolPort>,
}

impl<S> Clone for Ports<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            harness: self.harness.clone(),
            runtime: self.runtime.clone(),
            model: self.model.clone(),
            tools: self.tools.clone(),
        }
    }
}

/// The drive loop. See the module docs.
pub struct Driver<S> {
    host: Host,
    ports: Ports<S>,
    tx: mpsc::UnboundedSender<Input>,
    rx: mpsc::UnboundedReceiver<Input>,
    clients: BTreeMap<RequestId, (ClientSink, Option<JoinHandle<()>>)>,
    conns: BTreeMap<ConnId, Conn>,
    /// Inbound events of every open connection, polled by the loop itself
    /// (no forwarding task per connection).
    events: StreamSet<ConnId, ConnEvents>,
    /// Effects in flight whose completion the loop polls itself: the port
    /// that completes one (a journal thread, a harness) wakes the loop
    /// directly instead of a task that would then wake it.
    pending: FuturesUnordered<PortFuture<'static, Input>>,
    /// Model calls in flight, polled the same way: each yields its chunks,
    /// then its outcome (and is removed then).
    models: StreamSet<EffectId, InputStream>,
    /// Tool calls in flight, by effect: fired on `InterruptTool`, dropped
    /// when the call's outcome comes in.
    tool_calls: BTreeMap<EffectId, crate::tools::Interrupter>,
    next_request: u64,
    draining: Option<oneshot::Sender<()>>,
    log_cache: LogCache,
    meter: Option<Meter>,
    tracer: Tracer,
}

impl<S: JournalStore + 'static> Driver<S> {
    /// A driver for `host` performing effects with `ports`.
    pub fn new(host: Host, ports: Ports<S>) -> (Self, DriverHandle) {
        // Unbounded: the loop posts its own inputs here (in-process answers,
        // send failures) and must never block on itself. What it holds is
        // bounded by admission (`limits`: every call waiting here counts at
        // least `CALL_FLOOR_BYTES` against --request-memory-bytes) and by
        // the host's in-flight cap: each admitted call adds one request and
        // at most one outcome per effect it has outstanding.
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = DriverHandle::new(tx.clone());
        (
            Self {
                host,
                ports,
                tx,
                rx,
                clients: BTreeMap::new(),
                conns: BTreeMap::new(),
                events: StreamSet::default(),
                pending: FuturesUnordered::new(),
                models: StreamSet::default(),
                tool_calls: BTreeMap::new(),
                next_request: 0,
                draining: None,
                log_cache: LogCache::default(),
                meter: None,
                tracer: Tracer::new(),
            },
            handle,
        )
    }

    /// Keeps at most `records` committed records in the journal cache
    /// (default [`super::log_cache::MAX_RECORDS`]); a session longer than
    /// that is read whole by every operation on it.
    pub fn with_log_cache(mut self, records: usize) -> Self {
        self.log_cache = LogCache::new(records);
        self
    }

    /// Keeps `metrics` of what the loop performs and the machine decides.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.ports
            .store
            .set_meter(std::sync::Arc::new(metrics.journal()));
        self.meter = Some(Meter::new(metrics));
        self
    }

    /// Runs until drained (or every handle is dropped).
    pub async fn run(mut self) {
        loop {
            if self.draining.is_some() && self.host.in_flight() == 0 {
                if let Some(done) = self.draining.take() {
                    let _ = done.send(());
                }
                return;
            }
            // A deadline already due when an input arrives fires first:
            // the host does that itself on every input.
            let deadline = self.host.poll_timeout();
            let wait = deadline.map(|at| Duration::from_nanos((at - convert::now()).max(0) as u64));
            // tokio's unbiased select! seeds its branch order from a
            // process-wide counter, so under madsim a seed's run would depend
            // on the seeds run before it in the same process; polling in a
            // fixed order there keeps every seed reproducible on its own.
            // Elsewhere the random order keeps the sources fair.
            macro_rules! next_input {
                ($s:ident $(, $biased:ident)?) => {
                    tokio::select! {
                        $($biased;)?
                        input = $s.rx.recv() => input,
                        Some((conn, input)) = $s.events.next(), if !$s.events.is_empty() => {
                            Some(Input::Harness(conn, input))
                        }
                        Some(input) = $s.pending.next(), if !$s.pending.is_empty() => Some(input),
                        Some((id, input)) = $s.models.next(), if !$s.models.is_empty() => {
                            if matches!(input, Input::Outcome(..)) {
                                // Its last item: gone now, not at the next poll.
                                $s.models.remove(&id);
                            }
                            Some(input)
                        }
                        () = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {
                            let now = convert::now();
                            $s.tracer.timeout();
                            $s.host.handle_timeout(now).expect("effects drained");
                            $s.drain_effects();
                            continue;
                        }
                    }
                };
            }
            #[cfg(madsim)]
            let input = next_input!(self, biased);
            #[cfg(not(madsim))]
            let input = next_input!(self);
            let Some(input) = input else {
                return;
            };
            let now = convert::now();
            if let Some(m) = self.meter.as_mut() {
                m.input(&input);
            }
            self.tracer.input(&input);
            self.handle(now, input);
            self.drain_effects();
        }
    }

    fn handle(&mut self, now: Nanos, input: Input) {
        let result = match input {
            Input::Call(caller, request, sink, span) => {
                if self.draining.is_some() {
                    sink.finish(Err(Status::unavailable("host is shutting down")));
                    return;
                }
                self.next_request += 1;
                let id = RequestId(self.next_request);
                self.tracer.call(id, span);
                let watcher = self.watch_client(id, &sink);
                self.clients.insert(id, (sink, watcher));
                self.host.handle_request(now, id, caller, request)
            }
            Input::Outcome(effect, outcome) => {
                if matches!(outcome, Outcome::Tool(_)) {
                    self.tool_calls.remove(&effect);
                }
                self.host.handle_outcome(now, effect, outcome)
            }
            Input::Dialed {
                id,
                conn,
                address,
                result,
            } => {
                let outcome = match result {
                    Ok(connection) => {
                        self.register(conn, address, connection);
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                self.host
                    .handle_outcome(now, id, Outcome::Harness(HarnessOutcome::Dialed(outcome)))
            }
            Input::LogRead {
                id,
                session,
                to_seq,
                whole,
                plan,
                read,
            } => {
                let completed = match read {
                    Err(e) => Err(e),
                    Ok(read) => match self.log_cache.complete(&session, &plan, to_seq, read) {
                        Some(done) => Ok(done),
                        None => {
                            // The cached prefix is stale: read it all.
                            self.read_log(id, session, to_seq, whole, ReadPlan::Full);
                            return;
                        }
                    },
                };
                let outcome = if whole {
                    StoreOutcome::Journal(completed.map(|done| match done {
                        Completed::Journal(j) => *j,
                        Completed::NotAChain(raw) => Journal::from_records(raw),
                    }))
                } else {
                    StoreOutcome::Log(completed.map(|done| match done {
                        Completed::Journal(j) => j.to_vec_through(to_seq),
                        Completed::NotAChain(raw) => raw,
                    }))
                };
                self.host.handle_outcome(now, id, Outcome::Store(outcome))
            }
            Input::Appended(id, session, outcome) => {
                match &outcome {
                    Outcome::Store(StoreOutcome::Appended(Ok(records))) => {
                        self.log_cache.appended(&session, records)
                    }
                    // A conflict means someone else moved the head.
                    _ => self.log_cache.forget(&session),
                }
                self.host.handle_outcome(now, id, outcome)
            }
            Input::Harness(conn, input) => self.host.handle_harness(now, conn, input),
            Input::Chunk(effect, chunk) => self.host.handle_model_chunk(now, effect, chunk),
            Input::Cancel(request) => self.host.handle_cancel(now, request),
            Input::Drain(done) => {
                self.draining = Some(done);
                Ok(())
            }
            Input::Catalog(catalog) => {
                self.host.set_catalog(catalog);
                Ok(())
            }
        };
        result.expect("the loop drains every effect before the next input");
    }

    /// Reports a client that hangs up on a streamed call. The watcher holds
    /// a sender clone, so it is aborted when the call finishes; otherwise the
    /// client's stream would never see its end.
    fn watch_client(&self, id: RequestId, sink: &ClientSink) -> Option<JoinHandle<()>> {
        let tx = self.tx.clone();
        match sink {
            ClientSink::Exec(s) => {
                let s = s.clone();
                Some(tokio::spawn(async move {
                    s.closed().await;
                    let _ = tx.send(Input::Cancel(id));
                }))
            }
            ClientSink::Replay(s) => {
                let s = s.clone();
                Some(tokio::spawn(async move {
                    s.closed().await;
                    let _ = tx.send(Input::Cancel(id));
                }))
            }
            ClientSink::Unary(_) => None,
        }
    }

    fn register(&mut self, conn: ConnId, address: String, connection: Connection) {
        let Connection { frames, events } = connection;
        self.events.insert(
            conn,
            ConnEvents {
                events,
                done: false,
            },
        );
        self.conns.insert(conn, Conn { frames, address });
    }

    /// Reads the journal of `session` from its first record through
    /// `to_seq` for ReadLog (or, `whole`, ReadJournal) `id`, from where
    /// `plan` says.
    fn read_log(
        &mut self,
        id: EffectId,
        session: String,
        to_seq: i64,
        whole: bool,
        plan: ReadPlan,
    ) {
        let store = self.ports.store.clone();
        self.start(async move {
            let from = match &plan {
                ReadPlan::Full => 1,
                ReadPlan::From { seq, .. } => *seq,
            };
            let read = store.read(&session, from, to_seq).await.map_err(text);
            Input::LogRead {
                id,
                session,
                to_seq,
                whole,
                plan,
                read,
            }
        });
    }

    /// Polls `effect` from the loop until it yields its input.
    fn start(&mut self, effect: impl Future<Output = Input> + Send + 'static) {
        self.pending.push(Box::pin(effect));
    }

    /// Performs a journal effect through the store's queue.
    fn start_store(&mut self, effect: StoreEffect) {
        let store = self.ports.store.clone();
        self.start(async move {
            let (id, outcome) = perform_store(&*store, effect).await;
            Input::Outcome(id, Outcome::Store(outcome))
        });
    }

    /// Nothing in flight and no input waiting: the loop would only park.
    fn idle(&self) -> bool {
        self.pending.is_empty() && self.models.is_empty() && self.rx.is_empty()
    }

    fn drain_effects(&mut self) {
        while let Some(effect) = self.host.poll_effect() {
            if let Some(m) = self.meter.as_mut() {
                m.effect(&effect);
            }
            let span = self.tracer.effect(&effect);
            self.perform(effect, span);
        }
        if let Some(m) = self.meter.as_mut() {
            m.settle(&mut self.host, self.log_cache.len());
        }
    }

    /// Starts one effect, handing it to the port for its group.
    fn perform(&mut self, effect: Effect, span: tracing::Span) {
        match effect {
            Effect::Store(effect) => self.perform_store(effect),
            Effect::Harness(effect) => self.perform_harness(effect, span),
            Effect::Runtime(RuntimeCall {
                id, backend, op, ..
            }) => {
                let ports = self.ports.clone();
                self.start(async move {
                    let reply = ports.runtime.call(backend, op).await;
                    Input::Outcome(id, Outcome::Runtime(reply))
                });
            }
            Effect::Model(InvokeModel { id, request, .. }) => {
                // Unbounded: the provider client must not stall mid-stream;
                // the chunks are one completion's text.
                let (chunks, chunk_rx) = mpsc::unbounded_channel();
                let model = self.ports.model.clone();
                let call: PortFuture<'static, _> =
                    Box::pin(async move { model.invoke(request, chunks).await }.instrument(span));
                self.models
                    .insert(id, Box::pin(model_inputs(id, call, chunk_rx)));
            }
            Effect::Tool(ExecuteTool {
                id,
                session,
                call,
                again,
                repeatable,
                ..
            }) => {
                let tx = self.tx.clone();
                let ports = self.ports.clone();
                let (interrupter, interrupt) = Interrupt::pair();
                self.tool_calls.insert(id, interrupter);
                tokio::spawn(
                    async move {
                        let ask = crate::tools::Ask { again, repeatable };
                        let done = ports.tools.execute(session, call, ask, interrupt).await;
                        let _ = tx.send(Input::Outcome(id, Outcome::Tool(done)));
                    }
                    .instrument(span),
                );
            }
            // Dropping the call's stream drops its future, which aborts the
            // provider's HTTP request; the answer the host still expects is
            // this refusal (a call that already finished answered itself).
            Effect::AbandonModel { id } => {
                if self.models.remove(&id) {
                    let abandoned =
                        Outcome::Model(Err(ModelFailure::other("abandoned by a cancel")));
                    self.start(std::future::ready(Input::Outcome(id, abandoned)));
                }
            }
            // The port decides whether the call stops; its outcome, early
            // or not, still comes back on the channel (a call already done
            // has no entry left).
            Effect::InterruptTool { id } => {
                if let Some(interrupter) = self.tool_calls.remove(&id) {
                    interrupter.fire();
                }
            }
            // Fire and forget: the journal's tombstone is the deletion; a
            // purge lost to a crash is redone when the daemon starts.
            Effect::ForgetTools { session } => {
                let ports = self.ports.clone();
                tokio::spawn(async move {
                    if let Err(e) = ports.tools.forget(session.clone()).await {
                        tracing::warn!(session, error = %e, "tool ledger purge failed");
                    }
                });
            }
            Effect::Client(ClientEffect::Stream { request, item }) => {
                if let Some((sink, _)) = self.clients.get(&request) {
                    sink.stream(item);
                }
            }
            Effect::Client(ClientEffect::Reply { request, result }) => {
                if let Some((sink, watcher)) = self.clients.remove(&request) {
                    if let Some(w) = watcher {
                        w.abort();
                    }
                    sink.finish(result);
                }
            }
        }
    }

    /// Store effects: whole-log reads through the record cache, appends and
    /// fence mints in place when the loop is idle, the rest queued.
    fn perform_store(&mut self, effect: StoreEffect) {
        match effect {
            // A page of a client's stream: read once its client has taken
            // the page before (a client that is gone counts as done).
            StoreEffect::ReadLog {
                pace: Some(pace), ..
            } => {
                let drained = match self.clients.get(&pace.request) {
                    Some((ClientSink::Replay(sink), _)) => Some(sink.drained()),
                    _ => None,
                };
                let store = self.ports.store.clone();
                self.start(async move {
                    if let Some(drained) = drained {
                        drained.await;
                    }
                    let (id, outcome) = perform_store(&*store, effect).await;
                    Input::Outcome(id, Outcome::Store(outcome))
                });
            }
            StoreEffect::ReadLog {
                id,
                session,
                from_seq: 1,
                to_seq,
                pace: None,
            } => {
                let plan = self.log_cache.plan(&session, to_seq);
                self.read_log(id, session, to_seq, false, plan);
            }
            StoreEffect::ReadJournal { id, session } => {
                let plan = self.log_cache.plan(&session, 0);
                self.read_log(id, session, 0, true, plan);
            }
            append @ StoreEffect::Append { .. } => {
                let (id, batch) = append_of(append).expect("an append");
                self.append(id, batch);
            }
            // In place when idle, as for appends.
            StoreEffect::MintFence {
                id,
                session,
                now,
                lease,
            } if self.idle() => {
                match self
                    .ports
                    .store
                    .try_mint_fence_now(&session, now, lease.as_ref())
                {
                    Some(r) => {
                        let r = Outcome::Store(StoreOutcome::Fence(r.map_err(text)));
                        self.start(std::future::ready(Input::Outcome(id, r)));
                    }
                    None => self.start_store(StoreEffect::MintFence {
                        id,
                        session,
                        now,
                        lease,
                    }),
                }
            }
            // Named, not a catch-all: a new store effect must be placed here.
            other @ (StoreEffect::ReadLog { .. }
            | StoreEffect::MintFence { .. }
            | StoreEffect::HoldLease { .. }
            | StoreEffect::GetSession { .. }
            | StoreEffect::PutSession { .. }
            | StoreEffect::ListSessions { .. }
            | StoreEffect::GetHarnessRow { .. }
            | StoreEffect::ListHarnessRows { .. }
            | StoreEffect::RegisterHarnessRow { .. }
            | StoreEffect::RetireHarnessRow { .. }
            | StoreEffect::ReserveHarnessNames { .. }
            | StoreEffect::StaleSessions { .. }) => self.start_store(other),
            // A new child: seeded from its parent's cached journal when the
            // fork is at that head (the write's records then extend it, a
            // failed write forgets it), so rendering the child does not
            // read the whole prefix back; otherwise nothing of it is cached.
            StoreEffect::Fork {
                id,
                ref session,
                ref parent,
                at_seq,
                ..
            } => {
                let child = session.clone();
                if self.log_cache.seed_fork(&child, parent, at_seq) {
                    let store = self.ports.store.clone();
                    self.start(async move {
                        let (done, outcome) = perform_store(&*store, effect).await;
                        debug_assert_eq!(done, id);
                        Input::Appended(id, child, Outcome::Store(outcome))
                    });
                } else {
                    self.start_store(effect);
                }
            }
            // The cached records of a deleted session must not outlive it.
            StoreEffect::DeleteSession {
                id,
                session,
                expected_last_seq,
                now,
                principal,
            } => {
                self.log_cache.forget(&session);
                self.start_store(StoreEffect::DeleteSession {
                    id,
                    session,
                    expected_last_seq,
                    now,
                    principal,
                });
            }
        }
    }

    fn append(&mut self, id: EffectId, batch: AppendBatch) {
        let session = batch.session.clone();
        // An idle loop commits in place: it has nothing to do during the
        // fsync, and skips two thread wake-ups. A busy one queues, so
        // concurrent sessions share a group commit.
        let batch = if self.idle() {
            match self.ports.store.try_append_now(batch) {
                Ok(r) => {
                    let r = Outcome::Store(StoreOutcome::Appended(r.map_err(append_error_of)));
                    self.start(std::future::ready(Input::Appended(id, session, r)));
                    return;
                }
                Err(batch) => batch,
            }
        } else {
            batch
        };
        let store = self.ports.store.clone();
        self.start(async move {
            let r = store.append(batch).await.map_err(append_error_of);
            Input::Appended(id, session, Outcome::Store(StoreOutcome::Appended(r)))
        });
    }

    /// Harness effects: frames and closes in place, dials and Describes as
    /// futures of the loop.
    fn perform_harness(&mut self, effect: HarnessEffect, span: tracing::Span) {
        let ports = self.ports.clone();
        match effect {
            HarnessEffect::Send {
                conn,
                frame,
                history,
            } => {
                let frame = Outbound { frame, history };
                let sent = self.conns.get(&conn).map(|c| c.frames.send(frame).is_ok());
                if sent == Some(false) {
                    let _ = self.tx.send(Input::Harness(
                        conn,
                        HarnessInput::Failed("harness stream closed".into()),
                    ));
                }
            }
            HarnessEffect::Close { conn } => {
                self.conns.remove(&conn);
                self.events.remove(&conn);
            }
            HarnessEffect::Dial {
                id, address, conn, ..
            } => {
                self.start(
                    async move {
                        let result = ports.harness.connect(address.clone()).await;
                        Input::Dialed {
                            id,
                            conn,
                            address,
                            result,
                        }
                    }
                    .instrument(span),
                );
            }
            HarnessEffect::Describe {
                id,
                backend,
                conn,
                timeout_ms,
                ..
            } => {
                let described = |r| Outcome::Harness(HarnessOutcome::Described(r));
                // A built-in served by this process describes itself without
                // a round trip (as the reference's local runtime does); only
                // a turn's own connection is always asked over the wire.
                if conn.is_none()
                    && let Some(local) = ports.runtime.describe_in_process(&backend)
                {
                    let r = described(local.map_err(HarnessFailure::Unavailable));
                    let _ = self.tx.send(Input::Outcome(id, r));
                    return;
                }
                let address = match conn.and_then(|c| self.conns.get(&c)) {
                    Some(c) if !c.address.is_empty() => Ok(c.address.clone()),
                    _ => ports.runtime.describe_address(&backend),
                };
                self.start(async move {
                    let outcome = match address {
                        Err(e) => Err(HarnessFailure::Unavailable(e)),
                        Ok(address) => tokio::time::timeout(
                            Duration::from_millis(timeout_ms),
                            ports.harness.describe(address),
                        )
                        .await
                        .unwrap_or(Err(HarnessFailure::Timeout)),
                    };
                    Input::Outcome(id, described(outcome))
                });
            }
        }
    }
}

/// A model call as loop inputs: its chunks in order, then its outcome.
fn model_inputs(
    id: EffectId,
    call: PortFuture<'static, Result<ModelReply, ModelFailure>>,
    chunks: mpsc::UnboundedReceiver<String>,
) -> impl tokio_stream::Stream<Item = Input> + Send + 'static {
    enum State {
        Calling(PortFuture<'static, Result<ModelReply, ModelFailure>>),
        /// The call finished; chunks it sent in its last poll still wait.
        Done(Result<ModelReply, ModelFailure>),
    }
    let start = Some((State::Calling(call), chunks));
    futures_util::stream::unfold(start, move |state| async move {
        let (state, mut chunks) = state?;
        let outcome = match state {
            State::Calling(mut call) => tokio::select! {
                biased;
                Some(chunk) = chunks.recv() => {
                    return Some((Input::Chunk(id, chunk), Some((State::Calling(call), chunks))));
                }
                outcome = &mut call => outcome,
            },
            State::Done(outcome) => outcome,
        };
        match chunks.try_recv() {
            Ok(chunk) => Some((
                Input::Chunk(id, chunk),
                Some((State::Done(outcome), chunks)),
            )),
            Err(_) => Some((Input::Outcome(id, Outcome::Model(outcome)), None)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_model_call_yields_every_chunk_before_its_outcome() {
        let (tx, rx) = mpsc::unbounded_channel();
        // Chunks sent in the same poll that completes the call are the
        // case a plain select would drop.
        let call: PortFuture<'static, Result<ModelReply, ModelFailure>> = Box::pin(async move {
            for c in ["a", "b", "c"] {
                tx.send(c.to_owned()).unwrap();
            }
            Err(ModelFailure::other("done"))
        });
        let inputs: Vec<Input> = model_inputs(EffectId(7), call, rx).collect().await;
        let mut chunks = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            match input {
                Input::Chunk(EffectId(7), c) => chunks.push(c.as_str()),
                Input::Outcome(EffectId(7), Outcome::Model(Err(e))) => {
                    assert_eq!(i, inputs.len() - 1, "the outcome comes last");
                    assert_eq!(e.message, "done");
                }
                _ => panic!("unexpected input"),
            }
        }
        assert_eq!(chunks, ["a", "b", "c"]);
        assert_eq!(inputs.len(), 4);
    }
}
