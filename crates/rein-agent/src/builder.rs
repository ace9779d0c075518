//! The builders: [`AgentBuilder`] (an agent's definition and its first conversation) and
//! [`ConversationBuilder`] (another conversation of a built agent).

use std::collections::BTreeMap;
use std::sync::Arc;

use rein_core::request::OutputFormat;
use rein_core::{
    Error, Map, Message, ToolHandle,
    error::BuildError,
    id::MessageId,
    request::{InferenceConfig, ToolChoice},
    state::{AgentState, RunState},
};
use rein_hooks::{HookEvent, HookOrder, HookRegistry, IntoHookResult, Plugin};
use rein_interventions::{InterventionRegistry, SharedHandler};
use rein_models::{Model, SharedModel};

use crate::agent::{Agent, AgentConfig, AgentCore, AgentSettings, Limits, OnRetryLimit, Team};
use crate::cancel::CancelSlot;
use crate::conversation::{Conversation, ConversationManager, Manager, NoConversationManager};
use crate::handoff::{Handoff, TransferTool};
use crate::history::History;
use crate::inject::Injections;
use crate::journal::{Journal, SharedJournal};
use crate::retry::RetryStrategy;
use crate::session::{SessionBinding, SharedBinding};
use crate::structured::{OutputRequest, OutputSettings, OutputSpec, OutputStrategy};
use crate::tokens::Calibration;
use crate::tools::{ToolExecutor, ToolSet};

// Here, not in agent.rs: the agent does not depend on its builders.
impl Agent {
    /// A builder.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::default()
    }

    /// A new conversation with this agent: its definition — name, model, system prompt,
    /// tools, hooks, interventions, configuration, handoffs, journal — shared, not built again;
    /// a conversation of its own — no messages, an empty state, no session, a fresh conversation
    /// manager like the one this agent was built with, its own cancel handle and interceptor.
    /// After a handoff, the new conversation starts with the agent as built, not the one in
    /// control. A server builds its agent once and serves each conversation with one of these.
    ///
    /// ```
    /// use rein_agent::Agent;
    /// use rein_models::ScriptedModel;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_agent::Error> {
    /// let support = Agent::builder()
    ///     .name("support")
    ///     .model(ScriptedModel::repeating_text("Hello!"))
    ///     .build()?;
    /// let mut alice = support.new_conversation().build();
    /// let mut bob = support.new_conversation().build();
    /// alice.invoke("Hi, I'm Alice").await?;
    /// bob.invoke("Hi, I'm Bob").await?;
    /// assert_eq!((alice.messages().len(), bob.messages().len()), (2, 2));
    /// assert!(support.messages().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn new_conversation(&self) -> ConversationBuilder {
        let core = self.team.as_ref().map_or(&self.core, |t| &t.root).clone();
        ConversationBuilder {
            manager: core
                .settings
                .manager
                .as_deref()
                .cloned()
                .unwrap_or_default(),
            core,
            team: self.team.clone(),
            messages: Vec::new(),
            state: Map::new(),
            session: None,
        }
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    /// Shared with every agent of the default name (no allocation for it).
    name: Arc<str>,
    model: Option<SharedModel>,
    system_prompt: Option<Arc<str>>,
    tools: Vec<ToolHandle>,
    tool_sources: Vec<Arc<dyn rein_core::tool::ToolSource>>,
    hooks: HookRegistry,
    plugin_error: Option<Error>,
    manager: Manager,
    config: AgentConfig,
    messages: Vec<Message>,
    state: Map,
    session: Option<SharedBinding>,
    interventions: Vec<SharedHandler>,
    audit_timing: bool,
    handoffs: Vec<Handoff>,
    journal: Option<SharedJournal>,
    output: Option<OutputSettings>,
}

/// The name of an agent not given one.
static DEFAULT_NAME: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| "agent".into());

impl Default for AgentBuilder {
    fn default() -> Self {
        Self {
            name: DEFAULT_NAME.clone(),
            model: None,
            system_prompt: None,
            tools: Vec::new(),
            tool_sources: Vec::new(),
            hooks: HookRegistry::new(),
            plugin_error: None,
            manager: Manager::default(),
            config: AgentConfig::default(),
            messages: Vec::new(),
            state: Map::new(),
            session: None,
            interventions: Vec::new(),
            audit_timing: false,
            handoffs: Vec::new(),
            journal: None,
            output: None,
        }
    }
}

impl AgentBuilder {
    /// The agent's name (default `agent`), reported in telemetry.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into().into();
        self
    }

    /// The model (required).
    pub fn model(mut self, model: impl Model) -> Self {
        self.model = Some(SharedModel::new(model));
        self
    }

    /// The model, already shared.
    pub fn shared_model(mut self, model: SharedModel) -> Self {
        self.model = Some(model);
        self
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<Arc<str>>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Adds a tool (a `ToolHandle`, or a `#[tool]` struct).
    pub fn tool(mut self, tool: impl Into<ToolHandle>) -> Self {
        self.tools.push(tool.into());
        self
    }

    /// Adds tools.
    pub fn tools<I>(mut self, tools: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<ToolHandle>,
    {
        self.tools.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Adds tools whose list may change while the agent lives (an MCP server's:
    /// `rein_mcp::McpClient::tool_source`). Before each model call whose source announced a
    /// change, the agent lists its tools again: the model is offered the current list, a tool
    /// the source dropped is unknown (`Unknown tool: <name>`), and interventions keyed by
    /// name apply as to any tool. A listed tool named like a tool given to the builder (or to
    /// another source) is left out, so a source never shadows one. The first list is read
    /// before the first model call; `tool_names` and `tool_spec` show the built tools only.
    pub fn tool_source(mut self, source: impl rein_core::tool::ToolSource) -> Self {
        self.tool_sources.push(Arc::new(source));
        self
    }

    /// Adds a sync hook callback at the default order.
    pub fn hook<E, R, F>(mut self, f: F) -> Self
    where
        E: HookEvent,
        R: IntoHookResult,
        F: Fn(&mut E) -> R + Send + Sync + 'static,
    {
        self.hooks.add(f);
        self
    }

    /// Adds a sync hook callback with an order.
    pub fn hook_with<E, R, F>(mut self, order: HookOrder, f: F) -> Self
    where
        E: HookEvent,
        R: IntoHookResult,
        F: Fn(&mut E) -> R + Send + Sync + 'static,
    {
        self.hooks.add_with(order, f);
        self
    }

    /// Adds an async hook callback at the default order (a closure returning
    /// `Box::pin(async move { ... })`).
    pub fn hook_async<E, R, F>(mut self, f: F) -> Self
    where
        E: HookEvent,
        R: IntoHookResult + 'static,
        F: for<'a> Fn(&'a mut E) -> rein_core::tool::BoxFuture<'a, R> + Send + Sync + 'static,
    {
        self.hooks.add_async(f);
        self
    }

    /// Adds the callbacks (and plugins) of a registry.
    pub fn hooks(mut self, hooks: HookRegistry) -> Self {
        if let Err(e) = self.hooks.merge(hooks) {
            self.plugin_error.get_or_insert(e);
        }
        self
    }

    /// Adds a plugin (its hooks and tools). A duplicate name fails `build`.
    pub fn plugin(mut self, plugin: impl Plugin) -> Self {
        if let Err(e) = self.hooks.add_plugin(&plugin) {
            self.plugin_error.get_or_insert(e);
        }
        self
    }

    /// Adds an intervention handler. Handlers are evaluated in the order they are added; a
    /// duplicate name fails `build`.
    pub fn intervention(mut self, handler: impl Into<SharedHandler>) -> Self {
        self.interventions.push(handler.into());
        self
    }

    /// Adds intervention handlers, in order.
    pub fn interventions<I>(mut self, handlers: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<SharedHandler>,
    {
        self.interventions
            .extend(handlers.into_iter().map(Into::into));
        self
    }

    /// Records each intervention handler's duration in the decision audit.
    pub fn audit_timing(mut self, on: bool) -> Self {
        self.audit_timing = on;
        self
    }

    /// The conversation manager (default: a sliding window of 40 messages).
    pub fn conversation_manager(
        mut self,
        manager: impl ConversationManager + Clone + 'static,
    ) -> Self {
        self.manager = Manager::Boxed(Box::new(manager));
        self
    }

    /// Keeps the whole history.
    pub fn no_conversation_manager(self) -> Self {
        self.conversation_manager(NoConversationManager)
    }

    /// Limits (turns, tokens) per invocation.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config.limits = limits;
        self
    }

    /// At most `n` model calls per invocation.
    pub fn max_turns(mut self, n: u32) -> Self {
        self.config.limits.max_turns = Some(n);
        self
    }

    /// At most `n` total tokens per invocation.
    pub fn max_total_tokens(mut self, n: u64) -> Self {
        self.config.limits.max_total_tokens = Some(n);
        self
    }

    /// At most `n` output tokens per invocation.
    pub fn max_output_tokens(mut self, n: u64) -> Self {
        self.config.limits.max_output_tokens = Some(n);
        self
    }

    /// How tool uses are run (default: concurrent, 16 at a time).
    pub fn tool_executor(mut self, executor: ToolExecutor) -> Self {
        self.config.executor = executor;
        self
    }

    /// Bound on hook-driven retries of one model call or tool call (default 3).
    pub fn max_hook_retries(mut self, n: u32) -> Self {
        self.config.max_hook_retries = n;
        self
    }

    /// What happens when guidance at AfterModelCall asks for one retry more than
    /// [`max_hook_retries`](Self::max_hook_retries) allows: a hard deny (the default) or a
    /// human asked to accept the response ([`OnRetryLimit::Confirm`]).
    pub fn on_retry_limit(mut self, action: OnRetryLimit) -> Self {
        self.config.on_retry_limit = action;
        self
    }

    /// The model retry strategy.
    pub fn retry_strategy(mut self, strategy: RetryStrategy) -> Self {
        self.config.retry = strategy;
        self
    }

    /// Holds streamed deltas back until the AfterModelCall verdict, so callers never show text
    /// that is then withheld.
    pub fn hold_deltas_until_verdict(mut self, hold: bool) -> Self {
        self.config.hold_deltas = hold;
        self
    }

    /// How many characters of streamed text the stream guard keeps back after each pass
    /// (default [`DEFAULT_STREAM_HOLD_BACK`](crate::DEFAULT_STREAM_HOLD_BACK); 0 releases
    /// everything a pass lets through). Only used when a handler subscribes to `model_output`
    /// (or a hook to `ModelOutputEvent`): a match of up to `chars + 1` characters split across
    /// deltas is then caught whole before any of it reaches the caller (SPEC §3.9). Costs the
    /// caller that much latency on text.
    pub fn stream_hold_back(mut self, chars: usize) -> Self {
        self.config.hold_back = chars;
        self
    }

    /// Sampling settings sent with every model call.
    pub fn inference_config(mut self, config: InferenceConfig) -> Self {
        self.config.inference = config;
        self
    }

    /// Tool choice sent with every model call.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.config.tool_choice = choice;
        self
    }

    /// Starting conversation.
    pub fn messages(mut self, messages: Vec<Message>) -> Self {
        self.messages = messages;
        self
    }

    /// Starting agent state.
    pub fn state(mut self, state: Map) -> Self {
        self.state = state;
        self
    }

    /// An agent this one may hand the conversation to (SPEC §9.2): the model gets a tool
    /// `transfer_to_<name>`; when it calls it (and no intervention denies the call), the run
    /// goes on from the next turn boundary with that agent's model, system prompt, tools, hooks
    /// and interventions over the same history. The target's own handoffs come with it. Its
    /// history and session are not used: the conversation and the session are this agent's.
    /// An invocation runs under the limits (turns, tokens, retries, handoffs) of the agent in
    /// control when it starts.
    /// Takes an [`Agent`], or a [`Handoff`] with a description and an input filter.
    pub fn handoff(mut self, handoff: impl Into<Handoff>) -> Self {
        self.handoffs.push(handoff.into());
        self
    }

    /// Handoffs per invocation (default 5); a transfer past it is the error result
    /// `Error: handoff limit (<n>) reached`.
    pub fn max_handoffs(mut self, n: u32) -> Self {
        self.config.max_handoffs = n;
        self
    }

    /// Persists the agent to a session (SPEC §8), e.g. `rein_sessions::SessionManager`: the
    /// session is restored before the first invocation (or by
    /// [`Agent::load_session`]), and every change is written as it happens.
    pub fn session(mut self, session: impl SessionBinding) -> Self {
        self.session = Some(std::sync::Arc::new(session));
        self
    }

    /// Records the run's model and tool calls in a durable execution engine's journal (see
    /// [`journal`](crate::journal)): a replay of the run is fed the recorded results instead
    /// of calling the model and the tools again. A journaled agent runs its tools one after
    /// another.
    pub fn journal(mut self, journal: impl Journal) -> Self {
        self.journal = Some(SharedJournal::new(journal));
        self
    }

    /// Asks for a typed final answer: JSON that matches `T`'s JSON Schema (schemars) and
    /// deserializes into `T`, read with [`AgentResult::output`](rein_core::result::AgentResult::output)
    /// (SPEC §13). The model may call tools first; only its final answer is checked, and a
    /// failing one is sent back with its errors, at most
    /// [`max_output_retries`](Self::max_output_retries) times.
    pub fn output<T>(mut self) -> Self
    where
        T: schemars::JsonSchema + serde::de::DeserializeOwned,
    {
        self.output_settings().request = crate::structured::request_for::<T>();
        self
    }

    /// Asks for a typed final answer given as a JSON Schema at run time (`name`:
    /// `[a-zA-Z0-9_-]`, at most 64): as [`output`](Self::output), without the type check.
    pub fn output_schema(mut self, name: impl Into<String>, schema: serde_json::Value) -> Self {
        self.output_settings().request = OutputRequest {
            format: OutputFormat::new(name, schema),
            type_check: None,
        };
        self
    }

    /// How the model is asked for the typed answer (default: per provider, see
    /// docs/providers.md).
    pub fn output_strategy(mut self, strategy: OutputStrategy) -> Self {
        self.output_settings().strategy = Some(strategy);
        self
    }

    /// How many times a refused typed answer is sent back (default
    /// [`DEFAULT_MAX_OUTPUT_RETRIES`](crate::DEFAULT_MAX_OUTPUT_RETRIES)); guidance a handler
    /// gives on the answer counts too. After the last, the run fails with
    /// `OutputError::Exhausted`.
    pub fn max_output_retries(mut self, n: u32) -> Self {
        self.output_settings().max_retries = n;
        self
    }

    /// The largest typed answer checked, in bytes (default
    /// [`DEFAULT_MAX_OUTPUT_BYTES`](crate::DEFAULT_MAX_OUTPUT_BYTES)); a larger one is refused.
    pub fn max_output_bytes(mut self, n: usize) -> Self {
        self.output_settings().max_bytes = n;
        self
    }

    fn output_settings(&mut self) -> &mut OutputSettings {
        self.output.get_or_insert_with(|| OutputSettings {
            request: OutputRequest {
                format: OutputFormat::new("output", serde_json::json!({})),
                type_check: None,
            },
            strategy: None,
            max_retries: crate::structured::DEFAULT_MAX_OUTPUT_RETRIES,
            max_bytes: crate::structured::DEFAULT_MAX_OUTPUT_BYTES,
        })
    }

    /// Builds the agent: fails on a missing model, duplicate tool, plugin or intervention handler
    /// names, or a tool input schema that does not compile.
    pub fn build(mut self) -> Result<Agent, Error> {
        if let Some(e) = self.plugin_error {
            return Err(e);
        }
        let interventions = if self.interventions.is_empty() {
            None
        } else {
            let registry = InterventionRegistry::builder()
                .handlers(std::mem::take(&mut self.interventions))
                .audit_timing(self.audit_timing || crate::telemetry::exporting())
                .build()?;
            registry.install(&mut self.hooks);
            Some(registry)
        };
        let model = self.model.ok_or(BuildError::MissingModel)?;
        let mut tools = self.tools;
        tools.extend(self.hooks.plugin_tools().iter().cloned());
        let mut team = BTreeMap::new();
        for handoff in &self.handoffs {
            let target = &handoff.agent;
            let name = target.core.name.clone();
            tools.push(ToolHandle::new(TransferTool::new(
                name.clone(),
                handoff.description.as_deref(),
                handoff.input_filter.clone(),
            )));
            let reachable = target.team.iter().flat_map(|t| t.members.iter());
            let reachable = reachable.map(|(n, c)| (n.clone(), c.clone()));
            for (n, core) in reachable.chain([(name, target.core.clone())]) {
                // The same agent reached twice is one agent; two agents with one name are not.
                if let Some(other) = team.insert(n.clone(), core.clone())
                    && !Arc::ptr_eq(&other, &core)
                {
                    return Err(BuildError::DuplicateAgent(n.to_string()).into());
                }
            }
        }
        let tools = ToolSet::new(tools, self.tool_sources)?;
        let output = match self.output {
            Some(settings) => Some(Box::new(OutputSpec::build(
                settings,
                &model.info().provider,
                self.system_prompt.as_deref(),
                &tools.specs(),
            )?)),
            None => None,
        };
        let manager = (!self.manager.is_default()).then(|| Box::new(self.manager.clone()));
        let settings = AgentSettings {
            hooks: self.hooks,
            interventions,
            config: self.config,
            journal: self.journal,
            manager,
        };
        let core = Arc::new(AgentCore::new(
            self.name,
            model,
            self.system_prompt,
            tools,
            output,
            settings,
        ));
        if !team.is_empty() && team.insert(core.name.clone(), core.clone()).is_some() {
            return Err(BuildError::DuplicateAgent(core.name.to_string()).into());
        }
        let team = (!team.is_empty()).then(|| {
            Arc::new(Team {
                members: team,
                root: core.clone(),
            })
        });
        Ok(ConversationBuilder {
            core,
            team,
            messages: self.messages,
            state: self.state,
            manager: self.manager,
            session: self.session,
        }
        .build())
    }
}

/// A new conversation with a built agent, made by [`Agent::new_conversation`]: what the
/// conversation starts with.
#[must_use]
pub struct ConversationBuilder {
    core: Arc<AgentCore>,
    team: Option<Arc<Team>>,
    messages: Vec<Message>,
    state: Map,
    manager: Manager,
    session: Option<SharedBinding>,
}

impl std::fmt::Debug for ConversationBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversationBuilder")
            .field("agent", &self.core.name)
            .field("messages", &self.messages.len())
            .field("session", &self.session.is_some())
            .finish_non_exhaustive()
    }
}

impl ConversationBuilder {
    /// Starting conversation.
    pub fn messages(mut self, messages: Vec<Message>) -> Self {
        self.messages = messages;
        self
    }

    /// Starting agent state.
    pub fn state(mut self, state: Map) -> Self {
        self.state = state;
        self
    }

    /// The conversation manager (default: a copy of the agent's, as it was built).
    pub fn conversation_manager(
        mut self,
        manager: impl ConversationManager + Clone + 'static,
    ) -> Self {
        self.manager = Manager::Boxed(Box::new(manager));
        self
    }

    /// Persists the conversation to a session (SPEC §8), as
    /// [`AgentBuilder::session`] does.
    pub fn session(mut self, session: impl SessionBinding) -> Self {
        self.session = Some(Arc::new(session));
        self
    }

    /// The agent, holding the new conversation.
    pub fn build(self) -> Agent {
        let ids = self.messages.iter().map(|_| MessageId::new()).collect();
        let state = AgentState::new();
        let tokens = Calibration::default();
        if !self.state.is_empty() {
            let mut map = self.state;
            tokens.take_from(&mut map);
            state.replace(map);
        }
        Agent {
            core: self.core,
            history: History::new(Conversation::from_parts(self.messages, ids), self.session),
            state,
            run_state: RunState::new(),
            pending: None,
            manager: self.manager,
            tokens,
            cancel: CancelSlot::default(),
            interceptor: Injections::default(),
            team: self.team,
        }
    }
}
