//! The default sweeps (what `.ci/run` and the README call the simulation
//! tests): every crash cut of every crash scenario with up to two crashes
//! per run, every interleaving of every race scenario to the default depth,
//! and seeded walks. Each test prints its counts.

use agentsessions_sim::explore::{self, Stats};
use agentsessions_sim::scenario;
use agentsessions_sim::sweep::{self, Config};

fn print(what: &str, s: &Stats) {
    println!(
        "{what}: scenarios {} crash cuts {} recoveries {} runs {} race states {} race end states {} interleavings {} walks {} digest {:016x}",
        s.scenarios,
        s.cuts,
        s.recoveries,
        s.runs,
        s.states,
        s.terminals,
        s.interleavings,
        s.walks,
        s.digest.finish()
    );
    for (k, v) in &s.coverage {
        println!("  coverage: {k}: {v} runs");
    }
}

fn fail(f: explore::Failure) -> ! {
    let scn = scenario::by_name(f.scenario).expect("failures name a scenario");
    panic!("{}", explore::report(&f, &scn));
}

#[test]
fn every_crash_cut_recovers_and_keeps_the_invariants() {
    let mut total = Stats::default();
    for scn in scenario::crash_scenarios() {
        let s = explore::sweep_crashes(&scn, Config::default_sweep().crashes)
            .unwrap_or_else(|f| fail(f));
        assert!(
            s.cuts > 0 && s.recoveries > 0,
            "{}: no cut explored",
            scn.name
        );
        total.add(&s);
    }
    print("crash cuts", &total);
    assert!(total.cuts >= 10_000, "only {} crash cuts", total.cuts);
    assert!(
        total.lost_answers >= 100,
        "only {} lost answers",
        total.lost_answers
    );
    for needed in [
        "answer lost on a live host: write committed",
        "answer lost on a live host: write not committed",
        "crash: torn transaction",
        "crash: write committed, answer lost",
        "model call re-driven by a later incarnation",
        "tool intent re-driven by a later incarnation",
        "approved gate executed",
        "executor found an unfinished run",
        "a re-run found its effect already made",
        "an idempotent tool ran again",
    ] {
        assert!(
            total.coverage.contains_key(needed),
            "never reached: {needed}"
        );
    }
}

#[test]
fn every_interleaving_of_the_races_keeps_the_invariants() {
    let mut total = Stats::default();
    for scn in scenario::race_scenarios() {
        let s = explore::sweep_race(&scn, Config::default_sweep().race_depth)
            .unwrap_or_else(|f| fail(f));
        assert!(s.states > 1, "{}: nothing to interleave", scn.name);
        total.add(&s);
    }
    print("interleavings", &total);
    for needed in [
        "append fenced",
        "append conflict",
        "executor deduplicated a re-drive",
        "a human decision beat the expiry",
        "the expiry beat a human decision",
    ] {
        assert!(
            total.coverage.contains_key(needed),
            "never reached: {needed}"
        );
    }
}

#[test]
fn seeded_walks_keep_the_invariants() {
    let cfg = Config {
        walks_only: true,
        ..Config::default_sweep()
    };
    let s = sweep::run(&cfg, &mut |l| println!("{l}")).unwrap_or_else(|f| fail(f));
    print("walks", &s);
    assert_eq!(s.walks, cfg.walks);
}

#[test]
fn the_same_seed_gives_the_same_trace_digest() {
    let all = scenario::all();
    for i in 0..20 {
        let seed = sweep::walk_seed(7, i);
        let scn = sweep::walk_scenario(seed, &all);
        let a = explore::walk(scn, seed, 3).unwrap_or_else(|f| fail(f));
        let b = explore::walk(scn, seed, 3).unwrap_or_else(|f| fail(f));
        assert_eq!(a, b, "{} seed {seed}", scn.name);
        // The choice path alone reproduces the run.
        let (replayed, _) = explore::replay(scn, 3, &a.1, false);
        assert_eq!(replayed, Ok(a.0), "{} seed {seed}: path replay", scn.name);
        println!("{} seed {seed}: digest {:016x}", scn.name, a.0);
    }
    let scn = scenario::by_name("race-zombie-echo").expect("scenario");
    let digests: std::collections::BTreeSet<u64> = (0..10)
        .map(|s| explore::walk(&scn, s, 3).unwrap_or_else(|f| fail(f)).0)
        .collect();
    assert!(digests.len() > 1, "different seeds explore different runs");
}

#[test]
fn paths_print_and_parse() {
    for p in [vec![], vec![0, 0, 3, 0, 1], vec![2], vec![0; 40]] {
        let text = explore::format_path(&p);
        assert_eq!(explore::parse_path(&text), Ok(p), "{text}");
    }
}
