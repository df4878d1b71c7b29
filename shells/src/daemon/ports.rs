//! The ports the drive loop performs effects through (journal aside):
//! harness dials and describes, the built-in runtimes, the model and the
//! tools, and the sink each client call's frames and reply go to.
//!
//! Invariant: a port performs exactly what it is handed and reports the
//! outcome; it decides nothing (the machine has decided already).

use agentsessions_machine::vocab::{
    Backend, HarnessFailure, ModelFailure, ModelReply, Response, RuntimeOp, RuntimeReply, Status,
    StreamItem, ToolFailure,
};
use agentsessions_proto::v1::{
    Event, ExecUpdate, HarnessDescriptor, ModelCall, ToolCall, ToolResult,
};
use tokio::sync::{mpsc, oneshot};

use crate::harness::Outbound;
pub use crate::tools::Interrupt;

/// Boxed future returned by the ports (they are used as trait objects).
pub type PortFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Inbound events of one connection: each event, then at most one failure;
/// the stream's end is a clean close.
pub type EventStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<Event, String>> + Send>>;

/// An open `Harness.Connect` stream: frames go out on `frames`; events come
/// in on `events`, polled by the drive loop itself.
pub struct Connection {
    /// Outbound frames (dropping it half-closes the stream).
    pub frames: mpsc::UnboundedSender<Outbound>,
    /// Inbound events.
    pub events: EventStream,
}

/// Talks to harnesses (Describe and Connect).
pub trait HarnessPort: Send + Sync + 'static {
    /// Describes the harness reachable at `address`.
    fn describe(
        &self,
        address: String,
    ) -> PortFuture<'_, Result<HarnessDescriptor, HarnessFailure>>;
    /// Opens one Connect stream to `address`.
    fn connect(&self, address: String) -> PortFuture<'_, Result<Connection, HarnessFailure>>;
}

/// The Runtime SPI for every backend kind.
pub trait RuntimePort: Send + Sync + 'static {
    /// Where `backend` can be described before anything is provisioned.
    fn describe_address(&self, backend: &Backend) -> Result<String, String>;
    /// The descriptor of a harness this process serves itself, without a
    /// round trip; None when `backend` must be asked over the wire.
    fn describe_in_process(&self, _backend: &Backend) -> Option<Result<HarnessDescriptor, String>> {
        None
    }
    /// One Runtime call.
    fn call(&self, backend: Backend, op: RuntimeOp)
    -> PortFuture<'_, Result<RuntimeReply, String>>;
}

/// The model provider.
pub trait ModelPort: Send + Sync + 'static {
    /// Invokes the model once, forwarding streamed chunks.
    fn invoke(
        &self,
        request: ModelCall,
        chunks: mpsc::UnboundedSender<String>,
    ) -> PortFuture<'_, Result<ModelReply, ModelFailure>>;
}

/// The tool executor (deduplicates by session and idempotency key).
pub trait ToolPort: Send + Sync + 'static {
    /// Executes a host-mediated call; `interrupt` fires when the machine
    /// says the call's turn was canceled (`Effect::InterruptTool`). A port
    /// may stop the call then, or ignore it; it answers either way. `ask`
    /// carries the machine's flags: a key whose earlier run never finished
    /// is answered [`ToolFailure::Unfinished`] unless `ask.again` says to
    /// run it anyway.
    fn execute(
        &self,
        session: String,
        call: ToolCall,
        ask: crate::tools::Ask,
        interrupt: Interrupt,
    ) -> PortFuture<'_, Result<ToolResult, ToolFailure>>;

    /// Forgets the ledger entries of a deleted session.
    fn forget(&self, _session: String) -> PortFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// Where a client call's frames and reply go.
pub enum ClientSink {
    /// One reply.
    Unary(oneshot::Sender<Result<Response, Status>>),
    /// Exec frames, then the end (or an error status).
    Exec(mpsc::UnboundedSender<Result<ExecUpdate, Status>>),
    /// Replay records, then the end (or an error status), paced by what
    /// the client has taken.
    Replay(super::replay_sink::ReplaySink),
}

impl ClientSink {
    pub(super) fn stream(&self, item: StreamItem) {
        // A client that went away is reported through `closed()` below; a
        // failed send here needs nothing more.
        match (self, item) {
            (Self::Exec(tx), item) => {
                let _ = tx.send(Ok(item.into_exec_update()));
            }
            (Self::Replay(sink), StreamItem::Record(r)) => sink.record(r.into_record()),
            (Self::Replay(_), other) => {
                debug_assert!(false, "replay streams records only: {other:?}")
            }
            (Self::Unary(_), other) => debug_assert!(false, "unary calls do not stream: {other:?}"),
        }
    }

    pub(super) fn finish(self, result: Result<Response, Status>) {
        match self {
            Self::Unary(tx) => {
                let _ = tx.send(result);
            }
            Self::Exec(tx) => {
                if let Err(status) = result {
                    let _ = tx.send(Err(status));
                }
            }
            Self::Replay(sink) => {
                if let Err(status) = result {
                    sink.fail(status);
                }
            }
        }
    }
}
