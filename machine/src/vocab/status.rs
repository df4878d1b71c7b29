//! gRPC-style status codes, without depending on tonic.
//!
//! The machine decides the status of every reply; the gRPC shell maps
//! [`Code`] one to one onto `tonic::Code`.

/// The gRPC status codes the host returns (numbering matches gRPC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// The caller cancelled.
    Cancelled = 1,
    /// Unclassified failure.
    Unknown = 2,
    /// Malformed request.
    InvalidArgument = 3,
    /// The caller's deadline passed.
    DeadlineExceeded = 4,
    /// No such session or harness.
    NotFound = 5,
    /// The name is taken.
    AlreadyExists = 6,
    /// Not allowed.
    PermissionDenied = 7,
    /// Out of a bounded resource.
    ResourceExhausted = 8,
    /// The session's state does not allow the operation.
    FailedPrecondition = 9,
    /// Contention: CAS, fence or overlapping operation.
    Aborted = 10,
    /// Out of range.
    OutOfRange = 11,
    /// Declared but not served.
    Unimplemented = 12,
    /// A bug or an unexpected failure.
    Internal = 13,
    /// A dependency (harness) cannot be reached.
    Unavailable = 14,
    /// Lost data.
    DataLoss = 15,
    /// No credentials.
    Unauthenticated = 16,
}

/// A status code with a message for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// Human-readable detail; never contains message content, args or keys.
    pub message: String,
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        assert_ne!(
            code,
            Code::Ok,
            "a Status reports a failure; success is a Response"
        );
        Self {
            code,
            message: message.into(),
        }
    }
    /// INVALID_ARGUMENT.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }
    /// NOT_FOUND.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }
    /// FAILED_PRECONDITION.
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }
    /// ABORTED.
    pub fn aborted(message: impl Into<String>) -> Self {
        Self::new(Code::Aborted, message)
    }
    /// INTERNAL.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }
    /// UNAVAILABLE.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Code::Unavailable, message)
    }
    /// UNIMPLEMENTED.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(Code::Unimplemented, message)
    }
    /// ALREADY_EXISTS.
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(Code::AlreadyExists, message)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `new` refuses OK; the fields are public, so check again here.
        debug_assert_ne!(self.code, Code::Ok, "a Status reports a failure");
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Status {}
