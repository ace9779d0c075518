//! [`PostgresSessionStore`]: sessions in PostgreSQL, for many workers (feature `postgres`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Transaction};

use crate::error::SessionError;
use crate::model::{SESSION_SCHEMA_VERSION, SessionSnapshot, SessionWrite, validate_session_id};
use crate::sql::{self, Column, ColumnValue, SessionRow, SqlTransaction};
use crate::store::SessionStore;

/// Sessions in PostgreSQL: the store for many workers on many machines.
///
/// The same two tables as the SQLite store (`rein_sessions`, `rein_session_messages`; JSON
/// kept as text, so it reads as written), created when missing. A write is one transaction
/// whose first statement is `UPDATE rein_sessions SET version = version + 1 WHERE
/// session_id = $1 AND version = $expected` (an `INSERT ... ON CONFLICT DO NOTHING` for a
/// new session): the row lock serializes concurrent writers, and the one that finds another
/// version writes nothing and gets [`SessionError::Conflict`].
///
/// The store holds a small pool of connections (default 4); clones share it. Connections are
/// made without TLS: use it on a trusted network or through a local proxy, or build the
/// clients yourself with [`from_clients`](Self::from_clients).
#[derive(Debug, Clone)]
pub struct PostgresSessionStore {
    pool: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    clients: Vec<Mutex<Client>>,
    next: AtomicUsize,
}

fn db_err(e: tokio_postgres::Error) -> SessionError {
    SessionError::io("postgres", e)
}

impl PostgresSessionStore {
    /// Connects with `url` (`postgres://user:password@host:port/db` or key=value form),
    /// opening `connections` connections (at least 1), and creates the tables when missing.
    /// Needs a tokio runtime (each connection is driven by a spawned task).
    pub async fn connect(url: &str, connections: usize) -> Result<Self, SessionError> {
        let mut clients = Vec::new();
        for _ in 0..connections.max(1) {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(db_err)?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "postgres session store connection closed");
                }
            });
            clients.push(client);
        }
        Self::from_clients(clients).await
    }

    /// A store over clients you connected (e.g. with TLS); creates the tables when missing.
    pub async fn from_clients(clients: Vec<Client>) -> Result<Self, SessionError> {
        if clients.is_empty() {
            return Err(SessionError::io(
                "postgres session store",
                "no connected client was given",
            ));
        }
        let store = Self {
            pool: Arc::new(Pool {
                clients: clients.into_iter().map(Mutex::new).collect(),
                next: AtomicUsize::new(0),
            }),
        };
        {
            let mut client = store.client().await;
            let tx = client.transaction().await.map_err(db_err)?;
            // Serializes concurrent schema creation by several workers.
            tx.execute("SELECT pg_advisory_xact_lock(7310553)", &[])
                .await
                .map_err(db_err)?;
            tx.batch_execute(&sql::schema("BIGINT", "TIMESTAMPTZ NOT NULL DEFAULT now()"))
                .await
                .map_err(db_err)?;
            tx.commit().await.map_err(db_err)?;
        }
        Ok(store)
    }

    async fn client(&self) -> MutexGuard<'_, Client> {
        for c in &self.pool.clients {
            if let Ok(g) = c.try_lock() {
                return g;
            }
        }
        let i = self.pool.next.fetch_add(1, Ordering::Relaxed) % self.pool.clients.len();
        self.pool.clients[i].lock().await
    }
}

impl SessionStore for PostgresSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        validate_session_id(session_id)?;
        let mut client = self.client().await;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_err)?;
        sql::load(tx, session_id).await
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        validate_session_id(session_id)?;
        let mut client = self.client().await;
        let tx = client.transaction().await.map_err(db_err)?;
        sql::write(tx, session_id, expected_version, &writes).await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        validate_session_id(session_id)?;
        let client = self.client().await;
        client
            .execute(
                "DELETE FROM rein_sessions WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(db_err)?;
        Ok(())
    }
}

/// The schema version, in the column's type.
fn schema_version() -> i32 {
    i32::try_from(SESSION_SCHEMA_VERSION).unwrap_or(i32::MAX)
}

/// Runs a statement; the number of rows it changed.
async fn exec(
    tx: &Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, SessionError> {
    tx.execute(sql, params).await.map_err(db_err)
}

impl SqlTransaction for Transaction<'_> {
    async fn session_row(&self, id: &str) -> sql::Result<Option<SessionRow>> {
        let row = self
            .query_opt(
                "SELECT version, schema_version, history_start, agent_state, \
                 conversation_manager_state, pending_interrupts \
                 FROM rein_sessions WHERE session_id = $1",
                &[&id],
            )
            .await
            .map_err(db_err)?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(SessionRow {
            version: row.try_get(0).map_err(db_err)?,
            schema_version: i64::from(row.try_get::<_, i32>(1).map_err(db_err)?),
            history_start: row.try_get(2).map_err(db_err)?,
            agent_state: row.try_get(3).map_err(db_err)?,
            conversation_manager_state: row.try_get(4).map_err(db_err)?,
            pending_interrupts: row.try_get(5).map_err(db_err)?,
        }))
    }

    async fn messages(&self, id: &str) -> sql::Result<Vec<(String, String)>> {
        self.query(
            "SELECT message_id, message FROM rein_session_messages \
             WHERE session_id = $1 ORDER BY seq",
            &[&id],
        )
        .await
        .map_err(db_err)?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(db_err)
    }

    async fn version(&self, id: &str) -> sql::Result<Option<i64>> {
        self.query_opt(
            "SELECT version FROM rein_sessions WHERE session_id = $1",
            &[&id],
        )
        .await
        .map_err(db_err)?
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(db_err)
    }

    async fn create(&self, id: &str) -> sql::Result<bool> {
        let n = exec(
            self,
            "INSERT INTO rein_sessions (session_id, version, schema_version) \
             VALUES ($1, 1, $2) ON CONFLICT (session_id) DO NOTHING",
            &[&id, &schema_version()],
        )
        .await?;
        Ok(n == 1)
    }

    async fn bump(&self, id: &str, expected: i64) -> sql::Result<bool> {
        let n = exec(
            self,
            "UPDATE rein_sessions SET version = version + 1, schema_version = $3, \
             updated_at = now() WHERE session_id = $1 AND version = $2",
            &[&id, &expected, &schema_version()],
        )
        .await?;
        Ok(n == 1)
    }

    async fn next_seq(&self, id: &str) -> sql::Result<i64> {
        self.query_one(
            "SELECT COALESCE(MAX(seq) + 1, 0)::BIGINT FROM rein_session_messages \
             WHERE session_id = $1",
            &[&id],
        )
        .await
        .map_err(db_err)?
        .try_get(0)
        .map_err(db_err)
    }

    async fn insert_msg(&self, id: &str, seq: i64, msg_id: &str, json: &str) -> sql::Result<()> {
        exec(
            self,
            "INSERT INTO rein_session_messages (session_id, seq, message_id, message) \
             VALUES ($1, $2, $3, $4)",
            &[&id, &seq, &msg_id, &json],
        )
        .await
        .map(drop)
    }

    async fn update_msg(&self, id: &str, msg_id: &str, json: &str) -> sql::Result<()> {
        exec(
            self,
            "UPDATE rein_session_messages SET message = $3 \
             WHERE session_id = $1 AND message_id = $2",
            &[&id, &msg_id, &json],
        )
        .await
        .map(drop)
    }

    async fn delete_msgs(&self, id: &str) -> sql::Result<()> {
        exec(
            self,
            "DELETE FROM rein_session_messages WHERE session_id = $1",
            &[&id],
        )
        .await
        .map(drop)
    }

    async fn set(&self, id: &str, column: Column, value: ColumnValue) -> sql::Result<()> {
        let value: &(dyn ToSql + Sync) = match &value {
            ColumnValue::Int(n) => n,
            ColumnValue::Text(t) => t,
        };
        let sql = format!(
            "UPDATE rein_sessions SET {} = $2 WHERE session_id = $1",
            column.name()
        );
        exec(self, &sql, &[&id, value]).await.map(drop)
    }

    async fn commit(self) -> sql::Result<()> {
        Transaction::commit(self).await.map_err(db_err)
    }
}
