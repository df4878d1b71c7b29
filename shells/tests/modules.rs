//! Shells' modules import each other without a circle, and the console sees
//! the host only through its `Calls` interface (never `crate::daemon`).
//!
//! A unit is a top-level module of `shells/src`, or one file or folder of
//! `daemon/`. Its edges are the `crate::…` paths (and, inside `daemon/`,
//! the `super::…` ones) of its non-test code. Reading paths is enough: a
//! `use` names its target and inline paths are spelled the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `daemon/grpc.rs` → `daemon::grpc`; `console/auth.rs` → `console`.
fn unit(parts: &[&str]) -> String {
    match parts {
        ["daemon", sub, ..] => format!("daemon::{sub}"),
        [top, ..] => (*top).to_owned(),
        [] => unreachable!("a file has a path"),
    }
}

/// Module paths named after `prefix` in `text` (`crate::a::b` → `[a, b]`).
fn paths<'a>(text: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let tail = &rest[at + prefix.len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        out.push(tail[..end].split("::").filter(|s| !s.is_empty()).collect());
        rest = &tail[end..];
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in all {
        let rel = file.strip_prefix(src()).unwrap().with_extension("");
        let mut parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap()).collect();
        if parts.last() == Some(&"mod") {
            parts.pop();
        }
        if parts.is_empty() || parts == ["lib"] || parts[0] == "bin" {
            continue;
        }
        let from = unit(&parts);
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap();
        let mut to: Vec<String> = paths(text, "crate::")
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| unit(p))
            .collect();
        if parts[0] == "daemon" && parts.len() == 2 {
            to.extend(
                paths(text, "super::")
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("daemon::{}", p[0])),
            );
        }
        for t in to {
            if t != from && t != "daemon" {
                edges.entry(from.clone()).or_default().insert(t);
            }
        }
    }
    edges
}

/// Every unit `from` reaches.
fn reach(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(u) = todo.pop() {
        for v in edges.get(&u).into_iter().flatten() {
            if seen.insert(v.clone()) {
                todo.push(v.clone());
            }
        }
    }
    seen
}

#[test]
fn no_module_of_shells_imports_itself_in_a_circle() {
    let edges = graph();
    let circles: Vec<&String> = edges
        .keys()
        .filter(|u| reach(&edges, u).contains(*u))
        .collect();
    assert!(circles.is_empty(), "units on an import circle: {circles:?}");
}

#[test]
fn the_console_reaches_nothing_of_the_daemon() {
    let edges = graph();
    let daemon: Vec<String> = reach(&edges, "console")
        .into_iter()
        .filter(|u| u.starts_with("daemon"))
        .collect();
    assert!(daemon.is_empty(), "the console reaches {daemon:?}");
}

#[test]
fn the_graph_reader_sees_the_edges_it_checks() {
    // Teeth: the reader finds the edges the two tests above rest on.
    let edges = graph();
    assert!(edges["daemon::start"].contains("console"));
    assert!(edges["daemon::app"].contains("daemon::start"));
    assert!(edges["console"].contains("telemetry"));
    assert_eq!(unit(&["daemon", "grpc"]), "daemon::grpc");
    assert_eq!(paths("use crate::a::b;", "crate::"), [vec!["a", "b"]]);
}
