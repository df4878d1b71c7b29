//! Journals written by the Go reference host.
//!
//! The Go host (v0.1.2 and its successors) serialises `[]eventlog.Record`
//! with Go's `encoding/json`, using Go field names and Go string enums. This
//! module reads that form and converts it into `agentsessions.v1` records with
//! the Go host's own domain-to-proto rules, so stored content hashes verify
//! unchanged with [`agentsessions_machine::canon`] and [`agentsessions_machine::chain`].

mod go_record;
pub mod go_types;

pub use go_record::{
    GoEventError, GoRecordError, go_event_to_proto, go_record_to_proto, parse_go_records,
};
pub use go_types::{GoEvent, GoMap, GoRecord, GoTime, GoValue};

/// Where the Go v0.1.2 fixtures are: `$GO_FIXTURES_DIR`, else
/// `../shared/fixtures/go-v0.1.2` beside the repository.
pub fn fixture_dir() -> std::path::PathBuf {
    match std::env::var_os("GO_FIXTURES_DIR") {
        Some(dir) => dir.into(),
        None => concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/go-v0.1.2"
        )
        .into(),
    }
}
