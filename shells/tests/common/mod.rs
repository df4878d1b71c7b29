//! Helpers shared by the journal integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use agentsessions_proto::v1::{
    Event, EventKind, ExecutionStart, Lifecycle, Message, Part, TextPart, event, lifecycle, part,
};
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};
use agentsessions_shells::journal::{AppendBatch, JournalStore as _};

/// A temp dir on the real disk (not tmpfs) holding `journal.db`.
pub struct TempDb {
    pub dir: tempfile::TempDir,
}

impl TempDb {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("journal-test-")
            .tempdir()
            .expect("tempdir");
        Self { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("journal.db")
    }

    pub fn open(&self) -> SqliteJournal {
        SqliteJournal::open(self.path(), SqliteOptions::default()).expect("open journal")
    }
}

pub fn open_with(path: &Path, options: SqliteOptions) -> SqliteJournal {
    SqliteJournal::open(path, options).expect("open journal")
}

pub fn text_event(kind: EventKind, role: &str, text: &str) -> Event {
    Event {
        kind: kind as i32,
        body: Some(event::Body::Message(Message {
            role: role.into(),
            parts: vec![Part {
                part: Some(part::Part::Text(TextPart { text: text.into() })),
            }],
        })),
        ..Default::default()
    }
}

pub fn input(text: &str) -> Event {
    text_event(EventKind::EventInput, "user", text)
}

pub fn lifecycle_event(kind: lifecycle::Kind) -> Event {
    Event {
        kind: EventKind::EventLifecycle as i32,
        body: Some(event::Body::Lifecycle(Lifecycle {
            kind: kind as i32,
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub fn execution_start(harness: &str) -> Event {
    Event {
        execution_id: "exec-1".into(),
        kind: EventKind::EventExecutionStart as i32,
        body: Some(event::Body::ExecutionStart(ExecutionStart {
            input_count: Some(1),
            harness: harness.into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub fn batch(session: &str, expected: i64, fence: i64, events: Vec<Event>) -> AppendBatch {
    AppendBatch {
        session: session.into(),
        expected_last_seq: expected,
        fence,
        compute_state: agentsessions_machine::journal::projection::batch_compute_state(&events),
        events,
        now_unix_nanos: 1_700_000_000_000_000_000 + expected,
        release_lease: None,
    }
}

/// Appends `n` single-event records to `session` starting at its head.
pub async fn append_n(store: &SqliteJournal, session: &str, fence: i64, n: usize) {
    let mut head = store.head(session).await.unwrap();
    for i in 0..n {
        let recs = store
            .append(batch(
                session,
                head,
                fence,
                vec![input(&format!("{session}-{i}"))],
            ))
            .await
            .unwrap();
        head = recs.last().unwrap().seq;
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
