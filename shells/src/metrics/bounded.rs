//! Label values that a peer chooses (a model name from a harness's
//! request, a tool name) kept to a bounded set.
//!
//! Invariant: at most `cap` distinct values are ever handed out; every
//! value past that is [`OTHER`], so a harness that invents a new model name
//! per call cannot grow the exposition without bound.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The value standing for every name past the cap.
pub const OTHER: &str = "other";

/// Longest value kept; longer names are cut (at a char boundary).
const MAX_LEN: usize = 64;

/// The value standing for an empty name.
const UNKNOWN: &str = "unknown";

/// A bounded set of label values.
#[derive(Debug)]
pub struct Bounded {
    cap: usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Names handed out as themselves (at most `cap`).
    names: BTreeSet<String>,
    /// Whether [`OTHER`] and [`UNKNOWN`] were handed out yet.
    other: bool,
    unknown: bool,
}

impl Bounded {
    /// A set handing out at most `cap` distinct values.
    pub fn new(cap: usize) -> Self {
        assert!(cap > 0, "a label needs room for one value");
        Self {
            cap,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// `value` itself while there is room (or it was seen), else
    /// [`OTHER`]. An empty value is `"unknown"`.
    pub fn label(&self, value: &str) -> String {
        self.label_new(value).0
    }

    /// [`Bounded::label`], and whether this is the first time that label
    /// is handed out (so its series can be created together).
    pub fn label_new(&self, value: &str) -> (String, bool) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if value.is_empty() {
            let new = !std::mem::replace(&mut seen.unknown, true);
            return (UNKNOWN.to_owned(), new);
        }
        let mut end = value.len().min(MAX_LEN);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        let value = &value[..end];
        if seen.names.contains(value) {
            return (value.to_owned(), false);
        }
        if seen.names.len() >= self.cap {
            let new = !std::mem::replace(&mut seen.other, true);
            return (OTHER.to_owned(), new);
        }
        seen.names.insert(value.to_owned());
        debug_assert!(seen.names.len() <= self.cap);
        (value.to_owned(), true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_cap_are_other_and_seen_ones_stay() {
        let b = Bounded::new(2);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.label("b"), "b");
        assert_eq!(b.label("c"), OTHER);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.label(""), "unknown");
    }

    #[test]
    fn each_label_is_new_exactly_once() {
        let b = Bounded::new(1);
        assert_eq!(b.label_new("a"), ("a".to_owned(), true));
        assert_eq!(b.label_new("a"), ("a".to_owned(), false));
        assert_eq!(b.label_new("b"), (OTHER.to_owned(), true));
        assert_eq!(b.label_new("c"), (OTHER.to_owned(), false));
        assert_eq!(b.label_new(""), (UNKNOWN.to_owned(), true));
        assert_eq!(b.label_new(""), (UNKNOWN.to_owned(), false));
    }

    #[test]
    fn long_values_are_cut_at_a_char_boundary() {
        let b = Bounded::new(4);
        let long = "é".repeat(100);
        let cut = b.label(&long);
        assert!(cut.len() <= MAX_LEN && cut.chars().all(|c| c == 'é'));
    }
}
