//! The one error type of the harness SDK.

use agentsessions_proto::v1::ApprovalRef;

/// Why a harness run, or one of its sink calls, failed.
///
/// Cloneable because the sink is sticky: once it fails or parks, every later
/// call returns the same error again.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HarnessError {
    /// The host parked a REQUIRES_APPROVAL call. A harness must return this
    /// from `run` unchanged: the adapter then acknowledges the park with
    /// EVENT_PARKED and closes without END.
    #[error("parked on approval request {} of call {:?}", .0.request_seq, .0.tool_call_id)]
    Parked(ApprovalRef),
    /// The host broke the Connect protocol (a correlation, session or
    /// receipt violation). Sticky.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The harness asked for something the protocol cannot carry; refused
    /// before anything was sent.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The host stopped sending (or the stream is gone) while the harness
    /// still needed an answer.
    #[error("stream closed")]
    Closed,
    /// The host sent a Cancel frame.
    #[error("canceled: {0}")]
    Canceled(String),
    /// The harness's own failure; the text becomes END's description verbatim.
    #[error("{0}")]
    Failed(String),
}

impl HarnessError {
    /// A harness failure whose text is reported as is.
    pub fn failed(text: impl Into<String>) -> Self {
        Self::Failed(text.into())
    }

    pub(crate) fn protocol(text: impl Into<String>) -> Self {
        Self::Protocol(text.into())
    }

    pub(crate) fn invalid(text: impl Into<String>) -> Self {
        Self::Invalid(text.into())
    }
}
