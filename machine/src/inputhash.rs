//! Go-compatible model input hash.
