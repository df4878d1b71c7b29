//! The PostgreSQL schema: the SQLite schema v2 table for table and column
//! for column (`bigint` for INTEGER, `bytea` for BLOB), plus the tombstone
//! table, and a one-row version table standing in for `user_version`. Key
//! columns compare bytewise (`COLLATE "C"`), as SQLite's do, so keyset
//! pages and retention scans walk the same order on both backends.
//!
//! Invariant: a database whose version is newer than [`SCHEMA_VERSION`] is
//! refused before anything is written, and a migration is all or nothing
//! (one transaction; PostgreSQL DDL is transactional).

use tokio_postgres::Client;

use agentsessions_journal::StoreError;

use crate::backend;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 2;

/// Everything of version 2. Each statement is idempotent, so a migration
/// that a concurrent daemon already ran is a no-op.
const SCHEMA_V2: &str = r#"
CREATE TABLE IF NOT EXISTS sessions (
    session       text COLLATE "C" PRIMARY KEY,
    fence         bigint NOT NULL DEFAULT 0,
    project       text NOT NULL DEFAULT '',
    name          text NOT NULL DEFAULT '',
    harness       text NOT NULL DEFAULT '',
    model         text NOT NULL DEFAULT '',
    parent_uid    text NOT NULL DEFAULT '',
    fork_seq      bigint NOT NULL DEFAULT 0,
    compute_state text NOT NULL DEFAULT '',
    created_at    bigint NOT NULL DEFAULT 0,
    updated_at    bigint NOT NULL DEFAULT 0,
    labels        text NOT NULL DEFAULT '',
    annotations   text NOT NULL DEFAULT '',
    origin        text NOT NULL DEFAULT '',
    identity      text NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS events (
    session   text COLLATE "C" NOT NULL,
    seq       bigint NOT NULL,
    prev_hash text NOT NULL,
    hash      text NOT NULL,
    fence     bigint NOT NULL,
    event     bytea NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE INDEX IF NOT EXISTS sessions_project_created
    ON sessions(project, created_at DESC, session);
CREATE TABLE IF NOT EXISTS harnesses (
    name          text COLLATE "C" PRIMARY KEY,
    uid           text NOT NULL,
    spec          text NOT NULL,
    spec_digest   text NOT NULL,
    state         text NOT NULL,
    retire_reason text NOT NULL DEFAULT '',
    retired_at    bigint NOT NULL DEFAULT 0,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS reserved_harness_names (
    name        text COLLATE "C" PRIMARY KEY,
    reserved_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_harness ON sessions(harness);
CREATE TABLE IF NOT EXISTS deleted_sessions (
    session    text COLLATE "C" PRIMARY KEY,
    deleted_at bigint NOT NULL,
    records    bigint NOT NULL,
    principal  text NOT NULL DEFAULT ''
);
"#;

/// Session leases: outside the versioned (Go) schema, as in SQLite, and
/// created on every open. `expires_at` is in the database's clock.
pub(crate) const SESSION_LEASES: &str = r#"
CREATE TABLE IF NOT EXISTS session_leases (
    session    text COLLATE "C" PRIMARY KEY,
    owner      text NOT NULL,
    fence      bigint NOT NULL,
    expires_at bigint NOT NULL
);
"#;

/// Fork prefixes, as in SQLite (`sqlite/src/schema.rs`):
/// seqs `first_seq..=last_seq` of `session` are `owner`'s rows. Outside
/// the versioned schema and created on every open.
pub(crate) const SESSION_PREFIXES: &str = r#"
CREATE TABLE IF NOT EXISTS session_prefixes (
    session   text COLLATE "C" NOT NULL,
    first_seq bigint NOT NULL,
    last_seq  bigint NOT NULL,
    owner     text COLLATE "C" NOT NULL,
    PRIMARY KEY (session, first_seq)
);
CREATE INDEX IF NOT EXISTS session_prefixes_owner ON session_prefixes(owner, last_seq);
"#;

/// The notification outbox, as in SQLite (`sqlite/src/schema.rs`): one
/// row per committed record that announces something, inserted in the
/// append's transaction. Outside the versioned schema, created on every
/// open. Ids compare bytewise, so claims take rows in the same order on
/// both backends.
pub(crate) const NOTIFY_OUTBOX: &str = r#"
CREATE TABLE IF NOT EXISTS notify_outbox (
    event_id      text COLLATE "C" PRIMARY KEY,
    session       text COLLATE "C" NOT NULL,
    seq           bigint NOT NULL,
    kind          text NOT NULL,
    created_at    bigint NOT NULL,
    attempts      bigint NOT NULL DEFAULT 0,
    due_at        bigint NOT NULL,
    claimed_by    text NOT NULL DEFAULT '',
    claimed_until bigint NOT NULL DEFAULT 0,
    last_error    text NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS notify_outbox_due ON notify_outbox(due_at);
"#;

/// Brings the database to [`SCHEMA_VERSION`], or refuses a newer one
/// without writing.
pub async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(backend)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS agentsessions_schema (
             id int PRIMARY KEY CHECK (id = 1),
             version bigint NOT NULL
         )",
    )
    .await
    .map_err(backend)?;
    // The row lock orders concurrent migrations: the second one waits,
    // then finds the version written.
    tx.execute(
        "INSERT INTO agentsessions_schema(id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        &[],
    )
    .await
    .map_err(backend)?;
    let found: i64 = tx
        .query_one(
            "SELECT version FROM agentsessions_schema WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await
        .map_err(backend)?
        .get(0);
    if !(0..=SCHEMA_VERSION).contains(&found) {
        // Nothing of ours was written that outlives the rollback.
        drop(tx);
        return Err(StoreError::UnsupportedSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < SCHEMA_VERSION {
        tx.batch_execute(SCHEMA_V2).await.map_err(backend)?;
        tx.execute(
            "UPDATE agentsessions_schema SET version = $1 WHERE id = 1",
            &[&SCHEMA_VERSION],
        )
        .await
        .map_err(backend)?;
    }
    // Not part of the versioned schema (SQLite keeps the ledger in a file
    // of its own): created on every open, so a v2 database made before the
    // ledger moved here gets it too.
    tx.batch_execute(crate::ledger::TABLE)
        .await
        .map_err(backend)?;
    tx.batch_execute(SESSION_LEASES).await.map_err(backend)?;
    tx.batch_execute(SESSION_PREFIXES).await.map_err(backend)?;
    tx.batch_execute(NOTIFY_OUTBOX).await.map_err(backend)?;
    tx.commit().await.map_err(backend)?;
    Ok(())
}
