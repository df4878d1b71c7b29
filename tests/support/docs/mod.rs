//! The runner behind tests/docs_blocks.rs: [`blocks`] finds the shell
//! blocks and their markers, [`script`] reads commands and expected output
//! off them, [`ports`] moves their ports, [`run`] runs them. Invariant:
//! every shell block of README.md and docs/*.md is seen, and each either
//! runs or says why not.

pub(crate) mod blocks;
pub(crate) mod ports;
pub(crate) mod run;
pub(crate) mod script;

use std::io::Write as _;
use std::path::Path;

pub(crate) const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// Blocks run at once (the machine this must stay fast on has two cores).
pub(crate) const WORKERS: usize = 2;

/// README.md and docs/*.md, relative to the repository.
pub(crate) fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(Path::new(REPO).join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_owned());
    docs
}

/// Straight to the process's stderr: libtest captures `eprintln!` of a
/// passing test, and a skip must be seen.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
