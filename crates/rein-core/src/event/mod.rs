//! Lifecycle event types (SPEC §2). What a hook may change is a public field or a `_mut`
//! accessor; everything else is read-only behind a getter, so the split is enforced by types.
//! What the loop makes of an event once its hooks ran (`into_verdict`) is `verdict.rs`.

use std::sync::Arc;

use serde_json::Value;

use crate::audit::{DecisionRecord, EventKind};
use crate::error::{Error, ModelError};
use crate::id::{InjectionId, InvocationId, MessageId};
use crate::interrupt::{Interrupt, InterruptAnswers};
use crate::message::{Message, ToolResult, ToolUse};
use crate::request::ModelRequest;
use crate::result::AgentResult;
use crate::state::{AgentState, InvocationState, RunState};
use crate::stream::ModelResponse;
use crate::tool::ToolHandle;

mod verdict;
pub use verdict::{
    InputVerdict, ModelCallVerdict, RequestVerdict, ToolCallAction, ToolCallVerdict,
    ToolResultVerdict,
};

/// A cancel request: `No`, `Yes` (the event's default text), or a message of your own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancel {
    /// Not cancelled.
    #[default]
    No,
    /// Cancelled with the default text.
    Yes,
    /// Cancelled with this text.
    Message(String),
}

impl Cancel {
    /// Whether this is a cancel.
    pub fn is_cancelled(&self) -> bool {
        !matches!(self, Cancel::No)
    }

    /// The cancel text (`default` for `Yes`), or `None` when not cancelled.
    pub fn text<'a>(&'a self, default: &'a str) -> Option<&'a str> {
        match self {
            Cancel::No => None,
            Cancel::Yes => Some(default),
            Cancel::Message(m) => Some(m),
        }
    }
}

/// What every event carries: the invocation id, the caller's invocation state, the run's state
/// and the agent's state.
#[derive(Debug, Clone, Default)]
pub struct InvocationContext {
    /// The invocation id.
    pub invocation_id: InvocationId,
    /// The caller's invocation state.
    pub invocation_state: InvocationState,
    /// The run's state, for hooks and handlers (kept across interrupts and resumes).
    pub run_state: RunState,
    /// The agent's state: lives with the agent across invocations and is persisted by its
    /// session store (what a handler remembers for the rest of a session).
    pub agent_state: AgentState,
}

impl InvocationContext {
    /// A context for a new invocation, with a run state of its own.
    pub fn new(invocation_state: InvocationState) -> Self {
        Self::in_run(invocation_state, RunState::new())
    }

    /// A context for a new invocation of the run whose state is `run_state`.
    pub fn in_run(invocation_state: InvocationState, run_state: RunState) -> Self {
        Self {
            invocation_id: InvocationId::new(),
            invocation_state,
            run_state,
            agent_state: AgentState::new(),
        }
    }

    /// The same context for the agent whose state is `agent_state`.
    pub fn with_agent_state(mut self, agent_state: AgentState) -> Self {
        self.agent_state = agent_state;
        self
    }
}

impl Default for InvocationId {
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! common_accessors {
    ($ty:ident, $kind:expr) => {
        impl $ty {
            /// Which lifecycle event this is.
            pub const KIND: EventKind = $kind;

            /// The invocation id.
            pub fn invocation_id(&self) -> InvocationId {
                self.cx.invocation_id
            }

            /// The caller's invocation state (read-only).
            pub fn invocation_state(&self) -> &InvocationState {
                &self.cx.invocation_state
            }

            /// The run's state, kept across interrupts and resumes
            /// ([`RunState`](crate::state::RunState)).
            pub fn run_state(&self) -> &RunState {
                &self.cx.run_state
            }

            /// The invocation context.
            pub fn context(&self) -> &InvocationContext {
                &self.cx
            }
        }
    };
}

macro_rules! interrupt_accessors {
    ($ty:ident, $kind:literal, $subject:literal, $what:literal) => {
        impl $ty {
            #[doc = concat!(
                "Asks a human: the answer if this resume carries one for `v1:", $kind,
                ":", $subject, ":<uuid5(OID, name)>`, otherwise raises that interrupt and returns ",
                "`None` (", $what, "; the invocation stops with `Interrupt`)."
            )]
            pub fn interrupt(&mut self, name: &str, reason: impl Into<Value>) -> Option<Value> {
                let id = Self::KIND.interrupt_id(&self.interrupt_subject(), name);
                if let Some(answer) = self.answers.get(&id) {
                    return Some(answer.clone());
                }
                let mut interrupt = Interrupt::new(id, name, reason);
                if let Some(tool_use_id) = self.subject_tool_use_id() {
                    interrupt = interrupt.with_tool_use_id(tool_use_id.to_owned());
                }
                self.raise_interrupt(interrupt);
                None
            }

            /// Raises a prepared interrupt (ids and fingerprints of your own).
            pub fn raise_interrupt(&mut self, interrupt: Interrupt) {
                if !self.interrupts.iter().any(|i| i.id == interrupt.id) {
                    self.interrupts.push(interrupt);
                }
            }

            /// Interrupts raised on this event.
            pub fn interrupts(&self) -> &[Interrupt] {
                &self.interrupts
            }

            /// The answers given on resume.
            pub fn answers(&self) -> &InterruptAnswers {
                &self.answers
            }

            /// Sets the answers a resume carries.
            #[inline]
            pub fn with_answers(mut self, answers: InterruptAnswers) -> Self {
                self.answers = answers;
                self
            }
        }
    };
}

macro_rules! model_call_index_accessors {
    ($ty:ident, $what:literal) => {
        impl $ty {
            #[doc = concat!("Sets the index of ", $what, " within the invocation (0-based, retries included).")]
            #[inline]
            pub fn with_model_call_index(mut self, index: u32) -> Self {
                self.model_call_index = index;
                self
            }

            #[doc = concat!("The index of ", $what, " within the invocation (0-based, retries included).")]
            pub fn model_call_index(&self) -> u32 {
                self.model_call_index
            }
        }
    };
}

macro_rules! decision_accessors {
    ($ty:ident) => {
        impl $ty {
            /// Intervention decisions recorded on this event so far.
            pub fn decisions(&self) -> &[DecisionRecord] {
                &self.decisions
            }

            /// Records a decision (the interventions registry does; custom policies may).
            pub fn record_decision(&mut self, record: DecisionRecord) {
                self.decisions.push(record);
            }

            /// Takes the recorded decisions out of the event.
            pub fn take_decisions(&mut self) -> Vec<DecisionRecord> {
                std::mem::take(&mut self.decisions)
            }
        }
    };
}

/// Fired once per invocation before the loop starts, and (for interventions only) for each
/// injected message before it is admitted.
#[derive(Debug)]
#[non_exhaustive]
pub struct BeforeInvocationEvent {
    /// The new input (writable). Empty on a resume.
    pub messages: Vec<Message>,
    /// Cancel the invocation (default text `invocation denied by hook`).
    pub cancel: Cancel,
    cx: InvocationContext,
    history: Arc<Vec<Message>>,
    resume: bool,
    injected: Option<InjectionId>,
    answers: InterruptAnswers,
    interrupts: Vec<Interrupt>,
    decisions: Vec<DecisionRecord>,
}

common_accessors!(BeforeInvocationEvent, EventKind::BeforeInvocation);
decision_accessors!(BeforeInvocationEvent);
interrupt_accessors!(
    BeforeInvocationEvent,
    "before_invocation",
    "<input | injection id>",
    "the input is held, not stored; an injected message is parked until answered"
);

impl BeforeInvocationEvent {
    /// Default cancel text.
    pub const DEFAULT_CANCEL: &'static str = "invocation denied by hook";

    /// An event for a new input.
    pub fn new(cx: InvocationContext, messages: Vec<Message>, history: Arc<Vec<Message>>) -> Self {
        Self {
            messages,
            cancel: Cancel::No,
            cx,
            history,
            resume: false,
            injected: None,
            answers: InterruptAnswers::default(),
            interrupts: Vec::new(),
            decisions: Vec::new(),
        }
    }

    /// Marks the event as a resume (no new input).
    pub fn as_resume(mut self) -> Self {
        self.resume = true;
        self
    }

    /// Marks the event as the admission check of the injected message `id`.
    pub fn as_injected(mut self, id: InjectionId) -> Self {
        self.injected = Some(id);
        self
    }

    /// Whether this invocation resumes from interrupts.
    pub fn is_resume(&self) -> bool {
        self.resume
    }

    /// Whether the input was injected mid-run.
    pub fn is_injected(&self) -> bool {
        self.injected.is_some()
    }

    /// The id of the injected message this event checks.
    pub fn injection_id(&self) -> Option<InjectionId> {
        self.injected
    }

    /// The subject of this event's interrupt ids: `input` for an invocation's input, the
    /// injection id for an injected message.
    pub fn interrupt_subject(&self) -> String {
        match self.injected {
            Some(id) => id.to_string(),
            None => "input".to_owned(),
        }
    }

    fn subject_tool_use_id(&self) -> Option<&str> {
        None
    }

    /// A fingerprint of the input as it stands: what a human approving it saw (uuid5 over
    /// the messages as sorted-key JSON).
    pub fn input_fingerprint(&self) -> String {
        Message::fingerprint_all(&self.messages)
    }

    /// The stored history before this input.
    pub fn history(&self) -> &[Message] {
        &self.history
    }
}

/// Fired before each model call.
#[derive(Debug)]
#[non_exhaustive]
pub struct BeforeModelCallEvent {
    /// Cancel the call (default text `model call denied by hook`).
    pub cancel: Cancel,
    /// What this one call sends; a copy-on-write overlay that never touches stored history.
    pub request: ModelRequest,
    cx: InvocationContext,
    model_call_index: u32,
    resume: bool,
    /// A conversation manager's summary call (SPEC §6.1), not a turn of the run.
    summary: bool,
    guidance: Vec<String>,
    answers: InterruptAnswers,
    interrupts: Vec<Interrupt>,
    decisions: Vec<DecisionRecord>,
    /// A u32 beside `model_call_index`: the event stays its size (agent layout rules).
    estimated_input_tokens: u32,
}

common_accessors!(BeforeModelCallEvent, EventKind::BeforeModelCall);
model_call_index_accessors!(BeforeModelCallEvent, "this model call");
decision_accessors!(BeforeModelCallEvent);
interrupt_accessors!(
    BeforeModelCallEvent,
    "before_model_call",
    "m<model call index>",
    "the request is not sent"
);

impl BeforeModelCallEvent {
    /// Default cancel text.
    pub const DEFAULT_CANCEL: &'static str = "model call denied by hook";

    /// An event for a model call (the first of the invocation unless
    /// [`with_model_call_index`](Self::with_model_call_index) says otherwise).
    pub fn new(cx: InvocationContext, request: ModelRequest) -> Self {
        Self {
            cancel: Cancel::No,
            request,
            cx,
            model_call_index: 0,
            resume: false,
            summary: false,
            guidance: Vec::new(),
            answers: InterruptAnswers::default(),
            interrupts: Vec::new(),
            decisions: Vec::new(),
            estimated_input_tokens: 0,
        }
    }

    /// Sets the estimated input tokens of the request (SPEC §6.1).
    pub fn with_estimated_input_tokens(mut self, tokens: u64) -> Self {
        self.estimated_input_tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
        self
    }

    /// The agent's estimate of the request's input tokens (system prompt, tools, messages) as
    /// built, before handlers change it: a heuristic calibrated from the provider's reported
    /// usage earlier in the conversation (SPEC §6.1). A budget handler can deny or hold a call
    /// that would cost too much. 0 when the event was not made by an agent; at most
    /// `u32::MAX` (no model takes 4 billion tokens).
    pub fn estimated_input_tokens(&self) -> u64 {
        u64::from(self.estimated_input_tokens)
    }

    /// Marks the event as a conversation manager's summary call (SPEC §6.1).
    pub fn as_summary(mut self) -> Self {
        self.summary = true;
        self
    }

    /// Whether this call writes a summary of older messages for the conversation manager
    /// (SPEC §6.1) rather than a turn of the run: its request holds the messages to summarize;
    /// a deny makes the manager fall back to trimming; guidance and interrupts are not
    /// taken (nothing waits for a summary).
    pub fn is_summary(&self) -> bool {
        self.summary
    }

    /// Marks the event as the pass of a held call made again on resume (SPEC §3.8).
    pub fn as_resume(mut self) -> Self {
        self.resume = true;
        self
    }

    /// Whether this is the pass of a call that paused at `before_model_call` and is made
    /// again on resume: the same call as the pass that paused it (so a handler that counts
    /// calls, or does something once, does not do it a second time for it).
    pub fn is_resume(&self) -> bool {
        self.resume
    }

    /// The subject of this call's interrupt ids: `m<model call index>`.
    pub fn interrupt_subject(&self) -> String {
        format!("m{}", self.model_call_index)
    }

    fn subject_tool_use_id(&self) -> Option<&str> {
        None
    }

    /// A fingerprint of the request as it stands: what a human approving it saw (see
    /// [`ModelRequest::fingerprint`]).
    pub fn request_fingerprint(&self) -> String {
        self.request.fingerprint()
    }

    /// Injects guidance: stored in history as user text (through `MessageAdded` /
    /// `MessageUpdated`) and sent on this very call.
    pub fn inject_guidance(&mut self, text: impl Into<String>) {
        self.guidance.push(text.into());
    }

    /// Guidance injected so far.
    pub fn guidance(&self) -> &[String] {
        &self.guidance
    }

    /// Takes the injected guidance out of the event.
    pub fn take_guidance(&mut self) -> Vec<String> {
        std::mem::take(&mut self.guidance)
    }
}

/// Fired after each model call, with its response or its error.
#[derive(Debug)]
#[non_exhaustive]
pub struct AfterModelCallEvent {
    /// Discard the response (or error) and call the model again.
    pub retry: bool,
    outcome: Result<ModelResponse, ModelError>,
    cx: InvocationContext,
    model_call_index: u32,
    guidance: Vec<String>,
    original: Option<Message>,
    withheld: Option<String>,
    answers: InterruptAnswers,
    interrupts: Vec<Interrupt>,
    retries: (u32, u32),
    decisions: Vec<DecisionRecord>,
    /// A conversation manager's summary call (SPEC §6.1), not a turn of the run.
    summary: bool,
}

common_accessors!(AfterModelCallEvent, EventKind::AfterModelCall);
model_call_index_accessors!(AfterModelCallEvent, "this model call");
decision_accessors!(AfterModelCallEvent);
interrupt_accessors!(
    AfterModelCallEvent,
    "after_model_call",
    "m<model call index>",
    "the response is held, not stored; its tool uses do not run"
);

impl AfterModelCallEvent {
    /// An event for the outcome of a model call.
    pub fn new(cx: InvocationContext, outcome: Result<ModelResponse, ModelError>) -> Self {
        Self {
            retry: false,
            outcome,
            cx,
            model_call_index: 0,
            guidance: Vec::new(),
            original: None,
            withheld: None,
            answers: InterruptAnswers::default(),
            interrupts: Vec::new(),
            // The agent's default cap until the agent says otherwise.
            retries: (0, 3),
            decisions: Vec::new(),
            summary: false,
        }
    }

    /// Marks the event as a conversation manager's summary call (SPEC §6.1).
    pub fn as_summary(mut self) -> Self {
        self.summary = true;
        self
    }

    /// Whether this call wrote a summary of older messages for the conversation manager
    /// (SPEC §6.1): a retry, a withheld response or an interrupt makes the manager fall back
    /// to trimming (a summary call is made once and never waits).
    pub fn is_summary(&self) -> bool {
        self.summary
    }

    /// Sets how many times this turn's model call was already retried at a hook's request,
    /// and the cap (`max_hook_retries`).
    #[inline]
    pub fn with_retries(mut self, retried: u32, max: u32) -> Self {
        self.retries = (retried, max);
        self
    }

    /// How many times this turn's model call was already retried at a hook's request
    /// (guidance included).
    pub fn retries(&self) -> u32 {
        self.retries.0
    }

    /// How many more retries a hook may ask for in this turn: at 0, a guide is refused (the
    /// retry limit), so a handler may ask a human (`Confirm`) instead.
    pub fn retries_left(&self) -> u32 {
        self.retries.1.saturating_sub(self.retries.0)
    }

    /// The subject of this call's interrupt ids: `m<model call index>`
    /// (`v1:after_model_call:m<index>:<uuid5(OID, name)>`).
    pub fn interrupt_subject(&self) -> String {
        format!("m{}", self.model_call_index)
    }

    fn subject_tool_use_id(&self) -> Option<&str> {
        None
    }

    /// A fingerprint of the response message as it stands: what a human approving it saw
    /// (uuid5 over its sorted-key JSON); empty for a failed call.
    pub fn response_fingerprint(&self) -> String {
        match &self.outcome {
            Ok(r) => r.message.fingerprint(),
            Err(_) => String::new(),
        }
    }

    /// The response, when the call succeeded.
    pub fn response(&self) -> Option<&ModelResponse> {
        self.outcome.as_ref().ok()
    }

    /// The error, when the call failed.
    pub fn error(&self) -> Option<&ModelError> {
        self.outcome.as_ref().err()
    }

    /// The response message, for rewriting (committed like a transform).
    pub fn message_mut(&mut self) -> Option<&mut Message> {
        match &mut self.outcome {
            Ok(r) => {
                if self.original.is_none() {
                    self.original = Some(r.message.clone());
                }
                Some(&mut r.message)
            }
            Err(_) => None,
        }
    }

    /// Whether the response message now differs from what the model returned.
    pub fn is_edited(&self) -> bool {
        match (&self.original, &self.outcome) {
            (Some(o), Ok(r)) => *o != r.message,
            _ => false,
        }
    }

    /// Withholds the response: its tool uses never run, and an assistant message with `text`
    /// is stored in its place; the turn ends.
    pub fn withhold(&mut self, text: impl Into<String>) {
        self.withheld = Some(text.into());
    }

    /// The text standing in for a withheld response.
    pub fn withheld(&self) -> Option<&str> {
        self.withheld.as_deref()
    }

    /// Adds guidance that is stored as user text before the retry (use with `retry = true`).
    pub fn inject_guidance(&mut self, text: impl Into<String>) {
        self.guidance.push(text.into());
    }

    /// Guidance injected so far.
    pub fn guidance(&self) -> &[String] {
        &self.guidance
    }
}

/// Fired on the text of a streamed response before any of it reaches the caller (SPEC §3.9):
/// once after each text delta, on the text not yet released, and a last time (`is_final`) when
/// the text block ends.
///
/// Only text is guarded (not tool-use input or reasoning), one text block at a time. After each
/// pass the agent releases the pending text to the caller except its last `hold_back`
/// characters, so a pattern split across deltas is still whole in [`pending`](Self::pending)
/// when a handler looks; the stored response holds exactly the text released. Handlers may
/// rewrite the pending text or [`withhold`](Self::withhold) the response: the model's stream is
/// then dropped at once, nothing pending is released, and the turn ends with the deny text.
///
/// ```
/// use rein_core::event::{InvocationContext, ModelOutputEvent};
/// let mut ev = ModelOutputEvent::new(InvocationContext::default());
/// ev.push_text("Hello, wor");
/// assert_eq!(ev.release(4), Some("Hello,".to_owned()));
/// assert_eq!((ev.released(), ev.pending.as_str()), ("Hello,", " wor"));
/// ev.push_text("ld");
/// ev.set_final();
/// assert_eq!(ev.release(0).as_deref(), Some(" world"));
/// assert_eq!(ev.released(), "Hello, world");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct ModelOutputEvent {
    /// The text of this block not yet released to the caller (writable: a rewrite is what the
    /// caller sees and what is stored).
    pub pending: String,
    released: String,
    cx: InvocationContext,
    model_call_index: u32,
    is_final: bool,
    withheld: Option<String>,
    decisions: Vec<DecisionRecord>,
}

common_accessors!(ModelOutputEvent, EventKind::ModelOutput);
model_call_index_accessors!(ModelOutputEvent, "the model call streaming this text");
decision_accessors!(ModelOutputEvent);

impl ModelOutputEvent {
    /// An event for a text block that has not streamed anything yet.
    pub fn new(cx: InvocationContext) -> Self {
        Self {
            pending: String::new(),
            released: String::new(),
            cx,
            model_call_index: 0,
            is_final: false,
            withheld: None,
            decisions: Vec::new(),
        }
    }

    /// The text of this block already released to the caller (read-only: it was shown).
    pub fn released(&self) -> &str {
        &self.released
    }

    /// Whether the text block has ended: this pass is the last, and everything pending is
    /// released after it.
    pub fn is_final(&self) -> bool {
        self.is_final
    }

    /// Withholds the response: the model's stream is dropped, nothing pending is released, its
    /// tool uses never run, and an assistant message with `text` is stored in its place.
    pub fn withhold(&mut self, text: impl Into<String>) {
        self.withheld = Some(text.into());
    }

    /// The text standing in for a withheld response.
    pub fn withheld(&self) -> Option<&str> {
        self.withheld.as_deref()
    }

    /// Appends a text delta to the pending text (for the driver of the loop).
    pub fn push_text(&mut self, delta: &str) {
        self.pending.push_str(delta);
    }

    /// Marks the pass to come as the last of the block (for the driver of the loop).
    pub fn set_final(&mut self) {
        self.is_final = true;
    }

    /// Releases the pending text but its last `hold_back` characters (all of it once
    /// [`is_final`](Self::is_final)), on a char boundary: returns what was released, now part
    /// of [`released`](Self::released); `None` when nothing is (for the driver of the loop).
    pub fn release(&mut self, hold_back: usize) -> Option<String> {
        let split = if self.is_final || hold_back == 0 {
            self.pending.len()
        } else {
            // The start of the `hold_back`-th char from the end; shorter text is all held.
            match self.pending.char_indices().rev().nth(hold_back - 1) {
                Some((i, _)) => i,
                None => 0,
            }
        };
        if split == 0 {
            return None;
        }
        let out = if split == self.pending.len() {
            std::mem::take(&mut self.pending)
        } else {
            let rest = self.pending.split_off(split);
            std::mem::replace(&mut self.pending, rest)
        };
        self.released.push_str(&out);
        Some(out)
    }
}

/// Fired before each tool call, unknown tools included.
#[derive(Debug)]
#[non_exhaustive]
pub struct BeforeToolCallEvent {
    /// The tool to run (`None` for an unknown tool). Writable: a hook may swap the tool.
    pub selected_tool: Option<ToolHandle>,
    /// Cancel this tool call (default text `tool cancelled by user`).
    pub cancel_tool: Cancel,
    tool_use: ToolUse,
    original: Option<ToolUse>,
    cx: InvocationContext,
    model_call_index: u32,
    answers: InterruptAnswers,
    interrupts: Vec<Interrupt>,
    decisions: Vec<DecisionRecord>,
}

common_accessors!(BeforeToolCallEvent, EventKind::BeforeToolCall);
model_call_index_accessors!(
    BeforeToolCallEvent,
    "the model call that asked for this tool"
);
decision_accessors!(BeforeToolCallEvent);
interrupt_accessors!(
    BeforeToolCallEvent,
    "before_tool_call",
    "<toolUseId>",
    "the tool does not run"
);

impl BeforeToolCallEvent {
    /// Default cancel text.
    pub const DEFAULT_CANCEL: &'static str = "tool cancelled by user";

    /// The subject of this call's interrupt ids: its tool use id.
    pub fn interrupt_subject(&self) -> String {
        self.tool_use.tool_use_id.clone()
    }

    fn subject_tool_use_id(&self) -> Option<&str> {
        Some(&self.tool_use.tool_use_id)
    }

    /// An event for one tool use (of an unknown tool, until
    /// [`with_selected_tool`](Self::with_selected_tool) names one).
    #[inline]
    pub fn new(cx: InvocationContext, tool_use: ToolUse) -> Self {
        Self {
            selected_tool: None,
            cancel_tool: Cancel::No,
            tool_use,
            original: None,
            cx,
            model_call_index: 0,
            answers: InterruptAnswers::default(),
            interrupts: Vec::new(),
            decisions: Vec::new(),
        }
    }

    /// Sets the tool that would run.
    #[inline]
    pub fn with_selected_tool(mut self, tool: Option<ToolHandle>) -> Self {
        self.selected_tool = tool;
        self
    }

    /// The tool use.
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// The tool use, for rewriting its name or input; the stored assistant message is then
    /// rewritten too (`MessageUpdated`).
    pub fn tool_use_mut(&mut self) -> &mut ToolUse {
        if self.original.is_none() {
            self.original = Some(self.tool_use.clone());
        }
        &mut self.tool_use
    }

    /// Whether the tool use now differs from what the model asked for.
    pub fn is_edited(&self) -> bool {
        self.original.as_ref().is_some_and(|o| *o != self.tool_use)
    }

    /// Takes the raised interrupts out of the event.
    pub fn take_interrupts(&mut self) -> Vec<Interrupt> {
        std::mem::take(&mut self.interrupts)
    }
}

/// Fired after each tool call (also after a cancelled, unknown, invalid or failed one).
#[derive(Debug)]
#[non_exhaustive]
pub struct AfterToolCallEvent {
    /// The result (writable).
    pub result: ToolResult,
    /// Run the tool again, from BeforeToolCall.
    pub retry: bool,
    tool_use: ToolUse,
    selected_tool: Option<ToolHandle>,
    cx: InvocationContext,
    model_call_index: u32,
    answers: InterruptAnswers,
    interrupts: Vec<Interrupt>,
    decisions: Vec<DecisionRecord>,
}

common_accessors!(AfterToolCallEvent, EventKind::AfterToolCall);
model_call_index_accessors!(
    AfterToolCallEvent,
    "the model call that asked for this tool"
);
decision_accessors!(AfterToolCallEvent);
interrupt_accessors!(
    AfterToolCallEvent,
    "after_tool_call",
    "<toolUseId>",
    "the result is held, not shown to the model; the tool does not run again"
);

impl AfterToolCallEvent {
    /// The subject of this call's interrupt ids: its tool use id.
    pub fn interrupt_subject(&self) -> String {
        self.tool_use.tool_use_id.clone()
    }

    fn subject_tool_use_id(&self) -> Option<&str> {
        Some(&self.tool_use.tool_use_id)
    }
    /// An event for one finished tool call.
    #[inline]
    pub fn new(cx: InvocationContext, tool_use: ToolUse, result: ToolResult) -> Self {
        Self {
            result,
            retry: false,
            tool_use,
            selected_tool: None,
            cx,
            model_call_index: 0,
            answers: InterruptAnswers::default(),
            interrupts: Vec::new(),
            decisions: Vec::new(),
        }
    }

    /// Sets the tool that ran (`None` for an unknown tool).
    #[inline]
    pub fn with_selected_tool(mut self, tool: Option<ToolHandle>) -> Self {
        self.selected_tool = tool;
        self
    }

    /// The tool use that ran.
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// The tool that ran (`None` for an unknown tool).
    pub fn selected_tool(&self) -> Option<&ToolHandle> {
        self.selected_tool.as_ref()
    }

    /// A fingerprint of the result as it stands (with the call it answers): what a human
    /// approving it saw.
    pub fn result_fingerprint(&self) -> String {
        self.result.fingerprint(&self.tool_use)
    }
}

/// Fired when a message is appended to history.
#[derive(Debug)]
#[non_exhaustive]
pub struct MessageAddedEvent {
    id: MessageId,
    message: Message,
    cx: InvocationContext,
}

common_accessors!(MessageAddedEvent, EventKind::MessageAdded);

impl MessageAddedEvent {
    /// An event for a message just stored.
    pub fn new(cx: InvocationContext, id: MessageId, message: Message) -> Self {
        Self { id, message, cx }
    }
    /// The stored message's id.
    pub fn id(&self) -> MessageId {
        self.id
    }
    /// The message.
    pub fn message(&self) -> &Message {
        &self.message
    }
}

/// Fired when a stored message is rewritten (guidance joined to it, a transform committed).
#[derive(Debug)]
#[non_exhaustive]
pub struct MessageUpdatedEvent {
    id: MessageId,
    message: Message,
    cx: InvocationContext,
}

common_accessors!(MessageUpdatedEvent, EventKind::MessageUpdated);

impl MessageUpdatedEvent {
    /// An event for a message just rewritten.
    pub fn new(cx: InvocationContext, id: MessageId, message: Message) -> Self {
        Self { id, message, cx }
    }
    /// The message's id.
    pub fn id(&self) -> MessageId {
        self.id
    }
    /// The message as it now is.
    pub fn message(&self) -> &Message {
        &self.message
    }
}

/// Fired once when the invocation ends, with its real result (or error). Read-only.
#[derive(Debug)]
#[non_exhaustive]
pub struct AfterInvocationEvent {
    result: Result<AgentResult, Error>,
    cx: InvocationContext,
}

common_accessors!(AfterInvocationEvent, EventKind::AfterInvocation);

impl AfterInvocationEvent {
    /// An event for a finished invocation.
    pub fn new(cx: InvocationContext, result: Result<AgentResult, Error>) -> Self {
        Self { result, cx }
    }
    /// The result, or the error the invocation failed with.
    pub fn result(&self) -> Result<&AgentResult, &Error> {
        self.result.as_ref()
    }
    /// Gives the result back.
    pub fn into_result(self) -> Result<AgentResult, Error> {
        self.result
    }
}
