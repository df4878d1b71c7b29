//! The built-in harnesses, by kind name.
//!
//! - [`Echo`]: one model call with the last input's text.
//! - [`Counter`]: an in-memory count, so it needs memory snapshots.
//! - [`Chat`]: a history-aware conversation with a configured model.
//! - [`Approval`]: one REQUIRES_APPROVAL tool call, to demonstrate the
//!   park → decide → resume → receipt round trip.
//! - [`Agent`]: a tool-using loop over a configured model and the host's
//!   tools.

mod agent;
mod approval;
mod chat;
mod counter;
mod echo;

use std::sync::Arc;

use agentsessions_proto::v1::{Capabilities, HarnessDescriptor, Resumability};

pub use agent::{
    Agent, AgentConfig, AgentConfigError, DEFAULT_MAX_STEPS, DENIED, MAX_CALLS_PER_STEP,
    MAX_SHOWN_BYTES, MAX_STEPS, NOT_RUN, ToolSource, no_tools,
};
pub use approval::Approval;
pub use chat::{CONFIG_NOT_OBJECT, Chat, PROMPT_NOT_STRING};
pub use counter::Counter;
pub use echo::Echo;

use super::{Harness, MemoryHarness};

/// Every built-in kind name.
pub const KINDS: [&str; 5] = ["echo", "counter", "chat", "approval", "agent"];

/// Why a built-in harness could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    /// No built-in harness has this name.
    #[error("unknown harness kind {0:?} (want one of echo, counter, chat, approval, agent)")]
    UnknownKind(String),
    /// The kind needs a model id and none was given.
    #[error("harness kind {0:?} needs a model")]
    ModelRequired(String),
    /// The kind keeps no memory a snapshot could capture.
    #[error("harness kind {0:?} has no memory snapshots")]
    NoMemory(String),
    /// Saved memory that the kind cannot load.
    #[error("harness kind {kind:?}: {reason}")]
    BadSnapshot {
        /// The kind.
        kind: String,
        /// Why the bytes were refused.
        reason: String,
    },
}

/// Makes the built-in harness `kind`; `model` ("" for none) is used by
/// `chat` and `agent`, which require it. An unknown kind is an error:
/// substituting another harness would journal a session under the wrong
/// contract. An `agent` made here offers no tools (see [`build_with`]).
pub fn build(kind: &str, model: &str) -> Result<Arc<dyn Harness>, BuiltinError> {
    build_with(kind, model, &no_tools())
}

/// [`build`], with the tools an `agent` offers.
pub fn build_with(
    kind: &str,
    model: &str,
    tools: &ToolSource,
) -> Result<Arc<dyn Harness>, BuiltinError> {
    match kind {
        "echo" => Ok(Arc::new(Echo)),
        "counter" => Ok(Arc::new(Counter::default())),
        "approval" => Ok(Arc::new(Approval)),
        "chat" | "agent" if model.is_empty() => Err(BuiltinError::ModelRequired(kind.to_owned())),
        "chat" => Ok(Arc::new(Chat::new(model))),
        "agent" => Ok(Arc::new(Agent::new(model, tools.clone()))),
        other => Err(BuiltinError::UnknownKind(other.to_owned())),
    }
}

/// Makes a memory-snapshot instance of `kind`: fresh when `saved` is None,
/// else with the saved memory loaded.
pub fn memory(kind: &str, saved: Option<&[u8]>) -> Result<Arc<dyn MemoryHarness>, BuiltinError> {
    match (kind, saved) {
        ("counter", None) => Ok(Arc::new(Counter::default())),
        ("counter", Some(bytes)) => Counter::load(bytes)
            .map(|c| Arc::new(c) as Arc<dyn MemoryHarness>)
            .map_err(|e| BuiltinError::BadSnapshot {
                kind: kind.to_owned(),
                reason: e.to_string(),
            }),
        _ => Err(BuiltinError::NoMemory(kind.to_owned())),
    }
}

/// [`build`] without the reason: None for an unknown kind or a missing
/// model.
pub fn by_name(kind: &str, model: &str) -> Option<Arc<dyn Harness>> {
    build(kind, model).ok()
}

/// The descriptor shape the built-ins share: version "1" and no tools.
fn descriptor(
    id: &str,
    models: Vec<String>,
    resumability: Resumability,
    fork_safe: bool,
) -> HarnessDescriptor {
    HarnessDescriptor {
        id: id.to_owned(),
        models,
        tools: Vec::new(),
        capabilities: Some(Capabilities {
            resumability: resumability as i32,
            fork_safe,
            ..Capabilities::default()
        }),
        version: "1".to_owned(),
    }
}
