//! Remote harnesses that answer late or never, against the real daemon.
//!
//! grpcio and grpc-go servers send a stream's response headers with its
//! first message, and a harness written the natural way reads Start before
//! it sends anything. The host must therefore send Start without waiting for
//! headers, and a harness that stays silent must end the turn within the
//! documented bounds (UNAVAILABLE, an ERROR record, the session free again),
//! never at the client's deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use agentsessions_machine::events;
use agentsessions_proto::grpc::harness_server::{Harness as HarnessRpc, HarnessServer};
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    Capabilities, ControllerFrame, DescribeRequest, Event, EventKind, ExecRequest,
    HarnessDescriptor, LogRecord, Resumability, controller_frame::Frame, event::Body,
    exec_update::Update,
};
use agentsessions_shells::daemon::app::{Daemon, HarnessTimeouts};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, Streaming};

#[path = "support/daemon.rs"]
mod support;
use support::{client, config, create, replay, text};

/// How the peer answers the next Connect.
const READS_START_FIRST: u8 = 0;
const HEADERS_THEN_SILENCE: u8 = 1;
const NOTHING_AT_ALL: u8 = 2;

/// A test never waits this long unless the host hangs.
const HANG: Duration = Duration::from_secs(20);
/// The bounds the daemon under test runs with.
const BOUND: Duration = Duration::from_millis(400);

#[derive(Clone, Default)]
struct LatePeer {
    connect: Arc<AtomicU8>,
    describe_hangs: Arc<std::sync::atomic::AtomicBool>,
}

#[tonic::async_trait]
impl HarnessRpc for LatePeer {
    async fn describe(
        &self,
        _request: Request<DescribeRequest>,
    ) -> Result<Response<HarnessDescriptor>, Status> {
        if self.describe_hangs.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(Response::new(HarnessDescriptor {
            id: "late".into(),
            capabilities: Some(Capabilities {
                resumability: Resumability::StatelessReplay as i32,
                fork_safe: true,
                ..Capabilities::default()
            }),
            version: "1".into(),
            ..HarnessDescriptor::default()
        }))
    }

    type ConnectStream = ReceiverStream<Result<Event, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let mut inbound = request.into_inner();
        let (out, events) = mpsc::channel(4);
        match self.connect.load(Ordering::SeqCst) {
            READS_START_FIRST => {
                // tonic sends headers when this handler returns, so reading
                // Start here is exactly a grpcio harness's order.
                let start = inbound.message().await?.expect("a Start frame");
                let Some(Frame::Start(s)) = start.frame else {
                    return Err(Status::invalid_argument("want Start first"));
                };
                let exec = start.execution_id;
                let said = events::message_text(&s.inputs[0]);
                let reply = events::text_message("assistant", &format!("late:{said}"));
                out.send(Ok(events::event(
                    &exec,
                    EventKind::EventOutput,
                    Body::Message(reply),
                )))
                .await
                .unwrap();
                out.send(Ok(events::end_completed(&exec))).await.unwrap();
            }
            HEADERS_THEN_SILENCE => {
                // Keep the inbound side open, say nothing.
                tokio::spawn(async move {
                    let _keep = out;
                    while let Ok(Some(_)) = inbound.message().await {}
                });
                return Ok(Response::new(ReceiverStream::new(events)));
            }
            _ => std::future::pending::<()>().await,
        }
        Ok(Response::new(ReceiverStream::new(events)))
    }
}

async fn start(peer: LatePeer) -> (Daemon, SessionsClient<Channel>, tempfile::TempDir) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(HarnessServer::new(peer))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.harnesses = vec![("late".into(), addr.to_string())];
    cfg.harness_timeouts = HarnessTimeouts {
        describe: BOUND,
        connect: BOUND,
    };
    let daemon = Daemon::start(cfg).await.unwrap();
    let c = client(&daemon).await;
    (daemon, c, dir)
}

/// One Exec with no client deadline; the test's own bound catches a hang.
async fn exec(c: &mut SessionsClient<Channel>, sid: &str, input: &str) -> Result<(), Status> {
    let call = async {
        let mut stream = c
            .exec(ExecRequest {
                session: sid.into(),
                inputs: vec![text(input)],
                ..Default::default()
            })
            .await?
            .into_inner();
        while let Some(u) = stream.message().await? {
            assert!(!matches!(u.update, Some(Update::Delta(_))), "no model call");
        }
        Ok(())
    };
    tokio::time::timeout(HANG, call)
        .await
        .expect("the turn ends without the client's deadline")
}

fn kinds(records: &[LogRecord]) -> Vec<EventKind> {
    records
        .iter()
        .map(|r| r.event.as_ref().unwrap().kind())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_reads_start_before_sending_headers_runs_its_turn() {
    let (_daemon, mut c, _dir) = start(LatePeer::default()).await;
    let sid = create(&mut c, "late").await;
    exec(&mut c, &sid, "hi").await.unwrap();
    exec(&mut c, &sid, "again").await.unwrap();
    let log = replay(&mut c, &sid).await;
    let turn = [
        EventKind::EventExecutionStart,
        EventKind::EventInput,
        EventKind::EventOutput,
        EventKind::EventEnd,
    ];
    assert_eq!(kinds(&log), [turn, turn].concat());
    let text = events::message_text(match log[6].event.as_ref().unwrap().body.as_ref() {
        Some(Body::Message(m)) => m,
        other => panic!("not an output: {other:?}"),
    });
    assert_eq!(text, "late:again");
}

async fn a_silent_harness_ends_the_turn_unavailable(mode: u8) {
    let peer = LatePeer::default();
    peer.connect.store(mode, Ordering::SeqCst);
    let (_daemon, mut c, _dir) = start(peer.clone()).await;
    let sid = create(&mut c, "late").await;
    let began = Instant::now();
    let err = exec(&mut c, &sid, "hi").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("no event within"), "{err:?}");
    assert!(began.elapsed() >= BOUND, "not before the bound");
    let log = replay(&mut c, &sid).await;
    assert_eq!(
        kinds(&log),
        [
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventError
        ]
    );
    // The session's guard is free: the next turn, on a harness that now
    // answers, runs to its end.
    peer.connect.store(READS_START_FIRST, Ordering::SeqCst);
    exec(&mut c, &sid, "next").await.unwrap();
    assert_eq!(
        kinds(&replay(&mut c, &sid).await).last(),
        Some(&EventKind::EventEnd)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_sends_headers_and_then_nothing_ends_the_turn_unavailable() {
    a_silent_harness_ends_the_turn_unavailable(HEADERS_THEN_SILENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_sends_nothing_at_all_ends_the_turn_unavailable() {
    a_silent_harness_ends_the_turn_unavailable(NOTHING_AT_ALL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_describe_that_never_answers_is_bounded_by_the_describe_timeout() {
    let peer = LatePeer::default();
    let (_daemon, mut c, _dir) = start(peer.clone()).await;
    let sid = create(&mut c, "late").await;
    peer.describe_hangs.store(true, Ordering::SeqCst);
    let err = exec(&mut c, &sid, "hi").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(replay(&mut c, &sid).await.is_empty(), "nothing journaled");
    peer.describe_hangs.store(false, Ordering::SeqCst);
    exec(&mut c, &sid, "next").await.unwrap();
}
