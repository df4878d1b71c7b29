//! The tool ledger in a SQLite file of its own beside the journal
//! (`<journal>.tools.db`), rather than as a table in the journal. The journal
//! has a single writer thread, a versioned schema and an owner of its own;
//! the ledger is written from tool executions at a different cadence, and
//! keeping it apart means neither contends on the other's lock or migrates
//! the other's schema. Its durability does not need to be atomic with the
//! journal: the TOOL_CALL intent is already durable before an execution
//! starts, and the ledger only has to be durable before the side effect.
//!
//! The rules are `agentsessions_journal::ledger`'s; the statements below say
//! them in SQL (`ON CONFLICT … DO NOTHING` is `on_start`, the guarded
//! upsert `on_finish`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use agentsessions_journal::ledger::{LedgerEntry, LedgerError, LedgerStore, entry_of};
use agentsessions_proto::v1::ToolResult;
use prost::Message as _;
use rusqlite::{Connection, OptionalExtension, params};

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
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        Self::init(Connection::open(path).map_err(ledger_err)?)
    }

    /// A ledger that forgets everything when dropped (tests).
    pub fn open_in_memory() -> Result<Self, LedgerError> {
        Self::init(Connection::open_in_memory().map_err(ledger_err)?)
    }

    fn init(conn: Connection) -> Result<Self, LedgerError> {
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
            return Err(LedgerError("schema is newer than this build".into()));
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
    fn get(&self, session: &str, key: &str) -> Result<Option<LedgerEntry>, LedgerError> {
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

    fn start(&self, session: &str, key: &str, tool: &str) -> Result<(), LedgerError> {
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
    ) -> Result<(), LedgerError> {
        finish_on(&self.conn(), session, key, tool, result)
    }

    fn finish_unsynced(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), LedgerError> {
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

    fn forget(&self, session: &str) -> Result<usize, LedgerError> {
        self.conn()
            .execute("DELETE FROM tool_ledger WHERE session = ?1", [session])
            .map_err(ledger_err)
    }

    fn sessions(&self) -> Result<Vec<String>, LedgerError> {
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
) -> Result<(), LedgerError> {
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

fn ledger_err(e: rusqlite::Error) -> LedgerError {
    // Driver messages name tables and constraints, never bound values, so
    // no args or keys leak through them.
    LedgerError(e.to_string())
}
