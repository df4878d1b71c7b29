//! Records known to be durable.
//!
//! An effect that may only happen once a record is durable (a tool
//! execution, a stream frame carrying a record) holds [`Committed`]
//! records, and only the machine can build one, from an append or read
//! outcome: the wrong order cannot be expressed.

use agentsessions_proto::v1::LogRecord;

/// Records known to be durable: built only from an append or read outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed(LogRecord);

impl Committed {
    /// Wraps a record the store reported as committed. Crate-private so an
    /// effect cannot be given a record the machine has not seen land.
    pub(crate) fn new(record: LogRecord) -> Self {
        Self(record)
    }
    /// The committed record.
    pub fn record(&self) -> &LogRecord {
        &self.0
    }
    /// Unwraps the record.
    pub fn into_record(self) -> LogRecord {
        self.0
    }
}
