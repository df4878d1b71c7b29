//! A typed client for the agentsessions `Sessions` service: sessions,
//! turns ([`Turn`]: records, output, pending approval), replay, fork, and
//! decisions that resume ([`Client::approve`]), with typed errors and
//! retries only where they are safe ([`Retry`]).
//!
//! Invariant: no call that may have changed a session is sent twice
//! unless the server would refuse the repeat (see `retry.rs`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), agentsessions_client::ClientError> {
//! use agentsessions_client::{Client, Options};
//! let mut c = Client::connect("127.0.0.1:8080", Options::default()).await?;
//! let s = c.create("approval", "demo").await?;
//! let turn = c.exec_text(&s.metadata.unwrap().uid, "remember milk").await?;
//! if let Some(pending) = turn.pending().cloned() {
//!     let (_decision, resumed) = c.approve(&turn.session, &pending, true, "ok").await?;
//!     println!("{}", resumed.output());
//! }
//! # Ok(()) }
//! ```

mod decide;
mod error;
mod retry;
mod turn;

use std::time::Duration;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApprovalRef, ApproveRequest, ApproveResponse, CancelRequest, CreateSessionRequest,
    DeleteSessionRequest, ExecRequest, ExecUpdate, ForkRequest, GetSessionRequest,
    ListSessionsRequest, LogRecord, Message, Part, ReplayRequest, ResourceMetadata, ResumeRequest,
    Session, SuspendRequest, TextPart, part,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig};

pub use decide::{DecideCalls, Decided, decide};
pub use error::ClientError;
pub use retry::Retry;
pub use turn::Turn;

/// A channel whose calls carry the bearer credential.
pub type Conn = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <token>` to each call (nothing without a
/// token).
#[derive(Debug, Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// The credential for `token` (none for `None` or "").
    pub fn new(token: Option<&str>) -> Result<Self, ClientError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(Self(None));
        };
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| ClientError::BadToken)?;
        Ok(Self(Some(value)))
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// How to reach a server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Bearer token (API key or JWT).
    pub token: Option<String>,
    /// TLS settings; `None` for plaintext (an `https://` address with no
    /// settings verifies against the bundled web roots).
    pub tls: Option<ClientTlsConfig>,
    /// How long dialing may take (default 10 s).
    pub connect_timeout: Option<Duration>,
    /// The retry policy (default [`Retry::default`]).
    pub retry: Option<Retry>,
}

/// A Sessions client.
#[derive(Debug, Clone)]
pub struct Client {
    sessions: SessionsClient<Conn>,
    retry: Retry,
}

impl Client {
    /// Dials `addr` (`host:port`, `http://…` or `https://…`).
    pub async fn connect(addr: &str, options: Options) -> Result<Self, ClientError> {
        let tls = match (&options.tls, addr.starts_with("https://")) {
            (Some(t), _) => Some(t.clone()),
            (None, true) => Some(ClientTlsConfig::new().with_webpki_roots()),
            (None, false) => None,
        };
        let uri = match (addr.contains("://"), tls.is_some()) {
            (true, _) => addr.to_owned(),
            (false, true) => format!("https://{addr}"),
            (false, false) => format!("http://{addr}"),
        };
        let malformed = |_| ClientError::BadAddress(addr.to_owned());
        let mut endpoint = Channel::from_shared(uri)
            .map_err(malformed)?
            .connect_timeout(options.connect_timeout.unwrap_or(Duration::from_secs(10)));
        if let Some(tls) = tls {
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|_| ClientError::BadAddress(addr.to_owned()))?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ClientError::rpc("connect")(tonic::Status::unavailable(e.to_string())))?;
        let mut c = Self::from_channel(channel, options.token.as_deref())?;
        c.retry = options.retry.unwrap_or_default();
        Ok(c)
    }

    /// A client over a channel the caller dialed.
    pub fn from_channel(channel: Channel, token: Option<&str>) -> Result<Self, ClientError> {
        Ok(Self {
            sessions: SessionsClient::with_interceptor(channel, Bearer::new(token)?),
            retry: Retry::default(),
        })
    }

    /// A client over a stub the caller made (its interceptor carries the
    /// credential).
    pub fn from_stub(sessions: SessionsClient<Conn>) -> Self {
        Self {
            sessions,
            retry: Retry::default(),
        }
    }

    /// The same client with another retry policy.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The generated stub, for calls this type does not wrap.
    pub fn raw(&mut self) -> &mut SessionsClient<Conn> {
        &mut self.sessions
    }

    /// Runs `call` until it succeeds, fails for good, or the attempts run
    /// out. Only for calls that change nothing, or that the server refuses
    /// to repeat.
    async fn retrying<T, F, Fut>(&mut self, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(SessionsClient<Conn>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut n = 1;
        loop {
            match call(self.sessions.clone()).await {
                Err(e) if retry::transient(e.code()) && n < self.retry.attempts => {
                    n += 1;
                    tokio::time::sleep(self.retry.backoff(n)).await;
                }
                done => return done,
            }
        }
    }

    /// Creates a session on `harness` (empty: the server's default).
    pub async fn create(&mut self, harness: &str, name: &str) -> Result<Session, ClientError> {
        let session = Session {
            metadata: Some(ResourceMetadata {
                name: name.to_owned(),
                ..Default::default()
            }),
            harness: harness.to_owned(),
            ..Default::default()
        };
        self.create_session(session).await
    }

    /// Creates `session` as given (project, labels, model …). Not retried:
    /// a lost answer could leave a session behind.
    pub async fn create_session(&mut self, session: Session) -> Result<Session, ClientError> {
        let request = CreateSessionRequest {
            session: Some(session),
        };
        let reply = self.sessions.create_session(request).await;
        Ok(reply
            .map_err(ClientError::rpc("CreateSession"))?
            .into_inner())
    }

    /// The session `uid`.
    pub async fn get(&mut self, uid: &str) -> Result<Session, ClientError> {
        self.retrying(|mut c| async move {
            let request = GetSessionRequest {
                uid: uid.to_owned(),
            };
            let reply = c.get_session(request).await;
            Ok(reply.map_err(ClientError::rpc("GetSession"))?.into_inner())
        })
        .await
    }

    /// Every session of `project` ("" for every project the caller may
    /// read), all pages.
    pub async fn list(&mut self, project: &str) -> Result<Vec<Session>, ClientError> {
        let mut all = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .retrying(|mut c| {
                    let request = ListSessionsRequest {
                        project: project.to_owned(),
                        page_size: 0,
                        page_token: token.clone(),
                    };
                    async move {
                        let reply = c.list_sessions(request).await;
                        Ok(reply
                            .map_err(ClientError::rpc("ListSessions"))?
                            .into_inner())
                    }
                })
                .await?;
            all.extend(page.sessions);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            token = page.next_page_token;
        }
    }

    /// One turn with a user message `text`.
    pub async fn exec_text(&mut self, uid: &str, text: &str) -> Result<Turn, ClientError> {
        self.exec(ExecRequest {
            session: uid.to_owned(),
            inputs: vec![user_text(text)],
            ..Default::default()
        })
        .await
    }

    /// One turn, gathered: its records and the session it left. Retried
    /// only when it carries `expected_last_seq` and failed before the
    /// server sent anything: the server refuses a repeat once the head
    /// moved.
    pub async fn exec(&mut self, request: ExecRequest) -> Result<Turn, ClientError> {
        let safe = request.expected_last_seq.is_some();
        let mut n = 1;
        loop {
            let mut turn = Turn::default();
            let mut got = false;
            let result = async {
                let mut stream = self.exec_stream(request.clone()).await?;
                while let Some(u) = stream.message().await.map_err(ClientError::rpc("Exec"))? {
                    got = true;
                    turn.take(u);
                }
                Ok::<_, ClientError>(())
            }
            .await;
            match result {
                // The stream's Session frame comes first (and again after a
                // park); a turn that ran on is read back as it ended.
                Ok(()) if turn.session.last_seq < turn.records.last().map_or(0, |r| r.seq) => {
                    let uid = turn
                        .session
                        .metadata
                        .as_ref()
                        .map_or_else(|| request.session.clone(), |m| m.uid.clone());
                    turn.session = self.get(&uid).await?;
                    return Ok(turn);
                }
                Ok(()) => return Ok(turn),
                Err(e) if safe && !got && retry::transient(e.code()) && n < self.retry.attempts => {
                    n += 1;
                    tokio::time::sleep(self.retry.backoff(n)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One turn as it streams: records, deltas, then the session.
    pub async fn exec_stream(
        &mut self,
        request: ExecRequest,
    ) -> Result<tonic::Streaming<ExecUpdate>, ClientError> {
        let reply = self.sessions.exec(request).await;
        Ok(reply.map_err(ClientError::rpc("Exec"))?.into_inner())
    }

    /// Records `from..=to` of `uid` (`to` 0: to the head). A stream cut
    /// short is picked up after the last record received.
    pub async fn replay(
        &mut self,
        uid: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<LogRecord>, ClientError> {
        let mut out: Vec<LogRecord> = Vec::new();
        let mut n = 1;
        loop {
            let next = out.last().map_or(from.max(1), |r| r.seq + 1);
            let request = ReplayRequest {
                session: uid.to_owned(),
                from_seq: next,
                to_seq: to,
            };
            let result = async {
                let reply = self.sessions.replay(request).await;
                let mut stream = reply.map_err(ClientError::rpc("Replay"))?.into_inner();
                while let Some(r) = stream.message().await.map_err(ClientError::rpc("Replay"))? {
                    out.push(r);
                }
                Ok::<_, ClientError>(())
            }
            .await;
            match result {
                Ok(()) => return Ok(out),
                Err(e) if retry::transient(e.code()) && n < self.retry.attempts => {
                    n += 1;
                    tokio::time::sleep(self.retry.backoff(n)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Forks `uid` at `at_seq` (0: the head) into `count` children.
    pub async fn fork(
        &mut self,
        uid: &str,
        at_seq: i64,
        count: i32,
    ) -> Result<Vec<Session>, ClientError> {
        let request = ForkRequest {
            session: uid.to_owned(),
            at_seq,
            count,
            ..Default::default()
        };
        let reply = self.sessions.fork(request).await;
        Ok(reply
            .map_err(ClientError::rpc("Fork"))?
            .into_inner()
            .children)
    }

    /// Suspends `uid`.
    pub async fn suspend(&mut self, uid: &str) -> Result<Session, ClientError> {
        let request = SuspendRequest {
            session: uid.to_owned(),
        };
        let reply = self.sessions.suspend(request).await;
        Ok(reply.map_err(ClientError::rpc("Suspend"))?.into_inner())
    }

    /// Resumes `uid`: finishes an interrupted turn or carries out a
    /// decided approval.
    #[allow(deprecated)] // `boot` is sent unset, as the contract asks
    pub async fn resume(&mut self, uid: &str) -> Result<Session, ClientError> {
        let request = ResumeRequest {
            session: uid.to_owned(),
            boot: false,
        };
        let reply = self.sessions.resume(request).await;
        Ok(reply.map_err(ClientError::rpc("Resume"))?.into_inner())
    }

    /// Cancels `uid`'s running or parked turn.
    pub async fn cancel(&mut self, uid: &str, reason: &str) -> Result<Session, ClientError> {
        let request = CancelRequest {
            session: uid.to_owned(),
            execution_id: String::new(),
            reason: reason.to_owned(),
        };
        let reply = self.sessions.cancel(request).await;
        Ok(reply.map_err(ClientError::rpc("Cancel"))?.into_inner())
    }

    /// Deletes `uid`.
    pub async fn delete(&mut self, uid: &str) -> Result<Session, ClientError> {
        let request = DeleteSessionRequest {
            uid: uid.to_owned(),
        };
        let reply = self.sessions.delete_session(request).await;
        Ok(reply
            .map_err(ClientError::rpc("DeleteSession"))?
            .into_inner())
    }

    /// Decides `pending` (approved or denied, with `reason`) and resumes the
    /// session: the committed APPROVAL_RESULT record and the resumed turn
    /// (the records after the decision, and the session now). A failed
    /// Resume is an error whose decision stands: resuming again finishes.
    pub async fn approve(
        &mut self,
        session: &Session,
        pending: &ApprovalRef,
        approved: bool,
        reason: &str,
    ) -> Result<(LogRecord, Turn), ClientError> {
        let uid = session.metadata.as_ref().map_or("", |m| m.uid.as_str());
        let request = ApproveRequest {
            session: uid.to_owned(),
            execution_id: pending.execution_id.clone(),
            tool_call_id: pending.tool_call_id.clone(),
            request_seq: pending.request_seq,
            approved: Some(approved),
            reason: reason.to_owned(),
            identity: None,
        };
        let decided = decide(self, request, true).await?;
        let after = decided.decided_at();
        let now = decided.resumed.expect("asked to resume")?;
        let records = if now.last_seq > after {
            self.replay(uid, after + 1, now.last_seq).await?
        } else {
            Vec::new()
        };
        let turn = Turn {
            records,
            session: now,
        };
        Ok((decided.decision, turn))
    }
}

impl DecideCalls for Client {
    type Error = ClientError;

    async fn approve(&mut self, request: ApproveRequest) -> Result<ApproveResponse, ClientError> {
        // An exact repeat answers the committed record, so a lost answer
        // may be asked again.
        self.retrying(|mut c| {
            let request = request.clone();
            async move {
                let reply = c.approve(request).await;
                Ok(reply.map_err(ClientError::rpc("Approve"))?.into_inner())
            }
        })
        .await
    }

    async fn resume(&mut self, session: &str) -> Result<Session, ClientError> {
        Client::resume(self, session).await
    }
}

/// A user message of one text part.
pub fn user_text(text: &str) -> Message {
    Message {
        role: "user".to_owned(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart {
                text: text.to_owned(),
            })),
        }],
    }
}
