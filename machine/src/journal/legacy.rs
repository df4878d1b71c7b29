//! Journals written by the v0.1.2 host, which stamped no execution id and no
//! start marker on anything.
//!
//! Such a journal is one id-less run of events; newer hosts append modern,
//! id-bearing executions after it. [`legacy_prefix`] finds the boundary and
//! refuses shapes the released writer could never have produced, and
//! [`compat_invocation_id`] derives the stable invocation id a harness sees
//! for an id-less turn (the id is never journaled).

use agentsessions_proto::v1::{Event, EventKind, LogRecord};
use sha2::{Digest, Sha256};

use super::records::{exec_id, kind, kind_name};
use crate::canon;
use crate::error::LogError;

/// Kinds the v0.1.2 writer could journal. Anything else without an id is
/// evidence of corruption or of a newer writer that lost its ids.
fn is_legacy_kind(k: EventKind) -> bool {
    debug_assert!(
        !matches!(
            k,
            EventKind::EventLifecycle | EventKind::EventExecutionStart
        ),
        "markers and modern starts are sorted out before"
    );
    matches!(
        k,
        EventKind::EventInput
            | EventKind::EventModelCall
            | EventKind::EventOutput
            | EventKind::EventToolCall
            | EventKind::EventToolResult
            | EventKind::EventUsage
            | EventKind::EventEnd
            | EventKind::EventError
    )
}

/// The index where the id-less prefix ends: 0 when the journal has no legacy
/// content (lifecycle markers alone do not count), the whole length when it
/// is legacy throughout, else the index of the first modern record.
///
/// A bare id-bearing record right after an unfinished legacy turn is refused:
/// only an explicit EXECUTION_START may supersede an interrupted legacy tail,
/// because that is the only way a modern host begins a new turn.
pub fn legacy_prefix(records: &[LogRecord]) -> Result<usize, LogError> {
    let mut fold = LegacyFold::default();
    for r in records {
        if fold.decided.is_some() {
            break;
        }
        fold.push(r);
    }
    let prefix = fold.prefix();
    debug_assert!(prefix.iter().all(|&n| n <= records.len()));
    prefix
}

/// [`legacy_prefix`] one record at a time: the boundary is settled by the
/// first modern (or impossible) record, so a settled fold ignores the rest
/// and each push is O(1).
#[derive(Debug, Clone, Default)]
pub(crate) struct LegacyFold {
    /// Set once the first modern or non-legacy record was seen.
    decided: Option<Result<usize, LogError>>,
    has_legacy: bool,
    /// Kind of the last non-lifecycle legacy record seen so far.
    last_legacy: EventKind,
    /// Records pushed.
    len: usize,
}

impl LegacyFold {
    /// Takes the next record of the journal.
    pub(crate) fn push(&mut self, r: &LogRecord) {
        let i = self.len;
        self.len += 1;
        if self.decided.is_some() {
            return;
        }
        let k = kind(r);
        let modern = k == EventKind::EventExecutionStart
            || (k != EventKind::EventLifecycle && !exec_id(r).is_empty());
        if modern {
            let finished = matches!(
                self.last_legacy,
                EventKind::EventEnd | EventKind::EventError
            );
            self.decided = Some(if !self.has_legacy {
                Ok(0)
            } else if k != EventKind::EventExecutionStart && !finished {
                Err(LogError::invalid(format!(
                    "unfinished legacy prefix before event {}",
                    i + 1
                )))
            } else {
                assert!(i > 0, "a legacy record precedes the boundary");
                Ok(i)
            });
            return;
        }
        if k == EventKind::EventLifecycle {
            return;
        }
        if !is_legacy_kind(k) {
            self.decided = Some(Err(LogError::invalid(format!(
                "event {} ({}) is not a legacy event",
                i + 1,
                kind_name(k)
            ))));
            return;
        }
        self.has_legacy = true;
        self.last_legacy = k;
        debug_assert!(is_legacy_kind(self.last_legacy));
    }

    /// [`legacy_prefix`] of the records pushed so far.
    pub(crate) fn prefix(&self) -> Result<usize, LogError> {
        match &self.decided {
            Some(settled) => {
                debug_assert!(
                    settled.iter().all(|&n| n < self.len),
                    "settled by a record pushed"
                );
                settled.clone()
            }
            None => Ok(if self.has_legacy { self.len } else { 0 }),
        }
    }
}

/// The invocation id a harness sees for an id-less turn anchored on
/// `record`: `legacy-` plus the lowercase hex SHA-256 of the Go-marshalled
/// object `{"session_uid":uid,"seq":"N","event":<canonical event>}`.
///
/// The session uid scopes the id (two sessions with identical bytes get
/// different ids); the seq and the canonical event tie it to one record, so
/// retries and later replays derive the same id.
pub fn compat_invocation_id(session_uid: &str, record: &LogRecord) -> Result<String, LogError> {
    if session_uid.is_empty() {
        return Err(LogError::MissingSessionUid);
    }
    let absent = Event::default();
    let ev = record.event.as_ref().unwrap_or(&absent);
    let canonical = canon::canonical_event(ev)
        .map_err(|e| LogError::invalid(format!("legacy anchor has no canonical form: {e}")))?;

    let mut doc = Vec::with_capacity(canonical.len() + session_uid.len() + 64);
    doc.extend_from_slice(b"{\"session_uid\":");
    go_json_string(&mut doc, session_uid);
    doc.extend_from_slice(b",\"seq\":\"");
    doc.extend_from_slice(record.seq.to_string().as_bytes());
    doc.extend_from_slice(b"\",\"event\":");
    go_html_escape_raw(&mut doc, &canonical);
    doc.push(b'}');

    let digest = Sha256::digest(&doc);
    let mut id = String::with_capacity(7 + 64);
    id.push_str("legacy-");
    for b in digest {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    assert_eq!(id.len(), 7 + 64, "legacy- and a SHA-256 in hex");
    Ok(id)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `\u00XX`-style escape for a byte or a BMP code point.
fn push_u_escape(out: &mut Vec<u8>, cp: u32) {
    debug_assert!(cp <= 0xffff, "four hex digits: a byte or a BMP code point");
    out.extend_from_slice(b"\\u");
    for shift in [12u32, 8, 4, 0] {
        // The mask keeps the index below 16.
        out.push(HEX[((cp >> shift) & 0xf) as usize]);
    }
}

/// Writes `s` as a JSON string the way Go's encoding/json does with HTML
/// escaping on (its default): short escapes for the usual control
/// characters, `\u00XX` for the rest, `<`, `>`, `&` and U+2028/U+2029 as
/// `\uXXXX`, everything else verbatim.
fn go_json_string(out: &mut Vec<u8>, s: &str) {
    let start = out.len();
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => push_u_escape(out, u32::from(c)),
            c if u32::from(c) < 0x20 => push_u_escape(out, u32::from(c)),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
    debug_assert!(
        out.len() >= start + s.len() + 2,
        "escaping never shortens the text"
    );
}

/// Copies already-compact JSON (the canonical event has no insignificant
/// whitespace) while applying the HTML escaping Go's encoder gives an
/// embedded raw value. These characters can only occur inside strings in
/// valid JSON, so a byte scan is exact.
fn go_html_escape_raw(out: &mut Vec<u8>, raw: &[u8]) {
    let start = out.len();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        match b {
            b'<' | b'>' | b'&' => push_u_escape(out, u32::from(b)),
            // U+2028 and U+2029 are E2 80 A8 / E2 80 A9 in UTF-8.
            0xE2 if raw.get(i + 1) == Some(&0x80)
                && matches!(raw.get(i + 2), Some(0xA8) | Some(0xA9)) =>
            {
                let cp = if raw[i + 2] == 0xA8 { 0x2028 } else { 0x2029 };
                push_u_escape(out, cp);
                i += 3;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    debug_assert!(
        out.len() >= start + raw.len(),
        "escaping never drops a byte"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    #[test]
    fn go_string_escapes_html_and_controls() {
        let got = s(|o| go_json_string(o, "a<b>&\"\\\n\u{1}\u{2028}é"));
        assert_eq!(got, "\"a\\u003cb\\u003e\\u0026\\\"\\\\\\n\\u0001\\u2028é\"");
    }

    #[test]
    fn raw_escape_rewrites_only_html_and_separators() {
        let got = s(|o| go_html_escape_raw(o, "{\"t\":\"<&>\u{2029}\u{2027}\"}".as_bytes()));
        assert_eq!(got, "{\"t\":\"\\u003c\\u0026\\u003e\\u2029\u{2027}\"}");
    }
}
