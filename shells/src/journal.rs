//! The journal stores the daemon performs its effects against: the contract,
//! its rules and the memory store come from `agentsessions-journal`; SQLite
//! (the embedded default, not available under madsim) from
//! `agentsessions-sqlite`. PostgreSQL is `agentsessions-pg`, chosen at start.

pub use agentsessions_journal::*;
#[cfg(not(madsim))]
pub use agentsessions_sqlite as sqlite;
