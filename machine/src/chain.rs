//! Hash-chain verification.
//!
//! A chain is valid when seqs run without gaps, each record's `prev_hash`
//! equals the previous record's `content_hash` (`""` at genesis), and each
//! stored `content_hash` equals the hash recomputed from
//! (prev_hash, seq, event). Verification stops at the first bad record and
//! names its seq.

use agentsessions_proto::v1::LogRecord;
use sha2::{Digest, Sha256};

use crate::canon::{self, hex_lower};

/// The first way a chain fails to verify.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ChainError {
    /// The record's seq is not the one that must follow.
    #[error("seq gap: got {seq}, expected {expected}")]
    Gap { seq: i64, expected: i64 },
    /// The record's prev_hash is not the previous record's content_hash.
    #[error("broken prev_hash link at seq {seq}")]
    BrokenLink { seq: i64 },
    /// The stored content_hash differs from the recomputed one.
    #[error("content_hash mismatch at seq {seq}")]
    ContentMismatch {
        seq: i64,
        stored: String,
        computed: String,
    },
    /// The record has no event, or its event has no canonical form.
    #[error("undecodable event at seq {seq}: {reason}")]
    Undecodable { seq: i64, reason: String },
}

impl ChainError {
    /// The seq of the record the error is about.
    pub fn seq(&self) -> i64 {
        match self {
            Self::Gap { seq, .. }
            | Self::BrokenLink { seq }
            | Self::ContentMismatch { seq, .. }
            | Self::Undecodable { seq, .. } => *seq,
        }
    }

    /// Whether the error shows the stored chain was altered (as opposed to
    /// an event this build cannot canonicalize).
    pub fn is_tamper(&self) -> bool {
        !matches!(self, Self::Undecodable { .. })
    }
}

/// Checks the links of records read back from a store, without rehashing:
/// seqs run on from `first_seq` with no gap, and each prev_hash is the
/// content_hash of the record before it. This is what the machine checks
/// on every journal it loads; [`verify`] also recomputes every hash.
pub fn check_links(records: &[LogRecord], first_seq: i64) -> Result<(), ChainError> {
    let mut prev: Option<&str> = None;
    for (i, r) in records.iter().enumerate() {
        let expected = first_seq + i as i64;
        if r.seq != expected {
            return Err(ChainError::Gap {
                seq: r.seq,
                expected,
            });
        }
        if prev.is_some_and(|p| p != r.prev_hash) {
            return Err(ChainError::BrokenLink { seq: r.seq });
        }
        prev = Some(&r.content_hash);
    }
    Ok(())
}

/// Verifies records one at a time, keeping only the expected next seq, the
/// expected prev_hash and a reusable canonicalization buffer.
#[derive(Debug, Clone)]
pub struct ChainVerifier {
    /// `None` once seq `i64::MAX` was accepted: nothing can follow it.
    next_seq: Option<i64>,
    prev_hash: String,
    buf: Vec<u8>,
}

impl Default for ChainVerifier {
    fn default() -> Self {
        Self::new()
    }
}

impl ChainVerifier {
    /// A verifier for a chain starting at genesis (seq 1, prev `""`).
    pub fn new() -> Self {
        Self::resume("", 1)
    }

    /// A verifier for a range whose first record is `first_seq` and links to
    /// `prev_hash` (the content_hash of record `first_seq - 1`).
    pub fn resume(prev_hash: &str, first_seq: i64) -> Self {
        Self {
            next_seq: Some(first_seq),
            prev_hash: prev_hash.to_owned(),
            buf: Vec::with_capacity(1024),
        }
    }

    /// The seq the next record must carry (`None` after `i64::MAX`).
    pub fn next_seq(&self) -> Option<i64> {
        self.next_seq
    }

    /// The content_hash the next record must link to.
    pub fn head_hash(&self) -> &str {
        &self.prev_hash
    }

    /// Checks one record against the chain so far and advances past it.
    /// On error the verifier is unchanged.
    pub fn push(&mut self, rec: &LogRecord) -> Result<(), ChainError> {
        let seq = rec.seq;
        match self.next_seq {
            Some(expected) if expected == seq => {}
            // After i64::MAX there is no valid next seq; report the overflow
            // position the way checked arithmetic would wrap it.
            expected => {
                return Err(ChainError::Gap {
                    seq,
                    expected: expected.unwrap_or(i64::MIN),
                });
            }
        }
        if rec.prev_hash != self.prev_hash {
            return Err(ChainError::BrokenLink { seq });
        }
        let Some(ev) = rec.event.as_ref() else {
            return Err(ChainError::Undecodable {
                seq,
                reason: "missing event".to_owned(),
            });
        };
        self.buf.clear();
        canon::canonical_record_into(&mut self.buf, &rec.prev_hash, seq, ev).map_err(|e| {
            ChainError::Undecodable {
                seq,
                reason: e.to_string(),
            }
        })?;
        let digest = Sha256::digest(&self.buf);
        if !hex_eq(&digest, &rec.content_hash) {
            return Err(ChainError::ContentMismatch {
                seq,
                stored: rec.content_hash.clone(),
                computed: hex_lower(&digest),
            });
        }
        self.prev_hash.clear();
        self.prev_hash.push_str(&rec.content_hash);
        // hex_eq accepted it, so the head is now a hash of our own form.
        debug_assert!(
            canon::is_sha256_hex(&self.prev_hash),
            "a verified hash is 64 lowercase hex digits"
        );
        self.next_seq = seq.checked_add(1);
        Ok(())
    }
}

/// Compares a digest with a stored hash string without allocating. The
/// stored form must be exactly lowercase hex, as the Go host compares text.
fn hex_eq(digest: &[u8], stored: &str) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let s = stored.as_bytes();
    let eq = s.len() == digest.len() * 2
        && digest.iter().enumerate().all(|(i, &b)| {
            s[2 * i] == HEX[(b >> 4) as usize] && s[2 * i + 1] == HEX[(b & 0xf) as usize]
        });
    debug_assert_eq!(
        eq,
        stored == hex_lower(digest),
        "equal to the hex text exactly"
    );
    eq
}

/// Verifies a whole chain: the first record is seq 1 with prev_hash `""`.
pub fn verify(records: &[LogRecord]) -> Result<(), ChainError> {
    verify_from("", 1, records)
}

/// Verifies a range of a chain whose first record must be `first_seq` and
/// link to `prev_hash`.
pub fn verify_from(
    prev_hash: &str,
    first_seq: i64,
    records: &[LogRecord],
) -> Result<(), ChainError> {
    let mut v = ChainVerifier::resume(prev_hash, first_seq);
    let verified = records.iter().try_for_each(|r| v.push(r));
    debug_assert!(
        verified.is_err()
            || i64::try_from(records.len())
                .ok()
                .and_then(|n| first_seq.checked_add(n))
                == v.next_seq(),
        "a verified range moves the head past its every record"
    );
    verified
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_eq_is_exact_lowercase() {
        let d = [0x00, 0xab, 0xff];
        assert!(hex_eq(&d, "00abff"));
        assert!(!hex_eq(&d, "00ABFF"));
        assert!(!hex_eq(&d, "00abf"));
        assert!(!hex_eq(&d, "00abff0"));
    }
}
