//! Tool registry and tool execution (SPEC §6): BeforeToolCall → validate → run → AfterToolCall.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use rein_core::{
    AfterToolCallEvent, BeforeToolCallEvent, DecisionAction, DecisionOutcome, DecisionRecord,
    Error, EventKind, Interrupt, InterruptAnswers, InvocationContext, ToolContext, ToolHandle,
    ToolResult, ToolResultStatus, ToolSpec, ToolUse,
};
use rein_hooks::HookRegistry;
use tracing::Instrument as _;

use crate::schema_cache;
use crate::stream::{AgentEvent, Sink};

/// How the tool uses of one model response are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolExecutor {
    /// All at once, at most `max` at a time (default 16). Results keep tool-use order.
    Concurrent {
        /// The bound.
        max: usize,
    },
    /// One after another, in order; stops at the first interrupted tool.
    Sequential,
}

impl Default for ToolExecutor {
    fn default() -> Self {
        Self::Concurrent { max: 16 }
    }
}

struct ToolEntry {
    handle: ToolHandle,
    validator: Arc<jsonschema::Validator>,
}

/// The agent's tools, with their compiled input validators.
#[derive(Default)]
pub(crate) struct ToolSet {
    by_name: HashMap<String, ToolEntry>,
    specs: Arc<Vec<ToolSpec>>,
}

impl ToolSet {
    pub(crate) fn new(tools: Vec<ToolHandle>) -> Result<Self, Error> {
        let mut by_name = HashMap::with_capacity(tools.len());
        let mut specs = Vec::with_capacity(tools.len());
        for handle in tools {
            let name = handle.name().to_owned();
            let validator =
                schema_cache::validator_for(&handle.spec().input_schema).map_err(|e| {
                    Error::Config(format!("tool '{name}' has an invalid input schema: {e}"))
                })?;
            specs.push(handle.spec().clone());
            let entry = ToolEntry { handle, validator };
            if by_name.insert(name.clone(), entry).is_some() {
                return Err(Error::Config(format!("duplicate tool name: '{name}'")));
            }
        }
        Ok(Self {
            by_name,
            specs: Arc::new(specs),
        })
    }

    pub(crate) fn specs(&self) -> Arc<Vec<ToolSpec>> {
        self.specs.clone()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&ToolHandle> {
        self.by_name.get(name).map(|e| &e.handle)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(|s| s.name.as_str())
    }

    /// Validates `input` against the schema of `tool` (compiling one for a tool a hook swapped in).
    fn validate(&self, tool: &ToolHandle, input: &serde_json::Value) -> Result<(), String> {
        let owned;
        let validator = match self.by_name.get(tool.name()) {
            Some(e) if e.handle == *tool => &*e.validator,
            _ => {
                owned = schema_cache::validator_for(&tool.spec().input_schema)
                    .map_err(|e| format!("the tool's input schema is invalid: {e}"))?;
                &*owned
            }
        };
        validator.validate(input).map_err(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{e} (at {path})")
            }
        })
    }
}

/// What one tool use came to.
pub(crate) struct ToolOutcome {
    /// `None` when the tool is waiting for an interrupt answer.
    pub(crate) result: Option<ToolResult>,
    pub(crate) interrupts: Vec<Interrupt>,
    /// A committed rewrite of the tool use (hooks or transforms).
    pub(crate) rewritten: Option<ToolUse>,
    pub(crate) decisions: Vec<DecisionRecord>,
    pub(crate) ran: Option<(String, Duration, bool)>,
}

/// What the tool phase shares between concurrently running tools.
pub(crate) struct ToolRun<'a> {
    pub(crate) tools: &'a ToolSet,
    pub(crate) hooks: &'a HookRegistry,
    pub(crate) cx: &'a InvocationContext,
    pub(crate) answers: &'a InterruptAnswers,
    pub(crate) agent_state: &'a rein_core::AgentState,
    pub(crate) sink: &'a Sink,
    pub(crate) model_call_index: u32,
    pub(crate) max_hook_retries: u32,
}

/// Error text for a tool input that is not valid JSON.
pub(crate) fn invalid_json_text(detail: &str) -> String {
    format!("Error: invalid tool input JSON: {detail}")
}

fn retry_limit_text(n: u32) -> String {
    format!("DENIED: retry limit ({n}) reached")
}

impl ToolRun<'_> {
    /// Runs one tool use through its hooks. `invalid_json` is the parse error of its input.
    pub(crate) async fn run(
        &self,
        tool_use: ToolUse,
        invalid_json: Option<&str>,
    ) -> Result<ToolOutcome, Error> {
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", tool_use.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %tool_use.name,
            gen_ai.tool.call.id = %tool_use.tool_use_id,
            gen_ai.tool.status = tracing::field::Empty,
        );
        let out = self
            .run_inner(tool_use, invalid_json)
            .instrument(span.clone())
            .await;
        if let Ok(o) = &out
            && let Some(r) = &o.result
        {
            span.record(
                "gen_ai.tool.status",
                if r.is_error() { "error" } else { "success" },
            );
        }
        out
    }

    async fn run_inner(
        &self,
        original: ToolUse,
        invalid_json: Option<&str>,
    ) -> Result<ToolOutcome, Error> {
        let mut outcome = ToolOutcome {
            result: None,
            interrupts: Vec::new(),
            rewritten: None,
            decisions: Vec::new(),
            ran: None,
        };
        // The tool use moves through the events and comes back out of them: no copies on the
        // common path.
        let mut current = original;
        let mut retries = 0u32;
        loop {
            let selected = self.tools.get(&current.name).cloned();
            let mut selected_after = selected.clone();
            let result = if let Some(detail) = invalid_json {
                // Nothing to authorize: the call cannot run. The model sees why.
                ToolResult::error(&current.tool_use_id, invalid_json_text(detail))
            } else {
                // The event's own scope ends before the tool runs, so its bytes are reused by
                // the tool's future instead of adding to them.
                let (tu, edited, sel, cancel, interrupts, decisions) = {
                    let mut ev = BeforeToolCallEvent::new(
                        self.cx.clone(),
                        current,
                        selected,
                        self.model_call_index,
                        self.answers.clone(),
                    );
                    if self.hooks.has::<BeforeToolCallEvent>()
                        && let Err(e) = self.hooks.dispatch(&mut ev).await
                    {
                        self.emit_decisions(&ev.take_decisions());
                        return Err(e);
                    }
                    ev.into_parts()
                };
                current = tu;
                self.emit_decisions(&decisions);
                outcome.decisions.extend(decisions);
                if !interrupts.is_empty() {
                    if self.sink.is_enabled() {
                        for i in &interrupts {
                            self.sink.push(AgentEvent::Interrupt(i.clone()));
                        }
                    }
                    outcome.interrupts = interrupts;
                    outcome.result = None;
                    return Ok(outcome);
                }
                if edited {
                    outcome.rewritten = Some(current.clone());
                }
                selected_after.clone_from(&sel);
                if let Some(text) = cancel.text(BeforeToolCallEvent::DEFAULT_CANCEL) {
                    ToolResult::error(&current.tool_use_id, text)
                } else {
                    match sel {
                        None => ToolResult::error(
                            &current.tool_use_id,
                            format!("Unknown tool: {}", current.name),
                        ),
                        Some(tool) => match self.tools.validate(&tool, &current.input) {
                            Err(what) => ToolResult::error(
                                &current.tool_use_id,
                                format!("Error: invalid input: {what}"),
                            ),
                            Ok(()) => match self.call_tool(&tool, &mut current, &mut outcome).await
                            {
                                Some(r) => r,
                                None => return Ok(outcome),
                            },
                        },
                    }
                }
            };
            let mut after = AfterToolCallEvent::new(
                self.cx.clone(),
                current,
                selected_after,
                result,
                self.model_call_index,
            );
            if self.hooks.has::<AfterToolCallEvent>()
                && let Err(e) = self.hooks.dispatch(&mut after).await
            {
                self.emit_decisions(&after.take_decisions());
                return Err(e);
            }
            let (mut result, retry, decisions, tool_use) = after.into_parts();
            current = tool_use;
            self.emit_decisions(&decisions);
            outcome.decisions.extend(decisions);
            // The result always answers the tool use id the model gave.
            if result.tool_use_id != current.tool_use_id {
                result.tool_use_id.clone_from(&current.tool_use_id);
            }
            if retry {
                if retries < self.max_hook_retries {
                    retries += 1;
                    continue;
                }
                let text = retry_limit_text(self.max_hook_retries);
                let record = DecisionRecord::new(
                    "rein:retry-limit",
                    EventKind::AfterToolCall,
                    DecisionAction::Deny,
                    DecisionOutcome::Applied,
                )
                .with_text(text.clone())
                .with_tool_use_id(Some(current.tool_use_id.clone()));
                self.emit_decisions(std::slice::from_ref(&record));
                outcome.decisions.push(record);
                result = ToolResult::error(&current.tool_use_id, text);
            }
            if self.sink.is_enabled() {
                self.sink.push(AgentEvent::ToolResult(result.clone()));
            }
            outcome.result = Some(result);
            return Ok(outcome);
        }
    }

    /// Runs the tool itself. `None` when it raised an interrupt.
    async fn call_tool(
        &self,
        tool: &ToolHandle,
        tool_use: &mut ToolUse,
        outcome: &mut ToolOutcome,
    ) -> Option<ToolResult> {
        if self.sink.is_enabled() {
            self.sink.push(AgentEvent::ToolCallStarted {
                tool_use: tool_use.clone(),
            });
        }
        let tcx = ToolContext::new(
            &tool_use.tool_use_id,
            &tool_use.name,
            self.cx.invocation_id,
            self.cx.invocation_state.clone(),
            self.agent_state.clone(),
            self.answers.clone(),
        );
        let started = Instant::now();
        // The call itself is inside the future, so a panic while creating the tool's future
        // (a sync tool) is caught too.
        // Without AfterToolCall hooks nobody looks at the input after the call (and nothing can
        // ask for a retry): hand it to the tool instead of copying it.
        let input = if self.hooks.has::<AfterToolCallEvent>() {
            tool_use.input.clone()
        } else {
            std::mem::take(&mut tool_use.input)
        };
        let call_cx = tcx.clone();
        let ran = AssertUnwindSafe(async move { tool.call(input, call_cx).await })
            .catch_unwind()
            .await;
        let elapsed = started.elapsed();
        let raised = tcx.raised_interrupts();
        if !raised.is_empty() {
            if self.sink.is_enabled() {
                for i in &raised {
                    self.sink.push(AgentEvent::Interrupt(i.clone()));
                }
            }
            outcome.interrupts = raised;
            return None;
        }
        let result = match ran {
            Ok(Ok(out)) => ToolResult {
                tool_use_id: tool_use.tool_use_id.clone(),
                status: out.status,
                content: out.content,
            },
            Ok(Err(e)) => ToolResult::error(&tool_use.tool_use_id, format!("Error: {e}")),
            Err(panic) => {
                let msg = panic_message(&*panic);
                tracing::error!(tool = %tool_use.name, "tool panicked: {msg}");
                ToolResult::error(
                    &tool_use.tool_use_id,
                    format!("Error: tool '{}' panicked: {msg}", tool_use.name),
                )
            }
        };
        outcome.ran = Some((
            tool_use.name.clone(),
            elapsed,
            result.status == ToolResultStatus::Error,
        ));
        Some(result)
    }

    fn emit_decisions(&self, decisions: &[DecisionRecord]) {
        if self.sink.is_enabled() {
            for d in decisions {
                self.sink.push(AgentEvent::Decision(d.clone()));
            }
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}
