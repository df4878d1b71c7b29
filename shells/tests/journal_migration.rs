//! Schema versions: v1 -> v2 migration, refusal of unknown versions, and
//! schema identity between migrated and fresh databases.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use agentsessions_shells::journal::encode::encode_event;
use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions, schema};
use agentsessions_shells::journal::{JournalStore, StoreError};
use common::*;
use rusqlite::{Connection, params};

/// The Go host's v1 layout, written independently (different formatting from
/// ours, as a real Go-written file would be).
const GO_STYLE_V1: &str = "CREATE TABLE IF NOT EXISTS sessions (session TEXT PRIMARY KEY, fence INTEGER NOT NULL DEFAULT 0, project TEXT NOT NULL DEFAULT '', name TEXT NOT NULL DEFAULT '', harness TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', parent_uid TEXT NOT NULL DEFAULT '', fork_seq INTEGER NOT NULL DEFAULT 0, compute_state TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL DEFAULT 0, labels TEXT NOT NULL DEFAULT '', annotations TEXT NOT NULL DEFAULT '', origin TEXT NOT NULL DEFAULT '', identity TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS events (session TEXT NOT NULL, seq INTEGER NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL, fence INTEGER NOT NULL, event BLOB NOT NULL, PRIMARY KEY (session, seq));
CREATE INDEX IF NOT EXISTS sessions_project_created ON sessions(project, created_at DESC, session);";

/// Builds a v1 database holding two chained sessions: "p" (harness "echo"
/// in its row) and "q" (an EXECUTION_START naming harness "remote-h").
fn make_v1(path: &Path, ddl: &str) -> Vec<(String, Vec<(i64, String)>)> {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(ddl).unwrap();
    conn.execute_batch("PRAGMA user_version = 1").unwrap();
    let chains = [
        ("p", "echo", vec![input("hello"), input("again")]),
        (
            "q",
            "",
            vec![execution_start("remote-h"), input("x"), execution_start("")],
        ),
    ];
    let mut out = Vec::new();
    for (session, harness, events) in chains {
        conn.execute(
            "INSERT INTO sessions(session, fence, project, harness, created_at, updated_at) VALUES (?1, 1, 'default', ?2, 5, 5)",
            params![session, harness],
        )
        .unwrap();
        let mut prev = String::new();
        let mut hashes = Vec::new();
        for (i, ev) in events.iter().enumerate() {
            let seq = i as i64 + 1;
            let hash = agentsessions_machine::canon::content_hash(&prev, seq, ev).unwrap();
            conn.execute(
                "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES (?1, ?2, ?3, ?4, 1, ?5)",
                params![session, seq, prev, hash, encode_event(ev)],
            )
            .unwrap();
            hashes.push((seq, hash.clone()));
            prev = hash;
        }
        out.push((session.to_owned(), hashes));
    }
    out
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

fn reserved(path: &Path) -> BTreeSet<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM reserved_harness_names")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Column and index shape, independent of DDL formatting.
fn shape(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut out = Vec::new();
    let objects: Vec<(String, String, String)> = {
        let mut stmt = conn
            .prepare("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    for (ty, name, table) in objects {
        out.push(format!("{ty} {name} on {table}"));
        if ty == "table" {
            let mut stmt = conn.prepare(&format!("PRAGMA table_info({name})")).unwrap();
            let cols = stmt
                .query_map([], |r| {
                    Ok(format!(
                        "  col {} {} notnull={} default={:?} pk={}",
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, i64>(5)?
                    ))
                })
                .unwrap();
            out.extend(cols.map(Result::unwrap));
        } else {
            let mut stmt = conn
                .prepare(&format!("PRAGMA index_xinfo({name})"))
                .unwrap();
            let cols = stmt
                .query_map([], |r| {
                    Ok(format!(
                        "  key {:?} desc={} key={}",
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, i64>(5)?
                    ))
                })
                .unwrap();
            out.extend(cols.map(Result::unwrap));
        }
    }
    out
}

fn sqlite_master(path: &Path) -> Vec<(String, String, Option<String>)> {
    schema::schema_text(&Connection::open(path).unwrap()).unwrap()
}

#[tokio::test]
async fn v1_migrates_to_v2_with_chains_intact_and_names_reserved() {
    for ddl in [schema::SCHEMA_V1, GO_STYLE_V1] {
        let db = TempDb::new();
        let chains = make_v1(&db.path(), ddl);
        let store = db.open();
        assert_eq!(user_version(&db.path()), 2);
        for (session, hashes) in &chains {
            store.verify(session).await.unwrap();
            let got: Vec<(i64, String)> = store
                .read(session, 1, 0)
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.seq, r.content_hash))
                .collect();
            assert_eq!(&got, hashes);
        }
        assert_eq!(
            reserved(&db.path()),
            BTreeSet::from(["echo".to_owned(), "remote-h".to_owned()])
        );
        // The chains continue after the migration.
        store
            .append(batch("p", 2, 1, vec![input("after")]))
            .await
            .unwrap();
        store.verify("p").await.unwrap();
        drop(store);

        let fresh = TempDb::new();
        drop(fresh.open());
        assert_eq!(shape(&db.path()), shape(&fresh.path()));
        if ddl == schema::SCHEMA_V1 {
            assert_eq!(sqlite_master(&db.path()), sqlite_master(&fresh.path()));
        }
    }
}

#[test]
fn fresh_schema_has_the_reference_layout() {
    let db = TempDb::new();
    drop(db.open());
    let shape = shape(&db.path());
    let objects: Vec<&str> = shape
        .iter()
        .filter(|l| !l.starts_with("  "))
        .map(String::as_str)
        .collect();
    assert_eq!(
        objects,
        [
            // Outside the Go schema, with their tables below.
            "index notify_outbox_due on notify_outbox",
            "index session_prefixes_owner on session_prefixes",
            "index sessions_harness on sessions",
            "index sessions_project_created on sessions",
            "table deleted_sessions on deleted_sessions",
            "table events on events",
            "table harnesses on harnesses",
            // The notification outbox: outside the Go schema, like the
            // tombstones (a Go host ignores it).
            "table notify_outbox on notify_outbox",
            "table reserved_harness_names on reserved_harness_names",
            // Outside the Go schema (a Go host ignores it), like the
            // tombstones.
            "table session_leases on session_leases",
            // Fork children's references to their parents' records.
            "table session_prefixes on session_prefixes",
            "table sessions on sessions",
        ]
    );
    let conn = Connection::open(db.path()).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(user_version(&db.path()), 2);
    assert!(shape.contains(&"  key Some(\"created_at\") desc=1 key=1".to_owned()));
}

#[test]
fn undecodable_event_fails_the_migration_and_keeps_v1() {
    let db = TempDb::new();
    make_v1(&db.path(), schema::SCHEMA_V1);
    Connection::open(db.path())
        .unwrap()
        .execute(
            "UPDATE events SET event = x'ffff' WHERE session = 'q' AND seq = 2",
            [],
        )
        .unwrap();
    match SqliteJournal::open(db.path(), SqliteOptions::default()) {
        Err(StoreError::Migration {
            from: 1,
            to: 2,
            reason,
        }) => assert!(reason.contains("seq 2"), "{reason}"),
        other => panic!("expected a migration failure, got {other:?}"),
    }
    assert_eq!(user_version(&db.path()), 1);
    let conn = Connection::open(db.path()).unwrap();
    assert!(!schema::has_table(&conn, "harnesses").unwrap());
    assert!(!schema::has_table(&conn, "reserved_harness_names").unwrap());
    let events: i64 = conn
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(events, 5);
}

#[test]
fn unknown_versions_are_refused_without_writes() {
    for version in [3, 99, -1] {
        let db = TempDb::new();
        {
            let conn = Connection::open(db.path()).unwrap();
            conn.execute_batch("CREATE TABLE future (x); INSERT INTO future VALUES (1);")
                .unwrap();
            conn.execute_batch(&format!("PRAGMA user_version = {version}"))
                .unwrap();
        }
        let before = std::fs::read(db.path()).unwrap();
        match SqliteJournal::open(db.path(), SqliteOptions::default()) {
            Err(StoreError::UnsupportedSchema {
                found,
                supported: 2,
            }) => assert_eq!(found, version),
            other => panic!("v{version} must be refused, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(db.path()).unwrap(),
            before,
            "v{version}: file changed"
        );
        let wal = db.dir.path().join("journal.db-wal");
        assert!(!wal.exists(), "v{version}: no WAL may be created");
        let msg = StoreError::UnsupportedSchema {
            found: version,
            supported: 2,
        }
        .to_string();
        assert_eq!(
            msg,
            format!("database is v{version}, this build understands v2")
        );
    }
}

#[test]
fn reopening_a_v2_database_is_a_no_op() {
    let db = TempDb::new();
    drop(db.open());
    let before = sqlite_master(&db.path());
    drop(db.open());
    assert_eq!(sqlite_master(&db.path()), before);
    assert_eq!(user_version(&db.path()), 2);
}
