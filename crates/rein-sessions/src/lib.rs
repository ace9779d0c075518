//! Durable sessions for Rein agents (SPEC §8): the [`SessionStore`] trait with optimistic
//! versioning, the stores — [`FileSessionStore`] (embedded default, JSON files),
//! `SqliteSessionStore` (feature `sqlite`) and `PostgresSessionStore` (feature `postgres`) —
//! and the [`SessionManager`] that binds an agent to one session.
//!
//! A session holds the agent's messages with their stable ids, the agent state, the
//! conversation-manager state and the pending interrupts, so an agent interrupted for a human
//! approval can be resumed by another process after a restart:
//!
//! ```
//! use rein_agent::Agent;
//! use rein_core::{ToolHandle, event::BeforeToolCallEvent, message::InterruptResponse, stream::StopReason};
//! use rein_models::ScriptedModel;
//! use rein_sessions::{FileSessionStore, SessionManager};
//! use serde_json::json;
//!
//! fn agent(store: &FileSessionStore, model: ScriptedModel) -> Result<Agent, rein_core::Error> {
//!     let delete = ToolHandle::from_fn("delete", "Deletes a file.", json!({"type": "object"}),
//!         |_, _| async { Ok("deleted".into()) });
//!     Agent::builder()
//!         .model(model)
//!         .tool(delete)
//!         .hook(|e: &mut BeforeToolCallEvent| {
//!             if e.interrupt("approval", "Delete the file?").is_some_and(|a| a != "yes") {
//!                 e.cancel_tool = rein_core::event::Cancel::Yes;
//!             }
//!         })
//!         .session(SessionManager::new(store.clone(), "ticket-7"))
//!         .build()
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_core::Error> {
//! # let dir = std::env::temp_dir().join(format!("rein-doc-{}", std::process::id()));
//! let store = FileSessionStore::new(&dir);
//! // Request 1: the agent stops for approval; the session holds the pending interrupt.
//! let model = ScriptedModel::builder().tool_use("t1", "delete", json!({})).build();
//! let result = agent(&store, model)?.invoke("Delete tmp.txt").await?;
//! assert_eq!(result.stop_reason, StopReason::Interrupt);
//! // What the client is shown and sends back: the id of this pause (and, for an interrupt
//! // bound to an action, its fingerprint — this hook's binds none).
//! let id = result.interrupts[0].resume_id();
//!
//! // Request 2, later, anywhere: a new agent restores the session and resumes.
//! let model = ScriptedModel::builder().text("Done.").build();
//! let mut agent = agent(&store, model)?;
//! let result = agent.invoke(vec![InterruptResponse::new(id, "yes")]).await?;
//! assert_eq!(result.text(), "Done.");
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! ```
//!
//! See `docs/sessions.md` for the layouts, versioning and conflicts, and
//! `docs/human-in-the-loop.md` for approvals given in a later request.

mod approvals;
mod error;
mod file;
mod manager;
mod model;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use approvals::{ApprovalOutcome, ApprovalRecord, RecordApprovals};
pub use error::SessionError;
pub use file::FileSessionStore;
pub use manager::SessionManager;
pub use model::{
    SESSION_SCHEMA_VERSION, SessionSnapshot, SessionWrite, StoredMessage, validate_session_id,
};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresSessionStore, PostgresSessionStoreBuilder, TlsMode, TlsRoots};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSessionStore;
pub use store::{MemorySessionStore, SessionStore, SharedSessionStore};

// The guides are compiled and run as doc tests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;
