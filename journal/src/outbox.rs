//! The notification outbox, written once: which committed records announce
//! something ([`kind_of`]), the rows an append adds for them ([`rows_for`]),
//! and the claim and settle rules every store applies ([`claimable`],
//! [`settle`]), so the memory, SQLite and PostgreSQL outboxes answer alike.
//!
//! Invariant: a notice row is written in the same transaction as the record
//! it announces, so a committed record always has its notice and a refused
//! or rolled-back append has none. Its id is a function of the record's
//! place ([`event_id`]), so writing it twice (a reconciled commit, a retry)
//! keeps one row, and a receiver can deduplicate on it. Delivery is at
//! least once: a notice leaves the table only when a deliverer settles it
//! as delivered.
//!
//! Claims are leases, not locks: a claimed notice is skipped by other
//! claimers until `claimed_until` passes, then anyone may claim it again (a
//! deliverer that died mid-delivery). Time is always the caller's.

use std::collections::BTreeMap;
use std::future::Future;

use agentsessions_machine::events::{self, body};
use agentsessions_machine::vocab::HOST_PRINCIPAL;
use agentsessions_proto::v1::{EventKind, LogRecord};

use crate::StoreError;

/// What a notice announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoticeKind {
    /// An APPROVAL_REQUEST: a tool call waits for a decision.
    ApprovalRequested,
    /// An APPROVAL_RESULT by someone other than the host itself.
    ApprovalDecided,
    /// The host denied a request at its deadline.
    ApprovalExpired,
    /// An ERROR record: a turn failed.
    TurnFailed,
}

impl NoticeKind {
    /// Every kind, in declaration order.
    pub const ALL: [NoticeKind; 4] = [
        NoticeKind::ApprovalRequested,
        NoticeKind::ApprovalDecided,
        NoticeKind::ApprovalExpired,
        NoticeKind::TurnFailed,
    ];

    /// The text stored in `notify_outbox.kind` and sent to receivers.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::ApprovalRequested => "approval.requested",
            NoticeKind::ApprovalDecided => "approval.decided",
            NoticeKind::ApprovalExpired => "approval.expired",
            NoticeKind::TurnFailed => "turn.failed",
        }
    }

    /// The kind stored as `text`; None for text this build never writes.
    pub fn parse(text: &str) -> Option<Self> {
        let kind = Self::ALL.into_iter().find(|k| k.as_str() == text);
        debug_assert!(kind.is_none_or(|k| k.as_str() == text));
        kind
    }
}

impl std::fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `record` announces, if anything. A decision is an expiry when the
/// host itself denied it (its deadline passed); any other decision,
/// including one the host approved, is a decision.
pub fn kind_of(record: &LogRecord) -> Option<NoticeKind> {
    let ev = record.event.as_ref()?;
    match events::kind_of(ev) {
        EventKind::EventApprovalRequest => Some(NoticeKind::ApprovalRequested),
        EventKind::EventApprovalResult => {
            let by_host = ev
                .actor
                .as_ref()
                .is_some_and(|a| a.principal == HOST_PRINCIPAL);
            let denied = body::approval_result(ev).is_some_and(|d| !d.approved);
            Some(if by_host && denied {
                NoticeKind::ApprovalExpired
            } else {
                NoticeKind::ApprovalDecided
            })
        }
        EventKind::EventError => Some(NoticeKind::TurnFailed),
        _ => None,
    }
}

/// The notice id of the record at `seq` of `session`: the same whoever
/// writes it and however often.
pub fn event_id(session: &str, seq: i64) -> String {
    debug_assert!(!session.is_empty() && seq >= 1, "a record's place");
    format!("{session}/{seq}")
}

/// One row an append inserts beside its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeRow {
    pub event_id: String,
    pub session: String,
    pub seq: i64,
    pub kind: NoticeKind,
    /// Unix ns: the append's `now_unix_nanos`; also the first `due_at`.
    pub created_at: i64,
}

/// The rows a store inserts, in the append's own transaction, for the
/// `records` it just committed to `session` at `now_unix_nanos`. Empty for
/// most appends (an echo turn announces nothing), and then a store issues
/// no statement at all.
pub fn rows_for(session: &str, records: &[LogRecord], now_unix_nanos: i64) -> Vec<NoticeRow> {
    let rows: Vec<NoticeRow> = records
        .iter()
        .filter_map(|r| {
            kind_of(r).map(|kind| NoticeRow {
                event_id: event_id(session, r.seq),
                session: session.to_owned(),
                seq: r.seq,
                kind,
                created_at: now_unix_nanos,
            })
        })
        .collect();
    debug_assert!(rows.len() <= records.len(), "at most one notice a record");
    rows
}

/// A claimed notice, as a deliverer gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub event_id: String,
    pub session: String,
    pub seq: i64,
    pub kind: NoticeKind,
    /// Unix ns the announcing append committed at.
    pub created_at: i64,
    /// Failed deliveries so far (settled as [`Settle::Retry`]).
    pub attempts: u32,
}

/// A claim: up to `limit` due, unclaimed notices for `owner`, held until
/// `now + lease`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeClaim {
    /// Who claims (a host id); required.
    pub owner: String,
    /// Unix ns.
    pub now: i64,
    /// How long the claim keeps others off, in ns; positive.
    pub lease: i64,
    /// Most notices returned.
    pub limit: usize,
}

impl NoticeClaim {
    /// The checks every store makes before it touches a row.
    pub fn check(&self) -> Result<(), StoreError> {
        crate::rules::required("notice claim owner", &self.owner)?;
        if self.lease <= 0 {
            return Err(StoreError::InvalidArgument(
                "notice claim lease must be positive".into(),
            ));
        }
        Ok(())
    }

    /// When the claim lapses.
    pub fn until(&self) -> i64 {
        debug_assert!(self.lease > 0, "checked before use");
        self.now.saturating_add(self.lease)
    }
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// The receiver took it: the row goes.
    Delivered,
    /// It failed: try again at `due_at` (unix ns); `error` is kept.
    Retry { due_at: i64, error: String },
}

/// The outbox's size, for metrics and health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Rows not yet delivered.
    pub queued: u64,
    /// The oldest of them's `created_at` (None when empty).
    pub oldest_created: Option<i64>,
}

/// The longest `last_error` kept; a receiver's error page is cut here.
pub const MAX_ERROR_LEN: usize = 1024;

/// `error` cut to [`MAX_ERROR_LEN`] bytes at a char boundary.
pub fn clip_error(error: &str) -> &str {
    if error.len() <= MAX_ERROR_LEN {
        return error;
    }
    let mut end = MAX_ERROR_LEN;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

/// A stored outbox row, every column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNotice {
    pub row: NoticeRow,
    pub attempts: u32,
    pub due_at: i64,
    /// "" when unclaimed.
    pub claimed_by: String,
    /// Unix ns; 0 when unclaimed.
    pub claimed_until: i64,
    pub last_error: String,
}

impl StoredNotice {
    /// A row as an append inserts it: due at once, unclaimed.
    pub fn new(row: NoticeRow) -> Self {
        Self {
            due_at: row.created_at,
            row,
            attempts: 0,
            claimed_by: String::new(),
            claimed_until: 0,
            last_error: String::new(),
        }
    }

    /// Whether a claim at `now` may take it: due, and no live claim.
    pub fn claimable(&self, now: i64) -> bool {
        self.due_at <= now && self.claimed_until <= now
    }

    /// The row as a deliverer gets it.
    pub fn notice(&self) -> Notice {
        Notice {
            event_id: self.row.event_id.clone(),
            session: self.row.session.clone(),
            seq: self.row.seq,
            kind: self.row.kind,
            created_at: self.row.created_at,
            attempts: self.attempts,
        }
    }
}

/// The claim rule: of `rows`, the ids a claim at `now` takes, ordered by
/// (due_at, event_id), at most `limit`.
pub fn claimable<'a>(
    rows: impl IntoIterator<Item = &'a StoredNotice>,
    now: i64,
    limit: usize,
) -> Vec<String> {
    let mut due: Vec<&StoredNotice> = rows.into_iter().filter(|r| r.claimable(now)).collect();
    due.sort_by(|a, b| (a.due_at, &a.row.event_id).cmp(&(b.due_at, &b.row.event_id)));
    due.truncate(limit);
    debug_assert!(due.len() <= limit);
    due.into_iter().map(|r| r.row.event_id.clone()).collect()
}

/// What a settle does to `row`: `Some(true)` deletes it, `Some(false)`
/// leaves it as changed in place, `None` changes nothing. Delivered deletes
/// whoever holds the claim (the notice went out); Retry applies only while
/// `owner` still holds the claim (nobody claimed it after a lapse), and
/// releases it.
pub fn settle(row: &mut StoredNotice, owner: &str, settle: &Settle) -> Option<bool> {
    match settle {
        Settle::Delivered => Some(true),
        Settle::Retry { due_at, error } => {
            if owner.is_empty() || row.claimed_by != owner {
                return None;
            }
            row.attempts = row.attempts.saturating_add(1);
            row.due_at = *due_at;
            row.claimed_by.clear();
            row.claimed_until = 0;
            row.last_error = clip_error(error).to_owned();
            debug_assert!(row.claimable(*due_at), "a retried row is due at due_at");
            Some(false)
        }
    }
}

/// The memory store's outbox table: the rules above over a map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoticeTable {
    rows: BTreeMap<String, StoredNotice>,
}

impl NoticeTable {
    /// Inserts `rows`, keeping any already there (`ON CONFLICT DO NOTHING`).
    pub fn insert(&mut self, rows: Vec<NoticeRow>) {
        for row in rows {
            self.rows
                .entry(row.event_id.clone())
                .or_insert_with(|| StoredNotice::new(row));
        }
    }

    /// A claim, after [`NoticeClaim::check`].
    pub fn claim(&mut self, claim: &NoticeClaim) -> Result<Vec<Notice>, StoreError> {
        claim.check()?;
        let ids = claimable(self.rows.values(), claim.now, claim.limit);
        let until = claim.until();
        let claimed: Vec<Notice> = ids
            .iter()
            .map(|id| {
                let row = self.rows.get_mut(id).expect("the rule picked a stored row");
                row.claimed_by = claim.owner.clone();
                row.claimed_until = until;
                row.notice()
            })
            .collect();
        debug_assert_eq!(claimed.len(), ids.len());
        Ok(claimed)
    }

    /// A settle; whether a row changed.
    pub fn settle(&mut self, owner: &str, event_id: &str, how: &Settle) -> bool {
        let Some(row) = self.rows.get_mut(event_id) else {
            return false;
        };
        match settle(row, owner, how) {
            Some(true) => self.rows.remove(event_id).is_some(),
            Some(false) => true,
            None => false,
        }
    }

    /// Lets go of every claim `owner` holds; how many.
    pub fn release(&mut self, owner: &str) -> u64 {
        assert!(!owner.is_empty(), "a claim has an owner");
        let mut n = 0;
        for row in self.rows.values_mut().filter(|r| r.claimed_by == owner) {
            row.claimed_by.clear();
            row.claimed_until = 0;
            n += 1;
        }
        debug_assert!(self.rows.values().all(|r| r.claimed_by != owner));
        n
    }

    pub fn stats(&self) -> OutboxStats {
        OutboxStats {
            queued: self.rows.len() as u64,
            oldest_created: self.rows.values().map(|r| r.row.created_at).min(),
        }
    }

    /// Every row, by event id (for tests and reports).
    pub fn rows(&self) -> impl Iterator<Item = &StoredNotice> {
        self.rows.values()
    }
}

/// The durable outbox a deliverer drains. Rows are inserted by the store's
/// appends themselves (with the outbox on, see
/// [`crate::JournalStore::set_outbox`]); this is the deliverer's side.
pub trait Outbox: Send + Sync {
    /// Claims up to `claim.limit` due, unclaimed notices for `claim.owner`
    /// until now+lease.
    fn claim_notices(
        &self,
        claim: NoticeClaim,
    ) -> impl Future<Output = Result<Vec<Notice>, StoreError>> + Send;

    /// Delivered: deletes the row (whoever holds the claim). Retry:
    /// attempts+1, due_at, claim released, last error kept — only if
    /// `owner` still holds the claim; returns whether a row changed.
    fn settle_notice(
        &self,
        owner: &str,
        event_id: &str,
        settle: Settle,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Rows not yet delivered and the oldest one's created_at.
    fn outbox_stats(&self) -> impl Future<Output = Result<OutboxStats, StoreError>> + Send;

    /// Lets go of every claim `owner` holds, so its rows are claimable at
    /// once; how many. A deliverer starting under a stable owner id calls
    /// it for the claims its previous incarnation died holding, which
    /// would otherwise wait out their lease.
    fn release_claims(&self, owner: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_proto::v1::{ApprovalResult, Event, IdentityRef};
    use agentsessions_proto::wkt::Timestamp;

    fn record(seq: i64, ev: Event) -> LogRecord {
        LogRecord {
            seq,
            event: Some(ev),
            ..LogRecord::default()
        }
    }

    fn decision(approved: bool, principal: Option<&str>) -> Event {
        let actor = principal.map(|p| IdentityRef {
            principal: p.into(),
            issuer: "x".into(),
            subject: String::new(),
        });
        let d = ApprovalResult {
            tool_call_id: "t1".into(),
            approved,
            reason: String::new(),
            request_seq: 1,
        };
        events::approval_result("e1", d, actor, Timestamp::default())
    }

    #[test]
    fn kinds_round_trip_through_their_text() {
        for k in NoticeKind::ALL {
            assert_eq!(NoticeKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(NoticeKind::parse("approval"), None);
    }

    #[test]
    fn only_a_host_denial_is_an_expiry() {
        let host = Some(HOST_PRINCIPAL);
        let cases = [
            (decision(false, host), NoticeKind::ApprovalExpired),
            (decision(true, host), NoticeKind::ApprovalDecided),
            (decision(false, Some("alice")), NoticeKind::ApprovalDecided),
            (decision(false, None), NoticeKind::ApprovalDecided),
        ];
        for (ev, kind) in cases {
            assert_eq!(kind_of(&record(2, ev)), Some(kind));
        }
        let request = events::approval_request("e1", "t1");
        assert_eq!(
            kind_of(&record(1, request)),
            Some(NoticeKind::ApprovalRequested)
        );
        let error = events::error("e1", "boom");
        assert_eq!(kind_of(&record(3, error)), Some(NoticeKind::TurnFailed));
        assert_eq!(kind_of(&record(4, events::end_completed("e1"))), None);
        assert_eq!(kind_of(&LogRecord::default()), None);
    }

    #[test]
    fn rows_name_each_announcing_record_by_its_place() {
        let records = [
            record(5, events::end_completed("e1")),
            record(6, events::approval_request("e1", "t1")),
        ];
        let rows = rows_for("s", &records, 77);
        assert_eq!(
            rows,
            [NoticeRow {
                event_id: "s/6".into(),
                session: "s".into(),
                seq: 6,
                kind: NoticeKind::ApprovalRequested,
                created_at: 77,
            }]
        );
    }

    fn table(ids: &[(&str, i64)]) -> NoticeTable {
        let mut t = NoticeTable::default();
        t.insert(
            ids.iter()
                .map(|(id, at)| NoticeRow {
                    event_id: (*id).into(),
                    session: "s".into(),
                    seq: 1,
                    kind: NoticeKind::TurnFailed,
                    created_at: *at,
                })
                .collect(),
        );
        t
    }

    fn claim(owner: &str, now: i64, limit: usize) -> NoticeClaim {
        NoticeClaim {
            owner: owner.into(),
            now,
            lease: 10,
            limit,
        }
    }

    #[test]
    fn claims_take_due_rows_in_order_and_skip_live_claims() {
        let mut t = table(&[("b", 1), ("a", 1), ("c", 0), ("later", 50)]);
        let ids = |n: Vec<Notice>| n.into_iter().map(|n| n.event_id).collect::<Vec<_>>();
        assert_eq!(ids(t.claim(&claim("h1", 5, 2)).unwrap()), ["c", "a"]);
        assert_eq!(ids(t.claim(&claim("h2", 6, 9)).unwrap()), ["b"]);
        // h1's claim lapses at 15, h2's at 16.
        assert_eq!(ids(t.claim(&claim("h3", 15, 9)).unwrap()), ["c", "a"]);
        assert!(t.claim(&claim("", 5, 1)).is_err());
    }

    #[test]
    fn a_retry_needs_the_claim_and_a_delivery_does_not() {
        let mut t = table(&[("a", 0), ("b", 0)]);
        t.claim(&claim("h1", 1, 9)).unwrap();
        let retry = Settle::Retry {
            due_at: 100,
            error: "x".repeat(5000),
        };
        assert!(!t.settle("h2", "a", &retry), "not h2's claim");
        assert!(t.settle("h1", "a", &retry));
        let a = t.rows().find(|r| r.row.event_id == "a").unwrap().clone();
        assert_eq!((a.attempts, a.due_at, a.claimed_until), (1, 100, 0));
        assert_eq!(a.last_error.len(), MAX_ERROR_LEN);
        assert!(!t.settle("h1", "a", &retry), "the claim was released");
        assert!(t.settle("h2", "b", &Settle::Delivered));
        assert!(!t.settle("h2", "b", &Settle::Delivered), "already gone");
        assert_eq!(
            t.stats(),
            OutboxStats {
                queued: 1,
                oldest_created: Some(0)
            }
        );
    }
}
