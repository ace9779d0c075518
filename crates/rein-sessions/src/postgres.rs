//! [`PostgresSessionStore`]: sessions in PostgreSQL, for many workers (feature `postgres`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::{Client, NoTls, Transaction};

use crate::error::SessionError;
use crate::model::{SESSION_SCHEMA_VERSION, SessionSnapshot, SessionWrite, validate_session_id};
use crate::sql::{SessionRow, encode, from_i64, snapshot, to_i64};
use crate::store::SessionStore;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rein_sessions (
    session_id TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    schema_version INTEGER NOT NULL,
    history_start BIGINT NOT NULL DEFAULT 0,
    agent_state TEXT NOT NULL DEFAULT '{}',
    conversation_manager_state TEXT NOT NULL DEFAULT 'null',
    pending_interrupts TEXT,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rein_session_messages (
    session_id TEXT NOT NULL REFERENCES rein_sessions(session_id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    message_id TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS rein_session_messages_id ON rein_session_messages (session_id, message_id);
";

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
            tx.batch_execute(SCHEMA).await.map_err(db_err)?;
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
        let row = tx
            .query_opt(
                "SELECT version, schema_version, history_start, agent_state, \
                 conversation_manager_state, pending_interrupts \
                 FROM rein_sessions WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(db_err)?;
        let Some(row) = row else { return Ok(None) };
        let row = SessionRow {
            version: row.try_get(0).map_err(db_err)?,
            schema_version: i64::from(row.try_get::<_, i32>(1).map_err(db_err)?),
            history_start: row.try_get(2).map_err(db_err)?,
            agent_state: row.try_get(3).map_err(db_err)?,
            conversation_manager_state: row.try_get(4).map_err(db_err)?,
            pending_interrupts: row.try_get(5).map_err(db_err)?,
        };
        let messages = tx
            .query(
                "SELECT message_id, message FROM rein_session_messages \
                 WHERE session_id = $1 ORDER BY seq",
                &[&session_id],
            )
            .await
            .map_err(db_err)?
            .into_iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<Vec<(String, String)>, tokio_postgres::Error>>()
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        snapshot(session_id, row, messages).map(Some)
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        validate_session_id(session_id)?;
        let expected = to_i64(expected_version)?;
        let schema = i32::try_from(SESSION_SCHEMA_VERSION).unwrap_or(i32::MAX);
        let mut client = self.client().await;
        let tx = client.transaction().await.map_err(db_err)?;
        let claimed = if expected_version == 0 {
            tx.execute(
                "INSERT INTO rein_sessions (session_id, version, schema_version) \
                 VALUES ($1, 1, $2) ON CONFLICT (session_id) DO NOTHING",
                &[&session_id, &schema],
            )
            .await
            .map_err(db_err)?
        } else {
            tx.execute(
                "UPDATE rein_sessions SET version = version + 1, schema_version = $3, \
                 updated_at = now() WHERE session_id = $1 AND version = $2",
                &[&session_id, &expected, &schema],
            )
            .await
            .map_err(db_err)?
        };
        if claimed != 1 {
            let found = tx
                .query_opt(
                    "SELECT version FROM rein_sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .await
                .map_err(db_err)?
                .map(|r| r.try_get::<_, i64>(0))
                .transpose()
                .map_err(db_err)?
                .map_or(0, from_i64);
            // Dropping the transaction rolls it back.
            return Err(SessionError::Conflict {
                session_id: session_id.into(),
                expected: expected_version,
                found,
            });
        }
        let mut next_seq = None;
        for w in &writes {
            apply(&tx, session_id, w, &mut next_seq).await?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(expected_version + 1)
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

async fn next(
    tx: &Transaction<'_>,
    id: &str,
    next_seq: &mut Option<i64>,
) -> Result<i64, SessionError> {
    let n = match *next_seq {
        Some(n) => n,
        None => tx
            .query_one(
                "SELECT COALESCE(MAX(seq) + 1, 0)::BIGINT FROM rein_session_messages \
                 WHERE session_id = $1",
                &[&id],
            )
            .await
            .map_err(db_err)?
            .try_get(0)
            .map_err(db_err)?,
    };
    *next_seq = Some(n + 1);
    Ok(n)
}

async fn apply(
    tx: &Transaction<'_>,
    id: &str,
    write: &SessionWrite,
    next_seq: &mut Option<i64>,
) -> Result<(), SessionError> {
    const INSERT: &str = "INSERT INTO rein_session_messages (session_id, seq, message_id, \
                          message) VALUES ($1, $2, $3, $4)";
    match write {
        SessionWrite::AppendMessage(m) => {
            let seq = next(tx, id, next_seq).await?;
            let body = encode("a message", &m.message)?;
            tx.execute(INSERT, &[&id, &seq, &m.id.to_string(), &body])
                .await
                .map_err(db_err)?;
        }
        SessionWrite::UpdateMessage(m) => {
            let body = encode("a message", &m.message)?;
            tx.execute(
                "UPDATE rein_session_messages SET message = $3 \
                 WHERE session_id = $1 AND message_id = $2",
                &[&id, &m.id.to_string(), &body],
            )
            .await
            .map_err(db_err)?;
        }
        SessionWrite::ReplaceMessages(ms) => {
            tx.execute(
                "DELETE FROM rein_session_messages WHERE session_id = $1",
                &[&id],
            )
            .await
            .map_err(db_err)?;
            *next_seq = Some(0);
            for m in ms {
                let seq = next(tx, id, next_seq).await?;
                let body = encode("a message", &m.message)?;
                tx.execute(INSERT, &[&id, &seq, &m.id.to_string(), &body])
                    .await
                    .map_err(db_err)?;
            }
            tx.execute(
                "UPDATE rein_sessions SET history_start = 0 WHERE session_id = $1",
                &[&id],
            )
            .await
            .map_err(db_err)?;
        }
        SessionWrite::SetHistoryStart(n) => {
            let n = to_i64(*n)?;
            tx.execute(
                "UPDATE rein_sessions SET history_start = $2 WHERE session_id = $1",
                &[&id, &n],
            )
            .await
            .map_err(db_err)?;
        }
        SessionWrite::SetAgentState(s) => {
            let v = encode("the agent state", s)?;
            tx.execute(
                "UPDATE rein_sessions SET agent_state = $2 WHERE session_id = $1",
                &[&id, &v],
            )
            .await
            .map_err(db_err)?;
        }
        SessionWrite::SetConversationManagerState(s) => {
            let v = encode("the conversation-manager state", s)?;
            tx.execute(
                "UPDATE rein_sessions SET conversation_manager_state = $2 WHERE session_id = $1",
                &[&id, &v],
            )
            .await
            .map_err(db_err)?;
        }
        SessionWrite::SetPendingInterrupts(p) => {
            let v = p
                .as_ref()
                .map(|p| encode("the pending interrupts", p))
                .transpose()?;
            tx.execute(
                "UPDATE rein_sessions SET pending_interrupts = $2 WHERE session_id = $1",
                &[&id, &v],
            )
            .await
            .map_err(db_err)?;
        }
    }
    Ok(())
}
