//! Typed errors of the journal store.
//!
//! Callers branch on these: `Conflict` and `Fenced` are expected outcomes of
//! the single-writer protocol (the machine re-reads and decides), `Tampered`
//! is an integrity alarm, and `CommitFailed` means the outcome of a write is
//! unknown. None of them leak a raw backend error where a typed one applies.

use agentsessions_machine::chain::ChainError;

/// A backend failure with its cause kept as text, so errors stay `Clone`-free
/// of driver types and identical across backends.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Failures common to every store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An earlier commit failed on this handle; nothing more is attempted
    /// until the store is reopened (and the journal re-read).
    #[error("store poisoned by an earlier commit failure; reopen it")]
    Poisoned,
    /// COMMIT (or its fsync) failed: the write may or may not be durable.
    /// The handle is poisoned from here on.
    #[error("commit failed, outcome unknown: {reason}")]
    CommitFailed { reason: String },
    /// The store's worker threads are gone (the handle was closed).
    #[error("store closed")]
    Closed,
    /// The store cannot be reached or cannot commit for now (the database
    /// is down, the disk is full); a retry after backoff may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A statement waited past its timeout, on another client's lock: the
    /// store is up, this call was not served; a retry may succeed.
    #[error("store busy: {0}")]
    Busy(String),
    /// A stored event blob does not decode.
    #[error("session {session} seq {seq}: undecodable event: {reason}")]
    Decode {
        session: String,
        seq: i64,
        reason: String,
    },
    /// The canonical form of an event could not be built.
    #[error("canonicalize seq {seq}: {reason}")]
    Canonicalize { seq: i64, reason: String },
    /// The database's schema version is not one this build can use.
    #[error("database is v{found}, this build understands v{supported}")]
    UnsupportedSchema { found: i64, supported: i64 },
    /// A migration step failed; the database keeps its old version.
    #[error("migrate v{from} to v{to}: {reason}")]
    Migration { from: i64, to: i64, reason: String },
    /// `session_info` of an unknown uid.
    #[error("session {uid} not found")]
    SessionNotFound { uid: String },
    /// A write to a deleted session: its uid is never used again.
    #[error("session {uid} was deleted")]
    SessionDeleted { uid: String },
    /// A `list_sessions` token that we did not produce.
    #[error("invalid page token")]
    InvalidPageToken,
    /// Another host holds the session's live lease.
    #[error("session {session} is leased to host {owner} for {remaining_ms} ms more; retry after")]
    Leased {
        session: String,
        owner: String,
        remaining_ms: i64,
    },
    /// A request that can never succeed as given.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A stored value that breaks the schema's own rules.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Any other backend failure.
    #[error("backend: {0}")]
    Backend(BackendError),
}

impl StoreError {
    /// Whether the store itself is down rather than the request or the data
    /// wrong: a retry may succeed once it is back (clients get UNAVAILABLE).
    /// A commit with an unknown outcome counts: whatever it did, the caller
    /// re-reads before deciding again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Poisoned
                | StoreError::CommitFailed { .. }
                | StoreError::Closed
                | StoreError::Unavailable(_)
        )
    }

    /// Whether a retry of the same call may succeed: the store is down
    /// ([`StoreError::is_transient`]) or was busy for this call. Clients
    /// get UNAVAILABLE for both; only the first takes the store down.
    pub fn is_retryable(&self) -> bool {
        self.is_transient() || matches!(self, StoreError::Busy(_))
    }
}

/// Failures of [`crate::JournalStore::append`].
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// `expected_last_seq` is not the current head.
    #[error("seq conflict, head is {head}")]
    Conflict { head: i64 },
    /// The caller's fence is older than the session's current fence.
    #[error("stale fence, current is {current}")]
    Fenced { current: i64 },
    #[error(transparent)]
    Failed(#[from] StoreError),
}

/// Failures of [`crate::JournalStore::delete_session`].
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// The session moved past the head the deleter decided from.
    #[error("seq conflict, head is {head}")]
    Conflict { head: i64 },
    #[error(transparent)]
    Failed(#[from] StoreError),
}

/// Failures of [`crate::JournalStore::verify`].
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The stored chain does not verify: a record was altered, removed or
    /// relinked. Distinct from `Failed(Decode)`, which means unreadable.
    #[error("session {session}: hash chain tampered at seq {seq}: {cause}")]
    Tampered {
        session: String,
        seq: i64,
        cause: ChainError,
    },
    #[error(transparent)]
    Failed(#[from] StoreError),
}

impl VerifyError {
    /// What a chain check's failure at `session` means: tampering, or (an
    /// undecodable blob, an event without a canonical form) a read failure.
    pub fn of_chain(session: &str, cause: ChainError) -> Self {
        if cause.is_tamper() {
            VerifyError::Tampered {
                session: session.to_owned(),
                seq: cause.seq(),
                cause,
            }
        } else {
            VerifyError::Failed(StoreError::Decode {
                session: session.to_owned(),
                seq: cause.seq(),
                reason: cause.to_string(),
            })
        }
    }
}

/// Failures of the harness registry operations.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The name is permanently reserved (static or used by old sessions).
    #[error("harness name {name} is reserved")]
    NameReserved { name: String },
    /// The name is registered with a different spec; registrations are
    /// immutable apart from their state.
    #[error("harness {name} is registered with a different spec")]
    SpecConflict { name: String },
    #[error("harness {name} not found")]
    NotFound { name: String },
    /// The harness is retired and takes no new sessions.
    #[error("harness {name} is retired")]
    Retired { name: String },
    /// A static/reserved name that already has a registration row.
    #[error("harness name {name} collides with a registration")]
    NameCollision { name: String },
    #[error(transparent)]
    Failed(#[from] StoreError),
}
