//! The retention task: drives `Request::Retain` steps through the host.
//!
//! The host decides what is stale and deletes it (`ops::delete` in the
//! machine); this task only paces the steps. One step looks at a bounded
//! number of session rows and deletes the stale ones one at a time, each in
//! a transaction of its own, so appends queued meanwhile commit between
//! them. A pass walks the whole table step by step, logs its counts, and
//! the next pass starts `interval` later.

use std::time::Duration;

use agentsessions_machine::vocab::{Caller, Request, Response};

use super::driver::DriverHandle;

/// Pause between two steps of one pass: leaves the writer to the turns.
const STEP_PAUSE: Duration = Duration::from_millis(20);

/// What one pass over the table did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassCounts {
    /// Sessions deleted.
    pub deleted: usize,
    /// Records they held.
    pub records: i64,
    /// Stale sessions kept (something in flight or pending).
    pub kept: usize,
    /// Steps taken.
    pub steps: usize,
}

/// One pass over the whole table; `pause` between steps.
pub async fn pass(driver: &DriverHandle, pause: Duration) -> Result<PassCounts, String> {
    let mut counts = PassCounts::default();
    let mut after = String::new();
    loop {
        let report = match driver.unary(Caller::Open, Request::Retain { after }).await {
            Ok(Response::Retained(report)) => report,
            Ok(other) => return Err(format!("retain answered {other:?}")),
            Err(status) => return Err(status.message),
        };
        counts.steps += 1;
        counts.deleted += report.deleted.len();
        counts.records += report.deleted.iter().map(|(_, n)| n).sum::<i64>();
        counts.kept += report.kept;
        for (uid, records) in &report.deleted {
            tracing::info!(session = %uid, records, "retention: session deleted");
        }
        if report.next.is_empty() {
            return Ok(counts);
        }
        after = report.next;
        tokio::time::sleep(pause).await;
    }
}

/// Runs passes until `stop` turns true.
pub async fn run(
    driver: DriverHandle,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if *stop.borrow() {
            return;
        }
        match pass(&driver, STEP_PAUSE).await {
            Ok(c) => tracing::info!(
                deleted = c.deleted,
                records = c.records,
                kept = c.kept,
                steps = c.steps,
                "retention pass"
            ),
            Err(e) => tracing::warn!(error = %e, "retention pass failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.changed() => return,
        }
    }
}
