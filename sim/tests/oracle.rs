//! The oracle on its own, fed by hand through a minimal `JournalView` — the
//! way a runner other than the explorer (a madsim run of the shells) would.

use std::collections::BTreeMap;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{AppendError, SessionRow};
use agentsessions_proto::v1::LogRecord;
use agentsessions_sim::oracle::{JournalView, Oracle, Rule};
use agentsessions_testkit::MemStore;

/// A journal held as plain vectors.
#[derive(Default)]
struct Plain(BTreeMap<String, Vec<LogRecord>>);

impl JournalView for Plain {
    fn sessions(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn records(&self, session: &str) -> std::borrow::Cow<'_, [LogRecord]> {
        std::borrow::Cow::Borrowed(self.0.get(session).map_or(&[][..], Vec::as_slice))
    }
    fn row(&self, _: &str) -> Option<SessionRow> {
        None
    }
    fn fence(&self, _: &str) -> i64 {
        1
    }
}

fn journal(texts: &[&str]) -> Vec<LogRecord> {
    let mut store = MemStore::new();
    let evs: Vec<_> = texts
        .iter()
        .map(|t| events::output("e1", events::assistant_text(t)))
        .collect();
    store.append("s", 0, 1, &evs, 0).expect("appends")
}

#[test]
fn an_acknowledged_record_must_be_durable_and_survive_crashes() {
    let records = journal(&["a", "b"]);
    let mut view = Plain::default();
    view.0.insert("s".into(), records.clone());
    let mut oracle = Oracle::default();
    oracle
        .on_ack(&view, "s", &records[1])
        .expect("durable when shown");
    oracle.on_crash(&view).expect("still there");
    view.0.insert("s".into(), records[..1].to_vec());
    assert_eq!(oracle.on_crash(&view).unwrap_err().rule, Rule::AckLost);
    let mut fresh = Oracle::default();
    assert_eq!(
        fresh.on_ack(&view, "s", &records[1]).unwrap_err().rule,
        Rule::AckBeforeDurable
    );
}

#[test]
fn appends_are_fenced_by_their_own_incarnation_and_cas_checked() {
    let mut oracle = Oracle::default();
    oracle.on_mint(1, "s", 1);
    oracle
        .on_append(1, "s", 1)
        .expect("minted by incarnation 1");
    assert_eq!(
        oracle.on_append(2, "s", 1).unwrap_err().rule,
        Rule::FenceProvenance
    );
    let records = journal(&["a"]);
    oracle
        .on_commit("s", 0, 1, 1, &Ok(records.clone()))
        .expect("at the expected head, under the stored fence");
    assert_eq!(
        oracle
            .on_commit("s", 3, 1, 1, &Ok(records.clone()))
            .unwrap_err()
            .rule,
        Rule::Cas
    );
    assert_eq!(
        oracle
            .on_commit("s", 0, 1, 2, &Ok(records))
            .unwrap_err()
            .rule,
        Rule::SupersededFence
    );
    oracle
        .on_commit("s", 0, 1, 2, &Err(AppendError::Fenced { current: 2 }))
        .expect("a refused append is fine");
    assert_eq!(oracle.coverage.get("append fenced"), Some(&1));
}

#[test]
fn a_journal_that_verifies_passes_and_a_tampered_one_does_not() {
    let mut view = Plain::default();
    view.0.insert("s".into(), journal(&["a", "b", "c"]));
    let oracle = Oracle::default();
    oracle.check_journal(&view).expect("a fresh chain verifies");
    view.0.get_mut("s").unwrap()[1].content_hash = "0".repeat(64);
    assert_eq!(oracle.check_journal(&view).unwrap_err().rule, Rule::Chain);
}
