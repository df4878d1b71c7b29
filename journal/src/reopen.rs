//! A journal store that reopens itself after the backend fails.
//!
//! Invariant: while the store is down no call reaches a backend handle;
//! every call answers [`StoreError::Unavailable`] at once, and the handle
//! that failed is never used again. A reopened handle is a fresh one (new
//! connections, nothing cached from before the failure), so whatever a
//! failed commit did or did not write is read back from the backend, never
//! assumed.
//!
//! "Down" starts with the first transient failure ([`StoreError::is_transient`]:
//! a commit with an unknown outcome, a poisoned SQLite handle, a database
//! that does not answer) and ends when the opener succeeds again. Opens are
//! retried with exponential backoff; a store that goes down again soon after
//! reopening (a disk that is still full) keeps the longer backoff, so health
//! does not flap at the initial rate. [`Reopening::health`] reports whether
//! the store is up, for the gRPC health service.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use agentsessions_proto::v1::LogRecord;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::outbox::{Notice, NoticeClaim, Outbox, OutboxStats, Settle};
use crate::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions, RegisterOutcome,
    RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan, StoreError,
    Tombstone, VerifyError,
};

/// Opens a fresh backend handle.
pub type Opener<S> =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<S, StoreError>> + Send>> + Send + Sync>;

/// Backoff bounds for reopening.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first pause after a failure.
    pub initial: Duration,
    /// The longest pause between two attempts.
    pub max: Duration,
    /// A store that fails again within this long of reopening keeps the
    /// backoff it reached instead of starting over.
    pub settle: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(5),
            settle: Duration::from_secs(30),
        }
    }
}

struct State<S> {
    /// The live handle; None while down.
    current: Option<Arc<S>>,
    /// The next pause before an open attempt.
    backoff: Duration,
    /// When the store last came back up.
    reopened_at: Option<Instant>,
}

struct Inner<S> {
    state: Mutex<State<S>>,
    opener: Opener<S>,
    bounds: Backoff,
    health: watch::Sender<bool>,
    runtime: tokio::runtime::Handle,
    /// Handed to every handle opened after it was set.
    meter: std::sync::OnceLock<crate::Meter>,
    /// The outbox setting, applied to every handle before it serves.
    outbox: AtomicBool,
}

/// A [`JournalStore`] over a backend handle it replaces after failures.
pub struct Reopening<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Reopening<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Reopening<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reopening")
            .field("up", &*self.inner.health.borrow())
            .finish_non_exhaustive()
    }
}

/// Which store failure an operation's error carries, if any.
trait Carries {
    fn store_error(&self) -> Option<&StoreError>;
}

impl Carries for StoreError {
    fn store_error(&self) -> Option<&StoreError> {
        Some(self)
    }
}

impl Carries for AppendError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            AppendError::Failed(e) => Some(e),
            AppendError::Conflict { .. } | AppendError::Fenced { .. } => None,
        }
    }
}

impl Carries for DeleteError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            DeleteError::Failed(e) => Some(e),
            DeleteError::Conflict { .. } => None,
        }
    }
}

impl Carries for VerifyError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            VerifyError::Failed(e) => Some(e),
            VerifyError::Tampered { .. } => None,
        }
    }
}

impl Carries for RegistryError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            RegistryError::Failed(e) => Some(e),
            _ => None,
        }
    }
}

impl<S: JournalStore + 'static> Reopening<S> {
    /// Wraps `first`, an open handle; `opener` makes the next ones. Must be
    /// called inside a tokio runtime (reopening runs on it).
    pub fn new(first: S, opener: Opener<S>, bounds: Backoff) -> Self {
        assert!(bounds.initial > Duration::ZERO, "a backoff that waits");
        assert!(bounds.initial <= bounds.max, "initial backoff within max");
        let (health, _) = watch::channel(true);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    current: Some(Arc::new(first)),
                    backoff: bounds.initial,
                    reopened_at: None,
                }),
                opener,
                bounds,
                health,
                runtime: tokio::runtime::Handle::current(),
                meter: std::sync::OnceLock::new(),
                outbox: AtomicBool::new(false),
            }),
        }
    }

    /// True while the store is up; changes as it goes down and comes back.
    pub fn health(&self) -> watch::Receiver<bool> {
        self.inner.health.subscribe()
    }

    /// The live backend handle (None while down).
    pub fn current(&self) -> Option<Arc<S>> {
        self.lock().current.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<S>> {
        // A panic while holding this lock leaves plain data behind.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self) -> Result<Arc<S>, StoreError> {
        self.current()
            .ok_or_else(|| StoreError::Unavailable("journal is down; reopening".into()))
    }

    /// Takes `broken` out of service if `outcome` says the backend failed.
    fn check<T, E: Carries>(&self, broken: &Arc<S>, outcome: Result<T, E>) -> Result<T, E> {
        if let Err(e) = &outcome
            && let Some(failure) = e.store_error()
            && failure.is_transient()
        {
            self.down(broken, failure);
        }
        outcome
    }

    fn down(&self, broken: &Arc<S>, cause: &StoreError) {
        let mut state = self.lock();
        let same = state
            .current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, broken));
        if !same {
            return; // already down, or already replaced
        }
        let old = state.current.take();
        let recent = state
            .reopened_at
            .is_some_and(|at| at.elapsed() < self.inner.bounds.settle);
        if !recent {
            state.backoff = self.inner.bounds.initial;
        }
        let pause = state.backoff;
        drop(state);
        tracing::warn!(error = %cause, ?pause, "journal down; reopening");
        self.inner.health.send_replace(false);
        if let Some(old) = old {
            self.release(old);
        }
        let weak = Arc::downgrade(&self.inner);
        self.inner.runtime.spawn(reopen(weak, pause));
    }

    /// Drops a reference to a handle; the last one to an out-of-service
    /// handle goes on a blocking thread, since closing a SQLite handle joins
    /// its threads and must not stall the runtime.
    fn release(&self, store: Arc<S>) {
        let live = self
            .lock()
            .current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &store));
        if !live {
            self.inner.runtime.spawn_blocking(move || drop(store));
        }
    }

    async fn run<T, E, F, Fut>(&self, call: F) -> Result<T, E>
    where
        E: Carries + From<StoreError>,
        F: FnOnce(Arc<S>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let store = self.live()?;
        let outcome = call(store.clone()).await;
        let outcome = self.check(&store, outcome);
        self.release(store);
        outcome
    }
}

/// Retries the opener until it succeeds or the store is dropped.
async fn reopen<S: JournalStore + 'static>(inner: Weak<Inner<S>>, mut pause: Duration) {
    loop {
        tokio::time::sleep(pause).await;
        let Some(inner) = inner.upgrade() else {
            return; // the daemon is gone
        };
        match (inner.opener)().await {
            Ok(store) => {
                if let Some(meter) = inner.meter.get() {
                    store.set_meter(meter.clone());
                    meter.reopened();
                }
                let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
                assert!(state.current.is_none(), "one reopener at a time");
                // A fresh handle starts with the outbox off: it gets the
                // wrapper's setting before it serves, under the lock that
                // `set_outbox` reads the live handle under, so none is missed.
                store.set_outbox(inner.outbox.load(Ordering::SeqCst));
                state.current = Some(Arc::new(store));
                state.reopened_at = Some(Instant::now());
                state.backoff = (pause * 2).min(inner.bounds.max);
                drop(state);
                tracing::info!("journal reopened");
                inner.health.send_replace(true);
                return;
            }
            Err(e) => {
                pause = (pause * 2).min(inner.bounds.max);
                tracing::warn!(error = %e, ?pause, "journal still down");
            }
        }
    }
}

impl<S: JournalStore + 'static> JournalStore for Reopening<S> {
    fn set_meter(&self, meter: crate::Meter) {
        if let Some(live) = self.current() {
            live.set_meter(meter.clone());
        }
        let _ = self.inner.meter.set(meter);
    }

    fn set_outbox(&self, on: bool) {
        // Stored first: a handle reopened meanwhile reads it before serving.
        self.inner.outbox.store(on, Ordering::SeqCst);
        if let Some(live) = self.current() {
            live.set_outbox(on);
        }
    }

    async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        self.run(|s| async move { s.append(batch).await }).await
    }

    async fn fork(&self, batch: ForkBatch) -> Result<Vec<LogRecord>, AppendError> {
        self.run(|s| async move { s.fork(batch).await }).await
    }

    async fn mint_fence(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        self.run(|s| async move { s.mint_fence(session, now_unix_nanos, lease).await })
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
        self.run(|s| async move {
            s.hold_lease(session, owner, fence, ttl_nanos, now_unix_nanos)
                .await
        })
        .await
    }

    fn try_append_now(
        &self,
        batch: AppendBatch,
    ) -> Result<Result<Vec<LogRecord>, AppendError>, AppendBatch> {
        let store = match self.live() {
            Ok(s) => s,
            Err(e) => return Ok(Err(e.into())),
        };
        let outcome = store.try_append_now(batch);
        let outcome = outcome.map(|o| self.check(&store, o));
        self.release(store);
        outcome
    }

    fn try_mint_fence_now(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> Option<Result<i64, StoreError>> {
        let store = match self.live() {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        let outcome = store
            .try_mint_fence_now(session, now_unix_nanos, lease)
            .map(|o| self.check(&store, o));
        self.release(store);
        outcome
    }

    async fn head(&self, session: &str) -> Result<i64, StoreError> {
        self.run(|s| async move { s.head(session).await }).await
    }

    async fn read(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> Result<Vec<LogRecord>, StoreError> {
        self.run(|s| async move { s.read(session, from_seq, to_seq).await })
            .await
    }

    async fn read_bounded(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
        max_bytes: usize,
    ) -> Result<Vec<LogRecord>, StoreError> {
        self.run(|s| async move { s.read_bounded(session, from_seq, to_seq, max_bytes).await })
            .await
    }

    async fn verify(&self, session: &str) -> Result<(), VerifyError> {
        self.run(|s| async move { s.verify(session).await }).await
    }

    async fn put_session(&self, meta: SessionMeta, now_unix_nanos: i64) -> Result<(), StoreError> {
        self.run(|s| async move { s.put_session(meta, now_unix_nanos).await })
            .await
    }

    async fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        self.run(|s| async move { s.session_info(uid).await }).await
    }

    async fn list_sessions(&self, req: ListSessions) -> Result<SessionPage, StoreError> {
        self.run(|s| async move { s.list_sessions(req).await })
            .await
    }

    async fn register_harness(
        &self,
        reg: HarnessRegistration,
        now_unix_nanos: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        self.run(|s| async move { s.register_harness(reg, now_unix_nanos).await })
            .await
    }

    async fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now_unix_nanos: i64,
    ) -> Result<HarnessRow, RegistryError> {
        self.run(|s| async move { s.retire_harness(name, reason, now_unix_nanos).await })
            .await
    }

    async fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        self.run(|s| async move { s.harness(name).await }).await
    }

    async fn list_harnesses(&self, req: ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        self.run(|s| async move { s.list_harnesses(req).await })
            .await
    }

    async fn reserve_harness_names(
        &self,
        names: Vec<String>,
        now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        self.run(|s| async move { s.reserve_harness_names(names, now_unix_nanos).await })
            .await
    }

    async fn delete_session(&self, req: DeleteSession) -> Result<Tombstone, DeleteError> {
        self.run(|s| async move { s.delete_session(req).await })
            .await
    }

    async fn tombstone(&self, uid: &str) -> Result<Option<Tombstone>, StoreError> {
        self.run(|s| async move { s.tombstone(uid).await }).await
    }

    async fn stale_sessions(&self, scan: StaleScan) -> Result<StalePage, StoreError> {
        self.run(|s| async move { s.stale_sessions(scan).await })
            .await
    }

    async fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        self.run(|s| async move {
            s.put_session_on_active_harness(meta, registered, now_unix_nanos)
                .await
        })
        .await
    }
}

/// The outbox through the live handle, with the same treatment as every
/// other call: UNAVAILABLE while down, and a transient failure takes the
/// handle out of service.
impl<S: JournalStore + Outbox + 'static> Outbox for Reopening<S> {
    async fn claim_notices(&self, claim: NoticeClaim) -> Result<Vec<Notice>, StoreError> {
        self.run(|s| async move { s.claim_notices(claim).await })
            .await
    }

    async fn settle_notice(
        &self,
        owner: &str,
        event_id: &str,
        settle: Settle,
    ) -> Result<bool, StoreError> {
        self.run(|s| async move { s.settle_notice(owner, event_id, settle).await })
            .await
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        self.run(|s| async move { s.outbox_stats().await }).await
    }

    async fn release_claims(&self, owner: &str) -> Result<u64, StoreError> {
        self.run(|s| async move { s.release_claims(owner).await })
            .await
    }
}
