//! Holes a hostile caller found in the released daemon (issue #35), each
//! against the built `agentsessionsd --auth` as a child process: an
//! implicitly created session that let its creator approve its own calls,
//! a request of ~580 000 empty parts, and a reader opening more Replay
//! streams than it should hold.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/scrape.rs"]
mod scrape;
#[path = "../shells/tests/support/daemon.rs"]
mod support;

use std::path::Path;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, ExecRequest, GetSessionRequest, ListSessionsRequest, Message, Part,
    ReplayRequest, TextPart, exec_update, part,
};
use cli::Daemon;
use sha2::{Digest, Sha256};
use support::{authed, text};
use tonic::transport::Channel;

const WES: &str = "wes-writer-and-approver-key-0123";
const RITA: &str = "rita-reader-key-0123456789abcdef";

fn auth_file(dir: &Path) -> String {
    let digest = |k: &str| hex::encode(Sha256::digest(k.as_bytes()));
    let text = format!(
        "separate_approver = true\n\n\
         [[api_key]]\nprincipal = \"wes\"\nsha256 = \"{}\"\nroles = [\"*:writer\", \"*:approver\"]\n\n\
         [[api_key]]\nprincipal = \"rita\"\nsha256 = \"{}\"\nroles = [\"*:reader\"]\n",
        digest(WES),
        digest(RITA)
    );
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn start(dir: &Path, extra: &[&str]) -> Daemon {
    let auth = auth_file(dir);
    let mut flags = vec!["--auth", auth.as_str()];
    flags.extend_from_slice(extra);
    Daemon::start_with(dir.join("j.db").as_os_str(), &flags)
}

async fn client(addr: &str) -> SessionsClient<Channel> {
    support::client_at(addr)
        .await
        .max_decoding_message_size(64 << 20)
}

/// One text part.
fn part(s: &str) -> Part {
    Part {
        part: Some(part::Part::Text(TextPart { text: s.into() })),
    }
}

/// Runs an Exec to its end; the last session frame, or the status.
async fn exec(
    c: &mut SessionsClient<Channel>,
    key: &str,
    req: ExecRequest,
) -> Result<agentsessions_proto::v1::Session, tonic::Status> {
    let mut stream = c.exec(authed(req, key)).await?.into_inner();
    let mut session = None;
    while let Some(update) = stream.message().await? {
        if let Some(exec_update::Update::Session(s)) = update.update {
            session = Some(s);
        }
    }
    Ok(session.expect("an Exec ends with its session"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_exec_creates_names_its_creator_who_may_not_approve_its_calls() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path(), &[]);
    let mut c = client(&d.sessions).await;
    // No session named: the Exec creates it.
    let parked = exec(
        &mut c,
        WES,
        ExecRequest {
            harness: "approval".into(),
            inputs: vec![text("go")],
            ..Default::default()
        },
    )
    .await
    .expect("the turn parks");
    let uid = parked.metadata.as_ref().unwrap().uid.clone();
    let pending = parked.pending_approval.expect("a pending approval");
    let row = c
        .get_session(authed(GetSessionRequest { uid: uid.clone() }, WES))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        row.identity.map(|i| i.principal).as_deref(),
        Some("wes"),
        "the implicit session names its creator"
    );
    let refused = c
        .approve(authed(
            ApproveRequest {
                session: uid.clone(),
                execution_id: pending.execution_id.clone(),
                tool_call_id: pending.tool_call_id.clone(),
                request_seq: pending.request_seq,
                approved: Some(true),
                ..Default::default()
            },
            WES,
        ))
        .await
        .expect_err("the creator may not approve");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_more_parts_than_the_bound_is_invalid_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path(), &["--metrics-addr", "127.0.0.1:0"]);
    let mut c = client(&d.sessions).await;
    // ~580 000 one-character parts: under the 4 MiB wire limit, ~110 MB
    // once decoded.
    let flood = ExecRequest {
        inputs: vec![Message {
            role: "user".into(),
            parts: vec![part("a"); 580_000],
        }],
        ..Default::default()
    };
    let refused = exec(&mut c, WES, flood).await.expect_err("too many parts");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("--max-parts-per-message"),
        "{}",
        refused.message()
    );
    let listed = c
        .list_sessions(authed(ListSessionsRequest::default(), WES))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty(), "nothing was created");
    let metrics = scrape::metrics(d.metrics.as_ref().unwrap());
    assert_eq!(
        scrape::sample(
            &metrics,
            "agentsessions_limit_refusals_total{bound=\"parts_per_message\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_past_its_stream_bound_is_refused_until_one_of_its_streams_ends() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path(), &["--max-streams-per-principal", "2"]);
    let mut c = client(&d.sessions).await;
    // One turn of ~2 MB: more than a connection's flow-control window, so
    // a Replay nobody reads stays open.
    let heavy = ExecRequest {
        inputs: vec![Message {
            role: "user".into(),
            parts: vec![part(&"h".repeat(2 << 20))],
        }],
        ..Default::default()
    };
    let session = exec(&mut c, WES, heavy).await.unwrap();
    let uid = session.metadata.unwrap().uid;
    let replay = || {
        authed(
            ReplayRequest {
                session: uid.clone(),
                ..Default::default()
            },
            RITA,
        )
    };
    // Each stream on a connection of its own, so only the principal's
    // bound is in play; none is read.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut own = client(&d.sessions).await;
        held.push(own.replay(replay()).await.expect("admitted").into_inner());
    }
    let mut third = client(&d.sessions).await;
    let refused = match third.replay(replay()).await {
        Err(status) => status,
        Ok(stream) => {
            let mut stream = stream.into_inner();
            stream
                .message()
                .await
                .expect_err("a third stream is refused")
        }
    };
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.message().contains("--max-streams-per-principal"));
    // Reading one stream to its end gives its place back.
    let mut first = held.remove(0);
    let mut records = 0;
    while first.message().await.unwrap().is_some() {
        records += 1;
    }
    assert!(records >= 4, "the whole journal came through: {records}");
    drop(first);
    let mut again = None;
    for _ in 0..50 {
        match third.replay(replay()).await {
            Ok(s) => {
                again = Some(s.into_inner());
                break;
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(s) => panic!("{s:?}"),
        }
    }
    let mut again = again.expect("admitted once a stream ended");
    assert_eq!(again.message().await.unwrap().unwrap().seq, 1);
}
