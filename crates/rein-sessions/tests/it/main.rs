//! The integration tests of rein-sessions, in one binary: `cargo test -p rein-sessions --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share live in `common`.
//! `tests/postgres_hardening.rs` stays a binary of its own: it restarts the PostgreSQL server
//! that the tests here use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod agent;
mod approvals;
mod confirm_points;
mod mcp_elicitation;
mod nested;
mod processes;
mod release_fixtures;
mod stores;
