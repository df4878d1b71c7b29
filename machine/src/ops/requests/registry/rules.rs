//! Registered harnesses: the rules that do not need a store round trip.
//!
//! Name and spec validation, the canonical stored form of a spec and its
//! digest, the strict decoding of a stored spec, which placements this host
//! can serve, and the startup loading of stored registrations. The
//! HarnessRegistry operations and the boot operation share these, so a spec
//! that registers is exactly a spec that loads after a restart.
//!
//! # Startup
//!
//! The boot operation (`ops/requests/boot.rs`, `Request::Boot`) reserves the static
//! and configured names, then feeds every stored row, retired ones
//! included, to `load_registrations` a page at a time. A collision on the
//! reservation fails the boot; a row this host cannot serve is isolated
//! (marked unservable, with a reason) and never fails it.

use agentsessions_proto::v1::{HarnessSpec, Resumability, harness_spec::Placement};

use crate::canon;
use crate::ops::stages::cx::Core;
use crate::vocab::shown;
use crate::vocab::{Backend, HarnessRow, Route, Status};

/// Largest canonical spec text the registry stores.
pub const MAX_SPEC_BYTES: usize = 4096;
/// Longest retire reason, in bytes.
pub const MAX_RETIRE_REASON_BYTES: usize = 1024;
/// Longest registry name (an RFC 1123 label).
pub const MAX_NAME_LEN: usize = 63;

/// Refusal text for a placement kind this host has no runtime for.
pub const SUBSTRATE_UNSERVABLE: &str = "this host cannot serve substrate placements";

/// Checks that `name` is an RFC 1123 label: 1–63 of `[a-z0-9-]`, starting
/// and ending with a letter or digit.
pub fn validate_name(name: &str) -> Result<(), Status> {
    let bytes = name.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes.iter().all(|b| edge(b) || *b == b'-')
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge);
    if ok {
        Ok(())
    } else {
        let name = shown(name);
        Err(Status::invalid_argument(format!(
            "name {name:?} must be an RFC 1123 label (lowercase letters, digits and '-', \
             starting and ending alphanumeric, at most {MAX_NAME_LEN} characters)"
        )))
    }
}

/// Why a spec is not acceptable; the text follows `spec: ` in the status.
fn spec_problem(spec: &HarnessSpec) -> Option<String> {
    match &spec.placement {
        None => return Some("exactly one placement (remote or substrate) is required".into()),
        Some(Placement::Remote(r)) if r.address.is_empty() => {
            return Some("remote.address is required".into());
        }
        Some(Placement::Substrate(s)) if s.atespace.is_empty() || s.template.is_empty() => {
            return Some("substrate.atespace and substrate.template are both required".into());
        }
        Some(_) => {}
    }
    let Some(caps) = &spec.capabilities else {
        return Some("capabilities.resumability is required".into());
    };
    match Resumability::try_from(caps.resumability) {
        Err(_) => Some(format!(
            "capabilities.resumability: unknown enum value {}",
            caps.resumability
        )),
        Ok(Resumability::Unspecified) => Some("capabilities.resumability is required".into()),
        Ok(_) => None,
    }
}

/// Validates a spec as RegisterHarness receives it (INVALID_ARGUMENT "spec: …").
pub fn validate_spec(spec: Option<&HarnessSpec>) -> Result<&HarnessSpec, Status> {
    let Some(spec) = spec else {
        return Err(Status::invalid_argument("spec: spec is required"));
    };
    match spec_problem(spec) {
        Some(problem) => Err(Status::invalid_argument(format!("spec: {problem}"))),
        None => Ok(spec),
    }
}

/// The stored form of a valid spec: its canonical text and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalSpec {
    /// JCS of the spec's proto3-JSON (proto names, enum names).
    pub text: String,
    /// `sha256:` + lowercase hex of `text`.
    pub digest: String,
}

/// Canonicalizes a validated spec, refusing one whose text exceeds
/// [`MAX_SPEC_BYTES`].
pub fn canonical_spec(spec: &HarnessSpec) -> Result<CanonicalSpec, Status> {
    let value = serde_json::to_value(spec)
        .map_err(|e| Status::invalid_argument(format!("spec: proto3-json: {e}")))?;
    let bytes = canon::canonical_json_value(&value)
        .map_err(|e| Status::invalid_argument(format!("spec: canonical form: {e}")))?;
    if bytes.len() > MAX_SPEC_BYTES {
        return Err(Status::invalid_argument(format!(
            "spec: canonical form is {} bytes, over the {MAX_SPEC_BYTES}-byte limit",
            bytes.len()
        )));
    }
    let digest = canon::spec_digest(spec)
        .map_err(|e| Status::invalid_argument(format!("spec: digest: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| Status::internal(format!("spec: canonical form is not UTF-8: {e}")))?;
    assert!(text.len() <= MAX_SPEC_BYTES, "checked above");
    debug_assert!(digest.starts_with("sha256:"), "a digest names its hash");
    Ok(CanonicalSpec { text, digest })
}

/// Decodes a stored spec strictly (unknown fields and unknown enum values
/// fail) and validates it. The error names the likely cause: a row written
/// by a host with a newer schema.
pub fn decode_stored_spec(text: &str) -> Result<HarnessSpec, String> {
    let spec: HarnessSpec = serde_json::from_str(text).map_err(|e| {
        format!("stored spec does not decode: {e} (possible host/schema version skew)")
    })?;
    match spec_problem(&spec) {
        Some(problem) => Err(format!(
            "stored spec does not decode: {problem} (possible host/schema version skew)"
        )),
        None => Ok(spec),
    }
}

/// The route this host serves a registered spec through, or why it cannot.
/// Only remote placements are servable: there is no substrate runtime here.
pub fn route_for_spec(spec: &HarnessSpec) -> Result<Route, String> {
    match &spec.placement {
        Some(Placement::Remote(r)) => Ok(Route {
            backend: Backend::Remote {
                address: r.address.clone(),
            },
            descriptor_id: spec.descriptor_id.clone(),
            registered: true,
            spec: Some(spec.clone()),
        }),
        Some(Placement::Substrate(_)) => Err(SUBSTRATE_UNSERVABLE.to_owned()),
        None => Err("spec has no placement".to_owned()),
    }
}

/// Loads stored registration rows into the host at boot (see the module
/// docs). Each row either becomes a registered route or is marked
/// unservable; the returned pairs (name, reason) are the rows that could not
/// be served, for the shell to log. Never fails as a whole: one bad row must
/// not take the healthy harnesses down with it.
///
/// A row whose name is static on this host is reported but not marked: the
/// name keeps routing to the static harness, and the session store's
/// static-name check refuses new sessions on it. Reserving names first
/// (which fails on exactly this collision) keeps such a row from existing.
pub(crate) fn load_registrations(core: &mut Core, rows: &[HarnessRow]) -> Vec<(String, String)> {
    let mut isolated = Vec::new();
    for row in rows {
        if core.is_static(&row.name) {
            isolated.push((
                row.name.clone(),
                "a static harness on this host has the same name".to_owned(),
            ));
            continue;
        }
        let route = decode_stored_spec(&row.spec).and_then(|spec| route_for_spec(&spec));
        let reason = match route {
            Ok(route) => {
                if core.add_route(&row.name, route) {
                    continue;
                }
                // A duplicate row name (or a second load) keeps the first.
                "the name is already loaded on this host".to_owned()
            }
            Err(reason) => {
                core.unservable.insert(row.name.clone(), reason.clone());
                reason
            }
        };
        isolated.push((row.name.clone(), reason));
    }
    assert!(isolated.len() <= rows.len(), "at most one reason per row");
    isolated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_the_length_limit_pass_and_one_more_fails() {
        assert!(validate_name(&"a".repeat(63)).is_ok());
        assert!(validate_name(&"a".repeat(64)).is_err());
        assert!(validate_name("a").is_ok());
        assert!(validate_name("-a").is_err());
        assert!(validate_name("a-").is_err());
        assert!(validate_name("a_b").is_err());
        assert!(validate_name("é").is_err());
    }
}
