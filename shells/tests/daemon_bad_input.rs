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
    LogRecord, Message, Part, RegisterHarnessRequest, RemotePlacement, ReplayRequest, Resumability,
    ResumeRequest, RetireHarnessRequest, Session, SubstratePlacement, SuspendRequest, TextPart,
    exec_update::Update, harness_spec::Placement, part,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::harness::serve::{ListenAddr, Listener};
use agentsessions_shells::harness::{Harness, HarnessError, HarnessService, Sink, StartInfo};
use base64::Engine as _;
use tokio::sync::{Notify, mpsc};
use tonic::Code;
use tonic::transport::Channel;

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

fn text(t: &str) -> Message {
    Message {
        role: "user".into(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart { text: t.into() })),
        }],
    }
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

async fn create(c: &mut Clients, harness: &str) -> String {
    c.sessions
        .create_session(CreateSessionRequest {
            session: Some(Session {
                harness: harness.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .metadata
        .unwrap()
        .uid
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

fn rows(w: &World) -> Vec<Row> {
    use Code::*;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let unknown = "sess-000000000000000000000000";
    let (e, p, h) = (w.echo.as_str(), w.parked.as_str(), w.held.as_str());
    let (x, t, q) = (w.exec_id.as_str(), w.call_id.as_str(), w.request_seq);
    let mut out = vec![
        // CreateSession
        row(
            "create: unknown harness",
            InvalidArgument,
            Call::Create(CreateSessionRequest {
                session: Some(Session {
                    harness: "nope".into(),
                    ..Default::default()
                }),
            }),
        ),
        row(
            "create: harness name in the wrong case",
            InvalidArgument,
            Call::Create(CreateSessionRequest {
                session: Some(Session {
                    harness: "ECHO".into(),
                    ..Default::default()
                }),
            }),
        ),
        row(
            "create: retired registered harness",
            FailedPrecondition,
            Call::Create(CreateSessionRequest {
                session: Some(Session {
                    harness: "old".into(),
                    ..Default::default()
                }),
            }),
        ),
        // GetSession
        row(
            "get: empty uid",
            InvalidArgument,
            Call::Get(GetSessionRequest { uid: String::new() }),
        ),
        row(
            "get: unknown uid",
            NotFound,
            Call::Get(GetSessionRequest {
                uid: unknown.into(),
            }),
        ),
        // ListSessions
        row(
            "list: token is not base64",
            InvalidArgument,
            Call::List(ListSessionsRequest {
                page_token: "not a token!".into(),
                ..Default::default()
            }),
        ),
        row(
            "list: token without a separator",
            InvalidArgument,
            Call::List(ListSessionsRequest {
                page_token: b64("12345"),
                ..Default::default()
            }),
        ),
        row(
            "list: token with a non-numeric time",
            InvalidArgument,
            Call::List(ListSessionsRequest {
                page_token: b64("yesterday\0sess-1"),
                ..Default::default()
            }),
        ),
        // DeleteSession and Cancel are declared but not implemented.
        row(
            "delete: existing session",
            Unimplemented,
            Call::Delete(DeleteSessionRequest { uid: e.into() }),
        ),
        row(
            "delete: empty uid",
            Unimplemented,
            Call::Delete(DeleteSessionRequest { uid: String::new() }),
        ),
        row(
            "cancel: held turn",
            Unimplemented,
            Call::Cancel(CancelRequest {
                session: h.into(),
                execution_id: "x".into(),
                reason: "stop".into(),
            }),
        ),
        row(
            "cancel: empty",
            Unimplemented,
            Call::Cancel(CancelRequest::default()),
        ),
        // Exec
        row(
            "exec: unknown session",
            NotFound,
            Call::Exec(exec(unknown, Some("x"))),
        ),
        row(
            "exec: auto-create on an unknown harness",
            InvalidArgument,
            Call::Exec(ExecRequest {
                harness: "nope".into(),
                ..exec("", Some("x"))
            }),
        ),
        row(
            "exec: auto-create on a retired harness",
            FailedPrecondition,
            Call::Exec(ExecRequest {
                harness: "old".into(),
                ..exec("", Some("x"))
            }),
        ),
        row(
            "exec: override onto an unknown harness",
            InvalidArgument,
            Call::Exec(ExecRequest {
                harness: "nope".into(),
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: static session overridden onto a registered harness",
            FailedPrecondition,
            Call::Exec(ExecRequest {
                harness: "reg".into(),
                ..exec(e, Some("x"))
            }),
        ),
        cas_row(
            "exec: stale expected_last_seq",
            Call::Exec(ExecRequest {
                expected_last_seq: Some(3),
                ..exec(e, Some("x"))
            }),
        ),
        cas_row(
            "exec: expected_last_seq past the head",
            Call::Exec(ExecRequest {
                expected_last_seq: Some(99),
                ..exec(e, Some("x"))
            }),
        ),
        cas_row(
            "exec: explicit expected_last_seq 0 on a non-empty session",
            Call::Exec(ExecRequest {
                expected_last_seq: Some(0),
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: deadline already past",
            DeadlineExceeded,
            Call::Exec(ExecRequest {
                deadline_unix: 1,
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: new input while an approval is pending",
            FailedPrecondition,
            Call::Exec(exec(p, Some("x"))),
        ),
        row(
            "exec: overlaps a held turn",
            Aborted,
            Call::Exec(exec(h, Some("x"))),
        ),
        row(
            "exec: recovery overlaps a held turn",
            Aborted,
            Call::Exec(exec(h, None)),
        ),
        // Approve
        row(
            "approve: empty session",
            InvalidArgument,
            approve("", x, t, q, Some(true)),
        ),
        row(
            "approve: empty execution id",
            InvalidArgument,
            approve(p, "", t, q, Some(true)),
        ),
        row(
            "approve: empty tool call id",
            InvalidArgument,
            approve(p, x, "", q, Some(true)),
        ),
        row(
            "approve: request_seq 0",
            InvalidArgument,
            approve(p, x, t, 0, Some(true)),
        ),
        row(
            "approve: negative request_seq",
            InvalidArgument,
            approve(p, x, t, -4, Some(true)),
        ),
        row(
            "approve: approved absent",
            InvalidArgument,
            approve(p, x, t, q, None),
        ),
        row(
            "approve: unknown session",
            NotFound,
            approve(unknown, x, t, q, Some(true)),
        ),
        row(
            "approve: wrong execution id",
            FailedPrecondition,
            approve(p, "0000000000000000", t, q, Some(true)),
        ),
        row(
            "approve: wrong tool call id",
            FailedPrecondition,
            approve(p, x, "no-such-call", q, Some(true)),
        ),
        row(
            "approve: wrong request_seq",
            FailedPrecondition,
            approve(p, x, t, q + 1, Some(true)),
        ),
        row(
            "approve: session without approvals",
            FailedPrecondition,
            approve(e, x, t, q, Some(false)),
        ),
        row(
            "approve: overlaps a held turn",
            Aborted,
            approve(h, x, t, q, Some(true)),
        ),
        // Suspend and Resume
        row(
            "suspend: empty session",
            InvalidArgument,
            Call::Suspend(SuspendRequest::default()),
        ),
        row(
            "suspend: unknown session",
            NotFound,
            Call::Suspend(SuspendRequest {
                session: unknown.into(),
            }),
        ),
        row(
            "suspend: overlaps a held turn",
            Aborted,
            Call::Suspend(SuspendRequest { session: h.into() }),
        ),
        row(
            "resume: empty session",
            InvalidArgument,
            Call::Resume(ResumeRequest::default()),
        ),
        row(
            "resume: unknown session",
            NotFound,
            Call::Resume(ResumeRequest {
                session: unknown.into(),
                ..Default::default()
            }),
        ),
        row(
            "resume: overlaps a held turn",
            Aborted,
            Call::Resume(ResumeRequest {
                session: h.into(),
                ..Default::default()
            }),
        ),
        // Fork
        row(
            "fork: identity set (empty message)",
            InvalidArgument,
            Call::Fork(ForkRequest {
                identity: Some(IdentityRef::default()),
                ..fork(e, 1)
            }),
        ),
        row(
            "fork: identity set on an unknown session",
            InvalidArgument,
            Call::Fork(ForkRequest {
                identity: Some(IdentityRef {
                    subject: "alice".into(),
                    ..IdentityRef::default()
                }),
                ..fork(unknown, 1)
            }),
        ),
        row(
            "fork: identity set on an empty session",
            InvalidArgument,
            Call::Fork(ForkRequest {
                identity: Some(IdentityRef::default()),
                ..fork("", 1)
            }),
        ),
        row(
            "fork: empty session",
            InvalidArgument,
            Call::Fork(fork("", 1)),
        ),
        row(
            "fork: unknown session",
            NotFound,
            Call::Fork(fork(unknown, 1)),
        ),
        row("fork: count 129", InvalidArgument, Call::Fork(fork(e, 129))),
        row(
            "fork: count i32::MAX",
            InvalidArgument,
            Call::Fork(fork(e, i32::MAX)),
        ),
        row(
            "fork: more names than children",
            InvalidArgument,
            Call::Fork(ForkRequest {
                child_names: vec!["a".into(), "b".into()],
                ..fork(e, 1)
            }),
        ),
        row(
            "fork: fewer names than children",
            InvalidArgument,
            Call::Fork(ForkRequest {
                child_names: vec!["a".into()],
                ..fork(e, 3)
            }),
        ),
        row(
            "fork: count 0 means 1, so two names are too many",
            InvalidArgument,
            Call::Fork(ForkRequest {
                child_names: vec!["a".into(), "b".into()],
                ..fork(e, 0)
            }),
        ),
        // HarnessRegistry
        row(
            "register: empty name",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: String::new(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: uppercase name",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "Upper".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: 64-character name",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "a".repeat(64),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: name starting with a hyphen",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "-lead".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: static name",
            AlreadyExists,
            Call::Register(RegisterHarnessRequest {
                name: "echo".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: reserved name",
            AlreadyExists,
            Call::Register(RegisterHarnessRequest {
                name: "chat".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: no spec",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: None,
            }),
        ),
        row(
            "register: no placement",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    placement: None,
                    ..remote_spec("x")
                }),
            }),
        ),
        row(
            "register: empty remote address",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(remote_spec("")),
            }),
        ),
        row(
            "register: substrate without a template",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    placement: Some(Placement::Substrate(SubstratePlacement {
                        atespace: "a".into(),
                        template: String::new(),
                    })),
                    ..remote_spec("x")
                }),
            }),
        ),
        row(
            "register: no capabilities",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    capabilities: None,
                    ..remote_spec(&w.block_address)
                }),
            }),
        ),
        row(
            "register: resumability unspecified",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    capabilities: Some(Capabilities::default()),
                    ..remote_spec(&w.block_address)
                }),
            }),
        ),
        row(
            "register: canonical spec over 4096 bytes",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    descriptor_id: "d".repeat(5000),
                    ..remote_spec(&w.block_address)
                }),
            }),
        ),
        row(
            "register: a different spec under a registered name",
            AlreadyExists,
            Call::Register(RegisterHarnessRequest {
                name: "reg".into(),
                spec: Some(remote_spec("127.0.0.1:1")),
            }),
        ),
        row(
            "get harness: empty name",
            InvalidArgument,
            Call::GetHarness(GetHarnessRequest::default()),
        ),
        row(
            "get harness: unknown name",
            NotFound,
            Call::GetHarness(GetHarnessRequest {
                name: "nope".into(),
                observe: true,
            }),
        ),
        row(
            "list harnesses: negative page size",
            InvalidArgument,
            Call::ListHarnesses(ListHarnessesRequest {
                page_size: -1,
                ..Default::default()
            }),
        ),
        row(
            "list harnesses: token is not base64",
            InvalidArgument,
            Call::ListHarnesses(ListHarnessesRequest {
                page_token: "%%%".into(),
                ..Default::default()
            }),
        ),
        row(
            "retire: empty name",
            InvalidArgument,
            Call::Retire(RetireHarnessRequest::default()),
        ),
        row(
            "retire: static built-in",
            FailedPrecondition,
            Call::Retire(RetireHarnessRequest {
                name: "echo".into(),
                reason: "no".into(),
            }),
        ),
        row(
            "retire: static approval harness",
            FailedPrecondition,
            Call::Retire(RetireHarnessRequest {
                name: "approval".into(),
                reason: "no".into(),
            }),
        ),
        row(
            "retire: unknown name",
            NotFound,
            Call::Retire(RetireHarnessRequest {
                name: "nope".into(),
                reason: "gone".into(),
            }),
        ),
        row(
            "retire: reason over 1024 bytes",
            InvalidArgument,
            Call::Retire(RetireHarnessRequest {
                name: "reg".into(),
                reason: "r".repeat(1025),
            }),
        ),
    ];
    // Replay validates nothing: these are empty OK streams, and they must
    // not create anything either.
    for (name, session) in [
        ("replay: empty session", ""),
        ("replay: unknown session", unknown),
    ] {
        out.push(row(
            name,
            Ok,
            Call::Replay(ReplayRequest {
                session: session.into(),
                ..Default::default()
            }),
        ));
    }
    out.push(row(
        "replay: from past the head",
        Ok,
        Call::Replay(ReplayRequest {
            session: e.into(),
            from_seq: 50,
            to_seq: 0,
        }),
    ));
    out
}

fn config(dir: &std::path::Path) -> DaemonConfig {
    DaemonConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        registry_addr: Some("127.0.0.1:0".parse().unwrap()),
        journal: dir.join("journal.db"),
        project: "default".into(),
        model: String::new(),
        model_base_url: None,
        model_path: None,
        model_auth_header: "Authorization".into(),
        model_api_key: None,
        harnesses: Vec::new(),
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
    let echo = create(&mut c, "echo").await;
    perform(&mut c, Call::Exec(exec(&echo, Some("hi"))))
        .await
        .expect("the echo turn completes");

    // A session parked on an approval.
    let parked = create(&mut c, "approval").await;
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
    let held = create(&mut c, "block").await;
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
