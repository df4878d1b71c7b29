//! Writes whose COMMIT answer was lost: the connection died during COMMIT,
//! or the primary failed over with the commit in flight. The write may be
//! on the new primary or not, so before anyone is answered the store reads
//! the session back (waiting up to [`RECONCILE_FOR`] for a primary) and
//! asks the journal crate's rule (`rules::reconcile_append`,
//! `reconcile_fork`): the records are there, hash for hash → the write's
//! records, as a success; not there → `Unavailable`, which a client may
//! retry; unreadable → `CommitFailed` (still unknown), as before.
//!
//! Invariant: never an acknowledgement of what is not durable, never
//! "failed" for what committed.

use std::time::{Duration, Instant};

use agentsessions_journal::rules::{self, Reconciled};
use agentsessions_journal::{
    AppendBatch, AppendError, ForkBatch, Meter, StoreError, UnknownOutcome,
};
use agentsessions_proto::v1::LogRecord;
use deadpool_postgres::Pool;

use crate::{client, ops, pool_error};

/// How long a reconciliation waits for a primary to read from.
pub(crate) const RECONCILE_FOR: Duration = Duration::from_secs(15);

/// The answer for `batch`, whose COMMIT failed with `reason`.
pub(crate) async fn append(
    pool: &Pool,
    batch: &AppendBatch,
    reason: &str,
    meter: Option<&Meter>,
) -> Result<Vec<LogRecord>, AppendError> {
    let answer = append_read_back(pool, batch, reason).await;
    count(meter, &answer);
    answer
}

async fn append_read_back(
    pool: &Pool,
    batch: &AppendBatch,
    reason: &str,
) -> Result<Vec<LogRecord>, AppendError> {
    let head = batch.expected_last_seq;
    let last = head + batch.events.len() as i64;
    let stored = match read(pool, &batch.session, head.max(1), last).await {
        Ok(stored) => stored,
        Err(e) => return Err(unknown(reason, &e)),
    };
    // The head's own record comes first when there is one.
    let stored: Vec<LogRecord> = stored.into_iter().filter(|r| r.seq >= head).collect();
    answer(rules::reconcile_append(batch, &stored)?, reason)
}

/// The answer for fork `batch`, whose COMMIT failed with `reason`.
pub(crate) async fn fork(
    pool: &Pool,
    batch: &ForkBatch,
    reason: &str,
    meter: Option<&Meter>,
) -> Result<Vec<LogRecord>, AppendError> {
    let answer = fork_read_back(pool, batch, reason).await;
    count(meter, &answer);
    answer
}

/// Counts what a reconciliation found, for `journal_commit_unknown`.
fn count(meter: Option<&Meter>, answer: &Result<Vec<LogRecord>, AppendError>) {
    let outcome = match answer {
        Ok(_) => UnknownOutcome::Committed,
        Err(AppendError::Failed(StoreError::CommitFailed { .. })) => UnknownOutcome::Unreadable,
        Err(_) => UnknownOutcome::NotCommitted,
    };
    if let Some(m) = meter {
        m.commit_unknown(outcome);
    }
}

async fn fork_read_back(
    pool: &Pool,
    batch: &ForkBatch,
    reason: &str,
) -> Result<Vec<LogRecord>, AppendError> {
    let at = batch.at_seq;
    let prev = if at == 0 {
        String::new()
    } else {
        match read(pool, &batch.parent, at, at).await {
            Ok(r) if r.len() == 1 => r[0].content_hash.clone(),
            Ok(_) => return answer(Reconciled::NotCommitted, reason),
            Err(e) => return Err(unknown(reason, &e)),
        }
    };
    let last = at + batch.events.len() as i64;
    let stored = match read(pool, &batch.child, at + 1, last).await {
        Ok(stored) => stored,
        Err(e) => return Err(unknown(reason, &e)),
    };
    answer(rules::reconcile_fork(batch, &prev, &stored)?, reason)
}

fn answer(r: Reconciled, reason: &str) -> Result<Vec<LogRecord>, AppendError> {
    match r {
        Reconciled::Committed(records) => {
            assert!(!records.is_empty(), "a committed write wrote records");
            Ok(records)
        }
        Reconciled::NotCommitted => Err(StoreError::Unavailable(format!(
            "the write did not commit ({reason}); retry"
        ))
        .into()),
    }
}

fn unknown(reason: &str, then: &StoreError) -> AppendError {
    StoreError::CommitFailed {
        reason: format!("{reason}; reading it back: {then}"),
    }
    .into()
}

/// Records `from..=to` of `session`, retried while no primary answers.
async fn read(
    pool: &Pool,
    session: &str,
    from: i64,
    to: i64,
) -> Result<Vec<LogRecord>, StoreError> {
    assert!(from >= 1 && to >= from);
    retrying(pool, |c| {
        let session = session.to_owned();
        async move { ops::read(client(&c), &session, from, to).await }
    })
    .await
}

/// `f` on a pooled connection, tried again with backoff while the store is
/// down, for up to [`RECONCILE_FOR`].
async fn retrying<T, Fut>(
    pool: &Pool,
    f: impl Fn(deadpool_postgres::Object) -> Fut,
) -> Result<T, StoreError>
where
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let until = Instant::now() + RECONCILE_FOR;
    let mut pause = Duration::from_millis(20);
    loop {
        let tried = match pool.get().await.map_err(pool_error) {
            Ok(c) => f(c).await,
            Err(e) => Err(e),
        };
        match tried {
            Err(e) if e.is_transient() && Instant::now() + pause < until => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            done => return done,
        }
    }
}

/// The answer for a fence mint of `session` that minted `fence` (and, with
/// `owner`, took its lease) and whose COMMIT failed with `reason`: the
/// session's fence (and lease) read back. Committed when the stored fence
/// is this one and, with a lease, the lease is `owner`'s at this fence;
/// anything else (an older fence: not committed; a newer one: superseded
/// either way) is UNAVAILABLE, and a retry mints a newer fence.
pub(crate) async fn mint(
    pool: &Pool,
    session: &str,
    fence: i64,
    owner: Option<&str>,
    reason: &str,
    meter: Option<&Meter>,
) -> Result<i64, StoreError> {
    assert!(fence >= 1);
    let read = retrying(pool, |c| {
        let session = session.to_owned();
        async move {
            client(&c)
                .query_opt(
                    "SELECT s.fence, l.owner, l.fence FROM sessions s
                     LEFT JOIN session_leases l ON l.session = s.session
                     WHERE s.session = $1",
                    &[&session],
                )
                .await
                .map_err(crate::backend)
        }
    })
    .await;
    let (outcome, answer) = match read {
        Err(e) => (
            UnknownOutcome::Unreadable,
            Err(StoreError::CommitFailed {
                reason: format!("{reason}; reading it back: {e}"),
            }),
        ),
        Ok(row) => {
            let stored: Option<(i64, Option<String>, Option<i64>)> =
                row.map(|r| (r.get(0), r.get(1), r.get(2)));
            let ours = stored
                .as_ref()
                .is_some_and(|(f, lease_owner, lease_fence)| {
                    *f == fence
                        && owner.is_none_or(|o| {
                            lease_owner.as_deref() == Some(o) && *lease_fence == Some(fence)
                        })
                });
            if ours {
                (UnknownOutcome::Committed, Ok(fence))
            } else {
                (
                    UnknownOutcome::NotCommitted,
                    Err(StoreError::Unavailable(format!(
                        "the fence mint did not commit ({reason}); retry"
                    ))),
                )
            }
        }
    };
    if let Some(m) = meter {
        m.commit_unknown(outcome);
    }
    answer
}
