//! Schema, pragmas and in-place migration of the SQLite journal.
//!
//! The layout is the Go host's schema v2, column for column, so either host
//! can open the other's database. Versions are stamped in
//! `PRAGMA user_version`. A fresh database is built the way an old one is
//! upgraded (v1 DDL, then each rung), so both end with identical
//! `sqlite_master` text.

use crate::db;
use std::time::{Duration, Instant};

use agentsessions_proto::v1::{Event, event};
use prost::Message as _;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OptionalExtension as _};

use agentsessions_journal::StoreError;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 2;

/// Schema v1 as written by the Go host v0.1.0–v0.1.2 (frozen).
pub const SCHEMA_V1: &str = "\
CREATE TABLE IF NOT EXISTS sessions (
    session       TEXT PRIMARY KEY,
    fence         INTEGER NOT NULL DEFAULT 0,
    project       TEXT NOT NULL DEFAULT '',
    name          TEXT NOT NULL DEFAULT '',
    harness       TEXT NOT NULL DEFAULT '',
    model         TEXT NOT NULL DEFAULT '',
    parent_uid    TEXT NOT NULL DEFAULT '',
    fork_seq      INTEGER NOT NULL DEFAULT 0,
    compute_state TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL DEFAULT 0,
    updated_at    INTEGER NOT NULL DEFAULT 0,
    labels        TEXT NOT NULL DEFAULT '',
    annotations   TEXT NOT NULL DEFAULT '',
    origin        TEXT NOT NULL DEFAULT '',
    identity      TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS events (
    session   TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    fence     INTEGER NOT NULL,
    event     BLOB NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE INDEX IF NOT EXISTS sessions_project_created
    ON sessions(project, created_at DESC, session);
";

/// The v1 -> v2 rung: the harness registry and permanent name reservations.
const RUNG_V2: &str = "\
CREATE TABLE IF NOT EXISTS harnesses (
    name          TEXT PRIMARY KEY,
    uid           TEXT NOT NULL,
    spec          TEXT NOT NULL,
    spec_digest   TEXT NOT NULL,
    state         TEXT NOT NULL,
    retire_reason TEXT NOT NULL DEFAULT '',
    retired_at    INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS reserved_harness_names (
    name        TEXT PRIMARY KEY,
    reserved_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_harness ON sessions(harness);
";

/// Tombstones of deleted sessions: uid, when, how many records went and
/// who asked, never any content. Not part of the Go host's schema: it is
/// created on open, outside `user_version`, so a Go host still opens the
/// file (it ignores the table, and so does not refuse deleted uids).
pub const DELETED_SESSIONS: &str = "\
CREATE TABLE IF NOT EXISTS deleted_sessions (
    session    TEXT PRIMARY KEY,
    deleted_at INTEGER NOT NULL,
    records    INTEGER NOT NULL,
    principal  TEXT NOT NULL DEFAULT ''
);
";

/// Session leases (owner host, the fence they were taken with, expiry).
/// Like `deleted_sessions`, outside the Go schema and `user_version`: a Go
/// host ignores it.
pub const SESSION_LEASES: &str = "\
CREATE TABLE IF NOT EXISTS session_leases (
    session    TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
";

/// Fork prefixes: seqs `first_seq..=last_seq` of `session`'s journal are
/// the records `owner` holds in `events` (flattened: `owner` is the
/// session that wrote them, never one that refers further). Outside the Go
/// schema and `user_version`, like the leases: a Go host ignores it, so
/// it sees a fork child's own records only (`agentctl journal copy` makes
/// self-contained journals for it). The owner index finds the spans that
/// keep a deleted session's records.
pub const SESSION_PREFIXES: &str = "\
CREATE TABLE IF NOT EXISTS session_prefixes (
    session   TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    owner     TEXT NOT NULL,
    PRIMARY KEY (session, first_seq)
);
CREATE INDEX IF NOT EXISTS session_prefixes_owner ON session_prefixes(owner, last_seq);
";

/// The notification outbox (`agentsessions_journal::outbox`): one row per
/// committed record that announces something, inserted in the append's own
/// transaction and deleted once delivered. Outside the Go schema and
/// `user_version`, like the leases; created on every open.
pub const NOTIFY_OUTBOX: &str = "\
CREATE TABLE IF NOT EXISTS notify_outbox (
    event_id      TEXT PRIMARY KEY,
    session       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    due_at        INTEGER NOT NULL,
    claimed_by    TEXT NOT NULL DEFAULT '',
    claimed_until INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS notify_outbox_due ON notify_outbox(due_at);
";

/// How long a connection waits on another writer's lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// Sets the per-connection pragmas every journal connection needs.
pub fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db)?;
    // The hot statements (append, touch, reads) must all stay cached.
    conn.set_prepared_statement_cache_capacity(64);
    // Without the planner stability guarantee, SQLite (built with STAT4)
    // re-plans a statement each time a parameter it planned with, such as
    // a `LIMIT ?`, is bound again: a full re-prepare per tail read. The
    // journal's statements have one good plan whatever the values.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(db)?;
    Ok(())
}

/// Reads `user_version` and refuses versions this build cannot use, before
/// anything is written (switching to WAL already rewrites the header).
pub fn check_version(conn: &Connection) -> Result<i64, StoreError> {
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db)?;
    if !(0..=SCHEMA_VERSION).contains(&v) {
        return Err(StoreError::UnsupportedSchema {
            found: v,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(v)
}

/// Switches to WAL. busy_timeout does not cover the journal-mode change, so
/// another process opening the same file at the same moment shows up as
/// SQLITE_BUSY here; retry with exponential backoff inside the same 5 s budget.
pub fn enable_wal(conn: &Connection) -> Result<(), StoreError> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(db)?;
    if mode.eq_ignore_ascii_case("wal") || mode.eq_ignore_ascii_case("memory") {
        return Ok(());
    }
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut backoff = Duration::from_millis(2);
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Ok(m) if m.eq_ignore_ascii_case("wal") || m.eq_ignore_ascii_case("memory") => {
                return Ok(());
            }
            Ok(m) => {
                return Err(StoreError::Backend(
                    format!("journal_mode is {m}, want wal").into(),
                ));
            }
            Err(e) if is_busy(&e) && Instant::now() + backoff < deadline => {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(250));
            }
            Err(e) => return Err(db(e)),
        }
    }
}

/// Durability: with WAL, FULL syncs the WAL on every commit, so an
/// acknowledged append survives power loss, not only a process crash.
pub fn enable_full_sync(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("PRAGMA synchronous=FULL").map_err(db)?;
    Ok(())
}

pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// Brings the database to [`SCHEMA_VERSION`] in one IMMEDIATE transaction.
/// Any failure rolls back everything, leaving the old version in place.
pub fn migrate(conn: &Connection, now_unix_nanos: i64) -> Result<(), StoreError> {
    if check_version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE").map_err(db)?;
    let result = migrate_locked(conn, now_unix_nanos);
    match result {
        Ok(()) => {
            conn.execute_batch("COMMIT").map_err(db)?;
            Ok(())
        }
        Err(e) => {
            // The transaction may already be gone (SQLite rolls back on some
            // I/O errors); a failing ROLLBACK then changes nothing.
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

fn migrate_locked(conn: &Connection, now_unix_nanos: i64) -> Result<(), StoreError> {
    // Another process may have migrated while we waited for the lock.
    let found = check_version(conn)?;
    let mut v = found;
    if v == 0 {
        conn.execute_batch(SCHEMA_V1).map_err(db)?;
        v = 1;
    }
    if v == 1 {
        rung_v2(conn, now_unix_nanos).map_err(|e| StoreError::Migration {
            from: found,
            to: SCHEMA_VERSION,
            reason: e.to_string(),
        })?;
        v = 2;
    }
    assert_eq!(
        v, SCHEMA_VERSION,
        "every rung up to the current version ran"
    );
    conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
        .map_err(db)?;
    Ok(())
}

/// v1 -> v2: create the registry tables and reserve every harness name an
/// existing session already uses, so no later registration can take a name
/// that old journals refer to.
fn rung_v2(conn: &Connection, now_unix_nanos: i64) -> Result<(), StoreError> {
    conn.execute_batch(RUNG_V2).map_err(db)?;
    conn.execute(
        "INSERT OR IGNORE INTO reserved_harness_names(name, reserved_at)
         SELECT DISTINCT harness, ?1 FROM sessions WHERE harness <> ''",
        [now_unix_nanos],
    )
    .map_err(db)?;
    let mut names = std::collections::BTreeSet::new();
    {
        let mut stmt = conn
            .prepare("SELECT session, seq, event FROM events ORDER BY session, seq")
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let session: String = row.get(0).map_err(db)?;
            let seq: i64 = row.get(1).map_err(db)?;
            let blob: Vec<u8> = row.get(2).map_err(db)?;
            let ev = Event::decode(blob.as_slice()).map_err(|e| StoreError::Decode {
                session,
                seq,
                reason: e.to_string(),
            })?;
            if let Some(event::Body::ExecutionStart(start)) = ev.body
                && !start.harness.is_empty()
            {
                names.insert(start.harness);
            }
        }
    }
    let mut insert = conn
        .prepare("INSERT OR IGNORE INTO reserved_harness_names(name, reserved_at) VALUES (?1, ?2)")
        .map_err(db)?;
    for name in names {
        insert
            .execute(rusqlite::params![name, now_unix_nanos])
            .map_err(db)?;
    }
    Ok(())
}

/// `sqlite_master` as (type, name, sql), for comparing schemas in tests.
pub fn schema_text(conn: &Connection) -> Result<Vec<(String, String, Option<String>)>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .map_err(db)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)?;
    Ok(rows)
}

/// Whether a table exists (used by tests that check a failed migration).
pub fn has_table(conn: &Connection, name: &str) -> Result<bool, StoreError> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1",
            [name],
            |_| Ok(()),
        )
        .optional()
        .map_err(db)?
        .is_some())
}
