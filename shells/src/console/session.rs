//! Console sessions: the random id in the browser's cookie, mapped on the
//! server to the credential it was opened with and when it ends.
//!
//! Invariant: a cookie stands for a credential only while its entry is in
//! the table and unexpired. An entry never outlives its credential (a
//! JWT's `exp`), logout removes it, and the table holds at most
//! [`MAX_SESSIONS`] entries (the oldest goes first), so no cookie can be
//! replayed after it is revoked and the table cannot grow without bound.
//! The cookie itself carries nothing but 256 random bits.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// Most console sessions held; one more drops the oldest.
pub const MAX_SESSIONS: usize = 4096;

/// How long a console session lasts at most (less when its credential
/// expires sooner).
pub const LIFETIME: Duration = Duration::from_secs(8 * 3600);

/// Why no random id could be drawn.
#[derive(Debug, thiserror::Error)]
#[error("random source: {0}")]
pub struct RandomError(getrandom::Error);

/// 32 bytes from the OS's random source, hex-encoded.
pub fn random_hex() -> Result<String, RandomError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(RandomError)?;
    Ok(hex::encode(bytes))
}

/// Now, in Unix seconds (the unit of a JWT's `exp`).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a cookie's id resolves to no credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Never issued, logged out, evicted, or issued by an earlier daemon.
    Unknown,
    /// Past its expiry.
    Expired,
}

/// The table of open console sessions.
#[derive(Default)]
pub struct Sessions {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Keyed by the SHA-256 of the id: a lookup's timing depends on a
    /// hash the caller cannot steer, never on how much of a real id a
    /// guess shares.
    entries: HashMap<[u8; 32], Entry>,
    /// Opening order, for evicting the oldest.
    order: BTreeMap<u64, [u8; 32]>,
    serial: u64,
}

struct Entry {
    token: String,
    /// Unix seconds.
    expires: u64,
    serial: u64,
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic elsewhere while holding the lock leaves a consistent
        // table (every change is a single insert or remove pair).
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session for `token` ending at `expires` (Unix seconds);
    /// returns its new random id.
    pub fn open(&self, token: &str, expires: u64, now: u64) -> Result<String, RandomError> {
        let id = random_hex()?;
        let mut t = self.lock();
        if t.entries.len() >= MAX_SESSIONS {
            let Table { entries, order, .. } = &mut *t;
            entries.retain(|_, e| e.expires > now);
            order.retain(|_, k| entries.contains_key(k));
        }
        while t.entries.len() >= MAX_SESSIONS {
            let Some((_, oldest)) = t.order.pop_first() else {
                break;
            };
            t.entries.remove(&oldest);
        }
        t.serial += 1;
        let serial = t.serial;
        let k = key(&id);
        t.order.insert(serial, k);
        t.entries.insert(
            k,
            Entry {
                token: token.to_owned(),
                expires,
                serial,
            },
        );
        Ok(id)
    }

    /// The credential of session `id` at `now`. An expired entry stays
    /// (so the browser is told it expired rather than that it is unknown)
    /// until a full table drops it.
    pub fn resolve(&self, id: &str, now: u64) -> Result<String, Lookup> {
        let t = self.lock();
        let e = t.entries.get(&key(id)).ok_or(Lookup::Unknown)?;
        if e.expires <= now {
            return Err(Lookup::Expired);
        }
        Ok(e.token.clone())
    }

    /// Ends session `id` (logout, or a credential that stopped
    /// verifying); true when it was open.
    pub fn revoke(&self, id: &str) -> bool {
        self.lock().remove(&key(id))
    }

    /// Sessions held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

impl Table {
    fn remove(&mut self, k: &[u8; 32]) -> bool {
        match self.entries.remove(k) {
            Some(e) => {
                self.order.remove(&e.serial);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_resolves_until_it_expires_or_is_revoked() {
        let s = Sessions::default();
        let a = s.open("key-a", 100, 10).unwrap();
        let b = s.open("key-b", 1_000, 10).unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b, "ids are random");
        assert_eq!(s.resolve(&a, 99).as_deref(), Ok("key-a"));
        assert_eq!(s.resolve(&a, 100), Err(Lookup::Expired));
        assert_eq!(s.resolve(&a, 200), Err(Lookup::Expired), "and stays so");
        assert!(s.revoke(&b));
        assert!(!s.revoke(&b));
        assert_eq!(s.resolve(&b, 10), Err(Lookup::Unknown));
        assert_eq!(s.resolve("key-b", 10), Err(Lookup::Unknown));
        assert_eq!(s.len(), 1, "the expired one stays until the table fills");
    }

    #[test]
    fn a_full_table_drops_expired_sessions_then_the_oldest() {
        let s = Sessions::default();
        let first = s.open("t", 1_000, 0).unwrap();
        let second = s.open("t", 1_000, 0).unwrap();
        let short = s.open("t", 5, 0).unwrap();
        for _ in 3..MAX_SESSIONS {
            s.open("t", 1_000, 0).unwrap();
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        // At t=10 the short one has expired: it goes, the oldest stays.
        let newer = s.open("t", 1_000, 10).unwrap();
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(s.resolve(&first, 10).is_ok());
        assert_eq!(s.resolve(&short, 10), Err(Lookup::Unknown));
        // Nothing expired: the oldest goes.
        s.open("t", 1_000, 10).unwrap();
        assert_eq!(s.len(), MAX_SESSIONS);
        assert_eq!(s.resolve(&first, 10), Err(Lookup::Unknown));
        assert!(s.resolve(&second, 10).is_ok());
        assert!(s.resolve(&newer, 10).is_ok());
    }
}
