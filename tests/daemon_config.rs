//! `agentsessionsd --config FILE` and `--print-config`, run as the real
//! binary: every flag can come from the file, a flag or an environment
//! variable beats the file, an unknown key is an error naming it, secrets
//! are redacted, and the printed configuration loads back to itself.

use std::path::Path;
use std::process::{Command, Output};

const DAEMON: &str = env!("CARGO_BIN_EXE_agentsessionsd");

fn daemon(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(DAEMON);
    cmd.args(args)
        .env_remove("AGENTSESSIONS_JOURNAL_CA")
        .env_remove("MODEL_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env("RUST_BACKTRACE", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run agentsessionsd")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The `key = value` line of `key` in a printed configuration, and the
/// source noted after it.
fn setting<'a>(printed: &'a str, key: &str) -> (&'a str, &'a str) {
    let line = printed
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in\n{printed}"));
    let (value, source) = line.rsplit_once(" # ").unwrap();
    (value[key.len() + 3..].trim_end(), source)
}

fn printed(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = daemon(args, env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn an_unknown_key_or_a_bad_value_refuses_to_start_and_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        (
            "addr = \"127.0.0.1:0\"\nmetrics-adr = \"127.0.0.1:9464\"\n",
            "unknown key \"metrics-adr\"",
        ),
        ("config = \"other.toml\"\n", "unknown key \"config\""),
        (
            "insecure-listen = \"yes\"\n",
            "insecure-listen: want true or false",
        ),
        ("addr = [\"a\", \"b\"]\n", "addr: want one string or number"),
        ("addr = \n", "--config"),
    ] {
        let file = write(dir.path(), "bad.toml", text);
        let out = daemon(&["--config", &file, "--print-config"], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text:?} was accepted");
        assert!(stderr.contains(want), "{text:?}: {stderr}");
        assert!(out.stdout.is_empty(), "nothing printed for a refused file");
    }
    // A value the flag itself refuses is refused as the flag would be.
    let file = write(dir.path(), "bad.toml", "max-in-flight = 0\n");
    let out = daemon(&["--config", &file, "--print-config"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-in-flight"));
}

#[test]
fn flags_and_environment_beat_the_file_which_beats_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "d.toml",
        "addr = \"127.0.0.1:7001\"\n\
         metrics_addr = \"127.0.0.1:7002\"\n\
         console-addr = \"127.0.0.1:7003\"\n\
         journal-ca = \"/from/file.pem\"\n\
         harness = [\"a=127.0.0.1:5000\", \"b=127.0.0.1:5001\"]\n\
         model = \"gpt-test\"\n\
         max-in-flight = 64\n\
         insecure-listen = true\n",
    );
    let out = printed(
        &[
            "--config",
            &file,
            "--print-config",
            "--addr",
            "127.0.0.1:7101",
        ],
        &[("AGENTSESSIONS_JOURNAL_CA", "/from/env.pem")],
    );
    assert_eq!(setting(&out, "addr"), ("\"127.0.0.1:7101\"", "flag"));
    assert_eq!(
        setting(&out, "metrics-addr"),
        ("\"127.0.0.1:7002\"", "file")
    );
    assert_eq!(
        setting(&out, "console-addr"),
        ("\"127.0.0.1:7003\"", "file")
    );
    assert_eq!(
        setting(&out, "journal-ca"),
        ("\"/from/env.pem\"", "environment")
    );
    assert_eq!(
        setting(&out, "harness"),
        ("[\"a=127.0.0.1:5000\", \"b=127.0.0.1:5001\"]", "file")
    );
    assert_eq!(setting(&out, "max-in-flight"), ("64", "file"));
    assert_eq!(setting(&out, "insecure-listen"), ("true", "file"));
    assert_eq!(setting(&out, "project"), ("\"default\"", "default"));

    // A repeatable flag on the command line replaces the file's list.
    let out = printed(
        &[
            "--config",
            &file,
            "--print-config",
            "--harness",
            "c=127.0.0.1:6000",
        ],
        &[],
    );
    assert_eq!(setting(&out, "harness"), ("[\"c=127.0.0.1:6000\"]", "flag"));
}

#[test]
fn secrets_are_redacted_and_the_printed_file_loads_back_to_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "d.toml",
        "journal = \"postgres://app:hunter2@db.internal:5432/sessions?sslmode=require\"\n\
         model-base-url = \"https://u:tok3n@llm.internal/v1\"\n\
         retain-completed = \"30d\"\n\
         workers = 2\n",
    );
    let first = printed(
        &["--config", &file, "--print-config"],
        &[("MODEL_API_KEY", "sk-very-secret")],
    );
    for secret in ["hunter2", "tok3n", "sk-very-secret"] {
        assert!(!first.contains(secret), "{secret} printed:\n{first}");
    }
    assert_eq!(
        setting(&first, "journal").0,
        "\"postgres://app:REDACTED@db.internal:5432/sessions?sslmode=require\""
    );
    assert!(first.contains("# model API key: REDACTED (from MODEL_API_KEY)"));

    // Loading the printed file gives the same settings (sources aside).
    let again = write(dir.path(), "again.toml", &first);
    let second = printed(&["--config", &again, "--print-config"], &[]);
    let values = |p: &str| -> Vec<String> {
        p.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                l.rsplit_once(" # ")
                    .map_or(l, |(v, _)| v)
                    .trim_end()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(values(&first), values(&second));
}

#[test]
fn print_config_never_shows_a_postgres_password_in_any_form_the_parser_accepts() {
    for (url, secret) in [
        ("postgres://u:s3/cretB@db/x", "cretB"),
        ("postgres://u:s3#cretB@db/x", "cretB"),
        ("postgres://u:s3?cretB@db/x", "cretB"),
        ("postgres://u@db/x?pass%77ord=hunter2", "hunter2"),
        (
            "postgres://u@db/x?sslpassword=a&password=hunter2",
            "hunter2",
        ),
    ] {
        let out = printed(&["--print-config", "--journal", url], &[]);
        assert!(!out.contains(secret), "{url}: printed\n{out}");
        assert!(!out.contains("s3"), "{url}: printed\n{out}");
        let (journal, source) = setting(&out, "journal");
        assert_eq!(source, "flag");
        assert!(
            journal.contains("REDACTED") || journal.contains("<unparsable, redacted>"),
            "{url}: {journal}"
        );
    }
}

#[test]
fn notification_settings_load_from_the_file_and_their_secrets_are_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "n.toml",
        "notify = [\"https://hooks.slack.com/services/T0/B0/webhookkey\", \"http://relay.internal:9009/hook\"]\n\
         notify-secret = \"signing-secret\"\n\
         notify-format = \"slack\"\n\
         approval-timeout = \"30m\"\n\
         tool-policy = [\"fs__write_file=approval:1h\"]\n",
    );
    let out = printed(&["--config", &file, "--print-config"], &[]);
    for secret in ["webhookkey", "signing-secret", "/services/"] {
        assert!(!out.contains(secret), "{secret} printed:\n{out}");
    }
    assert_eq!(
        setting(&out, "notify"),
        (
            "[\"https://hooks.slack.com/REDACTED\", \"http://relay.internal:9009/REDACTED\"]",
            "file"
        )
    );
    assert_eq!(setting(&out, "notify-secret").0, "\"REDACTED\"");
    assert_eq!(setting(&out, "notify-format").0, "\"slack\"");
    assert_eq!(setting(&out, "approval-timeout").0, "\"30m\"");
}

#[test]
fn an_approval_wait_too_short_to_read_or_a_bad_notify_url_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let journal = journal.to_str().unwrap();
    let base = ["--addr", "127.0.0.1:0", "--journal", journal];
    for (extra, want) in [
        (&["--approval-timeout", "100ms"][..], "--approval-timeout"),
        (
            &["--tool-policy", "fs__*=approval:soon"][..],
            "approval:DURATION",
        ),
        (
            &["--notify", "ftp://example.com/x"][..],
            "http:// or https://",
        ),
        (&["--notify-format", "xml"][..], "json or slack"),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let out = daemon(&args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} started");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
}
