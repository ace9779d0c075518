//! [`PolicyHandler`]: one handler type for every built-in kind.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Mutex, PoisonError};

use regex::Regex;
use rein_core::{
    ContentBlock, Message,
    audit::{EventKind, OnError},
    event::{
        AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
        BeforeToolCallEvent, ModelOutputEvent,
    },
    message::ToolResultContent,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::{PolicyKind, RedactTarget, Scope};
use super::error::PolicyError;
use super::template::{Template, TemplateVars, json_text};
use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, Confirm, ModelOutputAction,
};
use crate::approval::HumanApproval;
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::list::for_each_intervention_event;
use crate::pii::PiiGuard;
use crate::set::EventSet;

/// A set of tool names; `*` matches every tool.
#[derive(Debug, Clone)]
struct Tools {
    all: bool,
    names: HashSet<String>,
}

impl Tools {
    fn new(list: &[String]) -> Self {
        Self {
            all: list.iter().any(|t| t == "*"),
            names: list.iter().cloned().collect(),
        }
    }

    fn contains(&self, tool: &str) -> bool {
        self.all || self.names.contains(tool)
    }
}

fn matches_opt(tools: Option<&Tools>, tool: &str) -> bool {
    tools.is_none_or(|t| t.contains(tool))
}

/// What a limit has let through: a count, and the ids it counted (a call asked about again —
/// on resume, after a retry — is not counted twice).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Count {
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    seen: BTreeSet<String>,
    count: u64,
    /// The index of the model call the last pass let through (`max_model_calls`): if that
    /// pass paused, the resume makes the same call, which is not counted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_call: Option<u32>,
}

impl Count {
    /// Whether one more (identified by `key`, when given) is let through; counts it if so.
    fn admit(&mut self, key: Option<&str>, limit: u64) -> bool {
        if let Some(k) = key
            && self.seen.contains(k)
        {
            return true;
        }
        if self.count >= limit {
            return false;
        }
        self.count += 1;
        if let Some(k) = key {
            self.seen.insert(k.to_owned());
        }
        true
    }

    /// Whether model call `index` is let through; counts it if so. A held call made again on
    /// resume (`resumed`) that the pass which paused it let through is that same call.
    fn admit_call(&mut self, index: u32, resumed: bool, limit: u64) -> bool {
        if resumed && self.last_call == Some(index) {
            return true;
        }
        let admitted = self.admit(None, limit);
        self.last_call = admitted.then_some(index);
        admitted
    }
}

/// Where a limit counts: in the run's state (scope `invocation`: one run, resumes included,
/// persisted with pending interrupts) or in the handler (scope `agent`: its whole life).
#[derive(Debug)]
enum Counter {
    Run { state_key: String },
    Handler(Mutex<Count>),
}

impl Counter {
    fn new(scope: Scope, handler: &str) -> Self {
        match scope {
            Scope::Invocation => Self::Run {
                state_key: format!("{handler}:count"),
            },
            Scope::Agent => Self::Handler(Mutex::default()),
        }
    }

    fn admit(
        &self,
        cx: &InterventionContext,
        key: Option<&str>,
        limit: u64,
    ) -> Result<bool, HandlerError> {
        Ok(match self {
            Self::Run { state_key } => cx
                .run_state()
                .update(state_key, |c: &mut Count| c.admit(key, limit))?,
            Self::Handler(count) => count
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .admit(key, limit),
        })
    }

    /// [`Count::admit_call`] for this model call.
    fn admit_call(
        &self,
        cx: &InterventionContext,
        ev: &BeforeModelCallEvent,
        limit: u64,
    ) -> Result<bool, HandlerError> {
        let (index, resumed) = (ev.model_call_index(), ev.is_resume());
        Ok(match self {
            Self::Run { state_key } => cx.run_state().update(state_key, |c: &mut Count| {
                c.admit_call(index, resumed, limit)
            })?,
            Self::Handler(count) => count
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .admit_call(index, resumed, limit),
        })
    }
}

#[derive(Debug)]
enum Rule {
    DenyTools {
        tools: Tools,
        reason: Template,
    },
    AllowToolsByRole {
        state_key: String,
        allowed: BTreeMap<String, Tools>,
        reason: Template,
    },
    DenyInputMatch {
        tools: Option<Tools>,
        field: Option<String>,
        pattern: Regex,
        reason: Template,
    },
    RequireFields {
        tools: Tools,
        fields: Vec<String>,
        feedback: Template,
    },
    ConfirmResponse {
        tools: Option<Tools>,
        prompt: Template,
        response: Option<Value>,
    },
    ConfirmInput {
        prompt: Template,
        pattern: Option<Regex>,
        injected_only: bool,
        response: Option<Value>,
    },
    ConfirmRequest {
        prompt: Template,
        once: bool,
        response: Option<Value>,
        /// This handler's interrupt name, and the run-state key saying it asked (for `once`).
        name: String,
        asked_key: String,
    },
    ConfirmToolOutput {
        tools: Tools,
        prompt: Template,
        response: Option<Value>,
    },
    ConfirmTools {
        tools: Tools,
        prompt: Template,
        response: Option<Value>,
    },
    MaxToolCalls {
        limit: u64,
        tools: Option<Tools>,
        reason: Template,
        counter: Counter,
    },
    MaxModelCalls {
        limit: u64,
        reason: Template,
        counter: Counter,
    },
    Redact {
        target: RedactTarget,
        pattern: Regex,
        replacement: String,
        tools: Option<Tools>,
    },
    DenyPromptMatch {
        pattern: Regex,
        reason: Template,
    },
    GuidePromptMatch {
        pattern: Regex,
        feedback: Template,
    },
    GuideOutputMatch {
        pattern: Regex,
        feedback: Template,
    },
    GuideModelCall {
        feedback: Template,
        once: bool,
        /// The run-state keys saying this run was guided, and which call the last pass
        /// guided (for `once`).
        guided_key: String,
        call_key: String,
    },
    RedactStream {
        pattern: Regex,
        replacement: String,
    },
    DenyStreamMatch {
        pattern: Regex,
        reason: Template,
    },
    Pii(Box<PiiGuard>),
    HumanApproval(Box<HumanApproval>),
    #[cfg(feature = "cedar")]
    Cedar(Box<crate::cedar::CedarAuthorizer>),
    Fail {
        event: EventKind,
        message: String,
    },
}

/// A built-in policy handler: one of the kinds of [`PolicyKind`], with a name, an error policy
/// and a mode. Patterns are compiled when it is built.
///
/// ```
/// use rein_interventions::policy::{PolicyHandler, Redact, RedactTarget};
/// use rein_interventions::{EventSet, InterventionHandler};
/// let h = PolicyHandler::new("pii", Redact {
///     target: RedactTarget::ToolResult,
///     pattern: r"\d{3}-\d{2}-\d{4}".into(),
///     replacement: "[SSN]".into(),
///     tools: None,
/// })?;
/// assert_eq!(h.subscriptions(), EventSet::AFTER_TOOL_CALL);
/// # Ok::<(), rein_interventions::policy::PolicyError>(())
/// ```
#[derive(Debug)]
pub struct PolicyHandler {
    name: String,
    kind: &'static str,
    on_error: OnError,
    mode: Mode,
    parallel: bool,
    rule: Rule,
}

fn compile(pattern: &str, name: &str) -> Result<Regex, PolicyError> {
    Regex::new(pattern).map_err(|e| {
        PolicyError::new(format!("invalid regex: {e}"))
            .field("pattern")
            .handler(name)
    })
}

fn pii_guard(name: &str, c: super::config::Pii) -> Result<PiiGuard, PolicyError> {
    let mut guard = PiiGuard::new(name).default_action(c.action);
    if let Some(kinds) = c.kinds {
        if kinds.is_empty() {
            return Err(PolicyError::new("at least one kind is needed")
                .field("kinds")
                .handler(name));
        }
        guard = guard.kinds(kinds);
    }
    for (kind, action) in c.actions {
        guard = guard.action(kind, action);
    }
    if let Some(targets) = c.targets {
        if targets.is_empty() {
            return Err(PolicyError::new("at least one target is needed")
                .field("targets")
                .handler(name));
        }
        guard = guard.targets(targets);
    }
    if let Some(tools) = c.tools {
        guard = guard.tools(tools);
    }
    Ok(guard)
}

#[cfg(feature = "cedar")]
fn cedar_authorizer(
    name: &str,
    c: super::config::Cedar,
) -> Result<crate::cedar::CedarAuthorizer, PolicyError> {
    let mut b = crate::cedar::CedarAuthorizer::builder(name).hot_reload(c.hot_reload);
    b = match (c.policies, c.policies_file) {
        (Some(text), None) => b.policies(text),
        (None, Some(file)) => b.policies_file(file),
        _ => {
            return Err(PolicyError::new(
                "exactly one of `policies` and `policies_file` is needed",
            )
            .field("policies")
            .handler(name));
        }
    };
    if let Some(schema) = c.schema_file {
        b = b.schema_file(schema);
    }
    if let Some(text) = c.principal {
        let fallback = crate::cedar::Entity::parse_uid(&text).map_err(|e| {
            PolicyError::new(format!("invalid principal `{text}`: {e}"))
                .field("principal")
                .handler(name)
        })?;
        b = b.principal(move |cx| match cx.invocation_state().get("principal") {
            Some(_) => crate::cedar::Principal::from_invocation(cx),
            None => Some(fallback.clone()),
        });
    }
    b.build().map_err(|e| {
        PolicyError::new(e.to_string())
            .field("policies")
            .handler(name)
    })
}

fn template(text: Option<String>, default: &str) -> Template {
    Template::parse(text.as_deref().unwrap_or(default))
}

impl PolicyHandler {
    /// Builds a handler of this kind (compiling its patterns).
    pub fn new(name: impl Into<String>, kind: impl Into<PolicyKind>) -> Result<Self, PolicyError> {
        let name = name.into();
        let kind = kind.into();
        let kind_name = kind.kind_name();
        let rule = match kind {
            PolicyKind::DenyTools(c) => Rule::DenyTools {
                tools: Tools::new(&c.tools),
                reason: template(c.reason, "tool '{tool}' is not allowed"),
            },
            PolicyKind::AllowToolsByRole(c) => {
                let default = format!(
                    "role '{{state.{}}}' may not use tool '{{tool}}'",
                    c.state_key
                );
                Rule::AllowToolsByRole {
                    allowed: c
                        .allowed
                        .iter()
                        .map(|(role, tools)| (role.clone(), Tools::new(tools)))
                        .collect(),
                    reason: template(c.reason, &default),
                    state_key: c.state_key,
                }
            }
            PolicyKind::DenyInputMatch(c) => Rule::DenyInputMatch {
                tools: c.tools.as_deref().map(Tools::new),
                field: c.field,
                pattern: compile(&c.pattern, &name)?,
                reason: template(c.reason, "input of '{tool}' matches a denied pattern"),
            },
            PolicyKind::RequireFields(c) => Rule::RequireFields {
                tools: Tools::new(&c.tools),
                fields: c.fields,
                feedback: template(c.feedback, "missing required field(s): {missing}"),
            },
            PolicyKind::ConfirmResponse(c) => Rule::ConfirmResponse {
                tools: c.tools.as_deref().map(Tools::new),
                prompt: Template::parse(&c.prompt),
                response: c.response.filter(|v| !v.is_null()),
            },
            PolicyKind::ConfirmInput(c) => Rule::ConfirmInput {
                prompt: Template::parse(&c.prompt),
                pattern: c
                    .pattern
                    .as_deref()
                    .map(|p| compile(p, &name))
                    .transpose()?,
                injected_only: c.injected_only,
                response: c.response.filter(|v| !v.is_null()),
            },
            PolicyKind::ConfirmRequest(c) => Rule::ConfirmRequest {
                prompt: Template::parse(&c.prompt),
                once: c.once,
                response: c.response.filter(|v| !v.is_null()),
                name: name.clone(),
                asked_key: format!("{name}:asked"),
            },
            PolicyKind::ConfirmToolOutput(c) => Rule::ConfirmToolOutput {
                tools: Tools::new(&c.tools),
                prompt: Template::parse(&c.prompt),
                response: c.response.filter(|v| !v.is_null()),
            },
            PolicyKind::ConfirmTools(c) => Rule::ConfirmTools {
                tools: Tools::new(&c.tools),
                prompt: Template::parse(&c.prompt),
                response: c.response.filter(|v| !v.is_null()),
            },
            PolicyKind::MaxToolCalls(c) => Rule::MaxToolCalls {
                limit: c.limit,
                tools: c.tools.as_deref().map(Tools::new),
                reason: template(c.reason, &format!("tool call limit ({}) reached", c.limit)),
                counter: Counter::new(c.scope, &name),
            },
            PolicyKind::MaxModelCalls(c) => Rule::MaxModelCalls {
                limit: c.limit,
                reason: template(c.reason, &format!("model call limit ({}) reached", c.limit)),
                counter: Counter::new(c.scope, &name),
            },
            PolicyKind::Redact(c) => {
                if c.tools.is_some()
                    && !matches!(c.target, RedactTarget::ToolInput | RedactTarget::ToolResult)
                {
                    return Err(PolicyError::new(
                        "`tools` applies only to targets tool_input and tool_result",
                    )
                    .field("tools")
                    .handler(&name));
                }
                Rule::Redact {
                    target: c.target,
                    pattern: compile(&c.pattern, &name)?,
                    replacement: c.replacement,
                    tools: c.tools.as_deref().map(Tools::new),
                }
            }
            PolicyKind::DenyPromptMatch(c) => Rule::DenyPromptMatch {
                pattern: compile(&c.pattern, &name)?,
                reason: template(c.reason, "input matches a denied pattern"),
            },
            PolicyKind::GuidePromptMatch(c) => Rule::GuidePromptMatch {
                pattern: compile(&c.pattern, &name)?,
                feedback: Template::parse(&c.feedback),
            },
            PolicyKind::GuideOutputMatch(c) => Rule::GuideOutputMatch {
                pattern: compile(&c.pattern, &name)?,
                feedback: Template::parse(&c.feedback),
            },
            PolicyKind::GuideModelCall(c) => Rule::GuideModelCall {
                feedback: Template::parse(&c.feedback),
                once: c.once,
                guided_key: format!("{name}:guided"),
                call_key: format!("{name}:guided_call"),
            },
            PolicyKind::RedactStream(c) => Rule::RedactStream {
                pattern: compile(&c.pattern, &name)?,
                replacement: c.replacement,
            },
            PolicyKind::DenyStreamMatch(c) => Rule::DenyStreamMatch {
                pattern: compile(&c.pattern, &name)?,
                reason: template(c.reason, "output matches a denied pattern"),
            },
            PolicyKind::Pii(c) => Rule::Pii(Box::new(pii_guard(&name, c)?)),
            PolicyKind::HumanApproval(c) => {
                let mut h = HumanApproval::new(&name).tools(&c.tools).trust(c.trust);
                if let Some(r) = c.response {
                    h = h.response(r);
                }
                Rule::HumanApproval(Box::new(h))
            }
            #[cfg(feature = "cedar")]
            PolicyKind::Cedar(c) => Rule::Cedar(Box::new(cedar_authorizer(&name, c)?)),
        };
        // Authorization fails closed unless the spec says otherwise.
        #[cfg(feature = "cedar")]
        let on_error = match rule {
            Rule::Cedar(_) => OnError::Deny,
            _ => OnError::Throw,
        };
        #[cfg(not(feature = "cedar"))]
        let on_error = OnError::Throw;
        Ok(Self {
            name,
            kind: kind_name,
            on_error,
            mode: Mode::Enforce,
            parallel: false,
            rule,
        })
    }

    /// A handler whose method for `event` fails with `message` (kind `fail`): for testing error
    /// policies (`on_error`) in scenario files; not a production policy.
    pub fn failing(
        name: impl Into<String>,
        event: EventKind,
        message: impl Into<String>,
    ) -> Result<Self, PolicyError> {
        let name = name.into();
        if EventSet::of(event).is_empty() {
            return Err(
                PolicyError::new(format!("handlers are not called on {event}"))
                    .field("event")
                    .handler(&name),
            );
        }
        Ok(Self {
            name,
            kind: "fail",
            on_error: OnError::Throw,
            mode: Mode::Enforce,
            parallel: false,
            rule: Rule::Fail {
                event,
                message: message.into(),
            },
        })
    }

    /// Sets what the handler's errors do (default [`OnError::Throw`]).
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Sets the mode (default [`Mode::Enforce`]).
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Marks the handler parallel (default `false`): in a pass, it is awaited concurrently with
    /// the parallel handlers next to it, with the outcome of running them in order (SPEC §3.7).
    pub fn with_parallel(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// The handler's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind's name (`deny_tools`, ..., or `fail`).
    pub fn kind_name(&self) -> &'static str {
        self.kind
    }

    fn event_set(&self) -> EventSet {
        match &self.rule {
            Rule::DenyTools { .. }
            | Rule::AllowToolsByRole { .. }
            | Rule::DenyInputMatch { .. }
            | Rule::RequireFields { .. }
            | Rule::ConfirmTools { .. }
            | Rule::MaxToolCalls { .. } => EventSet::BEFORE_TOOL_CALL,
            Rule::MaxModelCalls { .. }
            | Rule::GuideModelCall { .. }
            | Rule::ConfirmRequest { .. } => EventSet::BEFORE_MODEL_CALL,
            Rule::DenyPromptMatch { .. }
            | Rule::GuidePromptMatch { .. }
            | Rule::ConfirmInput { .. } => EventSet::BEFORE_INVOCATION,
            Rule::GuideOutputMatch { .. } => EventSet::AFTER_MODEL_CALL,
            Rule::ConfirmToolOutput { .. } => EventSet::AFTER_TOOL_CALL,
            Rule::ConfirmResponse { .. } => EventSet::AFTER_MODEL_CALL,
            Rule::RedactStream { .. } | Rule::DenyStreamMatch { .. } => EventSet::MODEL_OUTPUT,
            Rule::Redact { target, .. } => match target {
                RedactTarget::Prompt => EventSet::BEFORE_INVOCATION,
                RedactTarget::ModelRequest => EventSet::BEFORE_MODEL_CALL,
                RedactTarget::ToolInput => EventSet::BEFORE_TOOL_CALL,
                RedactTarget::ToolResult => EventSet::AFTER_TOOL_CALL,
                RedactTarget::ModelOutput => EventSet::AFTER_MODEL_CALL,
            },
            Rule::Pii(guard) => guard.subscriptions(),
            Rule::HumanApproval(_) => EventSet::BEFORE_TOOL_CALL,
            #[cfg(feature = "cedar")]
            Rule::Cedar(_) => EventSet::BEFORE_TOOL_CALL,
            Rule::Fail { event, .. } => EventSet::of(*event),
        }
    }

    fn fail(&self, event: EventKind) -> Result<(), HandlerError> {
        match &self.rule {
            Rule::Fail { event: e, message } if *e == event => {
                Err(HandlerError::new(message.clone()))
            }
            _ => Ok(()),
        }
    }
}

/// Missing or empty: `null`, `""`, `[]`, `{}`.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Whether a text block of the input matches.
fn input_matches(re: &Regex, messages: &[Message]) -> bool {
    messages.iter().any(|m| {
        m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text(t) if re.is_match(t)))
    })
}

/// For `confirm_request` with `once`: whether to ask on this call — the run's first call, or
/// the held call a resume answers (so a rejection still counts).
fn asks_once(
    ev: &BeforeModelCallEvent,
    cx: &InterventionContext,
    name: &str,
    asked_key: &str,
) -> Result<bool, HandlerError> {
    let id = EventKind::BeforeModelCall.interrupt_id(&ev.interrupt_subject(), name);
    if ev.answers().get(&id).is_some() {
        return Ok(true);
    }
    Ok(cx.run_state().update(asked_key, |asked: &mut bool| {
        !std::mem::replace(asked, true)
    })?)
}

/// For `guide_model_call` with `once`: whether this call carries the guidance — the run's
/// first call, or the held call a resume makes again when the pass that paused it was that
/// first call (the pause sent nothing: the guidance comes again with the resumed pass, SPEC
/// §3.8).
fn guides_once(
    ev: &BeforeModelCallEvent,
    cx: &InterventionContext,
    guided_key: &str,
    call_key: &str,
) -> Result<bool, HandlerError> {
    let index = ev.model_call_index();
    let state = cx.run_state();
    if ev.is_resume() && state.load::<u32>(call_key)? == Some(index) {
        return Ok(true);
    }
    let first = state.update(guided_key, |guided: &mut bool| {
        !std::mem::replace(guided, true)
    })?;
    // Which call this pass guided, if it did: only a resume of that very call guides again.
    if first {
        state.set(call_key, index);
    } else {
        state.remove(call_key);
    }
    Ok(first)
}

/// The text of an input's messages, for `{input}`.
fn input_text(messages: &[Message]) -> String {
    let texts: Vec<String> = messages.iter().map(Message::text).collect();
    texts.join("\n")
}

/// A confirm with this prompt and the policy's pre-emptive answer, if any.
fn confirm(prompt: String, response: &Option<Value>) -> Confirm {
    let mut confirm = Confirm::new(prompt);
    if let Some(a) = response {
        confirm = confirm.with_response(a.clone());
    }
    confirm
}

/// Whether any string value at any depth matches.
fn value_matches(re: &Regex, v: &Value) -> bool {
    match v {
        Value::String(s) => re.is_match(s),
        Value::Array(a) => a.iter().any(|v| value_matches(re, v)),
        Value::Object(o) => o.values().any(|v| value_matches(re, v)),
        _ => false,
    }
}

/// Replaces matches in every string value at any depth.
fn redact_value(re: &Regex, rep: &str, v: &mut Value) {
    match v {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(new) = re.replace_all(s, rep) {
                *s = new;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| redact_value(re, rep, v)),
        Value::Object(o) => o.values_mut().for_each(|v| redact_value(re, rep, v)),
        _ => {}
    }
}

fn redact_string(re: &Regex, rep: &str, s: &mut String) {
    if let std::borrow::Cow::Owned(new) = re.replace_all(s, rep) {
        *s = new;
    }
}

fn result_matches(re: &Regex, content: &[ToolResultContent]) -> bool {
    content.iter().any(|c| match c {
        ToolResultContent::Text(t) => re.is_match(t),
        ToolResultContent::Json(v) => value_matches(re, v),
        _ => false,
    })
}

fn redact_result(re: &Regex, rep: &str, content: &mut [ToolResultContent]) {
    for c in content {
        match c {
            ToolResultContent::Text(t) => redact_string(re, rep, t),
            ToolResultContent::Json(v) => redact_value(re, rep, v),
            _ => {}
        }
    }
}

/// The strings of message content: text, tool-use input, tool-result text and JSON. (Ids,
/// names, media and signed reasoning are left alone.)
fn blocks_match(re: &Regex, blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|b| match b {
        ContentBlock::Text(t) => re.is_match(t),
        ContentBlock::ToolUse(u) => value_matches(re, &u.input),
        ContentBlock::ToolResult(r) => result_matches(re, &r.content),
        _ => false,
    })
}

fn redact_blocks(re: &Regex, rep: &str, blocks: &mut [ContentBlock]) {
    for b in blocks {
        match b {
            ContentBlock::Text(t) => redact_string(re, rep, t),
            ContentBlock::ToolUse(u) => redact_value(re, rep, &mut u.input),
            ContentBlock::ToolResult(r) => redact_result(re, rep, &mut r.content),
            _ => {}
        }
    }
}

/// Whether a text block matches (what `model_output` covers: the text the model wrote, not its
/// tool uses' inputs).
fn text_blocks_match(re: &Regex, blocks: &[ContentBlock]) -> bool {
    blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::Text(t) if re.is_match(t)))
}

fn redact_text_blocks(re: &Regex, rep: &str, blocks: &mut [ContentBlock]) {
    for b in blocks {
        if let ContentBlock::Text(t) = b {
            redact_string(re, rep, t);
        }
    }
}

/// A handler whose decision on `E` is ready at once: written once per event, it is what the
/// [`InterventionHandler`] methods return and what the registry calls directly.
pub(crate) trait Decide<E, A> {
    fn decide(&self, event: &E, cx: &InterventionContext) -> Result<A, HandlerError>;
}

impl Decide<BeforeInvocationEvent, BeforeInvocationAction> for PolicyHandler {
    fn decide(
        &self,
        ev: &BeforeInvocationEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeInvocationAction, HandlerError> {
        self.fail(EventKind::BeforeInvocation)?;
        if let Rule::Pii(g) = &self.rule {
            return Ok(g.decide_before_invocation(ev));
        }
        let vars = TemplateVars::new().state(cx.invocation_state());
        Ok(match &self.rule {
            Rule::DenyPromptMatch { pattern, reason } if input_matches(pattern, &ev.messages) => {
                BeforeInvocationAction::deny(reason.render(&vars))
            }
            Rule::GuidePromptMatch { pattern, feedback }
                if input_matches(pattern, &ev.messages) =>
            {
                BeforeInvocationAction::guide(feedback.render(&vars))
            }
            Rule::ConfirmInput {
                prompt,
                pattern,
                injected_only,
                response,
            } if (!*injected_only || ev.is_injected())
                && pattern
                    .as_ref()
                    .is_none_or(|p| input_matches(p, &ev.messages)) =>
            {
                let input = input_text(&ev.messages);
                let extra = [("input", input.as_str())];
                BeforeInvocationAction::Confirm(confirm(
                    prompt.render(&vars.extra(&extra)),
                    response,
                ))
            }
            Rule::Redact {
                target: RedactTarget::Prompt,
                pattern,
                replacement,
                ..
            } if ev
                .messages
                .iter()
                .any(|m| blocks_match(pattern, &m.content)) =>
            {
                let (re, rep) = (pattern.clone(), replacement.clone());
                BeforeInvocationAction::transform(move |messages: &mut Vec<Message>| {
                    for m in messages {
                        redact_blocks(&re, &rep, &mut m.content);
                    }
                })
            }
            _ => BeforeInvocationAction::Proceed,
        })
    }
}

impl Decide<BeforeModelCallEvent, BeforeModelCallAction> for PolicyHandler {
    fn decide(
        &self,
        ev: &BeforeModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeModelCallAction, HandlerError> {
        self.fail(EventKind::BeforeModelCall)?;
        if let Rule::Pii(g) = &self.rule {
            return Ok(g.decide_before_model_call(ev));
        }
        let vars = TemplateVars::new().state(cx.invocation_state());
        Ok(match &self.rule {
            Rule::MaxModelCalls {
                limit,
                reason,
                counter,
            } => {
                if counter.admit_call(cx, ev, *limit)? {
                    BeforeModelCallAction::Proceed
                } else {
                    let limit = limit.to_string();
                    let extra = [("limit", limit.as_str())];
                    BeforeModelCallAction::deny(reason.render(&vars.extra(&extra)))
                }
            }
            Rule::ConfirmRequest {
                prompt,
                once,
                response,
                name,
                asked_key,
            } if !*once || asks_once(ev, cx, name, asked_key)? => {
                let input = ev
                    .request
                    .messages
                    .last()
                    .map(Message::text)
                    .unwrap_or_default();
                let extra = [("input", input.as_str())];
                BeforeModelCallAction::Confirm(confirm(
                    prompt.render(&vars.extra(&extra)),
                    response,
                ))
            }
            Rule::GuideModelCall {
                feedback,
                once,
                guided_key,
                call_key,
            } => {
                if !*once || guides_once(ev, cx, guided_key, call_key)? {
                    BeforeModelCallAction::guide(feedback.render(&vars))
                } else {
                    BeforeModelCallAction::Proceed
                }
            }
            Rule::Redact {
                target: RedactTarget::ModelRequest,
                pattern,
                replacement,
                ..
            } => {
                let system = ev
                    .request
                    .system_prompt
                    .as_deref()
                    .is_some_and(|s| pattern.is_match(s));
                let messages = ev
                    .request
                    .messages
                    .iter()
                    .any(|m| blocks_match(pattern, &m.content));
                if !system && !messages {
                    return Ok(BeforeModelCallAction::Proceed);
                }
                let (re, rep) = (pattern.clone(), replacement.clone());
                BeforeModelCallAction::transform(move |request| {
                    if system && let Some(s) = request.system_prompt.as_deref() {
                        let new = re.replace_all(s, rep.as_str()).into_owned();
                        request.system_prompt = Some(new.into());
                    }
                    if messages {
                        for m in request.messages_mut() {
                            redact_blocks(&re, &rep, &mut m.content);
                        }
                    }
                })
            }
            _ => BeforeModelCallAction::Proceed,
        })
    }
}

impl Decide<AfterModelCallEvent, AfterModelCallAction> for PolicyHandler {
    fn decide(
        &self,
        ev: &AfterModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterModelCallAction, HandlerError> {
        self.fail(EventKind::AfterModelCall)?;
        if let Rule::Pii(g) = &self.rule {
            return Ok(g.decide_after_model_call(ev));
        }
        let Some(response) = ev.response() else {
            return Ok(AfterModelCallAction::Proceed);
        };
        let vars = TemplateVars::new().state(cx.invocation_state());
        Ok(match &self.rule {
            Rule::ConfirmResponse {
                tools,
                prompt,
                response: answer,
            } if tools
                .as_ref()
                .is_none_or(|t| response.message.tool_uses().any(|u| t.contains(&u.name))) =>
            {
                let output = response.message.text();
                let extra = [("output", output.as_str())];
                AfterModelCallAction::Confirm(confirm(prompt.render(&vars.extra(&extra)), answer))
            }
            Rule::GuideOutputMatch { pattern, feedback }
                if pattern.is_match(&response.message.text()) =>
            {
                AfterModelCallAction::guide(feedback.render(&vars))
            }
            Rule::Redact {
                target: RedactTarget::ModelOutput,
                pattern,
                replacement,
                ..
            } if text_blocks_match(pattern, &response.message.content) => {
                // The text the model wrote; its tool uses' inputs are `tool_input`'s.
                let (re, rep) = (pattern.clone(), replacement.clone());
                AfterModelCallAction::transform(move |m: &mut Message| {
                    redact_text_blocks(&re, &rep, &mut m.content);
                })
            }
            _ => AfterModelCallAction::Proceed,
        })
    }
}

impl Decide<ModelOutputEvent, ModelOutputAction> for PolicyHandler {
    fn decide(
        &self,
        ev: &ModelOutputEvent,
        cx: &InterventionContext,
    ) -> Result<ModelOutputAction, HandlerError> {
        self.fail(EventKind::ModelOutput)?;
        if let Rule::Pii(g) = &self.rule {
            return Ok(g.decide_model_output(ev));
        }
        Ok(match &self.rule {
            Rule::RedactStream {
                pattern,
                replacement,
            } if pattern.is_match(&ev.pending) => {
                let (re, rep) = (pattern.clone(), replacement.clone());
                ModelOutputAction::transform(move |pending: &mut String| {
                    redact_string(&re, &rep, pending);
                })
            }
            Rule::DenyStreamMatch { pattern, reason } if pattern.is_match(&ev.pending) => {
                let vars = TemplateVars::new().state(cx.invocation_state());
                ModelOutputAction::deny(reason.render(&vars))
            }
            _ => ModelOutputAction::Proceed,
        })
    }
}

impl Decide<BeforeToolCallEvent, BeforeToolCallAction> for PolicyHandler {
    fn decide(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        self.fail(EventKind::BeforeToolCall)?;
        if let Rule::Pii(g) = &self.rule {
            return Ok(g.decide_before_tool_call(ev));
        }
        #[cfg(feature = "cedar")]
        if let Rule::Cedar(c) = &self.rule {
            return c.decide(ev, cx);
        }
        if let Rule::HumanApproval(h) = &self.rule {
            // Built from a file: no classifier, no callback, so it decides at once.
            return h.decide_now(ev, cx).ok_or_else(|| {
                HandlerError::new("human_approval needs an async pass (a bug: report it)")
            });
        }
        let tool_use = ev.tool_use();
        let tool = tool_use.name.as_str();
        let input = &tool_use.input;
        let state = cx.invocation_state();
        let vars = TemplateVars::new().tool(tool, input).state(state);
        Ok(match &self.rule {
            Rule::DenyTools { tools, reason } if tools.contains(tool) => {
                BeforeToolCallAction::deny(reason.render(&vars))
            }
            Rule::AllowToolsByRole {
                state_key,
                allowed,
                reason,
            } => {
                let ok = state
                    .get(state_key)
                    .and_then(Value::as_str)
                    .and_then(|role| allowed.get(role))
                    .is_some_and(|tools| tools.contains(tool));
                if ok {
                    BeforeToolCallAction::Proceed
                } else {
                    BeforeToolCallAction::deny(reason.render(&vars))
                }
            }
            Rule::DenyInputMatch {
                tools,
                field,
                pattern,
                reason,
            } if matches_opt(tools.as_ref(), tool) => {
                let hit = match field {
                    Some(f) => input
                        .get(f)
                        .is_some_and(|v| pattern.is_match(&json_text(v))),
                    None => value_matches(pattern, input),
                };
                if hit {
                    BeforeToolCallAction::deny(reason.render(&vars))
                } else {
                    BeforeToolCallAction::Proceed
                }
            }
            Rule::RequireFields {
                tools,
                fields,
                feedback,
            } if tools.contains(tool) => {
                let missing: Vec<&str> = fields
                    .iter()
                    .filter(|f| input.get(f.as_str()).is_none_or(is_empty))
                    .map(String::as_str)
                    .collect();
                if missing.is_empty() {
                    BeforeToolCallAction::Proceed
                } else {
                    let joined = missing.join(", ");
                    let extra = [("missing", joined.as_str())];
                    BeforeToolCallAction::guide(feedback.render(&vars.extra(&extra)))
                }
            }
            Rule::ConfirmTools {
                tools,
                prompt,
                response,
            } if tools.contains(tool) => {
                BeforeToolCallAction::Confirm(confirm(prompt.render(&vars), response))
            }
            Rule::MaxToolCalls {
                limit,
                tools,
                reason,
                counter,
            } if matches_opt(tools.as_ref(), tool) => {
                if counter.admit(cx, Some(&tool_use.tool_use_id), *limit)? {
                    BeforeToolCallAction::Proceed
                } else {
                    let limit = limit.to_string();
                    let extra = [("limit", limit.as_str())];
                    BeforeToolCallAction::deny(reason.render(&vars.extra(&extra)))
                }
            }
            Rule::Redact {
                target: RedactTarget::ToolInput,
                pattern,
                replacement,
                tools,
            } if matches_opt(tools.as_ref(), tool) && value_matches(pattern, input) => {
                let (re, rep) = (pattern.clone(), replacement.clone());
                BeforeToolCallAction::transform(move |draft| {
                    redact_value(&re, &rep, &mut draft.input);
                })
            }
            _ => BeforeToolCallAction::Proceed,
        })
    }
}

impl Decide<AfterToolCallEvent, AfterToolCallAction> for PolicyHandler {
    fn decide(
        &self,
        ev: &AfterToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterToolCallAction, HandlerError> {
        self.fail(EventKind::AfterToolCall)?;
        if let Rule::Pii(g) = &self.rule {
            return Ok(g.decide_after_tool_call(ev));
        }
        Ok(match &self.rule {
            Rule::ConfirmToolOutput {
                tools,
                prompt,
                response,
            } if tools.contains(&ev.tool_use().name) => {
                let output = ev.result.text();
                let extra = [("output", output.as_str())];
                let vars = TemplateVars::new()
                    .tool(&ev.tool_use().name, &ev.tool_use().input)
                    .state(cx.invocation_state())
                    .extra(&extra);
                AfterToolCallAction::Confirm(confirm(prompt.render(&vars), response))
            }
            Rule::Redact {
                target: RedactTarget::ToolResult,
                pattern,
                replacement,
                tools,
            } if matches_opt(tools.as_ref(), &ev.tool_use().name)
                && result_matches(pattern, &ev.result.content) =>
            {
                let (re, rep) = (pattern.clone(), replacement.clone());
                AfterToolCallAction::transform(move |draft| {
                    redact_result(&re, &rep, &mut draft.content);
                })
            }
            _ => AfterToolCallAction::Proceed,
        })
    }
}

macro_rules! policy_handler {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {
        impl InterventionHandler for PolicyHandler {
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
                self.parallel
            }

            fn subscriptions(&self) -> EventSet {
                self.event_set()
            }

            $(
                fn $method(
                    &self,
                    event: &$crate::$event,
                    cx: &InterventionContext,
                ) -> impl Future<Output = Result<$crate::$action, HandlerError>> + Send {
                    std::future::ready(Decide::<$crate::$event, $crate::$action>::decide(
                        self, event, cx,
                    ))
                }
            )*
        }
    };
}

for_each_intervention_event!(policy_handler);

#[cfg(test)]
mod tests;
