//! Model providers: the shell that performs [`Effect::InvokeModel`].
//!
//! The machine decides *when* a model is called and what gets journaled; a
//! [`ModelClient`] only turns a [`ModelCall`] into a [`ModelReply`], forwarding
//! streamed text chunks as they arrive. Chunks are for client deltas only: the
//! completion that the machine journals is always the reply itself.
//!
//! Two clients ship:
//! - [`EchoModel`], the built-in default when no model is configured;
//! - [`OpenAiClient`], an OpenAI-compatible Chat Completions client.
//!
//! The trait is object safe (boxed futures, `&mut dyn FnMut` for chunks) so the
//! daemon can pick a client from its flags and hold it as `Arc<dyn ModelClient>`.
//!
//! [`Effect::InvokeModel`]: agentsessions_machine::vocab::Effect::InvokeModel

use std::future::Future;
use std::pin::Pin;

use agentsessions_machine::vocab::{ModelFailure, ModelReply, Outcome};
use agentsessions_proto::v1::{Message, ModelCall, Part, TextPart, part};

// HTTP over real sockets: not available in the madsim simulation.
#[cfg(not(madsim))]
pub mod openai;
pub mod router;

#[cfg(not(madsim))]
pub use openai::{OpenAiClient, OpenAiConfig};
pub use router::ModelRouter;

/// A boxed, sendable future borrowed for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Receives streamed text chunks, in order.
pub type ChunkSink<'a> = &'a mut (dyn FnMut(String) + Send);

/// A model provider.
pub trait ModelClient: Send + Sync {
    /// Completes `request`. A streaming client calls `on_chunk` with each
    /// non-empty text delta before returning; a non-streaming one never calls
    /// it. The returned message is the whole completion either way.
    fn invoke<'a>(
        &'a self,
        request: &'a ModelCall,
        on_chunk: ChunkSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
}

/// Why a model call failed.
///
/// Messages are short and carry no message content, tool arguments or keys:
/// they may be returned to harnesses and written into receipts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The client was built without a default model.
    #[error("openai: a default model is required")]
    MissingModel,
    /// The base URL and path do not form a valid URL.
    #[error("openai: invalid endpoint url")]
    InvalidUrl,
    /// A configured header name or value is not valid HTTP.
    #[error("openai: invalid header")]
    InvalidHeader,
    /// The HTTP client could not be built.
    #[error("openai: http client: {0}")]
    Client(String),
    /// A message holds a part the provider cannot take (`file` or `data`).
    #[error("openai: unsupported part: {kind}")]
    UnsupportedPart {
        /// Which kind of part.
        kind: &'static str,
    },
    /// Tool call arguments that could not be encoded for the provider.
    #[error("openai: tool call arguments cannot be encoded")]
    EncodeArgs,
    /// The request never got a complete answer (connect, timeout, reset).
    #[error("openai: {model}: request failed: {detail}")]
    Transport {
        /// The model sent.
        model: String,
        /// The transport failure, without the URL.
        detail: String,
    },
    /// The provider answered with a non-200 status.
    #[error("openai: {model}: {}", status_text(detail, *status))]
    Status {
        /// The model sent.
        model: String,
        /// HTTP status code.
        status: u16,
        /// The provider's error message or the start of its body (keys
        /// scrubbed); empty when neither was available.
        detail: String,
    },
    /// The provider reported an error inside a stream.
    #[error("openai: {model}: {detail}")]
    Provider {
        /// The model sent.
        model: String,
        /// The provider's error message (keys scrubbed).
        detail: String,
    },
    /// The response body exceeded the size limit.
    #[error("openai: {model}: response exceeds {limit} bytes")]
    TooLarge {
        /// The model sent.
        model: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// The response body is not a Chat Completions object.
    #[error("openai: {model}: invalid response body")]
    InvalidBody {
        /// The model sent.
        model: String,
    },
    /// The response has no choices.
    #[error("openai: {model}: no choices in response")]
    NoChoices {
        /// The model sent.
        model: String,
    },
    /// A tool call's `arguments` is not a JSON object.
    #[error("openai: {model}: tool call arguments are not a json object")]
    InvalidToolArguments {
        /// The model sent.
        model: String,
    },
    /// A server-sent-events line exceeded the line limit.
    #[error("openai: {model}: stream line exceeds {limit} bytes")]
    LineTooLong {
        /// The model sent.
        model: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// A stream `data:` frame is not valid JSON of the expected shape.
    #[error("openai: {model}: invalid stream frame")]
    InvalidFrame {
        /// The model sent.
        model: String,
    },
    /// The stream ended before `[DONE]` and before any choice finished.
    #[error("openai: {model}: stream ended early")]
    StreamTruncated {
        /// The model sent.
        model: String,
    },
    /// No provider serves this model id.
    #[error("model {model:?} is not served by this host")]
    NotServed {
        /// The id the harness asked for.
        model: String,
    },
}

fn status_text(detail: &str, status: u16) -> String {
    if detail.is_empty() {
        format!("http {status}")
    } else {
        format!("{detail} (http {status})")
    }
}

impl ModelError {
    /// The text for [`Outcome::Model`]'s error. Never contains message
    /// content or keys: every variant's message is built from fixed text, the
    /// model name, status codes and the provider's own (key-scrubbed) error.
    pub fn to_outcome_string(&self) -> String {
        self.to_string()
    }

    /// True when the provider could not be reached or was overloaded, so
    /// the same call may succeed later: the turn is then UNAVAILABLE and
    /// clients retry it. A refusal of the request itself is not.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::StreamTruncated { .. } => true,
            Self::Status { status, .. } => matches!(status, 408 | 429 | 500 | 502 | 503 | 504),
            _ => false,
        }
    }

    /// The machine's view of this failure.
    pub fn to_failure(&self) -> ModelFailure {
        ModelFailure {
            unavailable: self.is_unavailable(),
            message: self.to_outcome_string(),
        }
    }
}

/// Converts a client result into the machine's outcome.
pub fn model_outcome(result: Result<ModelReply, ModelError>) -> Outcome {
    Outcome::Model(result.map_err(|e| e.to_failure()))
}

/// Concatenation of a message's text parts; every other kind is skipped.
pub fn message_text(message: &Message) -> String {
    let mut out = String::new();
    for p in &message.parts {
        if let Some(part::Part::Text(t)) = &p.part {
            out.push_str(&t.text);
        }
    }
    out
}

/// An assistant message with one text part.
pub fn assistant_text(text: String) -> Message {
    Message {
        role: "assistant".to_owned(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart { text })),
        }],
    }
}

/// The built-in model: answers `"echo:" + <text of the last message>`.
///
/// It does not stream and reports no usage, so a journal written with it is
/// byte-for-byte reproducible.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoModel;

impl EchoModel {
    /// The reply for `request`, synchronously.
    pub fn reply(request: &ModelCall) -> ModelReply {
        let last = request
            .messages
            .last()
            .map(message_text)
            .unwrap_or_default();
        ModelReply {
            message: Some(assistant_text(format!("echo:{last}"))),
            usage: None,
        }
    }
}

impl ModelClient for EchoModel {
    fn invoke<'a>(
        &'a self,
        request: &'a ModelCall,
        _on_chunk: ChunkSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(std::future::ready(Ok(Self::reply(request))))
    }
}
