//! The integration tests of rein-agent, in one binary: `cargo test -p rein-agent --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share live in `common`.
//! `tests/telemetry.rs` stays a binary of its own: it reads spans through a scoped subscriber,
//! and tracing caches callsites' interest per process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod agent_tool;
mod approvals;
mod bedrock_history;
mod cancel;
mod confirm_anywhere;
mod context;
mod conversations;
mod e2e_llmock;
mod event_loop;
mod fallback;
mod handoff;
mod inject;
mod interrupts;
mod interventions;
mod journal;
mod judge;
mod stream_guard;
mod streaming;
mod tool_source;
mod typed_output;
