//! Running a unit (a block and the `continues` blocks after it): its
//! prerequisites, its script and the process group it runs in. Invariant:
//! a block runs as written, in a fresh directory and a process group of
//! its own, and whatever it started is stopped before the unit ends.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::REPO;
use super::blocks::Block;
use super::ports::{free_port, move_ports, ports_in};
use super::script::{Cmd, Piece, pieces, words};
use crate::expect::missing;

const DAEMON: &str = env!("CARGO_BIN_EXE_agentsessionsd");
const AGENTCTL: &str = env!("CARGO_BIN_EXE_agentctl");
const HARNESSNODE: &str = env!("CARGO_BIN_EXE_harnessnode");

/// How long one block (or a chain of `continues` blocks) may run.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(45);
/// How long expected lines of background commands may take to show.
const LATE_OUTPUT: Duration = Duration::from_secs(5);
/// How long the block's processes get to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

// ---- prerequisites --------------------------------------------------------

pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(program)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    })
}

/// The test venv's `bin` (grpcio and the rest of
/// conformance/python/requirements.txt), or why there is none.
fn python_bin() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let tc = runtime.block_on(agentsessions_conformance::python::toolchain())?;
        tc.python
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| format!("{} has no directory", tc.python.display()))
    })
    .clone()
}

/// Checks `need`; Ok(directory to put on PATH, if any).
fn prerequisite(need: &str) -> Result<Option<PathBuf>, String> {
    let tool = |p: &str| {
        if on_path(p) {
            Ok(None)
        } else {
            Err(format!("{p} is not on PATH"))
        }
    };
    match need {
        "python" => python_bin().map(Some),
        "postgres" => tool("initdb").and(tool("pg_ctl")),
        other => tool(other),
    }
}

// ---- running --------------------------------------------------------------

/// Blocks run as one script: a block and the `continues` blocks after it.
#[derive(Debug)]
pub(crate) struct Unit {
    pub(crate) blocks: Vec<Block>,
    pub(crate) needs: BTreeSet<String>,
    pub(crate) in_checkout: bool,
}

impl Unit {
    pub(crate) fn name(&self) -> String {
        let mut name = self.blocks[0].name();
        for b in &self.blocks[1..] {
            name.push_str(&format!(" + #{} (line {})", b.index, b.line));
        }
        name
    }
}

/// How a unit ended.
pub(crate) enum Outcome {
    Passed(Duration),
    Skipped(String),
    Failed(String),
}

/// The script of `pieces`: the block as written, each command that has
/// expected output wrapped so its output and status land in `ctl`.
fn script(pieces: &[Piece], ctl: &Path) -> Result<(String, Vec<(usize, Cmd)>), String> {
    let mut s = String::new();
    s.push_str(&format!(
        "set -euo pipefail\n\
         __docs_ctl='{}'\n\
         __docs_exit() {{\n\
         \x20 local status=$?\n\
         \x20 trap - ERR\n\
         \x20 printf '%s\\n' \"$status\" >\"$__docs_ctl/status\"\n\
         \x20 : >\"$__docs_ctl/done\"\n\
         \x20 read -r _ || true\n\
         \x20 trap '' TERM\n\
         \x20 kill -TERM 0 2>/dev/null || true\n\
         \x20 wait 2>/dev/null || true\n\
         \x20 exit \"$status\"\n\
         }}\n\
         trap __docs_exit EXIT\n\
         __docs_err='echo \"docs-test: exit status $? at: $BASH_COMMAND\" >&2'\n\
         trap \"$__docs_err\" ERR\n\
         {{\n",
        ctl.display()
    ));
    let mut steps = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Verbatim(line) => {
                s.push_str(line);
                s.push('\n');
            }
            Piece::Cmd(cmd) if cmd.expect.is_empty() && cmd.exit == 0 => s.push_str(&cmd.text),
            Piece::Cmd(cmd) => {
                let first = words(&cmd.text).first().copied().unwrap_or_default();
                if ["do", "done", "then", "else", "elif", "fi", "esac", "}", "{"].contains(&first) {
                    return Err(format!(
                        "line {}: expected output under `{first}`: put it under a simple command",
                        cmd.line
                    ));
                }
                let n = steps.len();
                let first_line = cmd.text.lines().next().unwrap_or_default().trim();
                let quoted = first_line.replace('\'', "'\\''");
                s.push_str(&format!(
                    "trap - ERR\nset +e\n{{ {}}} >\"$__docs_ctl/step-{n}.out\" 2>\"$__docs_ctl/step-{n}.err\"\n\
                     __docs_rc=$?\nset -e\ntrap \"$__docs_err\" ERR\n\
                     printf '%s\\n' \"$__docs_rc\" >\"$__docs_ctl/step-{n}.rc\"\n\
                     if [ \"$__docs_rc\" -ne {exit} ]; then\n\
                     \x20 echo 'docs-test: line {line}: `{quoted}` exited '\"$__docs_rc\"', not {exit}' >&2\n\
                     \x20 exit 1\nfi\n",
                    cmd.text,
                    exit = cmd.exit,
                    line = cmd.line,
                ));
                steps.push((n, cmd.clone()));
            }
        }
    }
    s.push_str("} </dev/null\n");
    Ok((s, steps))
}

fn read(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The output step `n` printed, stdout then stderr, and whether it ran.
fn step_output(ctl: &Path, n: usize) -> (bool, String) {
    let ran = ctl.join(format!("step-{n}.rc")).exists();
    let out = read(&ctl.join(format!("step-{n}.out")));
    let err = read(&ctl.join(format!("step-{n}.err")));
    (
        ran,
        format!(
            "{out}{}{err}",
            if out.ends_with('\n') || out.is_empty() {
                ""
            } else {
                "\n"
            }
        ),
    )
}

/// The first unmet expectation of the steps that ran.
fn unmet(ctl: &Path, steps: &[(usize, Cmd)]) -> Option<String> {
    for (n, cmd) in steps {
        let (ran, printed) = step_output(ctl, *n);
        if !ran {
            continue;
        }
        if let Some(want) = missing(&cmd.expect, printed.lines()) {
            let first = cmd.text.lines().next().unwrap_or_default().trim();
            return Some(format!(
                "line {}: `{first}` did not print (in order) the line {want:?}; it printed:\n{}",
                cmd.line,
                tail(&printed, 40)
            ));
        }
    }
    None
}

/// Sends `signal` to every process of the group `pgid`.
fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// Waits for `child` to exit, up to `timeout`.
fn wait_for(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bin_dir() -> PathBuf {
    let dir = Path::new(DAEMON).parent().expect("the binaries' directory");
    for bin in [AGENTCTL, HARNESSNODE] {
        assert_eq!(Path::new(bin).parent(), Some(dir), "{bin} beside {DAEMON}");
    }
    dir.to_path_buf()
}

/// Links the repository's top-level entries into `work`.
fn link_checkout(work: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(REPO)? {
        let entry = entry?;
        let name = entry.file_name();
        let n = name.to_string_lossy();
        if n == ".git" || n == "notes" || n.contains(".db") {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), work.join(&name))?;
    }
    Ok(())
}

pub(crate) fn run_unit(unit: &Unit) -> Outcome {
    let mut path_dirs = vec![bin_dir()];
    for need in &unit.needs {
        match prerequisite(need) {
            Ok(dir) => path_dirs.extend(dir),
            Err(why) => return Outcome::Skipped(format!("needs {need}: {why}")),
        }
    }

    // The blocks' text with their ports moved, then parsed.
    let all: String = unit
        .blocks
        .iter()
        .flat_map(|b| b.body.iter().map(|(_, l)| l.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    let map: BTreeMap<u16, u16> = ports_in(&all)
        .into_iter()
        .map(|p| (p, free_port()))
        .collect();
    let mut all_pieces = Vec::new();
    for b in &unit.blocks {
        let body: Vec<(usize, String)> = b
            .body
            .iter()
            .map(|(no, l)| (*no, move_ports(l, &map)))
            .collect();
        match pieces(b, &body) {
            Ok(p) => all_pieces.extend(p),
            Err(e) => return Outcome::Failed(format!("{}: {e}", b.file)),
        }
    }

    let root = tempfile::tempdir().expect("a temp dir");
    let (work, ctl, home) = (
        root.path().join("work"),
        root.path().join("ctl"),
        root.path().join("home"),
    );
    for d in [
        &work,
        &ctl,
        &home,
        &root.path().join("tmp"),
        &root.path().join("run"),
    ] {
        std::fs::create_dir_all(d).expect("create the block's directories");
    }
    let _ = std::fs::set_permissions(
        root.path().join("run"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    );
    if unit.in_checkout
        && let Err(e) = link_checkout(&work)
    {
        return Outcome::Failed(format!("linking the checkout into {}: {e}", work.display()));
    }
    let (text, steps) = match script(&all_pieces, &ctl) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e),
    };
    let script_path = ctl.join("block.sh");
    std::fs::write(&script_path, &text).expect("write the block's script");

    let mut path: Vec<PathBuf> = path_dirs;
    if let Some(p) = std::env::var_os("PATH") {
        path.extend(std::env::split_paths(&p));
    }
    let path = std::env::join_paths(path).expect("PATH");
    let stdout = std::fs::File::create(ctl.join("stdout")).unwrap();
    let stderr = std::fs::File::create(ctl.join("stderr")).unwrap();
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg(&script_path)
        .current_dir(&work)
        .env("PATH", path)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_RUNTIME_DIR", root.path().join("run"))
        .env("TMPDIR", root.path().join("tmp"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("AGENTSESSIONS_TOKEN")
        .env_remove("AGENTSESSIONS_JOURNAL_CA")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("MODEL_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("PYTHONPATH")
        .env_remove("VIRTUAL_ENV")
        .env_remove("BASH_ENV")
        .env_remove("ENV")
        .env_remove("CDPATH")
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .expect("run bash");
    let pgid = child.id();

    // Until the block is done (its EXIT trap waits for us) or its time is up.
    let deadline = started + BLOCK_TIMEOUT;
    let done = ctl.join("done");
    let mut timed_out = false;
    while !done.exists() {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        if Instant::now() > deadline {
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = read(&ctl.join("status")).trim().to_owned();
    // Lines of background commands may still be on their way.
    if status == "0" {
        let late = Instant::now() + LATE_OUTPUT;
        let background: Vec<(usize, Cmd)> = steps
            .iter()
            .filter(|(_, c)| c.background())
            .cloned()
            .collect();
        while unmet(&ctl, &background).is_some() && Instant::now() < late {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let elapsed = started.elapsed();
    // Stop the block: its trap sends SIGTERM to the group and reaps its
    // jobs once stdin closes; SIGKILL for whatever lingers (bash is still
    // there, so the group is still ours).
    if timed_out {
        signal_group(pgid, "KILL");
    }
    drop(child.stdin.take());
    if !wait_for(&mut child, STOP_TIMEOUT) {
        signal_group(pgid, "KILL");
        let _ = child.wait();
    }

    let failure = if timed_out {
        Some(format!("did not finish within {BLOCK_TIMEOUT:?}"))
    } else if status != "0" {
        Some(format!(
            "exited {}",
            if status.is_empty() {
                "without a status (killed?)"
            } else {
                &status
            }
        ))
    } else {
        unmet(&ctl, &steps)
    };
    let Some(why) = failure else {
        return Outcome::Passed(elapsed);
    };
    let mut report = format!(
        "{why}\n--- the block's stdout (tail)\n{}\n--- the block's stderr (tail)\n{}",
        tail(&read(&ctl.join("stdout")), 30),
        tail(&read(&ctl.join("stderr")), 30),
    );
    // DOCS_TEST_KEEP=1 keeps the directory of a failed block for a look.
    if std::env::var_os("DOCS_TEST_KEEP").is_some() {
        report.push_str(&format!("\n--- kept {}", root.keep().display()));
    }
    Outcome::Failed(report)
}
