//! Bearer JWTs: RS256 or ES256, signed by a key of a JWKS file, with the
//! configured issuer and audience, inside their validity window.
//!
//! Invariant: a token is accepted only if its signature verifies under a
//! key of the current key set with an algorithm from the allow list; the
//! token's own `alg` can narrow the choice, never widen it (`none` and
//! HMAC are never accepted).

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::config::JwtSection;
use super::{AuthError, parse_claim_grants};
use agentsessions_machine::host::Principal;

/// Verifies bearer JWTs against the configured key set.
#[derive(Debug)]
pub struct JwtVerifier {
    issuer: String,
    audience: String,
    roles_claim: String,
    leeway: u64,
    jwks_file: PathBuf,
    keys: RwLock<JwkSet>,
}

/// The signing algorithms a token may use.
const ALLOWED: [Algorithm; 2] = [Algorithm::RS256, Algorithm::ES256];

/// Why the key set cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// Unreadable.
    #[error("read {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// Not a JWKS document.
    #[error("{0}: not a JWKS document: {1}")]
    Parse(PathBuf, serde_json::Error),
}

fn read_jwks(path: &Path) -> Result<JwkSet, JwksError> {
    let text = std::fs::read_to_string(path).map_err(|e| JwksError::Read(path.to_owned(), e))?;
    serde_json::from_str(&text).map_err(|e| JwksError::Parse(path.to_owned(), e))
}

impl JwtVerifier {
    /// Loads the key set named by `section`.
    pub fn new(section: &JwtSection) -> Result<Self, JwksError> {
        let keys = read_jwks(&section.jwks_file)?;
        Ok(Self {
            issuer: section.issuer.clone(),
            audience: section.audience.clone(),
            roles_claim: section.roles_claim.clone(),
            leeway: section.leeway_seconds,
            jwks_file: section.jwks_file.clone(),
            keys: RwLock::new(keys),
        })
    }

    /// Re-reads the key set (on SIGHUP); a bad file keeps the old set.
    pub fn reload(&self) -> Result<usize, JwksError> {
        let keys = read_jwks(&self.jwks_file)?;
        let n = keys.keys.len();
        *self.keys.write().expect("key set lock") = keys;
        Ok(n)
    }

    /// The principal a token stands for, if it verifies.
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        if !ALLOWED.contains(&header.alg) {
            return Err(AuthError::Algorithm);
        }
        let key = {
            let keys = self.keys.read().expect("key set lock");
            let jwk =
                pick(&keys, header.kid.as_deref(), header.alg).ok_or(AuthError::UnknownKey)?;
            DecodingKey::from_jwk(jwk).map_err(|_| AuthError::UnknownKey)?
        };
        let mut v = Validation::new(header.alg);
        v.algorithms = vec![header.alg];
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.validate_nbf = true;
        v.leeway = self.leeway;
        let data =
            jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &v)
                .map_err(|e| token_error(e.kind()))?;
        let claims = data.claims;
        let sub = claims.get("sub").and_then(|s| s.as_str()).unwrap_or("");
        if sub.is_empty() {
            return Err(AuthError::Claims("sub is empty"));
        }
        let grants = match claims.get(&self.roles_claim) {
            None => Vec::new(),
            Some(value) => parse_claim_grants(value)?,
        };
        Ok(Principal {
            name: sub.to_owned(),
            issuer: self.issuer.clone(),
            grants,
            separate_approver: false,
        })
    }
}

/// The key a token names: by `kid`, or the only key fit for `alg` when the
/// token names none.
fn pick<'a>(keys: &'a JwkSet, kid: Option<&str>, alg: Algorithm) -> Option<&'a Jwk> {
    let fits = |k: &&Jwk| {
        let family = matches!(
            (&k.algorithm, alg),
            (AlgorithmParameters::RSA(_), Algorithm::RS256)
                | (AlgorithmParameters::EllipticCurve(_), Algorithm::ES256)
        );
        let declared = k
            .common
            .key_algorithm
            .is_none_or(|a| a.to_string() == format!("{alg:?}"));
        family && declared
    };
    match kid {
        Some(kid) => keys.find(kid).filter(fits),
        None => {
            let mut fit = keys.keys.iter().filter(fits);
            match (fit.next(), fit.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            }
        }
    }
}

fn token_error(kind: &jsonwebtoken::errors::ErrorKind) -> AuthError {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => AuthError::Expired,
        K::ImmatureSignature => AuthError::NotYetValid,
        K::InvalidIssuer => AuthError::Issuer,
        K::InvalidAudience => AuthError::Audience,
        K::InvalidSignature => AuthError::Signature,
        K::InvalidAlgorithm | K::InvalidAlgorithmName => AuthError::Algorithm,
        K::MissingRequiredClaim(_) => AuthError::Claims("a required claim is missing"),
        _ => AuthError::Malformed,
    }
}
