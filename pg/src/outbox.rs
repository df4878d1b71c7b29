//! The notification outbox on PostgreSQL (`agentsessions_journal::outbox`,
//! the `notify_outbox` table of `schema::NOTIFY_OUTBOX`).
//!
//! Invariant: notice rows are inserted only inside the transaction of the
//! append (single or group) whose records they announce, and a claim takes
//! only rows no other live claim holds: the claiming statement locks the
//! rows it picks and skips those another claimer has locked (`FOR UPDATE
//! SKIP LOCKED`), and a committed claim keeps them off until its lease
//! passes. So several daemons on one database never claim the same notice
//! while a claim is live. No advisory locks, no LISTEN/NOTIFY.

use agentsessions_journal::StoreError;
use agentsessions_journal::outbox::{
    self, Notice, NoticeClaim, NoticeKind, NoticeRow, Outbox, OutboxStats, Settle,
};
use agentsessions_proto::v1::LogRecord;
use tokio_postgres::Row;

use crate::{PgJournal, backend, client};

/// Many rows in one statement; a row already there stays.
pub(crate) const INSERT: &str = "INSERT INTO notify_outbox(event_id, session, seq, kind, created_at, due_at) \
     SELECT r.event_id, r.session, r.seq, r.kind, r.created_at, r.created_at \
     FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[]) \
         AS r(event_id, session, seq, kind, created_at) \
     ON CONFLICT (event_id) DO NOTHING";

/// The claim rule (`outbox::claimable`): the picked rows are locked, rows
/// another claimer locked are skipped, so concurrent claims are disjoint.
const CLAIM: &str = "UPDATE notify_outbox SET claimed_by = $1, claimed_until = $2 \
     WHERE event_id IN (SELECT event_id FROM notify_outbox \
         WHERE due_at <= $3 AND claimed_until <= $3 ORDER BY due_at, event_id LIMIT $4 \
         FOR UPDATE SKIP LOCKED) \
     RETURNING due_at, event_id, session, seq, kind, created_at, attempts";

const DELIVERED: &str = "DELETE FROM notify_outbox WHERE event_id = $1";

/// `outbox::settle`'s Retry: only while `owner` (never "") holds the claim.
const RETRY: &str = "UPDATE notify_outbox SET attempts = attempts + 1, due_at = $3, \
     claimed_by = '', claimed_until = 0, last_error = $4 \
     WHERE event_id = $1 AND claimed_by = $2 AND claimed_by <> ''";

const STATS: &str = "SELECT COUNT(*)::bigint, MIN(created_at) FROM notify_outbox";
/// Every claim of one owner, let go.
const RELEASE: &str =
    "UPDATE notify_outbox SET claimed_by = '', claimed_until = 0 WHERE claimed_by = $1";

/// The columns of one [`INSERT`].
#[derive(Debug, Default)]
pub(crate) struct NoticeColumns {
    ids: Vec<String>,
    sessions: Vec<String>,
    seqs: Vec<i64>,
    kinds: Vec<&'static str>,
    created: Vec<i64>,
}

impl NoticeColumns {
    pub(crate) fn add(&mut self, rows: Vec<NoticeRow>) {
        for row in rows {
            self.ids.push(row.event_id);
            self.sessions.push(row.session);
            self.seqs.push(row.seq);
            self.kinds.push(row.kind.as_str());
            self.created.push(row.created_at);
        }
        debug_assert_eq!(self.ids.len(), self.created.len(), "columns of one length");
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// [`INSERT`]'s parameters.
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 5] {
        [
            &self.ids,
            &self.sessions,
            &self.seqs,
            &self.kinds,
            &self.created,
        ]
    }
}

/// Inserts the notice rows of `records`, just appended to `session` at
/// `now`, inside the append's transaction `tx`. Most appends announce
/// nothing and send no statement here.
pub(crate) async fn announce(
    tx: &deadpool_postgres::Transaction<'_>,
    session: &str,
    records: &[LogRecord],
    now: i64,
) -> Result<(), StoreError> {
    let mut columns = NoticeColumns::default();
    columns.add(outbox::rows_for(session, records, now));
    if columns.is_empty() {
        return Ok(());
    }
    let insert = tx.prepare_cached(INSERT).await.map_err(backend)?;
    let n = tx
        .execute(&insert, &columns.params())
        .await
        .map_err(backend)?;
    assert!(n as usize <= columns.len(), "one row per notice at most");
    Ok(())
}

/// A claimed row as (due_at, notice).
fn claimed(r: &Row) -> Result<(i64, Notice), StoreError> {
    let event_id: String = r.get(1);
    let kind: String = r.get(4);
    let attempts: i64 = r.get(6);
    let corrupt = |what: String| StoreError::Corrupt(format!("notice {event_id}: {what}"));
    let kind = NoticeKind::parse(&kind).ok_or_else(|| corrupt(format!("unknown kind {kind:?}")))?;
    let attempts = u32::try_from(attempts).map_err(|_| corrupt(format!("attempts {attempts}")))?;
    let notice = Notice {
        session: r.get(2),
        seq: r.get(3),
        kind,
        created_at: r.get(5),
        attempts,
        event_id,
    };
    Ok((r.get(0), notice))
}

impl Outbox for PgJournal {
    async fn claim_notices(&self, claim: NoticeClaim) -> Result<Vec<Notice>, StoreError> {
        claim.check()?;
        let limit = i64::try_from(claim.limit).unwrap_or(i64::MAX);
        let c = self.conn().await?;
        let stmt = c.prepare_cached(CLAIM).await.map_err(backend)?;
        let rows = client(&c)
            .query(&stmt, &[&claim.owner, &claim.until(), &claim.now, &limit])
            .await
            .map_err(backend)?;
        let mut notices = rows.iter().map(claimed).collect::<Result<Vec<_>, _>>()?;
        // RETURNING gives no order; the rule's is (due_at, event_id).
        notices.sort_by(|a, b| (a.0, &a.1.event_id).cmp(&(b.0, &b.1.event_id)));
        assert!(notices.len() <= claim.limit, "a claim honours its limit");
        Ok(notices.into_iter().map(|(_, n)| n).collect())
    }

    async fn settle_notice(
        &self,
        owner: &str,
        event_id: &str,
        settle: Settle,
    ) -> Result<bool, StoreError> {
        let c = self.conn().await?;
        let n = match &settle {
            Settle::Delivered => client(&c).execute(DELIVERED, &[&event_id]).await,
            Settle::Retry { due_at, error } => {
                let error = outbox::clip_error(error);
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&event_id, &owner, due_at, &error];
                client(&c).execute(RETRY, &params).await
            }
        }
        .map_err(backend)?;
        assert!(n <= 1, "event ids are unique");
        Ok(n == 1)
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        let c = self.conn().await?;
        let row = client(&c).query_one(STATS, &[]).await.map_err(backend)?;
        let (queued, oldest): (i64, Option<i64>) = (row.get(0), row.get(1));
        debug_assert_eq!(queued == 0, oldest.is_none(), "an oldest row iff any");
        Ok(OutboxStats {
            queued: u64::try_from(queued).unwrap_or(0),
            oldest_created: oldest,
        })
    }

    async fn release_claims(&self, owner: &str) -> Result<u64, StoreError> {
        agentsessions_journal::rules::required("notice claim owner", owner)?;
        let c = self.conn().await?;
        let n = client(&c)
            .execute(RELEASE, &[&owner])
            .await
            .map_err(backend)?;
        Ok(n)
    }
}
