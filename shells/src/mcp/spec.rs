//! `--mcp NAME=…` values: which MCP servers the host offers, and how to
//! reach each.
//!
//! Invariant: a parsed spec is usable as is. The name fits the tool names
//! models accept once prefixed to a tool (`NAME__TOOL`, `[a-z0-9-]{1,32}`,
//! no `_`, so the first `__` always ends it), a stdio target has a program,
//! and an HTTP target is an `http://` URL without whitespace.
//!
//! `https://` is refused here, at startup, rather than failing on every
//! connection attempt: rmcp's HTTP client (reqwest 0.13) is built without
//! TLS, since its TLS needs aws-lc (cmake) or a process-wide rustls
//! provider. A TLS-terminating proxy on loopback serves meanwhile.

use std::str::FromStr;

/// Longest server name; with `__` and a tool name the whole stays within
/// the 64 characters model APIs allow for a function name.
pub const MAX_SERVER_NAME: usize = 32;

/// One `--mcp NAME=…` value, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: String,
    pub target: Target,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio { program: String, args: Vec<String> },
    /// A streamable HTTP endpoint.
    Http { url: String },
}

/// Why an `--mcp` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("expected NAME=COMMAND or NAME=URL")]
    MissingName,
    #[error("server name must match [a-z0-9-]{{1,32}}")]
    BadName,
    #[error("server {name} has no command or url")]
    EmptyTarget { name: String },
    #[error("server {name}: unbalanced quotes or trailing backslash")]
    BadQuoting { name: String },
    #[error("server {name}: url contains whitespace")]
    BadUrl { name: String },
    /// The HTTP client is built without TLS (see the module docs).
    #[error("server {name}: https is not supported; use http to a local TLS-terminating proxy")]
    HttpsUnsupported { name: String },
    #[error("server {name} is given twice")]
    Duplicate { name: String },
}

impl FromStr for ServerSpec {
    type Err = SpecError;

    /// `fs=npx -y pkg /dir` (the command split as a POSIX shell would) or
    /// `web=http://127.0.0.1:3001/mcp`.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (name, rest) = s.split_once('=').ok_or(SpecError::MissingName)?;
        if !valid_name(name) {
            return Err(SpecError::BadName);
        }
        let name = name.to_owned();
        let rest = rest.trim();
        if rest.is_empty() {
            return Err(SpecError::EmptyTarget { name });
        }
        let lower = rest.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(SpecError::HttpsUnsupported { name });
        }
        if lower.starts_with("http://") {
            if rest.chars().any(char::is_whitespace) {
                return Err(SpecError::BadUrl { name });
            }
            let target = Target::Http {
                url: rest.to_owned(),
            };
            return Ok(Self { name, target });
        }
        let mut words =
            shlex::split(rest).ok_or_else(|| SpecError::BadQuoting { name: name.clone() })?;
        if words.is_empty() || words[0].is_empty() {
            return Err(SpecError::EmptyTarget { name });
        }
        let program = words.remove(0);
        Ok(Self {
            name,
            target: Target::Stdio {
                program,
                args: words,
            },
        })
    }
}

impl ServerSpec {
    /// Refuses a list that names one server twice (the hub would keep only
    /// the first); meant for flag parsing, before [`super::McpHub::start`].
    pub fn check_unique(specs: &[ServerSpec]) -> Result<(), SpecError> {
        let mut seen = std::collections::HashSet::new();
        for spec in specs {
            if !seen.insert(spec.name.as_str()) {
                return Err(SpecError::Duplicate {
                    name: spec.name.clone(),
                });
            }
        }
        Ok(())
    }
}

/// `[a-z0-9-]{1,32}`.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_SERVER_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(program: &str, args: &[&str]) -> Target {
        Target::Stdio {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn a_command_is_split_as_a_shell_would() {
        let spec: ServerSpec = "fs=npx -y '@scope/pkg' \"/my dir\" a\\ b".parse().unwrap();
        assert_eq!(spec.name, "fs");
        assert_eq!(
            spec.target,
            stdio("npx", &["-y", "@scope/pkg", "/my dir", "a b"])
        );
    }

    #[test]
    fn an_http_url_is_an_http_target() {
        let spec: ServerSpec = "web=http://127.0.0.1:3001/mcp".parse().unwrap();
        assert_eq!(
            spec.target,
            Target::Http {
                url: "http://127.0.0.1:3001/mcp".into()
            }
        );
        let spec: ServerSpec = "web=HTTP://127.0.0.1/mcp".parse().unwrap();
        assert!(matches!(spec.target, Target::Http { .. }));
        assert_eq!(
            "web=HTTPS://example.invalid/mcp".parse::<ServerSpec>(),
            Err(SpecError::HttpsUnsupported { name: "web".into() })
        );
    }

    #[test]
    fn only_the_first_equals_sign_ends_the_name() {
        let spec: ServerSpec = "e=env A=1 prog".parse().unwrap();
        assert_eq!(spec.target, stdio("env", &["A=1", "prog"]));
    }

    #[test]
    fn bad_values_are_refused_with_typed_errors() {
        let err = |s: &str| s.parse::<ServerSpec>().unwrap_err();
        assert_eq!(err("no-equals"), SpecError::MissingName);
        assert_eq!(err("=prog"), SpecError::BadName);
        assert_eq!(err("Fs=prog"), SpecError::BadName);
        assert_eq!(err("f_s=prog"), SpecError::BadName);
        assert_eq!(err(&format!("{}=prog", "a".repeat(33))), SpecError::BadName);
        assert!(matches!(err("fs="), SpecError::EmptyTarget { .. }));
        assert!(matches!(err("fs=   "), SpecError::EmptyTarget { .. }));
        assert!(matches!(err("fs=''"), SpecError::EmptyTarget { .. }));
        assert!(matches!(err("fs=prog 'open"), SpecError::BadQuoting { .. }));
        assert!(matches!(err("w=http://a b"), SpecError::BadUrl { .. }));
        assert!("a-1=prog".parse::<ServerSpec>().is_ok());
        assert!(
            format!("{}=prog", "a".repeat(32))
                .parse::<ServerSpec>()
                .is_ok()
        );
    }

    #[test]
    fn a_server_named_twice_is_refused() {
        let specs: Vec<ServerSpec> = ["a=x", "b=y", "a=z"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            ServerSpec::check_unique(&specs),
            Err(SpecError::Duplicate { name: "a".into() })
        );
        assert_eq!(ServerSpec::check_unique(&specs[..2]), Ok(()));
    }
}
