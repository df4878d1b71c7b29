//! Deterministic simulation of the session machine and its shells.
