//! `PgJournal`: the journal store on PostgreSQL.
//!
//! Invariant: an append commits only if, inside its transaction, the
//! session's head is still `expected_last_seq` and its fence is not newer
//! than the writer's, checked after the session row is locked. Every writer
//! locks the row first (`SELECT … FOR UPDATE`, a row lock, not an advisory
//! one), so two appends to one session are serialized by the database and
//! the second sees the first's records. No advisory locks and no
//! LISTEN/NOTIFY are used, so the same SQL can later run on the
//! PostgreSQL-compatible distributed databases.
//!
//! The contract is the one every store keeps (`agentsessions_journal`,
//! checked by `agentsessions_journal::contract::run` (`pg/tests/contract.rs`), which runs against this store
//! on a throwaway cluster). A COMMIT whose outcome the client cannot know (the
//! connection broke during it) is reported as `CommitFailed`, never guessed.

pub mod copy;
mod group;
pub mod ledger;
mod ops;
mod outbox;
mod planted;
mod reconcile;
pub mod schema;
mod tls;

pub use group::{GroupLimits, GroupStats};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentsessions_journal::reopen::{Backoff, Opener, Reopening};
use agentsessions_journal::{
    AppendBatch, AppendError, DEFAULT_PROJECT, DeleteError, DeleteSession, ForkBatch,
    HarnessRegistration, HarnessRow, JournalStore, LeaseClaim, ListHarnesses, ListSessions,
    RegisterOutcome, RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan,
    StoreError, Tombstone, VerifyError,
};
use agentsessions_proto::v1::LogRecord;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

/// How a [`PgJournal`] is opened.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Project for session rows created implicitly (mint, append).
    pub default_project: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Group commit (concurrent appends share a transaction), bounded by
    /// these limits; `None` gives every append its own transaction.
    pub group_commit: Option<GroupLimits>,
    /// PEM file of the CA that signed the server's certificate. Given, the
    /// connection is TLS and verified (`sslmode=require` needs it).
    pub ca_file: Option<std::path::PathBuf>,
    /// Longest a statement may run (or wait on another client's lock)
    /// before the server cancels it and the call is answered UNAVAILABLE
    /// (`StoreError::Busy`). `None` leaves the server's setting.
    pub statement_timeout: Option<std::time::Duration>,
}

/// [`PgOptions::statement_timeout`] by default: far above any statement of
/// a healthy journal, far below a client's patience.
pub const DEFAULT_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            default_project: DEFAULT_PROJECT.to_owned(),
            pool_size: 8,
            group_commit: Some(GroupLimits::default()),
            ca_file: None,
            statement_timeout: Some(DEFAULT_STATEMENT_TIMEOUT),
        }
    }
}

/// The PostgreSQL journal. Cloning shares the pool.
#[derive(Clone)]
pub struct PgJournal {
    pool: Pool,
    default_project: String,
    group: Option<group::GroupCommitter>,
    planted: Arc<planted::Planted>,
    /// Where commit timings and lost answers are counted, once a daemon
    /// with metrics sets it; shared with the group committer.
    meter: group::Meter,
    /// Whether appends insert notice rows (`JournalStore::set_outbox`);
    /// shared with the group committer.
    outbox: Arc<AtomicBool>,
}

impl std::fmt::Debug for PgJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJournal")
            .field("default_project", &self.default_project)
            .finish_non_exhaustive()
    }
}

/// A driver error as the store's error: a lost connection or a server that
/// is shutting down, starting up or out of connections is `Unavailable`
/// (the store is down, retry later); anything else is a backend failure.
pub(crate) fn backend(e: tokio_postgres::Error) -> StoreError {
    // 57014: canceled by the statement timeout; 55P03: a lock not
    // available. The server is up; another client held what we needed.
    if e.code()
        .is_some_and(|c| matches!(c.code(), "57014" | "55P03"))
    {
        return StoreError::Busy(e.to_string());
    }
    let down = match e.code() {
        // No SQLSTATE: the connection itself failed (refused, reset, closed).
        None => true,
        Some(code) => {
            let class = &code.code()[..2];
            // 08: connection exception; 57: operator intervention (shutdown,
            // cannot connect now, a statement timeout); 53: insufficient
            // resources; 40: the transaction was rolled back (serialization,
            // deadlock); 25006: a read-only transaction, i.e. a standby
            // answered while the primary fails over.
            matches!(class, "08" | "57" | "53" | "40") || code.code() == "25006"
        }
    };
    if down {
        // The driver's own message omits the cause ("error performing TLS
        // handshake"); the operator needs it ("invalid peer certificate").
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            message = format!("{message}: {c}");
            cause = c.source();
        }
        StoreError::Unavailable(message)
    } else {
        StoreError::Backend(Box::new(e))
    }
}

/// The driver's client inside a pooled connection.
fn client(o: &deadpool_postgres::Object) -> &tokio_postgres::Client {
    o
}

fn client_mut(o: &mut deadpool_postgres::Object) -> &mut tokio_postgres::Client {
    o
}

/// No connection from the pool: the database is unreachable (or the pool
/// is closed), which is the store being down.
fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => backend(e),
        other => StoreError::Unavailable(other.to_string()),
    }
}

impl PgJournal {
    /// Connects to `url` (`postgres://user@host:port/db`) and migrates the
    /// schema; a database with a newer schema is refused without writes.
    pub async fn open(url: &str, options: PgOptions) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::InvalidArgument(format!("journal url: {e}")))?;
        if let Some(t) = options.statement_timeout {
            // After the URL's own options, so this one wins.
            let ms = t.as_millis().max(1);
            let given = config.get_options().unwrap_or_default().to_owned();
            config.options(format!("{given} -c statement_timeout={ms}").trim());
        }
        let recycling = || ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match tls::connector(&mut config, options.ca_file.as_deref())? {
            tls::Connector::Plain => Manager::from_config(config, NoTls, recycling()),
            tls::Connector::Tls(tls) => Manager::from_config(config, tls, recycling()),
        };
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .build()
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let mut last = None;
        // Two daemons creating the schema at once can collide in the
        // catalog; the loser retries and finds it done.
        for _ in 0..3 {
            let mut conn = pool.get().await.map_err(pool_error)?;
            match schema::migrate(&mut conn).await {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e @ StoreError::UnsupportedSchema { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        if let Some(e) = last {
            return Err(e);
        }
        let planted = Arc::new(planted::Planted::default());
        let meter = group::Meter::default();
        let outbox = Arc::new(AtomicBool::new(false));
        let group = options.group_commit.map(|limits| {
            group::GroupCommitter::spawn(
                pool.clone(),
                options.default_project.clone(),
                limits,
                planted.clone(),
                meter.clone(),
                outbox.clone(),
            )
        });
        Ok(Self {
            pool,
            default_project: options.default_project,
            group,
            planted,
            meter,
            outbox,
        })
    }

    /// [`PgJournal::open`], wrapped so that the daemon survives the database
    /// going away: while it is down calls answer UNAVAILABLE, and a fresh
    /// pool is opened (schema checked again) with backoff until it is back.
    pub async fn open_reopening(
        url: &str,
        options: PgOptions,
    ) -> Result<Reopening<Self>, StoreError> {
        let first = Self::open(url, options.clone()).await?;
        let url = url.to_owned();
        let opener: Opener<Self> = std::sync::Arc::new(move || {
            let (url, options) = (url.clone(), options.clone());
            Box::pin(async move { Self::open(&url, options).await })
        });
        Ok(Reopening::new(first, opener, Backoff::default()))
    }

    /// The tool ledger in this database, shared by every daemon on it.
    pub fn tool_ledger(&self) -> ledger::PgLedger {
        ledger::PgLedger::new(self.pool.clone())
    }

    /// What group commit has done so far (zeros without it).
    pub fn group_stats(&self) -> GroupStats {
        self.group
            .as_ref()
            .map(group::GroupCommitter::stats)
            .unwrap_or_default()
    }

    /// Rows in `events` and `session_prefixes`: what the store holds,
    /// for tests that check a fork writes and a delete frees what they
    /// should.
    #[doc(hidden)]
    pub async fn row_counts(&self) -> Result<(i64, i64), StoreError> {
        let c = self.conn().await?;
        let row = client(&c)
            .query_one(
                "SELECT (SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM session_prefixes)",
                &[],
            )
            .await
            .map_err(backend)?;
        Ok((row.get(0), row.get(1)))
    }

    /// Plants `n` lost COMMIT answers (tests of reconciliation): with
    /// `committed`, the next writes commit and their answers are lost;
    /// without, they never reach COMMIT and are told COMMIT failed.
    #[cfg(feature = "faults")]
    pub fn plant_lost_commit_answers(&self, committed: bool, n: u32) {
        self.planted.plant(committed, n);
    }

    async fn conn(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }
}

impl JournalStore for PgJournal {
    fn set_meter(&self, meter: agentsessions_journal::Meter) {
        // Appends outside the group committer are single transactions of
        // their own and go untimed; lost answers are counted on every path.
        let _ = self.meter.set(meter);
    }

    fn set_outbox(&self, on: bool) {
        self.outbox.store(on, Ordering::SeqCst);
    }

    async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        if let Some(group) = &self.group {
            // The committer reconciles a lost answer itself.
            return group.append(batch).await;
        }
        let mut c = self.conn().await?;
        let announce = self.outbox.load(Ordering::SeqCst);
        match ops::append(&mut c, &batch, &self.default_project, announce).await {
            Err(AppendError::Failed(StoreError::CommitFailed { reason })) => {
                drop(c);
                reconcile::append(&self.pool, &batch, &reason, self.meter.get()).await
            }
            done => done,
        }
    }

    async fn fork(&self, batch: ForkBatch) -> Result<Vec<LogRecord>, AppendError> {
        let mut c = self.conn().await?;
        if self.planted.lose_before() {
            drop(c);
            return reconcile::fork(
                &self.pool,
                &batch,
                "planted: lost before COMMIT",
                self.meter.get(),
            )
            .await;
        }
        let forked = ops::fork(&mut c, &batch, &self.default_project).await;
        let forked = match forked {
            Ok(_) if self.planted.lose_after() => Err(StoreError::CommitFailed {
                reason: "planted: answer lost after COMMIT".into(),
            }
            .into()),
            other => other,
        };
        match forked {
            Err(AppendError::Failed(StoreError::CommitFailed { reason })) => {
                drop(c);
                reconcile::fork(&self.pool, &batch, &reason, self.meter.get()).await
            }
            done => done,
        }
    }

    async fn mint_fence(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        let c = self.conn().await?;
        let mut minted = 0;
        let result = if self.planted.lose_before() {
            Err(StoreError::CommitFailed {
                reason: "planted: lost before COMMIT".into(),
            })
        } else {
            let r = ops::mint_fence(
                &c,
                session,
                now_unix_nanos,
                &self.default_project,
                lease,
                &mut minted,
            )
            .await;
            match r {
                Ok(_) if self.planted.lose_after() => Err(StoreError::CommitFailed {
                    reason: "planted: answer lost after COMMIT".into(),
                }),
                other => other,
            }
        };
        match result {
            // The answer was lost once the fence was known: read it back.
            Err(StoreError::CommitFailed { reason }) if minted > 0 => {
                drop(c);
                let owner = lease.map(|l| l.owner.as_str());
                let meter = self.meter.get();
                reconcile::mint(&self.pool, session, minted, owner, &reason, meter).await
            }
            other => other,
        }
    }

    async fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl_nanos: i64,
        _now_unix_nanos: i64,
    ) -> Result<bool, StoreError> {
        let c = self.conn().await?;
        ops::hold_lease(client(&c), session, owner, fence, ttl_nanos).await
    }

    async fn head(&self, session: &str) -> Result<i64, StoreError> {
        let c = self.conn().await?;
        ops::head(client(&c), session).await
    }

    async fn read(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> Result<Vec<LogRecord>, StoreError> {
        let c = self.conn().await?;
        ops::read(client(&c), session, from_seq, to_seq).await
    }

    async fn verify(&self, session: &str) -> Result<(), VerifyError> {
        let c = self.conn().await?;
        ops::verify(client(&c), session).await
    }

    async fn put_session(&self, meta: SessionMeta, now_unix_nanos: i64) -> Result<(), StoreError> {
        let c = self.conn().await?;
        ops::put_session(client(&c), &meta, now_unix_nanos, &self.default_project).await
    }

    async fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        let c = self.conn().await?;
        ops::session_info(client(&c), uid).await
    }

    async fn list_sessions(&self, req: ListSessions) -> Result<SessionPage, StoreError> {
        let c = self.conn().await?;
        ops::list_sessions(client(&c), &req, &self.default_project).await
    }

    async fn register_harness(
        &self,
        reg: HarnessRegistration,
        now_unix_nanos: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        let mut c = self.conn().await?;
        ops::register_harness(client_mut(&mut c), &reg, now_unix_nanos).await
    }

    async fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now_unix_nanos: i64,
    ) -> Result<HarnessRow, RegistryError> {
        let c = self.conn().await?;
        ops::retire_harness(client(&c), name, reason, now_unix_nanos).await
    }

    async fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        let c = self.conn().await?;
        ops::harness_row(client(&c), name)
            .await?
            .ok_or_else(|| RegistryError::NotFound {
                name: name.to_owned(),
            })
    }

    async fn list_harnesses(&self, req: ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        let c = self.conn().await?;
        ops::list_harnesses(client(&c), &req).await
    }

    async fn reserve_harness_names(
        &self,
        names: Vec<String>,
        now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        let mut c = self.conn().await?;
        ops::reserve_harness_names(client_mut(&mut c), &names, now_unix_nanos).await
    }

    async fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now_unix_nanos: i64,
    ) -> Result<(), RegistryError> {
        let mut c = self.conn().await?;
        ops::put_session_on_active_harness(
            client_mut(&mut c),
            &meta,
            registered,
            now_unix_nanos,
            &self.default_project,
        )
        .await
    }

    async fn delete_session(&self, req: DeleteSession) -> Result<Tombstone, DeleteError> {
        let mut c = self.conn().await?;
        ops::delete_session(client_mut(&mut c), &req).await
    }

    async fn tombstone(&self, uid: &str) -> Result<Option<Tombstone>, StoreError> {
        let c = self.conn().await?;
        ops::tombstone(client(&c), uid).await
    }

    async fn stale_sessions(&self, scan: StaleScan) -> Result<StalePage, StoreError> {
        let c = self.conn().await?;
        ops::stale_sessions(client(&c), &scan).await
    }
}

/// Creates database `name` through the server at `admin_url` (a role that
/// may create databases) and returns the URL of the new database; for
/// tests and first-time setup.
pub async fn create_database(admin_url: &str, name: &str) -> Result<String, StoreError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(StoreError::InvalidArgument(format!(
            "database name {name:?}: use a-z, 0-9 and _"
        )));
    }
    let (client, connection) = tokio_postgres::connect(admin_url, NoTls)
        .await
        .map_err(backend)?;
    let driver = tokio::spawn(connection);
    // The name was checked above: it cannot close the identifier.
    let made = client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(backend);
    drop(client);
    let _ = driver.await;
    made?;
    let base = admin_url
        .rsplit_once('/')
        .map(|(b, _)| b)
        .ok_or_else(|| StoreError::InvalidArgument("journal url has no database".into()))?;
    Ok(format!("{base}/{name}"))
}

/// What the contract's fork checks count: [`PgJournal::row_counts`].
impl agentsessions_journal::contract::StoredRows for PgJournal {
    async fn stored(&self) -> (i64, i64) {
        self.row_counts().await.expect("the row counts read")
    }
}
