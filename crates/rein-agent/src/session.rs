//! Durable sessions as the agent sees them (SPEC §8): the [`SessionBinding`] an agent calls
//! at fixed points of its life, and the restore/repair logic.
//!
//! The stores themselves (files, SQLite, PostgreSQL) and the standard binding live in the
//! `rein-sessions` crate; this module only defines what the agent needs from a binding, so
//! the agent crate stays free of storage code.
//!
//! When the agent calls its binding:
//! - before the first invocation (or on [`Agent::load_session`]): [`SessionBinding::restore`],
//!   then [`SessionBinding::sync`] (persists builder messages and a tail repair);
//! - each time a message is stored or rewritten: [`SessionBinding::message_added`] /
//!   [`SessionBinding::message_updated`];
//! - when pending interrupts are set (the invocation stops on an interrupt) and when a resume
//!   consumes them, and at the end of every invocation: [`SessionBinding::sync`] with the whole
//!   persisted view (messages, agent state, conversation-manager state, pending interrupts).

use std::sync::Arc;

use rein_core::{BoxFuture, Error, Map, Message, MessageId, Role};
use serde_json::Value;

use crate::agent::{Agent, TOOL_INTERRUPTED, results_in_order};
use crate::pending::PendingInterrupts;

/// A session as restored from a store.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RestoredSession {
    /// The conversation, with the messages' stable ids.
    pub messages: Vec<(MessageId, Message)>,
    /// The agent's key-value state.
    pub agent_state: Map,
    /// The conversation manager's state (`null` when there is none).
    pub conversation_manager_state: Value,
    /// Interrupts waiting for answers.
    pub pending_interrupts: Option<PendingInterrupts>,
}

impl RestoredSession {
    /// A restored session.
    pub fn new(
        messages: Vec<(MessageId, Message)>,
        agent_state: Map,
        conversation_manager_state: Value,
        pending_interrupts: Option<PendingInterrupts>,
    ) -> Self {
        Self {
            messages,
            agent_state,
            conversation_manager_state,
            pending_interrupts,
        }
    }
}

/// Everything about an agent that a session persists, borrowed from the agent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentSnapshot<'a> {
    /// The ids of the stored messages.
    pub ids: &'a [MessageId],
    /// The stored messages (same order as `ids`).
    pub messages: &'a [Message],
    /// A copy of the agent's key-value state.
    pub agent_state: Map,
    /// The conversation manager's state.
    pub conversation_manager_state: Value,
    /// Interrupts waiting for answers.
    pub pending_interrupts: Option<&'a PendingInterrupts>,
}

/// What an agent calls to persist itself. Implemented by `rein_sessions::SessionManager`;
/// implement it yourself only to persist somewhere the stores of `rein-sessions` do not reach.
///
/// Every method may fail; the agent then fails the invocation with that (typed) error, e.g.
/// [`Error::SessionConflict`] when another writer changed the session first.
pub trait SessionBinding: Send + Sync + 'static {
    /// Loads the session; `None` when it does not exist yet.
    fn restore(&self) -> BoxFuture<'_, Result<Option<RestoredSession>, Error>>;

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

    /// Persists whatever differs between the agent and the session: new or rewritten messages,
    /// messages dropped by the conversation manager, agent state, conversation-manager state,
    /// pending interrupts.
    fn sync<'a>(&'a self, snapshot: AgentSnapshot<'a>) -> BoxFuture<'a, Result<(), Error>>;
}

/// A session binding, shared.
pub(crate) type SharedBinding = Arc<dyn SessionBinding>;

impl Agent {
    /// Restores the agent from its session (messages with their ids, agent state,
    /// conversation-manager state, pending interrupts), replacing what the agent holds.
    /// Returns whether a stored session was found. Without a session this does nothing.
    ///
    /// The first invocation does this by itself; call it to inspect a restored agent first
    /// (e.g. its [`pending_interrupts`](Agent::pending_interrupts)), or after a
    /// [`Error::SessionConflict`] to reload what the other writer stored.
    ///
    /// Restoring repairs a broken tail: when the last message is an assistant message whose
    /// tool uses have no results and no interrupt is pending for it, every such tool use gets
    /// the error result `Tool was interrupted.` (persisted at once).
    pub async fn load_session(&mut self) -> Result<bool, Error> {
        let Some(binding) = self.session.clone() else {
            return Ok(false);
        };
        let found = match binding.restore().await? {
            Some(restored) => {
                let (ids, messages): (Vec<MessageId>, Vec<Message>) =
                    restored.messages.into_iter().unzip();
                self.set_messages(messages, Some(ids));
                self.state.replace(restored.agent_state);
                self.manager.restore(&restored.conversation_manager_state);
                self.pending = restored.pending_interrupts;
                true
            }
            None => false,
        };
        self.repair_restored_tail();
        self.session_loaded = true;
        self.session_sync().await?;
        Ok(found)
    }

    /// Persists the agent's whole view now (the agent also does this at the end of every
    /// invocation). Use it after changing the agent outside an invocation, e.g. after
    /// [`discard_interrupts`](Agent::discard_interrupts). Without a session this does nothing.
    pub async fn save_session(&mut self) -> Result<(), Error> {
        if self.session.is_some() && !self.session_loaded {
            self.load_session().await?;
        }
        self.session_sync().await
    }

    /// Whether the agent persists to a session.
    pub fn has_session(&self) -> bool {
        self.session.is_some()
    }

    /// A tail assistant message with unanswered tool uses gets `Tool was interrupted.` results,
    /// unless interrupts are pending for it.
    fn repair_restored_tail(&mut self) {
        let Some(last) = self.conv.last() else {
            return;
        };
        if last.role != Role::Assistant || !last.has_tool_use() {
            return;
        }
        let idx = self.conv.len() - 1;
        if let Some(p) = &self.pending
            && (p.assistant_message_id == self.conv.id(idx) || p.assistant_message == *last)
        {
            return;
        }
        let blocks = results_in_order(last, &[], TOOL_INTERRUPTED);
        if !blocks.is_empty() {
            self.conv.append_user(blocks);
        }
    }

    /// Restores the session before the first invocation.
    pub(crate) async fn session_begin(&mut self) -> Result<(), Error> {
        if self.session.is_some() && !self.session_loaded {
            self.load_session().await?;
        }
        Ok(())
    }

    /// Persists the message stored at `idx`.
    pub(crate) async fn session_added(&self, idx: usize) -> Result<(), Error> {
        if let (Some(b), Some(m)) = (&self.session, self.conv.get(idx)) {
            b.message_added(self.conv.id(idx), m).await?;
        }
        Ok(())
    }

    /// Persists the rewrite of the message at `idx`.
    pub(crate) async fn session_updated(&self, idx: usize) -> Result<(), Error> {
        if let (Some(b), Some(m)) = (&self.session, self.conv.get(idx)) {
            b.message_updated(self.conv.id(idx), m).await?;
        }
        Ok(())
    }

    /// Persists whatever changed.
    pub(crate) async fn session_sync(&self) -> Result<(), Error> {
        let Some(b) = &self.session else {
            return Ok(());
        };
        if !self.session_loaded {
            return Ok(());
        }
        let snapshot = AgentSnapshot {
            ids: self.conv.ids(),
            messages: self.conv.messages(),
            agent_state: self.state.snapshot(),
            conversation_manager_state: self.manager.state(),
            pending_interrupts: self.pending.as_ref(),
        };
        b.sync(snapshot).await
    }

    /// At the end of an invocation: persists the agent; a store failure fails a successful
    /// invocation (a failed one keeps its own error; the store error is logged).
    pub(crate) async fn session_end<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if self.session.is_none() {
            return result;
        }
        match (self.session_sync().await, result) {
            (Ok(()), r) => r,
            (Err(e), Ok(_)) => Err(e),
            (Err(e), Err(original)) => {
                tracing::warn!(error = %e, "session store failed after a failed invocation");
                Err(original)
            }
        }
    }
}
