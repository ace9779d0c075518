//! Actions: what a handler decides, one type per lifecycle method (SPEC §3.2), and the edits a
//! `Transform` carries.

use std::fmt;

use rein_core::{
    Message, ToolResult, ToolUse,
    message::{ToolResultContent, ToolResultStatus},
    request::ModelRequest,
};
use serde_json::Value;

use crate::error::HandlerError;
use crate::list::for_each_intervention_event;

type EditFn<T> = Box<dyn FnOnce(&mut T) -> Result<(), HandlerError> + Send>;

/// An edit of the writable part of an event, applied by the registry when the handler returns.
///
/// The edit runs on a draft; only when it succeeds is the draft written back to the event, so a
/// failing (or panicking) edit leaves the event as it was and becomes a handler error. The edit
/// is staged: if the pass ends in a deny, a rejected confirmation, a guide that cancels or an
/// interrupt, it is undone.
///
/// `T` is the writable part: `Vec<Message>` (the input, on `before_invocation`),
/// [`ModelRequest`] (the request overlay, on `before_model_call`), [`Message`] (the response, on
/// `after_model_call`), `String` (the pending text, on `model_output`), [`ToolUseDraft`] (on
/// `before_tool_call`) or [`ToolResultDraft`] (on `after_tool_call`).
pub struct Transform<T> {
    edit: EditFn<T>,
}

impl<T> Transform<T> {
    /// A transform that cannot fail.
    pub fn new(edit: impl FnOnce(&mut T) + Send + 'static) -> Self {
        Self {
            edit: Box::new(move |t| {
                edit(t);
                Ok(())
            }),
        }
    }

    /// A transform whose edit may fail (the failure is a handler error).
    pub fn try_new(edit: impl FnOnce(&mut T) -> Result<(), HandlerError> + Send + 'static) -> Self {
        Self {
            edit: Box::new(edit),
        }
    }

    /// Runs the edit on `target`.
    pub fn apply(self, target: &mut T) -> Result<(), HandlerError> {
        (self.edit)(target)
    }
}

impl<T> fmt::Debug for Transform<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Transform(..)")
    }
}

/// The writable part of a tool use: its name and input (its id is read-only).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolUseDraft {
    /// The tool to call.
    pub name: String,
    /// The tool input.
    pub input: Value,
    tool_use_id: String,
}

impl ToolUseDraft {
    /// A draft of this tool use.
    pub fn from_tool_use(tool_use: &ToolUse) -> Self {
        Self {
            name: tool_use.name.clone(),
            input: tool_use.input.clone(),
            tool_use_id: tool_use.tool_use_id.clone(),
        }
    }

    /// The tool use's id.
    pub fn tool_use_id(&self) -> &str {
        &self.tool_use_id
    }
}

/// The writable part of a tool result: its status and content (its tool use id is read-only).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolResultDraft {
    /// Success or error.
    pub status: ToolResultStatus,
    /// The content.
    pub content: Vec<ToolResultContent>,
    tool_use_id: String,
}

impl ToolResultDraft {
    /// A draft of this result.
    pub fn from_result(result: &ToolResult) -> Self {
        Self {
            status: result.status,
            content: result.content.clone(),
            tool_use_id: result.tool_use_id.clone(),
        }
    }

    /// The id of the tool use the result answers.
    pub fn tool_use_id(&self) -> &str {
        &self.tool_use_id
    }

    /// Replaces the content with one text item.
    pub fn set_text(&mut self, text: impl Into<String>) {
        self.content = vec![ToolResultContent::Text(text.into())];
    }
}

type EvaluateFn = Box<dyn FnOnce(&Value) -> Result<bool, HandlerError> + Send>;

/// Ask a human before a tool runs (valid on `before_tool_call` only).
///
/// The prompt is what the human is asked: a string, or a structured payload for an approval UI
/// (any JSON). It becomes the interrupt's `reason` unchanged. Where a text is needed — the
/// `CONFIRMATION_FAILED: <prompt>` of a rejection and the audit record — the prompt's text is
/// used ([`prompt_text`](Self::prompt_text)): the string itself, or a payload's `"prompt"` (else
/// `"message"`) string field, or else the payload as compact JSON.
///
/// With a known response — the pre-emptive [`response`](Self::response) (which takes precedence),
/// or else the answer given on resume, if it was given for the same tool call fingerprint —
/// [`evaluate`](Self::with_evaluate) decides: approved lets the pass go on, rejected
/// cancels the call with `CONFIRMATION_FAILED: <prompt>`. Without one, the question is raised as
/// an interrupt at the end of the pass (unless a later handler denies or guides).
///
/// ```
/// use rein_interventions::{Confirm, json};
/// assert!(Confirm::default_evaluate(&json!("  Yes ")));
/// assert!(!Confirm::default_evaluate(&json!(1)));
/// let c = Confirm::new("Delete /tmp?").with_response(false);
/// assert_eq!(c.response, Some(json!(false)));
///
/// // A payload for an approval UI: the interrupt's reason is the whole object.
/// let path = "report.txt";
/// let c = Confirm::new(json!({"prompt": format!("Delete {path}?"), "path": path, "risk": "high"}));
/// assert_eq!(c.prompt["risk"], "high");
/// assert_eq!(c.prompt_text(), "Delete report.txt?");
/// ```
#[non_exhaustive]
pub struct Confirm {
    /// What the human is asked: a string or a structured payload (the interrupt's reason,
    /// unchanged).
    pub prompt: Value,
    /// A response known in advance; `None` or `null` means no answer yet.
    pub response: Option<Value>,
    evaluate: Option<EvaluateFn>,
}

impl Confirm {
    /// A confirmation with this prompt (a string, or any JSON payload for an approval UI), no
    /// known response and the default evaluation.
    pub fn new(prompt: impl Into<Value>) -> Self {
        Self {
            prompt: prompt.into(),
            response: None,
            evaluate: None,
        }
    }

    /// The prompt as text (for `CONFIRMATION_FAILED: <prompt>` and the audit): a string prompt
    /// itself; for a payload, its `"prompt"` string field, else its `"message"` string field,
    /// else the payload as compact JSON.
    ///
    /// ```
    /// use rein_interventions::{Confirm, json};
    /// assert_eq!(Confirm::new("Delete a?").prompt_text(), "Delete a?");
    /// assert_eq!(Confirm::new(json!({"message": "Send it?", "to": "ann"})).prompt_text(), "Send it?");
    /// assert_eq!(Confirm::new(json!({"amount": 5})).prompt_text(), r#"{"amount":5}"#);
    /// ```
    pub fn prompt_text(&self) -> String {
        prompt_text(&self.prompt)
    }

    /// A response known in advance (`false` is a real "no"; `null` is no answer).
    pub fn with_response(mut self, response: impl Into<Value>) -> Self {
        self.response = Some(response.into());
        self
    }

    /// How a response is judged (instead of [`Confirm::default_evaluate`]).
    pub fn with_evaluate(mut self, evaluate: impl FnOnce(&Value) -> bool + Send + 'static) -> Self {
        self.evaluate = Some(Box::new(move |v| Ok(evaluate(v))));
        self
    }

    /// How a response is judged, where judging may fail (a handler error).
    pub fn with_try_evaluate(
        mut self,
        evaluate: impl FnOnce(&Value) -> Result<bool, HandlerError> + Send + 'static,
    ) -> Self {
        self.evaluate = Some(Box::new(evaluate));
        self
    }

    /// Whether a custom evaluation is set.
    pub fn has_custom_evaluate(&self) -> bool {
        self.evaluate.is_some()
    }

    /// Judges `response` with the custom evaluation, or the default rule.
    pub fn evaluate(&mut self, response: &Value) -> Result<bool, HandlerError> {
        match self.evaluate.take() {
            Some(f) => f(response),
            None => Ok(Self::default_evaluate(response)),
        }
    }

    /// The default rule: `true`, a string that trimmed and lower-cased is `y` or `yes`, or an
    /// [`Approval`](rein_core::interrupt::Approval) object with `"approved": true`. Anything
    /// else (`false`, `""`, numbers, `"no"`, other objects, `null`) rejects.
    pub fn default_evaluate(response: &Value) -> bool {
        rein_core::interrupt::Approval::from_answer(response).is_some_and(|a| a.approved)
    }
}

impl fmt::Debug for Confirm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirm")
            .field("prompt", &self.prompt)
            .field("response", &self.response)
            .field("custom_evaluate", &self.evaluate.is_some())
            .finish()
    }
}

/// The text of a confirm's prompt (see [`Confirm::prompt_text`]).
pub(crate) use rein_core::interrupt::prompt_text;

/// The action types' shared internal form.
pub(crate) enum ActionVerdict<D> {
    Proceed,
    Deny(String),
    Guide(String),
    Confirm(Confirm),
    Transform(Transform<D>),
}

/// An action type, as the dispatch pass reads it: only through its verdict, so what the pass
/// asks of an action (is it a deny, to cancel a parallel group early?) is asked of the verdict
/// and holds for every action type alike.
pub(crate) trait IntoVerdict {
    /// The writable part of its event.
    type Draft: Send;
    fn into_verdict(self) -> ActionVerdict<Self::Draft>;
}

macro_rules! common_constructors {
    ($ty:ident, $draft:ty) => {
        impl Default for $ty {
            fn default() -> Self {
                Self::Proceed
            }
        }

        impl $ty {
            /// A transform of the writable part of the event.
            pub fn transform(edit: impl FnOnce(&mut $draft) + Send + 'static) -> Self {
                Self::Transform(Transform::new(edit))
            }

            /// A transform whose edit may fail (the failure is a handler error).
            pub fn try_transform(
                edit: impl FnOnce(&mut $draft) -> Result<(), HandlerError> + Send + 'static,
            ) -> Self {
                Self::Transform(Transform::try_new(edit))
            }

            /// Whether this is `Proceed`.
            pub fn is_proceed(&self) -> bool {
                matches!(self, Self::Proceed)
            }
        }

        impl From<Transform<$draft>> for $ty {
            fn from(t: Transform<$draft>) -> Self {
                Self::Transform(t)
            }
        }
    };
}

macro_rules! deny_constructor {
    ($ty:ident) => {
        impl $ty {
            /// A deny: the event is cancelled with `DENIED: <reason>` and later handlers do not
            /// run.
            pub fn deny(reason: impl Into<String>) -> Self {
                Self::Deny {
                    reason: reason.into(),
                }
            }
        }
    };
}

macro_rules! guide_constructor {
    ($ty:ident, $doc:literal) => {
        impl $ty {
            #[doc = $doc]
            pub fn guide(feedback: impl Into<String>) -> Self {
                Self::Guide {
                    feedback: feedback.into(),
                }
            }
        }
    };
}

macro_rules! confirm_constructor {
    ($ty:ident, $what:literal) => {
        impl $ty {
            #[doc = concat!(
                "Ask a human about ", $what, " with this prompt — a string or a structured ",
                "payload (default evaluation, no response known yet)."
            )]
            pub fn confirm(prompt: impl Into<Value>) -> Self {
                Self::Confirm(Confirm::new(prompt))
            }
        }

        impl From<Confirm> for $ty {
            fn from(c: Confirm) -> Self {
                Self::Confirm(c)
            }
        }
    };
}

/// What a `before_invocation` handler decides about the new input (or an injected message).
#[derive(Debug)]
#[non_exhaustive]
pub enum BeforeInvocationAction {
    /// Let it through.
    Proceed,
    /// Cancel the invocation (or reject the injected message) with `DENIED: <reason>`.
    Deny {
        /// Why.
        reason: String,
    },
    /// Cancel with `GUIDANCE: <joined feedback>` (after the pass, unless something denied).
    Guide {
        /// The feedback.
        feedback: String,
    },
    /// Ask a human before the input is admitted: an invocation's input is held (not stored;
    /// the invocation stops with `Interrupt`); an injected message is parked while the run
    /// goes on. Approved, it goes on; rejected, it is refused with
    /// `CONFIRMATION_FAILED: <prompt>`.
    Confirm(Confirm),
    /// Rewrite the input messages.
    Transform(Transform<Vec<Message>>),
}

common_constructors!(BeforeInvocationAction, Vec<Message>);
confirm_constructor!(BeforeInvocationAction, "the input");
deny_constructor!(BeforeInvocationAction);
guide_constructor!(
    BeforeInvocationAction,
    "Guidance: the invocation is cancelled with `GUIDANCE: <joined feedback>`."
);

/// What a `before_model_call` handler decides about the call.
#[derive(Debug)]
#[non_exhaustive]
pub enum BeforeModelCallAction {
    /// Let it through.
    Proceed,
    /// Cancel the call with `DENIED: <reason>`.
    Deny {
        /// Why.
        reason: String,
    },
    /// Inject the feedback as guidance (stored as user text and sent on this call).
    Guide {
        /// The feedback.
        feedback: String,
    },
    /// Ask a human before the request is sent: the invocation stops with `Interrupt`;
    /// approved, the call is made; rejected, it is cancelled with
    /// `CONFIRMATION_FAILED: <prompt>`.
    Confirm(Confirm),
    /// Rewrite the request overlay of this one call (never stored history).
    Transform(Transform<ModelRequest>),
}

common_constructors!(BeforeModelCallAction, ModelRequest);
confirm_constructor!(BeforeModelCallAction, "sending the request");
deny_constructor!(BeforeModelCallAction);
guide_constructor!(
    BeforeModelCallAction,
    "Guidance injected into history and into this call's request."
);

/// What an `after_model_call` handler decides about the response.
#[derive(Debug)]
#[non_exhaustive]
pub enum AfterModelCallAction {
    /// Accept it.
    Proceed,
    /// Discard the response, inject the feedback as guidance, and call the model again.
    Guide {
        /// The feedback.
        feedback: String,
    },
    /// Ask a human before the response is stored or acted on: it is held (its tool uses do not
    /// run); approved, it goes on; rejected, it is withheld like a deny with
    /// `CONFIRMATION_FAILED: <prompt>`.
    Confirm(Confirm),
    /// Rewrite the response message.
    Transform(Transform<Message>),
}

common_constructors!(AfterModelCallAction, Message);
guide_constructor!(
    AfterModelCallAction,
    "Guidance: the response is discarded, the feedback injected, and the model called again."
);

confirm_constructor!(AfterModelCallAction, "the response");

/// What a `model_output` handler decides about the pending text of a streamed response.
#[derive(Debug)]
#[non_exhaustive]
pub enum ModelOutputAction {
    /// Let it through (it is released, but the hold-back window).
    Proceed,
    /// Stop the stream at once and withhold the response: `DENIED: <reason>` is stored in its
    /// place and the turn ends; nothing pending is released.
    Deny {
        /// Why.
        reason: String,
    },
    /// Rewrite the pending text (what is not yet released).
    Transform(Transform<String>),
}

common_constructors!(ModelOutputAction, String);
deny_constructor!(ModelOutputAction);

/// What a `before_tool_call` handler decides about the call.
#[derive(Debug)]
#[non_exhaustive]
pub enum BeforeToolCallAction {
    /// Let it run.
    Proceed,
    /// Cancel the call with `DENIED: <reason>`.
    Deny {
        /// Why.
        reason: String,
    },
    /// Cancel the call with `GUIDANCE: <joined feedback>` (after the pass, unless something
    /// denied).
    Guide {
        /// The feedback.
        feedback: String,
    },
    /// Ask a human first.
    Confirm(Confirm),
    /// Rewrite the tool use (name, input).
    Transform(Transform<ToolUseDraft>),
}

common_constructors!(BeforeToolCallAction, ToolUseDraft);
deny_constructor!(BeforeToolCallAction);
guide_constructor!(
    BeforeToolCallAction,
    "Guidance: the call is cancelled with `GUIDANCE: <joined feedback>`."
);

confirm_constructor!(BeforeToolCallAction, "the tool call");

/// What an `after_tool_call` handler decides about the result.
#[derive(Debug)]
#[non_exhaustive]
pub enum AfterToolCallAction {
    /// Accept it.
    Proceed,
    /// Ask a human before the model sees the result: the result is held (the tool never runs
    /// again); approved, it goes on; rejected, it becomes the error result
    /// `CONFIRMATION_FAILED: <prompt>`.
    Confirm(Confirm),
    /// Rewrite the result.
    Transform(Transform<ToolResultDraft>),
}

common_constructors!(AfterToolCallAction, ToolResultDraft);

confirm_constructor!(AfterToolCallAction, "the result");

/// What a closure handler may return: the action itself, or `Result<action, E>` with any error
/// that converts into a [`HandlerError`].
pub trait IntoHandlerResult<A> {
    /// Converts into the handler's result.
    fn into_handler_result(self) -> Result<A, HandlerError>;
}

macro_rules! into_handler_result {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {$(
        impl IntoHandlerResult<$action> for $action {
            #[inline]
            fn into_handler_result(self) -> Result<$action, HandlerError> {
                Ok(self)
            }
        }

        impl<E: Into<HandlerError>> IntoHandlerResult<$action> for Result<$action, E> {
            #[inline]
            fn into_handler_result(self) -> Result<$action, HandlerError> {
                self.map_err(Into::into)
            }
        }
    )*};
}

for_each_intervention_event!(into_handler_result);

impl IntoVerdict for BeforeInvocationAction {
    type Draft = Vec<Message>;

    fn into_verdict(self) -> ActionVerdict<Vec<Message>> {
        match self {
            Self::Proceed => ActionVerdict::Proceed,
            Self::Deny { reason } => ActionVerdict::Deny(reason),
            Self::Guide { feedback } => ActionVerdict::Guide(feedback),
            Self::Confirm(c) => ActionVerdict::Confirm(c),
            Self::Transform(t) => ActionVerdict::Transform(t),
        }
    }
}

impl IntoVerdict for BeforeModelCallAction {
    type Draft = ModelRequest;

    fn into_verdict(self) -> ActionVerdict<ModelRequest> {
        match self {
            Self::Proceed => ActionVerdict::Proceed,
            Self::Deny { reason } => ActionVerdict::Deny(reason),
            Self::Guide { feedback } => ActionVerdict::Guide(feedback),
            Self::Confirm(c) => ActionVerdict::Confirm(c),
            Self::Transform(t) => ActionVerdict::Transform(t),
        }
    }
}

impl IntoVerdict for AfterModelCallAction {
    type Draft = Message;

    fn into_verdict(self) -> ActionVerdict<Message> {
        match self {
            Self::Proceed => ActionVerdict::Proceed,
            Self::Guide { feedback } => ActionVerdict::Guide(feedback),
            Self::Confirm(c) => ActionVerdict::Confirm(c),
            Self::Transform(t) => ActionVerdict::Transform(t),
        }
    }
}

impl IntoVerdict for ModelOutputAction {
    type Draft = String;

    fn into_verdict(self) -> ActionVerdict<String> {
        match self {
            Self::Proceed => ActionVerdict::Proceed,
            Self::Deny { reason } => ActionVerdict::Deny(reason),
            Self::Transform(t) => ActionVerdict::Transform(t),
        }
    }
}

impl IntoVerdict for BeforeToolCallAction {
    type Draft = ToolUseDraft;

    fn into_verdict(self) -> ActionVerdict<ToolUseDraft> {
        match self {
            Self::Proceed => ActionVerdict::Proceed,
            Self::Deny { reason } => ActionVerdict::Deny(reason),
            Self::Guide { feedback } => ActionVerdict::Guide(feedback),
            Self::Confirm(c) => ActionVerdict::Confirm(c),
            Self::Transform(t) => ActionVerdict::Transform(t),
        }
    }
}

impl IntoVerdict for AfterToolCallAction {
    type Draft = ToolResultDraft;

    fn into_verdict(self) -> ActionVerdict<ToolResultDraft> {
        match self {
            Self::Proceed => ActionVerdict::Proceed,
            Self::Confirm(c) => ActionVerdict::Confirm(c),
            Self::Transform(t) => ActionVerdict::Transform(t),
        }
    }
}
