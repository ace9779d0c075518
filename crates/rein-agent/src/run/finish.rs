//! How a run ends: injections still queued are rejected, history is repaired, the session
//! saved, the result built, and AfterInvocation fired with it.

use std::time::Instant;

use rein_core::{
    Error, Message, Role,
    event::{AfterInvocationEvent, InvocationContext},
    id::MessageId,
    interrupt::InterruptEvent,
    result::AgentResult,
    stream::StopReason,
};
use tracing::Instrument as _;

use super::machine::Outcome;
use super::{Driver, listeners};
use crate::agent::{Agent, CANCELLED_BY_USER};
use crate::checkpoint::{Pause, ResponsePause};
use crate::conversation::SummaryRequest;
use crate::history::{TOOL_CANCELLED, TOOL_INTERRUPTED};
use crate::stream::AgentEvent;
use crate::telemetry::int;

impl Driver<'_> {
    /// The run has stopped on `outcome`: what is still queued is settled and the duration
    /// taken. Whether the conversation manager runs after it (a run that ended or paused with
    /// its history as the result shows it; not a failure, a cancel, or a held request: that
    /// history must match what was approved).
    pub(super) fn stopped(&mut self, outcome: &Outcome, started: Instant) -> bool {
        self.agent.cancel.end();
        // A run paused on interrupts has not ended: what is queued waits for the resume.
        // Whatever is still queued when the run ends is rejected, exactly once.
        let ended = if outcome.is_pause() {
            self.agent.interceptor.pause();
            Vec::new()
        } else {
            self.agent.interceptor.end()
        };
        for item in ended {
            let reason = if item.version == self.inv.run_version {
                "run ended"
            } else {
                "stale"
            };
            self.reject_injection(&item.message, item.id, reason);
        }
        self.inv.metrics.duration = started.elapsed();
        matches!(
            outcome,
            Outcome::Reply { .. }
                | Outcome::Stored { .. }
                | Outcome::Interrupted { .. }
                | Outcome::Held { .. }
                | Outcome::HeldInput { .. }
                | Outcome::CancelledAfterTools
        )
    }

    /// A run cut off (failed or cancelled) answers the tool uses of the tool phase it was cut
    /// off in; a cancel withdraws the response streaming. Only such a run awaits this (boxed,
    /// layout rule 1), so the common path builds no future to finish.
    pub(super) async fn repair(&mut self, outcome: &Outcome) -> Result<(), Error> {
        match outcome {
            Outcome::Failed(_) => {
                // The failure is the result: an error repairing is dropped.
                let _ = self.close_tool_phase(TOOL_INTERRUPTED).await;
                Ok(())
            }
            Outcome::Cancelled => {
                if self.inv.streaming_response {
                    self.sink.discard("cancelled".into(), None);
                }
                self.close_tool_phase(TOOL_CANCELLED).await
            }
            _ => Ok(()),
        }
    }

    /// The conversation manager's summary `request` written, its decisions and usage put in
    /// `result`. By value, result and all (boxed by the caller, layout rule 1): the run then
    /// carries the result across no await of its own.
    pub(super) async fn summarized(
        mut self,
        request: SummaryRequest,
        mut result: Result<AgentResult, Error>,
    ) -> Result<AgentResult, Error> {
        if let Ok(r) = &mut result {
            self.summarize(request, r).await;
        }
        result
    }

    /// The result of the run's outcome (before the conversation manager runs), written once
    /// into the caller's place; `repaired` is what [`repair`](Self::repair) came to.
    pub(super) fn outcome_result(
        &mut self,
        outcome: Outcome,
        repaired: Result<(), Error>,
    ) -> Result<AgentResult, Error> {
        match outcome {
            Outcome::Failed(e) => Err(e),
            Outcome::Cancelled => repaired
                .map(|()| self.result(StopReason::Cancelled, self.agent.cancelled_message())),
            Outcome::Reply {
                message,
                stop_reason,
            } => Ok(self.result(stop_reason, message)),
            Outcome::Stored { index, stop_reason } => {
                let conv = self.agent.history.conv();
                let stored = match index {
                    Some(i) => conv.get(i),
                    None => conv.last(),
                };
                let message = stored
                    .cloned()
                    .unwrap_or_else(|| Message::new(Role::Assistant, Vec::new()));
                // The typed answer is read from what was stored, checked again: a turn that
                // ended on anything but a valid answer (a limit, a stand-in) has none.
                let output = match (&self.agent.core.output, index) {
                    (Some(spec), Some(_)) => spec.answer_of(&message),
                    _ => None,
                };
                if let Some(value) = &output {
                    self.sink.emit(|| AgentEvent::Output {
                        value: value.clone(),
                    });
                }
                let mut r = self.result(stop_reason, message);
                r.output = output;
                Ok(r)
            }
            Outcome::Interrupted {
                message,
                interrupts,
            } => {
                let mut r = self.result(StopReason::Interrupt, message);
                r.interrupts = interrupts;
                Ok(r)
            }
            Outcome::Held {
                response,
                interrupts,
                model_call_index,
            } => {
                // What the stream showed of it is not accepted (yet).
                self.sink.discard("awaiting approval".into(), None);
                let subject = format!("m{model_call_index}");
                let pending = self.raise(InterruptEvent::AfterModelCall, &subject, interrupts);
                let wire = pending.iter().map(|p| p.interrupt.clone()).collect();
                let at = Pause::Response(Box::new(ResponsePause {
                    message: response.message.clone(),
                    stop_reason: response.stop_reason,
                    usage: response.usage,
                    hook_retries: self.inv.run.hook_retries().0,
                    output_retries: self.inv.run.output_retries().0,
                    model_call_index,
                }));
                self.agent.pending = Some(Box::new(self.inv.pause(at, pending)));
                let mut r = self.result(StopReason::Interrupt, response.message);
                r.interrupts = wire;
                Ok(r)
            }
            Outcome::HeldRequest {
                interrupts,
                model_call_index,
            } => {
                let subject = format!("m{model_call_index}");
                let pending = self.raise(InterruptEvent::BeforeModelCall, &subject, interrupts);
                let wire = pending.iter().map(|p| p.interrupt.clone()).collect();
                let conv = self.agent.history.conv();
                let last_message_id = conv.ids().last().copied().unwrap_or_else(MessageId::new);
                let message = conv
                    .last()
                    .cloned()
                    .unwrap_or_else(|| Message::new(Role::Assistant, Vec::new()));
                let at = Pause::Request {
                    model_call_index,
                    last_message_id,
                };
                self.agent.pending = Some(Box::new(self.inv.pause(at, pending)));
                let mut r = self.result(StopReason::Interrupt, message);
                r.interrupts = wire;
                Ok(r)
            }
            Outcome::HeldInput {
                messages,
                interrupts,
            } => {
                let pending = self.raise(InterruptEvent::BeforeInvocation, "input", interrupts);
                let wire = pending.iter().map(|p| p.interrupt.clone()).collect();
                let message = messages
                    .last()
                    .cloned()
                    .unwrap_or_else(|| Message::new(Role::User, Vec::new()));
                self.agent.pending =
                    Some(Box::new(self.inv.pause(Pause::Input { messages }, pending)));
                let mut r = self.result(StopReason::Interrupt, message);
                r.interrupts = wire;
                Ok(r)
            }
            Outcome::CancelledAfterTools => {
                let message = self.agent.cancelled_message();
                Ok(self.result(StopReason::Cancelled, message))
            }
        }
    }

    /// The result, with what the invocation accumulated.
    // Inlined into each arm: built in the caller's place, not built here and copied there
    // (312 B).
    #[inline(always)]
    fn result(&mut self, stop_reason: StopReason, message: Message) -> AgentResult {
        let mut r = AgentResult::new(stop_reason, message, self.inv.cx.invocation_id);
        r.usage = *self.inv.run.usage();
        r.metrics = std::mem::take(&mut self.inv.metrics);
        r.decisions = std::mem::take(&mut self.inv.decisions);
        r.injections = std::mem::take(&mut self.inv.injections);
        r.sub_agent_usage = std::mem::take(&mut self.inv.sub_agent_usage);
        r.handoffs = std::mem::take(&mut self.inv.handoffs);
        r
    }

    /// Answers every tool use of a tool phase the run was cut off in (finished tools keep
    /// their results), unless interrupts are pending for it.
    async fn close_tool_phase(&mut self, text: &str) -> Result<(), Error> {
        let Some(phase) = self.inv.tool_phase.take() else {
            return Ok(());
        };
        if self.agent.pending.is_some() || phase.index + 1 != self.agent.history.conv().len() {
            return Ok(());
        }
        let completed = phase.completed();
        let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
        self.agent
            .history
            .close_open_tool_uses(&completed, text, &to)
            .await
    }
}

impl Agent {
    /// Whether a run's result is delivered without a session to save or AfterInvocation hooks
    /// to run (most agents): the run then finishes it in place through the plain steps of
    /// [`end`](Self::end) instead of moving it through that future (each move a copy of the
    /// whole result).
    pub(super) fn ends_plainly(&self) -> bool {
        !self.has_session() && !self.core.settings.hooks.has::<AfterInvocationEvent>()
    }

    /// The session persists the end state; AfterInvocation sees the real result. Awaited
    /// boxed (layout rule 1): only agents with a session or such hooks get here.
    pub(super) async fn end(
        &mut self,
        cx: &InvocationContext,
        result: Result<AgentResult, Error>,
        span: tracing::Span,
    ) -> Result<AgentResult, Error> {
        self.ending(cx);
        let result = if self.has_session() {
            self.session_end(result).await
        } else {
            result
        };
        record_end(&span, &result);
        let result = if self.core.settings.hooks.has::<AfterInvocationEvent>() {
            let mut ev = AfterInvocationEvent::new(cx.clone(), result);
            let dispatched = self
                .core
                .settings
                .hooks
                .dispatch(&mut ev)
                .instrument(span)
                .await;
            dispatched.and_then(|()| ev.into_result())
        } else {
            result
        };
        self.ended(cx);
        result
    }

    /// Before the result is delivered: what hooks wrote after a pause, and the injections still
    /// queued, are kept with it.
    pub(super) fn ending(&mut self, cx: &InvocationContext) {
        if let Some(p) = &mut self.pending {
            p.run_state = cx.run_state.snapshot();
        }
        self.keep_injections();
    }

    /// After: the run ends unless interrupts wait, and its state goes (AfterInvocation still
    /// saw it).
    pub(super) fn ended(&self, cx: &InvocationContext) {
        if self.pending.is_none() {
            cx.run_state.clear();
        }
    }

    fn cancelled_message(&self) -> Message {
        Message::assistant(
            self.cancel
                .message()
                .unwrap_or_else(|| CANCELLED_BY_USER.into()),
        )
    }
}

/// The run's span records how it ended.
pub(super) fn record_end(span: &tracing::Span, result: &Result<AgentResult, Error>) {
    match result {
        Ok(r) => {
            let usage = &r.usage;
            span.record("gen_ai.usage.input_tokens", int(usage.input_tokens));
            span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
            crate::telemetry::cache_tokens(span, usage);
            span.record("rein.stop_reason", r.stop_reason.as_str());
        }
        Err(e) => {
            span.record("otel.status_code", "error");
            span.record("error.type", crate::telemetry::error_type(e));
        }
    }
}
