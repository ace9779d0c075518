//! Building a [`PostgresSessionStore`]: the URL, the pool, TLS, the timeout and the retries.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::retry::RetryPolicy;
use super::{Inner, PostgresSessionStore};
use crate::error::SessionError;

/// How a [`PostgresSessionStore`] secures its connections.
///
/// Unset, the builder chooses by the URL's hosts: plaintext when every host is on this machine
/// (a loopback address, `localhost` or a Unix socket), else [`TlsMode::Require`] with the
/// [`TlsRoots::WebPki`] roots: a database password and the sessions (conversations, tool
/// results, approvals) never cross a network in plaintext unless you say so.
///
/// There is no mode that encrypts without verifying the server: a certificate that is not
/// checked does not stop a man in the middle.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsMode {
    /// Plaintext connections: for a trusted network, a local server or a local TLS proxy. To a
    /// host not on this machine the build logs a warning (`tracing`, target
    /// `rein_sessions::postgres`). A URL with `sslmode=require` is refused with
    /// [`SessionError::Config`], so a URL that asks for TLS never quietly gets plaintext;
    /// `sslmode=prefer` (tokio-postgres' default) connects in plaintext.
    Disable,
    /// TLS on every connection, never falling back to plaintext (the URL's `sslmode` is
    /// taken as `require`; `sslmode=disable` is refused with [`SessionError::Config`]). The
    /// server's certificate must chain to one of `ca` and name the host of the URL (a DNS
    /// name, or an IP address in its subject alternative names) — libpq's `verify-full`.
    /// rustls with the ring provider; TLS 1.2 and 1.3.
    Require {
        /// The root certificates trusted to sign the server's certificate.
        ca: TlsRoots,
    },
}

/// The root certificates a [`TlsMode::Require`] connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsRoots {
    /// The Mozilla root certificates (the `webpki-roots` crate): for a server with a
    /// certificate from a public CA (many managed databases).
    WebPki,
    /// The CA certificates in this PEM file (one or more `CERTIFICATE` sections; other
    /// sections are skipped): for a private CA, e.g. your cloud provider's database CA bundle.
    PemFile(PathBuf),
    /// The CA certificates in this PEM text.
    Pem(String),
}

/// Settings of a [`PostgresSessionStore`]; [`build`](Self::build) connects.
///
/// | setting | default |
/// |---|---|
/// | [`pool_size`](Self::pool_size) | 4 connections |
/// | [`tls`](Self::tls) | plaintext to this machine, else [`TlsMode::Require`] with the webpki roots |
/// | [`application_name`](Self::application_name) | the URL's, else `rein-sessions` |
/// | [`timeout`](Self::timeout) | 30 s per try |
/// | [`max_retries`](Self::max_retries), [`backoff`](Self::backoff) | 8; 100 ms doubling to 2 s |
///
/// Its `Debug` shows no password.
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresSessionStoreBuilder {
    config: Result<Config, String>,
    pool_size: usize,
    /// `None`: chosen by the hosts (see [`TlsMode`]).
    tls: Option<TlsMode>,
    application_name: Option<String>,
    timeout: Duration,
    retry: RetryPolicy,
}

impl PostgresSessionStoreBuilder {
    pub(super) fn new(url: &str) -> Self {
        Self {
            // tokio-postgres' parse errors name the key, never the value: no password.
            config: url
                .parse::<Config>()
                .map_err(|e| super::PgError(e).to_string()),
            pool_size: 4,
            tls: None,
            application_name: None,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
        }
    }

    /// At most `n` connections (at least 1; 0 is refused by [`build`](Self::build)). They are
    /// opened when needed and kept; an operation that finds all `n` busy waits for one. Size
    /// it to the worker's concurrent sessions, within the server's `max_connections` shared
    /// by all workers.
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = n;
        self
    }

    /// TLS for every connection (see [`TlsMode`]; unset: plaintext to this machine only).
    pub fn tls(mut self, mode: TlsMode) -> Self {
        self.tls = Some(mode);
        self
    }

    /// The `application_name` the connections report to the server (`pg_stat_activity`);
    /// overrides the URL's.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// The longest one try of an operation may take — waiting for a pooled connection,
    /// connecting, the statements and the commit. A try that takes longer fails like a lost
    /// connection: its connection is dropped and the operation retried. Not zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many times an operation that lost its connection is tried again (0: never).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.retry.max_retries = n;
        self
    }

    /// The wait before the first retry (`first`), doubled for each next one up to `max`;
    /// each wait is shortened by a random part of up to half. `first` must not exceed `max`.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.retry.first_backoff = first;
        self.retry.max_backoff = max;
        self
    }

    /// Checks the settings, connects (retrying while the server is unreachable) and creates
    /// the tables when missing. Needs a tokio runtime (each connection is driven by a spawned
    /// task).
    ///
    /// Fails with [`SessionError::Config`] for a bad URL or setting or unusable CA
    /// certificates, [`SessionError::Io`] when the server refuses (a password, a certificate
    /// that does not verify, a server without TLS under [`TlsMode::Require`]), and
    /// [`SessionError::Unavailable`] when it cannot be reached within the retries.
    pub async fn build(self) -> Result<PostgresSessionStore, SessionError> {
        let mut config = self
            .config
            .map_err(|e| SessionError::Config(format!("the PostgreSQL URL: {e}")))?;
        if self.pool_size == 0 {
            return Err(SessionError::Config("pool_size must be at least 1".into()));
        }
        if self.timeout.is_zero() {
            return Err(SessionError::Config("timeout must not be zero".into()));
        }
        if self.retry.first_backoff > self.retry.max_backoff {
            return Err(SessionError::Config(
                "backoff: the first wait exceeds the longest".into(),
            ));
        }
        match self.application_name {
            Some(name) => {
                config.application_name(name);
            }
            None if config.get_application_name().is_none() => {
                config.application_name("rein-sessions");
            }
            None => {}
        }
        // Fast recycling: a pooled connection whose socket closed is dropped when it is next
        // taken; one that breaks in use fails the try, which drops it and retries.
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let remote = remote_hosts(&config);
        let tls = match self.tls {
            Some(mode) => mode,
            None if remote.is_empty() => TlsMode::Disable,
            None => {
                if config.get_ssl_mode() == SslMode::Disable {
                    return Err(SessionError::Config(format!(
                        "the URL has sslmode=disable for {}, not on this machine: TLS is \
                         required by default off this machine; for a trusted network, say so \
                         with .tls(TlsMode::Disable)",
                        remote.join(", ")
                    )));
                }
                TlsMode::Require {
                    ca: TlsRoots::WebPki,
                }
            }
        };
        let manager = match &tls {
            TlsMode::Disable => {
                if !remote.is_empty() {
                    tracing::warn!(
                        target: "rein_sessions::postgres",
                        hosts = %remote.join(", "),
                        "PostgreSQL session store connects in plaintext (TlsMode::Disable) to a \
                         host not on this machine: passwords and sessions cross the network \
                         unencrypted"
                    );
                }
                if config.get_ssl_mode() == SslMode::Require {
                    return Err(SessionError::Config(
                        "the URL has sslmode=require but TLS is not configured: \
                         use .tls(TlsMode::Require { .. })"
                            .into(),
                    ));
                }
                Manager::from_config(config, NoTls, manager_config)
            }
            TlsMode::Require { ca } => {
                if config.get_ssl_mode() == SslMode::Disable {
                    return Err(SessionError::Config(
                        "the URL has sslmode=disable but TLS is required".into(),
                    ));
                }
                config.ssl_mode(SslMode::Require);
                let tls = MakeRustlsConnect::new(client_config(ca)?);
                Manager::from_config(config, tls, manager_config)
            }
        };
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(|e| SessionError::Config(format!("the connection pool: {e}")))?;
        let store = PostgresSessionStore {
            inner: Arc::new(Inner {
                pool,
                timeout: self.timeout,
                retry: self.retry,
            }),
        };
        store.create_schema().await?;
        Ok(store)
    }
}

/// The URL's hosts not on this machine (a Unix socket, `localhost` and loopback addresses
/// are): with none, plaintext is the default.
fn remote_hosts(config: &Config) -> Vec<String> {
    use tokio_postgres::config::Host;
    config
        .get_hosts()
        .iter()
        .filter_map(|h| match h {
            Host::Tcp(name) => {
                let bare = name.trim_start_matches('[').trim_end_matches(']');
                let local = bare.eq_ignore_ascii_case("localhost")
                    || bare
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                (!local).then(|| name.clone())
            }
            #[cfg(unix)]
            Host::Unix(_) => None,
        })
        .collect()
}

/// rustls with the ring provider (no process-wide provider needed) trusting `roots`.
fn client_config(roots: &TlsRoots) -> Result<rustls::ClientConfig, SessionError> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        TlsRoots::WebPki => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        TlsRoots::PemFile(path) => {
            let what = format!("the CA certificates {}", path.display());
            let pem = std::fs::read(path).map_err(|e| SessionError::io(&what, e))?;
            add_pem(&mut store, &pem, &what)?;
        }
        TlsRoots::Pem(text) => add_pem(&mut store, text.as_bytes(), "the CA certificates")?,
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SessionError::Config(format!("TLS: {e}")))?
        .with_root_certificates(store)
        .with_no_client_auth())
}

fn add_pem(store: &mut rustls::RootCertStore, pem: &[u8], what: &str) -> Result<(), SessionError> {
    let mut found = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| SessionError::Config(format!("{what}: bad PEM: {e}")))?;
        store
            .add(cert)
            .map_err(|e| SessionError::Config(format!("{what}: {e}")))?;
        found += 1;
    }
    if found == 0 {
        return Err(SessionError::Config(format!(
            "{what}: no PEM CERTIFICATE section"
        )));
    }
    Ok(())
}

/// A failure to get a pooled connection, as the store reports it (the connection error
/// itself when connecting failed, so it is classified like any other).
pub(super) fn pool_err(e: PoolError) -> SessionError {
    match e {
        PoolError::Backend(e) => super::db_err(e),
        e => SessionError::io("postgres: the connection pool", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn bad_settings_are_config_errors_before_any_connection() {
        // Port 9 (discard) on loopback: nothing is ever reached, every error comes first.
        let url = "postgres://u:s3cret@127.0.0.1:9/db";
        let cases = [
            PostgresSessionStore::builder("postgres://u@h/db?sslmode=verify-full"),
            PostgresSessionStore::builder("not a url at all"),
            PostgresSessionStore::builder(url).pool_size(0),
            PostgresSessionStore::builder(url).timeout(Duration::ZERO),
            PostgresSessionStore::builder(url)
                .backoff(Duration::from_secs(2), Duration::from_secs(1)),
            PostgresSessionStore::builder(&format!("{url}?sslmode=require")),
            PostgresSessionStore::builder(&format!("{url}?sslmode=disable")).tls(
                TlsMode::Require {
                    ca: TlsRoots::WebPki,
                },
            ),
            PostgresSessionStore::builder(url).tls(TlsMode::Require {
                ca: TlsRoots::Pem("no certificate here".into()),
            }),
            PostgresSessionStore::builder(url).tls(TlsMode::Require {
                ca: TlsRoots::Pem(
                    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
                ),
            }),
        ];
        for b in cases {
            let shown = format!("{b:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
            let err = b.build().await.unwrap_err();
            assert!(matches!(err, SessionError::Config(_)), "{shown}: {err}");
        }
        let missing = PostgresSessionStore::builder(url).tls(TlsMode::Require {
            ca: TlsRoots::PemFile("/nonexistent/ca.pem".into()),
        });
        let err = missing.build().await.unwrap_err();
        assert!(
            matches!(&err, SessionError::Io { what, .. } if what.contains("/nonexistent/ca.pem")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_server_is_unavailable_after_the_retries() {
        // Nothing listens on 127.0.0.1:9: every try is refused at once.
        let started = std::time::Instant::now();
        let err = PostgresSessionStore::builder("postgres://u@127.0.0.1:9/db")
            .max_retries(3)
            .backoff(Duration::from_millis(10), Duration::from_millis(20))
            .build()
            .await
            .unwrap_err();
        match &err {
            SessionError::Unavailable { what, .. } => assert!(what.contains("4 tries"), "{err}"),
            e => panic!("{e}"),
        }
        assert!(err.is_unavailable());
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
