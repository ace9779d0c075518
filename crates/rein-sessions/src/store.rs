//! The [`SessionStore`] trait, its type-erased twin, and the in-memory store.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use rein_core::tool::BoxFuture;

use crate::error::SessionError;
use crate::model::{SessionSnapshot, SessionWrite, validate_session_id};

/// Where sessions live. Every store versions each session: a session that was never written
/// is at version 0, and each successful [`write`](SessionStore::write) adds 1.
///
/// Writes are optimistic: a write names the version it expects; when the store holds another
/// version, nothing is written and the write fails with [`SessionError::Conflict`] (`found`
/// is the version the store holds). The retry path is: [`load`](SessionStore::load) the
/// session again, recompute the writes against it, write with the new version. A
/// [`SessionManager`](crate::SessionManager) surfaces the conflict from the agent's
/// invocation; the agent then reloads with `Agent::load_session` and the request is redone.
///
/// All the writes of one call are applied atomically: a crash (even `SIGKILL` or a power
/// cut for the file and SQLite stores) leaves the session at the old or the new version,
/// never in between.
///
/// ```
/// use rein_sessions::{MemorySessionStore, SessionError, SessionStore, SessionWrite, StoredMessage};
/// use rein_core::{Message, id::MessageId};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), SessionError> {
/// let store = MemorySessionStore::new();
/// let hello = SessionWrite::AppendMessage(StoredMessage::new(MessageId::new(), Message::user("hi")));
/// assert_eq!(store.write("s1", 0, vec![hello.clone()]).await?, 1);
/// // A stale writer loses, typed; nothing is written.
/// let err = store.write("s1", 0, vec![hello.clone()]).await.unwrap_err();
/// assert!(matches!(err, SessionError::Conflict { expected: 0, found: 1, .. }));
/// // The retry path: reload, then write against the version found.
/// let current = store.load("s1").await?.map_or(0, |s| s.version);
/// assert_eq!(store.write("s1", current, vec![hello]).await?, 2);
/// assert_eq!(store.load("s1").await?.unwrap().messages.len(), 2);
/// # Ok(()) }
/// ```
pub trait SessionStore: Send + Sync + 'static {
    /// The session at its current version; `None` when it was never written.
    fn load(
        &self,
        session_id: &str,
    ) -> impl Future<Output = Result<Option<SessionSnapshot>, SessionError>> + Send;

    /// Applies `writes` atomically if the session is at `expected_version` (0 creates it).
    /// Returns the new version.
    fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> impl Future<Output = Result<u64, SessionError>> + Send;

    /// Deletes the session (nothing happens when it does not exist).
    fn delete(&self, session_id: &str) -> impl Future<Output = Result<(), SessionError>> + Send;

    /// The ids of sessions with pending interrupts (a paused run), in id order: those after
    /// `after` (a cursor: the last id of the previous page), at most `limit`. The stores of
    /// this crate keep an index for it (SQL: a partial index; files: a marker per session), so
    /// it reads only paused sessions. The default — for a store of your own that keeps no
    /// index — is [`SessionError::Unsupported`].
    fn pending_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, SessionError>> + Send {
        let _ = (after, limit);
        async {
            Err(SessionError::Unsupported(
                "listing the sessions with pending interrupts".into(),
            ))
        }
    }
}

/// The object-safe twin of [`SessionStore`].
trait ErasedSessionStore: Send + Sync {
    fn load_erased<'a>(
        &'a self,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SessionSnapshot>, SessionError>>;
    fn write_erased<'a>(
        &'a self,
        session_id: &'a str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> BoxFuture<'a, Result<u64, SessionError>>;
    fn delete_erased<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Result<(), SessionError>>;
    fn pending_erased<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>, SessionError>>;
}

impl<S: SessionStore> ErasedSessionStore for S {
    fn load_erased<'a>(
        &'a self,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SessionSnapshot>, SessionError>> {
        Box::pin(self.load(session_id))
    }
    fn write_erased<'a>(
        &'a self,
        session_id: &'a str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> BoxFuture<'a, Result<u64, SessionError>> {
        Box::pin(self.write(session_id, expected_version, writes))
    }
    fn delete_erased<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Result<(), SessionError>> {
        Box::pin(self.delete(session_id))
    }
    fn pending_erased<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>, SessionError>> {
        Box::pin(self.pending_sessions(after, limit))
    }
}

/// Any [`SessionStore`], type-erased and shareable. Cloning is cheap. It is itself a
/// [`SessionStore`].
#[derive(Clone)]
pub struct SharedSessionStore(Arc<dyn ErasedSessionStore>);

impl SharedSessionStore {
    /// Wraps a store.
    pub fn new<S: SessionStore>(store: S) -> Self {
        Self(Arc::new(store))
    }
}

impl fmt::Debug for SharedSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSessionStore").finish_non_exhaustive()
    }
}

impl SessionStore for SharedSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        self.0.load_erased(session_id).await
    }
    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        self.0
            .write_erased(session_id, expected_version, writes)
            .await
    }
    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        self.0.delete_erased(session_id).await
    }
    async fn pending_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, SessionError> {
        self.0.pending_erased(after, limit).await
    }
}

/// Sessions in memory (per process; lost at exit). For tests, and as the reference the
/// durable stores are checked against.
#[derive(Debug, Clone, Default)]
pub struct MemorySessionStore {
    sessions: Arc<Mutex<HashMap<String, SessionSnapshot>>>,
}

impl MemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SessionStore for MemorySessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        validate_session_id(session_id)?;
        let map = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(map.get(session_id).cloned())
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        validate_session_id(session_id)?;
        let mut map = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let found = map.get(session_id).map_or(0, |s| s.version);
        if found != expected_version {
            return Err(SessionError::Conflict {
                session_id: session_id.into(),
                expected: expected_version,
                found,
            });
        }
        let s = map
            .entry(session_id.to_owned())
            .or_insert_with(|| SessionSnapshot::empty(session_id));
        s.apply(&writes);
        s.version += 1;
        Ok(s.version)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        validate_session_id(session_id)?;
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(session_id);
        Ok(())
    }

    async fn pending_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, SessionError> {
        let map = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ids: Vec<String> = map
            .values()
            .filter(|s| s.pending_interrupts.is_some())
            .map(|s| s.session_id.clone())
            .filter(|id| after.is_none_or(|a| id.as_str() > a))
            .collect();
        ids.sort_unstable();
        ids.truncate(limit);
        Ok(ids)
    }
}
