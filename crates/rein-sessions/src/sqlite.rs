//! [`SqliteSessionStore`]: sessions in an embedded SQLite database (feature `sqlite`).

use std::path::Path;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rusqlite::{
    Connection, OptionalExtension as _, Params, ToSql, Transaction, TransactionBehavior, params,
};

use crate::error::SessionError;
use crate::model::{SessionSnapshot, SessionWrite, validate_session_id};
use crate::sql::{self, Column, ColumnValue, SessionRow, SqlTransaction};
use crate::store::SessionStore;

/// Sessions in an embedded SQLite database (bundled SQLite; WAL journal, `synchronous=FULL`,
/// so a committed write survives a crash or power cut).
///
/// Tables `rein_sessions` (one row per session: version, schema version, history start,
/// agent state, conversation-manager state, pending interrupts, all JSON as text) and
/// `rein_session_messages` (`session_id`, `seq`, `message_id`, `message` JSON). A write is one
/// `BEGIN IMMEDIATE` transaction that bumps the version only where it is still the expected
/// one (the same write as the PostgreSQL store's), so writers in several processes sharing
/// the file are serialized by SQLite and a stale one gets [`SessionError::Conflict`].
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
            conn.execute_batch(&sql::schema(
                "INTEGER",
                "TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP",
            ))?;
            conn.execute_batch(sql::PENDING_INDEX)?;
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
            now(sql::load(tx, &id))
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
            now(sql::write(tx, &id, expected_version, &writes))
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

    async fn pending_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, SessionError> {
        let after = after.unwrap_or_default().to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_conn(move |conn| {
            // The partial index `rein_sessions_pending` holds only paused sessions.
            let mut st = conn
                .prepare_cached(
                    "SELECT session_id FROM rein_sessions \
                     WHERE pending_interrupts IS NOT NULL AND session_id > ?1 \
                     ORDER BY session_id LIMIT ?2",
                )
                .map_err(db_err)?;
            st.query_map(params![after, limit], |r| r.get(0))
                .map_err(db_err)?
                .collect::<rusqlite::Result<Vec<String>>>()
                .map_err(db_err)
        })
        .await
    }
}

/// The output of a future that is ready when first polled. The load and the write are
/// shared with the PostgreSQL store, so they are async; but every rusqlite statement completes
/// synchronously (on the blocking pool), so they never wait.
fn now<T>(f: impl Future<Output = Result<T, SessionError>>) -> Result<T, SessionError> {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(SessionError::io("sqlite", "a statement did not complete")),
    }
}

/// Runs a statement (prepared once per connection); the number of rows it changed.
fn exec(tx: &Transaction<'_>, sql: &str, params: impl Params) -> Result<usize, SessionError> {
    tx.prepare_cached(sql)
        .and_then(|mut st| st.execute(params))
        .map_err(db_err)
}

/// Reads the first row of a statement (prepared once per connection), when there is one.
fn query_opt<T>(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl Params,
    row: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Option<T>, SessionError> {
    tx.prepare_cached(sql)
        .and_then(|mut st| st.query_row(params, row).optional())
        .map_err(db_err)
}

impl SqlTransaction for Transaction<'_> {
    async fn session_row(&self, id: &str) -> sql::Result<Option<SessionRow>> {
        query_opt(
            self,
            "SELECT version, schema_version, history_start, agent_state, \
             conversation_manager_state, pending_interrupts \
             FROM rein_sessions WHERE session_id = ?1",
            [id],
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
    }

    async fn messages(&self, id: &str) -> sql::Result<Vec<(String, String)>> {
        let mut st = self
            .prepare_cached(
                "SELECT message_id, message FROM rein_session_messages \
                 WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(db_err)?;
        st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err)
    }

    async fn version(&self, id: &str) -> sql::Result<Option<i64>> {
        query_opt(
            self,
            "SELECT version FROM rein_sessions WHERE session_id = ?1",
            [id],
            |r| r.get(0),
        )
    }

    async fn create(&self, id: &str, schema: u32) -> sql::Result<bool> {
        let n = exec(
            self,
            "INSERT INTO rein_sessions (session_id, version, schema_version) \
             VALUES (?1, 1, ?2) ON CONFLICT (session_id) DO NOTHING",
            params![id, schema],
        )?;
        Ok(n == 1)
    }

    async fn bump(&self, id: &str, expected: i64, schema: u32) -> sql::Result<bool> {
        let n = exec(
            self,
            "UPDATE rein_sessions SET version = version + 1, \
             schema_version = MAX(schema_version, ?3), \
             updated_at = CURRENT_TIMESTAMP WHERE session_id = ?1 AND version = ?2",
            params![id, expected, schema],
        )?;
        Ok(n == 1)
    }

    async fn next_seq(&self, id: &str) -> sql::Result<i64> {
        let n = query_opt(
            self,
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM rein_session_messages WHERE session_id = ?1",
            [id],
            |r| r.get(0),
        )?;
        Ok(n.unwrap_or(0))
    }

    async fn insert_msg(&self, id: &str, seq: i64, msg_id: &str, json: &str) -> sql::Result<()> {
        exec(
            self,
            "INSERT INTO rein_session_messages (session_id, seq, message_id, message) \
             VALUES (?1, ?2, ?3, ?4)",
            params![id, seq, msg_id, json],
        )
        .map(drop)
    }

    async fn update_msg(&self, id: &str, msg_id: &str, json: &str) -> sql::Result<()> {
        exec(
            self,
            "UPDATE rein_session_messages SET message = ?3 \
             WHERE session_id = ?1 AND message_id = ?2",
            params![id, msg_id, json],
        )
        .map(drop)
    }

    async fn approvals(&self, id: &str) -> sql::Result<Vec<String>> {
        let mut st = self
            .prepare_cached(
                "SELECT record FROM rein_session_approvals WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(db_err)?;
        st.query_map([id], |r| r.get(0))
            .map_err(db_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err)
    }

    async fn insert_approval(&self, id: &str, json: &str) -> sql::Result<()> {
        exec(
            self,
            "INSERT INTO rein_session_approvals (session_id, seq, record)              SELECT ?1, COALESCE(MAX(seq) + 1, 0), ?2 FROM rein_session_approvals              WHERE session_id = ?1",
            params![id, json],
        )
        .map(drop)
    }

    async fn delete_msgs(&self, id: &str) -> sql::Result<()> {
        exec(
            self,
            "DELETE FROM rein_session_messages WHERE session_id = ?1",
            [id],
        )
        .map(drop)
    }

    async fn set(&self, id: &str, column: Column, value: ColumnValue) -> sql::Result<()> {
        let value: &dyn ToSql = match &value {
            ColumnValue::Int(n) => n,
            ColumnValue::Text(t) => t,
        };
        let sql = format!(
            "UPDATE rein_sessions SET {} = ?2 WHERE session_id = ?1",
            column.name()
        );
        exec(self, &sql, params![id, value]).map(drop)
    }

    async fn commit(self) -> sql::Result<()> {
        Transaction::commit(self).map_err(db_err)
    }
}
