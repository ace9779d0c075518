//! The crate's one error type.

/// What can go wrong serving or calling durable agents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The worker could not bind or accept.
    #[error("worker I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A configuration is refused: a worker without an authenticator, with an identity key
    /// that does not parse, or on an address other than loopback without an identity key; a
    /// client's bearer token that is not a header value.
    #[error("configuration refused: {0}")]
    Config(String),
    /// Restate (ingress or admin API) could not be reached.
    #[error("cannot reach Restate: {0}")]
    Unreachable(String),
    /// Restate or the session refused the request: HTTP status and Restate's message (a 4xx is
    /// the caller's: unknown session, no pending interrupts, a malformed request...).
    #[error("HTTP {status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What Restate said.
        message: String,
    },
    /// A response was not the JSON expected.
    #[error("unexpected response: {0}")]
    Decode(String),
    /// The HTTP client could not be built.
    #[error(transparent)]
    Rein(#[from] rein_core::Error),
}

impl Error {
    /// The HTTP status Restate answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}
