//! Fuzz target `journal_verify`; the body is `agentsessions_testkit::fuzzing::journal_verify`,
//! which `machine/tests/fuzz_corpus.rs` also replays over the corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentsessions_testkit::fuzzing::journal_verify(data));
