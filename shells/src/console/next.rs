//! Where the browser goes after signing in (`next`).
//!
//! Invariant: the answer is a path on the console's own origin: one
//! leading `/`, then neither `/` nor `\`, and no backslash or control
//! character anywhere; anything else becomes [`FALLBACK`]. Browsers drop
//! tabs and newlines from URLs and read `\` as `/`, so `/\t/evil.example`
//! and `/\evil.example` are other sites to them and are refused outright
//! rather than cleaned up.

/// Where a refused `next` goes instead.
pub const FALLBACK: &str = "/";

/// Longest `next` kept: it only ever names a console page, and a longer
/// one would just make a huge `Location` header.
const MAX_LEN: usize = 2048;

/// `next` when it is a local path, else [`FALLBACK`].
pub fn local_path(next: &str) -> &str {
    let mut chars = next.chars();
    let local = next.len() <= MAX_LEN
        && chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && !next.chars().any(|c| c == '\\' || c.is_control());
    if local { next } else { FALLBACK }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn local_paths_are_kept() {
        for ok in [
            "/",
            "/sessions",
            "/sessions/sess-1?from=5&x=%2F%2F",
            "/sessions?waiting=1#top",
            "/a//b",
            "/é",
        ] {
            assert_eq!(local_path(ok), ok);
        }
    }

    #[test]
    fn anything_that_can_leave_the_origin_falls_back() {
        for bad in [
            "",
            "sessions",
            "//evil.example/",
            "/\\evil.example",
            "\\/evil.example",
            "/\t/evil.example/",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "/%09/evil.example\u{7f}",
            "/sessions\\..\\x",
            "/x\u{0}",
            "/x\u{85}",
            "https://evil.example/",
            " /sessions",
            "javascript:alert(1)",
        ] {
            assert_eq!(local_path(bad), FALLBACK, "{bad:?}");
        }
        assert_eq!(local_path(&format!("/{}", "a".repeat(MAX_LEN))), FALLBACK);
    }

    /// What a browser would treat as another origin, or as a path we do
    /// not vouch for: the rule stated independently of the code.
    fn allowed(s: &str) -> bool {
        let b: Vec<char> = s.chars().collect();
        s.len() <= MAX_LEN
            && b.first() == Some(&'/')
            && b.get(1) != Some(&'/')
            && b.get(1) != Some(&'\\')
            && b.iter().all(|c| *c != '\\' && !c.is_control())
    }

    /// Strings built around the shapes that fool URL parsers.
    fn tricky() -> impl Strategy<Value = String> {
        let prefix = prop::sample::select(vec![
            "", "/", "//", "/\\", "\\", "\\\\", "/\t/", "/\n/", "http:", "/%09/", " ",
        ]);
        let piece = prop::sample::select(vec![
            "/",
            "\\",
            "\t",
            "\r",
            "\n",
            "\u{0}",
            "\u{7f}",
            "\u{85}",
            "a",
            ".",
            ":",
            "@",
            "%2F",
            "evil.example",
            "?",
            "#",
            " ",
            "é",
        ]);
        (prefix, prop::collection::vec(piece, 0..8))
            .prop_map(|(p, rest)| format!("{p}{}", rest.concat()))
    }

    proptest! {
        #[test]
        fn the_answer_is_the_input_when_allowed_and_the_fallback_otherwise(
            s in prop_oneof![any::<String>(), tricky()]
        ) {
            let got = local_path(&s);
            if allowed(&s) {
                prop_assert_eq!(got, s.as_str());
            } else {
                prop_assert_eq!(got, FALLBACK);
            }
            prop_assert!(allowed(got));
        }

        #[test]
        fn one_bad_character_anywhere_is_refused(
            head in "/[a-z0-9/?=&.-]{0,20}",
            bad in prop::sample::select(vec!['\\', '\t', '\n', '\r', '\u{0}', '\u{1b}', '\u{7f}']),
            tail in "[a-z0-9/.]{0,20}",
        ) {
            let next = format!("{head}{bad}{tail}");
            prop_assert_eq!(local_path(&next), FALLBACK);
        }
    }
}
