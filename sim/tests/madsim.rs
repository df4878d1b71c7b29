//! Seeded madsim runs of the real shells.
//!
//! Each seed builds a small cluster on madsim's simulated network: one or
//! two host nodes (the real `Driver` and `SessionsService` served by
//! madsim-tonic, over the memory journal), harness nodes serving the
//! built-in `echo` and `approval` harnesses through the shells' harness SDK,
//! and client nodes issuing Exec, Replay, Approve, Resume, Suspend, Cancel
//! and Fork against shared sessions. A fault task kills and restarts hosts (their
//! pending writes lost, possibly a prefix kept and the next append torn),
//! pauses a host so it comes back as a zombie behind a newer fence, kills
//! harnesses mid-stream, partitions links and raises latency. The oracle
//! of `sim/src/oracle.rs` judges every store answer, tool and model call,
//! frame to a harness and record shown to a client, and the whole durable
//! journal at the end.
//!
//! ```text
//! CARGO_TARGET_DIR=target/sim RUSTFLAGS="--cfg madsim" MADSIM_TEST_NUM=500 \
//!     cargo test -p agentsessions-sim --test madsim -- --nocapture
//! ```
//!
//! Every seed prints its trace digest; a seed that runs twice in one
//! process (`MADSIM_TEST_CHECK_DETERMINISM=1`) must print the same one, and
//! a seed run alone repeats what it did in a batch (checked by
//! `a_seed_alone_repeats_its_run_in_a_batch`).
#![cfg(madsim)]

#[path = "madsim_support/netstore.rs"]
mod netstore;
#[path = "madsim_support/ports.rs"]
mod ports;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsessions_machine::faults::{self, Fault};
use agentsessions_machine::host::Host;
use agentsessions_machine::vocab::{
    Backend, Caller, CountingIds, HostConfig, LeaseConfig, Request, Response, Route,
};
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::grpc::sessions_server::SessionsServer;
use agentsessions_proto::v1::{
    ApproveRequest, CancelRequest, CreateSessionRequest, DeleteSessionRequest, ExecRequest,
    ForkRequest, GetSessionRequest, LogRecord, Message, Part, ReplayRequest, ResumeRequest,
    Session, SuspendRequest, TextPart, exec_update::Update, part,
};
use agentsessions_shells::auth::{AuthFile, Authenticator};
use agentsessions_shells::daemon::driver::{Driver, Ports};
use agentsessions_shells::daemon::grpc::SessionsService;
use agentsessions_shells::daemon::harness_client::GrpcHarnesses;
use agentsessions_shells::daemon::remote::RemoteRuntime;
use agentsessions_shells::harness::{Harness, HarnessService, builtin};
use agentsessions_shells::journal::memory::{CrashCut, Durability};
use madsim::Config;
use madsim::net::NetSim;
use madsim::rand::{Rng, thread_rng};
use madsim::runtime::{Handle, NodeHandle, Runtime};
use madsim::time::{sleep, timeout};
use ports::{ObservedHarnesses, ObservedStore, Shared, SimModel, SimTools};
use sha2::Digest as _;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint, Server};

const HOST_PORT: u16 = 7000;
const HARNESS_PORT: u16 = 7100;
/// Bound on one client call, in virtual time (a call to a paused or
/// partitioned host must give up so the client goes on).
const CALL: Duration = Duration::from_secs(3);

fn host_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1 + i as u8))
}

/// Harness kinds and their nodes' addresses.
const KINDS: [&str; 3] = ["echo", "approval", "tools"];

fn harness_ip(kind: &str) -> IpAddr {
    let n = KINDS.iter().position(|k| *k == kind).expect("a known kind");
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1 + n as u8))
}

const STORE_PORT: u16 = 7200;

fn store_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 4, 1)), STORE_PORT)
}

/// Lease length of hosts on the store node (virtual time).
const LEASE: Duration = Duration::from_secs(2);

fn client_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 3, 1 + i as u8))
}

/// The routing table: both built-ins on their harness nodes.
/// The journal the hosts of a run share.
#[derive(Clone)]
enum Journal {
    /// Each host opens the memory disk in process (a crash loses what the
    /// host had pending).
    InProcess,
    /// One store node over the network; each host's clock is skewed by
    /// its entry (nanos), and hosts take leases.
    Node { skews: Vec<i64> },
}

/// How long an approval request may wait on the simulated hosts: about
/// as long as a client program takes to come back to a parked session.
const APPROVAL_EXPIRY_MS: u64 = 3_000;

fn host_config(i: usize, journal: &Journal) -> HostConfig {
    let mut c = HostConfig {
        describe_timeout_ms: 2_000,
        lease: match journal {
            Journal::InProcess => None,
            Journal::Node { .. } => Some(LeaseConfig::new(
                format!("host{i}"),
                LEASE.as_nanos() as i64,
            )),
        },
        ..HostConfig::default()
    };
    // Some parked turns outlive their wait, so the host's own denial races
    // the clients' decisions, crashes and partitions.
    c.tools.approval_expiry_ms = Some(APPROVAL_EXPIRY_MS);
    c.harnesses.clear();
    for kind in KINDS {
        c.harnesses.insert(
            kind.into(),
            Route {
                backend: Backend::Remote {
                    address: format!("http://{}:{HARNESS_PORT}", harness_ip(kind)),
                },
                descriptor_id: String::new(),
                registered: false,
                spec: None,
            },
        );
    }
    c
}

/// One run's nodes and what the fault task needs to know about them.
struct Cluster {
    shared: Arc<Shared>,
    hosts: Vec<NodeHandle>,
    /// Where the hosts' journal lives.
    journal: Journal,
    /// The store node, when the journal is one.
    store: Option<NodeHandle>,
    /// The journal writer of each host's current incarnation.
    writers: Arc<Mutex<Vec<u64>>>,
    harnesses: Vec<NodeHandle>,
    clients: Vec<NodeHandle>,
    /// Sessions created so far, shared by every client (so calls race).
    sessions: Arc<Mutex<Vec<String>>>,
}

fn host_node(
    i: usize,
    shared: &Arc<Shared>,
    writers: &Arc<Mutex<Vec<u64>>>,
    journal: &Journal,
) -> NodeHandle {
    let (shared, writers) = (Arc::clone(shared), Arc::clone(writers));
    let journal = journal.clone();
    // A process's incarnation number names its fences for the oracle and
    // keeps its ids apart from every other incarnation's.
    let incarnations = Arc::new(Mutex::new(0u64));
    Handle::current()
        .create_node()
        .name(format!("host{i}"))
        .ip(host_ip(i))
        .init(move || {
            let (shared, writers) = (Arc::clone(&shared), Arc::clone(&writers));
            let journal = journal.clone();
            let inc = {
                let mut n = incarnations.lock().unwrap();
                *n += 1;
                (i as u64 + 1) * 1_000 + *n
            };
            async move {
                shared.log(format!("host{i} up inc={inc}"));
                let config = host_config(i, &journal);
                let handle = match &journal {
                    Journal::InProcess => {
                        let latency = Duration::from_micros(thread_rng().gen_range(100..3_000));
                        let store = shared.disk.open(Durability::After(latency));
                        writers.lock().unwrap()[i] = store.writer();
                        start_host(&shared, inc, config, store)
                    }
                    Journal::Node { skews } => {
                        let store = netstore::NetStore::connect(store_addr(), skews[i]).await;
                        start_host(&shared, inc, config, store)
                    }
                };
                ports::lock(&shared.drivers).insert(i, handle.clone());
                let addr = SocketAddr::new(host_ip(i), HOST_PORT);
                Server::builder()
                    .add_service(SessionsServer::new(SessionsService::new(
                        handle,
                        authenticator(),
                    )))
                    .serve(addr)
                    .await
                    .expect("serve Sessions");
            }
        })
        .build()
}

/// One host incarnation's drive loop over `store`.
fn start_host<S: agentsessions_shells::journal::JournalStore + 'static>(
    shared: &Arc<Shared>,
    inc: u64,
    config: HostConfig,
    store: S,
) -> agentsessions_shells::daemon::driver::DriverHandle {
    let ports = Ports {
        store: Arc::new(ObservedStore {
            inner: store,
            inc,
            shared: Arc::clone(shared),
        }),
        harness: Arc::new(ObservedHarnesses {
            inner: GrpcHarnesses::default(),
            shared: Arc::clone(shared),
        }),
        runtime: Arc::new(RemoteRuntime),
        model: Arc::new(SimModel {
            inc,
            shared: Arc::clone(shared),
        }),
        tools: Arc::new(SimTools {
            inc,
            shared: Arc::clone(shared),
        }),
    };
    let host = Host::new(config, Box::new(CountingIds::starting_at(inc << 32)));
    let (driver, handle) = Driver::new(host, ports);
    tokio::spawn(driver.run());
    handle
}

/// The node serving the one store every host reaches over the network.
fn store_node(shared: &Arc<Shared>, writers: &Arc<Mutex<Vec<u64>>>) -> NodeHandle {
    let (shared, writers) = (Arc::clone(shared), Arc::clone(writers));
    Handle::current()
        .create_node()
        .name("store")
        .ip(store_addr().ip())
        .init(move || {
            let (shared, writers) = (Arc::clone(&shared), Arc::clone(&writers));
            async move {
                let latency = Duration::from_micros(thread_rng().gen_range(100..3_000));
                let store = shared.disk.open(Durability::After(latency));
                // Every host's writes are the store's: a host crash loses
                // none of them (the store keeps running).
                for w in writers.lock().unwrap().iter_mut() {
                    *w = store.writer();
                }
                netstore::serve(store_addr(), Arc::new(store)).await;
            }
        })
        .build()
}

fn harness_node<H: Harness>(kind: &'static str, harness: H) -> NodeHandle {
    let harness = Arc::new(harness);
    Handle::current()
        .create_node()
        .name(kind)
        .ip(harness_ip(kind))
        .init(move || {
            let service = HarnessService::new(Arc::clone(&harness));
            async move {
                Server::builder()
                    .add_service(service.into_server())
                    .serve(SocketAddr::new(harness_ip(kind), HARNESS_PORT))
                    .await
                    .expect("serve Harness");
            }
        })
        .build()
}

/// A Sessions client whose calls carry a bearer credential (madsim-tonic's
/// generated client takes the interceptor as a type parameter).
type Client = SessionsClient<Channel, Bearer>;

/// Adds `authorization: Bearer <key>`.
#[derive(Clone)]
struct Bearer(&'static str);

impl Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let value = format!("Bearer {}", self.0).parse().expect("ascii");
        r.metadata_mut().insert("authorization", value);
        Ok(r)
    }
}

/// The key of the clients' own principal, allowed everything but the
/// registry; [`INTRUDER_KEYS`] are refused what they try.
const OPS_KEY: &str = "ops-key";
/// (key, expected code) of the intruders: a reader, an admin of another
/// project, and a key nobody configured.
const INTRUDER_KEYS: [(&str, tonic::Code); 3] = [
    ("reader-key", tonic::Code::PermissionDenied),
    ("elsewhere-key", tonic::Code::PermissionDenied),
    ("forged-key", tonic::Code::Unauthenticated),
];

/// The hosts' `--auth` file (API keys only), built as the daemon builds it.
fn authenticator() -> Arc<Authenticator> {
    let key = |principal: &str, key: &str, roles: &str| {
        let digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
        format!("[[api_key]]\nprincipal = {principal:?}\nsha256 = {digest:?}\nroles = {roles}\n")
    };
    let text = [
        key("ops", OPS_KEY, r#"["*:writer", "*:approver"]"#),
        key("intruder-reader", "reader-key", r#"["*:reader"]"#),
        key("intruder-elsewhere", "elsewhere-key", r#"["other:admin"]"#),
    ]
    .concat();
    let file = AuthFile::parse(&text).expect("auth file");
    file.check().expect("auth file checks");
    Arc::new(Authenticator::from_file(&file).expect("authenticator"))
}

fn client(host: usize) -> Client {
    client_as(host, OPS_KEY)
}

fn client_as(host: usize, key: &'static str) -> Client {
    let uri = format!("http://{}:{HOST_PORT}", host_ip(host));
    let channel = Endpoint::from_shared(uri).expect("uri").connect_lazy();
    SessionsClient::with_interceptor(channel, Bearer(key))
}

/// An intruder's call on `sid`: refused with its expected code, or lost
/// to the network; anything else is a hole in the check.
async fn intrude(shared: &Shared, sid: &str, host: usize) -> String {
    let (key, want) = INTRUDER_KEYS[thread_rng().gen_range(0..INTRUDER_KEYS.len())];
    let mut c = client_as(host, key);
    let what = thread_rng().gen_range(0..6);
    let r: Result<(), tonic::Status> = match what {
        0 => {
            let pending = get(&mut client(host), sid)
                .await
                .ok()
                .and_then(|s| s.pending_approval);
            let p = pending.unwrap_or_default();
            bounded(c.approve(ApproveRequest {
                session: sid.into(),
                execution_id: p.execution_id,
                tool_call_id: p.tool_call_id,
                request_seq: p.request_seq.max(1),
                approved: Some(true),
                reason: String::new(),
                identity: None,
            }))
            .await
            .map(drop)
        }
        1 => {
            #[allow(deprecated)]
            let request = ResumeRequest {
                session: sid.into(),
                boot: false,
            };
            bounded(c.resume(request)).await.map(drop)
        }
        2 => bounded(c.delete_session(DeleteSessionRequest { uid: sid.into() }))
            .await
            .map(drop),
        3 => bounded(c.cancel(CancelRequest {
            session: sid.into(),
            ..CancelRequest::default()
        }))
        .await
        .map(drop),
        4 => bounded(c.fork(ForkRequest {
            session: sid.into(),
            count: 1,
            ..ForkRequest::default()
        }))
        .await
        .map(drop),
        _ => match bounded(c.exec(ExecRequest {
            session: sid.into(),
            inputs: vec![text("intruder".into())],
            ..ExecRequest::default()
        }))
        .await
        {
            Ok(mut stream) => match bounded(stream.get_mut().message()).await {
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
    };
    let got = r.as_ref().err().map(tonic::Status::code);
    let lost = matches!(
        got,
        Some(tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled)
    );
    if got != Some(want) && !lost {
        shared.check(|_, _| {
            Err(agentsessions_sim::oracle::violation(
                agentsessions_sim::oracle::Rule::Authorization,
                format!("{key} call {what} on {sid}: {}", code(&r)),
            ))
        });
    }
    format!("{key} {what} {}", code(&r))
}

fn text(t: String) -> Message {
    Message {
        role: "user".into(),
        parts: vec![Part {
            part: Some(part::Part::Text(TextPart { text: t })),
        }],
    }
}

fn uid(s: &Session) -> String {
    s.metadata
        .as_ref()
        .map(|m| m.uid.clone())
        .unwrap_or_default()
}

/// The outcome of a call for the trace: "ok…" or the status code.
fn code<T>(r: &Result<T, tonic::Status>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(s) => format!("{:?}", s.code()),
    }
}

/// Bounds a call by [`CALL`]; an expiry reads as DeadlineExceeded.
async fn bounded<T>(
    f: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    timeout(CALL, f)
        .await
        .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("client gave up")))
}

/// Shows `records` of `session` to a client: each must be durable.
fn acked(shared: &Shared, session: &str, records: &[LogRecord]) {
    for r in records {
        shared.check(|o, v| o.on_ack(v, session, r));
    }
}

async fn exec(shared: &Shared, c: &mut Client, sid: &str, input: String) -> String {
    let request = ExecRequest {
        session: sid.into(),
        inputs: vec![text(input)],
        ..ExecRequest::default()
    };
    let run = async {
        let mut stream = c.exec(request).await?.into_inner();
        let mut n = 0;
        while let Some(update) = stream.message().await? {
            if let Some(Update::Record(r)) = update.update {
                acked(shared, sid, std::slice::from_ref(&r));
                n += 1;
            }
        }
        Ok(n)
    };
    match bounded(run).await {
        Ok(n) => format!("ok {n} records"),
        Err(s) => format!("{:?}", s.code()),
    }
}

async fn replay(
    shared: &Shared,
    c: &mut Client,
    sid: &str,
) -> Result<Vec<LogRecord>, tonic::Status> {
    let request = ReplayRequest {
        session: sid.into(),
        ..ReplayRequest::default()
    };
    let records = bounded(async {
        let mut stream = c.replay(request).await?.into_inner();
        let mut out = Vec::new();
        while let Some(r) = stream.message().await? {
            out.push(r);
        }
        Ok(out)
    })
    .await?;
    acked(shared, sid, &records);
    Ok(records)
}

async fn get(c: &mut Client, sid: &str) -> Result<Session, tonic::Status> {
    bounded(c.get_session(GetSessionRequest { uid: sid.into() }))
        .await
        .map(tonic::Response::into_inner)
}

/// Approves (or denies) the session's pending request, sometimes twice.
async fn approve(shared: &Shared, c: &mut Client, sid: &str) -> String {
    let pending = match get(c, sid).await {
        Ok(s) => s.pending_approval,
        Err(s) => return format!("get {:?}", s.code()),
    };
    let Some(p) = pending else {
        return "nothing pending".into();
    };
    let approved = thread_rng().gen_bool(0.6);
    let mut out = String::new();
    // A second call: a duplicate must return the same decision, a
    // conflicting one must be refused; neither may run the tool again.
    let calls = if thread_rng().gen_bool(0.3) { 2 } else { 1 };
    for n in 0..calls {
        let decision = if n == 1 && thread_rng().gen_bool(0.5) {
            !approved
        } else {
            approved
        };
        let r = bounded(c.approve(ApproveRequest {
            session: sid.into(),
            execution_id: p.execution_id.clone(),
            tool_call_id: p.tool_call_id.clone(),
            request_seq: p.request_seq,
            approved: Some(decision),
            reason: String::new(),
            identity: None,
        }))
        .await
        .map(tonic::Response::into_inner);
        if let Ok(a) = &r
            && let Some(d) = &a.decision
        {
            acked(shared, sid, std::slice::from_ref(d));
        }
        out.push_str(&format!("{decision}:{} ", code(&r)));
    }
    out
}

/// One client's program: a few calls on random shared sessions.
async fn client_program(
    shared: Arc<Shared>,
    sessions: Arc<Mutex<Vec<String>>>,
    me: usize,
    hosts: usize,
    ops: usize,
) {
    // The session this client last worked on: staying on it half the time
    // lets a turn, its approval and its resume happen in one program while
    // the other client can still race on the same session.
    let mut focus: Option<String> = None;
    for n in 0..ops {
        let mut c = client(thread_rng().gen_range(0..hosts));
        let known: Vec<String> = sessions.lock().unwrap().clone();
        let pick = thread_rng().gen_range(0..100);
        let sid = match &focus {
            Some(s) if thread_rng().gen_bool(0.5) => s.clone(),
            _ if known.is_empty() => String::new(),
            _ => known[thread_rng().gen_range(0..known.len())].clone(),
        };
        if !sid.is_empty() {
            focus = Some(sid.clone());
        }
        let line = if known.is_empty() || pick < 8 {
            let harness = KINDS[thread_rng().gen_range(0..KINDS.len())];
            let r = bounded(c.create_session(CreateSessionRequest {
                session: Some(Session {
                    harness: harness.into(),
                    ..Session::default()
                }),
            }))
            .await;
            if let Ok(s) = &r {
                sessions.lock().unwrap().push(uid(s.get_ref()));
                focus = Some(uid(s.get_ref()));
            }
            format!("create {harness} {}", code(&r))
        } else if pick < 45 {
            format!(
                "exec {sid} {}",
                exec(&shared, &mut c, &sid, format!("c{me}-{n}")).await
            )
        } else if pick < 65 {
            let decided = approve(&shared, &mut c, &sid).await;
            // Usually the approver resumes at once (racing the other
            // client's calls on the session).
            let resumed = if thread_rng().gen_bool(0.7) {
                #[allow(deprecated)]
                let request = ResumeRequest {
                    session: sid.clone(),
                    boot: false,
                };
                let mut c = client(thread_rng().gen_range(0..hosts));
                format!(" resume {}", code(&bounded(c.resume(request)).await))
            } else {
                String::new()
            };
            format!("approve {sid} {decided}{resumed}")
        } else if pick < 77 {
            #[allow(deprecated)]
            let request = ResumeRequest {
                session: sid.clone(),
                boot: false,
            };
            format!("resume {sid} {}", code(&bounded(c.resume(request)).await))
        } else if pick < 85 {
            let r = bounded(c.suspend(SuspendRequest {
                session: sid.clone(),
            }))
            .await;
            format!("suspend {sid} {}", code(&r))
        } else if pick < 89 {
            // Often racing the other client's turn or approval on it.
            let r = bounded(c.cancel(CancelRequest {
                session: sid.clone(),
                execution_id: String::new(),
                reason: format!("c{me}"),
            }))
            .await;
            format!("cancel {sid} {}", code(&r))
        } else if pick < 95 {
            let at = match get(&mut c, &sid).await {
                Ok(s) if s.last_seq > 0 && thread_rng().gen_bool(0.5) => {
                    thread_rng().gen_range(1..=s.last_seq)
                }
                _ => 0,
            };
            let r = bounded(c.fork(ForkRequest {
                session: sid.clone(),
                at_seq: at,
                count: 1,
                ..ForkRequest::default()
            }))
            .await;
            if let Ok(f) = &r {
                let children: Vec<String> = f.get_ref().children.iter().map(uid).collect();
                // Work on the child next: an Approve there of a gate the
                // parent was waiting on must be refused (inherited).
                focus = children.first().cloned().or(focus);
                sessions.lock().unwrap().extend(children);
            }
            format!("fork {sid}@{at} {}", code(&r))
        } else if pick < 97 {
            // Usually refused (something in flight) or racing a turn on
            // another host; a deleted uid must stay gone.
            let r = bounded(c.delete_session(DeleteSessionRequest { uid: sid.clone() })).await;
            format!("delete {sid} {}", code(&r))
        } else if pick < 98 {
            let host = thread_rng().gen_range(0..hosts);
            format!("intrude {sid} {}", intrude(&shared, &sid, host).await)
        } else {
            let r = replay(&shared, &mut c, &sid).await;
            format!("replay {sid} {}", code(&r))
        };
        shared.log(format!("c{me}: {line}"));
    }
}

/// Injects one fault and heals it.
async fn fault(cl: &Cluster) {
    let h = Handle::current();
    let net = NetSim::current();
    let mut rng = thread_rng();
    let i = rng.gen_range(0..cl.hosts.len());
    if let Some(store) = &cl.store
        && rng.gen_bool(0.5)
    {
        return store_fault(cl, i, store.id()).await;
    }
    match rng.gen_range(0..6) {
        0 | 1 if cl.store.is_some() => {
            // The host process dies; the store it talked to does not, and
            // may still apply what the host sent last.
            h.kill(cl.hosts[i].id());
            cl.shared
                .log(format!("fault: kill host{i} (store node keeps running)"));
            cl.shared.note("crash: host beside the store node");
            cl.shared.check(|o, v| o.on_crash(v));
            sleep(Duration::from_millis(rng.gen_range(10..300))).await;
            h.restart(cl.hosts[i].id());
        }
        0 | 1 => {
            // Most crashes land while a write is pending (the interesting
            // cut); some land wherever the clock says. Some wait for a
            // multi-event append in flight (START with its INPUTs, a gated
            // TOOL_CALL with its request), so it can tear.
            if rng.gen_bool(0.75) {
                let multi = rng.gen_bool(0.4);
                for _ in 0..400 {
                    let writer = cl.writers.lock().unwrap()[i];
                    let pending = cl.shared.disk.pending_of(writer);
                    if pending.iter().any(|&n| n > usize::from(multi)) {
                        break;
                    }
                    sleep(Duration::from_micros(250)).await;
                }
            }
            let writer = cl.writers.lock().unwrap()[i];
            let pending = cl.shared.disk.pending_of(writer);
            // Half the time the cut falls just before a multi-event
            // append, so it can tear.
            let multi = pending.iter().position(|&n| n > 1);
            let keep = match multi {
                Some(at) if rng.gen_bool(0.5) => at,
                _ => rng.gen_range(0..=pending.len()),
            };
            let tear = match pending.get(keep) {
                Some(&n) if n > 1 && rng.gen_bool(0.5) => Some(rng.gen_range(1..n)),
                _ => None,
            };
            // The power cut first, then the process dies: madsim drops a
            // killed node's futures, and nothing may commit in between.
            cl.shared.disk.crash(writer, CrashCut { keep, tear });
            h.kill(cl.hosts[i].id());
            cl.shared.log(format!(
                "fault: kill host{i} pending={pending:?} keep={keep} tear={tear:?}"
            ));
            cl.shared.note(if tear.is_some() {
                "crash: torn append"
            } else {
                "crash"
            });
            cl.shared.check(|o, v| o.on_crash(v));
            sleep(Duration::from_millis(rng.gen_range(10..300))).await;
            h.restart(cl.hosts[i].id());
        }
        2 => {
            // Paused past the clients' patience: another host (or this one
            // after resume) takes the session over with a newer fence, and
            // the paused one wakes up as a zombie mid-turn.
            cl.shared.log(format!("fault: pause host{i}"));
            h.pause(cl.hosts[i].id());
            sleep(Duration::from_millis(rng.gen_range(50..4_000))).await;
            h.resume(cl.hosts[i].id());
        }
        3 => {
            let k = rng.gen_range(0..cl.harnesses.len());
            cl.shared.log(format!("fault: kill harness{k}"));
            h.kill(cl.harnesses[k].id());
            sleep(Duration::from_millis(rng.gen_range(0..200))).await;
            h.restart(cl.harnesses[k].id());
        }
        4 => {
            let host = cl.hosts[i].id();
            let other = if rng.gen_bool(0.5) {
                cl.clients[rng.gen_range(0..cl.clients.len())].id()
            } else {
                cl.harnesses[rng.gen_range(0..cl.harnesses.len())].id()
            };
            cl.shared.log(format!("fault: partition host{i}"));
            net.clog_link(host, other);
            net.clog_link(other, host);
            sleep(Duration::from_millis(rng.gen_range(50..1_000))).await;
            net.unclog_link(host, other);
            net.unclog_link(other, host);
        }
        _ => {
            cl.shared.log("fault: slow network".into());
            net.update_config(|c| {
                c.send_latency = Duration::from_millis(5)..Duration::from_millis(60)
            });
            sleep(Duration::from_millis(rng.gen_range(100..1_000))).await;
            net.update_config(|c| {
                c.send_latency = Duration::from_millis(1)..Duration::from_millis(10)
            });
        }
    }
}

/// A fault between host `i` and the store node.
async fn store_fault(cl: &Cluster, i: usize, store: madsim::task::NodeId) {
    let net = NetSim::current();
    let mut rng = thread_rng();
    let host = cl.hosts[i].id();
    let hold = Duration::from_millis(rng.gen_range(100..3_000));
    if rng.gen_bool(0.5) {
        // Both ways: the host can neither write nor read; held past its
        // lease, another host may take its sessions over.
        cl.shared
            .log(format!("fault: partition host{i} from the store"));
        cl.shared.note("store: partition");
        net.clog_link(host, store);
        net.clog_link(store, host);
        sleep(hold).await;
        net.unclog_link(host, store);
        net.unclog_link(store, host);
    } else {
        // Requests arrive and commit; their answers are lost.
        cl.shared
            .log(format!("fault: the store's answers to host{i} are lost"));
        cl.shared.note("store: answers lost");
        net.clog_link(store, host);
        sleep(hold).await;
        net.unclog_link(store, host);
    }
}

/// Digests of seeds already run in this process: a seed run again (the
/// determinism check) must reproduce its digest.
static DIGESTS: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// What one seed did.
struct Run {
    shared: Arc<Shared>,
    digest: u64,
    summary: String,
}

/// One seed: build the cluster, run the clients under faults, heal, judge.
async fn run(shared: Arc<Shared>) -> Run {
    let mut rng = thread_rng();
    let n_hosts = if rng.gen_bool(0.35) { 2 } else { 1 };
    let writers = Arc::new(Mutex::new(vec![0; n_hosts]));
    // Half the two-host runs share a store node; their clocks disagree by
    // up to twice the lease.
    let journal = if n_hosts == 2 && rng.gen_bool(0.5) {
        let bound = 2 * LEASE.as_nanos() as i64;
        Journal::Node {
            skews: (0..n_hosts)
                .map(|_| rng.gen_range(-bound..=bound))
                .collect(),
        }
    } else {
        Journal::InProcess
    };
    let store = matches!(journal, Journal::Node { .. }).then(|| store_node(&shared, &writers));
    let hosts = (0..n_hosts)
        .map(|i| host_node(i, &shared, &writers, &journal))
        .collect();
    let harnesses = vec![
        harness_node("echo", builtin::Echo),
        harness_node("approval", builtin::Approval),
        harness_node("tools", ports::ToolUser),
    ];
    let clients = (0..2)
        .map(|i| {
            Handle::current()
                .create_node()
                .name(format!("client{i}"))
                .ip(client_ip(i))
                .build()
        })
        .collect();
    let cl = Cluster {
        shared: Arc::clone(&shared),
        hosts,
        journal: journal.clone(),
        store,
        writers,
        harnesses,
        clients,
        sessions: Arc::new(Mutex::new(Vec::new())),
    };
    // Let the servers bind before the first call.
    sleep(Duration::from_millis(10)).await;

    let n_faults = rng.gen_range(0..=3);
    let programs: Vec<_> = cl
        .clients
        .iter()
        .enumerate()
        .map(|(me, node)| {
            let ops = thread_rng().gen_range(4..=7);
            node.spawn(client_program(
                Arc::clone(&shared),
                Arc::clone(&cl.sessions),
                me,
                n_hosts,
                ops,
            ))
        })
        .collect();
    for _ in 0..n_faults {
        sleep(Duration::from_millis(thread_rng().gen_range(0..400))).await;
        fault(&cl).await;
    }
    for p in programs {
        timeout(Duration::from_secs(120), p)
            .await
            .expect("a client program finishes")
            .expect("a client program does not panic");
    }
    // Quiesce: anything still in flight (a zombie's turn, a stream whose
    // client gave up) finishes or fails before the journal is judged.
    sleep(Duration::from_secs(5)).await;
    // Checked from a client node: the main node has no address.
    cl.clients[0]
        .spawn(settle_and_check(Arc::clone(&shared)))
        .await
        .expect("the final check does not panic");

    let view = shared.view();
    let mut records = 0;
    for s in agentsessions_sim::oracle::JournalView::sessions(&view) {
        for r in agentsessions_sim::oracle::JournalView::records(&view, &s).iter() {
            shared.log(format!("{s} {} {} {}", r.seq, r.fence, r.content_hash));
            records += 1;
        }
    }
    let digest = shared.digest();
    let stats = shared.disk.stats();
    let summary = format!(
        "hosts={n_hosts} journal={} faults={n_faults} records={records} crashes={} torn={} lost={}",
        match &cl.journal {
            Journal::InProcess => "in-process".to_owned(),
            Journal::Node { skews } => format!("store-node skews={skews:?}"),
        },
        stats.crashes,
        stats.torn,
        stats.lost
    );
    Run {
        shared,
        digest,
        summary,
    }
}

#[madsim::test]
async fn seeded_runs_of_the_real_shells() {
    let seed = Handle::current().seed();
    let Run {
        shared,
        digest,
        summary,
    } = run(Shared::new()).await;
    println!("madsim seed={seed} digest={digest:016x} {summary}");
    // SIM_TRACE=1 prints the whole readable trace of every seed.
    if std::env::var_os("SIM_TRACE").is_some() {
        for line in shared.trace_tail(usize::MAX) {
            println!("  {line}");
        }
    }
    let violations = shared.violations();
    if !violations.is_empty() {
        for line in shared.trace_tail(60) {
            eprintln!("  {line}");
        }
        panic!(
            "seed {seed}: {} violation(s), first: {}\nreproduce: MADSIM_TEST_SEED={seed} \
             CARGO_TARGET_DIR=target/sim RUSTFLAGS=\"--cfg madsim\" cargo test -p \
             agentsessions-sim --test madsim -- --nocapture",
            violations.len(),
            violations[0]
        );
    }
    let mut seen = DIGESTS.lock().unwrap();
    if let Some(before) = seen.insert(seed, digest) {
        assert_eq!(
            before, digest,
            "seed {seed} gave two different trace digests"
        );
    }
}

/// Teeth: with each planted bug armed, some seed of the same runs breaks
/// a rule. Faults are armed per thread, and every node of a madsim runtime
/// runs on the thread that drives it.
#[test]
fn planted_bugs_are_caught() {
    let mut missed = Vec::new();
    for fault in Fault::ALL {
        if UNREACHABLE.contains(&fault) {
            continue;
        }
        let caught = (0..TEETH_SEEDS).find_map(|seed| {
            let _armed = faults::arm(fault);
            let shared = Shared::new();
            // A machine assertion tripped by the bug (a replay that tries
            // to append what it re-executed) panics the runtime; that is
            // a catch too, after whatever the oracle saw first.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Runtime::with_seed_and_config(seed, Config::default())
                    .block_on(run(Arc::clone(&shared)))
            }));
            let v = shared.violations();
            match (v.first(), ran) {
                (Some(first), _) => Some((seed, first.clone())),
                (None, Err(_)) => Some((seed, "the machine panicked".into())),
                (None, Ok(_)) => None,
            }
        });
        match caught {
            Some((seed, v)) => println!("teeth {}: caught at seed {seed}: {v}", fault.name()),
            None => missed.push(fault.name()),
        }
    }
    assert!(missed.is_empty(), "planted bugs no seed caught: {missed:?}");
}

/// A failing seed is reported by itself (`MADSIM_TEST_SEED=...`), so it
/// must replay alone what it did in the batch: nothing carried between
/// runs in one process (tokio's unbiased `select!` did, through a
/// process-wide counter) may steer a run.
#[test]
fn a_seed_alone_repeats_its_run_in_a_batch() {
    let digest = |seed: u64| {
        std::thread::spawn(move || {
            Runtime::with_seed_and_config(seed, Config::default())
                .block_on(run(Shared::new()))
                .digest
        })
        .join()
        .expect("a run does not panic")
    };
    let batch: Vec<u64> = (7_000..7_024).map(digest).collect();
    for (i, seed) in [(23, 7_023), (11, 7_011)] {
        assert_eq!(digest(seed), batch[i], "seed {seed} alone ran differently");
    }
}

/// Planted bugs these runs cannot reach: the built-in harnesses are
/// deterministic, so a recorded model result never meets a different
/// request (the explorer's drifting harness covers that one); and these
/// hosts keep no tool policy, so no floor is there to skip (the explorer's
/// `policy-floor-*` scenarios cover it); and their executor records a
/// key's result with its effect, so no run is left unfinished to re-run
/// (the explorer's `unknown-outcome` scenario covers that).
const UNREACHABLE: [Fault; 3] = [
    Fault::SkipInputHashCheck,
    Fault::SkipPolicyFloor,
    Fault::RerunUnfinished,
];

/// Seeds tried per planted bug before it counts as missed.
const TEETH_SEEDS: u64 = 1_000;

/// With every fault healed: each session's Replay equals its durable
/// journal, its rendered projections equal a recomputation, and the whole
/// journal passes the oracle.
async fn settle_and_check(shared: Arc<Shared>) {
    let shared = &shared;
    let mut c = client(0);
    let sessions = agentsessions_sim::oracle::JournalView::sessions(&shared.view());
    // A host acts on its own at an approval deadline, so the journal is
    // still only when none is left: each session read once (which arms a
    // deadline the host did not know, after a crash), then time for every
    // expiry, and a retry of a busy one, to run out.
    for sid in &sessions {
        let _ = get(&mut c, sid).await;
    }
    sleep(Duration::from_millis(APPROVAL_EXPIRY_MS) + Duration::from_secs(7)).await;
    for sid in sessions {
        let mut streamed = Err(tonic::Status::unknown("not tried"));
        for _ in 0..5 {
            streamed = replay(shared, &mut c, &sid).await;
            if streamed.is_ok() {
                break;
            }
            sleep(Duration::from_millis(500)).await;
        }
        let streamed = match streamed {
            Ok(s) => s,
            Err(status) => {
                shared.check(|_, _| {
                    Err(agentsessions_sim::oracle::violation(
                        agentsessions_sim::oracle::Rule::Liveness,
                        format!("{sid}: Replay failed after the faults healed: {status}"),
                    ))
                });
                continue;
            }
        };
        shared.check(|o, v| o.check_replay_records(v, &sid, &streamed));
        if let Ok(s) = get(&mut c, &sid).await {
            shared.check(|o, v| o.check_session(v, &s));
        }
    }
    // Every completed execution re-run through its harness with recorded
    // effects served: the outputs must be the recorded ones, and no model
    // or tool may be called (the oracle refuses both while replaying).
    let driver = ports::lock(&shared.drivers).get(&0).cloned();
    for sid in agentsessions_sim::oracle::JournalView::sessions(&shared.view()) {
        let Some(driver) = &driver else { break };
        shared.check(|o, _| {
            o.set_replaying(true);
            Ok(())
        });
        let request = Request::ReplayHarness {
            session: sid.clone(),
        };
        let r = timeout(CALL, driver.unary(Caller::Open, request)).await;
        shared.check(|o, _| {
            o.set_replaying(false);
            Ok(())
        });
        match r {
            Ok(Ok(Response::Replayed(report))) => {
                shared.check(|o, v| o.check_replay_report(v, &sid, &report));
                shared.log(format!(
                    "harness replay {sid}: {} executions",
                    report.executions
                ));
            }
            Ok(Ok(other)) => shared.log(format!("harness replay {sid}: {other:?}")),
            Ok(Err(status)) => shared.log(format!("harness replay {sid}: {:?}", status.code)),
            Err(_) => shared.log(format!("harness replay {sid}: timed out")),
        }
    }
    for sid in agentsessions_sim::oracle::JournalView::deleted(&shared.view()) {
        if let Err(status) = get(&mut c, &sid).await.map(drop)
            && status.code() == tonic::Code::NotFound
        {
            continue;
        }
        shared.check(|_, _| {
            Err(agentsessions_sim::oracle::violation(
                agentsessions_sim::oracle::Rule::Deleted,
                format!("{sid}: deleted, but GetSession still finds it"),
            ))
        });
    }
    shared.check(|o, v| o.check_journal(v));
    shared.check(|_, v| agentsessions_sim::oracle::check_no_trace(v, "intruder"));
    shared.check(|o, v| o.on_crash(v));
    for (what, n) in shared.coverage() {
        shared.log(format!("coverage {what} {n}"));
    }
}
