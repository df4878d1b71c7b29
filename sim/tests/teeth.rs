//! The mutation check: each planted bug (`agentsessions_machine::faults`)
//! must make the default sweeps fail, and for the rule that names the bug.
//! The sweeps passing with no bug armed is `sweeps.rs`.

use agentsessions_machine::faults::{self, Fault};
use agentsessions_sim::explore;
use agentsessions_sim::oracle::Rule;
use agentsessions_sim::scenario;
use agentsessions_sim::sweep::{self, Config};

/// The rules that may report each bug (the first sweep to reach the bug
/// reports the first rule it breaks).
fn expected(f: Fault) -> &'static [Rule] {
    match f {
        Fault::SkipFenceCheck => &[Rule::SupersededFence],
        Fault::AckBeforeDurable => &[Rule::AckBeforeDurable, Rule::AckLost],
        Fault::ExecuteBeforeDurable => &[Rule::RecordBeforeEffect],
        Fault::AcceptInheritedApproval => &[Rule::Expectation, Rule::Inherited],
        Fault::SkipInputHashCheck => &[Rule::InputHash],
        Fault::ResumeWithoutFence => &[Rule::FenceProvenance],
        Fault::DropCas => &[Rule::Cas],
        Fault::ReexecuteOnReplay => &[Rule::ReplayCalls],
        Fault::DenialExecutes => &[Rule::Denial],
        Fault::RedriveCanceled => &[Rule::Canceled, Rule::Expectation],
        Fault::DeleteKeepsRecords => &[Rule::Deleted],
        Fault::IgnoreTombstone => &[Rule::Deleted],
        Fault::SkipProjectCheck => &[Rule::Authorization],
        Fault::StaleSummary => &[Rule::Summary],
        Fault::SkipPolicyFloor => &[Rule::Approval, Rule::Denial, Rule::Expectation],
        Fault::RerunUnfinished => &[Rule::DuplicateExecution],
        Fault::ExpiryIgnoresDecision => &[Rule::Expectation, Rule::Approval],
    }
}

fn caught(f: Fault) {
    let _armed = faults::arm(f);
    let cfg = Config {
        walks: 20,
        ..Config::default_sweep()
    };
    let failure = match sweep::run(&cfg, &mut |_| {}) {
        Ok(s) => panic!(
            "{}: the sweeps passed ({} cuts, {} states)",
            f.name(),
            s.cuts,
            s.states
        ),
        Err(failure) => failure,
    };
    println!(
        "{}: caught by {} ({:?}): {}",
        f.name(),
        failure.scenario,
        failure.violation.rule,
        failure.violation.detail
    );
    assert!(
        expected(f).contains(&failure.violation.rule),
        "{}: caught for the wrong reason: {}",
        f.name(),
        failure.violation
    );
    // The printed reproduction replays to a failure.
    let scn = scenario::by_name(failure.scenario).expect("scenario");
    let (replayed, _) = explore::replay(&scn, failure.crashes, &failure.path, false);
    assert!(
        replayed.is_err(),
        "{}: the failing path replays clean",
        f.name()
    );
}

#[test]
fn every_planted_bug_is_listed_here() {
    assert_eq!(Fault::ALL.len(), 17);
    for f in Fault::ALL {
        assert_eq!(Fault::by_name(f.name()), Some(f));
        assert!(!expected(f).is_empty());
    }
}

#[test]
fn skip_fence_check() {
    caught(Fault::SkipFenceCheck);
}

#[test]
fn ack_before_durable() {
    caught(Fault::AckBeforeDurable);
}

#[test]
fn execute_before_durable() {
    caught(Fault::ExecuteBeforeDurable);
}

#[test]
fn accept_inherited_approval() {
    caught(Fault::AcceptInheritedApproval);
}

#[test]
fn skip_input_hash_check() {
    caught(Fault::SkipInputHashCheck);
}

#[test]
fn resume_without_fence() {
    caught(Fault::ResumeWithoutFence);
}

#[test]
fn drop_cas() {
    caught(Fault::DropCas);
}

#[test]
fn reexecute_on_replay() {
    caught(Fault::ReexecuteOnReplay);
}

#[test]
fn denial_executes() {
    caught(Fault::DenialExecutes);
}

#[test]
fn expiry_ignores_decision() {
    caught(Fault::ExpiryIgnoresDecision);
}

#[test]
fn a_failure_report_names_the_command_and_a_shrunk_trace() {
    let _armed = faults::arm(Fault::ResumeWithoutFence);
    let scn = scenario::by_name("echo-turn").expect("scenario");
    let failure = explore::sweep_crashes(&scn, 1).expect_err("the bug is caught");
    let report = explore::report(&failure, &scn);
    println!("{report}");
    assert!(report.contains("reproduce: cargo run -p agentsessions-sim --release -- --scenario echo-turn --crashes 1 --path "));
    assert!(report.contains("still fails: FenceProvenance"), "{report}");
    let shrunk = explore::shrink(&scn, 1, &failure.path);
    assert!(shrunk.len() <= failure.path.len());
    assert!(explore::replay(&scn, 1, &shrunk, false).0.is_err());
}

#[test]
fn redrive_canceled() {
    caught(Fault::RedriveCanceled);
}

#[test]
fn delete_keeps_records() {
    caught(Fault::DeleteKeepsRecords);
}

#[test]
fn ignore_tombstone() {
    caught(Fault::IgnoreTombstone);
}

#[test]
fn skip_project_check() {
    caught(Fault::SkipProjectCheck);
}

#[test]
fn stale_summary() {
    caught(Fault::StaleSummary);
}

#[test]
fn skip_policy_floor() {
    caught(Fault::SkipPolicyFloor);
}

#[test]
fn rerun_unfinished() {
    caught(Fault::RerunUnfinished);
}
