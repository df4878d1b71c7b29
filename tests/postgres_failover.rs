//! Failover under kill -9: two `agentsessionsd` processes on one real
//! PostgreSQL database (a throwaway cluster, `scripts/pg-cluster.sh`), 64
//! sessions on the approval harness driven through both by clients that
//! pick a daemon at random for every call, while one daemon or the other
//! is SIGKILLed at random moments and restarted under the same host id.
//! A killed daemon's sessions are resumed on the survivor (after its lease
//! lapses) or on it again once it is back.
//!
//! Afterwards: every record a client ever received is in the journal with
//! the same hash; every chain verifies; fences never go back along a
//! chain; no tool ran twice (every note line, keyed by the call's
//! idempotency key, is written once, through the shared PostgreSQL tool
//! ledger); and every session reaches a clean end.
//!
//! `FAILOVER_KILLS=N` sets the kills (default 100, CI's quick mode).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, CreateSessionRequest, ExecRequest, ExecState, GetSessionRequest, LogRecord,
    ReplayRequest, ResumeRequest, Session,
};
use agentsessions_shells::journal::JournalStore as _;
use tonic::transport::Channel;

#[path = "support/cli.rs"]
mod cli;
use cli::Daemon;

#[path = "../shells/tests/support/pg.rs"]
mod pg;

const SESSIONS: usize = 64;
const HOSTS: [&str; 2] = ["host-a", "host-b"];

fn kills() -> usize {
    std::env::var("FAILOVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// A tiny deterministic generator (xorshift); the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The two daemon slots: each one's current address ("" while down).
struct Cluster {
    dir: PathBuf,
    url: String,
    addrs: Mutex<[String; 2]>,
}

impl Cluster {
    fn start(&self, slot: usize) -> Daemon {
        let flags = ["--host-id", HOSTS[slot], "--lease", "1s"];
        let d = Daemon::start_in(&self.dir, self.url.as_ref(), &flags);
        self.addrs.lock().unwrap()[slot] = d.sessions.clone();
        d
    }

    fn down(&self, slot: usize) {
        self.addrs.lock().unwrap()[slot].clear();
    }

    fn addr(&self, slot: usize) -> String {
        self.addrs.lock().unwrap()[slot].clone()
    }
}

/// What the clients saw, to hold the journal to afterwards.
#[derive(Default)]
struct Seen {
    /// (session, seq) -> content hash of every record a client received.
    acked: BTreeMap<(String, i64), String>,
}

impl Seen {
    fn absorb(&mut self, session: &str, records: &[LogRecord]) {
        for r in records {
            let key = (session.to_owned(), r.seq);
            match self.acked.get(&key) {
                Some(h) => assert_eq!(h, &r.content_hash, "{session} seq {} changed", r.seq),
                None => {
                    self.acked.insert(key, r.content_hash.clone());
                }
            }
        }
    }
}

async fn client(addr: &str) -> Option<SessionsClient<Channel>> {
    if addr.is_empty() {
        return None;
    }
    let ch = Channel::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .ok()?;
    Some(SessionsClient::new(ch))
}

async fn replay(
    c: &mut SessionsClient<Channel>,
    sid: &str,
) -> Result<Vec<LogRecord>, tonic::Status> {
    let mut stream = c
        .replay(ReplayRequest {
            session: sid.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await? {
        out.push(r);
    }
    Ok(out)
}

async fn get(c: &mut SessionsClient<Channel>, sid: &str) -> Result<Session, tonic::Status> {
    let req = GetSessionRequest { uid: sid.into() };
    Ok(c.get_session(req).await?.into_inner())
}

/// What one step did.
#[derive(Debug, PartialEq)]
enum Step {
    /// Started a new turn (the last one was at rest).
    Started,
    /// Approved, or re-drove a cut or decided turn.
    Moved,
    /// At rest, and told not to start another.
    Rest,
}

/// One step of a session toward its next turn, on daemon `c`: approve a
/// pending call, re-drive a cut or decided turn, or (unless `last`) start
/// a new one.
async fn step(
    c: &mut SessionsClient<Channel>,
    sid: &str,
    turn: usize,
    last: bool,
) -> Result<Step, tonic::Status> {
    let s = get(c, sid).await?;
    let state = ExecState::try_from(s.exec_state).unwrap_or(ExecState::Unspecified);
    let mut redrive = matches!(state, ExecState::ExecRunning | ExecState::ExecAwaiting);
    if let Some(p) = s.pending_approval {
        c.approve(ApproveRequest {
            session: sid.into(),
            execution_id: p.execution_id,
            tool_call_id: p.tool_call_id,
            request_seq: p.request_seq,
            approved: Some(true),
            reason: "failover test".into(),
            identity: None,
        })
        .await?;
        // As `agentctl approve` does: the decision, then the run it lets on.
        redrive = true;
    }
    if !redrive {
        if last && turn > 0 {
            return Ok(Step::Rest);
        }
        let started = c
            .exec(ExecRequest {
                session: sid.into(),
                inputs: vec![events::text_message("user", &format!("{sid} turn {turn}"))],
                ..Default::default()
            })
            .await;
        let finished = match started {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(_)) => {}
                        Ok(None) => break Ok(()),
                        Err(s) => break Err(s),
                    }
                }
            }
            Err(s) => Err(s),
        };
        match finished {
            Ok(()) => return Ok(Step::Started),
            // A decided call whose receipt a kill cut off blocks new
            // input: re-drive it.
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {}
            Err(s) => return Err(s),
        }
    }
    #[allow(deprecated)]
    c.resume(ResumeRequest {
        session: sid.into(),
        ..Default::default()
    })
    .await?;
    Ok(Step::Moved)
}

/// Drives one session until `stop`, then to rest; returns finished turns.
async fn drive(
    cluster: Arc<Cluster>,
    seen: Arc<Mutex<Seen>>,
    sid: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicUsize>,
) -> usize {
    let mut rng = Rng(seed | 1);
    let mut turns = 0;
    let mut clients: [Option<(String, SessionsClient<Channel>)>; 2] = [None, None];
    loop {
        let slot = rng.below(2) as usize;
        let addr = cluster.addr(slot);
        if clients[slot].as_ref().is_none_or(|(a, _)| *a != addr) {
            clients[slot] = client(&addr).await.map(|c| (addr.clone(), c));
        }
        let Some((_, c)) = clients[slot].as_mut() else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let stopping = stop.load(Ordering::Relaxed);
        match step(c, &sid, turns, stopping).await {
            Ok(done) => {
                if let Ok(records) = replay(c, &sid).await {
                    seen.lock().unwrap().absorb(&sid, &records);
                }
                match done {
                    Step::Rest => return turns,
                    Step::Started => turns += 1,
                    Step::Moved => {}
                }
            }
            Err(status) => {
                errors.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("FAILOVER_DEBUG").is_some() {
                    let m: String = status.message().chars().take(60).collect();
                    eprintln!("retry {:?} {m}", status.code());
                }
                // ABORTED (a lease or fence held elsewhere) and UNAVAILABLE
                // (a daemon going down) are retried; anything else is a bug.
                assert!(
                    matches!(
                        status.code(),
                        tonic::Code::Aborted
                            | tonic::Code::Unavailable
                            | tonic::Code::Cancelled
                            | tonic::Code::Unknown
                            | tonic::Code::DeadlineExceeded
                            | tonic::Code::FailedPrecondition
                    ),
                    "{sid}: {status:?}"
                );
                clients[slot] = None;
                tokio::time::sleep(Duration::from_millis(10 + rng.below(40))).await;
            }
        }
    }
}

/// Every note line of every session, as (session, idempotency key).
fn note_lines(notes: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(notes) else {
        return out;
    };
    for entry in dir {
        let path = entry.unwrap().path();
        let session = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let key = line.split('\t').next().unwrap().to_owned();
            out.push((session.clone(), key));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_kill_9_of_either_daemon_with_no_record_lost_and_no_tool_run_twice() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(Cluster {
        dir: dir.path().to_path_buf(),
        url: url.to_string(),
        addrs: Mutex::new([String::new(), String::new()]),
    });
    let mut daemons = [Some(cluster.start(0)), Some(cluster.start(1))];

    let mut c = client(&cluster.addr(0)).await.unwrap();
    let mut sids = Vec::new();
    for _ in 0..SESSIONS {
        let s = c
            .create_session(CreateSessionRequest {
                session: Some(Session {
                    harness: "approval".into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        sids.push(s.metadata.unwrap().uid);
    }

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("failover seed {seed}");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicUsize::new(0));
    let drivers: Vec<_> = sids
        .iter()
        .enumerate()
        .map(|(i, sid)| {
            tokio::spawn(drive(
                cluster.clone(),
                seen.clone(),
                sid.clone(),
                seed.wrapping_add(i as u64 * 7919),
                stop.clone(),
                errors.clone(),
            ))
        })
        .collect();

    let mut rng = Rng(seed | 1);
    let total = kills();
    for _ in 0..total {
        tokio::time::sleep(Duration::from_millis(50 + rng.below(250))).await;
        let slot = rng.below(2) as usize;
        cluster.down(slot);
        drop(daemons[slot].take()); // SIGKILL, then reap
        tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
        daemons[slot] = Some(cluster.start(slot));
    }
    stop.store(true, Ordering::Relaxed);
    let mut turns = 0;
    for d in drivers {
        turns += tokio::time::timeout(Duration::from_secs(120), d)
            .await
            .expect("every session comes to rest after the kills")
            .unwrap();
    }
    eprintln!(
        "failover: {total} kills, {turns} turns finished, {} retried calls",
        errors.load(Ordering::Relaxed)
    );
    assert!(
        turns >= SESSIONS,
        "the sessions made progress: {turns} turns"
    );

    let store = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    let acked = std::mem::take(&mut seen.lock().unwrap().acked);
    let mut receipts = BTreeSet::new();
    for sid in &sids {
        store
            .verify(sid)
            .await
            .unwrap_or_else(|e| panic!("{sid}: {e}"));
        let records = store.read(sid, 1, 0).await.unwrap();
        let fences: Vec<i64> = records.iter().map(|r| r.fence).collect();
        assert!(fences.windows(2).all(|w| w[0] <= w[1]), "{sid}: {fences:?}");
        for r in &records {
            if let Some(agentsessions_proto::v1::event::Body::Result(t)) =
                r.event.as_ref().and_then(|e| e.body.as_ref())
            {
                receipts.insert((sid.clone(), t.id.clone(), r.seq));
            }
        }
        let s = get(&mut client(&cluster.addr(0)).await.unwrap(), sid)
            .await
            .unwrap();
        assert!(s.pending_approval.is_none(), "{sid} at rest");
    }
    for ((sid, seq), hash) in &acked {
        let r = store.read(sid, *seq, *seq).await.unwrap();
        assert_eq!(r.len(), 1, "{sid} lost acknowledged seq {seq}");
        assert_eq!(&r[0].content_hash, hash, "{sid} seq {seq} changed");
    }
    let lines = note_lines(&dir.path().join("notes"));
    let unique: BTreeSet<_> = lines.iter().cloned().collect();
    assert_eq!(unique.len(), lines.len(), "a tool ran twice");
    assert!(
        lines.len() >= turns,
        "every finished turn ran its tool: {} lines, {turns} turns",
        lines.len()
    );
    assert!(!receipts.is_empty());
    eprintln!(
        "failover: {} acknowledged records, {} tool runs",
        acked.len(),
        lines.len()
    );
}
