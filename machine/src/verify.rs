//! A session's chain checked as it streams in: what `agentctl verify`
//! runs and the web console shows.
//!
//! The records come from Replay(1..last_seq), where `last_seq` is what the
//! session's metadata says. Each record goes through the machine's
//! [`ChainVerifier`] (seq continuity from 1, prev_hash links, recomputed
//! content_hash) as it arrives, so memory stays flat however long the log
//! is; [`ChainCheck::finish`] then catches a log that stops short of the
//! metadata's head (a truncated journal).

use std::fmt;

use crate::chain::{ChainError, ChainVerifier};
use agentsessions_proto::v1::LogRecord;

/// Why a chain failed to verify. Every variant names the seq it is about.
#[derive(Debug, Clone, PartialEq)]
pub enum VerifyError {
    /// A record out of sequence, a broken link, a hash that does not match
    /// the event, or an event that cannot be canonicalized.
    Chain(ChainError),
    /// The log ends before the session's `last_seq`.
    Truncated {
        /// The last seq present (0 when none).
        ends_at: i64,
        /// The head the metadata claims.
        last_seq: i64,
    },
    /// Records continue past the session's `last_seq`.
    Overrun {
        /// The first seq beyond the head.
        seq: i64,
        /// The head the metadata claims.
        last_seq: i64,
    },
}

impl VerifyError {
    /// The seq the failure is about.
    pub fn seq(&self) -> i64 {
        match self {
            Self::Chain(e) => e.seq(),
            Self::Truncated { ends_at, .. } => ends_at + 1,
            Self::Overrun { seq, .. } => *seq,
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Chain(ChainError::Gap { seq, expected }) => {
                write!(
                    f,
                    "sequence gap: seq {expected} is missing (next record is seq {seq})"
                )
            }
            Self::Chain(ChainError::BrokenLink { seq }) => write!(
                f,
                "prev_hash mismatch at seq {seq}: it does not link to the content_hash of seq {}",
                seq - 1
            ),
            Self::Chain(ChainError::ContentMismatch {
                seq,
                stored,
                computed,
            }) => write!(
                f,
                "content_hash mismatch at seq {seq}: stored {stored}, recomputed {computed}"
            ),
            Self::Chain(e @ ChainError::Undecodable { .. }) => write!(f, "{e}"),
            Self::Truncated { ends_at, last_seq } => write!(
                f,
                "truncated journal: the log ends at seq {ends_at} but the session's last_seq is {last_seq}"
            ),
            Self::Overrun { seq, last_seq } => write!(
                f,
                "record seq {seq} is past the session's last_seq {last_seq}"
            ),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Streaming verification of one session's chain from genesis.
#[derive(Debug)]
pub struct ChainCheck {
    chain: ChainVerifier,
    last_seq: i64,
    count: u64,
}

impl ChainCheck {
    /// A check of a chain whose metadata says it ends at `last_seq`.
    pub fn new(last_seq: i64) -> Self {
        Self {
            chain: ChainVerifier::new(),
            last_seq,
            count: 0,
        }
    }

    /// Checks the next record.
    pub fn push(&mut self, record: &LogRecord) -> Result<(), VerifyError> {
        self.chain.push(record).map_err(VerifyError::Chain)?;
        if record.seq > self.last_seq {
            return Err(VerifyError::Overrun {
                seq: record.seq,
                last_seq: self.last_seq,
            });
        }
        self.count += 1;
        // The chain starts at seq 1 and takes each seq once, in order.
        debug_assert!(
            record.seq >= 1 && self.count <= record.seq as u64,
            "one count per verified seq"
        );
        Ok(())
    }

    /// Ends the check: the chain must have reached `last_seq`. Returns the
    /// number of records verified.
    pub fn finish(self) -> Result<u64, VerifyError> {
        let ends_at = self.chain.next_seq().map_or(i64::MAX, |n| n - 1);
        debug_assert!(ends_at >= 0, "the chain starts at seq 1");
        if ends_at != self.last_seq {
            return Err(VerifyError::Truncated {
                ends_at,
                last_seq: self.last_seq,
            });
        }
        debug_assert!(self.count <= ends_at as u64, "at most one count per seq");
        Ok(self.count)
    }
}

/// Verifies a whole slice (for tests and small logs).
pub fn check_all(records: &[LogRecord], last_seq: i64) -> Result<u64, VerifyError> {
    let mut check = ChainCheck::new(last_seq);
    records.iter().try_for_each(|r| check.push(r))?;
    let count = check.finish()?;
    debug_assert_eq!(count, records.len() as u64, "every record was verified");
    Ok(count)
}

#[cfg(test)]
mod tests {
    use crate::canon::content_hash;
    use crate::events::{input, text_message};

    use super::*;

    fn chain(n: i64) -> Vec<LogRecord> {
        let mut prev = String::new();
        (1..=n)
            .map(|seq| {
                let ev = input("e1", text_message("user", &format!("m{seq}")));
                let hash = content_hash(&prev, seq, &ev).unwrap();
                LogRecord {
                    seq,
                    prev_hash: std::mem::replace(&mut prev, hash.clone()),
                    content_hash: hash,
                    fence: 1,
                    event: Some(ev),
                }
            })
            .collect()
    }

    #[test]
    fn an_intact_chain_verifies_and_counts_its_records() {
        assert_eq!(check_all(&chain(4), 4), Ok(4));
        assert_eq!(check_all(&[], 0), Ok(0));
    }

    #[test]
    fn a_missing_record_is_a_gap_naming_the_missing_seq() {
        let mut c = chain(4);
        c.remove(1);
        let e = check_all(&c, 4).unwrap_err();
        assert!(matches!(
            e,
            VerifyError::Chain(ChainError::Gap {
                seq: 3,
                expected: 2
            })
        ));
        assert!(e.to_string().contains("seq 2 is missing"), "{e}");
    }

    #[test]
    fn an_edited_hash_is_a_mismatch_at_its_seq() {
        let mut c = chain(3);
        c[1].content_hash = "0".repeat(64);
        let e = check_all(&c, 3).unwrap_err();
        assert_eq!(e.seq(), 2);
        assert!(
            e.to_string().starts_with("content_hash mismatch at seq 2"),
            "{e}"
        );
        let mut c = chain(3);
        c[2].prev_hash = "0".repeat(64);
        let e = check_all(&c, 3).unwrap_err();
        assert!(
            e.to_string().starts_with("prev_hash mismatch at seq 3"),
            "{e}"
        );
    }

    #[test]
    fn a_log_short_of_last_seq_is_truncated_and_one_past_it_overruns() {
        let e = check_all(&chain(3), 5).unwrap_err();
        assert_eq!(
            e,
            VerifyError::Truncated {
                ends_at: 3,
                last_seq: 5
            }
        );
        assert_eq!(e.seq(), 4);
        let e = check_all(&chain(3), 2).unwrap_err();
        assert_eq!(
            e,
            VerifyError::Overrun {
                seq: 3,
                last_seq: 2
            }
        );
    }
}
