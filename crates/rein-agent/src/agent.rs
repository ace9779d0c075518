//! The [`Agent`] (its definition, [`AgentCore`], and its conversation) and invocation input;
//! the builders are in `builder.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use rein_core::{
    ContentBlock, Error, Message, Role,
    id::MessageId,
    message::InterruptResponse,
    request::{InferenceConfig, ModelRequest, ToolChoice},
    result::AgentResult,
    state::{AgentState, InvocationState, RunState},
};
use rein_hooks::HookRegistry;
use rein_interventions::InterventionRegistry;
use rein_models::{ModelInfo, SharedModel};

use crate::cancel::{CancelHandle, CancelSlot};
use crate::checkpoint::{Pause, PausedRun, QueuedInjection};
use crate::conversation::{Conversation, ConversationManager, HistoryEdit, Manager};
use crate::history::{History, TOOL_INTERRUPTED, closing_results};
use crate::inject::{Injections, TurnInterceptor};
use crate::journal::SharedJournal;
use crate::retry::RetryStrategy;
use crate::stream::{AgentStream, Sink};
use crate::tokens::{Calibration, TokenEstimator};
use crate::tools::{ToolExecutor, ToolSet};

/// The default hold-back window of a stream guard, in characters
/// ([`AgentBuilder::stream_hold_back`](crate::AgentBuilder::stream_hold_back)).
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

#[derive(Debug, Clone, PartialEq)]
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

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
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
        }
    }
}

/// What does not change between invocations.
pub(crate) struct AgentCore {
    pub(crate) name: Arc<str>,
    pub(crate) model: SharedModel,
    /// The model's provider, id and server (for telemetry and a journal), asked of the model
    /// when first needed: asking allocates, and most agents never need it (boxed: 8 B in the
    /// core instead of 88 B).
    pub(crate) model_info: OnceLock<Box<ModelInfo>>,
    pub(crate) system_prompt: Option<Arc<str>>,
    pub(crate) tools: ToolSet,
    /// The typed answer asked for, if any (SPEC §13).
    pub(crate) output: Option<Box<crate::structured::OutputSpec>>,
    /// The heuristic token count of the system prompt and tools (SPEC §6.1), counted when
    /// first needed.
    pub(crate) fixed_raw: OnceLock<u64>,
    /// Hooks, handlers, configuration, journal, conversation manager: one value shared by
    /// every agent that leaves them all at their defaults.
    pub(crate) settings: Arc<AgentSettings>,
}

/// The part of an agent's definition most agents leave at the defaults. Held apart from the
/// core so that those agents share one (an agent built per request then allocates, walks and
/// frees ≈500 B less: issue 44).
pub(crate) struct AgentSettings {
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

/// The settings of every agent built with the defaults.
static DEFAULT_SETTINGS: std::sync::LazyLock<Arc<AgentSettings>> = std::sync::LazyLock::new(|| {
    Arc::new(AgentSettings {
        hooks: HookRegistry::new(),
        interventions: None,
        config: AgentConfig::default(),
        journal: None,
        manager: None,
    })
});

impl AgentSettings {
    /// These settings, shared: the one default value when they are the defaults.
    fn shared(self) -> Arc<Self> {
        let default = &*DEFAULT_SETTINGS;
        let is_default = self.hooks.is_empty()
            && self.interventions.is_none()
            && self.journal.is_none()
            && self.manager.is_none()
            && self.config == default.config;
        if is_default {
            default.clone()
        } else {
            Arc::new(self)
        }
    }
}

impl AgentCore {
    /// A core of these parts (the settings shared when they are the defaults).
    pub(crate) fn new(
        name: Arc<str>,
        model: SharedModel,
        system_prompt: Option<Arc<str>>,
        tools: ToolSet,
        output: Option<Box<crate::structured::OutputSpec>>,
        settings: AgentSettings,
    ) -> Self {
        Self {
            name,
            model,
            model_info: OnceLock::new(),
            system_prompt,
            tools,
            output,
            fixed_raw: OnceLock::new(),
            settings: settings.shared(),
        }
    }

    /// What the model says about itself (asked once, when first needed).
    pub(crate) fn model_info(&self) -> &ModelInfo {
        self.model_info.get_or_init(|| Box::new(self.model.info()))
    }

    /// The system prompt and tools a request of this agent carries (a typed answer may state
    /// its schema in the prompt and add its final-answer tool).
    pub(crate) fn request_parts(
        &self,
    ) -> (Option<&Arc<str>>, &Arc<Vec<rein_core::tool::ToolSpec>>) {
        let mut system = self.system_prompt.as_ref();
        let mut tools = self.tools.specs_ref();
        if let Some(spec) = &self.output {
            if let Some(prompt) = &spec.system_prompt {
                system = Some(prompt);
            }
            if let Some(spec_tools) = &spec.tools {
                tools = spec_tools;
            }
        }
        (system, tools)
    }

    /// The heuristic's count of [`request_parts`](Self::request_parts), counted once.
    pub(crate) fn fixed_raw(&self) -> u64 {
        *self.fixed_raw.get_or_init(|| {
            let (system, tools) = self.request_parts();
            crate::tokens::raw_fixed(system.map(|s| &**s), tools)
        })
    }
}

/// The agent-state key naming the agent in control (persisted with the session, so a resume
/// in another process continues with it).
pub(crate) const ACTIVE_AGENT_KEY: &str = "rein:agent";

/// The agents of a team by name: the agent itself and every agent it can hand off to, at any
/// remove.
pub(crate) struct Team {
    pub(crate) members: BTreeMap<Arc<str>, Arc<AgentCore>>,
    /// The agent built with these handoffs (a new conversation starts with it).
    pub(crate) root: Arc<AgentCore>,
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
    pub(crate) messages: InputMessages,
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
        // (Never a resume: a text block answers no interrupt.)
        Self {
            messages: InputMessages::One(Message::user(text)),
            ..Self::default()
        }
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
            messages: InputMessages::Many(messages),
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

/// The messages of an input. A prompt's one message is kept as it is: a vector for it would be
/// one more allocation per invocation, freed as soon as the message is stored.
#[derive(Debug, Clone)]
pub(crate) enum InputMessages {
    One(Message),
    Many(Vec<Message>),
}

impl Default for InputMessages {
    fn default() -> Self {
        Self::Many(Vec::new())
    }
}

impl InputMessages {
    /// As a vector (what events and a paused input hold).
    pub(crate) fn into_vec(self) -> Vec<Message> {
        match self {
            Self::One(message) => vec![message],
            Self::Many(messages) => messages,
        }
    }
}

impl IntoIterator for InputMessages {
    type Item = Message;
    type IntoIter = std::iter::Chain<std::option::IntoIter<Message>, std::vec::IntoIter<Message>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Self::One(message) => (Some(message), Vec::new()),
            Self::Many(messages) => (None, messages),
        };
        one.into_iter().chain(many)
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
    /// Boxed (layout rule 1): 384 B inline would triple an idle agent's size.
    pub(crate) pending: Option<Box<PausedRun>>,
    pub(crate) manager: Manager,
    /// The conversation's token calibration (SPEC §6.1), saved with the agent state.
    pub(crate) tokens: Calibration,
    pub(crate) cancel: CancelSlot,
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
    /// Runs one invocation to its end.
    pub async fn invoke(&mut self, input: impl Into<Input>) -> Result<AgentResult, Error> {
        // Not boxed: layout rule 2 (a 3 KiB box costs more than the smaller task saves).
        self.run(input.into(), Sink::disabled()).await
    }

    /// Runs one invocation as a stream of [`AgentEvent`](crate::AgentEvent)s, driven by the
    /// caller's polling. The last item is `AgentEvent::Finished` (or an error).
    pub fn stream(&mut self, input: impl Into<Input>) -> AgentStream<'_> {
        let input = input.into();
        let hold = self.core.settings.config.hold_deltas;
        let partial = self
            .core
            .output
            .as_deref()
            .map(crate::structured::PartialOutput::new);
        AgentStream::new(hold, partial, move |sink| self.run(input, sink))
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

    /// The spec of the tool `name` (its description and input schema), if the agent has it:
    /// what a UI builds an edit form from.
    pub fn tool_spec(&self, name: &str) -> Option<&rein_core::tool::ToolSpec> {
        self.core
            .tools
            .get_built(name)
            .map(rein_core::ToolHandle::spec)
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
        let (tokens, fixed) = self.token_parts();
        let mut edit = HistoryEdit::new(self.history.conv_mut()).with_tokens(tokens, fixed);
        self.manager.apply(&mut edit);
    }

    /// The conversation's token estimator, calibrated from the provider's reported usage
    /// (SPEC §6.1); saved and restored with sessions and checkpoints.
    pub fn token_estimator(&self) -> TokenEstimator {
        self.tokens.get()
    }

    /// The estimator and the heuristic count of the system prompt and tools, for a
    /// [`HistoryEdit`].
    pub(crate) fn token_parts(&self) -> (TokenEstimator, u64) {
        (self.tokens.get(), self.core.fixed_raw())
    }

    /// The heuristic's count of a request about to be sent: what the agent built is counted
    /// from what it remembers (the messages counted so far, the system prompt and tools once
    /// per agent); a request a handler changed is counted whole.
    pub(crate) fn raw_request(&mut self, request: &ModelRequest) -> u64 {
        let (system, tools) = self.core.request_parts();
        let fixed = if request.system_prompt.as_ref().map(Arc::as_ptr) == system.map(Arc::as_ptr)
            && Arc::ptr_eq(&request.tools, tools)
        {
            self.core.fixed_raw()
        } else {
            crate::tokens::raw_fixed(request.system_prompt.as_deref(), &request.tools)
        };
        let conv = self.history.conv_mut();
        let messages = if conv.shares(&request.messages) {
            conv.raw_tokens()
        } else {
            request
                .messages
                .iter()
                .map(crate::tokens::raw_message)
                .sum()
        };
        fixed.saturating_add(messages)
    }
}

#[cfg(test)]
mod tests {
    use rein_core::event::BeforeInvocationEvent;
    use rein_models::ScriptedModel;

    use super::{Agent, Arc, DEFAULT_SETTINGS};

    /// Agents that leave hooks, handlers, configuration, journal and conversation manager at
    /// the defaults hold no settings of their own (issue 44: an agent built per request then
    /// allocates and frees none of it); changing any one gives the agent its own, as built.
    #[test]
    fn only_agents_of_the_default_settings_share_them() {
        let model = ScriptedModel::repeating_text("ok");
        let builder = || Agent::builder().model(model.clone());
        let shares = |agent: &Agent| Arc::ptr_eq(&agent.core.settings, &DEFAULT_SETTINGS);
        let named = builder().name("support").system_prompt("Be brief.");
        assert!(
            shares(&named.build().unwrap()),
            "name and prompt are the core's"
        );
        assert!(shares(&builder().build().unwrap()));
        let limited = builder().max_turns(1).build().unwrap();
        assert!(!shares(&limited));
        assert_eq!(limited.core.settings.config.limits.max_turns, Some(1));
        let hooked = builder().hook(|_: &mut BeforeInvocationEvent| {});
        assert!(!shares(&hooked.build().unwrap()));
        assert!(!shares(
            &builder().no_conversation_manager().build().unwrap()
        ));
        // A new conversation shares its agent's core, settings and all.
        let conversation = limited.new_conversation().build();
        assert_eq!(conversation.core.settings.config.limits.max_turns, Some(1));
    }
}
