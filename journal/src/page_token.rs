//! `list_sessions` page tokens, byte-compatible with the Go host.
//!
//! A token is base64url without padding of `"<created_at unix nanos>\0<uid>"`:
//! the keyset position of the last row of the previous page. It is not signed;
//! a forged token can only move the cursor, never widen the project filter.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::StoreError;

/// The token for a page that ended at (`created_at`, `uid`).
pub fn encode(created_at: i64, uid: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{created_at}\0{uid}"))
}

/// The (`created_at`, `uid`) a token resumes after.
pub fn decode(token: &str) -> Result<(i64, String), StoreError> {
    let raw = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| StoreError::InvalidPageToken)?;
    let text = String::from_utf8(raw).map_err(|_| StoreError::InvalidPageToken)?;
    let (ts, uid) = text.split_once('\0').ok_or(StoreError::InvalidPageToken)?;
    // Only a plain decimal integer, as we write it; `parse` would also take a
    // leading '+', which we never produce.
    if ts.is_empty() || ts.starts_with('+') {
        return Err(StoreError::InvalidPageToken);
    }
    let created_at = ts
        .parse::<i64>()
        .map_err(|_| StoreError::InvalidPageToken)?;
    Ok((created_at, uid.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_shape() {
        let t = encode(1_700_000_000_000_000_000, "sess-a");
        assert!(!t.contains('=') && !t.contains('+') && !t.contains('/'));
        assert_eq!(
            decode(&t).unwrap(),
            (1_700_000_000_000_000_000, "sess-a".into())
        );
        assert_eq!(decode(&encode(-5, "")).unwrap(), (-5, String::new()));
        // Known bytes: "12\0u" -> MTIAdQ
        assert_eq!(encode(12, "u"), "MTIAdQ");
    }

    #[test]
    fn rejects_bad_tokens() {
        for bad in [
            "!!!",
            "MTIAdQ==",
            &URL_SAFE_NO_PAD.encode("12u"),
            &URL_SAFE_NO_PAD.encode("x\0u"),
            &URL_SAFE_NO_PAD.encode("\0u"),
            &URL_SAFE_NO_PAD.encode("+1\0u"),
            &URL_SAFE_NO_PAD.encode([0xff, 0, b'u']),
        ] {
            assert!(
                matches!(decode(bad), Err(StoreError::InvalidPageToken)),
                "{bad}"
            );
        }
    }
}
