//! Deterministic simulation of the session machine.
//!
//! The explorer drives the pure machine ([`agentsessions_machine::host`])
//! in a world it controls completely ([`world`]): a journal that knows which
//! writes are pending and which are durable ([`store`]), scripted
//! harnesses, an echo model and a deduplicating executor. Scenario families
//! ([`scenario`]) run a client program ([`client`]) that is swept for every
//! crash cut, and race client operations across hosts that are swept for
//! every interleaving ([`explore`]). One oracle ([`oracle`]) judges every
//! run; it is written against a [`oracle::JournalView`] so that a seeded
//! madsim runner of the real shells can reuse it.
//!
//! Everything is a function of the scenario and a choice path (or a seed
//! that generates one), so any failure prints the command that reproduces
//! it and a shrunk trace. `docs/simulation.md` has the commands.

// Items and actions hold the machine's effects and requests by value, as
// the machine does; they are moved through a queue once each.
#![allow(clippy::large_enum_variant)]

pub mod client;
pub mod digest;
pub mod explore;
pub mod oracle;
pub mod run;
pub mod scenario;
pub mod scripts;
pub mod store;
pub mod sweep;
pub mod trace;
pub mod world;
