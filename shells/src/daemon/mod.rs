//! The daemon: the machine driven by real effects.
//!
//! [`driver`] owns the sans-io host and performs its effects through ports
//! (journal store, harness client, runtimes, model, tools); the gRPC layer
//! turns RPCs into the host's requests.

#[cfg(not(madsim))]
pub mod app;
#[cfg(not(madsim))]
mod boot_count;
#[cfg(not(madsim))]
pub mod config;
pub use agentsessions_journal::convert;
#[cfg(not(madsim))]
mod drive_loop;
pub mod driver;
pub mod grpc;
mod handle;
pub mod harness_client;
#[cfg(not(madsim))]
pub mod http;
pub mod inproc;
pub mod limits;
pub mod log_cache;
mod meter;
pub mod trace;
// The simulation runs its harnesses on nodes of their own over TCP, so the
// built-in runtimes are left out of its build.
#[cfg(not(madsim))]
pub mod memory;
// The console's TLS files, loaded for rustls; the console is not simulated.
#[cfg(not(madsim))]
pub mod console_tls;
// Kept under the daemon's paths for the binaries.
pub use crate::telemetry::observe;
mod ports;
pub mod replay_sink;
// OTLP export needs a tokio runtime of its own, which madsim does not give.
#[cfg(not(madsim))]
pub use crate::telemetry::otlp;
pub mod remote;
pub mod retention;
#[cfg(not(madsim))]
pub mod runtime;
// TLS is not modelled by madsim-tonic (docs/simulation.md); the simulated
// hosts authenticate callers but serve plaintext.
#[cfg(not(madsim))]
pub mod security;
// The daemon's start, in stages (app.rs runs them).
#[cfg(not(madsim))]
mod start;
pub mod start_error;
pub use agentsessions_journal::effects as store_effects;
mod stream_set;
#[cfg(not(madsim))]
pub mod tool_catalog;
