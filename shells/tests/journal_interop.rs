//! Go interop: the nine v0.1.2 fixtures, replayed into a SQLite journal,
//! must come back record for record, and verify after reopen.

mod common;

use agentsessions_proto::v1::LogRecord;
use agentsessions_shells::journal::{AppendBatch, JournalStore};
use agentsessions_testkit::interop::{fixture_dir, parse_go_records};
use common::*;

const FIXTURES: [&str; 9] = [
    "completed",
    "crashed-input",
    "crashed-model",
    "crashed-output",
    "mixed-completed",
    "mixed-interrupted",
    "multi-turn-crashed-output",
    "multi-turn",
    "upgraded-resume",
];

/// False (after saying so) when the fixtures are absent and not required.
fn fixtures_present() -> bool {
    if fixture_dir().is_dir() {
        return true;
    }
    assert!(
        std::env::var_os("AGENTSESSIONS_REQUIRE_FIXTURES").is_none(),
        "Go fixtures missing at {}",
        fixture_dir().display()
    );
    eprintln!(
        "SKIPPED: Go fixtures not found at {}",
        fixture_dir().display()
    );
    false
}

fn load(name: &str) -> Vec<LogRecord> {
    let path = fixture_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_go_records(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[tokio::test]
async fn go_fixtures_round_trip_through_sqlite() {
    if !fixtures_present() {
        return;
    }
    let db = TempDb::new();
    let mut total = 0;
    {
        let store = db.open();
        for name in FIXTURES {
            let records = load(name);
            assert!(!records.is_empty(), "{name}");
            let mut fence = 0;
            for rec in &records {
                // Mint up to the fence the Go writer held for this record.
                while fence < rec.fence {
                    fence = store.mint_fence(name, 1, None).await.unwrap();
                }
                assert_eq!(fence, rec.fence, "{name} seq {}", rec.seq);
                let got = store
                    .append(AppendBatch {
                        session: name.into(),
                        expected_last_seq: rec.seq - 1,
                        fence: rec.fence,
                        compute_state:
                            agentsessions_machine::journal::projection::batch_compute_state(&[rec
                                .event
                                .clone()
                                .unwrap()]),
                        events: vec![rec.event.clone().unwrap()],
                        now_unix_nanos: 1,
                        release_lease: None,
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{name} seq {}: {e}", rec.seq));
                assert_eq!(got, vec![rec.clone()], "{name} seq {}", rec.seq);
                total += 1;
            }
        }
    }
    assert_eq!(total, 46, "the fixtures hold 46 records");

    let store = db.open();
    for name in FIXTURES {
        let want = load(name);
        store.verify(name).await.unwrap();
        // Hashes come back exactly as stored.
        assert_eq!(store.read(name, 1, 0).await.unwrap(), want, "{name}");
        let info = store.session_info(name).await.unwrap();
        assert_eq!(info.last_seq, want.len() as i64);
        assert_eq!(info.fence, want.last().unwrap().fence);
    }
    let heads: Vec<String> = FIXTURES
        .iter()
        .map(|n| load(n).last().unwrap().content_hash[..12].to_owned())
        .collect();
    assert!(
        heads.contains(&"1b0f72670340".to_owned()),
        "completed.json head"
    );
    assert!(
        heads.contains(&"efdfe2a4c045".to_owned()),
        "mixed-completed.json head"
    );
}

#[tokio::test]
async fn fixture_hashes_survive_tampering_checks() {
    // Storing a fixture verbatim (bypassing append) must verify, and a
    // single changed body must be caught at its seq.
    if !fixtures_present() {
        return;
    }
    let db = TempDb::new();
    drop(db.open());
    let records = load("multi-turn");
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    for r in &records {
        conn.execute(
            "INSERT INTO events(session, seq, prev_hash, hash, fence, event) VALUES ('m', ?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                r.seq,
                r.prev_hash,
                r.content_hash,
                r.fence,
                agentsessions_shells::journal::encode::encode_event(r.event.as_ref().unwrap())
            ],
        )
        .unwrap();
    }
    let store = db.open();
    store.verify("m").await.unwrap();
    let mut changed = records[4].event.clone().unwrap();
    changed.execution_id = "forged".into();
    conn.execute(
        "UPDATE events SET event = ?1 WHERE session = 'm' AND seq = 5",
        [agentsessions_shells::journal::encode::encode_event(
            &changed,
        )],
    )
    .unwrap();
    match store.verify("m").await {
        Err(agentsessions_shells::journal::VerifyError::Tampered { seq: 5, .. }) => {}
        other => panic!("expected tamper at seq 5, got {other:?}"),
    }
}
