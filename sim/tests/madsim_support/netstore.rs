//! The one in-memory store as a node of its own, reached by every host
//! over madsim's simulated network, so partitions between a host and the
//! store, lost requests and lost answers ("committed, answer lost") are
//! the network's, not the store's.
//!
//! A call travels as a datagram carrying the work to do against the store
//! (an in-process closure: the simulation runs in one process, and what is
//! under test is the network's behaviour, not a wire codec); the answer
//! comes back on a tag of the caller's own. A call unanswered within
//! [`STORE_CALL`] fails: a read as UNAVAILABLE, a write as a commit whose
//! outcome is unknown, so the machine re-reads before deciding again.
//!
//! Each host's clock can be skewed: its `now` reaches the store shifted,
//! and the store judges leases by the `now` it is given (as an embedded
//! store does), so a skewed host may think a lease lapsed early. The
//! fence must still keep every journal correct.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsessions_proto::v1::LogRecord;
use agentsessions_shells::journal::memory::MemoryJournal;
use agentsessions_shells::journal::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions, RegisterOutcome,
    RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan, StoreError,
    Tombstone, VerifyError,
};
use madsim::net::{Endpoint, Payload};

/// Bound on one store call, in virtual time.
pub const STORE_CALL: Duration = Duration::from_millis(800);
/// The tag requests arrive on.
const REQUESTS: u64 = 0;

type Answer = Box<dyn std::any::Any + Send + Sync>;
type Work =
    Box<dyn FnOnce(Arc<MemoryJournal>) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send>;

/// One request: the work and the tag to answer on.
struct Call {
    reply: u64,
    // The payload must be Sync; the work runs once, on the store node.
    work: Mutex<Option<Work>>,
}

/// Serves `store` on `addr` until the node dies.
pub async fn serve(addr: SocketAddr, store: Arc<MemoryJournal>) {
    let ep = Arc::new(Endpoint::bind(addr).await.expect("bind the store"));
    loop {
        let Ok((payload, from)) = ep.recv_from_raw(REQUESTS).await else {
            continue;
        };
        let call = payload.downcast::<Call>().expect("a store call");
        let work = call.work.lock().unwrap().take().expect("run once");
        let (ep, store, reply) = (Arc::clone(&ep), Arc::clone(&store), call.reply);
        // Concurrent calls run concurrently, as on a database.
        madsim::task::spawn(async move {
            let answer = work(store).await;
            // A clogged link drops it: the caller never learns the outcome.
            let _ = ep.send_to_raw(from, reply, answer).await;
        });
    }
}

/// A host's handle on the store node.
pub struct NetStore {
    ep: Endpoint,
    store: SocketAddr,
    next: AtomicU64,
    /// Added to every `now` this host hands the store.
    pub skew: i64,
    /// This host's outbox setting, carried by each of its appends (the
    /// store node's handle is shared by every host).
    outbox: AtomicBool,
}

/// Whether a call may have written (its loss is then "outcome unknown").
#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
}

impl NetStore {
    pub async fn connect(store: SocketAddr, skew: i64) -> Self {
        Self {
            ep: Endpoint::bind("0.0.0.0:0")
                .await
                .expect("bind a store client"),
            store,
            next: AtomicU64::new(REQUESTS + 1),
            skew,
            outbox: AtomicBool::new(false),
        }
    }

    async fn call<T, E, F, Fut>(&self, kind: Kind, f: F) -> Result<T, E>
    where
        T: Send + Sync + 'static,
        E: From<StoreError> + Send + Sync + 'static,
        F: FnOnce(Arc<MemoryJournal>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let reply = self.next.fetch_add(1, Ordering::Relaxed);
        let work: Work =
            Box::new(move |store| Box::pin(async move { Box::new(f(store).await) as Answer }));
        let call: Payload = Box::new(Call {
            reply,
            work: Mutex::new(Some(work)),
        });
        let lost = || -> E {
            match kind {
                Kind::Read => StoreError::Unavailable("store unreachable".into()).into(),
                Kind::Write => StoreError::CommitFailed {
                    reason: "store answer lost".into(),
                }
                .into(),
            }
        };
        if self
            .ep
            .send_to_raw(self.store, REQUESTS, call)
            .await
            .is_err()
        {
            return Err(lost());
        }
        match madsim::time::timeout(STORE_CALL, self.ep.recv_from_raw(reply)).await {
            Ok(Ok((answer, _))) => *answer
                .downcast::<Result<T, E>>()
                .expect("the answer to this call"),
            _ => Err(lost()),
        }
    }
}

use Kind::{Read, Write};

impl JournalStore for NetStore {
    fn set_outbox(&self, on: bool) {
        self.outbox.store(on, Ordering::Relaxed);
    }

    async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        let on = self.outbox.load(Ordering::Relaxed);
        self.call(Write, move |s| async move {
            // Set and used in one step of the node: nothing runs between.
            s.set_outbox(on);
            s.append(batch).await
        })
        .await
    }

    async fn fork(&self, batch: ForkBatch) -> Result<Vec<LogRecord>, AppendError> {
        self.call(Write, move |s| async move { s.fork(batch).await })
            .await
    }

    async fn mint_fence(
        &self,
        session: &str,
        now: i64,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        let (session, lease, now) = (session.to_owned(), lease.cloned(), now + self.skew);
        self.call(Write, move |s| async move {
            s.mint_fence(&session, now, lease.as_ref()).await
        })
        .await
    }

    async fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (session, owner, now) = (session.to_owned(), owner.to_owned(), now + self.skew);
        self.call(Write, move |s| async move {
            s.hold_lease(&session, &owner, fence, ttl, now).await
        })
        .await
    }

    async fn head(&self, session: &str) -> Result<i64, StoreError> {
        let session = session.to_owned();
        self.call(Read, move |s| async move { s.head(&session).await })
            .await
    }

    async fn read(&self, session: &str, from: i64, to: i64) -> Result<Vec<LogRecord>, StoreError> {
        let session = session.to_owned();
        self.call(
            Read,
            move |s| async move { s.read(&session, from, to).await },
        )
        .await
    }

    async fn verify(&self, session: &str) -> Result<(), VerifyError> {
        let session = session.to_owned();
        self.call(Read, move |s| async move { s.verify(&session).await })
            .await
    }

    async fn put_session(&self, meta: SessionMeta, now: i64) -> Result<(), StoreError> {
        self.call(
            Write,
            move |s| async move { s.put_session(meta, now).await },
        )
        .await
    }

    async fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        let uid = uid.to_owned();
        self.call(Read, move |s| async move { s.session_info(&uid).await })
            .await
    }

    async fn list_sessions(&self, req: ListSessions) -> Result<SessionPage, StoreError> {
        self.call(Read, move |s| async move { s.list_sessions(req).await })
            .await
    }

    async fn register_harness(
        &self,
        reg: HarnessRegistration,
        now: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        self.call(
            Write,
            move |s| async move { s.register_harness(reg, now).await },
        )
        .await
    }

    async fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now: i64,
    ) -> Result<HarnessRow, RegistryError> {
        let (name, reason) = (name.to_owned(), reason.to_owned());
        self.call(Write, move |s| async move {
            s.retire_harness(&name, &reason, now).await
        })
        .await
    }

    async fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        let name = name.to_owned();
        self.call(Read, move |s| async move { s.harness(&name).await })
            .await
    }

    async fn list_harnesses(&self, req: ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        self.call(Read, move |s| async move { s.list_harnesses(req).await })
            .await
    }

    async fn reserve_harness_names(
        &self,
        names: Vec<String>,
        now: i64,
    ) -> Result<(), RegistryError> {
        self.call(Write, move |s| async move {
            s.reserve_harness_names(names, now).await
        })
        .await
    }

    async fn delete_session(&self, req: DeleteSession) -> Result<Tombstone, DeleteError> {
        self.call(Write, move |s| async move { s.delete_session(req).await })
            .await
    }

    async fn tombstone(&self, uid: &str) -> Result<Option<Tombstone>, StoreError> {
        let uid = uid.to_owned();
        self.call(Read, move |s| async move { s.tombstone(&uid).await })
            .await
    }

    async fn stale_sessions(&self, scan: StaleScan) -> Result<StalePage, StoreError> {
        self.call(Read, move |s| async move { s.stale_sessions(scan).await })
            .await
    }

    async fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now: i64,
    ) -> Result<(), RegistryError> {
        self.call(Write, move |s| async move {
            s.put_session_on_active_harness(meta, registered, now).await
        })
        .await
    }
}
