//! Why a daemon would not start: the one error every startup stage returns.
//!
//! It lives apart from `app.rs` so the stages it is raised in (the journal,
//! security, the drive loops, the console's TLS, the tool catalog) depend on
//! this file alone, not on the daemon's assembly, and no import runs in a
//! circle through it.

use std::net::SocketAddr;

/// Why a daemon would not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag combination or value is wrong.
    #[error("config: {0}")]
    Config(String),
    /// The journal would not open.
    #[error("journal: {0}")]
    Journal(String),
    /// A static harness name collides with a stored registration.
    #[error("harness registry: {0}")]
    Registry(String),
    /// A thread or runtime could not be started.
    #[error("thread: {0}")]
    Thread(String),
    /// A listener would not bind.
    #[error("listen {addr}: {reason}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}
