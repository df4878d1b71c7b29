//! The tool ledger: a durable record of which (session, idempotency key)
//! pairs have started and finished, with each finished call's result.
//!
//! It lives in its own SQLite file beside the journal (`<journal>.tools.db`)
//! rather than as a table in the journal. The journal has a single writer
//! thread, a versioned schema and an owner of its own; the ledger is written
//! from tool executions at a different cadence, and keeping it apart means
//! neither contends on the other's lock or migrates the other's schema. Its
//! durability does not need to be atomic with the journal: the TOOL_CALL
//! intent is already durable before an execution starts, and the ledger only
//! has to be durable before the side effect happens.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use agentsessions_proto::v1::ToolResult;
use prost::Message as _;
use rusqlite::{Connection, OptionalExtension, params};

use super::ToolError;

/// Schema version stored in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tool_ledger (
    session TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    tool TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'done')),
    result BLOB,
    PRIMARY KEY (session, idempotency_key)
) WITHOUT ROWID;
";

/// What the ledger knows about one key.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerEntry {
    /// Recorded before the effect; the effect may or may not have happened.
    Started {
        /// Tool the key was first used with.
        tool: String,
    },
    /// The effect happened and this was its result.
    Done {
        /// Tool the key was used with.
        tool: String,
        /// The stored result.
        result: ToolResult,
    },
}

/// Where ledger entries live: this file's SQLite ledger, or a table in a
/// shared journal database (so several daemons see one ledger). Calls
/// block; the executor makes them from a blocking thread. Each call is
/// durable when it returns.
pub trait LedgerStore: Send + Sync + 'static {
    /// The entry for (session, key), if any.
    fn get(&self, session: &str, key: &str) -> Result<Option<LedgerEntry>, ToolError>;
    /// Records that the effect for (session, key) is about to happen. An
    /// existing entry is left as it is.
    fn start(&self, session: &str, key: &str, tool: &str) -> Result<(), ToolError>;
    /// Records the effect's result. A result already stored wins: the first
    /// finished execution is the one every later call is answered with.
    fn finish(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), ToolError>;
    /// Records the result of a run that was harmless to make twice (it had
    /// no "started" mark). Its loss only means a re-drive runs the call
    /// again, so a store may skip the sync it makes for [`finish`]; by
    /// default it is [`finish`].
    ///
    /// [`finish`]: LedgerStore::finish
    fn finish_unsynced(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), ToolError> {
        self.finish(session, key, tool, result)
    }
    /// Forgets every key of `session` (a deleted session); returns how many
    /// entries went. Repeating it is harmless.
    fn forget(&self, session: &str) -> Result<usize, ToolError>;
    /// Sessions with at least one entry, in uid order.
    fn sessions(&self) -> Result<Vec<String>, ToolError>;
}

/// An entry from its stored columns (the same in every backend).
pub fn entry_of(
    tool: String,
    state: &str,
    result: Option<&[u8]>,
) -> Result<LedgerEntry, ToolError> {
    match (state, result) {
        ("started", _) => Ok(LedgerEntry::Started { tool }),
        ("done", Some(bytes)) => {
            let result = ToolResult::decode(bytes)
                .map_err(|_| ToolError::Ledger("stored result is corrupt".into()))?;
            Ok(LedgerEntry::Done { tool, result })
        }
        _ => Err(ToolError::Ledger("stored entry is corrupt".into())),
    }
}

/// The durable (session, key) → result store in a SQLite file.
#[derive(Debug)]
pub struct ToolLedger {
    conn: Mutex<Connection>,
}

impl ToolLedger {
    /// The ledger file that goes with a journal file.
    pub fn path_for_journal(journal: &Path) -> PathBuf {
        let mut name = journal.as_os_str().to_owned();
        name.push(".tools.db");
        PathBuf::from(name)
    }

    /// Opens (creating if needed) the ledger at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ToolError> {
        Self::init(Connection::open(path).map_err(ledger_err)?)
    }

    /// A ledger that forgets everything when dropped (tests).
    pub fn open_in_memory() -> Result<Self, ToolError> {
        Self::init(Connection::open_in_memory().map_err(ledger_err)?)
    }

    fn init(conn: Connection) -> Result<Self, ToolError> {
        // "started" must be on disk before the effect, so every commit syncs.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(ledger_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(ledger_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(ledger_err)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(ledger_err)?;
        if version > SCHEMA_VERSION {
            return Err(ToolError::Ledger("schema is newer than this build".into()));
        }
        conn.execute_batch(SCHEMA).map_err(ledger_err)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(ledger_err)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves no half-done statement behind
        // (each is its own transaction), so the connection is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LedgerStore for ToolLedger {
    fn get(&self, session: &str, key: &str) -> Result<Option<LedgerEntry>, ToolError> {
        let row = self
            .conn()
            .query_row(
                "SELECT tool, state, result FROM tool_ledger
                 WHERE session = ?1 AND idempotency_key = ?2",
                params![session, key],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<Vec<u8>>>(2)?,
                    ))
                },
            )
            .optional()
            .map_err(ledger_err)?;
        let Some((tool, state, result)) = row else {
            return Ok(None);
        };
        entry_of(tool, &state, result.as_deref()).map(Some)
    }

    fn start(&self, session: &str, key: &str, tool: &str) -> Result<(), ToolError> {
        self.conn()
            .execute(
                "INSERT INTO tool_ledger (session, idempotency_key, tool, state)
                 VALUES (?1, ?2, ?3, 'started')
                 ON CONFLICT (session, idempotency_key) DO NOTHING",
                params![session, key, tool],
            )
            .map_err(ledger_err)?;
        Ok(())
    }

    fn finish(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), ToolError> {
        finish_on(&self.conn(), session, key, tool, result)
    }

    fn finish_unsynced(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), ToolError> {
        let conn = self.conn();
        // In WAL mode NORMAL commits without an fsync; the next synced
        // commit (or checkpoint) makes this one durable too.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(ledger_err)?;
        let done = finish_on(&conn, session, key, tool, result);
        let restored = conn.pragma_update(None, "synchronous", "FULL");
        done?;
        restored.map_err(ledger_err)
    }

    fn forget(&self, session: &str) -> Result<usize, ToolError> {
        self.conn()
            .execute("DELETE FROM tool_ledger WHERE session = ?1", [session])
            .map_err(ledger_err)
    }

    fn sessions(&self) -> Result<Vec<String>, ToolError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT DISTINCT session FROM tool_ledger ORDER BY session")
            .map_err(ledger_err)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(ledger_err)?;
        rows.collect::<Result<_, _>>().map_err(ledger_err)
    }
}

/// Stores a key's result unless one is stored already (the first wins).
fn finish_on(
    conn: &Connection,
    session: &str,
    key: &str,
    tool: &str,
    result: &ToolResult,
) -> Result<(), ToolError> {
    conn.execute(
        "INSERT INTO tool_ledger (session, idempotency_key, tool, state, result)
         VALUES (?1, ?2, ?3, 'done', ?4)
         ON CONFLICT (session, idempotency_key) DO UPDATE
         SET state = 'done', result = excluded.result
         WHERE tool_ledger.state = 'started'",
        params![session, key, tool, result.encode_to_vec()],
    )
    .map_err(ledger_err)?;
    Ok(())
}

fn ledger_err(e: rusqlite::Error) -> ToolError {
    // Driver messages name tables and constraints, never bound values, so
    // no args or keys leak through them.
    ToolError::Ledger(e.to_string())
}
