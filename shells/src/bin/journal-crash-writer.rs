//! Writer half of the crash-kill audit (`shells/tests/crash_kill.rs`).
//!
//! Usage: `journal-crash-writer <db> [sessions]`
//!
//! Opens the journal, mints one fence per session for this incarnation, and
//! appends to every session concurrently until killed. Every line on stdout
//! is printed only AFTER the store acknowledged the write, so each printed
//! line is a durability promise the auditor can check after a SIGKILL:
//!
//! ```text
//! FENCE <session> <fence>
//! ACK <session> <seq> <content_hash> <fence>
//! ```
//!
//! Event content is a pure function of (session, seq) — see [`expected_text`]
//! — so the auditor can also detect a record holding the wrong bytes.

// The writer drives the SQLite journal with real threads and files, so a
// madsim build keeps only a stub `main`.
#![cfg_attr(madsim, allow(dead_code, unused_imports))]

use std::io::Write as _;
use std::process::ExitCode;

use agentsessions_proto::v1::{Event, EventKind, Message, Part, TextPart, event, part};
#[cfg(not(madsim))]
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};
use agentsessions_shells::journal::{AppendBatch, JournalStore, system_now_unix_nanos};

/// The text the event at (session, seq) carries.
fn expected_text(session: &str, seq: i64) -> String {
    // Some padding so records span a realistic size (a few hundred bytes).
    format!(
        "{session}/{seq}/{}",
        "x".repeat(((seq * 37) % 300) as usize)
    )
}

fn event_for(session: &str, seq: i64) -> Event {
    Event {
        execution_id: format!("exec-{}", seq / 10),
        kind: EventKind::EventInput as i32,
        body: Some(event::Body::Message(Message {
            role: "user".into(),
            parts: vec![Part {
                part: Some(part::Part::Text(TextPart {
                    text: expected_text(session, seq),
                })),
            }],
        })),
        ..Default::default()
    }
}

fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    // A failed print (the auditor went away) is not a durability claim, so
    // exiting quietly is right.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

#[cfg(not(madsim))]
async fn run_session(store: SqliteJournal, session: String) -> Result<(), String> {
    let now = system_now_unix_nanos();
    let fence = store
        .mint_fence(&session, now, None)
        .await
        .map_err(|e| e.to_string())?;
    emit(&format!("FENCE {session} {fence}"));
    let mut head = store.head(&session).await.map_err(|e| e.to_string())?;
    loop {
        // 1..=3 events per append, so multi-record atomicity is exercised.
        let n = 1 + (head % 3);
        let events: Vec<_> = (1..=n).map(|i| event_for(&session, head + i)).collect();
        let batch = AppendBatch {
            session: session.clone(),
            expected_last_seq: head,
            fence,
            compute_state: agentsessions_machine::journal::projection::batch_compute_state(&events),
            events,
            now_unix_nanos: system_now_unix_nanos(),
            release_lease: None,
        };
        // Every other append is offered for an in-place commit, so kills
        // land in both commit paths (in place when the writer is idle).
        let done = if head % 2 == 0 {
            match store.try_append_now(batch) {
                Ok(done) => done,
                Err(batch) => store.append(batch).await,
            }
        } else {
            store.append(batch).await
        };
        let records = done.map_err(|e| format!("append {session} at {head}: {e}"))?;
        for r in &records {
            emit(&format!(
                "ACK {session} {} {} {}",
                r.seq, r.content_hash, r.fence
            ));
        }
        head = records.last().expect("non-empty batch").seq;
    }
}

#[cfg(madsim)]
fn main() -> ExitCode {
    eprintln!("journal-crash-writer: not available in a madsim build");
    ExitCode::FAILURE
}

#[cfg(not(madsim))]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: journal-crash-writer <db> [sessions]");
        return ExitCode::from(2);
    };
    let sessions: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let store = match SqliteJournal::open(path, SqliteOptions::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open: {e}");
            return ExitCode::from(3);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(async {
        let tasks: Vec<_> = (0..sessions)
            .map(|i| tokio::spawn(run_session(store.clone(), format!("crash-{i}"))))
            .collect();
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        Ok::<(), String>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(3)
        }
    }
}
