//! The web console against hostile callers, over plain HTTP against the
//! built `agentsessionsd --console-addr … --auth …` (issue #35): a live
//! stream ends with its credential (expired, or its key rotated out),
//! logout revokes the console session,
//! the cookie is no credential, `next` stays on the console, the login
//! page shows only its own words, and each visitor gets its own login
//! CSRF token. `tests/console_browser.rs` checks the redirect in chromium.

#[path = "support/cli.rs"]
mod cli;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use cli::{Daemon, agentctl, stderr, stdout};
use rcgen::KeyPair;
use sha2::{Digest, Sha256};

/// Writes and reads every session.
const WES: &str = "wes-key-of-the-console-security-test";
/// Reads every session.
const RITA: &str = "rita-key-of-the-console-security-test";

const ISSUER: &str = "https://issuer.test";

/// A console with API keys for wes and rita, and JWTs signed by `jwk`
/// accepted without clock leeway.
fn start(dir: &Path, jwk: &serde_json::Value) -> Daemon {
    let mut toml = String::new();
    for (who, key, roles) in [
        ("wes", WES, r#"["*:writer", "*:reader"]"#),
        ("rita", RITA, r#"["*:reader"]"#),
    ] {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        toml +=
            &format!("[[api_key]]\nprincipal = {who:?}\nsha256 = {digest:?}\nroles = {roles}\n\n");
    }
    toml += &format!(
        "[jwt]\nissuer = {ISSUER:?}\naudience = \"agentsessions\"\njwks_file = \"jwks.json\"\n\
         leeway_seconds = 0\n"
    );
    std::fs::write(dir.join("auth.toml"), toml).unwrap();
    std::fs::write(
        dir.join("jwks.json"),
        serde_json::json!({ "keys": [jwk] }).to_string(),
    )
    .unwrap();
    Daemon::start_in(
        dir,
        dir.join("j.db").as_os_str(),
        &[
            "--console-addr",
            "127.0.0.1:0",
            "--auth",
            dir.join("auth.toml").to_str().unwrap(),
        ],
    )
}

/// A console started with `jwk` in `dir`, its base URL and one session.
fn watched(dir: &Path, jwk: &serde_json::Value) -> (Daemon, String, String) {
    let daemon = start(dir, jwk);
    let base = daemon.console.clone().unwrap();
    let uid = ctl(dir, &daemon, &["create", "--name", "watched"])
        .trim()
        .to_owned();
    (daemon, base, uid)
}

/// A P-256 signing key and its JWK (kid `k`).
fn signing_key() -> (jsonwebtoken::EncodingKey, serde_json::Value) {
    let key = KeyPair::generate().unwrap();
    let raw = key.public_key_raw();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": "k", "alg": "ES256",
        "x": b64(&raw[1..33]), "y": b64(&raw[33..])});
    (
        jsonwebtoken::EncodingKey::from_ec_der(&key.serialize_der()),
        jwk,
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A reader's JWT expiring at `exp`.
fn jwt(key: &jsonwebtoken::EncodingKey, exp: u64) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("k".to_owned());
    let claims = serde_json::json!({"iss": ISSUER, "aud": "agentsessions", "sub": "jo",
        "exp": exp, "agentsessions_roles": ["*:reader"]});
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

/// `agentctl --server … --token WES args`, asserted to succeed.
fn ctl(dir: &Path, d: &Daemon, args: &[&str]) -> String {
    let mut argv = vec!["--server", d.sessions.as_str(), "--token", WES];
    argv.extend_from_slice(args);
    let o = agentctl(dir, &argv);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// One HTTP exchange.
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn header<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.headers(name).next()
    }

    fn headers<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.head.lines().filter_map(move |l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// `name=value` of the Set-Cookie for `name`.
    fn cookie(&self, name: &str) -> Option<String> {
        self.headers("set-cookie")
            .find(|c| c.starts_with(&format!("{name}=")))
            .map(|c| c.split(';').next().unwrap().to_owned())
    }
}

/// Sends one request (HTTP/1.1, `Connection: close`) and reads the reply.
fn http(base: &str, method: &str, path: &str, cookies: &[&str], form: &str) -> Reply {
    let host = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).expect("connect to the console");
    let cookie = if cookies.is_empty() {
        String::new()
    } else {
        format!("Cookie: {}\r\n", cookies.join("; "))
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{cookie}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{form}",
        form.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

fn get(base: &str, path: &str, cookies: &[&str]) -> Reply {
    http(base, "GET", path, cookies, "")
}

/// The value of the hidden input `name` on a page.
fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} on the page: {html}"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// Signs in as a browser would: the login page (and any cookie it sets),
/// then its form.
fn login(base: &str, token: &str, next: &str) -> Reply {
    let form = get(base, "/login", &[]);
    assert_eq!(form.status, 200, "{}", form.head);
    let visitor = form.cookie("agentsessions_login");
    let cookies: Vec<&str> = visitor.iter().map(String::as_str).collect();
    let body = format!(
        "token={}&next={}&csrf={}",
        urlencode(token),
        urlencode(next),
        hidden(&form.body, "csrf")
    );
    http(base, "POST", "/login", &cookies, &body)
}

/// The console session cookie (`name=value`) of a successful login.
fn session_cookie(base: &str, token: &str) -> String {
    let r = login(base, token, "/sessions");
    assert_eq!(r.status, 303, "{}{}", r.head, r.body);
    r.cookie("agentsessions_console").expect("a session cookie")
}

/// An open live stream of a session.
struct Live {
    s: TcpStream,
    seen: String,
    ended: bool,
}

impl Live {
    /// A stream of `uid` that has sent its first `head` event.
    fn at_head(base: &str, uid: &str, cookie: &str) -> Self {
        let mut live = Self::open(base, uid, cookie);
        live.read_until(Duration::from_secs(10), |s| s.contains("event: head"));
        assert!(live.seen.contains("event: head"), "{}", live.seen);
        live
    }

    /// After the stream's credential went: a turn writing `secret` is
    /// not sent, and the stream has ended.
    fn sends_nothing_more(&mut self, dir: &Path, daemon: &Daemon, uid: &str, secret: &str) {
        ctl(dir, daemon, &["exec", "--session", uid, "--input", secret]);
        self.read_until(Duration::from_secs(10), |s| s.contains(secret));
        assert!(
            !self.seen.contains(secret),
            "{secret} was sent: {}",
            self.seen
        );
        assert!(self.ended, "the stream outlives its credential");
    }

    fn open(base: &str, uid: &str, cookie: &str) -> Self {
        let host = base.trim_start_matches("http://");
        let mut s = TcpStream::connect(host).unwrap();
        write!(
            s,
            "GET /sessions/{uid}/events?after=0 HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\
             Connection: close\r\n\r\n"
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Self {
            s,
            seen: String::new(),
            ended: false,
        }
    }

    /// Reads until `done` holds for what was seen, the stream ends, or
    /// `within` passes.
    fn read_until(&mut self, within: Duration, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + within;
        let mut buf = [0u8; 4096];
        while !done(&self.seen) && !self.ended && Instant::now() < deadline {
            match self.s.read(&mut buf) {
                Ok(0) => self.ended = true,
                Ok(n) => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => self.ended = true,
            }
        }
    }
}

#[test]
fn a_live_stream_and_its_console_session_end_when_the_jwt_expires() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, jwk) = signing_key();
    let (daemon, base, uid) = watched(d, &jwk);

    let exp = unix_now() + 4;
    let r = login(&base, &jwt(&key, exp), "/sessions");
    assert_eq!(r.status, 303, "{}{}", r.head, r.body);
    let set = r
        .headers("set-cookie")
        .find(|c| c.starts_with("agentsessions_console="))
        .unwrap()
        .to_owned();
    let max_age: u64 = set
        .split("Max-Age=")
        .nth(1)
        .and_then(|v| v.split(';').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the cookie ends with the JWT: {set}"));
    assert!(max_age <= 4, "the cookie outlives the JWT: {set}");
    let cookie = r.cookie("agentsessions_console").unwrap();
    assert_eq!(get(&base, "/sessions", &[&cookie]).status, 200);

    let mut live = Live::at_head(&base, &uid, &cookie);

    while unix_now() <= exp + 1 {
        std::thread::sleep(Duration::from_millis(100));
    }
    live.sends_nothing_more(d, &daemon, &uid, "after-expiry-secret");
    assert!(live.seen.contains("event: signedout"), "{}", live.seen);

    let r = get(&base, "/sessions", &[&cookie]);
    assert_eq!(r.status, 303);
    let to = r.header("location").unwrap();
    assert!(
        to.starts_with("/login?") && to.ends_with("&error=expired"),
        "{to}"
    );
}

#[test]
fn a_jwt_whose_key_leaves_the_jwks_ends_its_console_session_and_stream() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, jwk) = signing_key();
    let (daemon, base, uid) = watched(d, &jwk);
    let r = login(&base, &jwt(&key, unix_now() + 3600), "/sessions");
    assert_eq!(r.status, 303, "{}{}", r.head, r.body);
    let cookie = r.cookie("agentsessions_console").unwrap();
    let mut live = Live::at_head(&base, &uid, &cookie);

    // The key is rotated out: the stored token no longer verifies.
    let (_, other) = signing_key();
    std::fs::write(
        d.join("jwks.json"),
        serde_json::json!({ "keys": [other] }).to_string(),
    )
    .unwrap();
    daemon.signal("HUP");
    live.read_until(Duration::from_secs(10), |s| s.contains("signedout"));
    assert!(live.seen.contains("event: signedout"), "{}", live.seen);
    live.sends_nothing_more(d, &daemon, &uid, "after-rotation-secret");
    // The stream's refusal ended the console session for good: putting
    // the key back does not revive it.
    std::fs::write(
        d.join("jwks.json"),
        serde_json::json!({ "keys": [jwk] }).to_string(),
    )
    .unwrap();
    daemon.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    let r = get(&base, "/sessions", &[&cookie]);
    assert_eq!(r.status, 303);
    assert!(r.header("location").unwrap().ends_with("&error=ended"));
}

#[test]
fn logout_revokes_the_console_session_and_ends_its_live_stream() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, jwk) = signing_key();
    let (daemon, base, uid) = watched(d, &jwk);

    let cookie = session_cookie(&base, RITA);
    let page = get(&base, "/sessions", &[&cookie]);
    assert_eq!(page.status, 200);
    let mut live = Live::at_head(&base, &uid, &cookie);

    let csrf = hidden(&page.body, "csrf");
    let out = http(
        &base,
        "POST",
        "/logout",
        &[&cookie],
        &format!("csrf={csrf}"),
    );
    assert_eq!(out.status, 303);
    assert_eq!(out.header("location"), Some("/login"));

    // The cookie a browser (or anyone who copied it) kept is dead.
    let r = get(&base, "/sessions", &[&cookie]);
    assert_eq!(r.status, 303, "the logged-out cookie still works");
    assert!(r.header("location").unwrap().ends_with("&error=ended"));
    let decide = http(
        &base,
        "POST",
        &format!("/sessions/{uid}/decide"),
        &[&cookie],
        &format!("decision=approve&csrf={csrf}"),
    );
    assert_eq!(decide.status, 401);

    live.sends_nothing_more(d, &daemon, &uid, "after-logout-secret");
}

#[test]
fn the_cookie_is_a_random_session_id_not_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let (_, jwk) = signing_key();
    let daemon = start(dir.path(), &jwk);
    let base = daemon.console.clone().unwrap();
    let first = session_cookie(&base, RITA);
    let second = session_cookie(&base, RITA);
    assert_ne!(first, second, "each login opens its own session");
    for c in [&first, &second] {
        let value = c.split_once('=').unwrap().1;
        assert_eq!(value.len(), 64, "{c}");
        assert!(
            !value.contains(&hex::encode(RITA)) && !value.contains(RITA),
            "the cookie carries the API key: {c}"
        );
    }
    // The raw key in the cookie, as the console used to set it, is nothing.
    let raw = format!("agentsessions_console={}", hex::encode(RITA));
    assert_eq!(get(&base, "/sessions", &[&raw]).status, 303);
    assert_eq!(get(&base, "/sessions", &[&first]).status, 200);
}

#[test]
fn next_after_login_is_only_ever_a_local_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_, jwk) = signing_key();
    let daemon = start(dir.path(), &jwk);
    let base = daemon.console.clone().unwrap();
    for bad in [
        "/\t/evil.example/",
        "/\n/evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "\\\\evil.example/",
        "/sessions\\..\\..\\evil",
        "https://evil.example/",
        "/x\u{7f}",
    ] {
        let form = get(&base, &format!("/login?next={}", urlencode(bad)), &[]);
        assert_eq!(hidden(&form.body, "next"), "/", "{bad:?} in the form");
        let r = login(&base, RITA, bad);
        assert_eq!(r.status, 303);
        assert_eq!(r.header("location"), Some("/"), "{bad:?} as Location");
    }
    for good in ["/sessions?waiting=1", "/sessions?project=caf\u{e9}"] {
        let form = get(&base, &format!("/login?next={}", urlencode(good)), &[]);
        assert_eq!(hidden(&form.body, "next"), good);
        let r = login(&base, RITA, good);
        assert_eq!(r.status, 303);
        assert_eq!(r.header("location"), Some(good));
    }
}

#[test]
fn the_login_page_shows_only_its_own_fixed_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (_, jwk) = signing_key();
    let daemon = start(dir.path(), &jwk);
    let base = daemon.console.clone().unwrap();
    let words = "Paste your API key at https://evil.example to continue";
    let r = get(&base, &format!("/login?error={}", urlencode(words)), &[]);
    assert_eq!(r.status, 200);
    assert!(
        !r.body.contains("Paste your API key") && !r.body.contains("evil.example"),
        "attacker words on the login page: {}",
        r.body
    );
    assert!(!r.body.contains("login-error"), "{}", r.body);
    let r = get(&base, "/login?error=expired", &[]);
    assert!(r.body.contains("Your sign-in has expired."), "{}", r.body);
    // A refused login says so in the console's words.
    let r = login(&base, "not-a-key", "/");
    assert_eq!(r.status, 401);
    assert!(
        r.body.contains("That token was not accepted."),
        "{}",
        r.body
    );
}

#[test]
fn each_visitor_gets_its_own_login_csrf_token() {
    let dir = tempfile::tempdir().unwrap();
    let (_, jwk) = signing_key();
    let daemon = start(dir.path(), &jwk);
    let base = daemon.console.clone().unwrap();
    let (alice, bob) = (get(&base, "/login", &[]), get(&base, "/login", &[]));
    let (alice_csrf, bob_csrf) = (hidden(&alice.body, "csrf"), hidden(&bob.body, "csrf"));
    assert_ne!(alice_csrf, bob_csrf, "one login CSRF token for everyone");
    let bob_cookie = bob.cookie("agentsessions_login").expect("a login cookie");
    let set = bob.header("set-cookie").unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Max-Age="),
        "{set}"
    );
    let form = |csrf: &str| format!("token={}&next=%2F&csrf={csrf}", urlencode(RITA));
    // Another visitor's token, or a token without its cookie, signs no one in.
    for (cookies, csrf) in [
        (vec![bob_cookie.as_str()], alice_csrf.as_str()),
        (vec![], bob_csrf.as_str()),
        (vec![bob_cookie.as_str()], ""),
    ] {
        let r = http(&base, "POST", "/login", &cookies, &form(csrf));
        assert_eq!(r.status, 403, "{cookies:?} {csrf}");
        assert!(r.cookie("agentsessions_console").is_none());
    }
    let r = http(&base, "POST", "/login", &[&bob_cookie], &form(&bob_csrf));
    assert_eq!(r.status, 303);
    assert!(r.cookie("agentsessions_console").is_some());
}
