//! The counter harness.

use std::sync::atomic::{AtomicU64, Ordering};

use agentsessions_proto::v1::{HarnessDescriptor, Resumability};

use super::descriptor;
use crate::harness::{Harness, HarnessError, Sink, StartInfo};

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
