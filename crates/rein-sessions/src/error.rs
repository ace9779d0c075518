//! What a session store fails with.

use rein_core::{Error, error::BoxError};

/// A session store's failure: a conflict with another writer, I/O, a corrupt or too-new
/// record, an invalid session id.
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
