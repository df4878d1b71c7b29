//! The `conformance` command line, in the library so the root package's
//! test drives the very entry point the binary uses.

use std::ffi::OsString;
use std::io::Write;
use std::sync::Arc;

use clap::Parser;

use crate::checks::{self, Outcome};
use crate::host::{CommandHost, InProcess, Launcher};

/// Certifies a Sessions host over gRPC.
#[derive(Debug, Parser)]
#[command(name = "conformance", about)]
pub struct Args {
    /// Command that starts the host under test; it must print a line
    /// ending in `listening on HOST:PORT` for its Sessions address.
    /// Placeholders: {addr} (127.0.0.1:0), {journal}, {model}, {model_url},
    /// {dir}, {harness_addr} (conf-echo), {echo_addr}, {nondet_addr},
    /// {tool_addr}, {approval_addr}, {fail_addr}, {foreign_park_addr}, and
    /// {harnesses} (every `--harness name=address` pair).
    #[arg(long, value_name = "TEMPLATE", conflicts_with = "in_process")]
    pub host_cmd: Option<String>,
    /// The host writes `append_note` effects to
    /// `<journal dir>/notes/<session>.notes` (as agentsessionsd does), so
    /// the suite can count real side effects.
    #[arg(long)]
    pub notes_beside_journal: bool,
    /// Run against our daemon in this process instead.
    #[arg(long)]
    pub in_process: bool,
    /// Run only these checks (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// List the checks and exit.
    #[arg(long)]
    pub list: bool,
}

/// The template that runs our own daemon binary at `bin`.
pub fn our_daemon_template(bin: &str) -> String {
    format!(
        "{bin} --addr {{addr}} --journal {{journal}} --model {{model}} \
         --model-base-url {{model_url}} {{harnesses}}"
    )
}

/// The full argument list that certifies our own daemon binary at `bin`.
pub fn our_daemon_args(bin: &str) -> Vec<String> {
    vec![
        "conformance".into(),
        "--notes-beside-journal".into(),
        "--host-cmd".into(),
        our_daemon_template(bin),
    ]
}

/// Parses `args`, runs the checks, prints one line per check and a summary
/// to `out`. Ok(true) when nothing failed; Err for a usage error.
pub async fn run<I, T>(args: I, out: &mut (dyn Write + Send)) -> Result<bool, String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = Args::try_parse_from(args).map_err(|e| e.to_string())?;
    let all = checks::all();
    if args.list {
        for c in &all {
            let _ = writeln!(out, "{:<52} {}", c.name, c.covers);
        }
        return Ok(true);
    }
    let launcher: Arc<dyn Launcher> = match (&args.host_cmd, args.in_process) {
        (Some(t), _) => Arc::new(
            CommandHost::new(t.clone()).with_notes_beside_journal(args.notes_beside_journal),
        ),
        (None, true) => Arc::new(InProcess),
        (None, false) => return Err("give --host-cmd \"<template>\" or --in-process".into()),
    };
    let selected: Vec<_> = if args.only.is_empty() {
        all
    } else {
        let unknown: Vec<&String> = args
            .only
            .iter()
            .filter(|n| !all.iter().any(|c| c.name == n.as_str()))
            .collect();
        if !unknown.is_empty() {
            return Err(format!("unknown checks: {unknown:?} (see --list)"));
        }
        all.into_iter()
            .filter(|c| args.only.iter().any(|n| n == c.name))
            .collect()
    };
    let _ = writeln!(out, "host under test: {}", launcher.describe());
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for check in selected {
        let report = checks::run(check, Arc::clone(&launcher)).await;
        match report.outcome {
            Outcome::Pass => passed += 1,
            Outcome::Fail(_) => failed += 1,
            Outcome::Skip(_) => skipped += 1,
        }
        let _ = writeln!(out, "{}", report.line());
        let _ = out.flush();
    }
    let _ = writeln!(out, "{passed} passed, {failed} failed, {skipped} skipped");
    Ok(failed == 0)
}
