//! Replays every committed fuzz input on stable `cargo test`.
//!
//! `fuzz/corpus/<target>/` holds each target's seed corpus and
//! `fuzz/regressions/<target>/` every crash the fuzzer ever found,
//! minimized. Each file goes through the same checking body the fuzz
//! target runs (`agentsessions_testkit::fuzzing`), so a fixed bug stays
//! fixed without nightly, sanitizers or cargo-fuzz. All files are run and
//! the failures reported together, each by path.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use agentsessions_testkit::fuzzing::{TARGETS, Target};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir` in name order; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(name: &str) {
    let target: &Target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a known target");
    let corpus = files(&fuzz_dir().join("corpus").join(name));
    assert!(
        !corpus.is_empty(),
        "the {name} seed corpus is committed and non-empty"
    );
    let regressions = files(&fuzz_dir().join("regressions").join(name));
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&regressions) {
        let data = std::fs::read(path).expect("a readable corpus file");
        if panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} {name} inputs failed:\n{}",
        failed.len(),
        corpus.len() + regressions.len(),
        failed.join("\n")
    );
}

#[test]
fn every_target_has_a_test_here() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "journal_verify",
            "canonical",
            "approval_protocol",
            "harness_stream",
            "input_hash"
        ]
    );
}

#[test]
fn journal_verify() {
    replay("journal_verify");
}

#[test]
fn canonical() {
    replay("canonical");
}

#[test]
fn approval_protocol() {
    replay("approval_protocol");
}

#[test]
fn harness_stream() {
    replay("harness_stream");
}

#[test]
fn input_hash() {
    replay("input_hash");
}
