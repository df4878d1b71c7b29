//! Journals written by the Go reference host.
