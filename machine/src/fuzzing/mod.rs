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
mod gojson;
mod journal;
mod stream;

pub use approval::approval_protocol;
pub use canonical::canonical;
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
