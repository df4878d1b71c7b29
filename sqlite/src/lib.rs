//! The SQLite journal store, schema-compatible with the Go host (v2).
//!
//! A [`SqliteJournal`] is a cheap-to-clone handle onto one database file:
//! a writer thread doing group commit (see [`worker`]) and a small pool of
//! reader threads with their own connections. Futures complete through
//! `tokio::sync::oneshot`, so any executor can drive them.
//!
//! Point reads (a session row, a head, a journal's tail) are small enough
//! to run on the caller's thread: a hand-off to a reader thread and back
//! costs more than the query itself. They use the writer's connection when
//! no batch holds it (its page cache has what the last commits wrote; any
//! other connection re-reads those pages), else one more connection kept
//! for them. Neither waits on a lock there (busy timeout 0); when both are
//! taken, SQLite says busy, or a tail is long, the read goes to the reader
//! threads instead.
//!
//! Several handles (or processes) may open the same file: writers serialise
//! on SQLite's write lock (`BEGIN IMMEDIATE`, 5 s busy timeout) and the
//! CAS + fence inside each append keeps one writer per session honest.
//!
//! The store runs OS threads, so it is for the real host; the madsim
//! simulator uses an in-memory implementation of the same trait.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use agentsessions_proto::v1::LogRecord;
use crossbeam_channel::{Sender, unbounded};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use agentsessions_journal::{
    AppendBatch, AppendError, DEFAULT_PROJECT, DeleteError, DeleteSession, ForkBatch,
    HarnessRegistration, HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions,
    RegisterOutcome, RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan,
    StoreError, Tombstone, VerifyError,
};

mod heads;
pub mod ledger;
mod outbox;
mod quick;
mod read_ops;
pub mod schema;
mod worker;
mod write_ops;

pub use read_ops::spans;
pub use worker::Faults;

/// A driver error as a store error: a backend failure, whose message names
/// tables and constraints, never bound values. (`?` turns it into the
/// operation's own error from there.)
pub(crate) fn db(e: rusqlite::Error) -> agentsessions_journal::StoreError {
    agentsessions_journal::StoreError::Backend(Box::new(e))
}

/// A source of Unix nanoseconds, used only to stamp migration backfills.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// How to open a [`SqliteJournal`].
#[derive(Clone)]
pub struct SqliteOptions {
    /// Project for sessions created without one.
    pub default_project: String,
    /// Reader threads (each with its own connection); at least 1.
    pub readers: usize,
    /// Most write jobs per group-commit transaction; 1 disables grouping
    /// (one transaction per write, the baseline the benchmarks compare to).
    pub max_batch: usize,
    /// Time source for the migration's `reserved_at` stamps.
    pub clock: Clock,
    /// Fault injection for tests; leave at default.
    #[doc(hidden)]
    pub faults: Faults,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            default_project: DEFAULT_PROJECT.to_owned(),
            readers: 2,
            max_batch: 512,
            clock: Arc::new(agentsessions_journal::system_now_unix_nanos),
            faults: Faults::default(),
        }
    }
}

impl std::fmt::Debug for SqliteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteOptions")
            .field("default_project", &self.default_project)
            .field("readers", &self.readers)
            .field("max_batch", &self.max_batch)
            .finish_non_exhaustive()
    }
}

/// Group-commit counters, for tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Committed transactions.
    pub batches: u64,
    /// Write jobs in those transactions.
    pub jobs: u64,
    /// The most jobs one transaction carried.
    pub largest_batch: u64,
    /// Summed over committed jobs: the time from queueing each to its
    /// reply, i.e. how long its callers waited for durability (minus the
    /// wake-up on their side).
    pub job_wait: std::time::Duration,
    /// Jobs among `jobs` committed in place by an idle caller.
    pub jobs_in_place: u64,
    /// Appends whose head and fence came from the writer's cache instead
    /// of two lookups.
    pub cached_heads: u64,
}

/// Point reads (row, head, tail) by where they ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStats {
    /// Answered on the caller's thread.
    pub in_place: u64,
    /// Handed to a reader thread (connection in use, busy, or too long).
    pub on_threads: u64,
}

struct Inner {
    path: PathBuf,
    default_project: String,
    shared: Arc<worker::Shared>,
    writer_tx: Option<Sender<Box<dyn worker::WriteJob>>>,
    reader_tx: Option<Sender<worker::ReadJob>>,
    /// The connection for point reads in place (see the module docs).
    quick: Mutex<Connection>,
    /// The writer's connection, tried first for point reads, and used by
    /// in-place writes when the writer is idle.
    writer_conn: Arc<Mutex<Connection>>,
    faults: worker::Faults,
    /// Whether appends insert notice rows (`JournalStore::set_outbox`).
    outbox: std::sync::atomic::AtomicBool,
    /// Taken on drop, before the threads are joined (the checkpointer
    /// exits when every sender is gone).
    checkpoint_tx: Option<crossbeam_channel::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queues lets the threads finish queued work and exit;
        // joining means the connections are closed when drop returns.
        self.writer_tx.take();
        self.reader_tx.take();
        self.checkpoint_tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A handle onto one SQLite journal file. Clones share the threads.
#[derive(Clone)]
pub struct SqliteJournal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.inner.path)
            .finish()
    }
}

fn open_connection(path: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(path, flags).map_err(db)?;
    schema::configure(&conn)?;
    Ok(conn)
}

impl SqliteJournal {
    /// Opens (creating if needed) and migrates the journal at `path`.
    /// A database with a newer (or negative) schema version is refused
    /// before anything is written.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str() == ":memory:" {
            // Each connection would see its own private database.
            return Err(StoreError::InvalidArgument(
                "the sqlite journal needs a file path".into(),
            ));
        }
        let readers = options.readers.max(1);
        let max_batch = options.max_batch.max(1);
        let conn = open_connection(&path, OpenFlags::default())?;
        schema::check_version(&conn)?;
        schema::enable_wal(&conn)?;
        schema::enable_full_sync(&conn)?;
        schema::migrate(&conn, (options.clock)())?;
        conn.execute_batch(schema::DELETED_SESSIONS).map_err(db)?;
        conn.execute_batch(schema::SESSION_LEASES).map_err(db)?;
        conn.execute_batch(schema::SESSION_PREFIXES).map_err(db)?;
        conn.execute_batch(schema::NOTIFY_OUTBOX).map_err(db)?;

        let mut reader_conns = Vec::with_capacity(readers);
        for _ in 0..readers {
            // Read-write flags with query_only: a READ_ONLY connection cannot
            // always attach to the WAL index, and query_only still makes any
            // stray write on a reader fail loudly.
            let r = open_connection(&path, OpenFlags::default())?;
            r.execute_batch("PRAGMA query_only = ON").map_err(db)?;
            reader_conns.push(r);
        }

        let quick = open_connection(&path, OpenFlags::default())?;
        quick.execute_batch("PRAGMA query_only = ON").map_err(db)?;
        quick.busy_timeout(std::time::Duration::ZERO).map_err(db)?;

        // The checkpointer takes over from SQLite's automatic checkpoint,
        // which stays on at 10x the default threshold as a backstop.
        conn.execute_batch("PRAGMA wal_autocheckpoint = 10000")
            .map_err(db)?;
        let checkpoint_conn = open_connection(&path, OpenFlags::default())?;
        // A checkpoint syncs the main file before the WAL may be reused only
        // if its own connection is not synchronous=OFF; say FULL explicitly
        // rather than trust the build's default.
        schema::enable_full_sync(&checkpoint_conn)?;
        let (checkpoint_tx, checkpoint_rx) = crossbeam_channel::bounded(1);

        let shared = Arc::new(worker::Shared::default());
        let (writer_tx, writer_rx) = unbounded();
        let (reader_tx, reader_rx) = unbounded::<worker::ReadJob>();
        let mut threads = Vec::with_capacity(readers + 2);
        let writer_conn = Arc::new(Mutex::new(conn));
        let writer = worker::Writer {
            conn: writer_conn.clone(),
            rx: writer_rx,
            shared: shared.clone(),
            max_batch,
            faults: options.faults.clone(),
            checkpoint_tx: checkpoint_tx.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name("journal-writer".into())
                .spawn(move || writer.run())
                .map_err(|e| StoreError::Backend(Box::new(e)))?,
        );
        threads.push(
            std::thread::Builder::new()
                .name("journal-checkpoint".into())
                .spawn(move || worker::checkpointer_main(checkpoint_conn, checkpoint_rx))
                .map_err(|e| StoreError::Backend(Box::new(e)))?,
        );
        for (i, rc) in reader_conns.into_iter().enumerate() {
            let rx = reader_rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("journal-reader-{i}"))
                    .spawn(move || worker::reader_main(rc, rx))
                    .map_err(|e| StoreError::Backend(Box::new(e)))?,
            );
        }
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                default_project: options.default_project,
                shared,
                writer_tx: Some(writer_tx),
                reader_tx: Some(reader_tx),
                quick: Mutex::new(quick),
                writer_conn,
                faults: options.faults,
                outbox: std::sync::atomic::AtomicBool::new(false),
                checkpoint_tx: Some(checkpoint_tx),
                threads,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether a commit failure has poisoned this handle.
    pub fn is_poisoned(&self) -> bool {
        self.inner.shared.poisoned.load(Ordering::SeqCst)
    }

    /// Group-commit counters so far.
    pub fn writer_stats(&self) -> WriterStats {
        let s = &self.inner.shared;
        WriterStats {
            batches: s.batches.load(Ordering::Relaxed),
            jobs: s.jobs.load(Ordering::Relaxed),
            largest_batch: s.largest_batch.load(Ordering::Relaxed),
            job_wait: std::time::Duration::from_nanos(s.job_nanos.load(Ordering::Relaxed)),
            jobs_in_place: s.jobs_in_place.load(Ordering::Relaxed),
            cached_heads: s.heads.lock().map_or(0, |h| h.hits()),
        }
    }

    /// How point reads were served so far.
    pub fn read_stats(&self) -> ReadStats {
        let s = &self.inner.shared;
        ReadStats {
            in_place: s.reads_in_place.load(Ordering::Relaxed),
            on_threads: s.point_reads_on_threads.load(Ordering::Relaxed),
        }
    }

    /// Blocks the writer inside a batch until the returned guard is dropped,
    /// so writes submitted meanwhile are committed together (tests use it to
    /// build a batch deterministically).
    #[doc(hidden)]
    pub fn hold_writer(&self) -> WriterHold {
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let _pending = self.submit_write(move |_conn: &Connection| -> Result<(), StoreError> {
            let _ = started_tx.send(());
            let _ = release_rx.recv();
            Ok(())
        });
        // Wait until the writer is really parked inside its batch.
        let _ = started_rx.recv();
        WriterHold {
            _release: release_tx,
        }
    }

    /// Queues a write job now (not at first poll, so submission order is
    /// call order) and returns its reply.
    fn submit_write<T, E, F>(
        &self,
        op: F,
    ) -> impl Future<Output = Result<T, E>> + Send + use<T, E, F>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnMut(&Connection) -> Result<T, E> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let queued = if self.is_poisoned() {
            Err(StoreError::Poisoned)
        } else {
            let job: Box<dyn worker::WriteJob> = Box::new(worker::Job::new(op, tx));
            match self.inner.writer_tx.as_ref().map(|w| w.send(job)) {
                Some(Ok(())) => Ok(()),
                // The writer exited: it only does so once poisoned.
                _ => Err(StoreError::Poisoned),
            }
        };
        let shared = self.inner.shared.clone();
        async move {
            queued.map_err(E::from)?;
            rx.await.map_err(|_| {
                E::from(if shared.poisoned.load(Ordering::SeqCst) {
                    StoreError::Poisoned
                } else {
                    StoreError::Closed
                })
            })?
        }
    }

    /// The writer's connection inside a fresh write transaction, if the
    /// writer is idle right now (no batch in flight, nothing queued) and
    /// SQLite's write lock is free (another process may hold it). An
    /// in-place write holds the connection for the length of its commit,
    /// so queued writes wait behind it.
    fn begin_if_idle(&self) -> Option<MutexGuard<'_, Connection>> {
        let idle = self.inner.writer_tx.as_ref().is_some_and(|w| w.is_empty());
        if !idle || self.is_poisoned() {
            return None;
        }
        let conn = self.inner.writer_conn.try_lock().ok()?;
        if self.is_poisoned() || !worker::begin_now(&conn) {
            return None;
        }
        Some(conn)
    }

    /// Commits `op` as a transaction of its own on `conn` (from
    /// [`Self::begin_if_idle`]) on the caller's thread: the writer's own
    /// commit (same failure and poisoning rules) without the two thread
    /// hand-offs, for a caller that can block for the fsync.
    fn commit_in_place<T, E, F>(&self, conn: MutexGuard<'_, Connection>, op: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnMut(&Connection) -> Result<T, E> + Send + 'static,
    {
        let (tx, mut rx) = oneshot::channel();
        let core = worker::Core {
            shared: &self.inner.shared,
            faults: &self.inner.faults,
            checkpoint_tx: self.inner.checkpoint_tx.as_ref(),
        };
        core.commit_begun(conn, vec![Box::new(worker::Job::new(op, tx))]);
        self.inner
            .shared
            .jobs_in_place
            .fetch_add(1, Ordering::Relaxed);
        // commit() answers every job before it returns.
        rx.try_recv()
            .unwrap_or_else(|_| Err(E::from(StoreError::Poisoned)))
    }

    fn submit_read<T, F>(
        &self,
        op: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let queued = if self.is_poisoned() {
            Err(StoreError::Poisoned)
        } else {
            let job: worker::ReadJob = Box::new(move |conn: &Connection| {
                let _ = tx.send(op(conn));
            });
            match self.inner.reader_tx.as_ref().map(|r| r.send(job)) {
                Some(Ok(())) => Ok(()),
                _ => Err(StoreError::Closed),
            }
        };
        async move {
            queued?;
            rx.await.map_err(|_| StoreError::Closed)?
        }
    }

    /// Like `submit_read` for operations with their own error type.
    fn submit_read_with<T, E, F>(
        &self,
        op: F,
    ) -> impl Future<Output = Result<T, E>> + Send + use<T, E, F>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let fut = self.submit_read(move |conn| Ok(op(conn)));
        async move { fut.await.map_err(E::from)? }
    }
}

impl SqliteJournal {
    /// What an append needs besides the batch: the default project for a
    /// session row it creates or completes, and the events' stored blobs.
    fn append_parts(&self, batch: &AppendBatch) -> (String, Vec<Vec<u8>>) {
        let blobs = batch
            .events
            .iter()
            .map(agentsessions_journal::encode::encode_event)
            .collect();
        (self.inner.default_project.clone(), blobs)
    }
}

impl SqliteJournal {
    /// An append as a write job's operation (queued or in place).
    fn append_op(
        &self,
        batch: AppendBatch,
    ) -> impl FnMut(&Connection) -> Result<Vec<LogRecord>, AppendError> + Send + 'static {
        let (project, blobs) = self.append_parts(&batch);
        let shared = self.inner.shared.clone();
        let announce = self.inner.outbox.load(Ordering::SeqCst);
        move |conn| {
            let records = write_ops::append(conn, &batch, &blobs, &project, &shared.heads)?;
            if announce {
                // In the job's own transaction (or savepoint): a failure
                // here undoes the records too.
                outbox::announce(conn, &batch.session, &records, batch.now_unix_nanos)?;
            }
            Ok(records)
        }
    }

    /// A fence mint as a write job's operation (queued or in place).
    fn mint_op(
        &self,
        session: &str,
        now: i64,
        lease: Option<&LeaseClaim>,
    ) -> impl FnMut(&Connection) -> Result<i64, StoreError> + Send + 'static {
        let session = session.to_owned();
        let project = self.inner.default_project.clone();
        let lease = lease.cloned();
        let shared = self.inner.shared.clone();
        move |conn| {
            let heads = &shared.heads;
            write_ops::mint_fence(conn, &session, now, &project, lease.as_ref(), heads)
        }
    }
}

/// Releases a [`SqliteJournal::hold_writer`] when dropped.
#[doc(hidden)]
pub struct WriterHold {
    _release: std::sync::mpsc::Sender<()>,
}

impl JournalStore for SqliteJournal {
    fn set_meter(&self, meter: agentsessions_journal::Meter) {
        // Set once: a second daemon over the same handle keeps the first's.
        let _ = self.inner.shared.meter.set(meter);
    }

    fn set_outbox(&self, on: bool) {
        self.inner.outbox.store(on, Ordering::SeqCst);
    }

    fn append(
        &self,
        batch: AppendBatch,
    ) -> impl Future<Output = Result<Vec<LogRecord>, AppendError>> + Send {
        self.submit_write(self.append_op(batch))
    }

    fn fork(
        &self,
        batch: ForkBatch,
    ) -> impl Future<Output = Result<Vec<LogRecord>, AppendError>> + Send {
        let project = self.inner.default_project.clone();
        let blobs = batch
            .events
            .iter()
            .map(agentsessions_journal::encode::encode_event)
            .collect::<Vec<_>>();
        let shared = self.inner.shared.clone();
        self.submit_write(move |conn| {
            write_ops::fork(conn, &batch, &blobs, &project, &shared.heads)
        })
    }

    fn try_append_now(
        &self,
        batch: AppendBatch,
    ) -> Result<Result<Vec<LogRecord>, AppendError>, AppendBatch> {
        let Some(conn) = self.begin_if_idle() else {
            return Err(batch);
        };
        Ok(self.commit_in_place(conn, self.append_op(batch)))
    }

    fn try_mint_fence_now(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> Option<Result<i64, StoreError>> {
        let conn = self.begin_if_idle()?;
        Some(self.commit_in_place(conn, self.mint_op(session, now_unix_nanos, lease)))
    }

    fn mint_fence(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send {
        self.submit_write(self.mint_op(session, now_unix_nanos, lease))
    }

    fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl_nanos: i64,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let session = session.to_owned();
        let owner = owner.to_owned();
        self.submit_write(move |conn| {
            write_ops::hold_lease(conn, &session, &owner, fence, ttl_nanos, now_unix_nanos)
        })
    }

    fn head(&self, session: &str) -> impl Future<Output = Result<i64, StoreError>> + Send {
        let session = session.to_owned();
        let done = self.try_quick(|conn| read_ops::head(conn, &session).map(Some));
        self.quick_or_read(done, move |conn| read_ops::head(conn, &session))
    }

    fn read(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> impl Future<Output = Result<Vec<LogRecord>, StoreError>> + Send {
        let session = session.to_owned();
        if from_seq <= 1 {
            // A whole journal: a scan, for the reader threads.
            return futures_util::future::Either::Left(
                self.submit_read(move |conn| read_ops::read(conn, &session, from_seq, to_seq)),
            );
        }
        let done = self.try_quick(|conn| {
            read_ops::read_at_most(conn, &session, from_seq, to_seq, quick::QUICK_RECORDS)
        });
        futures_util::future::Either::Right(self.quick_or_read(done, move |conn| {
            read_ops::read(conn, &session, from_seq, to_seq)
        }))
    }

    fn read_bounded(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Vec<LogRecord>, StoreError>> + Send {
        let session = session.to_owned();
        self.submit_read(move |conn| {
            read_ops::read_bounded(conn, &session, from_seq, to_seq, max_bytes)
        })
    }

    fn verify(&self, session: &str) -> impl Future<Output = Result<(), VerifyError>> + Send {
        let session = session.to_owned();
        self.submit_read_with(move |conn| read_ops::verify(conn, &session))
    }

    fn put_session(
        &self,
        meta: SessionMeta,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let project = self.inner.default_project.clone();
        let shared = self.inner.shared.clone();
        self.submit_write(move |conn| {
            write_ops::put_session(conn, &meta, now_unix_nanos, &project, &shared.heads)
        })
    }

    fn session_info(
        &self,
        uid: &str,
    ) -> impl Future<Output = Result<SessionInfo, StoreError>> + Send {
        let uid = uid.to_owned();
        let done = self.try_quick(|conn| read_ops::session_info(conn, &uid).map(Some));
        self.quick_or_read(done, move |conn| read_ops::session_info(conn, &uid))
    }

    fn list_sessions(
        &self,
        req: ListSessions,
    ) -> impl Future<Output = Result<SessionPage, StoreError>> + Send {
        let project = self.inner.default_project.clone();
        self.submit_read(move |conn| read_ops::list_sessions(conn, &req, &project))
    }

    fn register_harness(
        &self,
        reg: HarnessRegistration,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(HarnessRow, RegisterOutcome), RegistryError>> + Send {
        self.submit_write(move |conn| write_ops::register_harness(conn, &reg, now_unix_nanos))
    }

    fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<HarnessRow, RegistryError>> + Send {
        let (name, reason) = (name.to_owned(), reason.to_owned());
        self.submit_write(move |conn| {
            write_ops::retire_harness(conn, &name, &reason, now_unix_nanos)
        })
    }

    fn harness(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<HarnessRow, RegistryError>> + Send {
        let name = name.to_owned();
        self.submit_read_with(move |conn| {
            read_ops::harness_row(conn, &name)?.ok_or(RegistryError::NotFound { name })
        })
    }

    fn list_harnesses(
        &self,
        req: ListHarnesses,
    ) -> impl Future<Output = Result<Vec<HarnessRow>, StoreError>> + Send {
        self.submit_read(move |conn| read_ops::list_harnesses(conn, &req))
    }

    fn reserve_harness_names(
        &self,
        names: Vec<String>,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send {
        self.submit_write(move |conn| {
            write_ops::reserve_harness_names(conn, &names, now_unix_nanos)
        })
    }

    fn delete_session(
        &self,
        req: DeleteSession,
    ) -> impl Future<Output = Result<Tombstone, DeleteError>> + Send {
        let shared = self.inner.shared.clone();
        self.submit_write(move |conn| write_ops::delete_session(conn, &req, &shared.heads))
    }

    fn tombstone(
        &self,
        uid: &str,
    ) -> impl Future<Output = Result<Option<Tombstone>, StoreError>> + Send {
        let uid = uid.to_owned();
        self.submit_read(move |conn| read_ops::tombstone(conn, &uid))
    }

    fn stale_sessions(
        &self,
        scan: StaleScan,
    ) -> impl Future<Output = Result<StalePage, StoreError>> + Send {
        self.submit_read(move |conn| read_ops::stale_sessions(conn, &scan))
    }

    fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send {
        let project = self.inner.default_project.clone();
        let shared = self.inner.shared.clone();
        self.submit_write(move |conn| {
            write_ops::put_session_on_active_harness(
                conn,
                &meta,
                registered,
                now_unix_nanos,
                &project,
                &shared.heads,
            )
        })
    }
}

/// What the contract's fork checks count: rows of `events` and of
/// `session_prefixes`, read on a connection of their own.
impl agentsessions_journal::contract::StoredRows for SqliteJournal {
    async fn stored(&self) -> (i64, i64) {
        let conn = Connection::open(self.path()).expect("the journal file opens");
        conn.query_row(
            "SELECT (SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM session_prefixes)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the row counts read")
    }
}
