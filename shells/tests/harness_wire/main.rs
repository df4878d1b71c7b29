//! The harness adapter driven by a real tonic client, over loopback TCP and
//! over a unix socket: the Connect exchange of every built-in harness, the
//! sink's correlation and receipt rules, the approval park, cancellation,
//! and the unix socket's lock rules. Approval and tool-call rules are in
//! `approval.rs`.

mod approval;

use std::sync::Arc;
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::grpc::harness_client::HarnessClient;
use agentsessions_proto::v1::{
    Cancel, ControllerFrame, DescribeRequest, Event, EventKind, HarnessDescriptor, Mediation,
    Message, ModelResult, Resumability, Start, ToolCall, ToolResult, controller_frame::Frame,
    event::Body,
};
use agentsessions_shells::harness::builtin::{self, CONFIG_NOT_OBJECT, PROMPT_NOT_STRING};
use agentsessions_shells::harness::serve::{ListenAddr, Listener, ServeError};
use agentsessions_shells::harness::{Harness, HarnessError, HarnessService, Sink, StartInfo};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code as Grpc, Streaming};

const EXEC: &str = "exec-1";
const SESSION: &str = "sess-1";
const WAIT: Duration = Duration::from_secs(10);

/// A served harness and the way to stop it.
struct Served {
    addr: ListenAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Served {
    async fn start<H: Harness + ?Sized>(harness: Arc<H>, addr: ListenAddr) -> Self {
        let listener = Listener::bind(&addr).await.expect("bind");
        let addr = listener.local_addr().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(listener.serve(HarnessService::new(harness), async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn tcp<H: Harness + ?Sized>(harness: Arc<H>) -> Self {
        Self::start(harness, ListenAddr::Tcp("127.0.0.1:0".into())).await
    }

    async fn client(&self) -> HarnessClient<Channel> {
        let channel = match &self.addr {
            ListenAddr::Tcp(a) => Endpoint::from_shared(format!("http://{a}"))
                .unwrap()
                .connect()
                .await
                .expect("connect tcp"),
            ListenAddr::Unix(path) => {
                let path = path.clone();
                // The URI is a placeholder; the connector dials the socket.
                Endpoint::from_static("http://[::1]:1")
                    .connect_with_connector(tower::service_fn(move |_| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    }))
                    .await
                    .expect("connect unix")
            }
        };
        HarnessClient::new(channel)
    }

    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("server drains")
            .expect("server task")
            .expect("server ok");
    }
}

/// The host's end of one Connect stream.
struct Conn {
    tx: mpsc::Sender<ControllerFrame>,
    rx: Streaming<Event>,
}

fn frame(f: Frame) -> ControllerFrame {
    ControllerFrame {
        session: SESSION.into(),
        execution_id: EXEC.into(),
        frame: Some(f),
    }
}

fn start_with(inputs: Vec<Message>, history: Vec<Event>, config: &[u8]) -> Frame {
    Frame::Start(Start {
        config: config.to_vec(),
        history,
        inputs,
        identity: None,
        resume_from_seq: 0,
    })
}

fn user(text: &str) -> Message {
    events::text_message("user", text)
}

impl Conn {
    /// Opens a stream whose first frame is `first`.
    async fn open(client: &mut HarnessClient<Channel>, first: ControllerFrame) -> Self {
        let (tx, rx) = mpsc::channel(8);
        tx.send(first).await.unwrap();
        let rx = client
            .connect(ReceiverStream::new(rx))
            .await
            .expect("connect")
            .into_inner();
        Self { tx, rx }
    }

    async fn start(client: &mut HarnessClient<Channel>, inputs: Vec<Message>) -> Self {
        Self::open(client, frame(start_with(inputs, vec![], b""))).await
    }

    async fn send(&self, f: Frame) {
        self.tx.send(frame(f)).await.expect("send frame");
    }

    /// The next event; panics on a stream error or the end.
    async fn event(&mut self) -> Event {
        let ev = self.next().await.expect("stream error").expect("an event");
        assert_eq!(
            ev.execution_id, EXEC,
            "every event carries the execution id"
        );
        ev
    }

    async fn next(&mut self) -> Result<Option<Event>, tonic::Status> {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("harness answers in time")
    }

    /// Expects END with `state`; returns its description.
    async fn end(&mut self, state: &str) -> String {
        let ev = self.event().await;
        let Some(Body::End(end)) = ev.body else {
            panic!("want END {state}, got {ev:?}");
        };
        assert_eq!(ev.kind, EventKind::EventEnd as i32);
        assert_eq!(end.state, state);
        end.error.map(|e| e.description).unwrap_or_default()
    }

    /// Expects END FAILED followed by the failed stream status.
    async fn failed(&mut self) -> String {
        let description = self.end("FAILED").await;
        let status = self
            .next()
            .await
            .expect_err("stream fails after END FAILED");
        assert_eq!(status.code(), Grpc::Unknown);
        description
    }

    /// Expects the clean end of the stream.
    async fn closed(&mut self) {
        assert_eq!(self.next().await.expect("clean close"), None);
    }

    async fn model_call(&mut self) -> agentsessions_proto::v1::ModelCall {
        let ev = self.event().await;
        assert_eq!(ev.kind, EventKind::EventModelCall as i32);
        let Some(Body::Model(call)) = ev.body else {
            panic!("want MODEL_CALL, got {ev:?}");
        };
        call
    }

    async fn tool_call(&mut self) -> ToolCall {
        let ev = self.event().await;
        assert_eq!(ev.kind, EventKind::EventToolCall as i32);
        let Some(Body::Tool(call)) = ev.body else {
            panic!("want TOOL_CALL, got {ev:?}");
        };
        call
    }

    async fn output(&mut self) -> String {
        let ev = self.event().await;
        assert_eq!(ev.kind, EventKind::EventOutput as i32);
        let Some(Body::Message(m)) = ev.body else {
            panic!("want OUTPUT, got {ev:?}");
        };
        assert_eq!(m.role, "assistant");
        events::message_text(&m)
    }
}

fn reply(call_id: &str, text: &str) -> Frame {
    Frame::Model(ModelResult {
        message: Some(events::assistant_text(text)),
        usage: None,
        model_call_id: call_id.into(),
    })
}

async fn echo_exchange(served: &Served) {
    let mut client = served.client().await;
    let mut conn = Conn::start(&mut client, vec![user("first"), user("hello")]).await;
    let call = conn.model_call().await;
    assert_eq!(call.model, "echo");
    assert_eq!(call.messages, vec![user("hello")], "only the last input");
    assert!(call.params.is_empty() && call.tools.is_empty() && call.tool_choice.is_none());
    assert!(call.input_hash.is_empty(), "the host computes the hash");
    assert_eq!(call.id.len(), 16);
    assert!(call.id.bytes().all(|b| b.is_ascii_hexdigit()));
    conn.send(reply(&call.id, "echo:hello")).await;
    conn.end("COMPLETED").await;
    conn.closed().await;
}

#[tokio::test]
async fn echo_exchange_over_tcp() {
    let served = Served::tcp(Arc::new(builtin::Echo)).await;
    echo_exchange(&served).await;
    // Fresh correlation ids per call.
    let mut client = served.client().await;
    let mut a = Conn::start(&mut client, vec![user("x")]).await;
    let mut b = Conn::start(&mut client, vec![user("x")]).await;
    assert_ne!(a.model_call().await.id, b.model_call().await.id);
    // Graceful shutdown waits for open streams; the host abandons these.
    drop((a, b));
    served.shutdown().await;
}

#[tokio::test]
async fn echo_exchange_over_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sock");
    let served = Served::start(Arc::new(builtin::Echo), ListenAddr::Unix(path.clone())).await;
    echo_exchange(&served).await;
    served.shutdown().await;
    assert!(!path.exists(), "the socket is removed on shutdown");
}

#[tokio::test]
async fn first_frame_must_be_start_with_an_execution_id() {
    let served = Served::tcp(Arc::new(builtin::Echo)).await;
    let mut client = served.client().await;

    let mut conn = Conn::open(&mut client, frame(reply("x", "y"))).await;
    let status = conn.next().await.expect_err("refused");
    assert_eq!(status.code(), Grpc::InvalidArgument);

    let mut no_id = frame(start_with(vec![user("hi")], vec![], b""));
    no_id.execution_id.clear();
    let mut conn = Conn::open(&mut client, no_id).await;
    let status = conn.next().await.expect_err("refused");
    assert_eq!(status.code(), Grpc::InvalidArgument);
    served.shutdown().await;
}

#[tokio::test]
async fn model_reply_correlation_is_checked() {
    let served = Served::tcp(Arc::new(builtin::Echo)).await;
    let mut client = served.client().await;

    let mut conn = Conn::start(&mut client, vec![user("hi")]).await;
    conn.model_call().await;
    conn.send(reply("0000000000000000", "echo:hi")).await;
    assert!(conn.failed().await.contains("correlation mismatch"));

    // A reply addressed to another execution.
    let mut conn = Conn::start(&mut client, vec![user("hi")]).await;
    let call = conn.model_call().await;
    let mut other = frame(reply(&call.id, "echo:hi"));
    other.execution_id = "exec-2".into();
    conn.tx.send(other).await.unwrap();
    assert!(conn.failed().await.contains("another execution"));

    // A frame of the wrong kind.
    let mut conn = Conn::start(&mut client, vec![user("hi")]).await;
    conn.model_call().await;
    conn.send(Frame::Tool(ToolResult::default())).await;
    assert!(conn.failed().await.contains("expected a model result"));
    served.shutdown().await;
}

#[tokio::test]
async fn cancel_frame_ends_the_run_canceled() {
    let served = Served::tcp(Arc::new(builtin::Echo)).await;
    let mut client = served.client().await;
    let mut conn = Conn::start(&mut client, vec![user("hi")]).await;
    conn.model_call().await;
    conn.send(Frame::Cancel(Cancel {
        reason: "user left".into(),
    }))
    .await;
    assert_eq!(conn.end("CANCELED").await, "user left");
    let status = conn.next().await.expect_err("canceled status");
    assert_eq!(status.code(), Grpc::Cancelled);
    served.shutdown().await;
}

/// Makes one model call and reports how it ended.
struct Probe {
    seen: std::sync::Mutex<Option<oneshot::Sender<HarnessError>>>,
}

#[tonic::async_trait]
impl Harness for Probe {
    fn describe(&self) -> HarnessDescriptor {
        HarnessDescriptor {
            id: "probe".into(),
            ..HarnessDescriptor::default()
        }
    }

    async fn run(&self, _start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let req = agentsessions_shells::harness::ModelRequest::new("m", vec![user("q")]);
        let err = sink.model(req).await.expect_err("the host goes away");
        // Sticky: the next call fails the same way without sending.
        assert_eq!(sink.output("late").await, Err(err.clone()));
        if let Some(tx) = self.seen.lock().unwrap().take() {
            let _ = tx.send(err.clone());
        }
        Err(err)
    }
}

#[tokio::test]
async fn host_closing_the_stream_fails_pending_sink_calls() {
    let (tx, seen) = oneshot::channel();
    let served = Served::tcp(Arc::new(Probe {
        seen: std::sync::Mutex::new(Some(tx)),
    }))
    .await;
    let mut client = served.client().await;
    let mut conn = Conn::start(&mut client, vec![]).await;
    conn.model_call().await;
    // Half-close: the harness still waits for a reply that cannot come.
    let (closed, _) = mpsc::channel(1);
    drop(std::mem::replace(&mut conn.tx, closed));
    let err = tokio::time::timeout(WAIT, seen).await.unwrap().unwrap();
    assert_eq!(err, HarnessError::Closed);
    assert_eq!(conn.end("FAILED").await, "stream closed");
    served.shutdown().await;
}

#[tokio::test]
async fn counter_counts_across_runs_of_one_service() {
    let served = Served::tcp(Arc::new(builtin::Counter::default())).await;
    let mut client = served.client().await;
    let history = vec![events::output("old", events::assistant_text("41"))];
    for (want, history) in [("1", vec![]), ("2", history)] {
        let first = frame(start_with(vec![user("tick")], history, b""));
        let mut conn = Conn::open(&mut client, first).await;
        assert_eq!(conn.output().await, want);
        conn.end("COMPLETED").await;
        conn.closed().await;
    }
    served.shutdown().await;
}

#[tokio::test]
async fn chat_config_errors_have_fixed_texts() {
    let served = Served::tcp(builtin::build("chat", "gpt-x").unwrap()).await;
    let mut client = served.client().await;
    for (config, want) in [
        (&br#"["secret"]"#[..], CONFIG_NOT_OBJECT),
        (b"secret", CONFIG_NOT_OBJECT),
        (br#"{"system_prompt": 5}"#, PROMPT_NOT_STRING),
        (br#"{"system_prompt": null}"#, PROMPT_NOT_STRING),
    ] {
        let first = frame(start_with(vec![user("hi")], vec![], config));
        let mut conn = Conn::open(&mut client, first).await;
        assert_eq!(conn.failed().await, want);
    }
    served.shutdown().await;
}

#[tokio::test]
async fn chat_sends_prompt_history_turns_and_inputs() {
    let served = Served::tcp(builtin::build("chat", "gpt-x").unwrap()).await;
    let mut client = served.client().await;
    let history = vec![
        events::input("e0", user("hi")),
        events::event(
            "e0",
            EventKind::EventModelCall,
            Body::Model(Default::default()),
        ),
        events::output("e0", events::assistant_text("hello")),
        events::event(
            "e0",
            EventKind::EventToolResult,
            Body::Message(events::text_message("tool", "not a turn")),
        ),
        events::end_completed("e0"),
    ];
    let config = br#"{"system_prompt": "be brief", "other": [1]}"#;
    let first = frame(start_with(
        vec![user("again"), user("again")],
        history,
        config,
    ));
    let mut conn = Conn::open(&mut client, first).await;
    let call = conn.model_call().await;
    assert_eq!(call.model, "gpt-x");
    assert_eq!(
        call.messages,
        vec![
            events::text_message("system", "be brief"),
            user("hi"),
            events::assistant_text("hello"),
            user("again"),
            user("again"),
        ]
    );
    conn.send(reply(&call.id, "sure")).await;
    conn.end("COMPLETED").await;
    served.shutdown().await;
}

#[tokio::test]
async fn describe_returns_the_descriptors() {
    let want = [
        ("echo", vec!["echo"], Resumability::StatelessReplay, true),
        (
            "counter",
            vec![],
            Resumability::RequiresMemorySnapshot,
            false,
        ),
        ("chat", vec!["gpt-x"], Resumability::StatelessReplay, true),
        ("approval", vec![], Resumability::StatelessReplay, true),
    ];
    for (kind, models, resumability, fork_safe) in want {
        let served = Served::tcp(builtin::build(kind, "gpt-x").unwrap()).await;
        let mut client = served.client().await;
        let d = client
            .describe(DescribeRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(d.id, kind);
        assert_eq!(d.version, "1");
        assert_eq!(d.models, models);
        let caps = d.capabilities.unwrap();
        assert_eq!(caps.resumability, resumability as i32, "{kind}");
        assert_eq!(caps.fork_safe, fork_safe, "{kind}");
        if kind == "approval" {
            assert_eq!(d.tools.len(), 1);
            assert_eq!(d.tools[0].mediation, Mediation::RequiresApproval as i32);
        }
        served.shutdown().await;
    }
    assert!(builtin::by_name("nope", "").is_none());
    assert!(builtin::by_name("chat", "").is_none(), "chat needs a model");
    assert!(builtin::build("Echo", "").is_err(), "no fuzzy matching");
}

#[tokio::test]
async fn unix_socket_lock_and_reclaim() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sock");
    let addr = ListenAddr::Unix(path.clone());

    // A stale socket (its listener is gone) is reclaimed.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let served = Served::start(Arc::new(builtin::Echo), addr.clone()).await;

    // A second instance on the same path fails while the first holds it.
    let err = Listener::bind(&addr).await.expect_err("locked");
    assert!(
        err.to_string().contains("held by another instance"),
        "{err}"
    );
    echo_exchange(&served).await;
    served.shutdown().await;

    // Free again once the first is gone.
    drop(Listener::bind(&addr).await.expect("rebind"));

    // Something that is not a socket is never deleted.
    let file = dir.path().join("f.sock");
    std::fs::write(&file, b"data").unwrap();
    let err = Listener::bind(&ListenAddr::Unix(file.clone()))
        .await
        .expect_err("not a socket");
    assert!(matches!(err, ServeError::NotASocket(_)), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"data");

    // A lock file that is a symlink or has another link is refused.
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("s.sock.lock")).unwrap();
    let err = Listener::bind(&ListenAddr::Unix(dir.path().join("s.sock")))
        .await
        .expect_err("symlink");
    assert!(err.to_string().contains("symlink"), "{err}");
    std::fs::hard_link(&target, dir.path().join("l.sock.lock")).unwrap();
    let err = Listener::bind(&ListenAddr::Unix(dir.path().join("l.sock")))
        .await
        .expect_err("hard link");
    assert!(err.to_string().contains("hard links"), "{err}");
}

#[test]
fn listen_addresses() {
    let parse = |s: &str| s.parse::<ListenAddr>();
    assert_eq!(parse(":80").unwrap(), ListenAddr::Tcp("0.0.0.0:80".into()));
    assert_eq!(
        parse("127.0.0.1:0").unwrap(),
        ListenAddr::Tcp("127.0.0.1:0".into())
    );
    assert_eq!(parse("[::1]:9").unwrap(), ListenAddr::Tcp("[::1]:9".into()));
    assert_eq!(
        parse("unix:///run/h.sock").unwrap(),
        ListenAddr::Unix("/run/h.sock".into())
    );
    assert_eq!(
        parse("unix:h.sock").unwrap(),
        ListenAddr::Unix("h.sock".into())
    );
    assert_eq!(
        parse("unix:///run/h.sock").unwrap().to_string(),
        "unix:///run/h.sock"
    );
    assert_eq!(parse("unix:h.sock").unwrap().to_string(), "unix:h.sock");
    for bad in [
        "",
        "unix:",
        "unix://",
        "localhost",
        "host:",
        "host:http",
        ":99999",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}
