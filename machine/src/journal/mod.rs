//! Pure projections of a session's journal.
//!
//! Every function here reads a slice of committed records (`&[LogRecord]`,
//! ascending seq, the whole log unless stated) and derives what the host
//! needs to decide: which executions exist and what each recorded, where a
//! legacy (v0.1.2, id-less) prefix ends, the state of the approval gate, and
//! the session projections shown to clients. Nothing here mutates or reads
//! anything but its arguments, so recovery is "read the journal, project,
//! decide".

pub mod approval;
pub mod executions;
mod gates;
mod inputs;
pub mod legacy;
pub mod projection;
mod shared;
mod summary;
pub use summary::{tokens_in, usage_tokens};

pub use shared::Journal;
pub use summary::Summary;

mod records;
