//! The explorers: every crash cut, every interleaving, seeded walks, and
//! the shrinking and reporting of a failure.
//!
//! Every run is a sequence of choices (an index into [`Run::moves`] per
//! step; 0 is the default), so any failure, however it was found, is
//! reproduced by its scenario, its crash budget and its choice path.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::digest::{Fnv, Rng};
use crate::oracle::{Rule, Violation, violation};
use crate::run::{Checkpoint, Move, Run};
use crate::scenario::Scenario;

/// A broken rule with the choices that break it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The scenario.
    pub scenario: &'static str,
    /// The crash budget of the run.
    pub crashes: u32,
    /// The choice path from the start.
    pub path: Vec<u16>,
    /// What broke.
    pub violation: Violation,
    /// The seed, for a failure found by a seeded walk.
    pub seed: Option<u64>,
}

/// What a sweep covered.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Scenarios swept.
    pub scenarios: u64,
    /// Crash cuts explored (cut point × what happens to the pending write).
    pub cuts: u64,
    /// Distinct post-crash states recovered and checked.
    pub recoveries: u64,
    /// Runs driven to completion and checked.
    pub runs: u64,
    /// Distinct states of the interleaving sweeps.
    pub states: u64,
    /// Distinct end states of the interleaving sweeps (each settled and checked).
    pub terminals: u64,
    /// Interleavings covered: paths through the deduplicated state graph.
    pub interleavings: u128,
    /// Paths cut short by the depth bound (then completed FIFO).
    pub truncated: u64,
    /// Seeded walks.
    pub walks: u64,
    /// Lost answers on a live host explored (cut point × write kept or
    /// dropped), each run to its end and checked.
    pub lost_answers: u64,
    /// Runs in which each coverage event happened.
    pub coverage: BTreeMap<&'static str, u64>,
    /// Digest over every checked run's trace digest.
    pub digest: Fnv,
}

impl Stats {
    /// Adds another sweep's counts.
    pub fn add(&mut self, o: &Stats) {
        self.scenarios += o.scenarios;
        self.cuts += o.cuts;
        self.recoveries += o.recoveries;
        self.runs += o.runs;
        self.states += o.states;
        self.terminals += o.terminals;
        self.interleavings = self.interleavings.saturating_add(o.interleavings);
        self.truncated += o.truncated;
        self.walks += o.walks;
        self.lost_answers += o.lost_answers;
        for (k, v) in &o.coverage {
            *self.coverage.entry(k).or_default() += v;
        }
        self.digest.u64(o.digest.finish());
    }

    fn finished(&mut self, run: &Run<'_>) {
        self.runs += 1;
        self.digest.u64(run.sim.d.digest.finish());
        for (k, &v) in &run.sim.d.oracle.coverage {
            if v > 0 {
                *self.coverage.entry(k).or_default() += 1;
            }
        }
    }
}

/// Runs `f`, turning a machine panic into a violation.
fn guard<T>(f: impl FnOnce() -> Result<T, Violation>) -> Result<T, Violation> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "non-string panic".into());
            Err(violation(Rule::Panic, msg))
        }
    }
}

// ---- crash cuts ------------------------------------------------------------

struct CrashSweep<'a> {
    scn: &'a Scenario,
    crashes: u32,
    seen: BTreeSet<u64>,
    stats: Stats,
}

/// Every crash cut of `scn`'s program, up to `crashes` crashes per run.
///
/// A crash discards the hosts, so a cut needs no replay: the explorer runs
/// each line FIFO and, before every step, branches into each thing a crash
/// can do to the pending write, from a clone of what survives. Post-crash
/// states already explored (same durable journal, executor and client) are
/// not recovered twice.
pub fn sweep_crashes(scn: &Scenario, crashes: u32) -> Result<Stats, Failure> {
    let mut s = CrashSweep {
        scn,
        crashes,
        seen: BTreeSet::new(),
        stats: Stats {
            scenarios: 1,
            ..Stats::default()
        },
    };
    let cp = Checkpoint {
        d: crate::world::Durable::default(),
        client: crate::client::Client::default(),
        crashes_left: crashes,
        steps: 0,
    };
    s.line(cp, Vec::new())?;
    Ok(s.stats)
}

impl CrashSweep<'_> {
    /// Replays `path` (which ends in a lost answer) and runs it to its end.
    fn lose_answer(&mut self, path: &[u16]) -> Result<(), Failure> {
        let mut run = Run::new(self.scn, self.crashes);
        guard(|| {
            for &c in path {
                let moves = run.moves()?;
                run.apply(moves[c as usize])?;
            }
            run.complete()
        })
        .map_err(|v| self.fail(path, v))?;
        self.stats.lost_answers += 1;
        self.stats.finished(&run);
        Ok(())
    }

    fn fail(&self, path: &[u16], v: Violation) -> Failure {
        Failure {
            scenario: self.scn.name,
            crashes: self.crashes,
            path: path.to_vec(),
            violation: v,
            seed: None,
        }
    }

    fn line(&mut self, cp: Checkpoint, mut path: Vec<u16>) -> Result<(), Failure> {
        let budget = cp.crashes_left;
        let mut run = Run::from_checkpoint(self.scn, cp);
        loop {
            let moves = guard(|| run.moves()).map_err(|v| self.fail(&path, v))?;
            if moves.is_empty() {
                break;
            }
            if budget > 0 {
                for (i, m) in moves.iter().enumerate() {
                    let mut p = path.clone();
                    p.push(i as u16);
                    match *m {
                        Move::Crash(v) => {
                            self.stats.cuts += 1;
                            let child = run.crashed(v).map_err(|e| self.fail(&p, e))?;
                            if self.seen.insert(child.digest()) {
                                self.stats.recoveries += 1;
                                self.line(child, p)?;
                            }
                        }
                        // The hosts live on, so the branch is replayed from
                        // the start; on the crash-free line only, which
                        // bounds the replays to one per pending write.
                        Move::LoseAnswer(_) if budget == self.crashes => self.lose_answer(&p)?,
                        _ => {}
                    }
                }
            }
            path.push(0);
            guard(|| run.apply(moves[0])).map_err(|v| self.fail(&path, v))?;
        }
        guard(|| run.finish()).map_err(|v| self.fail(&path, v))?;
        self.stats.finished(&run);
        Ok(())
    }
}

// ---- interleavings ----------------------------------------------------------

struct RaceSweep<'a> {
    scn: &'a Scenario,
    cp: Checkpoint,
    depth: usize,
    memo: BTreeMap<u64, u128>,
    stats: Stats,
}

/// Every interleaving of `scn`'s race operations and their effects and
/// answers, up to `depth` real choices (steps with more than one move) per
/// path — past that the rest runs FIFO — with states deduplicated by
/// digest.
pub fn sweep_race(scn: &Scenario, depth: usize) -> Result<Stats, Failure> {
    let mut setup = Run::new(scn, 0);
    setup.stop_at_race = true;
    let fail = |path: Vec<u16>, v| Failure {
        scenario: scn.name,
        crashes: 0,
        path,
        violation: v,
        seed: None,
    };
    loop {
        let moves = guard(|| setup.moves()).map_err(|v| fail(Vec::new(), v))?;
        let Some(&m) = moves.first() else { break };
        guard(|| setup.apply(m)).map_err(|v| fail(Vec::new(), v))?;
    }
    let mut s = RaceSweep {
        scn,
        cp: setup.race_checkpoint(),
        depth,
        memo: BTreeMap::new(),
        stats: Stats {
            scenarios: 1,
            ..Stats::default()
        },
    };
    let paths = s.visit(&mut Vec::new(), 0, None)?;
    s.stats.interleavings = paths;
    Ok(s.stats)
}

impl<'a> RaceSweep<'a> {
    fn fail(&self, path: &[u16], v: Violation) -> Failure {
        let mut full = vec![0u16; self.cp.steps as usize];
        full.extend_from_slice(path);
        Failure {
            scenario: self.scn.name,
            crashes: 0,
            path: full,
            violation: v,
            seed: None,
        }
    }

    fn replay(&self, path: &[u16]) -> Result<(Run<'a>, Vec<Move>), Failure> {
        let mut run = Run::from_checkpoint(self.scn, self.cp.clone());
        run.begin_race();
        for (i, &c) in path.iter().enumerate() {
            let moves = guard(|| run.moves()).map_err(|v| self.fail(&path[..i], v))?;
            let m = moves[c as usize];
            guard(|| run.apply(m)).map_err(|v| self.fail(&path[..=i], v))?;
        }
        let moves = guard(|| run.moves()).map_err(|v| self.fail(path, v))?;
        Ok((run, moves))
    }

    /// Counts the interleavings from the state `path` leads to. `carried`
    /// is that state when the caller already has it (the first child is
    /// reached by applying one move; the others need a replay, as a host
    /// cannot be cloned).
    fn visit(
        &mut self,
        path: &mut Vec<u16>,
        branched: usize,
        carried: Option<(Run<'a>, Vec<Move>)>,
    ) -> Result<u128, Failure> {
        let (mut run, moves) = match carried {
            Some(c) => c,
            None => self.replay(path)?,
        };
        let h = run.state_digest();
        if let Some(&n) = self.memo.get(&h) {
            return Ok(n);
        }
        if moves.is_empty() || branched >= self.depth {
            if !moves.is_empty() {
                self.stats.truncated += 1;
            }
            guard(|| run.complete()).map_err(|v| self.fail(path, v))?;
            self.stats.terminals += 1;
            self.stats.finished(&run);
            self.memo.insert(h, 1);
            return Ok(1);
        }
        self.stats.states += 1;
        let mut total: u128 = 0;
        let mut first = Some(run);
        for (i, &m) in moves.iter().enumerate() {
            path.push(i as u16);
            let carried = match first.take() {
                Some(mut run) => {
                    guard(|| run.apply(m)).map_err(|v| self.fail(path, v))?;
                    let next = guard(|| run.moves()).map_err(|v| self.fail(path, v))?;
                    Some((run, next))
                }
                None => None,
            };
            let branched = branched + usize::from(moves.len() > 1);
            total = total.saturating_add(self.visit(path, branched, carried)?);
            path.pop();
        }
        self.memo.insert(h, total);
        Ok(total)
    }
}

// ---- seeded walks and reproduction -------------------------------------------

/// One seeded random run of `scn`: random interleavings in the race phase,
/// and up to `crashes` crashes at random points. Returns the run's trace
/// digest and its choice path.
pub fn walk(scn: &Scenario, seed: u64, crashes: u32) -> Result<(u64, Vec<u16>), Failure> {
    let mut rng = Rng::new(seed);
    let mut run = Run::new(scn, crashes);
    let mut path = Vec::new();
    let fail = |path: &[u16], v| Failure {
        scenario: scn.name,
        crashes,
        path: path.to_vec(),
        violation: v,
        seed: Some(seed),
    };
    loop {
        let moves = guard(|| run.moves()).map_err(|v| fail(&path, v))?;
        if moves.is_empty() {
            break;
        }
        let crash: Vec<usize> = (0..moves.len())
            .filter(|&i| matches!(moves[i], Move::Crash(_) | Move::LoseAnswer(_)))
            .collect();
        let normal = moves.len() - crash.len();
        let c = if !crash.is_empty() && rng.chance(1, 30) {
            crash[rng.below(crash.len())]
        } else {
            rng.below(normal)
        };
        path.push(c as u16);
        guard(|| run.apply(moves[c])).map_err(|v| fail(&path, v))?;
    }
    guard(|| run.finish()).map_err(|v| fail(&path, v))?;
    Ok((run.sim.d.digest.finish(), path))
}

/// Replays `path` from the start (then the default choices), finishes the
/// run and returns its trace digest; with `trace`, also every step.
pub fn replay(
    scn: &Scenario,
    crashes: u32,
    path: &[u16],
    trace: bool,
) -> (Result<u64, Violation>, Vec<String>) {
    let mut run = Run::new(scn, crashes);
    if trace {
        run.trace = Some(Vec::new());
    }
    let result = guard(|| {
        for &c in path {
            let moves = run.moves()?;
            let Some(&m) = moves.get(c as usize) else {
                return Err(violation(
                    Rule::Expectation,
                    format!("path choice {c} out of {} moves", moves.len()),
                ));
            };
            run.apply(m)?;
        }
        run.complete()?;
        Ok(run.sim.d.digest.finish())
    });
    (result, run.trace.take().unwrap_or_default())
}

/// The shortest failing prefix of `path` (the default choices follow it),
/// then with every choice that can be reset to the default reset.
pub fn shrink(scn: &Scenario, crashes: u32, path: &[u16]) -> Vec<u16> {
    let fails = |p: &[u16]| replay(scn, crashes, p, false).0.is_err();
    let mut best = path.to_vec();
    for len in 0..best.len() {
        if fails(&best[..len]) {
            best.truncate(len);
            break;
        }
    }
    for i in 0..best.len() {
        if best[i] != 0 {
            let mut t = best.clone();
            t[i] = 0;
            if fails(&t) {
                best = t;
            }
        }
    }
    while best.last() == Some(&0) {
        best.pop();
    }
    best
}

/// A path as text: choices joined by `.`, runs of zeros as `0xN`.
pub fn format_path(path: &[u16]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut zeros = 0;
    for &c in path {
        if c == 0 {
            zeros += 1;
            continue;
        }
        if zeros > 0 {
            out.push(format!("0x{zeros}"));
            zeros = 0;
        }
        out.push(c.to_string());
    }
    if zeros > 0 {
        out.push(format!("0x{zeros}"));
    }
    if out.is_empty() {
        "-".into()
    } else {
        out.join(".")
    }
}

/// Parses [`format_path`]'s output.
pub fn parse_path(s: &str) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    if s == "-" || s.is_empty() {
        return Ok(out);
    }
    for part in s.split('.') {
        if let Some(n) = part.strip_prefix("0x") {
            let n: usize = n.parse().map_err(|e| format!("{part}: {e}"))?;
            out.extend(std::iter::repeat_n(0, n));
        } else {
            out.push(part.parse().map_err(|e| format!("{part}: {e}"))?);
        }
    }
    Ok(out)
}

/// The report for a failure: the rule, the command that reproduces it and
/// the shrunk trace.
pub fn report(f: &Failure, scn: &Scenario) -> String {
    let shrunk = shrink(scn, f.crashes, &f.path);
    let (result, trace) = replay(scn, f.crashes, &shrunk, true);
    let mut out = format!(
        "VIOLATION in scenario {}: {}\n  reproduce: cargo run -p agentsessions-sim --release -- --scenario {} --crashes {} --path {}\n  shrunk to {} choices (from {}): {}\n",
        f.scenario,
        f.violation,
        f.scenario,
        f.crashes,
        format_path(&shrunk),
        shrunk.len(),
        f.path.len(),
        match &result {
            Err(v) => format!("still fails: {v}"),
            Ok(_) => "the shrunk path passes (the failure depends on the whole path)".into(),
        }
    );
    if let Some(seed) = f.seed {
        out.push_str(&format!(
            "  or, as found: cargo run -p agentsessions-sim --release -- --scenario {} --seed {seed}\n",
            f.scenario
        ));
    }
    let skip = trace.len().saturating_sub(60);
    if skip > 0 {
        out.push_str(&format!("  … {skip} earlier steps\n"));
    }
    for (i, line) in trace.iter().enumerate().skip(skip) {
        out.push_str(&format!("  {i:>5} {line}\n"));
    }
    out
}
