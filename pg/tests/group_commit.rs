//! Group commit against a real server: concurrent appends share commits,
//! each keeps its own outcome, and two journals (two daemons) grouping over
//! the same sessions neither deadlock nor lose an acknowledged record.

use std::sync::Arc;

use agentsessions_journal::{AppendBatch, AppendError, JournalStore};
use agentsessions_machine::events;
use agentsessions_pg::{PgJournal, PgOptions};

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

fn one(session: &str, head: i64, fence: i64) -> AppendBatch {
    AppendBatch {
        session: session.into(),
        expected_last_seq: head,
        fence,
        events: vec![events::input(
            &format!("x-{head}"),
            events::text_message("user", "hi"),
        )],
        compute_state: None,
        now_unix_nanos: 1_700_000_000_000_000_000 + head,
        release_lease: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_commits_and_each_keeps_its_outcome() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let j = Arc::new(PgJournal::open(&url, PgOptions::default()).await.unwrap());
    const SESSIONS: usize = 32;
    const ROUNDS: i64 = 10;
    for s in 0..SESSIONS {
        assert_eq!(j.mint_fence(&format!("s{s}"), 1, None).await.unwrap(), 1);
        assert_eq!(
            j.mint_fence(&format!("fenced{s}"), 1, None).await.unwrap(),
            1
        );
    }
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let j = j.clone();
        tasks.push(tokio::spawn(async move {
            let session = format!("s{s}");
            for head in 0..ROUNDS {
                // Every round, a stale writer (fence 0, on a session of its
                // own that stays empty) and a writer that lost the race
                // (old head) go out beside the good one.
                let (good, stale, late) = tokio::join!(
                    j.append(one(&session, head, 1)),
                    j.append(one(&format!("fenced{s}"), 0, 0)),
                    async {
                        match head {
                            0 => None,
                            _ => Some(j.append(one(&session, head - 1, 1)).await),
                        }
                    },
                );
                let good = good.unwrap();
                assert_eq!(good[0].seq, head + 1);
                assert!(
                    matches!(stale, Err(AppendError::Fenced { current: 1 })),
                    "{stale:?}"
                );
                // The late writer targets a head that is already gone.
                if let Some(late) = late {
                    assert!(
                        matches!(late, Err(AppendError::Conflict { head: h }) if h >= head),
                        "{late:?}"
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = j.group_stats();
    let appends = SESSIONS as u64 * ROUNDS as u64;
    assert_eq!(
        stats.appends, appends,
        "every acknowledged append was grouped"
    );
    assert!(
        stats.commits * 2 <= appends,
        "{stats:?}: concurrent appends should share commits"
    );
    for s in 0..SESSIONS {
        let session = format!("s{s}");
        assert_eq!(j.head(&session).await.unwrap(), ROUNDS);
        j.verify(&session).await.unwrap();
        let records = j.read(&session, 1, 0).await.unwrap();
        assert!(records.iter().all(|r| r.fence == 1));
        assert_eq!(
            j.head(&format!("fenced{s}")).await.unwrap(),
            0,
            "no stale write landed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_journals_grouping_over_the_same_sessions_neither_deadlock_nor_lose() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let a = Arc::new(PgJournal::open(&url, PgOptions::default()).await.unwrap());
    let b = Arc::new(PgJournal::open(&url, PgOptions::default()).await.unwrap());
    const SESSIONS: usize = 16;
    const WRITERS: usize = 16;
    const APPENDS: usize = 12;
    for s in 0..SESSIONS {
        a.put_session(
            agentsessions_journal::SessionMeta {
                uid: format!("s{s}"),
                ..Default::default()
            },
            1,
        )
        .await
        .unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let j = if w % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut won = 0usize;
            // Each writer walks the sessions in its own order, so groups on
            // the two journals lock overlapping sets of rows.
            for k in 0..APPENDS {
                let session = format!("s{}", (w * 7 + k * 5) % SESSIONS);
                loop {
                    let head = j.head(&session).await.unwrap();
                    match j.append(one(&session, head, 0)).await {
                        Ok(r) => {
                            assert_eq!(r[0].seq, head + 1);
                            won += 1;
                            break;
                        }
                        Err(AppendError::Conflict { .. }) => continue,
                        Err(e) => panic!("append: {e}"),
                    }
                }
            }
            won
        }));
    }
    let mut acknowledged = 0;
    for t in tasks {
        acknowledged += t.await.unwrap();
    }
    assert_eq!(acknowledged, WRITERS * APPENDS);
    let mut stored = 0;
    for s in 0..SESSIONS {
        let session = format!("s{s}");
        a.verify(&session).await.unwrap();
        stored += a.head(&session).await.unwrap() as usize;
    }
    assert_eq!(
        stored, acknowledged,
        "every acknowledged append is stored once"
    );
    assert!(a.group_stats().commits > 0 && b.group_stats().commits > 0);
}
