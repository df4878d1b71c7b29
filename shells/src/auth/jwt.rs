//! Bearer JWTs: RS256 or ES256, signed by a key of a JWKS file, with the
//! configured issuer and audience, inside their validity window.
//!
//! Invariant: a token is accepted only if its signature verifies under a
//! key of the current key set with an algorithm from the allow list; the
//! token's own `alg` can narrow the choice, never widen it (`none` and
//! HMAC are never accepted).
//!
//! A verified token is remembered (by the SHA-256 of its exact bytes, with
//! its validity window) so that the next call with it checks the clock
//! only: a client sends the same token on every call, and an ES256 or RS256
//! verification costs more than the rest of a call's authentication. The
//! memory is bounded and dropped whenever the key set is re-read, so a
//! removed key stops authorizing at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use sha2::{Digest, Sha256};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::config::JwtSection;
use super::{AuthError, parse_claim_grants};
use agentsessions_machine::vocab::Principal;

/// Verifies bearer JWTs against the configured key set.
#[derive(Debug)]
pub struct JwtVerifier {
    issuer: String,
    audience: String,
    roles_claim: String,
    leeway: u64,
    jwks_file: PathBuf,
    keys: RwLock<JwkSet>,
    verified: Mutex<HashMap<[u8; 32], Verified>>,
}

/// A token whose signature and claims verified.
#[derive(Debug, Clone)]
struct Verified {
    principal: Principal,
    /// `exp` and `nbf` (0 when absent), in Unix seconds.
    exp: u64,
    nbf: u64,
}

/// Most verified tokens remembered; past it the expired ones are dropped,
/// then all of them.
const REMEMBERED: usize = 4096;

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
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// Re-reads the key set (on SIGHUP); a bad file keeps the old set.
    pub fn reload(&self) -> Result<usize, JwksError> {
        let keys = read_jwks(&self.jwks_file)?;
        let n = keys.keys.len();
        *self.keys.write().expect("key set lock") = keys;
        self.verified.lock().expect("verified lock").clear();
        Ok(n)
    }

    /// The principal a token stands for, if it verifies.
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        let remembered = self
            .verified
            .lock()
            .expect("verified lock")
            .get(&digest)
            .cloned();
        if let Some(v) = remembered {
            // The window is checked again on every call, as a fresh
            // verification would.
            if now > v.exp.saturating_add(self.leeway) {
                return Err(AuthError::Expired);
            }
            if v.nbf > now.saturating_add(self.leeway) {
                return Err(AuthError::NotYetValid);
            }
            return Ok(v.principal);
        }
        let verified = self.verify_signed(token)?;
        let principal = verified.principal.clone();
        let mut memory = self.verified.lock().expect("verified lock");
        if memory.len() >= REMEMBERED {
            memory.retain(|_, v| now <= v.exp.saturating_add(self.leeway));
            if memory.len() >= REMEMBERED {
                memory.clear();
            }
        }
        memory.insert(digest, verified);
        Ok(principal)
    }

    /// The full check: header, key, signature and claims.
    fn verify_signed(&self, token: &str) -> Result<Verified, AuthError> {
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
        let second = |name: &str| claims.get(name).and_then(serde_json::Value::as_u64);
        Ok(Verified {
            principal: Principal {
                name: sub.to_owned(),
                issuer: self.issuer.clone(),
                grants,
                separate_approver: false,
            },
            exp: second("exp").ok_or(AuthError::Claims("exp is not a number"))?,
            nbf: second("nbf").unwrap_or(0),
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

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    /// A verifier over one fresh ES256 key, and a signer of tokens for it.
    fn setup(dir: &Path) -> (JwtVerifier, impl Fn(u64) -> String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let raw = key.public_key_raw();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwks = serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k",
            "x": b64(&raw[1..33]), "y": b64(&raw[33..65])}]});
        let jwks_file = dir.join("jwks.json");
        std::fs::write(&jwks_file, jwks.to_string()).unwrap();
        let verifier = JwtVerifier::new(&JwtSection {
            issuer: "iss".into(),
            audience: "aud".into(),
            jwks_file,
            roles_claim: "roles".into(),
            leeway_seconds: 0,
        })
        .unwrap();
        let signing = jsonwebtoken::EncodingKey::from_ec_der(&key.serialize_der());
        let sign = move |exp: u64| {
            let claims = serde_json::json!({"iss": "iss", "aud": "aud", "sub": "s",
                "exp": exp, "roles": ["p:reader"]});
            let header = jsonwebtoken::Header::new(Algorithm::ES256);
            jsonwebtoken::encode(&header, &claims, &signing).unwrap()
        };
        (verifier, sign)
    }

    #[test]
    fn a_remembered_token_still_expires_on_time() {
        let dir = tempfile::tempdir().unwrap();
        let (verifier, sign) = setup(dir.path());
        let now = jsonwebtoken::get_current_timestamp();
        let token = sign(now + 1);
        let p = verifier.verify(&token).unwrap();
        assert_eq!((p.name.as_str(), p.grants.len()), ("s", 1));
        assert_eq!(verifier.verify(&token).unwrap(), p, "remembered");
        std::thread::sleep(std::time::Duration::from_millis(2100));
        assert_eq!(verifier.verify(&token), Err(AuthError::Expired));
        // A token that differs in one byte is never the remembered one.
        let mut forged = sign(now + 600);
        verifier.verify(&forged).unwrap();
        forged.push('x');
        assert!(verifier.verify(&forged).is_err());
    }

    #[test]
    fn a_reload_forgets_what_the_old_keys_verified() {
        let dir = tempfile::tempdir().unwrap();
        let (verifier, sign) = setup(dir.path());
        let token = sign(jsonwebtoken::get_current_timestamp() + 600);
        verifier.verify(&token).unwrap();
        std::fs::write(dir.path().join("jwks.json"), r#"{"keys": []}"#).unwrap();
        assert_eq!(verifier.reload().unwrap(), 0);
        assert_eq!(verifier.verify(&token), Err(AuthError::UnknownKey));
    }
}
