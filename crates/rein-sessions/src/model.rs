//! What a session holds and the writes that change it.

use rein_agent::{Checkpoint, PausedRun};
use rein_core::{Map, Message, id::MessageId};

use crate::approvals::ApprovalRecord;
use crate::error::SessionError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The schema version of session records written by this release. Readers accept every
/// version up to this one (older sessions are upgraded when read) and reject newer ones with
/// a typed error rather than misreading them.
///
/// Version 2 added the approval record. A record is marked 2 only when it holds approval
/// entries (a log entry appending some, a snapshot or SQL session having some): a session
/// without any stays version 1, readable by release 0.1, and one with some is refused by it as
/// written by a newer release instead of read as corrupt or without its record.
pub const SESSION_SCHEMA_VERSION: u32 = 2;

/// The schema version of records that hold no approval entries (release 0.1's).
const BASE_SCHEMA_VERSION: u32 = 1;

/// The schema version a record holding these writes is marked with.
pub(crate) fn schema_of_writes(writes: &[SessionWrite]) -> u32 {
    if writes
        .iter()
        .any(|w| matches!(w, SessionWrite::AppendApprovals(r) if !r.is_empty()))
    {
        SESSION_SCHEMA_VERSION
    } else {
        BASE_SCHEMA_VERSION
    }
}

/// A stored message and its stable id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredMessage {
    /// The message's stable id (never sent to a provider).
    pub id: MessageId,
    /// The message, in its Bedrock-Converse JSON shape.
    pub message: Message,
}

impl StoredMessage {
    /// A stored message.
    pub fn new(id: MessageId, message: Message) -> Self {
        Self { id, message }
    }
}

/// One change to a session: a part of the agent's [`Checkpoint`] (a message, the agent state,
/// the conversation-manager state, the paused run) or where its history starts. A
/// [`SessionStore::write`](crate::SessionStore::write) applies a list of them atomically, as
/// one new version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
// A JSON map is larger when another crate in the build turns on serde_json's
// `preserve_order` (cedar-policy does); writes are few per invocation, boxing buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum SessionWrite {
    /// Appends a message at the end of the history.
    AppendMessage(StoredMessage),
    /// Rewrites the stored message with this id (ignored when the session has no such
    /// message).
    UpdateMessage(StoredMessage),
    /// Replaces the whole history (the agent's history was replaced); the history start goes
    /// back to 0.
    ReplaceMessages(Vec<StoredMessage>),
    /// The first `n` stored messages are no longer part of the agent's history (the
    /// conversation manager dropped them); they stay stored for the record.
    SetHistoryStart(u64),
    /// The agent's key-value state.
    SetAgentState(Map),
    /// The conversation manager's state.
    SetConversationManagerState(Value),
    /// The paused run ([`Checkpoint::paused`]; `None` clears it). Boxed: large and rare, it would make
    /// every write as big.
    SetPendingInterrupts(Option<Box<PausedRun>>),
    /// Appends entries to the session's approval record ([`SessionSnapshot::approvals`]).
    AppendApprovals(Vec<ApprovalRecord>),
}

/// A session as a store holds it at one version: the agent's [`Checkpoint`], laid out the way
/// the stores keep it — every message ever stored, with where the agent's history starts, so a
/// store appends and rewrites one message at a time — and the store's metadata (session id,
/// version). [`checkpoint`](Self::checkpoint) is the agent at rest it holds; a
/// [`SessionManager`](crate::SessionManager) writes the differences from the agent's own as
/// [`SessionWrite`]s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub struct SessionSnapshot {
    /// The schema version of this record.
    pub schema_version: u32,
    /// The session id.
    pub session_id: String,
    /// The version: 0 for a session that was never written, then +1 per write.
    pub version: u64,
    /// Every stored message, including those before `history_start`.
    pub messages: Vec<StoredMessage>,
    /// How many leading messages the conversation manager dropped from the agent's history.
    #[serde(default)]
    pub history_start: u64,
    /// The agent's key-value state.
    #[serde(default)]
    pub agent_state: Map,
    /// The conversation manager's state.
    #[serde(default)]
    pub conversation_manager_state: Value,
    /// The run waiting for answers, if one is ([`Checkpoint::paused`]; release 0.1's pending
    /// interrupts load into it).
    #[serde(default)]
    pub pending_interrupts: Option<PausedRun>,
    /// The approval record: every question asked of a person, every answer, every proceed a
    /// handler explained, oldest first (empty for sessions of earlier releases).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalRecord>,
}

impl SessionSnapshot {
    /// An empty session at version 0.
    pub fn empty(session_id: impl Into<String>) -> Self {
        Self {
            schema_version: SESSION_SCHEMA_VERSION,
            session_id: session_id.into(),
            version: 0,
            messages: Vec::new(),
            history_start: 0,
            agent_state: Map::new(),
            conversation_manager_state: Value::Null,
            pending_interrupts: None,
            approvals: Vec::new(),
        }
    }

    /// The messages of the agent's history (from `history_start` on).
    pub fn active_messages(&self) -> &[StoredMessage] {
        let start = usize::try_from(self.history_start)
            .unwrap_or(usize::MAX)
            .min(self.messages.len());
        &self.messages[start..]
    }

    /// The agent at rest this session holds: the messages of its history (from
    /// `history_start` on) with their ids, agent state, conversation-manager state and the
    /// paused run.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint::new(
            self.active_messages()
                .iter()
                .map(|m| (m.id, m.message.clone()))
                .collect(),
            self.agent_state.clone(),
            self.conversation_manager_state.clone(),
            self.pending_interrupts.clone(),
        )
    }

    /// Applies writes in order (not the version: the store does that).
    pub fn apply(&mut self, writes: &[SessionWrite]) {
        for w in writes {
            match w {
                SessionWrite::AppendMessage(m) => self.messages.push(m.clone()),
                SessionWrite::UpdateMessage(m) => {
                    if let Some(slot) = self.messages.iter_mut().rev().find(|s| s.id == m.id) {
                        slot.message = m.message.clone();
                    }
                }
                SessionWrite::ReplaceMessages(ms) => {
                    self.messages = ms.clone();
                    self.history_start = 0;
                }
                SessionWrite::SetHistoryStart(n) => self.history_start = *n,
                SessionWrite::SetAgentState(s) => self.agent_state = s.clone(),
                SessionWrite::SetConversationManagerState(s) => {
                    self.conversation_manager_state = s.clone();
                }
                SessionWrite::SetPendingInterrupts(p) => {
                    self.pending_interrupts = p.as_deref().cloned();
                }
                SessionWrite::AppendApprovals(records) => {
                    self.approvals.extend(records.iter().cloned());
                }
            }
        }
    }

    /// The schema version this session is stored with (see [`SESSION_SCHEMA_VERSION`]).
    pub(crate) fn stored_schema(&self) -> u32 {
        if self.approvals.is_empty() {
            BASE_SCHEMA_VERSION
        } else {
            SESSION_SCHEMA_VERSION
        }
    }

    /// Checks a record read from storage: a newer schema is a typed error.
    pub(crate) fn check_schema(self) -> Result<Self, SessionError> {
        if let Some(e) = too_new(&self.session_id, "the session", self.schema_version.into()) {
            return Err(e);
        }
        Ok(Self {
            schema_version: SESSION_SCHEMA_VERSION,
            ..self
        })
    }
}

/// Session ids are 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`, so that
/// every store can use them as they are (the file store as a directory name).
pub fn validate_session_id(session_id: &str) -> Result<(), SessionError> {
    let ok = !session_id.is_empty()
        && session_id.len() <= 128
        && !session_id.starts_with('.')
        && session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(SessionError::InvalidId(session_id.to_owned()))
    }
}

pub(crate) fn json_err(what: &str, e: serde_json::Error) -> SessionError {
    SessionError::io(what, e)
}

/// The schema version of a stored record as JSON (`schema_version`), when it names one.
pub(crate) fn schema_of(record: &Value) -> Option<u64> {
    record.get("schema_version").and_then(Value::as_u64)
}

/// The typed refusal of `what`, a record of schema version `found`, when that is newer than
/// this release reads.
pub(crate) fn too_new(session_id: &str, what: &str, found: u64) -> Option<SessionError> {
    (found > u64::from(SESSION_SCHEMA_VERSION)).then(|| SessionError::SchemaTooNew {
        session_id: session_id.to_owned(),
        what: what.to_owned(),
        found: u32::try_from(found).unwrap_or(u32::MAX),
        supported: SESSION_SCHEMA_VERSION,
    })
}

/// Reads a session's paused run from its stored JSON: one of a newer release is
/// `SchemaTooNew`, anything else that is not a paused run `Corrupt`.
pub(crate) fn paused_run(session_id: &str, record: Value) -> Result<PausedRun, SessionError> {
    PausedRun::from_json(record).map_err(|e| match e {
        rein_core::Error::CheckpointTooNew { found, supported } => SessionError::SchemaTooNew {
            session_id: session_id.to_owned(),
            what: "its pending interrupts".into(),
            found,
            supported,
        },
        other => SessionError::corrupt(session_id, format!("pending interrupts: {other}")),
    })
}
