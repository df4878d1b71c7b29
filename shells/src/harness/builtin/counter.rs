//! The counter harness.

use std::sync::atomic::{AtomicU64, Ordering};

use agentsessions_proto::v1::{HarnessDescriptor, Resumability};

use super::descriptor;
use crate::harness::{Harness, HarnessError, MemoryHarness, Sink, SnapshotError, StartInfo};

/// Counts its runs in RAM and outputs the new count in decimal.
///
/// The count lives only in process memory, so the harness can be resumed
/// only by a runtime that snapshots memory. It deliberately ignores
/// History: after a memory restore History is empty and must not reset the
/// count, and replaying a non-empty History would count turns twice.
#[derive(Debug, Default)]
pub struct Counter {
    count: AtomicU64,
}

impl Counter {
    /// The count so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

#[tonic::async_trait]
impl Harness for Counter {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(
            "counter",
            Vec::new(),
            Resumability::RequiresMemorySnapshot,
            false,
        )
    }

    async fn run(&self, _start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let n = self.count.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        sink.output(&n.to_string()).await
    }
}

/// The count is the counter's whole memory: 8 bytes, big-endian.
impl MemoryHarness for Counter {
    fn save(&self) -> Vec<u8> {
        self.count().to_be_bytes().to_vec()
    }

    fn load(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let count: [u8; 8] = bytes
            .try_into()
            .map_err(|_| SnapshotError(format!("counter wants 8 bytes, got {}", bytes.len())))?;
        Ok(Self {
            count: AtomicU64::new(u64::from_be_bytes(count)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_counter_continues_from_the_saved_count() {
        let c = Counter::default();
        c.count.store(41, Ordering::SeqCst);
        let back = Counter::load(&c.save()).unwrap();
        assert_eq!(back.count(), 41);
        assert!(Counter::load(&[1, 2, 3]).is_err());
        assert_eq!(
            Counter::load(&Counter::default().save()).unwrap().count(),
            0
        );
    }
}
