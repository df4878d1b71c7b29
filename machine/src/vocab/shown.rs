//! Caller-supplied text as it may appear in a log line or a status message.
//!
//! Invariant: what [`shown`] writes holds no control character, no line or
//! paragraph separator and no unescaped quote (every such char is written
//! as its Rust escape, `\n`, `\u{1b}`, `\"` …), and at most [`SHOWN_MAX`]
//! bytes of the escaped text, followed, when the input was cut, by a marker
//! naming how many input bytes were left out. A caller can therefore
//! neither start a forged log line, nor send a terminal escape, nor make
//! the host echo or log megabytes.

use std::fmt;

/// The most bytes of escaped text shown.
pub const SHOWN_MAX: usize = 128;

/// `text`, escaped and bounded for a log field or a status message.
///
/// `{}` writes the escaped text alone; `{:?}` writes it in double quotes,
/// like `str`'s own `Debug`, so `format!("session {:?}", shown(uid))`
/// reads as the unbounded `format!("session {uid:?}")` did for ordinary
/// ids.
pub fn shown(text: &str) -> Shown<'_> {
    Shown(text)
}

/// See [`shown`].
#[derive(Clone, Copy)]
pub struct Shown<'a>(&'a str);

impl Shown<'_> {
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut used = 0;
        for (at, c) in self.0.char_indices() {
            let escaped = c.escape_debug();
            let len = escaped.clone().map(char::len_utf8).sum::<usize>();
            if used + len > SHOWN_MAX {
                debug_assert!(at < self.0.len(), "a cut leaves something out");
                return write!(f, "…(+{} bytes)", self.0.len() - at);
            }
            used += len;
            debug_assert!(used <= SHOWN_MAX);
            for e in escaped {
                debug_assert!(!e.is_control(), "a control character is escaped");
                fmt::Write::write_char(f, e)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f)
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        self.write(f)?;
        f.write_str("\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_ids_are_shown_as_they_are() {
        let uid = "sess-0123456789abcdef";
        assert_eq!(shown(uid).to_string(), uid);
        assert_eq!(format!("{:?}", shown(uid)), format!("{uid:?}"));
    }

    #[test]
    fn a_forged_log_line_stays_on_one_line_without_escapes() {
        let forged = "x\n2099-01-01T00:00:00Z INFO rpc finish FORGED principal=admin\x1b[31m";
        let out = shown(forged).to_string();
        assert!(!out.contains('\n') && !out.contains('\x1b'), "{out}");
        assert!(out.starts_with("x\\n2099"), "{out}");
        assert!(out.ends_with("\\u{1b}[31m"), "{out}");
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary_with_a_count_of_what_was_left_out() {
        let long = "é".repeat(1_000_000);
        let out = shown(&long).to_string();
        assert_eq!(
            out,
            format!("{}…(+{} bytes)", "é".repeat(64), 2_000_000 - 128)
        );
    }
}
