//! Reusable pieces of the binaries: for `agentctl`, exit codes, the human
//! renderings of sessions and records, chain verification over a record
//! stream, the approval requests, proto3-JSON printing and the progress
//! bar; for `agentsessionsd`, its configuration file. The binaries wire
//! them to clap and gRPC.

pub mod approve;
pub mod args;
pub mod connect;
pub mod daemon_config;
pub mod exit;
pub mod progress;
pub mod redact;
pub mod render;
pub mod verify;

/// One message as proto3-JSON on a single line (proto field names, enum
/// names, unpopulated fields omitted, int64 as strings).
pub fn json_line<T: serde::Serialize>(message: &T) -> String {
    // The pbjson impls cannot fail on a well-formed message; should one ever
    // refuse, an empty object keeps the output line-oriented and parseable.
    serde_json::to_string(message).unwrap_or_else(|_| "{}".to_owned())
}
