//! The machine crate is built in layers, and a module may only use the
//! layers below it (`docs/architecture.md`, "Layers"). This test reads every
//! `crate::…` and `super::…` path in `machine/src` and fails on any that
//! points sideways or up, so an import circle cannot creep back in.
//!
//! Reading paths is enough: a `use` names its target, and the crate spells
//! inline references the same way. `#[cfg(test)]` tails of a file are
//! skipped (a unit test may reach anything).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Units from the bottom up. A file belongs to the longest unit that
/// prefixes its module path; a unit may use only units of a lower rank.
/// Files of one unit may use each other.
const LAYERS: &[(&str, u32)] = &[
    // Leaves: the canonical form, event helpers, the input hash, planted
    // bugs. They import nothing from the crate.
    ("canon", 0),
    ("events", 0),
    ("inputhash", 0),
    ("faults", 0),
    // The vocabulary (requests, effects, outcomes, statuses, config) and
    // chain verification.
    ("vocab", 1),
    ("chain", 1),
    ("error", 2),
    // A whole chain checked against the head its metadata claims.
    ("verify", 2),
    // Journal projections, bottom up.
    ("journal::records", 3),
    ("journal::legacy", 4),
    ("journal::inputs", 4),
    ("journal::approval", 5),
    ("journal::executions", 6),
    ("journal::projection", 6),
    ("journal", 7),
    // Outcomes carry the loaded journal (records and summary), so they sit
    // above the projections; the store faults they carry are a leaf of
    // the vocabulary (`vocab::fault`), which the error catalog uses.
    ("vocab::outcome", 8),
    ("invocation", 9),
    // What every operation runs on (the stages), then the operations, one
    // per request, then the dispatch over them.
    ("ops::stages::leases", 9),
    ("ops::stages::flow", 9),
    ("ops::stages::first_event", 9),
    ("ops::stages::expiry", 9),
    ("ops::stages::cx", 10),
    ("ops::stages::render", 10),
    ("ops::stages::present", 11),
    ("ops::stages", 12),
    ("ops::requests::registry::rules", 12),
    ("ops::requests", 13),
    ("ops", 14),
    ("host", 15),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `ops/requests/exec.rs` → `["ops", "exec"]`; `ops/mod.rs` → `["ops"]`.
fn module_path(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn unit_of(path: &[String]) -> Option<(&'static str, u32)> {
    let joined = path.join("::");
    LAYERS
        .iter()
        .filter(|(unit, _)| joined == *unit || joined.starts_with(&format!("{unit}::")))
        .max_by_key(|(unit, _)| unit.len())
        .copied()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file before its `#[cfg(test)]` tail, comments dropped.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let code = line.split(" //").next().unwrap_or(line);
        lines.push((n + 1, code.to_owned()));
    }
    lines
}

/// Every path a line names through `crate::` or `super::`, resolved against
/// `here` (the file's module path), as module segments.
fn referenced(here: &[String], line: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(found_at) = line[from..].find(start) {
            let at = from + found_at;
            let before = line[..at].chars().last();
            let tail = &line[at..];
            from = at + start.len();
            // `$crate::` (a macro), `foo_super::` and the second `super` of
            // `super::super::` do not start a path here.
            if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | ':')) {
                continue;
            }
            let mut base: Vec<String> = if start == "crate::" {
                Vec::new()
            } else {
                let mut b = here.to_vec();
                b.pop();
                b
            };
            let mut segments = tail.split("::").skip(1);
            for seg in segments.by_ref() {
                if seg == "super" {
                    base.pop();
                    continue;
                }
                let name: String = seg
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // A lower-case segment is a module; stop at the first item
                // (or brace group, which names items of `base`).
                if !name.is_empty() && name.chars().all(|c| c.is_lowercase() || c == '_') {
                    base.push(name);
                    if seg.len() == base.last().map_or(0, String::len) {
                        continue;
                    }
                }
                break;
            }
            found.push(base);
        }
    }
    found
}

/// Every sideways or upward reference in `machine/src`, as messages.
fn violations() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    assert!(files.len() > 30, "expected the whole machine crate");
    let mut out = Vec::new();
    let mut units_seen = BTreeSet::new();
    for file in &files {
        let here = module_path(file);
        let Some((unit, rank)) = unit_of(&here) else {
            // lib.rs: the crate root declares the layers.
            assert!(here.is_empty(), "{} belongs to no layer", file.display());
            continue;
        };
        units_seen.insert(unit);
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in code_lines(&text) {
            for target in referenced(&here, &line) {
                let Some((to, to_rank)) = unit_of(&target) else {
                    continue; // the crate root (a macro such as `planted!`)
                };
                if to != unit && to_rank >= rank {
                    out.push(format!(
                        "{}:{n}: `{unit}` (layer {rank}) uses `{to}` (layer {to_rank})",
                        file.display()
                    ));
                }
            }
        }
    }
    for (unit, _) in LAYERS {
        assert!(
            units_seen.contains(unit),
            "layer table names a missing unit `{unit}`"
        );
    }
    out
}

#[test]
fn no_module_uses_a_layer_above_or_beside_it() {
    let found = violations();
    assert!(found.is_empty(), "layer violations:\n{}", found.join("\n"));
}

/// What a sans-io crate must not touch: files, threads, the clock, the
/// network, the environment, randomness.
const IO: &[&str] = &[
    "std::fs",
    "std::thread",
    "std::net",
    "std::env",
    "std::process",
    "SystemTime",
    "Instant",
    "rand::",
    "getrandom",
];

#[test]
fn the_machine_touches_no_file_thread_clock_or_network() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        // Unit tests included: they run the machine the same way.
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for word in IO {
                if line.contains(word) {
                    found.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "I/O in the sans-io crate:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_path_reader_sees_upward_and_sideways_uses() {
    let here = |p: &str| p.split("::").map(str::to_owned).collect::<Vec<_>>();
    let units = |at: &str, line: &str| -> Vec<&'static str> {
        referenced(&here(at), line)
            .iter()
            .filter_map(|path| unit_of(path).map(|(unit, _)| unit))
            .collect()
    };
    assert_eq!(
        units(
            "journal::approval",
            "use super::executions::check_input_counts;"
        ),
        ["journal::executions"]
    );
    assert_eq!(
        units("error", "    Append(crate::host::AppendError),"),
        ["host"]
    );
    assert_eq!(
        units("ops::requests::exec", "use crate::ops::{Flow, unexpected};"),
        ["ops"]
    );
    assert_eq!(
        units(
            "ops::requests::registry::get",
            "use super::super::super::stages::cx::Cx;"
        ),
        ["ops::stages::cx"]
    );
    assert_eq!(
        units(
            "ops::stages::cx",
            "let x = crate::vocab::Code::Ok; crate::host::Host::new"
        ),
        ["vocab", "host"]
    );
    assert!(units("journal", "$crate::faults::active(x)").is_empty());
    // The two circles this test was written against rank as violations.
    let rank = |p: &str| unit_of(&here(p)).map(|(_, r)| r).unwrap();
    assert!(rank("journal::executions") >= rank("journal::approval"));
    assert!(rank("host") >= rank("ops::requests::exec"));
    assert!(rank("ops::requests::exec") > rank("ops::stages::run"));
}
