//! Who is looking: the token in the console's cookie, verified by the
//! daemon's [`Authenticator`] on every request, and the CSRF token every
//! form carries.
//!
//! Invariant: a POST changes something only when its CSRF token is the one
//! derived from the cookie it arrived with; the derivation key is random
//! per process, so a token never outlives the daemon that issued it, and a
//! page of another origin can neither read nor guess it.

use agentsessions_machine::host::{Caller, Role};
use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::auth::{AuthError, Authenticator};

/// The cookie holding the (hex-encoded) bearer token.
pub const COOKIE: &str = "agentsessions_console";

/// The per-process key CSRF tokens are derived with.
pub struct CsrfKey([u8; 32]);

impl CsrfKey {
    /// A key from the OS's random source.
    pub fn random() -> std::io::Result<Self> {
        use std::io::Read as _;
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        Ok(Self(key))
    }

    /// A fixed key (tests and benches).
    pub fn fixed(key: [u8; 32]) -> Self {
        Self(key)
    }

    /// The CSRF token of a browser holding `token` ("" without one).
    pub fn token_for(&self, token: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(b"console csrf\0");
        h.update(token.as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// True when `sent` is the CSRF token of `token` (compared in constant
    /// time).
    pub fn check(&self, token: &str, sent: &str) -> bool {
        let want = self.token_for(token);
        want.len() == sent.len()
            && want
                .bytes()
                .zip(sent.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// The verified viewer of one request.
pub struct Viewer {
    /// Who the machine is told is calling.
    pub caller: Caller,
    /// The bearer token of the cookie ("" when auth is off).
    pub token: String,
}

impl Viewer {
    /// The name shown in the header ("" when auth is off).
    pub fn name(&self) -> String {
        match &self.caller {
            Caller::Open => String::new(),
            Caller::Verified(p) => p.name.clone(),
        }
    }

    /// Whether to show Approve and Deny on a session of `project`. Only a
    /// hint for the page: the machine still decides every Approve.
    pub fn may_decide(&self, project: &str) -> bool {
        match &self.caller {
            Caller::Open => true,
            Caller::Verified(p) => p.may(Role::Approver, project),
        }
    }
}

/// Why a request has no viewer.
pub enum NoViewer {
    /// No cookie: the login page.
    Missing,
    /// A cookie whose token does not verify (any more).
    Refused(AuthError),
}

/// The token in the request's console cookie, if any.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    for value in headers.get_all(axum::http::header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((name, v)) = pair.trim().split_once('=')
                && name == COOKIE
            {
                let bytes = hex::decode(v).ok()?;
                return String::from_utf8(bytes).ok().filter(|t| !t.is_empty());
            }
        }
    }
    None
}

/// Verifies `token` as the gRPC listener verifies a bearer credential.
pub fn verify(auth: &Authenticator, token: &str) -> Result<Caller, AuthError> {
    let mut metadata = tonic::metadata::MetadataMap::new();
    let value = format!("Bearer {token}")
        .parse()
        .map_err(|_| AuthError::Malformed)?;
    metadata.insert("authorization", value);
    auth.authenticate(&metadata, None)
}

/// The viewer of a request: open when auth is off, else the verified
/// principal of its cookie.
pub fn viewer(auth: &Authenticator, headers: &HeaderMap) -> Result<Viewer, NoViewer> {
    if !auth.is_on() {
        return Ok(Viewer {
            caller: Caller::Open,
            token: String::new(),
        });
    }
    let token = cookie_token(headers).ok_or(NoViewer::Missing)?;
    let caller = verify(auth, &token).map_err(NoViewer::Refused)?;
    Ok(Viewer { caller, token })
}

/// The Set-Cookie value keeping `token` (HttpOnly, SameSite=Strict, and
/// Secure when the console is served over TLS).
pub fn set_cookie(token: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{}",
        hex::encode(token),
        if secure { "; Secure" } else { "" }
    )
}

/// The Set-Cookie value removing the cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Where to go after logging in: a local path only, so the login form
/// cannot be used to send a browser elsewhere.
pub fn local_path(next: &str) -> &str {
    let local = next.starts_with('/') && !next.starts_with("//") && !next.contains('\\');
    if local { next } else { "/sessions" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csrf_token_belongs_to_one_cookie_and_one_key() {
        let key = CsrfKey::fixed([7; 32]);
        let t = key.token_for("alice-key");
        assert!(key.check("alice-key", &t));
        assert!(!key.check("bob-key", &t));
        assert!(!key.check("alice-key", ""));
        assert!(!key.check("alice-key", &t[1..]));
        assert!(!CsrfKey::fixed([8; 32]).check("alice-key", &t));
    }

    #[test]
    fn the_cookie_round_trips_any_token_and_ignores_other_cookies() {
        let mut headers = HeaderMap::new();
        let set = set_cookie("k; =x", true);
        assert!(set.ends_with("; Secure"));
        assert!(!set_cookie("k", false).contains("Secure"));
        let pair = set.split(';').next().unwrap();
        headers.insert(
            axum::http::header::COOKIE,
            format!("other=1; {pair}").parse().unwrap(),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some("k; =x"));
        assert_eq!(cookie_token(&HeaderMap::new()), None);
    }

    #[test]
    fn only_local_paths_are_followed_after_login() {
        assert_eq!(local_path("/sessions/x"), "/sessions/x");
        assert_eq!(local_path("//evil.example/"), "/sessions");
        assert_eq!(local_path("https://evil.example/"), "/sessions");
        assert_eq!(local_path("/\\evil"), "/sessions");
    }
}
