//! The integration tests of rein-agui, in one binary: `cargo test -p rein-agui --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share live in `common`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod agui_client;
mod approvals;
mod console_browser;
mod cross_site_browser;
mod hostile_clients;
mod hostile_input;
mod identity;
mod limits;
mod protocol;
mod security;
