//! `agentsessionsd --config FILE`: a TOML file that carries any flag, and
//! `--print-config`, the effective settings with secrets redacted.
//!
//! The file's keys are the flags' long names (`metrics-addr`, or
//! `metrics_addr`); its values become those flags, placed before the
//! command line. Precedence is flag > environment variable > file >
//! default: a key is skipped when the command line names its flag or its
//! environment variable is set. Invariant: a key that is not a flag of the
//! command is an error naming it, never ignored.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};

/// Flags that never come from a file.
const NOT_IN_FILE: [&str; 4] = ["help", "version", "config", "print-config"];

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("--config {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The file is not TOML.
    #[error("--config {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// A key that no flag has.
    #[error("--config {path}: unknown key {key:?}")]
    UnknownKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
    },
    /// A value of the wrong shape for its flag.
    #[error("--config {path}: {key}: {reason}")]
    BadValue {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// The arguments `path` contributes to `cmd`, given the command line
/// `cli` (without the program name), to be placed before `cli`.
pub fn file_args(
    cmd: &Command,
    path: &Path,
    cli: &[OsString],
) -> Result<Vec<OsString>, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: shown.clone(),
            reason: e.message().to_owned(),
        })?;
    let on_cli = named_on(cli);
    let mut out = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let bad = |reason: &str| ConfigError::BadValue {
            path: shown.clone(),
            key: key.clone(),
            reason: reason.to_owned(),
        };
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .filter(|_| !NOT_IN_FILE.contains(&long.as_str()))
            .ok_or_else(|| ConfigError::UnknownKey {
                path: shown.clone(),
                key: key.clone(),
            })?;
        let from_env = arg
            .get_env()
            .is_some_and(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        if on_cli.contains(&long) || from_env {
            continue;
        }
        let flag = format!("--{long}");
        match arg.get_action() {
            ArgAction::SetTrue => match value {
                toml::Value::Boolean(true) => out.push(flag.into()),
                toml::Value::Boolean(false) => {}
                _ => return Err(bad("want true or false")),
            },
            ArgAction::Append => {
                let items = match value {
                    toml::Value::Array(items) => items.iter().collect(),
                    one => vec![one],
                };
                for item in items {
                    out.push(flag.clone().into());
                    out.push(
                        scalar(item)
                            .ok_or_else(|| bad("want strings or numbers"))?
                            .into(),
                    );
                }
            }
            _ => {
                let v = scalar(value).ok_or_else(|| bad("want one string or number"))?;
                out.push(format!("{flag}={v}").into());
            }
        }
    }
    Ok(out)
}

/// A scalar TOML value as the flag's text.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The long flag names that `cli` gives (`--name value` or `--name=value`).
pub fn named_on(cli: &[OsString]) -> BTreeSet<String> {
    cli.iter()
        .filter_map(|a| a.to_str()?.strip_prefix("--"))
        .map(|a| a.split_once('=').map_or(a, |(name, _)| name).to_owned())
        .collect()
}

/// The effective settings as a TOML file `--config` accepts: every flag
/// with its value and where it came from; secrets in values redacted.
pub fn render(cmd: &Command, matches: &ArgMatches, from_file: &BTreeSet<String>) -> String {
    let mut out = String::from("# agentsessionsd effective configuration\n");
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if NOT_IN_FILE.contains(&long) {
            continue;
        }
        let id = arg.get_id().as_str();
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) if from_file.contains(long) => "file",
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "environment",
            Some(ValueSource::DefaultValue) => "default",
            _ => "unset",
        };
        let values: Vec<String> = matches
            .get_raw(id)
            .map(|vs| vs.map(|v| shown(long, &v.to_string_lossy())).collect())
            .unwrap_or_default();
        let line = match (arg.get_action(), values.as_slice()) {
            (ArgAction::SetTrue, [v]) => format!("{long} = {v}"),
            (ArgAction::Append, vs) if !vs.is_empty() => {
                let items: Vec<String> = vs.iter().map(|v| quote(v)).collect();
                format!("{long} = [{}]", items.join(", "))
            }
            (_, [v]) => format!("{long} = {}", quote(v)),
            _ => format!("# {long} ="),
        };
        out.push_str(&format!("{line:<60} # {source}\n"));
    }
    out
}

/// A flag's value as printed: a notification secret never, a webhook
/// URL only up to its host (an incoming webhook's path is its key), any
/// other value through [`redact`].
fn shown(long: &str, value: &str) -> String {
    match long {
        "notify-secret" => REDACTED.to_owned(),
        "notify" => match value.split_once("://") {
            Some((scheme, rest)) => {
                let host = rest.split(['/', '?']).next().unwrap_or("");
                let host = host.rsplit('@').next().unwrap_or(host);
                format!("{scheme}://{host}/{REDACTED}")
            }
            None => REDACTED.to_owned(),
        },
        _ => redact(value),
    }
}

/// A value as TOML: a whole number bare (the file reads it back as the
/// same text), anything else a string.
fn quote(v: &str) -> String {
    match v.parse::<i64>() {
        Ok(n) if n.to_string() == v => v.to_owned(),
        _ => toml::Value::String(v.to_owned()).to_string(),
    }
}

pub use super::redact::{REDACTED, redact};

/// The value of `--config` on the raw command line `cli`, if given (read
/// before the full parse, whose checks may need the file's flags).
pub fn config_path(cli: &[OsString]) -> Option<OsString> {
    let mut args = cli.iter();
    while let Some(a) = args.next() {
        if a == OsStr::new("--") {
            return None;
        }
        if a == OsStr::new("--config") {
            return args.next().cloned();
        }
        if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            return Some(v.into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_named_on_the_command_line_are_found_in_both_spellings() {
        let cli: Vec<OsString> = ["--addr", "x", "--journal=y", "z", "-v"]
            .iter()
            .map(OsString::from)
            .collect();
        let named = named_on(&cli);
        assert_eq!(named, ["addr", "journal"].map(String::from).into());
    }

    #[test]
    fn the_config_path_is_found_in_both_spellings_and_not_past_a_double_dash() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            config_path(&os(&["--addr", "a", "--config", "f.toml"])),
            Some("f.toml".into())
        );
        assert_eq!(
            config_path(&os(&["--config=g.toml"])),
            Some("g.toml".into())
        );
        assert_eq!(config_path(&os(&["--", "--config", "f"])), None);
    }
}
