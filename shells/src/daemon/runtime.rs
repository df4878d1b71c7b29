//! Runtime backends (the Runtime SPI).
//!
//! * **local** serves each built-in harness in process, over gRPC on a unix
//!   socket in a private directory, so a local turn takes exactly the same
//!   wire path as a remote one. Filesystem-only: a snapshot is the session's
//!   journal handle; restore and fork start a fresh incarnation that the
//!   host replays into.
//! * **remote** attaches to a harness already running at an address. It
//!   owns no compute: create, restore and fork just hand out the address.
//!
//! Neither can capture memory, so a REQUIRES_MEMORY_SNAPSHOT harness is
//! refused at admission (the CanPlace rule lives in the machine).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentsessions_machine::host::{Backend, RuntimeOp, RuntimeReply};
use agentsessions_proto::v1::SnapshotRef;
use tokio::sync::oneshot;

use super::driver::{PortFuture, RuntimePort};
use crate::harness::{HarnessService, builtin};

/// A built-in harness being served on a unix socket.
struct Served {
    address: String,
    _stop: oneshot::Sender<()>,
}

/// The local and remote backends.
pub struct Runtimes {
    dir: PathBuf,
    model: String,
    served: Mutex<BTreeMap<String, Arc<Served>>>,
}

impl Runtimes {
    /// Backends whose local harnesses listen on sockets under `dir`; `model`
    /// is the default model for harnesses that need one (`chat`).
    pub fn new(dir: PathBuf, model: String) -> Self {
        Self {
            dir,
            model,
            served: Mutex::new(BTreeMap::new()),
        }
    }

    /// The socket address of the built-in `kind`, starting it on first use.
    fn local_address(&self, kind: &str) -> Result<String, String> {
        let mut served = self.served.lock().expect("runtime lock");
        if let Some(s) = served.get(kind) {
            return Ok(s.address.clone());
        }
        let harness = builtin::build(kind, &self.model).map_err(|e| e.to_string())?;
        let path = self.dir.join(format!("{kind}.sock"));
        // Binding is synchronous work; do it on a std listener so this stays
        // callable from the drive loop without awaiting.
        let std_listener = std::os::unix::net::UnixListener::bind(&path)
            .or_else(|_| {
                let _ = std::fs::remove_file(&path);
                std::os::unix::net::UnixListener::bind(&path)
            })
            .map_err(|e| format!("serve {kind}: bind {}: {e}", path.display()))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| format!("serve {kind}: {e}"))?;
        let listener = tokio::net::UnixListener::from_std(std_listener)
            .map_err(|e| format!("serve {kind}: {e}"))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let service = HarnessService::new(harness);
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service.into_server())
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        let address = format!("unix://{}", path.display());
        served.insert(
            kind.to_owned(),
            Arc::new(Served {
                address: address.clone(),
                _stop: stop,
            }),
        );
        Ok(address)
    }

    fn address(&self, backend: &Backend) -> Result<String, String> {
        match backend {
            Backend::Local { kind } => self.local_address(kind),
            Backend::Remote { address } => Ok(address.clone()),
            Backend::Memory { kind } => Err(format!(
                "no memory-snapshot runtime is configured for {kind:?}"
            )),
        }
    }
}

impl RuntimePort for Runtimes {
    fn describe_address(&self, backend: &Backend) -> Result<String, String> {
        self.address(backend)
    }

    fn call(
        &self,
        backend: Backend,
        op: RuntimeOp,
    ) -> PortFuture<'_, Result<RuntimeReply, String>> {
        Box::pin(async move {
            match op {
                RuntimeOp::Create { .. } | RuntimeOp::Restore { .. } | RuntimeOp::Fork { .. } => {
                    Ok(RuntimeReply::Incarnation {
                        address: self.address(&backend)?,
                    })
                }
                // Nothing to capture: the journal is the state.
                RuntimeOp::Snapshot { session } => Ok(RuntimeReply::Snapshot(SnapshotRef {
                    local: session,
                    ..SnapshotRef::default()
                })),
                RuntimeOp::Stop { .. } => Ok(RuntimeReply::Done),
            }
        })
    }
}
