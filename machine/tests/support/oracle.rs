//! The reference path for canonical bytes: pbjson's generated proto3-JSON
//! serde for Event, into a `serde_json::Value`, then `serde_jcs`. Slow and
//! allocation-heavy, but independent of the fast writer in `canon`.

/// The same oracle the `canonical` fuzz target compares against (not every
/// test binary that includes `support` uses it).
#[allow(unused_imports)]
pub use agentsessions_testkit::fuzzing::{oracle_event as event, oracle_record as record};

/// Shows canonical bytes readably in assertion failures.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
