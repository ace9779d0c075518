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
    /// Restate (ingress or admin API) could not be reached; the cause (the HTTP client's
    /// error, with its own cause: a refused connection, a timeout...) is its
    /// [`source`](std::error::Error::source).
    #[error("cannot reach Restate")]
    Unreachable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Restate or the session refused the request: HTTP status and Restate's message (a 4xx is
    /// the caller's: unknown session, no pending interrupts, a malformed request...).
    #[error("HTTP {status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What Restate said.
        message: String,
    },
    /// [`register`](crate::register) refused: Restate holds a deployment at this address that
    /// serves other services than the agent's. Overwriting it would move the invocations pinned
    /// to it onto other code: register the agent's workers at a new address (the guide's
    /// rollout), or, knowingly, overwrite it with
    /// [`register_replacing`](crate::register_replacing).
    #[error(
        "{url} is registered already, with other services: register the workers at a new \
         address (a new deployment; keep the old one until its runs have ended), or overwrite \
         it knowingly with register_replacing ({message})"
    )]
    DeploymentExists {
        /// The deployment's address.
        url: String,
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
    /// Restate could not be reached: the HTTP client's error (the URL left out of it) kept
    /// as the cause.
    pub(crate) fn unreachable(e: reqwest::Error) -> Self {
        Self::Unreachable(Box::new(e.without_url()))
    }

    /// The HTTP status Restate answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #37: the cause of an unreachable Restate is kept (it was dropped).
    #[tokio::test]
    async fn an_unreachable_restate_keeps_its_cause() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(9);
        let client = crate::Client::new(&format!("http://127.0.0.1:{port}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = client
            .session("s")
            .await
            .expect_err("nothing listens there");
        assert!(matches!(e, Error::Unreachable(_)), "{e}");
        let mut chain = Vec::new();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            chain.push(c.to_string());
            cause = c.source();
        }
        assert!(
            chain.iter().any(|c| c.to_lowercase().contains("connect")),
            "{chain:?}"
        );
    }
}
