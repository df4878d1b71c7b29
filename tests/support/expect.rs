//! Expected output, as tests/quickstart.rs and tests/docs_blocks.rs read
//! it: `# text` lines under a command are lines its output must contain,
//! in order, runs of blanks compared as one and `…` standing for a run of
//! non-blank characters. Invariant: both runners match a document's
//! expected output the same way.

/// `…` matches any run of non-blank characters; the rest must be equal.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('…') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            if tail.is_empty() {
                // A closing ellipsis stands for the rest of the line.
                return true;
            }
            // Try every split of the non-blank run the ellipsis may cover.
            let run = rest.find(char::is_whitespace).unwrap_or(rest.len());
            (0..=run).any(|n| rest.is_char_boundary(n) && glob(tail, &rest[n..]))
        }
    }
}

/// `s` with every run of blanks one space, and none at either end.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first expected line the `printed` lines lack (in order), squashed,
/// if any.
pub(crate) fn missing<'a>(
    expect: &[String],
    printed: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let lines: Vec<String> = printed.into_iter().map(squash).collect();
    let mut at = 0;
    for want in expect {
        let want = squash(want);
        match lines[at..].iter().position(|got| glob(&want, got)) {
            Some(i) => at += i + 1,
            None => return Some(want),
        }
    }
    None
}
