//! The integration tests of rein-otel, in one binary: `cargo test -p rein-otel --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share live in `common`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod env;
mod guards;
mod phoenix;
