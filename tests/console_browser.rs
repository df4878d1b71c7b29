//! The web console in a real browser: Debian's chromium, driven through
//! chromedriver (WebDriver) against the built `agentsessionsd
//! --console-addr … --auth …`. Sessions are made and checked over gRPC
//! (the built `agentctl --token`); everything in between is clicks,
//! starting with a crafted `next` that must not send the browser off the
//! console after login.
//!
//! Screenshots of the three main pages (the filtered list, a session
//! with its pending approval, the receipt after a denial) are written to
//! `target/console-screenshots/`; `docs/console.md` shows copies.
//!
//! Without chromium and chromedriver the test prints SKIPPED; with
//! `CI=true` it fails instead (`.ci/run` installs both).

#[path = "support/cli.rs"]
mod cli;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cli::{Daemon, agentctl, stderr, stdout};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

/// An approver who may also resume (what `agentctl approve` needs), and
/// reads every project (so an unknown session is NOT_FOUND rather than
/// the PERMISSION_DENIED that hides which sessions exist elsewhere).
const ANA: &str = "ana-key-0123456789abcdef";
/// A reader of every project.
const RITA: &str = "rita-key-0123456789abcdef";

const WAIT: Duration = Duration::from_secs(20);

fn auth_toml() -> String {
    let mut s = String::new();
    for (principal, key, roles) in [
        (
            "ana",
            ANA,
            r#"["default:writer", "default:approver", "*:reader"]"#,
        ),
        ("rita", RITA, r#"["*:reader"]"#),
    ] {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        s += &format!(
            "[[api_key]]\nprincipal = {principal:?}\nsha256 = {digest:?}\nroles = {roles}\n\n"
        );
    }
    s
}

/// The chromium and chromedriver binaries, if installed.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| {
        names.iter().find_map(|n| {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {n}")])
                .output()
                .ok()?;
            let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
        })
    };
    Some((
        find(&["chromium", "chromium-browser"])?,
        find(&["chromedriver"])?,
    ))
}

/// chromedriver on a loopback port it picks itself (`--port=0`; one picked
/// here and released could be taken by another process first), in a
/// process group of its own with the chromium it starts; the group is
/// killed when dropped, so a failed test leaves no browser behind.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start(bin: &Path) -> Self {
        let mut child = Command::new(bin)
            .process_group(0)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        // The port it got, from its own stdout ("ChromeDriver was started
        // successfully on port N."); it keeps being read so the driver
        // never writes into a closed pipe.
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let port = line
                    .strip_prefix("ChromeDriver was started successfully on port ")
                    .and_then(|p| p.trim_end_matches('.').parse::<u16>().ok());
                if let Some(port) = port {
                    let _ = tx.send(port);
                }
            }
        });
        let port = rx
            .recv_timeout(WAIT)
            .expect("chromedriver reports the port it listens on");
        assert_ne!(port, 0, "chromedriver reported port 0");
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn open_browser(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium.display().to_string(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,960",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("open a chromium session")
}

/// `agentctl --server … --token … args`, asserted to succeed.
fn ctl(dir: &Path, server: &str, token: &str, args: &[&str]) -> String {
    let mut argv = vec!["--server", server, "--token", token];
    argv.extend_from_slice(args);
    let o = agentctl(dir, &argv);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

fn get_json(dir: &Path, server: &str, uid: &str) -> Json {
    let out = ctl(dir, server, ANA, &["--json", "get", "--session", uid]);
    serde_json::from_str(out.trim()).expect("get --json")
}

/// An approval session parked on its gated call, named `name`.
fn parked(dir: &Path, server: &str, name: &str, input: &str) -> String {
    let uid = ctl(
        dir,
        server,
        ANA,
        &["create", "--harness", "approval", "--name", name],
    )
    .trim()
    .to_owned();
    let out = ctl(
        dir,
        server,
        ANA,
        &["exec", "--session", &uid, "--input", input],
    );
    assert!(out.contains("pending_approval"), "{out}");
    uid
}

/// A hand-made request (no browser) with `cookie` (`name=value`): the
/// status code and the whole reply.
fn raw(base: &str, method: &str, path: &str, cookie: Option<&str>, body: &str) -> (u16, String) {
    let host = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).expect("connect to the console");
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         {cookie}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write the request");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read the reply");
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, reply)
}

/// A hand-made POST: the status code and the whole reply.
fn raw_post(base: &str, path: &str, cookie: Option<&str>, body: &str) -> (u16, String) {
    raw(base, "POST", path, cookie, body)
}

/// The `name=value` of the Set-Cookie for `name` in a reply.
fn set_cookie(reply: &str, name: &str) -> Option<String> {
    reply
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(h, _)| h.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.trim())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or_default().to_owned())
}

/// Signs `token` in without a browser; the console session cookie.
fn raw_login(base: &str, token: &str) -> String {
    let (status, form) = raw(base, "GET", "/login", None, "");
    assert_eq!(status, 200, "{form}");
    let visitor = set_cookie(&form, "agentsessions_login").expect("a login cookie");
    let field = "name=\"csrf\" value=\"";
    let at = form.find(field).expect("a csrf field") + field.len();
    let csrf = &form[at..at + form[at..].find('"').unwrap()];
    let (status, reply) = raw_post(
        base,
        "/login",
        Some(&visitor),
        &format!("token={token}&next=%2F&csrf={csrf}"),
    );
    assert_eq!(status, 303, "{reply}");
    set_cookie(&reply, "agentsessions_console").expect("a session cookie")
}

async fn wait_css(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
}

async fn text(c: &Client, css: &str) -> String {
    wait_css(c, css).await.text().await.expect("text")
}

async fn absent(c: &Client, css: &str) -> bool {
    c.find_all(Locator::Css(css))
        .await
        .expect("find_all")
        .is_empty()
}

async fn screenshot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(name), png).expect("write screenshot");
}

async fn log_in(c: &Client, token: &str) {
    wait_css(c, "#token")
        .await
        .send_keys(token)
        .await
        .expect("type");
    wait_css(c, "#sign-in")
        .await
        .click()
        .await
        .expect("sign in");
}

/// The records of a session over gRPC (`agentctl replay --json`).
fn records(dir: &Path, server: &str, uid: &str) -> Vec<Json> {
    ctl(dir, server, ANA, &["--json", "replay", "--session", uid])
        .lines()
        .map(|l| serde_json::from_str(l).expect("record json"))
        .collect()
}

/// Where the test's daemon is.
struct World {
    dir: PathBuf,
    server: String,
    base: String,
}

/// The value of the login form's `next` field.
async fn form_next(c: &Client) -> Json {
    c.execute(
        "return document.querySelector('#login input[name=next]').value;",
        vec![],
    )
    .await
    .unwrap()
}

/// Logs in and waits for the browser to leave the login page; where it
/// landed.
async fn log_in_and_land(c: &Client, token: &str) -> String {
    log_in(c, token).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let url = c.current_url().await.unwrap().to_string();
        if !url.contains("/login") {
            return url;
        }
        assert!(
            Instant::now() < deadline,
            "the login did not land on a console page (at {url})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A crafted `next` (a link to the login page, or a form posting one)
/// cannot send the browser off the console after login.
async fn next_stays_on_the_console(c: &Client, w: &World) {
    let base = &w.base;
    let home = format!("{base}/");
    // The link: `/\t/evil.example/` is `//evil.example/` to a browser.
    c.goto(&format!("{base}/login?next=/%09/evil.example/"))
        .await
        .unwrap();
    wait_css(c, "#login").await;
    assert_eq!(
        form_next(c).await,
        json!("/"),
        "the form kept a crafted next"
    );
    let landed = log_in_and_land(c, ANA).await;
    assert!(
        landed.starts_with(&home),
        "sent off the console to {landed}"
    );
    c.delete_all_cookies().await.unwrap();

    // The form itself posting crafted values.
    for crafted in ["/\t/evil.example/", "/\\evil.example/", "//evil.example/"] {
        c.goto(&format!("{base}/login")).await.unwrap();
        wait_css(c, "#login").await;
        c.execute(
            "document.querySelector('#login input[name=next]').value = arguments[0];",
            vec![json!(crafted)],
        )
        .await
        .unwrap();
        let landed = log_in_and_land(c, ANA).await;
        assert!(
            landed.starts_with(&home),
            "{crafted:?} sent the browser to {landed}"
        );
        c.delete_all_cookies().await.unwrap();
    }
}

/// Logs in, checks the list is newest first, filters to the waiting
/// approvals.
async fn list_and_filter(c: &Client, w: &World, newest_first: &[String]) {
    let base = &w.base;
    // The console asks for a token once.
    c.goto(&format!("{base}/sessions")).await.unwrap();
    wait_css(c, "#login").await;
    assert!(absent(c, "#sessions").await);
    log_in(c, ANA).await;
    wait_css(c, "#sessions").await;
    assert_eq!(text(c, "#viewer").await, "ana");
    let order: Vec<String> = {
        let mut uids = Vec::new();
        for row in c.find_all(Locator::Css("tr.session")).await.unwrap() {
            uids.push(row.attr("data-uid").await.unwrap().unwrap_or_default());
        }
        uids
    };
    assert_eq!(order, newest_first, "newest first");

    // Filter to the sessions waiting for approval.
    wait_css(c, "#waiting").await.click().await.unwrap();
    wait_css(c, "#apply").await.click().await.unwrap();
    wait_css(c, "input#waiting[checked]").await;
    let waiting = c.find_all(Locator::Css("tr.session")).await.unwrap();
    assert_eq!(waiting.len(), 3, "the three parked approval sessions");
    for row in &waiting {
        assert!(
            row.attr("class")
                .await
                .unwrap()
                .unwrap()
                .contains("waiting")
        );
    }
    screenshot(c, "sessions.png").await;
}

/// Opens the probe session, reads its call, denies it, checks the
/// journal over gRPC.
async fn read_and_deny(c: &Client, w: &World, probe: &str, probe_input: &str) {
    let (d, server) = (w.dir.as_path(), &w.server);
    // Open one and read the call's arguments.
    wait_css(c, &format!("tr[data-uid='{probe}'] a.uid"))
        .await
        .click()
        .await
        .unwrap();
    wait_css(c, "#pending").await;
    assert_eq!(text(c, "#pending-tool").await, "append_note");
    let args = text(c, "#pending-args").await;
    assert!(
        args.contains(r#""text": "<script>window.__xss=1</script>"#),
        "{args}"
    );
    assert!(
        text(c, "#verify")
            .await
            .contains("chain verified (5 records)")
    );

    // The XSS probe in the message is text: nothing ran, no element made.
    let probe_state = c
        .execute(
            "return [typeof window.__xss, document.querySelectorAll('main img, main script').length, \
             document.querySelector('#seq-2 .summary').textContent];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(probe_state[0], json!("undefined"), "the probe ran");
    assert_eq!(probe_state[1], json!(0), "the probe made elements");
    assert_eq!(probe_state[2], json!(format!("user: {probe_input}")));
    screenshot(c, "session.png").await;

    // Deny with a reason; the receipt follows.
    wait_css(c, "#reason")
        .await
        .send_keys("too risky")
        .await
        .unwrap();
    wait_css(c, "#deny").await.click().await.unwrap();
    let receipt = text(c, "#receipt").await;
    assert!(receipt.contains("APPROVAL_RESULT"), "{receipt}");
    assert!(
        receipt.contains("call c1 denied (request seq 4): too risky"),
        "{receipt}"
    );
    assert!(receipt.contains("ana (api-key)"), "attributed: {receipt}");
    assert!(receipt.contains("TOOL_RESULT"), "{receipt}");
    assert!(absent(c, "#pending").await);
    screenshot(c, "receipt.png").await;

    // The journal over gRPC: the decision, attributed to the principal
    // the cookie verified, then the receipt of the resumed turn.
    let recs = records(d, server, probe);
    let decision = recs
        .iter()
        .find(|r| r["event"]["kind"] == "EVENT_APPROVAL_RESULT")
        .expect("an APPROVAL_RESULT");
    let body = &decision["event"]["approval_result"];
    assert_eq!(body["reason"], "too risky");
    assert_ne!(body["approved"], json!(true));
    assert_eq!(decision["event"]["actor"]["principal"], "ana");
    assert_eq!(decision["event"]["actor"]["issuer"], "api-key");
    assert!(
        recs.iter()
            .any(|r| r["event"]["kind"] == "EVENT_TOOL_RESULT")
    );
    assert!(get_json(d, server, probe).get("pending_approval").is_none());
}

/// A decision that lost to one made elsewhere while the page was open.
async fn stale_decision(c: &Client, w: &World, raced: &str) {
    let (d, server, base) = (w.dir.as_path(), &w.server, &w.base);
    // A stale approval: decided elsewhere while the page was open.
    c.goto(&format!("{base}/sessions/{raced}")).await.unwrap();
    wait_css(c, "#approve").await;
    ctl(
        d,
        server,
        ANA,
        &[
            "deny",
            "--session",
            raced,
            "--pending",
            "--reason",
            "decided on the CLI",
        ],
    );
    // The open page learns of it (and offers a reload) but keeps its card.
    assert!(
        text(c, "#changed:not([hidden])")
            .await
            .contains("decided elsewhere")
    );
    wait_css(c, "#approve").await.click().await.unwrap();
    let stale = text(c, "#stale").await;
    assert!(stale.contains("decided elsewhere"), "{stale}");
    assert!(
        stale.contains("denied (request seq 4): decided on the CLI"),
        "{stale}"
    );
    let raced_records = records(d, server, raced);
    let decisions = raced_records
        .iter()
        .filter(|r| r["event"]["kind"] == "EVENT_APPROVAL_RESULT")
        .count();
    assert_eq!(decisions, 1, "the losing click committed nothing");
}

/// A turn run elsewhere appears on the open page; an unknown session is
/// a 404 page.
async fn live_turn_and_404(c: &Client, w: &World, live: &str) {
    let (d, server, base) = (w.dir.as_path(), &w.server, &w.base);
    // Live: a turn run elsewhere shows on the open page as it commits.
    c.goto(&format!("{base}/sessions/{live}")).await.unwrap();
    wait_css(c, "#timeline").await;
    let deadline = Instant::now() + WAIT;
    while text(c, "#live-status").await != "live" {
        assert!(Instant::now() < deadline, "the live stream did not open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.execute("window.__same_page = true;", vec![])
        .await
        .unwrap();
    ctl(
        d,
        server,
        ANA,
        &["exec", "--session", live, "--input", "streamed turn"],
    );
    let deadline = Instant::now() + WAIT;
    while !text(c, "#timeline").await.contains("echo:streamed turn") {
        assert!(Instant::now() < deadline, "the turn did not appear live");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let same = c
        .execute("return window.__same_page === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "shown without reloading the page");
    assert_eq!(text(c, "#exec-state").await, "COMPLETED");

    // Unknown session: a 404 page.
    c.goto(&format!("{base}/sessions/sess-000000000000000000000000"))
        .await
        .unwrap();
    let error = text(c, "#error").await;
    assert!(error.contains("404 · Not found"), "{error}");
}

/// Without a token the login page; a reader's page has no buttons.
/// Returns the reader's console session cookie and CSRF token (for the
/// forged POSTs).
async fn reader_without_buttons(c: &Client, w: &World, guarded: &str) -> (String, String) {
    let base = &w.base;
    // Without a token: the login page, no buttons.
    c.delete_all_cookies().await.unwrap();
    c.goto(&format!("{base}/sessions/{guarded}")).await.unwrap();
    wait_css(c, "#login").await;
    assert!(absent(c, "#approve").await && absent(c, "#deny").await);

    // A reader sees the card but no buttons.
    log_in(c, RITA).await;
    wait_css(c, "#pending").await;
    assert_eq!(text(c, "#viewer").await, "rita");
    assert!(absent(c, "#decide").await && absent(c, "#approve").await);
    assert!(text(c, "#no-decide").await.contains("not decide"));
    let rita_csrf = c
        .execute(
            "return document.querySelector('form.who input[name=csrf]').value;",
            vec![],
        )
        .await
        .unwrap();
    let rita_csrf = rita_csrf.as_str().unwrap().to_owned();
    screenshot(c, "reader.png").await;
    let cookie = c
        .get_named_cookie("agentsessions_console")
        .await
        .expect("rita's console session cookie");
    (format!("{}={}", cookie.name(), cookie.value()), rita_csrf)
}

/// Hand-made POSTs change nothing.
fn forged_posts(w: &World, guarded: &str, rita: &str, rita_csrf: &str) {
    let (d, server, base) = (w.dir.as_path(), &w.server, &w.base);
    // Hand-made POSTs change nothing: no session, the API key itself as
    // the cookie, no CSRF token, a wrong one, and a reader's own form
    // token (the machine refuses the role).
    let before = get_json(d, server, guarded);
    let path = format!("/sessions/{guarded}/decide");
    let form = "execution_id=x&tool_call_id=c1&request_seq=4&decision=approve&reason=forged";
    let (status, _) = raw_post(base, &path, None, form);
    assert_eq!(status, 401, "no token");
    let key_cookie = format!("agentsessions_console={}", hex::encode(ANA));
    let (status, _) = raw_post(base, &path, Some(&key_cookie), form);
    assert_eq!(status, 401, "the API key is no console session");
    let ana = raw_login(base, ANA);
    let (status, _) = raw_post(base, &path, Some(&ana), form);
    assert_eq!(status, 403, "no CSRF token");
    let (status, _) = raw_post(base, &path, Some(&ana), &format!("{form}&csrf={rita_csrf}"));
    assert_eq!(status, 403, "another cookie's CSRF token");
    let pending = &before["pending_approval"];
    let real = format!(
        "execution_id={}&tool_call_id=c1&request_seq=4&decision=approve&csrf={rita_csrf}",
        pending["execution_id"].as_str().unwrap()
    );
    let (status, reply) = raw_post(base, &path, Some(rita), &real);
    assert_eq!(status, 403, "a reader may not approve: {reply}");
    assert!(reply.contains("PermissionDenied"), "{reply}");
    let after = get_json(d, server, guarded);
    assert_eq!(after["last_seq"], before["last_seq"], "nothing committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_list_filter_read_and_decide_approvals_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but chromium/chromedriver are missing (.ci/run installs them)");
        }
        eprintln!(
            "SKIPPED console_browser: chromium and chromedriver are not installed \
             (apt-get install chromium chromium-driver)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("auth.toml"), auth_toml()).unwrap();
    let daemon = Daemon::start_in(
        d,
        d.join("j.db").as_os_str(),
        &[
            "--console-addr",
            "127.0.0.1:0",
            "--auth",
            d.join("auth.toml").to_str().unwrap(),
        ],
    );
    let server = daemon.sessions.clone();
    let base = daemon.console.clone().expect("console line");

    // Sessions, made over gRPC; the list shows them newest first.
    let plain = ctl(d, &server, ANA, &["create", "--name", "plain"])
        .trim()
        .to_owned();
    ctl(
        d,
        &server,
        ANA,
        &["exec", "--session", &plain, "--input", "hello"],
    );
    let probe_input =
        "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\"> remember milk";
    let probe = parked(d, &server, "probe", probe_input);
    let raced = parked(d, &server, "raced", "race me");
    let guarded = parked(d, &server, "guarded", "for the reader");
    let live = ctl(d, &server, ANA, &["create", "--name", "live"])
        .trim()
        .to_owned();

    let driver = Driver::start(&chromedriver);
    let c = open_browser(&driver, &chromium, &d.join("profile")).await;

    let w = World {
        dir: d.to_owned(),
        server: server.clone(),
        base: base.clone(),
    };
    let newest_first = [&live, &guarded, &raced, &probe, &plain].map(String::clone);
    next_stays_on_the_console(&c, &w).await;
    list_and_filter(&c, &w, &newest_first).await;
    read_and_deny(&c, &w, &probe, probe_input).await;
    stale_decision(&c, &w, &raced).await;
    live_turn_and_404(&c, &w, &live).await;
    let (rita, rita_csrf) = reader_without_buttons(&c, &w, &guarded).await;
    c.close().await.unwrap();
    forged_posts(&w, &guarded, &rita, &rita_csrf);
    drop(driver);
    drop(daemon);
}
