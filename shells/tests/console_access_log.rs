//! Console actions are access-logged and counted like RPCs: a browser
//! session (refused, login form, login, list, view, verify, a missing
//! session, a decision and the resume it makes, a live stream, logout)
//! against an in-process daemon with auth, the console and metrics. Each
//! action logs `rpc start` and `rpc finish` (target
//! `agentsessions::console`) with the gRPC access log's fields, and
//! `/metrics` counts it under `console.<action>` — its series there, at
//! zero, before any action.
//!
//! This file installs the process-wide subscriber, so it holds one test.

#[path = "support/capture.rs"]
mod capture;
#[path = "support/daemon.rs"]
mod support;
#[path = "support/web.rs"]
mod web;

use std::sync::Arc;
use std::time::Duration;

use agentsessions_shells::auth::{AuthFile, Authenticator};
use agentsessions_shells::daemon::app::Daemon;
use capture::Capture;
use serde_json::Value;
use sha2::{Digest, Sha256};
use web::{first_cookie, hidden};

/// The console's access events among those captured.
fn console(capture: &Capture) -> Vec<Value> {
    capture
        .lines()
        .into_iter()
        .filter(|l| l["target"] == "agentsessions::console")
        .collect()
}

const KEY: &str = "ana-key-0123456789";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(url: &str, cookie: &str) -> reqwest::Response {
    http()
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
}

async fn post(url: &str, cookie: &str, form: &str) -> reqwest::Response {
    http()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", cookie)
        .body(form.to_owned())
        .send()
        .await
        .unwrap()
}

/// The finish events of `operation`.
fn finishes<'a>(events: &'a [Value], operation: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["operation"] == operation && e["phase"] == "finish")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_actions_are_access_logged_and_counted_like_rpcs() {
    let capture = Capture::default();
    let writer = capture.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .init();

    let dir = tempfile::tempdir().unwrap();
    let digest = hex::encode(Sha256::digest(KEY.as_bytes()));
    let file = AuthFile::parse(&format!(
        "[[api_key]]\nprincipal = \"ana\"\nsha256 = \"{digest}\"\nroles = [\"*:admin\"]\n"
    ))
    .unwrap();
    file.check().unwrap();
    let mut config = support::config(dir.path());
    config.security.auth = Arc::new(Authenticator::from_file(&file).unwrap());
    config.console_addr = Some("127.0.0.1:0".parse().unwrap());
    config.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    let d = Daemon::start(config).await.unwrap();
    let b = format!("http://{}", d.console_addr.unwrap());
    let metrics = format!("http://{}/metrics", d.metrics_addr.unwrap());
    let scrape = || async {
        http()
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let count = |text: &str, method: &str, code: &str| {
        let series =
            format!("agentsessions_rpc_requests_total{{method=\"{method}\",code=\"{code}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse::<f64>().ok())
    };

    let before = scrape().await;
    for method in [
        "console.list",
        "console.view",
        "console.approve",
        "console.resume",
        "console.live",
        "console.logout",
    ] {
        assert_eq!(
            count(&before, method, "OK"),
            Some(0.0),
            "{method}: {before}"
        );
    }

    // A session parked on an approval.
    let mut c = support::client(&d).await;
    let uid = support::parked_as(&mut c, KEY).await;

    // Refused, then signed in.
    assert_eq!(get(&format!("{b}/sessions"), "").await.status(), 303);
    let form = get(&format!("{b}/login"), "").await;
    let visitor = first_cookie(&form);
    let csrf = hidden(&form.text().await.unwrap(), "csrf");
    let r = post(
        &format!("{b}/login"),
        &visitor,
        &format!("token={KEY}&next=%2Fsessions&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status(), 303);
    let cookie = first_cookie(&r);

    // A caller's request id is adopted and echoed, as on gRPC.
    let r = http()
        .get(format!("{b}/sessions"))
        .header("cookie", &cookie)
        .header("x-request-id", "list-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-request-id"], "list-1");
    let page = get(&format!("{b}/sessions/{uid}"), &cookie).await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert_eq!(
        get(&format!("{b}/sessions/{uid}/verify"), &cookie)
            .await
            .status(),
        200
    );
    assert_eq!(
        get(&format!("{b}/sessions/sess-nope"), &cookie)
            .await
            .status(),
        404
    );

    let decision = format!(
        "execution_id={}&tool_call_id=c1&request_seq=4&decision=approve&reason=ok&csrf={}",
        hidden(&html, "execution_id"),
        hidden(&html, "csrf")
    );
    let r = post(&format!("{b}/sessions/{uid}/decide"), &cookie, &decision).await;
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(!to.contains("resume="), "the resume succeeded: {to}");

    // A live stream, ended by the logout (its next tick signs it out).
    let mut live = get(&format!("{b}/sessions/{uid}/events?after=0"), &cookie).await;
    assert_eq!(live.status(), 200);
    assert!(live.chunk().await.unwrap().is_some(), "a first event");
    let r = post(
        &format!("{b}/logout"),
        &cookie,
        &format!("csrf={}", hidden(&html, "csrf")),
    )
    .await;
    assert_eq!(r.status(), 303);
    let read_out = async { while live.chunk().await.unwrap().is_some() {} };
    tokio::time::timeout(Duration::from_secs(10), read_out)
        .await
        .expect("the stream ends after the logout");
    let mut events = console(&capture);
    for _ in 0..100 {
        if !finishes(&events, "console.live").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        events = console(&capture);
    }

    let after = scrape().await;
    d.shutdown().await;
    if std::env::var_os("SHOW_LOGS").is_some() {
        for e in &events {
            eprintln!("{e}");
        }
    }

    // Every action logged its start and its finish, paired by request id.
    for e in &events {
        assert_eq!(e["component"], "console");
        let op = e["operation"].as_str().unwrap();
        let twins = events
            .iter()
            .filter(|o| o["request_id"] == e["request_id"] && o["operation"] == op)
            .count();
        assert_eq!(twins, 2, "one start and one finish of {e}");
    }
    let one = |operation: &str| {
        let f = finishes(&events, operation);
        assert_eq!(f.len(), 1, "{operation}: {events:#?}");
        f[0].clone()
    };
    let list = finishes(&events, "console.list");
    assert_eq!(list.len(), 2, "{events:#?}");
    assert_eq!(list[0]["grpc_code"], "UNAUTHENTICATED", "no viewer");
    assert_eq!(list[0]["http_status"], 303);
    assert_eq!(list[0]["principal"], "");
    assert_eq!(list[0]["level"], "WARN");
    let l = list[1];
    assert_eq!(l["request_id"], "list-1");
    assert_eq!(l["grpc_code"], "OK");
    assert_eq!(l["outcome"], "success");
    assert_eq!(l["principal"], "ana");
    assert_eq!(l["rpc_method"], "GET /sessions");
    assert_eq!(l["rpc_kind"], "unary");
    assert!(l["duration_ms"].as_f64().is_some());
    assert_eq!(one("console.login_form")["grpc_code"], "OK");
    assert_eq!(one("console.login")["principal"], "ana");

    let views = finishes(&events, "console.view");
    assert_eq!(views.len(), 2);
    assert_eq!(views[0]["session_uid"], uid.as_str());
    assert_eq!(views[0]["rpc_method"], "GET /sessions/{uid}");
    assert_eq!(views[1]["grpc_code"], "NOT_FOUND");
    assert_eq!(views[1]["error_kind"], "not_found");
    assert_eq!(views[1]["http_status"], 404);
    assert_eq!(one("console.verify")["grpc_code"], "OK");

    let approve = one("console.approve");
    let resume = one("console.resume");
    for e in [&approve, &resume] {
        assert_eq!(e["grpc_code"], "OK", "{e}");
        assert_eq!(e["principal"], "ana");
        assert_eq!(e["session_uid"], uid.as_str());
    }
    assert_eq!(
        approve["request_id"], resume["request_id"],
        "the resume belongs to the decision's request"
    );

    let live = one("console.live");
    assert_eq!(live["rpc_kind"], "server_stream");
    assert_eq!(live["grpc_code"], "OK");
    assert!(live["frames"].as_u64().unwrap() >= 2, "{live}");
    assert_eq!(one("console.logout")["principal"], "ana");

    for (method, code, n) in [
        ("console.list", "UNAUTHENTICATED", 1.0),
        ("console.list", "OK", 1.0),
        ("console.login", "OK", 1.0),
        ("console.view", "OK", 1.0),
        ("console.view", "NOT_FOUND", 1.0),
        ("console.approve", "OK", 1.0),
        ("console.resume", "OK", 1.0),
        ("console.live", "OK", 1.0),
        ("console.logout", "OK", 1.0),
    ] {
        assert_eq!(
            count(&after, method, code),
            Some(n),
            "{method} {code}: {after}"
        );
    }
    assert!(
        after.contains("agentsessions_rpc_duration_seconds_count{method=\"console.view\"} 2\n"),
        "{after}"
    );
    assert!(!after.contains(uid.as_str()), "a session id in the metrics");
}
