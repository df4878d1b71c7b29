//! What goes into the drive loop: its [`Input`]s, and the
//! [`DriverHandle`] the gRPC layer submits client calls with.
//!
//! Invariant: the loop's channel is the only way in, and it is unbounded
//! so the loop never waits on itself; a call's frames go out on a channel
//! of the call's own, which the loop never waits on either.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentsessions_machine::vocab::{
    Caller, ConnId, EffectId, HarnessFailure, HarnessInput, Outcome, Request, RequestId, Response,
    Status,
};
use agentsessions_proto::v1::{ExecUpdate, LogRecord};

use super::replay_sink::ReplayReceiver;
use tokio::sync::{mpsc, oneshot};

use super::log_cache::ReadPlan;
use super::ports::{ClientSink, Connection};

/// Inputs of the drive loop. Each is moved once through the channel, so a
/// large variant costs a copy, not an allocation per input.
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A client call, and the span of its RPC.
    Call(Caller, Request, ClientSink, tracing::Span),
    /// An effect's outcome.
    Outcome(EffectId, Outcome),
    /// A dial finished; on success the connection is registered first.
    Dialed {
        /// The Dial effect.
        id: EffectId,
        /// The connection it opens.
        conn: ConnId,
        /// The harness address.
        address: String,
        /// The open stream, or why there is none.
        result: Result<Connection, HarnessFailure>,
    },
    /// Harness input on a connection.
    Harness(ConnId, HarnessInput),
    /// A read from the first record made with `plan` (see
    /// [`super::log_cache::LogCache`]).
    LogRead {
        /// The ReadLog effect.
        id: EffectId,
        /// Its session.
        session: String,
        /// Its last seq (0: the end).
        to_seq: i64,
        /// A ReadJournal (answered with the journal and its summary)
        /// rather than a ReadLog.
        whole: bool,
        /// How the store was asked.
        plan: ReadPlan,
        /// What it returned.
        read: Result<Vec<LogRecord>, agentsessions_machine::vocab::StoreFault>,
    },
    /// An append's outcome, with its session for the cache.
    Appended(EffectId, String, Outcome),
    /// A streamed model chunk.
    Chunk(EffectId, String),
    /// The client of a call went away.
    Cancel(RequestId),
    /// Stop taking calls; exit once every call in flight has finished.
    Drain(oneshot::Sender<()>),
    /// The tools the daemon can run changed (see `Host::set_catalog`).
    Catalog(agentsessions_machine::vocab::Catalog),
}

/// A handle for submitting calls to the drive loops.
///
/// Sessions are partitioned over the loops by a stable hash of their uid,
/// so every call on one session meets the same host (its overlap guard and
/// record cache hold per loop). Calls that name no session go to the loops
/// in turn. What every host must know is sent to all of them: Boot, and a
/// registration (first to loop 0, which writes it, then to the others,
/// which find the identical row stored and add its route).
#[derive(Clone)]
pub struct DriverHandle {
    loops: Arc<[mpsc::UnboundedSender<Input>]>,
    /// The next loop for a call that names no session.
    turn: Arc<AtomicUsize>,
    /// The RPC span the calls belong to (see [`DriverHandle::traced`]).
    span: tracing::Span,
}

/// Where a request goes.
enum Target {
    /// The loop that owns the request's session, or the next in turn.
    One(usize),
    /// Loop 0, then (when it succeeds) every other loop.
    All,
}

impl DriverHandle {
    /// A handle on one loop's channel, tracing nothing.
    pub(super) fn new(tx: mpsc::UnboundedSender<Input>) -> Self {
        Self::partitioned(vec![tx])
    }

    /// A handle over several loops' channels (at least one).
    pub(super) fn partitioned(loops: Vec<mpsc::UnboundedSender<Input>>) -> Self {
        assert!(!loops.is_empty(), "a daemon runs at least one drive loop");
        Self {
            loops: loops.into(),
            turn: Arc::new(AtomicUsize::new(0)),
            span: tracing::Span::none(),
        }
    }

    /// One handle over the loops of `handles` (each a single loop's), in
    /// order: loop `i` is `handles[i]`.
    // The simulated daemon (madsim) assembles one loop without `app`.
    #[cfg_attr(madsim, allow(dead_code))]
    pub(super) fn join(handles: Vec<DriverHandle>) -> Self {
        let loops = handles
            .into_iter()
            .flat_map(|h| h.loops.iter().cloned().collect::<Vec<_>>())
            .collect();
        Self::partitioned(loops)
    }

    /// Tells every loop's host the tools the daemon can run now.
    pub fn set_catalog(&self, catalog: &agentsessions_machine::vocab::Catalog) {
        for tx in self.loops.iter() {
            // A loop that has exited takes no more turns to gate.
            let _ = tx.send(Input::Catalog(catalog.clone()));
        }
    }

    /// The loops behind this handle.
    pub fn loops(&self) -> usize {
        self.loops.len()
    }

    /// The loop that owns `session`: FNV-1a of its uid, so the mapping is
    /// the same in every process and run.
    pub fn loop_of(&self, session: &str) -> usize {
        let hash = session.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let n = self.loops.len() as u64;
        usize::try_from(hash % n).expect("a loop index fits usize")
    }

    fn target(&self, request: &Request) -> Target {
        let session = match request {
            Request::Boot | Request::RegisterHarness(_) => return Target::All,
            Request::GetSession(r) => &r.uid,
            Request::DeleteSession(r) => &r.uid,
            Request::Exec(r) => &r.session,
            Request::Replay(r) => &r.session,
            Request::Approve(r) => &r.session,
            Request::Cancel(r) => &r.session,
            Request::Suspend(r) => &r.session,
            Request::Resume(r) => &r.session,
            Request::Fork(r) => &r.session,
            Request::ReplayHarness { session } | Request::Decided { session } => session,
            Request::CreateSession(_)
            | Request::ListSessions(_)
            | Request::ListTools
            | Request::Retain { .. }
            | Request::GetHarness(_)
            | Request::ListHarnesses(_)
            | Request::RetireHarness(_) => {
                let n = self.turn.fetch_add(1, Ordering::Relaxed);
                return Target::One(n % self.loops.len());
            }
        };
        Target::One(self.loop_of(session))
    }

    /// This handle with its calls' work traced as children of `span`.
    pub fn traced(&self, span: &tracing::Span) -> Self {
        Self {
            loops: self.loops.clone(),
            turn: self.turn.clone(),
            span: span.clone(),
        }
    }

    /// Submits `request` to one loop and waits for its reply.
    async fn unary_on(
        &self,
        lane: usize,
        caller: Caller,
        request: Request,
    ) -> Result<Response, Status> {
        let (tx, rx) = oneshot::channel();
        let call = Input::Call(caller, request, ClientSink::Unary(tx), self.span.clone());
        if self.loops[lane].send(call).is_err() {
            return Err(Status::unavailable("host is shutting down"));
        }
        rx.await
            .unwrap_or_else(|_| Err(Status::unavailable("host is shutting down")))
    }

    /// Submits a unary call and waits for its reply.
    pub async fn unary(&self, caller: Caller, request: Request) -> Result<Response, Status> {
        match self.target(&request) {
            Target::One(lane) => self.unary_on(lane, caller, request).await,
            Target::All => {
                let copy = (self.loops.len() > 1).then(|| (caller.clone(), request.clone()));
                let first = self.unary_on(0, caller, request).await;
                if let (Ok(_), Some((caller, request))) = (&first, copy) {
                    for lane in 1..self.loops.len() {
                        // The row is stored by now: the others take it as an
                        // identical registration (or boot from it).
                        if let Err(status) =
                            self.unary_on(lane, caller.clone(), request.clone()).await
                        {
                            tracing::warn!(lane, %status.message, "drive loop did not follow");
                            return Err(status);
                        }
                    }
                }
                first
            }
        }
    }

    /// Submits an Exec call; frames and the final status arrive on the
    /// returned channel.
    pub fn exec(
        &self,
        caller: Caller,
        request: Request,
    ) -> mpsc::UnboundedReceiver<Result<ExecUpdate, Status>> {
        // Unbounded: the drive loop must never wait on one client. A turn's
        // frames are bounded by the turn (its records and deltas).
        let (tx, rx) = mpsc::unbounded_channel();
        let lane = self.lane(&request);
        if let Err(mpsc::error::SendError(Input::Call(_, _, ClientSink::Exec(tx), _))) =
            self.loops[lane].send(Input::Call(
                caller,
                request,
                ClientSink::Exec(tx),
                self.span.clone(),
            ))
        {
            let _ = tx.send(Err(Status::unavailable("host is shutting down")));
        }
        rx
    }

    /// Submits a Replay call. The loop reads each page once the client
    /// has taken the one before ([`super::replay_sink`]).
    pub fn replay(&self, caller: Caller, request: Request) -> ReplayReceiver {
        let (sink, rx) = super::replay_sink::channel();
        let lane = self.lane(&request);
        if let Err(mpsc::error::SendError(Input::Call(_, _, ClientSink::Replay(sink), _))) =
            self.loops[lane].send(Input::Call(
                caller,
                request,
                ClientSink::Replay(sink),
                self.span.clone(),
            ))
        {
            sink.fail(Status::unavailable("host is shutting down"));
        }
        rx
    }

    /// The loop a streaming call goes to (they all name a session).
    fn lane(&self, request: &Request) -> usize {
        match self.target(request) {
            Target::One(lane) => lane,
            Target::All => 0,
        }
    }

    /// Stops taking calls and waits until the calls in flight have
    /// finished, on every loop.
    pub async fn drain(&self) {
        let mut done = Vec::with_capacity(self.loops.len());
        for tx in self.loops.iter() {
            let (ack, rx) = oneshot::channel();
            if tx.send(Input::Drain(ack)).is_ok() {
                done.push(rx);
            }
        }
        for rx in done {
            let _ = rx.await;
        }
    }
}

/// The console's narrow view of the host: its calls go through the drive
/// loops like any gRPC call.
#[cfg(not(madsim))]
impl crate::console::Calls for DriverHandle {
    fn unary(
        &self,
        caller: Caller,
        request: Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Status>> + Send + '_>>
    {
        Box::pin(DriverHandle::unary(self, caller, request))
    }

    fn replay(&self, caller: Caller, request: Request) -> crate::console::Records {
        Box::pin(DriverHandle::replay(self, caller, request))
    }
}
