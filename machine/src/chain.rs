//! Hash-chain verification.
