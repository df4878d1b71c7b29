//! Hash-chain verification: a Go-written chain verifies, and each kind of
//! damage is reported as the first failure with the right seq.

mod support;

use agentsessions_machine::canon;
use agentsessions_machine::chain::{self, ChainError, ChainVerifier};
use agentsessions_proto::v1::{
    Event, EventKind, HarnessEnd, LogRecord, Message, ModelCall, Part, TextPart, ToolCall, event,
    part,
};
use pbjson_types::value::Kind;
use pbjson_types::{Struct, Value};
use proptest::prelude::*;
use support::arb;

fn text_message(kind: EventKind, role: &str, text: &str) -> Event {
    Event {
        kind: kind as i32,
        body: Some(event::Body::Message(Message {
            role: role.into(),
            parts: vec![Part {
                part: Some(part::Part::Text(TextPart { text: text.into() })),
            }],
        })),
        ..Default::default()
    }
}

/// `completed.json` from the Go v0.1.2 fixtures, as records with the
/// recorded hashes (events rebuilt by hand).
fn completed_chain() -> Vec<LogRecord> {
    let events = [
        text_message(EventKind::EventInput, "user", "hello"),
        Event {
            kind: EventKind::EventModelCall as i32,
            body: Some(event::Body::Model(ModelCall {
                id: "49072a2a845249ea".into(),
                input_hash: "2611c24a1a665deca46265ed96d1e1efc699260c9cba9c07f22cda7939232c30"
                    .into(),
                model: "echo".into(),
                ..Default::default()
            })),
            ..Default::default()
        },
        text_message(EventKind::EventOutput, "assistant", "echo:hello"),
        Event {
            kind: EventKind::EventEnd as i32,
            body: Some(event::Body::End(HarnessEnd {
                state: "COMPLETED".into(),
                error: None,
            })),
            ..Default::default()
        },
    ];
    let hashes = [
        "62daf59c5c1e5062b1b0d47d5665b34aa52bf7ed0ca8a0b016af2c9827b5d8f6",
        "699f567f01dcee2cd3bcf8a6dd4eb4c14400a4b85f5cfd0d285dbb99687dd868",
        "ac9431332cbf3d0d3c6bd24dc7c3d41be4226e5494d24eeaa603cb7a2c895ce7",
        "1b0f72670340a5c139b39a2922bca9fa202e191a4d610f2211f53a501f3ab5fa",
    ];
    let mut prev = "";
    events
        .into_iter()
        .zip(hashes)
        .enumerate()
        .map(|(i, (ev, h))| {
            let rec = LogRecord {
                seq: i as i64 + 1,
                prev_hash: prev.into(),
                content_hash: h.into(),
                fence: 1,
                event: Some(ev),
            };
            prev = h;
            rec
        })
        .collect()
}

#[test]
fn go_written_chain_verifies() {
    let recs = completed_chain();
    assert_eq!(chain::verify(&recs), Ok(()));
    assert_eq!(chain::verify(&[]), Ok(()));
    // Any suffix verifies from the hash before it.
    for k in 1..recs.len() {
        assert_eq!(
            chain::verify_from(&recs[k - 1].content_hash, k as i64 + 1, &recs[k..]),
            Ok(())
        );
    }
}

#[test]
fn tampered_body_is_a_content_mismatch_at_that_seq() {
    let mut recs = completed_chain();
    if let Some(event::Body::Message(m)) = recs[2].event.as_mut().and_then(|e| e.body.as_mut()) {
        m.role = "user".into();
    }
    match chain::verify(&recs) {
        Err(ChainError::ContentMismatch {
            seq,
            stored,
            computed,
        }) => {
            assert_eq!(seq, 3);
            assert_eq!(stored, recs[2].content_hash);
            assert_ne!(computed, stored);
            assert_eq!(computed.len(), 64);
        }
        other => panic!("want content mismatch, got {other:?}"),
    }
}

#[test]
fn tampered_stored_hash_is_detected_where_it_sits() {
    let mut recs = completed_chain();
    recs[1].content_hash = "deadbeef".into();
    assert!(matches!(
        chain::verify(&recs),
        Err(ChainError::ContentMismatch { seq: 2, .. })
    ));
    // The Go host compares hash text exactly: uppercase hex is not accepted.
    let mut recs = completed_chain();
    recs[0].content_hash = recs[0].content_hash.to_uppercase();
    recs[1].prev_hash = recs[0].content_hash.clone();
    assert!(matches!(
        chain::verify(&recs),
        Err(ChainError::ContentMismatch { seq: 1, .. })
    ));
}

#[test]
fn broken_link_names_the_seq() {
    let mut recs = completed_chain();
    recs[3].prev_hash = recs[1].content_hash.clone();
    assert_eq!(chain::verify(&recs), Err(ChainError::BrokenLink { seq: 4 }));
    let mut recs = completed_chain();
    recs[0].prev_hash = "0".repeat(64);
    assert_eq!(chain::verify(&recs), Err(ChainError::BrokenLink { seq: 1 }));
}

#[test]
fn gaps_and_wrong_start_are_reported() {
    let mut recs = completed_chain();
    recs.remove(1);
    assert_eq!(
        chain::verify(&recs),
        Err(ChainError::Gap {
            seq: 3,
            expected: 2
        })
    );
    let recs = completed_chain();
    assert_eq!(
        chain::verify(&recs[1..]),
        Err(ChainError::Gap {
            seq: 2,
            expected: 1
        })
    );
    let mut recs = completed_chain();
    recs.swap(2, 3);
    assert_eq!(
        chain::verify(&recs),
        Err(ChainError::Gap {
            seq: 4,
            expected: 3
        })
    );
}

#[test]
fn missing_or_uncanonicalizable_event_is_undecodable() {
    let mut recs = completed_chain();
    recs[1].event = None;
    let err = chain::verify(&recs).unwrap_err();
    assert!(matches!(err, ChainError::Undecodable { seq: 2, .. }));
    assert!(!err.is_tamper());
    assert_eq!(err.seq(), 2);

    let mut args = Struct::default();
    args.fields.insert(
        "x".into(),
        Value {
            kind: Some(Kind::NumberValue(f64::NAN)),
        },
    );
    let bad = LogRecord {
        seq: 1,
        event: Some(Event {
            body: Some(event::Body::Tool(ToolCall {
                args: Some(args),
                ..Default::default()
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    match chain::verify(&[bad]) {
        Err(ChainError::Undecodable { seq: 1, reason }) => {
            assert_eq!(reason, "non-finite number at tool.args.x");
        }
        other => panic!("want undecodable, got {other:?}"),
    }
}

#[test]
fn streaming_verifier_is_unchanged_by_a_rejected_record() {
    let recs = completed_chain();
    let mut v = ChainVerifier::new();
    v.push(&recs[0]).unwrap();
    let mut forged = recs[1].clone();
    forged.content_hash = "0".repeat(64);
    assert!(v.push(&forged).is_err());
    assert_eq!(v.next_seq(), Some(2));
    assert_eq!(v.head_hash(), recs[0].content_hash);
    for r in &recs[1..] {
        v.push(r).unwrap();
    }
    assert_eq!(v.head_hash(), recs[3].content_hash);
    assert_eq!(v.next_seq(), Some(5));
}

#[test]
fn nothing_follows_seq_i64_max() {
    let ev = text_message(EventKind::EventInput, "user", "x");
    let h = canon::content_hash("p", i64::MAX, &ev).unwrap();
    let last = LogRecord {
        seq: i64::MAX,
        prev_hash: "p".into(),
        content_hash: h.clone(),
        fence: 1,
        event: Some(ev.clone()),
    };
    let mut v = ChainVerifier::resume("p", i64::MAX);
    v.push(&last).unwrap();
    assert_eq!(v.next_seq(), None);
    let wrapped = LogRecord {
        seq: i64::MIN,
        prev_hash: h,
        ..last
    };
    assert!(matches!(v.push(&wrapped), Err(ChainError::Gap { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn valid_chains_verify(recs in arb::chain(8)) {
        prop_assert_eq!(chain::verify(&recs), Ok(()));
    }

    #[test]
    fn any_body_change_is_caught_at_its_seq(recs in arb::chain(8), pick in any::<prop::sample::Index>()) {
        let mut recs = recs;
        let i = pick.index(recs.len());
        if let Some(ev) = recs[i].event.as_mut() {
            ev.execution_id.push('!');
        }
        match chain::verify(&recs) {
            Err(ChainError::ContentMismatch { seq, .. }) => prop_assert_eq!(seq, i as i64 + 1),
            other => prop_assert!(false, "got {:?}", other),
        }
    }

    #[test]
    fn any_relinking_is_caught_at_its_seq(recs in arb::chain(8), pick in any::<prop::sample::Index>()) {
        let mut recs = recs;
        let i = pick.index(recs.len());
        recs[i].prev_hash.push('0');
        prop_assert_eq!(chain::verify(&recs), Err(ChainError::BrokenLink { seq: i as i64 + 1 }));
    }
}

#[test]
fn link_check_sees_gaps_and_broken_links_but_not_rewritten_bodies() {
    let recs = completed_chain();
    assert_eq!(chain::check_links(&recs, 1), Ok(()));
    assert_eq!(chain::check_links(&recs[2..], 3), Ok(()));
    assert_eq!(
        chain::check_links(&recs[1..], 1),
        Err(ChainError::Gap {
            seq: 2,
            expected: 1
        })
    );
    let mut gap = completed_chain();
    gap.remove(2);
    assert_eq!(
        chain::check_links(&gap, 1),
        Err(ChainError::Gap {
            seq: 4,
            expected: 3
        })
    );
    let mut broken = completed_chain();
    broken[3].prev_hash = broken[1].content_hash.clone();
    assert_eq!(
        chain::check_links(&broken, 1),
        Err(ChainError::BrokenLink { seq: 4 })
    );
    // Bodies are not rehashed: that is verify's job, not the load's.
    let mut body = completed_chain();
    body[2].fence += 7;
    assert_eq!(chain::check_links(&body, 1), Ok(()));
}
