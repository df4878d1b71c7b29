//! PostgreSQL's own failover: a primary and a synchronous standby (throwaway
//! clusters, `scripts/pg-cluster.sh start|standby|sync|crash|promote`), two
//! `agentsessionsd` processes on a multi-host URL
//! (`host1:p1,host2:p2/db?target_session_attrs=read-write`), clients running
//! echo turns through both. The primary is stopped at once (`-m
//! immediate`, as a power cut) and the standby promoted, under load.
//!
//! Afterwards, on the promoted standby: every record a client was ever sent
//! is there with the same hash, every chain verifies, every session takes
//! a new turn, and both daemons still serve, neither restarted. The longest
//! pause in acknowledgements across the failover is printed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    CreateSessionRequest, ExecRequest, ExecState, GetSessionRequest, LogRecord, ResumeRequest,
    Session, exec_update,
};
use agentsessions_shells::journal::JournalStore as _;
use tonic::transport::Channel;

#[path = "support/cli.rs"]
mod cli;
use cli::Daemon;

#[path = "../shells/tests/support/pg.rs"]
mod pg;

#[path = "support/scrape.rs"]
mod scrape;

/// Sessions, one client each.
const CLIENTS: usize = 8;

/// What the clients were sent, and when each turn was acknowledged.
#[derive(Default)]
struct Seen {
    /// (session, seq) -> content hash of every record a client received.
    acked: BTreeMap<(String, i64), String>,
    /// When each turn's stream ended well.
    acks: Vec<Instant>,
}

impl Seen {
    fn absorb(&mut self, session: &str, records: &[LogRecord]) {
        for r in records {
            let key = (session.to_owned(), r.seq);
            let hash = self
                .acked
                .entry(key)
                .or_insert_with(|| r.content_hash.clone());
            assert_eq!(hash, &r.content_hash, "{session} seq {} changed", r.seq);
        }
    }
}

async fn client(addr: &str) -> SessionsClient<Channel> {
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("the daemon listens");
    SessionsClient::new(ch)
}

/// One echo turn; the records it was sent, whether it ended well or not.
async fn turn(
    c: &mut SessionsClient<Channel>,
    sid: &str,
    n: usize,
) -> (Vec<LogRecord>, Result<(), tonic::Status>) {
    let mut records = Vec::new();
    let req = ExecRequest {
        session: sid.into(),
        inputs: vec![events::text_message("user", &format!("{sid} turn {n}"))],
        ..Default::default()
    };
    let mut stream = match c.exec(req).await {
        Ok(s) => s.into_inner(),
        Err(status) => return (records, Err(status)),
    };
    loop {
        match stream.message().await {
            Ok(Some(u)) => {
                if let Some(exec_update::Update::Record(r)) = u.update {
                    records.push(r);
                }
            }
            Ok(None) => return (records, Ok(())),
            Err(status) => return (records, Err(status)),
        }
    }
}

/// After a failed turn: a turn the failure cut is resumed (errors are
/// retried by the caller's next round).
async fn recover(c: &mut SessionsClient<Channel>, sid: &str) {
    let got = c.get_session(GetSessionRequest { uid: sid.into() }).await;
    if let Ok(s) = got {
        let state = ExecState::try_from(s.into_inner().exec_state).unwrap_or_default();
        if matches!(state, ExecState::ExecRunning | ExecState::ExecAwaiting) {
            let _ = c
                .resume(ResumeRequest {
                    session: sid.into(),
                    ..Default::default()
                })
                .await;
        }
    }
}

/// Runs turns on `sid` through `addr` until `stop`.
async fn drive(addr: String, sid: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let mut c = client(&addr).await;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let (records, ended) = turn(&mut c, &sid, n).await;
        {
            let mut s = seen.lock().unwrap();
            s.absorb(&sid, &records);
            if ended.is_ok() {
                s.acks.push(Instant::now());
            }
        }
        if let Err(status) = ended {
            // While no primary is reachable, a client is told to retry
            // later, never that the host broke.
            assert_ne!(status.code(), tonic::Code::Internal, "{status:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            recover(&mut c, &sid).await;
        }
    }
}

/// Clients running turns, one per session, each through its daemon.
struct Load {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(daemons: &[Daemon], sessions: &[String]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let clients = sessions
            .iter()
            .enumerate()
            .map(|(i, sid)| {
                let addr = daemons[i % daemons.len()].sessions.clone();
                tokio::spawn(drive(addr, sid.clone(), stop.clone(), seen.clone()))
            })
            .collect();
        Self {
            stop,
            seen,
            clients,
        }
    }

    fn acks(&self) -> usize {
        self.seen.lock().unwrap().acks.len()
    }

    async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.await.unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// One session per client, created through the daemons in turn.
async fn sessions(daemons: &[Daemon]) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..CLIENTS {
        let mut c = client(&daemons[i % daemons.len()].sessions).await;
        let s = c
            .create_session(CreateSessionRequest {
                session: Some(Session::default()),
            })
            .await
            .unwrap()
            .into_inner();
        out.push(s.metadata.unwrap().uid);
    }
    out
}

/// Every record a client was sent is in the journal at `url`, as sent,
/// and every chain verifies.
async fn check_journal(url: &str, sessions: &[String], seen: &Seen) {
    let j = PgJournal::open(url, PgOptions::default()).await.unwrap();
    for sid in sessions {
        j.verify(sid).await.unwrap();
        let stored: BTreeMap<i64, String> = j
            .read(sid, 1, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.seq, r.content_hash))
            .collect();
        let sent = seen.acked.range((sid.clone(), 0)..=(sid.clone(), i64::MAX));
        for ((_, seq), hash) in sent {
            assert_eq!(
                stored.get(seq),
                Some(hash),
                "{sid} seq {seq} was sent, then lost"
            );
        }
    }
}

/// The daemons serve on, none restarted: each is SERVING again, and every
/// session takes a turn through the daemon that drove it.
async fn serve_on(daemons: &[Daemon], sessions: &[String]) {
    for d in daemons {
        let mut serving = false;
        for _ in 0..300 {
            if health(&d.sessions).await == 1 {
                serving = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(serving, "{} is SERVING again within 30 s", d.sessions);
    }
    for (i, sid) in sessions.iter().enumerate() {
        let mut c = client(&daemons[i % daemons.len()].sessions).await;
        recover(&mut c, sid).await;
        let (_, ended) = turn(&mut c, sid, usize::MAX).await;
        ended.unwrap_or_else(|s| panic!("{sid} on daemon {}: {s:?}", i % daemons.len()));
    }
}

/// The daemon's overall health answer ("" service), as its number.
async fn health(addr: &str) -> i32 {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner()
        .status
}

/// The longest gap between two acknowledgements.
fn longest_pause(seen: &Seen) -> Duration {
    let mut acks = seen.acks.clone();
    acks.sort();
    acks.windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_promoted_synchronous_standby_keeps_every_acknowledged_record_and_both_daemons_serve_on()
{
    let Some(primary) = pg::Cluster::start() else {
        return;
    };
    let standby = primary.standby();
    primary.sync_standby();
    agentsessions_pg::create_database(&primary.url, "ha")
        .await
        .unwrap();
    let hosts = format!("127.0.0.1:{},127.0.0.1:{}", primary.port(), standby.port());
    let url = format!("postgres://agentsessions@{hosts}/ha?target_session_attrs=read-write");
    let dir = tempfile::tempdir().unwrap();
    let daemons: Vec<Daemon> = ["host-a", "host-b"]
        .iter()
        .map(|id| Daemon::start_in(dir.path(), url.as_ref(), &["--host-id", id]))
        .collect();
    let sessions = sessions(&daemons).await;

    let load = Load::start(&daemons, &sessions);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(load.acks() > 0, "turns ran before the failover");
    let cut = Instant::now();
    let standby = tokio::task::spawn_blocking(move || {
        primary.crash();
        standby.promote();
        // The old primary's directory goes; the standby serves from here.
        drop(primary);
        standby
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let seen = load.finish().await;

    assert!(
        seen.acks.iter().any(|t| *t > cut),
        "turns are acknowledged again after the failover"
    );
    eprintln!(
        "failover: {} turns acknowledged, {} records; longest pause in acknowledgements {:?}",
        seen.acks.len(),
        seen.acked.len(),
        longest_pause(&seen)
    );
    let promoted = format!("postgres://agentsessions@127.0.0.1:{}/ha", standby.port());
    check_journal(&promoted, &sessions, &seen).await;
    serve_on(&daemons, &sessions).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_terminated_under_load_lose_nothing_and_the_daemon_serves_on() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let daemons = vec![Daemon::start_in(
        dir.path(),
        url.as_ref(),
        &["--metrics-addr", "127.0.0.1:0"],
    )];
    let sessions = sessions(&daemons).await;
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);

    let load = Load::start(&daemons, &sessions);
    let mut terminated = 0;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rows = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        terminated += rows.len();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = load.finish().await;
    assert!(terminated > 0, "the daemon's connections were terminated");
    eprintln!(
        "terminations: {terminated} connections cut, {} turns acknowledged; longest pause {:?}",
        seen.acks.len(),
        longest_pause(&seen)
    );
    check_journal(&url, &sessions, &seen).await;
    serve_on(&daemons, &sessions).await;
    // The reconnects are counted.
    let metrics = daemons[0].metrics.as_deref().expect("--metrics-addr");
    let metrics = metrics.to_owned();
    let text = tokio::task::spawn_blocking(move || scrape::metrics(&metrics))
        .await
        .unwrap();
    let reopens = scrape::sample(&text, "agentsessions_journal_reopens_total")
        .expect("the reopen counter is exported");
    assert!(
        reopens >= 1.0,
        "the store came back at least once: {reopens}"
    );
}
