//! Rein as an MCP server (feature `server`): a tool set served behind Rein's interventions.
//!
//! Each `tools/call` goes through the same lifecycle an agent's tool call goes through
//! (SPEC §6): BeforeToolCall (a Deny is an error result the client sees, a Transform rewrites
//! the input) → input validation against the tool's schema → the tool, under a timeout →
//! AfterToolCall (a Transform rewrites the result). Every decision reaches the audit
//! ([`McpServerBuilder::on_decision`]). A `Confirm` (an intervention asking a human) becomes an
//! elicitation the MCP client answers (a boolean `approved` form); a client that cannot answer
//! one gets the call refused, with the reason.
//!
//! Why not the agent's own tool phase: it is a step of a model-driven run (history, tool-use
//! rewrites, checkpoints, journals), reachable only through a model; a model made up to call
//! one tool would show interventions on model calls a request nobody made. The lifecycle is
//! the contract (SPEC §6), and this runs it on the events and registry the agent uses.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rein_core::{
    ToolHandle, ToolResult, ToolUse,
    audit::DecisionRecord,
    event::{
        AfterToolCallEvent, BeforeToolCallEvent, InvocationContext, ToolCallAction,
        ToolResultVerdict,
    },
    interrupt::{Interrupt, InterruptAnswer, InterruptAnswers},
    message::{ImageBlock, MediaSource, ToolResultContent, ToolResultStatus},
    state::InvocationState,
    tool::ToolContext,
};
use rein_hooks::HookRegistry;
use rein_interventions::{InterventionRegistry, SharedHandler};
use rmcp::model::{
    BooleanSchema, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ElicitRequestParams, ElicitationAction, ElicitationSchema, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, PrimitiveSchemaDefinition, ProtocolVersion,
    ServerCapabilities,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

use crate::McpError;

#[cfg(feature = "server-agent")]
mod agent;
#[cfg(feature = "server-agent")]
pub use agent::ServedAgent;
#[cfg(feature = "server-http")]
mod http;
#[cfg(feature = "server-http")]
pub use http::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_SESSIONS,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_IDLE_TIMEOUT, HttpServeOptions, MCP_PATH,
    McpHttpServer,
};

/// The default bound on one call's arguments, as JSON bytes (1 MiB).
pub const DEFAULT_MAX_INPUT_BYTES: usize = 1 << 20;
/// The default timeout of one tool's run (not counting the time a human takes to approve).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The default time the client has to answer one approval (an elicitation).
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// How many times the interventions of one call (or a served agent's run) may ask a human (a handler may ask again
/// after an answer); past it the call is refused.
pub(crate) const MAX_APPROVAL_ROUNDS: usize = 8;
/// How many times AfterToolCall may send a call back to BeforeToolCall (as an agent's
/// `max_hook_retries` default).
const MAX_RETRIES: u32 = 3;

/// The newest protocol revision served: the last one where the server may ask the client
/// during a call (`elicitation/create`). From 2026-07-28 on a server returns an
/// input-required result and the client calls again, which would carry the approval across
/// two requests; one request keeps it bound to the call it approves.
const MAX_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

type DecisionSink = Arc<dyn Fn(&DecisionRecord) + Send + Sync>;

/// Options for an [`McpServer`]; finish with [`build`](Self::build).
///
/// ```
/// use rein_mcp::McpServer;
/// use rein_core::{tool::{ToolContext, ToolError, ToolOutput, ToolSpec}, Tool, ToolHandle};
///
/// struct Echo;
/// impl Tool for Echo {
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::new("echo", "Echoes.", serde_json::json!({"type": "object"}))
///     }
///     async fn call(&self, input: serde_json::Value, _: ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::text(input.to_string()))
///     }
/// }
/// let server = McpServer::builder().name("demo").tool(ToolHandle::new(Echo)).build().unwrap();
/// assert_eq!(server.tool_names(), ["echo"]);
/// ```
#[derive(Clone)]
#[must_use]
pub struct McpServerBuilder {
    name: String,
    version: String,
    tools: Vec<ToolHandle>,
    interventions: Vec<SharedHandler>,
    max_input_bytes: usize,
    call_timeout: Duration,
    approval_timeout: Duration,
    on_decision: Option<DecisionSink>,
}

impl fmt::Debug for McpServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerBuilder")
            .field("name", &self.name)
            .field("tools", &self.tools.len())
            .field("interventions", &self.interventions.len())
            .field("max_input_bytes", &self.max_input_bytes)
            .field("call_timeout", &self.call_timeout)
            .field("approval_timeout", &self.approval_timeout)
            .finish_non_exhaustive()
    }
}

impl McpServerBuilder {
    /// The server's name in the MCP handshake (default `rein`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The server's version in the MCP handshake (default: this crate's).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Serves a tool.
    pub fn tool(mut self, tool: impl Into<ToolHandle>) -> Self {
        self.tools.push(tool.into());
        self
    }

    /// Serves tools.
    pub fn tools<I>(mut self, tools: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<ToolHandle>,
    {
        self.tools.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Puts an intervention in front of every call, as [`AgentBuilder::intervention`] does
    /// for an agent's. Handlers are evaluated in the order they are added.
    ///
    /// [`AgentBuilder::intervention`]: https://docs.rs/rein-agent
    pub fn intervention(mut self, handler: impl Into<SharedHandler>) -> Self {
        self.interventions.push(handler.into());
        self
    }

    /// Puts interventions in front of every call, in order.
    pub fn interventions<I>(mut self, handlers: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<SharedHandler>,
    {
        self.interventions
            .extend(handlers.into_iter().map(Into::into));
        self
    }

    /// The bound on one call's arguments, as JSON bytes ([`DEFAULT_MAX_INPUT_BYTES`]); a
    /// larger call is refused before any intervention or tool sees it.
    pub fn max_input_bytes(mut self, bytes: usize) -> Self {
        self.max_input_bytes = bytes;
        self
    }

    /// The timeout of one tool's run ([`DEFAULT_CALL_TIMEOUT`]); a tool still running then is
    /// stopped and the client gets an error result.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The time the client has to answer one approval ([`DEFAULT_APPROVAL_TIMEOUT`]); no
    /// answer in time is a rejection.
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// Receives every intervention decision (the audit), as the agent's `decisions` would hold
    /// them; each is also logged (`tracing`, target `rein_mcp::audit`).
    pub fn on_decision(mut self, f: impl Fn(&DecisionRecord) + Send + Sync + 'static) -> Self {
        self.on_decision = Some(Arc::new(f));
        self
    }

    /// The server. Fails on two tools of one name, a tool's invalid input schema, or
    /// interventions that do not build (a duplicate name).
    pub fn build(self) -> Result<McpServer, McpError> {
        let invalid = |message: String| McpError::Serve {
            message,
            source: None,
        };
        let mut tools = HashMap::with_capacity(self.tools.len());
        let mut listed = Vec::with_capacity(self.tools.len());
        for handle in self.tools {
            let spec = handle.spec();
            let validator = jsonschema::validator_for(&spec.input_schema).map_err(|e| {
                invalid(format!(
                    "the input schema of tool '{}' is invalid: {e}",
                    spec.name
                ))
            })?;
            let Value::Object(schema) = (*spec.input_schema).clone() else {
                return Err(invalid(format!(
                    "the input schema of tool '{}' is not an object",
                    spec.name
                )));
            };
            let mut tool = rmcp::model::Tool::new(
                spec.name.clone(),
                spec.description.clone(),
                Arc::new(schema),
            );
            let structured = output_schema(&handle);
            if let Some(schema) = &structured {
                let Value::Object(schema) = schema.clone() else {
                    return Err(invalid(format!(
                        "the output schema of tool '{}' is not an object",
                        spec.name
                    )));
                };
                tool.output_schema = Some(Arc::new(schema));
            }
            listed.push(tool);
            let name = spec.name.clone();
            let entry = Entry {
                handle,
                validator: Arc::new(validator),
                structured: structured.is_some(),
            };
            if tools.insert(name.clone(), entry).is_some() {
                return Err(invalid(format!("two tools are named '{name}'")));
            }
        }
        let hooks = if self.interventions.is_empty() {
            HookRegistry::new()
        } else {
            InterventionRegistry::new(self.interventions)
                .map_err(|e| McpError::Serve {
                    message: "the interventions do not build".into(),
                    source: Some(Box::new(e)),
                })?
                .to_hooks()
        };
        Ok(McpServer {
            inner: Arc::new(Inner {
                name: self.name,
                version: self.version,
                tools,
                listed,
                hooks,
                max_input_bytes: self.max_input_bytes,
                call_timeout: self.call_timeout,
                approval_timeout: self.approval_timeout,
                on_decision: self.on_decision,
            }),
        })
    }
}

struct Entry {
    handle: ToolHandle,
    validator: Arc<jsonschema::Validator>,
    /// Its result's JSON is `structuredContent` (it lists an `outputSchema`).
    structured: bool,
}

/// The output schema a tool declares (a served agent with a typed answer).
fn output_schema(handle: &ToolHandle) -> Option<Value> {
    #[cfg(feature = "server-agent")]
    if let Some(s) = handle.capability::<agent::StructuredOutput>() {
        return Some(s.schema.clone());
    }
    let _ = handle;
    None
}

struct Inner {
    name: String,
    version: String,
    tools: HashMap<String, Entry>,
    /// The tools as `tools/list` shows them, in the order they were added.
    listed: Vec<rmcp::model::Tool>,
    hooks: HookRegistry,
    max_input_bytes: usize,
    call_timeout: Duration,
    approval_timeout: Duration,
    on_decision: Option<DecisionSink>,
}

/// Rein tools served over MCP, each call behind the interventions (see the
/// [module docs](self)). Cheap to clone: clones serve the same tools.
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner.name)
            .field("tools", &self.tool_names())
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Options for a server.
    pub fn builder() -> McpServerBuilder {
        McpServerBuilder {
            name: "rein".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            tools: Vec::new(),
            interventions: Vec::new(),
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            on_decision: None,
        }
    }

    /// The names of the served tools, in the order they were added.
    pub fn tool_names(&self) -> Vec<&str> {
        self.inner.listed.iter().map(|t| t.name.as_ref()).collect()
    }

    /// Serves one client over this process's stdin and stdout until it disconnects.
    pub async fn serve_stdio(&self) -> Result<(), McpError> {
        self.serve_io(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serves one client over a byte stream (newline-delimited JSON-RPC, as stdio) until it
    /// disconnects: a pipe, a socket, an in-process duplex.
    pub async fn serve_io<R, W>(&self, read: R, write: W) -> Result<(), McpError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| McpError::Serve {
            message: "the MCP session failed".into(),
            source: Some(source),
        };
        let running = self
            .handler()
            .serve((read, write))
            .await
            .map_err(|e| failed(Box::new(e)))?;
        running.waiting().await.map_err(|e| failed(Box::new(e)))?;
        Ok(())
    }

    fn handler(&self) -> Handler {
        Handler(self.inner.clone())
    }
}

/// The rmcp side of a server (kept out of the public API).
#[derive(Clone)]
struct Handler(Arc<Inner>);

impl ServerHandler for Handler {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(MAX_PROTOCOL)
            .with_server_info(Implementation::new(&self.0.name, &self.0.version))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&MAX_PROTOCOL))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.0.listed.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let structured = self
            .0
            .tools
            .get(request.name.as_ref())
            .is_some_and(|e| e.structured);
        let result = self.0.call(&request.name, input, &context.peer).await;
        Ok(CallToolResponse::Complete(to_mcp(result, structured)))
    }
}

/// Asks the MCP client of one call for approvals; a served agent finds it in its
/// `ToolContext` (an extension) to ask about the Confirms inside its run.
pub(crate) struct Approver {
    peer: Peer<RoleServer>,
    timeout: Duration,
}

impl Approver {
    /// One elicitation: a form with a required boolean `approved` and the confirm's prompt.
    /// Only accept with `approved: true` approves; decline, cancel, a timeout or any other
    /// content is a rejection.
    pub(crate) async fn ask(&self, interrupt: &Interrupt) -> Result<bool, NoAnswer> {
        if !self
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return Err(NoAnswer::Incapable);
        }
        let approved = BooleanSchema::new()
            .title("Approve")
            .description("Approve this tool call");
        let schema = ElicitationSchema::builder()
            .required_property("approved", PrimitiveSchemaDefinition::Boolean(approved))
            .build()
            .map_err(|e| NoAnswer::Failed(e.to_owned()))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: interrupt.prompt_text(),
            requested_schema: schema,
        };
        match self
            .peer
            .create_elicitation_with_timeout(params, Some(self.timeout))
            .await
        {
            Ok(r) => Ok(r.action == ElicitationAction::Accept
                && r.content.as_ref().and_then(|c| c.get("approved")) == Some(&Value::Bool(true))),
            Err(rmcp::ServiceError::Timeout { .. }) => Ok(false),
            Err(e) => Err(NoAnswer::Failed(e.to_string())),
        }
    }
}

/// Why a call could not get a human's answer.
pub(crate) enum NoAnswer {
    /// The client cannot be asked.
    Incapable,
    /// Asking failed (the client went away, a transport error).
    Failed(String),
}

impl NoAnswer {
    /// Why the call is refused (the error result's text after `Error: `).
    pub(crate) fn refusal(&self, interrupt: &Interrupt) -> String {
        match self {
            Self::Incapable => format!(
                "the call needs a human's approval ({}: {}), and this MCP client cannot \
                 ask for one (it did not declare the elicitation capability); it was not run",
                interrupt.name,
                interrupt.prompt_text()
            ),
            Self::Failed(why) => format!(
                "the call needs a human's approval ({}), and asking the client failed: \
                 {why}; it was not run",
                interrupt.name
            ),
        }
    }
}

impl Inner {
    /// One `tools/call`: the lifecycle of SPEC §6, its Confirms answered by the client.
    async fn call(&self, name: &str, input: Value, peer: &Peer<RoleServer>) -> ToolResult {
        let approver = Arc::new(Approver {
            peer: peer.clone(),
            timeout: self.approval_timeout,
        });
        let cx = InvocationContext::new(InvocationState::new());
        // Fresh per call: interrupt ids and answers are bound to it, so no answer outlives it.
        let tool_use_id = format!("mcp_{}", cx.invocation_id);
        if let Some(size) = oversized(&input, self.max_input_bytes) {
            return ToolResult::error(
                &tool_use_id,
                format!(
                    "Error: the arguments ({size} bytes or more) exceed the limit of {} bytes",
                    self.max_input_bytes
                ),
            );
        }
        let mut answers = HashMap::new();
        let mut rounds = 0;
        let mut retries = 0;
        let mut current = ToolUse::new(&tool_use_id, name, input);
        let mut held: Option<ToolResult> = None;
        loop {
            let (tool_use, selected, result) = match held.take() {
                Some(result) => {
                    let selected = self.tools.get(&current.name).map(|e| e.handle.clone());
                    (current, selected, result)
                }
                None => {
                    let selected = self.tools.get(&current.name).map(|e| e.handle.clone());
                    let mut ev = BeforeToolCallEvent::new(cx.clone(), current)
                        .with_selected_tool(selected)
                        .with_answers(InterruptAnswers::new(answers.clone()));
                    if self.hooks.has::<BeforeToolCallEvent>() {
                        let dispatched = self.hooks.dispatch(&mut ev).await;
                        self.audit(ev.take_decisions());
                        if let Err(e) = dispatched {
                            return ToolResult::error(&tool_use_id, format!("Error: {e}"));
                        }
                    }
                    let verdict = ev.into_verdict();
                    match verdict.action {
                        ToolCallAction::Interrupt(interrupts) => {
                            current = verdict.tool_use;
                            if let Err(text) = self
                                .ask_all(&approver, &interrupts, &mut answers, &mut rounds)
                                .await
                            {
                                return ToolResult::error(&tool_use_id, text);
                            }
                            continue;
                        }
                        ToolCallAction::Cancel(text) => {
                            let result = ToolResult::error(&tool_use_id, text);
                            (verdict.tool_use, verdict.tool, result)
                        }
                        ToolCallAction::Run => {
                            let result = match &verdict.tool {
                                Some(tool) => {
                                    self.run_tool(tool, &verdict.tool_use, &cx, &answers, &approver)
                                        .await
                                }
                                None => ToolResult::error(
                                    &tool_use_id,
                                    format!("Unknown tool: {}", verdict.tool_use.name),
                                ),
                            };
                            (verdict.tool_use, verdict.tool, result)
                        }
                    }
                }
            };
            if !self.hooks.has::<AfterToolCallEvent>() {
                return result;
            }
            let mut ev = AfterToolCallEvent::new(cx.clone(), tool_use, result)
                .with_selected_tool(selected)
                .with_answers(InterruptAnswers::new(answers.clone()));
            let dispatched = self.hooks.dispatch(&mut ev).await;
            self.audit(ev.take_decisions());
            if let Err(e) = dispatched {
                return ToolResult::error(&tool_use_id, format!("Error: {e}"));
            }
            match ev.into_verdict() {
                ToolResultVerdict::Keep { result, .. } => return result,
                ToolResultVerdict::Hold {
                    tool_use,
                    result,
                    interrupts,
                } => {
                    if let Err(text) = self
                        .ask_all(&approver, &interrupts, &mut answers, &mut rounds)
                        .await
                    {
                        return ToolResult::error(&tool_use_id, text);
                    }
                    // The held result goes through AfterToolCall again with the answers; the
                    // tool does not run again.
                    current = tool_use;
                    held = Some(result);
                }
                ToolResultVerdict::Retry { tool_use } => {
                    retries += 1;
                    if retries > MAX_RETRIES {
                        return ToolResult::error(
                            &tool_use_id,
                            format!("Error: retry limit ({MAX_RETRIES}) reached"),
                        );
                    }
                    current = tool_use;
                }
            }
        }
    }

    /// Validates the input and runs the tool under the call timeout; a panic is an error
    /// result, not a dead server.
    async fn run_tool(
        &self,
        tool: &ToolHandle,
        tool_use: &ToolUse,
        cx: &InvocationContext,
        answers: &HashMap<String, InterruptAnswer>,
        approver: &Arc<Approver>,
    ) -> ToolResult {
        let id = &tool_use.tool_use_id;
        // A tool an intervention swapped in is validated against its own schema.
        let owned;
        let validator = match self.tools.get(tool.name()) {
            Some(e) if e.handle == *tool => &*e.validator,
            _ => match jsonschema::validator_for(&tool.spec().input_schema) {
                Ok(v) => {
                    owned = v;
                    &owned
                }
                Err(e) => {
                    return ToolResult::error(
                        id,
                        format!("Error: the tool's input schema is invalid: {e}"),
                    );
                }
            },
        };
        if let Err(e) = validator.validate(&tool_use.input) {
            return ToolResult::error(id, format!("Error: invalid input: {e}"));
        }
        let tcx = ToolContext::new(
            id,
            &tool_use.name,
            cx.invocation_id,
            cx.invocation_state.clone(),
            cx.agent_state.clone(),
            InterruptAnswers::new(answers.clone()),
        )
        .with_extension(approver.clone());
        let (handle, input, raised) = (tool.clone(), tool_use.input.clone(), tcx.clone());
        let task = tokio::spawn(async move { handle.call(input, tcx).await });
        let abort = task.abort_handle();
        let ran = match tokio::time::timeout(self.call_timeout, task).await {
            Ok(joined) => joined,
            Err(_) => {
                abort.abort();
                return ToolResult::error(
                    id,
                    format!(
                        "Error: tool '{}' timed out after {:?}",
                        tool_use.name, self.call_timeout
                    ),
                );
            }
        };
        if !raised.raised_interrupts().is_empty() {
            // A tool's own question takes any JSON, which a yes/no form cannot carry.
            return ToolResult::error(
                id,
                format!(
                    "Error: tool '{}' asked for input, which this MCP server cannot relay",
                    tool_use.name
                ),
            );
        }
        match ran {
            Ok(Ok(out)) => ToolResult {
                tool_use_id: id.clone(),
                status: out.status,
                content: out.content,
            },
            Ok(Err(e)) => ToolResult::error(id, format!("Error: {e}")),
            Err(_) => {
                tracing::error!(tool = %tool_use.name, "served tool panicked");
                ToolResult::error(id, format!("Error: tool '{}' failed", tool_use.name))
            }
        }
    }

    /// Asks the client about each interrupt; records the answers. `Err` is the text of the
    /// error result that refuses the call.
    async fn ask_all(
        &self,
        approver: &Approver,
        interrupts: &[Interrupt],
        answers: &mut HashMap<String, InterruptAnswer>,
        rounds: &mut usize,
    ) -> Result<(), String> {
        for interrupt in interrupts {
            *rounds += 1;
            if *rounds > MAX_APPROVAL_ROUNDS {
                return Err(format!(
                    "Error: the call asked for more than {MAX_APPROVAL_ROUNDS} approvals"
                ));
            }
            let approved = match approver.ask(interrupt).await {
                Ok(approved) => approved,
                Err(no) => return Err(format!("Error: {}", no.refusal(interrupt))),
            };
            let answer = InterruptAnswer {
                response: json!({ "approved": approved }),
                fingerprint: interrupt.fingerprint.clone(),
            };
            answers.insert(interrupt.id.clone(), answer);
        }
        Ok(())
    }

    fn audit(&self, decisions: Vec<DecisionRecord>) {
        for d in &decisions {
            tracing::info!(
                target: "rein_mcp::audit",
                handler = %d.handler,
                event = ?d.event,
                action = ?d.action,
                outcome = ?d.outcome,
                tool_use_id = d.tool_use_id.as_deref().unwrap_or(""),
                "intervention decision"
            );
            if let Some(f) = &self.on_decision {
                f(d);
            }
        }
    }
}

/// The size of `input` as JSON when it is over `limit` (counted without building the bytes,
/// and only up to the limit).
fn oversized(input: &Value, limit: usize) -> Option<usize> {
    struct Counter {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter { n: 0, limit };
    serde_json::to_writer(&mut c, input).err().map(|_| c.n)
}

/// A Rein tool result as MCP content: text, JSON (as text), images; a document by name. For a
/// tool with an output schema, its first JSON content is also the `structuredContent`.
fn to_mcp(result: ToolResult, structured: bool) -> CallToolResult {
    let structured_content = structured
        .then(|| {
            result.content.iter().find_map(|c| match c {
                ToolResultContent::Json(v) => Some(v.clone()),
                _ => None,
            })
        })
        .flatten();
    let content = result
        .content
        .into_iter()
        .map(|c| match c {
            ToolResultContent::Text(t) => ContentBlock::text(t),
            ToolResultContent::Json(v) => ContentBlock::text(v.to_string()),
            ToolResultContent::Image(ImageBlock {
                format,
                source: MediaSource::Bytes(bytes),
            }) => {
                use base64::Engine as _;
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes.0);
                ContentBlock::image(data, format!("image/{format}"))
            }
            ToolResultContent::Document(d) => {
                ContentBlock::text(format!("[document '{}' ({})]", d.name, d.format))
            }
            // Content a later release adds: its JSON form, rather than nothing.
            other => ContentBlock::text(serde_json::to_string(&other).unwrap_or_default()),
        })
        .collect();
    let mut out = match result.status {
        ToolResultStatus::Error => CallToolResult::error(content),
        _ => CallToolResult::success(content),
    };
    if out.is_error != Some(true) {
        out.structured_content = structured_content;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_counts_only_up_to_the_limit() {
        let v = json!({"a": "x".repeat(100)});
        assert_eq!(oversized(&v, 1000), None);
        assert!(oversized(&v, 50).is_some_and(|n| n > 50));
    }
}
