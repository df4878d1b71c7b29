//! The MCP client the daemon uses to offer MCP servers' tools: one
//! connection per `--mcp NAME=…` server (a stdio child or a streamable HTTP
//! endpoint, via `rmcp`), a catalog of their tools named `SERVER__TOOL`,
//! and bounded, cancellable calls.
//!
//! Invariants:
//! - A server never fails the hub: one that cannot start, dies or stops
//!   answering is marked down (its last tools kept, `up=false`) and
//!   reconnected in the background with backoff (100 ms doubling to 30 s);
//!   calls to it fail promptly with [`McpError::ServerDown`].
//! - Every call is bounded: the per-server concurrency bound and the call
//!   timeout both apply, results past `max_result_bytes` are refused, and a
//!   call that is dropped or times out sends MCP `notifications/cancelled`.
//! - Nothing outlives [`McpHub::shutdown`]: each stdio child runs in a
//!   process group of its own, which is stopped and reaped.
//! - Annotations are hints from a peer we do not control: absent ones take
//!   the most conservative value, and the host treats them as defaults under
//!   operator policy, never as permission.
//! - Error messages never carry argument values.

mod conn;
mod hub;
pub mod json;
pub mod receipt;
pub mod spec;

use std::time::Duration;

pub use conn::CHILD_ENV;
pub use hub::McpHub;
pub use json::{JsonError, args_to_json, json_to_struct};
pub use receipt::{error_result, to_tool_result};
pub use spec::{ServerSpec, SpecError, Target};

/// Limits of the hub.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// Bound on one call, from the moment it is asked (waiting for a
    /// concurrency slot included).
    pub call_timeout: Duration,
    /// Calls in flight to one server at once; further calls wait (within
    /// their timeout).
    pub max_concurrent_calls: usize,
    /// Largest result accepted (text, media as base64, structured JSON).
    pub max_result_bytes: usize,
    /// Bound on one connection attempt: spawn or connect, initialize, and
    /// list the tools.
    pub start_timeout: Duration,
    /// Names of environment variables passed to stdio servers besides the
    /// few every child gets (PATH, HOME, USER, …; see [`CHILD_ENV`]): the
    /// rest of the daemon's environment, its secrets included, stays home.
    pub child_env: Vec<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(60),
            max_concurrent_calls: 8,
            max_result_bytes: 1 << 20,
            start_timeout: Duration::from_secs(30),
            child_env: Vec::new(),
        }
    }
}

/// One tool of one server as the host offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// `SERVER__TOOL`.
    pub name: String,
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    pub description: String,
    /// The tool's JSON Schema for its arguments (an object).
    pub input_schema: serde_json::Value,
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
    /// Whether its server is connected now.
    pub up: bool,
}

/// What a call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The tool reported a failure (MCP `isError`); its content says why.
    pub is_error: bool,
    pub content: Vec<Content>,
    /// `structuredContent`, always a JSON object whose numbers fit a Struct.
    pub structured: Option<serde_json::Value>,
}

/// One MCP content block.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    Image {
        mime: String,
        data_base64: String,
    },
    Audio {
        mime: String,
        data_base64: String,
    },
    ResourceLink {
        uri: String,
        name: String,
        mime: Option<String>,
    },
    /// An embedded resource: `text` or `blob_base64`, never both.
    Resource {
        uri: String,
        mime: Option<String>,
        text: Option<String>,
        blob_base64: Option<String>,
    },
}

/// Why a call failed. Messages are short and never carry argument values;
/// a server's own error text is kept apart (see [`McpError::receipt_text`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    #[error("unknown mcp tool {name}")]
    UnknownTool { name: String },
    #[error("mcp server {server} is down: {reason}")]
    ServerDown { server: String, reason: String },
    #[error("mcp call to {server} timed out after {after:?}")]
    Timeout { server: String, after: Duration },
    #[error("mcp result larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// A JSON-RPC error answered by the server; `message` is its text.
    #[error("mcp server returned error {code}")]
    Server { code: i32, message: String },
    #[error("mcp protocol error: {0}")]
    Protocol(String),
    #[error("arguments: {0}")]
    Arguments(JsonError),
    #[error("result: {0}")]
    Result(JsonError),
}

impl McpError {
    /// The text a receipt shows the model: the message, plus the server's
    /// own text for a JSON-RPC error (it may echo arguments, which the
    /// receipt's call already holds).
    pub fn receipt_text(&self) -> String {
        match self {
            Self::Server { message, .. } if !message.is_empty() => format!("{self}: {message}"),
            _ => self.to_string(),
        }
    }
}
