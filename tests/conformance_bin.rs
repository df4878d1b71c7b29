//! The conformance suite in binary mode against the built `agentsessionsd`:
//! the same entry point as the `conformance` binary (its flags included),
//! with the daemon started, restarted and SIGKILLed as a child process.
//! It lives in the root package because only here does Cargo build the
//! daemon binary and name its path.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_cli_certifies_our_daemon_as_a_child_process() {
    certify(&[]).await;
}

/// The other thread layout: the listener on worker threads, the drive loop
/// on a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_cli_certifies_our_daemon_on_worker_threads() {
    certify(&["--workers", "2"]).await;
}

/// Runs the suite against the daemon started with `extra` flags.
async fn certify(extra: &[&str]) {
    let bin = env!("CARGO_BIN_EXE_agentsessionsd");
    let mut args = agentsessions_conformance::cli::our_daemon_args(bin);
    let template = args.last_mut().expect("the host command template");
    for flag in extra {
        template.push(' ');
        template.push_str(flag);
    }
    let mut out = Vec::new();
    let ok = agentsessions_conformance::cli::run(args, &mut out)
        .await
        .expect("valid conformance arguments");
    let text = String::from_utf8_lossy(&out);
    println!("{text}");
    let summary = text.lines().last().unwrap_or_default();
    assert!(summary.contains(" passed, 0 failed"), "{summary}");
    assert!(ok, "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("FAIL")),
        "every check passes against our daemon:\n{text}"
    );
}
