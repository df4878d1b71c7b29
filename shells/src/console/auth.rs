//! Who is looking: the console session named by the browser's cookie,
//! resolved through [`Sessions`] with its stored credential verified again
//! by the daemon's [`Authenticator`] on every request; and the CSRF tokens
//! every form carries.
//!
//! Invariants: a request acts for a principal only when its cookie names
//! an open console session whose credential verifies now. A POST changes
//! something only when its CSRF token is the one derived from a cookie it
//! arrived with: the console session's id, or, for the login form, the
//! visitor's own random login cookie. The derivation key is random per
//! process, so a token never outlives the daemon that issued it, and a
//! page of another origin can neither read nor guess it.

use agentsessions_machine::vocab::{Caller, Role};
use axum::http::HeaderMap;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::session::{self, Lookup, Sessions};
use crate::auth::{AuthError, Authenticator};

/// The cookie holding the console session's id.
pub const COOKIE: &str = "agentsessions_console";
/// The cookie holding a visitor's login CSRF nonce.
pub const LOGIN_COOKIE: &str = "agentsessions_login";
/// How long a login form stays usable, in seconds.
pub const LOGIN_COOKIE_AGE: u64 = 600;

/// The per-process key CSRF tokens are derived with.
pub struct CsrfKey([u8; 32]);

impl CsrfKey {
    /// A key from the OS's random source.
    pub fn random() -> std::io::Result<Self> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Self(key))
    }

    /// A fixed key (tests and benches).
    pub fn fixed(key: [u8; 32]) -> Self {
        Self(key)
    }

    fn derive(&self, label: &[u8], value: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(label);
        h.update(value.as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// The CSRF token of the forms of console session `session` ("" when
    /// auth is off).
    pub fn token_for(&self, session: &str) -> String {
        self.derive(b"console csrf\0", session)
    }

    /// True when `sent` is the CSRF token of console session `session`.
    pub fn check(&self, session: &str, sent: &str) -> bool {
        same(&self.token_for(session), sent)
    }

    /// The login form's CSRF token for a visitor whose login cookie holds
    /// `nonce`.
    pub fn login_token_for(&self, nonce: &str) -> String {
        self.derive(b"console login csrf\0", nonce)
    }

    /// True when `sent` is the login form token of `nonce`; never for a
    /// visitor without a login cookie.
    pub fn check_login(&self, nonce: &str, sent: &str) -> bool {
        !nonce.is_empty() && same(&self.login_token_for(nonce), sent)
    }
}

/// Equal strings, compared in time that depends on their lengths only.
fn same(want: &str, sent: &str) -> bool {
    want.len() == sent.len()
        && want
            .bytes()
            .zip(sent.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The verified viewer of one request.
pub struct Viewer {
    /// Who the machine is told is calling.
    pub caller: Caller,
    /// The console session's id ("" when auth is off).
    pub session: String,
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

    /// Whether to offer Resume for a decided approval on `project`: a
    /// writer may, and so may an approver (the machine lets it carry out
    /// exactly a decided gate). Only a hint, as [`Viewer::may_decide`].
    pub fn may_resume(&self, project: &str) -> bool {
        match &self.caller {
            Caller::Open => true,
            Caller::Verified(p) => p.may(Role::Writer, project) || p.may(Role::Approver, project),
        }
    }
}

/// Why a request has no viewer.
#[derive(Debug)]
pub enum NoViewer {
    /// No cookie: the login page.
    Missing,
    /// A cookie naming no open console session (logged out, evicted, or
    /// issued by an earlier daemon).
    Ended,
    /// A console session past its expiry.
    Expired,
    /// A console session whose credential does not verify any more.
    Refused(AuthError),
}

impl NoViewer {
    /// Why, in the console's own fixed words.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "no console session",
            Self::Ended => "the console session has ended",
            Self::Expired => "the console session has expired",
            Self::Refused(_) => "the console session's credential is no longer accepted",
        }
    }
}

/// The non-empty value of cookie `name` in the request, if any.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    for value in headers.get_all(axum::http::header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((n, v)) = pair.trim().split_once('=')
                && n == name
                && !v.is_empty()
            {
                return Some(v.to_owned());
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
    let caller = auth.authenticate(&metadata, None)?;
    super::access::note_caller(&caller);
    Ok(caller)
}

/// When a console session opened at `now` for a verified `token` must end
/// (Unix seconds): [`session::LIFETIME`] later, or at the token's `exp`
/// if it is a JWT expiring sooner.
pub fn expiry(token: &str, now: u64) -> u64 {
    let cap = now.saturating_add(session::LIFETIME.as_secs());
    jwt_exp(token).map_or(cap, |exp| exp.min(cap))
}

/// A JWT's `exp` claim. The signature is not checked here: this is only
/// read from a token the [`Authenticator`] has just verified.
fn jwt_exp(token: &str) -> Option<u64> {
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()?
        .get("exp")?
        .as_u64()
}

/// The caller of console session `id` now: its stored credential,
/// verified again. A credential that no longer verifies ends the session.
pub fn resolve(auth: &Authenticator, sessions: &Sessions, id: &str) -> Result<Caller, NoViewer> {
    if !auth.is_on() {
        return Ok(Caller::Open);
    }
    let token = sessions
        .resolve(id, session::unix_now())
        .map_err(|l| match l {
            Lookup::Unknown => NoViewer::Ended,
            Lookup::Expired => NoViewer::Expired,
        })?;
    verify(auth, &token).map_err(|e| {
        sessions.revoke(id);
        NoViewer::Refused(e)
    })
}

/// The viewer of a request: open when auth is off, else the verified
/// principal of its cookie's console session.
pub fn viewer(
    auth: &Authenticator,
    sessions: &Sessions,
    headers: &HeaderMap,
) -> Result<Viewer, NoViewer> {
    if !auth.is_on() {
        return Ok(Viewer {
            caller: Caller::Open,
            session: String::new(),
        });
    }
    let id = cookie(headers, COOKIE).ok_or(NoViewer::Missing)?;
    let caller = resolve(auth, sessions, &id)?;
    Ok(Viewer {
        caller,
        session: id,
    })
}

/// A Set-Cookie value: HttpOnly, SameSite=Strict, and Secure when the
/// console is served over TLS; `max_age` 0 removes the cookie.
pub fn set_cookie(name: &str, value: &str, path: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csrf_token_belongs_to_one_cookie_one_purpose_and_one_key() {
        let key = CsrfKey::fixed([7; 32]);
        let t = key.token_for("session-a");
        assert!(key.check("session-a", &t));
        assert!(!key.check("session-b", &t));
        assert!(!key.check("session-a", ""));
        assert!(!key.check("session-a", &t[1..]));
        assert!(!CsrfKey::fixed([8; 32]).check("session-a", &t));
        let login = key.login_token_for("nonce-a");
        assert!(key.check_login("nonce-a", &login));
        assert!(!key.check_login("nonce-b", &login));
        assert!(
            !key.check("nonce-a", &login),
            "a login token is no form token"
        );
        assert!(!key.check_login("", &key.login_token_for("")), "no cookie");
    }

    #[test]
    fn cookies_are_found_by_name_among_others() {
        let mut headers = HeaderMap::new();
        let set = set_cookie(COOKIE, "abc", "/", 60, true);
        assert!(set.ends_with("; Secure") && set.contains("Max-Age=60"));
        assert!(!set_cookie(COOKIE, "abc", "/", 60, false).contains("Secure"));
        let pair = set.split(';').next().unwrap();
        headers.insert(
            axum::http::header::COOKIE,
            format!("other=1; {LOGIN_COOKIE}=n; {pair}")
                .parse()
                .unwrap(),
        );
        assert_eq!(cookie(&headers, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, LOGIN_COOKIE).as_deref(), Some("n"));
        assert_eq!(cookie(&HeaderMap::new(), COOKIE), None);
    }

    #[test]
    fn a_session_ends_no_later_than_its_jwt() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = |claims: &str| format!("{}.{}.sig", b64("{}"), b64(claims));
        let lifetime = session::LIFETIME.as_secs();
        assert_eq!(expiry(&jwt(r#"{"exp":130}"#), 100), 130);
        assert_eq!(expiry(&jwt(r#"{"exp":99999999}"#), 100), 100 + lifetime);
        assert_eq!(expiry("an-api-key", 100), 100 + lifetime);
        assert_eq!(expiry(&jwt(r#"{"sub":"x"}"#), 100), 100 + lifetime);
        assert_eq!(expiry("a.b.c.d", 100), 100 + lifetime);
    }
}
