//! The bad-input matrix: every RPC of the daemon, over real gRPC on
//! loopback, given requests it must refuse. Each row names the status code
//! the reference documents (service.md §1 and §5) and is checked twice: the
//! code, and that the refusal left no trace — a full Replay of every
//! session, every page of ListSessions and every registration are compared
//! before and after the call.
//!
//! The overlap rows need a turn that stays open: a remote harness served by
//! this test (with the harness SDK) blocks inside its run until released,
//! so Exec, Suspend, Resume and Approve on that session meet a held guard.

use std::sync::Arc;
use std::time::Duration;

use agentsessions_proto::grpc::harness_registry_client::HarnessRegistryClient;
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, CancelRequest, Capabilities, CreateSessionRequest, DeleteSessionRequest,
    ExecRequest, ForkRequest, GetHarnessRequest, GetSessionRequest, HarnessDescriptor,
    HarnessRegistration, HarnessSpec, IdentityRef, ListHarnessesRequest, ListSessionsRequest,
    LogRecord, RegisterHarnessRequest, RemotePlacement, ReplayRequest, Resumability, ResumeRequest,
    RetireHarnessRequest, Session, SubstratePlacement, SuspendRequest, exec_update::Update,
    harness_spec::Placement,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::harness::serve::{ListenAddr, Listener};
use agentsessions_shells::harness::{Harness, HarnessError, HarnessService, Sink, StartInfo};
use base64::Engine as _;
use tokio::sync::{Notify, mpsc};
use tonic::Code;
use tonic::transport::Channel;

mod rows;
use rows::rows;

#[path = "../support/daemon.rs"]
mod support;
use support::{create, nested_data, text};

/// A harness that reports when a run starts and then waits to be released.
struct Block {
    started: mpsc::UnboundedSender<()>,
    release: Arc<Notify>,
}

#[tonic::async_trait]
impl Harness for Block {
    fn describe(&self) -> HarnessDescriptor {
        HarnessDescriptor {
            id: "block".into(),
            version: "1".into(),
            capabilities: Some(Capabilities {
                resumability: Resumability::StatelessReplay as i32,
                ..Capabilities::default()
            }),
            ..HarnessDescriptor::default()
        }
    }

    async fn run(&self, _start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let _ = self.started.send(());
        self.release.notified().await;
        sink.output("released").await
    }
}

struct Clients {
    sessions: SessionsClient<Channel>,
    registry: HarnessRegistryClient<Channel>,
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// One call of any RPC. Rows are built once and moved once, so the size
/// of the largest request does not matter.
#[allow(clippy::large_enum_variant)]
enum Call {
    Create(CreateSessionRequest),
    Get(GetSessionRequest),
    List(ListSessionsRequest),
    Delete(DeleteSessionRequest),
    Exec(ExecRequest),
    Replay(ReplayRequest),
    Approve(ApproveRequest),
    Cancel(CancelRequest),
    Suspend(SuspendRequest),
    Resume(ResumeRequest),
    Fork(ForkRequest),
    Register(RegisterHarnessRequest),
    GetHarness(GetHarnessRequest),
    ListHarnesses(ListHarnessesRequest),
    Retire(RetireHarnessRequest),
}

/// Runs `call` to its end: a streamed call is read to EOF, because its
/// status arrives after its frames. Replay answers with its record count.
async fn perform(c: &mut Clients, call: Call) -> Result<usize, tonic::Status> {
    let s = &mut c.sessions;
    let r = &mut c.registry;
    match call {
        Call::Create(q) => s.create_session(q).await.map(|_| 0),
        Call::Get(q) => s.get_session(q).await.map(|_| 0),
        Call::List(q) => s.list_sessions(q).await.map(|_| 0),
        Call::Delete(q) => s.delete_session(q).await.map(|_| 0),
        Call::Exec(q) => {
            let mut stream = s.exec(q).await?.into_inner();
            let mut frames = 0;
            while stream.message().await?.is_some() {
                frames += 1;
            }
            Ok(frames)
        }
        Call::Replay(q) => {
            let mut stream = s.replay(q).await?.into_inner();
            let mut records = 0;
            while stream.message().await?.is_some() {
                records += 1;
            }
            Ok(records)
        }
        Call::Approve(q) => s.approve(q).await.map(|_| 0),
        Call::Cancel(q) => s.cancel(q).await.map(|_| 0),
        Call::Suspend(q) => s.suspend(q).await.map(|_| 0),
        Call::Resume(q) => s.resume(q).await.map(|_| 0),
        Call::Fork(q) => s.fork(q).await.map(|_| 0),
        Call::Register(q) => r.register_harness(q).await.map(|_| 0),
        Call::GetHarness(q) => r.get_harness(q).await.map(|_| 0),
        Call::ListHarnesses(q) => r.list_harnesses(q).await.map(|_| 0),
        Call::Retire(q) => r.retire_harness(q).await.map(|_| 0),
    }
}

/// Everything a refused call must leave alone.
#[derive(Debug, PartialEq)]
struct Observed {
    sessions: Vec<Session>,
    journals: Vec<(String, Vec<LogRecord>)>,
    harnesses: Vec<HarnessRegistration>,
}

async fn observe(c: &mut Clients) -> Observed {
    let mut sessions = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .sessions
            .list_sessions(ListSessionsRequest {
                project: String::new(),
                page_size: 2,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        sessions.extend(page.sessions);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut journals = Vec::new();
    for s in &sessions {
        let uid = s.metadata.as_ref().unwrap().uid.clone();
        let mut stream = c
            .sessions
            .replay(ReplayRequest {
                session: uid.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut records = Vec::new();
        while let Some(r) = stream.message().await.unwrap() {
            records.push(r);
        }
        journals.push((uid, records));
    }
    let harnesses = c
        .registry
        .list_harnesses(ListHarnessesRequest {
            page_size: 500,
            page_token: String::new(),
            include_retired: true,
        })
        .await
        .unwrap()
        .into_inner()
        .harnesses;
    Observed {
        sessions,
        journals,
        harnesses,
    }
}

/// The first difference, for the failure message.
fn diff(a: &Observed, b: &Observed) -> String {
    if a.sessions.len() != b.sessions.len() {
        return format!("{} sessions became {}", a.sessions.len(), b.sessions.len());
    }
    for (x, y) in a.sessions.iter().zip(&b.sessions) {
        if x != y {
            return format!("session {x:?} became {y:?}");
        }
    }
    for (x, y) in a.journals.iter().zip(&b.journals) {
        if x != y {
            return format!(
                "journal of {} changed: {} → {} records",
                x.0,
                x.1.len(),
                y.1.len()
            );
        }
    }
    "the registrations changed".into()
}

struct Row {
    name: &'static str,
    want: Code,
    call: Call,
    /// The refusal comes from the CAS of the turn's first append, after
    /// the turn's fence was minted. A mint touches the session row's
    /// update_time (service.md §2.1, as in the reference), so that one
    /// field may move; every record and every other field may not.
    mints: bool,
}

fn row(name: &'static str, want: Code, call: Call) -> Row {
    Row {
        name,
        want,
        call,
        mints: false,
    }
}

fn cas_row(name: &'static str, call: Call) -> Row {
    Row {
        mints: true,
        ..row(name, Code::Aborted, call)
    }
}

/// `o` with every session's update_time cleared.
fn without_update_times(mut o: Observed) -> Observed {
    for s in &mut o.sessions {
        if let Some(m) = s.metadata.as_mut() {
            m.update_time = None;
        }
    }
    o
}

fn remote_spec(address: &str) -> HarnessSpec {
    HarnessSpec {
        placement: Some(Placement::Remote(RemotePlacement {
            address: address.into(),
        })),
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            ..Capabilities::default()
        }),
        descriptor_id: String::new(),
    }
}

fn approve(session: &str, exec: &str, call: &str, seq: i64, approved: Option<bool>) -> Call {
    Call::Approve(ApproveRequest {
        session: session.into(),
        execution_id: exec.into(),
        tool_call_id: call.into(),
        request_seq: seq,
        approved,
        reason: String::new(),
        identity: None,
    })
}

fn exec(session: &str, input: Option<&str>) -> ExecRequest {
    ExecRequest {
        session: session.into(),
        inputs: input.map(text).into_iter().collect(),
        ..Default::default()
    }
}

fn fork(session: &str, count: i32) -> ForkRequest {
    ForkRequest {
        session: session.into(),
        count,
        ..Default::default()
    }
}

/// The sessions and registrations the rows refer to.
struct World {
    echo: String,
    parked: String,
    exec_id: String,
    call_id: String,
    request_seq: i64,
    held: String,
    block_address: String,
}

/// The shared test daemon, with the registry listener on as well.
/// Two drive loops: every refusal must hold whichever loop owns the
/// session, and the registrations below must reach both.
fn config(dir: &std::path::Path) -> DaemonConfig {
    DaemonConfig {
        registry_addr: Some("127.0.0.1:0".parse().unwrap()),
        drive_loops: 2,
        ..support::config(dir)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_bad_input_with_its_code_and_journals_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("block.sock");
    let block_address = format!("unix://{}", socket.display());
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let listener = Listener::bind(&ListenAddr::Unix(socket.clone()))
        .await
        .unwrap();
    let (stop_block, block_stopped) = tokio::sync::oneshot::channel::<()>();
    let block = tokio::spawn(listener.serve(
        HarnessService::new(Arc::new(Block {
            started: started_tx,
            release: release.clone(),
        })),
        async {
            let _ = block_stopped.await;
        },
    ));

    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = Clients {
        sessions: SessionsClient::new(channel(daemon.addr).await),
        registry: HarnessRegistryClient::new(channel(daemon.registry_addr.unwrap()).await),
    };

    // The blocking harness, a registered harness that pins, and a retired
    // one that refuses new sessions (all served by the blocking harness).
    for name in ["block", "reg", "old"] {
        c.registry
            .register_harness(RegisterHarnessRequest {
                name: name.into(),
                spec: Some(remote_spec(&block_address)),
            })
            .await
            .unwrap();
    }
    c.registry
        .retire_harness(RetireHarnessRequest {
            name: "old".into(),
            reason: "replaced".into(),
        })
        .await
        .unwrap();

    // A session with one completed echo turn (5 records).
    let echo = create(&mut c.sessions, "echo").await;
    perform(&mut c, Call::Exec(exec(&echo, Some("hi"))))
        .await
        .expect("the echo turn completes");

    // A session parked on an approval.
    let parked = create(&mut c.sessions, "approval").await;
    let mut stream = c
        .sessions
        .exec(exec(&parked, Some("remember milk")))
        .await
        .unwrap()
        .into_inner();
    let mut pending = None;
    while let Some(u) = stream.message().await.unwrap() {
        if let Some(Update::Session(s)) = u.update {
            pending = s.pending_approval.or(pending);
        }
    }
    let pending = pending.expect("the approval turn parked");

    // A session whose turn is held open inside the blocking harness.
    let held = create(&mut c.sessions, "block").await;
    let mut held_client = c.sessions.clone();
    let held_turn = tokio::spawn({
        let held = held.clone();
        async move { perform_exec(&mut held_client, exec(&held, Some("wait"))).await }
    });
    tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("the held turn reached the harness")
        .unwrap();

    let world = World {
        echo: echo.clone(),
        parked,
        exec_id: pending.execution_id,
        call_id: pending.tool_call_id,
        request_seq: pending.request_seq,
        held: held.clone(),
        block_address,
    };
    let rows = rows(&world);
    assert!(rows.len() >= 50, "{} rows", rows.len());
    let mut failures = Vec::new();
    for Row {
        name,
        want,
        call,
        mints,
    } in rows
    {
        let before = observe(&mut c).await;
        let got = perform(&mut c, call).await;
        let code = match &got {
            Ok(_) => Code::Ok,
            Err(s) => s.code(),
        };
        if code != want {
            failures.push(format!("{name}: want {want:?}, got {got:?}"));
        }
        if want == Code::Ok && !matches!(got, Ok(0)) {
            failures.push(format!("{name}: want an empty stream, got {got:?}"));
        }
        let mut after = observe(&mut c).await;
        let mut before = before;
        if mints {
            before = without_update_times(before);
            after = without_update_times(after);
        }
        if before != after {
            failures.push(format!(
                "{name}: the journal or registry changed: {}",
                diff(&before, &after)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The held turn still completes once released: the refusals did not
    // disturb it.
    release.notify_one();
    let frames = held_turn.await.unwrap().expect("the held turn completes");
    assert_eq!(frames, 5, "Session, then START, INPUT, OUTPUT, END");
    let journal = c
        .sessions
        .get_session(GetSessionRequest { uid: held })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(journal.last_seq, 4);

    daemon.shutdown().await;
    let _ = stop_block.send(());
    let _ = block.await;
}

/// Runs one Exec on its own client and counts its frames.
async fn perform_exec(
    c: &mut SessionsClient<Channel>,
    req: ExecRequest,
) -> Result<usize, tonic::Status> {
    let mut stream = c.exec(req).await?.into_inner();
    let mut frames = 0;
    while stream.message().await?.is_some() {
        frames += 1;
    }
    Ok(frames)
}

/// Fork's count is defaulted, not refused: 0 and negatives make one child,
/// and exactly 128 is allowed. These change the journal, so they sit
/// outside the matrix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_count_zero_or_negative_makes_one_child_and_128_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = SessionsClient::new(channel(daemon.addr).await);
    let echo = c
        .create_session(CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner()
        .metadata
        .unwrap()
        .uid;
    perform_exec(&mut c, exec(&echo, Some("hi"))).await.unwrap();
    for count in [0, -3] {
        let children = c.fork(fork(&echo, count)).await.unwrap().into_inner();
        assert_eq!(children.children.len(), 1, "count {count}");
    }
    let children = c.fork(fork(&echo, 128)).await.unwrap().into_inner();
    assert_eq!(children.children.len(), 128);
    daemon.shutdown().await;
}

/// Cancel over the real gRPC stack: a turn blocked inside a harness that
/// never answers is canceled; its Exec stream ends CANCELLED after the
/// cancel records, and the journal verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_blocked_turn_and_its_exec_stream_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("block.sock");
    let block_address = format!("unix://{}", socket.display());
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let listener = Listener::bind(&ListenAddr::Unix(socket.clone()))
        .await
        .unwrap();
    let (stop_block, block_stopped) = tokio::sync::oneshot::channel::<()>();
    let block = tokio::spawn(listener.serve(
        HarnessService::new(Arc::new(Block {
            started: started_tx,
            release: Arc::new(Notify::new()),
        })),
        async {
            let _ = block_stopped.await;
        },
    ));
    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = Clients {
        sessions: SessionsClient::new(channel(daemon.addr).await),
        registry: HarnessRegistryClient::new(channel(daemon.registry_addr.unwrap()).await),
    };
    c.registry
        .register_harness(RegisterHarnessRequest {
            name: "block".into(),
            spec: Some(remote_spec(&block_address)),
        })
        .await
        .unwrap();
    let sid = create(&mut c.sessions, "block").await;
    let mut turn_client = c.sessions.clone();
    let turn = tokio::spawn({
        let sid = sid.clone();
        async move {
            let mut stream = turn_client
                .exec(exec(&sid, Some("wait")))
                .await
                .map_err(|s| (s, Vec::new()))?
                .into_inner();
            let mut records: Vec<LogRecord> = Vec::new();
            loop {
                match stream.message().await {
                    Ok(Some(u)) => {
                        if let Some(Update::Record(r)) = u.update {
                            records.push(r);
                        }
                    }
                    Ok(None) => return Ok(records),
                    Err(status) => return Err((status, records)),
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("the turn reached the harness")
        .unwrap();

    let canceled = c
        .sessions
        .cancel(CancelRequest {
            session: sid.clone(),
            execution_id: String::new(),
            reason: "operator".into(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(
        canceled.exec_state,
        agentsessions_proto::v1::ExecState::ExecCanceled as i32
    );
    assert_eq!(canceled.last_seq, 4, "START, INPUT, CANCEL, END");

    let (status, records) = tokio::time::timeout(Duration::from_secs(10), turn)
        .await
        .expect("the Exec stream ends")
        .unwrap()
        .expect_err("the turn ends with a status");
    assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
    let seqs: Vec<i64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(
        seqs,
        [1, 2, 3, 4],
        "every record streamed before the status"
    );
    let replayed: Vec<LogRecord> = {
        let mut s = c
            .sessions
            .replay(agentsessions_proto::v1::ReplayRequest {
                session: sid.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while let Some(r) = s.message().await.unwrap() {
            out.push(r);
        }
        out
    };
    assert_eq!(replayed, records, "the stream showed the journal");
    agentsessions_machine::chain::verify(&replayed).expect("the chain verifies");

    daemon.shutdown().await;
    let _ = stop_block.send(());
    let _ = block.await;
}
