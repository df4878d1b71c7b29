//! Read operations, run on reader connections (WAL readers see the last
//! committed state and never block the writer).

use crate::db;
use agentsessions_journal::columns::{Columns, harness_of, record_of, session_of};
use agentsessions_machine::chain::ChainVerifier;
use agentsessions_machine::vocab::PageFill;
use agentsessions_proto::v1::LogRecord;
use rusqlite::{Connection, OptionalExtension as _, Row, params};

use agentsessions_journal::{
    HarnessRow, ListHarnesses, ListSessions, PrefixSpan, SessionInfo, SessionPage, StalePage,
    StaleScan, StoreError, Tombstone, VerifyError,
};

/// A deleted session reads as nothing, even while rows of it are kept for
/// its fork children (they are read through the children's spans).
/// Parameter-only, so SQLite evaluates it once per statement run.
const NOT_DELETED: &str = "NOT EXISTS (SELECT 1 FROM deleted_sessions d WHERE d.session = ?1)";

pub fn head(conn: &Connection, session: &str) -> Result<i64, StoreError> {
    let sql =
        format!("SELECT COALESCE(MAX(seq), 0) FROM events WHERE session = ?1 AND {NOT_DELETED}");
    conn.prepare_cached(&sql)
        .map_err(db)?
        .query_row([session], |r| r.get(0))
        .map_err(db)
}

/// The spans of other sessions' records `session`'s journal begins with
/// (a fork child's prefix), in seq order; empty for any other session.
pub fn spans(conn: &Connection, session: &str) -> rusqlite::Result<Vec<PrefixSpan>> {
    let mut stmt = conn.prepare_cached(
        "SELECT first_seq, last_seq, owner FROM session_prefixes WHERE session = ?1 ORDER BY first_seq",
    )?;
    let rows = stmt.query_map([session], |r| {
        Ok(PrefixSpan {
            first: r.get(0)?,
            last: r.get(1)?,
            owner: r.get(2)?,
        })
    })?;
    rows.collect()
}

/// One stretch of a journal read: seqs `lo..=hi` of `holder`'s rows, the
/// session's own (`own`) or those a fork span refers to.
struct Segment {
    holder: String,
    lo: i64,
    hi: i64,
    own: bool,
}

/// Where `session`'s records `from..=to` are stored, in seq order: the
/// spans of its prefix that overlap the range, then its own rows (which
/// all follow the prefix).
fn segments(
    conn: &Connection,
    session: &str,
    from: i64,
    to: i64,
) -> rusqlite::Result<Vec<Segment>> {
    let mut out: Vec<Segment> = spans(conn, session)?
        .into_iter()
        .filter(|s| s.first <= to && s.last >= from)
        .map(|s| Segment {
            lo: s.first.max(from),
            hi: s.last.min(to),
            holder: s.owner,
            own: false,
        })
        .collect();
    out.push(Segment {
        holder: session.to_owned(),
        lo: from,
        hi: to,
        own: true,
    });
    Ok(out)
}

const READ_OWN: &str = "SELECT seq, prev_hash, hash, fence, event FROM events
     WHERE session = ?1 AND seq >= ?2 AND seq <= ?3
       AND NOT EXISTS (SELECT 1 FROM deleted_sessions d WHERE d.session = ?1)
     ORDER BY seq";
/// A span's rows: held for a fork child, so read whether or not their
/// writer was deleted since.
const READ_HELD: &str = "SELECT seq, prev_hash, hash, fence, event FROM events
     WHERE session = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq";

/// Streams records `from..=to` (`to == 0`: through the head) into `sink`,
/// so verification never holds a whole chain in memory.
fn for_each_record<E: From<StoreError>>(
    conn: &Connection,
    session: &str,
    from_seq: i64,
    to_seq: i64,
    mut sink: impl FnMut(LogRecord) -> Result<(), E>,
) -> Result<(), E> {
    let to = if to_seq <= 0 { i64::MAX } else { to_seq };
    for seg in segments(conn, session, from_seq, to).map_err(db)? {
        let mut stmt = conn
            .prepare_cached(if seg.own { READ_OWN } else { READ_HELD })
            .map_err(db)?;
        let mut rows = stmt
            .query(params![seg.holder, seg.lo, seg.hi])
            .map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            sink(record_of(&seg.holder, &SqlRow(row))?)?;
        }
    }
    Ok(())
}

const READ_AT_MOST: &str = "SELECT seq, prev_hash, hash, fence, event FROM events
     WHERE session = ?1 AND seq >= ?2 AND seq <= ?3
       AND NOT EXISTS (SELECT 1 FROM deleted_sessions d WHERE d.session = ?1)
     ORDER BY seq LIMIT ?4";
const READ_HELD_AT_MOST: &str = "SELECT seq, prev_hash, hash, fence, event FROM events
     WHERE session = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4";

/// Like [`read`], but gives up (None) once the range holds more than
/// `limit` records, so a caller can bound the work it does in place.
pub fn read_at_most(
    conn: &Connection,
    session: &str,
    from_seq: i64,
    to_seq: i64,
    limit: usize,
) -> Result<Option<Vec<LogRecord>>, StoreError> {
    let to = if to_seq <= 0 { i64::MAX } else { to_seq };
    let mut out = Vec::new();
    for seg in segments(conn, session, from_seq, to).map_err(db)? {
        let sql = if seg.own {
            READ_AT_MOST
        } else {
            READ_HELD_AT_MOST
        };
        let mut stmt = conn.prepare_cached(sql).map_err(db)?;
        let left = limit - out.len();
        let cap = i64::try_from(left).unwrap_or(i64::MAX).saturating_add(1);
        let mut rows = stmt
            .query(params![seg.holder, seg.lo, seg.hi, cap])
            .map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            if out.len() == limit {
                return Ok(None);
            }
            out.push(record_of(&seg.holder, &SqlRow(row))?);
        }
    }
    Ok(Some(out))
}

pub fn read(
    conn: &Connection,
    session: &str,
    from_seq: i64,
    to_seq: i64,
) -> Result<Vec<LogRecord>, StoreError> {
    let mut out = Vec::new();
    for_each_record::<StoreError>(conn, session, from_seq, to_seq, |rec| {
        debug_assert!(out.last().is_none_or(|p: &LogRecord| p.seq < rec.seq));
        out.push(rec);
        Ok(())
    })?;
    Ok(out)
}

/// [`read`], stopping after the record that brings the encoded total to
/// `max_bytes` or more: rows past it are never decoded.
pub fn read_bounded(
    conn: &Connection,
    session: &str,
    from_seq: i64,
    to_seq: i64,
    max_bytes: usize,
) -> Result<Vec<LogRecord>, StoreError> {
    /// Ends the scan early; never leaves this function.
    enum Scan {
        Full,
        Failed(StoreError),
    }
    impl From<StoreError> for Scan {
        fn from(e: StoreError) -> Self {
            Self::Failed(e)
        }
    }
    let mut out = Vec::new();
    let mut fill = PageFill::new(max_bytes);
    let scan = for_each_record::<Scan>(conn, session, from_seq, to_seq, |rec| {
        let full = fill.add(&rec);
        out.push(rec);
        if full { Err(Scan::Full) } else { Ok(()) }
    });
    match scan {
        Ok(()) | Err(Scan::Full) => Ok(out),
        Err(Scan::Failed(e)) => Err(e),
    }
}

/// Verifies one session's chain from genesis, streaming (constant memory).
/// Undecodable blobs and events without a canonical form are reported as
/// `Failed(Decode)`, never as tampering.
pub fn verify(conn: &Connection, session: &str) -> Result<(), VerifyError> {
    let mut verifier = ChainVerifier::new();
    for_each_record(conn, session, 1, 0, |rec| {
        verifier
            .push(&rec)
            .map_err(|cause| VerifyError::of_chain(session, cause))
    })
}

const SESSION_COLUMNS: &str = "s.session, s.project, s.name, s.harness, s.model, s.parent_uid, s.fork_seq,
    s.created_at, s.updated_at, s.labels, s.annotations, s.origin, s.identity, s.compute_state, s.fence,
    COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session = s.session), 0)";

pub fn session_info(conn: &Connection, uid: &str) -> Result<SessionInfo, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.session = ?1");
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let mut rows = stmt.query([uid]).map_err(db)?;
    match rows.next().map_err(db)? {
        Some(row) => session_of(&SqlRow(row)),
        None => Err(StoreError::SessionNotFound {
            uid: uid.to_owned(),
        }),
    }
}

/// Keyset paging over (created_at DESC, session ASC). The continuation is a
/// UNION ALL of "same created_at, later uid" and "older created_at", so each
/// half is a range scan of `sessions_project_created` and a deep page costs
/// the same as the first one.
pub fn list_sessions(
    conn: &Connection,
    req: &ListSessions,
    default_project: &str,
) -> Result<SessionPage, StoreError> {
    let plan = req.plan(default_project)?;
    let (project, fetch) = (plan.project, plan.fetch);
    let mut sessions = Vec::with_capacity(plan.size + 1);
    if let Some((ts, uid)) = plan.after {
        let sql = format!(
            "SELECT * FROM (SELECT {SESSION_COLUMNS} FROM sessions s
                 WHERE s.project = ?1 AND s.created_at = ?2 AND s.session > ?3
                 ORDER BY s.session ASC LIMIT ?4)
             UNION ALL
             SELECT * FROM (SELECT {SESSION_COLUMNS} FROM sessions s
                 WHERE s.project = ?1 AND s.created_at < ?2
                 ORDER BY s.created_at DESC, s.session ASC LIMIT ?4)
             LIMIT ?4"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
        let mut rows = stmt.query(params![project, ts, uid, fetch]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            sessions.push(session_of(&SqlRow(row))?);
        }
    } else {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.project = ?1
             ORDER BY s.created_at DESC, s.session ASC LIMIT ?2"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
        let mut rows = stmt.query(params![project, fetch]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            sessions.push(session_of(&SqlRow(row))?);
        }
    }
    Ok(SessionPage::cut(sessions, plan.size))
}

const HARNESS_COLUMNS: &str =
    "name, uid, spec, spec_digest, state, retire_reason, retired_at, created_at, updated_at";

pub fn harness_row(conn: &Connection, name: &str) -> Result<Option<HarnessRow>, StoreError> {
    let sql = format!("SELECT {HARNESS_COLUMNS} FROM harnesses WHERE name = ?1");
    conn.prepare_cached(&sql)
        .map_err(db)?
        .query_row([name], |r| Ok(harness_of(&SqlRow(r))))
        .optional()
        .map_err(db)?
        .transpose()
}

pub fn list_harnesses(
    conn: &Connection,
    req: &ListHarnesses,
) -> Result<Vec<HarnessRow>, StoreError> {
    req.check()?;
    let sql = format!(
        "SELECT {HARNESS_COLUMNS} FROM harnesses
         WHERE name > ?1 AND (?2 OR state = 'active') ORDER BY name LIMIT ?3"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let rows = stmt
        .query_map(
            params![req.after, req.include_retired, req.limit as i64],
            |r| Ok(harness_of(&SqlRow(r))),
        )
        .map_err(db)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r.map_err(db)??);
    }
    Ok(out)
}

/// The tombstone of `uid`, if it was deleted.
pub fn tombstone(conn: &Connection, uid: &str) -> Result<Option<Tombstone>, StoreError> {
    conn.prepare_cached(
        "SELECT deleted_at, records, principal FROM deleted_sessions WHERE session = ?1",
    )
    .map_err(db)?
    .query_row([uid], |r| {
        Ok(Tombstone {
            uid: uid.to_owned(),
            deleted_at: r.get(0)?,
            records: r.get(1)?,
            principal: r.get(2)?,
        })
    })
    .optional()
    .map_err(db)
}

/// One retention step: walks `scan.scan` rows of the primary key after
/// `scan.after`, so its cost is bounded whatever the table holds, and
/// keeps the ones last written before `scan.before`. `updated_at` has no
/// index on purpose: every append rewrites it, and an index would make
/// every append pay for the background scan.
pub fn stale_sessions(conn: &Connection, scan: &StaleScan) -> Result<StalePage, StoreError> {
    scan.check()?;
    let limit = i64::try_from(scan.scan).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(
            "SELECT session, updated_at FROM sessions WHERE session > ?1 ORDER BY session LIMIT ?2",
        )
        .map_err(db)?;
    let mut rows = stmt.query(params![scan.after, limit]).map_err(db)?;
    let mut page = StalePage::default();
    let mut seen = 0usize;
    let mut last = String::new();
    while let Some(row) = rows.next().map_err(db)? {
        let uid: String = row.get(0).map_err(db)?;
        let updated_at: i64 = row.get(1).map_err(db)?;
        if updated_at < scan.before {
            page.stale.push(uid.clone());
        }
        last = uid;
        seen += 1;
    }
    debug_assert!(seen <= scan.scan, "a step looks at no more than it may");
    if seen == scan.scan {
        page.next = last;
    }
    Ok(page)
}

/// A SQLite row read through the journal crate's column rules.
pub(crate) struct SqlRow<'a, 'r>(pub(crate) &'a Row<'r>);

impl Columns for SqlRow<'_, '_> {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        self.0.get(i).map_err(db)
    }

    fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.0.get(i).map_err(db)
    }

    fn blob(&self, i: usize) -> Result<&[u8], StoreError> {
        let value = self.0.get_ref(i).map_err(db)?;
        value
            .as_blob()
            .map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    #[test]
    fn a_tail_read_reuses_its_prepared_plan_whatever_the_bounds() {
        let conn = Connection::open_in_memory().unwrap();
        crate::schema::configure(&conn).unwrap();
        crate::schema::migrate(&conn, 1).unwrap();
        conn.execute_batch(crate::schema::DELETED_SESSIONS).unwrap();
        conn.execute_batch(crate::schema::SESSION_PREFIXES).unwrap();
        for (from, limit) in [(1, 64), (2, 64), (5, 8), (9, 64)] {
            assert_eq!(
                read_at_most(&conn, "s", from, 0, limit).unwrap(),
                Some(vec![])
            );
        }
        let stmt = conn.prepare_cached(READ_AT_MOST).unwrap();
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0);
    }
}
