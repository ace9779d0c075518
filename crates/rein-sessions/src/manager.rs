//! [`SessionManager`]: binds an agent to one session of a store.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rein_agent::{Checkpoint, SessionBinding};
use rein_core::{Error, Message, audit::DecisionRecord, id::MessageId, tool::BoxFuture};

use crate::approvals::RecordApprovals;

use crate::model::{SessionSnapshot, SessionWrite, StoredMessage, validate_session_id};
use crate::store::SessionStore;

/// Persists one agent to one session of a [`SessionStore`]: give it to
/// `AgentBuilder::session`.
///
/// The agent restores the session before its first invocation; each message it stores or
/// rewrites is written at once (one store write each), pending interrupts are written when
/// they are set and when a resume consumes them, and the agent state and
/// conversation-manager state at the end of each invocation.
///
/// The manager keeps a copy of what it last wrote and the version it is at. A write that
/// finds another version fails the invocation with a conflict
/// ([`SessionError::Conflict`](crate::SessionError) inside `Error::Session`); reload with
/// `Agent::load_session` (or build a new agent) and redo the request.
///
/// ```
/// use rein_agent::Agent;
/// use rein_models::ScriptedModel;
/// use rein_sessions::{MemorySessionStore, SessionManager, SessionStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_core::Error> {
/// let store = MemorySessionStore::new();
/// let mut agent = Agent::builder()
///     .model(ScriptedModel::builder().text("Hello!").build())
///     .session(SessionManager::new(store.clone(), "user-42"))
///     .build()?;
/// agent.invoke("Hi").await?;
///
/// // Later, maybe in another process (with a durable store): the conversation is back.
/// let mut again = Agent::builder()
///     .model(ScriptedModel::builder().text("Welcome back.").build())
///     .session(SessionManager::new(store.clone(), "user-42"))
///     .build()?;
/// assert!(again.load_session().await?);
/// assert_eq!(again.messages().len(), 2);
/// assert_eq!(store.load("user-42").await?.unwrap().messages.len(), 2);
/// # Ok(()) }
/// ```
pub struct SessionManager<S> {
    store: S,
    session_id: String,
    mirror: Mutex<SessionSnapshot>,
    approvals: Option<Arc<dyn RecordApprovals>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for SessionManager<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("store", &self.store)
            .field("session_id", &self.session_id)
            .field(
                "version",
                &self
                    .mirror
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .version,
            )
            .field("recording_approvals", &self.approvals.is_some())
            .finish()
    }
}

impl<S: SessionStore> SessionManager<S> {
    /// Binds to `session_id` of `store` (created by the first write). An invalid id fails
    /// the first store call with a typed error.
    pub fn new(store: S, session_id: impl Into<String>) -> Self {
        let session_id = session_id.into();
        Self {
            mirror: Mutex::new(SessionSnapshot::empty(&session_id)),
            store,
            session_id,
            approvals: None,
        }
    }

    /// Keeps the session's approval record with the agent's own writes: each checkpoint write
    /// (a pause, a resume consuming it, the end of an invocation) appends the entries
    /// `recorder` gives for it, in the same atomic write.
    #[must_use]
    pub fn recording_approvals(mut self, recorder: Arc<dyn RecordApprovals>) -> Self {
        self.approvals = Some(recorder);
        self
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The version last read or written.
    pub fn version(&self) -> u64 {
        self.mirror().version
    }

    fn mirror(&self) -> MutexGuard<'_, SessionSnapshot> {
        self.mirror.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn commit(&self, writes: Vec<SessionWrite>) -> Result<(), Error> {
        if writes.is_empty() {
            return Ok(());
        }
        let expected = self.mirror().version;
        let version = self
            .store
            .write(&self.session_id, expected, writes.clone())
            .await?;
        let mut m = self.mirror();
        m.apply(&writes);
        m.version = version;
        Ok(())
    }

    async fn restore_inner(&self) -> Result<Option<Checkpoint>, Error> {
        validate_session_id(&self.session_id)?;
        let loaded = self.store.load(&self.session_id).await?;
        let Some(snapshot) = loaded else {
            *self.mirror() = SessionSnapshot::empty(&self.session_id);
            return Ok(None);
        };
        let restored = snapshot.checkpoint();
        *self.mirror() = snapshot;
        Ok(Some(restored))
    }
}

/// The writes that bring `stored` to the agent's checkpoint.
fn diff(stored: &SessionSnapshot, agent: &Checkpoint) -> Vec<SessionWrite> {
    let mut writes = Vec::new();
    let log = &stored.messages;
    let held = &agent.messages;
    let start = match held.first() {
        None => Some(log.len()),
        Some((first, _)) => log.iter().rposition(|m| m.id == *first),
    };
    let aligned = start.filter(|&p| {
        log.len() - p <= held.len() && log[p..].iter().zip(held).all(|(s, (id, _))| s.id == *id)
    });
    match aligned {
        Some(p) => {
            if p as u64 != stored.history_start {
                writes.push(SessionWrite::SetHistoryStart(p as u64));
            }
            for (s, (id, m)) in log[p..].iter().zip(held) {
                if s.message != *m {
                    writes.push(SessionWrite::UpdateMessage(StoredMessage::new(
                        *id,
                        m.clone(),
                    )));
                }
            }
            for (id, m) in held.iter().skip(log.len() - p) {
                writes.push(SessionWrite::AppendMessage(StoredMessage::new(
                    *id,
                    m.clone(),
                )));
            }
        }
        None => writes.push(SessionWrite::ReplaceMessages(
            held.iter()
                .map(|(id, m)| StoredMessage::new(*id, m.clone()))
                .collect(),
        )),
    }
    if stored.agent_state != agent.agent_state {
        writes.push(SessionWrite::SetAgentState(agent.agent_state.clone()));
    }
    if stored.conversation_manager_state != agent.conversation_manager_state {
        writes.push(SessionWrite::SetConversationManagerState(
            agent.conversation_manager_state.clone(),
        ));
    }
    if stored.pending_interrupts != agent.paused {
        writes.push(SessionWrite::SetPendingInterrupts(
            agent.paused.clone().map(Box::new),
        ));
    }
    writes
}

impl<S: SessionStore> SessionBinding for SessionManager<S> {
    fn restore(&self) -> BoxFuture<'_, Result<Option<Checkpoint>, Error>> {
        Box::pin(self.restore_inner())
    }

    fn message_added<'a>(
        &'a self,
        id: MessageId,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let write = SessionWrite::AppendMessage(StoredMessage::new(id, message.clone()));
            self.commit(vec![write]).await
        })
    }

    fn message_updated<'a>(
        &'a self,
        id: MessageId,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let known = self.mirror().messages.iter().any(|m| m.id == id);
            let stored = StoredMessage::new(id, message.clone());
            let write = if known {
                SessionWrite::UpdateMessage(stored)
            } else {
                SessionWrite::AppendMessage(stored)
            };
            self.commit(vec![write]).await
        })
    }

    fn sync<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            // The guard ends before the write awaits.
            let writes = {
                let stored = self.mirror();
                let mut writes = diff(&stored, checkpoint);
                if let Some(recorder) = &self.approvals {
                    let records = recorder.records(&stored, checkpoint);
                    if !records.is_empty() {
                        writes.push(SessionWrite::AppendApprovals(records));
                    }
                }
                writes
            };
            self.commit(writes).await
        })
    }

    fn invocation_decisions(&self, decisions: &[DecisionRecord]) {
        if let Some(recorder) = &self.approvals {
            recorder.invocation_decisions(decisions);
        }
    }
}
