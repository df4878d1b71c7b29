//! What the writer knows of each session's head, so an append skips its two
//! precondition lookups (head row, session row) on the common path.
//!
//! Invariant: inside a write transaction, after [`Heads::check_version`], an
//! entry equals what the writer connection would read now for that session:
//! its newest record's seq and hash and its stored fence, with a session row
//! that exists and is complete. Everything that could break that removes
//! entries instead of guessing:
//! - another connection's commit (another process, another handle on the
//!   file) moves `PRAGMA data_version`, and the next transaction starts
//!   from an empty map;
//! - a rolled-back transaction clears the map (its entries may describe
//!   writes that are gone);
//! - every write other than an append that touches a session's records or
//!   row updates or drops that session's entry.
//!
//! Debug builds (every test) read both rows anyway and assert the entry
//! matches, so a stale entry fails loudly wherever appends are tested.

use std::collections::HashMap;

use rusqlite::Connection;

/// Entries kept at most; past it the map starts over (a miss costs two
/// point lookups, nothing more).
const MAX_ENTRIES: usize = 65_536;

/// One session's head as the writer last wrote or read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub seq: i64,
    pub hash: String,
    pub fence: i64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Heads {
    map: HashMap<String, Head>,
    /// `PRAGMA data_version` when the map was last known current.
    version: Option<i64>,
    /// Appends that found their session here.
    hits: u64,
}

impl Heads {
    /// Empties the map if another connection committed since it was last
    /// checked. Call inside the write transaction, before any job runs: no
    /// other writer can commit until it ends.
    pub fn check_version(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        debug_assert!(!conn.is_autocommit(), "checked inside the transaction");
        let now: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        if self.version != Some(now) {
            self.map.clear();
            self.version = Some(now);
        }
        Ok(())
    }

    /// `session`'s head, counted as a hit when known.
    pub fn lookup(&mut self, session: &str) -> Option<Head> {
        let head = self.map.get(session).cloned();
        self.hits += u64::from(head.is_some());
        head
    }

    /// Appends that found their session's head here so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Records `session`'s head after a successful append.
    pub fn set(&mut self, session: &str, head: Head) {
        assert!(head.seq > 0, "a cached head has a record");
        if self.map.len() >= MAX_ENTRIES && !self.map.contains_key(session) {
            self.map.clear();
        }
        self.map.insert(session.to_owned(), head);
    }

    /// The fence `session` now stores, after a mint.
    pub fn fenced(&mut self, session: &str, fence: i64) {
        if let Some(h) = self.map.get_mut(session) {
            debug_assert!(fence > h.fence, "a minted fence only grows");
            h.fence = fence;
        }
    }

    pub fn forget(&mut self, session: &str) {
        self.map.remove(session);
    }

    /// After a rollback: nothing cached may describe undone writes.
    pub fn clear(&mut self) {
        self.map.clear();
        self.version = None;
    }
}
