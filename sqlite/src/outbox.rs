//! The notification outbox on SQLite (`agentsessions_journal::outbox`, the
//! `notify_outbox` table of `schema::NOTIFY_OUTBOX`).
//!
//! Invariant: notice rows are inserted only by [`announce`], inside the
//! append job's own transaction (or savepoint), so they commit and roll
//! back with the records they announce. Claims and settles are write jobs
//! like any other: each runs inside a writer transaction, which serialises
//! them, so two claimers never take the same row while a claim is live.

use agentsessions_journal::StoreError;
use agentsessions_journal::outbox::{
    self, Notice, NoticeClaim, NoticeKind, Outbox, OutboxStats, Settle,
};
use agentsessions_proto::v1::LogRecord;
use rusqlite::{Connection, params};

use crate::{SqliteJournal, db};

const INSERT: &str = "INSERT INTO notify_outbox(event_id, session, seq, kind, created_at, due_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT (event_id) DO NOTHING";

/// The claim rule (`outbox::claimable`) as one statement; RETURNING gives
/// no order, so the rows are sorted after.
const CLAIM: &str = "UPDATE notify_outbox SET claimed_by = ?1, claimed_until = ?2 \
     WHERE event_id IN (SELECT event_id FROM notify_outbox \
         WHERE due_at <= ?3 AND claimed_until <= ?3 ORDER BY due_at, event_id LIMIT ?4) \
     RETURNING due_at, event_id, session, seq, kind, created_at, attempts";

const DELIVERED: &str = "DELETE FROM notify_outbox WHERE event_id = ?1";

/// `outbox::settle`'s Retry: only while `owner` (never "") holds the claim.
const RETRY: &str = "UPDATE notify_outbox SET attempts = attempts + 1, due_at = ?3, \
     claimed_by = '', claimed_until = 0, last_error = ?4 \
     WHERE event_id = ?1 AND claimed_by = ?2 AND claimed_by <> ''";

const STATS: &str = "SELECT COUNT(*), MIN(created_at) FROM notify_outbox";
/// Every claim of one owner, let go.
const RELEASE: &str =
    "UPDATE notify_outbox SET claimed_by = '', claimed_until = 0 WHERE claimed_by = ?1";

/// Inserts the notice rows of `records`, just appended to `session` at
/// `now`, on the append's connection inside its transaction. Most appends
/// announce nothing and run no statement here.
pub(crate) fn announce(
    conn: &Connection,
    session: &str,
    records: &[LogRecord],
    now: i64,
) -> Result<(), StoreError> {
    let rows = outbox::rows_for(session, records, now);
    if rows.is_empty() {
        return Ok(());
    }
    debug_assert!(!conn.is_autocommit(), "inside the append's transaction");
    let mut insert = conn.prepare_cached(INSERT).map_err(db)?;
    for row in &rows {
        let n = insert
            .execute(params![
                row.event_id,
                row.session,
                row.seq,
                row.kind.as_str(),
                row.created_at
            ])
            .map_err(db)?;
        assert!(n <= 1, "one row per event id");
    }
    Ok(())
}

/// A stored kind this build does not write.
fn unknown_kind(event_id: &str, kind: &str) -> StoreError {
    StoreError::Corrupt(format!("notice {event_id}: unknown kind {kind:?}"))
}

fn claim(conn: &Connection, claim: &NoticeClaim) -> Result<Vec<Notice>, StoreError> {
    claim.check()?;
    let limit = i64::try_from(claim.limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(CLAIM).map_err(db)?;
    let rows = stmt
        .query_map(params![claim.owner, claim.until(), claim.now, limit], |r| {
            let fields: (i64, String, String, i64, String, i64, i64) = (
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            );
            Ok(fields)
        })
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)?;
    let mut claimed = Vec::with_capacity(rows.len());
    for (due_at, event_id, session, seq, kind, created_at, attempts) in rows {
        let kind = NoticeKind::parse(&kind).ok_or_else(|| unknown_kind(&event_id, &kind))?;
        let attempts = u32::try_from(attempts)
            .map_err(|_| StoreError::Corrupt(format!("notice {event_id}: attempts {attempts}")))?;
        let notice = Notice {
            event_id,
            session,
            seq,
            kind,
            created_at,
            attempts,
        };
        claimed.push((due_at, notice));
    }
    claimed.sort_by(|a, b| (a.0, &a.1.event_id).cmp(&(b.0, &b.1.event_id)));
    assert!(claimed.len() <= claim.limit, "a claim honours its limit");
    Ok(claimed.into_iter().map(|(_, n)| n).collect())
}

fn settle(
    conn: &Connection,
    owner: &str,
    event_id: &str,
    settle: &Settle,
) -> Result<bool, StoreError> {
    let n = match settle {
        Settle::Delivered => conn
            .prepare_cached(DELIVERED)
            .and_then(|mut s| s.execute([event_id])),
        Settle::Retry { due_at, error } => {
            let error = outbox::clip_error(error);
            conn.prepare_cached(RETRY)
                .and_then(|mut s| s.execute(params![event_id, owner, due_at, error]))
        }
    }
    .map_err(db)?;
    assert!(n <= 1, "event ids are unique");
    Ok(n == 1)
}

fn stats(conn: &Connection) -> Result<OutboxStats, StoreError> {
    let (queued, oldest): (i64, Option<i64>) = conn
        .prepare_cached(STATS)
        .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(db)?;
    debug_assert_eq!(queued == 0, oldest.is_none(), "an oldest row iff any");
    Ok(OutboxStats {
        queued: u64::try_from(queued).unwrap_or(0),
        oldest_created: oldest,
    })
}

/// Claims and settles go through the writer (they write), stats through a
/// reader thread.
impl Outbox for SqliteJournal {
    fn claim_notices(
        &self,
        claim: NoticeClaim,
    ) -> impl Future<Output = Result<Vec<Notice>, StoreError>> + Send {
        self.submit_write(move |conn| self::claim(conn, &claim))
    }

    fn settle_notice(
        &self,
        owner: &str,
        event_id: &str,
        settle: Settle,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let (owner, event_id) = (owner.to_owned(), event_id.to_owned());
        self.submit_write(move |conn| self::settle(conn, &owner, &event_id, &settle))
    }

    fn outbox_stats(&self) -> impl Future<Output = Result<OutboxStats, StoreError>> + Send {
        self.submit_read(stats)
    }

    fn release_claims(&self, owner: &str) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let owner = owner.to_owned();
        self.submit_write(move |conn| {
            agentsessions_journal::rules::required("notice claim owner", &owner)?;
            let n = conn
                .prepare_cached(RELEASE)
                .and_then(|mut s| s.execute([&owner]))
                .map_err(db)?;
            Ok(n as u64)
        })
    }
}
