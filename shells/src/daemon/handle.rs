//! What goes into the drive loop: its [`Input`]s, and the
//! [`DriverHandle`] the gRPC layer submits client calls with.
//!
//! Invariant: the loop's channel is the only way in, and it is unbounded
//! so the loop never waits on itself; a call's frames go out on a channel
//! of the call's own, which the loop never waits on either.

use std::time::Duration;

use agentsessions_machine::host::{
    Caller, ConnId, EffectId, HarnessFailure, HarnessInput, Outcome, Request, RequestId, Response,
    Status,
};
use agentsessions_proto::v1::{ExecUpdate, LogRecord};
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
        /// The bound on the harness's first event.
        first_event_timeout: Duration,
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
        read: Result<Vec<LogRecord>, agentsessions_machine::host::StoreFault>,
    },
    /// An append's outcome, with its session for the cache.
    Appended(EffectId, String, Outcome),
    /// A streamed model chunk.
    Chunk(EffectId, String),
    /// The client of a call went away.
    Cancel(RequestId),
    /// Stop taking calls; exit once every call in flight has finished.
    Drain(oneshot::Sender<()>),
}

/// A handle for submitting calls to the loop.
#[derive(Clone)]
pub struct DriverHandle {
    tx: mpsc::UnboundedSender<Input>,
    /// The RPC span the calls belong to (see [`DriverHandle::traced`]).
    span: tracing::Span,
}

impl DriverHandle {
    /// A handle on the loop's channel, tracing nothing.
    pub(super) fn new(tx: mpsc::UnboundedSender<Input>) -> Self {
        Self {
            tx,
            span: tracing::Span::none(),
        }
    }

    /// This handle with its calls' work traced as children of `span`.
    pub fn traced(&self, span: &tracing::Span) -> Self {
        Self {
            tx: self.tx.clone(),
            span: span.clone(),
        }
    }

    /// Submits a unary call and waits for its reply.
    pub async fn unary(&self, caller: Caller, request: Request) -> Result<Response, Status> {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .send(Input::Call(
                caller,
                request,
                ClientSink::Unary(tx),
                self.span.clone(),
            ))
            .is_err()
        {
            return Err(Status::unavailable("host is shutting down"));
        }
        rx.await
            .unwrap_or_else(|_| Err(Status::unavailable("host is shutting down")))
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
        if let Err(mpsc::error::SendError(Input::Call(_, _, ClientSink::Exec(tx), _))) =
            self.tx.send(Input::Call(
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

    /// Submits a Replay call.
    pub fn replay(
        &self,
        caller: Caller,
        request: Request,
    ) -> mpsc::UnboundedReceiver<Result<LogRecord, Status>> {
        // Unbounded so the loop never waits on one reader; a slow reader of
        // a long journal buffers up to the journal in memory (#18 adds
        // client credit to the machine).
        let (tx, rx) = mpsc::unbounded_channel();
        if let Err(mpsc::error::SendError(Input::Call(_, _, ClientSink::Replay(tx), _))) =
            self.tx.send(Input::Call(
                caller,
                request,
                ClientSink::Replay(tx),
                self.span.clone(),
            ))
        {
            let _ = tx.send(Err(Status::unavailable("host is shutting down")));
        }
        rx
    }

    /// Stops taking calls and waits until the calls in flight have finished.
    pub async fn drain(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Input::Drain(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}
