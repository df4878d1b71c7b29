//! Canonical form (proto3-JSON + RFC 8785) and content hashes.
