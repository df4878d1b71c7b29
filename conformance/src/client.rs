//! A thin Sessions client for checks: every call returns what the host
//! said (records, frames, status), never panics, and is bounded in time so
//! a hung host fails a check instead of the suite.

use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    CreateSessionRequest, Delta, Event, EventKind, ExecRequest, ForkRequest, LogRecord, Message,
    ReplayRequest, ResumeRequest, Session, event::Body, exec_update::Update,
};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Upper bound of one call (a turn included).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A connected client.
pub type Client = SessionsClient<Channel>;

/// Connects to `addr`.
pub async fn connect(addr: std::net::SocketAddr) -> Result<Client, String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    Ok(SessionsClient::new(channel))
}

fn timed_out() -> Status {
    Status::deadline_exceeded("conformance: the host did not answer in time")
}

/// Everything one Exec stream carried.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    /// Committed records, in order.
    pub records: Vec<LogRecord>,
    /// Session frames.
    pub sessions: Vec<Session>,
    /// Ephemeral deltas.
    pub deltas: Vec<Delta>,
    /// How the stream ended.
    pub status: Option<Status>,
}

impl Turn {
    /// True when the stream ended OK.
    pub fn ok(&self) -> bool {
        self.status.is_none()
    }

    /// The status code the stream ended with (Ok for success).
    pub fn code(&self) -> Code {
        self.status.as_ref().map_or(Code::Ok, Status::code)
    }

    /// "OK" or the status, for messages.
    pub fn describe(&self) -> String {
        match &self.status {
            None => "OK".into(),
            Some(s) => format!("{:?}: {}", s.code(), s.message()),
        }
    }

    /// The last Session frame.
    pub fn last_session(&self) -> Option<&Session> {
        self.sessions.last()
    }
}

/// Options of one Exec.
#[derive(Debug, Clone, Default)]
pub struct ExecOpts {
    /// Per-turn harness override.
    pub harness: String,
    /// Opaque config.
    pub config: Vec<u8>,
    /// The harness cursor.
    pub resume_from_seq: i64,
    /// The CAS assertion.
    pub expected_last_seq: Option<i64>,
}

/// A user text message.
pub fn user(text: &str) -> Message {
    events::text_message("user", text)
}

/// Runs one Exec, collecting until the stream ends (or the time bound).
pub async fn exec(c: &mut Client, session: &str, inputs: &[&str], opts: ExecOpts) -> Turn {
    let req = ExecRequest {
        session: session.to_owned(),
        inputs: inputs.iter().map(|t| user(t)).collect(),
        resume_from_seq: opts.resume_from_seq,
        harness: opts.harness,
        config: opts.config,
        expected_last_seq: opts.expected_last_seq,
        deadline_unix: 0,
    };
    let mut turn = Turn::default();
    let run = async {
        let mut stream = match c.exec(req).await {
            Ok(s) => s.into_inner(),
            Err(s) => return Some(s),
        };
        loop {
            match stream.message().await {
                Ok(Some(u)) => match u.update {
                    Some(Update::Record(r)) => turn.records.push(r),
                    Some(Update::Session(s)) => turn.sessions.push(s),
                    Some(Update::Delta(d)) => turn.deltas.push(d),
                    None => {}
                },
                Ok(None) => return None,
                Err(s) => return Some(s),
            }
        }
    };
    turn.status = match tokio::time::timeout(CALL_TIMEOUT, run).await {
        Ok(status) => status,
        Err(_) => Some(timed_out()),
    };
    turn
}

/// Creates a session on `harness` and returns its uid.
pub async fn create(c: &mut Client, harness: &str) -> Result<String, Status> {
    let req = CreateSessionRequest {
        session: Some(Session {
            harness: harness.to_owned(),
            ..Session::default()
        }),
    };
    let s = tokio::time::timeout(CALL_TIMEOUT, c.create_session(req))
        .await
        .map_err(|_| timed_out())??
        .into_inner();
    s.metadata
        .map(|m| m.uid)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| Status::internal("conformance: CreateSession returned no uid"))
}

/// The whole journal of `session` through Replay.
pub async fn replay(c: &mut Client, session: &str) -> Result<Vec<LogRecord>, Status> {
    replay_range(c, session, 0, 0).await
}

/// Records `from..=to` (0 = from the start / to the head) through Replay.
pub async fn replay_range(
    c: &mut Client,
    session: &str,
    from_seq: i64,
    to_seq: i64,
) -> Result<Vec<LogRecord>, Status> {
    let req = ReplayRequest {
        session: session.to_owned(),
        from_seq,
        to_seq,
    };
    let run = async {
        let mut stream = c.replay(req).await?.into_inner();
        let mut out = Vec::new();
        while let Some(r) = stream.message().await? {
            out.push(r);
        }
        Ok(out)
    };
    tokio::time::timeout(CALL_TIMEOUT, run)
        .await
        .map_err(|_| timed_out())?
}

/// Sessions.Resume.
pub async fn resume(c: &mut Client, session: &str) -> Result<Session, Status> {
    #[allow(deprecated)]
    let req = ResumeRequest {
        session: session.to_owned(),
        boot: false,
    };
    Ok(tokio::time::timeout(CALL_TIMEOUT, c.resume(req))
        .await
        .map_err(|_| timed_out())??
        .into_inner())
}

/// Sessions.Fork; returns the children's uids.
pub async fn fork(
    c: &mut Client,
    session: &str,
    at_seq: i64,
    count: i32,
) -> Result<Vec<String>, Status> {
    let req = ForkRequest {
        session: session.to_owned(),
        at_seq,
        count,
        ..ForkRequest::default()
    };
    let r = tokio::time::timeout(CALL_TIMEOUT, c.fork(req))
        .await
        .map_err(|_| timed_out())??
        .into_inner();
    Ok(r.children
        .into_iter()
        .filter_map(|s| s.metadata.map(|m| m.uid))
        .collect())
}

/// The event of a record (an empty one if absent).
pub fn event(r: &LogRecord) -> Event {
    r.event.clone().unwrap_or_default()
}

/// The kind of a record.
pub fn kind(r: &LogRecord) -> EventKind {
    r.event
        .as_ref()
        .and_then(|e| EventKind::try_from(e.kind).ok())
        .unwrap_or(EventKind::Unspecified)
}

/// Kinds of records, in order.
pub fn kinds(records: &[LogRecord]) -> Vec<EventKind> {
    records.iter().map(kind).collect()
}

/// Short kind names ("INPUT", "END"), for messages.
pub fn kind_names(records: &[LogRecord]) -> String {
    records
        .iter()
        .map(|r| short_kind(kind(r)))
        .collect::<Vec<_>>()
        .join(",")
}

/// "EVENT_OUTPUT" → "OUTPUT".
pub fn short_kind(k: EventKind) -> &'static str {
    let name = k.as_str_name();
    name.strip_prefix("EVENT_").unwrap_or(name)
}

/// How many records are of `k`.
pub fn count(records: &[LogRecord], k: EventKind) -> usize {
    records.iter().filter(|r| kind(r) == k).count()
}

/// The texts of OUTPUT records.
pub fn outputs(records: &[LogRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|r| kind(r) == EventKind::EventOutput)
        .filter_map(|r| match r.event.as_ref().and_then(|e| e.body.as_ref()) {
            Some(Body::Message(m)) => Some(events::message_text(m)),
            _ => None,
        })
        .collect()
}

/// The END state of the last END record ("" if none).
pub fn end_state(records: &[LogRecord]) -> String {
    records
        .iter()
        .rev()
        .find_map(|r| match r.event.as_ref().and_then(|e| e.body.as_ref()) {
            Some(Body::End(end)) => Some(end.state.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Checks the chain: seqs from 1, links, and every content hash recomputed
/// with `machine::canon`.
pub fn verify(records: &[LogRecord]) -> Result<(), String> {
    agentsessions_machine::chain::verify(records).map_err(|e| format!("chain: {e}"))
}
