//! The tool ledger in the journal's database, so that every daemon on it
//! answers a (session, idempotency key) from the same entries: a tool call
//! one daemon finished is never executed again by another that resumes the
//! turn (`agentsessions_journal::ledger` has the rules; this is the
//! same table, statement for statement).
//!
//! Invariant: `start` never overwrites an entry and `finish` only turns a
//! `started` entry into `done` (or creates one), so the first finished
//! result is the one every later call gets, whichever daemon asks.

use agentsessions_journal::ledger::{LedgerEntry, LedgerError, LedgerStore, entry_of};
use agentsessions_proto::v1::ToolResult;
use deadpool_postgres::Pool;
use prost::Message as _;

/// The ledger table; created with the schema, on every open.
pub(crate) const TABLE: &str = "
CREATE TABLE IF NOT EXISTS tool_ledger (
    session         text COLLATE \"C\" NOT NULL,
    idempotency_key text NOT NULL,
    tool            text NOT NULL,
    state           text NOT NULL CHECK (state IN ('started', 'done')),
    result          bytea,
    PRIMARY KEY (session, idempotency_key)
);
";

/// A [`LedgerStore`] on the journal's pool. Its calls block the calling
/// thread (the executor makes them from a blocking one) on the runtime the
/// journal was opened on.
pub struct PgLedger {
    pool: Pool,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLedger").finish_non_exhaustive()
    }
}

fn ledger_err(e: impl std::fmt::Display) -> LedgerError {
    // Driver messages name tables and constraints, never bound values.
    LedgerError(e.to_string())
}

impl PgLedger {
    pub(crate) fn new(pool: Pool) -> Self {
        Self {
            pool,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    fn run<T>(
        &self,
        f: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, LedgerError> {
        self.runtime.block_on(async {
            let conn = self.pool.get().await.map_err(ledger_err)?;
            f(&conn).await.map_err(ledger_err)
        })
    }
}

impl LedgerStore for PgLedger {
    fn get(&self, session: &str, key: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        let row = self.run(async |c| {
            c.query_opt(
                "SELECT tool, state, result FROM tool_ledger
                 WHERE session = $1 AND idempotency_key = $2",
                &[&session, &key],
            )
            .await
        })?;
        let Some(row) = row else { return Ok(None) };
        let result: Option<Vec<u8>> = row.get(2);
        entry_of(row.get(0), row.get::<_, &str>(1), result.as_deref()).map(Some)
    }

    fn start(&self, session: &str, key: &str, tool: &str) -> Result<(), LedgerError> {
        self.run(async |c| {
            c.execute(
                "INSERT INTO tool_ledger (session, idempotency_key, tool, state)
                 VALUES ($1, $2, $3, 'started')
                 ON CONFLICT (session, idempotency_key) DO NOTHING",
                &[&session, &key, &tool],
            )
            .await
        })?;
        Ok(())
    }

    fn finish(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), LedgerError> {
        let blob = result.encode_to_vec();
        self.run(async |c| {
            c.execute(
                "INSERT INTO tool_ledger (session, idempotency_key, tool, state, result)
                 VALUES ($1, $2, $3, 'done', $4)
                 ON CONFLICT (session, idempotency_key) DO UPDATE
                 SET state = 'done', result = excluded.result
                 WHERE tool_ledger.state = 'started'",
                &[&session, &key, &tool, &blob],
            )
            .await
        })?;
        Ok(())
    }

    fn forget(&self, session: &str) -> Result<usize, LedgerError> {
        let n = self.run(async |c| {
            c.execute("DELETE FROM tool_ledger WHERE session = $1", &[&session])
                .await
        })?;
        Ok(usize::try_from(n).expect("a row count fits usize"))
    }

    fn sessions(&self) -> Result<Vec<String>, LedgerError> {
        let rows = self.run(async |c| {
            c.query(
                "SELECT DISTINCT session FROM tool_ledger ORDER BY session",
                &[],
            )
            .await
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
