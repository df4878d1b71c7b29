//! [`Tables`] behind the [`JournalStore`] API with no durability model:
//! every call is applied and durable when it returns, and its future is
//! ready at the first poll.
//!
//! It exists so a synchronous caller (the testkit's store, which the
//! machine's tests and the simulator drive) performs store effects through
//! the daemon's own translation (`daemon::store_effects`) against the same
//! tables the madsim runs' [`super::MemoryDisk`] keeps: one in-memory
//! implementation of the store contract, not two.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use agentsessions_proto::v1::LogRecord;

use super::tables::Tables;
use crate::outbox::{Notice, NoticeClaim, Outbox, OutboxStats, Settle};
use crate::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions, RegisterOutcome,
    RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan, StoreError,
    Tombstone, VerifyError,
};

/// Tables owned for the length of a few calls; see the module docs.
#[derive(Debug)]
pub struct InstantStore {
    tables: Mutex<Tables>,
    default_project: String,
    /// Whether appends insert notice rows.
    outbox: AtomicBool,
}

impl InstantStore {
    /// Takes `tables`; rows created implicitly land in `default_project`.
    pub fn new(tables: Tables, default_project: &str) -> Self {
        Self {
            tables: Mutex::new(tables),
            default_project: default_project.to_owned(),
            outbox: AtomicBool::new(false),
        }
    }

    /// Gives the tables back.
    pub fn into_tables(self) -> Tables {
        self.tables.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl JournalStore for InstantStore {
    fn set_outbox(&self, on: bool) {
        self.outbox.store(on, Ordering::SeqCst);
    }

    async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        let on = self.outbox.load(Ordering::SeqCst);
        self.lock()
            .append_announcing(&batch, &self.default_project, on)
    }

    async fn fork(&self, batch: ForkBatch) -> Result<Vec<LogRecord>, AppendError> {
        self.lock().fork(&batch, &self.default_project)
    }

    async fn mint_fence(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        self.lock()
            .mint_fence(session, now_unix_nanos, &self.default_project, lease)
    }

    async fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl_nanos: i64,
        now_unix_nanos: i64,
    ) -> Result<bool, StoreError> {
        self.lock()
            .hold_lease(session, owner, fence, ttl_nanos, now_unix_nanos)
    }

    async fn head(&self, session: &str) -> Result<i64, StoreError> {
        Ok(self.lock().head(session))
    }

    async fn read(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> Result<Vec<LogRecord>, StoreError> {
        Ok(self.lock().read(session, from_seq, to_seq))
    }

    async fn verify(&self, session: &str) -> Result<(), VerifyError> {
        self.lock().verify(session)
    }

    async fn put_session(&self, meta: SessionMeta, now_unix_nanos: i64) -> Result<(), StoreError> {
        self.lock()
            .put_session(&meta, now_unix_nanos, &self.default_project)
    }

    async fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        self.lock().session_info(uid)
    }

    async fn list_sessions(&self, req: ListSessions) -> Result<SessionPage, StoreError> {
        self.lock().list_sessions(&req, &self.default_project)
    }

    async fn register_harness(
        &self,
        reg: HarnessRegistration,
        now_unix_nanos: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        self.lock().register_harness(&reg, now_unix_nanos)
    }

    async fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now_unix_nanos: i64,
    ) -> Result<HarnessRow, RegistryError> {
        self.lock().retire_harness(name, reason, now_unix_nanos)
    }

    async fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        self.lock().harness(name)
    }

    async fn list_harnesses(&self, req: ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        self.lock().list_harnesses(&req)
    }

    async fn reserve_harness_names(
        &self,
        names: Vec<String>,
        _now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        self.lock().reserve_harness_names(&names)
    }

    async fn delete_session(&self, req: DeleteSession) -> Result<Tombstone, DeleteError> {
        self.lock().delete_session(&req)
    }

    async fn tombstone(&self, uid: &str) -> Result<Option<Tombstone>, StoreError> {
        Ok(self.lock().tombstone(uid))
    }

    async fn stale_sessions(&self, scan: StaleScan) -> Result<StalePage, StoreError> {
        self.lock().stale_sessions(&scan)
    }

    async fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        self.lock().put_session_on_active_harness(
            &meta,
            registered,
            now_unix_nanos,
            &self.default_project,
        )
    }
}

impl Outbox for InstantStore {
    async fn claim_notices(&self, claim: NoticeClaim) -> Result<Vec<Notice>, StoreError> {
        self.lock().notices_mut().claim(&claim)
    }

    async fn settle_notice(
        &self,
        owner: &str,
        event_id: &str,
        settle: Settle,
    ) -> Result<bool, StoreError> {
        Ok(self.lock().notices_mut().settle(owner, event_id, &settle))
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        Ok(self.lock().notices().stats())
    }

    async fn release_claims(&self, owner: &str) -> Result<u64, StoreError> {
        crate::rules::required("notice claim owner", owner)?;
        Ok(self.lock().notices_mut().release(owner))
    }
}
