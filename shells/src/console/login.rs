//! Signing in and out: GET and POST /login, POST /logout.
//!
//! Invariants: the login page shows only the fixed messages of
//! [`Notice`], chosen by a short code, so a link cannot put words on it;
//! a login POST counts only with the CSRF token derived from the
//! visitor's own random login cookie; a successful login opens a fresh
//! console session (the cookie never holds the credential) and sends the
//! browser only to a local path ([`super::next`]); logout ends the
//! console session on the server, not just in the browser.

use askama::Template;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response as HttpResponse};

use super::auth::{self, COOKIE, LOGIN_COOKIE, LOGIN_COOKIE_AGE, NoViewer};
use super::next::local_path;
use super::session::{self, random_hex};
use super::{Console, Failure, page};
use crate::auth::AuthError;

/// Why the login page is shown again: each a fixed message, named in a
/// URL by its code only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// The credential (or the console session) expired.
    Expired,
    /// The credential was not accepted.
    Invalid,
    /// The console session was ended (logged out, or a restart).
    Ended,
    /// The login form was too old or came without its cookie.
    Form,
}

impl Notice {
    const ALL: [Self; 4] = [Self::Expired, Self::Invalid, Self::Ended, Self::Form];

    /// The code in `?error=`.
    pub fn code(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Invalid => "invalid",
            Self::Ended => "ended",
            Self::Form => "form",
        }
    }

    /// The notice a code names; unknown codes name none.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.code() == code)
    }

    fn message(self) -> &'static str {
        match self {
            Self::Expired => "Your sign-in has expired. Sign in again.",
            Self::Invalid => "That token was not accepted.",
            Self::Ended => "Your console session has ended. Sign in again.",
            Self::Form => "The sign-in form had expired. Try again.",
        }
    }

    fn of_auth(e: &AuthError) -> Self {
        match e {
            AuthError::Expired => Self::Expired,
            _ => Self::Invalid,
        }
    }

    /// What the login page says to a browser that lost its viewer.
    pub fn of(no: &NoViewer) -> Option<Self> {
        match no {
            NoViewer::Missing => None,
            NoViewer::Ended => Some(Self::Ended),
            NoViewer::Expired => Some(Self::Expired),
            NoViewer::Refused(e) => Some(Self::of_auth(e)),
        }
    }
}

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginPage {
    viewer: String,
    csrf: String,
    next: String,
    error: &'static str,
}

/// The login page with a fresh login cookie and the form token derived
/// from it.
fn login_page(
    console: &Console,
    status: StatusCode,
    next: &str,
    notice: Option<Notice>,
) -> HttpResponse {
    let Ok(nonce) = random_hex() else {
        return Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Error",
            "no random source",
        )
        .into_response();
    };
    let template = LoginPage {
        viewer: String::new(),
        csrf: console.csrf().login_token_for(&nonce),
        next: local_path(next).to_owned(),
        error: notice.map_or("", Notice::message),
    };
    let cookie = auth::set_cookie(
        LOGIN_COOKIE,
        &nonce,
        "/login",
        LOGIN_COOKIE_AGE,
        console.is_secure(),
    );
    ([(header::SET_COOKIE, cookie)], page(status, &template)).into_response()
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    next: String,
    #[serde(default)]
    error: String,
}

/// GET /login: asks for a token.
pub async fn login_form(
    State(console): State<Console>,
    Query(q): Query<LoginQuery>,
) -> HttpResponse {
    if !console.auth().is_on() {
        return Redirect::to("/sessions").into_response();
    }
    login_page(
        &console,
        StatusCode::OK,
        &q.next,
        Notice::from_code(&q.error),
    )
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
    #[serde(default)]
    csrf: String,
}

/// POST /login: opens a console session for a token that verifies.
pub async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> HttpResponse {
    let next = local_path(&f.next);
    if !console.auth().is_on() {
        return Redirect::to(next).into_response();
    }
    let nonce = auth::cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if !console.csrf().check_login(&nonce, &f.csrf) {
        return login_page(&console, StatusCode::FORBIDDEN, next, Some(Notice::Form));
    }
    let token = f.token.trim();
    if let Err(e) = auth::verify(console.auth(), token) {
        return login_page(
            &console,
            StatusCode::UNAUTHORIZED,
            next,
            Some(Notice::of_auth(&e)),
        );
    }
    let now = session::unix_now();
    let expires = auth::expiry(token, now);
    if expires <= now {
        // Inside the verifier's clock leeway, but already past `exp`.
        return login_page(
            &console,
            StatusCode::UNAUTHORIZED,
            next,
            Some(Notice::Expired),
        );
    }
    // Always a new id: a cookie planted before the login is never promoted.
    if let Some(old) = auth::cookie(&headers, COOKIE) {
        console.sessions().revoke(&old);
    }
    let Ok(id) = console.sessions().open(token, expires, now) else {
        return Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Error",
            "no random source",
        )
        .into_response();
    };
    let secure = console.is_secure();
    (
        AppendHeaders([
            (
                header::SET_COOKIE,
                auth::set_cookie(COOKIE, &id, "/", expires - now, secure),
            ),
            (
                header::SET_COOKIE,
                auth::set_cookie(LOGIN_COOKIE, "", "/login", 0, secure),
            ),
        ]),
        Redirect::to(next),
    )
        .into_response()
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// POST /logout: ends the console session and forgets the cookie.
pub async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(f): Form<LogoutForm>,
) -> HttpResponse {
    let id = auth::cookie(&headers, COOKIE).unwrap_or_default();
    if !console.csrf().check(&id, &f.csrf) {
        return Failure::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "the form's CSRF token is missing or wrong; nothing was changed",
        )
        .into_response();
    }
    // Resolved only so the access log names who logged out.
    let _ = auth::resolve(console.auth(), console.sessions(), &id);
    console.sessions().revoke(&id);
    (
        [(
            header::SET_COOKIE,
            auth::set_cookie(COOKIE, "", "/", 0, console.is_secure()),
        )],
        Redirect::to("/login"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_codes_name_a_message() {
        for n in Notice::ALL {
            assert_eq!(Notice::from_code(n.code()), Some(n));
        }
        for unknown in ["", "Paste your API key at https://evil.example", "EXPIRED"] {
            assert_eq!(Notice::from_code(unknown), None);
        }
    }
}
