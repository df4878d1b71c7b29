//! `agentctl verify`: the machine's streaming chain check
//! ([`agentsessions_machine::verify`]), shared with the web console so both
//! give the same verdict.

pub use agentsessions_machine::verify::{ChainCheck, VerifyError, check_all};
