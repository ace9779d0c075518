//! Testing handlers without an agent: build an event, run a pass of handlers over it, and read
//! what the event became and what the audit recorded.
//!
//! ```
//! use rein_interventions::testing::{self, ToolCall};
//! use rein_interventions::{BeforeToolCallAction, Cancel, DecisionAction, Intervention, json};
//!
//! let no_prod = Intervention::named("no-prod").before_tool_call(|ev, cx| {
//!     let prod = cx.invocation_state().get("env") == Some(&json!("prod"));
//!     if prod && ev.tool_use().name == "send_email" {
//!         BeforeToolCallAction::deny("no emails from prod")
//!     } else {
//!         BeforeToolCallAction::Proceed
//!     }
//! });
//!
//! let call = ToolCall::new("send_email", json!({"to": "ann@example.com"}))
//!     .state(json!({"env": "prod"}));
//! let out = testing::run([no_prod], call.event());
//! assert_eq!(out.event.cancel_tool, Cancel::Message("DENIED: no emails from prod".into()));
//! assert_eq!(out.decisions[0].action, DecisionAction::Deny);
//! assert!(out.result.is_ok());
//! ```
//!
//! - One builder per event: [`Prompt`] (`before_invocation`), [`ModelCall`]
//!   (`before_model_call`), [`ModelReply`] (`after_model_call`), [`StreamedText`]
//!   (`model_output`), [`ToolCall`]
//!   (`before_tool_call`, and `after_tool_call` through [`ToolCall::returned`] /
//!   [`ToolCall::failed`]). Each takes the invocation state (`.state(json!(..))`) and builds
//!   the event with `.event()`; `.run_state(&state)` puts several events in one run (for a
//!   handler that keeps per-run state).
//! - [`run`] passes an event through one or more handlers exactly as the agent does (the same
//!   dispatch, order, `on_error`, shadow mode and audit) and returns an [`Outcome`].
//! - [`apply`] shows what one action a handler returned does to a copy of the event's writable
//!   part (its *draft*).
//! - [`block_on`] runs a future to completion on the current thread, for calling a handler's
//!   method directly; no async runtime is needed.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rein_core::{
    ContentBlock, Error, Message, ModelError, ToolHandle, ToolResult, ToolUse,
    audit::{DecisionRecord, EventKind},
    event::{
        AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
        BeforeToolCallEvent, InvocationContext, ModelOutputEvent,
    },
    interrupt::{InterruptAnswer, InterruptAnswers},
    request::ModelRequest,
    state::InvocationState,
    stream::{ModelResponse, StopReason, Usage},
};
use rein_hooks::HookEvent;
use serde_json::Value;

use crate::action::{ActionVerdict, IntoVerdict as _, ToolResultDraft, ToolUseDraft, Transform};
use crate::error::HandlerError;
use crate::event::PassEvent;
use crate::registry::InterventionRegistry;
use crate::shared::SharedHandler;

/// One of the six events handlers are called on.
pub trait Event: HookEvent + Sized {
    /// What a handler decides on it (`BeforeToolCallAction` for a `BeforeToolCallEvent`, ...).
    type Action;
    /// Its writable part, what a `Transform` edits (`ToolUseDraft` for a `BeforeToolCallEvent`,
    /// ...).
    type Draft;

    /// A copy of the writable part (`None` after a failed model call: nothing to edit).
    fn draft(&self) -> Option<Self::Draft>;

    /// The decision records on the event.
    fn decisions(&self) -> &[DecisionRecord];

    /// The edit an action carries: `None` for `Proceed`, or the name of an action that does not
    /// edit.
    #[doc(hidden)]
    fn edit_of(action: Self::Action) -> Result<Option<Transform<Self::Draft>>, &'static str>;
}

macro_rules! event {
    ($event:ident, $action:ident, $draft:ty) => {
        impl Event for $event {
            type Action = $crate::$action;
            type Draft = $draft;

            fn draft(&self) -> Option<Self::Draft> {
                PassEvent::draft(self)
            }

            fn decisions(&self) -> &[DecisionRecord] {
                <$event>::decisions(self)
            }

            fn edit_of(
                action: Self::Action,
            ) -> Result<Option<Transform<Self::Draft>>, &'static str> {
                match action.into_verdict() {
                    ActionVerdict::Proceed => Ok(None),
                    ActionVerdict::Transform(t) => Ok(Some(t)),
                    ActionVerdict::Deny(_) => Err("deny"),
                    ActionVerdict::Guide(_) => Err("guide"),
                    ActionVerdict::Confirm(_) => Err("confirm"),
                }
            }
        }
    };
}

// One line per entry of the list of events (`list.rs`).
event!(BeforeInvocationEvent, BeforeInvocationAction, Vec<Message>);
event!(BeforeModelCallEvent, BeforeModelCallAction, ModelRequest);
event!(AfterModelCallEvent, AfterModelCallAction, Message);
event!(ModelOutputEvent, ModelOutputAction, String);
event!(BeforeToolCallEvent, BeforeToolCallAction, ToolUseDraft);
event!(AfterToolCallEvent, AfterToolCallAction, ToolResultDraft);

/// What a pass did: the event as the pass left it, its decision records, and whether it failed
/// the invocation.
#[derive(Debug)]
#[non_exhaustive]
pub struct Outcome<E> {
    /// The event after the pass: its writable fields (`cancel_tool`, `messages`, `request`,
    /// `result`, the tool use, the response, guidance, interrupts) as the pass set them.
    pub event: E,
    /// The decision records of the pass, in order (also on `event.decisions()`).
    pub decisions: Vec<DecisionRecord>,
    /// `Err` when the invocation would fail: a handler error under `OnError::Throw`
    /// (`Error::Handler`), or a duplicate handler name (`Error::Build`).
    pub result: Result<(), Error>,
}

/// Passes `event` through `handlers`, in order, as the agent does: the same dispatch, the same
/// `on_error` and shadow-mode handling, the same audit. An async handler is awaited on the
/// current thread (no runtime; a handler that needs one, say for a timer, must bring its own).
pub fn run<E, I>(handlers: I, mut event: E) -> Outcome<E>
where
    E: Event,
    I: IntoIterator,
    I::Item: Into<SharedHandler>,
{
    let result = InterventionRegistry::new(handlers)
        .and_then(|registry| block_on(registry.to_hooks().dispatch(&mut event)));
    Outcome {
        decisions: event.decisions().to_vec(),
        event,
        result,
    }
}

/// What `action` does to a copy of the event's writable part: for a `Transform`, the draft
/// after its edit (or the edit's error); for `Proceed`, the unchanged draft. A deny, guide or
/// confirm edits nothing — that is an error here; [`run`] shows what they do to the event.
///
/// ```
/// use rein_interventions::testing::{self, ToolCall};
/// use rein_interventions::{BeforeToolCallAction, json};
///
/// let event = ToolCall::new("query", json!({"sql": "select 1"})).event();
/// let action = BeforeToolCallAction::transform(|t| t.input["dry_run"] = json!(true));
/// let draft = testing::apply(&event, action)?;
/// assert_eq!(draft.input, json!({"sql": "select 1", "dry_run": true}));
/// # Ok::<(), rein_interventions::HandlerError>(())
/// ```
pub fn apply<E: Event>(event: &E, action: E::Action) -> Result<E::Draft, HandlerError> {
    let Some(mut draft) = event.draft() else {
        return Err(HandlerError::new(
            "the event has nothing to edit (a failed model call)",
        ));
    };
    match E::edit_of(action) {
        Ok(None) => Ok(draft),
        Ok(Some(transform)) => transform.apply(&mut draft).map(|()| draft),
        Err(action) => Err(HandlerError::new(format!(
            "a {action} edits nothing; `testing::run` shows what it does to the event"
        ))),
    }
}

/// Runs `future` to completion on the current thread (parking it while the future waits).
///
/// ```
/// use rein_interventions::testing::{block_on, ToolCall};
/// use rein_interventions::{InterventionContext, InterventionHandler, json};
/// # struct Handler;
/// # impl InterventionHandler for Handler { fn name(&self) -> &str { "h" } }
/// # let handler = Handler;
/// let event = ToolCall::new("search", json!({"q": "rust"})).event();
/// let cx = InterventionContext::from(event.context());
/// let action = block_on(handler.before_tool_call(&event, &cx))?;
/// assert!(action.is_proceed());
/// # Ok::<(), rein_interventions::HandlerError>(())
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

macro_rules! context_setters {
    () => {
        /// Sets the caller's invocation state (a JSON object, or an [`InvocationState`]).
        pub fn state(mut self, state: impl Into<InvocationState>) -> Self {
            self.cx.invocation_state = state.into();
            self
        }

        /// Sets the run's state: pass the same [`RunState`](rein_core::state::RunState) to
        /// several events to put them in one run (a budget, say), and read it afterwards.
        pub fn run_state(mut self, run_state: &rein_core::state::RunState) -> Self {
            self.cx.run_state = run_state.clone();
            self
        }

        /// Sets the agent's state: pass the same [`AgentState`](rein_core::state::AgentState)
        /// to several events to put them in one session, and read it afterwards.
        pub fn agent_state(mut self, agent_state: &rein_core::state::AgentState) -> Self {
            self.cx.agent_state = agent_state.clone();
            self
        }

        /// Sets the whole invocation context (its id and states), e.g. to put several events
        /// in one invocation.
        pub fn context(mut self, cx: InvocationContext) -> Self {
            self.cx = cx;
            self
        }
    };
}

macro_rules! index_setter {
    ($doc:literal) => {
        #[doc = $doc]
        pub fn index(mut self, index: u32) -> Self {
            self.index = index;
            self
        }
    };
}

/// A `before_invocation` event: a new input (or an injected message).
///
/// ```
/// use rein_interventions::testing::Prompt;
/// use rein_interventions::json;
/// let event = Prompt::new("hello").state(json!({"user": "ann"})).event();
/// assert_eq!(event.messages[0].text(), "hello");
/// ```
#[derive(Debug, Clone)]
pub struct Prompt {
    messages: Vec<Message>,
    history: Vec<Message>,
    injected: bool,
    cx: InvocationContext,
}

impl Prompt {
    /// One user message with this text.
    pub fn new(text: impl Into<String>) -> Self {
        Self::messages(vec![Message::user(text)])
    }

    /// These input messages.
    pub fn messages(messages: Vec<Message>) -> Self {
        Self {
            messages,
            history: Vec::new(),
            injected: false,
            cx: InvocationContext::default(),
        }
    }

    /// The history stored before this input (default: none).
    pub fn history(mut self, history: Vec<Message>) -> Self {
        self.history = history;
        self
    }

    /// Marks the input as injected mid-run (`event.is_injected()`).
    pub fn injected(mut self) -> Self {
        self.injected = true;
        self
    }

    context_setters!();

    /// The event.
    pub fn event(self) -> BeforeInvocationEvent {
        let event = BeforeInvocationEvent::new(self.cx, self.messages, Arc::new(self.history));
        if self.injected {
            event.as_injected(rein_core::id::InjectionId::new())
        } else {
            event
        }
    }
}

/// A `before_model_call` event: the request of one model call.
///
/// ```
/// use rein_interventions::testing::ModelCall;
/// let event = ModelCall::new("hello").system("Be brief.").index(2).event();
/// assert_eq!(event.request.system_prompt.as_deref(), Some("Be brief."));
/// assert_eq!(event.model_call_index(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ModelCall {
    request: ModelRequest,
    index: u32,
    cx: InvocationContext,
}

impl ModelCall {
    /// A request holding one user message with this text.
    pub fn new(text: impl Into<String>) -> Self {
        Self::request(ModelRequest::new(vec![Message::user(text)]))
    }

    /// This request.
    pub fn request(request: ModelRequest) -> Self {
        Self {
            request,
            index: 0,
            cx: InvocationContext::default(),
        }
    }

    /// Sets the system prompt.
    pub fn system(mut self, prompt: impl Into<Arc<str>>) -> Self {
        self.request.system_prompt = Some(prompt.into());
        self
    }

    index_setter!("Sets the index of the model call within the invocation (default 0, the first).");
    context_setters!();

    /// The event.
    pub fn event(self) -> BeforeModelCallEvent {
        BeforeModelCallEvent::new(self.cx, self.request).with_model_call_index(self.index)
    }
}

/// An `after_model_call` event: what a model call returned (or its error).
///
/// ```
/// use rein_interventions::testing::ModelReply;
/// use rein_interventions::{StopReason, ToolUse, Usage, json};
/// let event = ModelReply::text("Let me look.")
///     .tool_use(ToolUse::new("t1", "search", json!({"q": "rust"})))
///     .usage(Usage::new(120, 30))
///     .event();
/// let response = event.response().unwrap();
/// assert_eq!(response.stop_reason, StopReason::ToolUse);
/// assert_eq!(response.usage.output_tokens, 30);
/// ```
#[derive(Debug)]
pub struct ModelReply {
    outcome: Result<ModelResponse, ModelError>,
    index: u32,
    cx: InvocationContext,
}

impl ModelReply {
    /// An assistant message with this text (stop reason `EndTurn`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::message(Message::assistant(text))
    }

    /// This message (stop reason `ToolUse` if it holds a tool use, else `EndTurn`).
    pub fn message(message: Message) -> Self {
        let stop = if message.has_tool_use() {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        };
        Self::response(ModelResponse::new(message, stop))
    }

    /// This response.
    pub fn response(response: ModelResponse) -> Self {
        Self::outcome(Ok(response))
    }

    /// A failed call (handlers are not called on it: there is nothing to decide about).
    pub fn error(error: ModelError) -> Self {
        Self::outcome(Err(error))
    }

    fn outcome(outcome: Result<ModelResponse, ModelError>) -> Self {
        Self {
            outcome,
            index: 0,
            cx: InvocationContext::default(),
        }
    }

    /// Appends a tool use to the message (the stop reason becomes `ToolUse`).
    pub fn tool_use(mut self, tool_use: ToolUse) -> Self {
        if let Ok(response) = &mut self.outcome {
            response
                .message
                .content
                .push(ContentBlock::ToolUse(Box::new(tool_use)));
            response.stop_reason = StopReason::ToolUse;
        }
        self
    }

    /// Sets the usage of the call.
    pub fn usage(mut self, usage: Usage) -> Self {
        if let Ok(response) = &mut self.outcome {
            response.usage = usage;
        }
        self
    }

    index_setter!("Sets the index of the model call within the invocation (default 0, the first).");
    context_setters!();

    /// The event.
    pub fn event(self) -> AfterModelCallEvent {
        AfterModelCallEvent::new(self.cx, self.outcome).with_model_call_index(self.index)
    }
}

/// A `model_output` event: text of a streamed response, not yet released to the caller.
///
/// ```
/// use rein_interventions::testing::StreamedText;
/// let event = StreamedText::new("sk-12").released("My key is ").last().event();
/// assert_eq!(event.pending, "sk-12");
/// assert_eq!(event.released(), "My key is ");
/// assert!(event.is_final());
/// ```
#[derive(Debug, Clone)]
pub struct StreamedText {
    pending: String,
    released: String,
    last: bool,
    index: u32,
    cx: InvocationContext,
}

impl StreamedText {
    /// This pending text, nothing released yet, not the last pass.
    pub fn new(pending: impl Into<String>) -> Self {
        Self {
            pending: pending.into(),
            released: String::new(),
            last: false,
            index: 0,
            cx: InvocationContext::default(),
        }
    }

    /// The text of the block already released to the caller.
    pub fn released(mut self, text: impl Into<String>) -> Self {
        self.released = text.into();
        self
    }

    /// Marks the pass as the last of the text block (`is_final`).
    pub fn last(mut self) -> Self {
        self.last = true;
        self
    }

    index_setter!("Sets the index of the model call within the invocation (default 0, the first).");
    context_setters!();

    /// The event.
    pub fn event(self) -> ModelOutputEvent {
        let mut event = ModelOutputEvent::new(self.cx).with_model_call_index(self.index);
        event.push_text(&self.released);
        // Everything pushed so far counts as released.
        event.release(0);
        event.push_text(&self.pending);
        if self.last {
            event.set_final();
        }
        event
    }
}

/// A tool call: a `before_tool_call` event ([`event`](Self::event)), or an `after_tool_call`
/// event with its result ([`returned`](Self::returned), [`failed`](Self::failed)).
///
/// ```
/// use rein_interventions::testing::ToolCall;
/// use rein_interventions::{ToolResultStatus, json};
/// let call = ToolCall::new("send_email", json!({"to": "ann@example.com"})).id("t7");
/// assert_eq!(call.clone().event().tool_use().tool_use_id, "t7");
/// let after = call.failed("mailbox full");
/// assert_eq!(after.result.status, ToolResultStatus::Error);
/// ```
#[derive(Debug, Clone)]
pub struct ToolCall {
    tool_use: ToolUse,
    tool: Option<ToolHandle>,
    answers: Vec<(String, Value)>,
    index: u32,
    cx: InvocationContext,
}

impl ToolCall {
    /// A call of `name` with this input (tool-use id `t1`).
    pub fn new(name: impl Into<String>, input: Value) -> Self {
        Self {
            tool_use: ToolUse::new("t1", name, input),
            tool: None,
            answers: Vec::new(),
            index: 0,
            cx: InvocationContext::default(),
        }
    }

    /// Sets the tool-use id.
    pub fn id(mut self, tool_use_id: impl Into<String>) -> Self {
        self.tool_use.tool_use_id = tool_use_id.into();
        self
    }

    /// Sets the tool that would run (`event.selected_tool`; default none, an unknown tool).
    pub fn tool(mut self, tool: ToolHandle) -> Self {
        self.tool = Some(tool);
        self
    }

    /// A resume's answer to the `Confirm` of the handler `handler` about this very call (bound
    /// to the call as built: its id, name and input) — or, on the `after_tool_call` event, about
    /// its result as built.
    pub fn answer(mut self, handler: impl Into<String>, response: impl Into<Value>) -> Self {
        self.answers.push((handler.into(), response.into()));
        self
    }

    index_setter!("Sets the index of the model call that asked for the tool (default 0).");
    context_setters!();

    /// The `before_tool_call` event.
    pub fn event(self) -> BeforeToolCallEvent {
        let fingerprint = self.tool_use.fingerprint();
        let answers: HashMap<String, InterruptAnswer> = self
            .answers
            .into_iter()
            .map(|(handler, response)| {
                let id =
                    EventKind::BeforeToolCall.interrupt_id(&self.tool_use.tool_use_id, &handler);
                let answer = InterruptAnswer {
                    response,
                    fingerprint: Some(fingerprint.clone()),
                };
                (id, answer)
            })
            .collect();
        BeforeToolCallEvent::new(self.cx, self.tool_use)
            .with_selected_tool(self.tool)
            .with_model_call_index(self.index)
            .with_answers(InterruptAnswers::new(answers))
    }

    /// The `after_tool_call` event of the call, which returned this text.
    pub fn returned(self, text: impl Into<String>) -> AfterToolCallEvent {
        let result = ToolResult::success(self.tool_use.tool_use_id.clone(), text);
        self.after(result)
    }

    /// The `after_tool_call` event of the call, which failed with this text.
    pub fn failed(self, text: impl Into<String>) -> AfterToolCallEvent {
        let result = ToolResult::error(self.tool_use.tool_use_id.clone(), text);
        self.after(result)
    }

    fn after(self, result: ToolResult) -> AfterToolCallEvent {
        let event = AfterToolCallEvent::new(self.cx, self.tool_use, result)
            .with_selected_tool(self.tool)
            .with_model_call_index(self.index);
        let fingerprint = event.result_fingerprint();
        let subject = &event.tool_use().tool_use_id;
        let answers: HashMap<String, InterruptAnswer> = self
            .answers
            .into_iter()
            .map(|(handler, response)| {
                let id = EventKind::AfterToolCall.interrupt_id(subject, &handler);
                let answer = InterruptAnswer {
                    response,
                    fingerprint: Some(fingerprint.clone()),
                };
                (id, answer)
            })
            .collect();
        event.with_answers(InterruptAnswers::new(answers))
    }
}
