//! A ready-made human-in-the-loop handler: [`HumanApproval`].
//!
//! It asks a human before selected tools run — through a [`Confirm`] (durable: the invocation
//! stops with an interrupt, the pending interrupts are saved with the session, and any process
//! can resume with the answer) or through an inline callback (a terminal prompt, a channel to a
//! UI). The human may trust a tool for the rest of the session (answer `"always"`, or
//! `{"approved": true, "trust": true}`); that is remembered in the agent's state, which the
//! session store persists. An optional [`RiskClassifier`] lets low-risk calls through without
//! asking.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use rein_core::{
    ToolUse,
    audit::{EventKind, OnError},
    event::BeforeToolCallEvent,
    tool::BoxFuture,
};
use serde_json::{Value, json};

use crate::action::{BeforeToolCallAction, Confirm};
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::set::EventSet;

/// Which tools a selector list picks: `"*"` every tool, `"name"` that tool, `"!name"` not that
/// tool (an exclusion wins over any inclusion). A list of exclusions only picks every other
/// tool; an empty list picks none.
///
/// ```
/// use rein_interventions::approval::ToolSelector;
/// let s = ToolSelector::new(["*", "!read_file"]);
/// assert!(s.matches("delete_file"));
/// assert!(!s.matches("read_file"));
/// assert!(ToolSelector::new(["!search"]).matches("shell"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolSelector {
    all: bool,
    names: HashSet<String>,
    excluded: HashSet<String>,
}

impl ToolSelector {
    /// A selector from its list.
    pub fn new<S: AsRef<str>>(selectors: impl IntoIterator<Item = S>) -> Self {
        let mut s = Self::default();
        let mut positive = false;
        for sel in selectors {
            let sel = sel.as_ref().trim();
            if let Some(name) = sel.strip_prefix('!') {
                s.excluded.insert(name.to_owned());
            } else if sel == "*" {
                s.all = true;
                positive = true;
            } else {
                s.names.insert(sel.to_owned());
                positive = true;
            }
        }
        if !positive && !s.excluded.is_empty() {
            s.all = true;
        }
        s
    }

    /// Whether `tool` is picked.
    pub fn matches(&self, tool: &str) -> bool {
        !self.excluded.contains(tool) && (self.all || self.names.contains(tool))
    }
}

/// How risky a tool call is, as a [`RiskClassifier`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Risk {
    /// Let it run without asking.
    Low,
    /// Ask a human.
    High,
}

/// Decides whether a tool call needs a human. A sync closure `Fn(&ToolUse) -> Risk` is one;
/// `rein_agent::judge::ModelRiskClassifier` asks a model.
pub trait RiskClassifier: Send + Sync {
    /// Classifies one tool call. An error follows the handler's `on_error`.
    fn classify<'a>(
        &'a self,
        call: &'a ToolUse,
        cx: &'a InterventionContext,
    ) -> BoxFuture<'a, Result<Risk, HandlerError>>;
}

impl<F> RiskClassifier for F
where
    F: Fn(&ToolUse) -> Risk + Send + Sync,
{
    fn classify<'a>(
        &'a self,
        call: &'a ToolUse,
        _cx: &'a InterventionContext,
    ) -> BoxFuture<'a, Result<Risk, HandlerError>> {
        let risk = self(call);
        Box::pin(std::future::ready(Ok(risk)))
    }
}

/// What an inline callback is asked: the call and its readable prompt.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The tool's name.
    pub tool: String,
    /// The tool's input.
    pub input: Value,
    /// The tool-use id.
    pub tool_use_id: String,
    /// The prompt, with the arguments one per line (see [`HumanApproval`]).
    pub prompt: String,
}

/// An inline callback's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalAnswer {
    /// Run this call.
    Approve,
    /// Run this call, and every later call of this tool in this session without asking.
    Trust,
    /// Do not run it (`CONFIRMATION_FAILED: <prompt>`).
    Reject,
}

type Callback = dyn Fn(ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> + Send + Sync;

/// Asks a human before selected tools run.
///
/// For a selected tool (see [`ToolSelector`]) that the session does not trust and the risk
/// classifier (if any) does not call [`Risk::Low`], the handler returns a [`Confirm`] whose
/// prompt is a payload `{"prompt", "tool", "input", "tool_use_id", "answers"}`; its `prompt`
/// text reads
///
/// ```text
/// Allow delete_file?
///   force: true
///   path: report.txt
/// ```
///
/// (top-level input fields one per line in key order, strings without quotes, other values as compact
/// JSON, each cut at 200 characters). Answers: the usual ones (`true`, `"yes"`, `false`, an
/// [`Approval`](rein_core::interrupt::Approval) object), plus `"always"` or
/// `{"approved": true, "trust": true}` — approve, and trust the tool for the rest of the
/// session: it is added to the agent's state under `<name>:trusted` (persisted by the session
/// store) and not asked about again. With [`ask_with`](Self::ask_with), an async callback
/// answers at once instead (its answer is the confirm's pre-emptive answer, so the texts and
/// the audit are the same, with answer source `preemptive`).
///
/// ```
/// use rein_interventions::approval::HumanApproval;
/// use rein_interventions::testing::{self, ToolCall};
/// use rein_interventions::*;
///
/// let approval = HumanApproval::new("approval").tools(["*", "!read_file"]);
/// let out = testing::run([approval], ToolCall::new("delete_file", json!({"path": "a.txt"})).event());
/// assert_eq!(out.event.interrupts()[0].name, "approval");
/// assert_eq!(
///     out.decisions[0].text.as_deref(),
///     Some("Allow delete_file?\n  path: a.txt")
/// );
/// ```
#[derive(Clone)]
pub struct HumanApproval {
    name: String,
    on_error: OnError,
    mode: Mode,
    tools: ToolSelector,
    trust: bool,
    response: Option<Value>,
    callback: Option<Arc<Callback>>,
    classifier: Option<Arc<dyn RiskClassifier>>,
    trusted_key: String,
}

impl fmt::Debug for HumanApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanApproval")
            .field("name", &self.name)
            .field("tools", &self.tools)
            .field("trust", &self.trust)
            .field("callback", &self.callback.is_some())
            .field("classifier", &self.classifier.is_some())
            .finish_non_exhaustive()
    }
}

/// The answers that approve and trust.
fn trusts(answer: &Value) -> bool {
    match answer {
        Value::String(s) => {
            let s = s.trim();
            s.eq_ignore_ascii_case("always") || s.eq_ignore_ascii_case("a")
        }
        Value::Object(o) => {
            o.get("approved") == Some(&Value::Bool(true)) && o.get("trust") == Some(&json!(true))
        }
        _ => false,
    }
}

/// A value as one line: strings without quotes, the rest as compact JSON, cut at 200 chars.
fn readable(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut line: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .take(200)
        .collect();
    if text.chars().count() > 200 {
        line.push('…');
    }
    line
}

/// `Allow <tool>?` and the input's fields, one per line.
pub(crate) fn readable_prompt(call: &ToolUse) -> String {
    let mut prompt = format!("Allow {}?", call.name);
    match &call.input {
        Value::Object(o) => {
            // Sorted: the order of a JSON map depends on serde_json's features.
            let mut fields: Vec<_> = o.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in fields {
                prompt.push_str(&format!("\n  {k}: {}", readable(v)));
            }
        }
        Value::Null => {}
        other => prompt.push_str(&format!("\n  {}", readable(other))),
    }
    prompt
}

impl HumanApproval {
    /// A handler named `name` asking about every tool, through a durable [`Confirm`], with
    /// "trust for the session" on.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            trusted_key: format!("{name}:trusted"),
            name,
            on_error: OnError::Throw,
            mode: Mode::Enforce,
            tools: ToolSelector::new(["*"]),
            trust: true,
            response: None,
            callback: None,
            classifier: None,
        }
    }

    /// Which tools need approval (selectors, see [`ToolSelector`]; default `["*"]`).
    pub fn tools<S: AsRef<str>>(mut self, selectors: impl IntoIterator<Item = S>) -> Self {
        self.tools = ToolSelector::new(selectors);
        self
    }

    /// Whether "trust this tool for the session" answers are honoured (default true; off,
    /// `"always"` rejects like any other unknown answer, and an inline
    /// [`ApprovalAnswer::Trust`] approves this call only).
    pub fn trust(mut self, on: bool) -> Self {
        self.trust = on;
        self
    }

    /// A pre-emptive answer for every call (a batch job, a test).
    pub fn response(mut self, answer: impl Into<Value>) -> Self {
        self.response = Some(answer.into()).filter(|v: &Value| !v.is_null());
        self
    }

    /// Ask inline instead of through an interrupt: `ask` is awaited with the request, on the
    /// task running the agent (a terminal prompt, a message to a UI and a reply on a channel).
    pub fn ask_with<F, Fut>(mut self, ask: F) -> Self
    where
        F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApprovalAnswer> + Send + 'static,
    {
        self.callback = Some(Arc::new(move |req| Box::pin(ask(req))));
        self
    }

    /// Let calls the classifier rates [`Risk::Low`] run without asking.
    pub fn risk(mut self, classifier: impl RiskClassifier + 'static) -> Self {
        self.classifier = Some(Arc::new(classifier));
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

    /// Whether the session trusts `tool` (the agent's state holds it).
    pub fn is_trusted(&self, cx: &InterventionContext, tool: &str) -> bool {
        cx.agent_state()
            .get(&self.trusted_key)
            .is_some_and(|v| v.as_array().is_some_and(|a| a.iter().any(|t| t == tool)))
    }

    fn remember(&self, cx: &InterventionContext, tool: &str) {
        cx.agent_state().with(|map| {
            let list = map
                .entry(self.trusted_key.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if !list.is_array() {
                *list = Value::Array(Vec::new());
            }
            if let Value::Array(a) = list
                && !a.iter().any(|t| t == tool)
            {
                a.push(Value::String(tool.to_owned()));
            }
        });
    }

    fn confirm(&self, call: &ToolUse, prompt: String) -> Confirm {
        let answers = if self.trust {
            json!(["yes", "no", "always"])
        } else {
            json!(["yes", "no"])
        };
        let trust = self.trust;
        Confirm::new(json!({
            "prompt": prompt,
            "tool": call.name,
            "input": call.input,
            "tool_use_id": call.tool_use_id,
            "answers": answers,
        }))
        .with_evaluate(move |answer| Confirm::default_evaluate(answer) || (trust && trusts(answer)))
    }

    /// The decision when it needs no classifier and no callback (always so for the policy
    /// kind); `None` when it does.
    pub(crate) fn decide_now(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Option<BeforeToolCallAction> {
        let call = ev.tool_use();
        if !self.tools.matches(&call.name) || self.is_trusted(cx, &call.name) {
            return Some(BeforeToolCallAction::Proceed);
        }
        let confirm = self.confirm(call, readable_prompt(call));
        if let Some(answer) = &self.response {
            if self.trust && trusts(answer) {
                self.remember(cx, &call.name);
            }
            return Some(BeforeToolCallAction::Confirm(
                confirm.with_response(answer.clone()),
            ));
        }
        // The answer of a resume, bound to this very call, is the pass's to apply (its audit
        // says `resume`); the handler only looks whether it trusts the tool from now on.
        let id = EventKind::BeforeToolCall.interrupt_id(&call.tool_use_id, &self.name);
        if let Some(answer) = ev.answers().get_bound(&id, &call.fingerprint()) {
            if self.trust && trusts(answer) {
                self.remember(cx, &call.name);
            }
            return Some(BeforeToolCallAction::Confirm(confirm));
        }
        if self.callback.is_some() || self.classifier.is_some() {
            return None;
        }
        Some(BeforeToolCallAction::Confirm(confirm))
    }

    async fn decide(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        if let Some(action) = self.decide_now(ev, cx) {
            return Ok(action);
        }
        let call = ev.tool_use();
        if let Some(classifier) = &self.classifier
            && classifier.classify(call, cx).await? == Risk::Low
        {
            return Ok(BeforeToolCallAction::Proceed);
        }
        let prompt = readable_prompt(call);
        let confirm = self.confirm(call, prompt.clone());
        let Some(ask) = &self.callback else {
            return Ok(BeforeToolCallAction::Confirm(confirm));
        };
        let answer = ask(ApprovalRequest {
            tool: call.name.clone(),
            input: call.input.clone(),
            tool_use_id: call.tool_use_id.clone(),
            prompt,
        })
        .await;
        let value = match answer {
            ApprovalAnswer::Approve => json!(true),
            // With trust off, "trust" is only an approval of this call.
            ApprovalAnswer::Trust => {
                if self.trust {
                    self.remember(cx, &call.name);
                }
                json!(true)
            }
            ApprovalAnswer::Reject => json!(false),
        };
        Ok(BeforeToolCallAction::Confirm(confirm.with_response(value)))
    }
}

impl InterventionHandler for HumanApproval {
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
        EventSet::BEFORE_TOOL_CALL
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        self.decide(ev, cx).await
    }
}
