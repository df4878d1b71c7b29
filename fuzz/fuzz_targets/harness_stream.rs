//! Fuzz target `harness_stream`; the body is `agentsessions_testkit::fuzzing::harness_stream`,
//! which `machine/tests/fuzz_corpus.rs` also replays over the corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentsessions_testkit::fuzzing::harness_stream(data));
