//! A SQLite journal on a disk that fills up, for real: a size-limited tmpfs
//! mounted by the test (as root, as in CI). While the journal cannot commit,
//! calls fail UNAVAILABLE and health reports NOT_SERVING; once space is
//! freed the daemon recovers on its own, without a restart, and every
//! acknowledged record is still there with its chain intact.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{ExecRequest, GetSessionRequest};
use agentsessions_shells::daemon::app::Daemon;
use agentsessions_shells::journal::JournalStore as _;
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[path = "support/daemon.rs"]
mod support;
use support::{client, config, create, replay, text};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A tmpfs of `size` mounted on a new directory; unmounted on drop.
struct SmallDisk {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Self { mount, _dir: dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mount)
            .output();
    }
}

/// Writes zeros to `path` until the disk refuses more.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

/// The status an Exec of one text input ends with.
async fn exec_code(c: &mut SessionsClient<Channel>, session: &str, input: &str) -> Code {
    let req = ExecRequest {
        session: session.into(),
        inputs: vec![text(input)],
        ..Default::default()
    };
    support::exec_code(c, req).await
}

async fn health(daemon: &Daemon) -> ServingStatus {
    let channel = Channel::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner()
        .status;
    ServingStatus::try_from(status).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_unavailable_then_recovers_without_a_restart() {
    let disk = match SmallDisk::mount("6m") {
        Ok(d) => d,
        Err(why) => {
            assert!(!in_ci(), "CI=true and no tmpfs could be mounted: {why}");
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the full-disk test (no tmpfs could be mounted: {why})"
            );
            return;
        }
    };
    let mut cfg = config(&disk.mount);
    cfg.journal = disk.mount.join("journal.db");
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = client(&daemon).await;
    let sid = create(&mut c, "").await;
    assert_eq!(exec_code(&mut c, &sid, "before").await, Code::Ok);
    let acknowledged = replay(&mut c, &sid).await;
    assert_eq!(health(&daemon).await, ServingStatus::Serving);

    // Fill the disk, then write turns large enough that the WAL must grow.
    let filler = disk.mount.join("filler");
    fill(&filler);
    let big = "x".repeat(256 * 1024);
    let mut refused = None;
    for _ in 0..40 {
        match exec_code(&mut c, &sid, &big).await {
            Code::Ok => continue,
            code => {
                refused = Some(code);
                break;
            }
        }
    }
    assert_eq!(
        refused,
        Some(Code::Unavailable),
        "a journal that cannot commit is UNAVAILABLE, not INTERNAL"
    );
    assert_eq!(
        health(&daemon).await,
        ServingStatus::NotServing,
        "health follows the journal"
    );
    let get = c.get_session(GetSessionRequest { uid: sid.clone() }).await;
    assert_eq!(get.unwrap_err().code(), Code::Unavailable, "reads too");

    // Free the space: the daemon reopens its journal by itself.
    std::fs::remove_file(&filler).unwrap();
    let mut recovered = false;
    for _ in 0..300 {
        let fresh = c
            .create_session(agentsessions_proto::v1::CreateSessionRequest::default())
            .await;
        if let Ok(s) = fresh {
            let uid = s.into_inner().metadata.unwrap().uid;
            if exec_code(&mut c, &uid, "after").await == Code::Ok {
                recovered = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the daemon serves again within 30 s");
    assert_eq!(health(&daemon).await, ServingStatus::Serving);

    // Everything acknowledged before the disk filled is intact.
    let now = replay(&mut c, &sid).await;
    assert!(now.len() >= acknowledged.len());
    assert_eq!(now[..acknowledged.len()], acknowledged[..]);
    daemon.shutdown().await;
    let journal = SqliteJournal::open(&cfg.journal, SqliteOptions::default()).unwrap();
    journal.verify(&sid).await.expect("the chain verifies");
}
