//! Outcomes: the shells' answers to effects, and harness input.

use agentsessions_proto::v1::{
    ApprovalRef, Event, HarnessDescriptor, LogRecord, Message, SnapshotRef, ToolResult, Usage,
};

use super::fault::{AppendError, StoreFault};
use super::rows::{HarnessRow, SessionRow};
use crate::journal::Journal;

/// Why a delete did not commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteRefusal {
    /// The head was not `expected_last_seq`.
    Conflict {
        /// The head seen by the store.
        head: i64,
    },
    /// No such session (never created, or already deleted).
    NotFound,
    /// Storage failure.
    Failed(StoreFault),
}

/// Why a harness call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessFailure {
    /// The harness could not be reached (gRPC UNAVAILABLE or refused dial).
    Unavailable(String),
    /// No answer within the bound.
    Timeout,
    /// Anything else, with its gRPC code number.
    Other {
        /// gRPC code number.
        code: i32,
        /// Detail.
        message: String,
    },
}

/// Why a registry write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryRefusal {
    /// The name is reserved for a static harness.
    Reserved,
    /// A row with a different digest exists.
    SpecConflict,
    /// No such row.
    NotFound,
    /// The harness row is retired.
    Retired,
    /// A static name has a registration row (or a reservation collides).
    NameCollision,
}

/// Answer to a `RegisterHarnessRow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// Inserted.
    Created,
    /// Same digest, already active.
    Unchanged,
    /// Same digest, was retired, now active.
    Reactivated,
}

/// A model completion.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelReply {
    /// The assistant message (text, reasoning and tool-call parts).
    pub message: Option<Message>,
    /// Provider usage.
    pub usage: Option<Usage>,
}

/// Why a model call failed, as the shell that made it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFailure {
    /// The provider could not be reached or was overloaded (connect,
    /// timeout, 429, 5xx): the turn ends UNAVAILABLE so its client retries,
    /// where any other failure is INTERNAL.
    pub unavailable: bool,
    /// What went wrong; journaled, so never message content or keys.
    pub message: String,
}

impl ModelFailure {
    /// A failure worth retrying later.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            unavailable: true,
            message: message.into(),
        }
    }

    /// A failure a retry would repeat.
    pub fn other(message: impl Into<String>) -> Self {
        Self {
            unavailable: false,
            message: message.into(),
        }
    }
}

/// The answer to an effect, keyed by its [`EffectId`](super::EffectId).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// For an [`Effect::Store`](super::Effect::Store).
    Store(StoreOutcome),
    /// For an [`Effect::Harness`](super::Effect::Harness) with an id.
    Harness(HarnessOutcome),
    /// For an [`Effect::Runtime`](super::Effect::Runtime): an address
    /// (Create, Restore, Fork), a snapshot (Snapshot) or nothing (Stop).
    Runtime(Result<RuntimeReply, String>),
    /// For an [`Effect::Model`](super::Effect::Model).
    Model(Result<ModelReply, ModelFailure>),
    /// For an [`Effect::Tool`](super::Effect::Tool).
    Tool(Result<ToolResult, ToolFailure>),
}

/// Why a tool execution gave no receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolFailure {
    /// The executor failed (text safe to journal).
    Error(String),
    /// An earlier run under the call's idempotency key started and never
    /// finished (its host stopped midway), so its effect may have happened;
    /// nothing ran now. The machine decides whether to run it again.
    Unfinished,
}

impl ToolFailure {
    /// The failure as text a receipt or error can carry.
    pub fn message(&self) -> String {
        match self {
            Self::Error(e) => e.clone(),
            Self::Unfinished => "an earlier run of this call never finished".to_owned(),
        }
    }
}

/// The store's answer to a [`StoreEffect`](super::StoreEffect).
#[derive(Debug, Clone, PartialEq)]
pub enum StoreOutcome {
    /// For `Append`: the committed records, in order.
    Appended(Result<Vec<LogRecord>, AppendError>),
    /// For `MintFence`.
    Fence(Result<i64, StoreFault>),
    /// For `HoldLease`: whether the lease is still the caller's.
    LeaseHeld(Result<bool, StoreFault>),
    /// For `ReadLog`.
    Log(Result<Vec<LogRecord>, StoreFault>),
    /// For `ReadJournal`.
    Journal(Result<Journal, StoreFault>),
    /// For `GetSession`: `None` when the session is unknown.
    Session(Result<Option<SessionRow>, StoreFault>),
    /// For `PutSession`.
    Put(Result<(), PutError>),
    /// For `ListSessions`: the rows, and whether more follow.
    SessionPage(Result<(Vec<SessionRow>, bool), StoreFault>),
    /// For `GetHarnessRow`.
    HarnessRow(Result<Option<HarnessRow>, StoreFault>),
    /// For `ListHarnessRows`.
    HarnessRows(Result<Vec<HarnessRow>, StoreFault>),
    /// For `RegisterHarnessRow`: the stored row and what happened.
    Registered(Result<(HarnessRow, RegisterOutcome), PutError>),
    /// For `RetireHarnessRow`: the row after retiring.
    Retired(Result<HarnessRow, PutError>),
    /// For `ReserveHarnessNames`.
    Reserved(Result<(), PutError>),
    /// For `DeleteSession`: how many records went.
    Deleted(Result<i64, DeleteRefusal>),
    /// For `StaleSessions`: stale uids, and where the next step starts
    /// ("" at the end of the table).
    Stale(Result<(Vec<String>, String), StoreFault>),
}

/// The harness client's answer to a Describe or a Dial.
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessOutcome {
    /// For `Describe`.
    Described(Result<HarnessDescriptor, HarnessFailure>),
    /// For `Dial`.
    Dialed(Result<(), HarnessFailure>),
}

impl From<StoreOutcome> for Outcome {
    fn from(o: StoreOutcome) -> Self {
        Self::Store(o)
    }
}

impl From<HarnessOutcome> for Outcome {
    fn from(o: HarnessOutcome) -> Self {
        Self::Harness(o)
    }
}

/// Why a store write with a precondition was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutError {
    /// The registry refused it.
    Refused(RegistryRefusal),
    /// Storage failure.
    Failed(StoreFault),
}

/// What a Runtime SPI call returned.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeReply {
    /// A harness address to dial.
    Incarnation {
        /// `unix://…` or `host:port`.
        address: String,
    },
    /// A snapshot handle.
    Snapshot(SnapshotRef),
    /// Nothing to report.
    Done,
}

/// Something the harness sent, or the end of its stream.
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessInput {
    /// An event frame.
    Event(Event),
    /// The harness closed its send side cleanly.
    Closed,
    /// The stream failed (including a failed send).
    Failed(String),
    /// The harness sent no event within the dial's first-event bound.
    Unavailable(String),
}

/// A park reference, re-exported for callers matching on parks.
pub type ParkRef = ApprovalRef;
