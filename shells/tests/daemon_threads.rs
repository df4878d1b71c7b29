//! Where the drive loop runs, and that it never outlives its daemon.
//!
//! One test per binary on purpose: it counts this process's `drive-loop`
//! threads, which tests running beside it would disturb.

#[path = "support/daemon.rs"]
mod support;

use std::time::{Duration, Instant};

use agentsessions_shells::daemon::app::Daemon;

fn drive_loop_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "drive-loop")
        .count()
}

fn wait_for_threads(n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while drive_loop_threads() != n {
        assert!(
            Instant::now() < deadline,
            "drive-loop threads never fell to {n}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn multi_threaded() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Starts a daemon on `rt` and runs one turn through it.
fn started(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> Daemon {
    std::fs::create_dir_all(dir).unwrap();
    rt.block_on(async {
        let daemon = Daemon::start(support::config(dir)).await.unwrap();
        let mut c = support::client(&daemon).await;
        let session = support::create(&mut c, "echo").await;
        assert_eq!(support::replay(&mut c, &session).await.len(), 0);
        daemon
    })
}

#[test]
fn the_drive_loop_gets_a_thread_only_beside_a_multi_threaded_listener_and_dies_with_its_daemon() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(drive_loop_threads(), 0);

    // A current-thread runtime (agentsessionsd's): the loop is a task on it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let daemon = started(&rt, &dir.path().join("a"));
    assert_eq!(drive_loop_threads(), 0);
    rt.block_on(daemon.shutdown());
    drop(rt);

    // A multi-threaded runtime: a thread of its own, gone when the daemon
    // is dropped (not drained), as with a killed process.
    let rt = multi_threaded();
    let daemon = started(&rt, &dir.path().join("b"));
    assert_eq!(drive_loop_threads(), 1);
    drop(daemon);
    assert_eq!(drive_loop_threads(), 0, "drop joins the loop's thread");
    drop(rt);

    // Drained: the thread ends with the loop.
    let rt = multi_threaded();
    let daemon = started(&rt, &dir.path().join("c"));
    assert_eq!(drive_loop_threads(), 1);
    rt.block_on(daemon.shutdown());
    assert_eq!(drive_loop_threads(), 0);
    drop(rt);

    // Never dropped: the thread still ends when the runtime that started
    // the daemon shuts down, as the loop's task would have.
    let rt = multi_threaded();
    let daemon = started(&rt, &dir.path().join("d"));
    assert_eq!(drive_loop_threads(), 1);
    std::mem::forget(daemon);
    drop(rt);
    wait_for_threads(0);
}
