//! Helpers shared by the tests that drive a real daemon over gRPC.

#![allow(dead_code)]

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    CreateSessionRequest, LogRecord, Message, Part, ReplayRequest, Session, TextPart, part,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use tonic::transport::Channel;

/// A daemon on a free loopback port, journaling under `dir`, echo model.
pub fn config(dir: &std::path::Path) -> DaemonConfig {
    DaemonConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        registry_addr: None,
        journal: dir.join("journal.db"),
        project: "default".into(),
        models: Vec::new(),
        model_base_url: None,
        model_path: None,
        model_auth_header: "Authorization".into(),
        model_api_key: None,
        harnesses: Vec::new(),
        harness_timeouts: Default::default(),
        max_in_flight: agentsessions_machine::vocab::config::DEFAULT_MAX_IN_FLIGHT,
        retain_completed: None,
        ledger: None,
        retention_interval: agentsessions_shells::daemon::app::DEFAULT_RETENTION_INTERVAL,
        lease: None,
        security: Default::default(),
        metrics_addr: None,
        drive_loops: 1,
        console_addr: None,
        limits: Default::default(),
        tool_rules: Vec::new(),
        mcp: Vec::new(),
        mcp_config: Default::default(),
        session_token_budget: None,
        approvals: Default::default(),
        journal_cache_records: agentsessions_shells::daemon::log_cache::MAX_RECORDS,
    }
}

/// Serves `harness` over gRPC on a free loopback port until the returned
/// sender is dropped; returns its `host:port`.
pub async fn serve_harness<H: agentsessions_shells::harness::Harness + ?Sized>(
    harness: std::sync::Arc<H>,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    use agentsessions_shells::harness::HarnessService;
    use agentsessions_shells::harness::serve::{ListenAddr, Listener};
    let listener = Listener::bind(&ListenAddr::Tcp("127.0.0.1:0".into()))
        .await
        .unwrap();
    let ListenAddr::Tcp(peer) = listener.local_addr().clone() else {
        unreachable!("bound on TCP")
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener.serve(HarnessService::new(harness), async {
        let _ = stopped.await;
    }));
    (peer, stop)
}

/// A Sessions client connected to `daemon`.
pub async fn client(daemon: &Daemon) -> SessionsClient<Channel> {
    client_at(&daemon.addr.to_string()).await
}

/// A Sessions client connected to `host:port` in plaintext.
pub async fn client_at(addr: &str) -> SessionsClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    SessionsClient::new(channel)
}

/// A user message with one text part.
pub fn text(t: &str) -> Message {
    Message {
        role: "user".into(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart { text: t.into() })),
        }],
    }
}

/// Creates a session on `harness` ("" = the default) and returns its uid.
pub async fn create(c: &mut SessionsClient<Channel>, harness: &str) -> String {
    c.create_session(CreateSessionRequest {
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

/// Every committed record of `session`, via Sessions.Replay.
pub async fn replay(c: &mut SessionsClient<Channel>, session: &str) -> Vec<LogRecord> {
    let mut stream = c
        .replay(ReplayRequest {
            session: session.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        out.push(r);
    }
    out
}

/// The status an Exec stream ends with.
pub async fn exec_code(
    c: &mut SessionsClient<Channel>,
    req: agentsessions_proto::v1::ExecRequest,
) -> tonic::Code {
    let mut stream = match c.exec(req).await {
        Ok(s) => s.into_inner(),
        Err(s) => return s.code(),
    };
    loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => return tonic::Code::Ok,
            Err(s) => return s.code(),
        }
    }
}

/// `message` with `token` as its bearer credential.
pub fn authed<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// A user message whose one data part is a Struct nested `depth` levels
/// (`{"a":{"a":…}}`): each level is two messages on the wire (Struct,
/// Value), so 60 levels pass prost's limit of 100.
pub fn nested_data(depth: usize) -> Message {
    use agentsessions_proto::v1::DataPart;
    use pbjson_types::{Struct, Value, value::Kind};
    let mut s = Struct::default();
    for _ in 0..depth {
        let inner = Value {
            kind: Some(Kind::StructValue(s)),
        };
        s = Struct {
            fields: [("a".to_owned(), inner)].into(),
        };
    }
    Message {
        role: "user".into(),
        parts: vec![Part {
            part: Some(part::Part::Data(DataPart { data: Some(s) })),
        }],
    }
}

/// A session of the approval harness, created and run by `key` until it
/// parks on its gate; its uid.
pub async fn parked_as(c: &mut SessionsClient<Channel>, key: &str) -> String {
    use agentsessions_proto::v1::ExecRequest;
    let uid = c
        .create_session(authed(
            CreateSessionRequest {
                session: Some(Session {
                    harness: "approval".into(),
                    ..Default::default()
                }),
            },
            key,
        ))
        .await
        .unwrap()
        .into_inner()
        .metadata
        .unwrap()
        .uid;
    let mut turn = c
        .exec(authed(
            ExecRequest {
                session: uid.clone(),
                inputs: vec![text("remember milk")],
                ..Default::default()
            },
            key,
        ))
        .await
        .unwrap()
        .into_inner();
    while turn.message().await.unwrap().is_some() {}
    uid
}
