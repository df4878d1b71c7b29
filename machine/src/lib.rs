//! The sans-io core of agentsessions.
//!
//! Everything the host decides lives in this crate, as pure code: it performs
//! no I/O, reads no clock and draws no randomness. Time and ids arrive as
//! inputs; work to be done leaves as effects for the shells to perform.
//!
//! The modules form layers, bottom up (`docs/architecture.md`, "Layers";
//! `tests/layers.rs` keeps them):
//!
//! - [`canon`]: the canonical form of an Event and the record content hash
//!   (byte-identical with the Go reference host).
//! - [`inputhash`]: the model input hash in the Go-compatible encoding.
//! - [`vocab`]: what goes in and out of the machine (requests, effects,
//!   outcomes, rows, statuses, config).
//! - [`chain`]: verification of a hash-chained sequence of records.
//! - [`verify`]: a session's whole chain checked as it streams in, against
//!   the head its metadata claims (`agentctl verify`, the web console).
//! - [`journal`]: pure projections of a journal (executions, legacy prefix,
//!   approval gate, session status).
//! - [`error`]: the error catalog.
//! - [`invocation`]: one harness run (live, replay or resume).
//! - `ops`: one state machine per client request, and the core they share.
//! - [`host`]: the [`host::Host`] that routes inputs to operations.
//!
//! Test support (the in-memory world and store, Go-journal interop, the
//! fuzz bodies) lives in the `agentsessions-testkit` crate beside this one.

// Effects, outcomes and operation stages are moved once through a queue or
// a state slot; boxing their large variants would add an allocation per
// message for no measurable gain.
#![allow(clippy::large_enum_variant)]

/// True when the planted bug `$fault` is armed (see [`faults`]); a constant
/// `false` unless the crate is built for tests or with the `faults`
/// feature, so production code pays nothing for the check.
macro_rules! planted {
    ($fault:ident) => {{
        #[cfg(any(test, feature = "faults"))]
        let armed = $crate::faults::active($crate::faults::Fault::$fault);
        #[cfg(not(any(test, feature = "faults")))]
        let armed = false;
        armed
    }};
}
pub(crate) use planted;

pub mod canon;
pub mod chain;
pub mod error;
pub mod events;
#[cfg(any(test, feature = "faults"))]
pub mod faults;
pub mod host;
pub mod inputhash;
pub mod invocation;
pub mod journal;
mod ops;
pub mod verify;
pub mod vocab;
