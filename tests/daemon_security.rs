//! The daemon's security settings from the outside: startup refusals
//! (plaintext off loopback, a bad `--auth` file), the registry behind TLS
//! and the admin role, a JWKS file re-read on SIGHUP, and a log that names
//! principals but never credentials.

#[path = "support/cli.rs"]
mod cli;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use cli::{DAEMON, Daemon, agentctl};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use sha2::{Digest, Sha256};

const ROOT_KEY: &str = "root-key-of-the-security-test";
const READER_KEY: &str = "reader-key-of-the-security-test";

fn digest(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn auth_file(dir: &Path, jwt: bool) -> String {
    let mut text = format!(
        "[[api_key]]\nprincipal = \"root\"\nsha256 = \"{}\"\nroles = [\"*:admin\"]\n\n\
         [[api_key]]\nprincipal = \"rita\"\nsha256 = \"{}\"\nroles = [\"*:reader\"]\n",
        digest(ROOT_KEY),
        digest(READER_KEY)
    );
    if jwt {
        text += "\n[jwt]\nissuer = \"https://issuer.test\"\naudience = \"agentsessions\"\n\
                 jwks_file = \"jwks.json\"\n";
    }
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Runs the daemon expecting it to refuse to start; returns its stderr.
fn refused(args: &[&str]) -> String {
    let mut child = Command::new(DAEMON)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "{args:?} started");
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return err;
        }
        assert!(Instant::now() < deadline, "{args:?} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn plaintext_off_loopback_and_bad_auth_files_refuse_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db").display().to_string();
    let err = refused(&["--addr", "0.0.0.0:0", "--journal", &journal]);
    assert!(err.contains("--insecure-listen"), "{err}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[[api_key]]\nprincipal = \"a\"\nsha256 = \"{}\"\nrolez = []\n",
            digest("k")
        ),
    )
    .unwrap();
    let err = refused(&[
        "--addr",
        "127.0.0.1:0",
        "--journal",
        &journal,
        "--auth",
        bad.to_str().unwrap(),
    ]);
    assert!(err.contains("rolez"), "names the unknown key: {err}");
    std::fs::write(&bad, "[[api_key]]\nprincipal = \"a\"\nsha256 = \"abc\"\n").unwrap();
    let err = refused(&[
        "--addr",
        "127.0.0.1:0",
        "--journal",
        &journal,
        "--auth",
        bad.to_str().unwrap(),
    ]);
    assert!(err.contains("64 hex"), "{err}");

    // The same address with the explicit flag starts.
    let mut child = Command::new(DAEMON)
        .args([
            "--addr",
            "0.0.0.0:0",
            "--insecure-listen",
            "--journal",
            &journal,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("agentsessionsd listening on 0.0.0.0:"),
        "{line}"
    );
}

fn ca(dir: &Path) -> Issuer<'static, KeyPair> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "test CA");
    std::fs::write(dir.join("ca.pem"), params.self_signed(&key).unwrap().pem()).unwrap();
    Issuer::new(params, key)
}

fn leaf(dir: &Path, name: &str, issuer: &Issuer<'_, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn harness_list(dir: &Path, registry: &str, token: Option<&str>) -> Option<i32> {
    let ca = dir.join("ca.pem").display().to_string();
    let server = format!("https://{registry}");
    let mut args = vec!["--tls-ca", &ca];
    if let Some(t) = token {
        args.extend(["--token", t]);
    }
    args.extend(["harness", "--registry", &server, "list"]);
    agentctl(dir, &args).status.code()
}

#[test]
fn the_registry_serves_tls_and_only_admins() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let issuer = ca(d);
    leaf(d, "server", &issuer);
    let path = |f: &str| d.join(f).display().to_string();
    let daemon = Daemon::start_in(
        d,
        d.join("j.db").as_os_str(),
        &[
            "--registry-tls-cert",
            &path("server.pem"),
            "--registry-tls-key",
            &path("server.key"),
            "--auth",
            &auth_file(d, false),
        ],
    );
    assert_eq!(harness_list(d, &daemon.registry, Some(ROOT_KEY)), Some(0));
    assert_eq!(
        harness_list(d, &daemon.registry, Some(READER_KEY)),
        Some(10 + 7),
        "a reader is refused the registry (PERMISSION_DENIED)"
    );
    assert_eq!(
        harness_list(d, &daemon.registry, None),
        Some(10 + 16),
        "no credential (UNAUTHENTICATED)"
    );
}

/// A P-256 key and its JWK (kid `kid`).
fn signing_key(kid: &str) -> (jsonwebtoken::EncodingKey, serde_json::Value) {
    let key = KeyPair::generate().unwrap();
    let raw = key.public_key_raw();
    assert_eq!((raw.len(), raw[0]), (65, 4), "an uncompressed P-256 point");
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256",
        "x": b64(&raw[1..33]), "y": b64(&raw[33..])});
    let der = key.serialize_der();
    (jsonwebtoken::EncodingKey::from_ec_der(&der), jwk)
}

fn token(key: &jsonwebtoken::EncodingKey, kid: &str) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({"iss": "https://issuer.test", "aud": "agentsessions",
        "sub": "jo", "exp": now + 600, "agentsessions_roles": ["*:reader"]});
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

fn list(dir: &Path, server: &str, token: &str) -> Option<i32> {
    agentctl(dir, &["--server", server, "--token", token, "list"])
        .status
        .code()
}

#[test]
fn sighup_rereads_the_jwks_file_and_the_log_never_holds_a_credential() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (old_key, old_jwk) = signing_key("old");
    let (new_key, new_jwk) = signing_key("new");
    let jwks = |keys: Vec<serde_json::Value>| {
        std::fs::write(
            d.join("jwks.json"),
            serde_json::json!({ "keys": keys }).to_string(),
        )
        .unwrap();
    };
    jwks(vec![old_jwk.clone()]);
    let log_path = d.join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let auth = auth_file(d, true);
    let daemon = Daemon::start_logging(
        d,
        d.join("j.db").as_os_str(),
        &["--auth", &auth],
        Stdio::from(log),
    );
    let server = daemon.sessions.clone();
    let (old, new) = (token(&old_key, "old"), token(&new_key, "new"));
    assert_eq!(list(d, &server, &old), Some(0));
    assert_eq!(
        list(d, &server, &new),
        Some(10 + 16),
        "not in the key set yet"
    );
    assert_eq!(list(d, &server, "not-a-key"), Some(10 + 16));

    // A bad file keeps the old keys; a good one replaces them.
    std::fs::write(d.join("jwks.json"), "not json").unwrap();
    daemon.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        list(d, &server, &old),
        Some(0),
        "a bad JWKS keeps the old keys"
    );
    jwks(vec![new_jwk]);
    daemon.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while list(d, &server, &new) != Some(0) {
        assert!(Instant::now() < deadline, "the new key never took effect");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(list(d, &server, &old), Some(10 + 16), "the old key is gone");
    assert_eq!(list(d, &server, READER_KEY), Some(0));
    // The environment carries the credential as well as --token does.
    let by_env = Command::new(cli::AGENTCTL)
        .args(["--server", &server, "list"])
        .env("AGENTSESSIONS_TOKEN", READER_KEY)
        .current_dir(d)
        .output()
        .unwrap();
    assert!(by_env.status.success(), "{}", cli::stderr(&by_env));
    drop(daemon);

    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        text.contains("unauthenticated"),
        "refusals are logged: {text}"
    );
    assert!(text.contains("rita"), "principals are logged");
    for secret in [old.as_str(), new.as_str(), READER_KEY, "not-a-key"] {
        let probe = &secret[..secret.len().min(16)];
        assert!(
            !text.contains(probe),
            "the log holds a credential ({probe})"
        );
    }
}
