//! Throughput of the canonical form and content hash, against raw SHA-256
//! over the same bytes. Run with
//! `cargo bench -p agentsessions-machine --bench canon`.
//!
//! The events are OUTPUT messages shaped like real journal records (actor,
//! timestamp, execution id, a few hundred bytes of text), so a canonical
//! record is about 500 bytes. Single-threaded; plain `Instant` timing.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentsessions_machine::{canon, chain};
use agentsessions_proto::v1::{
    Event, EventKind, IdentityRef, LogRecord, Message, Part, TextPart, event, part,
};
use agentsessions_proto::wkt::Timestamp;
use sha2::{Digest, Sha256};

const RECORDS: usize = 4096;
const RUN_FOR: Duration = Duration::from_millis(1500);

fn make_event(i: usize) -> Event {
    // Deterministic, varied text: a sentence with the index woven in, plus a
    // quote and a newline so the escaper has some work.
    let text = format!(
        "Step {i}: found {n} matching files under \"src/\"; reviewing the \
         largest first.\nNext: run the test suite again and report any \
         failures by file.",
        n = i % 97
    );
    Event {
        execution_id: format!(
            "exec-{:016x}",
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ),
        ts: Some(Timestamp::new(
            1_700_000_000 + i as i64,
            ((i * 1_000_003) % 1_000_000_000) as i32,
        )),
        schema_version: 1,
        kind: EventKind::EventOutput as i32,
        body: Some(event::Body::Message(Message {
            role: "assistant".into(),
            parts: vec![Part {
                part: Some(part::Part::Text(TextPart { text })),
            }],
        })),
        actor: Some(IdentityRef {
            principal: "agent://coder".into(),
            issuer: "https://login.example.com/tenant".into(),
            subject: "sub-7f3a".into(),
        }),
    }
}

fn build_chain() -> Vec<LogRecord> {
    let mut prev = String::new();
    (0..RECORDS)
        .map(|i| {
            let ev = make_event(i);
            let seq = i as i64 + 1;
            let h = canon::content_hash(&prev, seq, &ev).expect("bench events are valid");
            LogRecord {
                seq,
                prev_hash: std::mem::replace(&mut prev, h.clone()),
                content_hash: h,
                fence: 1,
                event: Some(ev),
            }
        })
        .collect()
}

struct Rate {
    records_per_s: f64,
    mb_per_s: f64,
    ns_per_record: f64,
}

/// Runs `pass` (one pass over all records) repeatedly for about `RUN_FOR`
/// after one warm-up pass.
fn measure(bytes_per_pass: usize, mut pass: impl FnMut()) -> Rate {
    pass();
    let start = Instant::now();
    let mut passes = 0u64;
    while start.elapsed() < RUN_FOR {
        pass();
        passes += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let records = passes as f64 * RECORDS as f64;
    Rate {
        records_per_s: records / secs,
        mb_per_s: passes as f64 * bytes_per_pass as f64 / secs / 1e6,
        ns_per_record: secs * 1e9 / records,
    }
}

fn report(name: &str, r: &Rate) {
    println!(
        "{name:<34} {:>12.0} records/s {:>9.1} MB/s {:>8.0} ns/record",
        r.records_per_s, r.mb_per_s, r.ns_per_record
    );
}

fn main() {
    let recs = build_chain();
    let canonical: Vec<Vec<u8>> = recs
        .iter()
        .map(|r| {
            canon::canonical_record(&r.prev_hash, r.seq, r.event.as_ref().expect("set"))
                .expect("valid")
        })
        .collect();
    let total: usize = canonical.iter().map(Vec::len).sum();
    println!(
        "{RECORDS} records, mean canonical record {} bytes",
        total / RECORDS
    );

    let mut buf = Vec::with_capacity(1024);
    let canon_only = measure(total, || {
        for r in &recs {
            buf.clear();
            canon::canonical_record_into(
                &mut buf,
                &r.prev_hash,
                r.seq,
                r.event.as_ref().expect("set"),
            )
            .expect("valid");
            black_box(&buf);
        }
    });
    let canon_hash = measure(total, || {
        for r in &recs {
            let h = canon::content_hash(&r.prev_hash, r.seq, r.event.as_ref().expect("set"))
                .expect("valid");
            black_box(h);
        }
    });
    let raw_sha = measure(total, || {
        for c in &canonical {
            black_box(Sha256::digest(black_box(c)));
        }
    });
    let verify = measure(total, || {
        chain::verify(black_box(&recs)).expect("chain verifies");
    });

    report("canonicalize only", &canon_only);
    report("canonicalize + hash (content_hash)", &canon_hash);
    report("raw sha256 of canonical bytes", &raw_sha);
    report("chain::verify", &verify);
    println!(
        "ratio (canonicalize+hash / raw sha256): {:.2}",
        canon_hash.mb_per_s / raw_sha.mb_per_s
    );
    println!(
        "ratio (verify / raw sha256):            {:.2}",
        verify.mb_per_s / raw_sha.mb_per_s
    );
}
