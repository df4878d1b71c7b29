//! The journal summary against a full rescan: a journal built record by
//! record — in any chunking, with snapshots taken and kept while the
//! original grows — answers every question exactly as the projections do
//! over its records, for arbitrary journals (mostly invalid ones) and for
//! well-formed gated sessions.

#[path = "support/journal_log.rs"]
mod jl;

use agentsessions_machine::chain::ChainError;
use agentsessions_machine::events;
use agentsessions_machine::journal::Journal;
use agentsessions_machine::journal::approval::scan;
use agentsessions_machine::journal::legacy::legacy_prefix;
use agentsessions_machine::journal::projection::session_status;
use agentsessions_proto::v1::{Event, LogRecord, Mediation, lifecycle};
use jl::*;
use proptest::prelude::*;

/// Every answer of `journal`'s summary equals the rescan of `records`.
fn agrees(journal: &Journal, records: &[LogRecord]) -> Result<(), TestCaseError> {
    let s = journal.summary();
    let head = records.last().map_or(0, |r| r.seq);
    prop_assert_eq!(journal.to_vec(), records.to_vec());
    prop_assert_eq!(s.head(), head);
    prop_assert_eq!(
        s.head_hash(),
        records.last().map_or("", |r| r.content_hash.as_str())
    );
    let full = scan(records, 0);
    // As text: a NaN in a call's args is unequal to itself.
    prop_assert_eq!(format!("{:?}", s.approval_scan()), format!("{full:?}"));
    let selected = full.map(|f| f.selected().cloned());
    prop_assert_eq!(format!("{:?}", s.selected_gate()), format!("{selected:?}"));
    prop_assert_eq!(s.legacy_prefix(), legacy_prefix(records));
    prop_assert_eq!(s.status(), session_status(records, head));
    Ok(())
}

const IDS: [&str; 4] = [
    "",
    "e1aaaaaaaaaaaaaa",
    "e2bbbbbbbbbbbbbb",
    "e3cccccccccccccc",
];
const CALLS: [&str; 3] = ["c1", "c2", ""];

/// Plausible pieces in any order (most journals this makes are invalid).
fn piece() -> impl Strategy<Value = Event> {
    (0usize..4, 0usize..16, 0usize..3, 0i64..8, any::<bool>()).prop_map(
        |(id, which, call_ix, seq, flag)| {
            let id = IDS[id];
            let c = CALLS[call_ix];
            match which {
                0 => start(id, if flag { Some(seq % 3) } else { None }),
                1 => input(id, "x"),
                2 => model_call(id),
                3 => output(id, "y"),
                4 => ordinary_call(id, c),
                5 => gated_call(id, c),
                6 => tool_call_ev(id, call(c, Mediation::RequiresApproval, "")),
                7 => result(id, c),
                8 => receipt(id, c, seq, seq + 1),
                9 => request(id, c),
                10 => decision(id, c, seq, flag),
                11 => end(id),
                12 => error(id),
                13 => events::fork_marker(seq),
                14 => events::end_canceled(id),
                _ => lifecycle(if flag {
                    lifecycle::Kind::LifecycleSuspend
                } else {
                    lifecycle::Kind::LifecycleResume
                }),
            }
        },
    )
}

/// One turn of a well-formed session, cut after `stop` steps: start, an
/// input, optionally a gated call with its request, decision and receipt,
/// output, end (or a Cancel's end).
#[derive(Debug, Clone)]
struct Turn {
    gated: bool,
    approve: bool,
    cancel: bool,
    stop: usize,
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.2),
        0usize..9,
    )
        .prop_map(|(gated, approve, cancel, stop)| Turn {
            gated,
            approve,
            cancel,
            stop,
        })
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Start,
    Input,
    Call,
    Request,
    Decision,
    Receipt,
    Output,
    End,
}

/// Appends the turns; every turn but the last runs to its end.
fn session(log: &mut Log, turns: &[Turn]) {
    use Step::*;
    for (i, t) in turns.iter().enumerate() {
        let id = format!("e{i:015}");
        let steps: &[Step] = if t.gated {
            &[Start, Input, Call, Request, Decision, Receipt, Output, End]
        } else {
            &[Start, Input, Output, End]
        };
        let n = if i + 1 == turns.len() {
            t.stop.min(steps.len())
        } else {
            steps.len()
        };
        for step in &steps[..n] {
            let ev = match step {
                Start => start(&id, Some(1)),
                Input => input(&id, "hi"),
                Call => gated_call(&id, "c1"),
                Request => request(&id, "c1"),
                Decision => decision(&id, "c1", log.head(), t.approve),
                Receipt => receipt(&id, "c1", log.head() - 1, log.head()),
                Output => output(&id, "ok"),
                End if t.cancel => events::end_canceled(&id),
                End => end(&id),
            };
            log.push(ev);
        }
    }
}

/// Builds the journal of `records` in chunks of the given sizes, keeping a
/// snapshot after each chunk, and checks every snapshot against the prefix
/// it held once the original has grown past it.
fn built_in_chunks(records: &[LogRecord], chunks: &[usize]) -> Result<(), TestCaseError> {
    let mut j = Journal::new();
    let mut snapshots = Vec::new();
    let mut at = 0;
    for &c in chunks.iter().cycle().take(records.len() + 1) {
        let end = (at + c.max(1)).min(records.len());
        prop_assert!(j.extend(records[at..end].iter().cloned()).is_ok());
        at = end;
        snapshots.push((j.clone(), at));
        if at == records.len() {
            break;
        }
    }
    agrees(&j, records)?;
    for (snap, n) in &snapshots {
        agrees(snap, &records[..*n])?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_journal_summarizes_as_its_rescan(
        evs in prop::collection::vec(piece(), 0..32),
        chunks in prop::collection::vec(1usize..5, 1..4),
    ) {
        let mut log = Log::new();
        log.extend(evs);
        built_in_chunks(&log.records, &chunks)?;
    }

    #[test]
    fn a_gated_session_summarizes_as_its_rescan(
        turns in prop::collection::vec(turn(), 1..6),
        forked in any::<bool>(),
        chunks in prop::collection::vec(1usize..4, 1..4),
    ) {
        let mut log = Log::new();
        let (first, rest) = turns.split_at(turns.len() / 2);
        session(&mut log, first);
        if forked {
            log.push(events::fork_marker(log.head()));
        }
        session(&mut log, rest);
        built_in_chunks(&log.records, &chunks)?;
    }
}

#[test]
fn a_record_that_breaks_the_chain_is_refused_and_ends_the_journal() {
    let mut log = Log::new();
    log.extend([start("e1", Some(1)), input("e1", "x"), end("e1")]);
    let mut j = Journal::from_records(log.records[..2].iter().cloned());
    assert!(j.broken().is_none());
    // A gap.
    let gap = j.push(log.records[2].clone().with_seq(4));
    assert_eq!(
        gap,
        Err(ChainError::Gap {
            seq: 4,
            expected: 3
        })
    );
    // Once broken it takes nothing, not even the record that fits.
    assert!(j.push(log.records[2].clone()).is_err());
    assert_eq!(j.len(), 2);
    assert_eq!(
        j.broken(),
        Some(&ChainError::Gap {
            seq: 4,
            expected: 3
        })
    );
    // A link to another chain.
    let mut other = log.records[2].clone();
    other.prev_hash = "elsewhere".into();
    let mut j = Journal::from_records(log.records[..2].iter().cloned());
    assert_eq!(j.push(other), Err(ChainError::BrokenLink { seq: 3 }));
}

/// Seq rewriting for the refusal test.
trait WithSeq {
    fn with_seq(self, seq: i64) -> Self;
}

impl WithSeq for LogRecord {
    fn with_seq(mut self, seq: i64) -> Self {
        self.seq = seq;
        self
    }
}
