//! Authentication: turning a request's credential into a verified
//! [`Caller`]. What that caller may do is the machine's decision
//! (`agentsessions_machine::ops::authorize`), never this module's.
//!
//! Invariant: a [`Caller::Verified`] comes out only for a credential that
//! verified — a listed API key digest, a JWT signed by a configured key,
//! or a client certificate the TLS layer verified and the file maps to a
//! principal. Every other request is UNAUTHENTICATED, and no message or
//! log line carries any part of the credential.

pub mod config;
pub mod jwt;

use std::collections::BTreeMap;

use agentsessions_machine::vocab::{Caller, Grant, Principal};
use sha2::{Digest, Sha256};

pub use config::{AuthFile, ConfigError};
pub use jwt::{JwksError, JwtVerifier};

/// The issuer recorded for API key principals.
pub const API_KEY_ISSUER: &str = "api-key";
/// The issuer recorded for client certificate principals.
pub const MTLS_ISSUER: &str = "mtls";

/// Why a request is not authenticated. The texts say what kind of failure
/// it was, never what the credential held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `authorization` metadata and no mapped client certificate.
    #[error("missing credentials: send authorization: Bearer <token>")]
    Missing,
    /// The metadata or token is not well-formed.
    #[error("malformed credentials")]
    Malformed,
    /// No configured key matches.
    #[error("unknown credentials")]
    UnknownKey,
    /// The token's `exp` has passed.
    #[error("token expired")]
    Expired,
    /// The token's `nbf` is in the future.
    #[error("token not yet valid")]
    NotYetValid,
    /// Wrong `iss`.
    #[error("token issuer not accepted")]
    Issuer,
    /// Wrong `aud`.
    #[error("token audience not accepted")]
    Audience,
    /// The signature does not verify.
    #[error("token signature invalid")]
    Signature,
    /// An algorithm outside RS256 and ES256 (`none` among them).
    #[error("token algorithm not accepted (RS256 or ES256)")]
    Algorithm,
    /// The claims cannot be used.
    #[error("token claims invalid: {0}")]
    Claims(&'static str),
    /// A verified client certificate that names no configured principal.
    #[error("client certificate names no configured principal")]
    Certificate,
}

impl AuthError {
    /// The gRPC status for this failure.
    pub fn to_tonic(&self) -> tonic::Status {
        tonic::Status::unauthenticated(self.to_string())
    }
}

/// Verifies credentials; `Off` when no `--auth` file is given.
#[derive(Debug, Default)]
pub enum Authenticator {
    /// Authentication is off: every request is [`Caller::Open`].
    #[default]
    Off,
    /// The configured verifiers.
    On(Box<Verifiers>),
}

/// The configured credentials.
#[derive(Debug)]
pub struct Verifiers {
    keys: BTreeMap<[u8; 32], Principal>,
    jwt: Option<JwtVerifier>,
    mtls: BTreeMap<String, Vec<Grant>>,
    separate_approver: bool,
}

impl Authenticator {
    /// Verifiers for a checked `file` (loads the JWKS file, if any).
    pub fn from_file(file: &AuthFile) -> Result<Self, JwksError> {
        let mut keys = BTreeMap::new();
        for key in &file.api_key {
            let mut digest = [0u8; 32];
            hex::decode_to_slice(key.sha256.to_ascii_lowercase(), &mut digest)
                .expect("AuthFile::check validated the digest");
            let grants = config::parse_grants(&key.roles).expect("AuthFile::check validated");
            let principal = Principal {
                name: key.principal.clone(),
                issuer: API_KEY_ISSUER.to_owned(),
                grants,
                separate_approver: key.separate_approver.unwrap_or(file.separate_approver),
            };
            keys.insert(digest, principal);
        }
        let jwt = file.jwt.as_ref().map(JwtVerifier::new).transpose()?;
        let mtls = file
            .mtls
            .iter()
            .flat_map(|m| m.roles.iter())
            .map(|(p, roles)| {
                let grants = config::parse_grants(roles).expect("AuthFile::check validated");
                (p.clone(), grants)
            })
            .collect();
        Ok(Self::On(Box::new(Verifiers {
            keys,
            jwt,
            mtls,
            separate_approver: file.separate_approver,
        })))
    }

    /// True when credentials are checked.
    pub fn is_on(&self) -> bool {
        matches!(self, Self::On(_))
    }

    /// Re-reads the JWKS file, if one is configured (SIGHUP).
    pub fn reload(&self) -> Option<Result<usize, JwksError>> {
        match self {
            Self::On(v) => v.jwt.as_ref().map(JwtVerifier::reload),
            Self::Off => None,
        }
    }

    /// The caller of a request with `metadata`, over a connection whose
    /// verified client certificate (DER, leaf first) is `peer_cert`.
    pub fn authenticate(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        peer_cert: Option<&[u8]>,
    ) -> Result<Caller, AuthError> {
        let Self::On(v) = self else {
            return Ok(Caller::Open);
        };
        let principal = match metadata.get("authorization") {
            Some(value) => {
                let value = value.to_str().map_err(|_| AuthError::Malformed)?;
                v.bearer(bearer_token(value)?)?
            }
            None => match peer_cert {
                Some(der) if !v.mtls.is_empty() => v.certificate(der)?,
                _ => return Err(AuthError::Missing),
            },
        };
        Ok(Caller::Verified(principal))
    }
}

/// The token of an `authorization: Bearer <token>` value.
fn bearer_token(value: &str) -> Result<&str, AuthError> {
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(token)
}

impl Verifiers {
    fn bearer(&self, token: &str) -> Result<Principal, AuthError> {
        if let Some(jwt) = &self.jwt
            && token.bytes().filter(|b| *b == b'.').count() == 2
        {
            let mut p = jwt.verify(token)?;
            p.separate_approver = self.separate_approver;
            return Ok(p);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.keys.get(&digest).cloned().ok_or(AuthError::UnknownKey)
    }

    fn certificate(&self, der: &[u8]) -> Result<Principal, AuthError> {
        let (_, cert) =
            x509_parser::parse_x509_certificate(der).map_err(|_| AuthError::Certificate)?;
        let mut names: Vec<String> = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                if let x509_parser::extensions::GeneralName::URI(uri) = name {
                    names.push((*uri).to_owned());
                }
            }
        }
        if names.is_empty()
            && let Some(cn) = cert.subject().iter_common_name().next()
            && let Ok(cn) = cn.as_str()
        {
            names.push(cn.to_owned());
        }
        let (name, grants) = names
            .iter()
            .find_map(|n| self.mtls.get_key_value(n))
            .ok_or(AuthError::Certificate)?;
        Ok(Principal {
            name: name.clone(),
            issuer: MTLS_ISSUER.to_owned(),
            grants: grants.clone(),
            separate_approver: self.separate_approver,
        })
    }
}

/// Grants from a JWT claim: an array of `"project:role"` strings.
fn parse_claim_grants(value: &serde_json::Value) -> Result<Vec<Grant>, AuthError> {
    let items = value
        .as_array()
        .ok_or(AuthError::Claims("the roles claim is not an array"))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .and_then(|s| s.parse::<Grant>().ok())
                .ok_or(AuthError::Claims("the roles claim holds a bad grant"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_der(cn: &str, san_uri: Option<&str>) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        if let Some(uri) = san_uri {
            let uri = uri.to_owned().try_into().unwrap();
            params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn authenticator(text: &str) -> Authenticator {
        let file = AuthFile::parse(text).unwrap();
        file.check().unwrap();
        Authenticator::from_file(&file).unwrap()
    }

    #[test]
    fn a_certificate_names_its_san_uri_or_else_its_cn() {
        let auth = authenticator(
            "[mtls]\nroles = { \"spiffe://x/a\" = [\"p:reader\"], \"agent-b\" = [\"p:writer\"] }\n",
        );
        let none = tonic::metadata::MetadataMap::new();
        let name = |der: &[u8]| match auth.authenticate(&none, Some(der)) {
            Ok(Caller::Verified(p)) => Ok((p.name, p.issuer)),
            Ok(Caller::Open) => panic!("auth is on"),
            Err(e) => Err(e),
        };
        let mtls = MTLS_ISSUER.to_owned();
        let by_uri = cert_der("agent-b", Some("spiffe://x/a"));
        assert_eq!(name(&by_uri), Ok(("spiffe://x/a".into(), mtls.clone())));
        assert_eq!(
            name(&cert_der("agent-b", None)),
            Ok(("agent-b".into(), mtls))
        );
        // A SAN URI that is not listed does not fall back to the CN.
        let unlisted = cert_der("agent-b", Some("spiffe://x/other"));
        assert_eq!(name(&unlisted), Err(AuthError::Certificate));
        assert_eq!(
            auth.authenticate(&none, None).err(),
            Some(AuthError::Missing)
        );
    }

    #[test]
    fn a_bearer_is_checked_before_the_certificate_and_keys_match_exactly() {
        let digest = hex::encode(Sha256::digest(b"k1"));
        let auth = authenticator(&format!(
            "[[api_key]]\nprincipal = \"a\"\nsha256 = \"{digest}\"\nroles = [\"*:reader\"]\n\
             [mtls]\nroles = {{ \"agent-b\" = [\"p:writer\"] }}\n"
        ));
        let with = |value: &str| {
            let mut m = tonic::metadata::MetadataMap::new();
            m.insert("authorization", value.parse().unwrap());
            m
        };
        let cert = cert_der("agent-b", None);
        let caller = auth.authenticate(&with("Bearer k1"), Some(&cert)).unwrap();
        assert!(matches!(caller, Caller::Verified(p) if p.name == "a"));
        assert!(matches!(
            auth.authenticate(&with("bearer  k1 "), None),
            Ok(Caller::Verified(_))
        ));
        for bad in ["Bearer k2", "Bearer k1x", "Bearer K1"] {
            assert_eq!(
                auth.authenticate(&with(bad), Some(&cert)).err(),
                Some(AuthError::UnknownKey),
                "{bad}: a bad bearer does not fall back to the certificate"
            );
        }
        for malformed in ["k1", "Bearer", "Basic k1"] {
            assert_eq!(
                auth.authenticate(&with(malformed), None).err(),
                Some(AuthError::Malformed),
                "{malformed}"
            );
        }
        assert!(matches!(
            Authenticator::Off.authenticate(&with("garbage"), None),
            Ok(Caller::Open)
        ));
    }
}
