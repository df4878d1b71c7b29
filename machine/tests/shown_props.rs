//! Properties of `vocab::shown`, the form every caller-supplied string takes
//! in a log line or a status message: nothing a caller sends can break a
//! line, carry a control character, or make the output longer than the
//! bound plus the marker; short text is its plain escape.

use agentsessions_machine::vocab::{SHOWN_MAX, shown};
use proptest::prelude::*;

/// Splits `out` into the escaped text and the count of the marker, if any.
fn split(out: &str) -> (&str, Option<usize>) {
    match out.rfind("…(+") {
        Some(at) if out.ends_with(" bytes)") => {
            let n = &out[at + "…(+".len()..out.len() - " bytes)".len()];
            (&out[..at], Some(n.parse().expect("a count")))
        }
        _ => (out, None),
    }
}

/// Every char as `char::escape_debug` writes it (`str::escape_debug`
/// leaves a combining mark unescaped after the first char; `shown` does
/// not, so a mark cannot hide the quote before it).
fn escaped_chars(text: &str) -> String {
    text.chars().flat_map(char::escape_debug).collect()
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        // Dense in what a forger sends: newlines, ESC, quotes, separators.
        proptest::collection::vec(
            prop_oneof![
                Just('\n'),
                Just('\r'),
                Just('\x1b'),
                Just('"'),
                Just('\\'),
                Just('\u{2028}'),
                Just('\u{202e}'),
                Just('\u{85}'),
                Just('é'),
                any::<char>(),
                proptest::char::range('a', 'z'),
            ],
            0..400,
        )
        .prop_map(|cs| cs.into_iter().collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn shown_text_is_one_line_without_control_chars_and_bounded(text in any_text()) {
        let out = shown(&text).to_string();
        prop_assert!(!out.chars().any(char::is_control), "{out:?}");
        prop_assert!(!out.contains(['\n', '\r', '\u{2028}', '\u{2029}']), "{out:?}");
        let (escaped, cut) = split(&out);
        prop_assert!(escaped.len() <= SHOWN_MAX, "{} bytes", escaped.len());
        let full = escaped_chars(&text);
        if full.len() <= SHOWN_MAX {
            prop_assert_eq!(&out, &full, "short text is its plain escape");
        } else {
            // The shown part is the escape of a prefix of the input, and the
            // marker counts exactly the bytes after that prefix.
            let left = cut.expect("a cut is marked");
            prop_assert!(left > 0 && left <= text.len());
            let kept = &text[..text.len() - left];
            prop_assert_eq!(escaped, escaped_chars(kept));
        }
        // The quoted form is the same text between quotes.
        prop_assert_eq!(format!("{:?}", shown(&text)), format!("\"{out}\""));
    }
}
