//! The event loop (SPEC §2, §4, §6).

use std::collections::HashMap;
use std::time::Instant;

use futures_util::StreamExt as _;
use rein_core::{
    AfterInvocationEvent, AfterModelCallEvent, AgentResult, BeforeInvocationEvent,
    BeforeModelCallEvent, ContentBlock, CycleMetrics, DecisionAction, DecisionOutcome,
    DecisionRecord, Error, EventKind, InjectionOutcome, InjectionRecord, Interrupt,
    InterruptAnswer, InterruptAnswers, InterruptResponse, InvocationContext, InvocationMetrics,
    Message, MessageAddedEvent, MessageUpdatedEvent, ModelError, ModelRequest, ModelResponse, Role,
    StopReason, StreamAssembler, StreamEvent, ToolResult, ToolUse, Usage,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::agent::{
    Agent, CANCELLED_BY_USER, Input, TOOL_CANCELLED, TOOL_INTERRUPTED, results_in_order,
};
use crate::conversation::HistoryEdit;
use crate::pending::{PENDING_SCHEMA_VERSION, PendingInterrupts};
use crate::stream::{AgentEvent, Sink};
use crate::tools::{ToolExecutor, ToolOutcome, ToolRun};

/// Why the loop stopped early.
pub(crate) enum Stop {
    Cancelled,
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

/// What one invocation accumulates.
pub(crate) struct Invocation {
    cx: InvocationContext,
    usage: Usage,
    metrics: InvocationMetrics,
    decisions: Vec<DecisionRecord>,
    model_calls: u32,
    answers: InterruptAnswers,
    answer_map: HashMap<String, InterruptAnswer>,
    /// Results of the tool phase under way, by tool-use position (kept if the phase is cut off).
    turn_results: Vec<Option<ToolResult>>,
    /// Index of the assistant message whose tools are running.
    tool_message: Option<usize>,
    streaming_response: bool,
    run_version: u64,
    injections: Vec<InjectionRecord>,
}

enum TurnEnd {
    /// A response to act on, stored at `index` (its message moved into history).
    Accepted {
        index: usize,
        stop_reason: StopReason,
        has_tool_use: bool,
        invalid_tool_inputs: Vec<(String, String)>,
    },
    /// The turn ended with this stored (or standing) message.
    Ended {
        message: Message,
        stop_reason: StopReason,
    },
}

/// Retries of one turn so far.
#[derive(Default)]
struct Attempts {
    /// Model calls retried at a hook's request.
    hook_retries: u32,
    /// Consecutive failed model calls.
    error_attempts: u32,
}

fn retry_limit_text(n: u32) -> String {
    format!("DENIED: retry limit ({n}) reached")
}

impl Agent {
    pub(crate) async fn run(&mut self, input: Input, sink: Sink) -> Result<AgentResult, Error> {
        // A session is restored before the first invocation (session.rs).
        self.session_begin().await?;
        // Input errors are returned before anything fires.
        if input.is_resume() {
            let Some(p) = &self.pending else {
                return Err(Error::NoPendingInterrupts);
            };
            if let Some(r) = input
                .responses
                .iter()
                .find(|r| p.interrupt(&r.interrupt_id).is_none())
            {
                return Err(Error::UnknownInterrupt(r.interrupt_id.clone()));
            }
        } else if self.pending.is_some() {
            return Err(Error::InterruptsPending);
        }
        let state = match (&input.state, &self.pending) {
            (Some(s), _) => s.clone(),
            (None, Some(p)) if input.is_resume() => p.invocation_state.clone(),
            _ => Default::default(),
        };
        let cx = InvocationContext::new(state);
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format_args!("invoke_agent {}", self.core.name),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %self.core.name,
            gen_ai.provider.name = %self.core.provider,
            gen_ai.request.model = %self.core.model_id,
            gen_ai.conversation.id = %cx.invocation_id,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            rein.stop_reason = tracing::field::Empty,
        );
        let token = self.cancel.begin();
        let run_version = self.interceptor.begin();

        let mut inv = Invocation {
            cx,
            usage: Usage::default(),
            metrics: InvocationMetrics::default(),
            decisions: Vec::new(),
            model_calls: 0,
            answers: InterruptAnswers::default(),
            answer_map: HashMap::new(),
            turn_results: Vec::new(),
            tool_message: None,
            streaming_response: false,
            run_version,
            injections: Vec::new(),
        };
        let started = Instant::now();
        let outcome = {
            let run = self.run_inner(&mut inv, input, &sink, &token);
            tokio::select! {
                biased;
                _ = token.cancelled() => Err(Stop::Cancelled),
                r = run => r,
            }
        };
        self.end_run(inv, outcome, started, span, &sink).await
    }

    /// Everything after the loop: injections still queued, history repair, session, result,
    /// AfterInvocation. A separate future, so its locals do not widen the loop's.
    async fn end_run(
        &mut self,
        mut inv: Invocation,
        outcome: Result<AgentResult, Stop>,
        started: Instant,
        span: tracing::Span,
        sink: &Sink,
    ) -> Result<AgentResult, Error> {
        self.cancel.end();
        // Whatever is still queued when the run ends is rejected, exactly once.
        for item in self.interceptor.end() {
            let reason = if item.version == inv.run_version {
                "run ended"
            } else {
                "stale"
            };
            self.reject_injection(&mut inv, &item.message, item.id, reason, sink);
        }
        inv.metrics.duration = started.elapsed();
        let result = match outcome {
            Ok(mut r) => {
                r.injections = std::mem::take(&mut inv.injections);
                r.usage = inv.usage;
                r.metrics = std::mem::take(&mut inv.metrics);
                r.decisions = std::mem::take(&mut inv.decisions);
                self.apply_conversation_manager();
                Ok(r)
            }
            Err(Stop::Cancelled) => {
                if inv.streaming_response && sink.is_enabled() {
                    sink.verdict(false);
                    sink.push(AgentEvent::ResponseDiscarded {
                        reason: "cancelled".into(),
                    });
                }
                let repaired = self.repair_tool_tail(&mut inv, TOOL_CANCELLED, sink).await;
                let text = self
                    .cancel
                    .message()
                    .unwrap_or_else(|| CANCELLED_BY_USER.into());
                let mut r = AgentResult::new(
                    StopReason::Cancelled,
                    Message::assistant(text),
                    inv.cx.invocation_id,
                );
                r.usage = inv.usage;
                r.metrics = std::mem::take(&mut inv.metrics);
                r.decisions = std::mem::take(&mut inv.decisions);
                r.injections = std::mem::take(&mut inv.injections);
                repaired.map(|()| r)
            }
            Err(Stop::Failed(e)) => {
                let _ = self
                    .repair_tool_tail(&mut inv, TOOL_INTERRUPTED, sink)
                    .await;
                Err(e)
            }
        };
        // The session persists the end state (session.rs).
        let result = self.session_end(result).await;
        if let Ok(r) = &result {
            span.record("gen_ai.usage.input_tokens", r.usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", r.usage.output_tokens);
            span.record("rein.stop_reason", r.stop_reason.as_str());
        }
        if self.core.hooks.has::<AfterInvocationEvent>() {
            let mut ev = AfterInvocationEvent::new(inv.cx.clone(), result);
            self.core.hooks.dispatch(&mut ev).instrument(span).await?;
            ev.into_result()
        } else {
            result
        }
    }

    /// Gives every tool use of a cut-off tool phase a result, unless interrupts are pending.
    async fn repair_tool_tail(
        &mut self,
        inv: &mut Invocation,
        text: &str,
        sink: &Sink,
    ) -> Result<(), Error> {
        let Some(idx) = inv.tool_message.take() else {
            return Ok(());
        };
        if self.pending.is_some() || idx + 1 != self.conv.len() {
            return Ok(());
        }
        let Some(assistant) = self.conv.get(idx).cloned() else {
            return Ok(());
        };
        let completed: Vec<ToolResult> = inv.turn_results.iter().flatten().cloned().collect();
        let blocks = results_in_order(&assistant, &completed, text);
        if blocks.is_empty() {
            return Ok(());
        }
        self.append_user_blocks(inv, blocks, sink).await
    }

    async fn run_inner(
        &mut self,
        inv: &mut Invocation,
        input: Input,
        sink: &Sink,
        token: &CancellationToken,
    ) -> Result<AgentResult, Stop> {
        let resume = input.is_resume();
        // A stream dropped mid-run (its future dropped during the tool phase) leaves tool uses
        // without results: answer them first, through the normal message path.
        if self.pending.is_none()
            && let Some(last) = self.conv.last()
            && last.role == Role::Assistant
            && last.has_tool_use()
        {
            let blocks = results_in_order(last, &[], TOOL_CANCELLED);
            self.append_user_blocks(inv, blocks, sink).await?;
        }
        // BeforeInvocation.
        let mut messages = input.messages;
        if self.core.hooks.has::<BeforeInvocationEvent>() {
            let mut ev = BeforeInvocationEvent::new(inv.cx.clone(), messages, self.conv.snapshot());
            if resume {
                ev = ev.as_resume();
            }
            let dispatched = self.core.hooks.dispatch(&mut ev).await;
            // Decisions (a handler error among them) are recorded even when the dispatch fails.
            self.take_decisions(inv, ev.take_decisions(), sink);
            dispatched?;
            if let Some(text) = ev.cancel.text(BeforeInvocationEvent::DEFAULT_CANCEL) {
                // Nothing is stored: neither the denied input nor the cancel text.
                return Ok(AgentResult::new(
                    StopReason::EndTurn,
                    Message::assistant(text),
                    inv.cx.invocation_id,
                ));
            }
            messages = ev.messages;
        }
        for m in messages {
            if m.role == Role::User {
                self.append_user_blocks(inv, m.content, sink).await?;
            } else {
                self.add_message(inv, m, sink).await?;
            }
        }

        if resume && let Some(r) = self.resume_tools(inv, input.responses, sink).await? {
            return Ok(r);
        }

        loop {
            match self.model_turn(inv, sink, token).await? {
                TurnEnd::Ended {
                    message,
                    stop_reason,
                } => {
                    return Ok(AgentResult::new(stop_reason, message, inv.cx.invocation_id));
                }
                TurnEnd::Accepted {
                    index,
                    stop_reason,
                    has_tool_use,
                    invalid_tool_inputs,
                } => {
                    if !has_tool_use {
                        let message = self
                            .conv
                            .get(index)
                            .cloned()
                            .unwrap_or_else(|| Message::new(Role::Assistant, Vec::new()));
                        return Ok(AgentResult::new(stop_reason, message, inv.cx.invocation_id));
                    }
                    let model_call_index = inv.model_calls.saturating_sub(1);
                    if let Some(r) = self
                        .tool_phase(
                            inv,
                            index,
                            &invalid_tool_inputs,
                            Vec::new(),
                            model_call_index,
                            sink,
                        )
                        .await?
                    {
                        return Ok(r);
                    }
                    if let Some(r) = self.after_tools_cancel(inv) {
                        return Ok(r);
                    }
                    self.drain_injections(inv, sink).await?;
                }
            }
        }
    }

    /// Takes the pending interrupts with the caller's answers recorded in `inv`: the index of
    /// their assistant message, the results completed before the interrupt, and the model call
    /// they belong to.
    fn take_pending(
        &mut self,
        inv: &mut Invocation,
        responses: Vec<InterruptResponse>,
    ) -> Result<(usize, Vec<ToolResult>, u32), Error> {
        let mut pending = self.pending.take().ok_or(Error::NoPendingInterrupts)?;
        for r in responses {
            let fingerprint = pending
                .interrupt(&r.interrupt_id)
                .and_then(|i| i.fingerprint.clone());
            pending.answers.insert(
                r.interrupt_id,
                InterruptAnswer {
                    response: r.response,
                    fingerprint,
                },
            );
        }
        inv.answer_map = pending.answers.clone().into_iter().collect();
        inv.answers = InterruptAnswers::new(inv.answer_map.clone());
        let idx = self
            .conv
            .ids()
            .iter()
            .position(|id| *id == pending.assistant_message_id)
            .or_else(|| {
                // Restored history without ids: find the message itself.
                self.conv
                    .messages()
                    .iter()
                    .rposition(|m| *m == pending.assistant_message)
            });
        let Some(idx) = idx else {
            // Kept: the interrupts stay answerable once history is set right.
            self.pending = Some(pending);
            return Err(Error::Session(
                "the assistant message of the pending interrupts is not in history".into(),
            ));
        };
        let model_call_index = pending.model_call_index;
        let completed = pending.completed_results;
        Ok((idx, completed, model_call_index))
    }

    /// A resume: records the answers, runs the interrupted tool phase, and delivers injected
    /// messages. Returns a result when the invocation stops here (new interrupts, a cancel).
    /// A separate future, so the resume's locals do not widen the model loop's.
    async fn resume_tools(
        &mut self,
        inv: &mut Invocation,
        responses: Vec<InterruptResponse>,
        sink: &Sink,
    ) -> Result<Option<AgentResult>, Stop> {
        let (idx, completed, model_call_index) = self.take_pending(inv, responses)?;
        // The pending state is consumed by the tool phase.
        self.session_sync().await?;
        let interrupted = self
            .tool_phase(inv, idx, &[], completed, model_call_index, sink)
            .await?;
        if let Some(r) = interrupted {
            return Ok(Some(r));
        }
        if let Some(r) = self.after_tools_cancel(inv) {
            return Ok(Some(r));
        }
        self.drain_injections(inv, sink).await?;
        Ok(None)
    }

    /// Delivers injected messages at a turn boundary, after admission by the interventions.
    async fn drain_injections(&mut self, inv: &mut Invocation, sink: &Sink) -> Result<(), Error> {
        let mut items = self.interceptor.drain().into_iter();
        while let Some(item) = items.next() {
            if item.version != inv.run_version {
                self.reject_injection(inv, &item.message, item.id, "stale", sink);
                continue;
            }
            let mut messages = vec![item.message.clone()];
            if self.core.hooks.has_injected() {
                let mut ev =
                    BeforeInvocationEvent::new(inv.cx.clone(), messages, self.conv.snapshot())
                        .as_injected();
                if let Err(e) = self.core.hooks.dispatch_injected(&mut ev).await {
                    let reason = e.to_string();
                    self.reject_injection(inv, &item.message, item.id, &reason, sink);
                    for rest in items {
                        self.reject_injection(inv, &rest.message, rest.id, "run ended", sink);
                    }
                    return Err(e);
                }
                self.take_decisions(inv, ev.take_decisions(), sink);
                if let Some(text) = ev.cancel.text(BeforeInvocationEvent::DEFAULT_CANCEL) {
                    let text = text.to_owned();
                    self.reject_injection(inv, &item.message, item.id, &text, sink);
                    continue;
                }
                messages = ev.messages;
            }
            for m in &messages {
                if m.role == Role::User {
                    self.append_user_blocks(inv, m.content.clone(), sink)
                        .await?;
                } else {
                    self.add_message(inv, m.clone(), sink).await?;
                }
            }
            let delivered = messages.into_iter().next().unwrap_or(item.message);
            self.interceptor.consumed(item.id, &delivered);
            inv.injections.push(InjectionRecord::new(
                item.id,
                InjectionOutcome::Consumed,
                None,
            ));
            if sink.is_enabled() {
                sink.push(AgentEvent::InjectionConsumed {
                    id: item.id,
                    message: delivered,
                });
            }
        }
        Ok(())
    }

    fn reject_injection(
        &self,
        inv: &mut Invocation,
        message: &Message,
        id: rein_core::InjectionId,
        reason: &str,
        sink: &Sink,
    ) {
        self.interceptor.rejected(id, message, reason);
        inv.injections.push(InjectionRecord::new(
            id,
            InjectionOutcome::Rejected,
            Some(reason.to_owned()),
        ));
        if sink.is_enabled() {
            sink.push(AgentEvent::InjectionRejected {
                id,
                reason: reason.to_owned(),
            });
        }
    }

    fn after_tools_cancel(&self, inv: &Invocation) -> Option<AgentResult> {
        if !self.cancel.after_tools_requested() {
            return None;
        }
        let text = self
            .cancel
            .message()
            .unwrap_or_else(|| CANCELLED_BY_USER.into());
        Some(AgentResult::new(
            StopReason::Cancelled,
            Message::assistant(text),
            inv.cx.invocation_id,
        ))
    }

    fn limit_hit(&self, inv: &Invocation) -> Option<StopReason> {
        let l = &self.core.config.limits;
        if l.max_turns.is_some_and(|n| inv.model_calls >= n) {
            return Some(StopReason::LimitTurns);
        }
        if l.max_total_tokens
            .is_some_and(|n| inv.usage.total_tokens >= n)
        {
            return Some(StopReason::LimitTotalTokens);
        }
        if l.max_output_tokens
            .is_some_and(|n| inv.usage.output_tokens >= n)
        {
            return Some(StopReason::LimitOutputTokens);
        }
        None
    }

    /// One model turn: BeforeModelCall → model → AfterModelCall, with hook retries, model
    /// error retries and context-overflow reduction. The accepted response is stored.
    async fn model_turn(
        &mut self,
        inv: &mut Invocation,
        sink: &Sink,
        token: &CancellationToken,
    ) -> Result<TurnEnd, Stop> {
        let mut attempts = Attempts::default();
        loop {
            if let Some(stop_reason) = self.limit_hit(inv) {
                let message = self
                    .conv
                    .last()
                    .cloned()
                    .unwrap_or_else(|| Message::new(Role::Assistant, Vec::new()));
                return Ok(TurnEnd::Ended {
                    message,
                    stop_reason,
                });
            }
            let index = inv.model_calls;
            inv.model_calls += 1;
            let outcome = 'call: {
                // The hooks' locals live in this block only, so the model call's future reuses their
                // bytes of the state machine.
                let request = {
                    let mut request = ModelRequest::shared(
                        self.conv.snapshot(),
                        self.core.tools.specs(),
                        inv.cx.invocation_state.clone(),
                    );
                    request.system_prompt = self.core.system_prompt.clone();
                    request.tool_choice = self.core.config.tool_choice.clone();
                    request.config = self.core.config.inference.clone();
                    if self.core.hooks.has::<BeforeModelCallEvent>() {
                        let mut ev = BeforeModelCallEvent::new(inv.cx.clone(), request, index);
                        let dispatched = self.core.hooks.dispatch(&mut ev).await;
                        self.take_decisions(inv, ev.take_decisions(), sink);
                        dispatched?;
                        let guidance = ev.take_guidance();
                        if !guidance.is_empty() {
                            for g in &guidance {
                                self.append_user_blocks(
                                    inv,
                                    vec![ContentBlock::Text(g.clone())],
                                    sink,
                                )
                                .await?;
                            }
                            // The model sees the guidance on this very call.
                            let msgs = ev.request.messages_mut();
                            for g in guidance {
                                rein_core::append_user_text(msgs, g);
                            }
                        }
                        if let Some(text) = ev.cancel.text(BeforeModelCallEvent::DEFAULT_CANCEL) {
                            // No model call happens: no usage, metrics or span for it.
                            let msg = Message::assistant(text);
                            break 'call Ok(ModelResponse::new(msg, StopReason::EndTurn));
                        }
                        ev.request
                    } else {
                        request
                    }
                };
                self.call_model(inv, request, index, sink).await
            };
            inv.streaming_response = false;
            // A separate future: the response handling's locals then share bytes with the
            // model call's instead of adding to them.
            if let Some(end) = self
                .handle_response(inv, outcome, index, &mut attempts, sink, token)
                .await?
            {
                return Ok(end);
            }
        }
    }

    /// Runs AfterModelCall on a model call's outcome and acts on it: retry (`None`), or end the
    /// turn.
    async fn handle_response(
        &mut self,
        inv: &mut Invocation,
        outcome: Result<ModelResponse, ModelError>,
        index: u32,
        attempts: &mut Attempts,
        sink: &Sink,
        token: &CancellationToken,
    ) -> Result<Option<TurnEnd>, Stop> {
        let max_retries = self.core.config.max_hook_retries;

        let (outcome, retry, withheld, edited, guidance, mut decisions) =
            if self.core.hooks.has::<AfterModelCallEvent>() {
                let mut ev = AfterModelCallEvent::new(inv.cx.clone(), outcome, index);
                if let Err(e) = self.core.hooks.dispatch(&mut ev).await {
                    self.take_decisions(inv, ev.take_decisions(), sink);
                    return Err(Stop::Failed(e));
                }
                let retry = ev.retry;
                let withheld = ev.withheld().map(str::to_owned);
                let edited = ev.is_edited();
                let (outcome, guidance, decisions) = ev.into_parts();
                (outcome, retry, withheld, edited, guidance, decisions)
            } else {
                (outcome, false, None, false, Vec::new(), Vec::new())
            };
        let past_retry_limit = retry && attempts.hook_retries >= max_retries;
        if past_retry_limit {
            // The guidance of the attempt that hit the limit is never injected.
            for d in &mut decisions {
                if d.action == DecisionAction::Guide && d.outcome == DecisionOutcome::Applied {
                    d.outcome = DecisionOutcome::Overridden;
                }
            }
        }
        self.take_decisions(inv, decisions, sink);

        match outcome {
            Err(error) => {
                sink.verdict(false);
                if sink.is_enabled() {
                    sink.push(AgentEvent::ResponseDiscarded {
                        reason: error.to_string(),
                    });
                }
                if retry && attempts.hook_retries < max_retries {
                    attempts.hook_retries += 1;
                    self.commit_guidance(inv, guidance, sink).await?;
                    return Ok(None);
                }
                if error.is_context_window_overflow() {
                    let mut edit = HistoryEdit::new(&mut self.conv);
                    if self.manager.reduce_on_overflow(&mut edit) {
                        return Ok(None);
                    }
                }
                attempts.error_attempts += 1;
                match self
                    .core
                    .config
                    .retry
                    .delay(&error, attempts.error_attempts)
                {
                    Some(delay) => {
                        tracing::warn!(
                            %error,
                            ?delay,
                            attempt = attempts.error_attempts,
                            "model call failed; retrying"
                        );
                        if !delay.is_zero() {
                            tokio::select! {
                                biased;
                                _ = token.cancelled() => return Err(Stop::Cancelled),
                                _ = tokio::time::sleep(delay) => {}
                            }
                        }
                        Ok(None)
                    }
                    None => Err(Stop::Failed(Error::Model(error))),
                }
            }
            Ok(response) => {
                attempts.error_attempts = 0;
                if let Some(text) = withheld {
                    sink.verdict(false);
                    if sink.is_enabled() {
                        sink.push(AgentEvent::ResponseDiscarded {
                            reason: text.clone(),
                        });
                    }
                    let message = Message::assistant(text);
                    self.add_message(inv, message.clone(), sink).await?;
                    return Ok(Some(TurnEnd::Ended {
                        message,
                        stop_reason: StopReason::EndTurn,
                    }));
                }
                if retry {
                    sink.verdict(false);
                    if attempts.hook_retries >= max_retries {
                        let text = retry_limit_text(max_retries);
                        if sink.is_enabled() {
                            sink.push(AgentEvent::ResponseDiscarded {
                                reason: text.clone(),
                            });
                        }
                        let record = DecisionRecord::new(
                            "rein:retry-limit",
                            EventKind::AfterModelCall,
                            DecisionAction::Deny,
                            DecisionOutcome::Applied,
                        )
                        .with_text(text.clone());
                        self.take_decisions(inv, vec![record], sink);
                        let message = Message::assistant(text);
                        self.add_message(inv, message.clone(), sink).await?;
                        return Ok(Some(TurnEnd::Ended {
                            message,
                            stop_reason: StopReason::EndTurn,
                        }));
                    }
                    attempts.hook_retries += 1;
                    if sink.is_enabled() {
                        sink.push(AgentEvent::ResponseDiscarded {
                            reason: "retry requested by a hook".into(),
                        });
                    }
                    self.commit_guidance(inv, guidance, sink).await?;
                    return Ok(None);
                }
                sink.verdict(true);
                let mut response = response;
                if edited {
                    // A rewritten response that lost its tool uses ends the turn.
                    if !response.message.has_tool_use()
                        && response.stop_reason == StopReason::ToolUse
                    {
                        response.stop_reason = StopReason::EndTurn;
                    }
                    if sink.is_enabled() {
                        sink.push(AgentEvent::ResponseReplaced {
                            message: response.message.clone(),
                        });
                    }
                }
                let has_tool_use = response.message.has_tool_use();
                let stop_reason = response.stop_reason;
                let invalid_tool_inputs = response.invalid_tool_inputs;
                let index = self.add_message(inv, response.message, sink).await?;
                Ok(Some(TurnEnd::Accepted {
                    index,
                    stop_reason,
                    has_tool_use,
                    invalid_tool_inputs,
                }))
            }
        }
    }

    async fn commit_guidance(
        &mut self,
        inv: &mut Invocation,
        guidance: Vec<String>,
        sink: &Sink,
    ) -> Result<(), Error> {
        for g in guidance {
            self.append_user_blocks(inv, vec![ContentBlock::Text(g)], sink)
                .await?;
        }
        Ok(())
    }

    /// Calls the model and assembles its stream, streaming deltas to the caller.
    async fn call_model(
        &self,
        inv: &mut Invocation,
        request: ModelRequest,
        index: u32,
        sink: &Sink,
    ) -> Result<ModelResponse, ModelError> {
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", self.core.model_id),
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = %self.core.provider,
            gen_ai.request.model = %self.core.model_id,
            rein.model_call_index = index,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
        );
        if sink.is_enabled() {
            sink.push(AgentEvent::ModelCallStarted {
                model_call_index: index,
            });
        }
        let started = Instant::now();
        inv.streaming_response = true;
        let result = async {
            let mut stream = self.core.model.stream(request).await?;
            let mut asm = StreamAssembler::new();
            let mut first = None;
            let mut tool_id = String::new();
            while let Some(ev) = stream.next().await {
                let ev = ev?;
                if first.is_none() {
                    first = Some(started.elapsed());
                }
                if sink.is_enabled() {
                    let out = match &ev {
                        StreamEvent::BlockStart(rein_core::BlockStart::ToolUse {
                            tool_use_id,
                            ..
                        }) => {
                            tool_id.clone_from(tool_use_id);
                            None
                        }
                        StreamEvent::BlockDelta(rein_core::BlockDelta::Text(t)) => {
                            Some(AgentEvent::TextDelta(t.clone()))
                        }
                        StreamEvent::BlockDelta(rein_core::BlockDelta::ToolInput(t)) => {
                            Some(AgentEvent::ToolInputDelta {
                                tool_use_id: tool_id.clone(),
                                delta: t.clone(),
                            })
                        }
                        StreamEvent::BlockDelta(rein_core::BlockDelta::ReasoningText(t)) => {
                            Some(AgentEvent::ReasoningDelta(t.clone()))
                        }
                        _ => None,
                    };
                    if let Some(out) = out {
                        sink.delta(out);
                        sink.flush().await;
                    }
                }
                asm.push(ev).map_err(ModelError::from)?;
            }
            let response = asm.finish().map_err(ModelError::from)?;
            Ok::<_, ModelError>((response, first))
        }
        .instrument(span.clone())
        .await;
        match result {
            Ok((response, first)) => {
                span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
                span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
                span.record(
                    "gen_ai.response.finish_reasons",
                    response.stop_reason.as_str(),
                );
                inv.usage.add(&response.usage);
                let mut cycle = CycleMetrics::default();
                cycle.model_call_index = index;
                cycle.duration = started.elapsed();
                cycle.time_to_first_event = first;
                cycle.usage = response.usage;
                inv.metrics.cycles.push(cycle);
                Ok(response)
            }
            Err(e) => {
                let mut cycle = CycleMetrics::default();
                cycle.model_call_index = index;
                cycle.duration = started.elapsed();
                inv.metrics.cycles.push(cycle);
                Err(e)
            }
        }
    }

    /// Runs the tool uses of the stored assistant message at `idx`. Returns a result when the
    /// invocation stops here (interrupts).
    async fn tool_phase(
        &mut self,
        inv: &mut Invocation,
        idx: usize,
        invalid_inputs: &[(String, String)],
        completed: Vec<ToolResult>,
        model_call_index: u32,
        sink: &Sink,
    ) -> Result<Option<AgentResult>, Stop> {
        let Some(assistant) = self.conv.get(idx) else {
            return Err(Stop::Failed(Error::Config(
                "tool phase on a missing message".into(),
            )));
        };
        let mut completed = completed;
        inv.turn_results = assistant
            .tool_uses()
            .map(|u| {
                completed
                    .iter()
                    .position(|r| r.tool_use_id == u.tool_use_id)
                    .map(|p| completed.swap_remove(p))
            })
            .collect();
        inv.tool_message = Some(idx);
        let invalid = |id: &str| {
            invalid_inputs
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, e)| e.as_str())
        };
        let mut todo: Vec<(usize, ToolUse)> = assistant
            .tool_uses()
            .enumerate()
            .filter(|(i, _)| inv.turn_results[*i].is_none())
            .map(|(i, u)| (i, u.clone()))
            .collect();
        let answers = inv.answers.clone();
        let cx = inv.cx.clone();
        let run = ToolRun {
            tools: &self.core.tools,
            hooks: &self.core.hooks,
            cx: &cx,
            answers: &answers,
            agent_state: &self.state,
            sink,
            model_call_index,
            max_hook_retries: self.core.config.max_hook_retries,
        };
        let mut interrupts: Vec<Interrupt> = Vec::new();
        let mut rewrites: Vec<ToolUse> = Vec::new();
        let mut apply = |inv: &mut Invocation, i: usize, o: ToolOutcome| {
            inv.turn_results[i] = o.result;
            interrupts.extend(o.interrupts);
            if let Some(rw) = o.rewritten {
                rewrites.push(rw);
            }
            inv.decisions.extend(o.decisions);
            if let Some((name, took, is_error)) = o.ran {
                let m = inv.metrics.tools.entry(name).or_default();
                m.calls += 1;
                m.total_time += took;
                if is_error {
                    m.errors += 1;
                }
            }
        };
        match self.core.config.executor {
            ToolExecutor::Sequential => {
                for (i, tu) in todo.drain(..) {
                    let bad = invalid(&tu.tool_use_id);
                    let o = run.run(tu, bad).await?;
                    let stop = o.result.is_none();
                    apply(inv, i, o);
                    if stop {
                        break;
                    }
                }
            }
            ToolExecutor::Concurrent { max } => {
                let mut results = futures_util::stream::iter(todo)
                    .map(|(i, tu)| {
                        let run = &run;
                        let bad = invalid(&tu.tool_use_id);
                        async move { (i, run.run(tu, bad).await) }
                    })
                    .buffer_unordered(max.max(1));
                while let Some((i, o)) = results.next().await {
                    apply(inv, i, o?);
                }
            }
        }
        // Commit tool-use rewrites to the stored assistant message.
        if !rewrites.is_empty() {
            if let Some(m) = self.conv.get_mut(idx) {
                for b in &mut m.content {
                    if let ContentBlock::ToolUse(u) = b
                        && let Some(rw) = rewrites.iter().find(|r| r.tool_use_id == u.tool_use_id)
                    {
                        *u = rw.clone();
                    }
                }
            }
            self.message_updated(inv, idx).await?;
        }
        if !interrupts.is_empty() {
            let assistant = self
                .conv
                .get(idx)
                .cloned()
                .unwrap_or_else(|| Message::new(Role::Assistant, Vec::new()));
            let completed: Vec<ToolResult> = inv.turn_results.iter().flatten().cloned().collect();
            let pending = PendingInterrupts {
                schema_version: PENDING_SCHEMA_VERSION,
                interrupts: interrupts.clone(),
                answers: inv.answer_map.clone().into_iter().collect(),
                assistant_message_id: self.conv.id(idx),
                assistant_message: assistant.clone(),
                completed_results: completed,
                invocation_state: inv.cx.invocation_state.clone(),
                model_call_index,
            };
            self.pending = Some(pending);
            self.session_sync().await?;
            inv.tool_message = None;
            let mut r = AgentResult::new(StopReason::Interrupt, assistant, inv.cx.invocation_id);
            r.interrupts = interrupts;
            return Ok(Some(r));
        }
        // Results in tool-use order, moved (not copied) into the tool-results message.
        // A tool use left without a result (a sequential run cut short) is answered from the
        // stored message.
        let results = std::mem::take(&mut inv.turn_results);
        let blocks: Vec<ContentBlock> = match self.conv.get(idx) {
            Some(assistant) => results
                .into_iter()
                .zip(assistant.tool_uses())
                .map(|(r, u)| {
                    ContentBlock::ToolResult(
                        r.unwrap_or_else(|| ToolResult::error(&u.tool_use_id, TOOL_INTERRUPTED)),
                    )
                })
                .collect(),
            None => results
                .into_iter()
                .flatten()
                .map(ContentBlock::ToolResult)
                .collect(),
        };
        inv.tool_message = None;
        self.append_user_blocks(inv, blocks, sink).await?;
        // Answers are cleared once the tool cycle completes.
        if !inv.answer_map.is_empty() {
            inv.answers = InterruptAnswers::default();
            inv.answer_map.clear();
        }
        Ok(None)
    }

    fn take_decisions(&self, inv: &mut Invocation, decisions: Vec<DecisionRecord>, sink: &Sink) {
        if decisions.is_empty() {
            return;
        }
        if sink.is_enabled() {
            for d in &decisions {
                sink.push(AgentEvent::Decision(d.clone()));
            }
        }
        inv.decisions.extend(decisions);
    }

    /// Appends a message (MessageAdded). Returns its index.
    pub(crate) async fn add_message(
        &mut self,
        inv: &Invocation,
        message: Message,
        sink: &Sink,
    ) -> Result<usize, Error> {
        let wants_event = self.core.hooks.has::<MessageAddedEvent>();
        let copy = (wants_event || sink.is_enabled()).then(|| message.clone());
        let (idx, id) = self.conv.push(message);
        self.session_added(idx).await?;
        if let Some(message) = copy {
            if sink.is_enabled() {
                sink.push(AgentEvent::MessageAdded {
                    id,
                    message: message.clone(),
                });
            }
            if wants_event {
                let mut ev = MessageAddedEvent::new(inv.cx.clone(), id, message);
                self.core.hooks.dispatch(&mut ev).await?;
            }
        }
        Ok(idx)
    }

    /// Appends user blocks, joining a trailing user message (MessageUpdated) or as a new one
    /// (MessageAdded): history never holds two messages of the same role in a row.
    pub(crate) async fn append_user_blocks(
        &mut self,
        inv: &Invocation,
        blocks: Vec<ContentBlock>,
        sink: &Sink,
    ) -> Result<(), Error> {
        let (idx, id, new) = self.conv.append_user(blocks);
        if new {
            self.session_added(idx).await?;
            let wants = self.core.hooks.has::<MessageAddedEvent>();
            if wants || sink.is_enabled() {
                let message = self
                    .conv
                    .get(idx)
                    .cloned()
                    .unwrap_or_else(|| Message::user(""));
                if sink.is_enabled() {
                    sink.push(AgentEvent::MessageAdded {
                        id,
                        message: message.clone(),
                    });
                }
                if wants {
                    let mut ev = MessageAddedEvent::new(inv.cx.clone(), id, message);
                    self.core.hooks.dispatch(&mut ev).await?;
                }
            }
            Ok(())
        } else {
            self.message_updated(inv, idx).await
        }
    }

    async fn message_updated(&mut self, inv: &Invocation, idx: usize) -> Result<(), Error> {
        self.session_updated(idx).await?;
        if self.core.hooks.has::<MessageUpdatedEvent>() {
            let message = self
                .conv
                .get(idx)
                .cloned()
                .unwrap_or_else(|| Message::user(""));
            let mut ev = MessageUpdatedEvent::new(inv.cx.clone(), self.conv.id(idx), message);
            self.core.hooks.dispatch(&mut ev).await?;
        }
        Ok(())
    }
}
