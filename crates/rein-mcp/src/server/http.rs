//! An [`McpServer`] over Streamable HTTP (feature `server-http`), hostile by default.
//!
//! - **Loopback** unless told otherwise ([`HttpServeOptions::addr`]).
//! - **A bearer token, always**: the one given, else 256 random bits made up at bind (as
//!   Jupyter does; [`McpHttpServer::token`] to print it once), compared in constant time.
//! - **Host checked** (DNS rebinding, RUSTSEC-2026-0189): only loopback names, plus the hosts
//!   given ([`HttpServeOptions::allowed_host`]); **Origin checked**: a request carrying an
//!   `Origin` (a browser's) is refused unless that origin is allowed
//!   ([`HttpServeOptions::allowed_origin`]); none are by default. A request without `Origin`
//!   is no browser's cross-site request; the token still decides.
//! - **Bounded**: the request body ([`DEFAULT_MAX_BODY_BYTES`]) and the time to the response's
//!   head ([`DEFAULT_REQUEST_TIMEOUT`]; a tool's own run is bounded by the server's call
//!   timeout), by tower-http layers; the time to send a request's head
//!   ([`DEFAULT_HEADER_TIMEOUT`], against slow-header clients) and the open connections
//!   ([`DEFAULT_MAX_CONNECTIONS`]), by serving hyper's HTTP/1 with a timer, as rein-agui does
//!   (`axum::serve` sets no timer, so hyper's header-read timeout would never fire).
//! - **Sessions bounded**: rmcp keeps each MCP session (a task and its channels) in memory
//!   until it is closed or idle for [`DEFAULT_SESSION_IDLE_TIMEOUT`]; at most
//!   [`DEFAULT_MAX_SESSIONS`] live at once. A request that would open one more is refused
//!   with 503 (the server's capacity, not this client's rate: 429 would tell a client to slow
//!   down, and slowing down frees nothing; closing a session or its expiry does).

use std::fmt;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use subtle::ConstantTimeEq as _;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use super::McpServer;
use crate::McpError;

/// The default bound on one request body (4 MiB: a call's arguments are bounded further by
/// the server's `max_input_bytes`).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;
/// The default time a request has to get its response's head.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time a client has to send a request's head.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default bound on open connections; at it, no more are accepted until one closes.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The default bound on live MCP sessions; at it, a request that would open one more gets 503.
pub const DEFAULT_MAX_SESSIONS: usize = 64;
/// The default time a session lives without a message either way (rmcp's own default); then
/// it is closed and its slot freed.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// Where and how an [`McpServer`] is served over HTTP; pass to [`McpServer::bind_http`].
#[derive(Clone)]
#[must_use]
pub struct HttpServeOptions {
    addr: SocketAddr,
    token: Option<String>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    max_body_bytes: usize,
    request_timeout: Duration,
    header_timeout: Duration,
    max_connections: usize,
    max_sessions: usize,
    session_idle_timeout: Duration,
}

/// Shows whether a token is set, never the token.
impl fmt::Debug for HttpServeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpServeOptions")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_sessions", &self.max_sessions)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .finish()
    }
}

impl Default for HttpServeOptions {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            token: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
        }
    }
}

impl HttpServeOptions {
    /// Options with the defaults: `127.0.0.1`, a free port, a token made up at bind.
    pub fn new() -> Self {
        Self::default()
    }

    /// The address to listen on (default `127.0.0.1:0`, a free port). Another than a loopback
    /// one also needs [`allowed_host`](Self::allowed_host) for the name clients use.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// The bearer token clients must send (default: 256 random bits made up at bind). An
    /// empty token is refused at bind.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Also accepts requests whose `Host` is `host` (`example.com` or `example.com:8080`),
    /// besides the loopback names.
    pub fn allowed_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Accepts browser requests from `origin` (`https://app.example.com:443`; `:*` for any
    /// port). None by default: any request with an `Origin` is refused.
    pub fn allowed_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// The bound on one request body ([`DEFAULT_MAX_BODY_BYTES`]); past it, 413.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The time a request has to get its response's head ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The time a client has to send a request's head ([`DEFAULT_HEADER_TIMEOUT`]); then the
    /// connection is closed.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// The bound on open connections ([`DEFAULT_MAX_CONNECTIONS`], at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// The bound on live MCP sessions ([`DEFAULT_MAX_SESSIONS`], at least 1); past it, a
    /// request that would open one more gets 503 until a session is closed or expires.
    pub fn max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n.max(1);
        self
    }

    /// How long a session lives without a message either way
    /// ([`DEFAULT_SESSION_IDLE_TIMEOUT`]); then it is closed and its slot freed. A call
    /// waiting for its client's answer (an approval) counts as idle.
    pub fn session_idle_timeout(mut self, timeout: Duration) -> Self {
        self.session_idle_timeout = timeout;
        self
    }
}

/// An [`McpServer`] bound to an HTTP address, not yet serving: read its address and token,
/// then [`serve_until`](Self::serve_until).
pub struct McpHttpServer {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    token: Arc<str>,
    router: axum::Router,
    header_timeout: Duration,
    max_connections: usize,
}

/// Shows the address, never the token.
impl fmt::Debug for McpHttpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpHttpServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl McpHttpServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint's URL (`http://<addr>/mcp`).
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// The bearer token clients must send: a secret, to show its owner once.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Serves until `shutdown` completes, then waits for open connections to finish.
    pub async fn serve_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), McpError> {
        // The accept loop of rein-agui's server, repeated: no crate both may depend on serves
        // HTTP (rein-core and rein-interventions stay free of it, rein-models is a model
        // client), and a crate of its own for this loop would be one more published API.
        use hyper_util::rt::{TokioIo, TokioTimer};
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let slots = Arc::new(tokio::sync::Semaphore::new(self.max_connections));
        let mut stop = std::pin::pin!(shutdown);
        loop {
            // At the cap no connection is accepted until one closes.
            let slot = tokio::select! {
                biased;
                () = &mut stop => break,
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(s) => s,
                    Err(_) => break,
                },
            };
            let stream = tokio::select! {
                biased;
                () = &mut stop => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors...: a pause rather than a busy loop.
                        tracing::warn!(error = %e, "MCP HTTP server: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let service = hyper_util::service::TowerToHyperService::new(self.router.clone());
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(self.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                // A connection's failure (a client gone, a header timeout) is the client's.
                let _ = connection.await;
                drop(slot);
            });
        }
        graceful.shutdown().await;
        Ok(())
    }
}

impl McpServer {
    /// Binds the server to an HTTP address (see [`HttpServeOptions`] for what is checked).
    pub async fn bind_http(&self, options: HttpServeOptions) -> Result<McpHttpServer, McpError> {
        let token: Arc<str> = match options.token {
            Some(t) if t.is_empty() => {
                return Err(McpError::Serve {
                    message: "the bearer token is empty".into(),
                    source: None,
                });
            }
            Some(t) => t.into(),
            None => random_token()?.into(),
        };
        // rmcp allows every host on an empty list: the loopback names are always there.
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
            .map(String::from)
            .into();
        hosts.extend(options.allowed_hosts);
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(options.allowed_origins)
            .enforce_origin_validation()
            .with_max_request_body_bytes(options.max_body_bytes);
        let handler = self.handler();
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(options.session_idle_timeout);
        let sessions = Arc::new(sessions);
        let service =
            StreamableHttpService::new(move || Ok(handler.clone()), Arc::clone(&sessions), config);
        let cap = Arc::new(SessionCap {
            sessions,
            opening: AtomicUsize::new(0),
            max: options.max_sessions,
        });
        // Inside the bearer check: who holds no token learns nothing of the sessions.
        let router = axum::Router::new()
            .route_service(MCP_PATH, service)
            .layer(middleware::from_fn_with_state(cap, session_cap))
            .layer(middleware::from_fn_with_state(token.clone(), bearer))
            .layer(RequestBodyLimitLayer::new(options.max_body_bytes))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                options.request_timeout,
            ));
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|e| McpError::Serve {
                message: format!("could not listen on {}", options.addr),
                source: Some(Box::new(e)),
            })?;
        let addr = listener.local_addr().map_err(|e| McpError::Serve {
            message: "could not read the bound address".into(),
            source: Some(Box::new(e)),
        })?;
        Ok(McpHttpServer {
            listener,
            addr,
            token,
            router,
            header_timeout: options.header_timeout,
            max_connections: options.max_connections,
        })
    }
}

/// 256 random bits, hex.
fn random_token() -> Result<String, McpError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| McpError::Serve {
        message: format!("no random token: {e}"),
        source: None,
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The bound on live sessions: rmcp's session map, and the requests that may be opening one.
struct SessionCap {
    sessions: Arc<LocalSessionManager>,
    /// Requests let through that may open a session and have not answered yet: counted with
    /// the live sessions, so concurrent openings cannot pass the cap together.
    opening: AtomicUsize,
    max: usize,
}

/// One request counted in [`SessionCap::opening`] until it answers (or is dropped).
struct Opening(Arc<SessionCap>);

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.opening.fetch_sub(1, Ordering::SeqCst);
    }
}

/// 503 for a request that would open a session (a POST without a session id) when the live
/// sessions and the openings in flight reach the cap; anything else passes.
async fn session_cap(State(cap): State<Arc<SessionCap>>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST || request.headers().contains_key(HEADER_SESSION_ID) {
        return next.run(request).await;
    }
    // Counted before the map is read: of two concurrent openings, the later one sees the
    // earlier (a session already in the map and still counted is counted twice, which errs
    // on the side of the cap).
    let earlier = cap.opening.fetch_add(1, Ordering::SeqCst);
    let opening = Opening(Arc::clone(&cap));
    let live = cap.sessions.sessions.read().await.len();
    if live + earlier >= cap.max {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many open MCP sessions: close one (DELETE with its Mcp-Session-Id) or wait \
             for an idle one to expire",
        )
            .into_response();
    }
    let response = next.run(request).await;
    drop(opening);
    response
}

/// 401 unless the request carries `Authorization: Bearer <token>`.
async fn bearer(State(token): State<Arc<str>>, request: Request, next: Next) -> Response {
    let offered = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, t) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| t.trim())
        });
    match offered {
        Some(t) if bool::from(t.as_bytes().ct_eq(token.as_bytes())) => next.run(request).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            "a valid `Authorization: Bearer <token>` header is required",
        )
            .into_response(),
    }
}
