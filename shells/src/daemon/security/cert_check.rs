//! Refusing, at startup, a serving certificate that no client will accept.
//!
//! rustls takes a CA certificate, a certificate without subjectAltName or
//! an expired one as a server's identity without complaint; the client
//! then fails every handshake (`CaUsedAsEndEntity`, ...), far from the
//! cause. A v1 certificate or a key of another certificate does fail at
//! startup, but tonic reduces that to "transport error". So every listener
//! serving a certificate (Sessions, registry, console, harnessnode) runs
//! [`check_serving`] first and names the cause and the fix.

use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use x509_parser::prelude::{FromDer as _, X509Certificate, X509Version};

/// How far in the future a certificate's notBefore may be: a certificate
/// issued a moment ago by a host whose clock runs ahead is still served.
pub const NOT_BEFORE_LEEWAY_SECS: i64 = 300;

/// Where the recipe for a working certificate is.
const SEE: &str = "see docs/security.md, \"Certificates\"";

/// Why a certificate and key cannot serve TLS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertProblem {
    /// The file holds no certificate.
    #[error("no certificate in the file")]
    NoCertificate,
    /// The first certificate is not DER that x509 parsing accepts.
    #[error("the certificate cannot be parsed ({0})")]
    Unparsable(String),
    /// X.509 v1 or v2: no extensions, so no subjectAltName.
    #[error(
        "the certificate is X.509 v{0}, which has no extensions; make a v3 certificate \
         with subjectAltName, basicConstraints CA:FALSE and extendedKeyUsage serverAuth"
    )]
    NotV3(u32),
    /// basicConstraints CA:TRUE: clients refuse a CA as the server.
    #[error(
        "the certificate is a CA (basicConstraints CA:TRUE); serve a leaf certificate signed by it"
    )]
    Ca,
    /// Clients match the address they dial against the subjectAltName
    /// only (never the CN).
    #[error(
        "the certificate has no subjectAltName; add the DNS names and IP addresses \
         clients dial (subjectAltName=DNS:localhost,IP:127.0.0.1)"
    )]
    NoSubjectAltName,
    /// extendedKeyUsage without serverAuth.
    #[error(
        "the certificate's extendedKeyUsage lacks serverAuth; make it with extendedKeyUsage=serverAuth"
    )]
    NotForServers,
    /// notAfter is past.
    #[error("the certificate expired on {0}; make a new one")]
    Expired(String),
    /// notBefore is ahead (past the leeway).
    #[error("the certificate is not valid before {0}; check this host's clock and the issuer's")]
    NotYetValid(String),
    /// The key file holds no key rustls can sign with.
    #[error("the key cannot be used ({0})")]
    BadKey(String),
    /// The key is not the certificate's.
    #[error("the key does not match the certificate; pass the key the certificate was made for")]
    KeyMismatch,
    /// Anything else rustls refuses.
    #[error("rustls refuses the certificate and key ({0})")]
    Refused(String),
}

impl CertProblem {
    /// True when the cause is in the key file rather than the certificate.
    pub fn in_key(&self) -> bool {
        matches!(self, Self::BadKey(_) | Self::KeyMismatch)
    }
}

/// A refused serving certificate: the flag and file at fault, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {path}: {problem} ({SEE})")]
pub struct ServingCertError {
    /// `--tls-cert`, `--tls-key`, ...
    pub flag: String,
    /// The file the flag named.
    pub path: String,
    /// Why it cannot serve.
    pub problem: CertProblem,
}

impl ServingCertError {
    /// Names `--{prefix}-cert` or `--{prefix}-key` and its file, whichever
    /// holds the cause.
    pub fn new(
        prefix: &str,
        cert: &std::path::Path,
        key: &std::path::Path,
        problem: CertProblem,
    ) -> Self {
        let (flag, path) = if problem.in_key() {
            (format!("--{prefix}-key"), key)
        } else {
            (format!("--{prefix}-cert"), cert)
        };
        Self {
            flag,
            path: path.display().to_string(),
            problem,
        }
    }
}

/// Seconds since the Unix epoch now (0 for a clock before it).
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Checks that `chain` (leaf first) and `key` can serve TLS at `now`
/// (Unix seconds) to clients that verify the server as browsers and
/// rustls do.
pub fn check_serving(
    chain: &[CertificateDer<'_>],
    key: &PrivateKeyDer<'_>,
    now: i64,
) -> Result<(), CertProblem> {
    let leaf_der = chain.first().ok_or(CertProblem::NoCertificate)?;
    let (_, leaf) =
        X509Certificate::from_der(leaf_der).map_err(|e| CertProblem::Unparsable(e.to_string()))?;
    let tbs = &leaf.tbs_certificate;
    if tbs.version() != X509Version::V3 {
        return Err(CertProblem::NotV3(tbs.version().0 + 1));
    }
    let unparsable = |e: x509_parser::error::X509Error| CertProblem::Unparsable(e.to_string());
    if tbs
        .basic_constraints()
        .map_err(unparsable)?
        .is_some_and(|b| b.value.ca)
    {
        return Err(CertProblem::Ca);
    }
    let san = tbs.subject_alternative_name().map_err(unparsable)?;
    if san.is_none_or(|s| s.value.general_names.is_empty()) {
        return Err(CertProblem::NoSubjectAltName);
    }
    if let Some(eku) = tbs.extended_key_usage().map_err(unparsable)?
        && !(eku.value.server_auth || eku.value.any)
    {
        return Err(CertProblem::NotForServers);
    }
    let validity = tbs.validity();
    if validity.not_after.timestamp() < now {
        return Err(CertProblem::Expired(validity.not_after.to_string()));
    }
    if validity.not_before.timestamp() > now.saturating_add(NOT_BEFORE_LEEWAY_SECS) {
        return Err(CertProblem::NotYetValid(validity.not_before.to_string()));
    }
    // The comparison rustls makes (CertifiedKey::keys_match), made here so
    // a mismatch is named rather than lost in "transport error".
    let provider = rustls::crypto::ring::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| CertProblem::BadKey(e.to_string()))?;
    if let Some(spki) = signer.public_key()
        && spki.as_ref() != tbs.public_key().raw
    {
        return Err(CertProblem::KeyMismatch);
    }
    let owned = chain.iter().map(|c| c.clone().into_owned()).collect();
    rustls::sign::CertifiedKey::from_der(owned, key.clone_key(), &provider)
        .map_err(|e| CertProblem::Refused(e.to_string()))?;
    Ok(())
}

/// [`check_serving`] on PEM bytes of `--{prefix}-cert` and `--{prefix}-key`
/// (already known to hold PEM blocks of the right kind).
pub fn check_serving_pem(
    prefix: &str,
    (cert, cert_pem): (&std::path::Path, &[u8]),
    (key, key_pem): (&std::path::Path, &[u8]),
) -> Result<(), ServingCertError> {
    use rustls_pki_types::pem::PemObject as _;
    let error = |problem| ServingCertError::new(prefix, cert, key, problem);
    let chain: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| error(CertProblem::Unparsable(e.to_string())))?;
    let key_der = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| error(CertProblem::BadKey(e.to_string())))?;
    check_serving(&chain, &key_der, now_unix()).map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    /// 2024-01-01T00:00:00Z, inside the validity rcgen gives by default.
    const NOW: i64 = 1_704_067_200;

    fn ca() -> Issuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Issuer::new(params, KeyPair::generate().unwrap())
    }

    fn leaf_params() -> CertificateParams {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params
    }

    /// `params` signed by a fresh CA, with its key.
    fn signed(params: CertificateParams) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca()).unwrap();
        let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        (cert.der().clone(), key_der)
    }

    fn check(cert: &CertificateDer<'_>, key: &PrivateKeyDer<'_>) -> Result<(), CertProblem> {
        check_serving(std::slice::from_ref(cert), key, NOW)
    }

    #[test]
    fn a_leaf_with_names_and_its_own_key_serves() {
        let (cert, key) = signed(leaf_params());
        assert_eq!(check(&cert, &key), Ok(()));
    }

    #[test]
    fn a_ca_certificate_is_refused_as_the_serving_certificate() {
        let key = KeyPair::generate().unwrap();
        let mut params = leaf_params();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let problem = check(cert.der(), &key_der).unwrap_err();
        assert_eq!(problem, CertProblem::Ca);
        assert!(problem.to_string().contains("basicConstraints CA:TRUE"));
    }

    #[test]
    fn a_v1_certificate_is_refused_as_having_no_extensions() {
        let (cert, key) = signed(leaf_params());
        let v1 = CertificateDer::from(as_v1(cert.as_ref()));
        assert_eq!(check(&v1, &key), Err(CertProblem::NotV3(1)));
    }

    #[test]
    fn a_certificate_without_subject_alt_name_is_refused() {
        let mut params = leaf_params();
        params.subject_alt_names.clear();
        let (cert, key) = signed(params);
        assert_eq!(check(&cert, &key), Err(CertProblem::NoSubjectAltName));
    }

    #[test]
    fn a_certificate_for_clients_only_is_refused() {
        let mut params = leaf_params();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key) = signed(params);
        assert_eq!(check(&cert, &key), Err(CertProblem::NotForServers));
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_and_blamed_on_the_key_file() {
        let (cert, _) = signed(leaf_params());
        let (_, other_key) = signed(leaf_params());
        let problem = check(&cert, &other_key).unwrap_err();
        assert_eq!(problem, CertProblem::KeyMismatch);
        let e = ServingCertError::new("tls", "s.pem".as_ref(), "s.key".as_ref(), problem.clone());
        assert!(
            e.to_string()
                .starts_with("--tls-key s.key: the key does not match")
        );
    }

    #[test]
    fn expired_and_not_yet_valid_certificates_are_refused() {
        let mut params = leaf_params();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2023, 1, 1);
        let (cert, key) = signed(params);
        assert!(matches!(check(&cert, &key), Err(CertProblem::Expired(_))));

        let mut params = leaf_params();
        params.not_before = rcgen::date_time_ymd(2024, 6, 1);
        let (cert, key) = signed(params);
        assert!(matches!(
            check(&cert, &key),
            Err(CertProblem::NotYetValid(_))
        ));
        // A few seconds ahead is clock skew, not a mistake.
        assert_eq!(
            check_serving(&[cert], &key, 1_717_200_000 - 10),
            Ok(()),
            "2024-06-01 minus ten seconds"
        );
    }

    #[test]
    fn the_message_names_flag_file_cause_fix_and_recipe() {
        let e = ServingCertError::new("tls", "ca.pem".as_ref(), "ca.key".as_ref(), CertProblem::Ca);
        assert_eq!(
            e.to_string(),
            "--tls-cert ca.pem: the certificate is a CA (basicConstraints CA:TRUE); \
             serve a leaf certificate signed by it (see docs/security.md, \"Certificates\")"
        );
    }

    #[test]
    fn pem_files_are_checked_the_same_way() {
        let key = KeyPair::generate().unwrap();
        let mut params = leaf_params();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let e = check_serving_pem(
            "registry-tls",
            ("r.pem".as_ref(), cert.pem().as_bytes()),
            ("r.key".as_ref(), key.serialize_pem().as_bytes()),
        )
        .unwrap_err();
        assert_eq!(
            (e.flag.as_str(), e.problem),
            ("--registry-tls-cert", CertProblem::Ca)
        );
    }

    /// The certificate re-encoded as X.509 v1: no version field and no
    /// extensions (the signature no longer verifies, which the check does
    /// not look at; rcgen makes only v3).
    fn as_v1(der: &[u8]) -> Vec<u8> {
        let (cert, rest) = tlv(der);
        assert!(rest.is_empty());
        let (tbs, mut after_tbs) = tlv(content(cert));
        let mut fields = Vec::new();
        let mut body = content(tbs);
        while !body.is_empty() {
            let (field, rest) = tlv(body);
            // [0] version and [3] extensions.
            if field[0] != 0xa0 && field[0] != 0xa3 {
                fields.extend_from_slice(field);
            }
            body = rest;
        }
        let mut inner = encode(0x30, &fields);
        while !after_tbs.is_empty() {
            let (field, rest) = tlv(after_tbs);
            inner.extend_from_slice(field);
            after_tbs = rest;
        }
        encode(0x30, &inner)
    }

    /// The first DER element of `der` (tag, length, content), and the rest.
    fn tlv(der: &[u8]) -> (&[u8], &[u8]) {
        let (len, header) = match der[1] {
            n if n < 0x80 => (usize::from(n), 2),
            n => {
                let octets = usize::from(n & 0x7f);
                let len = der[2..2 + octets]
                    .iter()
                    .fold(0, |acc, &b| (acc << 8) | usize::from(b));
                (len, 2 + octets)
            }
        };
        der.split_at(header + len)
    }

    fn content(element: &[u8]) -> &[u8] {
        let header = if element[1] < 0x80 {
            2
        } else {
            2 + usize::from(element[1] & 0x7f)
        };
        &element[header..]
    }

    fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = content.len();
        if len < 0x80 {
            out.push(u8::try_from(len).unwrap());
        } else {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|&b| b == 0)
                .collect();
            out.push(0x80 | u8::try_from(bytes.len()).unwrap());
            out.extend(bytes);
        }
        out.extend_from_slice(content);
        out
    }
}
