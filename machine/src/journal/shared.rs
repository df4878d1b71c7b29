//! A session's journal as the host holds it: its records from seq 1, shared
//! rather than copied, and their [`Summary`].
//!
//! Invariant: `records[i].seq == i + 1`, each record's prev_hash is the
//! content_hash of the one before (the links [`check_links`] checks), and
//! the summary has taken exactly these records. A record that would break
//! the chain is refused and leaves the journal broken: it keeps what it had,
//! takes nothing more, and says why in [`Journal::broken`].
//!
//! Cloning is O(1) (records are reference-counted in a persistent vector),
//! so a shell can keep one per session, extend it with what it appends and
//! hand a snapshot to every operation, and a turn can pass the history on
//! without copying it.
//!
//! [`check_links`]: crate::chain::check_links

use std::fmt;
use std::sync::Arc;

use agentsessions_proto::v1::{Event, LogRecord};
use imbl::Vector;

use super::summary::Summary;
use crate::chain::ChainError;
use crate::vocab::History;

/// See the module docs.
#[derive(Clone, Default)]
pub struct Journal {
    records: Vector<Arc<LogRecord>>,
    summary: Summary,
    broken: Option<ChainError>,
}

impl Journal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// The journal of `records` (seq 1 onward). Check [`Journal::broken`]:
    /// records that are not a chain stop at the first bad one.
    pub fn from_records(records: impl IntoIterator<Item = LogRecord>) -> Self {
        let mut j = Self::new();
        for r in records {
            if j.push(r).is_err() {
                break;
            }
        }
        debug_assert_eq!(j.len() as i64, j.head(), "seqs count from 1");
        j
    }

    /// Appends the next record, which must follow the head.
    pub fn push(&mut self, record: LogRecord) -> Result<(), ChainError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let expected = self.summary.head() + 1;
        assert!(expected >= 1, "the head is a seq or 0");
        let refused = if record.seq != expected {
            Some(ChainError::Gap {
                seq: record.seq,
                expected,
            })
        } else if expected > 1 && record.prev_hash != self.summary.head_hash() {
            // The first record's prev_hash is not checked, as check_links
            // does not: it has no record before it here.
            Some(ChainError::BrokenLink { seq: record.seq })
        } else {
            None
        };
        if let Some(e) = refused {
            self.broken = Some(e.clone());
            return Err(e);
        }
        let index = self.records.len();
        self.records.push_back(Arc::new(record));
        self.summary.push(&self.records, index);
        debug_assert_eq!(self.records.len() as i64, self.summary.head());
        assert!(self.last().is_some_and(|r| r.seq == expected));
        Ok(())
    }

    /// Appends records that follow the head, in order.
    pub fn extend(
        &mut self,
        records: impl IntoIterator<Item = LogRecord>,
    ) -> Result<(), ChainError> {
        let result = records.into_iter().try_for_each(|r| self.push(r));
        debug_assert!(
            result.is_ok() || self.broken.is_some(),
            "a refused record leaves the journal broken"
        );
        result
    }

    /// Why a record was refused, if one was.
    pub fn broken(&self) -> Option<&ChainError> {
        self.broken.as_ref()
    }

    /// The summary of the records held.
    pub fn summary(&self) -> &Summary {
        assert_eq!(
            self.summary.head(),
            self.records.len() as i64,
            "the summary has taken exactly these records"
        );
        &self.summary
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        assert_eq!(self.records.is_empty(), self.head() == 0);
        self.records.is_empty()
    }

    /// Seq of the last record (0: empty).
    pub fn head(&self) -> i64 {
        self.summary.head()
    }

    /// The last record.
    pub fn last(&self) -> Option<&LogRecord> {
        let last = self.records.last().map(|r| &**r);
        assert!(
            last.is_none_or(|r| r.seq == self.head()),
            "the last record is the head"
        );
        last
    }

    /// The record at `seq`.
    pub fn get(&self, seq: i64) -> Option<&LogRecord> {
        let i = usize::try_from(seq.checked_sub(1)?).ok()?;
        let found = self.records.get(i).map(|r| &**r);
        assert!(
            found.is_none_or(|r| r.seq == seq),
            "record i holds seq i + 1"
        );
        found
    }

    /// The records in seq order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &LogRecord> + '_ {
        self.records.iter().map(|r| &**r)
    }

    /// The records' events in seq order, shared with this journal.
    pub fn events(&self) -> impl Iterator<Item = &Event> + '_ {
        self.iter().filter_map(|r| r.event.as_ref())
    }

    /// The records' events as a harness's history, shared (O(1)).
    pub fn history(&self) -> History {
        History::from_shared(self.records.clone())
    }

    /// The records copied out, for projections that take a slice.
    pub fn to_vec(&self) -> Vec<LogRecord> {
        self.iter().cloned().collect()
    }

    /// Records 1..=`to_seq` copied out (`to_seq` 0 or less: all of them).
    pub fn to_vec_through(&self, to_seq: i64) -> Vec<LogRecord> {
        let n = usize::try_from(to_seq)
            .ok()
            .filter(|&n| n > 0)
            .map_or(self.len(), |n| n.min(self.len()));
        let through: Vec<LogRecord> = self.iter().take(n).cloned().collect();
        debug_assert!(
            through.last().is_none_or(|r| r.seq == through.len() as i64),
            "a prefix of the journal ends at its length"
        );
        through
    }
}

impl PartialEq for Journal {
    fn eq(&self, other: &Self) -> bool {
        self.broken == other.broken
            && self.len() == other.len()
            && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl fmt::Debug for Journal {
    // The records themselves would bury every trace that prints an outcome.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("head", &self.head())
            .field("head_hash", &self.summary.head_hash())
            .field("broken", &self.broken)
            .finish()
    }
}
