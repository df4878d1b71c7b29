//! Memory-snapshot support for harnesses whose state lives only in RAM.
//!
//! A REQUIRES_MEMORY_SNAPSHOT harness cannot be rebuilt from the journal:
//! its runtime must capture the process memory and bring it back. A VM or
//! container runtime does that without the harness's help; the daemon's
//! in-process memory runtime instead asks the harness for its state through
//! [`MemoryHarness`]. The wire protocol is untouched — the harness never
//! learns that it was captured or restored, exactly as with a VM snapshot.

use super::Harness;

/// Saved bytes that do not describe a valid instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memory snapshot: {0}")]
pub struct SnapshotError(pub String);

/// A harness whose whole memory can be saved and loaded as bytes.
pub trait MemoryHarness: Harness {
    /// The instance's memory, in the form [`MemoryHarness::load`] accepts.
    fn save(&self) -> Vec<u8>;

    /// A new instance whose memory is `bytes`.
    fn load(bytes: &[u8]) -> Result<Self, SnapshotError>
    where
        Self: Sized;
}
