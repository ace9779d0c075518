//! [`SqliteSessionStore`]: sessions in an embedded SQLite database (feature `sqlite`).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};

use crate::error::SessionError;
use crate::model::{SESSION_SCHEMA_VERSION, SessionSnapshot, SessionWrite, validate_session_id};
use crate::sql::{SessionRow, encode, from_i64, snapshot, to_i64};
use crate::store::SessionStore;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rein_sessions (
    session_id TEXT PRIMARY KEY NOT NULL,
    version INTEGER NOT NULL,
    schema_version INTEGER NOT NULL,
    history_start INTEGER NOT NULL DEFAULT 0,
    agent_state TEXT NOT NULL DEFAULT '{}',
    conversation_manager_state TEXT NOT NULL DEFAULT 'null',
    pending_interrupts TEXT,
    updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE IF NOT EXISTS rein_session_messages (
    session_id TEXT NOT NULL REFERENCES rein_sessions(session_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS rein_session_messages_id ON rein_session_messages (session_id, message_id);
";

/// Sessions in an embedded SQLite database (bundled SQLite; WAL journal, `synchronous=FULL`,
/// so a committed write survives a crash or power cut).
///
/// Tables `rein_sessions` (one row per session: version, schema version, history start,
/// agent state, conversation-manager state, pending interrupts, all JSON as text) and
/// `rein_session_messages` (`session_id`, `seq`, `message_id`, `message` JSON). A write is one
/// `BEGIN IMMEDIATE` transaction that checks the version and bumps it, so writers in several
/// processes sharing the file are serialized by SQLite and a stale one gets
/// [`SessionError::Conflict`].
///
/// Calls run on tokio's blocking pool over one connection per store value (clones share it).
#[derive(Debug, Clone)]
pub struct SqliteSessionStore {
    conn: Arc<Mutex<Connection>>,
}

fn db_err(e: rusqlite::Error) -> SessionError {
    SessionError::io("sqlite", e)
}

impl SqliteSessionStore {
    /// Opens (and creates when missing) the database file at `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SessionError> {
        let path = path.as_ref().to_owned();
        Self::init(move || Connection::open(path)).await
    }

    /// A private in-memory database (for tests).
    pub async fn open_in_memory() -> Result<Self, SessionError> {
        Self::init(Connection::open_in_memory).await
    }

    async fn init(
        open: impl FnOnce() -> rusqlite::Result<Connection> + Send + 'static,
    ) -> Result<Self, SessionError> {
        let conn = tokio::task::spawn_blocking(move || {
            let conn = open()?;
            conn.busy_timeout(Duration::from_secs(30))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "FULL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            conn.execute_batch(SCHEMA)?;
            Ok::<_, rusqlite::Error>(conn)
        })
        .await
        .map_err(|e| SessionError::io("sqlite task", e))?
        .map_err(db_err)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, SessionError> + Send + 'static,
    ) -> Result<T, SessionError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut guard)
        })
        .await
        .map_err(|e| SessionError::io("sqlite task", e))?
    }
}

impl SessionStore for SqliteSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        validate_session_id(session_id)?;
        let id = session_id.to_owned();
        self.with_conn(move |conn| {
            let tx = conn.transaction().map_err(db_err)?;
            let row = tx
                .query_row(
                    "SELECT version, schema_version, history_start, agent_state, \
                     conversation_manager_state, pending_interrupts \
                     FROM rein_sessions WHERE session_id = ?1",
                    [&id],
                    |r| {
                        Ok(SessionRow {
                            version: r.get(0)?,
                            schema_version: r.get(1)?,
                            history_start: r.get(2)?,
                            agent_state: r.get(3)?,
                            conversation_manager_state: r.get(4)?,
                            pending_interrupts: r.get(5)?,
                        })
                    },
                )
                .optional()
                .map_err(db_err)?;
            let Some(row) = row else { return Ok(None) };
            let mut stmt = tx
                .prepare_cached(
                    "SELECT message_id, message FROM rein_session_messages \
                     WHERE session_id = ?1 ORDER BY seq",
                )
                .map_err(db_err)?;
            let messages = stmt
                .query_map([&id], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(db_err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db_err)?;
            drop(stmt);
            tx.commit().map_err(db_err)?;
            snapshot(&id, row, messages).map(Some)
        })
        .await
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        validate_session_id(session_id)?;
        let id = session_id.to_owned();
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db_err)?;
            let found: u64 = tx
                .query_row(
                    "SELECT version FROM rein_sessions WHERE session_id = ?1",
                    [&id],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
                .map_err(db_err)?
                .map_or(0, from_i64);
            if found != expected_version {
                return Err(SessionError::Conflict {
                    session_id: id,
                    expected: expected_version,
                    found,
                });
            }
            let version = expected_version + 1;
            if expected_version == 0 {
                tx.execute(
                    "INSERT INTO rein_sessions (session_id, version, schema_version) \
                     VALUES (?1, 1, ?2)",
                    params![id, SESSION_SCHEMA_VERSION],
                )
                .map_err(db_err)?;
            } else {
                tx.execute(
                    "UPDATE rein_sessions SET version = ?2, schema_version = ?3, \
                     updated_at = CURRENT_TIMESTAMP WHERE session_id = ?1",
                    params![id, to_i64(version)?, SESSION_SCHEMA_VERSION],
                )
                .map_err(db_err)?;
            }
            let mut next_seq: Option<i64> = None;
            for w in &writes {
                apply(&tx, &id, w, &mut next_seq)?;
            }
            tx.commit().map_err(db_err)?;
            Ok(version)
        })
        .await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        validate_session_id(session_id)?;
        let id = session_id.to_owned();
        self.with_conn(move |conn| {
            conn.execute("DELETE FROM rein_sessions WHERE session_id = ?1", [&id])
                .map_err(db_err)?;
            Ok(())
        })
        .await
    }
}

fn apply(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    write: &SessionWrite,
    next_seq: &mut Option<i64>,
) -> Result<(), SessionError> {
    let insert = "INSERT INTO rein_session_messages (session_id, seq, message_id, message) \
                  VALUES (?1, ?2, ?3, ?4)";
    match write {
        SessionWrite::AppendMessage(m) => {
            let s = next(tx, id, next_seq)?;
            tx.prepare_cached(insert)
                .and_then(|mut st| {
                    st.execute(params![
                        id,
                        s,
                        m.id.to_string(),
                        encode("a message", &m.message).map_err(to_sql)?
                    ])
                })
                .map_err(db_err)?;
        }
        SessionWrite::UpdateMessage(m) => {
            tx.execute(
                "UPDATE rein_session_messages SET message = ?3 \
                 WHERE session_id = ?1 AND message_id = ?2",
                params![id, m.id.to_string(), encode("a message", &m.message)?],
            )
            .map_err(db_err)?;
        }
        SessionWrite::ReplaceMessages(ms) => {
            tx.execute(
                "DELETE FROM rein_session_messages WHERE session_id = ?1",
                [id],
            )
            .map_err(db_err)?;
            *next_seq = Some(0);
            for m in ms {
                let s = next(tx, id, next_seq)?;
                tx.execute(
                    insert,
                    params![id, s, m.id.to_string(), encode("a message", &m.message)?],
                )
                .map_err(db_err)?;
            }
            set(tx, id, "history_start", &0i64)?;
        }
        SessionWrite::SetHistoryStart(n) => set(tx, id, "history_start", &to_i64(*n)?)?,
        SessionWrite::SetAgentState(s) => {
            set(tx, id, "agent_state", &encode("the agent state", s)?)?;
        }
        SessionWrite::SetConversationManagerState(s) => set(
            tx,
            id,
            "conversation_manager_state",
            &encode("the conversation-manager state", s)?,
        )?,
        SessionWrite::SetPendingInterrupts(p) => {
            let v = p
                .as_ref()
                .map(|p| encode("the pending interrupts", p))
                .transpose()?;
            set(tx, id, "pending_interrupts", &v)?;
        }
    }
    Ok(())
}

/// The next message sequence number of the session (read once per write).
fn next(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    next_seq: &mut Option<i64>,
) -> Result<i64, SessionError> {
    let n = match *next_seq {
        Some(n) => n,
        None => tx
            .query_row(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM rein_session_messages WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )
            .map_err(db_err)?,
    };
    *next_seq = Some(n + 1);
    Ok(n)
}

fn to_sql(e: SessionError) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(e.to_string())))
}

fn set(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    column: &'static str,
    value: &dyn rusqlite::ToSql,
) -> Result<(), SessionError> {
    tx.execute(
        &format!("UPDATE rein_sessions SET {column} = ?2 WHERE session_id = ?1"),
        params![id, value],
    )
    .map_err(db_err)?;
    Ok(())
}
