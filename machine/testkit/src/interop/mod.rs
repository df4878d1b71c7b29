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
