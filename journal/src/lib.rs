//! The journal store contract, written once: the trait every backend
//! implements, its batches and errors, every store rule as a pure function
//! ([`rules`], [`lease`], [`ledger`], [`outbox`], [`child_spans`]), the in-memory
//! reference store ([`memory`]), the translation between the machine's store
//! effects and this API ([`effects`]), and the suites a backend runs against
//! itself ([`contract`]). No transport or database crate is a dependency.
//!
//! The journal is the only truth. Every session is an append-only chain of
//! [`LogRecord`]s, each linked to its predecessor by `prev_hash` and sealed by
//! the canonical `content_hash` (computed by `agentsessions_machine::canon`).
//! Beside the chains the store keeps session metadata and the harness
//! registry, both of which are projections or host bookkeeping, never truth
//! about what happened.
//!
//! # The trait
//!
//! [`JournalStore`] is the backend-neutral contract. SQLite
//! (`agentsessions-sqlite`) is the durable embedded implementation,
//! PostgreSQL (`agentsessions-pg`) the shared one, and
//! [`memory::MemoryJournal`] the in-memory one the madsim runs use. Its
//! tables ([`memory::Tables`]) are also the tests' and the simulator's
//! store (`agentsessions_testkit::MemStore`, through
//! [`memory::InstantStore`]), so one in-memory implementation serves all of
//! them. A new backend implements the same trait without touching the
//! machine, calls the rules instead of deciding again, and is done when
//! [`contract::run`] passes against it.
//!
//! Methods return `impl Future + Send` (return-position `impl Trait` in a
//! trait). That keeps the trait free of boxing and of any particular runtime:
//! the SQLite store completes futures from its own threads through
//! `tokio::sync::oneshot`, which works under tokio and madsim alike, and a
//! simulated store can complete them from the simulator's scheduler. The cost
//! is that the trait is not object safe; hosts are generic over the store.
//!
//! Time is never read inside the store: every write that stamps a time takes
//! `now_unix_nanos` from the caller, so a simulation controls it.
//!
//! # Guarantees every implementation gives
//!
//! - An append is acknowledged only once it is durable.
//! - `append` is a compare-and-swap on the head (`expected_last_seq`) guarded
//!   by the fence; the events of one batch land as consecutive records or not
//!   at all.
//! - Reads return stored hashes verbatim; they never recompute them.
//! - Failures are typed: [`AppendError::Conflict`] and
//!   [`AppendError::Fenced`] are protocol outcomes, never raw driver errors.

use std::future::Future;

use agentsessions_machine::vocab::PageFill;
use agentsessions_proto::v1::{ComputeState, Event, LogRecord};

pub mod columns;
pub mod compute_text;
pub mod contract;
pub mod convert;
pub mod effects;
pub mod encode;
mod error;
pub mod lease;
pub mod ledger;
pub mod memory;
mod meter;
pub mod outbox;
pub mod page_token;
pub mod reopen;
pub mod rules;

pub use error::{AppendError, BackendError, DeleteError, RegistryError, StoreError, VerifyError};
pub use lease::{LeaseClaim, StoredLease};
pub use meter::{CommitMeter, Meter, UnknownOutcome};

/// The project a session lands in when none is given.
pub const DEFAULT_PROJECT: &str = "default";
/// `list_sessions` page size when the request gives none.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Largest `list_sessions` page; bigger requests are clamped, not refused.
pub const MAX_PAGE_SIZE: usize = 500;

/// One atomic append: `events` become records `expected_last_seq + 1 ..`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendBatch {
    pub session: String,
    /// The head the writer believes in (0 for an empty session).
    pub expected_last_seq: i64,
    /// The writer's incarnation token; must be >= the session's fence.
    pub fence: i64,
    /// At least one event.
    pub events: Vec<Event>,
    /// The compute_state the session row takes after the batch (`None`:
    /// unchanged). The machine decides it (its `batch_compute_state`); a
    /// store writes exactly this and derives nothing itself.
    pub compute_state: Option<ComputeState>,
    /// Stamped on the session row (`updated_at`, and `created_at` if new).
    pub now_unix_nanos: i64,
    /// The lease owner whose lease on the session at `fence` this append
    /// ends, in its own transaction (an operation's last write). Only a
    /// committed append removes it, and only that owner's at that fence.
    pub release_lease: Option<String>,
}

impl AppendBatch {
    /// The records this batch becomes on top of head `head` (whose hash is
    /// `prev`): consecutive seqs, the hash chain and the writer's fence,
    /// exactly as every store keeps them. All hashes come first, so a batch
    /// that cannot be canonicalized is refused before anything is written.
    pub fn chain(&self, head: i64, prev: &str) -> Result<Vec<LogRecord>, StoreError> {
        chain(&self.events, self.fence, head, prev)
    }
}

/// `events` as the records they become on top of head `head` (hash
/// `prev`), all hashed before anything is written.
fn chain(
    events: &[Event],
    fence: i64,
    head: i64,
    prev: &str,
) -> Result<Vec<LogRecord>, StoreError> {
    debug_assert!(head >= 0 && (head == 0) == prev.is_empty());
    let mut prev = prev.to_owned();
    let mut records = Vec::with_capacity(events.len());
    for (i, ev) in events.iter().enumerate() {
        let seq = head + 1 + i as i64;
        let hash = agentsessions_machine::canon::content_hash(&prev, seq, ev).map_err(|e| {
            StoreError::Canonicalize {
                seq,
                reason: e.to_string(),
            }
        })?;
        debug_assert_eq!(hash.len(), 64, "content_hash is 64 lowercase hex chars");
        records.push(LogRecord {
            seq,
            prev_hash: std::mem::replace(&mut prev, hash.clone()),
            content_hash: hash,
            fence,
            event: Some(ev.clone()),
        });
    }
    Ok(records)
}

/// A fork child's first write: the child (empty, its fence minted) begins
/// with the parent's records `1..=at_seq`, referenced rather than copied,
/// and `events` follow as records `at_seq + 1 ..`, the first chaining from
/// the parent's record at `at_seq`. See [`JournalStore::fork`].
#[derive(Debug, Clone, PartialEq)]
pub struct ForkBatch {
    /// The child's uid.
    pub child: String,
    /// The parent's uid.
    pub parent: String,
    /// The last parent record the child shares (0: none).
    pub at_seq: i64,
    /// The child's fence; must be >= its stored fence.
    pub fence: i64,
    /// At least one event (the FORK marker).
    pub events: Vec<Event>,
    /// The child's compute_state after the write (`None`: unchanged).
    pub compute_state: Option<ComputeState>,
    /// Stamped on the child's row.
    pub now_unix_nanos: i64,
}

impl ForkBatch {
    /// The checks every store makes before it reads anything.
    pub fn check(&self) -> Result<(), StoreError> {
        let refuse = |why: &str| Err(StoreError::InvalidArgument(why.into()));
        if self.child.is_empty() || self.parent.is_empty() {
            return refuse("fork child and parent are required");
        }
        if self.child == self.parent {
            return refuse("a session cannot fork into itself");
        }
        if self.events.is_empty() {
            return refuse("a fork needs at least one event");
        }
        if self.at_seq < 0 {
            return refuse("fork seq must not be negative");
        }
        Ok(())
    }

    /// The records `events` become after the parent's record at `at_seq`,
    /// whose hash is `prev` ("" when `at_seq` is 0).
    pub fn chain(&self, prev: &str) -> Result<Vec<LogRecord>, StoreError> {
        chain(&self.events, self.fence, self.at_seq, prev)
    }
}

/// Seqs `first..=last` of a fork child's journal, stored once as the
/// records of `owner` (the session that wrote them). A child's spans are
/// flattened when it is forked: each names the session that holds the
/// rows, never one that itself refers further, so a read resolves them in
/// one step whatever the depth of forks. Spans of one child are disjoint,
/// in seq order, and its own records follow the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixSpan {
    pub first: i64,
    pub last: i64,
    pub owner: String,
}

/// The spans a child forked at `at_seq` from a parent with `spans` (its own
/// records start after the last) takes: the parent's spans cut at
/// `at_seq`, then the parent's own records up to `at_seq`.
pub fn child_spans(parent: &str, spans: &[PrefixSpan], at_seq: i64) -> Vec<PrefixSpan> {
    let own_start = spans.last().map_or(1, |s| s.last + 1);
    let mut out: Vec<PrefixSpan> = spans
        .iter()
        .filter(|s| s.first <= at_seq)
        .map(|s| PrefixSpan {
            last: s.last.min(at_seq),
            ..s.clone()
        })
        .collect();
    if at_seq >= own_start {
        out.push(PrefixSpan {
            first: own_start,
            last: at_seq,
            owner: parent.to_owned(),
        });
    }
    out
}

/// Session metadata, mirroring the Go host's `sessions` row. Labels,
/// annotations, origin and identity are opaque proto3-JSON text ("" = unset);
/// the store never parses them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionMeta {
    pub uid: String,
    /// "" means the store's default project.
    pub project: String,
    pub name: String,
    pub harness: String,
    pub model: String,
    pub parent_uid: String,
    pub fork_seq: i64,
    /// Unix nanoseconds; 0 on `put_session` means "now on insert, keep on
    /// update".
    pub created_at: i64,
    /// Unix nanoseconds; set by the store on every write.
    pub updated_at: i64,
    pub labels: String,
    pub annotations: String,
    pub origin: String,
    pub identity: String,
}

/// Metadata plus what the journal projects onto it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub meta: SessionMeta,
    /// The head seq (0 when there are no events).
    pub last_seq: i64,
    /// `COMPUTE_NONE`, `COMPUTE_LIVE` or `COMPUTE_COLD`.
    pub compute_state: ComputeState,
    /// The current fence (0 if never minted).
    pub fence: i64,
}

/// A `list_sessions` request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSessions {
    /// Exact match; "" means the store's default project (never "all").
    pub project: String,
    /// 0 means [`DEFAULT_PAGE_SIZE`]; above [`MAX_PAGE_SIZE`] is clamped.
    pub page_size: usize,
    /// "" for the first page, else a token from a previous page.
    pub page_token: String,
}

impl ListSessions {
    /// The rows a page holds: the default for 0, clamped to the largest.
    pub fn page_len(&self) -> usize {
        match self.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        }
    }

    /// The project listed ("" means `default_project`).
    pub fn project_or<'a>(&'a self, default_project: &'a str) -> &'a str {
        if self.project.is_empty() {
            default_project
        } else {
            &self.project
        }
    }
}

impl SessionMeta {
    /// The project the row is stored under ("" means `default_project`).
    pub fn project_or<'a>(&'a self, default_project: &'a str) -> &'a str {
        if self.project.is_empty() {
            default_project
        } else {
            &self.project
        }
    }
}

/// One page of sessions, newest first (created_at DESC, uid ASC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPage {
    pub sessions: Vec<SessionInfo>,
    /// "" when this is the last page.
    pub next_page_token: String,
}

/// A harness registration request. All four fields are required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessRegistration {
    pub name: String,
    pub uid: String,
    /// Canonical proto3-JSON of `HarnessSpec`, stored opaque.
    pub spec: String,
    /// Computed by the caller (`sha256:<hex>` of the canonical spec).
    pub spec_digest: String,
}

impl HarnessRegistration {
    /// Refuses a registration with an empty field, as every store does
    /// before it writes.
    pub fn check(&self) -> Result<(), StoreError> {
        for (what, v) in [
            ("name", &self.name),
            ("uid", &self.uid),
            ("spec", &self.spec),
            ("spec_digest", &self.spec_digest),
        ] {
            if v.is_empty() {
                return Err(StoreError::InvalidArgument(format!(
                    "harness {what} is required"
                )));
            }
        }
        Ok(())
    }
}

/// Whether a registration may take new sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarnessState {
    Active,
    Retired,
}

impl HarnessState {
    /// The text stored in `harnesses.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            HarnessState::Active => "active",
            HarnessState::Retired => "retired",
        }
    }
}

/// A stored harness registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessRow {
    pub name: String,
    pub uid: String,
    pub spec: String,
    pub spec_digest: String,
    pub state: HarnessState,
    pub retire_reason: String,
    pub retired_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What `register_harness` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// A new active row.
    Created,
    /// Same spec, already active; nothing changed.
    Unchanged,
    /// Same spec, was retired; active again with the retire fields cleared.
    Reactivated,
}

/// A `list_harnesses` request: rows with name > `after`, in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListHarnesses {
    pub after: String,
    /// Must be > 0.
    pub limit: usize,
    pub include_retired: bool,
}

/// A `delete_session` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteSession {
    pub uid: String,
    /// CAS: the head the deleter decided from; a session that moved since
    /// is not deleted ([`DeleteError::Conflict`]).
    pub expected_last_seq: i64,
    /// Who asked ("" while the host has no authentication); kept in the
    /// tombstone.
    pub principal: String,
    /// Stamped on the tombstone.
    pub now_unix_nanos: i64,
}

/// What a deletion leaves behind: that it happened, never what was said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub uid: String,
    /// Unix nanoseconds.
    pub deleted_at: i64,
    /// How many records were removed.
    pub records: i64,
    /// Who deleted it ("" = unauthenticated host).
    pub principal: String,
}

/// A bounded step of a retention scan: the next `scan` session rows in uid
/// order after `after`, and of those the ones last written before `before`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleScan {
    /// Exclusive lower bound on uid ("" = from the start).
    pub after: String,
    /// Unix nanoseconds: rows with `updated_at < before` are stale.
    pub before: i64,
    /// Rows to look at (> 0); bounds the work of one step.
    pub scan: usize,
}

/// What a [`StaleScan`] step found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StalePage {
    /// Stale uids, in uid order.
    pub stale: Vec<String>,
    /// Where the next step starts ("" once the scan reached the end).
    pub next: String,
}

/// The journal store contract. See the module docs for the guarantees.
pub trait JournalStore: Send + Sync {
    /// Reports commit timings and batch sizes to `meter` from now on.
    /// A store without a writer of its own (the in-memory ones) keeps none.
    fn set_meter(&self, _meter: crate::Meter) {}

    /// Turns the notification outbox on or off (off until called). While
    /// on, every committed append also inserts, in its own transaction, a
    /// notice row for each record that announces something
    /// ([`outbox::rows_for`]); while off, none (a host that delivers no
    /// notices must not grow a table nobody drains). No default: every
    /// store decides, and wrappers forward.
    fn set_outbox(&self, on: bool);

    /// Appends `batch.events` atomically as consecutive records after
    /// `batch.expected_last_seq`, and returns the committed records.
    fn append(
        &self,
        batch: AppendBatch,
    ) -> impl Future<Output = Result<Vec<LogRecord>, AppendError>> + Send;

    /// Increments and returns the session's fence (1 for the first mint),
    /// superseding every older holder. Creates the session row if missing.
    /// With `lease`, takes the session's lease in the same transaction, or
    /// refuses with [`StoreError::Leased`] (and changes nothing) while
    /// another owner's lease is live and the claim is not forced.
    fn mint_fence(
        &self,
        session: &str,
        now_unix_nanos: i64,
        lease: Option<&LeaseClaim>,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// Extends `owner`'s lease on `session` to `ttl_nanos` from the store's
    /// now if `owner` still holds it under `fence`; `ttl_nanos == 0`
    /// releases it. Returns whether `owner` held it.
    fn hold_lease(
        &self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl_nanos: i64,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// [`JournalStore::append`] done now, on the caller's thread, when the
    /// store can commit it without waiting for other writers; otherwise the
    /// batch comes back and the caller uses `append`. For a caller with
    /// nothing else to do: it blocks for the commit (an fsync) but skips
    /// the hand-off to a writer and back. Stores without such a path give
    /// every batch back.
    fn try_append_now(
        &self,
        batch: AppendBatch,
    ) -> Result<Result<Vec<LogRecord>, AppendError>, AppendBatch> {
        Err(batch)
    }

    /// [`JournalStore::mint_fence`] done now, like
    /// [`JournalStore::try_append_now`]; None when it cannot be.
    fn try_mint_fence_now(
        &self,
        _session: &str,
        _now_unix_nanos: i64,
        _lease: Option<&LeaseClaim>,
    ) -> Option<Result<i64, StoreError>> {
        None
    }

    /// The last committed seq (0 for an empty or unknown session).
    fn head(&self, session: &str) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// Records with `from_seq <= seq <= to_seq` in ascending order
    /// (`to_seq == 0` means through the head). Hashes are returned as stored.
    fn read(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
    ) -> impl Future<Output = Result<Vec<LogRecord>, StoreError>> + Send;

    /// [`JournalStore::read`], stopping after the record that brings the
    /// encoded total to `max_bytes` or more (a client stream's page; see
    /// the machine's `Pace`). By default the range is read and cut, so a
    /// store that can stop early should.
    fn read_bounded(
        &self,
        session: &str,
        from_seq: i64,
        to_seq: i64,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Vec<LogRecord>, StoreError>> + Send {
        let read = self.read(session, from_seq, to_seq);
        async move {
            let mut records = read.await?;
            let mut fill = PageFill::new(max_bytes);
            if let Some(last) = records.iter().position(|r| fill.add(r)) {
                records.truncate(last + 1);
            }
            Ok(records)
        }
    }

    /// Creates a fork child in one transaction (see [`ForkBatch`]): the
    /// child's records up to `at_seq` are the parent's, stored once and
    /// kept while any child refers to them (a deleted parent's included),
    /// so the write costs the same whatever the prefix's length. The child
    /// must be empty (`Conflict` otherwise) and `fence` current; a deleted
    /// parent is `SessionDeleted`, and a parent without a record at
    /// `at_seq` an invalid argument. Reads of the child return the
    /// parent's records verbatim, then its own.
    fn fork(
        &self,
        batch: ForkBatch,
    ) -> impl Future<Output = Result<Vec<LogRecord>, AppendError>> + Send;

    /// Walks the whole chain from genesis, checking links and hashes.
    fn verify(&self, session: &str) -> impl Future<Output = Result<(), VerifyError>> + Send;

    /// Upserts metadata; never touches fence or compute_state.
    fn put_session(
        &self,
        meta: SessionMeta,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Metadata, head and compute state of one session.
    fn session_info(
        &self,
        uid: &str,
    ) -> impl Future<Output = Result<SessionInfo, StoreError>> + Send;

    /// Keyset-paged listing of one project's sessions.
    fn list_sessions(
        &self,
        req: ListSessions,
    ) -> impl Future<Output = Result<SessionPage, StoreError>> + Send;

    /// Registers (or re-registers) a harness in one transaction.
    fn register_harness(
        &self,
        reg: HarnessRegistration,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(HarnessRow, RegisterOutcome), RegistryError>> + Send;

    /// Retires a harness; idempotent, keeps the first reason and time.
    fn retire_harness(
        &self,
        name: &str,
        reason: &str,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<HarnessRow, RegistryError>> + Send;

    /// One registration by name.
    fn harness(&self, name: &str)
    -> impl Future<Output = Result<HarnessRow, RegistryError>> + Send;

    /// Registrations in name order.
    fn list_harnesses(
        &self,
        req: ListHarnesses,
    ) -> impl Future<Output = Result<Vec<HarnessRow>, StoreError>> + Send;

    /// Reserves names permanently, all or nothing; fails with
    /// `NameCollision` if any of them already has a registration row.
    fn reserve_harness_names(
        &self,
        names: Vec<String>,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send;

    /// Removes a session in one transaction: its records and row go, and a
    /// [`Tombstone`] is written in their place. From then on the uid is
    /// refused by every write (`StoreError::SessionDeleted`), so it can
    /// never come back or be reused, and reads of it return nothing. An
    /// unknown uid is `SessionNotFound`. Records that fork children refer
    /// to stay stored (unreadable under the deleted uid) until the last
    /// such child is deleted, which removes them in its own transaction.
    fn delete_session(
        &self,
        req: DeleteSession,
    ) -> impl Future<Output = Result<Tombstone, DeleteError>> + Send;

    /// The tombstone of a deleted session (`None`: never deleted).
    fn tombstone(
        &self,
        uid: &str,
    ) -> impl Future<Output = Result<Option<Tombstone>, StoreError>> + Send;

    /// One bounded step of a retention scan; see [`StaleScan`].
    fn stale_sessions(
        &self,
        scan: StaleScan,
    ) -> impl Future<Output = Result<StalePage, StoreError>> + Send;

    /// Checks the session's harness and upserts the session in one
    /// transaction. `registered`: the name must be an active registration;
    /// otherwise (a static harness) it must have no registration row.
    fn put_session_on_active_harness(
        &self,
        meta: SessionMeta,
        registered: bool,
        now_unix_nanos: i64,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send;
}

/// Wall-clock Unix nanoseconds, for hosts that do not simulate time. The store
/// itself never calls this on its own; callers pass the value in.
pub fn system_now_unix_nanos() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(d.as_nanos()).expect("time fits i64 nanoseconds until 2262")
}
