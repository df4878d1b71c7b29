//! Signing a notification so a receiver can tell it came from this
//! daemon and is fresh: HMAC-SHA256 over `"<timestamp>.<body>"`.
//!
//! Invariant: the timestamp signed is the one sent in
//! `X-Agentsessions-Timestamp`, so a receiver that checks both rejects a
//! replayed body once it is older than its allowed skew.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature: `sha256=<hex>`.
pub const SIGNATURE: &str = "X-Agentsessions-Signature";
/// The header carrying the Unix time (seconds) the signature covers.
pub const TIMESTAMP: &str = "X-Agentsessions-Timestamp";
/// The header carrying the event id, shared by every redelivery.
pub const EVENT_ID: &str = "X-Agentsessions-Event-Id";

/// `sha256=` and the hex HMAC-SHA256 of `"{unix_secs}.{body}"` under
/// `secret`.
pub fn signature(secret: &[u8], unix_secs: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(unix_secs.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex = hex::encode(mac.finalize().into_bytes());
    debug_assert_eq!(hex.len(), 64, "a SHA-256 MAC is 32 bytes");
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_is_hmac_sha256_as_rfc_4231_defines_it() {
        // RFC 4231 test case 2 ("Jefe"), with the message split at our dot:
        // "what do ya want" + "." is not the vector, so sign the vector's
        // bytes by choosing a timestamp-free check through the same MAC.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // And ours signs exactly "<ts>.<body>".
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(b"17.{}");
        let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(signature(b"k", 17, b"{}"), want);
        assert_ne!(signature(b"k", 18, b"{}"), want, "the time is signed");
    }
}
