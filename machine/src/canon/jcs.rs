//! RFC 8785 (JCS) building blocks: string escaping, ECMAScript number
//! formatting, UTF-16 key order, and a generic writer for `serde_json::Value`.
//!
//! Everything here appends to a caller-owned `Vec<u8>` so the hot path can
//! reuse one buffer across records.

use std::cmp::Ordering;

use super::CanonError;

/// Largest integer magnitude an IEEE double holds exactly (2^53). JCS numbers
/// are doubles, so an integer beyond this has no faithful canonical form.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// Per byte: 0 = copy as is, 1 = short escape, 2 = `\u00xx`.
/// Only `"`, `\` and C0 controls are escaped; JCS leaves every other
/// character (DEL, `/`, U+2028, non-ASCII) as raw UTF-8.
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = 2;
        i += 1;
    }
    t[0x08] = 1;
    t[0x09] = 1;
    t[0x0a] = 1;
    t[0x0c] = 1;
    t[0x0d] = 1;
    t[b'"' as usize] = 1;
    t[b'\\' as usize] = 1;
    t
};

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JCS string literal (with the quotes).
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    let first = out.len();
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Most text needs no escaping: skip it eight bytes at a time.
        if let Some(word) = bytes.get(i..i + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            if !word_needs_escape(u64::from_le_bytes(w)) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let class = ESCAPE[b as usize];
        if class != 0 {
            out.extend_from_slice(&bytes[start..i]);
            start = i + 1;
            write_escape(out, b, class);
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
    // Each byte is copied or escaped in at most six (`\u00xx`).
    debug_assert!(
        (bytes.len() + 2..=6 * bytes.len() + 2).contains(&(out.len() - first)),
        "a string literal is its bytes, escaped, in quotes"
    );
}

/// Whether any of the eight bytes in `w` is `"`, `\` or below 0x20, by the
/// usual SWAR tests (exact for existence; which byte is not needed).
fn word_needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let quote = has_zero(w ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(w ^ (ONES * u64::from(b'\\')));
    let needs = (below_space | quote | backslash) != 0;
    debug_assert_eq!(
        needs,
        w.to_le_bytes().iter().any(|&b| ESCAPE[b as usize] != 0),
        "the word test agrees with the escape table"
    );
    needs
}

fn write_escape(out: &mut Vec<u8>, b: u8, class: u8) {
    debug_assert!(
        class != 0 && class == ESCAPE[b as usize],
        "only a byte the table escapes is escaped, by its class"
    );
    if class == 1 {
        let c = match b {
            0x08 => b'b',
            0x09 => b't',
            0x0a => b'n',
            0x0c => b'f',
            0x0d => b'r',
            other => {
                // '"' and '\\' escape as themselves.
                debug_assert!(matches!(other, b'"' | b'\\'), "no other short escape");
                other
            }
        };
        out.extend_from_slice(&[b'\\', c]);
    } else {
        out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX_LOWER[(b >> 4) as usize],
            HEX_LOWER[(b & 0xf) as usize],
        ]);
    }
}

/// Appends a decimal integer (no quotes).
pub fn write_i64(out: &mut Vec<u8>, v: i64) {
    let start = out.len();
    if v < 0 {
        out.push(b'-');
    }
    write_u64(out, v.unsigned_abs());
    // i64::MIN, the longest, is a sign and 19 digits.
    debug_assert!(out.len() - start <= 20, "an i64 is at most 20 characters");
}

/// Appends a decimal unsigned integer (no quotes).
pub fn write_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    debug_assert!(
        buf[i] != b'0' || i == buf.len() - 1,
        "no leading zero but in 0 itself"
    );
    out.extend_from_slice(&buf[i..]);
}

/// Appends an int64 in its proto3-JSON form: a decimal JSON string.
pub fn write_i64_string(out: &mut Vec<u8>, v: i64) {
    let start = out.len();
    out.push(b'"');
    write_i64(out, v);
    out.push(b'"');
    debug_assert!(out.len() - start >= 3, "a quoted int64 has a digit");
}

/// Appends a finite double the way ECMAScript `Number.prototype.toString`
/// prints it (`1.0` → `1`, `1e21` → `1e+21`, `-0` → `0`).
///
/// Non-finite values have no JSON form; the caller supplies the path so the
/// error can say where the value sat.
pub fn write_f64(out: &mut Vec<u8>, v: f64) -> Result<(), CanonError> {
    if !v.is_finite() {
        return Err(CanonError::NonFiniteNumber {
            path: String::new(),
        });
    }
    if v == 0.0 {
        // Covers -0 as well: ECMAScript prints both zeros as "0".
        out.push(b'0');
        return Ok(());
    }
    // format_finite's precondition; zero was written above.
    debug_assert!(v.is_finite() && v != 0.0);
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format_finite(v).as_bytes());
    Ok(())
}

/// Orders two strings by their UTF-16 code units, as RFC 8785 sorts keys.
///
/// UTF-8 byte order equals code point order, which differs from UTF-16 order
/// in one case only: a supplementary character (UTF-16 lead surrogate
/// D800..DBFF, UTF-8 lead byte F0..F4) against a BMP character in E000..FFFF
/// (UTF-8 lead byte EE or EF). So compare bytes and, at the first difference,
/// lift EE/EF above F0..F4. A differing continuation byte (80..BF) is never
/// EE/EF, and two differing bytes are either both lead bytes or both
/// continuation bytes of equally long sequences, so the remap is safe.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let order = match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) => {
            let rank = |c: u8| -> u16 {
                if c == 0xEE || c == 0xEF {
                    u16::from(c) + 0x10
                } else {
                    u16::from(c)
                }
            };
            rank(x[i]).cmp(&rank(y[i]))
        }
    };
    debug_assert_eq!(
        order,
        a.encode_utf16().cmp(b.encode_utf16()),
        "byte order with EE/EF lifted is UTF-16 order"
    );
    order
}

/// Whether a key contains bytes whose UTF-8 order may differ from UTF-16
/// order (see [`cmp_utf16`]). Keys without them keep their byte order.
pub fn needs_utf16_resort(key: &str) -> bool {
    let needs = key.as_bytes().iter().any(|&b| b >= 0xEE);
    // Lead bytes EE..F4 start exactly the characters from U+E000 up.
    debug_assert_eq!(needs, key.chars().any(|c| c >= '\u{e000}'));
    needs
}

/// Hex-encodes bytes in lowercase.
pub fn hex_lower(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX_LOWER[(b >> 4) as usize] as char);
        s.push(HEX_LOWER[(b & 0xf) as usize] as char);
    }
    debug_assert_eq!(s.len(), bytes.len() * 2, "two hex digits a byte");
    s
}

/// Whether `s` has the form of a SHA-256 content hash: exactly 64
/// lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| HEX_LOWER.contains(&b))
}

/// Appends the RFC 8785 form of an arbitrary JSON value.
pub fn write_json_value(
    out: &mut Vec<u8>,
    v: &serde_json::Value,
    depth: usize,
) -> Result<(), CanonError> {
    use serde_json::Value;
    if depth > super::MAX_DEPTH {
        return Err(CanonError::TooDeep {
            limit: super::MAX_DEPTH,
        });
    }
    let start = out.len();
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_json_number(out, n)?,
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_value(out, item, depth + 1).map_err(|e| e.at_index(i))?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|x, y| cmp_utf16(x.0, y.0));
            out.push(b'{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_json_value(out, item, depth + 1).map_err(|e| e.at_key(k))?;
            }
            out.push(b'}');
        }
    }
    debug_assert!(out.len() > start, "every JSON value has a non-empty form");
    Ok(())
}

fn write_json_number(out: &mut Vec<u8>, n: &serde_json::Number) -> Result<(), CanonError> {
    // Integers are written exactly when a double can hold them; that is
    // also what ES6 printing of the same double would give (below 1e21).
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonError::IntegerNotJsonSafe {
                value: i.to_string(),
            });
        }
        write_i64(out, i);
        return Ok(());
    }
    if let Some(u) = n.as_u64() {
        debug_assert!(u > i64::MAX as u64, "as_i64 took every smaller integer");
        if u > MAX_SAFE_INTEGER {
            return Err(CanonError::IntegerNotJsonSafe {
                value: u.to_string(),
            });
        }
        write_u64(out, u);
        return Ok(());
    }
    match n.as_f64() {
        Some(f) => write_f64(out, f),
        None => Err(CanonError::NonFiniteNumber {
            path: String::new(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    fn f(v: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_only_quote_backslash_and_controls() {
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(s("\u{8}\t\n\u{c}\r"), r#""\b\t\n\f\r""#);
        assert_eq!(s("\u{0}\u{1}\u{1f}"), r#""\u0000\u0001\u001f""#);
        assert_eq!(s("/\u{7f}\u{2028}é😀"), "\"/\u{7f}\u{2028}é😀\"");
    }

    #[test]
    fn word_check_agrees_with_table() {
        for b in 0..=255u8 {
            for pos in 0..8 {
                let mut w = [b'a'; 8];
                w[pos] = b;
                let want = ESCAPE[b as usize] != 0;
                assert_eq!(
                    word_needs_escape(u64::from_le_bytes(w)),
                    want,
                    "{b} at {pos}"
                );
            }
        }
        // Bytes just around the thresholds, all eight set.
        for b in [
            0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff,
        ] {
            let want = ESCAPE[b as usize] != 0;
            assert_eq!(word_needs_escape(u64::from_le_bytes([b; 8])), want, "{b}");
        }
        assert_eq!(s("0123456789abcdef\"x"), r#""0123456789abcdef\"x""#);
    }

    #[test]
    fn numbers_in_ecmascript_form() {
        assert_eq!(f(1.0), "1");
        assert_eq!(f(-0.0), "0");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(1e-7), "1e-7");
        assert_eq!(f(0.000001), "0.000001");
        assert_eq!(f(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(f(9007199254740992.0), "9007199254740992");
        assert_eq!(f(-1.5), "-1.5");
        assert!(write_f64(&mut Vec::new(), f64::NAN).is_err());
        assert!(write_f64(&mut Vec::new(), f64::NEG_INFINITY).is_err());
    }

    #[test]
    fn integers() {
        let mut out = Vec::new();
        write_i64(&mut out, i64::MIN);
        out.push(b' ');
        write_i64(&mut out, 0);
        out.push(b' ');
        write_i64(&mut out, i64::MAX);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-9223372036854775808 0 9223372036854775807"
        );
    }

    #[test]
    fn utf16_order_matches_encode_utf16() {
        let keys = [
            "",
            "a",
            "ab",
            "b",
            "é",
            "\u{e000}",
            "\u{ffff}",
            "😀",
            "😀a",
            "\u{10000}",
            "\u{d7ff}",
            "\u{7f}",
            "\u{80}",
            "z\u{e000}",
            "z😀",
        ];
        for a in keys {
            for b in keys {
                let want = a.encode_utf16().cmp(b.encode_utf16());
                assert_eq!(cmp_utf16(a, b), want, "{a:?} vs {b:?}");
            }
        }
    }
}
