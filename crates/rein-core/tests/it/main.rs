//! The integration tests of rein-core, in one binary: `cargo test -p rein-core --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share go in a `common` module here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod message_json;
mod tool_spec;
