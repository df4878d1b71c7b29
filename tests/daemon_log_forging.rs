//! A caller cannot write the daemon's log or make it echo megabytes: the
//! real `agentsessionsd`, logging compact text to a file, is sent a session
//! uid that holds a newline, a forged `rpc finish` line and a terminal
//! escape, then a ~1 MB uid, then a Struct nested past the decoder's limit.
//! The log keeps one line per event with no ESC byte, both echoes in the
//! status and the log are bounded, and the deep Struct is the caller's
//! mistake (INVALID_ARGUMENT), not the host's (INTERNAL).

#[path = "support/cli.rs"]
mod cli;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::process::Stdio;

use agentsessions_proto::v1::{ExecRequest, GetSessionRequest};
use cli::Daemon;
use support::{client_at, create, nested_data};

const FORGED: &str = "x\n2099-01-01T00:00:00.000000Z  INFO agentsessions::grpc: rpc finish FORGED principal=admin\x1b[31m";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_supplied_uid_cannot_forge_log_lines_or_flood_the_log_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log_path = d.join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let daemon = Daemon::start_logging(d, d.join("j.db").as_os_str(), &[], Stdio::from(log));
    let mut c = client_at(&daemon.sessions).await;

    let err = c
        .get_session(GetSessionRequest { uid: FORGED.into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let msg = err.message();
    assert!(!msg.contains(['\n', '\x1b']), "{msg:?}");
    assert!(
        msg.contains(r"x\n2099"),
        "the uid is shown escaped: {msg:?}"
    );

    let huge = "u".repeat(1_000_000);
    let err = c
        .get_session(GetSessionRequest { uid: huge.clone() })
        .await
        .unwrap_err();
    assert!(
        err.message().len() < 512,
        "a {} byte echo of the uid",
        err.message().len()
    );
    assert!(err.message().contains("…(+"), "{:?}", err.message());

    // A Struct 60 levels deep is 120 nested messages, past prost's 100.
    let sid = create(&mut c, "").await;
    let err = c
        .exec(ExecRequest {
            session: sid,
            inputs: vec![nested_data(60)],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert_eq!(
        err.message(),
        "request nests messages deeper than 100 levels"
    );
    drop(daemon);

    let bytes = std::fs::read(&log_path).unwrap();
    assert!(!bytes.contains(&0x1b), "a raw escape reached the log");
    let text = String::from_utf8(bytes).unwrap();
    if std::env::var_os("SHOW_LOGS").is_some() {
        eprintln!("{text}");
    }
    for line in text.lines() {
        assert!(
            !line.starts_with("2099") && !line.starts_with("\u{1b}"),
            "a forged line: {line:?}"
        );
    }
    let finish = text
        .lines()
        .find(|l| l.contains("rpc finish") && l.contains("GetSession"))
        .unwrap_or_else(|| panic!("no GetSession finish in\n{text}"));
    assert!(
        finish.contains("FORGED"),
        "the forged text stays inside the real line: {finish}"
    );
    assert!(
        text.len() < 64 << 10,
        "the log grew {} bytes for a {} byte uid",
        text.len(),
        huge.len()
    );
}
