//! The sweeps as one configurable run: what `cargo test` and the `sim`
//! binary execute.

use crate::digest::Rng;
use crate::explore::{self, Failure, Stats};
use crate::scenario::{self, Scenario};

/// What to sweep.
#[derive(Debug, Clone)]
pub struct Config {
    /// Crashes per run in the crash-cut sweep (1: every cut; 2: every cut
    /// of every recovery too).
    pub crashes: u32,
    /// Choices per interleaving before the rest runs FIFO.
    pub race_depth: usize,
    /// Seeded random walks (random interleavings and up to three crashes).
    pub walks: u64,
    /// The base seed of the walks.
    pub seed: u64,
    /// Only this scenario (all when `None`).
    pub scenario: Option<String>,
    /// Skip the exhaustive sweeps (walks only).
    pub walks_only: bool,
}

impl Config {
    /// The default sweep (`cargo test -p agentsessions-sim`).
    pub fn default_sweep() -> Self {
        Self {
            crashes: 2,
            race_depth: 32,
            walks: 200,
            seed: 0,
            scenario: None,
            walks_only: false,
        }
    }

    fn wanted(&self, s: &Scenario) -> bool {
        self.scenario.as_deref().is_none_or(|n| n == s.name)
    }
}

/// The seed of walk `i` of a run with base seed `base`.
pub fn walk_seed(base: u64, i: u64) -> u64 {
    Rng::new(base ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64()
}

/// The scenario a walk with `seed` runs (when none is chosen).
pub fn walk_scenario(seed: u64, all: &[Scenario]) -> &Scenario {
    &all[Rng::new(seed).below(all.len())]
}

/// Runs the sweeps; `log` gets one line per scenario.
pub fn run(cfg: &Config, log: &mut dyn FnMut(&str)) -> Result<Stats, Failure> {
    let mut total = Stats::default();
    if !cfg.walks_only {
        for scn in scenario::crash_scenarios().iter().filter(|s| cfg.wanted(s)) {
            let t = std::time::Instant::now();
            let s = explore::sweep_crashes(scn, cfg.crashes)?;
            log(&format!(
                "crash  {:<28} cuts {:>6}  recoveries {:>5}  lost answers {:>4}  runs {:>5}  {:>6.2}s",
                scn.name,
                s.cuts,
                s.recoveries,
                s.lost_answers,
                s.runs,
                t.elapsed().as_secs_f64()
            ));
            total.add(&s);
        }
        for scn in scenario::race_scenarios().iter().filter(|s| cfg.wanted(s)) {
            let t = std::time::Instant::now();
            let s = explore::sweep_race(scn, cfg.race_depth)?;
            log(&format!(
                "race   {:<28} states {:>6}  end states {:>5}  {:>6.2}s  interleavings {}{}",
                scn.name,
                s.states,
                s.terminals,
                t.elapsed().as_secs_f64(),
                s.interleavings,
                if s.truncated > 0 {
                    format!("  (depth-bounded: {})", s.truncated)
                } else {
                    String::new()
                }
            ));
            total.add(&s);
        }
    }
    let all: Vec<Scenario> = scenario::all()
        .into_iter()
        .filter(|s| cfg.wanted(s))
        .collect();
    for i in 0..cfg.walks {
        let seed = walk_seed(cfg.seed, i);
        let scn = walk_scenario(seed, &all);
        let (digest, _) = explore::walk(scn, seed, 3)?;
        total.walks += 1;
        total.digest.u64(digest);
    }
    if cfg.walks > 0 {
        log(&format!(
            "walks  {} seeded runs (base seed {})",
            cfg.walks, cfg.seed
        ));
    }
    Ok(total)
}
