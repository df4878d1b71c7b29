//! Serving a [`HarnessService`] on a TCP address or a unix socket.
//!
//! A unix socket is guarded by an advisory lock on `<path>.lock`, held for
//! the listener's lifetime. Holding it proves no live instance serves the
//! path, which is what makes it safe to delete a socket file a crashed
//! instance left behind. The lock file itself must be a plain file of ours:
//! a symlink or an extra hard link would let another user's file stand in
//! for it, and a lock on that proves nothing about this socket.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use super::{Harness, HarnessService};

/// Why a harness could not be bound or served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is in none of the accepted forms.
    #[error("bad listen address {addr:?}: {why}")]
    Address {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The socket could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// The unix socket's lock file is unusable or held.
    #[error("lock {}: {why}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why it was refused.
        why: String,
    },
    /// The socket path holds something other than a socket.
    #[error("{} exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    /// The gRPC server failed.
    #[error("serve: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The TLS settings were refused.
    #[error("tls: {0}")]
    Tls(String),
}

/// Where to listen: `host:port` (`:port` means every interface), or a unix
/// socket as `unix:///abs/path`, `unix://path` or `unix:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP `host:port`.
    Tcp(String),
    /// A unix socket path.
    Unix(PathBuf),
}

impl FromStr for ListenAddr {
    type Err = ServeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| ServeError::Address {
            addr: s.to_owned(),
            why,
        };
        if let Some(rest) = s.strip_prefix("unix:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(bad("empty socket path"));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(bad("want host:port or unix:path"));
        };
        if port.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad("bad port"));
        }
        if host.is_empty() {
            return Ok(Self::Tcp(format!("0.0.0.0:{port}")));
        }
        Ok(Self::Tcp(s.to_owned()))
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(addr) => f.write_str(addr),
            // An absolute path renders as unix:///abs, which every gRPC
            // client parses; a relative one as unix:rel.
            Self::Unix(path) if path.is_absolute() => write!(f, "unix://{}", path.display()),
            Self::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A bound listener, ready to serve.
#[derive(Debug)]
pub struct Listener {
    inner: Inner,
    local: ListenAddr,
    tls: Option<tonic::transport::ServerTlsConfig>,
}

#[derive(Debug)]
enum Inner {
    Tcp(TcpListener),
    Unix {
        listener: UnixListener,
        // Dropped after the listener: removes the socket, then unlocks.
        _guard: SocketGuard,
    },
}

impl Listener {
    /// Serves TLS with `config` (a certificate, and optionally the CA
    /// client certificates must be signed by).
    pub fn with_tls(mut self, config: tonic::transport::ServerTlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Binds `addr`. A unix socket is locked first; a stale socket file is
    /// then replaced.
    pub async fn bind(addr: &ListenAddr) -> Result<Self, ServeError> {
        match addr {
            ListenAddr::Tcp(a) => {
                let listener = TcpListener::bind(a)
                    .await
                    .map_err(|source| ServeError::Bind {
                        addr: a.clone(),
                        source,
                    })?;
                let local = listener.local_addr().map_err(|source| ServeError::Bind {
                    addr: a.clone(),
                    source,
                })?;
                Ok(Self {
                    inner: Inner::Tcp(listener),
                    local: ListenAddr::Tcp(local.to_string()),
                    tls: None,
                })
            }
            ListenAddr::Unix(path) => {
                let guard = SocketGuard::acquire(path)?;
                let listener = UnixListener::bind(path).map_err(|source| ServeError::Bind {
                    addr: addr.to_string(),
                    source,
                })?;
                Ok(Self {
                    inner: Inner::Unix {
                        listener,
                        _guard: guard,
                    },
                    local: addr.clone(),
                    tls: None,
                })
            }
        }
    }

    /// The bound address (with the real port when `:0` was asked for).
    pub fn local_addr(&self) -> &ListenAddr {
        &self.local
    }

    /// Serves `service` until `shutdown` resolves, then drains the open
    /// streams. A unix socket file is removed on return.
    pub async fn serve<H, F>(
        self,
        service: HarnessService<H>,
        shutdown: F,
    ) -> Result<(), ServeError>
    where
        H: Harness + ?Sized,
        F: Future<Output = ()> + Send,
    {
        let mut builder = Server::builder();
        if let Some(tls) = self.tls {
            builder = builder
                .tls_config(tls)
                .map_err(|e| ServeError::Tls(e.to_string()))?;
        }
        let router = builder.add_service(service.into_server());
        match self.inner {
            Inner::Tcp(listener) => {
                router
                    .serve_with_incoming_shutdown(TcpIncoming::from(listener), shutdown)
                    .await?
            }
            Inner::Unix { listener, _guard } => {
                let incoming = UnixListenerStream::new(listener);
                router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await?;
                drop(_guard);
            }
        }
        Ok(())
    }
}

/// Holds `<socket>.lock` and removes the socket when dropped.
#[derive(Debug)]
struct SocketGuard {
    socket: PathBuf,
    // Closing it releases the lock, so it must outlive the socket removal
    // (fields drop after `Drop::drop`).
    _lock: File,
}

impl SocketGuard {
    fn acquire(socket: &Path) -> Result<Self, ServeError> {
        let mut lock_path = OsString::from(socket.as_os_str());
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        let refuse = |why: &str| ServeError::Lock {
            path: lock_path.clone(),
            why: why.to_owned(),
        };
        // O_NOFOLLOW makes opening a symlink fail, so a link planted after
        // any check still cannot redirect the lock.
        let fd = rustix::fs::open(
            &lock_path,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            if e == rustix::io::Errno::LOOP {
                refuse("is a symlink")
            } else {
                refuse(&e.to_string())
            }
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| refuse(&e.to_string()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refuse("not a regular file"));
        }
        if st.st_nlink != 1 {
            return Err(refuse("has other hard links"));
        }
        if st.st_uid != rustix::process::getuid().as_raw() {
            return Err(refuse("owned by another user"));
        }
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            if e == rustix::io::Errno::WOULDBLOCK {
                refuse("held by another instance")
            } else {
                refuse(&e.to_string())
            }
        })?;
        // With the lock held no live instance serves this path, so a socket
        // there is a crashed one's. Anything else is not ours to delete.
        match std::fs::symlink_metadata(socket) {
            Ok(meta) if meta.file_type().is_socket() => {
                std::fs::remove_file(socket).map_err(|source| ServeError::Bind {
                    addr: socket.display().to_string(),
                    source,
                })?;
            }
            Ok(_) => return Err(ServeError::NotASocket(socket.to_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ServeError::Bind {
                    addr: socket.display().to_string(),
                    source,
                });
            }
        }
        Ok(Self {
            socket: socket.to_owned(),
            _lock: File::from(fd),
        })
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        // The lock is still held here, so the file is ours.
        let _ = std::fs::remove_file(&self.socket);
    }
}
