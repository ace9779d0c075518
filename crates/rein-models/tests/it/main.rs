//! The integration tests of rein-models, in one binary: `cargo test -p rein-models --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share live in `common`.
//! `tests/linear_framing.rs` stays a binary of its own: it counts the process's allocations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod bedrock;
mod combinators;
mod conformance;
mod e2e;
mod gemini;
mod hostile_streams;
mod kit_provider;
mod ollama;
mod provider_author_api;
mod provider_state;
mod responses;
