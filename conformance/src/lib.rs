//! A replay-conformance suite, runnable against any Sessions endpoint.
//!
//! The suite certifies an implementation of the `agentsessions.v1`
//! contract over the wire only. It brings its own peers, so it can steer
//! and observe what the API cannot: a fake OpenAI-compatible model
//! ([`model`]) that counts requests and never answers the same way twice,
//! and harness servers over `Harness.Connect` ([`harnesses`], [`rawpark`],
//! and Python/grpcio ones in [`python`]) that record what they were started
//! with and can hold a turn while the host is killed.
//!
//! Each check ([`checks`]) runs in a fresh [`env::Env`]: new peers, a new
//! journal, and a host started by a [`host::Launcher`], either our daemon
//! in process or any host as a child process from a command template
//! ([`host::CommandHost`]). A check's replay outputs are printed by
//! [`render`] with random ids aliased, for snapshots.
//!
//! - `cargo test -p agentsessions-conformance` runs every check against our
//!   daemon in process, one test per check, with insta snapshots.
//! - `conformance --host-cmd "<template>"` runs them against any host.

pub mod checks;
pub mod cli;
pub mod client;
pub mod env;
pub mod harnesses;
pub mod host;
pub mod model;
pub mod peers;
pub mod python;
pub mod rawpark;
pub mod render;
