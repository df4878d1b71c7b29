//! Test support for the sans-io machine, kept out of the core crate so the
//! shipped binaries never carry it.
//!
//! - [`World`]: a deterministic in-memory world for driving the host in
//!   tests and in the simulator: [`MemStore`] (the shells' in-memory
//!   tables, held to the store contract), scripted [`harness`]es, an echo
//!   model and a deduplicating tool executor. No I/O, clock or threads.
//! - [`interop`]: journals written by the Go reference host.
//! - `fuzzing` (feature `fuzzing`): the checking bodies of the cargo-fuzz
//!   targets, which `machine/tests/fuzz_corpus.rs` also replays.

// Fuzz inputs and world inputs are moved once through a queue; boxing their
// large variants would add an allocation per input for nothing.
#![allow(clippy::large_enum_variant)]

pub mod harness;
pub mod interop;
pub mod store;
pub mod world;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

pub use store::MemStore;
pub use world::{Call, World};
