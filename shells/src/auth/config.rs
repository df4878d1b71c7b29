//! The `--auth` file: who may present which credential, and the roles
//! each credential carries. Parsed strictly: an unknown key, a malformed
//! digest or grant is a startup error naming it.

use std::path::{Path, PathBuf};

use agentsessions_machine::vocab::Grant;
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    /// Static API keys, stored as digests only.
    #[serde(default)]
    pub api_key: Vec<ApiKey>,
    /// Bearer JWTs verified against a JWKS file.
    pub jwt: Option<JwtSection>,
    /// Verified client certificates mapped to principals.
    pub mtls: Option<MtlsSection>,
    /// The default for every principal: the creator of a session may not
    /// approve its calls.
    #[serde(default)]
    pub separate_approver: bool,
}

/// One static key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The principal the key stands for.
    pub principal: String,
    /// Lowercase hex of SHA-256 over the key's bytes.
    pub sha256: String,
    /// `"project:role"` grants.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Overrides the file's `separate_approver` for this principal.
    pub separate_approver: Option<bool>,
}

/// Bearer JWT settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtSection {
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud` (one of).
    pub audience: String,
    /// The JWKS file (RS256 and ES256 keys); relative to the auth file.
    pub jwks_file: PathBuf,
    /// The claim holding an array of `"project:role"` grants.
    #[serde(default = "default_roles_claim")]
    pub roles_claim: String,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
}

fn default_roles_claim() -> String {
    "agentsessions_roles".to_owned()
}

fn default_leeway() -> u64 {
    30
}

/// Client certificate settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MtlsSection {
    /// Principal (a SAN URI, or the subject CN when there is none) to
    /// grants. A verified certificate naming no listed principal is refused.
    #[serde(default)]
    pub roles: std::collections::BTreeMap<String, Vec<String>>,
}

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable.
    #[error("read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, or an unknown or mistyped key.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A value that parses but cannot be right.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl AuthFile {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut file = Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })?;
        file.check().map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        if let Some(jwt) = &mut file.jwt
            && jwt.jwks_file.is_relative()
        {
            let dir = path.parent().unwrap_or(Path::new("."));
            jwt.jwks_file = dir.join(&jwt.jwks_file);
        }
        Ok(file)
    }

    /// Parses TOML text (no checks beyond the schema).
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.message().to_owned() + &span_hint(text, e.span()))
    }

    /// The checks the schema cannot express.
    pub fn check(&self) -> Result<(), String> {
        let mut digests = std::collections::BTreeSet::new();
        for (i, key) in self.api_key.iter().enumerate() {
            let at = format!("api_key[{i}] ({:?})", key.principal);
            if key.principal.is_empty() {
                return Err(format!("api_key[{i}]: principal is empty"));
            }
            let digest = key.sha256.to_ascii_lowercase();
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("{at}: sha256 must be 64 hex digits"));
            }
            if !digests.insert(digest) {
                return Err(format!("{at}: the same key digest is listed twice"));
            }
            parse_grants(&key.roles).map_err(|e| format!("{at}: {e}"))?;
        }
        if let Some(jwt) = &self.jwt {
            if jwt.issuer.is_empty() || jwt.audience.is_empty() {
                return Err("jwt: issuer and audience are required".to_owned());
            }
            if jwt.roles_claim.is_empty() {
                return Err("jwt: roles_claim is empty".to_owned());
            }
        }
        if let Some(mtls) = &self.mtls {
            for (principal, roles) in &mtls.roles {
                parse_grants(roles).map_err(|e| format!("mtls.roles {principal:?}: {e}"))?;
            }
        }
        if self.api_key.is_empty() && self.jwt.is_none() && self.mtls.is_none() {
            return Err("no credential is configured ([[api_key]], [jwt] or [mtls])".to_owned());
        }
        Ok(())
    }
}

/// Parses `"project:role"` strings.
pub fn parse_grants(roles: &[String]) -> Result<Vec<Grant>, String> {
    roles
        .iter()
        .map(|r| r.parse::<Grant>().map_err(|e| e.to_string()))
        .collect()
}

fn span_hint(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else {
        return String::new();
    };
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    format!(" (line {line})")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

    #[test]
    fn a_full_file_parses() {
        let f = AuthFile::parse(&format!(
            r#"
separate_approver = true
[[api_key]]
principal = "alice"
sha256 = "{KEY}"
roles = ["default:writer", "*:reader"]

[jwt]
issuer = "https://issuer.example"
audience = "agentsessions"
jwks_file = "jwks.json"

[mtls]
roles = {{ "spiffe://example/agent-1" = ["default:writer"] }}
"#
        ))
        .unwrap();
        f.check().unwrap();
        assert_eq!(f.api_key[0].principal, "alice");
        assert_eq!(f.jwt.as_ref().unwrap().roles_claim, "agentsessions_roles");
        assert!(f.separate_approver);
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let e = AuthFile::parse("[[api_key]]\nprincipal='a'\nsha256='x'\nrole=[]\n").unwrap_err();
        assert!(e.contains("role"), "{e}");
        let e = AuthFile::parse("[jwks]\n").unwrap_err();
        assert!(e.contains("jwks"), "{e}");
    }

    #[test]
    fn bad_digests_grants_and_empty_files_are_refused() {
        let bad = |text: &str| AuthFile::parse(text).unwrap().check().unwrap_err();
        assert!(bad("[[api_key]]\nprincipal='a'\nsha256='abc'\n").contains("64 hex"));
        let grant = bad(&format!(
            "[[api_key]]\nprincipal='a'\nsha256='{KEY}'\nroles=['default:owner']\n"
        ));
        assert!(grant.contains("unknown role"), "{grant}");
        let twice = bad(&format!(
            "[[api_key]]\nprincipal='a'\nsha256='{KEY}'\n[[api_key]]\nprincipal='b'\nsha256='{KEY}'\n"
        ));
        assert!(twice.contains("twice"), "{twice}");
        assert!(bad("").contains("no credential"));
    }
}
