//! [`PolicyHandler`]: one handler type for every built-in kind.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Mutex, PoisonError};

use regex::Regex;
use rein_core::{
    audit::{EventKind, OnError},
    event::BeforeModelCallEvent,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::condition::Condition;
use super::config::{PolicyKind, RedactTarget, Scope};
use super::error::PolicyError;
use super::template::Template;
use crate::approval::HumanApproval;
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::pii::PiiGuard;
use crate::set::EventSet;

/// A set of tool names; `*` matches every tool.
#[derive(Debug, Clone)]
pub(super) struct Tools {
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

    pub(super) fn contains(&self, tool: &str) -> bool {
        self.all || self.names.contains(tool)
    }
}

pub(super) fn matches_opt(tools: Option<&Tools>, tool: &str) -> bool {
    tools.is_none_or(|t| t.contains(tool))
}

/// What a limit has let through: a count, and the ids it counted (a call asked about again —
/// on resume, after a retry — is not counted twice).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Count {
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
    pub(super) fn admit(&mut self, key: Option<&str>, limit: u64) -> bool {
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
    pub(super) fn admit_call(&mut self, index: u32, resumed: bool, limit: u64) -> bool {
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
pub(super) enum Counter {
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

    pub(super) fn admit(
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
    pub(super) fn admit_call(
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
pub(super) enum Rule {
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
    pub(super) name: String,
    kind: &'static str,
    pub(super) on_error: OnError,
    pub(super) mode: Mode,
    pub(super) parallel: bool,
    pub(super) rule: Rule,
    /// Only tool calls for which this holds (`when`); `None`: every call the rule matches.
    pub(super) when: Option<Condition>,
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
            when: None,
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
            when: None,
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

    /// Applies the handler only to tool calls for which `condition` holds: a CEL expression
    /// over `input` (the tool's input), `tool` (its name) and `state` (the invocation state),
    /// e.g. `input.amount > 100`. A condition that cannot be decided for a call (a missing
    /// field, a type mismatch, not a boolean) counts as true: the policy applies, the closed way.
    /// Only for kinds that act on tool calls (`deny_tools`, `confirm_tools`, `human_approval`,
    /// `confirm_tool_output`, `max_tool_calls`, ...): others are refused.
    ///
    /// ```
    /// use rein_interventions::policy::{ConfirmTools, PolicyHandler};
    /// let big_refunds = PolicyHandler::new("big-refunds", ConfirmTools {
    ///     tools: vec!["refund".into()],
    ///     prompt: "Refund {input.amount}?".into(),
    ///     response: None,
    /// })?
    /// .with_condition("input.amount > 100")?;
    /// # let _ = big_refunds;
    /// # Ok::<(), rein_interventions::policy::PolicyError>(())
    /// ```
    pub fn with_condition(mut self, condition: &str) -> Result<Self, PolicyError> {
        let tool_calls = EventSet::BEFORE_TOOL_CALL.union(EventSet::AFTER_TOOL_CALL);
        let events = self.event_set();
        if events.is_empty() || !tool_calls.contains(events) {
            return Err(PolicyError::new(format!(
                "`when` applies only to kinds that act on tool calls, not `{}`",
                self.kind
            ))
            .field("when")
            .handler(&self.name));
        }
        self.when = Some(Condition::compile(condition, &self.name)?);
        Ok(self)
    }

    /// Whether the handler applies to this tool call (its `when`, if it has one).
    pub(super) fn applies(&self, tool_use: &rein_core::ToolUse, cx: &InterventionContext) -> bool {
        self.when.as_ref().is_none_or(|c| {
            c.holds(
                &self.name,
                &tool_use.name,
                &tool_use.input,
                cx.invocation_state().as_map(),
            )
        })
    }

    /// The handler's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind's name (`deny_tools`, ..., or `fail`).
    pub fn kind_name(&self) -> &'static str {
        self.kind
    }

    pub(super) fn event_set(&self) -> EventSet {
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

    pub(super) fn fail(&self, event: EventKind) -> Result<(), HandlerError> {
        match &self.rule {
            Rule::Fail { event: e, message } if *e == event => {
                Err(HandlerError::new(message.clone()))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
