//! Store failures as the machine decides on them. A leaf of the
//! vocabulary: the error catalog wraps these, and the outcomes (which name
//! the loaded journal, a layer above the catalog) carry them.

use super::status::Status;

/// A store failure as the machine decides on it: its text, and what kind
/// of failure it is (which decides the reply's status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFault {
    /// Whether a retry can mend it, and when.
    pub kind: FaultKind,
    /// What failed, for the caller and the logs.
    pub message: String,
}

/// The kinds of [`StoreFault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Retrying will not mend it (corrupt row, undecodable blob): INTERNAL.
    Permanent,
    /// The store itself is down for now (disk full, database unreachable, a
    /// commit whose outcome is unknown): UNAVAILABLE.
    Transient,
    /// Another host holds the session's live lease: ABORTED, as for an
    /// overlapping call on one host.
    Busy,
}

impl StoreFault {
    /// A failure retrying will not mend (corrupt row, undecodable blob).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            kind: FaultKind::Permanent,
            message: message.into(),
        }
    }

    /// The store is down for now.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            kind: FaultKind::Transient,
            message: message.into(),
        }
    }

    /// The session is leased to another host.
    pub fn busy(message: impl Into<String>) -> Self {
        Self {
            kind: FaultKind::Busy,
            message: message.into(),
        }
    }

    /// Whether the store itself is down (callers see UNAVAILABLE).
    pub fn is_transient(&self) -> bool {
        self.kind == FaultKind::Transient
    }

    /// The same failure, its text prefixed with what was being done.
    pub fn within(&self, what: impl std::fmt::Display) -> Self {
        let fault = Self {
            kind: self.kind,
            message: format!("{what}: {}", self.message),
        };
        debug_assert!(
            fault.message.ends_with(self.message.as_str()),
            "only a prefix"
        );
        fault
    }

    /// The reply status for this failure while doing `what`.
    pub fn status(&self, what: impl std::fmt::Display) -> Status {
        let message = format!("{what}: {}", self.message);
        let status = match self.kind {
            FaultKind::Permanent => Status::internal(message),
            FaultKind::Transient => Status::unavailable(message),
            FaultKind::Busy => Status::aborted(message),
        };
        debug_assert_eq!(
            status.code == super::status::Code::Unavailable,
            self.is_transient(),
            "UNAVAILABLE exactly when the store is down"
        );
        status
    }
}

impl std::fmt::Display for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<&str> for StoreFault {
    fn from(message: &str) -> Self {
        Self::permanent(message)
    }
}

impl From<String> for StoreFault {
    fn from(message: String) -> Self {
        Self::permanent(message)
    }
}

/// Why an append did not commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// The head was not `expected_last_seq`.
    Conflict {
        /// The head seen by the store.
        head: i64,
    },
    /// A newer fence was minted.
    Fenced {
        /// The stored fence.
        current: i64,
    },
    /// The session was deleted: its uid takes no more writes.
    Deleted,
    /// Storage failure; whether anything committed is unknown to the caller,
    /// so the machine re-reads before deciding again.
    Failed(StoreFault),
}
