//! What a [`PolicyHandler`] decides at each lifecycle point ([`Decide`], and the
//! [`InterventionHandler`] it is), with the matching and redacting its rules share. Building the
//! handler from its configuration is `handler.rs`.

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
use serde_json::Value;

use super::config::RedactTarget;
use super::handler::{PolicyHandler, Rule, matches_opt};
use super::template::{TemplateVars, json_text};
use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, Confirm, ModelOutputAction,
};
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::list::for_each_intervention_event;
use crate::set::EventSet;

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
        if !self.applies(ev.tool_use(), cx) {
            return Ok(BeforeToolCallAction::Proceed);
        }
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
        if !self.applies(ev.tool_use(), cx) {
            return Ok(AfterToolCallAction::Proceed);
        }
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
