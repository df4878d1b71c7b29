//! The memory store's checks and its pending-versus-durable model (the
//! contract every backend shares is `contract::run`).

use std::sync::Arc;
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::v1::{ComputeState, Event, lifecycle};

use super::*;

fn input(text: &str) -> Event {
    events::input("exec-1", events::text_message("user", text))
}

fn batch(session: &str, expected: i64, fence: i64, events: Vec<Event>) -> AppendBatch {
    AppendBatch {
        session: session.into(),
        expected_last_seq: expected,
        fence,
        compute_state: agentsessions_machine::journal::projection::batch_compute_state(&events),
        events,
        now_unix_nanos: 100 + expected,
        release_lease: None,
    }
}

fn immediate() -> (Arc<MemoryDisk>, MemoryJournal) {
    let disk = Arc::new(MemoryDisk::default());
    let j = disk.open(Durability::After(Duration::ZERO));
    (disk, j)
}

/// Lets spawned tasks run until `done` holds (a current-thread runtime
/// runs them only while this task yields).
async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never held");
}

#[tokio::test]
async fn appends_are_checked_against_head_and_fence() {
    let (_disk, j) = immediate();
    j.mint_fence("s", 1, None).await.unwrap();
    // What each append must answer, in a form both sides of assert_eq! share.
    fn shape(r: &Result<Vec<LogRecord>, AppendError>) -> String {
        match r {
            Ok(records) => format!("ok {}", records.len()),
            Err(AppendError::Conflict { head }) => format!("conflict {head}"),
            Err(AppendError::Fenced { current }) => format!("fenced {current}"),
            Err(e) => format!("failed {e}"),
        }
    }
    let steps: Vec<(i64, i64, Vec<Event>, &str)> = vec![
        (0, 1, vec![input("a"), input("b")], "ok 2"),
        (2, 1, vec![input("c")], "ok 1"),
        (1, 1, vec![input("stale head")], "conflict 3"),
        (3, 0, vec![input("stale fence")], "fenced 1"),
        (
            3,
            2,
            vec![events::lifecycle(lifecycle::Kind::LifecycleSuspend, "")],
            "ok 1",
        ),
    ];
    for (expected, fence, evs, want) in steps {
        let got = j.append(batch("s", expected, fence, evs)).await;
        assert_eq!(
            shape(&got),
            want,
            "append after {expected} at fence {fence}"
        );
    }
    assert_eq!(j.read("s", 1, 0).await.unwrap().len(), 4);
    j.verify("s").await.unwrap();
    let info = j.session_info("s").await.unwrap();
    // Appends never move the fence; the SUSPEND marker moves compute cold.
    assert_eq!((info.last_seq, info.fence), (4, 1));
    assert_eq!(info.compute_state, ComputeState::ComputeCold);
    assert_eq!(j.head("s").await.unwrap(), 4);
    assert_eq!(j.read("s", 2, 2).await.unwrap().len(), 1);
    assert!(matches!(
        j.append(batch("", 0, 0, vec![input("x")])).await,
        Err(AppendError::Failed(StoreError::InvalidArgument(_)))
    ));
    assert!(matches!(
        j.append(batch("s", 4, 1, vec![])).await,
        Err(AppendError::Failed(StoreError::InvalidArgument(_)))
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn pending_writes_are_invisible_and_unacknowledged_until_durable() {
    let disk = Arc::new(MemoryDisk::default());
    let j = Arc::new(disk.open(Durability::Manual));
    let w = j.writer();
    let task = {
        let j = Arc::clone(&j);
        tokio::spawn(async move { j.append(batch("s", 0, 0, vec![input("a")])).await })
    };
    until(|| disk.pending_of(w) == vec![1]).await;
    assert!(!task.is_finished(), "acknowledged before durable");
    assert_eq!(
        j.head("s").await.unwrap(),
        0,
        "a reader saw a pending write"
    );
    // A second write of the same writer sees the first (same batch).
    let second = {
        let j = Arc::clone(&j);
        tokio::spawn(async move { j.append(batch("s", 1, 0, vec![input("b")])).await })
    };
    until(|| disk.pending_of(w).len() == 2).await;
    disk.sync();
    assert_eq!(task.await.unwrap().unwrap()[0].seq, 1);
    assert_eq!(second.await.unwrap().unwrap()[0].seq, 2);
    assert_eq!(j.head("s").await.unwrap(), 2);
    assert_eq!(disk.stats().commits, 1, "one group commit");
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_loses_pending_writes_and_keeps_durable_ones() {
    let disk = Arc::new(MemoryDisk::default());
    let j = Arc::new(disk.open(Durability::Manual));
    let first = {
        let j = Arc::clone(&j);
        tokio::spawn(async move { j.append(batch("s", 0, 0, vec![input("a")])).await })
    };
    until(|| disk.pending_of(j.writer()).len() == 1).await;
    disk.sync();
    first.await.unwrap().unwrap();
    let lost = {
        let j = Arc::clone(&j);
        tokio::spawn(async move { j.append(batch("s", 1, 0, vec![input("b")])).await })
    };
    until(|| disk.pending_of(j.writer()).len() == 1).await;
    disk.crash(j.writer(), CrashCut::default());
    assert!(matches!(
        lost.await.unwrap(),
        Err(AppendError::Failed(StoreError::CommitFailed { .. }))
    ));
    assert_eq!(disk.durable().records("s").len(), 1);
    // The dead process's handle refuses; a restarted one sees the disk.
    assert!(matches!(j.head("s").await, Err(StoreError::Closed)));
    let again = disk.open(Durability::After(Duration::ZERO));
    assert_eq!(again.head("s").await.unwrap(), 1);
    let recs = again
        .append(batch("s", 1, 0, vec![input("c")]))
        .await
        .unwrap();
    assert_eq!(recs[0].seq, 2);
    again.verify("s").await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_can_keep_a_prefix_and_tear_the_next_append() {
    let disk = Arc::new(MemoryDisk::default());
    let j = Arc::new(disk.open(Durability::Manual));
    let w = j.writer();
    let mut tasks = Vec::new();
    for (expected, evs) in [
        (0, vec![input("a")]),
        (1, vec![input("b"), input("c"), input("d")]),
    ] {
        let j = Arc::clone(&j);
        tasks.push(tokio::spawn(async move {
            j.append(batch("s", expected, 0, evs)).await
        }));
        let n = tasks.len();
        until(|| disk.pending_of(w).len() == n).await;
    }
    assert_eq!(disk.pending_of(w), vec![1, 3]);
    disk.crash(
        w,
        CrashCut {
            keep: 1,
            tear: Some(2),
        },
    );
    let results: Vec<_> = futures_join(tasks).await;
    assert!(
        results[0].is_ok(),
        "kept writes are durable (ack lost only)"
    );
    assert!(results[1].is_err(), "a torn write is never acknowledged");
    let image = disk.durable();
    let texts: Vec<String> = image
        .records("s")
        .iter()
        .map(|r| events::message_text(events::body::message(r.event.as_ref().unwrap()).unwrap()))
        .collect();
    assert_eq!(texts, ["a", "b", "c"]);
    agentsessions_machine::chain::verify(&image.records("s")).unwrap();
    assert_eq!(disk.stats().torn, 1);
}

async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn another_writer_waits_for_the_write_lock() {
    let disk = Arc::new(MemoryDisk::default());
    let old = Arc::new(disk.open(Durability::Manual));
    let new = Arc::new(disk.open(Durability::After(Duration::ZERO)));
    let held = {
        let old = Arc::clone(&old);
        tokio::spawn(async move { old.mint_fence("s", 1, None).await })
    };
    until(|| disk.pending_of(old.writer()).len() == 1).await;
    let waiting = {
        let new = Arc::clone(&new);
        tokio::spawn(async move { new.mint_fence("s", 2, None).await })
    };
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "wrote while another held the lock");
    disk.crash(old.writer(), CrashCut::default());
    assert!(held.await.unwrap().is_err());
    assert_eq!(waiting.await.unwrap().unwrap(), 1, "the lost mint is gone");
    // The zombie's append under an old fence is refused by a newer fence.
    let zombie = disk.open(Durability::After(Duration::ZERO));
    new.mint_fence("s", 3, None).await.unwrap();
    assert!(matches!(
        zombie.append(batch("s", 0, 1, vec![input("late")])).await,
        Err(AppendError::Fenced { current: 2 })
    ));
}

#[tokio::test]
async fn metadata_paging_and_registry_follow_the_sqlite_rules() {
    let (_disk, j) = immediate();
    for (uid, created) in [("a", 10), ("b", 20), ("c", 20), ("d", 5)] {
        let meta = SessionMeta {
            uid: uid.into(),
            created_at: created,
            name: format!("n-{uid}"),
            ..SessionMeta::default()
        };
        j.put_session(meta, 99).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = j
            .list_sessions(ListSessions {
                project: String::new(),
                page_size: 3,
                page_token: token.clone(),
            })
            .await
            .unwrap();
        seen.extend(page.sessions.iter().map(|s| s.meta.uid.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, ["b", "c", "a", "d"]);
    let info = j.session_info("a").await.unwrap();
    assert_eq!((info.meta.project.as_str(), info.fence), ("default", 0));
    assert!(matches!(
        j.session_info("zz").await,
        Err(StoreError::SessionNotFound { .. })
    ));
    // put_session keeps created_at when given 0 and never touches the fence.
    j.mint_fence("a", 100, None).await.unwrap();
    let meta = SessionMeta {
        uid: "a".into(),
        ..SessionMeta::default()
    };
    j.put_session(meta.clone(), 101).await.unwrap();
    let info = j.session_info("a").await.unwrap();
    assert_eq!((info.meta.created_at, info.fence), (10, 1));

    let reg = HarnessRegistration {
        name: "h".into(),
        uid: "u".into(),
        spec: "{}".into(),
        spec_digest: "sha256:1".into(),
    };
    let (_, o) = j.register_harness(reg.clone(), 1).await.unwrap();
    assert_eq!(o, RegisterOutcome::Created);
    assert_eq!(
        j.register_harness(reg.clone(), 2).await.unwrap().1,
        RegisterOutcome::Unchanged
    );
    j.retire_harness("h", "old", 3).await.unwrap();
    assert_eq!(j.harness("h").await.unwrap().retire_reason, "old");
    assert!(matches!(
        j.put_session_on_active_harness(
            SessionMeta {
                harness: "h".into(),
                ..meta.clone()
            },
            true,
            4
        )
        .await,
        Err(RegistryError::Retired { .. })
    ));
    assert_eq!(
        j.register_harness(reg.clone(), 5).await.unwrap().1,
        RegisterOutcome::Reactivated
    );
    assert!(matches!(
        j.reserve_harness_names(vec!["h".into()], 6).await,
        Err(RegistryError::NameCollision { .. })
    ));
    j.reserve_harness_names(vec!["echo".into()], 6)
        .await
        .unwrap();
    assert!(matches!(
        j.register_harness(
            HarnessRegistration {
                name: "echo".into(),
                ..reg
            },
            7
        )
        .await,
        Err(RegistryError::NameReserved { .. })
    ));
    let listed = j
        .list_harnesses(ListHarnesses {
            after: String::new(),
            limit: 10,
            include_retired: false,
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn a_torn_append_leaves_the_compute_state_of_the_records_that_landed() {
    let disk = Arc::new(MemoryDisk::default());
    let j = Arc::new(disk.open(Durability::Manual));
    let w = j.writer();
    let suspend = events::lifecycle(lifecycle::Kind::LifecycleSuspend, "");
    // The machine says COLD for the whole batch (it ends in SUSPEND).
    let told = batch("s", 0, 0, vec![input("a"), suspend]);
    assert_eq!(told.compute_state, Some(ComputeState::ComputeCold));
    let task = {
        let j = Arc::clone(&j);
        tokio::spawn(async move { j.append(told).await })
    };
    until(|| disk.pending_of(w).len() == 1).await;
    disk.crash(
        w,
        CrashCut {
            keep: 0,
            tear: Some(1),
        },
    );
    assert!(task.await.unwrap().is_err());
    let image = disk.durable();
    assert_eq!(image.records("s").len(), 1, "only the INPUT landed");
    let row = image.info("s").expect("row");
    assert_eq!(row.compute_state, ComputeState::ComputeLive);
}
