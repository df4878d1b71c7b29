//! Shared test helpers: proptest strategies ([`arb`]) and the slow-path
//! oracle ([`oracle`]). Each test binary uses a different subset.
#![allow(dead_code)]

pub mod arb;
pub mod oracle;
