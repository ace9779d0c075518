//! The integration tests of rein-interventions, in one binary:
//! `cargo test -p rein-interventions --test it` (one link instead of one per file). A new test
//! file is a module here; helpers that several share live in `common`.
//! `tests/audit_tracing.rs` stays a binary of its own: it reads events through a scoped
//! subscriber, and tracing caches callsites' interest per process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod actions;
mod approval;
mod cedar;
mod confirm;
mod errors;
mod parallel;
mod pii;
mod testing;
mod ui;
