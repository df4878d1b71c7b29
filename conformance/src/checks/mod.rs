//! The checks, their registry and the runner.
//!
//! A check gets a fresh [`Env`] and drives the host only through the public
//! gRPC API (plus the journal file before the host starts, to preload
//! records a host cannot be asked to write). It returns [`Verdict::Pass`],
//! [`Verdict::Skip`] with a reason, or a [`Failure`] saying what the host
//! did wrong. Host misbehaviour is always a failure value, never a panic.

use std::sync::Arc;
use std::time::Duration;

use crate::env::Env;
use crate::host::{BoxFuture, Launcher};

/// What a check found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        Failure(format!("unexpected status {:?}: {}", s.code(), s.message()))
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A check that ran to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything held.
    Pass,
    /// Not observable against this host, with the reason.
    Skip(String),
}

/// What one check returns.
pub type CheckResult = Result<Verdict, Failure>;

/// Fails the check with a formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::checks::Failure(format!($($msg)+)));
        }
    };
}

/// A named check.
#[derive(Clone, Copy)]
pub struct Check {
    /// Stable name (also the in-process test's name).
    pub name: &'static str,
    /// Which reference item it covers.
    pub covers: &'static str,
    run: for<'a> fn(&'a mut Env) -> BoxFuture<'a, CheckResult>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check").field("name", &self.name).finish()
    }
}

/// Builds a [`Check`] from an `async fn(&mut Env) -> CheckResult`.
macro_rules! check {
    ($name:literal, $covers:literal, $f:path) => {{
        fn run(env: &mut Env) -> BoxFuture<'_, CheckResult> {
            Box::pin($f(env))
        }
        Check {
            name: $name,
            covers: $covers,
            run,
        }
    }};
}

// After the macros: `check!` is textually scoped.
mod approval;
mod bad_input;
mod core;
mod interop;
mod python;
mod recovery;
mod support;
mod tools;

/// Every check, in report order.
pub fn all() -> Vec<Check> {
    let mut v = core::checks();
    v.extend(tools::checks());
    v.extend(approval::checks());
    v.extend(interop::checks());
    v.extend(bad_input::checks());
    v.extend(python::checks());
    v
}

/// The check named `name`.
pub fn by_name(name: &str) -> Option<Check> {
    all().into_iter().find(|c| c.name == name)
}

/// How a check ended, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Pass,
    /// Failed, with what went wrong.
    Fail(String),
    /// Skipped, with why.
    Skip(String),
}

/// One check's report.
#[derive(Debug, Clone)]
pub struct Report {
    /// The check.
    pub name: &'static str,
    /// The verdict.
    pub outcome: Outcome,
    /// Remarks (parts not observable, counts).
    pub notes: Vec<String>,
    /// Normalized replay outputs, by snapshot name.
    pub snapshots: Vec<(String, String)>,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// One line: `PASS name (1.2s) — notes`.
    pub fn line(&self) -> String {
        let (tag, why) = match &self.outcome {
            Outcome::Pass => ("PASS", String::new()),
            Outcome::Fail(m) => ("FAIL", m.clone()),
            Outcome::Skip(m) => ("SKIP", m.clone()),
        };
        let mut extra: Vec<String> = Vec::new();
        if !why.is_empty() {
            extra.push(why);
        }
        extra.extend(self.notes.iter().cloned());
        let secs = self.elapsed.as_secs_f64();
        if extra.is_empty() {
            format!("{tag} {} ({secs:.1}s)", self.name)
        } else {
            format!("{tag} {} ({secs:.1}s): {}", self.name, extra.join("; "))
        }
    }
}

/// Upper bound of one check, host restarts included.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs one check in a fresh environment. The check runs in its own task
/// so that even a bug in the suite is reported as a failure.
pub async fn run(check: Check, launcher: Arc<dyn Launcher>) -> Report {
    let started = std::time::Instant::now();
    let task = tokio::spawn(async move {
        let mut env = match Env::new(launcher).await {
            Ok(env) => env,
            Err(e) => return (Err(e), Vec::new(), Vec::new()),
        };
        let result = tokio::time::timeout(CHECK_TIMEOUT, (check.run)(&mut env))
            .await
            .unwrap_or_else(|_| Err(Failure(format!("timed out after {CHECK_TIMEOUT:?}"))));
        let notes = std::mem::take(&mut env.notes);
        let snapshots = std::mem::take(&mut env.snapshots);
        env.teardown().await;
        (result, notes, snapshots)
    });
    let (result, notes, snapshots) = match task.await {
        Ok(r) => r,
        Err(e) => (
            Err(Failure(format!("the check itself broke: {e}"))),
            Vec::new(),
            Vec::new(),
        ),
    };
    let outcome = match result {
        Ok(Verdict::Pass) => Outcome::Pass,
        Ok(Verdict::Skip(why)) => Outcome::Skip(why),
        Err(f) => Outcome::Fail(f.0),
    };
    Report {
        name: check.name,
        outcome,
        notes,
        snapshots,
        elapsed: started.elapsed(),
    }
}
