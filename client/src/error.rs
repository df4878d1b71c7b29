//! What a call can fail with: the server's status, kept whole, so callers
//! branch on the documented gRPC codes rather than on message text.

/// A failed call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The server (or the transport) answered with a status.
    #[error("{call}: {}: {}", .status.code(), .status.message())]
    Status {
        /// The RPC, e.g. `Exec`.
        call: &'static str,
        /// The status as received.
        status: tonic::Status,
    },
    /// An answer the contract does not allow (a field it promises is
    /// missing).
    #[error("{call}: malformed answer: {what}")]
    Malformed {
        /// The RPC.
        call: &'static str,
        /// What was missing or wrong.
        what: &'static str,
    },
    /// A decision is wanted but the session waits for none.
    #[error("session {0} has no pending approval")]
    NothingPending(String),
    /// The token cannot travel in a header (not printable ASCII).
    #[error("token: not a printable ASCII credential")]
    BadToken,
    /// The address (or its TLS settings) cannot be dialed as written.
    #[error("bad address {0:?}")]
    BadAddress(String),
}

impl ClientError {
    /// The gRPC code: the status's, or INTERNAL for a malformed answer and
    /// FAILED_PRECONDITION when nothing is pending, INVALID_ARGUMENT for
    /// settings that cannot be used.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::Status { status, .. } => status.code(),
            Self::Malformed { .. } => tonic::Code::Internal,
            Self::NothingPending(_) => tonic::Code::FailedPrecondition,
            Self::BadToken | Self::BadAddress(_) => tonic::Code::InvalidArgument,
        }
    }

    /// The status, when the server sent one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Self::Status { status, .. } => Some(status),
            _ => None,
        }
    }

    pub(crate) fn rpc(call: &'static str) -> impl FnOnce(tonic::Status) -> Self {
        move |status| Self::Status { call, status }
    }
}
