//! `sim`: run the simulation sweeps, long seeded runs, or one reproduction.
//!
//! ```text
//! sim                                   the default sweep (as cargo test)
//! sim --seeds N [--seed BASE]           N seeded walks after the sweep
//! sim --walks-only --seeds N            only the walks (long mode)
//! sim --scenario NAME                   one scenario
//! sim --scenario NAME --seed S          one seeded walk, with its digest
//! sim --scenario NAME --crashes C --path P   replay a printed failure
//! sim --crashes C --race-depth D        deeper exhaustive sweeps
//! sim --list                            scenario names
//! sim --fault NAME ...                  arm a planted bug (the sweep must fail)
//! ```

use std::process::ExitCode;

use agentsessions_machine::faults::{self, Fault};
use agentsessions_sim::explore;
use agentsessions_sim::scenario;
use agentsessions_sim::sweep::{self, Config};

fn usage() -> ExitCode {
    eprintln!(
        "usage: sim [--seeds N] [--seed S] [--scenario NAME] [--crashes C] [--race-depth D] [--path P] [--walks-only] [--fault NAME] [--list]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut cfg = Config::default_sweep();
    let mut path: Option<String> = None;
    let mut seed: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next();
        match a.as_str() {
            "--seeds" => match val().and_then(|v| v.parse().ok()) {
                Some(n) => cfg.walks = n,
                None => return usage(),
            },
            "--seed" => match val().and_then(|v| v.parse().ok()) {
                Some(s) => seed = Some(s),
                None => return usage(),
            },
            "--scenario" => cfg.scenario = val(),
            "--crashes" => match val().and_then(|v| v.parse().ok()) {
                Some(c) => cfg.crashes = c,
                None => return usage(),
            },
            "--race-depth" => match val().and_then(|v| v.parse().ok()) {
                Some(d) => cfg.race_depth = d,
                None => return usage(),
            },
            "--path" => path = val(),
            "--walks-only" => cfg.walks_only = true,
            "--fault" => match val().as_deref().and_then(Fault::by_name) {
                // Leaked on purpose: the fault stays armed for the process.
                Some(f) => std::mem::forget(faults::arm(f)),
                None => {
                    eprintln!("faults: {}", Fault::ALL.map(Fault::name).join(", "));
                    return usage();
                }
            },
            "--list" => {
                for s in scenario::all() {
                    println!("{:<28} {}", s.name, s.family);
                }
                return ExitCode::SUCCESS;
            }
            _ => return usage(),
        }
    }
    if let Some(name) = cfg.scenario.clone()
        && (path.is_some() || seed.is_some())
    {
        let Some(scn) = scenario::by_name(&name) else {
            eprintln!("no scenario {name:?} (try --list)");
            return ExitCode::from(2);
        };
        let (crashes, path) = match (&path, seed) {
            (Some(p), _) => match explore::parse_path(p) {
                Ok(p) => (cfg.crashes, p),
                Err(e) => {
                    eprintln!("bad path: {e}");
                    return ExitCode::from(2);
                }
            },
            (None, Some(s)) => match explore::walk(&scn, s, 3) {
                Ok((digest, p)) => {
                    println!(
                        "scenario {name} seed {s}: ok, trace digest {digest:016x}, {} choices",
                        p.len()
                    );
                    return ExitCode::SUCCESS;
                }
                Err(f) => {
                    eprintln!("{}", explore::report(&f, &scn));
                    return ExitCode::FAILURE;
                }
            },
            (None, None) => unreachable!("checked above"),
        };
        let (result, trace) = explore::replay(&scn, crashes, &path, true);
        for (i, line) in trace.iter().enumerate() {
            println!("{i:>5} {line}");
        }
        return match result {
            Ok(d) => {
                println!("passes; trace digest {d:016x}");
                ExitCode::SUCCESS
            }
            Err(v) => {
                println!("VIOLATION: {v}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(s) = seed {
        cfg.seed = s;
    }
    let started = std::time::Instant::now();
    let result = sweep::run(&cfg, &mut |line| println!("{line}"));
    match result {
        Ok(stats) => {
            println!(
                "scenarios {}  crash cuts {}  recoveries {}  lost answers {}  runs {}  race states {}  race end states {}  interleavings {}  walks {}",
                stats.scenarios,
                stats.cuts,
                stats.recoveries,
                stats.lost_answers,
                stats.runs,
                stats.states,
                stats.terminals,
                stats.interleavings,
                stats.walks
            );
            println!(
                "trace digest {:016x}  ({:.1} s)",
                stats.digest.finish(),
                started.elapsed().as_secs_f64()
            );
            for (k, v) in &stats.coverage {
                println!("  coverage: {k}: {v} runs");
            }
            ExitCode::SUCCESS
        }
        Err(f) => {
            let scn = scenario::by_name(f.scenario).expect("failures name a scenario");
            eprintln!("{}", explore::report(&f, &scn));
            ExitCode::FAILURE
        }
    }
}
