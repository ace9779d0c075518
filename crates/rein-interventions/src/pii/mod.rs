//! Ready-made PII detection and redaction (feature `pii`).
//!
//! [`PiiGuard`] is an intervention handler that finds personal data — e-mail addresses, phone
//! numbers, payment cards (Luhn-checked), IBANs (mod-97-checked), US SSNs, IP addresses and
//! API-key shapes — in what enters and leaves the agent, and per kind redacts it with a typed
//! placeholder (`[EMAIL]`), denies, or guides. [`PiiDetector`] is the detector alone.
//!
//! ```
//! use rein_interventions::pii::{PiiAction, PiiGuard, PiiKind, PiiTarget};
//! use rein_interventions::testing::{self, ToolCall};
//! use rein_interventions::*;
//!
//! let guard = PiiGuard::new("pii")
//!     .action(PiiKind::CreditCard, PiiAction::Deny)
//!     .targets([PiiTarget::ToolInput, PiiTarget::ToolResult]);
//! let call = ToolCall::new("send_email", json!({"body": "ann@example.com, 4111 1111 1111 1111"}));
//! let out = testing::run([guard], call.event());
//! assert_eq!(
//!     out.event.cancel_tool,
//!     Cancel::Message("DENIED: personal data in tool input: credit_card".into())
//! );
//! ```

mod detect;

use std::collections::HashSet;

use rein_core::{
    ContentBlock, Message,
    audit::OnError,
    event::{
        AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
        BeforeToolCallEvent, ModelOutputEvent,
    },
    message::{ToolResultContent, ToolResultStatus},
};
use serde_json::Value;

pub use detect::{PiiDetector, PiiKind, PiiMatch};

use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, ModelOutputAction,
};
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::set::EventSet;

/// What a [`PiiGuard`] does with one kind of personal data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
#[cfg_attr(feature = "policy", derive(serde::Deserialize))]
#[cfg_attr(feature = "policy", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PiiAction {
    /// Replace it with the kind's placeholder (`[EMAIL]`) and go on.
    #[default]
    Redact,
    /// Guide: the input, the tool call or the response is refused with feedback asking for it
    /// without the data.
    Guide,
    /// Deny: the input or the tool call is refused, the tool result becomes an error, the
    /// response's text is replaced, a stream is stopped.
    Deny,
}

/// Where a [`PiiGuard`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "policy", derive(serde::Deserialize))]
#[cfg_attr(feature = "policy", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PiiTarget {
    /// The new input and injected messages (`before_invocation`).
    Prompt,
    /// What one model call sends: system prompt and messages (`before_model_call`; the stored
    /// history is not touched).
    ModelRequest,
    /// A tool call's input, every string at any depth (`before_tool_call`).
    ToolInput,
    /// A tool's result, text and JSON (`after_tool_call`).
    ToolResult,
    /// The text of the model's response (`after_model_call`).
    ModelOutput,
    /// The model's text as it streams, before the caller sees it (`model_output`, SPEC §3.9).
    Stream,
}

impl PiiTarget {
    fn events(self) -> EventSet {
        match self {
            PiiTarget::Prompt => EventSet::BEFORE_INVOCATION,
            PiiTarget::ModelRequest => EventSet::BEFORE_MODEL_CALL,
            PiiTarget::ToolInput => EventSet::BEFORE_TOOL_CALL,
            PiiTarget::ToolResult => EventSet::AFTER_TOOL_CALL,
            PiiTarget::ModelOutput => EventSet::AFTER_MODEL_CALL,
            PiiTarget::Stream => EventSet::MODEL_OUTPUT,
        }
    }

    /// How a reason names the target.
    fn place(self) -> &'static str {
        match self {
            PiiTarget::Prompt => "input",
            PiiTarget::ModelRequest => "model request",
            PiiTarget::ToolInput => "tool input",
            PiiTarget::ToolResult => "tool result",
            PiiTarget::ModelOutput | PiiTarget::Stream => "model output",
        }
    }
}

/// An intervention handler that finds personal data and, per kind, redacts it, denies or guides.
///
/// Defaults: every [`PiiKind`], [`PiiAction::Redact`], targets prompt, tool input, tool result
/// and model output (the stream is opt-in, as every stream guard: it holds text back), every
/// tool. When a text holds several kinds the strongest action wins (deny > guide > redact), and
/// a redaction replaces every match, whatever its kind's action.
///
/// Texts (SPEC §3.11): a deny's reason is `personal data in <place>: <kinds>` and a guide's
/// feedback `remove personal data from the <place> (<kinds>)`, where `<place>` is `input`,
/// `model request`, `tool input`, `tool result` or `model output` and `<kinds>` the names of
/// the kinds found whose action decided, comma-separated, in [`PiiKind`] order.
///
/// ```
/// use rein_interventions::pii::{PiiGuard, PiiTarget};
/// use rein_interventions::testing::{self, ToolCall};
/// use rein_interventions::*;
///
/// let guard = PiiGuard::new("pii");
/// let call = ToolCall::new("lookup", json!({}));
/// let out = testing::run([guard], call.returned("Ann: +44 20 7946 0958"));
/// assert_eq!(out.event.result.text(), "Ann: [PHONE]");
/// ```
#[derive(Debug, Clone)]
pub struct PiiGuard {
    name: String,
    on_error: OnError,
    mode: Mode,
    detector: PiiDetector,
    actions: [PiiAction; 7],
    targets: Vec<PiiTarget>,
    events: EventSet,
    tools: Option<HashSet<String>>,
}

impl PiiGuard {
    /// A guard named `name` with the defaults above.
    pub fn new(name: impl Into<String>) -> Self {
        let targets = vec![
            PiiTarget::Prompt,
            PiiTarget::ToolInput,
            PiiTarget::ToolResult,
            PiiTarget::ModelOutput,
        ];
        let events = targets.iter().fold(EventSet::NONE, |s, t| s | t.events());
        Self {
            name: name.into(),
            on_error: OnError::Throw,
            mode: Mode::Enforce,
            detector: PiiDetector::new(),
            actions: [PiiAction::Redact; 7],
            targets,
            events,
            tools: None,
        }
    }

    /// Looks for these kinds only.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = PiiKind>) -> Self {
        self.detector = PiiDetector::only(kinds);
        self
    }

    /// What to do with `kind` (default [`PiiAction::Redact`]).
    pub fn action(mut self, kind: PiiKind, action: PiiAction) -> Self {
        self.actions[kind as usize] = action;
        self
    }

    /// What to do with every kind not given its own [`action`](Self::action) afterwards.
    pub fn default_action(mut self, action: PiiAction) -> Self {
        self.actions = [action; 7];
        self
    }

    /// Where to look (replaces the default list).
    pub fn targets(mut self, targets: impl IntoIterator<Item = PiiTarget>) -> Self {
        self.targets = targets.into_iter().collect();
        self.events = self
            .targets
            .iter()
            .fold(EventSet::NONE, |s, t| s | t.events());
        self
    }

    /// Only the inputs and results of these tools (`*` = every tool, the default).
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        let tools: HashSet<String> = tools.into_iter().map(Into::into).collect();
        self.tools = (!tools.contains("*")).then_some(tools);
        self
    }

    /// Sets what the handler's errors do (default [`OnError::Throw`]).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Sets the mode (default [`Mode::Enforce`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The detector this guard uses.
    pub fn detector(&self) -> &PiiDetector {
        &self.detector
    }

    fn applies_to(&self, tool: &str) -> bool {
        self.tools.as_ref().is_none_or(|t| t.contains(tool))
    }

    /// What to do about the kinds found: `None` when nothing was found.
    fn verdict(&self, found: &Found, target: PiiTarget) -> Option<ActionVerdict> {
        let action = found
            .kinds
            .iter()
            .map(|k| self.actions[*k as usize])
            .max()?;
        // The kinds that decided: a deny names what was denied, not what would be redacted.
        let kinds = found
            .kinds
            .iter()
            .filter(|k| self.actions[**k as usize] == action)
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ");
        Some(match action {
            PiiAction::Redact => ActionVerdict::Redact,
            PiiAction::Deny => {
                ActionVerdict::Deny(format!("personal data in {}: {kinds}", target.place()))
            }
            PiiAction::Guide => ActionVerdict::Guide(format!(
                "remove personal data from the {} ({kinds})",
                target.place()
            )),
        })
    }

    fn scan_blocks(&self, blocks: &[ContentBlock], found: &mut Found) {
        for b in blocks {
            match b {
                ContentBlock::Text(t) => found.text(&self.detector, t),
                ContentBlock::ToolUse(u) => found.value(&self.detector, &u.input),
                ContentBlock::ToolResult(r) => found.result(&self.detector, &r.content),
                _ => {}
            }
        }
    }

    pub(crate) fn decide_before_invocation(
        &self,
        ev: &BeforeInvocationEvent,
    ) -> BeforeInvocationAction {
        let mut found = Found::default();
        for m in &ev.messages {
            self.scan_blocks(&m.content, &mut found);
        }
        match self.verdict(&found, PiiTarget::Prompt) {
            None => BeforeInvocationAction::Proceed,
            Some(ActionVerdict::Deny(r)) => BeforeInvocationAction::deny(r),
            Some(ActionVerdict::Guide(f)) => BeforeInvocationAction::guide(f),
            Some(ActionVerdict::Redact) => {
                let d = self.detector;
                BeforeInvocationAction::transform(move |messages: &mut Vec<Message>| {
                    for m in messages {
                        redact_blocks(&d, &mut m.content);
                    }
                })
            }
        }
    }

    pub(crate) fn decide_before_model_call(
        &self,
        ev: &BeforeModelCallEvent,
    ) -> BeforeModelCallAction {
        let mut found = Found::default();
        if let Some(s) = ev.request.system_prompt.as_deref() {
            found.text(&self.detector, s);
        }
        for m in ev.request.messages.iter() {
            self.scan_blocks(&m.content, &mut found);
        }
        match self.verdict(&found, PiiTarget::ModelRequest) {
            None => BeforeModelCallAction::Proceed,
            Some(ActionVerdict::Deny(r)) => BeforeModelCallAction::deny(r),
            Some(ActionVerdict::Guide(f)) => BeforeModelCallAction::guide(f),
            Some(ActionVerdict::Redact) => {
                let d = self.detector;
                BeforeModelCallAction::transform(move |request| {
                    if let Some(s) = request.system_prompt.as_deref()
                        && let std::borrow::Cow::Owned(new) = d.redact(s)
                    {
                        request.system_prompt = Some(new.into());
                    }
                    for m in request.messages_mut() {
                        redact_blocks(&d, &mut m.content);
                    }
                })
            }
        }
    }

    pub(crate) fn decide_before_tool_call(&self, ev: &BeforeToolCallEvent) -> BeforeToolCallAction {
        let call = ev.tool_use();
        if !self.applies_to(&call.name) {
            return BeforeToolCallAction::Proceed;
        }
        let mut found = Found::default();
        found.value(&self.detector, &call.input);
        match self.verdict(&found, PiiTarget::ToolInput) {
            None => BeforeToolCallAction::Proceed,
            Some(ActionVerdict::Deny(r)) => BeforeToolCallAction::deny(r),
            Some(ActionVerdict::Guide(f)) => BeforeToolCallAction::guide(f),
            Some(ActionVerdict::Redact) => {
                let d = self.detector;
                BeforeToolCallAction::transform(move |draft| redact_value(&d, &mut draft.input))
            }
        }
    }

    pub(crate) fn decide_after_tool_call(&self, ev: &AfterToolCallEvent) -> AfterToolCallAction {
        if !self.applies_to(&ev.tool_use().name) {
            return AfterToolCallAction::Proceed;
        }
        let mut found = Found::default();
        found.result(&self.detector, &ev.result.content);
        // A result cannot be denied or guided (the tool has run): it becomes an error result
        // with the text the model would have got for a denied or guided call.
        let error = match self.verdict(&found, PiiTarget::ToolResult) {
            None => return AfterToolCallAction::Proceed,
            Some(ActionVerdict::Redact) => {
                let d = self.detector;
                return AfterToolCallAction::transform(move |draft| {
                    redact_result(&d, &mut draft.content);
                });
            }
            Some(ActionVerdict::Deny(r)) => format!("DENIED: {r}"),
            Some(ActionVerdict::Guide(f)) => format!("GUIDANCE: [{}] {f}", self.name),
        };
        AfterToolCallAction::transform(move |draft| {
            draft.status = ToolResultStatus::Error;
            draft.content = vec![ToolResultContent::Text(error)];
        })
    }

    pub(crate) fn decide_after_model_call(&self, ev: &AfterModelCallEvent) -> AfterModelCallAction {
        let Some(response) = ev.response() else {
            return AfterModelCallAction::Proceed;
        };
        // The text the model wrote; its tool uses' inputs are the tool-input target's.
        let mut found = Found::default();
        for b in &response.message.content {
            if let ContentBlock::Text(t) = b {
                found.text(&self.detector, t);
            }
        }
        match self.verdict(&found, PiiTarget::ModelOutput) {
            None => AfterModelCallAction::Proceed,
            Some(ActionVerdict::Guide(f)) => AfterModelCallAction::guide(f),
            Some(ActionVerdict::Redact) => {
                let d = self.detector;
                AfterModelCallAction::transform(move |m: &mut Message| {
                    for b in &mut m.content {
                        if let ContentBlock::Text(t) = b {
                            redact_string(&d, t);
                        }
                    }
                })
            }
            // A response cannot be denied after the fact: its text is replaced by the denial
            // (tool uses stay; their inputs are checked before they run).
            Some(ActionVerdict::Deny(r)) => {
                AfterModelCallAction::transform(move |m: &mut Message| {
                    let mut replaced = false;
                    m.content.retain_mut(|b| match b {
                        ContentBlock::Text(t) if !replaced => {
                            replaced = true;
                            *t = format!("DENIED: {r}");
                            true
                        }
                        ContentBlock::Text(_) => false,
                        _ => true,
                    });
                })
            }
        }
    }

    pub(crate) fn decide_model_output(&self, ev: &ModelOutputEvent) -> ModelOutputAction {
        let mut matches = self.detector.find(&ev.pending);
        if !ev.is_final() {
            // A match touching the end of the pending text may grow with the next delta (an
            // address whose domain is still streaming): it is still in the hold-back window,
            // so it is decided on the next pass, whole.
            matches.retain(|m| m.end < ev.pending.len());
        }
        let mut found = Found::default();
        found.kinds.extend(matches.iter().map(|m| m.kind));
        match self.verdict(&found, PiiTarget::Stream) {
            None => ModelOutputAction::Proceed,
            Some(ActionVerdict::Deny(r)) => ModelOutputAction::deny(r),
            // A stream cannot be guided: what would be guided is redacted before it is shown.
            Some(ActionVerdict::Redact | ActionVerdict::Guide(_)) => {
                ModelOutputAction::transform(move |pending: &mut String| {
                    if let std::borrow::Cow::Owned(new) = detect::redact_matches(pending, &matches)
                    {
                        *pending = new;
                    }
                })
            }
        }
    }
}

enum ActionVerdict {
    Redact,
    Deny(String),
    Guide(String),
}

/// The kinds found, in [`PiiKind`] order, each once.
#[derive(Default)]
struct Found {
    kinds: std::collections::BTreeSet<PiiKind>,
}

impl Found {
    fn text(&mut self, d: &PiiDetector, text: &str) {
        self.kinds.extend(d.find(text).iter().map(|m| m.kind));
    }

    fn value(&mut self, d: &PiiDetector, v: &Value) {
        match v {
            Value::String(s) => self.text(d, s),
            Value::Array(a) => a.iter().for_each(|v| self.value(d, v)),
            Value::Object(o) => o.values().for_each(|v| self.value(d, v)),
            _ => {}
        }
    }

    fn result(&mut self, d: &PiiDetector, content: &[ToolResultContent]) {
        for c in content {
            match c {
                ToolResultContent::Text(t) => self.text(d, t),
                ToolResultContent::Json(v) => self.value(d, v),
                _ => {}
            }
        }
    }
}

fn redact_string(d: &PiiDetector, s: &mut String) {
    if let std::borrow::Cow::Owned(new) = d.redact(s) {
        *s = new;
    }
}

fn redact_value(d: &PiiDetector, v: &mut Value) {
    match v {
        Value::String(s) => redact_string(d, s),
        Value::Array(a) => a.iter_mut().for_each(|v| redact_value(d, v)),
        Value::Object(o) => o.values_mut().for_each(|v| redact_value(d, v)),
        _ => {}
    }
}

fn redact_result(d: &PiiDetector, content: &mut [ToolResultContent]) {
    for c in content {
        match c {
            ToolResultContent::Text(t) => redact_string(d, t),
            ToolResultContent::Json(v) => redact_value(d, v),
            _ => {}
        }
    }
}

fn redact_blocks(d: &PiiDetector, blocks: &mut [ContentBlock]) {
    for b in blocks {
        match b {
            ContentBlock::Text(t) => redact_string(d, t),
            ContentBlock::ToolUse(u) => redact_value(d, &mut u.input),
            ContentBlock::ToolResult(r) => redact_result(d, &mut r.content),
            _ => {}
        }
    }
}

impl InterventionHandler for PiiGuard {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_error(&self) -> OnError {
        self.on_error
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn subscriptions(&self) -> EventSet {
        self.events
    }

    async fn before_invocation(
        &self,
        ev: &BeforeInvocationEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeInvocationAction, HandlerError> {
        Ok(self.decide_before_invocation(ev))
    }

    async fn before_model_call(
        &self,
        ev: &BeforeModelCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeModelCallAction, HandlerError> {
        Ok(self.decide_before_model_call(ev))
    }

    async fn after_model_call(
        &self,
        ev: &AfterModelCallEvent,
        _cx: &InterventionContext,
    ) -> Result<AfterModelCallAction, HandlerError> {
        Ok(self.decide_after_model_call(ev))
    }

    async fn model_output(
        &self,
        ev: &ModelOutputEvent,
        _cx: &InterventionContext,
    ) -> Result<ModelOutputAction, HandlerError> {
        Ok(self.decide_model_output(ev))
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        Ok(self.decide_before_tool_call(ev))
    }

    async fn after_tool_call(
        &self,
        ev: &AfterToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<AfterToolCallAction, HandlerError> {
        Ok(self.decide_after_tool_call(ev))
    }
}
