//! Group commit: concurrent appends share one transaction and one COMMIT.
//!
//! One committer task owns the write path. It waits for an append, takes
//! whatever else is already queued (bounded by [`GroupLimits`]) and runs the
//! lot in one transaction on one connection:
//!
//! 1. lock the row of every session in the group (`FOR UPDATE`, in session
//!    order, so two daemons' groups never deadlock);
//! 2. read each session's tail, in a statement of its own so that it sees
//!    what a writer that held the lock before us committed;
//! 3. decide every append in arrival order against those heads and fences
//!    (an append accepted earlier in the group moves its session's head);
//! 4. insert all accepted records in one statement, touch every session
//!    row in another, and (with the outbox on, when an accepted append
//!    announces something) insert their notice rows in a third, COMMIT.
//!
//! Invariant: an accepted append is acknowledged only after COMMIT returned,
//! and it was checked while the group held its session's row lock, which
//! every writer of that session takes first; so nothing can move its head
//! or fence between the check and the commit. A refused append (conflict,
//! stale fence, bad event) writes nothing and never fails the others.
//!
//! A failure before COMMIT leaves nothing written (the transaction is
//! rolled back, or dies with its connection). A failed COMMIT leaves every
//! append of the group unknown: each gets `CommitFailed`, and the machine
//! re-reads the head instead of guessing. An append to a session with no
//! row yet (no mint, no put) cannot be locked, so it runs after the group
//! on its own, by the one-transaction path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use agentsessions_journal::compute_text::to_text;
use agentsessions_journal::encode::encode_event;
use agentsessions_journal::{AppendBatch, AppendError, StoreError};
use agentsessions_proto::v1::LogRecord;
use deadpool_postgres::Pool;
use futures_util::future::{join3, join5};
use tokio::sync::{mpsc, oneshot};

use crate::outbox::NoticeColumns;
use crate::{backend, ops, pool_error};
use agentsessions_journal::outbox;

/// Bounds on one group and on the queue in front of it.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    /// Appends in one group.
    pub max_appends: usize,
    /// Events in one group (a group always takes at least one append).
    pub max_events: usize,
    /// Appends waiting for the committer; a full queue makes callers wait.
    pub queue: usize,
    /// Groups committing at once, each on its own connection.
    pub in_flight: usize,
}

impl Default for GroupLimits {
    fn default() -> Self {
        Self {
            max_appends: 256,
            max_events: 4096,
            queue: 1024,
            in_flight: 2,
        }
    }
}

/// Counters of the committer, for benchmarks, tests and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// Group transactions committed.
    pub commits: u64,
    /// Appends acknowledged by those commits.
    pub appends: u64,
}

#[derive(Debug, Default)]
struct Counters {
    commits: AtomicU64,
    appends: AtomicU64,
}

type Reply = oneshot::Sender<Result<Vec<LogRecord>, AppendError>>;

struct Pending {
    batch: AppendBatch,
    reply: Reply,
    queued: std::time::Instant,
}

/// Where commit timings go, once a daemon with metrics sets it.
pub(crate) type Meter = Arc<std::sync::OnceLock<agentsessions_journal::Meter>>;

/// The sending side; cloned with the journal. The committer stops once the
/// last clone is dropped and the queue is drained.
#[derive(Clone)]
pub(crate) struct GroupCommitter {
    queue: mpsc::Sender<Pending>,
    counters: Arc<Counters>,
}

impl GroupCommitter {
    pub(crate) fn spawn(
        pool: Pool,
        default_project: String,
        limits: GroupLimits,
        planted: Arc<crate::planted::Planted>,
        meter: Meter,
        outbox: Arc<AtomicBool>,
    ) -> Self {
        assert!(limits.max_appends >= 1 && limits.max_events >= 1 && limits.queue >= 1);
        assert!(limits.in_flight >= 1);
        let (queue, rx) = mpsc::channel(limits.queue);
        let counters = Arc::new(Counters::default());
        let committer = Committer {
            pool,
            default_project,
            limits,
            planted,
            counters: counters.clone(),
            meter: meter.clone(),
            outbox,
        };
        tokio::spawn(committer.run(rx));
        Self { queue, counters }
    }

    pub(crate) async fn append(&self, batch: AppendBatch) -> Result<Vec<LogRecord>, AppendError> {
        let (reply, answer) = oneshot::channel();
        // A committer that is gone never saw this append: nothing written.
        self.queue
            .send(Pending {
                batch,
                reply,
                queued: std::time::Instant::now(),
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        // Dropped after taking it: whether it committed is unknown.
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::CommitFailed {
                reason: "the group committer stopped".into(),
            }
            .into())
        })
    }

    pub(crate) fn stats(&self) -> GroupStats {
        GroupStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            appends: self.counters.appends.load(Ordering::Relaxed),
        }
    }
}

struct Committer {
    pool: Pool,
    default_project: String,
    limits: GroupLimits,
    planted: Arc<crate::planted::Planted>,
    counters: Arc<Counters>,
    meter: Meter,
    /// Whether accepted appends insert notice rows.
    outbox: Arc<AtomicBool>,
}

/// What the group decided for one append.
enum Decision {
    Accepted(Vec<LogRecord>),
    Refused(AppendError),
    /// No session row to lock: runs alone after the group.
    Unlocked,
}

/// A session's state inside the group: as read under its lock, then moved
/// by each append the group accepts.
struct Head {
    fence: i64,
    seq: i64,
    hash: String,
}

/// The columns of one group's INSERT and session-row UPDATE.
#[derive(Default)]
struct Rows<'a> {
    sessions: Vec<&'a str>,
    seqs: Vec<i64>,
    prev_hashes: Vec<String>,
    hashes: Vec<String>,
    fences: Vec<i64>,
    blobs: Vec<Vec<u8>>,
    /// Per session: (first now, last now, last compute_state written).
    touched: BTreeMap<&'a str, (i64, i64, Option<&'static str>)>,
    /// Leases the accepted appends end: (session, owner, fence) columns.
    released: (Vec<&'a str>, Vec<&'a str>, Vec<i64>),
}

impl<'a> Rows<'a> {
    fn add(&mut self, batch: &'a AppendBatch, records: &[LogRecord]) {
        for rec in records {
            self.sessions.push(&batch.session);
            self.seqs.push(rec.seq);
            self.prev_hashes.push(rec.prev_hash.clone());
            self.hashes.push(rec.content_hash.clone());
            self.fences.push(rec.fence);
            let event = rec.event.as_ref().expect("a chained record has its event");
            self.blobs.push(encode_event(event));
        }
        let state = batch.compute_state.map(to_text);
        let now = batch.now_unix_nanos;
        let entry = self
            .touched
            .entry(&batch.session)
            .or_insert((now, now, None));
        entry.1 = now;
        if state.is_some() {
            entry.2 = state;
        }
        if let Some(owner) = &batch.release_lease {
            self.released.0.push(&batch.session);
            self.released.1.push(owner.as_str());
            self.released.2.push(batch.fence);
        }
    }
}

/// Why a whole group failed, copied to every append in it.
#[derive(Debug, Clone)]
enum GroupFailure {
    /// Before COMMIT: nothing was written.
    Before {
        transient: bool,
        busy: bool,
        reason: String,
    },
    /// COMMIT failed: the outcome is unknown.
    Commit(String),
}

impl GroupFailure {
    fn before(e: StoreError) -> Self {
        GroupFailure::Before {
            transient: e.is_transient(),
            busy: matches!(e, StoreError::Busy(_)),
            reason: e.to_string(),
        }
    }

    fn to_error(&self) -> AppendError {
        let e = match self {
            GroupFailure::Before {
                transient: true,
                reason,
                ..
            } => StoreError::Unavailable(reason.clone()),
            GroupFailure::Before {
                busy: true, reason, ..
            } => StoreError::Busy(reason.clone()),
            GroupFailure::Before { reason, .. } => StoreError::Backend(reason.clone().into()),
            GroupFailure::Commit(reason) => StoreError::CommitFailed {
                reason: reason.clone(),
            },
        };
        e.into()
    }
}

/// Decides every batch in arrival order against the locked `heads`,
/// moving a session's head with each append it accepts: the pure middle of
/// a group, between the reads and the writes.
fn decide<'a>(
    batches: &[&'a AppendBatch],
    heads: &mut BTreeMap<String, Head>,
) -> (Vec<Decision>, Rows<'a>) {
    let mut rows = Rows::default();
    let mut decisions = Vec::with_capacity(batches.len());
    for batch in batches {
        let Some(head) = heads.get_mut(&batch.session) else {
            decisions.push(Decision::Unlocked);
            continue;
        };
        let decision = if batch.expected_last_seq != head.seq {
            Decision::Refused(AppendError::Conflict { head: head.seq })
        } else if batch.fence < head.fence {
            Decision::Refused(AppendError::Fenced {
                current: head.fence,
            })
        } else {
            match batch.chain(head.seq, &head.hash) {
                Err(e) => Decision::Refused(e.into()),
                Ok(records) => {
                    let last = records.last().expect("a batch has events");
                    head.seq = last.seq;
                    head.hash = last.content_hash.clone();
                    rows.add(batch, &records);
                    Decision::Accepted(records)
                }
            }
        };
        decisions.push(decision);
    }
    assert_eq!(decisions.len(), batches.len(), "one decision per batch");
    (decisions, rows)
}

/// The one-append release, for many (session, owner, fence) at once.
const RELEASE: &str = "DELETE FROM session_leases l \
     USING UNNEST($1::text[], $2::text[], $3::bigint[]) AS r(session, owner, fence) \
     WHERE l.session = r.session AND l.owner = r.owner AND l.fence = r.fence";

const LOCK: &str = "SELECT session, fence FROM sessions WHERE session = ANY($1) \
     ORDER BY session FOR UPDATE";

const TAIL: &str = "SELECT u.session, t.seq, t.hash FROM UNNEST($1::text[]) AS u(session) \
     CROSS JOIN LATERAL (SELECT seq, hash FROM events e WHERE e.session = u.session \
     ORDER BY seq DESC LIMIT 1) t";

const INSERT: &str = "INSERT INTO events(session, seq, prev_hash, hash, fence, event) \
     SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bytea[])";

/// The session-row touch of the one-append path, for many sessions: fills a
/// row that a bare mint left without project or creation time.
const TOUCH: &str = "UPDATE sessions s SET \
     project = CASE WHEN s.project = '' THEN $5 ELSE s.project END, \
     created_at = CASE WHEN s.created_at = 0 THEN v.first_now ELSE s.created_at END, \
     updated_at = v.last_now, compute_state = COALESCE(v.state, s.compute_state) \
     FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[]) AS v(session, first_now, last_now, state) \
     WHERE s.session = v.session";

impl Committer {
    async fn run(self, mut rx: mpsc::Receiver<Pending>) {
        let this = Arc::new(self);
        let slots = Arc::new(tokio::sync::Semaphore::new(this.limits.in_flight));
        let mut group = Vec::with_capacity(this.limits.max_appends);
        loop {
            // Wait for a free slot first, so that appends queue up (and
            // group) while every slot is committing.
            let slot = slots
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let Some(first) = rx.recv().await else { break };
            let mut events = first.batch.events.len();
            group.push(first);
            while group.len() < this.limits.max_appends && events < this.limits.max_events {
                match rx.try_recv() {
                    Ok(next) => {
                        events += next.batch.events.len();
                        group.push(next);
                    }
                    Err(_) => break,
                }
            }
            let group = std::mem::replace(&mut group, Vec::with_capacity(this.limits.max_appends));
            let this = this.clone();
            tokio::spawn(async move {
                this.commit_group(group).await;
                drop(slot);
            });
        }
    }

    /// Runs one group and answers every append in it.
    async fn commit_group(&self, group: Vec<Pending>) {
        let mut valid = Vec::with_capacity(group.len());
        for p in group {
            match ops::check_batch(&p.batch) {
                Ok(()) => valid.push(p),
                Err(e) => {
                    let _ = p.reply.send(Err(e));
                }
            }
        }
        if valid.is_empty() {
            return;
        }
        let mut conn = match self.pool.get().await {
            Ok(c) => c,
            Err(e) => {
                let failure = GroupFailure::before(pool_error(e));
                return valid.into_iter().for_each(|p| {
                    let _ = p.reply.send(Err(failure.to_error()));
                });
            }
        };
        let batches: Vec<&AppendBatch> = valid.iter().map(|p| &p.batch).collect();
        let started = std::time::Instant::now();
        let outcome = if self.planted.lose_before() {
            Err(GroupFailure::Commit("planted: lost before COMMIT".into()))
        } else {
            match self.stage_and_commit(&mut conn, &batches).await {
                Ok(_) if self.planted.lose_after() => Err(GroupFailure::Commit(
                    "planted: answer lost after COMMIT".into(),
                )),
                outcome => outcome,
            }
        };
        let meter = self.meter.get();
        if let (Ok(_), Some(m)) = (&outcome, meter) {
            m.committed(valid.len(), started.elapsed(), false);
        }
        match outcome {
            // The answer to COMMIT was lost: each append is reconciled
            // against what the store holds before it is answered.
            Err(GroupFailure::Commit(reason)) => {
                for p in valid {
                    let answer =
                        crate::reconcile::append(&self.pool, &p.batch, &reason, meter).await;
                    let _ = p.reply.send(answer);
                }
            }
            Err(failure) => valid.into_iter().for_each(|p| {
                let _ = p.reply.send(Err(failure.to_error()));
            }),
            Ok(decisions) => {
                assert_eq!(decisions.len(), valid.len(), "one decision per append");
                for (p, decision) in valid.into_iter().zip(decisions) {
                    let answer = match decision {
                        Decision::Accepted(records) => {
                            if let Some(m) = meter {
                                m.appended(p.queued.elapsed());
                            }
                            Ok(records)
                        }
                        Decision::Refused(e) => Err(e),
                        Decision::Unlocked => {
                            let announce = self.outbox.load(Ordering::SeqCst);
                            let project = &self.default_project;
                            ops::append(&mut conn, &p.batch, project, announce).await
                        }
                    };
                    let _ = p.reply.send(answer);
                }
            }
        }
    }

    /// Steps 1-4 of the module doc in two round trips (BEGIN, lock, tail;
    /// then insert, touch, notices, COMMIT); `Ok` means committed (or
    /// nothing to commit), with one decision per batch in order.
    async fn stage_and_commit(
        &self,
        conn: &mut deadpool_postgres::Object,
        batches: &[&AppendBatch],
    ) -> Result<Vec<Decision>, GroupFailure> {
        let before = |e| GroupFailure::before(backend(e));
        let mut sessions: Vec<&str> = batches.iter().map(|b| b.session.as_str()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        // Read once, so the whole group follows one setting.
        let announce = self.outbox.load(Ordering::SeqCst);
        let stmts = Statements::prepare(conn, announce).await.map_err(before)?;
        let client: &tokio_postgres::Client = conn;

        // `join3` polls in order and the driver sends a request on its
        // first poll, so the server runs them in this order: the tail is
        // read by a statement that starts after the locks are held.
        let (begun, locked, tails) = join3(
            client.batch_execute("BEGIN"),
            client.query(&stmts.lock, &[&sessions]),
            client.query(&stmts.tail, &[&sessions]),
        )
        .await;
        let read = begun.and(locked).and_then(|l| tails.map(|t| (l, t)));
        let (locked, tails) = match read {
            Ok(read) => read,
            Err(e) => {
                rollback(client).await;
                return Err(before(e));
            }
        };
        let mut heads: BTreeMap<String, Head> = locked
            .iter()
            .map(|r| {
                let head = Head {
                    fence: r.get(1),
                    seq: 0,
                    hash: String::new(),
                };
                (r.get::<_, String>(0), head)
            })
            .collect();
        for r in &tails {
            let session: &str = r.get(0);
            // A tail without a locked row: the session row is gone, the
            // appends to it take the one-append path.
            if let Some(h) = heads.get_mut(session) {
                h.seq = r.get(1);
                h.hash = r.get(2);
            }
        }

        let (decisions, rows) = decide(batches, &mut heads);
        if rows.seqs.is_empty() {
            rollback(client).await;
            return Ok(decisions);
        }
        let notices = if announce {
            notices_of(batches, &decisions)
        } else {
            NoticeColumns::default()
        };
        self.write_and_commit(client, &stmts, &rows, &notices)
            .await?;
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        let accepted = decisions
            .iter()
            .filter(|d| matches!(d, Decision::Accepted(_)))
            .count();
        self.counters
            .appends
            .fetch_add(accepted as u64, Ordering::Relaxed);
        Ok(decisions)
    }

    /// Step 4 inside the open transaction: the records, the session rows,
    /// the ended leases and the notices, then COMMIT, all sent at once.
    async fn write_and_commit(
        &self,
        client: &tokio_postgres::Client,
        stmts: &Statements,
        rows: &Rows<'_>,
        notices: &NoticeColumns,
    ) -> Result<(), GroupFailure> {
        let before = |e| GroupFailure::before(backend(e));
        let touched: Vec<&str> = rows.touched.keys().copied().collect();
        let first_now: Vec<i64> = rows.touched.values().map(|t| t.0).collect();
        let last_now: Vec<i64> = rows.touched.values().map(|t| t.1).collect();
        let states: Vec<Option<&str>> = rows.touched.values().map(|t| t.2).collect();
        type Param<'p> = &'p (dyn tokio_postgres::types::ToSql + Sync);
        let insert_params: [Param; 6] = [
            &rows.sessions,
            &rows.seqs,
            &rows.prev_hashes,
            &rows.hashes,
            &rows.fences,
            &rows.blobs,
        ];
        let touch_params: [Param; 5] = [
            &touched,
            &first_now,
            &last_now,
            &states,
            &self.default_project,
        ];
        let (owners, fences) = (&rows.released.1, &rows.released.2);
        let release_params: [Param; 3] = [&rows.released.0, owners, fences];
        // Sent only when some append ends a lease; polled third, so the
        // server runs it before COMMIT like the others.
        let ended = async {
            if rows.released.0.is_empty() {
                Ok(0)
            } else {
                client.execute(&stmts.release, &release_params).await
            }
        };
        // Sent only when an accepted append announces something (its
        // statement is prepared only with the outbox on); polled fourth.
        let announced = async {
            match &stmts.announce {
                Some(announce) if !notices.is_empty() => {
                    client.execute(announce, &notices.params()).await
                }
                _ => Ok(0),
            }
        };
        debug_assert!(notices.is_empty() || stmts.announce.is_some());
        let (inserted, updated, ended, announced, committed) = join5(
            client.execute(&stmts.insert, &insert_params),
            client.execute(&stmts.touch, &touch_params),
            ended,
            announced,
            client.batch_execute("COMMIT"),
        )
        .await;
        let mut counts = [0u64; 4];
        let mut broken = None;
        for (n, written) in counts.iter_mut().zip([inserted, updated, ended, announced]) {
            match written {
                Ok(rows) => *n = rows,
                // The server refused a statement: the transaction was
                // aborted and its COMMIT became a rollback, so nothing
                // was written.
                Err(e) if e.code().is_some() => {
                    rollback(client).await;
                    return Err(before(e));
                }
                Err(e) => {
                    broken.get_or_insert(e);
                }
            }
        }
        // The connection broke, or COMMIT itself failed: unknown.
        if let Some(e) = broken.or(committed.err()) {
            return Err(GroupFailure::Commit(e.to_string()));
        }
        let [inserted, updated, ended, announced] = counts;
        assert_eq!(inserted as usize, rows.seqs.len(), "one row per record");
        assert_eq!(updated as usize, touched.len(), "one touch per session");
        assert!(ended as usize <= rows.released.0.len(), "one lease per end");
        assert!(announced as usize <= notices.len(), "one row per notice");
        Ok(())
    }
}

/// A group's statements, prepared once per connection (a cache hit after
/// the first group), outside the transaction.
struct Statements {
    lock: tokio_postgres::Statement,
    tail: tokio_postgres::Statement,
    insert: tokio_postgres::Statement,
    touch: tokio_postgres::Statement,
    release: tokio_postgres::Statement,
    /// Only with the outbox on.
    announce: Option<tokio_postgres::Statement>,
}

impl Statements {
    async fn prepare(
        conn: &deadpool_postgres::Object,
        announce: bool,
    ) -> Result<Self, tokio_postgres::Error> {
        let announce = match announce {
            true => Some(conn.prepare_cached(crate::outbox::INSERT).await?),
            false => None,
        };
        Ok(Self {
            lock: conn.prepare_cached(LOCK).await?,
            tail: conn.prepare_cached(TAIL).await?,
            insert: conn.prepare_cached(INSERT).await?,
            touch: conn.prepare_cached(TOUCH).await?,
            release: conn.prepare_cached(RELEASE).await?,
            announce,
        })
    }
}

/// The notice rows of the appends the group accepted: each member's rows
/// go in the same transaction as its records; a refused member has none.
fn notices_of(batches: &[&AppendBatch], decisions: &[Decision]) -> NoticeColumns {
    assert_eq!(batches.len(), decisions.len(), "one decision per batch");
    let mut notices = NoticeColumns::default();
    for (batch, decision) in batches.iter().zip(decisions) {
        if let Decision::Accepted(records) = decision {
            let rows = outbox::rows_for(&batch.session, records, batch.now_unix_nanos);
            notices.add(rows);
        }
    }
    notices
}

/// Ends a transaction that must not commit; a connection too broken for
/// this is thrown away by the pool when it comes back.
async fn rollback(client: &tokio_postgres::Client) {
    let _ = client.batch_execute("ROLLBACK").await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_machine::events;
    use agentsessions_proto::v1::ComputeState;

    fn batch(session: &str, expected: i64, fence: i64, n: usize, now: i64) -> AppendBatch {
        AppendBatch {
            session: session.into(),
            expected_last_seq: expected,
            fence,
            events: (0..n)
                .map(|i| events::input(&format!("x-{i}"), events::text_message("user", "hi")))
                .collect(),
            compute_state: None,
            now_unix_nanos: now,
            release_lease: None,
        }
    }

    fn heads(of: &[(&str, i64, i64, &str)]) -> BTreeMap<String, Head> {
        of.iter()
            .map(|(s, fence, seq, hash)| {
                let head = Head {
                    fence: *fence,
                    seq: *seq,
                    hash: (*hash).to_owned(),
                };
                ((*s).to_owned(), head)
            })
            .collect()
    }

    fn accepted(d: &Decision) -> &[LogRecord] {
        match d {
            Decision::Accepted(records) => records,
            Decision::Refused(e) => panic!("refused: {e}"),
            Decision::Unlocked => panic!("unlocked"),
        }
    }

    #[test]
    fn a_second_append_to_a_session_chains_on_the_first_of_the_same_group() {
        let (a, b) = (batch("s", 0, 1, 2, 10), batch("s", 2, 1, 1, 20));
        let mut h = heads(&[("s", 1, 0, "")]);
        let (decisions, rows) = decide(&[&a, &b], &mut h);
        let first = accepted(&decisions[0]);
        let second = accepted(&decisions[1]);
        assert_eq!(first.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(second[0].seq, 3);
        assert_eq!(second[0].prev_hash, first[1].content_hash);
        assert_eq!(h["s"].seq, 3);
        assert_eq!(h["s"].hash, second[0].content_hash);
        assert_eq!(rows.seqs, vec![1, 2, 3]);
        // One touch for the session: created from the first, updated by the last.
        assert_eq!(rows.touched["s"], (10, 20, None));
    }

    #[test]
    fn a_conflict_or_stale_fence_is_refused_alone_and_moves_nothing() {
        let ok = batch("a", 4, 2, 1, 1);
        let stale_head = batch("a", 4, 2, 1, 2); // raced the first: head is 5 now
        let stale_fence = batch("b", 0, 1, 1, 3);
        let other = batch("c", 0, 9, 1, 4);
        let mut h = heads(&[("a", 2, 4, "h4"), ("b", 2, 0, ""), ("c", 3, 0, "")]);
        let (decisions, rows) = decide(&[&ok, &stale_head, &stale_fence, &other], &mut h);
        assert_eq!(accepted(&decisions[0])[0].prev_hash, "h4");
        assert!(matches!(
            decisions[1],
            Decision::Refused(AppendError::Conflict { head: 5 })
        ));
        assert!(matches!(
            decisions[2],
            Decision::Refused(AppendError::Fenced { current: 2 })
        ));
        assert_eq!(accepted(&decisions[3])[0].fence, 9);
        assert_eq!(rows.sessions, vec!["a", "c"]);
        assert_eq!(h["b"].seq, 0);
    }

    #[test]
    fn a_session_without_a_locked_row_is_left_to_the_one_append_path() {
        let (a, b) = (batch("new", 0, 0, 1, 1), batch("new", 1, 0, 1, 2));
        let (decisions, rows) = decide(&[&a, &b], &mut heads(&[]));
        assert!(decisions.iter().all(|d| matches!(d, Decision::Unlocked)));
        assert!(rows.seqs.is_empty() && rows.touched.is_empty());
    }

    #[test]
    fn the_last_compute_state_of_a_session_in_the_group_is_the_one_written() {
        let mut a = batch("s", 0, 0, 1, 1);
        a.compute_state = Some(ComputeState::ComputeLive);
        let b = batch("s", 1, 0, 1, 2);
        let (_, rows) = decide(&[&a, &b], &mut heads(&[("s", 0, 0, "")]));
        assert_eq!(rows.touched["s"], (1, 2, Some("LIVE")));
    }
}
