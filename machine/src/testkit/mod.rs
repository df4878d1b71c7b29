//! A deterministic in-memory world for driving the host in tests and in the
//! simulator: a journal store with the SQLite store's contract, scripted
//! harnesses, an echo model and a deduplicating tool executor. Pure code,
//! like the rest of the crate.

pub mod harness;
pub mod store;
pub mod world;

pub use store::MemStore;
pub use world::{Call, World};
