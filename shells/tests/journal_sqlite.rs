//! Behaviour of the SQLite journal: CAS, fences, durability across reopen,
//! group commit, bad input, and the session metadata projection.

mod common;

use std::sync::Arc;

use agentsessions_machine::canon;
use agentsessions_proto::v1::{ComputeState, Event, EventKind, lifecycle};
use agentsessions_proto::wkt::Timestamp;
use agentsessions_shells::journal::sqlite::{Faults, SqliteJournal, SqliteOptions};
use agentsessions_shells::journal::{
    AppendError, ForkBatch, JournalStore, SessionMeta, StoreError, VerifyError,
};
use common::*;

#[tokio::test]
async fn append_links_records_and_hashes_with_canon() {
    let db = TempDb::new();
    let store = db.open();
    let first = store
        .append(batch("s", 0, 0, vec![input("a"), input("b")]))
        .await
        .unwrap();
    let second = store
        .append(batch("s", 2, 0, vec![input("c")]))
        .await
        .unwrap();
    let all: Vec<_> = first.into_iter().chain(second).collect();
    assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    let mut prev = String::new();
    for r in &all {
        assert_eq!(r.prev_hash, prev);
        let ev = r.event.as_ref().unwrap();
        assert_eq!(
            r.content_hash,
            canon::content_hash(&prev, r.seq, ev).unwrap()
        );
        prev = r.content_hash.clone();
    }
    assert_eq!(store.read("s", 1, 0).await.unwrap(), all);
    assert_eq!(store.read("s", 2, 2).await.unwrap(), all[1..2].to_vec());
    assert_eq!(store.read("s", 2, 0).await.unwrap(), all[1..].to_vec());
    assert_eq!(store.head("s").await.unwrap(), 3);
    assert_eq!(store.head("unknown").await.unwrap(), 0);
    assert!(store.read("unknown", 1, 0).await.unwrap().is_empty());
    store.verify("s").await.unwrap();
}

#[tokio::test]
async fn stale_head_is_a_conflict_and_writes_nothing() {
    let db = TempDb::new();
    let store = db.open();
    store
        .append(batch("s", 0, 0, vec![input("a")]))
        .await
        .unwrap();
    for expected in [0, 2, 7] {
        match store
            .append(batch("s", expected, 0, vec![input("x")]))
            .await
        {
            Err(AppendError::Conflict { head: 1 }) => {}
            other => panic!("expected conflict at head 1, got {other:?}"),
        }
    }
    assert_eq!(store.head("s").await.unwrap(), 1);
}

#[tokio::test]
async fn fences_reject_older_holders_and_accept_newer_without_advancing() {
    let db = TempDb::new();
    let store = db.open();
    // No fence row yet: fence 0 is current.
    store
        .append(batch("s", 0, 0, vec![input("a")]))
        .await
        .unwrap();
    assert_eq!(store.mint_fence("s", 1, None).await.unwrap(), 1);
    assert_eq!(store.mint_fence("s", 2, None).await.unwrap(), 2);
    match store.append(batch("s", 1, 1, vec![input("b")])).await {
        Err(AppendError::Fenced { current: 2 }) => {}
        other => panic!("expected fenced, got {other:?}"),
    }
    // CAS is checked first: stale head and stale fence reads as a conflict.
    assert!(matches!(
        store.append(batch("s", 0, 1, vec![input("b")])).await,
        Err(AppendError::Conflict { head: 1 })
    ));
    let r = store
        .append(batch("s", 1, 9, vec![input("b")]))
        .await
        .unwrap();
    assert_eq!(r[0].fence, 9);
    assert_eq!(
        store.session_info("s").await.unwrap().fence,
        2,
        "a newer fence does not advance the stored one"
    );
    let r = store
        .append(batch("s", 2, 2, vec![input("c")]))
        .await
        .unwrap();
    assert_eq!(r[0].seq, 3);
    assert_eq!(store.mint_fence("s", 3, None).await.unwrap(), 3);
}

/// Appends `n` one-event records to `session` from `head` on, unfenced.
async fn grow(store: &SqliteJournal, session: &str, head: i64, n: i64) {
    for seq in head..head + n {
        store
            .append(batch(session, seq, 0, vec![input("x")]))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_zombie_is_fenced_after_a_mint_even_when_the_writer_caches_the_head() {
    let db = TempDb::new();
    let store = db.open();
    grow(&store, "s", 0, 3).await;
    assert!(
        store.writer_stats().cached_heads > 0,
        "the appends after the first read their head from the cache"
    );
    assert_eq!(store.mint_fence("s", 1, None).await.unwrap(), 1);
    match store.append(batch("s", 3, 0, vec![input("zombie")])).await {
        Err(AppendError::Fenced { current: 1 }) => {}
        other => panic!("expected fenced, got {other:?}"),
    }
    store
        .append(batch("s", 3, 1, vec![input("holder")]))
        .await
        .unwrap();
    store.verify("s").await.unwrap();
}

#[tokio::test]
async fn another_handle_s_appends_are_seen_by_a_writer_that_caches_heads() {
    let db = TempDb::new();
    let (mine, other) = (db.open(), db.open());
    grow(&mine, "s", 0, 3).await;
    grow(&other, "s", 3, 2).await;
    // Our cached head (seq 3) is stale: the CAS must see seq 5.
    match mine.append(batch("s", 3, 0, vec![input("late")])).await {
        Err(AppendError::Conflict { head: 5 }) => {}
        other => panic!("expected a conflict at head 5, got {other:?}"),
    }
    let r = mine
        .append(batch("s", 5, 0, vec![input("next")]))
        .await
        .unwrap();
    assert_eq!(r[0].seq, 6);
    mine.verify("s").await.unwrap();
}

#[tokio::test]
async fn a_batch_rerun_after_a_job_failed_midway_does_not_trust_heads_it_undid() {
    use agentsessions_proto::v1::{ToolCall, event};
    use pbjson_types::{Struct, Value, value::Kind};
    let db = TempDb::new();
    let store = db.open();
    grow(&store, "p", 0, 3).await;
    // A fork whose event cannot be hashed fails after writing its prefix
    // spans, so the batch is rolled back and run again with savepoints.
    let mut args = Struct::default();
    args.fields.insert(
        "x".into(),
        Value {
            kind: Some(Kind::NumberValue(f64::NAN)),
        },
    );
    let unhashable = Event {
        body: Some(event::Body::Tool(ToolCall {
            args: Some(args),
            ..Default::default()
        })),
        ..Default::default()
    };
    let hold = store.hold_writer();
    let append = store.append(batch("p", 3, 0, vec![input("kept")]));
    let fork = store.fork(ForkBatch {
        child: "c".into(),
        parent: "p".into(),
        at_seq: 2,
        fence: 0,
        compute_state: None,
        events: vec![unhashable],
        now_unix_nanos: 1,
    });
    drop(hold);
    assert_eq!(append.await.unwrap()[0].seq, 4);
    assert!(matches!(
        fork.await,
        Err(AppendError::Failed(StoreError::Canonicalize { .. }))
    ));
    grow(&store, "p", 4, 1).await;
    store.verify("p").await.unwrap();
    assert_eq!(
        store.head("c").await.unwrap(),
        0,
        "nothing of the fork stays"
    );
}

#[test]
fn eight_handles_racing_for_seq_one_yield_one_winner() {
    for round in 0..3 {
        let db = TempDb::new();
        let path = db.path();
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    // Opening races too: WAL switch and migration.
                    let store = open_with(&path, SqliteOptions::default());
                    rt().block_on(async {
                        let fence = if i % 2 == 0 {
                            store.mint_fence("s", 1, None).await.unwrap()
                        } else {
                            0
                        };
                        store
                            .append(batch("s", 0, fence, vec![input(&format!("w{i}"))]))
                            .await
                    })
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        for r in &results {
            assert!(
                matches!(
                    r,
                    Ok(_) | Err(AppendError::Conflict { .. }) | Err(AppendError::Fenced { .. })
                ),
                "round {round}: raw error leaked: {r:?}"
            );
        }
        let store = db.open();
        rt().block_on(async {
            assert_eq!(store.head("s").await.unwrap(), 1);
            store.verify("s").await.unwrap();
        });
    }
}

#[tokio::test]
async fn sessions_are_isolated() {
    let db = TempDb::new();
    let store = db.open();
    for i in 0..5 {
        store
            .append(batch("a", i, 0, vec![input("a")]))
            .await
            .unwrap();
        if i < 3 {
            store
                .append(batch("b", i, 0, vec![input("b")]))
                .await
                .unwrap();
        }
    }
    assert_eq!(store.head("a").await.unwrap(), 5);
    assert_eq!(store.head("b").await.unwrap(), 3);
    assert_eq!(store.read("b", 1, 1).await.unwrap()[0].prev_hash, "");
    assert_eq!(store.mint_fence("a", 1, None).await.unwrap(), 1);
    // b's fence is untouched by a's.
    store
        .append(batch("b", 3, 0, vec![input("b")]))
        .await
        .unwrap();
    store.verify("a").await.unwrap();
    store.verify("b").await.unwrap();
}

#[tokio::test]
async fn records_persist_across_reopen() {
    let db = TempDb::new();
    let before = {
        let store = db.open();
        append_n(&store, "s", 0, 4).await;
        store.read("s", 1, 0).await.unwrap()
    };
    let store = db.open();
    assert_eq!(store.read("s", 1, 0).await.unwrap(), before);
    store.verify("s").await.unwrap();
    let next = store
        .append(batch("s", 4, 0, vec![input("e")]))
        .await
        .unwrap();
    assert_eq!(next[0].prev_hash, before[3].content_hash);
}

#[tokio::test]
async fn one_failing_append_does_not_fail_its_batch() {
    let db = TempDb::new();
    let store = db.open();
    assert_eq!(store.mint_fence("fenced", 1, None).await.unwrap(), 1);
    assert_eq!(store.mint_fence("fenced", 2, None).await.unwrap(), 2);
    let stats_before = store.writer_stats();
    let hold = store.hold_writer();
    let mut pending = Vec::new();
    for i in 0..10 {
        pending.push(store.append(batch(&format!("s{i}"), 0, 0, vec![input("x")])));
    }
    // A conflict, a stale fence, a second append to s0 that sees the first
    // one inside the same transaction, and a bad request.
    let conflict = store.append(batch("s3", 5, 0, vec![input("x")]));
    let fenced = store.append(batch("fenced", 0, 1, vec![input("x")]));
    let follow = store.append(batch("s0", 1, 0, vec![input("y")]));
    let empty = store.append(batch("s4", 0, 0, vec![]));
    drop(hold);
    for p in pending {
        assert_eq!(p.await.unwrap().len(), 1);
    }
    assert!(matches!(
        conflict.await,
        Err(AppendError::Conflict { head: 1 })
    ));
    assert!(matches!(
        fenced.await,
        Err(AppendError::Fenced { current: 2 })
    ));
    assert_eq!(follow.await.unwrap()[0].seq, 2);
    assert!(matches!(
        empty.await,
        Err(AppendError::Failed(StoreError::InvalidArgument(_)))
    ));
    let stats = store.writer_stats();
    assert!(stats.largest_batch >= 14, "{stats:?}");
    assert_eq!(
        stats.batches,
        stats_before.batches + 2,
        "hold batch + one group commit: {stats:?}"
    );
    assert_eq!(store.head("s0").await.unwrap(), 2);
    assert_eq!(store.head("s3").await.unwrap(), 1);
    assert_eq!(store.head("fenced").await.unwrap(), 0);
}

#[tokio::test]
async fn a_batch_is_all_or_nothing() {
    let db = TempDb::new();
    let store = db.open();
    let mut bad = input("b");
    // No canonical form: the year is out of the proto Timestamp range.
    bad.ts = Some(Timestamp::new(i64::MAX / 2, 0));
    match store.append(batch("s", 0, 0, vec![input("a"), bad])).await {
        Err(AppendError::Failed(StoreError::Canonicalize { seq: 2, .. })) => {}
        other => panic!("expected canonicalize failure, got {other:?}"),
    }
    assert_eq!(
        store.head("s").await.unwrap(),
        0,
        "the first event of the batch was rolled back"
    );
    assert!(matches!(
        store.session_info("s").await,
        Err(StoreError::SessionNotFound { .. })
    ));
}

#[tokio::test]
async fn corrupt_blob_is_a_typed_decode_error() {
    let db = TempDb::new();
    let store = db.open();
    append_n(&store, "s", 0, 3).await;
    raw(&db)
        .execute(
            "UPDATE events SET event = x'ffffffff' WHERE session = 's' AND seq = 2",
            [],
        )
        .unwrap();
    match store.read("s", 1, 0).await {
        Err(StoreError::Decode {
            session, seq: 2, ..
        }) => assert_eq!(session, "s"),
        other => panic!("expected decode error, got {other:?}"),
    }
    assert_eq!(store.read("s", 3, 0).await.unwrap().len(), 1);
    match store.verify("s").await {
        Err(VerifyError::Failed(StoreError::Decode { seq: 2, .. })) => {}
        other => panic!("decode is not tamper: {other:?}"),
    }
}

#[tokio::test]
async fn tampered_hash_is_reported_at_its_seq() {
    let db = TempDb::new();
    let store = db.open();
    append_n(&store, "s", 0, 3).await;
    raw(&db)
        .execute("UPDATE events SET hash='tampered' WHERE seq=2", [])
        .unwrap();
    // Reads return what is stored, never a recomputed hash.
    assert_eq!(
        store.read("s", 2, 2).await.unwrap()[0].content_hash,
        "tampered"
    );
    match store.verify("s").await {
        Err(VerifyError::Tampered {
            session, seq: 2, ..
        }) => assert_eq!(session, "s"),
        other => panic!("expected tamper at 2, got {other:?}"),
    }
    // A relinked record is tamper too.
    let db2 = TempDb::new();
    let store2 = db2.open();
    append_n(&store2, "s", 0, 3).await;
    raw(&db2)
        .execute("UPDATE events SET prev_hash='' WHERE seq=3", [])
        .unwrap();
    assert!(matches!(
        store2.verify("s").await,
        Err(VerifyError::Tampered { seq: 3, .. })
    ));
}

#[tokio::test]
async fn compute_state_follows_the_projection() {
    let db = TempDb::new();
    let store = db.open();
    assert_eq!(store.mint_fence("s", 5, None).await.unwrap(), 1);
    let info = store.session_info("s").await.unwrap();
    assert_eq!(info.compute_state, ComputeState::ComputeNone);
    assert_eq!(
        (
            info.meta.project.as_str(),
            info.meta.created_at,
            info.last_seq
        ),
        ("default", 5, 0)
    );
    let steps = [
        (input("a"), ComputeState::ComputeLive),
        (
            lifecycle_event(lifecycle::Kind::LifecycleSuspend),
            ComputeState::ComputeCold,
        ),
        (
            text_event(EventKind::EventApprovalRequest, "", ""),
            ComputeState::ComputeCold,
        ),
        (
            lifecycle_event(lifecycle::Kind::LifecycleBaseline),
            ComputeState::ComputeCold,
        ),
        (
            lifecycle_event(lifecycle::Kind::LifecycleResume),
            ComputeState::ComputeLive,
        ),
        (
            text_event(EventKind::EventApprovalResult, "", ""),
            ComputeState::ComputeLive,
        ),
        (
            lifecycle_event(lifecycle::Kind::LifecycleFork),
            ComputeState::ComputeCold,
        ),
        (execution_start("echo"), ComputeState::ComputeLive),
    ];
    for (i, (ev, want)) in steps.into_iter().enumerate() {
        store
            .append(batch("s", i as i64, 1, vec![ev]))
            .await
            .unwrap();
        let info = store.session_info("s").await.unwrap();
        assert_eq!(info.compute_state, want, "after step {i}");
        assert_eq!(info.last_seq, i as i64 + 1);
        assert_eq!(info.meta.created_at, 5, "created_at is kept");
        assert_eq!(info.meta.updated_at, 1_700_000_000_000_000_000 + i as i64);
    }
}

#[tokio::test]
async fn put_session_upserts_metadata_only() {
    let db = TempDb::new();
    let store = db.open();
    assert!(matches!(
        store.session_info("x").await,
        Err(StoreError::SessionNotFound { .. })
    ));
    assert!(matches!(
        store.put_session(SessionMeta::default(), 1).await,
        Err(StoreError::InvalidArgument(_))
    ));
    let meta = SessionMeta {
        uid: "x".into(),
        name: "n".into(),
        harness: "echo".into(),
        model: "m".into(),
        labels: r#"{"a":"b"}"#.into(),
        origin: r#"{"source":"s"}"#.into(),
        ..Default::default()
    };
    store.put_session(meta.clone(), 100).await.unwrap();
    let info = store.session_info("x").await.unwrap();
    assert_eq!(info.meta.project, "default");
    assert_eq!((info.meta.created_at, info.meta.updated_at), (100, 100));
    assert_eq!(info.compute_state, ComputeState::ComputeNone);
    assert_eq!(
        (info.meta.labels.as_str(), info.meta.origin.as_str()),
        (r#"{"a":"b"}"#, r#"{"source":"s"}"#)
    );

    // Journal activity, then a metadata update: fence and compute_state stay.
    assert_eq!(store.mint_fence("x", 150, None).await.unwrap(), 1);
    store
        .append(batch("x", 0, 1, vec![input("a")]))
        .await
        .unwrap();
    let update = SessionMeta {
        name: "renamed".into(),
        project: "p".into(),
        ..meta.clone()
    };
    store.put_session(update, 200).await.unwrap();
    let info = store.session_info("x").await.unwrap();
    assert_eq!(
        (info.meta.name.as_str(), info.meta.project.as_str()),
        ("renamed", "p")
    );
    assert_eq!(
        (info.meta.created_at, info.meta.updated_at),
        (100, 200),
        "created_at kept when 0 is passed"
    );
    assert_eq!(
        (info.fence, info.compute_state, info.last_seq),
        (1, ComputeState::ComputeLive, 1)
    );

    let explicit = SessionMeta {
        created_at: 42,
        ..meta
    };
    store.put_session(explicit, 300).await.unwrap();
    assert_eq!(
        store.session_info("x").await.unwrap().meta.created_at,
        42,
        "an explicit created_at wins"
    );
}

#[tokio::test]
async fn commit_failure_poisons_the_handle_and_fails_the_whole_batch() {
    let db = TempDb::new();
    let options = SqliteOptions {
        // batch 0: mint; batch 1: the hold; batch 2: the three appends.
        faults: Faults {
            fail_commit_after: Some(2),
        },
        ..SqliteOptions::default()
    };
    let store = open_with(&db.path(), options);
    store.mint_fence("a", 1, None).await.unwrap();
    let hold = store.hold_writer();
    let pending: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|s| store.append(batch(s, 0, 1, vec![input("x")])))
        .collect();
    drop(hold);
    for p in pending {
        match p.await {
            Err(AppendError::Failed(StoreError::CommitFailed { .. })) => {}
            other => panic!("every waiter of the batch must fail: {other:?}"),
        }
    }
    assert!(store.is_poisoned());
    assert!(matches!(
        store.append(batch("d", 0, 0, vec![input("x")])).await,
        Err(AppendError::Failed(StoreError::Poisoned))
    ));
    assert!(matches!(store.head("a").await, Err(StoreError::Poisoned)));
    assert!(matches!(
        store.mint_fence("a", 2, None).await,
        Err(StoreError::Poisoned)
    ));
    drop(store);
    // The injected failure came after the data reached the disk: the outcome
    // really was unknown to the caller, and a reopened store sees the truth.
    let store = db.open();
    for s in ["a", "b", "c"] {
        assert_eq!(store.head(s).await.unwrap(), 1);
        store.verify(s).await.unwrap();
    }
}

#[test]
fn closed_handles_release_the_file() {
    let db = TempDb::new();
    let store: SqliteJournal = db.open();
    let clone = store.clone();
    drop(store);
    rt().block_on(async {
        clone
            .append(batch("s", 0, 0, vec![input("a")]))
            .await
            .unwrap()
    });
    drop(clone);
    // All threads joined: the database can be reopened and is intact.
    let store = db.open();
    assert_eq!(rt().block_on(store.head("s")).unwrap(), 1);
}

fn raw(db: &TempDb) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(db.path()).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    c
}

#[tokio::test]
async fn wal_is_checkpointed_beside_the_writer() {
    let db = TempDb::new();
    let store = db.open();
    let empty = std::fs::metadata(db.path()).unwrap().len();
    append_n(&store, "s", 0, 300).await;
    // The writer's own automatic checkpoint only starts at 10000 pages, so
    // a grown main file means the checkpointer thread copied frames back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let len = std::fs::metadata(db.path()).unwrap().len();
        if len > empty + 20 * 4096 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "main file stuck at {len} bytes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    store.verify("s").await.unwrap();
}

#[tokio::test]
async fn tail_reads_agree_with_the_whole_journal_on_both_sides_of_the_in_place_bound() {
    let db = TempDb::new();
    let store = db.open();
    append_n(&store, "s", 0, 100).await;
    let whole = store.read("s", 1, 0).await.unwrap();
    assert_eq!(whole.len(), 100);
    // Short tails are read in place, long ones (past 64) by a reader
    // thread; callers cannot tell which.
    let before = store.read_stats();
    for from in [2_i64, 20, 36, 37, 38, 90, 100] {
        let tail = store.read("s", from, 0).await.unwrap();
        assert_eq!(tail, whole[(from - 1) as usize..], "from {from}");
    }
    assert_eq!(store.read("s", 40, 50).await.unwrap(), whole[39..50]);
    assert!(store.read("s", 101, 0).await.unwrap().is_empty());
    let after = store.read_stats();
    // Tails from 2, 20 and 36 hold 99, 81 and 65 records: past the bound.
    assert_eq!(after.on_threads - before.on_threads, 3);
    assert_eq!(after.in_place - before.in_place, 6);
}

#[tokio::test]
async fn point_reads_answer_in_place_while_a_batch_holds_the_writer() {
    let db = TempDb::new();
    let store = db.open();
    append_n(&store, "s", 0, 3).await;
    let before = store.read_stats();
    {
        // The writer's connection is taken by a batch in flight; the quick
        // connection answers instead, still without a reader thread.
        let _hold = store.hold_writer();
        assert_eq!(store.head("s").await.unwrap(), 3);
        assert_eq!(store.session_info("s").await.unwrap().meta.uid, "s");
    }
    // Free again: the writer's connection answers.
    assert_eq!(store.read("s", 3, 0).await.unwrap()[0].seq, 3);
    let after = store.read_stats();
    assert_eq!(after.in_place - before.in_place, 3);
    assert_eq!(after.on_threads, before.on_threads);
}

#[tokio::test]
async fn an_idle_writer_commits_in_place_and_a_busy_one_gives_the_batch_back() {
    let db = TempDb::new();
    let store = db.open();
    let before = store.writer_stats();
    let recs = store
        .try_append_now(batch("s", 0, 0, vec![input("a")]))
        .unwrap()
        .unwrap();
    assert_eq!(recs[0].seq, 1);
    assert_eq!(store.try_mint_fence_now("s", 5, None).unwrap().unwrap(), 1);
    // A conflict is answered in place like any other outcome.
    assert!(matches!(
        store
            .try_append_now(batch("s", 0, 1, vec![input("b")]))
            .unwrap(),
        Err(AppendError::Conflict { head: 1 })
    ));
    assert_eq!(store.writer_stats().jobs - before.jobs, 3);
    {
        // A batch in flight: nothing is done in place, the caller queues.
        let _hold = store.hold_writer();
        let Err(back) = store.try_append_now(batch("s", 1, 1, vec![input("c")])) else {
            panic!("a busy writer must give the batch back");
        };
        assert_eq!(back.expected_last_seq, 1);
        assert!(store.try_mint_fence_now("s", 6, None).is_none());
    }
    assert_eq!(store.read("s", 1, 0).await.unwrap().len(), 1);
    store.verify("s").await.unwrap();
}

#[tokio::test]
async fn a_failed_commit_in_place_poisons_the_handle() {
    let db = TempDb::new();
    let options = SqliteOptions {
        faults: Faults {
            fail_commit_after: Some(1),
        },
        ..SqliteOptions::default()
    };
    let store = open_with(&db.path(), options);
    store
        .try_append_now(batch("s", 0, 0, vec![input("a")]))
        .unwrap()
        .unwrap();
    match store.try_append_now(batch("s", 1, 0, vec![input("b")])) {
        Ok(Err(AppendError::Failed(StoreError::CommitFailed { .. }))) => {}
        other => panic!("the in-place commit must report the failure: {other:?}"),
    }
    assert!(store.is_poisoned());
    // Neither path writes any more.
    assert!(
        store
            .try_append_now(batch("s", 2, 0, vec![input("c")]))
            .is_err()
    );
    assert!(matches!(
        store.append(batch("s", 2, 0, vec![input("c")])).await,
        Err(AppendError::Failed(StoreError::Poisoned))
    ));
    drop(store);
    // The injected failure came after the commit reached the disk.
    let store = db.open();
    assert_eq!(store.head("s").await.unwrap(), 2);
    store.verify("s").await.unwrap();
}

#[tokio::test]
async fn in_place_gives_the_batch_back_when_another_process_holds_the_write_lock() {
    let db = TempDb::new();
    let store = db.open();
    store
        .append(batch("s", 0, 0, vec![input("a")]))
        .await
        .unwrap();
    // Another writer (as another daemon on the same file would) holds
    // SQLite's write lock: the in-place path must not sit out the busy
    // timeout on the caller's thread.
    let other = raw(&db);
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let Err(back) = store.try_append_now(batch("s", 1, 0, vec![input("b")])) else {
        panic!("a held write lock must give the batch back");
    };
    assert!(store.try_mint_fence_now("s", 2, None).is_none());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "the in-place attempt waited on the lock"
    );
    other.execute_batch("COMMIT").unwrap();
    // Queued, it goes through once the lock is free; nothing was half-done.
    let recs = store.append(back).await.unwrap();
    assert_eq!(recs[0].seq, 2);
    assert!(!store.is_poisoned());
    store.verify("s").await.unwrap();
}
