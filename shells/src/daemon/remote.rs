//! The remote backend of the Runtime SPI: attach to a harness already
//! running at an address. It owns no compute, so create, restore and fork
//! hand out the address, a snapshot is the journal itself and stop is a
//! no-op. Available in both builds; the madsim simulation routes every
//! harness through it to harness nodes on the simulated network.

use agentsessions_machine::vocab::{Backend, RuntimeOp, RuntimeReply};
use agentsessions_proto::v1::SnapshotRef;

use super::driver::{PortFuture, RuntimePort};

/// The reply of a journal-only backend whose incarnations live at
/// `address` (evaluated only for the ops that hand one out).
pub fn journal_only_reply(
    op: RuntimeOp,
    address: impl FnOnce() -> Result<String, String>,
) -> Result<RuntimeReply, String> {
    match op {
        RuntimeOp::Create { .. } | RuntimeOp::Restore { .. } | RuntimeOp::Fork { .. } => {
            Ok(RuntimeReply::Incarnation {
                address: address()?,
            })
        }
        // Nothing to capture: the journal is the state.
        RuntimeOp::Snapshot { session } => Ok(RuntimeReply::Snapshot(SnapshotRef {
            local: session,
            ..SnapshotRef::default()
        })),
        RuntimeOp::Stop { .. } => Ok(RuntimeReply::Done),
    }
}

/// Remote routes only; any other backend is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct RemoteRuntime;

fn address_of(backend: &Backend) -> Result<String, String> {
    match backend {
        Backend::Remote { address } => Ok(address.clone()),
        other => Err(format!("backend {other:?} is not served by this host")),
    }
}

impl RuntimePort for RemoteRuntime {
    fn describe_address(&self, backend: &Backend) -> Result<String, String> {
        address_of(backend)
    }

    fn call(
        &self,
        backend: Backend,
        op: RuntimeOp,
    ) -> PortFuture<'_, Result<RuntimeReply, String>> {
        Box::pin(async move { journal_only_reply(op, || address_of(&backend)) })
    }
}
