//! The server: configuration, routes, and the protocol checks a run request goes through.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream;
use rein_agent::PendingInterrupt;
use rein_agent::{Agent, AgentBuilder, Input, TurnInterceptor};
use rein_core::Message;
use rein_core::interrupt::Approval;
use rein_sessions::{SessionManager, SessionSnapshot, SessionStore, SharedSessionStore};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;

use crate::auth::{
    Auth, Authorize, Principal, Secret, Sites, ThreadAction, check_four_eyes, loopback_hosts,
};
use crate::error::{AguiError, ProtocolError};
use crate::inbox::record_to_wire;
use crate::interrupts::{Asking, already_applied, answers, parked, takes_an_approval, to_wire};
use crate::limits::{ServerLimits, ThreadBudget};
use crate::run::{
    ANSWERED_KEY, Answerer, Ledger, RunBounds, approver_state, claimed_name, drive, refusal_record,
    requester_state,
};
use crate::wire::{RunAgentInput, WireEvent, snapshot_messages};

/// Where each request's agent comes from.
enum MakeAgent {
    /// A builder per request, from the caller's function of the thread id.
    Builder(Box<dyn Fn(&str) -> AgentBuilder + Send + Sync>),
    /// A new conversation of one built agent per request.
    Conversations(Agent),
}

/// What a run request does while a run on its thread is going (in this process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhileRunning {
    /// Inject the request's new user message into the running run through its
    /// `TurnInterceptor` (the model sees it at the next turn boundary). The request gets a short
    /// run of its own: RUN_STARTED, CUSTOM `rein.injection_queued`, RUN_FINISHED.
    #[default]
    Inject,
    /// Refuse the request: HTTP 409 `RUN_IN_PROGRESS`.
    Refuse,
}

/// Which browser origins besides the server's own may call it: they pass the server's Origin
/// check, and CORS lets their pages read the answers. Off unless set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cors {
    /// Any origin (`Access-Control-Allow-Origin: *`). The token still decides.
    AnyOrigin,
    /// These origins only (`https://app.example.com`).
    Origins(Vec<String>),
}

/// Serves Rein agents over AG-UI: see the [crate docs](crate).
pub struct AguiServer {
    store: SharedSessionStore,
    make_agent: Arc<MakeAgent>,
    /// `None`: a token made up when the server is bound.
    auth: Option<Auth>,
    authorize: Option<Arc<Authorize>>,
    four_eyes: bool,
    while_running: WhileRunning,
    console: bool,
    cors: Option<Cors>,
    hosts: Vec<String>,
    limits: ServerLimits,
}

struct Inner {
    store: SharedSessionStore,
    make_agent: Arc<MakeAgent>,
    auth: Auth,
    authorize: Option<Arc<Authorize>>,
    four_eyes: bool,
    while_running: WhileRunning,
    limits: ServerLimits,
    new_threads: ThreadBudget,
    /// Runs going on in this process, by thread id.
    active: Mutex<HashMap<String, ActiveRun>>,
}

struct ActiveRun {
    run_id: String,
    interceptor: TurnInterceptor,
    /// Messages injected into it so far.
    injections: u32,
    /// Who injected each message (by injection id): the requester four-eyes checks an answer
    /// to a parked injection against.
    injected_by: HashMap<String, String>,
    /// Who the run is for (its invocation state's `principal`): the only principal who may
    /// inject into it.
    requester: Option<String>,
}

impl std::fmt::Debug for AguiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            None => "made-up token",
            Some(Auth::Token(_)) => "token",
            Some(Auth::Bearer(_)) => "bearer check",
        };
        f.debug_struct("AguiServer")
            .field("auth", &auth)
            .field("authorize", &self.authorize.is_some())
            .field("four_eyes", &self.four_eyes)
            .field("while_running", &self.while_running)
            .field("console", &self.console)
            .field("cors", &self.cors)
            .field("hosts", &self.hosts)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Tokens shorter than this are refused: a token is the whole of the server's authentication.
const MIN_TOKEN_CHARS: usize = 16;

impl AguiServer {
    /// A server whose threads are sessions of `store`: for each request, `make_agent(thread_id)`
    /// gives the agent's builder (model, tools, interventions), the server binds it to the
    /// thread's session and restores it from the store.
    pub fn new<S, F>(store: S, make_agent: F) -> Self
    where
        S: SessionStore + Clone + 'static,
        F: Fn(&str) -> AgentBuilder + Send + Sync + 'static,
    {
        Self::with(store, MakeAgent::Builder(Box::new(make_agent)))
    }

    /// A server whose threads are sessions of `store`, each a conversation of `agent`, built
    /// once: for each request the server takes a new conversation of it
    /// ([`Agent::new_conversation`]: the model, tools and handlers shared, not built again),
    /// binds it to the thread's session and restores it from the store.
    ///
    /// ```no_run
    /// use rein_agent::Agent;
    /// use rein_agui::AguiServer;
    /// use rein_models::ScriptedModel;
    /// use rein_sessions::FileSessionStore;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder().model(ScriptedModel::repeating_text("Hello!")).build()?;
    /// let server = AguiServer::for_agent(FileSessionStore::new("/var/lib/my-agent"), agent);
    /// let bound = server.bind_local(8080).await?;
    /// println!("console: {}", bound.url()); // http://127.0.0.1:8080/?token=...
    /// bound.serve().await?;
    /// # Ok(()) }
    /// ```
    pub fn for_agent<S>(store: S, agent: Agent) -> Self
    where
        S: SessionStore + Clone + 'static,
    {
        Self::with(store, MakeAgent::Conversations(agent))
    }

    fn with<S: SessionStore + Clone + 'static>(store: S, make_agent: MakeAgent) -> Self {
        Self {
            store: SharedSessionStore::new(store),
            make_agent: Arc::new(make_agent),
            auth: None,
            authorize: None,
            four_eyes: false,
            while_running: WhileRunning::default(),
            console: true,
            cors: None,
            hosts: Vec::new(),
            limits: ServerLimits::default(),
        }
    }

    /// Requires `Authorization: Bearer <token>` with this token on the AG-UI routes (compared
    /// in constant time; at least 16 characters). Its holder is the principal `token holder`.
    /// Without this or [`bearer_auth`](Self::bearer_auth) the server makes up a token when it
    /// is bound ([`BoundServer::url`] carries it to the console).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.auth = Some(Auth::Token(Arc::new(Secret::new(token.into()))));
        self
    }

    /// Authenticates `Authorization: Bearer <token>` on the AG-UI routes with your own check:
    /// `check(token)` returns who it is — the principal given to
    /// [`authorize`](Self::authorize) and recorded as who answered an approval — or `None` to
    /// refuse (HTTP 401). Compare secrets in constant time (e.g. with the `subtle` crate). The
    /// console's static files stay public; they hold no data.
    pub fn bearer_auth<F>(mut self, check: F) -> Self
    where
        F: Fn(&str) -> Option<Principal> + Send + Sync + 'static,
    {
        self.auth = Some(Auth::Bearer(Arc::new(check)));
        self
    }

    /// Decides what each principal may do to each thread: `allow(principal, thread_id,
    /// action)` is asked before a request reads, runs on, answers or injects into a thread
    /// (`403 FORBIDDEN` when it says no; nothing is read or changed). It runs on the request's
    /// path: keep it quick. Without it every authenticated principal may do everything —
    /// right for one shared token (one principal), not for many users.
    ///
    /// ```
    /// # use rein_agui::{AguiServer, Principal, ThreadAction};
    /// # fn f(server: AguiServer) -> AguiServer {
    /// // Each user's threads are named `<user>-...`.
    /// server.authorize(|who: &Principal, thread: &str, _action: ThreadAction| {
    ///     thread.strip_prefix(who.id()).is_some_and(|rest| rest.starts_with('-'))
    /// })
    /// # }
    /// ```
    pub fn authorize<F>(mut self, allow: F) -> Self
    where
        F: Fn(&Principal, &str, ThreadAction) -> bool + Send + Sync + 'static,
    {
        self.authorize = Some(Arc::new(allow));
        self
    }

    /// Four-eyes (default: off): the principal who requested an action — who sent the message
    /// whose run asks for approval — may not approve it. Their approval is refused with `403
    /// FOUR_EYES`, nothing is applied and the interrupts wait for another approver; a
    /// rejection (withdrawing the request) is allowed. The requester is stored with the pause
    /// (the invocation state's `principal`), so the rule holds across a restart; a pause that
    /// records no requester (one stored by an earlier release) can then be approved by no one
    /// here. Per-thread rules stay [`authorize`](Self::authorize)'s.
    pub fn four_eyes(mut self, on: bool) -> Self {
        self.four_eyes = on;
        self
    }

    /// What a request does while a run on its thread is going (default: inject).
    pub fn while_running(mut self, mode: WhileRunning) -> Self {
        self.while_running = mode;
        self
    }

    /// Serve the approval console at `/` (default: yes).
    pub fn console(mut self, on: bool) -> Self {
        self.console = on;
        self
    }

    /// Allow browser pages from other origins (default: only the server's own): they pass the
    /// Origin check and CORS lets them read the answers. Behind a TLS proxy whose public
    /// origin differs from the Host the server sees, list that origin here.
    pub fn cors(mut self, cors: Cors) -> Self {
        self.cors = Some(cors);
        self
    }

    /// Host names (`name` or `name:port`) the server answers to besides its own. A server bound
    /// to a loopback address answers only to `localhost`, `127.0.0.1` and `[::1]` with its
    /// port (DNS rebinding); list the public name here when a reverse proxy forwards its Host.
    /// A server bound elsewhere answers any Host unless names are listed here.
    pub fn allow_hosts<I, H>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = H>,
        H: Into<String>,
    {
        self.hosts
            .extend(hosts.into_iter().map(|h| h.into().to_ascii_lowercase()));
        self
    }

    /// The server's bounds (default: [`ServerLimits::default`]).
    pub fn limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The axum router, to mount into an application of your own (axum 0.8). It checks the
    /// token, Origin, Content-Type, body size and request time, and answers only the hosts
    /// given to [`allow_hosts`](Self::allow_hosts) (any when none are); connections and their
    /// header timeout are your server's. Configure [`token`](Self::token) or
    /// [`bearer_auth`](Self::bearer_auth): a made-up token is known to no one here.
    pub fn router(&self) -> Result<Router, AguiError> {
        let hosts = (!self.hosts.is_empty()).then(|| self.hosts.clone());
        Ok(self.build(self.resolved_auth()?, hosts)?.0)
    }

    /// The configured authentication, or a made-up token.
    fn resolved_auth(&self) -> Result<Auth, AguiError> {
        match &self.auth {
            Some(Auth::Token(t)) if t.expose().chars().count() < MIN_TOKEN_CHARS => {
                Err(AguiError::Config(format!(
                    "the token is too short: at least {MIN_TOKEN_CHARS} characters"
                )))
            }
            Some(a) => Ok(a.clone()),
            None => Secret::generate()
                .map(|s| Auth::Token(Arc::new(s)))
                .map_err(|e| AguiError::Config(format!("cannot make up a token: {e}"))),
        }
    }

    fn build(&self, auth: Auth, hosts: Option<Vec<String>>) -> Result<(Router, Auth), AguiError> {
        let limits = self.limits.clone();
        let inner = Arc::new(Inner {
            store: self.store.clone(),
            make_agent: Arc::clone(&self.make_agent),
            auth: auth.clone(),
            authorize: self.authorize.clone(),
            four_eyes: self.four_eyes,
            while_running: self.while_running,
            new_threads: ThreadBudget::new(limits.new_threads_per_minute),
            limits: limits.clone(),
            active: Mutex::default(),
        });
        let mut router = Router::new()
            .route("/agent", post(run))
            .route("/threads/{thread_id}", get(thread))
            .route("/approvals", get(approvals))
            // What the API answers is for the caller only.
            .route_layer(SetResponseHeaderLayer::overriding(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-store"),
            ));
        if self.console {
            router = router
                .route("/", get(crate::console::page))
                .route("/console.js", get(crate::console::script))
                .route("/console.css", get(crate::console::style));
        }
        let mut router = router
            .with_state(inner)
            .layer(DefaultBodyLimit::max(limits.max_body_bytes));
        if let Some(c) = &self.cors {
            router = router.layer(cors_layer(c)?);
        }
        let sites = Arc::new(Sites {
            hosts,
            origins: match &self.cors {
                Some(Cors::Origins(list)) => list.iter().map(|o| o.to_ascii_lowercase()).collect(),
                _ => Vec::new(),
            },
            any_origin: self.cors == Some(Cors::AnyOrigin),
        });
        let router = router
            .layer(middleware::from_fn_with_state(sites, check_sites))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                limits.request_timeout,
            ))
            .layer(SetResponseHeaderLayer::if_not_present(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                header::X_FRAME_OPTIONS,
                HeaderValue::from_static("DENY"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ));
        Ok((router, auth))
    }

    /// Binds `127.0.0.1:<port>` (port 0 picks a free one): reachable from this machine only.
    pub async fn bind_local(self, port: u16) -> Result<BoundServer, AguiError> {
        self.bind(&format!("127.0.0.1:{port}")).await
    }

    /// Binds `addr` (e.g. `127.0.0.1:8080`; port 0 picks a free one). Prefer
    /// [`bind_local`](Self::bind_local) unless other machines must reach it; then put TLS in
    /// front (a reverse proxy) and see [`allow_hosts`](Self::allow_hosts).
    pub async fn bind(self, addr: &str) -> Result<BoundServer, AguiError> {
        let auth = self.resolved_auth()?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AguiError::Bind {
                addr: addr.to_owned(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| AguiError::Bind {
            addr: addr.to_owned(),
            source,
        })?;
        let mut hosts = self.hosts.clone();
        if local.ip().is_loopback() {
            hosts.extend(loopback_hosts(local.port()));
        }
        let hosts = (!hosts.is_empty()).then_some(hosts);
        let (router, auth) = self.build(auth, hosts)?;
        // Only a token the server made up goes into the console URL: a configured one is known.
        let token = match (&self.auth, auth) {
            (None, Auth::Token(t)) => Some(t),
            _ => None,
        };
        Ok(BoundServer {
            listener,
            router,
            local,
            token,
            limits: self.limits,
        })
    }
}

/// The Host and Origin checks, before anything else.
async fn check_sites(State(sites): State<Arc<Sites>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    match sites
        .check_host(headers)
        .and_then(|()| sites.check_origin(headers))
    {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

fn cors_layer(c: &Cors) -> Result<tower_http::cors::CorsLayer, AguiError> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origin = match c {
        Cors::AnyOrigin => AllowOrigin::any(),
        Cors::Origins(list) => {
            let values = list
                .iter()
                .map(|o| {
                    HeaderValue::from_str(o)
                        .map_err(|_| AguiError::Config(format!("invalid CORS origin `{o}`")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            AllowOrigin::list(values)
        }
    };
    Ok(CorsLayer::new()
        .allow_origin(origin)
        .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
        .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION, header::ACCEPT]))
}

/// A bound server, not yet serving.
#[derive(Debug)]
pub struct BoundServer {
    listener: tokio::net::TcpListener,
    router: Router,
    local: SocketAddr,
    /// A token the server made up (for the console URL).
    token: Option<Arc<Secret>>,
    limits: ServerLimits,
}

/// `http://<addr>/`, with `?token=` when the server made up its token.
fn console_url(addr: SocketAddr, token: Option<&Secret>) -> String {
    match token {
        Some(t) => format!("http://{addr}/?token={}", t.expose()),
        None => format!("http://{addr}/"),
    }
}

impl BoundServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The console's URL: `http://<addr>/`, and `?token=<token>` when the server made up its
    /// token (the console takes it from there, as Jupyter's URL does). It holds a secret: show
    /// it to the person who should use the console only.
    pub fn url(&self) -> String {
        console_url(self.local, self.token.as_deref())
    }

    /// `http://<addr>/agent`: the AG-UI endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}/agent", self.local)
    }

    /// The token the server made up (`None` when one was configured): what a client sends as
    /// `Authorization: Bearer <token>`.
    pub fn generated_token(&self) -> Option<&str> {
        self.token.as_deref().map(Secret::expose)
    }

    /// Serves until the process ends.
    pub async fn serve(self) -> Result<(), AguiError> {
        serve_connections(
            self.listener,
            self.router,
            &self.limits,
            std::future::pending(),
        )
        .await;
        Ok(())
    }

    /// Serves on a task; the handle stops it.
    pub fn spawn(self) -> ServerHandle {
        let (tx, rx) = oneshot::channel::<()>();
        let addr = self.local;
        let token = self.token.clone();
        let task = tokio::spawn(async move {
            serve_connections(self.listener, self.router, &self.limits, async {
                let _ = rx.await;
            })
            .await;
            Ok(())
        });
        ServerHandle {
            addr,
            token,
            stop: Some(tx),
            task,
        }
    }
}

/// Accepts connections until `stop`, each served by hyper's HTTP/1 with a header-read timeout
/// (it needs a timer, which `axum::serve` does not set), at most `max_connections` at once:
/// at the cap the server stops accepting until one closes. At `stop` it stops accepting and
/// waits for open connections to finish.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: &ServerLimits,
    stop: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut stop = std::pin::pin!(stop);
    loop {
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
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, a connection reset before it was accepted ...:
                    // a moment's pause rather than a busy loop.
                    tracing::warn!(error = %e, "AG-UI server: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A connection's failure (a client gone, a header timeout) is the client's affair.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A server running on a task ([`BoundServer::spawn`]).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    token: Option<Arc<Secret>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), AguiError>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The console's URL, as [`BoundServer::url`].
    pub fn url(&self) -> String {
        console_url(self.addr, self.token.as_deref())
    }

    /// `http://<addr>/agent`: the AG-UI endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}/agent", self.addr)
    }

    /// Stops accepting connections and waits for open ones to finish.
    pub async fn shutdown(mut self) -> Result<(), AguiError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(AguiError::Serve(std::io::Error::other(e.to_string()))),
        }
    }
}

// ---- handlers ----

/// Whether `who` may do `action` to the thread (the `authorize` hook; everyone without one).
fn permit(
    inner: &Inner,
    who: &Principal,
    thread_id: &str,
    action: ThreadAction,
) -> Result<(), ProtocolError> {
    match &inner.authorize {
        Some(allow) if !allow(who, thread_id, action) => Err(ProtocolError::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            format!("not allowed to {} this thread", action.as_str()),
        )),
        _ => Ok(()),
    }
}

/// Session ids are 1–128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`.
pub(crate) fn check_thread_id(id: &str) -> Result<(), ProtocolError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ProtocolError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_THREAD_ID",
            "threadId must be 1-128 characters of A-Z a-z 0-9 . _ - and not start with `.`",
        ))
    }
}

/// Only JSON is a run request: the content types a page may send across sites without asking
/// (a form's, `text/plain`) are refused, so a cross-site request must pass a CORS preflight.
fn check_json(headers: &HeaderMap) -> Result<(), ProtocolError> {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .unwrap_or_default();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ProtocolError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            "a run request is JSON: `Content-Type: application/json`",
        ))
    }
}

/// Parses and checks a run request's body: a `RunAgentInput` with a valid thread id and a run
/// id. The decoder the fuzz target runs.
pub(crate) fn parse_run_input(body: &[u8]) -> Result<RunAgentInput, ProtocolError> {
    let input: RunAgentInput = serde_json::from_slice(body).map_err(|e| {
        ProtocolError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_RUN_INPUT",
            format!("the body is not a RunAgentInput: {e}"),
        )
    })?;
    check_thread_id(&input.thread_id)?;
    if input.run_id.is_empty() || input.run_id.len() > 128 {
        return Err(ProtocolError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_RUN_INPUT",
            "runId must be 1-128 characters",
        ));
    }
    Ok(input)
}

/// Builds the thread's agent, bound to its session (nothing loaded yet), its approval record
/// kept by `ledger` when given.
fn build_agent(
    inner: &Inner,
    thread_id: &str,
    ledger: Option<Arc<Ledger>>,
) -> Result<Agent, ProtocolError> {
    let mut session = SessionManager::new(inner.store.clone(), thread_id);
    if let Some(ledger) = ledger {
        session = session.recording_approvals(ledger);
    }
    Ok(match &*inner.make_agent {
        MakeAgent::Builder(make) => make(thread_id)
            .session(session)
            .build()
            .map_err(|e| ProtocolError::internal("the agent could not be built", &e))?,
        MakeAgent::Conversations(agent) => agent.new_conversation().session(session).build(),
    })
}

/// Builds the thread's agent, its approval record kept by `ledger`, and restores it from the
/// store.
async fn load(inner: &Inner, thread_id: &str, ledger: Arc<Ledger>) -> Result<Agent, ProtocolError> {
    let mut agent = build_agent(inner, thread_id, Some(ledger))?;
    agent
        .load_session()
        .await
        .map_err(|e| ProtocolError::internal("the thread could not be loaded", &e))?;
    Ok(agent)
}

/// `GET /approvals`: the inbox — pending approvals across the threads the principal may answer
/// (`authorize` with [`ThreadAction::Resume`]), a page at a time (see `inbox.rs`).
async fn approvals(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap) -> Response {
    let result = async {
        let who = inner.auth.authenticate(&headers)?;
        let may_answer = |thread: &str| permit(&inner, &who, thread, ThreadAction::Resume).is_ok();
        crate::inbox::page(&inner.store, &uri, may_answer, || going_parked(&inner)).await
    }
    .await;
    match result {
        Ok(page) => axum::Json(page).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The messages injected into runs going in this process and parked on a confirm, by
/// thread id (read under the lock; who may answer them is asked after, outside it).
fn going_parked(inner: &Inner) -> Vec<crate::inbox::GoingParked> {
    let active = inner.active.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out: Vec<_> = active
        .iter()
        .flat_map(|(thread, run)| {
            run.interceptor
                .pending_approvals()
                .into_iter()
                .flat_map(move |p| {
                    let injection_id = p.id.to_string();
                    let text = p.message.text();
                    parked(p.id, &p.interrupts).into_iter().map(move |i| {
                        crate::inbox::GoingParked {
                            thread_id: thread.clone(),
                            interrupt_id: i.interrupt.resume_id(),
                            injected_by: run.injected_by.get(&injection_id).cloned(),
                            injection_id: injection_id.clone(),
                            text: text.clone(),
                            reason: i.interrupt.prompt_text(),
                        }
                    })
                })
        })
        .collect();
    out.sort_by(|a, b| a.thread_id.cmp(&b.thread_id));
    out
}

/// The most messages `GET /threads/{id}` shows (the latest): an answer of bounded size.
const TRANSCRIPT_MESSAGES: usize = 500;

/// `GET /threads/{id}`: what the store holds for a thread: its pending interrupts (each with
/// the call it holds and that tool's input schema), its conversation as AG-UI messages, its
/// state (404 `UNKNOWN_THREAD` when the store has no such session). Read from the
/// store itself, so looking never writes.
async fn thread(
    State(inner): State<Arc<Inner>>,
    Path(thread_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let who = inner.auth.authenticate(&headers)?;
        check_thread_id(&thread_id)?;
        permit(&inner, &who, &thread_id, ThreadAction::Read)?;
        let snapshot = stored(&inner, &thread_id)
            .await?
            .ok_or_else(|| unknown_thread(&thread_id))?;
        // With the agent as built (its tools' schemas, for the edit), nothing loaded into it.
        let pending = match &snapshot.pending_interrupts {
            Some(paused) => Asking::new(Some(paused), &build_agent(&inner, &thread_id, None)?).pending(),
            None => Vec::new(),
        };
        let messages = snapshot.active_messages();
        let shown = messages.len().saturating_sub(TRANSCRIPT_MESSAGES);
        let (running, parked) = inner
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&thread_id)
            .map(|a| {
                let parked: Vec<Value> = a
                    .interceptor
                    .pending_approvals()
                    .iter()
                    .map(|p| {
                        let asks: Vec<_> =
                            parked(p.id, &p.interrupts).iter().map(to_wire).collect();
                        json!({"injectionId": p.id.to_string(), "text": p.message.text(), "interrupts": asks})
                    })
                    .collect();
                (Some(a.run_id.clone()), parked)
            })
            .unwrap_or_default();
        let mut state = snapshot.agent_state.clone();
        crate::run::hide_bookkeeping(&mut state);
        Ok::<_, ProtocolError>(axum::Json(json!({
            "threadId": thread_id,
            "messageCount": messages.len(),
            // The conversation, as AG-UI's MESSAGES_SNAPSHOT carries it (the latest part of a
            // long one: `messagesOmitted` say how many came before).
            "messages": snapshot_messages(&messages[shown..]),
            "messagesOmitted": shown,
            "pendingInterrupts": pending,
            "runningRunId": running,
            "parkedInjections": parked,
            "state": state,
            "approvals": snapshot.approvals.iter().map(record_to_wire).collect::<Vec<_>>(),
        })))
    }
    .await;
    match result {
        Ok(j) => j.into_response(),
        Err(e) => e.into_response(),
    }
}

/// The thread's session as stored, if any.
async fn stored(inner: &Inner, thread_id: &str) -> Result<Option<SessionSnapshot>, ProtocolError> {
    inner
        .store
        .load(thread_id)
        .await
        .map_err(|e| ProtocolError::internal("the thread could not be loaded", &e))
}

fn unknown_thread(thread_id: &str) -> ProtocolError {
    ProtocolError::new(
        StatusCode::NOT_FOUND,
        "UNKNOWN_THREAD",
        format!("no thread `{thread_id}`"),
    )
}

/// `POST /agent`: a run request (`RunAgentInput`), answered with the run's events as SSE, or
/// a protocol error (HTTP 4xx JSON) when the request breaks the rules — then nothing ran.
async fn run(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let keep_alive = inner.limits.keep_alive;
    match start(inner, headers, body).await {
        Ok(events) => sse(events, keep_alive),
        Err(e) => e.into_response(),
    }
}

fn sse(rx: mpsc::UnboundedReceiver<WireEvent>, keep_alive: Duration) -> Response {
    let events = stream::unfold(rx, |mut rx| async move {
        let e = rx.recv().await?;
        let data = serde_json::to_string(&e).unwrap_or_else(|_| "{}".into());
        Some((Ok::<_, Infallible>(Event::default().data(data)), rx))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

async fn start(
    inner: Arc<Inner>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<mpsc::UnboundedReceiver<WireEvent>, ProtocolError> {
    let who = inner.auth.authenticate(&headers)?;
    check_json(&headers)?;
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ProtocolError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "BODY_TOO_LARGE",
                format!(
                    "the body is over this server's limit of {} bytes",
                    inner.limits.max_body_bytes
                ),
            )
        } else {
            ProtocolError::new(StatusCode::BAD_REQUEST, "INVALID_RUN_INPUT", e.body_text())
        }
    })?;
    let input = parse_run_input(&body)?;
    let thread_id = input.thread_id.clone();
    let new_text = input
        .messages
        .last()
        .filter(|m| m.role == "user")
        .and_then(|m| m.text());

    // A run on this thread is going in this process: inject, or refuse.
    {
        let mut active = inner.active.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(run) = active.get_mut(&thread_id) {
            let refuse = |why: &str| {
                ProtocolError::new(
                    StatusCode::CONFLICT,
                    "RUN_IN_PROGRESS",
                    format!("run {} is still going on this thread: {why}", run.run_id),
                )
                .with_details(json!({"runningRunId": run.run_id}))
            };
            if let Some(resume) = &input.resume {
                permit(&inner, &who, &thread_id, ThreadAction::Resume)?;
                // The only interrupts a going run has are those of injected messages parked on
                // a confirm (SPEC §5): answered through its interceptor, the run goes on.
                let named: Vec<PendingInterrupt> = run
                    .interceptor
                    .pending_approvals()
                    .into_iter()
                    .flat_map(|p| parked(p.id, &p.interrupts))
                    .filter(|p| {
                        let id = p.interrupt.resume_id();
                        resume.iter().any(|r| r.interrupt_id == id)
                    })
                    .collect();
                if resume.is_empty() || named.len() != resume.len() {
                    return Err(refuse("a resume must wait for it to finish"));
                }
                let responses = answers(&named, &Asking::default(), resume)?;
                if inner.four_eyes {
                    for p in &named {
                        let injector = run.injected_by.get(&p.point.subject).map(String::as_str);
                        let one = std::slice::from_ref(p);
                        let answer: Vec<_> = responses
                            .iter()
                            .filter(|r| r.interrupt_id == p.interrupt.resume_id())
                            .cloned()
                            .collect();
                        check_four_eyes(&thread_id, injector, &who, one, &answer)?;
                    }
                }
                let mut answered = Vec::new();
                for r in responses {
                    let interrupt_id = r.interrupt_id.clone();
                    let injection = run.interceptor.answer(r).map_err(|e| {
                        ProtocolError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "INVALID_RESUME_PAYLOAD",
                            e.to_string(),
                        )
                    })?;
                    tracing::info!(
                        target: "rein_agui::audit",
                        thread_id,
                        interrupt_id,
                        principal = who.id(),
                        "parked injection answered"
                    );
                    answered.push(
                        json!({"interruptId": interrupt_id, "injectionId": injection.to_string()}),
                    );
                }
                return Ok(short_run(
                    &thread_id,
                    &input.run_id,
                    Some(WireEvent::custom(
                        "rein.injection_answered",
                        json!({"answers": answered, "intoRunId": run.run_id}),
                    )),
                    json!({"answered": answered}),
                ));
            }
            permit(&inner, &who, &thread_id, ThreadAction::Inject)?;
            // An injected message joins the going run and acts under its invocation state:
            // anyone else's would act as the run's principal (their Cedar permissions, their
            // name to four-eyes). Closed: a run recording no principal takes no injection.
            if run.requester.as_deref() != Some(who.id()) {
                return Err(refuse(
                    "it runs for another principal, and a message injected into it would act as \
                     them: send it when the run ends",
                ));
            }
            if inner.while_running == WhileRunning::Refuse {
                return Err(refuse("this server refuses input while a run is going"));
            }
            let Some(text) = new_text else {
                return Err(refuse(
                    "and the request carries no new user message to inject",
                ));
            };
            if run.injections >= inner.limits.max_injections_per_run {
                return Err(ProtocolError::too_many(
                    "TOO_MANY_INJECTIONS",
                    format!(
                        "run {} took the {} messages this server injects into one run",
                        run.run_id, inner.limits.max_injections_per_run
                    ),
                    1,
                ));
            }
            let id = run
                .interceptor
                .inject(Message::user(text))
                .map_err(|e| refuse(&format!("the message could not be injected ({e})")))?;
            run.injections += 1;
            run.injected_by.insert(id.to_string(), who.id().to_owned());
            return Ok(short_run(
                &thread_id,
                &input.run_id,
                Some(WireEvent::custom(
                    "rein.injection_queued",
                    json!({"injectionId": id.to_string(), "intoRunId": run.run_id}),
                )),
                json!({"injected": true, "injectionId": id.to_string()}),
            ));
        }
    }

    let action = if input.resume.is_some() {
        ThreadAction::Resume
    } else {
        ThreadAction::Run
    };
    permit(&inner, &who, &thread_id, action)?;
    if input.resume.is_none() && new_text.is_none() {
        return Err(no_user_message());
    }
    check_run_slots(&inner)?;
    // A resume names a thread that exists; checked on the store, so nothing is created.
    if input.resume.is_some() && stored(&inner, &thread_id).await?.is_none() {
        return Err(unknown_thread(&thread_id));
    }
    let ledger = Arc::new(Ledger::default());
    let mut agent = load(&inner, &thread_id, Arc::clone(&ledger)).await?;
    let pending = agent.pending_interrupts().map(|p| p.pending().to_vec());
    let paused_state = agent
        .pending_interrupts()
        .map(|p| p.invocation_state().clone())
        .unwrap_or_default();
    // Idempotent resume: the answers last applied, again — while nothing is pending, or after
    // the run paused again (their ids, of an earlier pause, name nothing pending now) — change
    // nothing and succeed.
    if let Some(resume) = &input.resume {
        let applied: Vec<String> = agent
            .state()
            .get(ANSWERED_KEY)
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        if already_applied(&applied, pending.as_deref().unwrap_or_default(), resume) {
            return Ok(short_run(
                &thread_id,
                &input.run_id,
                None,
                json!({"alreadyApplied": true}),
            ));
        }
    }
    // Who the run is for: the paused run's requester on a resume, else who sent the message.
    let requester = match &input.resume {
        Some(_) => paused_state.principal().map(str::to_owned),
        None => Some(who.id().to_owned()),
    };
    let (agent_input, answered_by) = match (&input.resume, pending) {
        (Some(resume), Some(pending)) => {
            let checked = answers(
                &pending,
                &Asking::new(agent.pending_interrupts(), &agent),
                resume,
            )
            .and_then(|responses| {
                if inner.four_eyes {
                    let requester = paused_state.principal();
                    check_four_eyes(&thread_id, requester, &who, &pending, &responses)?;
                }
                Ok(responses)
            });
            let responses = match checked {
                Ok(responses) => responses,
                Err(e) => {
                    if REFUSED_ANSWERS.contains(&e.code) {
                        let refused = resume
                            .iter()
                            .filter_map(|r| {
                                let asked = pending
                                    .iter()
                                    .find(|p| p.interrupt.resume_id() == r.interrupt_id)?;
                                Some(refusal_record(&who, r, asked, &e.message))
                            })
                            .collect();
                        ledger.refused(refused);
                        if let Err(e) = agent.save_session().await {
                            tracing::warn!(thread_id, error = %e, "a refused answer's record not written");
                        }
                    }
                    return Err(e);
                }
            };
            let ids: Vec<Value> = responses
                .iter()
                .map(|r| Value::String(r.interrupt_id.clone()))
                .collect();
            agent.state().set(ANSWERED_KEY, Value::Array(ids));
            // Who answered is who authenticated; a name the client gives is kept beside it.
            let by: Vec<Answerer> = resume
                .iter()
                .map(|r| {
                    let claimed = claimed_name(r);
                    tracing::info!(
                        target: "rein_agui::audit",
                        thread_id,
                        interrupt_id = r.interrupt_id,
                        principal = who.id(),
                        claimed_answered_by = claimed.as_deref(),
                        "interrupt answered"
                    );
                    let point = pending
                        .iter()
                        .find(|p| p.interrupt.resume_id() == r.interrupt_id)
                        .map(|p| &p.point);
                    let asked = pending
                        .iter()
                        .find(|p| p.interrupt.resume_id() == r.interrupt_id);
                    Answerer {
                        about: point.map(|p| p.parent.as_ref().unwrap_or(&p.subject).clone()),
                        principal: who.id().to_owned(),
                        claimed,
                        interrupt_id: r.interrupt_id.clone(),
                        handler: asked.map(|p| p.interrupt.name.clone()).unwrap_or_default(),
                        reason: asked.map(|p| p.interrupt.prompt_text()).unwrap_or_default(),
                        approval: asked
                            .filter(|p| takes_an_approval(p))
                            .and_then(|_| {
                                responses.iter().find(|a| a.interrupt_id == r.interrupt_id)
                            })
                            .and_then(|a| Approval::from_wire(&a.response).ok()),
                    }
                })
                .collect();
            let state = approver_state(&paused_state, &who);
            (Input::resume(responses).with_state(state), by)
        }
        (Some(resume), None) => {
            // Not the answers last applied: they name interrupts that are not pending.
            let ids: Vec<&str> = resume.iter().map(|r| r.interrupt_id.as_str()).collect();
            return Err(ProtocolError::new(
                StatusCode::NOT_FOUND,
                "UNKNOWN_INTERRUPT",
                format!("no pending interrupt with id {}", ids.join(", ")),
            )
            .with_details(json!({"unknownInterruptIds": ids})));
        }
        (None, Some(_)) => {
            let asks = Asking::new(agent.pending_interrupts(), &agent).pending();
            return Err(ProtocolError::new(
                StatusCode::CONFLICT,
                "INTERRUPTS_PENDING",
                "the thread waits for answers to its interrupts: resume with every one answered",
            )
            .with_details(json!({"interrupts": asks})));
        }
        (None, None) => {
            let Some(text) = new_text else {
                return Err(no_user_message());
            };
            // A thread the store does not hold yet comes out of the new-thread budget.
            if agent.messages().is_empty() {
                inner.new_threads.take().map_err(|wait| {
                    ProtocolError::too_many(
                        "TOO_MANY_THREADS",
                        format!(
                            "this server starts at most {} new threads a minute",
                            inner.limits.new_threads_per_minute
                        ),
                        wait,
                    )
                })?;
            }
            (
                Input::text(text).with_state(requester_state(&who)),
                Vec::new(),
            )
        }
    };

    let run_id = input.run_id.clone();
    {
        let mut active = inner.active.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(run) = active.get(&thread_id) {
            // Another request started a run while this one was loading.
            return Err(ProtocolError::new(
                StatusCode::CONFLICT,
                "RUN_IN_PROGRESS",
                format!("run {} is still going on this thread", run.run_id),
            ));
        }
        if active.len() >= inner.limits.max_runs {
            return Err(too_many_runs(&inner));
        }
        active.insert(
            thread_id.clone(),
            ActiveRun {
                run_id: run_id.clone(),
                interceptor: agent.interceptor(),
                injections: 0,
                injected_by: HashMap::new(),
                requester: requester.clone(),
            },
        );
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let task_inner = Arc::clone(&inner);
    let bounds = RunBounds {
        max_turns: inner.limits.max_turns_per_run,
    };
    ledger.answered(requester, answered_by);
    tokio::spawn(async move {
        let guard = ActiveGuard {
            inner: task_inner,
            thread_id: thread_id.clone(),
        };
        drive(agent, agent_input, thread_id, run_id, &ledger, bounds, tx).await;
        drop(guard);
    });
    Ok(rx)
}

/// The refusals of an answer that are kept in the approval record (who tried, why): the
/// answer was well formed and named what waits, and was refused for what it said or who said
/// it. A malformed resume (unknown, repeated or missing ids) is a client error, not an answer.
const REFUSED_ANSWERS: [&str; 3] = [
    "FOUR_EYES",
    "INVALID_RESUME_PAYLOAD",
    "FINGERPRINT_MISMATCH",
];

/// 429 when the server's runs are all taken (checked before loading, and again at the start).
fn check_run_slots(inner: &Inner) -> Result<(), ProtocolError> {
    let running = inner
        .active
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len();
    if running >= inner.limits.max_runs {
        Err(too_many_runs(inner))
    } else {
        Ok(())
    }
}

fn too_many_runs(inner: &Inner) -> ProtocolError {
    ProtocolError::too_many(
        "TOO_MANY_RUNS",
        format!(
            "this server runs at most {} runs at once",
            inner.limits.max_runs
        ),
        1,
    )
}

/// The stream of a request answered without running the agent: RUN_STARTED, the custom event
/// saying what was done, RUN_FINISHED (success) with `result`.
fn short_run(
    thread_id: &str,
    run_id: &str,
    custom: Option<WireEvent>,
    result: Value,
) -> mpsc::UnboundedReceiver<WireEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    let started = WireEvent::RunStarted {
        thread_id: thread_id.to_owned(),
        run_id: run_id.to_owned(),
    };
    let finished = WireEvent::RunFinished {
        thread_id: thread_id.to_owned(),
        run_id: run_id.to_owned(),
        result: Some(result),
        outcome: json!({"type": "success"}),
    };
    for e in [Some(started), custom, Some(finished)]
        .into_iter()
        .flatten()
    {
        let _ = tx.send(e);
    }
    rx
}

fn no_user_message() -> ProtocolError {
    ProtocolError::new(
        StatusCode::BAD_REQUEST,
        "NO_USER_MESSAGE",
        "the last message must be a user message with text (the thread's history is kept by the \
         server)",
    )
}

/// Removes a thread's active run when its task ends (also if it panics).
struct ActiveGuard {
    inner: Arc<Inner>,
    thread_id: String,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.inner
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.thread_id);
    }
}
