//! The progress bar of long `verify` and `replay` runs.
//!
//! It is drawn on stderr, and only when a person is watching: stderr is a
//! terminal and the output is not `--json`. Short runs finish before a bar
//! would be readable, so they get none either.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Below this many records no bar is drawn.
pub const MIN_RECORDS: u64 = 1000;

/// Whether a bar may be drawn at all: a terminal on stderr and human output.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A bar over `total` records, or a hidden one when `show` is false or the
/// run is short. A hidden bar accepts the same calls and draws nothing.
pub fn bar(total: u64, show: bool, what: &str) -> ProgressBar {
    if !show || total < MIN_RECORDS {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_owned());
    pb
}
