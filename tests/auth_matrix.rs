//! The bad-credential matrix over real TLS sockets, from a client we did
//! not write: grpcio (Python) with certificates and JWTs it makes itself
//! (cryptography, PyJWT; `conformance/python/auth_matrix.py`) against the
//! built `agentsessionsd --tls-* --auth`. Each row asserts the status; the
//! journal is checked unchanged by every refused row. Set-up and checks go
//! through the built `agentctl` with `--tls-ca/--tls-cert/--tls-key` and
//! `--token`.
//!
//! Without python3/venv/pip the test prints SKIPPED; with `CI=true` it fails.

#[path = "support/cli.rs"]
mod cli;

use std::path::Path;
use std::process::Command;

use cli::{Daemon, agentctl, stderr, stdout};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

const ISSUER: &str = "https://issuer.example";
const AUDIENCE: &str = "agentsessions";

/// (principal, key, roles) of the static keys.
const KEYS: [(&str, &str, &[&str]); 5] = [
    ("alice", "alice-key-0123456789abcdef", &["default:writer"]),
    ("rita", "rita-key-0123456789abcdef", &["*:reader"]),
    ("abe", "abe-key-0123456789abcdef", &["default:approver"]),
    ("olga", "olga-key-0123456789abcdef", &["other:writer"]),
    ("root", "root-key-0123456789abcdef", &["*:admin"]),
];

fn key(principal: &str) -> &'static str {
    KEYS.iter().find(|k| k.0 == principal).unwrap().1
}

fn auth_toml() -> String {
    let mut s = String::new();
    for (principal, key, roles) in KEYS {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        let roles: Vec<String> = roles.iter().map(|r| format!("{r:?}")).collect();
        s += &format!(
            "[[api_key]]\nprincipal = {principal:?}\nsha256 = {digest:?}\nroles = [{}]\n\n",
            roles.join(", ")
        );
    }
    s += &format!(
        "[jwt]\nissuer = {ISSUER:?}\naudience = {AUDIENCE:?}\njwks_file = \"jwks.json\"\n\n\
         [mtls]\nroles = {{ \"spiffe://example/agent-1\" = [\"default:reader\"] }}\n"
    );
    s
}

/// `agentctl` over TLS as `principal` (client certificate client-a).
fn ctl(dir: &Path, server: &str, principal: &str, args: &[&str]) -> std::process::Output {
    let ca = dir.join("ca.pem");
    let cert = dir.join("client-a.pem");
    let key_file = dir.join("client-a.key");
    let mut argv: Vec<String> = vec![
        "--server".into(),
        format!("https://{server}"),
        "--tls-ca".into(),
        ca.display().to_string(),
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key_file.display().to_string(),
        "--token".into(),
        key(principal).into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    agentctl(dir, &argv)
}

fn ok(dir: &Path, server: &str, principal: &str, args: &[&str]) -> String {
    let o = ctl(dir, server, principal, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// What the refused rows must leave unchanged.
fn journal_state(dir: &Path, server: &str, s: &str, t: &str) -> (String, String, String, String) {
    (
        ok(dir, server, "root", &["--json", "replay", "--session", s]),
        ok(dir, server, "root", &["--json", "replay", "--session", t]),
        ok(dir, server, "root", &["list"]),
        ok(dir, server, "root", &["--project", "other", "list"]),
    )
}

fn row(name: &str, rpc: &str, request: Json, token: Json, expect: &str) -> Json {
    json!({"name": name, "rpc": rpc, "request": request, "token": token, "expect": expect})
}

fn jwt(spec: Json) -> Json {
    json!({ "jwt": spec })
}

/// Every row: the status it must get. Rows marked OK are the positive
/// controls that prove the credentials can succeed at all.
fn rows(s: &str, t: &str) -> Vec<Json> {
    let get = |uid: &str| json!({"uid": uid});
    let on = |uid: &str| json!({"session": uid});
    let k = |p: &str| json!(key(p));
    let es = |extra: Json| {
        let mut v = json!({"alg": "ES256", "key": "es", "kid": "es",
            "claims": {"agentsessions_roles": ["default:reader"]}});
        merge(&mut v, extra);
        jwt(v)
    };
    let unauth = "UNAUTHENTICATED";
    let denied = "PERMISSION_DENIED";
    let approve = json!({"session": s, "execution_id": "e", "tool_call_id": "c1",
        "request_seq": "3", "approved": true});
    let mut rows = vec![
        // Credentials that do not verify.
        row(
            "no token, unmapped cert",
            "GetSession",
            get(s),
            Json::Null,
            unauth,
        )
        .with("cert", "b"),
        row("empty bearer", "GetSession", get(s), Json::Null, unauth)
            .with("authorization", "Bearer "),
        row("basic scheme", "GetSession", get(s), Json::Null, unauth)
            .with("authorization", "Basic YWxpY2U6cHc="),
        row("garbage token", "GetSession", get(s), json!("nope"), unauth),
        row(
            "unknown key",
            "GetSession",
            get(s),
            json!("mallory-key-0123456789abcdef"),
            unauth,
        ),
        row(
            "key with a suffix",
            "GetSession",
            get(s),
            json!(format!("{}x", key("rita"))),
            unauth,
        ),
        row(
            "key prefix",
            "GetSession",
            get(s),
            json!(&key("rita")[..10]),
            unauth,
        ),
        row(
            "jwt expired",
            "GetSession",
            get(s),
            es(json!({"exp_in": -600})),
            unauth,
        ),
        row(
            "jwt not yet valid",
            "GetSession",
            get(s),
            es(json!({"nbf_in": 600})),
            unauth,
        ),
        row(
            "jwt wrong issuer",
            "GetSession",
            get(s),
            es(json!({"claims": {"iss": "https://evil.example"}})),
            unauth,
        ),
        row(
            "jwt wrong audience",
            "GetSession",
            get(s),
            es(json!({"claims": {"aud": "someone-else"}})),
            unauth,
        ),
        row(
            "jwt alg none",
            "GetSession",
            get(s),
            es(json!({"alg": "none"})),
            unauth,
        ),
        row(
            "jwt hs256 with the rsa public key",
            "GetSession",
            get(s),
            es(json!({"alg": "HS256-with-public-key", "kid": "rs"})),
            unauth,
        ),
        row(
            "jwt signed by an unknown key",
            "GetSession",
            get(s),
            es(json!({"key": "other-es"})),
            unauth,
        ),
        row(
            "jwt unknown kid",
            "GetSession",
            get(s),
            es(json!({"kid": "nobody"})),
            unauth,
        ),
        row(
            "jwt es key named as rs",
            "GetSession",
            get(s),
            es(json!({"kid": "rs"})),
            unauth,
        ),
        row(
            "jwt without exp",
            "GetSession",
            get(s),
            es(json!({"claims": {"exp": null}})),
            unauth,
        ),
        row(
            "jwt without sub",
            "GetSession",
            get(s),
            es(json!({"claims": {"sub": null}})),
            unauth,
        ),
        row(
            "jwt roles not an array",
            "GetSession",
            get(s),
            es(json!({"claims": {"agentsessions_roles": "default:reader"}})),
            unauth,
        ),
        row(
            "jwt bad grant",
            "GetSession",
            get(s),
            es(json!({"claims": {"agentsessions_roles": ["default:owner"]}})),
            unauth,
        ),
        row(
            "jwt tampered payload",
            "GetSession",
            get(s),
            es(json!({"tamper": true})),
            unauth,
        ),
        // Verified, but the role does not cover the call.
        row(
            "jwt without roles",
            "GetSession",
            get(s),
            es(json!({"claims": {"agentsessions_roles": null}})),
            denied,
        ),
        row(
            "jwt rs256 writer on another project",
            "Exec",
            on(t),
            jwt(json!({"alg": "RS256", "key": "rs", "kid": "rs",
                "claims": {"agentsessions_roles": ["default:writer"]}})),
            denied,
        ),
        row("reader exec", "Exec", on(s), k("rita"), denied),
        row("reader suspend", "Suspend", on(s), k("rita"), denied),
        row("reader resume", "Resume", on(s), k("rita"), denied),
        row(
            "reader fork",
            "Fork",
            json!({"session": s, "count": 1}),
            k("rita"),
            denied,
        ),
        row("reader cancel", "Cancel", on(s), k("rita"), denied),
        row("reader delete", "DeleteSession", get(s), k("rita"), denied),
        row(
            "reader approve",
            "Approve",
            approve.clone(),
            k("rita"),
            denied,
        ),
        row(
            "reader create",
            "CreateSession",
            json!({}),
            k("rita"),
            denied,
        ),
        row(
            "writer approve",
            "Approve",
            approve.clone(),
            k("alice"),
            denied,
        ),
        row("approver exec", "Exec", on(s), k("abe"), denied),
        row("approver delete", "DeleteSession", get(s), k("abe"), denied),
        row(
            "approver create",
            "CreateSession",
            json!({}),
            k("abe"),
            denied,
        ),
        row("cert principal exec", "Exec", on(s), Json::Null, denied),
        // Another project's sessions, and sessions that do not exist.
        row("cross-project get", "GetSession", get(s), k("olga"), denied),
        row(
            "missing session get",
            "GetSession",
            get("no-such-session"),
            k("olga"),
            denied,
        ),
        row("cross-project exec", "Exec", on(s), k("olga"), denied),
        row("cross-project replay", "Replay", on(s), k("olga"), denied),
        row(
            "cross-project fork",
            "Fork",
            json!({"session": s, "count": 1}),
            k("olga"),
            denied,
        ),
        row(
            "cross-project list",
            "ListSessions",
            json!({"project": "default"}),
            k("olga"),
            denied,
        ),
        row(
            "list of another project",
            "ListSessions",
            json!({"project": "other"}),
            k("alice"),
            denied,
        ),
        row(
            "cross-project delete",
            "DeleteSession",
            get(t),
            k("alice"),
            denied,
        ),
        row(
            "cross-project approve",
            "Approve",
            json!({"session": t, "execution_id": "e",
            "tool_call_id": "c1", "request_seq": "3", "approved": true}),
            k("abe"),
            denied,
        ),
        // The transport.
        row(
            "plaintext to the tls port",
            "GetSession",
            get(s),
            k("rita"),
            "UNAVAILABLE",
        )
        .with("plaintext", true),
        row(
            "client cert from another ca",
            "GetSession",
            get(s),
            k("rita"),
            "UNAVAILABLE",
        )
        .with("cert", "x"),
        row(
            "no client cert",
            "GetSession",
            get(s),
            k("rita"),
            "UNAVAILABLE",
        )
        .with("cert", "none"),
        // Positive controls.
        row("reader get", "GetSession", get(s), k("rita"), "OK"),
        row("reader replay", "Replay", on(s), k("rita"), "OK"),
        row("cert principal get", "GetSession", get(s), Json::Null, "OK"),
        row(
            "jwt es256 reader get",
            "GetSession",
            get(s),
            es(json!({})),
            "OK",
        ),
        row(
            "jwt rs256 reader get",
            "GetSession",
            get(s),
            jwt(json!({"alg": "RS256", "key": "rs", "kid": "rs",
                "claims": {"agentsessions_roles": ["*:reader"]}})),
            "OK",
        ),
        row(
            "jwt es256 without kid",
            "GetSession",
            get(s),
            es(json!({"kid": null})),
            "OK",
        ),
        row(
            "writer create",
            "CreateSession",
            json!({}),
            k("alice"),
            "OK",
        ),
    ];
    for r in &mut rows {
        if r.get("cert").is_none() {
            r["cert"] = json!("a");
        }
    }
    rows
}

fn merge(into: &mut Json, extra: Json) {
    if let (Some(into), Json::Object(extra)) = (into.as_object_mut(), extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

trait With {
    fn with(self, key: &str, value: impl Into<Json>) -> Self;
}

impl With for Json {
    fn with(mut self, key: &str, value: impl Into<Json>) -> Self {
        self[key] = value.into();
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_credential_gets_its_status_over_tls_and_changes_nothing() {
    let tc = match agentsessions_conformance::python::toolchain().await {
        Ok(tc) => tc.clone(),
        Err(why) => {
            assert!(
                !agentsessions_conformance::python::required(),
                "python peers are required in CI: {why}"
            );
            eprintln!("SKIPPED: auth matrix: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = agentsessions_conformance::python::repo_root()
        .join("conformance")
        .join("python")
        .join("auth_matrix.py");
    let python = |args: &[&str]| {
        let o = Command::new(&tc.python)
            .arg(&script)
            .args(args)
            .env("PYTHONPATH", &tc.generated)
            .output()
            .expect("run python");
        assert!(
            o.status.success(),
            "auth_matrix.py {args:?}: {}",
            stderr(&o)
        );
        stdout(&o)
    };
    python(&["pki", d.to_str().unwrap()]);
    std::fs::write(d.join("auth.toml"), auth_toml()).unwrap();

    let path = |f: &str| d.join(f).display().to_string();
    let daemon = Daemon::start_in(
        d,
        d.join("journal.db").as_os_str(),
        &[
            "--tls-cert",
            &path("server.pem"),
            "--tls-key",
            &path("server.key"),
            "--tls-client-ca",
            &path("ca.pem"),
            "--auth",
            &path("auth.toml"),
        ],
    );
    let server = daemon.sessions.clone();
    let s = ok(d, &server, "alice", &["create"]).trim().to_owned();
    ok(
        d,
        &server,
        "alice",
        &["exec", "--session", &s, "--input", "hi"],
    );
    let t = ok(d, &server, "olga", &["--project", "other", "create"])
        .trim()
        .to_owned();
    let before = journal_state(d, &server, &s, &t);

    let rows = rows(&s, &t);
    assert!(rows.len() >= 40, "the matrix has {} rows", rows.len());
    let spec = json!({"address": server, "dir": d, "issuer": ISSUER, "audience": AUDIENCE,
        "cases": rows});
    std::fs::write(d.join("spec.json"), spec.to_string()).unwrap();
    let out = python(&["run", d.join("spec.json").to_str().unwrap()]);
    let results: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), rows.len(), "{out}");
    let mut wrong = Vec::new();
    for (row, got) in rows.iter().zip(&results) {
        assert_eq!(row["name"], got["name"]);
        if row["expect"] != got["code"] {
            wrong.push(format!(
                "{}: want {} got {} ({})",
                row["name"], row["expect"], got["code"], got["details"]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "rows with the wrong status:\n{}",
        wrong.join("\n")
    );

    // A forbidden session and a missing one read alike.
    let details = |name: &str| {
        let i = rows.iter().position(|r| r["name"] == name).unwrap();
        results[i]["details"].clone()
    };
    assert_eq!(details("cross-project get"), details("missing session get"));
    // No credential text is echoed back.
    for r in &results {
        let text = r["details"].as_str().unwrap_or("");
        assert!(
            KEYS.iter().all(|(_, k, _)| !text.contains(&k[..10])),
            "{text}"
        );
    }

    // Refused rows changed nothing; the one permitted Create added a row.
    let after = journal_state(d, &server, &s, &t);
    assert_eq!(after.0, before.0, "session S unchanged");
    assert_eq!(after.1, before.1, "session T unchanged");
    assert_eq!(after.3, before.3, "project other unchanged");
    assert_eq!(
        after.2.lines().count(),
        before.2.lines().count() + 1,
        "only the writer's Create added a session"
    );
    // The creator is recorded as verified: the Create by alice's key.
    let got = ok(d, &server, "root", &["--json", "get", "--session", &s]);
    let got: Json = serde_json::from_str(got.trim()).unwrap();
    assert_eq!(got["identity"]["principal"], "alice", "{got}");
    assert_eq!(got["identity"]["issuer"], "api-key", "{got}");
    drop(daemon);
}
