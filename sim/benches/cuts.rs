//! Crash cuts explored per second, on one core (the explorer is single
//! threaded). Run with `cargo bench -p agentsessions-sim --bench cuts`.
//!
//! A "cut" is one crash point times one thing the crash does to the pending
//! write (lost, committed with its answer lost, torn after k events); each
//! cut is checked against the oracle at once, and each distinct post-crash
//! state is recovered with a fresh host and driven to completion, so the
//! rate includes the recovery runs and the end-state checks (Replay, harness
//! replay, projections). The interleaving sweep's states per second and the
//! seeded walks per second are reported alongside.

use std::time::Instant;

use agentsessions_sim::explore::{self, Stats};
use agentsessions_sim::scenario;
use agentsessions_sim::sweep::{self, Config};

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let cfg = Config::default_sweep();
    let crash = scenario::crash_scenarios();

    let mut best = f64::MAX;
    let mut stats = Stats::default();
    for _ in 0..3 {
        let t = Instant::now();
        stats = Stats::default();
        for scn in &crash {
            let s = explore::sweep_crashes(scn, cfg.crashes).expect("the sweep passes");
            stats.add(&s);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "crash cuts: {} cuts, {} recoveries, {} runs in {:.2} s (best of 3): {:.0} cuts/s, {:.0} recoveries/s",
        stats.cuts,
        stats.recoveries,
        stats.runs,
        best,
        stats.cuts as f64 / best,
        stats.recoveries as f64 / best
    );

    let t = Instant::now();
    let mut race = Stats::default();
    for scn in scenario::race_scenarios() {
        race.add(&explore::sweep_race(&scn, cfg.race_depth).expect("the sweep passes"));
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "interleavings (depth {}): {} states, {} end states in {:.2} s: {:.0} states/s",
        cfg.race_depth,
        race.states,
        race.terminals,
        secs,
        race.states as f64 / secs
    );

    let walks = Config {
        walks_only: true,
        walks: 500,
        ..cfg
    };
    let t = Instant::now();
    let s = sweep::run(&walks, &mut |_| {}).expect("the walks pass");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "seeded walks: {} in {:.2} s: {:.0} walks/s",
        s.walks,
        secs,
        s.walks as f64 / secs
    );
}
