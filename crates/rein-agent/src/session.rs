//! Durable sessions as the agent sees them (SPEC §8): the [`SessionBinding`] an agent calls
//! at fixed points of its life, and the restore/repair logic.
//!
//! The stores themselves (files, SQLite, PostgreSQL) and the standard binding live in the
//! `rein-sessions` crate; this module only defines what the agent needs from a binding, so
//! the agent crate stays free of storage code.
//!
//! When the agent calls its binding:
//! - before the first invocation (or on [`Agent::load_session`](crate::Agent::load_session)): [`SessionBinding::restore`],
//!   then [`SessionBinding::sync`] (persists builder messages and a tail repair);
//! - each time a message is stored or rewritten: [`SessionBinding::message_added`] /
//!   [`SessionBinding::message_updated`];
//! - when pending interrupts are set (the invocation stops on an interrupt) and when a resume
//!   consumes them, and at the end of every invocation: [`SessionBinding::sync`] with the
//!   agent's [`Checkpoint`] (messages with their ids, agent state, conversation-manager state,
//!   the paused run);
//! - at the end of an invocation that succeeded, just before that last sync:
//!   [`SessionBinding::invocation_decisions`] with its intervention decisions (a binding that
//!   keeps a record of some — an approval record — writes it with that sync).

use std::sync::Arc;

use rein_core::{Error, Message, audit::DecisionRecord, id::MessageId, tool::BoxFuture};

use crate::checkpoint::Checkpoint;

/// What an agent calls to persist itself. Implemented by `rein_sessions::SessionManager`;
/// implement it yourself only to persist somewhere the stores of `rein-sessions` do not reach.
///
/// Every method may fail; the agent then fails the invocation with that error: an
/// [`Error::Session`] holding the store's own error (`rein_sessions::SessionError::Conflict`
/// when another writer changed the session first).
pub trait SessionBinding: Send + Sync + 'static {
    /// Loads the session as a checkpoint (its history from where the conversation manager
    /// left it); `None` when it does not exist yet.
    fn restore(&self) -> BoxFuture<'_, Result<Option<Checkpoint>, Error>>;

    /// A message was appended to the history.
    fn message_added<'a>(
        &'a self,
        id: MessageId,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// A stored message was rewritten.
    fn message_updated<'a>(
        &'a self,
        id: MessageId,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Persists whatever differs between the agent, at rest as `checkpoint`, and the session:
    /// new or rewritten messages, messages dropped by the conversation manager, agent state,
    /// conversation-manager state, the paused run.
    fn sync<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), Error>>;

    /// The intervention decisions of the invocation that is ending (it succeeded), just
    /// before its last [`sync`](Self::sync): a binding that records some of them with the
    /// session writes them with that sync, atomically with the agent's own state. The default
    /// ignores them.
    fn invocation_decisions(&self, decisions: &[DecisionRecord]) {
        let _ = decisions;
    }
}

/// A session binding, shared.
pub(crate) type SharedBinding = Arc<dyn SessionBinding>;
