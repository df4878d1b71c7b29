//! The threads behind a [`super::SqliteJournal`]: one group-committing writer
//! and a few readers.
//!
//! # Group commit
//!
//! The writer owns the only write connection. It blocks for one job, then
//! drains whatever else is already queued (up to `max_batch`) and runs the
//! lot in ONE `BEGIN IMMEDIATE` transaction. A job that fails (CAS
//! conflict, stale fence, bad input) leaves the others alone: jobs check
//! before they write, so a failed job has almost always written nothing,
//! and SQLite undoes a failed statement by itself. The writer checks that
//! (the connection's change counter did not move); in the rare case a job
//! failed after writing, it rolls the whole batch back and runs it again
//! with each job inside its own SAVEPOINT, where the failed job rolls back
//! alone. Then COMMIT, which with `synchronous=FULL` fsyncs the WAL once for
//! the whole batch. Only after COMMIT returns does any job learn its
//! result, so an acknowledgement always means durable.
//!
//! No timer is involved: while one batch is committing, the next one queues
//! up, so batches grow exactly as fast as the disk is slow.
//!
//! # Failure
//!
//! If COMMIT itself fails (or SQLite abandons the transaction midway), the
//! state of the batch on disk is unknown. Every job of the batch gets
//! `CommitFailed`, the handle is poisoned, and the writer stops; callers must
//! reopen and re-read the journal rather than guess.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::heads::Heads;
use agentsessions_journal::StoreError;

/// Why a whole batch failed.
#[derive(Debug, Clone)]
pub enum BatchFailure {
    /// BEGIN failed: nothing of this batch was written.
    Begin(String),
    /// COMMIT failed or the transaction was lost: outcome unknown.
    Unknown(String),
    /// The job was queued behind a failed commit and never ran.
    Poisoned,
}

impl BatchFailure {
    fn to_store_error(&self) -> StoreError {
        match self {
            BatchFailure::Begin(reason) => {
                StoreError::Backend(format!("begin transaction: {reason}").into())
            }
            BatchFailure::Unknown(reason) => StoreError::CommitFailed {
                reason: reason.clone(),
            },
            BatchFailure::Poisoned => StoreError::Poisoned,
        }
    }
}

/// One queued write. `stage` runs inside the batch transaction; `finish`
/// delivers the result once the batch's fate is known.
pub trait WriteJob: Send {
    /// Runs the operation; returns whether it succeeded (and so must be kept).
    /// Runs again (the last result wins) when its batch is re-run.
    fn stage(&mut self, conn: &Connection) -> bool;
    fn finish(self: Box<Self>, batch: Result<(), BatchFailure>);
    /// When the job was queued.
    fn queued_at(&self) -> Instant;
}

/// A typed job: an operation closure and the reply channel for its result.
pub struct Job<T, E, F> {
    op: F,
    result: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<T, E>>,
    queued: Instant,
}

impl<T, E, F> Job<T, E, F> {
    pub fn new(op: F, reply: oneshot::Sender<Result<T, E>>) -> Self {
        Self {
            op,
            result: None,
            reply,
            queued: Instant::now(),
        }
    }
}

impl<T, E, F> WriteJob for Job<T, E, F>
where
    T: Send,
    E: From<StoreError> + Send,
    F: FnMut(&Connection) -> Result<T, E> + Send,
{
    fn stage(&mut self, conn: &Connection) -> bool {
        let r = (self.op)(conn);
        let ok = r.is_ok();
        self.result = Some(r);
        ok
    }

    fn finish(self: Box<Self>, batch: Result<(), BatchFailure>) {
        let out = match batch {
            Ok(()) => self.result.expect("finish after stage on success"),
            Err(f) => Err(E::from(f.to_store_error())),
        };
        // The caller may have stopped waiting; the write stands regardless.
        let _ = self.reply.send(out);
    }

    fn queued_at(&self) -> Instant {
        self.queued
    }
}

/// Test-only fault injection for the writer.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// After this many successful commits, the next COMMIT goes through on
    /// disk but is reported as failed (an fsync error after the write).
    pub fail_commit_after: Option<u64>,
}

/// State shared between the handle and its writer.
#[derive(Debug, Default)]
pub struct Shared {
    pub poisoned: AtomicBool,
    pub batches: AtomicU64,
    pub jobs: AtomicU64,
    pub largest_batch: AtomicU64,
    /// Sum over committed jobs of the time from queueing to the reply.
    pub job_nanos: AtomicU64,
    /// Successful commits, by the writer thread or in place.
    pub commits: AtomicU64,
    /// Jobs committed in place on a caller's thread.
    pub jobs_in_place: AtomicU64,
    /// Point reads answered on the caller's thread / sent to a reader.
    pub reads_in_place: AtomicU64,
    pub point_reads_on_threads: AtomicU64,
    /// Where commit timings go, once a daemon with metrics sets it.
    pub meter: std::sync::OnceLock<agentsessions_journal::Meter>,
    /// The writer's view of session heads (locked only briefly, and only
    /// by whoever holds the writer's connection).
    pub heads: Mutex<Heads>,
}

pub struct Writer {
    /// Shared with point reads, which use it between batches (its page
    /// cache holds what the last commits wrote).
    pub conn: Arc<Mutex<Connection>>,
    pub rx: Receiver<Box<dyn WriteJob>>,
    pub shared: Arc<Shared>,
    pub max_batch: usize,
    pub faults: Faults,
    /// Nudges the checkpointer after each commit (capacity 1, never blocks).
    pub checkpoint_tx: Sender<()>,
}

impl Writer {
    pub fn run(self) {
        while let Ok(first) = self.rx.recv() {
            let mut jobs = vec![first];
            while jobs.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            if !self.core().commit(conn, jobs) {
                break;
            }
        }
        // Poisoned or closed: whatever is still queued never ran.
        while let Ok(job) = self.rx.try_recv() {
            job.finish(Err(BatchFailure::Poisoned));
        }
    }

    fn core(&self) -> Core<'_> {
        Core {
            shared: &self.shared,
            faults: &self.faults,
            checkpoint_tx: Some(&self.checkpoint_tx),
        }
    }
}

/// What a commit needs besides the connection; the writer thread and an
/// in-place commit on a caller's thread share it.
pub struct Core<'a> {
    pub shared: &'a Shared,
    pub faults: &'a Faults,
    /// None only while the store is being dropped.
    pub checkpoint_tx: Option<&'a Sender<()>>,
}

impl Core<'_> {
    /// Commits `jobs` as one transaction on `conn` (held exclusively by the
    /// caller) and answers each. Returns false once the store is poisoned:
    /// by this commit's failure or an earlier one.
    ///
    /// The connection's lock is released before the replies go out, so a
    /// caller woken by its reply finds the writer free.
    pub fn commit(&self, conn: MutexGuard<'_, Connection>, jobs: Vec<Box<dyn WriteJob>>) -> bool {
        self.commit_inner(conn, jobs, false)
    }

    /// [`Core::commit`] on a connection already inside the `BEGIN
    /// IMMEDIATE` of [`begin_now`].
    pub fn commit_begun(
        &self,
        conn: MutexGuard<'_, Connection>,
        jobs: Vec<Box<dyn WriteJob>>,
    ) -> bool {
        self.commit_inner(conn, jobs, true)
    }

    fn commit_inner(
        &self,
        conn: MutexGuard<'_, Connection>,
        mut jobs: Vec<Box<dyn WriteJob>>,
        begun: bool,
    ) -> bool {
        if self.shared.poisoned.load(Ordering::SeqCst) {
            if begun {
                let _ = conn.execute_batch("ROLLBACK");
            }
            drop(conn);
            jobs.into_iter()
                .for_each(|j| j.finish(Err(BatchFailure::Poisoned)));
            return false;
        }
        let inject =
            self.faults.fail_commit_after == Some(self.shared.commits.load(Ordering::SeqCst));
        let started = Instant::now();
        let outcome = run_batch(&conn, &mut jobs, inject, begun, &self.shared.heads);
        if outcome.is_err() {
            // Whatever was undone, no cached head may describe it.
            lock(&self.shared.heads).clear();
        }
        let took = started.elapsed();
        if matches!(
            outcome,
            Err(BatchFailure::Unknown(_) | BatchFailure::Poisoned)
        ) {
            // Before the lock goes: whoever takes the connection next must
            // see the store poisoned.
            self.shared.poisoned.store(true, Ordering::SeqCst);
        }
        drop(conn);
        match outcome {
            Ok(()) => {
                self.shared.commits.fetch_add(1, Ordering::SeqCst);
                self.record(jobs.len());
                let meter = self.shared.meter.get();
                if let Some(m) = meter {
                    m.committed(jobs.len(), took, begun);
                }
                let mut waited = Duration::ZERO;
                for job in jobs {
                    let queued = job.queued_at().elapsed();
                    if let Some(m) = meter {
                        m.appended(queued);
                    }
                    waited += queued;
                    job.finish(Ok(()));
                }
                let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
                self.shared.job_nanos.fetch_add(nanos, Ordering::Relaxed);
                // After the replies: waking the checkpointer is not on
                // any caller's path. Full means a nudge is pending.
                if let Some(nudge) = self.checkpoint_tx {
                    let _ = nudge.try_send(());
                }
                true
            }
            Err(f @ BatchFailure::Begin(_)) => {
                jobs.into_iter().for_each(|j| j.finish(Err(f.clone())));
                true
            }
            Err(f @ (BatchFailure::Unknown(_) | BatchFailure::Poisoned)) => {
                jobs.into_iter().for_each(|j| j.finish(Err(f.clone())));
                false
            }
        }
    }

    fn record(&self, n: usize) {
        self.shared.batches.fetch_add(1, Ordering::Relaxed);
        self.shared.jobs.fetch_add(n as u64, Ordering::Relaxed);
        self.shared
            .largest_batch
            .fetch_max(n as u64, Ordering::Relaxed);
    }
}

/// Opens the write transaction without waiting: with SQLite's write lock
/// held by another process, an in-place caller must not sit out the busy
/// timeout on its own thread (it queues for the writer instead). False when
/// the lock was not taken; no transaction is then open.
pub fn begin_now(conn: &Connection) -> bool {
    debug_assert!(conn.is_autocommit(), "no transaction left open");
    let _ = conn.busy_timeout(Duration::ZERO);
    let begun = conn
        .prepare_cached("BEGIN IMMEDIATE")
        .and_then(|mut s| s.execute([]))
        .is_ok();
    let _ = conn.busy_timeout(super::schema::BUSY_TIMEOUT);
    begun
}

fn lock(heads: &Mutex<Heads>) -> MutexGuard<'_, Heads> {
    heads.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `jobs` in one transaction and commits it. On any error, nothing
/// of the batch may be assumed written, and the caller empties `heads`.
fn run_batch(
    conn: &Connection,
    jobs: &mut [Box<dyn WriteJob>],
    inject: bool,
    begun: bool,
    heads: &Mutex<Heads>,
) -> Result<(), BatchFailure> {
    // Transactions are only opened under the connection's lock and
    // always closed before it is released.
    debug_assert_eq!(
        conn.is_autocommit(),
        !begun,
        "a batch starts outside a transaction unless begin_now opened it"
    );
    // Cached statements: parsing these per job would cost more than the
    // savepoint itself.
    let exec = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(drop)
    };
    let rollback = || {
        lock(heads).clear();
        conn.execute_batch("ROLLBACK")
            .map_err(|e| BatchFailure::Unknown(format!("rollback: {e}")))
    };
    if !begun {
        exec("BEGIN IMMEDIATE").map_err(|e| BatchFailure::Begin(e.to_string()))?;
    }
    let checked = lock(heads).check_version(conn);
    if checked.is_err() {
        lock(heads).clear();
    }
    if let [job] = jobs {
        // Alone in its transaction, a job needs no savepoint: on failure
        // the whole transaction is rolled back instead.
        let before = conn.total_changes();
        if !job.stage(conn) {
            if conn.is_autocommit() {
                return Err(BatchFailure::Unknown("transaction aborted".into()));
            }
            if conn.total_changes() == before {
                // Nothing was written, so every cached head still holds.
                return conn
                    .execute_batch("ROLLBACK")
                    .map_err(|e| BatchFailure::Unknown(format!("rollback: {e}")));
            }
            return rollback();
        }
    } else if !stage_all(conn, jobs)? {
        // A job failed after writing: start over with a savepoint per job.
        rollback()?;
        exec("BEGIN IMMEDIATE").map_err(|e| BatchFailure::Begin(e.to_string()))?;
        stage_with_savepoints(conn, jobs)?;
    }
    match exec("COMMIT") {
        Ok(()) if inject => Err(BatchFailure::Unknown("injected commit failure".into())),
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(BatchFailure::Unknown(e.to_string()))
        }
    }
}

/// Stages every job in the open transaction without savepoints. False as
/// soon as one fails having written something (its writes cannot be
/// undone alone); a job that fails without writing leaves nothing behind,
/// because SQLite undoes a failed statement itself.
fn stage_all(conn: &Connection, jobs: &mut [Box<dyn WriteJob>]) -> Result<bool, BatchFailure> {
    for job in jobs.iter_mut() {
        let before = conn.total_changes();
        if job.stage(conn) {
            continue;
        }
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back under us (I/O error,
            // disk full...): the batch is gone.
            return Err(BatchFailure::Unknown("transaction aborted".into()));
        }
        if conn.total_changes() != before {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Stages every job inside a SAVEPOINT of its own: a failed job rolls back
/// to it and leaves the others alone.
fn stage_with_savepoints(
    conn: &Connection,
    jobs: &mut [Box<dyn WriteJob>],
) -> Result<(), BatchFailure> {
    // Cached statements: parsing these per job would cost more than the
    // savepoint itself.
    let exec = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(drop)
    };
    for job in jobs.iter_mut() {
        let step = exec("SAVEPOINT job").and_then(|()| {
            if job.stage(conn) {
                exec("RELEASE job")
            } else if conn.is_autocommit() {
                // The whole transaction was rolled back under us.
                Err(rusqlite::Error::InvalidQuery)
            } else {
                exec("ROLLBACK TO job").and_then(|()| exec("RELEASE job"))
            }
        });
        if let Err(e) = step {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(BatchFailure::Unknown(format!("transaction aborted: {e}")));
        }
    }
    Ok(())
}

/// A read task: runs on some reader's connection.
pub type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

pub fn reader_main(conn: Connection, rx: Receiver<ReadJob>) {
    while let Ok(job) = rx.recv() {
        job(&conn);
    }
}

/// How often at most the checkpointer runs.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(20);

/// Copies WAL frames back into the database file off the writer thread.
///
/// With SQLite's automatic checkpoint the writer would stop every ~1000
/// pages to copy them and fsync the main file, stalling every queued append.
/// A PASSIVE checkpoint from this connection runs beside the writer instead;
/// the writer keeps a large automatic threshold only as a backstop in case
/// this thread falls behind. Durability is unaffected: a commit is durable
/// once its WAL frames are synced, before any checkpoint.
pub fn checkpointer_main(conn: Connection, rx: Receiver<()>) {
    while rx.recv().is_ok() {
        // Errors (e.g. busy) just mean "try again after the next commit".
        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        std::thread::sleep(CHECKPOINT_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Reply = oneshot::Receiver<Result<(), StoreError>>;

    fn job(
        op: impl FnMut(&Connection) -> Result<(), StoreError> + Send + 'static,
    ) -> (Box<dyn WriteJob>, Reply) {
        let (tx, rx) = oneshot::channel();
        (Box::new(Job::new(op, tx)), rx)
    }

    fn insert(conn: &Connection, x: i64) -> Result<(), StoreError> {
        conn.execute("INSERT INTO t(x) VALUES (?1)", [x])
            .map_err(crate::db)?;
        Ok(())
    }

    fn rows(conn: &Connection) -> Vec<i64> {
        let mut stmt = conn.prepare("SELECT x FROM t ORDER BY x").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Runs `ops` as one batch and returns each job's result.
    fn batch(conn: &Connection, ops: Vec<(Box<dyn WriteJob>, Reply)>) -> Vec<bool> {
        let (mut jobs, replies): (Vec<_>, Vec<_>) = ops.into_iter().unzip();
        run_batch(conn, &mut jobs, false, false, &Mutex::default()).expect("the batch commits");
        jobs.into_iter().for_each(|j| j.finish(Ok(())));
        replies
            .into_iter()
            .map(|mut r| r.try_recv().expect("answered").is_ok())
            .collect()
    }

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t(x INTEGER PRIMARY KEY)")
            .unwrap();
        conn
    }

    #[test]
    fn a_job_that_fails_before_writing_leaves_its_batch_alone() {
        let conn = table();
        insert(&conn, 1).unwrap();
        let results = batch(
            &conn,
            vec![
                job(|c| insert(c, 2)),
                // A failed statement is undone by SQLite itself.
                job(|c| insert(c, 1)),
                job(|c| insert(c, 3)),
            ],
        );
        assert_eq!(results, [true, false, true]);
        assert_eq!(rows(&conn), [1, 2, 3]);
    }

    #[test]
    fn a_job_that_fails_after_writing_is_rolled_back_alone() {
        let conn = table();
        let results = batch(
            &conn,
            vec![
                job(|c| insert(c, 1)),
                job(|c| {
                    insert(c, 2)?;
                    Err(StoreError::InvalidArgument("refused after a write".into()))
                }),
                job(|c| insert(c, 3)),
            ],
        );
        assert_eq!(results, [true, false, true]);
        assert_eq!(rows(&conn), [1, 3], "the failed job's write is gone");
        assert!(conn.is_autocommit(), "the batch is committed");
    }
}
