//! The statements behind [`crate::PgJournal`], one function per store call
//! (the registry's in [`registry`]), mirroring `sqlite/src/{write_ops,
//! read_ops}.rs` so both backends answer every call alike.

use agentsessions_journal::columns::{Columns, record_of, session_of};
use agentsessions_journal::compute_text::to_text;
use agentsessions_journal::encode::encode_event;
use agentsessions_journal::lease::{self, LeaseClaim, StoredLease};
use agentsessions_journal::rules::{self, required};
use agentsessions_journal::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, ListSessions, PrefixSpan,
    SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan, StoreError, Tombstone,
    VerifyError, child_spans,
};
use agentsessions_machine::chain::ChainVerifier;
use agentsessions_proto::v1::LogRecord;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, Row, Transaction};

use crate::backend;

mod registry;
pub(crate) use registry::{
    harness_row, list_harnesses, put_session_on_active_harness, register_harness,
    reserve_harness_names, retire_harness,
};

/// COMMIT: a failure here leaves the outcome unknown to us.
pub(crate) async fn commit(tx: Transaction<'_>) -> Result<(), StoreError> {
    tx.commit().await.map_err(|e| StoreError::CommitFailed {
        reason: e.to_string(),
    })
}

/// [`commit`] for a transaction on a pooled connection (statements cached).
async fn commit_pooled(tx: deadpool_postgres::Transaction<'_>) -> Result<(), StoreError> {
    tx.commit().await.map_err(|e| StoreError::CommitFailed {
        reason: e.to_string(),
    })
}

async fn refuse_deleted<C: GenericClient>(c: &C, uid: &str) -> Result<(), StoreError> {
    let row = c
        .query_opt("SELECT 1 FROM deleted_sessions WHERE session = $1", &[&uid])
        .await
        .map_err(backend)?;
    match row {
        Some(_) => Err(StoreError::SessionDeleted {
            uid: uid.to_owned(),
        }),
        None => Ok(()),
    }
}

/// A session row locked for a write (`FOR UPDATE`), so a concurrent writer
/// of the same session waits here and then reads the head this one leaves.
struct Locked {
    /// The row's fence (0 when there is no row).
    fence: i64,
    /// No row yet: this write creates it (a deleted session is refused).
    missing: bool,
    /// A row without its project or creation time (written by a migration
    /// or a bare fence mint): this write fills them in.
    incomplete: bool,
}

async fn lock_row(
    tx: &deadpool_postgres::Transaction<'_>,
    session: &str,
) -> Result<Locked, StoreError> {
    let lock = tx
        .prepare_cached(
            "SELECT fence, project = '' OR created_at = 0 FROM sessions WHERE session = $1 FOR UPDATE",
        )
        .await
        .map_err(backend)?;
    let row = tx.query_opt(&lock, &[&session]).await.map_err(backend)?;
    let locked = match &row {
        Some(r) => Locked {
            fence: r.get(0),
            missing: false,
            incomplete: r.get(1),
        },
        None => Locked {
            fence: 0,
            missing: true,
            incomplete: false,
        },
    };
    if locked.missing {
        refuse_deleted(&**tx, session).await?;
    }
    Ok(locked)
}

/// After a write's records: creates the row `lock_row` found missing,
/// completes an incomplete one (keeping what it has), and stamps
/// `updated_at` and the compute state. The database error is returned as
/// is: a unique violation means another writer created the row meanwhile.
async fn touch_row(
    tx: &deadpool_postgres::Transaction<'_>,
    session: &str,
    locked: &Locked,
    default_project: &str,
    now: i64,
    state: &Option<&str>,
) -> Result<u64, tokio_postgres::Error> {
    if locked.missing {
        tx.execute(
            "INSERT INTO sessions(session, project, created_at, updated_at, compute_state)
             VALUES ($1, $2, $3, $3, COALESCE($4, ''))",
            &[&session, &default_project, &now, state],
        )
        .await
    } else if locked.incomplete {
        tx.execute(
            "UPDATE sessions SET
                project = CASE WHEN project = '' THEN $2 ELSE project END,
                created_at = CASE WHEN created_at = 0 THEN $3 ELSE created_at END,
                updated_at = $3, compute_state = COALESCE($4, compute_state)
             WHERE session = $1",
            &[&session, &default_project, &now, state],
        )
        .await
    } else {
        let touch = tx
            .prepare_cached(
                "UPDATE sessions SET updated_at = $2, compute_state = COALESCE($3, compute_state)
                 WHERE session = $1",
            )
            .await?;
        tx.execute(&touch, &[&session, &now, state]).await
    }
}

pub(crate) async fn head<C: GenericClient>(c: &C, session: &str) -> Result<i64, StoreError> {
    // A deleted session has no head, even while rows of it are kept for
    // its fork children.
    Ok(c.query_one(
        "SELECT COALESCE(MAX(seq), 0)::bigint FROM events WHERE session = $1
           AND NOT EXISTS (SELECT 1 FROM deleted_sessions d WHERE d.session = $1)",
        &[&session],
    )
    .await
    .map_err(backend)?
    .get(0))
}

/// The checks every append passes before it reaches the database.
pub(crate) fn check_batch(batch: &AppendBatch) -> Result<(), AppendError> {
    required("session", &batch.session)?;
    if batch.events.is_empty() {
        return Err(StoreError::InvalidArgument("append needs at least one event".into()).into());
    }
    Ok(())
}

/// The CAS + fence checked append of one batch, in one transaction; with
/// `announce`, the notice rows of its records too (`crate::outbox`).
pub(crate) async fn append(
    c: &mut deadpool_postgres::ClientWrapper,
    batch: &AppendBatch,
    default_project: &str,
    announce: bool,
) -> Result<Vec<LogRecord>, AppendError> {
    check_batch(batch)?;
    // The hot path: statements are prepared once per connection (a string
    // query would cost a parse round trip on every call).
    let tx = c.transaction().await.map_err(backend)?;
    let locked = lock_row(&tx, &batch.session).await?;
    let tail = tx
        .prepare_cached("SELECT seq, hash FROM events WHERE session = $1 ORDER BY seq DESC LIMIT 1")
        .await
        .map_err(backend)?;
    let head_row = tx
        .query_opt(&tail, &[&batch.session])
        .await
        .map_err(backend)?;
    let (head, prev) = head_row
        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
        .unwrap_or_default();
    if batch.expected_last_seq != head {
        return Err(AppendError::Conflict { head });
    }
    if batch.fence < locked.fence {
        return Err(AppendError::Fenced {
            current: locked.fence,
        });
    }
    let insert = tx
        .prepare_cached(
            "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .await
        .map_err(backend)?;
    let records = batch.chain(head, &prev)?;
    for rec in &records {
        let blob = encode_event(rec.event.as_ref().expect("a chained record has its event"));
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &batch.session,
            &rec.seq,
            &rec.prev_hash,
            &rec.content_hash,
            &batch.fence,
            &blob,
        ];
        match tx.execute(&insert, &params).await {
            Ok(n) => assert_eq!(n, 1, "one row per event"),
            // A writer that created the session row concurrently: the
            // head moved under us.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                drop(tx);
                let head = self::head(&**c, &batch.session).await?;
                return Err(AppendError::Conflict { head });
            }
            Err(e) => return Err(backend(e).into()),
        }
    }
    let state = batch.compute_state.map(to_text);
    let n = touch_row(
        &tx,
        &batch.session,
        &locked,
        default_project,
        batch.now_unix_nanos,
        &state,
    )
    .await;
    match n {
        Ok(n) => assert_eq!(n, 1, "exactly one session row is touched"),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            drop(tx);
            let head = self::head(&**c, &batch.session).await?;
            return Err(AppendError::Conflict { head });
        }
        Err(e) => return Err(backend(e).into()),
    }
    if let Some(owner) = &batch.release_lease {
        let release = tx.prepare_cached(RELEASE).await.map_err(backend)?;
        tx.execute(&release, &[&batch.session, owner, &batch.fence])
            .await
            .map_err(backend)?;
    }
    if announce {
        crate::outbox::announce(&tx, &batch.session, &records, batch.now_unix_nanos).await?;
    }
    commit_pooled(tx).await?;
    Ok(records)
}

/// The database's clock in unix nanos: leases are judged by one clock for
/// every host, never by comparing two hosts' clocks.
const DB_NOW: &str = "(extract(epoch from clock_timestamp()) * 1000000000)::bigint";

/// The fence upsert: the session row's lock first, so every mint of one
/// session runs its lease check after the previous one committed.
const MINT: &str = "INSERT INTO sessions(session, fence, project, created_at, updated_at)
     VALUES ($1, 1, $2, $3, $3)
     ON CONFLICT (session) DO UPDATE SET
        fence = sessions.fence + 1,
        project = CASE WHEN sessions.project = '' THEN excluded.project ELSE sessions.project END,
        created_at = CASE WHEN sessions.created_at = 0 THEN excluded.created_at ELSE sessions.created_at END,
        updated_at = excluded.updated_at
     RETURNING fence, (extract(epoch from clock_timestamp()) * 1000000000)::bigint";
const DELETED: &str = "SELECT 1 FROM deleted_sessions WHERE session = $1";
const LEASE_HELD: &str = "SELECT owner, fence, expires_at FROM session_leases WHERE session = $1";
const LEASE_TAKE: &str =
    "INSERT INTO session_leases(session, owner, fence, expires_at) VALUES ($1, $2, $3, $4)
     ON CONFLICT (session) DO UPDATE SET
        owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at";

/// Mints the next fence of `session` (and, with `lease`, takes its lease)
/// in one transaction of two round trips: BEGIN, the tombstone check, the
/// upsert and the lease read pipelined (the server runs them in that
/// order), then the lease write and COMMIT pipelined. Statements are
/// prepared once per connection.
pub(crate) async fn mint_fence(
    c: &deadpool_postgres::Object,
    session: &str,
    now: i64,
    default_project: &str,
    lease: Option<&LeaseClaim>,
    known: &mut i64,
) -> Result<i64, StoreError> {
    required("session", session)?;
    let deleted = c.prepare_cached(DELETED).await.map_err(backend)?;
    let mint = c.prepare_cached(MINT).await.map_err(backend)?;
    let held = c.prepare_cached(LEASE_HELD).await.map_err(backend)?;
    let take = c.prepare_cached(LEASE_TAKE).await.map_err(backend)?;
    let client: &Client = c;
    let read_lease = async {
        match lease {
            Some(_) => client.query_opt(&held, &[&session]).await,
            None => Ok(None),
        }
    };
    let (begun, gone, minted, lease_row) = futures_util::future::join4(
        client.batch_execute("BEGIN"),
        client.query_opt(&deleted, &[&session]),
        client.query_one(&mint, &[&session, &default_project, &now]),
        read_lease,
    )
    .await;
    let read = begun
        .and(gone)
        .and_then(|g| minted.and_then(|m| lease_row.map(|l| (g, m, l))));
    let (gone, row, lease_row) = match read {
        Ok(read) => read,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(backend(e));
        }
    };
    if gone.is_some() {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(StoreError::SessionDeleted {
            uid: session.to_owned(),
        });
    }
    let fence: i64 = row.get(0);
    let db_now: i64 = row.get(1);
    assert!(fence >= 1, "a minted fence is positive");
    // Known before COMMIT, so a lost answer can be read back.
    *known = fence;
    let Some(claim) = lease else {
        commit_text(client).await?;
        return Ok(fence);
    };
    let stored = lease_row.map(|r| StoredLease {
        owner: r.get(0),
        fence: r.get(1),
        expires_at: r.get(2),
    });
    // A refusal rolls the fence bump back with the transaction.
    if let Err(refused) = lease::check_claim(session, stored.as_ref(), claim, db_now) {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(refused);
    }
    let taken = lease::taken(claim, fence, db_now);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&session, &taken.owner, &taken.fence, &taken.expires_at];
    let (written, committed) = futures_util::future::join(
        client.execute(&take, &params),
        client.batch_execute("COMMIT"),
    )
    .await;
    match (written, committed) {
        (Ok(n), Ok(())) => {
            assert_eq!(n, 1, "one lease row per session");
            Ok(fence)
        }
        // The server refused the write: COMMIT became a rollback.
        (Err(e), _) if e.code().is_some() => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(backend(e))
        }
        (Err(e), _) | (_, Err(e)) => Err(StoreError::CommitFailed {
            reason: e.to_string(),
        }),
    }
}

/// COMMIT sent as text on a connection inside a transaction it began.
async fn commit_text(client: &Client) -> Result<(), StoreError> {
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| StoreError::CommitFailed {
            reason: e.to_string(),
        })
}

/// Ends `owner`'s lease taken at `fence`; anyone else's stays.
const RELEASE: &str = "DELETE FROM session_leases WHERE session = $1 AND owner = $2 AND fence = $3";

/// Renews (ttl > 0, from the database's now) or releases (0) `owner`'s
/// lease taken under `fence`; whether `owner` held it.
pub(crate) async fn hold_lease<C: GenericClient>(
    c: &C,
    session: &str,
    owner: &str,
    fence: i64,
    ttl: i64,
) -> Result<bool, StoreError> {
    required("session", session)?;
    required("lease owner", owner)?;
    let n = if ttl == 0 {
        c.execute(RELEASE, &[&session, &owner, &fence]).await
    } else {
        c.execute(
            &format!(
                "UPDATE session_leases SET expires_at = {DB_NOW} + $4
                 WHERE session = $1 AND owner = $2 AND fence = $3"
            ),
            &[&session, &owner, &fence, &ttl],
        )
        .await
    }
    .map_err(backend)?;
    assert!(n <= 1, "a session has one lease row");
    Ok(n == 1)
}

pub(crate) async fn read<C: GenericClient>(
    c: &C,
    session: &str,
    from_seq: i64,
    to_seq: i64,
) -> Result<Vec<LogRecord>, StoreError> {
    let to = if to_seq <= 0 { i64::MAX } else { to_seq };
    let rows = c
        .query(READ, &[&session, &from_seq, &to])
        .await
        .map_err(backend)?;
    rows.iter().map(|r| record_of(session, &PgRow(r))).collect()
}

/// A journal range in one statement: the spans of a fork child's prefix
/// (other sessions' rows, read whether or not their writer was deleted
/// since) and the session's own rows (none once it is deleted; its rows
/// kept for children are read only through them).
const READ: &str = "SELECT e.seq, e.prev_hash, e.hash, e.fence, e.event
    FROM (SELECT owner AS holder, GREATEST(first_seq, $2) AS lo, LEAST(last_seq, $3) AS hi
            FROM session_prefixes WHERE session = $1 AND first_seq <= $3 AND last_seq >= $2
          UNION ALL
          SELECT $1::text COLLATE \"C\", $2::bigint, $3::bigint
           WHERE NOT EXISTS (SELECT 1 FROM deleted_sessions d WHERE d.session = $1)) s
    JOIN events e ON e.session = s.holder AND e.seq >= s.lo AND e.seq <= s.hi
    ORDER BY e.seq";

/// The spans of `session`'s prefix, in seq order.
pub(crate) async fn spans<C: GenericClient>(
    c: &C,
    session: &str,
) -> Result<Vec<PrefixSpan>, StoreError> {
    let rows = c
        .query(
            "SELECT first_seq, last_seq, owner FROM session_prefixes
             WHERE session = $1 ORDER BY first_seq",
            &[&session],
        )
        .await
        .map_err(backend)?;
    Ok(rows
        .iter()
        .map(|r| PrefixSpan {
            first: r.get(0),
            last: r.get(1),
            owner: r.get(2),
        })
        .collect())
}

/// A fork child's first write, in one transaction: see
/// `JournalStore::fork`. The parent's row is share-locked so a concurrent
/// delete of it either finishes first (the fork is refused) or waits and
/// then sees the child's spans (and keeps what they name).
pub(crate) async fn fork(
    c: &mut deadpool_postgres::ClientWrapper,
    batch: &ForkBatch,
    default_project: &str,
) -> Result<Vec<LogRecord>, AppendError> {
    batch.check()?;
    let tx = c.transaction().await.map_err(backend)?;
    let locked = lock_row(&tx, &batch.child).await?;
    let head = head(&*tx, &batch.child).await?;
    if head != 0 {
        return Err(AppendError::Conflict { head });
    }
    if batch.fence < locked.fence {
        return Err(AppendError::Fenced {
            current: locked.fence,
        });
    }
    let mut prev = String::new();
    if batch.at_seq > 0 {
        tx.query_opt(
            "SELECT 1 FROM sessions WHERE session = $1 FOR SHARE",
            &[&batch.parent],
        )
        .await
        .map_err(backend)?;
        refuse_deleted(&*tx, &batch.parent).await?;
        let parent = spans(&*tx, &batch.parent).await?;
        let holder = parent
            .iter()
            .find(|s| s.first <= batch.at_seq && batch.at_seq <= s.last)
            .map_or(batch.parent.as_str(), |s| s.owner.as_str());
        prev = tx
            .query_opt(
                "SELECT hash FROM events WHERE session = $1 AND seq = $2",
                &[&holder, &batch.at_seq],
            )
            .await
            .map_err(backend)?
            .map(|r| r.get(0))
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!(
                    "fork parent {} has no record at seq {}",
                    batch.parent, batch.at_seq
                ))
            })?;
        for span in child_spans(&batch.parent, &parent, batch.at_seq) {
            tx.execute(
                "INSERT INTO session_prefixes(session, first_seq, last_seq, owner) VALUES ($1, $2, $3, $4)",
                &[&batch.child, &span.first, &span.last, &span.owner],
            )
            .await
            .map_err(backend)?;
        }
    }
    let records = batch.chain(&prev)?;
    for rec in &records {
        let blob = encode_event(rec.event.as_ref().expect("a chained record has its event"));
        tx.execute(
            "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&batch.child, &rec.seq, &rec.prev_hash, &rec.content_hash, &batch.fence, &blob],
        )
        .await
        .map_err(backend)?;
    }
    let state = batch.compute_state.map(to_text);
    let n = touch_row(
        &tx,
        &batch.child,
        &locked,
        default_project,
        batch.now_unix_nanos,
        &state,
    )
    .await
    .map_err(backend)?;
    assert_eq!(n, 1, "exactly one session row is touched");
    commit_pooled(tx).await?;
    Ok(records)
}

/// The last of `owner`'s seqs a fork child's span names (0: none).
async fn referenced<C: GenericClient>(c: &C, owner: &str) -> Result<i64, StoreError> {
    Ok(c.query_one(
        "SELECT COALESCE(MAX(last_seq), 0)::bigint FROM session_prefixes WHERE owner = $1",
        &[&owner],
    )
    .await
    .map_err(backend)?
    .get(0))
}

pub(crate) async fn verify<C: GenericClient>(c: &C, session: &str) -> Result<(), VerifyError> {
    let mut verifier = ChainVerifier::new();
    for rec in read(c, session, 1, 0).await? {
        verifier
            .push(&rec)
            .map_err(|cause| VerifyError::of_chain(session, cause))?;
    }
    Ok(())
}

/// The metadata upsert; never touches fence or compute_state. One
/// statement, so the tombstone check and the write see the same snapshot.
pub(crate) async fn put_session<C: GenericClient>(
    c: &C,
    meta: &SessionMeta,
    now: i64,
    default_project: &str,
) -> Result<(), StoreError> {
    required("session uid", &meta.uid)?;
    let project = meta.project_or(default_project);
    let n = c
        .execute(
            "INSERT INTO sessions(session, fence, project, name, harness, model, parent_uid, fork_seq,
                                  compute_state, created_at, updated_at, labels, annotations, origin, identity)
             SELECT $1, 0, $2, $3, $4, $5, $6, $7, 'NONE',
                    CASE WHEN $8::bigint = 0 THEN $9::bigint ELSE $8::bigint END, $9, $10, $11, $12, $13
             WHERE NOT EXISTS (SELECT 1 FROM deleted_sessions WHERE session = $1)
             ON CONFLICT (session) DO UPDATE SET
                project = excluded.project, name = excluded.name, harness = excluded.harness,
                model = excluded.model, parent_uid = excluded.parent_uid, fork_seq = excluded.fork_seq,
                created_at = CASE WHEN $8::bigint <> 0 THEN $8::bigint
                                  WHEN sessions.created_at = 0 THEN $9::bigint
                                  ELSE sessions.created_at END,
                updated_at = $9,
                labels = excluded.labels, annotations = excluded.annotations,
                origin = excluded.origin, identity = excluded.identity",
            &[
                &meta.uid,
                &project,
                &meta.name,
                &meta.harness,
                &meta.model,
                &meta.parent_uid,
                &meta.fork_seq,
                &meta.created_at,
                &now,
                &meta.labels,
                &meta.annotations,
                &meta.origin,
                &meta.identity,
            ],
        )
        .await
        .map_err(backend)?;
    if n == 0 {
        return Err(StoreError::SessionDeleted {
            uid: meta.uid.clone(),
        });
    }
    Ok(())
}

const SESSION_COLUMNS: &str = "s.session, s.project, s.name, s.harness, s.model, s.parent_uid, s.fork_seq,
    s.created_at, s.updated_at, s.labels, s.annotations, s.origin, s.identity, s.compute_state, s.fence,
    COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session = s.session), 0)::bigint";

pub(crate) async fn session_info<C: GenericClient>(
    c: &C,
    uid: &str,
) -> Result<SessionInfo, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.session = $1");
    match c.query_opt(&sql, &[&uid]).await.map_err(backend)? {
        Some(row) => session_of(&PgRow(&row)),
        None => Err(StoreError::SessionNotFound {
            uid: uid.to_owned(),
        }),
    }
}

/// Keyset paging over (created_at DESC, session ASC), as the SQLite store.
pub(crate) async fn list_sessions<C: GenericClient>(
    c: &C,
    req: &ListSessions,
    default_project: &str,
) -> Result<SessionPage, StoreError> {
    let plan = req.plan(default_project)?;
    let (project, fetch) = (plan.project, plan.fetch);
    let rows = if let Some((ts, uid)) = &plan.after {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s
             WHERE s.project = $1 AND (s.created_at < $2 OR (s.created_at = $2 AND s.session > $3))
             ORDER BY s.created_at DESC, s.session ASC LIMIT $4"
        );
        c.query(&sql, &[&project, ts, uid, &fetch]).await
    } else {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.project = $1
             ORDER BY s.created_at DESC, s.session ASC LIMIT $2"
        );
        c.query(&sql, &[&project, &fetch]).await
    }
    .map_err(backend)?;
    let sessions = rows
        .iter()
        .map(|r| session_of(&PgRow(r)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SessionPage::cut(sessions, plan.size))
}

/// Records, row and tombstone in one transaction.
pub(crate) async fn delete_session(
    c: &mut Client,
    req: &DeleteSession,
) -> Result<Tombstone, DeleteError> {
    rules::required("session uid", &req.uid)?;
    let tx = c.transaction().await.map_err(backend)?;
    let deleted = refuse_deleted(&tx, &req.uid).await.is_err();
    // The row lock orders the delete with appends of the same session.
    let has_row = tx
        .query_opt(
            "SELECT 1 FROM sessions WHERE session = $1 FOR UPDATE",
            &[&req.uid],
        )
        .await
        .map_err(backend)?
        .is_some();
    let head = head(&tx, &req.uid).await?;
    let records = rules::check_delete(req, deleted, has_row, head)?;
    // Fork children keep the rows they refer to (a fork of this session
    // holds its row share-locked until it commits, so every span naming
    // it is visible here); the rest go now.
    let keep = referenced(&tx, &req.uid).await?;
    tx.execute(
        "DELETE FROM events WHERE session = $1 AND seq > $2",
        &[&req.uid, &keep],
    )
    .await
    .map_err(backend)?;
    // Its own references go, and with them whatever only they kept of
    // sessions deleted before it. The owner's tombstone is locked first,
    // so two children deleted at once cannot each keep the rows for the
    // other.
    let mut owners: Vec<String> = tx
        .query(
            "DELETE FROM session_prefixes WHERE session = $1 RETURNING owner",
            &[&req.uid],
        )
        .await
        .map_err(backend)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    owners.sort();
    owners.dedup();
    for owner in owners {
        let deleted = tx
            .query_opt(
                "SELECT 1 FROM deleted_sessions WHERE session = $1 FOR UPDATE",
                &[&owner],
            )
            .await
            .map_err(backend)?
            .is_some();
        if deleted {
            let keep = referenced(&tx, &owner).await?;
            tx.execute(
                "DELETE FROM events WHERE session = $1 AND seq > $2",
                &[&owner, &keep],
            )
            .await
            .map_err(backend)?;
        }
    }
    tx.execute("DELETE FROM session_leases WHERE session = $1", &[&req.uid])
        .await
        .map_err(backend)?;
    tx.execute("DELETE FROM sessions WHERE session = $1", &[&req.uid])
        .await
        .map_err(backend)?;
    tx.execute(
        "INSERT INTO deleted_sessions(session, deleted_at, records, principal) VALUES ($1, $2, $3, $4)",
        &[&req.uid, &req.now_unix_nanos, &records, &req.principal],
    )
    .await
    .map_err(backend)?;
    commit(tx).await?;
    Ok(rules::tombstone(req, records))
}

pub(crate) async fn tombstone<C: GenericClient>(
    c: &C,
    uid: &str,
) -> Result<Option<Tombstone>, StoreError> {
    Ok(c.query_opt(
        "SELECT deleted_at, records, principal FROM deleted_sessions WHERE session = $1",
        &[&uid],
    )
    .await
    .map_err(backend)?
    .map(|r| Tombstone {
        uid: uid.to_owned(),
        deleted_at: r.get(0),
        records: r.get(1),
        principal: r.get(2),
    }))
}

/// One retention step: `scan.scan` rows of the primary key after
/// `scan.after`, keeping those last written before `scan.before`.
pub(crate) async fn stale_sessions<C: GenericClient>(
    c: &C,
    scan: &StaleScan,
) -> Result<StalePage, StoreError> {
    scan.check()?;
    let limit = i64::try_from(scan.scan).unwrap_or(i64::MAX);
    let rows = c
        .query(
            "SELECT session, updated_at FROM sessions WHERE session > $1 ORDER BY session LIMIT $2",
            &[&scan.after, &limit],
        )
        .await
        .map_err(backend)?;
    let mut page = StalePage::default();
    for r in &rows {
        let updated_at: i64 = r.get(1);
        if updated_at < scan.before {
            page.stale.push(r.get(0));
        }
    }
    if rows.len() == scan.scan {
        page.next = rows.last().expect("scan > 0").get(0);
    }
    Ok(page)
}

/// A PostgreSQL row read through the journal crate's column rules.
struct PgRow<'a>(&'a Row);

impl Columns for PgRow<'_> {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        self.0.try_get(i).map_err(backend)
    }

    fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.0.try_get(i).map_err(backend)
    }

    fn blob(&self, i: usize) -> Result<&[u8], StoreError> {
        self.0.try_get(i).map_err(backend)
    }
}
