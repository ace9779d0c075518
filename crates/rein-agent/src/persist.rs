//! An agent and its session: restore before the first invocation, save at fixed points, and
//! the repair of a restored tail. The binding contract itself is in `session.rs`.

use rein_core::{Error, Message, id::MessageId, result::AgentResult};

use crate::agent::Agent;
use crate::checkpoint::{Checkpoint, Pause};
use crate::conversation::ConversationManager as _;
use crate::history::{TOOL_INTERRUPTED, closing_results};

impl Agent {
    /// Restores the agent from its session (messages with their ids, agent state,
    /// conversation-manager state, pending interrupts), replacing what the agent holds.
    /// Returns whether a stored session was found. Without a session this does nothing.
    ///
    /// The first invocation does this by itself; call it to inspect a restored agent first
    /// (e.g. its [`pending_interrupts`](Agent::pending_interrupts)), or after a
    /// [`Error::Session`] conflict to reload what the other writer stored.
    ///
    /// Restoring repairs a broken tail: when the last message is an assistant message whose
    /// tool uses have no results and no interrupt is pending for it, every such tool use gets
    /// the error result `Tool was interrupted.` (persisted at once). Loading a session that
    /// does not exist writes nothing, unless the agent was built with messages or state.
    pub async fn load_session(&mut self) -> Result<bool, Error> {
        let Some(binding) = self.history.session().cloned() else {
            return Ok(false);
        };
        let restored = binding.restore().await?;
        let found = restored.is_some();
        match restored {
            Some(restored) => self.restore(restored),
            None => self.repair_restored_tail(),
        }
        self.history.set_loaded();
        // Reading a session that does not exist does not create it: the first write with
        // something to keep does (an agent built with messages or state keeps them now).
        let blank = self.history.conv().len() == 0
            && self.pending.is_none()
            && self.state.with(|m| m.is_empty());
        if found || !blank {
            self.session_sync().await?;
        }
        Ok(found)
    }

    /// Replaces what the agent holds with a checkpoint taken elsewhere — by
    /// [`checkpoint`](Agent::checkpoint) in another process, from a store of your own, a
    /// durable engine's state: the messages with their ids, the agent state (and with it the
    /// agent in control after a handoff), the conversation manager's state and the paused run.
    /// A broken tail is repaired as [`load_session`](Agent::load_session) does. Nothing is
    /// persisted (the agent's own session, if any, is written at its next sync).
    pub fn restore(&mut self, checkpoint: Checkpoint) {
        let (ids, messages): (Vec<MessageId>, Vec<Message>) =
            checkpoint.messages.into_iter().unzip();
        self.set_messages(messages, Some(ids));
        let mut agent_state = checkpoint.agent_state;
        self.tokens.take_from(&mut agent_state);
        self.state.replace(agent_state);
        self.restore_active_agent();
        self.manager.restore(&checkpoint.conversation_manager_state);
        self.set_pending_interrupts(checkpoint.paused);
        self.repair_restored_tail();
    }

    /// The agent at rest: its history with the message ids, agent state,
    /// conversation-manager state and paused run — what [`restore`](Agent::restore) puts
    /// back, here or in another process.
    pub fn checkpoint(&self) -> Checkpoint {
        let conv = self.history.conv();
        Checkpoint::new(
            conv.ids()
                .iter()
                .copied()
                .zip(conv.messages().iter().cloned())
                .collect(),
            self.stored_state(),
            self.manager.state(),
            self.pending.as_deref().cloned(),
        )
    }

    /// The agent state as stored: with the token calibration.
    fn stored_state(&self) -> rein_core::Map {
        let mut state = self.state.snapshot();
        self.tokens.put_into(&mut state);
        state
    }

    /// Persists the agent's whole view now (the agent also does this at the end of every
    /// invocation). Use it after changing the agent outside an invocation, e.g. after
    /// [`discard_interrupts`](Agent::discard_interrupts), or after messages were injected while
    /// the agent waits for answers (they are persisted with the pending interrupts, so a resume
    /// in another process delivers them). Without a session this does nothing.
    pub async fn save_session(&mut self) -> Result<(), Error> {
        self.session_begin().await?;
        self.keep_injections();
        self.session_sync().await
    }

    /// Whether the agent persists to a session.
    pub fn has_session(&self) -> bool {
        self.history.session().is_some()
    }

    /// A tail assistant message with unanswered tool uses gets `Tool was interrupted.` results,
    /// unless interrupts are pending for it.
    fn repair_restored_tail(&mut self) {
        let conv = self.history.conv();
        let Some(last) = conv.last() else {
            return;
        };
        if let Some(p) = &self.pending
            && let Pause::Tools(t) = &p.at
            && (Some(t.message_id) == conv.ids().last().copied() || t.message == *last)
        {
            return;
        }
        let blocks = closing_results(last, &[], TOOL_INTERRUPTED);
        if !blocks.is_empty() {
            self.history.conv_mut().append_user(blocks);
        }
    }

    /// Restores the session before the first invocation.
    pub(crate) async fn session_begin(&mut self) -> Result<(), Error> {
        if self.history.session().is_some() && !self.history.is_loaded() {
            // Boxed: once per agent (layout rule 1).
            Box::pin(self.load_session()).await?;
        }
        Ok(())
    }

    /// Persists whatever changed.
    pub(crate) async fn session_sync(&self) -> Result<(), Error> {
        if !self.has_session() {
            return Ok(());
        }
        self.history
            .sync(
                self.stored_state(),
                self.manager.state(),
                self.pending.as_deref(),
            )
            .await
    }

    /// At the end of an invocation: persists the agent; a store failure fails a successful
    /// invocation (a failed one keeps its own error; the store error is logged).
    pub(crate) async fn session_end(
        &self,
        result: Result<AgentResult, Error>,
    ) -> Result<AgentResult, Error> {
        if let (Ok(r), Some(binding)) = (&result, self.history.session()) {
            binding.invocation_decisions(&r.decisions);
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
