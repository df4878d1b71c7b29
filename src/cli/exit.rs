//! Exit codes of `agentctl`.
//!
//! | code | meaning |
//! | ---: | --- |
//! | 0 | success |
//! | 1 | local failure: unreadable file, the embedded daemon would not start, no pending approval to decide |
//! | 2 | usage: unknown subcommand, bad or missing flag, bad flag combination |
//! | 3 | `verify`: the chain did not verify (gap, broken link, hash mismatch, truncation) |
//! | 10 + N | the call failed with gRPC status code N, 1..=16 (see [`for_status`]) |
//!
//! So NOT_FOUND (5) exits 15, FAILED_PRECONDITION (9) exits 19, ABORTED (10)
//! exits 20 and UNAVAILABLE (14, also "could not connect") exits 24. A
//! script can branch on the class of failure without parsing stderr.
//!
//! The reference CLI exits 1 for every failed subcommand, so 3 and 10 + N
//! are where the two differ; docs/quickstart.md has the table, one row per
//! code of [`all`] (a test checks it). A script that only tests for
//! non-zero behaves the same against both.

use std::fmt;

use agentsessions_shells::causes;
use agentsessions_shells::daemon::observe::code_name;

/// Success.
pub const OK: u8 = 0;
/// A local failure that is not a usage error and carries no gRPC status.
pub const FAILURE: u8 = 1;
/// A usage error (clap's own code for parse errors).
pub const USAGE: u8 = 2;
/// `verify` found the chain broken.
pub const VERIFY_FAILED: u8 = 3;
/// Offset added to a gRPC status code.
pub const GRPC_BASE: u8 = 10;

/// The exit code for a gRPC status code. An `Ok` status carried as an
/// error names no failure, so it is a local one (1), never a silent 10.
pub fn for_status(code: tonic::Code) -> u8 {
    match code {
        tonic::Code::Ok => FAILURE,
        code => GRPC_BASE + code as u8,
    }
}

/// Every exit code `agentctl` can end with: the local ones, then 10 + N for
/// each gRPC failure code N.
pub fn all() -> impl Iterator<Item = u8> {
    let grpc = (1..=16).map(|n| for_status(tonic::Code::from_i32(n)));
    [OK, FAILURE, USAGE, VERIFY_FAILED].into_iter().chain(grpc)
}

/// A failed RPC: which call, and the status the server (or the transport)
/// gave. Displayed as `<call>: <CODE>: <message>` rather than tonic's debug
/// dump of metadata and details.
#[derive(Debug)]
pub struct RpcError {
    /// The call that failed, e.g. `GetSession`.
    pub call: &'static str,
    /// The status it ended with.
    pub status: tonic::Status,
}

impl RpcError {
    /// Wraps a status from `call`.
    pub fn new(call: &'static str, status: tonic::Status) -> Self {
        Self { call, status }
    }

    /// The exit code this failure maps to.
    pub fn exit_code(&self) -> u8 {
        for_status(self.status.code())
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.call, code_name(self.status.code()))?;
        // A status the transport made keeps its cause in a source.
        let text = causes::status(&self.status);
        if !text.is_empty() {
            write!(f, ": {text}")?;
        }
        // A plaintext call to a TLS port fails with "transport error", an
        // h2 protocol error or "connection closed"; what the sniffed
        // connection saw is in the source chain or recorded.
        let hint = super::connect::mismatch_hint(std::error::Error::source(&self.status));
        if let Some(hint) = hint
            && !text.contains(hint)
        {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

/// A flag combination clap cannot express, reported like a parse error.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_map_to_distinct_exit_codes_above_the_local_ones() {
        let all = (1..=16).map(tonic::Code::from_i32).map(for_status);
        let codes: Vec<u8> = all.collect();
        assert_eq!(codes.first(), Some(&11));
        assert_eq!(codes.last(), Some(&26));
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(for_status(tonic::Code::NotFound), 15);
        assert!(codes.iter().all(|&c| c > VERIFY_FAILED));
    }

    #[test]
    fn an_ok_status_carried_as_an_error_is_a_local_failure() {
        assert_eq!(for_status(tonic::Code::Ok), FAILURE);
    }

    /// The `| N | … |` rows of docs/quickstart.md's exit-code table.
    fn documented_rows() -> Vec<(u8, String)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/quickstart.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let start = doc.find("| exit | meaning |").expect("the exit-code table");
        doc[start..]
            .lines()
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| {
                let cell = l.trim_start_matches('|').split('|').next()?;
                Some((cell.trim().parse().ok()?, l.to_owned()))
            })
            .collect()
    }

    #[test]
    fn the_quickstart_table_lists_every_exit_code_and_its_status_name() {
        let rows = documented_rows();
        let documented: Vec<u8> = rows.iter().map(|(code, _)| *code).collect();
        let produced: Vec<u8> = all().collect();
        assert_eq!(documented, produced, "one row per exit code, in order");
        for n in 1..=16 {
            let code = tonic::Code::from_i32(n);
            let (_, row) = rows
                .iter()
                .find(|(exit, _)| *exit == for_status(code))
                .unwrap();
            assert!(row.contains(code_name(code)), "{row}");
        }
    }

    #[test]
    fn rpc_errors_read_as_call_code_message() {
        let e = RpcError::new("GetSession", tonic::Status::not_found("no session x"));
        assert_eq!(e.to_string(), "GetSession: NOT_FOUND: no session x");
        assert_eq!(e.exit_code(), 15);
    }

    #[test]
    fn a_transport_status_reads_with_its_root_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let status = tonic::Status::from_error(Box::new(io));
        let e = RpcError::new("Replay", status);
        assert_eq!(e.to_string(), "Replay: UNKNOWN: connection reset");
    }
}
