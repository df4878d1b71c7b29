//! An in-memory [`JournalStore`] that knows which writes are durable.
//!
//! madsim has no filesystem crash model and SQLite bypasses it anyway, so
//! the simulator puts the journal behind this store instead. It keeps the
//! SQLite store's contract (CAS, fence, hash chain, compute_state, keyset
//! paging, registry rows — see [`tables`]) and adds what a crash test needs:
//!
//! * A [`MemoryDisk`] is the database file: it outlives every process that
//!   opens it. A [`MemoryJournal`] is one process's open handle (a
//!   *writer*); a restarted host opens a new one on the same disk.
//! * A write is applied at once to the **live** tables (later writes of the
//!   same writer check their CAS against it, as later jobs of one SQLite
//!   group-commit batch see earlier ones) but stays **pending** until a
//!   commit point makes it **durable**. Commits are in order, so a commit
//!   point makes every earlier pending write durable too (group commit).
//! * Reads see only durable state, as SQLite WAL readers see the last
//!   committed transaction.
//! * A write is acknowledged (its future resolves) only once durable.
//! * One writer holds the write lock while it has pending writes; another
//!   writer's write waits for that commit (SQLite's `BEGIN IMMEDIATE`).
//! * [`MemoryDisk::crash`] is a power cut of one writer's process: its
//!   pending writes are lost, except a prefix the caller chooses to keep
//!   (committed, acknowledgement lost), optionally followed by a torn
//!   append of which only the first events reached the disk.
//!
//! Time is never read here: stamps come from the caller, and the commit
//! latency is a `tokio::time::sleep`, which madsim simulates.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentsessions_proto::v1::LogRecord;
use tokio::sync::Notify;

use crate::outbox::{Notice, NoticeClaim, Outbox, OutboxStats, Settle};
use crate::{
    AppendBatch, AppendError, DEFAULT_PROJECT, DeleteError, DeleteSession, ForkBatch,
    HarnessRegistration, HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions,
    RegisterOutcome, RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan,
    StoreError, Tombstone, VerifyError,
};

mod instant;
mod tables;
#[cfg(test)]
mod tests;

pub use instant::InstantStore;
pub use tables::{Session as StoredSession, SessionImage, Tables};

/// True when the simulator armed the planted bug `$fault` (feature
/// `faults`); a constant false otherwise.
macro_rules! planted {
    ($fault:ident) => {{
        #[cfg(feature = "faults")]
        let armed =
            agentsessions_machine::faults::active(agentsessions_machine::faults::Fault::$fault);
        #[cfg(not(feature = "faults"))]
        let armed = false;
        armed
    }};
}
pub(crate) use planted;

/// When a writer's pending writes become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Each write waits this long (its "fsync"), then commits everything
    /// pending up to and including itself. Zero still yields once, so
    /// concurrent writes can share a commit.
    After(Duration),
    /// Writes wait until [`MemoryDisk::sync`] (or a crash) resolves them;
    /// for tests that place crash points by hand.
    Manual,
}

/// One write, kept so a commit (or a torn crash) can re-apply it to the
/// durable tables exactly as it was applied to the live ones.
#[derive(Debug, Clone)]
enum WriteOp {
    /// The batch, and whether the writer's outbox was on.
    Append(AppendBatch, bool),
    Claim(NoticeClaim),
    /// Owner, event id, how.
    Settle(String, String, Settle),
    /// Owner.
    Release(String),
    Fork(ForkBatch),
    Mint(String, i64, Option<LeaseClaim>),
    HoldLease(String, String, i64, i64, i64),
    Put(SessionMeta, i64),
    PutOnActive(SessionMeta, bool, i64),
    Register(HarnessRegistration, i64),
    Retire(String, String, i64),
    Reserve(Vec<String>),
    Delete(DeleteSession),
}

impl WriteOp {
    /// Applies the op; `Err` carries the refusal text (the typed error is
    /// produced by the live application, which the caller sees).
    fn apply(&self, t: &mut Tables, project: &str) -> Result<(), String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            Self::Append(b, on) => t
                .append_announcing(b, project, *on)
                .map(drop)
                .map_err(|e| text(&e)),
            Self::Claim(c) => t.notices_mut().claim(c).map(drop).map_err(|e| text(&e)),
            Self::Settle(owner, id, how) => {
                t.notices_mut().settle(owner, id, how);
                Ok(())
            }
            Self::Release(owner) => {
                t.notices_mut().release(owner);
                Ok(())
            }
            Self::Fork(b) => t.fork(b, project).map(drop).map_err(|e| text(&e)),
            Self::Mint(s, now, lease) => t
                .mint_fence(s, *now, project, lease.as_ref())
                .map(drop)
                .map_err(|e| text(&e)),
            Self::HoldLease(s, owner, fence, ttl, now) => t
                .hold_lease(s, owner, *fence, *ttl, *now)
                .map(drop)
                .map_err(|e| text(&e)),
            Self::Put(m, now) => t.put_session(m, *now, project).map_err(|e| text(&e)),
            Self::PutOnActive(m, reg, now) => t
                .put_session_on_active_harness(m, *reg, *now, project)
                .map_err(|e| text(&e)),
            Self::Register(r, now) => t.register_harness(r, *now).map(drop).map_err(|e| text(&e)),
            Self::Retire(n, why, now) => t
                .retire_harness(n, why, *now)
                .map(drop)
                .map_err(|e| text(&e)),
            Self::Reserve(names) => t.reserve_harness_names(names).map_err(|e| text(&e)),
            Self::Delete(req) => t.delete_session(req).map(drop).map_err(|e| text(&e)),
        }
    }
}

#[derive(Debug, Clone)]
struct Tx {
    id: u64,
    op: WriteOp,
}

#[derive(Debug, Default)]
struct DiskState {
    durable: Tables,
    /// `durable` with every pending write applied.
    live: Tables,
    /// Pending writes in commit order, all of `owner`.
    pending: Vec<Tx>,
    /// The writer holding the write lock (the owner of `pending`).
    owner: Option<u64>,
    /// Writes lost in a crash (torn ones included: never acknowledged).
    lost: BTreeSet<u64>,
    /// Writers whose process crashed; their handles refuse everything.
    crashed: BTreeSet<u64>,
    next_tx: u64,
    next_writer: u64,
    stats: DiskStats,
}

/// Counters for traces and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Commit points that made at least one write durable.
    pub commits: u64,
    /// Writes made durable by commit points.
    pub committed: u64,
    /// Writes lost in crashes.
    pub lost: u64,
    /// Appends torn by crashes.
    pub torn: u64,
    /// Crashes.
    pub crashes: u64,
}

/// What a crash keeps of the crashing writer's pending writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashCut {
    /// The first `keep` pending writes reached the disk (their
    /// acknowledgements did not reach the process).
    pub keep: usize,
    /// Then only the first `n` events of the next pending write, if it is
    /// an append of more than `n` events — a tear SQLite's atomic commit
    /// rules out, kept for journals written by non-atomic writers.
    pub tear: Option<usize>,
}

/// The database file. See the module docs.
#[derive(Debug)]
pub struct MemoryDisk {
    default_project: String,
    state: Mutex<DiskState>,
    /// Fired whenever the write lock is released or a write resolves.
    changed: Notify,
}

impl Default for MemoryDisk {
    fn default() -> Self {
        Self::new(DEFAULT_PROJECT)
    }
}

/// A copy of the durable tables, for checking a run after the fact.
#[derive(Debug, Clone)]
pub struct DurableImage(Tables);

impl DurableImage {
    /// Every session with a row.
    pub fn sessions(&self) -> Vec<String> {
        self.0.sessions()
    }
    /// The durable records of `session`, in seq order.
    pub fn records(&self, session: &str) -> std::borrow::Cow<'_, [LogRecord]> {
        self.0.records(session)
    }

    /// Records stored (each once, fork prefixes included once).
    pub fn stored_records(&self) -> usize {
        self.0.stored_records()
    }

    /// Fork prefix spans stored.
    pub fn stored_spans(&self) -> usize {
        self.0.stored_spans()
    }
    /// The durable row of `session`.
    pub fn deleted(&self) -> Vec<String> {
        self.0.deleted()
    }

    pub fn info(&self, session: &str) -> Option<SessionInfo> {
        self.0.session_info(session).ok()
    }
}

impl MemoryDisk {
    /// An empty disk; rows created implicitly land in `default_project`.
    pub fn new(default_project: &str) -> Self {
        Self {
            default_project: default_project.to_owned(),
            state: Mutex::new(DiskState::default()),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        // A panic elsewhere (a failing test) must not hide the disk.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a new handle (a new writer) with the given commit policy.
    pub fn open(self: &Arc<Self>, durability: Durability) -> MemoryJournal {
        let mut st = self.lock();
        st.next_writer += 1;
        MemoryJournal {
            disk: Arc::clone(self),
            writer: st.next_writer,
            durability,
            outbox: AtomicBool::new(false),
        }
    }

    /// The durable state, as a crash would leave it.
    pub fn durable(&self) -> DurableImage {
        DurableImage(self.lock().durable.clone())
    }

    /// Counters so far.
    pub fn stats(&self) -> DiskStats {
        self.lock().stats
    }

    /// Event counts of `writer`'s pending writes in commit order (0 for a
    /// write that is not an append); empty when it holds none.
    pub fn pending_of(&self, writer: u64) -> Vec<usize> {
        let st = self.lock();
        if st.owner != Some(writer) {
            return Vec::new();
        }
        st.pending
            .iter()
            .map(|tx| match &tx.op {
                WriteOp::Append(b, _) => b.events.len(),
                _ => 0,
            })
            .collect()
    }

    /// Makes every pending write durable (a commit point).
    pub fn sync(&self) {
        let mut st = self.lock();
        let through = st.pending.last().map_or(0, |tx| tx.id);
        self.commit_through(&mut st, through);
    }

    fn commit_through(&self, st: &mut DiskState, id: u64) {
        let n = st.pending.iter().take_while(|tx| tx.id <= id).count();
        if n == 0 {
            return;
        }
        let project = self.default_project.clone();
        for tx in st.pending.drain(..n).collect::<Vec<_>>() {
            tx.op
                .apply(&mut st.durable, &project)
                .expect("a write that applied to the live tables applies to the durable ones");
        }
        st.stats.commits += 1;
        st.stats.committed += n as u64;
        if st.pending.is_empty() {
            st.owner = None;
            debug_assert_eq!(st.live, st.durable);
        }
        self.changed.notify_waiters();
    }

    /// A power cut of `writer`'s process: its pending writes are lost
    /// except as `cut` says, and its handle refuses everything after. Call
    /// it *before* the process's tasks are dropped (madsim drops a killed
    /// node's futures), so nothing commits in between.
    pub fn crash(&self, writer: u64, cut: CrashCut) {
        let mut st = self.lock();
        st.crashed.insert(writer);
        st.stats.crashes += 1;
        if st.owner != Some(writer) {
            return;
        }
        let keep = cut.keep.min(st.pending.len());
        if keep > 0 {
            let through = st.pending[keep - 1].id;
            self.commit_through(&mut st, through);
        }
        let project = self.default_project.clone();
        let lost: Vec<Tx> = std::mem::take(&mut st.pending);
        if let (
            Some(n),
            Some(Tx {
                op: WriteOp::Append(b, announce),
                ..
            }),
        ) = (cut.tear, lost.first())
            && n > 0
            && n < b.events.len()
        {
            let mut torn = b.clone();
            torn.events.truncate(n);
            // The machine's compute_state was for the whole batch; the row
            // a torn write leaves reflects the records that landed, by the
            // machine's own rule.
            torn.compute_state =
                agentsessions_machine::journal::projection::batch_compute_state(&torn.events);
            // The records that landed keep their notices: same transaction.
            st.durable
                .append_announcing(&torn, &project, *announce)
                .expect("a prefix of an applied append applies");
            st.stats.torn += 1;
        }
        st.stats.lost += lost.len() as u64;
        st.lost.extend(lost.iter().map(|tx| tx.id));
        st.live = st.durable.clone();
        st.owner = None;
        self.changed.notify_waiters();
    }
}

/// One process's handle onto a [`MemoryDisk`]. Cheap to share via `Arc`.
#[derive(Debug)]
pub struct MemoryJournal {
    disk: Arc<MemoryDisk>,
    writer: u64,
    durability: Durability,
    /// Whether this writer's appends insert notice rows.
    outbox: AtomicBool,
}

/// Commits the write if its future is dropped before its commit point, as
/// the SQLite writer thread commits whether or not the caller still waits.
/// A crashed writer's pending writes are gone already, so nothing happens.
struct CommitOnDrop<'a> {
    disk: &'a MemoryDisk,
    writer: u64,
    id: u64,
    armed: bool,
}

impl Drop for CommitOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.disk.lock();
        if !st.crashed.contains(&self.writer) && st.durability_pending(self.id) {
            self.disk.commit_through(&mut st, self.id);
        }
    }
}

impl DiskState {
    fn durability_pending(&self, id: u64) -> bool {
        self.pending.iter().any(|tx| tx.id == id)
    }
}

impl MemoryJournal {
    /// This handle's writer id (what [`MemoryDisk::crash`] takes).
    pub fn writer(&self) -> u64 {
        self.writer
    }

    /// The disk this handle writes.
    pub fn disk(&self) -> &Arc<MemoryDisk> {
        &self.disk
    }

    fn durable_read<T>(
        &self,
        f: impl FnOnce(&Tables) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let st = self.disk.lock();
        if st.crashed.contains(&self.writer) {
            return Err(StoreError::Closed);
        }
        f(&st.durable)
    }

    /// Applies `op` to the live tables under the write lock, then waits
    /// for its commit point. `apply` is the typed live application.
    async fn write<T, E: From<StoreError>>(
        &self,
        op: WriteOp,
        apply: impl Fn(&mut Tables, &str) -> Result<T, E>,
    ) -> Result<T, E> {
        let disk = &*self.disk;
        let (value, id) = loop {
            let changed = disk.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut st = disk.lock();
                if st.crashed.contains(&self.writer) {
                    return Err(StoreError::Closed.into());
                }
                if st.owner.is_none_or(|w| w == self.writer) {
                    // A refused write changes nothing and needs no commit.
                    let value = apply(&mut st.live, &disk.default_project)?;
                    st.next_tx += 1;
                    let id = st.next_tx;
                    st.pending.push(Tx { id, op });
                    st.owner = Some(self.writer);
                    break (value, id);
                }
            }
            // Another process holds the write lock until its commit.
            changed.await;
        };
        let mut guard = CommitOnDrop {
            disk,
            writer: self.writer,
            id,
            armed: true,
        };
        match self.durability {
            // The planted bug: answer now; the write becomes durable only
            // at a later commit point, so a crash in between loses it.
            _ if planted!(AckBeforeDurable) => {}
            Durability::After(latency) => {
                if latency.is_zero() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(latency).await;
                }
                let mut st = disk.lock();
                disk.commit_through(&mut st, id);
            }
            Durability::Manual => loop {
                let changed = disk.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if !disk.lock().durability_pending(id) {
                    break;
                }
                changed.await;
            },
        }
        guard.armed = false;
        if disk.lock().lost.contains(&id) && !planted!(AckBeforeDurable) {
            return Err(StoreError::CommitFailed {
                reason: "the process crashed before the commit".into(),
            }
            .into());
        }
        Ok(value)
    }
}

impl JournalStore for MemoryJournal {
    fn set_outbox(&self, on: bool) {
        self.outbox.store(on, Ordering::SeqCst);
    }

    async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        let on = self.outbox.load(Ordering::SeqCst);
        let op = WriteOp::Append(batch.clone(), on);
        self.write(op, |t, p| t.append_announcing(&batch, p, on))
            .await
    }

    async fn fork(&self, batch: ForkBatch) -> Result<Vec<LogRecord>, AppendError> {
        let op = WriteOp::Fork(batch.clone());
        self.write(op, |t, p| t.fork(&batch, p)).await
    }

    async fn mint_fence(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        let op = WriteOp::Mint(session.to_owned(), now_unix_nanos, lease.cloned());
        self.write(op, |t, p| t.mint_fence(session, now_unix_nanos, p, lease))
            .await
    }

    async fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl_nanos: i64,
        now_unix_nanos: i64,
    ) -> Result<bool, StoreError> {
        let op = WriteOp::HoldLease(
            session.to_owned(),
            owner.to_owned(),
            fence,
            ttl_nanos,
            now_unix_nanos,
        );
        self.write(op, |t, _| {
            t.hold_lease(session, owner, fence, ttl_nanos, now_unix_nanos)
        })
        .await
    }

    async fn head(&self, session: &str) -> Result<i64, StoreError> {
        self.durable_read(|t| Ok(t.head(session)))
    }

    async fn read(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> Result<Vec<LogRecord>, StoreError> {
        self.durable_read(|t| Ok(t.read(session, from_seq, to_seq)))
    }

    async fn verify(&self, session: &str) -> Result<(), VerifyError> {
        let st = self.disk.lock();
        if st.crashed.contains(&self.writer) {
            return Err(StoreError::Closed.into());
        }
        st.durable.verify(session)
    }

    async fn put_session(&self, meta: SessionMeta, now_unix_nanos: i64) -> Result<(), StoreError> {
        let op = WriteOp::Put(meta.clone(), now_unix_nanos);
        self.write(op, |t, p| t.put_session(&meta, now_unix_nanos, p))
            .await
    }

    async fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        self.durable_read(|t| t.session_info(uid))
    }

    async fn list_sessions(&self, req: ListSessions) -> Result<SessionPage, StoreError> {
        let project = self.disk.default_project.clone();
        self.durable_read(|t| t.list_sessions(&req, &project))
    }

    async fn register_harness(
        &self,
        reg: HarnessRegistration,
        now_unix_nanos: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        let op = WriteOp::Register(reg.clone(), now_unix_nanos);
        self.write(op, |t, _| t.register_harness(&reg, now_unix_nanos))
            .await
    }

    async fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now_unix_nanos: i64,
    ) -> Result<HarnessRow, RegistryError> {
        let op = WriteOp::Retire(name.to_owned(), reason.to_owned(), now_unix_nanos);
        self.write(op, |t, _| t.retire_harness(name, reason, now_unix_nanos))
            .await
    }

    async fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        let st = self.disk.lock();
        if st.crashed.contains(&self.writer) {
            return Err(StoreError::Closed.into());
        }
        st.durable.harness(name)
    }

    async fn list_harnesses(&self, req: ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        self.durable_read(|t| t.list_harnesses(&req))
    }

    async fn reserve_harness_names(
        &self,
        names: Vec<String>,
        _now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        let op = WriteOp::Reserve(names.clone());
        self.write(op, |t, _| t.reserve_harness_names(&names)).await
    }

    async fn delete_session(&self, req: DeleteSession) -> Result<Tombstone, DeleteError> {
        let op = WriteOp::Delete(req.clone());
        self.write(op, |t, _| t.delete_session(&req)).await
    }

    async fn tombstone(&self, uid: &str) -> Result<Option<Tombstone>, StoreError> {
        self.durable_read(|t| Ok(t.tombstone(uid)))
    }

    async fn stale_sessions(&self, scan: StaleScan) -> Result<StalePage, StoreError> {
        self.durable_read(|t| t.stale_sessions(&scan))
    }

    async fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        let op = WriteOp::PutOnActive(meta.clone(), registered, now_unix_nanos);
        self.write(op, |t, p| {
            t.put_session_on_active_harness(&meta, registered, now_unix_nanos, p)
        })
        .await
    }
}

/// The outbox on the disk: claims and settles are writes (they wait for
/// their commit point like any other), stats read the durable tables.
impl Outbox for MemoryJournal {
    async fn claim_notices(&self, claim: NoticeClaim) -> Result<Vec<Notice>, StoreError> {
        claim.check()?;
        let op = WriteOp::Claim(claim.clone());
        self.write(op, |t, _| t.notices_mut().claim(&claim)).await
    }

    async fn settle_notice(
        &self,
        owner: &str,
        event_id: &str,
        settle: Settle,
    ) -> Result<bool, StoreError> {
        let op = WriteOp::Settle(owner.to_owned(), event_id.to_owned(), settle.clone());
        self.write(op, |t, _| {
            Ok::<_, StoreError>(t.notices_mut().settle(owner, event_id, &settle))
        })
        .await
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        self.durable_read(|t| Ok(t.notices().stats()))
    }

    async fn release_claims(&self, owner: &str) -> Result<u64, StoreError> {
        crate::rules::required("notice claim owner", owner)?;
        let op = WriteOp::Release(owner.to_owned());
        self.write(op, |t, _| {
            Ok::<_, StoreError>(t.notices_mut().release(owner))
        })
        .await
    }
}
