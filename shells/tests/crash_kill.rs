//! Crash-kill audit of the SQLite journal.
//!
//! Spawns `journal-crash-writer` against one database, SIGKILLs it at a random
//! moment, restarts it, and repeats. The writer prints a line only after the
//! store acknowledged the write, so after every kill we can demand:
//!
//! - every acknowledged append is present with the same hash and fence;
//! - every chain verifies and every record decodes to the bytes the writer
//!   meant for that seq (no torn or misplaced records);
//! - fences grow strictly from one incarnation to the next.
//!
//! Quick mode (default) does 200 kills. `CRASH_KILLS=N` runs N kills;
//! `CRASH_SEED=S` replays a schedule of kill delays.

mod common;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentsessions_proto::v1::{event, part};
use agentsessions_shells::journal::JournalStore;
use common::*;

const SESSIONS: usize = 8;

fn expected_text(session: &str, seq: i64) -> String {
    format!(
        "{session}/{seq}/{}",
        "x".repeat(((seq * 37) % 300) as usize)
    )
}

#[derive(Default)]
struct Audit {
    /// (session, seq) -> (hash, fence) of every acknowledged record.
    acked: BTreeMap<(String, i64), (String, i64)>,
    /// Per session, the fence of each incarnation that announced one.
    fences: BTreeMap<String, Vec<i64>>,
    incarnations_with_acks: usize,
}

impl Audit {
    fn absorb(&mut self, stdout: &str) {
        // A SIGKILL can cut the last line short; only whole lines are claims.
        let complete = match stdout.rfind('\n') {
            Some(i) => &stdout[..=i],
            None => "",
        };
        let mut acks = 0;
        for line in complete.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["FENCE", s, fence] => {
                    let fence: i64 = fence.parse().unwrap();
                    let seen = self.fences.entry((*s).to_owned()).or_default();
                    if let Some(last) = seen.last() {
                        assert!(fence > *last, "{s}: fence {fence} after {last}");
                    }
                    seen.push(fence);
                }
                ["ACK", s, seq, hash, fence] => {
                    let key = ((*s).to_owned(), seq.parse().unwrap());
                    let val = ((*hash).to_owned(), fence.parse().unwrap());
                    // The same seq can only ever be acknowledged once.
                    assert!(
                        self.acked.insert(key.clone(), val).is_none(),
                        "{key:?} acked twice"
                    );
                    acks += 1;
                }
                _ => panic!("unexpected writer output: {line:?}"),
            }
        }
        if acks > 0 {
            self.incarnations_with_acks += 1;
        }
    }

    async fn check(&self, db: &TempDb) {
        let store = db.open();
        for i in 0..SESSIONS {
            let session = format!("crash-{i}");
            store
                .verify(&session)
                .await
                .unwrap_or_else(|e| panic!("{session}: {e}"));
            let records = store.read(&session, 1, 0).await.unwrap();
            for r in &records {
                let Some(event::Body::Message(m)) = r.event.as_ref().and_then(|e| e.body.as_ref())
                else {
                    panic!("{session} seq {}: wrong body", r.seq);
                };
                let Some(part::Part::Text(t)) = m.parts[0].part.as_ref() else {
                    panic!("{session} seq {}: wrong part", r.seq);
                };
                assert_eq!(
                    t.text,
                    expected_text(&session, r.seq),
                    "{session} seq {}",
                    r.seq
                );
            }
            let info = store.session_info(&session).await;
            if let Some(fences) = self.fences.get(&session) {
                let stored = info.as_ref().unwrap().fence;
                assert!(
                    stored >= *fences.last().unwrap(),
                    "{session}: stored fence {stored} < {fences:?}"
                );
            }
            for ((s, seq), (hash, fence)) in self
                .acked
                .range((session.clone(), 0)..(session.clone(), i64::MAX))
            {
                let rec = records
                    .get((*seq - 1) as usize)
                    .unwrap_or_else(|| panic!("{s} seq {seq} was acknowledged but is missing"));
                assert_eq!(rec.seq, *seq);
                assert_eq!(&rec.content_hash, hash, "{s} seq {seq}: hash changed");
                assert_eq!(rec.fence, *fence, "{s} seq {seq}: fence changed");
                let held = self.fences[s].contains(fence);
                assert!(
                    held,
                    "{s} seq {seq}: fence {fence} was never minted by a writer"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_sigkill() {
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("crash_kill: {kills} kills, CRASH_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = TempDb::new();
    let exe = env!("CARGO_BIN_EXE_journal-crash-writer");
    let mut audit = Audit::default();
    let started = Instant::now();

    for k in 0..kills {
        let mut child = Command::new(exe)
            .arg(db.path())
            .arg(SESSIONS.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            stdout.read_to_string(&mut s).map(|_| s)
        });
        // Mostly short lives (kills during open, recovery and the first
        // commits), sometimes longer ones (kills deep in steady appends).
        let life = if rng.u8(..10) == 0 {
            rng.u64(30..120)
        } else {
            rng.u64(2..40)
        };
        std::thread::sleep(Duration::from_millis(life));
        // Child::kill sends SIGKILL on unix: no destructors, no clean close.
        let _ = child.kill();
        let status = child.wait().unwrap();
        let out = reader.join().unwrap().unwrap_or_default();
        if status.code().is_some() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("kill {k}: writer exited by itself ({status}): {err}");
        }
        audit.absorb(&out);
        if k % 50 == 49 {
            audit.check(&db).await;
        }
    }
    audit.check(&db).await;
    let elapsed = started.elapsed();
    eprintln!(
        "crash_kill: {kills} kills, {} acknowledged records, {} incarnations acked, {elapsed:?}",
        audit.acked.len(),
        audit.incarnations_with_acks
    );
    assert!(
        audit.acked.len() >= kills,
        "the writer made too little progress to audit"
    );
    assert!(
        audit.incarnations_with_acks >= kills / 4,
        "too few kills landed mid-write"
    );
}
