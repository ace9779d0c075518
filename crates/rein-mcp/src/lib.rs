//! MCP (Model Context Protocol) tools for Rein: connect to an MCP server and use its tools as
//! Rein [`ToolHandle`]s.
//!
//! [`McpClient`] starts a server as a child process and talks to it over stdio
//! ([`McpClient::connect_stdio`]), or connects to a Streamable-HTTP server
//! (`McpClient::connect_http`, feature `http`). [`McpClient::tools`] lists the server's tools as
//! Rein tools: calling one forwards the call to the server with a timeout (60 s by default) and
//! maps the result (see [`McpClient::call_tool`] for the content mapping).
//!
//! A server that asks the user for input during a tool call (an *elicitation*, form or URL
//! mode) pauses the run with a durable interrupt named [`ELICITATION_INTERRUPT`]: a human
//! answers with an [`ElicitationAnswer`], maybe in another process, and the resumed run issues
//! the tool call again; the server's repeated question is answered from the stored answer,
//! which is bound to exactly that question (message and schema or URL). A policy
//! ([`McpClientBuilder::on_elicitation`]) may decline without a human: by default a form
//! asking for a secret is declined.
//!
//! The MCP SDK used underneath (`rmcp`) does not appear in this crate's API, so a new major
//! version of it is not a breaking change for Rein users.
//!
//! An MCP server is not trusted with Rein's resources: one message is at most 16 MiB (rmcp's
//! bound on a stdio line, an HTTP body or event); the tool list, each tool's input schema, each
//! tool result, resources, prompts and the elicitations of a tool call are bounded by
//! [`McpLimits`] (a [`McpError::TooLarge`] past one); the HTTP transport follows redirects
//! within the server's origin only (307 and 308: the bearer token and the session never reach
//! another host), and a stdio server gets a minimal environment ([`DEFAULT_INHERITED_ENV`]).
//!
//! Resources and prompts are read from code ([`McpClient::resources`],
//! [`McpClient::read_resource`], [`McpClient::prompt`]...) and reach the model only through
//! [`McpClient::resource_tools`] and [`McpClient::prompt_tools`], where the application opts
//! in; a subscribed resource's updates reach [`McpClient::resource_updates`].
//!
//! ```no_run
//! # async fn run() -> Result<(), rein_mcp::McpError> {
//! use std::time::Duration;
//! use rein_mcp::McpClient;
//!
//! let client = McpClient::builder()
//!     .prefix("fs") // tools named fs__read_text_file...; default: from the server's name
//!     .timeout(Duration::from_secs(30))
//!     .stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"])
//!     .await?;
//! for tool in client.tools().await? {
//!     println!("{}: {}", tool.name(), tool.spec().description);
//! }
//! client.close().await;
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fmt;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use rein_core::{
    Tool, ToolHandle,
    message::{Bytes, ImageBlock, MediaSource, ToolResultContent, ToolResultStatus},
    tool::{InterruptRaised, ToolContext, ToolError, ToolOutput, ToolSpec},
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, ElicitRequestParams, ElicitResult, Implementation, InputRequest, InputResponses,
    ProgressNotificationParam,
};
use rmcp::service::{
    NotificationContext, RequestContext, RunningService, RunningServiceCancellationToken,
};
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::Value;

mod elicitation;
mod resources;
mod sampling;
#[cfg(feature = "server")]
pub mod server;
mod updates;

use elicitation::{Call, ElicitationPolicy, Elicitor, Stop};
pub use elicitation::{
    ELICITATION_INTERRUPT, Elicitation, ElicitationAnswer, ElicitationRequest, ElicitationVerdict,
};
pub use resources::{
    McpPrompt, McpPromptArgument, McpResource, McpResourceContents, McpResourceTemplate,
};
pub use sampling::{
    SAMPLING_SERVER_KEY, Sampling, SamplingApproval, SamplingBudget, sampling_server,
};
#[cfg(feature = "server-agent")]
pub use server::ServedAgent;
#[cfg(feature = "server-http")]
pub use server::{HttpServeOptions, McpHttpServer};
#[cfg(feature = "server")]
pub use server::{McpServer, McpServerBuilder};
pub use updates::{McpResourceUpdate, McpResourceUpdates};

/// The default timeout of one tool call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The default timeout of connecting (starting the server and the MCP handshake) and of
/// listing tools.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error talking to an MCP server. The MCP SDK's own errors are kept as opaque sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server process could not be started.
    #[error("could not start MCP server `{command}`: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The connection or the MCP handshake failed.
    #[error("could not connect to MCP server {server}: {source}")]
    Connect {
        /// The server: its name from the handshake, else the program or the URL (never the
        /// arguments or credentials, which may be secret).
        server: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// A request to the server failed (transport error, protocol error, closed connection).
    #[error("MCP request `{method}` to {server} failed: {source}")]
    Request {
        /// The server: its name from the handshake, else the program or the URL (never the
        /// arguments or credentials, which may be secret).
        server: String,
        /// The MCP method (`tools/list`, `tools/call`...).
        method: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The server did not answer in time.
    #[error("MCP {what} on {server} timed out after {timeout:?}")]
    Timeout {
        /// The server: its name from the handshake, else the program or the URL (never the
        /// arguments or credentials, which may be secret).
        server: String,
        /// What timed out (`connect`, `tools/list`, `tool 'echo'`).
        what: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The server answered in a way this client does not support (e.g. a tool call that
    /// asks for sampling or became a long-running task).
    #[error("MCP server {server}: {message}")]
    Unsupported {
        /// The server: its name from the handshake, else the program or the URL (never the
        /// arguments or credentials, which may be secret).
        server: String,
        /// What was unsupported.
        message: String,
    },
    /// The server sent more than a limit of [`McpLimits`] allows (the tool list, a schema, a
    /// tool result, elicitations).
    #[error("MCP server {server}: {what} exceeds the limit of {limit} (McpLimits)")]
    TooLarge {
        /// The server: its name from the handshake, else the program or the URL.
        server: String,
        /// What was too large (`the tool list`, `the input schema of tool 'x'`...).
        what: String,
        /// The limit.
        limit: usize,
    },
    /// The stored answer to an elicitation is not a valid answer to the question the server
    /// asked (not an [`ElicitationAnswer`], or content the form does not accept).
    #[error("MCP server {server}: invalid answer to its elicitation: {message}")]
    InvalidAnswer {
        /// The server: its name from the handshake, else the program or the URL.
        server: String,
        /// Why the answer is invalid.
        message: String,
    },
    /// Serving over MCP failed (feature `server`): a tool set or interventions that cannot be
    /// served, a transport that failed.
    #[error("MCP server: {message}")]
    Serve {
        /// What failed.
        message: String,
        /// Why, when another error says.
        #[source]
        source: Option<BoxError>,
    },
    /// The connection has ended: closed with [`McpClient::close`], or the server gone (its
    /// process exited, its stream closed).
    #[error("MCP client for {server} is closed")]
    Closed {
        /// The server: its name from the handshake, else the program or the URL (never the
        /// arguments or credentials, which may be secret).
        server: String,
    },
}

/// Options for connecting to an MCP server; finish with [`stdio`](Self::stdio),
/// [`command`](Self::command) or `http` (feature `http`).
///
/// ```no_run
/// # async fn run() -> Result<(), rein_mcp::McpError> {
/// use std::time::Duration;
/// let client = rein_mcp::McpClient::builder()
///     .prefix("everything")
///     .timeout(Duration::from_secs(5))
///     .quiet(true)
///     .stdio("node", ["server-everything/dist/index.js", "stdio"])
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpClientBuilder {
    prefix: Prefix,
    timeout: Duration,
    connect_timeout: Duration,
    quiet: bool,
    inherit_env: bool,
    env: Vec<(String, String)>,
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    bearer_token: Option<String>,
    limits: McpLimits,
    elicitation_policy: ElicitationPolicy,
    sampling: Option<Sampling>,
}

/// Shows the names of the environment variables, not their values, and whether a bearer token
/// is set, not the token: both may be secrets.
impl fmt::Debug for McpClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClientBuilder")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("quiet", &self.quiet)
            .field("inherit_env", &self.inherit_env)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("limits", &self.limits)
            .field("sampling", &self.sampling)
            .finish_non_exhaustive()
    }
}

/// What an MCP server may send before a [`McpError::TooLarge`]: Rein gives the tool list to
/// the model in every request and each result to the model once, so a server must not be able
/// to fill the context, the memory or the agent's schema compiler.
///
/// ```
/// let mut limits = rein_mcp::McpLimits::default();
/// limits.max_tools = 50;
/// let builder = rein_mcp::McpClient::builder().limits(limits);
/// # let _ = builder;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpLimits {
    /// The most tools one server may list (default 1 000).
    pub max_tools: usize,
    /// The largest definition of one tool (its name, description, input schema...) as JSON
    /// (default 64 KiB): the model gets every definition in every request.
    pub max_tool_bytes: usize,
    /// The deepest nesting of objects and arrays in one input schema (default 32).
    pub max_schema_depth: usize,
    /// The largest tool result, as JSON (default 4 MiB); a larger one is a tool error the
    /// model sees.
    pub max_result_bytes: usize,
    /// The most elicitations one tool call may make (default 10, the protocol SDKs' bound on
    /// `input_required` rounds); past it the call fails.
    pub max_elicitations: usize,
    /// The largest elicitation request, as JSON (default 64 KiB): a human reads it.
    pub max_elicitation_bytes: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_tools: 1000,
            max_tool_bytes: 64 * 1024,
            max_schema_depth: 32,
            max_result_bytes: 4 * 1024 * 1024,
            max_elicitations: 10,
            max_elicitation_bytes: 64 * 1024,
        }
    }
}

/// The environment variables a stdio server gets from this process by default (as the
/// reference MCP SDKs do): enough to run, without leaking secrets such as API keys.
pub const DEFAULT_INHERITED_ENV: &[&str] = &[
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "TMPDIR",
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATHEXT",
    "PROCESSOR_ARCHITECTURE",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE",
];

impl Default for McpClientBuilder {
    fn default() -> Self {
        Self {
            prefix: Prefix::FromServerName,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            quiet: false,
            inherit_env: false,
            env: Vec::new(),
            bearer_token: None,
            limits: McpLimits::default(),
            elicitation_policy: elicitation::default_policy(),
            sampling: None,
        }
    }
}

impl McpClientBuilder {
    /// Names the server's tools `<alias>__<name>` with this alias (instead of the default,
    /// derived from the server's name): see [`McpClient::tools`]. The alias is sanitized as a
    /// tool name is (runs of `_` become one, so `__` only ever separates). The server still
    /// sees its own names.
    pub fn prefix(mut self, alias: impl Into<String>) -> Self {
        self.prefix = Prefix::Alias(alias.into());
        self
    }

    /// Gives the server's tools their bare names, without the default prefix. A server may
    /// then name a tool like one of yours (the agent refuses two tools of one name) or like a
    /// tool a policy rule names: use this only for servers you trust with your tool names.
    pub fn no_prefix(mut self) -> Self {
        self.prefix = Prefix::Bare;
        self
    }

    /// The timeout of one tool call (default [`DEFAULT_TIMEOUT`], 60 s). A call that takes
    /// longer is cancelled (the server is sent `notifications/cancelled`) and fails with a
    /// [`ToolError`] the model sees.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout of connecting and of listing tools (default [`DEFAULT_CONNECT_TIMEOUT`],
    /// 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Discards the server process's stderr (by default it is inherited, so server logs show
    /// up in yours).
    pub fn quiet(mut self, quiet: bool) -> Self {
        self.quiet = quiet;
        self
    }

    /// Sets an environment variable for a server started with [`stdio`](Self::stdio).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Whether a server started with [`stdio`](Self::stdio) inherits this process's whole
    /// environment. Default `false`: it gets only [`DEFAULT_INHERITED_ENV`] plus what
    /// [`env`](Self::env) sets, so secrets in your environment do not reach third-party
    /// servers.
    pub fn inherit_env(mut self, inherit: bool) -> Self {
        self.inherit_env = inherit;
        self
    }

    /// What the server may send (see [`McpLimits`]; default [`McpLimits::default`]).
    pub fn limits(mut self, limits: McpLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Decides, for each elicitation of the server (it asks the user for input during a tool
    /// call), whether a human is asked — the run then pauses with an interrupt named
    /// [`ELICITATION_INTERRUPT`] — or the server gets `decline` or `cancel` at once. The default
    /// declines a form asking for a secret ([`Elicitation::asks_for_secret`]: the protocol
    /// forbids servers to ask for those in a form) and asks a human about anything else.
    ///
    /// ```
    /// use rein_mcp::{ElicitationVerdict, McpClient};
    /// let builder = McpClient::builder().on_elicitation(|e| {
    ///     if e.asks_for_secret() || e.field_names().any(|f| f == "email") {
    ///         ElicitationVerdict::Decline
    ///     } else {
    ///         ElicitationVerdict::Ask
    ///     }
    /// });
    /// # let _ = builder;
    /// ```
    pub fn on_elicitation(
        mut self,
        policy: impl Fn(&Elicitation) -> ElicitationVerdict + Send + Sync + 'static,
    ) -> Self {
        self.elicitation_policy = Arc::new(policy);
        self
    }

    /// Lets the server ask for completions (`sampling/createMessage`), answered as
    /// [`Sampling`] says: by its model, through its interventions on model calls, within its
    /// per-server budget, past its approver. Without this the client does not declare the
    /// sampling capability and the server's requests are refused.
    ///
    /// ```
    /// use rein_mcp::{McpClient, Sampling};
    /// let model = rein_models::ScriptedModel::builder().text("ok").build();
    /// let builder = McpClient::builder().sampling(Sampling::new(model));
    /// # let _ = builder;
    /// ```
    pub fn sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = Some(sampling);
        self
    }

    /// Sends `Authorization: Bearer <token>` on every HTTP request (HTTP transport only),
    /// never to another origin. `Debug` does not show it.
    #[cfg(feature = "http")]
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// Starts `program args...` and connects to it over stdio. The server's environment is
    /// restricted (see [`inherit_env`](Self::inherit_env)).
    pub async fn stdio<I, S>(
        self,
        program: impl AsRef<OsStr>,
        args: I,
    ) -> Result<McpClient, McpError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args);
        if !self.inherit_env {
            cmd.env_clear();
            for key in DEFAULT_INHERITED_ENV {
                if let Some(v) = std::env::var_os(key) {
                    cmd.env(key, v);
                }
            }
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.command(cmd).await
    }

    /// Starts a prepared command and connects to it over stdio: the command is used as it is
    /// (its environment, working directory...; [`env`](Self::env) and
    /// [`inherit_env`](Self::inherit_env) do not apply). Its stdin and stdout are taken over
    /// for the protocol.
    pub async fn command(self, command: tokio::process::Command) -> Result<McpClient, McpError> {
        let server = describe_command(&command);
        let stderr = if self.quiet {
            Stdio::null()
        } else {
            Stdio::inherit()
        };
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
            .stderr(stderr)
            .spawn()
            .map_err(|source| McpError::Spawn {
                command: server.clone(),
                source,
            })?;
        self.finish(server, transport).await
    }

    /// Connects to a Streamable-HTTP MCP server at `url` (e.g. `http://127.0.0.1:3001/mcp`).
    #[cfg(feature = "http")]
    pub async fn http(self, url: impl Into<String>) -> Result<McpClient, McpError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let url: String = url.into();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
        if let Some(token) = &self.bearer_token {
            config = config.auth_header(token.clone());
        }
        // reqwest is built without a default crypto provider (to avoid aws-lc's C build):
        // install ring as the process default unless the application installed one already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let transport = StreamableHttpClientTransport::from_config(config);
        self.finish(describe_url(&url), transport).await
    }

    async fn finish<T, E, A>(self, server: String, transport: T) -> Result<McpClient, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let elicitor = Arc::new(Elicitor::new(self.elicitation_policy.clone(), self.limits));
        let sampler = self
            .sampling
            .map(|s| Arc::new(sampling::Sampler::new(s, self.timeout)));
        let updates = Arc::new(updates::Updates::default());
        let handler = Handler {
            elicitor: elicitor.clone(),
            sampler: sampler.clone(),
            updates: updates.clone(),
        };
        let connect = handler.serve(transport);
        let service = match tokio::time::timeout(self.connect_timeout, connect).await {
            Err(_) => {
                return Err(McpError::Timeout {
                    server,
                    what: "connect".into(),
                    timeout: self.connect_timeout,
                });
            }
            Ok(Err(e)) => {
                return Err(McpError::Connect {
                    server,
                    source: Box::new(e),
                });
            }
            Ok(Ok(service)) => service,
        };
        let peer = service.peer().clone();
        let connection = Connection::watch(service, updates.clone());
        let info = peer.peer_info();
        let server_name = info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .map(|i| i.name.clone());
        let instructions = info.as_ref().and_then(|i| i.instructions.clone());
        // From now on errors (which the model may see) name the server by its own name.
        let server = match &server_name {
            Some(name) if !name.is_empty() => format!("'{name}'"),
            _ => server,
        };
        let _ = elicitor.server.set(server.clone());
        let prefix = match self.prefix {
            Prefix::FromServerName => Some(alias(
                server_name
                    .as_deref()
                    .and_then(|n| n.rsplit('/').find(|part| !part.trim().is_empty()))
                    .unwrap_or_default(),
            )),
            Prefix::Alias(a) => Some(alias(&a)),
            Prefix::Bare => None,
        };
        if let Some(sampler) = &sampler {
            let _ = sampler.server.set(server.clone());
        }
        Ok(McpClient {
            inner: Arc::new(Inner {
                server,
                peer,
                connection,
                server_name,
                instructions,
                elicitor,
                updates,
                listed: std::sync::Mutex::new(None),
            }),
            prefix,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            limits: self.limits,
        })
    }
}

struct Inner {
    /// How errors name the server: its handshake name, else the program or URL.
    server: String,
    peer: Peer<RoleClient>,
    connection: Connection,
    server_name: Option<String>,
    instructions: Option<String>,
    elicitor: Arc<Elicitor>,
    /// The server's resource updates, for `resource_updates()`.
    updates: Arc<updates::Updates>,
    /// The server's names of the tools it listed last, once `tools()` ran: a tool it no longer
    /// lists is unknown.
    listed: std::sync::Mutex<Option<HashSet<String>>>,
}

/// The running connection, watched: a task owns rmcp's service and waits for its loop to end —
/// [`McpClient::close`], the last clone dropped, or the server gone (its process exited, its
/// stream closed) — then closes the resource updates, so a reader waiting on a dead server
/// gets `None` instead of waiting for ever.
struct Connection {
    /// Cancels the service's loop: taken by `close`, or when the last clone drops.
    stop: std::sync::Mutex<Option<RunningServiceCancellationToken>>,
    /// `true` once the loop has ended.
    ended: tokio::sync::watch::Receiver<bool>,
}

impl Connection {
    fn watch(service: RunningService<RoleClient, Handler>, updates: Arc<updates::Updates>) -> Self {
        let stop = service.cancellation_token();
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            if let Err(e) = service.waiting().await {
                tracing::debug!(error = %e, "MCP client connection");
            }
            updates.close();
            let _ = ended_tx.send(true);
        });
        Self {
            stop: std::sync::Mutex::new(Some(stop)),
            ended,
        }
    }

    fn is_closed(&self) -> bool {
        *self.ended.borrow() || self.stop_token().is_none()
    }

    fn stop_token(&self) -> std::sync::MutexGuard<'_, Option<RunningServiceCancellationToken>> {
        self.stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the connection and waits for its loop to finish.
    async fn close(&self) {
        let stop = self.stop_token().take();
        if let Some(stop) = stop {
            stop.cancel();
        }
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|ended| *ended).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(stop) = self.stop_token().take() {
            stop.cancel();
        }
    }
}

/// What the client does with the server's requests: elicitations go to the tool call under
/// way; sampling requests to the application's model, when it enabled sampling.
struct Handler {
    elicitor: Arc<Elicitor>,
    sampler: Option<Arc<sampling::Sampler>>,
    updates: Arc<updates::Updates>,
}

impl rmcp::ClientHandler for Handler {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        Ok(self.elicitor.on_request(&request))
    }

    #[allow(deprecated)] // rmcp marks sampling deprecated (SEP-2577); servers use it today.
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        match &self.sampler {
            Some(sampler) => {
                sampler
                    .create_message(params, self.elicitor.sole_context())
                    .await
            }
            // Not declared: refused as the protocol's unknown method.
            None => Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "sampling is not enabled on this client",
                None,
            )),
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.elicitor.on_progress(params);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updates.updated(params.uri);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.updates.list_changed();
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.elicitor.tools_changed.store(true, Ordering::SeqCst);
        self.elicitor.list_version.fetch_add(1, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        // Elicitation in both modes: each becomes an interrupt (or a policy's answer).
        // Sampling only when the application enabled it (without tools or context).
        let mut capabilities = serde_json::json!({"elicitation": {"form": {}, "url": {}}});
        if self.sampler.is_some() {
            capabilities["sampling"] = serde_json::json!({});
        }
        let capabilities: ClientCapabilities =
            serde_json::from_value(capabilities).unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("rein", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A connection to one MCP server. Cloning is cheap and shares the connection.
///
/// The connection (and a stdio server's process) lives as long as the client or any tool
/// obtained from it; [`close`](Self::close) ends it at once.
#[derive(Clone)]
pub struct McpClient {
    inner: Arc<Inner>,
    prefix: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    limits: McpLimits,
}

impl fmt::Debug for McpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.inner.server)
            .field("server_name", &self.inner.server_name)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Options for a connection (prefix, timeouts...).
    pub fn builder() -> McpClientBuilder {
        McpClientBuilder::default()
    }

    /// Starts `program args...` and connects to it over stdio, with the default options.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), rein_mcp::McpError> {
    /// let client = rein_mcp::McpClient::connect_stdio("uvx", ["mcp-server-time"]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_stdio<I, S>(program: impl AsRef<OsStr>, args: I) -> Result<Self, McpError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::builder().stdio(program, args).await
    }

    /// Connects to a Streamable-HTTP MCP server with the default options (feature `http`).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), rein_mcp::McpError> {
    /// let client = rein_mcp::McpClient::connect_http("http://127.0.0.1:3001/mcp").await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "http")]
    pub async fn connect_http(url: impl Into<String>) -> Result<Self, McpError> {
        Self::builder().http(url).await
    }

    /// This client with another tool-name prefix, sanitized as by
    /// [`McpClientBuilder::prefix`] (`None`: bare names; for tools listed from now on).
    pub fn with_prefix(mut self, prefix: Option<String>) -> Self {
        self.prefix = prefix.as_deref().map(alias);
        self
    }

    /// The alias that prefixes the server's tool names (`None` with
    /// [`McpClientBuilder::no_prefix`]): what a policy rule on this server's tools starts with.
    pub fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// This client with another tool-call timeout (for tools listed from now on).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The server's name from the MCP handshake, when it gave one.
    pub fn server_name(&self) -> Option<&str> {
        self.inner.server_name.as_deref()
    }

    /// The server's instructions from the MCP handshake, when it gave some (a system-prompt
    /// addition describing how to use its tools).
    pub fn instructions(&self) -> Option<&str> {
        self.inner.instructions.as_deref()
    }

    /// The server's tools as Rein tools, named `<alias>__<name>` so a server cannot name a
    /// tool like one of yours or like a tool a policy rule names (the agent refuses two tools
    /// of one name, and a rule on `read_file` does not match `fs__read_file`). The alias is
    /// [`McpClientBuilder::prefix`]'s, else derived from the server's name in the handshake (its
    /// last `/`-separated part, sanitized, at most 32 characters; `mcp` when it gives none):
    /// `mcp-servers/everything` → `everything__echo`. [`McpClientBuilder::no_prefix`] keeps the
    /// bare names. Characters other than ASCII letters, digits, `_` and `-` become `_`, so every
    /// model provider accepts the name (`^[a-zA-Z0-9_-]{1,64}$`); a name longer than 64 is
    /// shortened deterministically (55 characters, `-`, 8 hex digits of its SHA-256). Two tools
    /// that would get one name are an [`McpError::Unsupported`]. The server is called with its
    /// own name.
    ///
    /// The server may change its tools later (`notifications/tools/list_changed`):
    /// [`tools_changed`](Self::tools_changed) says so, and a tool the server no longer lists
    /// answers a call with the agent's own `Unknown tool: <name>` error result, without
    /// calling the server. Call `tools()` again to give the agent the new list.
    pub async fn tools(&self) -> Result<Vec<ToolHandle>, McpError> {
        let listed = self.relist().await?;
        let mut named = HashMap::new();
        listed
            .into_iter()
            .map(|t| {
                let remote = t.name.to_string();
                let schema = Value::Object((*t.input_schema).clone());
                self.check_tool(&remote, &t, &schema)?;
                let local = self.local_name(&remote);
                // Two of the server's names may sanitize alike: neither may stand for the other.
                if let Some(other) = named.insert(local.clone(), remote.clone()) {
                    return Err(self.unsupported(format!(
                        "tools '{other}' and '{remote}' would both be named '{local}'"
                    )));
                }
                let description = t
                    .description
                    .as_deref()
                    .map(str::to_owned)
                    .or_else(|| t.title.clone())
                    .unwrap_or_else(|| remote.clone());
                Ok(ToolHandle::new(McpTool {
                    spec: ToolSpec::new(local, description, schema),
                    remote,
                    client: self.clone(),
                }))
            })
            .collect()
    }

    /// The server's tools as a tool source for an agent (`AgentBuilder::tool_source`, instead
    /// of `.tools(client.tools().await?)`): the agent lists them again before its next model
    /// call after each `notifications/tools/list_changed`, so a run offers the model the
    /// server's current tools between turns, and a tool the server removed is unknown to the
    /// agent. Named as by [`tools`](Self::tools).
    ///
    /// ```no_run
    /// # async fn run(model: rein_models::ScriptedModel) -> Result<(), Box<dyn std::error::Error>> {
    /// let client = rein_mcp::McpClient::connect_stdio("uvx", ["mcp-server-time"]).await?;
    /// let agent = rein_agent::Agent::builder()
    ///     .model(model)
    ///     .tool_source(client.tool_source())
    ///     .build()?;
    /// # let _ = agent;
    /// # Ok(()) }
    /// ```
    pub fn tool_source(&self) -> impl rein_core::tool::ToolSource {
        McpToolSource(self.clone())
    }

    /// Whether the server said its tool list changed since [`tools`](Self::tools) last listed
    /// it: build the agent's next turn with `tools()` again to offer the new list.
    pub fn tools_changed(&self) -> bool {
        self.inner.elicitor.tools_changed.load(Ordering::SeqCst)
    }

    /// `tools/list` (every page) within the connect timeout, recorded as what the server lists
    /// now. The change flag is cleared first, so a change announced meanwhile is kept.
    async fn relist(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        self.inner
            .elicitor
            .tools_changed
            .store(false, Ordering::SeqCst);
        let listed = match tokio::time::timeout(self.connect_timeout, self.list_all()).await {
            Err(_) => {
                return Err(McpError::Timeout {
                    server: self.inner.server.clone(),
                    what: "tools/list".into(),
                    timeout: self.connect_timeout,
                });
            }
            Ok(listed) => listed?,
        };
        let names = listed.iter().map(|t| t.name.to_string()).collect();
        *self
            .inner
            .listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(names);
        Ok(listed)
    }

    /// Whether the server still lists its tool `remote`, listing again after a change.
    async fn still_listed(&self, remote: &str) -> Result<bool, McpError> {
        if self.tools_changed() {
            self.relist().await?;
        }
        let listed = self
            .inner
            .listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(listed.as_ref().is_none_or(|names| names.contains(remote)))
    }

    /// Every page of `tools/list`, at most `max_tools` tools in all.
    async fn list_all(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor = None;
        loop {
            let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let page = self
                .inner
                .peer
                .list_tools(Some(params))
                .await
                .map_err(|e| self.request_error("tools/list", e))?;
            tools.extend(page.tools);
            if tools.len() > self.limits.max_tools {
                return Err(self.too_large("the tool list", self.limits.max_tools));
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                return Ok(tools);
            }
        }
    }

    fn check_tool(
        &self,
        tool: &str,
        definition: &rmcp::model::Tool,
        schema: &Value,
    ) -> Result<(), McpError> {
        if json_size(definition) > self.limits.max_tool_bytes {
            return Err(self.too_large(
                &format!("the definition of tool '{tool}' (bytes)"),
                self.limits.max_tool_bytes,
            ));
        }
        if json_depth(schema) > self.limits.max_schema_depth {
            return Err(self.too_large(
                &format!("the input schema of tool '{tool}' (depth)"),
                self.limits.max_schema_depth,
            ));
        }
        Ok(())
    }

    fn too_large(&self, what: &str, limit: usize) -> McpError {
        McpError::TooLarge {
            server: self.inner.server.clone(),
            what: what.to_owned(),
            limit,
        }
    }

    /// Calls the server's tool `name` (its own name, without prefix) with `arguments` (a JSON
    /// object, or `null` for none), with this client's timeout.
    ///
    /// The result maps to a [`ToolOutput`]: `isError: true` gives the error status; text →
    /// text; an image → an image block (bytes decoded from base64; `png`, `jpeg`, `gif`,
    /// `webp`); `structuredContent` → a JSON block, unless the content already says the same
    /// (a text block that is its JSON is replaced by the JSON block; a text block equal to the
    /// single string field of a wrapper object such as `{"content": text}` stands for it, so the
    /// model does not get it twice); an embedded text resource → its text; a binary resource, a resource
    /// link or audio → a short text describing it. An empty result becomes the text
    /// `(no output)`. A transport or protocol error, a closed client or a timeout is a
    /// [`ToolError`] (its source is an [`McpError`]).
    ///
    /// Called from code, outside a run, nobody can answer an elicitation: the server gets
    /// `cancel` (the tools of [`tools`](Self::tools) raise an interrupt instead).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolOutput, ToolError> {
        self.call(name, arguments, None).await
    }

    /// [`call_tool`](Self::call_tool) within a tool call of a run (`cx`): an elicitation of
    /// the server raises an interrupt there. Without `cx` nobody can answer: the server gets
    /// `cancel`.
    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cx: Option<ToolContext>,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match arguments {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                return Err(ToolError::msg(format!(
                    "invalid input for MCP tool '{name}': expected a JSON object of arguments, got {other}"
                )));
            }
        };
        if self.inner.connection.is_closed() {
            return Err(McpError::Closed {
                server: self.inner.server.clone(),
            }
            .into());
        }
        let mut params = CallToolRequestParams::new(Cow::Owned(name.to_owned()));
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let registered = self.inner.elicitor.register(cx, name);
        let call = &registered.call;
        // An elicitation that stops the call (a human must answer, a limit) ends it at once:
        // dropping the request sends the server `notifications/cancelled`.
        let ran = tokio::select! {
            ran = tokio::time::timeout(self.timeout, self.rounds(name, params, call)) => Some(ran),
            () = call.stopped() => None,
        };
        if let Some(stop) = call.take_stop() {
            return Err(match stop {
                Stop::Interrupted(id) => InterruptRaised(id).into(),
                Stop::Failed(e) => e.into(),
            });
        }
        let result = match ran {
            None => return Err(ToolError::msg("MCP tool call stopped")),
            Some(Err(_)) => {
                return Err(McpError::Timeout {
                    server: self.inner.server.clone(),
                    what: format!("tool '{name}'"),
                    timeout: self.timeout,
                }
                .into());
            }
            Some(Ok(Err(e))) => return Err(e.into()),
            // Stopped by an elicitation: `take_stop` above had it.
            Some(Ok(Ok(None))) => return Err(ToolError::msg("MCP tool call stopped")),
            Some(Ok(Ok(Some(result)))) => result,
        };
        if json_size(&result) > self.limits.max_result_bytes {
            return Err(self
                .too_large(
                    &format!("the result of tool '{name}' (bytes)"),
                    self.limits.max_result_bytes,
                )
                .into());
        }
        Ok(map_result(result))
    }

    /// Sends `tools/call` until the server answers with a result, answering the requests of
    /// an `input_required` answer (the stateless protocol's elicitation) on the way, at most
    /// [`rmcp::model::DEFAULT_MRTR_MAX_ROUNDS`] rounds. `None`: an elicitation stopped it.
    async fn rounds(
        &self,
        name: &str,
        mut params: CallToolRequestParams,
        call: &Call,
    ) -> Result<Option<CallToolResult>, McpError> {
        for _ in 0..rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
            let response = self
                .call_once(params.clone(), call)
                .await
                .map_err(|e| self.request_error("tools/call", e))?;
            let input = match response {
                CallToolResponse::Complete(result) => return Ok(Some(result)),
                CallToolResponse::InputRequired(input) => input,
                CallToolResponse::Task(_) => {
                    return Err(self.unsupported(format!(
                        "tool '{name}' started a long-running task, which Rein does not poll"
                    )));
                }
                #[allow(unreachable_patterns)]
                _ => {
                    return Err(
                        self.unsupported(format!("tool '{name}' gave an unknown kind of response"))
                    );
                }
            };
            let mut responses = InputResponses::new();
            for (key, request) in input.input_requests.unwrap_or_default() {
                let response = match request {
                    InputRequest::Elicitation(request) => {
                        let answer = self.inner.elicitor.elicit(call, &request.params);
                        serde_json::to_value(answer).unwrap_or(Value::Null)
                    }
                    InputRequest::ListRoots(_) => serde_json::json!({"roots": []}),
                    _ => {
                        return Err(self.unsupported(format!(
                            "tool '{name}' asked for client-side input other than elicitation \
                             (sampling), which Rein does not provide"
                        )));
                    }
                };
                responses.insert(key, response);
            }
            if call.is_stopped() {
                return Ok(None);
            }
            params.input_responses = Some(responses);
            params.request_state = input.request_state;
        }
        Err(self.too_large(
            &format!("the input_required rounds of tool '{name}'"),
            rmcp::model::DEFAULT_MRTR_MAX_ROUNDS,
        ))
    }

    /// One `tools/call` request, its progress notifications reported to `call`. Dropped
    /// before the answer (a cancelled run, a timeout, an elicitation that stops the call), it
    /// sends the server `notifications/cancelled` for the request, as the protocol asks.
    async fn call_once(
        &self,
        params: CallToolRequestParams,
        call: &Call,
    ) -> Result<CallToolResponse, rmcp::ServiceError> {
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
        let handle = self
            .inner
            .peer
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await?;
        // The SDK picks the request's progress token: the call learns it here, before the
        // server can have answered more than a first report.
        call.progress_with(handle.progress_token.clone());
        let mut abandoned = Abandoned {
            peer: &self.inner.peer,
            id: Some(handle.id.clone()),
        };
        let result = handle.await_response().await;
        abandoned.id = None;
        match result? {
            rmcp::model::ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            rmcp::model::ServerResult::InputRequiredResult(r) => {
                Ok(CallToolResponse::InputRequired(r))
            }
            rmcp::model::ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            _ => Err(rmcp::ServiceError::UnexpectedResponse),
        }
    }

    fn unsupported(&self, message: String) -> McpError {
        McpError::Unsupported {
            server: self.inner.server.clone(),
            message,
        }
    }

    /// Closes the connection (a stdio server's process is stopped). Later calls fail with
    /// [`McpError::Closed`]. Closing twice does nothing.
    pub async fn close(&self) {
        self.inner.updates.close();
        self.inner.connection.close().await;
    }

    fn request_error(
        &self,
        method: &str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> McpError {
        McpError::Request {
            server: self.inner.server.clone(),
            method: method.to_owned(),
            source: Box::new(e),
        }
    }

    fn local_name(&self, remote: &str) -> String {
        match &self.prefix {
            Some(p) => tool_name(&format!("{p}{PREFIX_SEPARATOR}{remote}")),
            None => tool_name(remote),
        }
    }
}

/// A request under way: dropped before its answer, it tells the server
/// (`notifications/cancelled`), so the server stops working on a result nobody reads.
struct Abandoned<'a> {
    peer: &'a Peer<RoleClient>,
    /// `None` once answered.
    id: Option<rmcp::model::RequestId>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        // Sent from a task of its own: a drop cannot wait. Without a runtime (it is shutting
        // down) the connection ends with it anyway.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let peer = self.peer.clone();
            let cancelled = rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some("cancelled by the client".to_owned()),
            );
            runtime.spawn(async move {
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

/// How the builder names the server's tools.
#[derive(Debug, Clone)]
enum Prefix {
    /// `<alias>__<name>`, the alias derived from the server's name.
    FromServerName,
    /// `<alias>__<name>` with the application's alias.
    Alias(String),
    /// The server's names.
    Bare,
}

/// Between a server's alias and its tool's name. Two underscores, not a dot: the providers
/// accept `^[a-zA-Z0-9_-]{1,64}$` only; and not one, which tool names often hold.
const PREFIX_SEPARATOR: &str = "__";
/// The longest tool name every provider accepts.
const MAX_TOOL_NAME: usize = 64;
/// The longest alias derived from a server's name (the tool's own name needs the room).
const MAX_DERIVED_ALIAS: usize = 32;

/// An alias: the characters of a tool name (others become `_`), runs of `_` made one (so the
/// separator is never part of it), without leading or trailing `_`/`-`, at most 32 characters;
/// `mcp` when nothing is left.
fn alias(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let out: String = out
        .trim_matches(['_', '-'])
        .chars()
        .take(MAX_DERIVED_ALIAS)
        .collect();
    let out = out.trim_end_matches(['_', '-']);
    if out.is_empty() {
        "mcp".to_owned()
    } else {
        out.to_owned()
    }
}

/// A tool name every provider accepts: characters other than ASCII letters, digits, `_` and `-`
/// become `_`; a name longer than 64 is cut to 55 characters and given `-` and 8 hex digits of
/// the SHA-256 of the full name — deterministic (the same on every connection, so policies and
/// stored approvals keep matching) and distinct for names that share their first 55 characters.
fn tool_name(full: &str) -> String {
    let name = ToolSpec::name_from(full);
    if full.chars().count() <= MAX_TOOL_NAME {
        return name;
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(full.as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    // `name` is ASCII: every character is one byte.
    format!("{}-{hex}", &name[..MAX_TOOL_NAME - 9])
}

/// A client's tools as a tool source: its version counts the server's list changes.
struct McpToolSource(McpClient);

impl rein_core::tool::ToolSource for McpToolSource {
    fn version(&self) -> u64 {
        self.0.inner.elicitor.list_version.load(Ordering::SeqCst)
    }

    fn tools(&self) -> rein_core::tool::BoxFuture<'_, Result<Vec<ToolHandle>, ToolError>> {
        Box::pin(async move { self.0.tools().await.map_err(ToolError::from) })
    }
}

/// One MCP server tool as a Rein tool.
struct McpTool {
    spec: ToolSpec,
    remote: String,
    client: McpClient,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, input: Value, cx: ToolContext) -> Result<ToolOutput, ToolError> {
        // A tool the server removed is unknown, as the agent says of a tool it never had.
        if !self.client.still_listed(&self.remote).await? {
            return Ok(ToolOutput::new(
                ToolResultStatus::Error,
                vec![ToolResultContent::Text(format!(
                    "Unknown tool: {}",
                    self.spec.name
                ))],
            ));
        }
        self.client.call(&self.remote, input, Some(cx)).await
    }
}

/// The program, without its arguments (which may hold secrets), to name a server in errors.
fn describe_command(cmd: &tokio::process::Command) -> String {
    cmd.as_std().get_program().to_string_lossy().into_owned()
}

/// A URL without credentials, query or fragment, to name a server in errors.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
fn describe_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// The length of `value` as JSON, counted without building the text.
fn json_size(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a parsed value cannot fail; a failure counts as too large.
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// The nesting depth of objects and arrays in `value` (a scalar: 0). Parsed JSON is at most
/// 128 deep (serde_json's recursion limit), so the recursion is bounded.
fn json_depth(value: &Value) -> usize {
    match value {
        Value::Object(m) => 1 + m.values().map(json_depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Maps an MCP `CallToolResult` to a Rein tool output.
fn map_result(result: CallToolResult) -> ToolOutput {
    let status = if result.is_error == Some(true) {
        ToolResultStatus::Error
    } else {
        ToolResultStatus::Success
    };
    let mut content = Vec::new();
    let structured = result.structured_content;
    // `structuredContent` is kept without doubling what the content already says: a text block
    // that is its JSON becomes the JSON block; a text block equal to the one string field of a
    // wrapper object (`{"content": text}`) stands for it; otherwise the JSON block is appended.
    let mut represented = false;
    for block in result.content {
        if let (Some(v), ContentBlock::Text(t)) = (&structured, &block) {
            if serde_json::from_str::<Value>(&t.text).ok().as_ref() == Some(v) {
                if !represented {
                    content.push(ToolResultContent::Json(v.clone()));
                    represented = true;
                }
                continue;
            }
            if let Some(obj) = v.as_object()
                && obj.len() == 1
                && obj.values().next().and_then(Value::as_str) == Some(t.text.as_str())
            {
                represented = true;
            }
        }
        content.push(map_block(block));
    }
    if let Some(v) = structured
        && !represented
    {
        content.push(ToolResultContent::Json(v));
    }
    if content.is_empty() {
        content.push(ToolResultContent::Text("(no output)".into()));
    }
    ToolOutput::new(status, content)
}

fn map_block(block: ContentBlock) -> ToolResultContent {
    match block {
        ContentBlock::Text(t) => ToolResultContent::Text(t.text),
        ContentBlock::Image(i) => image(&i.data, &i.mime_type, "image"),
        ContentBlock::Audio(a) => ToolResultContent::Text(format!(
            "[audio ({}), {} bytes: not shown]",
            a.mime_type,
            decoded_len(&a.data)
        )),
        ContentBlock::Resource(r) => resource(&r.resource),
        ContentBlock::ResourceLink(link) => {
            let mut s = format!("[resource link: {} ({})", link.uri, link.name);
            if let Some(d) = &link.description {
                s.push_str(": ");
                s.push_str(d);
            }
            s.push(']');
            ToolResultContent::Text(s)
        }
        #[allow(unreachable_patterns)]
        other => match serde_json::to_value(&other) {
            Ok(v) => ToolResultContent::Json(v),
            Err(_) => ToolResultContent::Text("[unsupported MCP content]".into()),
        },
    }
}

/// An embedded resource: text as text, an image as an image, other bytes described.
fn resource(contents: &rmcp::model::ResourceContents) -> ToolResultContent {
    // Read the wire form rather than the SDK's enum, so new variants degrade gracefully.
    let v = serde_json::to_value(contents).unwrap_or(Value::Null);
    let uri = v.get("uri").and_then(Value::as_str).unwrap_or("?");
    let mime = v.get("mimeType").and_then(Value::as_str);
    if let Some(text) = v.get("text").and_then(Value::as_str) {
        return ToolResultContent::Text(text.to_owned());
    }
    if let Some(blob) = v.get("blob").and_then(Value::as_str) {
        if let Some(m) = mime
            && m.starts_with("image/")
            && image_format(m).is_some()
        {
            return image(blob, m, uri);
        }
        return ToolResultContent::Text(format!(
            "[resource {uri} ({}), {} bytes of binary data: not shown]",
            mime.unwrap_or("application/octet-stream"),
            decoded_len(blob)
        ));
    }
    ToolResultContent::Text(format!("[resource {uri}]"))
}

fn image(data: &str, mime: &str, what: &str) -> ToolResultContent {
    let Some(format) = image_format(mime) else {
        return ToolResultContent::Text(format!(
            "[{what} ({mime}), {} bytes: format not supported]",
            decoded_len(data)
        ));
    };
    match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
        Ok(bytes) => ToolResultContent::Image(ImageBlock {
            format: format.to_owned(),
            source: MediaSource::Bytes(Bytes(bytes)),
        }),
        Err(e) => ToolResultContent::Text(format!("[{what} ({mime}): invalid base64: {e}]")),
    }
}

fn image_format(mime: &str) -> Option<&'static str> {
    let known: HashMap<&str, &'static str> = [
        ("image/png", "png"),
        ("image/jpeg", "jpeg"),
        ("image/jpg", "jpeg"),
        ("image/gif", "gif"),
        ("image/webp", "webp"),
    ]
    .into_iter()
    .collect();
    let base = mime.split(';').next().unwrap_or(mime).trim();
    known.get(base.to_ascii_lowercase().as_str()).copied()
}

fn decoded_len(b64: &str) -> usize {
    b64.trim().len() / 4 * 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn server_labels_hide_secrets() {
        assert_eq!(
            describe_url("https://user:pw@mcp.example.com:8443/mcp?token=x#f"),
            "https://mcp.example.com:8443/mcp"
        );
        assert_eq!(
            describe_url("http://127.0.0.1:3001"),
            "http://127.0.0.1:3001"
        );
        let mut cmd = tokio::process::Command::new("server");
        cmd.args(["--api-key", "secret"]);
        assert_eq!(describe_command(&cmd), "server");
    }

    #[test]
    fn aliases_are_sanitized_and_never_hold_the_separator() {
        assert_eq!(alias("everything"), "everything");
        assert_eq!(alias("My Server!"), "My_Server");
        assert_eq!(alias("a__b___c"), "a_b_c");
        assert_eq!(alias("__x-"), "x");
        assert_eq!(alias(""), "mcp");
        assert_eq!(alias("@/."), "mcp");
        assert_eq!(alias(&"s".repeat(40)).len(), 32);
    }

    #[test]
    fn long_tool_names_are_shortened_deterministically() {
        let long = |tool: &str| tool_name(&format!("{}__{tool}", "a".repeat(30)));
        let (x, y) = (long(&"x".repeat(40)), long(&format!("{}y", "x".repeat(39))));
        assert_eq!(x.len(), 64);
        assert_eq!(y.len(), 64);
        // The same input gives the same name; names sharing their first 64 characters differ.
        assert_eq!(x, long(&"x".repeat(40)));
        assert_ne!(x, y);
        assert!(x.starts_with(&format!("{}__x", "a".repeat(30))), "{x}");
        assert!(
            x.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{x}"
        );
        // A name within the limit is kept, sanitized.
        assert_eq!(tool_name("ev__get.sum"), "ev__get_sum");
        assert_eq!(tool_name(&"n".repeat(64)), "n".repeat(64));
    }

    #[test]
    fn maps_text_error_and_empty_results() {
        let out = map_result(result(json!({"content": [{"type": "text", "text": "hi"}]})));
        assert_eq!(out.status, ToolResultStatus::Success);
        assert_eq!(out.content, vec![ToolResultContent::Text("hi".into())]);

        let out = map_result(result(
            json!({"content": [{"type": "text", "text": "bad"}], "isError": true}),
        ));
        assert_eq!(out.status, ToolResultStatus::Error);

        let out = map_result(result(json!({"content": []})));
        assert_eq!(
            out.content,
            vec![ToolResultContent::Text("(no output)".into())]
        );
    }

    #[test]
    fn maps_structured_content_and_drops_its_text_copy() {
        let out = map_result(result(json!({
            "content": [{"type": "text", "text": "{\"t\": 1}"}, {"type": "text", "text": "note"}],
            "structuredContent": {"t": 1},
        })));
        assert_eq!(
            out.content,
            vec![
                ToolResultContent::Json(json!({"t": 1})),
                ToolResultContent::Text("note".into())
            ]
        );
        // A wrapper object whose one string field repeats the text: the text stands for it.
        let out = map_result(result(json!({
            "content": [{"type": "text", "text": "line 1\nline 2"}],
            "structuredContent": {"content": "line 1\nline 2"},
        })));
        assert_eq!(
            out.content,
            vec![ToolResultContent::Text("line 1\nline 2".into())]
        );
        // Structured content the text does not carry is appended.
        let out = map_result(result(json!({
            "content": [{"type": "text", "text": "see data"}],
            "structuredContent": {"rows": [1, 2]},
        })));
        assert_eq!(
            out.content,
            vec![
                ToolResultContent::Text("see data".into()),
                ToolResultContent::Json(json!({"rows": [1, 2]}))
            ]
        );
    }

    #[test]
    fn maps_images_resources_links_and_audio() {
        let png = base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]);
        let out = map_result(result(json!({"content": [
            {"type": "image", "data": png, "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/tiff"},
            {"type": "image", "data": "!!", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "file text"}},
            {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAAA"}},
            {"type": "resource", "resource": {"uri": "file:///a.gif", "mimeType": "image/gif", "blob": png}},
            {"type": "resource_link", "uri": "file:///b", "name": "b", "description": "the b"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        ]})));
        let c = &out.content;
        assert_eq!(
            c[0],
            ToolResultContent::Image(ImageBlock {
                format: "png".into(),
                source: MediaSource::Bytes(Bytes(vec![1, 2, 3]))
            })
        );
        assert_eq!(
            c[1],
            ToolResultContent::Text("[image (image/tiff), 3 bytes: format not supported]".into())
        );
        assert!(
            matches!(&c[2], ToolResultContent::Text(t) if t.starts_with("[image (image/png): invalid base64"))
        );
        assert_eq!(c[3], ToolResultContent::Text("file text".into()));
        assert_eq!(
            c[4],
            ToolResultContent::Text(
                "[resource file:///a.bin (application/octet-stream), 3 bytes of binary data: not shown]"
                    .into()
            )
        );
        assert!(matches!(&c[5], ToolResultContent::Image(i) if i.format == "gif"));
        assert_eq!(
            c[6],
            ToolResultContent::Text("[resource link: file:///b (b): the b]".into())
        );
        assert_eq!(
            c[7],
            ToolResultContent::Text("[audio (audio/wav), 3 bytes: not shown]".into())
        );
    }
}
