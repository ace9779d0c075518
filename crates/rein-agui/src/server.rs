//! The server: configuration, routes, and the protocol checks a run request goes through.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream;
use rein_agent::{Agent, AgentBuilder, Input, TurnInterceptor};
use rein_core::{Message, interrupt::Interrupt};
use rein_sessions::{SessionManager, SessionSnapshot, SessionStore, SharedSessionStore};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::error::{AguiError, ProtocolError};
use crate::interrupts::{already_applied, answers, to_wire};
use crate::run::{ANSWERED_KEY, AnsweredBy, drive};
use crate::wire::{RunAgentInput, WireEvent};

/// Where each request's agent comes from.
enum MakeAgent {
    /// A builder per request, from the caller's function of the thread id.
    Builder(Box<dyn Fn(&str) -> AgentBuilder + Send + Sync>),
    /// A new conversation of one built agent per request.
    Conversations(Agent),
}
type BearerCheck = dyn Fn(&str) -> Option<String> + Send + Sync;

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

/// Which browser origins may call the server (CORS). Off unless set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cors {
    /// Any origin (`Access-Control-Allow-Origin: *`).
    AnyOrigin,
    /// These origins only (`https://app.example.com`).
    Origins(Vec<String>),
}

/// Serves Rein agents over AG-UI: see the [crate docs](crate).
pub struct AguiServer {
    store: SharedSessionStore,
    make_agent: Arc<MakeAgent>,
    bearer: Option<Arc<BearerCheck>>,
    while_running: WhileRunning,
    console: bool,
    cors: Option<Cors>,
}

struct Inner {
    store: SharedSessionStore,
    make_agent: Arc<MakeAgent>,
    bearer: Option<Arc<BearerCheck>>,
    while_running: WhileRunning,
    /// Runs going on in this process, by thread id.
    active: Mutex<HashMap<String, ActiveRun>>,
}

struct ActiveRun {
    run_id: String,
    interceptor: TurnInterceptor,
}

impl std::fmt::Debug for AguiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AguiServer")
            .field("bearer_auth", &self.bearer.is_some())
            .field("while_running", &self.while_running)
            .field("console", &self.console)
            .field("cors", &self.cors)
            .finish_non_exhaustive()
    }
}

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
    /// server.bind_local(8080).await?.serve().await?;
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
            bearer: None,
            while_running: WhileRunning::default(),
            console: true,
            cors: None,
        }
    }

    /// Requires `Authorization: Bearer <token>` on the AG-UI routes: `check(token)` returns
    /// who it is (used as who answered an approval) or `None` to refuse (HTTP 401). The
    /// console's static files stay public; they hold no data.
    pub fn bearer_auth<F>(mut self, check: F) -> Self
    where
        F: Fn(&str) -> Option<String> + Send + Sync + 'static,
    {
        self.bearer = Some(Arc::new(check));
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

    /// Allow browser pages from other origins (default: none).
    pub fn cors(mut self, cors: Cors) -> Self {
        self.cors = Some(cors);
        self
    }

    /// The axum router, to mount into an application of your own (axum 0.8).
    pub fn router(&self) -> Result<Router, AguiError> {
        let mut router = Router::new()
            .route("/agent", post(run))
            .route("/threads/{thread_id}", get(thread));
        if self.console {
            router = router
                .route("/", get(crate::console::page))
                .route("/console.js", get(crate::console::script));
        }
        let router = router.with_state(Arc::new(Inner {
            store: self.store.clone(),
            make_agent: Arc::clone(&self.make_agent),
            bearer: self.bearer.clone(),
            while_running: self.while_running,
            active: Mutex::default(),
        }));
        Ok(match &self.cors {
            None => router,
            Some(c) => router.layer(cors_layer(c)?),
        })
    }

    /// Binds `127.0.0.1:<port>` (port 0 picks a free one): reachable from this machine only.
    pub async fn bind_local(self, port: u16) -> Result<BoundServer, AguiError> {
        self.bind(&format!("127.0.0.1:{port}")).await
    }

    /// Binds `addr` (e.g. `127.0.0.1:8080`; port 0 picks a free one). Prefer
    /// [`bind_local`](Self::bind_local) unless other machines must reach it; then set
    /// [`bearer_auth`](Self::bearer_auth) too.
    pub async fn bind(self, addr: &str) -> Result<BoundServer, AguiError> {
        let router = self.router()?;
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
        Ok(BoundServer {
            listener,
            router,
            local,
        })
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
}

impl BoundServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `http://<addr>/`: the console (and `<url>agent` the AG-UI endpoint).
    pub fn url(&self) -> String {
        format!("http://{}/", self.local)
    }

    /// Serves until the process ends.
    pub async fn serve(self) -> Result<(), AguiError> {
        axum::serve(self.listener, self.router)
            .await
            .map_err(AguiError::Serve)
    }

    /// Serves on a task; the handle stops it.
    pub fn spawn(self) -> ServerHandle {
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(self.listener, self.router)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .map_err(AguiError::Serve)
        });
        ServerHandle {
            addr: self.local,
            stop: Some(tx),
            task,
        }
    }
}

/// A server running on a task ([`BoundServer::spawn`]).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), AguiError>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
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

/// Who the request is from: `Ok(None)` without auth configured, `Ok(Some(who))` with it.
fn authenticate(inner: &Inner, headers: &HeaderMap) -> Result<Option<String>, ProtocolError> {
    let Some(check) = &inner.bearer else {
        return Ok(None);
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match token.and_then(|t| check(t)) {
        Some(who) => Ok(Some(who)),
        None => Err(ProtocolError::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "a valid `Authorization: Bearer <token>` header is required",
        )),
    }
}

/// Session ids are 1–128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`.
fn check_thread_id(id: &str) -> Result<(), ProtocolError> {
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

fn internal(e: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "INTERNAL",
        format!("the agent could not be restored: {e}"),
    )
}

/// Builds the thread's agent and restores it from the store.
async fn load(inner: &Inner, thread_id: &str) -> Result<Agent, ProtocolError> {
    let session = SessionManager::new(inner.store.clone(), thread_id);
    let mut agent = match &*inner.make_agent {
        MakeAgent::Builder(make) => make(thread_id).session(session).build().map_err(internal)?,
        MakeAgent::Conversations(agent) => agent.new_conversation().session(session).build(),
    };
    agent.load_session().await.map_err(internal)?;
    Ok(agent)
}

/// `GET /threads/{id}`: what the store holds for a thread: its pending interrupts, how many
/// messages, its state (404 `UNKNOWN_THREAD` when the store has no such session). Read from the
/// store itself, so looking never writes.
async fn thread(
    State(inner): State<Arc<Inner>>,
    Path(thread_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        authenticate(&inner, &headers)?;
        check_thread_id(&thread_id)?;
        let snapshot = stored(&inner, &thread_id)
            .await?
            .ok_or_else(|| unknown_thread(&thread_id))?;
        let pending: Vec<_> = snapshot
            .pending_interrupts
            .as_ref()
            .map(|p| p.interrupts.iter().map(to_wire).collect())
            .unwrap_or_default();
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
                        let asks: Vec<_> = p.interrupts.iter().map(to_wire).collect();
                        json!({"injectionId": p.id.to_string(), "text": p.message.text(), "interrupts": asks})
                    })
                    .collect();
                (Some(a.run_id.clone()), parked)
            })
            .unwrap_or_default();
        let mut state = snapshot.agent_state.clone();
        state.remove(ANSWERED_KEY);
        Ok::<_, ProtocolError>(axum::Json(json!({
            "threadId": thread_id,
            "messageCount": snapshot.active_messages().len(),
            "pendingInterrupts": pending,
            "runningRunId": running,
            "parkedInjections": parked,
            "state": state,
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
    inner.store.load(thread_id).await.map_err(internal)
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
async fn run(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    match start(inner, headers, body).await {
        Ok(events) => sse(events),
        Err(e) => e.into_response(),
    }
}

fn sse(rx: mpsc::UnboundedReceiver<WireEvent>) -> Response {
    let events = stream::unfold(rx, |mut rx| async move {
        let e = rx.recv().await?;
        let data = serde_json::to_string(&e).unwrap_or_else(|_| "{}".into());
        Some((Ok::<_, Infallible>(Event::default().data(data)), rx))
    });
    Sse::new(events).into_response()
}

async fn start(
    inner: Arc<Inner>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<mpsc::UnboundedReceiver<WireEvent>, ProtocolError> {
    let who = authenticate(&inner, &headers)?;
    let input: RunAgentInput = serde_json::from_slice(&body).map_err(|e| {
        ProtocolError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_RUN_INPUT",
            format!("the body is not a RunAgentInput: {e}"),
        )
    })?;
    check_thread_id(&input.thread_id)?;
    if input.run_id.is_empty() {
        return Err(ProtocolError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_RUN_INPUT",
            "runId must not be empty",
        ));
    }
    let thread_id = input.thread_id.clone();
    let new_text = input
        .messages
        .last()
        .filter(|m| m.role == "user")
        .and_then(|m| m.text());

    // A run on this thread is going in this process: inject, or refuse.
    {
        let active = inner.active.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(run) = active.get(&thread_id) {
            let refuse = |why: &str| {
                ProtocolError::new(
                    StatusCode::CONFLICT,
                    "RUN_IN_PROGRESS",
                    format!("run {} is still going on this thread: {why}", run.run_id),
                )
                .with_details(json!({"runningRunId": run.run_id}))
            };
            if let Some(resume) = &input.resume {
                // The only interrupts a going run has are those of injected messages parked on
                // a confirm (SPEC §5): answered through its interceptor, the run goes on.
                let parked: Vec<Interrupt> = run
                    .interceptor
                    .pending_approvals()
                    .into_iter()
                    .flat_map(|p| p.interrupts)
                    .collect();
                let named: Vec<Interrupt> = parked
                    .into_iter()
                    .filter(|i| resume.iter().any(|r| r.interrupt_id == i.resume_id()))
                    .collect();
                if resume.is_empty() || named.len() != resume.len() {
                    return Err(refuse("a resume must wait for it to finish"));
                }
                let mut answered = Vec::new();
                for r in answers(&named, resume)? {
                    let interrupt_id = r.interrupt_id.clone();
                    let injection = run.interceptor.answer(r).map_err(|e| {
                        ProtocolError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "INVALID_RESUME_PAYLOAD",
                            e.to_string(),
                        )
                    })?;
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
            if inner.while_running == WhileRunning::Refuse {
                return Err(refuse("this server refuses input while a run is going"));
            }
            let Some(text) = new_text else {
                return Err(refuse(
                    "and the request carries no new user message to inject",
                ));
            };
            let id = run
                .interceptor
                .inject(Message::user(text))
                .map_err(|e| refuse(&format!("the message could not be injected ({e})")))?;
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

    if input.resume.is_none() && new_text.is_none() {
        return Err(no_user_message());
    }
    // A resume names a thread that exists; checked on the store, so nothing is created.
    if input.resume.is_some() && stored(&inner, &thread_id).await?.is_none() {
        return Err(unknown_thread(&thread_id));
    }
    let agent = load(&inner, &thread_id).await?;
    let pending = agent.pending_interrupts().map(|p| p.interrupts.clone());
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
    let (agent_input, answered_by) = match (&input.resume, pending) {
        (Some(resume), Some(pending)) => {
            let responses = answers(&pending, resume)?;
            let ids: Vec<Value> = responses
                .iter()
                .map(|r| Value::String(r.interrupt_id.clone()))
                .collect();
            agent.state().set(ANSWERED_KEY, Value::Array(ids));
            let by: AnsweredBy = resume
                .iter()
                .filter_map(|r| {
                    let named = r
                        .metadata
                        .as_ref()
                        .and_then(|m| m.get("answeredBy"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    Some((r.interrupt_id.clone(), named.or_else(|| who.clone())?))
                })
                .collect();
            (Input::resume(responses), by)
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
        (None, Some(pending)) => {
            let asks: Vec<_> = pending.iter().map(to_wire).collect();
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
            (Input::text(text), Vec::new())
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
        active.insert(
            thread_id.clone(),
            ActiveRun {
                run_id: run_id.clone(),
                interceptor: agent.interceptor(),
            },
        );
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let task_inner = Arc::clone(&inner);
    tokio::spawn(async move {
        let guard = ActiveGuard {
            inner: task_inner,
            thread_id: thread_id.clone(),
        };
        drive(agent, agent_input, thread_id, run_id, answered_by, tx).await;
        drop(guard);
    });
    Ok(rx)
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
