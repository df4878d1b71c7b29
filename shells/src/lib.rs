//! Shells: perform the machine's effects for real (journal, gRPC, harnesses, runtimes, model).

pub mod auth;
pub mod daemon;
pub mod harness;
pub mod journal;
pub mod metrics;
pub mod model;
pub mod tools;
