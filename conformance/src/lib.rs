//! Replay-conformance suite, runnable against any Sessions endpoint.
