//! The integration tests of rein-restate, in one binary: `cargo test -p rein-restate --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share live in `common`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod crash_loop;
mod deploy;
mod durable;
mod history;
mod mcp_elicitation;
mod release_fixtures;
mod scale;
mod security;
