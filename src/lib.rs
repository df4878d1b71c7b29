//! Durable agent sessions. The binaries (`agentsessionsd`, `agentctl`,
//! `harnessnode`) live beside this file; the logic lives in the workspace
//! crates re-exported here.

pub use agentsessions_machine as machine;
pub use agentsessions_proto as proto;

pub mod cli;
