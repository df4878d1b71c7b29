//! The tests' journal store: the shells' in-memory [`Tables`] (the same
//! tables the madsim runs' memory disk keeps, held to the store contract by
//! `agentsessions_journal::contract`), performed synchronously through the
//! daemon's own effect translation. Every operation is atomic and durable
//! when it returns; the simulator layers its crash model on top.

use agentsessions_journal::AppendBatch;
use agentsessions_journal::convert::{append_error_of, row_of};
use agentsessions_journal::effects::perform_store_now;
use agentsessions_journal::memory::{InstantStore, SessionImage as StoredImage, Tables};
use agentsessions_machine::journal::projection::batch_compute_state;
use agentsessions_machine::vocab::{AppendError, Nanos, SessionRow, StoreEffect, StoreOutcome};
use agentsessions_proto::v1::{Event, LogRecord};

/// The store. Cloning it forks the whole database (the explorer does).
#[derive(Debug, Clone, Default)]
pub struct MemStore {
    tables: Tables,
    /// Project given to rows created implicitly (fence mint, append).
    pub default_project: String,
}

fn row_of_stored(info: agentsessions_journal::SessionInfo) -> SessionRow {
    row_of(info).expect("rows written through the effect translation decode")
}

impl MemStore {
    /// An empty store whose implicit rows use project "default".
    pub fn new() -> Self {
        Self {
            tables: Tables::default(),
            default_project: "default".into(),
        }
    }

    /// The session's lease as stored (`None`: nobody holds one).
    pub fn lease(&self, session: &str) -> Option<agentsessions_journal::StoredLease> {
        self.tables.lease(session)
    }

    /// The records of a session (empty when unknown or deleted), a fork
    /// child's prefix resolved through the sessions that hold it.
    pub fn records(&self, session: &str) -> std::borrow::Cow<'_, [LogRecord]> {
        self.tables.records(session)
    }

    /// Records stored, each once (a fork child's prefix is its parent's).
    pub fn stored_records(&self) -> usize {
        self.tables.stored_records()
    }

    /// The current fence of a session.
    pub fn fence(&self, session: &str) -> i64 {
        self.tables.session_info(session).map_or(0, |i| i.fence)
    }

    /// The stored row of a session.
    pub fn row(&self, session: &str) -> Option<SessionRow> {
        self.tables.session_info(session).ok().map(row_of_stored)
    }

    /// Session uids in the store.
    pub fn sessions(&self) -> Vec<String> {
        self.tables.sessions()
    }

    /// Loads records verbatim (hashes as given), as importing a journal
    /// written elsewhere would; fences are raised to the highest seen.
    pub fn import(&mut self, session: &str, records: Vec<LogRecord>, now: Nanos) {
        self.tables
            .import(session, records, now, &self.default_project);
    }

    /// Drops every record after the first `keep`, as a crash before the
    /// later appends committed would have left the journal. The fence and
    /// compute state stay as they were (a crash does not roll them back).
    pub fn truncate(&mut self, session: &str, keep: usize) {
        self.tables.truncate(session, keep);
    }

    /// Appends under CAS and fence; all events or none. For tests that
    /// write as another writer would: the compute_state follows the
    /// machine's rule for the batch.
    pub fn append(
        &mut self,
        session: &str,
        expected: i64,
        fence: i64,
        events: &[Event],
        now: Nanos,
    ) -> Result<Vec<LogRecord>, AppendError> {
        let batch = AppendBatch {
            session: session.to_owned(),
            expected_last_seq: expected,
            fence,
            events: events.to_vec(),
            compute_state: batch_compute_state(events),
            now_unix_nanos: now,
            release_lease: None,
        };
        self.tables
            .append(&batch, &self.default_project)
            .map_err(append_error_of)
    }

    /// Performs a store effect, as the daemon performs it against a store.
    pub fn perform(&mut self, effect: &StoreEffect) -> StoreOutcome {
        let store = InstantStore::new(std::mem::take(&mut self.tables), &self.default_project);
        let (id, outcome) = perform_store_now(&store, effect.clone());
        self.tables = store.into_tables();
        assert_eq!(id, effect.id(), "an outcome answers its own effect");
        outcome
    }

    /// Uids of deleted sessions (their tombstones).
    pub fn deleted(&self) -> Vec<String> {
        self.tables.deleted()
    }

    /// Whether `session` was deleted.
    pub fn is_deleted(&self, session: &str) -> bool {
        self.tables.tombstone(session).is_some()
    }

    /// Everything stored under `session` (row, records or tombstone).
    pub fn image(&self, session: &str) -> SessionImage {
        SessionImage(self.tables.image(session))
    }

    /// Puts `session` back to `image`, as rolling back every write since
    /// the image was taken would.
    pub fn restore(&mut self, session: &str, image: SessionImage) {
        self.tables.restore(session, image.0);
    }
}

/// Everything stored under one uid, so a simulator can roll back a
/// transaction that a crash did not let commit.
#[derive(Debug, Clone)]
pub struct SessionImage(StoredImage);

impl SessionImage {
    /// The session's records (empty when there is no session).
    pub fn records(&self) -> &[LogRecord] {
        self.0.journal()
    }

    /// The session's fence (0 when there is no session).
    pub fn fence(&self) -> i64 {
        self.0.session().map_or(0, |s| s.info().fence)
    }

    /// Whether the uid held a tombstone.
    pub fn is_deleted(&self) -> bool {
        self.0.tombstone().is_some()
    }

    /// The session's row, with `last_seq` derived from the records.
    pub fn row(&self) -> Option<SessionRow> {
        self.0.session().map(|s| row_of_stored(s.info()))
    }
}
