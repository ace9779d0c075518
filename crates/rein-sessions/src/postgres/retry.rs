//! When the PostgreSQL store tries again: which failures are a lost or refused connection
//! (worth another try on a fresh connection) and how long to wait before it.

use std::error::Error as StdError;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::time::Duration;

use tokio_postgres::error::SqlState;

use super::PgError;
use crate::error::SessionError;

/// How often, and how far apart, an operation that lost its connection is tried again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Tries after the first one.
    pub(crate) max_retries: u32,
    /// The wait before the first retry; doubled for each next one.
    pub(crate) first_backoff: Duration,
    /// The longest wait between two tries.
    pub(crate) max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // 0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 2 + 2 + 2 ≈ 9 s of waiting: longer than a fast restart
        // or a fail-over of a managed server, short enough that a caller is not stuck.
        Self {
            max_retries: 8,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): exponential, capped, with jitter (a
    /// random part of up to half the wait, so workers that lost the server together do not
    /// come back in lock-step).
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .first_backoff
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20));
        let wait = exp.min(self.max_backoff);
        let half = wait / 2;
        // Process-random bits without a dependency: a fresh RandomState is randomly keyed.
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let jitter_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(r % jitter_nanos.max(1))
    }
}

/// Whether `e` is a lost, refused or timed-out connection, or a server that is shutting down
/// or starting up: a failure a later try on a fresh connection may not have. Everything else
/// (SQL errors, a refused password, a certificate that does not verify, a conflict) is final.
pub(crate) fn is_transient(e: &SessionError) -> bool {
    match e {
        SessionError::Io { source, .. } => chain_is_transient(source.as_ref()),
        _ => false,
    }
}

fn chain_is_transient(e: &(dyn StdError + 'static)) -> bool {
    if let Some(PgError(pg)) = e.downcast_ref::<PgError>() {
        if pg.is_closed() {
            return true;
        }
        if let Some(code) = pg.code() {
            return is_transient_state(code);
        }
        // Kinds Io, Connect, Tls: the io::Error underneath, if any, decides.
        let mut cause = pg.source();
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<io::Error>() {
                return io_is_transient(io);
            }
            cause = c.source();
        }
        return false;
    }
    e.downcast_ref::<io::Error>().is_some_and(io_is_transient)
}

fn io_is_transient(io: &io::Error) -> bool {
    // A TLS failure reaches us as an io::Error holding the rustls error: final.
    if io
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
    {
        return false;
    }
    is_transient_io(io.kind())
}

fn is_transient_state(code: &SqlState) -> bool {
    // Class 08: connection exception; 57P01-03: the server is shutting down, crashed, or is
    // not yet accepting connections; 53300: too many connections (another worker's pool).
    code.code().starts_with("08")
        || [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code)
}

fn is_transient_io(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | BrokenPipe
            | UnexpectedEof
            | TimedOut
            | Interrupted
            | AddrNotAvailable
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = RetryPolicy::default();
        for retry in 1..=12 {
            let full = (p.first_backoff * (1 << (retry - 1).min(20))).min(p.max_backoff);
            let w = p.backoff(retry);
            assert!(
                w >= full / 2 && w <= full,
                "retry {retry}: {w:?} vs {full:?}"
            );
        }
        assert!(p.backoff(40) <= p.max_backoff);
    }

    #[test]
    fn only_connection_failures_are_transient() {
        let io = |kind| SessionError::io("postgres", io::Error::from(kind));
        assert!(is_transient(&io(io::ErrorKind::ConnectionRefused)));
        assert!(is_transient(&io(io::ErrorKind::TimedOut)));
        assert!(!is_transient(&io(io::ErrorKind::InvalidData)));
        let tls = io::Error::new(
            io::ErrorKind::ConnectionReset,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert!(!is_transient(&SessionError::io("postgres", tls)));
        assert!(!is_transient(&SessionError::Conflict {
            session_id: "s".into(),
            expected: 1,
            found: 2
        }));
        assert!(!is_transient(&SessionError::io("postgres", "syntax error")));
    }
}
