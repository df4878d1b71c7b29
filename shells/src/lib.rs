//! Shells: perform the machine's effects for real (journal, gRPC, harnesses, runtimes, model).

pub mod auth;
pub mod causes;
// The web console (axum pages over the drive loop); not in the simulation.
#[cfg(not(madsim))]
pub mod console;
pub mod daemon;
pub mod harness;
pub mod journal;
// The MCP client (rmcp, child processes, HTTP); not in the simulation.
#[cfg(not(madsim))]
pub mod mcp;
pub mod metrics;
pub mod model;
// Notification delivery (HTTP POSTs); not in the simulation.
#[cfg(not(madsim))]
pub mod notify;
pub mod telemetry;
pub mod tools;
