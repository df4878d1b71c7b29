//! The daemon: the machine driven by real effects.
//!
//! [`driver`] owns the sans-io host and performs its effects through ports
//! (journal store, harness client, runtimes, model, tools); the gRPC layer
//! turns RPCs into the host's requests.

pub mod app;
pub mod convert;
pub mod driver;
pub mod grpc;
pub mod harness_client;
pub mod memory;
pub mod observe;
pub mod runtime;
