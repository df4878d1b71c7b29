//! Write operations, run by the writer thread inside a batch transaction.
//!
//! Each function assumes it runs inside an open transaction (its own
//! SAVEPOINT within the group-commit batch) and leaves durability to the
//! batch's COMMIT. They read their preconditions on the same connection, so
//! an earlier job of the same batch is visible to a later one.

use crate::db;
use agentsessions_journal::rules;
use agentsessions_proto::v1::LogRecord;
use rusqlite::{Connection, ErrorCode, OptionalExtension as _, params};

use std::sync::Mutex;

use super::heads::{Head, Heads};
use super::read_ops::{harness_row, spans};
use agentsessions_journal::compute_text::to_text;
use agentsessions_journal::encode::encode_event;
use agentsessions_journal::lease::{self, LeaseClaim, StoredLease};
use agentsessions_journal::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessRow, HarnessState, RegisterOutcome, RegistryError, SessionMeta, StoreError, Tombstone,
    child_spans,
};

fn head(conn: &Connection, session: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE session = ?1")?
        .query_row([session], |r| r.get(0))
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

/// The CAS + fence checked append of one batch.
/// `blobs[i]` is the encoded `batch.events[i]`, prepared by the caller's
/// thread so the writer (the bottleneck under load) does not pay for it.
pub fn append(
    conn: &Connection,
    batch: &AppendBatch,
    blobs: &[Vec<u8>],
    default_project: &str,
    heads: &Mutex<Heads>,
) -> Result<Vec<LogRecord>, AppendError> {
    assert_eq!(blobs.len(), batch.events.len(), "one blob per event");
    if batch.session.is_empty() {
        return Err(StoreError::InvalidArgument("session is required".into()).into());
    }
    if batch.events.is_empty() {
        return Err(StoreError::InvalidArgument("append needs at least one event".into()).into());
    }
    // The head row (seq and hash, for the CAS and the prev link), then the
    // stored fence and whether the session row exists or lacks
    // project/created_at: from the writer's cached head when it has one,
    // else two point lookups (a single joined statement makes SQLite
    // materialise the subquery, which costs more than both).
    let cached = lock(heads).lookup(&batch.session);
    let (head, head_hash, current, row) = match cached {
        Some(h) => {
            debug_assert_eq!(
                (
                    head_row(conn, &batch.session).map_err(db)?,
                    fence_row(conn, &batch.session).map_err(db)?
                ),
                ((h.seq, h.hash.clone()), (h.fence, SessionRow::Complete)),
                "the cached head of {} is what the database holds",
                batch.session
            );
            (h.seq, h.hash, h.fence, SessionRow::Complete)
        }
        None => {
            let (head, head_hash) = head_row(conn, &batch.session).map_err(db)?;
            let (current, row) = fence_row(conn, &batch.session).map_err(db)?;
            (head, head_hash, current, row)
        }
    };
    debug_assert_eq!(
        head == 0,
        head_hash.is_empty(),
        "a head row always has a hash"
    );
    // Only a missing row can be a deleted session: the check costs nothing
    // on the common path.
    if row == SessionRow::Missing {
        refuse_deleted(conn, &batch.session)?;
    }
    if batch.expected_last_seq != head {
        return Err(AppendError::Conflict { head });
    }
    if batch.fence < current {
        return Err(AppendError::Fenced { current });
    }
    let records = batch.chain(head, &head_hash)?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    ).map_err(db)?;
    for (rec, blob) in records.iter().zip(blobs) {
        debug_assert_eq!(*blob, encode_event(rec.event.as_ref().expect("chained")));
        match insert.execute(params![
            batch.session,
            rec.seq,
            rec.prev_hash,
            rec.content_hash,
            batch.fence,
            blob
        ]) {
            Ok(n) => assert_eq!(n, 1, "one row per event"),
            // Defence in depth: the CAS above already excludes this inside
            // our write lock, but a clash must still read as a conflict.
            Err(e) if is_constraint(&e) => {
                return Err(AppendError::Conflict {
                    head: self::head(conn, &batch.session).map_err(db)?,
                });
            }
            Err(e) => return Err(db(e).into()),
        }
    }
    let touch = Touch {
        session: &batch.session,
        state: batch.compute_state.map(to_text),
        now: batch.now_unix_nanos,
    };
    touch_session(conn, &touch, row, default_project).map_err(db)?;
    if let Some(owner) = &batch.release_lease {
        conn.prepare_cached(RELEASE)
            .map_err(db)?
            .execute(params![batch.session, owner, batch.fence])
            .map_err(db)?;
    }
    let last = records.last().expect("at least one event");
    if row == SessionRow::Complete {
        // The fence is untouched by an append; a row this append created or
        // completed is read again next time.
        let head = Head {
            seq: last.seq,
            hash: last.content_hash.clone(),
            fence: current,
        };
        lock(heads).set(&batch.session, head);
    }
    Ok(records)
}

fn lock(heads: &Mutex<Heads>) -> std::sync::MutexGuard<'_, Heads> {
    heads.lock().unwrap_or_else(|p| p.into_inner())
}

/// The newest row of `session`: (seq, hash), or (0, "") when it has none.
fn head_row(conn: &Connection, session: &str) -> rusqlite::Result<(i64, String)> {
    Ok(conn
        .prepare_cached(
            "SELECT seq, hash FROM events WHERE session = ?1 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([session], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .optional()?
        .unwrap_or_default())
}

/// The stored fence and what the row holds.
fn fence_row(conn: &Connection, session: &str) -> rusqlite::Result<(i64, SessionRow)> {
    Ok(conn
        .prepare_cached(
            "SELECT fence, project = '' OR created_at = 0 FROM sessions WHERE session = ?1",
        )?
        .query_row([session], |r| {
            let incomplete: bool = r.get(1)?;
            Ok((
                r.get::<_, i64>(0)?,
                if incomplete {
                    SessionRow::Incomplete
                } else {
                    SessionRow::Complete
                },
            ))
        })
        .optional()?
        .unwrap_or((0, SessionRow::Missing)))
}

/// A fork child's first write: its spans (the parent's, cut at `at_seq`,
/// then the parent's own records up to it), then the batch's events
/// chained from the parent's record at `at_seq`. Nothing of the parent is
/// copied: the write is the same few rows whatever the prefix's length.
pub fn fork(
    conn: &Connection,
    batch: &ForkBatch,
    blobs: &[Vec<u8>],
    default_project: &str,
    heads: &Mutex<Heads>,
) -> Result<Vec<LogRecord>, AppendError> {
    assert_eq!(blobs.len(), batch.events.len(), "one blob per event");
    lock(heads).forget(&batch.child);
    batch.check()?;
    let (head, _) = head_row(conn, &batch.child).map_err(db)?;
    let (current, row) = fence_row(conn, &batch.child).map_err(db)?;
    if row == SessionRow::Missing {
        refuse_deleted(conn, &batch.child)?;
    }
    if head != 0 {
        return Err(AppendError::Conflict { head });
    }
    if batch.fence < current {
        return Err(AppendError::Fenced { current });
    }
    let mut prev = String::new();
    if batch.at_seq > 0 {
        refuse_deleted(conn, &batch.parent)?;
        let parent = spans(conn, &batch.parent).map_err(db)?;
        let holder = parent
            .iter()
            .find(|s| s.first <= batch.at_seq && batch.at_seq <= s.last)
            .map_or(batch.parent.as_str(), |s| s.owner.as_str());
        prev = conn
            .prepare_cached("SELECT hash FROM events WHERE session = ?1 AND seq = ?2")
            .map_err(db)?
            .query_row(params![holder, batch.at_seq], |r| r.get(0))
            .optional()
            .map_err(db)?
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!(
                    "fork parent {} has no record at seq {}",
                    batch.parent, batch.at_seq
                ))
            })?;
        let mut insert = conn.prepare_cached(
            "INSERT INTO session_prefixes(session, first_seq, last_seq, owner) VALUES (?1, ?2, ?3, ?4)",
        ).map_err(db)?;
        for span in child_spans(&batch.parent, &parent, batch.at_seq) {
            insert
                .execute(params![batch.child, span.first, span.last, span.owner])
                .map_err(db)?;
        }
    }
    let records = batch.chain(&prev)?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    ).map_err(db)?;
    for (rec, blob) in records.iter().zip(blobs) {
        insert
            .execute(params![
                batch.child,
                rec.seq,
                rec.prev_hash,
                rec.content_hash,
                batch.fence,
                blob
            ])
            .map_err(db)?;
    }
    let touch = Touch {
        session: &batch.child,
        state: batch.compute_state.map(to_text),
        now: batch.now_unix_nanos,
    };
    touch_session(conn, &touch, row, default_project).map_err(db)?;
    Ok(records)
}

/// What a write stamps on its session row.
struct Touch<'a> {
    session: &'a str,
    state: Option<&'static str>,
    now: i64,
}

/// Ends `owner`'s lease taken at `fence`; anyone else's stays.
const RELEASE: &str = "DELETE FROM session_leases WHERE session = ?1 AND owner = ?2 AND fence = ?3";

/// What the append's precondition read found in `sessions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionRow {
    Missing,
    /// Written by an older build: project or created_at still unset.
    Incomplete,
    Complete,
}

/// Ensures the session row exists and applies the compute_state projection.
///
/// The precondition read already told us whether the row exists, so the
/// common path is a plain UPDATE of updated_at (and compute_state when the
/// batch moves it). It leaves project and created_at out of the SET list:
/// assigning them, even to the same value, would make SQLite rewrite the
/// `sessions_project_created` entry on every append.
fn touch_session(
    conn: &Connection,
    touch: &Touch<'_>,
    row: SessionRow,
    default_project: &str,
) -> rusqlite::Result<()> {
    let (session, now, state) = (touch.session, touch.now, touch.state);
    let n = match row {
        SessionRow::Missing => conn
            .prepare_cached(
                "INSERT INTO sessions(session, project, created_at, updated_at, compute_state)
                 VALUES (?1, ?2, ?3, ?3, COALESCE(?4, ''))",
            )?
            .execute(params![session, default_project, now, state])?,
        SessionRow::Incomplete => conn
            .prepare_cached(
                "UPDATE sessions SET
                    project = CASE WHEN project = '' THEN ?2 ELSE project END,
                    created_at = CASE WHEN created_at = 0 THEN ?3 ELSE created_at END,
                    updated_at = ?3, compute_state = COALESCE(?4, compute_state)
                 WHERE session = ?1",
            )?
            .execute(params![session, default_project, now, state])?,
        SessionRow::Complete => conn
            .prepare_cached(
                "UPDATE sessions SET updated_at = ?2, compute_state = COALESCE(?3, compute_state)
                 WHERE session = ?1",
            )?
            .execute(params![session, now, state])?,
    };
    assert_eq!(n, 1, "exactly one session row is touched");
    Ok(())
}

/// fence = fence + 1 (1 on first mint); creates the row if missing. With
/// a claim, takes the lease too, or refuses before writing anything (the
/// caller's transaction holds the write lock, so the check and the write
/// see the same row).
pub fn mint_fence(
    conn: &Connection,
    session: &str,
    now: i64,
    default_project: &str,
    lease: Option<&LeaseClaim>,
    heads: &Mutex<Heads>,
) -> Result<i64, StoreError> {
    if session.is_empty() {
        return Err(StoreError::InvalidArgument("session is required".into()));
    }
    refuse_deleted(conn, session)?;
    if let Some(claim) = lease {
        let held = conn
            .prepare_cached(
                "SELECT owner, fence, expires_at FROM session_leases WHERE session = ?1",
            )
            .map_err(db)?
            .query_row([session], |r| {
                Ok(StoredLease {
                    owner: r.get(0)?,
                    fence: r.get(1)?,
                    expires_at: r.get(2)?,
                })
            })
            .optional()
            .map_err(db)?;
        lease::check_claim(session, held.as_ref(), claim, now)?;
    }
    let fence: i64 = conn
        .prepare_cached(
            "INSERT INTO sessions(session, fence, project, created_at, updated_at)
             VALUES (?1, 1, ?2, ?3, ?3)
             ON CONFLICT(session) DO UPDATE SET
                fence = fence + 1,
                project = CASE WHEN project = '' THEN excluded.project ELSE project END,
                created_at = CASE WHEN created_at = 0 THEN excluded.created_at ELSE created_at END,
                updated_at = excluded.updated_at
             RETURNING fence",
        )
        .map_err(db)?
        .query_row(params![session, default_project, now], |r| r.get(0))
        .map_err(db)?;
    assert!(fence >= 1, "a minted fence is positive");
    lock(heads).fenced(session, fence);
    if let Some(claim) = lease {
        let taken = lease::taken(claim, fence, now);
        conn.prepare_cached(
            "INSERT INTO session_leases(session, owner, fence, expires_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(session) DO UPDATE SET
                owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at",
        )
        .map_err(db)?
        .execute(params![session, taken.owner, taken.fence, taken.expires_at])
        .map_err(db)?;
    }
    Ok(fence)
}

/// Renews (ttl > 0) or releases (0) `owner`'s lease taken under `fence`;
/// whether `owner` held it.
pub fn hold_lease(
    conn: &Connection,
    session: &str,
    owner: &str,
    fence: i64,
    ttl: i64,
    now: i64,
) -> Result<bool, StoreError> {
    if session.is_empty() || owner.is_empty() {
        return Err(StoreError::InvalidArgument(
            "session and lease owner are required".into(),
        ));
    }
    let n = if ttl == 0 {
        conn.prepare_cached(RELEASE)
            .map_err(db)?
            .execute(params![session, owner, fence])
            .map_err(db)?
    } else {
        conn.prepare_cached(
            "UPDATE session_leases SET expires_at = ?4
             WHERE session = ?1 AND owner = ?2 AND fence = ?3",
        )
        .map_err(db)?
        .execute(params![session, owner, fence, now.saturating_add(ttl)])
        .map_err(db)?
    };
    assert!(n <= 1, "a session has one lease row");
    Ok(n == 1)
}

/// The metadata upsert; never touches fence or compute_state.
pub fn put_session(
    conn: &Connection,
    meta: &SessionMeta,
    now: i64,
    default_project: &str,
    heads: &Mutex<Heads>,
) -> Result<(), StoreError> {
    // The upsert may leave the row incomplete (no project): read it again.
    lock(heads).forget(&meta.uid);
    if meta.uid.is_empty() {
        return Err(StoreError::InvalidArgument(
            "session uid is required".into(),
        ));
    }
    refuse_deleted(conn, &meta.uid)?;
    let project = meta.project_or(default_project);
    // An explicit created_at wins; 0 means "now on insert, keep on update"
    // (or fill it if the row was created by an append and still has none).
    conn.prepare_cached(
        "INSERT INTO sessions(session, fence, project, name, harness, model, parent_uid, fork_seq,
                              compute_state, created_at, updated_at, labels, annotations, origin, identity)
         VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6, ?7, 'NONE', CASE WHEN ?8 = 0 THEN ?9 ELSE ?8 END, ?9,
                 ?10, ?11, ?12, ?13)
         ON CONFLICT(session) DO UPDATE SET
            project = excluded.project, name = excluded.name, harness = excluded.harness,
            model = excluded.model, parent_uid = excluded.parent_uid, fork_seq = excluded.fork_seq,
            created_at = CASE WHEN ?8 <> 0 THEN ?8 WHEN created_at = 0 THEN ?9 ELSE created_at END,
            updated_at = ?9,
            labels = excluded.labels, annotations = excluded.annotations,
            origin = excluded.origin, identity = excluded.identity",
    ).map_err(db)?
    .execute(params![
        meta.uid,
        project,
        meta.name,
        meta.harness,
        meta.model,
        meta.parent_uid,
        meta.fork_seq,
        meta.created_at,
        now,
        meta.labels,
        meta.annotations,
        meta.origin,
        meta.identity,
    ]).map_err(db)?;
    Ok(())
}

/// A deleted uid takes no write of any kind, so a zombie writer cannot
/// bring its session back (and no generator can reuse the uid).
fn refuse_deleted(conn: &Connection, uid: &str) -> Result<(), StoreError> {
    if is_deleted(conn, uid).map_err(db)? {
        return Err(StoreError::SessionDeleted {
            uid: uid.to_owned(),
        });
    }
    Ok(())
}

fn is_deleted(conn: &Connection, uid: &str) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM deleted_sessions WHERE session = ?1")?
        .query_row([uid], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Records, row and tombstone in the one transaction the job runs in: a
/// crash leaves either the whole session or only its tombstone.
pub fn delete_session(
    conn: &Connection,
    req: &DeleteSession,
    heads: &Mutex<Heads>,
) -> Result<Tombstone, DeleteError> {
    lock(heads).forget(&req.uid);
    rules::required("session uid", &req.uid)?;
    let deleted = is_deleted(conn, &req.uid).map_err(db)?;
    let head = head(conn, &req.uid).map_err(db)?;
    let has_row = conn
        .prepare_cached("SELECT 1 FROM sessions WHERE session = ?1")
        .map_err(db)?
        .query_row([&req.uid], |_| Ok(()))
        .optional()
        .map_err(db)?
        .is_some();
    let records = rules::check_delete(req, deleted, has_row, head)?;
    // Fork children keep the rows they refer to; the rest go now.
    conn.prepare_cached("DELETE FROM events WHERE session = ?1 AND seq > ?2")
        .map_err(db)?
        .execute(params![req.uid, referenced(conn, &req.uid).map_err(db)?])
        .map_err(db)?;
    // Its own references go, and with them whatever only they kept of
    // sessions deleted before it.
    let owners: Vec<String> = conn
        .prepare_cached("SELECT DISTINCT owner FROM session_prefixes WHERE session = ?1")
        .map_err(db)?
        .query_map([&req.uid], |r| r.get(0))
        .map_err(db)?
        .collect::<Result<_, _>>()
        .map_err(db)?;
    conn.prepare_cached("DELETE FROM session_prefixes WHERE session = ?1")
        .map_err(db)?
        .execute([&req.uid])
        .map_err(db)?;
    for owner in owners {
        if is_deleted(conn, &owner).map_err(db)? {
            conn.prepare_cached("DELETE FROM events WHERE session = ?1 AND seq > ?2")
                .map_err(db)?
                .execute(params![owner, referenced(conn, &owner).map_err(db)?])
                .map_err(db)?;
        }
    }
    conn.prepare_cached("DELETE FROM sessions WHERE session = ?1")
        .map_err(db)?
        .execute([&req.uid])
        .map_err(db)?;
    conn.prepare_cached("DELETE FROM session_leases WHERE session = ?1")
        .map_err(db)?
        .execute([&req.uid])
        .map_err(db)?;
    conn.prepare_cached(
        "INSERT INTO deleted_sessions(session, deleted_at, records, principal)
         VALUES (?1, ?2, ?3, ?4)",
    )
    .map_err(db)?
    .execute(params![req.uid, req.now_unix_nanos, records, req.principal])
    .map_err(db)?;
    Ok(rules::tombstone(req, records))
}

/// The last of `owner`'s seqs a fork child's span names (0: none).
fn referenced(conn: &Connection, owner: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(last_seq), 0) FROM session_prefixes WHERE owner = ?1")?
        .query_row([owner], |r| r.get(0))
}

fn is_reserved(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM reserved_harness_names WHERE name = ?1")?
        .query_row([name], |_| Ok(()))
        .optional()?
        .is_some())
}

pub fn register_harness(
    conn: &Connection,
    reg: &HarnessRegistration,
    now: i64,
) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
    let reserved = is_reserved(conn, &reg.name).map_err(db)?;
    let outcome = rules::register(reg, reserved, harness_row(conn, &reg.name)?.as_ref())?;
    match outcome {
        RegisterOutcome::Created => {
            conn.prepare_cached(
                "INSERT INTO harnesses(name, uid, spec, spec_digest, state, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, 'active', ?5, ?5)",
            )
            .map_err(db)?
            .execute(params![reg.name, reg.uid, reg.spec, reg.spec_digest, now])
            .map_err(db)?;
        }
        RegisterOutcome::Unchanged => {}
        RegisterOutcome::Reactivated => {
            conn.prepare_cached(
                "UPDATE harnesses SET state = 'active', retire_reason = '', retired_at = 0, updated_at = ?2
                 WHERE name = ?1",
            ).map_err(db)?
            .execute(params![reg.name, now]).map_err(db)?;
        }
    }
    let row = harness_row(conn, &reg.name)?
        .ok_or_else(|| StoreError::Corrupt("registered row vanished".into()))?;
    debug_assert_eq!(row.state, HarnessState::Active);
    Ok((row, outcome))
}

pub fn retire_harness(
    conn: &Connection,
    name: &str,
    reason: &str,
    now: i64,
) -> Result<HarnessRow, RegistryError> {
    rules::check_retire(name)?;
    // Only an active row changes, so a repeat keeps the first time and
    // reason (`rules::retire`).
    conn.prepare_cached(
        "UPDATE harnesses SET state = 'retired', retire_reason = ?2, retired_at = ?3, updated_at = ?3
         WHERE name = ?1 AND state = 'active'",
    ).map_err(db)?
    .execute(params![name, reason, now]).map_err(db)?;
    harness_row(conn, name)?.ok_or_else(|| RegistryError::NotFound {
        name: name.to_owned(),
    })
}

pub fn reserve_harness_names(
    conn: &Connection,
    names: &[String],
    now: i64,
) -> Result<(), RegistryError> {
    for name in names {
        rules::check_reservation(name, harness_row(conn, name)?.is_some())?;
    }
    let mut stmt = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO reserved_harness_names(name, reserved_at) VALUES (?1, ?2)",
        )
        .map_err(db)?;
    for name in names {
        stmt.execute(params![name, now]).map_err(db)?;
    }
    Ok(())
}

pub fn put_session_on_active_harness(
    conn: &Connection,
    meta: &SessionMeta,
    registered: bool,
    now: i64,
    default_project: &str,
    heads: &Mutex<Heads>,
) -> Result<(), RegistryError> {
    let row = harness_row(conn, &meta.harness)?;
    rules::session_harness(&meta.harness, registered, row.as_ref())?;
    put_session(conn, meta, now, default_project, heads)?;
    Ok(())
}
