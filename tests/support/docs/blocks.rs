//! Finding the shell blocks of a document, reading their `docs-test:`
//! markers and deciding what happens to each (its [`Plan`]). Invariant:
//! every shell block is found and gets exactly one plan; a marker that is
//! not understood, or that sits above no shell block, is an error, never
//! ignored.

/// Fence tags of shell blocks.
const SHELLS: [&str; 5] = ["sh", "bash", "shell", "console", "shell-session"];

/// What a `<!-- docs-test: … -->` comment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marker {
    Skip(String),
    Illustrative(String),
    QuickstartRs,
    Needs(Vec<String>),
    InCheckout,
    Continues,
    Comments,
}

/// The prerequisites a block may need.
const NEEDS: [&str; 5] = ["openssl", "node", "python", "curl", "postgres"];

pub(crate) fn marker(comment: &str) -> Option<Result<Marker, String>> {
    let inner = comment
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix("docs-test:")?
        .trim();
    let (word, rest) = match inner.split_once(':') {
        Some((w, r)) => (w.trim(), Some(r.trim())),
        None => (inner, None),
    };
    Some(match (word, rest) {
        ("skip", Some(reason)) if !reason.is_empty() => Ok(Marker::Skip(reason.to_owned())),
        ("skip", _) => Err("`skip` needs a reason: `docs-test: skip: REASON`".to_owned()),
        ("illustrative", reason) => Ok(Marker::Illustrative(reason.unwrap_or("").to_owned())),
        ("quickstart.rs", None) => Ok(Marker::QuickstartRs),
        ("in-checkout", None) => Ok(Marker::InCheckout),
        ("continues", None) => Ok(Marker::Continues),
        ("comments", None) => Ok(Marker::Comments),
        ("needs", Some(list)) => {
            let needs: Vec<String> = list
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            match needs.iter().find(|n| !NEEDS.contains(&n.as_str())) {
                Some(n) => Err(format!("unknown prerequisite {n:?} (known: {NEEDS:?})")),
                None if needs.is_empty() => Err("`needs:` names nothing".to_owned()),
                None => Ok(Marker::Needs(needs)),
            }
        }
        _ => Err(format!(
            "not a docs-test marker: {inner:?} (skip: REASON, illustrative, quickstart.rs, \
             needs: LIST, in-checkout, continues, comments)"
        )),
    })
}

/// One fenced shell block of a document.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub(crate) file: String,
    /// 1-based among the file's shell blocks.
    pub(crate) index: usize,
    /// 1-based line of the opening fence.
    pub(crate) line: usize,
    /// The nearest heading above it.
    pub(crate) heading: String,
    /// The `## ` section it is in ("" before the first).
    pub(crate) section: String,
    /// The fence's info string, e.g. `sh` or `console`.
    pub(crate) info: String,
    /// (line in the file, text) of each body line.
    pub(crate) body: Vec<(usize, String)>,
    pub(crate) markers: Vec<Marker>,
}

impl Block {
    pub(crate) fn name(&self) -> String {
        format!(
            "{}#{} \"{}\" (line {})",
            self.file, self.index, self.heading, self.line
        )
    }

    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    pub(super) fn is_console(&self) -> bool {
        matches!(self.lang(), "console" | "shell-session")
    }
}

/// A fence opening or closing line: (indent, fence char, length, info).
fn fence(line: &str) -> Option<(usize, char, usize, &str)> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    let c = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = trimmed.chars().take_while(|x| *x == c).count();
    (n >= 3).then(|| (indent, c, n, trimmed[n..].trim()))
}

/// Does an untagged block look like commands someone would paste?
fn looks_like_shell(first_line: &str) -> bool {
    let l = first_line.trim_start();
    [
        "$ ",
        "cargo ",
        "agentctl ",
        "agentsessionsd ",
        "harnessnode ",
        "./",
        "bash ",
    ]
    .iter()
    .any(|p| l.starts_with(p))
}

/// The shell blocks of `text` (file `file`), or what is wrong with the
/// markers and fences.
pub(crate) fn shell_blocks(file: &str, text: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut errors = Vec::new();
    let (mut heading, mut section) = (String::new(), String::new());
    let mut pending: Vec<Marker> = Vec::new();
    let mut pending_line = 0;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((no, line)) = lines.next() {
        if let Some((indent, c, n, info)) = fence(line) {
            let mut body = Vec::new();
            let mut closed = false;
            for (bno, bline) in lines.by_ref() {
                if let Some((_, bc, bn, rest)) = fence(bline)
                    && bc == c
                    && bn >= n
                    && rest.is_empty()
                {
                    closed = true;
                    break;
                }
                let strip = bline.len() - bline.trim_start().len();
                body.push((bno, bline[strip.min(indent)..].to_owned()));
            }
            if !closed {
                errors.push(format!("{file}:{no}: the fence is never closed"));
            }
            let lang = info.split_whitespace().next().unwrap_or("");
            if SHELLS.contains(&lang) {
                blocks.push(Block {
                    file: file.to_owned(),
                    index: blocks.len() + 1,
                    line: no,
                    heading: heading.clone(),
                    section: section.clone(),
                    info: info.to_owned(),
                    body,
                    markers: std::mem::take(&mut pending),
                });
            } else {
                if !pending.is_empty() {
                    errors.push(format!(
                        "{file}:{pending_line}: a docs-test marker above a ```{info} block, \
                         which is not a shell block"
                    ));
                    pending.clear();
                }
                let first = body
                    .iter()
                    .map(|(_, l)| l.as_str())
                    .find(|l| !l.trim().is_empty());
                if info.is_empty() && first.is_some_and(looks_like_shell) {
                    errors.push(format!(
                        "{file}:{no}: an untagged block of commands: tag it ```sh (or ```text \
                         for a transcript)"
                    ));
                }
            }
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(m) = marker(trimmed) {
            match m {
                Ok(m) => pending.push(m),
                Err(e) => errors.push(format!("{file}:{no}: {e}")),
            }
            pending_line = no;
            continue;
        }
        if !pending.is_empty() {
            errors.push(format!(
                "{file}:{pending_line}: a docs-test marker not followed by a shell block"
            ));
            pending.clear();
        }
        if let Some(h) = line.strip_prefix('#') {
            let level = 1 + h.chars().take_while(|c| *c == '#').count();
            let title = h.trim_start_matches('#');
            if title.starts_with(' ') {
                heading = title.trim().to_owned();
                if level <= 2 {
                    section = if level == 2 {
                        heading.clone()
                    } else {
                        String::new()
                    };
                }
            }
        }
    }
    if !pending.is_empty() {
        errors.push(format!(
            "{file}:{pending_line}: a docs-test marker not followed by a shell block"
        ));
    }
    (blocks, errors)
}

/// Does tests/quickstart.rs run this block? It runs the ```sh blocks of
/// README's `## Quickstart` section and of docs/quickstart.md (checked
/// against its source by `quickstart_rs_still_runs_what_we_think`).
fn run_by_quickstart_rs(b: &Block) -> bool {
    b.info == "sh"
        && (b.file == "docs/quickstart.md" || (b.file == "README.md" && b.section == "Quickstart"))
}

/// What happens to a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    Run {
        needs: Vec<String>,
        in_checkout: bool,
        continues: bool,
    },
    Skip(String),
    Illustrative(String),
    QuickstartRs,
}

pub(crate) fn plan(b: &Block) -> Result<Plan, String> {
    let mut disposition: Option<Plan> = None;
    let (mut needs, mut in_checkout, mut continues, mut comments) =
        (Vec::new(), false, false, false);
    for m in &b.markers {
        let d = match m {
            Marker::Skip(r) => Plan::Skip(r.clone()),
            Marker::Illustrative(r) => Plan::Illustrative(r.clone()),
            Marker::QuickstartRs => {
                if !run_by_quickstart_rs(b) {
                    return Err(
                        "marked quickstart.rs, but tests/quickstart.rs runs only the ```sh \
                         blocks of README's Quickstart section and of docs/quickstart.md"
                            .into(),
                    );
                }
                Plan::QuickstartRs
            }
            Marker::Needs(n) => {
                needs.extend(n.iter().cloned());
                continue;
            }
            Marker::InCheckout => {
                in_checkout = true;
                continue;
            }
            Marker::Continues => {
                continues = true;
                continue;
            }
            Marker::Comments => {
                comments = true;
                continue;
            }
        };
        if disposition.replace(d).is_some() {
            return Err("more than one of skip / illustrative / quickstart.rs".into());
        }
    }
    match disposition {
        Some(d) if needs.is_empty() && !in_checkout && !continues && !comments => Ok(d),
        Some(_) => {
            Err("needs / in-checkout / continues / comments on a block that does not run".into())
        }
        None if run_by_quickstart_rs(b) => Ok(Plan::QuickstartRs),
        None => Ok(Plan::Run {
            needs,
            in_checkout,
            continues,
        }),
    }
}
