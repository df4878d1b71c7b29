//! An error and its causes as one line of text, each cause written once.
//!
//! Transport errors nest wrappers that repeat their inner error's text:
//! tonic's `ConnectError` displays its source verbatim, so a refused dial
//! reads `tcp connect error: tcp connect error: Connection refused` when
//! every source is appended. A source whose text the line already holds
//! adds nothing and is skipped; its own sources are still read, since the
//! root cause (the OS error, the TLS alert) is usually the useful part.

use std::error::Error;

/// `e`, then each of its sources, joined by `: `.
pub fn chain(e: &dyn Error) -> String {
    let mut text = e.to_string();
    push_sources(&mut text, e.source());
    text
}

/// A status's message, then its source chain (a status the transport made
/// keeps the cause there, e.g. `tcp connect error` over `Connection
/// refused`).
pub fn status(status: &tonic::Status) -> String {
    let mut text = status.message().to_owned();
    push_sources(&mut text, Error::source(status));
    text
}

/// Appends `cause` and its sources to `text`, skipping empty texts and
/// texts `text` already contains.
fn push_sources(text: &mut String, mut cause: Option<&(dyn Error + 'static)>) {
    while let Some(c) = cause {
        let part = c.to_string();
        if !part.is_empty() && !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        cause = c.source();
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;

    /// A test error: its text and an optional source.
    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    fn nested(texts: &[&'static str]) -> E {
        let (last, outer) = texts.split_last().unwrap();
        outer
            .iter()
            .rev()
            .fold(E(last, None), |inner, t| E(t, Some(Box::new(inner))))
    }

    #[test]
    fn a_wrapper_repeating_its_source_is_written_once_and_the_root_cause_kept() {
        let e = nested(&[
            "transport error",
            "tcp connect error",
            "tcp connect error",
            "Connection refused (os error 111)",
        ]);
        assert_eq!(
            chain(&e),
            "transport error: tcp connect error: Connection refused (os error 111)"
        );
    }

    #[test]
    fn a_source_already_quoted_by_the_outer_message_is_skipped() {
        let e = nested(&["dial h:1: Connection refused", "Connection refused", ""]);
        assert_eq!(chain(&e), "dial h:1: Connection refused");
    }

    #[test]
    fn distinct_causes_are_all_kept_in_order() {
        let e = nested(&["a", "b", "c"]);
        assert_eq!(chain(&e), "a: b: c");
    }

    #[test]
    fn a_status_reads_as_its_message_then_its_sources_each_once() {
        let s = tonic::Status::from_error(Box::new(nested(&[
            "tcp connect error",
            "tcp connect error",
            "Connection refused (os error 111)",
        ])));
        assert_eq!(s.message(), "tcp connect error");
        assert_eq!(
            status(&s),
            "tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(status(&tonic::Status::not_found("no x")), "no x");
    }
}
