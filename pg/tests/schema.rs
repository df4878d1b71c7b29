//! The PostgreSQL schema against a real server: created once whoever
//! opens first, and a newer version refused before anything is written.

use agentsessions_journal::StoreError;
use agentsessions_pg::{PgJournal, PgOptions};

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn tables(url: &str) -> Vec<String> {
    raw(url)
        .await
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'public' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn two_daemons_opening_a_fresh_database_at_once_both_get_version_2() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let (a, b) = tokio::join!(
        PgJournal::open(&url, PgOptions::default()),
        PgJournal::open(&url, PgOptions::default())
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(
        tables(&url).await,
        [
            "agentsessions_schema",
            "deleted_sessions",
            "events",
            "harnesses",
            "notify_outbox",
            "reserved_harness_names",
            "session_leases",
            "session_prefixes",
            "sessions",
            "tool_ledger"
        ]
    );
    let version: i64 = raw(&url)
        .await
        .query_one("SELECT version FROM agentsessions_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, agentsessions_pg::schema::SCHEMA_VERSION);
}

#[tokio::test]
async fn a_newer_schema_is_refused_without_writes() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    raw(&url)
        .await
        .batch_execute(
            "CREATE TABLE agentsessions_schema (id int PRIMARY KEY, version bigint NOT NULL);
             INSERT INTO agentsessions_schema VALUES (1, 3);",
        )
        .await
        .unwrap();
    match PgJournal::open(&url, PgOptions::default()).await {
        Err(StoreError::UnsupportedSchema {
            found: 3,
            supported: 2,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        tables(&url).await,
        ["agentsessions_schema"],
        "nothing created"
    );
}
