//! The web console over plain HTTP (no browser): escaping, 404s, CSRF,
//! timeline paging, the live stream and the login cookie, against an
//! in-process daemon. `tests/console_browser.rs` drives the same pages in
//! chromium.

#[path = "support/daemon.rs"]
mod support;
#[path = "support/web.rs"]
mod web;

use std::sync::Arc;
use std::time::Duration;

use agentsessions_proto::v1::{ExecRequest, GetSessionRequest};
use agentsessions_shells::auth::{AuthFile, Authenticator};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig, StartError};
use sha2::{Digest, Sha256};
use support::{authed, client, create, exec_code, replay, text};
use web::{first_cookie, hidden};

fn config(dir: &std::path::Path) -> DaemonConfig {
    let mut c = support::config(dir);
    c.console_addr = Some("127.0.0.1:0".parse().unwrap());
    c
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn base(d: &Daemon) -> String {
    format!("http://{}", d.console_addr.unwrap())
}

async fn page(url: &str) -> (u16, String) {
    let r = http().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn post(url: &str, cookie: Option<&str>, form: &str) -> reqwest::Response {
    let mut b = http()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_owned());
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    b.send().await.unwrap()
}

/// The login page at `url`: its visitor cookie (`name=value`) and HTML.
async fn login_form(url: &str) -> (String, String) {
    let r = http().get(url).send().await.unwrap();
    (first_cookie(&r), r.text().await.unwrap())
}

async fn exec(d: &Daemon, uid: &str, input: &str) {
    let mut c = client(d).await;
    let code = exec_code(
        &mut c,
        ExecRequest {
            session: uid.into(),
            inputs: vec![text(input)],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code, tonic::Code::Ok);
}

#[tokio::test]
async fn a_console_off_loopback_needs_the_insecure_flag() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.console_addr = Some("0.0.0.0:0".parse().unwrap());
    match Daemon::start(c).await {
        Err(StartError::Config(e)) => assert!(e.contains("--console-addr"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a plaintext console off loopback started"),
    }
}

#[tokio::test]
async fn journal_content_is_escaped_and_an_unknown_session_is_a_404_page() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let uid = create(&mut client(&d).await, "echo").await;
    exec(&d, &uid, "<script>alert(1)</script>").await;
    let (status, html) = page(&format!("{}/sessions/{uid}", base(&d))).await;
    assert_eq!(status, 200);
    assert!(html.contains("user: &#60;script&#62;alert(1)&#60;/script&#62;"));
    assert!(!html.contains("<script>alert"), "markup from the journal");
    assert!(html.contains("chain verified (5 records)"));
    let (status, html) = page(&format!("{}/sessions/sess-nope", base(&d))).await;
    assert_eq!(status, 404);
    assert!(html.contains("404 · Not found"), "{html}");
    let (status, _) = page(&format!("{}/no/such/page", base(&d))).await;
    assert_eq!(status, 404);
    d.shutdown().await;
}

#[tokio::test]
async fn a_decision_needs_the_csrf_token_then_commits_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = client(&d).await;
    let uid = create(&mut c, "approval").await;
    exec(&d, &uid, "remember milk").await;
    let url = format!("{}/sessions/{uid}", base(&d));
    let (_, html) = page(&url).await;
    let execution = hidden(&html, "execution_id");
    let form = format!(
        "execution_id={execution}&tool_call_id=c1&request_seq=4&decision=approve&reason=ok"
    );
    let before = c
        .get_session(GetSessionRequest { uid: uid.clone() })
        .await
        .unwrap()
        .into_inner();
    for forged in [
        form.clone(),
        format!("{form}&csrf=00"),
        format!("{form}&csrf="),
    ] {
        let r = post(&format!("{url}/decide"), None, &forged).await;
        assert_eq!(r.status(), 403, "{forged}");
        assert!(r.text().await.unwrap().contains("nothing was changed"));
    }
    let after = c
        .get_session(GetSessionRequest { uid: uid.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.last_seq, before.last_seq);
    assert!(after.pending_approval.is_some());

    let csrf = hidden(&html, "csrf");
    let r = post(
        &format!("{url}/decide"),
        None,
        &format!("{form}&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        to.starts_with(&format!("/sessions/{uid}?receipt=6")),
        "{to}"
    );
    let kinds: Vec<i32> = replay(&mut c, &uid)
        .await
        .iter()
        .map(|r| r.event.as_ref().unwrap().kind)
        .collect();
    use agentsessions_proto::v1::EventKind as K;
    assert_eq!(kinds[5], K::EventApprovalResult as i32);
    assert!(kinds.contains(&(K::EventToolResult as i32)), "resumed");
    let (_, receipt) = page(&format!("{}{to}", base(&d))).await;
    assert!(receipt.contains("call c1 approved (request seq 4): ok"));
    assert!(receipt.contains("TOOL_RESULT"));
    d.shutdown().await;
}

#[tokio::test]
async fn a_long_timeline_is_paged() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let uid = create(&mut client(&d).await, "echo").await;
    for i in 0..30 {
        exec(&d, &uid, &format!("turn {i}")).await;
    }
    let url = format!("{}/sessions/{uid}", base(&d));
    let (_, last) = page(&url).await;
    assert!(
        last.contains("seq 51–150 of 150"),
        "the last page by default"
    );
    assert_eq!(last.matches("class=\"record ").count(), 100);
    assert!(last.contains(&format!("/sessions/{uid}?from=1\" id=\"older\"")));
    assert!(
        last.contains("data-events="),
        "the last page follows the journal"
    );
    let (_, first) = page(&format!("{url}?from=1")).await;
    assert!(first.contains("seq 1–100 of 150"));
    assert!(first.contains(&format!("/sessions/{uid}?from=101\" id=\"newer\"")));
    assert!(!first.contains("data-events="), "an older page stays put");
    let (_, clamped) = page(&format!("{url}?from=-5")).await;
    assert!(clamped.contains("seq 1–100 of 150"));
    d.shutdown().await;
}

#[tokio::test]
async fn the_live_stream_sends_a_turn_as_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let uid = create(&mut client(&d).await, "echo").await;
    let mut stream = http()
        .get(format!("{}/sessions/{uid}/events?after=0", base(&d)))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    exec(&d, &uid, "live <b>one</b>").await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(seen.contains("echo:live &#60;b&#62;one") && seen.contains("\"exec\":\"COMPLETED\"")) {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("the turn arrives on the stream")
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: record"));
    assert!(seen.contains("id: 5"));
    let (status, _) = page(&format!("{}/sessions/sess-nope/events", base(&d))).await;
    assert_eq!(status, 404);
    drop(stream);
    // Shutdown ends open streams rather than waiting on them.
    let _open = http()
        .get(format!("{}/sessions/{uid}/events?after=5", base(&d)))
        .send()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), d.shutdown())
        .await
        .expect("shutdown with a live stream open");
}

#[tokio::test]
async fn login_keeps_a_verified_token_in_an_http_only_strict_cookie() {
    let dir = tempfile::tempdir().unwrap();
    let key = "olivia-key-0123456789";
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    let file = AuthFile::parse(&format!(
        "[[api_key]]\nprincipal = \"olivia\"\nsha256 = \"{digest}\"\nroles = [\"*:reader\"]\n"
    ))
    .unwrap();
    file.check().unwrap();
    let mut c = config(dir.path());
    c.security.auth = Arc::new(Authenticator::from_file(&file).unwrap());
    let d = Daemon::start(c).await.unwrap();
    let b = base(&d);

    let r = http().get(format!("{b}/sessions")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/login?next=%2Fsessions");
    let (visitor, form) = login_form(&format!("{b}/login?next=%2Fsessions")).await;
    let csrf = hidden(&form, "csrf");

    let r = post(&format!("{b}/login"), None, "token=wrong&next=%2Fsessions").await;
    assert_eq!(r.status(), 403, "a login without its CSRF token");
    let r = post(
        &format!("{b}/login"),
        None,
        &format!("token={key}&next=%2Fsessions&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status(), 403, "a login without its visitor cookie");
    let r = post(
        &format!("{b}/login"),
        Some(&visitor),
        &format!("token=wrong&next=%2Fsessions&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status(), 401);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("That token was not accepted.")
    );

    let r = post(
        &format!("{b}/login"),
        Some(&visitor),
        &format!("token={key}&next=%2F%2Fevil.example&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/", "only local paths");
    let set = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("agentsessions_console="))
        .unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    assert!(
        !cookie.contains(&hex::encode(key)),
        "the cookie is no credential"
    );
    let r = http()
        .get(format!("{b}/sessions"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("<span id=\"viewer\">olivia</span>")
    );

    // A cookie naming no console session sends the browser back to log in.
    let r = http()
        .get(format!("{b}/sessions"))
        .header("cookie", "agentsessions_console=6e6f7065")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap();
    assert!(to.ends_with("&error=ended"), "{to}");
    d.shutdown().await;
}

#[tokio::test]
async fn the_session_page_shows_its_fork_tree() {
    use agentsessions_proto::v1::ForkRequest;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = client(&d).await;
    let root = create(&mut c, "echo").await;
    exec(&d, &root, "hello").await;
    let forked = c
        .fork(ForkRequest {
            session: root.clone(),
            at_seq: 5,
            count: 2,
            child_names: vec!["left".into(), "right".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let left = forked.children[0].metadata.as_ref().unwrap().uid.clone();
    let grandchild = c
        .fork(ForkRequest {
            session: left.clone(),
            at_seq: 6,
            count: 1,
            child_names: vec!["leaf".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .children[0]
        .metadata
        .as_ref()
        .unwrap()
        .uid
        .clone();
    let b = base(&d);
    let (_, html) = page(&format!("{b}/sessions/{root}")).await;
    let tree = &html[html.find("id=\"tree\"").unwrap()..html.find("Journal").unwrap()];
    assert!(
        tree.contains(&format!("child <a href=\"/sessions/{left}\">left</a>")),
        "{tree}"
    );
    assert!(
        tree.contains(">right</a> <span class=\"muted\">at seq 5</span>"),
        "{tree}"
    );
    assert!(!tree.contains("leaf"), "only direct children");
    let (_, html) = page(&format!("{b}/sessions/{grandchild}")).await;
    let tree = &html[html.find("id=\"tree\"").unwrap()..html.find("Journal").unwrap()];
    let at_root = tree.find(&format!("/sessions/{root}")).expect("the root");
    let at_left = tree
        .find(&format!(
            "/sessions/{left}\">left</a> <span class=\"muted\">forked at seq 6"
        ))
        .expect("the parent");
    assert!(at_root < at_left, "root first: {tree}");
    assert!(tree.contains("(forked at seq 6)"), "{tree}");
    d.shutdown().await;
}

#[tokio::test]
async fn the_list_filters_by_harness_and_state_and_pages_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = client(&d).await;
    let mut echo = Vec::new();
    for _ in 0..55 {
        echo.push(create(&mut c, "echo").await);
    }
    let parked = create(&mut c, "approval").await;
    exec(&d, &parked, "remember milk").await;
    exec(&d, &echo[0], "hello").await;
    let b = base(&d);
    let uids = |html: &str| -> Vec<String> {
        html.split("data-uid=\"")
            .skip(1)
            .map(|s| s[..s.find('"').unwrap()].to_owned())
            .collect()
    };
    let (_, all) = page(&format!("{b}/sessions")).await;
    let first = uids(&all);
    assert_eq!(first.len(), 50);
    assert_eq!(first[0], parked, "newest first");
    let next = all
        .split("href=\"")
        .find(|s| s.contains("id=\"next\""))
        .unwrap();
    let next = next[..next.find('"').unwrap()].replace("&amp;", "&");
    let (_, rest) = page(&format!("{b}{next}")).await;
    let second = uids(&rest);
    assert_eq!(second.len(), 6);
    assert_eq!(second.last(), Some(&echo[0]));
    assert!(!rest.contains("id=\"next\""));

    let (_, approval) = page(&format!("{b}/sessions?harness=approval")).await;
    assert_eq!(uids(&approval), std::slice::from_ref(&parked));
    let (_, waiting) = page(&format!("{b}/sessions?waiting=1")).await;
    assert_eq!(uids(&waiting), std::slice::from_ref(&parked));
    let (_, done) = page(&format!("{b}/sessions?state=COMPLETED")).await;
    assert_eq!(uids(&done), std::slice::from_ref(&echo[0]));
    let (_, none) = page(&format!("{b}/sessions?harness=echo&state=AWAITING")).await;
    assert!(uids(&none).is_empty() && none.contains("No sessions match."));
    let (status, _) = page(&format!("{b}/sessions?page_token=garbage")).await;
    assert_eq!(status, 400, "the machine's INVALID_ARGUMENT");
    d.shutdown().await;
}

#[tokio::test]
async fn with_tls_the_console_serves_https_with_secure_cookies() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    let token = "tess-key-0123456789";
    let digest = hex::encode(Sha256::digest(token.as_bytes()));
    let file = AuthFile::parse(&format!(
        "[[api_key]]\nprincipal = \"tess\"\nsha256 = \"{digest}\"\nroles = [\"*:reader\"]\n"
    ))
    .unwrap();
    file.check().unwrap();
    let mut c = config(dir.path());
    c.security.auth = Arc::new(Authenticator::from_file(&file).unwrap());
    c.security.tls = Some(agentsessions_shells::daemon::security::TlsFiles {
        cert: dir.path().join("server.pem"),
        key: dir.path().join("server.key"),
        client_ca: None,
    });
    let d = Daemon::start(c).await.unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let b = format!("https://{}", d.console_addr.unwrap());
    let form = https.get(format!("{b}/login")).send().await.unwrap();
    assert_eq!(form.status(), 200);
    let visitor = form.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(visitor.contains("Secure"), "{visitor}");
    let visitor = visitor.split(';').next().unwrap().to_owned();
    let csrf = hidden(&form.text().await.unwrap(), "csrf");
    let r = https
        .post(format!("{b}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", visitor)
        .body(format!("token={token}&next=%2Fsessions&csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap();
    assert!(set.contains("HttpOnly") && set.contains("Secure"), "{set}");
    // Plain HTTP on the TLS port gets no page.
    let plain = http()
        .get(format!("http://{}/sessions", d.console_addr.unwrap()))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
    d.shutdown().await;
}

/// The page at `path` for the console session `cookie`.
async fn get_as(base: &str, cookie: &str, path: &str) -> String {
    http()
        .get(format!("{base}{path}"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The records of `uid`, read as `key`.
async fn kinds_of(
    c: &mut agentsessions_proto::grpc::sessions_client::SessionsClient<tonic::transport::Channel>,
    uid: &str,
    key: &str,
) -> Vec<agentsessions_proto::v1::LogRecord> {
    use agentsessions_proto::v1::ReplayRequest;
    let mut records = c
        .replay(authed(
            ReplayRequest {
                session: uid.into(),
                ..Default::default()
            },
            key,
        ))
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = records.message().await.unwrap() {
        out.push(r);
    }
    out
}

#[tokio::test]
async fn an_approver_without_writer_decides_and_resumes_and_is_attributed() {
    use agentsessions_proto::v1::{ApproveRequest, EventKind as K};
    let dir = tempfile::tempdir().unwrap();
    let (writer, approver) = ("wanda-key-0123456789", "abe-key-0123456789");
    let mut toml = String::new();
    for (who, key, role) in [
        ("wanda", writer, "default:writer"),
        ("abe", approver, "default:approver"),
    ] {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        toml += &format!(
            "[[api_key]]\nprincipal = {who:?}\nsha256 = {digest:?}\nroles = [{role:?}]\n\n"
        );
    }
    let file = AuthFile::parse(&toml).unwrap();
    file.check().unwrap();
    let mut cfg = config(dir.path());
    cfg.security.auth = Arc::new(Authenticator::from_file(&file).unwrap());
    let d = Daemon::start(cfg).await.unwrap();
    let mut c = client(&d).await;
    let uid = support::parked_as(&mut c, writer).await;

    let b = base(&d);
    let (visitor, login) = login_form(&format!("{b}/login")).await;
    let r = post(
        &format!("{b}/login"),
        Some(&visitor),
        &format!("token={approver}&next=%2F&csrf={}", hidden(&login, "csrf")),
    )
    .await;
    let cookie = first_cookie(&r);
    let html = get_as(&b, &cookie, &format!("/sessions/{uid}")).await;
    assert!(
        html.contains("id=\"approve\""),
        "an approver gets the buttons"
    );
    let form = format!(
        "execution_id={}&tool_call_id=c1&request_seq=4&decision=approve&reason=fine&csrf={}",
        hidden(&html, "execution_id"),
        hidden(&html, "csrf")
    );
    let r = post(&format!("{b}/sessions/{uid}/decide"), Some(&cookie), &form).await;
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(
        to,
        format!("/sessions/{uid}?receipt=6#receipt"),
        "decided and resumed, under the approver's own authority"
    );
    let html = get_as(&b, &cookie, &to).await;
    assert!(html.contains("call c1 approved (request seq 4): fine"));
    assert!(
        html.contains("<td class=\"actor\">abe (api-key)</td>"),
        "attributed"
    );
    let records = kinds_of(&mut c, &uid, writer).await;
    let actor = records[5].event.clone().unwrap().actor.unwrap();
    assert_eq!(
        (actor.principal.as_str(), actor.issuer.as_str()),
        ("abe", "api-key")
    );
    assert!(
        records
            .iter()
            .any(|r| r.event.as_ref().unwrap().kind == K::EventToolResult as i32),
        "the approved call ran"
    );

    // Decided over the API without a resume: the console says DECIDED, not
    // COMPLETED, keeps it under "waiting", and its Resume carries it out.
    let other = support::parked_as(&mut c, writer).await;
    let pending = c
        .get_session(authed(GetSessionRequest { uid: other.clone() }, writer))
        .await
        .unwrap()
        .into_inner()
        .pending_approval
        .unwrap();
    c.approve(authed(
        ApproveRequest {
            session: other.clone(),
            execution_id: pending.execution_id,
            tool_call_id: pending.tool_call_id,
            request_seq: pending.request_seq,
            approved: Some(true),
            ..Default::default()
        },
        approver,
    ))
    .await
    .unwrap();
    let html = get_as(&b, &cookie, &format!("/sessions/{other}")).await;
    assert!(html.contains("id=\"exec-state\">DECIDED<"), "{html}");
    assert!(html.contains("id=\"resume\""), "a Resume button");
    let list = get_as(&b, &cookie, "/sessions?waiting=1").await;
    assert!(list.contains(&other), "decided is still waiting: {list}");
    assert!(!list.contains(&uid), "the resumed one is not");
    let forged = post(
        &format!("{b}/sessions/{other}/resume"),
        Some(&cookie),
        "csrf=00",
    )
    .await;
    assert_eq!(forged.status(), 403);
    let r = post(
        &format!("{b}/sessions/{other}/resume"),
        Some(&cookie),
        &format!("csrf={}", hidden(&html, "csrf")),
    )
    .await;
    assert_eq!(r.status(), 303);
    let records = kinds_of(&mut c, &other, writer).await;
    assert!(
        records
            .iter()
            .any(|r| r.event.as_ref().unwrap().kind == K::EventToolResult as i32),
        "the console's Resume ran the call"
    );
    let html = get_as(&b, &cookie, &format!("/sessions/{other}")).await;
    assert!(!html.contains(">DECIDED<"), "carried out");
    d.shutdown().await;
}

#[tokio::test]
async fn a_tampered_record_fails_the_chain_check_on_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let uid = create(&mut client(&d).await, "echo").await;
    exec(&d, &uid, "hello").await;
    d.shutdown().await;
    let db = rusqlite::Connection::open(dir.path().join("journal.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE events SET hash = '0000' || substr(hash, 5) WHERE session = ?1 AND seq = 5",
            [&uid],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let d = Daemon::start(config(dir.path())).await.unwrap();
    let (status, html) = page(&format!("{}/sessions/{uid}", base(&d))).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("✘ seq 5: content_hash mismatch at seq 5: stored 0000"),
        "{html}"
    );
    let (_, verify) = page(&format!("{}/sessions/{uid}/verify", base(&d))).await;
    assert!(
        verify.contains("class=\"bad\">seq 5: content_hash mismatch"),
        "{verify}"
    );
    d.shutdown().await;
}
