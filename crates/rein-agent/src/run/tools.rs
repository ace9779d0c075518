//! The tool phase (SPEC §6): the tool uses of one assistant message, each through
//! BeforeToolCall → validation → the tool → AfterToolCall, sequentially or concurrently; then
//! their results are stored, or the phase pauses on interrupts.

use std::any::Any;
use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::{FutureExt as _, StreamExt as _};
use rein_core::{
    Error, Message, Role, ToolHandle, ToolResult, ToolUse,
    audit::{DecisionRecord, EventKind},
    event::{
        AfterToolCallEvent, BeforeToolCallEvent, InvocationContext, ToolCallAction,
        ToolResultVerdict,
    },
    interrupt::{Interrupt, InterruptAnswers, InterruptEvent},
    message::ToolResultStatus,
    result::ToolMetrics,
    stream::Usage,
    tool::{ToolContext, ToolProgress, ToolProgressListener},
};
use rein_hooks::HookRegistry;

use super::machine::{PhaseEnd, StepReport, ToolPhase, ToolRetries, ToolsEnd, retry_limit_record};
use super::{Driver, Invocation, listeners};
use crate::agent::Agent;
use crate::agent_tool::{ParentLink, RunsAgent, SubAgentPaused};
use crate::checkpoint::{Checkpoint, Pause, PendingHandoff, PendingInterrupt, ToolsPause};
use crate::handoff::HandoffTo;
use crate::history::TOOL_INTERRUPTED;
use crate::journal::ToolCallEnd;
use crate::stream::{AgentEvent, Sink};
use crate::tools::{ToolExecutor, ToolSet};

impl Agent {
    /// The tool phase of the stored assistant message at `index`.
    pub(super) fn tool_phase_of(
        &self,
        index: usize,
        model_call_index: u32,
        completed: Vec<ToolResult>,
        held: Vec<ToolResult>,
    ) -> ToolPhase {
        let tool_uses = self
            .history
            .conv()
            .get(index)
            .into_iter()
            .flat_map(Message::tool_uses);
        ToolPhase::new(index, model_call_index, tool_uses, completed, held)
    }
}

impl Driver<'_> {
    /// Runs the tool uses of the phase under way (`self.inv.tool_phase`) still without a result;
    /// stores their results, or pauses on the interrupts raised.
    pub(super) async fn tool_phase(
        &mut self,
        invalid_inputs: &[(String, String)],
    ) -> Result<StepReport, Error> {
        // Two futures one after the other (layout rule 3).
        let index = self.run_tools(invalid_inputs).await?;
        self.settle_tool_phase(index).await
    }

    /// Runs the phase's open tool uses; returns the index of their assistant message.
    async fn run_tools(&mut self, invalid_inputs: &[(String, String)]) -> Result<usize, Error> {
        let Some(index) = self.inv.tool_phase.as_ref().map(|p| p.index) else {
            return Err(Error::Internal("no tool phase under way"));
        };
        let (Some(phase), Some(assistant)) = (
            self.inv.tool_phase.as_mut(),
            self.agent.history.conv().get(index),
        ) else {
            return Err(Error::Internal("a tool phase on a message not in history"));
        };
        // The tool uses run as stored, borrowed from history (nothing writes it during the
        // phase): a copy is made only for what needs one of its own (an event, an edit).
        // A result held for an answer goes through AfterToolCall again; its tool does not run.
        // A tool use a human edited when approving runs as edited.
        // An interrupted tool resumes from the state it saved.
        let todo: Vec<Todo<'_>> = assistant
            .tool_uses()
            .enumerate()
            .filter_map(|(i, u)| {
                if !phase.is_open(i) {
                    return None;
                }
                let held = phase.take_held(&u.tool_use_id);
                let child = phase.take_child(&u.tool_use_id);
                // Boxed (layout rule 1): nearly every tool use carries nothing.
                let carried =
                    (held.is_some() || child.is_some()).then(|| Box::new(Carried { held, child }));
                let tool_use = phase.take_edit(u).map_or(Cow::Borrowed(u), Cow::Owned);
                Some((i, tool_use, carried))
            })
            .collect();
        let answers = self.inv.answers.clone();
        let cx = self.inv.cx.clone();
        let model_call_index = self
            .inv
            .tool_phase
            .as_ref()
            .map_or(0, |p| p.model_call_index);
        let max_handoffs = self.inv.max_handoffs;
        let span = self.inv.span.clone();
        let run = ToolRun {
            tools: &self.agent.core.tools,
            hooks: &self.agent.core.settings.hooks,
            cx: &cx,
            answers: &answers,
            agent_state: &self.agent.state,
            sink: self.sink,
            model_call_index,
            max_hook_retries: self.agent.core.settings.config.max_hook_retries,
            journal: self.inv.journal.clone(),
            handoff: Mutex::new(HandoffClaim {
                asked: self.inv.handoff.take(),
                left: usize::try_from(max_handoffs)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(self.inv.handoffs.len()),
                max: max_handoffs,
            }),
            invocation: &span,
        };
        // Journaled calls go one after another: the journal's order must not depend on timing.
        let executor = match &run.journal {
            Some(_) => ToolExecutor::Sequential,
            None => self.agent.core.settings.config.executor,
        };
        match executor {
            ToolExecutor::Sequential => {
                let mut todo = todo.into_iter();
                loop {
                    // Made in a block, awaited here, no `for` (layout rule 3).
                    let (i, span, call) = {
                        let Some((i, tool_use, carried)) = todo.next() else {
                            break;
                        };
                        let bad = invalid_input(invalid_inputs, &tool_use.tool_use_id);
                        let ToolCall { span, outcome } = run.start(tool_use, bad, carried);
                        (i, span, outcome)
                    };
                    // Boxed (layout rules 1, 2), as the concurrent executor holds its calls.
                    let out = crate::telemetry::in_span!(&span.span, Box::pin(call));
                    span.close(out.as_ref());
                    if self.inv.settle_tool(i, out?, self.sink) {
                        break;
                    }
                }
            }
            ToolExecutor::Concurrent { max } => {
                let mut results = run.concurrently(todo, invalid_inputs, max);
                while let Some((i, outcome)) = results.next().await {
                    self.inv.settle_tool(i, outcome?, self.sink);
                }
            }
        }
        // Carried out at the turn boundary (or kept with the pause).
        self.inv.handoff = run
            .handoff
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .asked;
        Ok(index)
    }

    /// Stores the results of the phase's tool uses, or pauses it on their interrupts.
    async fn settle_tool_phase(&mut self, index: usize) -> Result<StepReport, Error> {
        // The phase is used up in a block (layout rule 3).
        let (model_call_index, end) = {
            let mut phase = self.inv.tool_phase.take().unwrap_or_default();
            // Tool-use rewrites (hooks, transforms) are committed to the stored message.
            let rewrites = phase.take_rewrites();
            let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
            self.agent
                .history
                .rewrite_tool_uses(index, &rewrites, &to)
                .await?;
            match self.agent.history.conv().get(index) {
                Some(assistant) => (
                    phase.model_call_index,
                    phase.end(assistant, TOOL_INTERRUPTED),
                ),
                None => return Err(Error::Internal("a tool phase on a message not in history")),
            }
        };
        match end {
            PhaseEnd::Interrupted {
                interrupts,
                completed,
                held,
                children,
            } => {
                let assistant = self
                    .agent
                    .history
                    .conv()
                    .get(index)
                    .cloned()
                    .unwrap_or_else(|| Message::new(Role::Assistant, Vec::new()));
                let wire = interrupts.iter().map(|p| p.interrupt.clone()).collect();
                let at = Pause::Tools(Box::new(ToolsPause {
                    message_id: self.agent.history.conv().id(index),
                    message: assistant.clone(),
                    model_call_index,
                    completed,
                    held,
                    children,
                    handoff: self.inv.handoff.take(),
                }));
                self.agent.pending = Some(Box::new(self.inv.pause(at, interrupts)));
                self.agent.session_sync().await?;
                Ok(StepReport::ToolsDone(ToolsEnd::Interrupted {
                    message: assistant,
                    interrupts: wire,
                }))
            }
            PhaseEnd::Completed(blocks) => {
                let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
                self.agent.history.append_user(blocks, &to).await?;
                // Answers are cleared once the tool cycle completes.
                self.inv.answers = InterruptAnswers::default();
                Ok(StepReport::ToolsDone(ToolsEnd::Completed {
                    cancel_requested: self.agent.cancel.after_tools_requested(),
                }))
            }
        }
    }
}

impl Invocation {
    /// Records what one tool use came to; returns whether a sequential phase stops here. Its
    /// interrupts get the pause's nonce and are streamed here (one place, whatever raised them).
    fn settle_tool(&mut self, position: usize, mut o: ToolOutcome<'_>, sink: &Sink) -> bool {
        if !o.interrupts.is_empty() {
            self.stamp(&mut o.interrupts);
            for p in &o.interrupts {
                sink.emit(|| AgentEvent::Interrupt(p.interrupt.clone()));
            }
        }
        self.decisions.extend(o.decisions);
        if let Some(sub) = o.sub_run {
            for (path, usage) in sub.usage {
                self.sub_agent_usage.entry(path).or_default().add(&usage);
            }
            if let (Some((id, child)), Some(phase)) = (sub.paused, self.tool_phase.as_mut()) {
                phase.keep_child(id, child);
            }
        }
        if let Some((name, took, is_error)) = o.ran {
            let add = |m: &mut ToolMetrics| {
                m.calls += 1;
                m.total_time += took;
                if is_error {
                    m.errors += 1;
                }
            };
            // Looked up first: the name is copied for the map once, not per call.
            let tools = &mut self.metrics.tools;
            match tools.get_mut(&*name) {
                Some(m) => add(m),
                None => add(tools.entry(name.into_owned()).or_default()),
            }
        }
        match &mut self.tool_phase {
            Some(phase) => phase.record(
                position,
                o.result,
                o.held.map(|r| *r),
                o.interrupts,
                o.rewritten.map(|u| *u),
            ),
            None => true,
        }
    }
}

/// What one tool use came to (`'u`: the stored tool use's borrow).
struct ToolOutcome<'u> {
    /// `None` when the tool is waiting for an interrupt answer.
    result: Option<ToolResult>,
    /// The result of a tool that ran, held for an answer (AfterToolCall interrupts); boxed
    /// (layout rule 1).
    held: Option<Box<ToolResult>>,
    interrupts: Vec<PendingInterrupt>,
    /// A committed rewrite of the tool use (hooks or transforms).
    rewritten: Option<Box<ToolUse>>,
    decisions: Vec<DecisionRecord>,
    /// The tool's name, how long it took, whether it failed.
    ran: Option<(Cow<'u, str>, Duration, bool)>,
    /// What an agent running as the tool left (boxed: layout rule 1).
    sub_run: Option<Box<SubRun>>,
}

/// What an agent running as a tool left (or resumes from).
#[derive(Default)]
struct SubRun {
    /// Its checkpoint when it paused before (it resumes from it).
    resume: Option<Checkpoint>,
    /// Its checkpoint as it paused now, with the tool use id.
    paused: Option<(String, Checkpoint)>,
    /// Usage of agents that ran as this tool, by agent path.
    usage: Vec<(String, Usage)>,
}

/// What a tool use carries into its run from an earlier pause.
pub(super) struct Carried {
    /// Its result, held for an answer (AfterToolCall interrupts): the tool does not run.
    held: Option<ToolResult>,
    /// The checkpoint of the agent running as the tool, paused.
    child: Option<Checkpoint>,
}

/// Where a running tool's progress goes: the stream, until the tool returns.
struct ProgressToStream {
    sink: Sink,
    open: AtomicBool,
}

impl ToolProgressListener for ProgressToStream {
    fn tool_progress(&self, tool_use_id: &str, tool_name: &str, progress: ToolProgress) {
        let event = AgentEvent::ToolProgress {
            tool_use_id: tool_use_id.to_owned(),
            name: tool_name.to_owned(),
            progress: progress.progress,
            total: progress.total,
            message: progress.message,
        };
        self.sink.progress(Some(&self.open), event);
    }
}

/// What the tool phase shares between concurrently running tools.
struct ToolRun<'a> {
    tools: &'a ToolSet,
    hooks: &'a HookRegistry,
    cx: &'a InvocationContext,
    answers: &'a InterruptAnswers,
    agent_state: &'a rein_core::state::AgentState,
    sink: &'a Sink,
    model_call_index: u32,
    max_hook_retries: u32,
    /// Where tool calls are recorded, if anywhere (an agent running as a tool journals its
    /// steps in the parent's run).
    journal: Option<crate::journal::SharedJournal>,
    /// The handoff a transfer tool of this phase asked for (one per phase).
    handoff: Mutex<HandoffClaim>,
    /// The run's `invoke_agent` span.
    invocation: &'a tracing::Span,
}

/// The one handoff a tool phase may ask for.
struct HandoffClaim {
    asked: Option<PendingHandoff>,
    left: usize,
    max: u32,
}

impl HandoffClaim {
    /// Claims the phase's handoff for a transfer tool's use, or the text of the error result
    /// that answers it instead.
    fn claim(&mut self, to: &str, tool_use_id: &str) -> Result<(), String> {
        if self.asked.is_some() {
            return Err("Error: another handoff is under way".into());
        }
        if self.left == 0 {
            return Err(format!("Error: handoff limit ({}) reached", self.max));
        }
        self.asked = Some(PendingHandoff::new(to, tool_use_id));
        Ok(())
    }
}

/// A tool use to run: its position in the message, the tool use (borrowed as stored, or
/// edited), what it carries from an earlier pause.
type Todo<'u> = (usize, Cow<'u, ToolUse>, Option<Box<Carried>>);

/// The parse error of the tool use `id`'s input, if its JSON was not valid.
fn invalid_input<'a>(invalid_inputs: &'a [(String, String)], id: &str) -> Option<&'a str> {
    invalid_inputs
        .iter()
        .find(|(i, _)| i == id)
        .map(|(_, e)| e.as_str())
}

/// Interrupts raised at `event` about the tool use `subject`.
fn raised_at(
    event: InterruptEvent,
    subject: &str,
    interrupts: Vec<Interrupt>,
) -> Vec<PendingInterrupt> {
    interrupts
        .into_iter()
        .map(|i| PendingInterrupt::at(event, subject, i))
        .collect()
}

/// Error text for a tool input that is not valid JSON.
fn invalid_json_text(detail: &str) -> String {
    format!("Error: invalid tool input JSON: {detail}")
}

/// A tool use under way: its `execute_tool` span and what it will come to.
struct ToolCall<F> {
    span: ToolSpan,
    outcome: F,
}

/// A tool use's `execute_tool` span, and whether it records content.
struct ToolSpan {
    span: tracing::Span,
    content: bool,
}

impl ToolSpan {
    /// Records how the tool use ended.
    #[inline]
    fn close(&self, out: Result<&ToolOutcome<'_>, &Error>) {
        let span = &self.span;
        if let Ok(o) = out
            && let Some(r) = &o.result
        {
            span.record(
                "gen_ai.tool.status",
                if r.is_error() { "error" } else { "success" },
            );
            // A failed tool is an error; a denied or rejected call is not (the tool did not run).
            if matches!(o.ran, Some((_, _, true))) {
                span.record("otel.status_code", "error");
                span.record("error.type", "tool_error");
            }
            if self.content {
                span.record(
                    "gen_ai.tool.call.result",
                    crate::telemetry::json(&r.content),
                );
            }
        }
        if let Err(e) = out {
            span.record("otel.status_code", "error");
            span.record("error.type", crate::telemetry::error_type(e));
        }
    }
}

impl ToolRun<'_> {
    /// The concurrent executor: the calls of `todo`, at most `max` at a time, each as it
    /// finishes. (A function of its own: the stream's type is named with the tool uses' borrow,
    /// which a closure in the caller's future could not prove `Send` for.)
    fn concurrently<'s>(
        &'s self,
        todo: Vec<Todo<'s>>,
        invalid_inputs: &'s [(String, String)],
        max: usize,
    ) -> impl futures_util::Stream<Item = (usize, Result<ToolOutcome<'s>, Error>)> + Send + 's {
        futures_util::stream::iter(todo)
            .map(move |(i, tool_use, carried)| {
                let bad = invalid_input(invalid_inputs, &tool_use.tool_use_id);
                // Started here, the call boxed apart from its task (layout rules 2, 3).
                let ToolCall { span, outcome } = self.start(tool_use, bad, carried);
                let outcome = Box::pin(outcome);
                async move {
                    let out = crate::telemetry::in_span!(&span.span, outcome);
                    span.close(out.as_ref());
                    (i, out)
                }
            })
            .buffer_unordered(max.max(1))
    }

    /// Opens a tool use's span and makes the future that runs it (polled inside the span).
    #[inline]
    fn start<'s>(
        &'s self,
        tool_use: Cow<'s, ToolUse>,
        invalid_json: Option<&'s str>,
        carried: Option<Box<Carried>>,
    ) -> ToolCall<impl Future<Output = Result<ToolOutcome<'s>, Error>> + 's> {
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", tool_use.name),
            otel.kind = "internal",
            otel.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %tool_use.name,
            gen_ai.tool.call.id = %tool_use.tool_use_id,
            gen_ai.tool.type = "function",
            gen_ai.tool.status = tracing::field::Empty,
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
        );
        let content = crate::telemetry::capture_content() && !span.is_disabled();
        if content {
            let arguments = crate::telemetry::json(&tool_use.input);
            span.record("gen_ai.tool.call.arguments", arguments);
        }
        ToolCall {
            span: ToolSpan { span, content },
            outcome: self.run_inner(tool_use, invalid_json, carried),
        }
    }

    async fn run_inner<'u>(
        &self,
        original: Cow<'u, ToolUse>,
        invalid_json: Option<&str>,
        carried: Option<Box<Carried>>,
    ) -> Result<ToolOutcome<'u>, Error> {
        // A held result boxed (layout rule 1).
        let (mut held, child) = match carried {
            Some(c) => (c.held.map(Box::new), c.child),
            None => (None, None),
        };
        let mut outcome = ToolOutcome {
            result: None,
            held: None,
            interrupts: Vec::new(),
            rewritten: None,
            decisions: Vec::new(),
            ran: None,
            sub_run: child.map(|c| {
                Box::new(SubRun {
                    resume: Some(c),
                    ..SubRun::default()
                })
            }),
        };
        let mut retries = ToolRetries::new(self.max_hook_retries);
        // The tool use moves through the events and comes back out of them: borrowed from the
        // stored message until an event needs one of its own; only ever moved, never borrowed
        // (layout rule 3).
        let mut current = original;
        loop {
            // (`if let`, not a `match` on both: layout rule 3.)
            let (tool_use, selected, result) = if let Some(result) = held.take() {
                // The tool ran before the pause; its result waits for AfterToolCall's answer.
                let (current, selected) = self.with_tool(current);
                (current, selected, *result)
            } else if let Some(detail) = invalid_json {
                // Nothing to authorize: the call cannot run. The model sees why.
                let (current, selected) = self.with_tool(current);
                let result = ToolResult::error(&current.tool_use_id, invalid_json_text(detail));
                (current, selected, result)
            } else {
                let (mut tool_use, tool, cancelled) = if self.hooks.has::<BeforeToolCallEvent>() {
                    // The event and its verdict are taken apart in a block (layout rule 3).
                    let (current, selected) = self.with_tool(current);
                    let mut ev = BeforeToolCallEvent::new(self.cx.clone(), current.into_owned())
                        .with_selected_tool(selected)
                        .with_model_call_index(self.model_call_index)
                        .with_answers(self.answers.clone());
                    let dispatched = self.hooks.dispatch(&mut ev).await;
                    self.record(ev.take_decisions(), &mut outcome);
                    dispatched?;
                    let verdict = ev.into_verdict();
                    let cancelled = match verdict.action {
                        ToolCallAction::Interrupt(interrupts) => {
                            let subject = &verdict.tool_use.tool_use_id;
                            outcome.interrupts =
                                raised_at(InterruptEvent::BeforeToolCall, subject, interrupts);
                            return Ok(outcome);
                        }
                        ToolCallAction::Cancel(text) => Some(text),
                        ToolCallAction::Run => None,
                    };
                    if verdict.edited {
                        outcome.rewritten = Some(Box::new(verdict.tool_use.clone()));
                    }
                    (Cow::Owned(verdict.tool_use), verdict.tool, cancelled)
                } else {
                    // No hook: the call runs as the model asked (no event to make).
                    let (current, selected) = self.with_tool(current);
                    (current, selected, None)
                };
                // (`if let`s, not a `match` on a tuple or on the check: a scrutinee would live
                // across the tool's call.)
                let result = if let Some(text) = cancelled {
                    ToolResult::error(&tool_use.tool_use_id, text)
                } else if let Some(handle) = &tool {
                    if let Err(what) = self.tools.validate(handle, &tool_use.input) {
                        ToolResult::error(
                            &tool_use.tool_use_id,
                            format!("Error: invalid input: {what}"),
                        )
                    } else {
                        match self.call_tool(handle, &mut tool_use, &mut outcome).await {
                            Some(r) => r,
                            None => return Ok(outcome),
                        }
                    }
                } else {
                    ToolResult::error(
                        &tool_use.tool_use_id,
                        format!("Unknown tool: {}", tool_use.name),
                    )
                };
                (tool_use, tool, result)
            };
            let (tool_use, mut result) = if self.hooks.has::<AfterToolCallEvent>() {
                // AfterToolCall inline: a future of its own would move the tool use and result
                // again.
                let mut ev =
                    AfterToolCallEvent::new(self.cx.clone(), tool_use.into_owned(), result)
                        .with_selected_tool(selected)
                        .with_model_call_index(self.model_call_index)
                        .with_answers(self.answers.clone());
                let dispatched = self.hooks.dispatch(&mut ev).await;
                self.record(ev.take_decisions(), &mut outcome);
                dispatched?;
                match ev.into_verdict() {
                    ToolResultVerdict::Keep { tool_use, result } => (Cow::Owned(tool_use), result),
                    ToolResultVerdict::Hold {
                        tool_use,
                        result,
                        interrupts,
                    } => {
                        let subject = &tool_use.tool_use_id;
                        outcome.interrupts =
                            raised_at(InterruptEvent::AfterToolCall, subject, interrupts);
                        outcome.held = Some(Box::new(result));
                        return Ok(outcome);
                    }
                    ToolResultVerdict::Retry { tool_use } => match retries.retry() {
                        Ok(()) => {
                            current = Cow::Owned(tool_use);
                            continue;
                        }
                        Err(text) => {
                            let record =
                                retry_limit_record(EventKind::AfterToolCall, retries.max())
                                    .with_tool_use_id(Some(tool_use.tool_use_id.clone()));
                            self.record(vec![record], &mut outcome);
                            let result = ToolResult::error(&tool_use.tool_use_id, text);
                            (Cow::Owned(tool_use), result)
                        }
                    },
                }
            } else {
                (tool_use, result)
            };
            // The result always answers the tool use id the model gave.
            if result.tool_use_id != tool_use.tool_use_id {
                result.tool_use_id.clone_from(&tool_use.tool_use_id);
            }
            self.sink.emit(|| AgentEvent::ToolResult(result.clone()));
            outcome.result = Some(result);
            return Ok(outcome);
        }
    }

    /// The tool use with the tool it names, the tool use taken by value (see `run_inner`).
    fn with_tool<'u>(&self, tool_use: Cow<'u, ToolUse>) -> (Cow<'u, ToolUse>, Option<ToolHandle>) {
        let tool = self.tools.get(&tool_use.name);
        (tool_use, tool)
    }

    /// Runs the tool itself. `None` when it raised an interrupt.
    async fn call_tool<'u>(
        &self,
        tool: &ToolHandle,
        tool_use: &mut Cow<'u, ToolUse>,
        outcome: &mut ToolOutcome<'u>,
    ) -> Option<ToolResult> {
        self.sink.emit(|| AgentEvent::ToolCallStarted {
            tool_use: ToolUse::clone(tool_use),
        });
        if let Some(transfer) = tool.capability::<HandoffTo>() {
            let claimed = self
                .handoff
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .claim(&transfer.target, &tool_use.tool_use_id);
            if let Err(text) = claimed {
                return Some(ToolResult::error(&tool_use.tool_use_id, text));
            }
        }
        let mut tcx = ToolContext::new(
            &tool_use.tool_use_id,
            &tool_use.name,
            self.cx.invocation_id,
            self.cx.invocation_state.clone(),
            self.agent_state.clone(),
            self.answers.clone(),
        );
        // Its progress goes to the stream while it runs, when someone reads the stream.
        let progress = self.sink.is_enabled().then(|| {
            let to = Arc::new(ProgressToStream {
                sink: self.sink.clone(),
                open: AtomicBool::new(true),
            });
            tcx = tcx.clone().with_progress_listener(to.clone());
            to
        });
        // An agent running as this tool finds its parent's run here (and its saved state).
        let linked = outcome.sub_run.is_some() || tool.capability::<RunsAgent>().is_some();
        let link = linked.then(|| {
            let resume = outcome.sub_run.as_mut().and_then(|s| s.resume.take());
            let journal = self.journal.clone();
            let link = Arc::new(ParentLink::new(resume, self.sink.clone(), journal));
            tcx = tcx.clone().with_extension(link.clone());
            link
        });
        let started = Instant::now();
        // Without AfterToolCall hooks nobody looks at the input after the call (and nothing can
        // ask for a retry): a tool use of the call's own hands it to the tool instead of
        // copying it.
        let input = match tool_use {
            Cow::Owned(u) if !self.hooks.has::<AfterToolCallEvent>() => {
                std::mem::take(&mut u.input)
            }
            _ => tool_use.input.clone(),
        };
        let ran = match self.journal.as_deref() {
            // An agent running as this tool journals its own steps (it runs in this one).
            // Boxed (layout rule 1).
            Some(journal) if link.is_none() => {
                let handle = tool.clone();
                let call =
                    crate::journal::tool_call(journal, handle, input, &tcx, self.agent_state);
                match Box::pin(call).await {
                    ToolCallEnd::Ran(ran) => Ok(ran),
                    ToolCallEnd::Panicked(msg) => Err(Box::new(msg) as Box<dyn Any + Send>),
                }
            }
            // The tool's future is made under `catch_unwind` too, so a panic while making it
            // (a sync tool) is caught like one while it runs.
            _ => match std::panic::catch_unwind(AssertUnwindSafe(|| tool.call(input, tcx.clone())))
            {
                Ok(call) => AssertUnwindSafe(call).catch_unwind().await,
                Err(panic) => Err(panic),
            },
        };
        let elapsed = started.elapsed();
        if let Some(to) = progress {
            self.sink.close_progress(&to.open);
        }
        let subject = &tool_use.tool_use_id;
        let mut raised = raised_at(InterruptEvent::ToolCall, subject, tcx.raised_interrupts());
        if let Some(link) = link {
            let (paused, usage, decisions) = link.take();
            let sub = outcome.sub_run.get_or_insert_with(Box::default);
            sub.usage = usage;
            outcome.decisions.extend(decisions);
            // A sub-agent that paused (its tool says so, typed) raises its interrupts here,
            // placed where it raised them.
            let said_paused = matches!(&ran, Ok(Err(e)) if SubAgentPaused::is(e));
            if let (true, Some(child)) = (said_paused, paused) {
                raised.extend(child.interrupts);
                sub.paused = Some((tool_use.tool_use_id.clone(), child.checkpoint));
            }
        }
        if !raised.is_empty() {
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
                let msg = rein_core::error::panic_message(&*panic);
                // A panic message may quote the input: content, logged only when captured.
                if crate::telemetry::capture_content() {
                    tracing::error!(tool = %tool_use.name, "tool panicked: {msg}");
                } else {
                    tracing::error!(tool = %tool_use.name, "tool panicked");
                }
                ToolResult::error(
                    &tool_use.tool_use_id,
                    format!("Error: tool '{}' panicked: {msg}", tool_use.name),
                )
            }
        };
        let is_error = result.status == ToolResultStatus::Error;
        crate::telemetry::tool_call_metrics(&tool_use.name, is_error);
        // The name borrowed with the tool use: the invocation's metrics copy it once per tool.
        let name = match tool_use {
            Cow::Borrowed(u) => Cow::Borrowed(u.name.as_str()),
            Cow::Owned(u) => Cow::Owned(u.name.clone()),
        };
        outcome.ran = Some((name, elapsed, is_error));
        Some(result)
    }

    /// Streams a tool call's decisions and keeps them for the invocation's audit.
    fn record(&self, decisions: Vec<DecisionRecord>, outcome: &mut ToolOutcome<'_>) {
        crate::telemetry::decisions(&decisions, self.invocation, &self.cx.invocation_state);
        if self.sink.is_enabled() {
            for d in &decisions {
                self.sink.push(AgentEvent::Decision(d.clone()));
            }
        }
        outcome.decisions.extend(decisions);
    }
}
