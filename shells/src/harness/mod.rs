//! The harness side of `Harness.Connect`: an SDK for writing harnesses in
//! Rust, a tonic adapter that serves one, and the built-in harnesses.
//!
//! A harness implements [`Harness`]: a static descriptor plus `run`, which
//! performs exactly one execution through a [`Sink`]. [`HarnessService`]
//! turns it into the gRPC `Harness` service (one execution per Connect
//! stream) and owns the wire protocol: the Start handshake, event envelopes,
//! reply correlation, the approval park, and the closing END or PARKED.
//! [`serve`] binds it to a TCP address or a unix socket.
//!
//! ```no_run
//! use agentsessions_shells::harness::{Harness, HarnessError, Sink, StartInfo};
//! use agentsessions_proto::v1::HarnessDescriptor;
//!
//! struct Shout;
//!
//! #[tonic::async_trait]
//! impl Harness for Shout {
//!     fn describe(&self) -> HarnessDescriptor {
//!         HarnessDescriptor { id: "shout".into(), version: "1".into(), ..Default::default() }
//!     }
//!     async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
//!         sink.output(&start.last_input_text().to_uppercase()).await
//!     }
//! }
//! ```

pub mod builtin;
mod error;
mod memory;
#[cfg(not(madsim))]
pub mod serve;
mod service;
mod sink;
mod wire;

use std::collections::BTreeMap;

use agentsessions_machine::events;
pub use agentsessions_machine::host::History;
use agentsessions_proto::v1::{
    ControllerFrame, HarnessDescriptor, IdentityContext, Message, ToolChoice, ToolDefinition,
};

pub use error::HarnessError;
pub use memory::{MemoryHarness, SnapshotError};
pub use service::HarnessService;
pub use sink::Sink;

/// A harness: an agent loop whose every model and tool call goes through
/// the host.
#[tonic::async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The static contract; also what `Harness.Describe` answers.
    fn describe(&self) -> HarnessDescriptor;

    /// Performs exactly one execution. `Ok` ends it COMPLETED and an error
    /// FAILED, except [`HarnessError::Parked`], which must be returned as
    /// the sink gave it so the adapter can acknowledge the park.
    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError>;
}

/// What one execution starts from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartInfo {
    /// The execution id every event of this run carries.
    pub execution_id: String,
    /// The session uid (the namespace of tool side effects); may be empty.
    pub session: String,
    /// Opaque per-execution config, restored as is on replay and resume.
    pub config: Vec<u8>,
    /// Prior turns' events; empty when the harness's memory was restored.
    /// Shared with the host's journal in process: reading it copies
    /// nothing, whatever the session's length.
    pub history: History,
    /// This execution's inputs.
    pub inputs: Vec<Message>,
    /// Who the execution runs for, if the host said.
    pub identity: Option<IdentityContext>,
    /// The harness's own cursor into the journal.
    pub resume_from_seq: i64,
}

impl StartInfo {
    /// The text of the last input ("" when there is none).
    pub fn last_input_text(&self) -> String {
        self.inputs
            .last()
            .map(events::message_text)
            .unwrap_or_default()
    }
}

/// A host frame on its way to a harness: the wire frame and, for a Start,
/// its history beside it (see [`History`]). A harness in this process reads
/// the shared history; the gRPC client puts it into the frame it encodes.
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    /// The frame (a Start's `history` left empty when `history` is set).
    pub frame: ControllerFrame,
    /// A Start's prior events, delivered by reference.
    pub history: Option<History>,
}

impl Outbound {
    /// The frame as the wire carries it, history included.
    pub fn into_wire(self) -> ControllerFrame {
        let mut frame = self.frame;
        History::attach(&mut frame, self.history.as_ref());
        frame
    }
}

impl From<ControllerFrame> for Outbound {
    fn from(frame: ControllerFrame) -> Self {
        Self {
            frame,
            history: None,
        }
    }
}

/// A model completion request. The host hashes exactly these fields into the
/// recorded input hash, so a harness that wants replays to match must build
/// the same request for the same turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRequest {
    /// Model id.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Provider parameters.
    pub params: BTreeMap<String, String>,
    /// Tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// How the model must pick tools; None is the provider default.
    pub tool_choice: Option<ToolChoice>,
}

impl ModelRequest {
    /// A request for `model` with `messages` and nothing else.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            ..Self::default()
        }
    }
}
