//! What the SQL stores share: encoding of rows, and the schema.

use rein_agent::PendingInterrupts;
use rein_core::{Map, Message, id::MessageId};
use serde_json::Value;

use crate::error::SessionError;
use crate::model::{SessionSnapshot, StoredMessage, json_err};

/// One session's row.
pub(crate) struct SessionRow {
    pub(crate) version: i64,
    pub(crate) schema_version: i64,
    pub(crate) history_start: i64,
    pub(crate) agent_state: String,
    pub(crate) conversation_manager_state: String,
    pub(crate) pending_interrupts: Option<String>,
}

pub(crate) fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<String, SessionError> {
    serde_json::to_string(value).map_err(|e| json_err(&format!("encoding {what}"), e))
}

pub(crate) fn to_i64(n: u64) -> Result<i64, SessionError> {
    i64::try_from(n).map_err(|_| {
        SessionError::io(
            "a version or position",
            format!("{n} is out of range for the database"),
        )
    })
}

pub(crate) fn from_i64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(crate) fn snapshot(
    session_id: &str,
    row: SessionRow,
    messages: Vec<(String, String)>,
) -> Result<SessionSnapshot, SessionError> {
    let bad = |what: &str, e: serde_json::Error| {
        SessionError::corrupt(session_id, format!("{what}: {e}"))
    };
    let agent_state: Map =
        serde_json::from_str(&row.agent_state).map_err(|e| bad("agent state", e))?;
    let conversation_manager_state: Value = serde_json::from_str(&row.conversation_manager_state)
        .map_err(|e| bad("conversation-manager state", e))?;
    let pending_interrupts: Option<PendingInterrupts> = row
        .pending_interrupts
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| bad("pending interrupts", e))?;
    let messages = messages
        .into_iter()
        .map(|(id, body)| {
            let id = uuid::Uuid::parse_str(&id).map_err(|e| {
                SessionError::corrupt(session_id, format!("message id {id:?}: {e}"))
            })?;
            let message = Message::from_json(&body)
                .map_err(|e| SessionError::corrupt(session_id, e.to_string()))?;
            Ok(StoredMessage::new(MessageId(id), message))
        })
        .collect::<Result<Vec<_>, SessionError>>()?;
    let mut s = SessionSnapshot::empty(session_id);
    s.schema_version = u32::try_from(row.schema_version).unwrap_or(u32::MAX);
    s.version = from_i64(row.version);
    s.history_start = from_i64(row.history_start);
    s.messages = messages;
    s.agent_state = agent_state;
    s.conversation_manager_state = conversation_manager_state;
    s.pending_interrupts = pending_interrupts;
    s.check_schema()
}
