//! What the SQL stores share: the schema, the load and the versioned write (once, over the
//! few statements each database provides), and the decoding of rows.

use rein_core::{Map, Message, id::MessageId};
use serde_json::Value;

use crate::error::SessionError;
use crate::model::{
    SessionSnapshot, SessionWrite, StoredMessage, json_err, paused_run, schema_of_writes, too_new,
};

/// The tables of both SQL stores, with each database's 64-bit integer type (`int64`) and
/// `updated_at` column type and default (`timestamp`).
pub(crate) fn schema(int64: &str, timestamp: &str) -> String {
    format!(
        "
CREATE TABLE IF NOT EXISTS rein_sessions (
    session_id TEXT PRIMARY KEY NOT NULL,
    version {int64} NOT NULL,
    schema_version INTEGER NOT NULL,
    history_start {int64} NOT NULL DEFAULT 0,
    agent_state TEXT NOT NULL DEFAULT '{{}}',
    conversation_manager_state TEXT NOT NULL DEFAULT 'null',
    pending_interrupts TEXT,
    updated_at {timestamp}
);
-- Before the messages' index: created (once, on upgrade) while holding no other table's lock.
CREATE TABLE IF NOT EXISTS rein_session_approvals (
    session_id TEXT NOT NULL REFERENCES rein_sessions(session_id) ON DELETE CASCADE,
    seq {int64} NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS rein_session_messages (
    session_id TEXT NOT NULL REFERENCES rein_sessions(session_id) ON DELETE CASCADE,
    seq {int64} NOT NULL,
    message_id TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS rein_session_messages_id ON rein_session_messages (session_id, message_id);
"
    )
}

/// The index of paused sessions ([`SessionStore::pending_sessions`](crate::SessionStore::pending_sessions)):
/// only the rows with pending interrupts. Not in [`schema`]: `CREATE INDEX` locks the sessions
/// table even when the index exists, and a schema step that waits on it while writers hold it
/// deadlocks with them (PostgreSQL creates it, when it is missing, in a transaction of its
/// own).
pub(crate) const PENDING_INDEX: &str = "CREATE INDEX IF NOT EXISTS rein_sessions_pending \
    ON rein_sessions (session_id) WHERE pending_interrupts IS NOT NULL";

/// A result whose error is a [`SessionError`].
pub(crate) type Result<T, E = SessionError> = std::result::Result<T, E>;

/// One session's row.
pub(crate) struct SessionRow {
    pub(crate) version: i64,
    pub(crate) schema_version: i64,
    pub(crate) history_start: i64,
    pub(crate) agent_state: String,
    pub(crate) conversation_manager_state: String,
    pub(crate) pending_interrupts: Option<String>,
}

/// A `rein_sessions` column that [`SessionWrite`]s set.
#[derive(Clone, Copy)]
pub(crate) enum Column {
    HistoryStart,
    AgentState,
    ConversationManagerState,
    PendingInterrupts,
}

/// A value for a [`Column`].
pub(crate) enum ColumnValue {
    Int(i64),
    Text(Option<String>),
}

/// An open transaction of one SQL database: the statements [`load`] and [`write`] are made
/// of. Each runs one statement in the transaction; `id` is always the session id. The
/// rusqlite implementation is synchronous (its futures are ready when first polled); the
/// tokio-postgres one awaits the server.
pub(crate) trait SqlTransaction: Sized {
    /// The session's row, when it exists.
    async fn session_row(&self, id: &str) -> Result<Option<SessionRow>>;
    /// The session's messages as (message id, message JSON), in sequence order.
    async fn messages(&self, id: &str) -> Result<Vec<(String, String)>>;
    /// The session's version, when it exists.
    async fn version(&self, id: &str) -> Result<Option<i64>>;
    /// Inserts the session's row at version 1 unless one exists; whether it was inserted.
    async fn create(&self, id: &str, schema: u32) -> Result<bool>;
    /// Moves the session from version `expected` to `expected + 1` (and to the current
    /// schema version); whether it was at `expected`.
    async fn bump(&self, id: &str, expected: i64, schema: u32) -> Result<bool>;
    /// The sequence number after the session's last message (0 when it has none).
    async fn next_seq(&self, id: &str) -> Result<i64>;
    /// Inserts a message (`msg_id`, `json`) at `seq`.
    async fn insert_msg(&self, id: &str, seq: i64, msg_id: &str, json: &str) -> Result<()>;
    /// Rewrites the message `msg_id` as `json` (nothing when there is none).
    async fn update_msg(&self, id: &str, msg_id: &str, json: &str) -> Result<()>;
    /// The session's approval records (JSON), oldest first.
    async fn approvals(&self, id: &str) -> Result<Vec<String>>;
    /// Appends an approval record (JSON) after the session's last.
    async fn insert_approval(&self, id: &str, json: &str) -> Result<()>;
    /// Deletes all the session's messages.
    async fn delete_msgs(&self, id: &str) -> Result<()>;
    /// Sets one column of the session's row.
    async fn set(&self, id: &str, column: Column, value: ColumnValue) -> Result<()>;
    /// Commits the transaction (dropping it uncommitted rolls it back).
    async fn commit(self) -> Result<()>;
}

/// The session at its current version, read in `tx`; `None` when it was never written.
pub(crate) async fn load<T: SqlTransaction>(
    tx: T,
    session_id: &str,
) -> Result<Option<SessionSnapshot>> {
    let Some(row) = tx.session_row(session_id).await? else {
        return Ok(None);
    };
    let messages = tx.messages(session_id).await?;
    let approvals = tx.approvals(session_id).await?;
    tx.commit().await?;
    snapshot(session_id, row, messages, approvals).map(Some)
}

/// The versioned write, in `tx`: the first statement claims the version (creates the row for
/// version 0, else bumps it only where it is still `expected_version`), so the row lock
/// serializes concurrent writers; one that finds another version commits nothing and gets
/// [`SessionError::Conflict`]. Then the writes, in order; then the commit. Returns the new
/// version.
pub(crate) async fn write<T: SqlTransaction>(
    tx: T,
    session_id: &str,
    expected_version: u64,
    writes: &[SessionWrite],
) -> Result<u64> {
    // A session with approval entries is marked with the schema that added them (never
    // lowered again): see `SESSION_SCHEMA_VERSION`.
    let schema = schema_of_writes(writes);
    let claimed = if expected_version == 0 {
        tx.create(session_id, schema).await?
    } else {
        tx.bump(session_id, to_i64(expected_version)?, schema)
            .await?
    };
    if !claimed {
        let found = tx.version(session_id).await?.map_or(0, from_i64);
        // Dropping the transaction rolls it back.
        return Err(SessionError::Conflict {
            session_id: session_id.into(),
            expected: expected_version,
            found,
        });
    }
    let mut next_seq = None;
    for w in writes {
        apply(&tx, session_id, w, &mut next_seq).await?;
    }
    tx.commit().await?;
    Ok(expected_version + 1)
}

async fn apply<T: SqlTransaction>(
    tx: &T,
    id: &str,
    write: &SessionWrite,
    next_seq: &mut Option<i64>,
) -> Result<()> {
    match write {
        SessionWrite::AppendMessage(m) => {
            let seq = next(tx, id, next_seq).await?;
            let body = encode("a message", &m.message)?;
            tx.insert_msg(id, seq, &m.id.to_string(), &body).await?;
        }
        SessionWrite::UpdateMessage(m) => {
            let body = encode("a message", &m.message)?;
            tx.update_msg(id, &m.id.to_string(), &body).await?;
        }
        SessionWrite::ReplaceMessages(ms) => {
            tx.delete_msgs(id).await?;
            *next_seq = Some(0);
            for m in ms {
                let seq = next(tx, id, next_seq).await?;
                let body = encode("a message", &m.message)?;
                tx.insert_msg(id, seq, &m.id.to_string(), &body).await?;
            }
            tx.set(id, Column::HistoryStart, ColumnValue::Int(0))
                .await?;
        }
        SessionWrite::SetHistoryStart(n) => {
            let n = ColumnValue::Int(to_i64(*n)?);
            tx.set(id, Column::HistoryStart, n).await?;
        }
        SessionWrite::SetAgentState(s) => {
            let v = ColumnValue::Text(Some(encode("the agent state", s)?));
            tx.set(id, Column::AgentState, v).await?;
        }
        SessionWrite::SetConversationManagerState(s) => {
            let v = encode("the conversation-manager state", s)?;
            let v = ColumnValue::Text(Some(v));
            tx.set(id, Column::ConversationManagerState, v).await?;
        }
        SessionWrite::SetPendingInterrupts(p) => {
            let v = p
                .as_ref()
                .map(|p| encode("the pending interrupts", p))
                .transpose()?;
            tx.set(id, Column::PendingInterrupts, ColumnValue::Text(v))
                .await?;
        }
        SessionWrite::AppendApprovals(records) => {
            for r in records {
                tx.insert_approval(id, &encode("an approval record", r)?)
                    .await?;
            }
        }
    }
    Ok(())
}

/// The next message sequence number of the session (read once per write).
async fn next<T: SqlTransaction>(tx: &T, id: &str, next_seq: &mut Option<i64>) -> Result<i64> {
    let n = match *next_seq {
        Some(n) => n,
        None => tx.next_seq(id).await?,
    };
    *next_seq = Some(n + 1);
    Ok(n)
}

impl Column {
    /// The column's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::HistoryStart => "history_start",
            Self::AgentState => "agent_state",
            Self::ConversationManagerState => "conversation_manager_state",
            Self::PendingInterrupts => "pending_interrupts",
        }
    }
}

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| json_err(&format!("encoding {what}"), e))
}

fn to_i64(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| {
        SessionError::io(
            "a version or position",
            format!("{n} is out of range for the database"),
        )
    })
}

fn from_i64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn snapshot(
    session_id: &str,
    row: SessionRow,
    messages: Vec<(String, String)>,
    approvals: Vec<String>,
) -> Result<SessionSnapshot> {
    // Before anything is decoded: a newer release may have changed the columns' shapes.
    let schema = u64::try_from(row.schema_version).unwrap_or(0);
    if let Some(e) = too_new(session_id, "the session", schema) {
        return Err(e);
    }
    let bad = |what: &str, e: serde_json::Error| {
        SessionError::corrupt(session_id, format!("{what}: {e}"))
    };
    let agent_state: Map =
        serde_json::from_str(&row.agent_state).map_err(|e| bad("agent state", e))?;
    let conversation_manager_state: Value = serde_json::from_str(&row.conversation_manager_state)
        .map_err(|e| bad("conversation-manager state", e))?;
    let pending_interrupts = match row.pending_interrupts.as_deref() {
        None => None,
        Some(text) => {
            let value = serde_json::from_str(text).map_err(|e| bad("pending interrupts", e))?;
            Some(paused_run(session_id, value)?)
        }
    };
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
        .collect::<Result<Vec<_>>>()?;
    let approvals = approvals
        .iter()
        .map(|text| serde_json::from_str(text).map_err(|e| bad("an approval record", e)))
        .collect::<Result<Vec<_>>>()?;
    let mut s = SessionSnapshot::empty(session_id);
    s.approvals = approvals;
    s.schema_version = u32::try_from(row.schema_version).unwrap_or(u32::MAX);
    s.version = from_i64(row.version);
    s.history_start = from_i64(row.history_start);
    s.messages = messages;
    s.agent_state = agent_state;
    s.conversation_manager_state = conversation_manager_state;
    s.pending_interrupts = pending_interrupts;
    s.check_schema()
}
