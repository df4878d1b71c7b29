//! `journal copy` against a real server: the Go fixtures (with their Go
//! hashes), a long session, registry rows and a tombstone go from SQLite to
//! PostgreSQL and back byte for byte; an interrupted copy is finished by a
//! rerun, and a target that diverges is refused.

use std::ops::ControlFlow;
use std::path::Path;

use agentsessions_journal::{AppendBatch, ForkBatch, JournalStore};
use agentsessions_machine::events;
use agentsessions_machine::journal::projection::batch_compute_state;
use agentsessions_pg::copy::{self, CopyError, EventRow, Side};
use agentsessions_pg::{PgJournal, PgOptions};
use agentsessions_proto::v1::LogRecord;
use agentsessions_sqlite::{SqliteJournal, SqliteOptions};
use agentsessions_testkit::interop::{fixture_dir, parse_go_records};

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

const LONG: &str = "aaa-long";
const LONG_RECORDS: i64 = 1_200;

fn fixtures() -> Vec<(String, Vec<LogRecord>)> {
    let dir = fixture_dir();
    assert!(
        dir.is_dir(),
        "Go fixtures missing at {} (../shared beside the repository)",
        dir.display()
    );
    let mut out: Vec<(String, Vec<LogRecord>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_str().unwrap().to_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            (name, parse_go_records(&text).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A SQLite journal holding every Go fixture (its hashes checked on the
/// way in), a long session, a harness, a reservation and a tombstone.
async fn source(path: &Path) -> usize {
    let store = SqliteJournal::open(path, SqliteOptions::default()).unwrap();
    let all = fixtures();
    for (name, records) in &all {
        let mut fence = 0;
        for rec in records {
            while fence < rec.fence {
                fence = store.mint_fence(name, 1, None).await.unwrap();
            }
            let event = rec.event.clone().unwrap();
            let got = store
                .append(AppendBatch {
                    session: name.clone(),
                    expected_last_seq: rec.seq - 1,
                    fence: rec.fence,
                    compute_state: batch_compute_state(std::slice::from_ref(&event)),
                    events: vec![event],
                    now_unix_nanos: 1,
                    release_lease: None,
                })
                .await
                .unwrap();
            assert_eq!(got, vec![rec.clone()], "{name} seq {}", rec.seq);
        }
    }
    let fence = store.mint_fence(LONG, 2, None).await.unwrap();
    for head in 0..LONG_RECORDS {
        let ev = events::input(&format!("x-{head}"), events::text_message("user", "hi"));
        store
            .append(AppendBatch {
                session: LONG.into(),
                expected_last_seq: head,
                fence,
                events: vec![ev],
                compute_state: None,
                now_unix_nanos: 3 + head,
                release_lease: None,
            })
            .await
            .unwrap();
    }
    drop(store);
    let raw = rusqlite::Connection::open(path).unwrap();
    raw.execute_batch(
        "INSERT INTO harnesses VALUES ('echo', 'h-1', '{}', 'd1', 'ACTIVE', '', 0, 5, 6);
         INSERT INTO harnesses VALUES ('old', 'h-2', '{}', 'd2', 'RETIRED', 'gone', 9, 7, 9);
         INSERT INTO reserved_harness_names VALUES ('taken', 11);
         INSERT INTO deleted_sessions VALUES ('zzz-deleted', 12, 4, 'alice');",
    )
    .unwrap();
    all.len() + 1
}

/// Every row of a journal, in a fixed order.
async fn dump(side: &Side) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(
        side.harnesses()
            .await
            .unwrap()
            .iter()
            .map(|h| format!("{h:?}")),
    );
    out.extend(
        side.reservations()
            .await
            .unwrap()
            .iter()
            .map(|r| format!("{r:?}")),
    );
    out.extend(
        side.tombstones()
            .await
            .unwrap()
            .iter()
            .map(|t| format!("{t:?}")),
    );
    let mut after = String::new();
    loop {
        let page = side.sessions_after(&after).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.session.clone();
        for row in page {
            out.push(format!("{row:?}"));
            let mut head = 0;
            loop {
                let chunk: Vec<EventRow> = side.events_after(&row.session, head).await.unwrap();
                let Some(last) = chunk.last() else { break };
                head = last.seq;
                out.extend(chunk.iter().map(|e| format!("{e:?}")));
            }
        }
    }
    out
}

#[tokio::test]
async fn a_journal_copies_to_postgres_and_back_row_for_row_and_a_rerun_finishes_it() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (src_path, back_path) = (dir.path().join("src.db"), dir.path().join("back.db"));
    let sessions = source(&src_path).await;
    let src = Side::source(src_path.to_str().unwrap(), None)
        .await
        .unwrap();
    let want = dump(&src).await;

    // Stopped after the first chunk: the long session is half there.
    let mut to = Side::target(&url, None).await.unwrap();
    let stopped = copy::copy(&src, &mut to, |_| ControlFlow::Break(())).await;
    assert!(matches!(stopped, Err(CopyError::Stopped)), "{stopped:?}");
    let partial = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(partial.head(LONG).await.unwrap(), copy::CHUNK as i64);

    let done = copy::copy(&src, &mut to, |_| ControlFlow::Continue(()))
        .await
        .unwrap();
    assert_eq!(done.sessions as usize, sessions);
    assert_eq!(done.records_present, copy::CHUNK as u64);
    assert_eq!(
        (done.harnesses, done.reservations, done.tombstones),
        (2, 1, 1)
    );
    assert_eq!(dump(&to).await, want, "the target holds the source's rows");
    let report = copy::verify(&to).await.unwrap();
    assert_eq!(report.sessions as usize, sessions);
    // The store the daemon runs on agrees: chains verify, Go hashes kept,
    // the tombstone refuses its uid.
    for (name, records) in fixtures() {
        partial.verify(&name).await.unwrap();
        assert_eq!(partial.read(&name, 1, 0).await.unwrap(), records, "{name}");
    }
    assert!(partial.tombstone("zzz-deleted").await.unwrap().is_some());

    // A second run over a complete copy writes nothing new.
    let again = copy::copy(&src, &mut to, |_| ControlFlow::Continue(()))
        .await
        .unwrap();
    assert_eq!(again.records_copied, 0);
    assert_eq!(dump(&to).await, want);

    // And back to a fresh SQLite file, which the SQLite store verifies.
    let pg_side = Side::source(&url, None).await.unwrap();
    let mut back = Side::target(back_path.to_str().unwrap(), None)
        .await
        .unwrap();
    copy::copy(&pg_side, &mut back, |_| ControlFlow::Continue(()))
        .await
        .unwrap();
    assert_eq!(dump(&back).await, want);
    drop(back);
    let store = SqliteJournal::open(&back_path, SqliteOptions::default()).unwrap();
    store.verify(LONG).await.unwrap();
    assert_eq!(store.head(LONG).await.unwrap(), LONG_RECORDS);
}

#[tokio::test]
async fn a_target_whose_records_differ_from_the_source_is_refused() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src.db");
    source(&src_path).await;
    let src = Side::source(src_path.to_str().unwrap(), None)
        .await
        .unwrap();
    let mut to = Side::target(&url, None).await.unwrap();
    let _ = copy::copy(&src, &mut to, |_| ControlFlow::Break(())).await;
    // Someone wrote to the target in between: its record 500 is not ours.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "UPDATE events SET hash = 'x' WHERE session = $1 AND seq = $2",
            &[&LONG, &(copy::CHUNK as i64)],
        )
        .await
        .unwrap();
    let refused = copy::copy(&src, &mut to, |_| ControlFlow::Continue(())).await;
    assert!(
        matches!(&refused, Err(CopyError::Diverged { session, seq }) if session == LONG && *seq == copy::CHUNK as i64),
        "{refused:?}"
    );
    let head: i64 = client
        .query_one("SELECT MAX(seq) FROM events WHERE session = $1", &[&LONG])
        .await
        .unwrap()
        .get(0);
    assert_eq!(head, copy::CHUNK as i64, "nothing copied over it");
    assert!(matches!(
        copy::verify(&to).await,
        Err(CopyError::Chain { .. })
    ));
}

#[tokio::test]
async fn a_source_of_an_unknown_schema_version_is_refused_without_reading_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("PRAGMA user_version = 9").unwrap();
    drop(raw);
    let refused = Side::source(path.to_str().unwrap(), None).await;
    assert!(matches!(refused, Err(CopyError::Schema { found: 9 })));
}

/// Appends `n` inputs to `session` after `head` under `fence`.
async fn inputs(store: &SqliteJournal, session: &str, head: i64, n: i64, fence: i64) {
    for seq in head..head + n {
        let events = vec![events::input(
            &format!("{session}-{seq}"),
            events::text_message("user", "hi"),
        )];
        store
            .append(AppendBatch {
                session: session.into(),
                expected_last_seq: seq,
                fence,
                compute_state: batch_compute_state(&events),
                events,
                now_unix_nanos: 1,
                release_lease: None,
            })
            .await
            .unwrap();
    }
}

async fn fork(store: &SqliteJournal, child: &str, parent: &str, at: i64) -> i64 {
    let fence = store.mint_fence(child, 1, None).await.unwrap();
    let events = vec![events::fork_marker(at)];
    store
        .fork(ForkBatch {
            child: child.into(),
            parent: parent.into(),
            at_seq: at,
            fence,
            compute_state: batch_compute_state(&events),
            events,
            now_unix_nanos: 2,
        })
        .await
        .unwrap();
    fence
}

fn prefix_rows(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM session_prefixes", [], |r| r.get(0))
        .unwrap()
}

/// Fork children whose prefix the source stores once (under a parent
/// since deleted, and through a child for a grandchild) arrive as
/// self-contained journals: every record under the child's own uid, the
/// same bytes and hashes, no references, and a rerun after a stop inside
/// the shared prefix continues from it.
#[tokio::test]
async fn fork_children_copy_as_self_contained_journals_that_verify() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (src_path, back_path) = (dir.path().join("src.db"), dir.path().join("back.db"));
    let (parent, child, grandchild) = ("p-parent", "c-child", "g-grandchild");
    let store = SqliteJournal::open(&src_path, SqliteOptions::default()).unwrap();
    let fence = store.mint_fence(parent, 1, None).await.unwrap();
    inputs(&store, parent, 0, 700, fence).await;
    let fence = fork(&store, child, parent, 650).await;
    inputs(&store, child, 651, 3, fence).await;
    fork(&store, grandchild, child, 652).await;
    store
        .delete_session(agentsessions_journal::DeleteSession {
            uid: parent.into(),
            expected_last_seq: 700,
            principal: String::new(),
            now_unix_nanos: 3,
        })
        .await
        .unwrap();
    let want_child = store.read(child, 1, 0).await.unwrap();
    let want_grandchild = store.read(grandchild, 1, 0).await.unwrap();
    assert_eq!((want_child.len(), want_grandchild.len()), (654, 653));
    assert!(prefix_rows(&src_path) > 0, "the source refers");
    drop(store);

    let src = Side::source(src_path.to_str().unwrap(), None)
        .await
        .unwrap();
    let mut to = Side::target(&url, None).await.unwrap();
    let stopped = copy::copy(&src, &mut to, |_| ControlFlow::Break(())).await;
    assert!(matches!(stopped, Err(CopyError::Stopped)), "{stopped:?}");
    let done = copy::copy(&src, &mut to, |_| ControlFlow::Continue(()))
        .await
        .unwrap();
    assert_eq!(done.sessions, 2, "the deleted parent has no row to copy");
    assert_eq!(copy::verify(&to).await.unwrap().records, 654 + 653);
    let target = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(target.read(child, 1, 0).await.unwrap(), want_child);
    assert_eq!(
        target.read(grandchild, 1, 0).await.unwrap(),
        want_grandchild
    );
    target.verify(grandchild).await.unwrap();
    assert_eq!(
        target.row_counts().await.unwrap(),
        (654 + 653, 0),
        "every record under its own uid, no references"
    );

    // And back: a plain SQLite file, as a Go host would read it.
    let pg_side = Side::source(&url, None).await.unwrap();
    let mut back = Side::target(back_path.to_str().unwrap(), None)
        .await
        .unwrap();
    copy::copy(&pg_side, &mut back, |_| ControlFlow::Continue(()))
        .await
        .unwrap();
    drop(back);
    assert_eq!(prefix_rows(&back_path), 0);
    let raw = rusqlite::Connection::open(&back_path).unwrap();
    let own: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM events WHERE session = ?1",
            [child],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(own, 654, "the child's rows start at seq 1");
    let store = SqliteJournal::open(&back_path, SqliteOptions::default()).unwrap();
    assert_eq!(store.read(child, 1, 0).await.unwrap(), want_child);
    store.verify(child).await.unwrap();
    store.verify(grandchild).await.unwrap();
}
