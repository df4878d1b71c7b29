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
//! * **memory** ([`super::memory`]) keeps one instance per session and
//!   captures its memory on Snapshot, so REQUIRES_MEMORY_SNAPSHOT harnesses
//!   (the built-in `counter`) can be placed, suspended and forked.
//!
//! Local and remote cannot capture memory, so a REQUIRES_MEMORY_SNAPSHOT
//! harness routed to them is refused at admission (the CanPlace rule lives
//! in the machine).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentsessions_machine::host::{Backend, RuntimeOp, RuntimeReply};
use agentsessions_proto::v1::HarnessDescriptor;
use tokio::sync::oneshot;

use super::driver::{PortFuture, RuntimePort};
use super::memory::MemoryRuntime;
use crate::harness::{Harness, HarnessService, builtin};

/// A built-in harness being served on a unix socket.
struct Served {
    address: String,
    /// Built-ins have a static descriptor, so it is taken once at start.
    descriptor: HarnessDescriptor,
    _stop: oneshot::Sender<()>,
}

/// The local and remote backends.
pub struct Runtimes {
    dir: PathBuf,
    model: String,
    served: Mutex<BTreeMap<String, Arc<Served>>>,
    memory: MemoryRuntime,
}

impl Runtimes {
    /// Backends whose local harnesses listen on sockets under `dir`; `model`
    /// is the default model for harnesses that need one (`chat`).
    pub fn new(dir: PathBuf, model: String) -> Self {
        Self {
            memory: MemoryRuntime::new(dir.clone()),
            dir,
            model,
            served: Mutex::new(BTreeMap::new()),
        }
    }

    /// The socket address of the built-in `kind`, starting it on first use.
    /// `prefix` keeps the describe-only instances of memory kinds apart
    /// from instances that run turns.
    fn local_address(&self, prefix: &str, kind: &str) -> Result<String, String> {
        self.local(prefix, kind).map(|s| s.address.clone())
    }

    fn local(&self, prefix: &str, kind: &str) -> Result<Arc<Served>, String> {
        let key = format!("{prefix}{kind}");
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = served.get(&key) {
            return Ok(s.clone());
        }
        let harness = builtin::build(kind, &self.model).map_err(|e| e.to_string())?;
        let descriptor = harness.describe();
        let path = self.dir.join(format!("{key}.sock"));
        let stop = serve_unix(&path, HarnessService::new(harness).into_server())?;
        let s = Arc::new(Served {
            address: format!("unix://{}", path.display()),
            descriptor,
            _stop: stop,
        });
        served.insert(key, s.clone());
        Ok(s)
    }

    fn address(&self, backend: &Backend) -> Result<String, String> {
        match backend {
            Backend::Local { kind } => self.local_address("", kind),
            Backend::Remote { address } => Ok(address.clone()),
            // Describe needs no session: a fresh instance answers it.
            Backend::Memory { kind } => self.local_address("describe-", kind),
        }
    }
}

impl RuntimePort for Runtimes {
    fn describe_address(&self, backend: &Backend) -> Result<String, String> {
        self.address(backend)
    }

    fn describe_in_process(&self, backend: &Backend) -> Option<Result<HarnessDescriptor, String>> {
        let served = match backend {
            Backend::Local { kind } => self.local("", kind),
            Backend::Memory { kind } => self.local("describe-", kind),
            Backend::Remote { .. } => return None,
        };
        Some(served.map(|s| s.descriptor.clone()))
    }

    fn call(
        &self,
        backend: Backend,
        op: RuntimeOp,
    ) -> PortFuture<'_, Result<RuntimeReply, String>> {
        Box::pin(async move {
            if let Backend::Memory { kind } = &backend {
                let m = &self.memory;
                return match op {
                    RuntimeOp::Create { session } => m
                        .create(kind, &session)
                        .map(|address| RuntimeReply::Incarnation { address }),
                    RuntimeOp::Restore { snapshot } => m
                        .restore(kind, &snapshot)
                        .map(|address| RuntimeReply::Incarnation { address }),
                    RuntimeOp::Fork { snapshot, child } => m
                        .fork(kind, &snapshot, &child)
                        .map(|address| RuntimeReply::Incarnation { address }),
                    RuntimeOp::Snapshot { session } => {
                        m.snapshot(kind, &session).map(RuntimeReply::Snapshot)
                    }
                    RuntimeOp::Stop { session } => {
                        m.stop(&session);
                        Ok(RuntimeReply::Done)
                    }
                };
            }
            super::remote::journal_only_reply(op, || self.address(&backend))
        })
    }
}

/// Serves `server` on a new unix socket at `path` until the returned sender
/// is dropped or fired. Binding is synchronous so callers need not await.
pub(crate) fn serve_unix<H: Harness + ?Sized>(
    path: &Path,
    server: agentsessions_proto::grpc::harness_server::HarnessServer<HarnessService<H>>,
) -> Result<oneshot::Sender<()>, String> {
    let std_listener = std::os::unix::net::UnixListener::bind(path)
        .or_else(|_| {
            // A stale file from an earlier daemon in the same directory.
            let _ = std::fs::remove_file(path);
            std::os::unix::net::UnixListener::bind(path)
        })
        .map_err(|e| format!("bind {}: {e}", path.display()))?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| format!("bind {}: {e}", path.display()))?;
    let listener = tokio::net::UnixListener::from_std(std_listener)
        .map_err(|e| format!("bind {}: {e}", path.display()))?;
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(stop)
}
