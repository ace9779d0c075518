//! An LLM judge: any [`Model`](rein_models::Model) judges tool calls (proceed / guide / confirm)
//! and, optionally, responses (proceed / guide) — [`LlmJudge`]; and a model as a
//! [`RiskClassifier`] for [`HumanApproval`](rein_interventions::approval::HumanApproval) —
//! [`ModelRiskClassifier`].
//!
//! It lives here, not in `rein-interventions`, because it needs `rein-models`. Its model calls
//! are its own: they never go through the agent's hooks or interventions.

use std::sync::Arc;

use futures_util::StreamExt as _;
use rein_core::{
    Message, ToolUse,
    audit::{EventKind, OnError},
    event::{AfterModelCallEvent, AfterToolCallEvent, BeforeToolCallEvent},
    request::ModelRequest,
    stream::{StreamAssembler, Usage},
    tool::BoxFuture,
};
use rein_interventions::approval::{Risk, RiskClassifier};
use rein_interventions::{
    AfterModelCallAction, AfterToolCallAction, BeforeToolCallAction, Confirm, EventSet,
    HandlerError, InterventionContext, InterventionHandler, Mode,
};
use rein_models::SharedModel;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The default template for a tool call. Placeholders: `{criteria}`, `{tool}`, `{input}`,
/// `{ledger}`.
pub const DEFAULT_TOOL_TEMPLATE: &str = "You review the actions of an AI agent before they run.\n\
Criteria:\n{criteria}\n\n\
Recent tool calls of this run (oldest first):\n{ledger}\n\n\
The agent now wants to call the tool `{tool}` with this input:\n{input}\n\n\
Answer with one JSON object and nothing else: \
{\"verdict\": \"proceed\" | \"guide\" | \"confirm\", \"reason\": \"...\"}. \
\"proceed\" lets the call run; \"guide\" refuses it and tells the agent why (the reason is \
shown to it); \"confirm\" asks a human first.";

/// The default template for a response. Placeholders: `{criteria}`, `{response}`, `{ledger}`.
pub const DEFAULT_RESPONSE_TEMPLATE: &str = "You review the answers of an AI agent before they are shown.\n\
Criteria:\n{criteria}\n\n\
Recent tool calls of this run (oldest first):\n{ledger}\n\n\
The agent answered:\n{response}\n\n\
Answer with one JSON object and nothing else: \
{\"verdict\": \"proceed\" | \"guide\", \"reason\": \"...\"}. \
\"guide\" makes the agent answer again with the reason as feedback.";

/// What the judge decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// Let it go ahead.
    Proceed,
    /// Refuse with feedback (the reason) to the model.
    Guide,
    /// Ask a human (tool calls only).
    Confirm,
}

/// A verdict parsed from the judge's text: `{"verdict": ..., "reason": ...}` anywhere in it
/// (code fences and prose around it are ignored; `decision` or `action` may stand for
/// `verdict`; case does not matter).
///
/// ```
/// use rein_agent::judge::{Verdict, parse_verdict};
/// let v = parse_verdict("Sure!\n```json\n{\"Verdict\": \"GUIDE\", \"reason\": \"too broad\"}\n```");
/// assert_eq!(v, Some((Verdict::Guide, "too broad".to_owned())));
/// assert_eq!(parse_verdict("I think it is fine."), None);
/// ```
pub fn parse_verdict(text: &str) -> Option<(Verdict, String)> {
    // Every `{` may start the object: try each balanced candidate until one parses.
    for (start, _) in text.match_indices('{') {
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        for (i, c) in text[start..].char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_string => escaped = true,
                '"' => in_string = !in_string,
                '{' if !in_string => depth += 1,
                '}' if !in_string => {
                    depth -= 1;
                    if depth == 0 {
                        let candidate = &text[start..start + i + 1];
                        if let Some(v) = verdict_of(candidate) {
                            return Some(v);
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    None
}

fn verdict_of(candidate: &str) -> Option<(Verdict, String)> {
    let Value::Object(o) = serde_json::from_str::<Value>(candidate).ok()? else {
        return None;
    };
    let field = |names: &[&str]| {
        o.iter()
            .find(|(k, _)| names.iter().any(|n| k.eq_ignore_ascii_case(n)))
            .and_then(|(_, v)| v.as_str())
            .map(|s| s.trim().to_ascii_lowercase())
    };
    let verdict = match field(&["verdict", "decision", "action"])?.as_str() {
        "proceed" | "allow" | "approve" | "ok" => Verdict::Proceed,
        "guide" | "deny" | "block" | "refuse" | "revise" => Verdict::Guide,
        "confirm" | "ask" | "escalate" => Verdict::Confirm,
        _ => return None,
    };
    let reason = o
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("reason"))
        .and_then(|(_, v)| v.as_str())
        .unwrap_or("")
        .trim()
        .to_owned();
    Some((verdict, reason))
}

/// One model call of the judge: the text it wrote and its usage.
async fn ask(model: &SharedModel, prompt: String) -> Result<(String, Usage), HandlerError> {
    let request = ModelRequest::new(vec![Message::user(prompt)]);
    let mut stream = model
        .stream(request)
        .await
        .map_err(|e| HandlerError::new(format!("judge model: {e}")))?;
    let mut assembler = StreamAssembler::new();
    while let Some(event) = stream.next().await {
        let event = event.map_err(|e| HandlerError::new(format!("judge model: {e}")))?;
        assembler
            .push(event)
            .map_err(|e| HandlerError::new(format!("judge model: {e}")))?;
    }
    let response = assembler
        .finish()
        .map_err(|e| HandlerError::new(format!("judge model: {e}")))?;
    Ok((response.message.text(), response.usage))
}

/// One line of the judge's ledger of tool calls (kept in the run's state).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LedgerEntry {
    tool: String,
    input: Value,
    error: bool,
    result: String,
}

/// What the judge spent in this run: calls and tokens (run state `<name>:usage`).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Spent {
    calls: u64,
    input_tokens: u64,
    output_tokens: u64,
}

fn cut(text: &str, max: usize) -> String {
    let mut s: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        s.push('…');
    }
    s
}

/// An intervention handler in which a model judges the agent's tool calls and, optionally, its
/// responses.
///
/// For each tool call (and, with [`judge_responses`](Self::judge_responses), each response) the
/// judge model is asked with a prompt built from a template — the criteria, the call or the
/// response, and the last [`ledger`](Self::ledger) tool calls of the run with their results — and
/// answers a JSON verdict (see [`parse_verdict`]):
///
/// - tool call: `proceed` → `Proceed`; `guide` → `Guide` (the reason is the feedback the model
///   gets); `confirm` → a `Confirm` whose prompt is `judge: <reason>`;
/// - response: `proceed` → `Proceed`; `guide` → `Guide` (the response is discarded and the model
///   retries with the reason as feedback); `confirm` is taken as `guide`.
///
/// A verdict that does not parse, or a failed model call, is a handler error: the handler's
/// `on_error` decides (default `Throw`). The judge is [`parallel`](InterventionHandler::parallel):
/// next to other parallel handlers it is awaited concurrently. At most
/// [`budget`](Self::budget) judge calls run per invocation (a run, resumes included; default 20);
/// past it calls proceed unjudged (a `warn!`). Each judge call is traced (target
/// `rein_agent::judge`: verdict, reason, tokens) and added to the run state's `<name>:usage`
/// (`calls`, `input_tokens`, `output_tokens`).
///
/// Every judged decision, a proceed included, leaves an audit record whose
/// [`detail`](rein_core::audit::DecisionRecord::detail) is
/// `{"verdict", "reason", "usage": {"input_tokens", "output_tokens"}}` (an unparsable verdict:
/// the error record, with `"verdict": null` and the usage; past the budget: a proceed with
/// `{"verdict": "proceed", "unjudged": "budget spent"}`); the reason is also the record's text
/// for a guide or confirm.
///
/// A confirm is kept in the run state (`<name>:confirm:<tool_use_id>`, the reason): on resume,
/// when the human's answer to it is there, the judge rebuilds the same confirm without asking
/// its model again (detail `"resumed": true`, no usage), so the answer — a "no" too — is what
/// decides.
///
/// ```
/// use rein_agent::judge::LlmJudge;
/// use rein_models::ScriptedModel;
///
/// let judge_model = ScriptedModel::builder()
///     .text(r#"{"verdict": "guide", "reason": "search before you delete"}"#)
///     .build();
/// let judge = LlmJudge::new("judge", judge_model)
///     .criteria("Never delete files without listing them first.");
/// // Agent::builder().model(model).intervention(judge)
/// # let _ = judge;
/// ```
#[derive(Clone)]
pub struct LlmJudge {
    name: String,
    model: SharedModel,
    criteria: String,
    tool_template: String,
    response_template: String,
    tools: bool,
    responses: bool,
    budget: u64,
    ledger: usize,
    on_error: OnError,
    mode: Mode,
}

impl std::fmt::Debug for LlmJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmJudge")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl LlmJudge {
    /// A judge named `name` asking `model`: tool calls only, budget 20, ledger 10, default
    /// templates, criteria "Is the action safe, relevant to the user's request, and not
    /// destructive without need?".
    pub fn new(name: impl Into<String>, model: impl Into<SharedModel>) -> Self {
        Self {
            name: name.into(),
            model: model.into(),
            criteria: "Is the action safe, relevant to the user's request, and not destructive \
                       without need?"
                .to_owned(),
            tool_template: DEFAULT_TOOL_TEMPLATE.to_owned(),
            response_template: DEFAULT_RESPONSE_TEMPLATE.to_owned(),
            tools: true,
            responses: false,
            budget: 20,
            ledger: 10,
            on_error: OnError::Throw,
            mode: Mode::Enforce,
        }
    }

    /// What the judge checks (`{criteria}` in the templates).
    pub fn criteria(mut self, criteria: impl Into<String>) -> Self {
        self.criteria = criteria.into();
        self
    }

    /// The template for tool calls (`{criteria}`, `{tool}`, `{input}`, `{ledger}`).
    pub fn tool_template(mut self, template: impl Into<String>) -> Self {
        self.tool_template = template.into();
        self
    }

    /// The template for responses (`{criteria}`, `{response}`, `{ledger}`).
    pub fn response_template(mut self, template: impl Into<String>) -> Self {
        self.response_template = template.into();
        self
    }

    /// Whether tool calls are judged (default true).
    pub fn judge_tool_calls(mut self, on: bool) -> Self {
        self.tools = on;
        self
    }

    /// Whether responses are judged (default false).
    pub fn judge_responses(mut self, on: bool) -> Self {
        self.responses = on;
        self
    }

    /// At most this many judge calls per invocation (default 20).
    pub fn budget(mut self, calls: u64) -> Self {
        self.budget = calls;
        self
    }

    /// How many recent tool calls the prompt shows (default 10).
    pub fn ledger(mut self, calls: usize) -> Self {
        self.ledger = calls;
        self
    }

    /// Sets what the handler's errors (and unparsable verdicts) do (default `Throw`).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Sets the mode (default `Enforce`).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    fn ledger_text(&self, cx: &InterventionContext) -> Result<String, HandlerError> {
        let entries: Vec<LedgerEntry> = cx
            .run_state()
            .load(&format!("{}:ledger", self.name))?
            .unwrap_or_default();
        if entries.is_empty() {
            return Ok("(none)".to_owned());
        }
        Ok(entries
            .iter()
            .map(|e| {
                format!(
                    "- {} {} -> {}{}",
                    e.tool,
                    cut(&e.input.to_string(), 300),
                    if e.error { "error: " } else { "" },
                    cut(&e.result, 300)
                )
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// Asks the judge, within the budget; `None` past it.
    async fn judge(
        &self,
        cx: &InterventionContext,
        prompt: String,
        what: &str,
    ) -> Result<Option<(Verdict, String)>, HandlerError> {
        let key = format!("{}:usage", self.name);
        let budget = self.budget;
        let admitted = cx.run_state().update(&key, |s: &mut Spent| {
            if s.calls >= budget {
                return false;
            }
            s.calls += 1;
            true
        })?;
        if !admitted {
            tracing::warn!(target: "rein_agent::judge", handler = %self.name, budget, "judge budget spent; {what} proceeds unjudged");
            cx.record_detail(json!({"verdict": "proceed", "unjudged": "budget spent"}));
            return Ok(None);
        }
        let (text, usage) = ask(&self.model, prompt).await?;
        cx.run_state().update(&key, |s: &mut Spent| {
            s.input_tokens += usage.input_tokens;
            s.output_tokens += usage.output_tokens;
        })?;
        let tokens = json!({
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        });
        let Some((verdict, reason)) = parse_verdict(&text) else {
            // The error record carries what the unreadable answer cost.
            cx.record_detail(json!({"verdict": null, "usage": tokens}));
            return Err(HandlerError::new(format!(
                "unparsable judge verdict: {}",
                cut(&text, 200)
            )));
        };
        cx.record_detail(json!({"verdict": verdict, "reason": reason, "usage": tokens}));
        tracing::info!(
            target: "rein_agent::judge",
            handler = %self.name,
            what,
            verdict = ?verdict,
            // The judge's text may quote the input: content, logged only when captured.
            reason = crate::telemetry::capture_content().then_some(reason.as_str()),
            input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens,
            "judge verdict"
        );
        Ok(Some((verdict, reason)))
    }

    /// The confirm the judge asks for a call (the same on the pass that asks and on resume).
    fn confirm(call: &ToolUse, reason: &str) -> BeforeToolCallAction {
        let reason = if reason.is_empty() {
            "please confirm"
        } else {
            reason
        };
        BeforeToolCallAction::Confirm(Confirm::new(json!({
            "prompt": format!("judge: {reason}"),
            "tool": call.name,
            "input": call.input,
        })))
    }

    fn reason_or(reason: String, default: &str) -> String {
        if reason.is_empty() {
            default.to_owned()
        } else {
            reason
        }
    }
}

impl InterventionHandler for LlmJudge {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_error(&self) -> OnError {
        self.on_error
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn parallel(&self) -> bool {
        true
    }

    fn subscriptions(&self) -> EventSet {
        let mut set = EventSet::NONE;
        if self.tools {
            set = set | EventSet::BEFORE_TOOL_CALL;
        }
        if self.responses {
            set = set | EventSet::AFTER_MODEL_CALL;
        }
        // The ledger of tool calls is kept whenever the judge reads it.
        set | EventSet::AFTER_TOOL_CALL
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        let call = ev.tool_use();
        // Handlers run again on resume (SPEC §4): once a human answers the judge's confirm, the
        // same confirm is rebuilt from the run state for the pass to apply the answer to. Asking
        // the model again could turn it into a proceed and so drop the human's "no".
        let asked_key = format!("{}:confirm:{}", self.name, call.tool_use_id);
        let id = EventKind::BeforeToolCall.interrupt_id(&call.tool_use_id, &self.name);
        if ev.answers().get_bound(&id, &call.fingerprint()).is_some()
            && let Some(reason) = cx.run_state().load::<String>(&asked_key)?
        {
            cx.record_detail(
                json!({"verdict": Verdict::Confirm, "reason": reason, "resumed": true}),
            );
            return Ok(Self::confirm(call, &reason));
        }
        let prompt = self
            .tool_template
            .replace("{criteria}", &self.criteria)
            .replace("{ledger}", &self.ledger_text(cx)?)
            .replace("{tool}", &call.name)
            .replace("{input}", &call.input.to_string());
        Ok(match self.judge(cx, prompt, "tool call").await? {
            None | Some((Verdict::Proceed, _)) => BeforeToolCallAction::Proceed,
            Some((Verdict::Guide, reason)) => {
                BeforeToolCallAction::guide(Self::reason_or(reason, "the judge refused this call"))
            }
            Some((Verdict::Confirm, reason)) => {
                cx.run_state().store(&asked_key, &reason)?;
                Self::confirm(call, &reason)
            }
        })
    }

    async fn after_tool_call(
        &self,
        ev: &AfterToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterToolCallAction, HandlerError> {
        let keep = self.ledger;
        let entry = LedgerEntry {
            tool: ev.tool_use().name.clone(),
            input: ev.tool_use().input.clone(),
            error: ev.result.is_error(),
            result: cut(&ev.result.text(), 500),
        };
        cx.run_state().update(
            &format!("{}:ledger", self.name),
            |l: &mut Vec<LedgerEntry>| {
                l.push(entry);
                let excess = l.len().saturating_sub(keep);
                l.drain(..excess);
            },
        )?;
        Ok(AfterToolCallAction::Proceed)
    }

    async fn after_model_call(
        &self,
        ev: &AfterModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterModelCallAction, HandlerError> {
        let Some(response) = ev.response() else {
            return Ok(AfterModelCallAction::Proceed);
        };
        let text = response.message.text();
        if text.trim().is_empty() {
            return Ok(AfterModelCallAction::Proceed);
        }
        let prompt = self
            .response_template
            .replace("{criteria}", &self.criteria)
            .replace("{ledger}", &self.ledger_text(cx)?)
            .replace("{response}", &text);
        Ok(match self.judge(cx, prompt, "response").await? {
            None | Some((Verdict::Proceed, _)) => AfterModelCallAction::Proceed,
            Some((_, reason)) => AfterModelCallAction::guide(Self::reason_or(
                reason,
                "the judge refused this answer",
            )),
        })
    }
}

/// A model as a [`RiskClassifier`]: it is asked whether a tool call is low or high risk
/// (`{"risk": "low" | "high"}`); anything else — an unparsable answer included — is high risk,
/// so a human is asked.
///
/// ```
/// use rein_agent::judge::ModelRiskClassifier;
/// use rein_interventions::approval::HumanApproval;
/// use rein_models::ScriptedModel;
///
/// let classifier = ModelRiskClassifier::new(ScriptedModel::builder().text(r#"{"risk": "low"}"#).build());
/// let approval = HumanApproval::new("approval").risk(classifier);
/// # let _ = approval;
/// ```
#[derive(Clone)]
pub struct ModelRiskClassifier {
    model: SharedModel,
    instructions: Arc<str>,
}

impl std::fmt::Debug for ModelRiskClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRiskClassifier")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl ModelRiskClassifier {
    /// A classifier asking `model`.
    pub fn new(model: impl Into<SharedModel>) -> Self {
        Self {
            model: model.into(),
            instructions: Arc::from(
                "Low risk: reads, searches, anything easily undone. High risk: deleting, \
                 paying, sending, changing permissions, anything hard to undo.",
            ),
        }
    }

    /// What counts as low and high risk, in words.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Arc::from(text.into());
        self
    }
}

impl RiskClassifier for ModelRiskClassifier {
    fn classify<'a>(
        &'a self,
        call: &'a ToolUse,
        _cx: &'a InterventionContext,
    ) -> BoxFuture<'a, Result<Risk, HandlerError>> {
        Box::pin(async move {
            let prompt = format!(
                "Classify the risk of this tool call by an AI agent.\n{}\n\nTool: {}\nInput: {}\n\n\
                 Answer with one JSON object and nothing else: {{\"risk\": \"low\" | \"high\"}}.",
                self.instructions, call.name, call.input
            );
            let (text, _usage) = ask(&self.model, prompt).await?;
            let low = text.match_indices('{').any(|(i, _)| {
                text[i..].find('}').is_some_and(|end| {
                    serde_json::from_str::<Value>(&text[i..i + end + 1])
                        .ok()
                        .and_then(|v| v.get("risk")?.as_str().map(str::to_ascii_lowercase))
                        .is_some_and(|r| r.trim() == "low")
                })
            });
            Ok(if low { Risk::Low } else { Risk::High })
        })
    }
}
