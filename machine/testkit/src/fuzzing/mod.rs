//! The checking bodies of the cargo-fuzz targets in `fuzz/`.
//!
//! Each target is a function from raw bytes to nothing that panics when an
//! invariant fails. The fuzz crate calls them from `fuzz_target!`, and
//! `tests/fuzz_corpus.rs` calls the very same functions on every committed
//! corpus entry and minimized crash, so a plain stable `cargo test` replays
//! everything the fuzzer ever found. Structured inputs are decoded inside
//! the bodies with `arbitrary`, which keeps the corpus files exactly what
//! libFuzzer stores.
//!
//! Only built with the `fuzzing` feature; the daemon never enables it.

mod acts;
mod approval;
mod canonical;
mod draw;

/// Characters that stress the canonical writers; the property tests draw on
/// them too.
pub use draw::SPECIAL;
mod gojson;
mod journal;
mod stream;

pub use approval::approval_protocol;
pub use canonical::{canonical, oracle_event, oracle_record};
pub use gojson::input_hash;
pub use journal::journal_verify;
pub use stream::harness_stream;

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` binary and
/// the `fuzz/corpus/<name>/` directory) and its body.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// The checking body.
    pub run: fn(&[u8]),
}

/// Every target, in the order the docs list them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "journal_verify",
        run: journal_verify,
    },
    Target {
        name: "canonical",
        run: canonical,
    },
    Target {
        name: "approval_protocol",
        run: approval_protocol,
    },
    Target {
        name: "harness_stream",
        run: harness_stream,
    },
    Target {
        name: "input_hash",
        run: input_hash,
    },
];

/// The oracles have teeth: with one of the machine's planted bugs armed,
/// replaying the committed corpus fails in the targets that watch for it.
#[cfg(test)]
mod teeth {
    use std::panic::{self, AssertUnwindSafe};
    use std::path::Path;

    use super::TARGETS;
    use agentsessions_machine::faults::{self, Fault};

    /// True when some corpus entry of `target` fails with `fault` armed.
    fn caught(target: &str, fault: Fault) -> bool {
        let t = TARGETS.iter().find(|t| t.name == target).expect("a target");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus")
            .join(target);
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .expect("the corpus is committed")
            .map(|e| e.expect("a directory entry").path())
            .collect();
        paths.sort();
        paths.iter().any(|p| {
            let data = std::fs::read(p).expect("a corpus file");
            let _armed = faults::arm(fault);
            panic::catch_unwind(AssertUnwindSafe(|| (t.run)(&data))).is_err()
        })
    }

    #[test]
    fn a_denial_that_executes_is_caught() {
        assert!(caught("approval_protocol", Fault::DenialExecutes));
        assert!(caught("harness_stream", Fault::DenialExecutes));
    }

    #[test]
    fn execution_before_the_intent_is_durable_is_caught() {
        assert!(caught("approval_protocol", Fault::ExecuteBeforeDurable));
        assert!(caught("harness_stream", Fault::ExecuteBeforeDurable));
    }

    #[test]
    fn execution_on_replay_is_caught() {
        assert!(caught("harness_stream", Fault::ReexecuteOnReplay));
    }

    #[test]
    fn a_store_without_cas_is_caught() {
        assert!(caught("harness_stream", Fault::DropCas));
    }
}
