//! [`PostgresSessionStore`]: sessions in PostgreSQL, for many workers (feature `postgres`):
//! a pool of connections that replaces broken ones, TLS, and operations that survive a server
//! restart.

mod builder;
mod retry;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use rein_core::tool::BoxFuture;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Transaction};

pub use builder::{PostgresSessionStoreBuilder, TlsMode, TlsRoots};
use retry::{RetryPolicy, is_transient};

use crate::error::SessionError;
use crate::model::{SessionSnapshot, SessionWrite, validate_session_id};
use crate::sql::{self, Column, ColumnValue, SessionRow, SqlTransaction};
use crate::store::SessionStore;

/// How many of a session's latest write ids its row keeps (`write_ids`, newest first): a
/// write whose commit went unanswered is recognised as committed while fewer than this many
/// writes came after it.
const WRITE_ID_WINDOW: u64 = 16;

/// Sessions in PostgreSQL: the store for many workers on many machines.
///
/// The same two tables as the SQLite store (`rein_sessions`, `rein_session_messages`; JSON
/// kept as text, so it reads as written), created when missing. A write is one transaction
/// whose first statement is `UPDATE rein_sessions SET version = version + 1 WHERE
/// session_id = $1 AND version = $expected` (an `INSERT ... ON CONFLICT DO NOTHING` for a
/// new session): the row lock serializes concurrent writers, and the one that finds another
/// version writes nothing and gets [`SessionError::Conflict`].
///
/// Built with [`builder`](Self::builder): a pool of at most
/// [`pool_size`](PostgresSessionStoreBuilder::pool_size) connections (clones share it), made
/// on demand, a broken one dropped and replaced; TLS with certificate verification
/// ([`TlsMode`]); and bounded retries when the connection is lost or refused. A load or a
/// delete is simply tried again. A write whose connection broke is tried again only when
/// that is safe: each write records a random id with the version it claims, so after a lost
/// answer to its commit the store reads back whether that id holds the version — then the
/// write succeeded — or not, and then it is written again (or conflicts, if another writer
/// came first). A write is never applied in part and never twice. When the retries run out
/// the operation fails with [`SessionError::Unavailable`].
///
/// ```no_run
/// use std::time::Duration;
/// use rein_sessions::{PostgresSessionStore, SessionStore, TlsMode, TlsRoots};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_sessions::SessionError> {
/// let store = PostgresSessionStore::builder("postgres://rein@db.internal/rein")
///     .pool_size(8)
///     .tls(TlsMode::Require { ca: TlsRoots::PemFile("/etc/rein/db-ca.pem".into()) })
///     .application_name("checkout-worker")
///     .timeout(Duration::from_secs(10))
///     .build()
///     .await?;
/// let session = store.load("ticket-7").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresSessionStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// The longest one try may take.
    timeout: Duration,
    retry: RetryPolicy,
}

impl fmt::Debug for PostgresSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.inner.pool.status();
        f.debug_struct("PostgresSessionStore")
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .field("timeout", &self.inner.timeout)
            .field("max_retries", &self.inner.retry.max_retries)
            .finish()
    }
}

pub(crate) fn db_err(e: tokio_postgres::Error) -> SessionError {
    SessionError::io("postgres", PgError(e))
}

/// A tokio-postgres error, shown with its causes: its own message names only the kind ("db
/// error", "error performing TLS handshake"). The causes are in the message, so it has no
/// `source`.
#[derive(Debug)]
pub(crate) struct PgError(pub(crate) tokio_postgres::Error);

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = std::error::Error::source(&self.0);
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl std::error::Error for PgError {}

impl PostgresSessionStore {
    /// A builder for a store at `url` (`postgres://user:password@host:port/db` or the
    /// key=value form): pool size, TLS, timeouts and retries.
    pub fn builder(url: &str) -> PostgresSessionStoreBuilder {
        PostgresSessionStoreBuilder::new(url)
    }

    /// Connects with `url` with at most `connections` pooled connections (at least 1) and
    /// the other settings at their defaults (no TLS), and creates the tables when missing:
    /// `builder(url).pool_size(connections).build()`. Needs a tokio runtime.
    pub async fn connect(url: &str, connections: usize) -> Result<Self, SessionError> {
        Self::builder(url)
            .pool_size(connections.max(1))
            .build()
            .await
    }

    /// Creates the tables when missing, and the `write_ids` column in tables made by earlier
    /// releases.
    async fn create_schema(&self) -> Result<(), SessionError> {
        self.with_retries(&CreateSchema).await
    }

    /// Runs `op` on a pooled connection; when it fails on a lost, refused or timed-out
    /// connection, waits (exponential backoff) and runs it again on another, up to the retry
    /// budget; then [`SessionError::Unavailable`].
    async fn with_retries<A: Attempt>(&self, op: &A) -> Result<A::Output, SessionError> {
        let mut tries = 0u32;
        loop {
            tries += 1;
            let err = match self.try_once(op).await {
                Ok(v) => return Ok(v),
                Err(e) if !is_transient(&e) => return Err(e),
                Err(e) => e,
            };
            if tries > self.inner.retry.max_retries {
                return Err(SessionError::Unavailable {
                    what: format!("postgres: {}: gave up after {tries} tries", op.what()),
                    source: Box::new(err),
                });
            }
            let wait = self.inner.retry.backoff(tries);
            tracing::debug!(error = %err, try_number = tries, ?wait, "postgres session store: retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// One try of `op`, on a pooled connection, within the timeout. A connection on which it
    /// failed transiently (or timed out) is dropped, not given back to the pool.
    async fn try_once<A: Attempt>(&self, op: &A) -> Result<A::Output, SessionError> {
        let mut held: Option<Object> = None;
        let timeout = self.inner.timeout;
        let result = tokio::time::timeout(timeout, async {
            let pooled = self.inner.pool.get().await.map_err(builder::pool_err)?;
            let client: &mut Client = held.insert(pooled);
            op.run(client).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(SessionError::io(
                "postgres",
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {timeout:?}"),
                ),
            ))
        });
        if let (Err(e), Some(client)) = (&result, held)
            && is_transient(e)
        {
            drop(Object::take(client));
        }
        result
    }
}

/// One operation of the store, safe to run again after a lost connection (a write checks
/// first whether its earlier try was committed). Boxed futures keep the retry loop's future
/// `Send` without naming the operations' future types.
trait Attempt: Sync {
    type Output: Send;
    /// What is being done, for errors.
    fn what(&self) -> String;
    /// One try on `client`.
    fn run<'c>(
        &'c self,
        client: &'c mut Client,
    ) -> BoxFuture<'c, Result<Self::Output, SessionError>>;
}

/// Creating the tables (under an advisory lock: many workers may start at once).
struct CreateSchema;

impl Attempt for CreateSchema {
    type Output = ();
    fn what(&self) -> String {
        "creating the session tables".into()
    }
    fn run<'c>(&'c self, client: &'c mut Client) -> BoxFuture<'c, Result<(), SessionError>> {
        Box::pin(async move {
            let tx = client.transaction().await.map_err(db_err)?;
            tx.execute("SELECT pg_advisory_xact_lock(7310553)", &[])
                .await
                .map_err(db_err)?;
            tx.batch_execute(&sql::schema("BIGINT", "TIMESTAMPTZ NOT NULL DEFAULT now()"))
                .await
                .map_err(db_err)?;
            // ADD COLUMN takes the table's exclusive lock even when the column exists: only
            // when it is missing.
            let has_write_ids = tx
                .query_opt(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = \
                     current_schema() AND table_name = 'rein_sessions' AND column_name = 'write_ids'",
                    &[],
                )
                .await
                .map_err(db_err)?
                .is_some();
            if !has_write_ids {
                tx.batch_execute("ALTER TABLE rein_sessions ADD COLUMN write_ids TEXT[]")
                    .await
                    .map_err(db_err)?;
            }
            tx.commit().await.map_err(db_err)?;
            // The paused-session index in a transaction of its own, created only when it is
            // missing: CREATE INDEX locks the sessions table even when the index exists, and
            // waiting for that lock while holding the messages table's (the schema above)
            // deadlocks with a writer holding the sessions table and waiting for the messages.
            let tx = client.transaction().await.map_err(db_err)?;
            tx.execute("SELECT pg_advisory_xact_lock(7310553)", &[])
                .await
                .map_err(db_err)?;
            let has_pending_index = tx
                .query_opt(
                    "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() \
                     AND indexname = 'rein_sessions_pending'",
                    &[],
                )
                .await
                .map_err(db_err)?
                .is_some();
            if !has_pending_index {
                tx.batch_execute(sql::PENDING_INDEX).await.map_err(db_err)?;
            }
            tx.commit().await.map_err(db_err)
        })
    }
}

/// Loading a session: a read-only transaction, simply run again.
struct Load<'a> {
    session_id: &'a str,
}

impl Attempt for Load<'_> {
    type Output = Option<SessionSnapshot>;
    fn what(&self) -> String {
        format!("loading session '{}'", self.session_id)
    }
    fn run<'c>(
        &'c self,
        client: &'c mut Client,
    ) -> BoxFuture<'c, Result<Self::Output, SessionError>> {
        Box::pin(async move {
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(db_err)?;
            sql::load(PgTx { tx, write: None }, self.session_id).await
        })
    }
}

/// Deleting a session: one statement, the same however often it runs.
struct Delete<'a> {
    session_id: &'a str,
}

impl Attempt for Delete<'_> {
    type Output = ();
    fn what(&self) -> String {
        format!("deleting session '{}'", self.session_id)
    }
    fn run<'c>(&'c self, client: &'c mut Client) -> BoxFuture<'c, Result<(), SessionError>> {
        Box::pin(async move {
            client
                .execute(
                    "DELETE FROM rein_sessions WHERE session_id = $1",
                    &[&self.session_id],
                )
                .await
                .map_err(db_err)?;
            Ok(())
        })
    }
}

/// A versioned write, tagged with a random id recorded with the version it claims.
struct Write<'a> {
    session_id: &'a str,
    expected: u64,
    writes: &'a [SessionWrite],
    write_id: String,
    /// Set once the COMMIT is sent: a connection lost after it leaves the outcome open, and
    /// the next try first looks whether it was committed.
    commit_sent: AtomicBool,
}

impl<'a> Write<'a> {
    fn new(session_id: &'a str, expected: u64, writes: &'a [SessionWrite]) -> Self {
        Self {
            session_id,
            expected,
            writes,
            write_id: uuid::Uuid::new_v4().simple().to_string(),
            commit_sent: AtomicBool::new(false),
        }
    }

    /// After a commit that went unanswered: whether it was committed. `Some(version)` when
    /// this write's id holds the version it claimed; `None` when it was not committed (write
    /// it again: it succeeds, or conflicts if another writer came first);
    /// [`SessionError::Unavailable`] when so many writes came after it that its id is no
    /// longer kept (more than [`WRITE_ID_WINDOW`] during the retries).
    async fn committed(&self, client: &Client) -> Result<Option<u64>, SessionError> {
        let row = client
            .query_opt(
                "SELECT version, COALESCE($2::text = ANY(write_ids), false) \
                 FROM rein_sessions WHERE session_id = $1",
                &[&self.session_id, &self.write_id],
            )
            .await
            .map_err(db_err)?;
        let Some(row) = row else { return Ok(None) };
        let version = u64::try_from(row.try_get::<_, i64>(0).map_err(db_err)?).unwrap_or(0);
        if row.try_get::<_, bool>(1).map_err(db_err)? {
            return Ok(Some(self.expected + 1));
        }
        if version > self.expected.saturating_add(WRITE_ID_WINDOW) {
            return Err(SessionError::Unavailable {
                what: format!(
                    "postgres: writing session '{}': the connection broke while the write was \
                     committing, and {} later writes hide whether it was applied: reload the \
                     session",
                    self.session_id,
                    version - self.expected
                ),
                source: "commit unanswered".into(),
            });
        }
        Ok(None)
    }
}

impl Attempt for Write<'_> {
    type Output = u64;
    fn what(&self) -> String {
        format!("writing session '{}'", self.session_id)
    }
    fn run<'c>(&'c self, client: &'c mut Client) -> BoxFuture<'c, Result<u64, SessionError>> {
        Box::pin(async move {
            if self.commit_sent.load(Ordering::Relaxed) {
                if let Some(v) = self.committed(client).await? {
                    return Ok(v);
                }
                self.commit_sent.store(false, Ordering::Relaxed);
            }
            let tx = client.transaction().await.map_err(db_err)?;
            let write = Some(WriteTag {
                id: &self.write_id,
                commit_sent: &self.commit_sent,
            });
            sql::write(
                PgTx { tx, write },
                self.session_id,
                self.expected,
                self.writes,
            )
            .await
        })
    }
}

impl SessionStore for PostgresSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        validate_session_id(session_id)?;
        self.with_retries(&Load { session_id }).await
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        validate_session_id(session_id)?;
        self.with_retries(&Write::new(session_id, expected_version, &writes))
            .await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        validate_session_id(session_id)?;
        self.with_retries(&Delete { session_id }).await
    }

    async fn pending_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, SessionError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_retries(&Pending {
            after: after.unwrap_or_default(),
            limit,
        })
        .await
    }
}

/// Listing paused sessions (the partial index `rein_sessions_pending`): a read, simply run
/// again.
struct Pending<'a> {
    after: &'a str,
    limit: i64,
}

impl Attempt for Pending<'_> {
    type Output = Vec<String>;
    fn what(&self) -> String {
        "listing the sessions with pending interrupts".into()
    }
    fn run<'c>(
        &'c self,
        client: &'c mut Client,
    ) -> BoxFuture<'c, Result<Self::Output, SessionError>> {
        Box::pin(async move {
            client
                .query(
                    "SELECT session_id FROM rein_sessions \
                     WHERE pending_interrupts IS NOT NULL AND session_id > $1 \
                     ORDER BY session_id LIMIT $2",
                    &[&self.after, &self.limit],
                )
                .await
                .map_err(db_err)?
                .into_iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, tokio_postgres::Error>>()
                .map_err(db_err)
        })
    }
}

/// A transaction of the store: a load's, or a write's with its [`WriteTag`].
struct PgTx<'a> {
    tx: Transaction<'a>,
    write: Option<WriteTag<'a>>,
}

/// What a write records and reports for the retry: its id, and whether its COMMIT was sent.
#[derive(Clone, Copy)]
struct WriteTag<'a> {
    id: &'a str,
    commit_sent: &'a AtomicBool,
}

impl PgTx<'_> {
    fn write_id(&self) -> Option<&str> {
        self.write.map(|w| w.id)
    }
}

/// A schema version, in the column's type.
fn schema_version(schema: u32) -> i32 {
    i32::try_from(schema).unwrap_or(i32::MAX)
}

/// Runs a statement; the number of rows it changed.
async fn exec(
    tx: &PgTx<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, SessionError> {
    tx.tx.execute(sql, params).await.map_err(db_err)
}

impl SqlTransaction for PgTx<'_> {
    async fn session_row(&self, id: &str) -> sql::Result<Option<SessionRow>> {
        let row = self
            .tx
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
        self.tx
            .query(
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
        self.tx
            .query_opt(
                "SELECT version FROM rein_sessions WHERE session_id = $1",
                &[&id],
            )
            .await
            .map_err(db_err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(db_err)
    }

    async fn create(&self, id: &str, schema: u32) -> sql::Result<bool> {
        let n = exec(
            self,
            "INSERT INTO rein_sessions (session_id, version, schema_version, write_ids) \
             VALUES ($1, 1, $2, ARRAY[$3::text]) ON CONFLICT (session_id) DO NOTHING",
            &[&id, &schema_version(schema), &self.write_id()],
        )
        .await?;
        Ok(n == 1)
    }

    async fn bump(&self, id: &str, expected: i64, schema: u32) -> sql::Result<bool> {
        // Keeps the newest WRITE_ID_WINDOW (16) write ids.
        let n = exec(
            self,
            "UPDATE rein_sessions SET version = version + 1, \
             schema_version = GREATEST(schema_version, $3), \
             updated_at = now(), write_ids = (ARRAY[$4::text] || COALESCE(write_ids, '{}'))[1:16] \
             WHERE session_id = $1 AND version = $2",
            &[&id, &expected, &schema_version(schema), &self.write_id()],
        )
        .await?;
        Ok(n == 1)
    }

    async fn next_seq(&self, id: &str) -> sql::Result<i64> {
        self.tx
            .query_one(
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

    async fn approvals(&self, id: &str) -> sql::Result<Vec<String>> {
        self.tx
            .query(
                "SELECT record FROM rein_session_approvals WHERE session_id = $1 ORDER BY seq",
                &[&id],
            )
            .await
            .map_err(db_err)?
            .into_iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(db_err)
    }

    async fn insert_approval(&self, id: &str, json: &str) -> sql::Result<()> {
        exec(
            self,
            "INSERT INTO rein_session_approvals (session_id, seq, record)              SELECT $1, COALESCE(MAX(seq) + 1, 0), $2 FROM rein_session_approvals              WHERE session_id = $1",
            &[&id, &json],
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
        if let Some(w) = self.write {
            w.commit_sent.store(true, Ordering::Relaxed);
        }
        self.tx.commit().await.map_err(db_err)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rein_core::{Message, id::MessageId};

    use super::*;
    use crate::model::StoredMessage;

    /// `REIN_TEST_POSTGRES` (`.ci/peers-postgres.sh`); skipped without it, except in CI.
    fn postgres_url() -> Option<String> {
        let url = std::env::var("REIN_TEST_POSTGRES")
            .ok()
            .filter(|u| !u.is_empty());
        assert!(
            url.is_some() || std::env::var_os("CI").is_none(),
            "REIN_TEST_POSTGRES is unset in CI"
        );
        if url.is_none() {
            eprintln!("\n*** SKIPPED: REIN_TEST_POSTGRES is unset ***\n");
        }
        url
    }

    fn append(text: &str) -> Vec<SessionWrite> {
        let m = StoredMessage::new(MessageId::new(), Message::user(text));
        vec![SessionWrite::AppendMessage(m)]
    }

    /// The retry after a COMMIT whose answer was lost, as the retry loop runs it (the flag
    /// set as a broken connection would leave it).
    async fn retry_after_lost_answer(
        store: &PostgresSessionStore,
        w: &Write<'_>,
    ) -> Result<u64, SessionError> {
        w.commit_sent.store(true, Ordering::Relaxed);
        store.with_retries(w).await
    }

    #[tokio::test]
    async fn a_retry_after_an_unanswered_commit_tells_whether_it_was_applied() {
        let Some(url) = postgres_url() else { return };
        let store = PostgresSessionStore::connect(&url, 1).await.unwrap();
        let id = format!("commit-{}", uuid::Uuid::new_v4().simple());

        // Committed, the answer lost: the retry finds its id and does not write again.
        let a = append("a");
        let first = Write::new(&id, 0, &a);
        assert_eq!(store.with_retries(&first).await.unwrap(), 1);
        assert_eq!(retry_after_lost_answer(&store, &first).await.unwrap(), 1);
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!((s.version, s.messages.len()), (1, 1));

        // Not committed (the connection broke before the commit arrived): written by the retry.
        let b = append("b");
        let second = Write::new(&id, 1, &b);
        assert_eq!(retry_after_lost_answer(&store, &second).await.unwrap(), 2);
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!((s.version, s.messages.len()), (2, 2));

        // Not committed, and another writer took the version meanwhile: a plain conflict.
        let late = Write::new(&id, 1, &b);
        let err = retry_after_lost_answer(&store, &late).await.unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Conflict {
                    expected: 1,
                    found: 2,
                    ..
                }
            ),
            "{err}"
        );

        // The row keeps the ids of its last WRITE_ID_WINDOW versions (here 2..=17): the
        // second write is still told apart, the first no longer — typed, not guessed.
        for v in 2..1 + WRITE_ID_WINDOW {
            store.write(&id, v, append("x")).await.unwrap();
        }
        assert_eq!(retry_after_lost_answer(&store, &second).await.unwrap(), 2);
        assert!(matches!(
            retry_after_lost_answer(&store, &late).await,
            Err(SessionError::Conflict { .. })
        ));
        let err = retry_after_lost_answer(&store, &first).await.unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        store
            .write(&id, 1 + WRITE_ID_WINDOW, append("x"))
            .await
            .unwrap();
        for w in [&second, &late] {
            let err = retry_after_lost_answer(&store, w).await.unwrap_err();
            assert!(err.is_unavailable(), "{err}");
        }
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.version, 2 + WRITE_ID_WINDOW);
        assert_eq!(s.messages.len() as u64, s.version, "nothing written twice");
        store.delete(&id).await.unwrap();
    }
}
