//! `agentctl journal copy`: a journal moved between SQLite and PostgreSQL,
//! row for row.
//!
//! Invariant: the target ends up holding the source's rows verbatim: the
//! stored event blobs, hashes and fences byte for byte (never re-encoded
//! or re-hashed, so a journal written by the Go host keeps its exact
//! bytes), the session rows column for column, the harness registry, name
//! reservations and tombstones. The source is only read.
//!
//! Fork children are made self-contained: a child whose prefix the source
//! keeps once, under its parent (`session_prefixes`), gets those records
//! copied under its own uid, exactly as the parent stores them (the
//! same bytes and hashes a copying fork would have written), so the target
//! needs no references and a Go host reads it. Rows the source keeps only
//! for children of deleted sessions are not copied on their own.
//!
//! A copy can be interrupted anywhere and run again: records go in chunks,
//! each chunk one transaction, and a rerun continues each session after
//! the target's head, once it has checked that the target's last record is
//! the source's record at that seq (a target that diverges is refused,
//! nothing written to that session). Run it with no daemon writing to
//! either journal.

use std::ops::ControlFlow;
use std::path::Path;

use agentsessions_journal::{PrefixSpan, StoreError};
use agentsessions_machine::chain::{ChainError, ChainVerifier};
use agentsessions_proto::v1::{Event, LogRecord};
use agentsessions_sqlite::{SqliteJournal, SqliteOptions};
use prost::Message as _;
use rusqlite::OptionalExtension as _;

use crate::{PgJournal, PgOptions};

/// Why a copy or a verify stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("journal is schema v{found}; this build copies v1 and v2")]
    Schema { found: i64 },
    #[error(
        "session {session}: the target's record {seq} is not the source's; refusing to copy over it"
    )]
    Diverged { session: String, seq: i64 },
    #[error("session {session} seq {seq}: undecodable event: {reason}")]
    Decode {
        session: String,
        seq: i64,
        reason: String,
    },
    #[error("session {session}: {cause}")]
    Chain { session: String, cause: ChainError },
    #[error("copy stopped by the caller")]
    Stopped,
}

/// How far a copy has come, reported after every chunk.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// Sessions whose rows and records are in the target.
    pub sessions: u64,
    /// Records written by this run.
    pub records_copied: u64,
    /// Records the target already held (an earlier, interrupted run).
    pub records_present: u64,
    pub harnesses: u64,
    pub reservations: u64,
    pub tombstones: u64,
}

/// What `verify` found: every session's chain intact.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VerifyReport {
    pub sessions: u64,
    pub records: u64,
}

/// Records per chunk (and per transaction) of a copy; sessions per page.
pub const CHUNK: usize = 500;

/// A `sessions` row, every column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub session: String,
    pub fence: i64,
    pub project: String,
    pub name: String,
    pub harness: String,
    pub model: String,
    pub parent_uid: String,
    pub fork_seq: i64,
    pub compute_state: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub labels: String,
    pub annotations: String,
    pub origin: String,
    pub identity: String,
}

/// An `events` row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub seq: i64,
    pub prev_hash: String,
    pub hash: String,
    pub fence: i64,
    pub event: Vec<u8>,
}

/// A `harnesses` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessRawRow {
    pub name: String,
    pub uid: String,
    pub spec: String,
    pub spec_digest: String,
    pub state: String,
    pub retire_reason: String,
    pub retired_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A `deleted_sessions` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TombstoneRow {
    pub session: String,
    pub deleted_at: i64,
    pub records: i64,
    pub principal: String,
}

/// Whether `spec` names a PostgreSQL journal rather than a SQLite file.
pub fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

const SESSION_COLS: &str = "session, fence, project, name, harness, model, parent_uid, fork_seq, \
     compute_state, created_at, updated_at, labels, annotations, origin, identity";

const UPSERT_SESSION: &str = "INSERT INTO sessions(session, fence, project, name, harness, model, \
     parent_uid, fork_seq, compute_state, created_at, updated_at, labels, annotations, origin, identity) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
     ON CONFLICT (session) DO UPDATE SET fence = excluded.fence, project = excluded.project, \
     name = excluded.name, harness = excluded.harness, model = excluded.model, \
     parent_uid = excluded.parent_uid, fork_seq = excluded.fork_seq, \
     compute_state = excluded.compute_state, created_at = excluded.created_at, \
     updated_at = excluded.updated_at, labels = excluded.labels, annotations = excluded.annotations, \
     origin = excluded.origin, identity = excluded.identity";

const UPSERT_HARNESS: &str = "INSERT INTO harnesses(name, uid, spec, spec_digest, state, \
     retire_reason, retired_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (name) DO UPDATE SET uid = excluded.uid, spec = excluded.spec, \
     spec_digest = excluded.spec_digest, state = excluded.state, retire_reason = excluded.retire_reason, \
     retired_at = excluded.retired_at, created_at = excluded.created_at, updated_at = excluded.updated_at";

const INSERT_RESERVED: &str = "INSERT INTO reserved_harness_names(name, reserved_at) VALUES ($1, $2) \
     ON CONFLICT (name) DO NOTHING";

const INSERT_TOMBSTONE: &str = "INSERT INTO deleted_sessions(session, deleted_at, records, principal) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (session) DO NOTHING";

const INSERT_EVENT: &str = "INSERT INTO events(session, seq, prev_hash, hash, fence, event) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// SQLite spells numbered parameters `?N`.
fn sqlite_sql(sql: &str) -> String {
    sql.replace('$', "?")
}

/// One side of a copy, read and written at the row level.
pub enum Side {
    Sqlite(rusqlite::Connection),
    Postgres(tokio_postgres::Client),
}

impl Side {
    /// Opens a journal to read: a SQLite file read-only (a Go host's v1
    /// or v2 file too), or a PostgreSQL database this build migrated
    /// (over TLS verified against `ca`, if given).
    pub async fn source(spec: &str, ca: Option<&Path>) -> Result<Self, CopyError> {
        if is_postgres(spec) {
            let client = connect(spec, ca).await?;
            let found: i64 = client
                .query_one("SELECT version FROM agentsessions_schema", &[])
                .await?
                .get(0);
            if found != crate::schema::SCHEMA_VERSION {
                return Err(CopyError::Schema { found });
            }
            return Ok(Side::Postgres(client));
        }
        let conn = rusqlite::Connection::open_with_flags(
            spec,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if !(1..=2).contains(&found) {
            return Err(CopyError::Schema { found });
        }
        Ok(Side::Sqlite(conn))
    }

    /// Opens (creating or migrating it first, through the store itself) a
    /// journal to write.
    pub async fn target(spec: &str, ca: Option<&Path>) -> Result<Self, CopyError> {
        if is_postgres(spec) {
            let options = PgOptions {
                pool_size: 1,
                group_commit: None,
                ca_file: ca.map(Path::to_path_buf),
                ..PgOptions::default()
            };
            drop(PgJournal::open(spec, options).await?);
            return Ok(Side::Postgres(connect(spec, ca).await?));
        }
        drop(SqliteJournal::open(
            Path::new(spec),
            SqliteOptions::default(),
        )?);
        let conn = rusqlite::Connection::open(spec)?;
        agentsessions_sqlite::schema::configure(&conn)?;
        Ok(Side::Sqlite(conn))
    }

    fn has_table(&self, table: &str) -> Result<bool, CopyError> {
        match self {
            // A Go v1 file has no registry and no tombstones.
            Side::Sqlite(c) => Ok(c
                .query_row(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table],
                    |_| Ok(()),
                )
                .optional()?
                .is_some()),
            Side::Postgres(_) => Ok(true),
        }
    }

    /// Up to [`CHUNK`] session rows after `after`, in bytewise uid order.
    pub async fn sessions_after(&self, after: &str) -> Result<Vec<SessionRow>, CopyError> {
        let sql = format!(
            "SELECT {SESSION_COLS} FROM sessions WHERE session > $1 ORDER BY session LIMIT $2"
        );
        let limit = CHUNK as i64;
        match self {
            Side::Sqlite(c) => {
                let mut stmt = c.prepare_cached(&sqlite_sql(&sql))?;
                let rows = stmt.query_map(rusqlite::params![after, limit], |r| {
                    Ok(SessionRow {
                        session: r.get(0)?,
                        fence: r.get(1)?,
                        project: r.get(2)?,
                        name: r.get(3)?,
                        harness: r.get(4)?,
                        model: r.get(5)?,
                        parent_uid: r.get(6)?,
                        fork_seq: r.get(7)?,
                        compute_state: r.get(8)?,
                        created_at: r.get(9)?,
                        updated_at: r.get(10)?,
                        labels: r.get(11)?,
                        annotations: r.get(12)?,
                        origin: r.get(13)?,
                        identity: r.get(14)?,
                    })
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            Side::Postgres(c) => Ok(c
                .query(&sql, &[&after, &limit])
                .await?
                .iter()
                .map(|r| SessionRow {
                    session: r.get(0),
                    fence: r.get(1),
                    project: r.get(2),
                    name: r.get(3),
                    harness: r.get(4),
                    model: r.get(5),
                    parent_uid: r.get(6),
                    fork_seq: r.get(7),
                    compute_state: r.get(8),
                    created_at: r.get(9),
                    updated_at: r.get(10),
                    labels: r.get(11),
                    annotations: r.get(12),
                    origin: r.get(13),
                    identity: r.get(14),
                })
                .collect()),
        }
    }

    /// Up to [`CHUNK`] records of `session`'s journal after seq `after`,
    /// in order. A fork child's prefix is read from the sessions whose
    /// rows it refers to, so what comes out is the whole journal, as
    /// self-contained as a copied one.
    pub async fn events_after(
        &self,
        session: &str,
        after: i64,
    ) -> Result<Vec<EventRow>, CopyError> {
        for span in self.spans(session).await? {
            if span.last <= after {
                continue;
            }
            let rows = self.rows_after(&span.owner, after, span.last).await?;
            // Rows missing from a span fall through to the next part; the
            // gap then shows in the chain check.
            if !rows.is_empty() {
                return Ok(rows);
            }
        }
        self.rows_after(session, after, i64::MAX).await
    }

    /// The spans of `session`'s prefix (none in a journal without the
    /// table: a Go host's, or one written before forks referred).
    async fn spans(&self, session: &str) -> Result<Vec<PrefixSpan>, CopyError> {
        match self {
            Side::Sqlite(c) => {
                if !self.has_table("session_prefixes")? {
                    return Ok(Vec::new());
                }
                Ok(agentsessions_sqlite::spans(c, session)?)
            }
            Side::Postgres(c) => {
                let exists: bool = c
                    .query_one("SELECT to_regclass('session_prefixes') IS NOT NULL", &[])
                    .await?
                    .get(0);
                if !exists {
                    return Ok(Vec::new());
                }
                Ok(crate::ops::spans(c, session).await?)
            }
        }
    }

    /// Up to [`CHUNK`] of the rows `holder` stores with `after < seq <= upto`.
    async fn rows_after(
        &self,
        holder: &str,
        after: i64,
        upto: i64,
    ) -> Result<Vec<EventRow>, CopyError> {
        let sql = "SELECT seq, prev_hash, hash, fence, event FROM events \
                   WHERE session = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4";
        let limit = CHUNK as i64;
        match self {
            Side::Sqlite(c) => {
                let mut stmt = c.prepare_cached(&sqlite_sql(sql))?;
                let rows = stmt.query_map(rusqlite::params![holder, after, upto, limit], |r| {
                    Ok(EventRow {
                        seq: r.get(0)?,
                        prev_hash: r.get(1)?,
                        hash: r.get(2)?,
                        fence: r.get(3)?,
                        event: r.get(4)?,
                    })
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            Side::Postgres(c) => Ok(c
                .query(sql, &[&holder, &after, &upto, &limit])
                .await?
                .iter()
                .map(|r| EventRow {
                    seq: r.get(0),
                    prev_hash: r.get(1),
                    hash: r.get(2),
                    fence: r.get(3),
                    event: r.get(4),
                })
                .collect()),
        }
    }

    /// The session's last record: (seq, hash), or `None` when it has none.
    async fn tail(&self, session: &str) -> Result<Option<(i64, String)>, CopyError> {
        let sql = "SELECT seq, hash FROM events WHERE session = $1 ORDER BY seq DESC LIMIT 1";
        match self {
            Side::Sqlite(c) => Ok(c
                .query_row(&sqlite_sql(sql), [session], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?),
            Side::Postgres(c) => Ok(c
                .query_opt(sql, &[&session])
                .await?
                .map(|r| (r.get(0), r.get(1)))),
        }
    }

    async fn hash_at(&self, session: &str, seq: i64) -> Result<Option<String>, CopyError> {
        let spans = self.spans(session).await?;
        let holder = spans
            .iter()
            .find(|s| s.first <= seq && seq <= s.last)
            .map_or(session, |s| s.owner.as_str());
        let sql = "SELECT hash FROM events WHERE session = $1 AND seq = $2";
        match self {
            Side::Sqlite(c) => Ok(c
                .query_row(&sqlite_sql(sql), rusqlite::params![holder, seq], |r| {
                    r.get(0)
                })
                .optional()?),
            Side::Postgres(c) => Ok(c.query_opt(sql, &[&holder, &seq]).await?.map(|r| r.get(0))),
        }
    }

    pub async fn harnesses(&self) -> Result<Vec<HarnessRawRow>, CopyError> {
        if !self.has_table("harnesses")? {
            return Ok(Vec::new());
        }
        let sql = "SELECT name, uid, spec, spec_digest, state, retire_reason, retired_at, \
                   created_at, updated_at FROM harnesses ORDER BY name";
        let of = |v: [String; 6], n: [i64; 3]| {
            let [name, uid, spec, spec_digest, state, retire_reason] = v;
            HarnessRawRow {
                name,
                uid,
                spec,
                spec_digest,
                state,
                retire_reason,
                retired_at: n[0],
                created_at: n[1],
                updated_at: n[2],
            }
        };
        match self {
            Side::Sqlite(c) => {
                let mut stmt = c.prepare(sql)?;
                let rows = stmt.query_map([], |r| {
                    let v = [
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ];
                    Ok(of(v, [r.get(6)?, r.get(7)?, r.get(8)?]))
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            Side::Postgres(c) => Ok(c
                .query(sql, &[])
                .await?
                .iter()
                .map(|r| {
                    let v = [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)];
                    of(v, [r.get(6), r.get(7), r.get(8)])
                })
                .collect()),
        }
    }

    pub async fn reservations(&self) -> Result<Vec<(String, i64)>, CopyError> {
        if !self.has_table("reserved_harness_names")? {
            return Ok(Vec::new());
        }
        let sql = "SELECT name, reserved_at FROM reserved_harness_names ORDER BY name";
        match self {
            Side::Sqlite(c) => {
                let mut stmt = c.prepare(sql)?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            Side::Postgres(c) => Ok(c
                .query(sql, &[])
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()),
        }
    }

    pub async fn tombstones(&self) -> Result<Vec<TombstoneRow>, CopyError> {
        if !self.has_table("deleted_sessions")? {
            return Ok(Vec::new());
        }
        let sql =
            "SELECT session, deleted_at, records, principal FROM deleted_sessions ORDER BY session";
        let of = |session, deleted_at, records, principal| TombstoneRow {
            session,
            deleted_at,
            records,
            principal,
        };
        match self {
            Side::Sqlite(c) => {
                let mut stmt = c.prepare(sql)?;
                let rows =
                    stmt.query_map([], |r| Ok(of(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            Side::Postgres(c) => Ok(c
                .query(sql, &[])
                .await?
                .iter()
                .map(|r| of(r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect()),
        }
    }

    async fn put_session(&self, s: &SessionRow) -> Result<(), CopyError> {
        match self {
            Side::Sqlite(c) => {
                c.prepare_cached(&sqlite_sql(UPSERT_SESSION))?
                    .execute(rusqlite::params![
                        s.session,
                        s.fence,
                        s.project,
                        s.name,
                        s.harness,
                        s.model,
                        s.parent_uid,
                        s.fork_seq,
                        s.compute_state,
                        s.created_at,
                        s.updated_at,
                        s.labels,
                        s.annotations,
                        s.origin,
                        s.identity
                    ])?;
            }
            Side::Postgres(c) => {
                c.execute(
                    UPSERT_SESSION,
                    &[
                        &s.session,
                        &s.fence,
                        &s.project,
                        &s.name,
                        &s.harness,
                        &s.model,
                        &s.parent_uid,
                        &s.fork_seq,
                        &s.compute_state,
                        &s.created_at,
                        &s.updated_at,
                        &s.labels,
                        &s.annotations,
                        &s.origin,
                        &s.identity,
                    ],
                )
                .await?;
            }
        }
        Ok(())
    }

    /// One chunk of records, in one transaction.
    async fn put_events(&mut self, session: &str, rows: &[EventRow]) -> Result<(), CopyError> {
        match self {
            Side::Sqlite(c) => {
                let tx = c.transaction()?;
                {
                    let mut stmt = tx.prepare_cached(&sqlite_sql(INSERT_EVENT))?;
                    for e in rows {
                        stmt.execute(rusqlite::params![
                            session,
                            e.seq,
                            e.prev_hash,
                            e.hash,
                            e.fence,
                            e.event
                        ])?;
                    }
                }
                tx.commit()?;
            }
            Side::Postgres(c) => {
                let tx = c.transaction().await?;
                let insert = tx.prepare(INSERT_EVENT).await?;
                for e in rows {
                    tx.execute(
                        &insert,
                        &[&session, &e.seq, &e.prev_hash, &e.hash, &e.fence, &e.event],
                    )
                    .await?;
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }

    async fn execute(&self, sql: &str, params: Params<'_>) -> Result<(), CopyError> {
        match self {
            Side::Sqlite(c) => {
                let values: Vec<rusqlite::types::Value> = params
                    .iter()
                    .map(|p| match p {
                        Param::Text(s) => rusqlite::types::Value::Text((*s).to_owned()),
                        Param::Int(i) => rusqlite::types::Value::Integer(*i),
                    })
                    .collect();
                c.prepare_cached(&sqlite_sql(sql))?
                    .execute(rusqlite::params_from_iter(values))?;
            }
            Side::Postgres(c) => {
                let values: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|p| match p {
                        Param::Text(s) => s as &(dyn tokio_postgres::types::ToSql + Sync),
                        Param::Int(i) => i as &(dyn tokio_postgres::types::ToSql + Sync),
                    })
                    .collect();
                c.execute(sql, &values).await?;
            }
        }
        Ok(())
    }
}

/// A registry or tombstone column value, for the few small upserts.
enum Param<'a> {
    Text(&'a str),
    Int(i64),
}

type Params<'a> = &'a [Param<'a>];

async fn connect(url: &str, ca: Option<&Path>) -> Result<tokio_postgres::Client, CopyError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::InvalidArgument(format!("journal url: {e}")))?;
    let connector = crate::tls::connector(&mut config, ca)?;
    Ok(crate::tls::connect(&config, &connector).await?)
}

/// Copies every row of `from` into `to`; `progress` sees the report after
/// every chunk and may stop the copy ([`CopyError::Stopped`]; run it again
/// to finish).
pub async fn copy(
    from: &Side,
    to: &mut Side,
    mut progress: impl FnMut(&CopyReport) -> ControlFlow<()>,
) -> Result<CopyReport, CopyError> {
    let mut report = CopyReport::default();
    for h in from.harnesses().await? {
        let params = [
            Param::Text(&h.name),
            Param::Text(&h.uid),
            Param::Text(&h.spec),
            Param::Text(&h.spec_digest),
            Param::Text(&h.state),
            Param::Text(&h.retire_reason),
            Param::Int(h.retired_at),
            Param::Int(h.created_at),
            Param::Int(h.updated_at),
        ];
        to.execute(UPSERT_HARNESS, &params).await?;
        report.harnesses += 1;
    }
    for (name, at) in from.reservations().await? {
        to.execute(INSERT_RESERVED, &[Param::Text(&name), Param::Int(at)])
            .await?;
        report.reservations += 1;
    }
    for t in from.tombstones().await? {
        let params = [
            Param::Text(&t.session),
            Param::Int(t.deleted_at),
            Param::Int(t.records),
            Param::Text(&t.principal),
        ];
        to.execute(INSERT_TOMBSTONE, &params).await?;
        report.tombstones += 1;
    }
    let mut after = String::new();
    loop {
        let page = from.sessions_after(&after).await?;
        let Some(last) = page.last() else { break };
        after = last.session.clone();
        for row in &page {
            copy_session(from, to, row, &mut report, &mut progress).await?;
        }
    }
    Ok(report)
}

async fn copy_session(
    from: &Side,
    to: &mut Side,
    row: &SessionRow,
    report: &mut CopyReport,
    progress: &mut impl FnMut(&CopyReport) -> ControlFlow<()>,
) -> Result<(), CopyError> {
    let session = &row.session;
    // Resume after the target's head, once it is known to be ours.
    let mut head = 0;
    if let Some((seq, hash)) = to.tail(session).await? {
        if from.hash_at(session, seq).await?.as_deref() != Some(hash.as_str()) {
            return Err(CopyError::Diverged {
                session: session.clone(),
                seq,
            });
        }
        head = seq;
        report.records_present += seq as u64;
    }
    to.put_session(row).await?;
    loop {
        let chunk = from.events_after(session, head).await?;
        let Some(last) = chunk.last() else { break };
        assert!(last.seq > head, "records come after the head");
        head = last.seq;
        to.put_events(session, &chunk).await?;
        report.records_copied += chunk.len() as u64;
        if progress(report).is_break() {
            return Err(CopyError::Stopped);
        }
    }
    report.sessions += 1;
    Ok(())
}

/// Checks every session's chain in `journal`: seqs from 1, links, and
/// each content hash recomputed from the stored event.
pub async fn verify(journal: &Side) -> Result<VerifyReport, CopyError> {
    let mut report = VerifyReport::default();
    let mut after = String::new();
    loop {
        let page = journal.sessions_after(&after).await?;
        let Some(last) = page.last() else { break };
        after = last.session.clone();
        for row in &page {
            let session = &row.session;
            let mut verifier = ChainVerifier::new();
            let mut head = 0;
            loop {
                let chunk = journal.events_after(session, head).await?;
                let Some(last) = chunk.last() else { break };
                head = last.seq;
                for e in chunk {
                    let event =
                        Event::decode(e.event.as_slice()).map_err(|err| CopyError::Decode {
                            session: session.clone(),
                            seq: e.seq,
                            reason: err.to_string(),
                        })?;
                    let record = LogRecord {
                        seq: e.seq,
                        prev_hash: e.prev_hash,
                        content_hash: e.hash,
                        fence: e.fence,
                        event: Some(event),
                    };
                    verifier.push(&record).map_err(|cause| CopyError::Chain {
                        session: session.clone(),
                        cause,
                    })?;
                    report.records += 1;
                }
            }
            report.sessions += 1;
        }
    }
    Ok(report)
}
