//! The [`Agent`], its builder, and invocation input.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use rein_core::{
    ContentBlock, Error, Map, Message, Role, ToolHandle,
    error::BuildError,
    id::MessageId,
    message::InterruptResponse,
    request::{InferenceConfig, ToolChoice},
    result::AgentResult,
    state::{AgentState, InvocationState, RunState},
};
use rein_hooks::{HookEvent, HookOrder, HookRegistry, IntoHookResult, Plugin};
use rein_interventions::{InterventionRegistry, SharedHandler};
use rein_models::{Model, ModelInfo, SharedModel};

use crate::cancel::{Cancel, CancelHandle};
use crate::checkpoint::{Pause, PausedRun, QueuedInjection};
use crate::conversation::{
    Conversation, ConversationManager, HistoryEdit, Manager, NoConversationManager,
};
use crate::handoff::{ACTIVE_AGENT_KEY, Handoff, Team, TransferTool};
use crate::history::{History, TOOL_INTERRUPTED, closing_results};
use crate::inject::{Injections, TurnInterceptor};
use crate::journal::{Journal, SharedJournal};
use crate::retry::RetryStrategy;
use crate::session::{SessionBinding, SharedBinding};
use crate::stream::{AgentStream, Sink};
use crate::tools::{ToolExecutor, ToolSet};

/// The default hold-back window of a stream guard, in characters
/// ([`AgentBuilder::stream_hold_back`]).
pub const DEFAULT_STREAM_HOLD_BACK: usize = 64;

/// The default result message of a cancelled invocation.
pub const CANCELLED_BY_USER: &str = "Cancelled by user";

/// Limits checked before every model call, retries included. `None` = no limit (the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Model calls per invocation.
    pub max_turns: Option<u32>,
    /// Total tokens per invocation.
    pub max_total_tokens: Option<u64>,
    /// Output tokens per invocation.
    pub max_output_tokens: Option<u64>,
}

/// What happens when a hook asks to retry a model call once more than `max_hook_retries`
/// allows (guidance that did not take).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnRetryLimit {
    /// The response is withheld with `DENIED: retry limit (<n>) reached` (the default).
    #[default]
    Deny,
    /// A human is asked: the response is held with an interrupt named `rein:retry-limit`
    /// (SPEC §3.8); approved, it is accepted as it is; rejected, withheld with
    /// `CONFIRMATION_FAILED: <prompt>`.
    Confirm,
}

#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    pub(crate) max_hook_retries: u32,
    pub(crate) on_retry_limit: OnRetryLimit,
    pub(crate) limits: Limits,
    pub(crate) executor: ToolExecutor,
    pub(crate) retry: RetryStrategy,
    pub(crate) hold_deltas: bool,
    /// Characters of streamed text a stream guard keeps back (SPEC §3.9).
    pub(crate) hold_back: usize,
    /// Handoffs per invocation (SPEC §9.2).
    pub(crate) max_handoffs: u32,
    pub(crate) inference: InferenceConfig,
    pub(crate) tool_choice: ToolChoice,
}

/// What does not change between invocations.
pub(crate) struct AgentCore {
    pub(crate) name: Arc<str>,
    pub(crate) model: SharedModel,
    /// The model's provider, id and server (for telemetry and a journal), asked of the model
    /// when first needed: asking allocates, and most agents never need it.
    model_info: OnceLock<ModelInfo>,
    pub(crate) system_prompt: Option<Arc<str>>,
    pub(crate) tools: ToolSet,
    pub(crate) hooks: HookRegistry,
    /// The intervention handlers (also installed into `hooks`): they alone check a message
    /// injected mid-run.
    pub(crate) interventions: Option<InterventionRegistry>,
    pub(crate) config: AgentConfig,
    /// Where the run's model and tool calls are recorded (a durable engine), if anywhere.
    pub(crate) journal: Option<SharedJournal>,
    /// The conversation manager a new conversation of this agent gets a copy of, as built
    /// (`None`: the default).
    pub(crate) manager: Option<Box<Manager>>,
}

impl AgentCore {
    /// What the model says about itself (asked once, when first needed).
    pub(crate) fn model_info(&self) -> &ModelInfo {
        self.model_info.get_or_init(|| self.model.info())
    }
}

/// The input of one invocation: new messages, or interrupt responses (a resume), with the
/// caller's invocation state.
///
/// ```
/// use rein_agent::Input;
/// use serde_json::json;
/// let input = Input::from("What is 2 + 2?").with_state(json!({"role": "analyst"}));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub(crate) messages: Vec<Message>,
    pub(crate) responses: Vec<InterruptResponse>,
    pub(crate) state: Option<InvocationState>,
    /// The journal of the run this invocation is a step of (an agent running as a tool).
    pub(crate) journal: Option<SharedJournal>,
}

impl Input {
    pub(crate) fn journaled_by(mut self, journal: SharedJournal) -> Self {
        self.journal = Some(journal);
        self
    }

    /// A text prompt.
    pub fn text(text: impl Into<String>) -> Self {
        Self::messages(vec![Message::user(text)])
    }

    /// Messages to add.
    pub fn messages(messages: Vec<Message>) -> Self {
        // A user message made only of interrupt responses is a resume.
        let is_resume = !messages.is_empty()
            && messages.iter().all(|m| {
                m.role == Role::User
                    && !m.content.is_empty()
                    && m.content
                        .iter()
                        .all(|b| matches!(b, ContentBlock::InterruptResponse(_)))
            });
        if is_resume {
            let responses = messages
                .into_iter()
                .flat_map(|m| m.content)
                .filter_map(|b| match b {
                    ContentBlock::InterruptResponse(r) => Some(*r),
                    _ => None,
                })
                .collect();
            return Self::resume(responses);
        }
        Self {
            messages,
            ..Self::default()
        }
    }

    /// Answers to pending interrupts.
    pub fn resume(responses: Vec<InterruptResponse>) -> Self {
        Self {
            responses,
            ..Self::default()
        }
    }

    /// The caller's invocation state (a JSON object).
    pub fn with_state(mut self, state: impl Into<InvocationState>) -> Self {
        self.state = Some(state.into());
        self
    }

    pub(crate) fn is_resume(&self) -> bool {
        !self.responses.is_empty()
    }
}

impl From<&str> for Input {
    fn from(s: &str) -> Self {
        Self::text(s)
    }
}

impl From<String> for Input {
    fn from(s: String) -> Self {
        Self::text(s)
    }
}

impl From<Message> for Input {
    fn from(m: Message) -> Self {
        Self::messages(vec![m])
    }
}

impl From<Vec<Message>> for Input {
    fn from(m: Vec<Message>) -> Self {
        Self::messages(m)
    }
}

impl From<Vec<InterruptResponse>> for Input {
    fn from(r: Vec<InterruptResponse>) -> Self {
        Self::resume(r)
    }
}

/// An LLM agent: a model, tools, hooks and interventions, and a conversation.
///
/// One invocation runs at a time: `invoke` and `stream` take `&mut self`, so the borrow
/// checker enforces it.
///
/// ```
/// use rein_agent::Agent;
/// use rein_models::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_core::Error> {
/// let model = ScriptedModel::builder().text("Hello!").build();
/// let mut agent = Agent::builder().model(model).system_prompt("Be brief.").build()?;
/// let result = agent.invoke("Hi").await?;
/// assert_eq!(result.text(), "Hello!");
/// assert_eq!(agent.messages().len(), 2);
/// # Ok(()) }
/// ```
pub struct Agent {
    /// Shared, never changed after build: keeps `Agent` small to move (into a spawned task,
    /// say) and its clone cheap.
    pub(crate) core: Arc<AgentCore>,
    /// The conversation and its session (the message path).
    pub(crate) history: History,
    pub(crate) state: AgentState,
    /// The current run's state: empty between runs, kept (and persisted with `pending`) while
    /// interrupts wait.
    pub(crate) run_state: RunState,
    /// Boxed: rare, and 384 bytes inline would triple every idle agent's size.
    pub(crate) pending: Option<Box<PausedRun>>,
    pub(crate) manager: Manager,
    pub(crate) cancel: Cancel,
    pub(crate) interceptor: Injections,
    /// The agents control can pass to, by name (itself included); `None` without handoffs
    /// (an agent makes no allocation for it then).
    pub(crate) team: Option<Arc<Team>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.core.name)
            .field("model", &self.core.model)
            .field("messages", &self.history.conv().len())
            .field("pending_interrupts", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

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
            manager: core.manager.as_deref().cloned().unwrap_or_default(),
            core,
            team: self.team.clone(),
            messages: Vec::new(),
            state: Map::new(),
            session: None,
        }
    }

    /// Runs one invocation to its end.
    pub async fn invoke(&mut self, input: impl Into<Input>) -> Result<AgentResult, Error> {
        // Not boxed: a 3 KiB allocation per call costs glibc's large-chunk path
        // (malloc_consolidate), ≈2 µs per tool-heavy invocation, more than the smaller spawned
        // task saves (see docs/performance.md).
        self.run(input.into(), Sink::disabled()).await
    }

    /// Runs one invocation as a stream of [`AgentEvent`](crate::AgentEvent)s, driven by the
    /// caller's polling. The last item is `AgentEvent::Finished` (or an error).
    pub fn stream(&mut self, input: impl Into<Input>) -> AgentStream<'_> {
        let input = input.into();
        let hold = self.core.config.hold_deltas;
        AgentStream::new(hold, move |sink| self.run(input, sink))
    }

    /// The stored conversation.
    pub fn messages(&self) -> &[Message] {
        self.history.conv().messages()
    }

    /// The stable ids of the stored messages (same order as [`messages`](Self::messages)).
    pub fn message_ids(&self) -> &[MessageId] {
        self.history.conv().ids()
    }

    /// Replaces the conversation (e.g. restored from a session). Ids are kept when given.
    pub fn set_messages(&mut self, messages: Vec<Message>, ids: Option<Vec<MessageId>>) {
        let ids = match ids {
            Some(ids) if ids.len() == messages.len() => ids,
            _ => messages.iter().map(|_| MessageId::new()).collect(),
        };
        *self.history.conv_mut() = Conversation::from_parts(messages, ids);
    }

    /// Rewinds the conversation to its first `len` messages (and forgets pending interrupts when
    /// their assistant message is cut).
    pub fn truncate_messages(&mut self, len: usize) {
        self.history.conv_mut().truncate(len);
        // (A held input or response is not in history: its pause stays.)
        let cut = |id: &MessageId| !self.history.conv().ids().contains(id);
        let paused_on_cut = self.pending.as_ref().is_some_and(|p| match &p.at {
            Pause::Tools(t) => cut(&t.message_id),
            Pause::Request {
                last_message_id, ..
            } => cut(last_message_id),
            Pause::Input { .. } | Pause::Response(_) => false,
        });
        if paused_on_cut {
            self.set_pending_interrupts(None);
        }
    }

    /// Forgets the conversation (and any pending interrupts).
    pub fn clear_history(&mut self) {
        self.history.conv_mut().clear();
        self.set_pending_interrupts(None);
    }

    /// The agent's key-value state.
    pub fn state(&self) -> &AgentState {
        &self.state
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The names of the agent's tools.
    pub fn tool_names(&self) -> Vec<&str> {
        self.core.tools.names().collect()
    }

    /// Hands the conversation to the agent `name` (one of its handoffs, or the agent it was
    /// built as) between invocations: the next invocation runs with that agent. Errors:
    /// `UnknownAgent`; `InterruptsPending` (resume or discard them first).
    pub fn hand_off(&mut self, name: &str) -> Result<(), Error> {
        if self.pending.is_some() {
            return Err(Error::InterruptsPending);
        }
        let core = self
            .team_member(name)
            .cloned()
            .ok_or_else(|| Error::UnknownAgent(name.to_owned()))?;
        self.core = core;
        self.state.set(ACTIVE_AGENT_KEY, name);
        Ok(())
    }

    /// What is queued or parked for the paused run goes with its pending interrupts (to be
    /// persisted).
    pub(crate) fn keep_injections(&mut self) {
        if let Some(p) = &mut self.pending {
            let Some(i) = self.interceptor.get() else {
                p.queued_injections.clear();
                p.parked_injections.clear();
                return;
            };
            p.queued_injections = i
                .queued()
                .into_iter()
                .map(|(id, message)| QueuedInjection::new(id, message))
                .collect();
            p.parked_injections = i.parked();
        }
    }

    /// The agent in control is the one the agent state names (after a restore).
    pub(crate) fn restore_active_agent(&mut self) {
        let active = self.state.get(ACTIVE_AGENT_KEY);
        if let Some(core) = active
            .as_ref()
            .and_then(|v| v.as_str())
            .and_then(|name| self.team_member(name))
        {
            self.core = core.clone();
        }
    }

    /// The agent of the team named `name`.
    pub(crate) fn team_member(&self, name: &str) -> Option<&Arc<AgentCore>> {
        self.team.as_deref()?.members.get(name)
    }

    /// The run waiting for answers, if one is: its interrupts, where it paused, what a resume
    /// needs.
    pub fn pending_interrupts(&self) -> Option<&PausedRun> {
        self.pending.as_deref()
    }

    /// Restores a paused run (e.g. from a session store), with the run state it carries;
    /// `None` ends the paused run (its run state is cleared).
    pub fn set_pending_interrupts(&mut self, pending: Option<PausedRun>) {
        match &pending {
            Some(p) => {
                self.run_state.replace(p.run_state.clone());
                // The run is paused: an interceptor, if any, accepts messages for it again;
                // one is made only when there is something to restore into it.
                let injected = !p.queued_injections.is_empty() || !p.parked_injections.is_empty();
                if injected || self.interceptor.get().is_some() {
                    let i = self.interceptor.handle(true);
                    let queued = p.queued_injections.iter();
                    i.restore(queued.map(|q| (q.id, q.message.clone())));
                    i.restore_parked(p.parked_injections.iter().cloned());
                }
            }
            None => {
                self.run_state.clear();
                self.end_injections();
            }
        }
        self.pending = pending.map(Box::new);
    }

    /// The paused run ends: what was injected into it and not delivered is rejected.
    fn end_injections(&self) {
        if let Some(i) = self.interceptor.get() {
            for item in i.end() {
                i.rejected(item.id, &item.message, "run ended");
            }
        }
    }

    /// The state of the current run, as hooks and handlers see it
    /// ([`RunState`]): empty between runs, kept while interrupts wait for answers.
    pub fn run_state(&self) -> &RunState {
        &self.run_state
    }

    /// Abandons pending interrupts: their tool uses get the error result `Tool was interrupted.`
    /// (finished tools keep their results). The paused run ends: its run state is cleared.
    pub fn discard_interrupts(&mut self) {
        self.run_state.clear();
        self.end_injections();
        // A held response was never stored: nothing to answer in history.
        if let Some(Pause::Tools(t)) = self.pending.take().map(|p| p.at) {
            let blocks = closing_results(&t.message, &t.completed, TOOL_INTERRUPTED);
            if !blocks.is_empty() {
                self.history.conv_mut().append_user(blocks);
            }
        }
    }

    /// A handle that injects messages into the running invocation (SPEC §5).
    pub fn interceptor(&self) -> TurnInterceptor {
        self.interceptor.handle(self.pending.is_some())
    }

    /// A handle that cancels the running invocation.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.handle()
    }

    /// The conversation manager's state (for sessions).
    pub fn conversation_manager_state(&self) -> serde_json::Value {
        self.manager.state()
    }

    /// Restores the conversation manager's state.
    pub fn restore_conversation_manager_state(&mut self, state: &serde_json::Value) {
        self.manager.restore(state);
    }

    pub(crate) fn apply_conversation_manager(&mut self) {
        let mut edit = HistoryEdit::new(self.history.conv_mut());
        self.manager.apply(&mut edit);
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    /// Shared with every agent of the default name (no allocation for it).
    name: Arc<str>,
    model: Option<SharedModel>,
    system_prompt: Option<Arc<str>>,
    tools: Vec<ToolHandle>,
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
            hooks: HookRegistry::new(),
            plugin_error: None,
            manager: Manager::default(),
            config: AgentConfig {
                max_hook_retries: 3,
                on_retry_limit: OnRetryLimit::Deny,
                limits: Limits::default(),
                executor: ToolExecutor::default(),
                retry: RetryStrategy::default(),
                hold_deltas: false,
                hold_back: DEFAULT_STREAM_HOLD_BACK,
                max_handoffs: 5,
                inference: InferenceConfig::default(),
                tool_choice: ToolChoice::Auto,
            },
            messages: Vec::new(),
            state: Map::new(),
            session: None,
            interventions: Vec::new(),
            audit_timing: false,
            handoffs: Vec::new(),
            journal: None,
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
    /// (default [`DEFAULT_STREAM_HOLD_BACK`]; 0 releases everything a pass lets through). Only
    /// used when a handler subscribes to `model_output` (or a hook to `ModelOutputEvent`): a
    /// match of up to `chars + 1` characters split across deltas is then caught whole before
    /// any of it reaches the caller (SPEC §3.9). Costs the caller that much latency on text.
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
        let tools = ToolSet::new(tools)?;
        let manager = (!self.manager.is_default()).then(|| Box::new(self.manager.clone()));
        let core = Arc::new(AgentCore {
            name: self.name,
            model_info: OnceLock::new(),
            model,
            system_prompt: self.system_prompt,
            tools,
            hooks: self.hooks,
            interventions,
            config: self.config,
            journal: self.journal,
            manager,
        });
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
        if !self.state.is_empty() {
            state.replace(self.state);
        }
        Agent {
            core: self.core,
            history: History::new(Conversation::from_parts(self.messages, ids), self.session),
            state,
            run_state: RunState::new(),
            pending: None,
            manager: self.manager,
            cancel: Cancel::default(),
            interceptor: Injections::default(),
            team: self.team,
        }
    }
}
