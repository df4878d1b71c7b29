//! `conformance`: certifies a Sessions host over gRPC.
//!
//! ```text
//! conformance --host-cmd "agentsessionsd --addr {addr} --journal {journal} \
//!     --model {model} --model-base-url {model_url} {harnesses}"
//! ```
//!
//! Starts the fake model and the harness servers, then for each check
//! starts (and restarts or kills) the host from the template, and prints one
//! line per check and `N passed, N failed, N skipped`. Exits 1 if any check
//! failed, 2 on a usage error.

use std::process::ExitCode;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut out = std::io::stdout();
    match agentsessions_conformance::cli::run(std::env::args_os(), &mut out).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(usage) => {
            eprintln!("{usage}");
            ExitCode::from(2)
        }
    }
}
