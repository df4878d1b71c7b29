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

/// The daemon on PostgreSQL (a database per check, made by
/// `scripts/pg-host.sh` from the check's preloaded SQLite journal with
/// `agentctl journal copy`): the Go-fixture checks import through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_cli_certifies_our_daemon_on_postgres() {
    let Some(admin) = pg::fresh_database().await else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg-host.sh");
    let template = format!(
        "bash {script} {admin} {{dir}} {{journal}} {agentctl} {daemon} --addr {{addr}} \
         --model {{model}} --model-base-url {{model_url}} {{harnesses}} \
         --tools-ledger {{dir}}/tools.db --host-id conformance",
        agentctl = env!("CARGO_BIN_EXE_agentctl"),
        daemon = env!("CARGO_BIN_EXE_agentsessionsd"),
    );
    // A stable --host-id, as a deployment that restarts its daemons needs:
    // the crash checks restart the host on a new port, and a restarted
    // daemon must take its own unexpired leases back at once.
    // Without --notes-beside-journal: the daemon's notes file sits beside a
    // SQLite journal, and this one is a database.
    run_suite(vec!["conformance".into(), "--host-cmd".into(), template]).await;
}

#[path = "../shells/tests/support/pg.rs"]
mod pg;

/// Runs the suite against the daemon started with `extra` flags.
async fn certify(extra: &[&str]) {
    let bin = env!("CARGO_BIN_EXE_agentsessionsd");
    let mut args = agentsessions_conformance::cli::our_daemon_args(bin);
    let template = args.last_mut().expect("the host command template");
    for flag in extra {
        template.push(' ');
        template.push_str(flag);
    }
    run_suite(args).await;
}

async fn run_suite(args: Vec<String>) {
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
