//! What a session store fails with.

use rein_core::{Error, error::BoxError};

/// A session store's failure: a conflict with another writer, I/O, a store that stayed
/// unreachable, a corrupt or too-new record, an invalid session id or store setting.
///
/// Stores return it; an agent bound to a session fails its invocation with it inside
/// [`Error::Session`], where [`SessionError::of`] finds it again:
///
/// ```
/// use rein_core::Error;
/// use rein_sessions::SessionError;
///
/// let e: Error = SessionError::Conflict { session_id: "s".into(), expected: 1, found: 2 }.into();
/// assert!(SessionError::of(&e).is_some_and(SessionError::is_conflict));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A write carried a stale version: another writer changed the session first. Nothing was
    /// written; reload the session and redo the write.
    #[error(
        "session '{session_id}' was changed by another writer: expected version {expected}, found {found}"
    )]
    Conflict {
        /// The session.
        session_id: String,
        /// The version the write expected.
        expected: u64,
        /// The version the store holds.
        found: u64,
    },
    /// Reading or writing the store failed: the file system, the database, its connection.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (with the path, for files).
        what: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// The store could not be reached, or lost its connection, and the bounded retries did
    /// not get through (the PostgreSQL store: a server restarting, down, or unreachable).
    /// Worth trying again later. A load or delete that fails with it changed nothing. A
    /// write that fails with it was applied whole or not at all — never in part — and which
    /// one is not known: reload the session to see (its version and messages tell).
    #[error("{what}: {source}")]
    Unavailable {
        /// What was being done, and how many tries were made.
        what: String,
        /// The last failure.
        #[source]
        source: BoxError,
    },
    /// What is stored cannot be read as a session.
    #[error("session '{session_id}' is corrupt: {reason}")]
    Corrupt {
        /// The session.
        session_id: String,
        /// What is wrong.
        reason: String,
    },
    /// The session was written by a newer release of Rein.
    #[error(
        "session '{session_id}': {what} has schema version {found}, newer than this release reads ({supported})"
    )]
    SchemaTooNew {
        /// The session.
        session_id: String,
        /// Which record (`the session`, `its pending interrupts`, `log entry 7`).
        what: String,
        /// The version found.
        found: u32,
        /// The newest version this release reads.
        supported: u32,
    },
    /// A session id that stores cannot use.
    #[error(
        "invalid session id {0:?}: use 1 to 128 characters of A-Z a-z 0-9 . _ - not starting with '.'"
    )]
    InvalidId(String),
    /// A store setting that cannot work: a malformed database URL, a pool of 0 connections,
    /// CA certificates that are not PEM certificates. Nothing was connected.
    #[error("invalid session store setting: {0}")]
    Config(String),
    /// The store does not do this (a store of your own without the optional
    /// [`pending_sessions`](crate::SessionStore::pending_sessions), say).
    #[error("this session store does not support {0}")]
    Unsupported(String),
}

impl SessionError {
    /// The session error inside an agent's error, if that is what it is.
    pub fn of(error: &Error) -> Option<&SessionError> {
        match error {
            Error::Session(source) => source.downcast_ref(),
            _ => None,
        }
    }

    /// Whether another writer changed the session first.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// Whether the store could not be reached within the retries
    /// ([`Unavailable`](Self::Unavailable)): try again later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    pub(crate) fn io(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Io {
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn corrupt(session_id: &str, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            session_id: session_id.to_owned(),
            reason: reason.into(),
        }
    }
}

impl From<SessionError> for Error {
    fn from(e: SessionError) -> Self {
        Error::Session(Box::new(e))
    }
}
