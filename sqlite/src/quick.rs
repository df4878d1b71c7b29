//! Point reads in place (see the crate docs): a session row, a head or a
//! short tail read on the caller's thread, on the writer's connection when
//! no batch holds it, else on the quick connection.
//!
//! Invariant: a point read in place never waits on a lock (busy timeout 0
//! on the caller's thread); whatever cannot be answered at once (busy, a
//! connection in use, a tail too long) goes to the reader threads.

use std::sync::atomic::Ordering;

use agentsessions_journal::StoreError;
use rusqlite::Connection;

use crate::{SqliteJournal, schema};

impl SqliteJournal {
    /// Runs the point read `op` in place, on the writer's connection when no
    /// batch holds it, else on the quick connection; otherwise (None) the
    /// caller falls back to a reader thread. `op` itself returns None when
    /// the read turned out too big to do in place.
    pub(crate) fn try_quick<T>(
        &self,
        op: impl Fn(&Connection) -> Result<Option<T>, StoreError>,
    ) -> Option<Result<T, StoreError>> {
        if self.is_poisoned() {
            return None;
        }
        // The writer's page cache holds what the last commits wrote, where
        // any other connection must re-read every page a commit touched
        // (a session row read right after an append: ~4 against ~19 us).
        let first = match self.inner.writer_conn.try_lock() {
            Ok(conn) => {
                // Never wait on a lock here: this thread is the caller's.
                let _ = conn.busy_timeout(std::time::Duration::ZERO);
                let r = op(&conn);
                let _ = conn.busy_timeout(schema::BUSY_TIMEOUT);
                Some(r)
            }
            Err(_) => None,
        };
        let done = match first {
            // Too big to read in place on any connection.
            Some(Ok(None)) => return None,
            Some(Err(e)) if is_busy(&e) => None,
            Some(r) => in_place(r),
            None => None,
        };
        // Busy, or the writer is mid-batch: the quick connection; in use by
        // another caller or left poisoned by a panic, the reader threads
        // serve this one.
        let done = match done {
            Some(done) => Some(done),
            None => in_place(op(&*self.inner.quick.try_lock().ok()?)),
        };
        if done.is_some() {
            self.inner
                .shared
                .reads_in_place
                .fetch_add(1, Ordering::Relaxed);
        }
        done
    }

    /// The outcome of a point read: `done` when [`Self::try_quick`] answered,
    /// else `fallback` on a reader thread.
    pub(crate) fn quick_or_read<T, G>(
        &self,
        done: Option<Result<T, StoreError>>,
        fallback: G,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + use<T, G>
    where
        T: Send + 'static,
        G: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let queued = match done {
            Some(result) => Ok(result),
            None => {
                let s = &self.inner.shared;
                s.point_reads_on_threads.fetch_add(1, Ordering::Relaxed);
                Err(self.submit_read(fallback))
            }
        };
        async move {
            match queued {
                Ok(result) => result,
                Err(pending) => pending.await,
            }
        }
    }
}

/// The most records a tail read decodes in place; a longer tail is read
/// by a reader thread.
pub(crate) const QUICK_RECORDS: usize = 64;

/// A point read's result, or None to hand it on (busy, or too big).
fn in_place<T>(r: Result<Option<T>, StoreError>) -> Option<Result<T, StoreError>> {
    match r {
        Ok(Some(v)) => Some(Ok(v)),
        Ok(None) => None,
        Err(e) if is_busy(&e) => None,
        Err(e) => Some(Err(e)),
    }
}

/// Whether `e` is SQLite's "busy" or "locked", which the quick connection
/// reports at once instead of waiting.
fn is_busy(e: &StoreError) -> bool {
    let StoreError::Backend(b) = e else {
        return false;
    };
    matches!(
        b.downcast_ref::<rusqlite::Error>()
            .and_then(rusqlite::Error::sqlite_error_code),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}
