//! A model call — BeforeModelCall, the model's stream, AfterModelCall — and what the
//! machine's verdict on it stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt as _, future::Either};
use rein_core::{
    ContentBlock, Error, Message, ModelError,
    audit::{Confirmation, DecisionAction, DecisionOutcome, DecisionRecord, EventKind},
    event::{
        AfterModelCallEvent, BeforeModelCallEvent, ModelCallVerdict, ModelOutputEvent,
        RequestVerdict,
    },
    interrupt::Interrupt,
    request::ModelRequest,
    result::CycleMetrics,
    stream::{
        BlockDelta, BlockStart, FallbackRoute, ModelResponse, StopReason, StreamAssembler,
        StreamEvent,
    },
    tool::BoxFuture,
};

use super::machine::{OUTPUT_CHECK, RETRY_LIMIT, StepReport};
use super::output::{Guarded, OutputGuard};
use super::{Driver, Invocation, listeners};
use crate::agent::Agent;
use crate::conversation::{ConversationManager as _, HistoryEdit};
use crate::stream::{AgentEvent, Sink};
use crate::structured::OutputSpec;
use crate::telemetry::int;
use rein_models::ModelStream;

/// What a model call came to.
pub(super) enum Called {
    /// Its response or error (a denied call's stand-in response included).
    Done(Result<ModelResponse, ModelError>),
    /// The stream guard withheld the response (SPEC §3.9).
    Withheld {
        /// What the caller was shown of it, for the AfterModelCall hooks.
        response: ModelResponse,
        /// The text stored in its place.
        text: String,
        /// The handler whose deny withheld it.
        handler: Option<String>,
    },
}

/// What BeforeModelCall made of a call.
enum Request {
    /// Send this request.
    Send(ModelRequest),
    /// Denied: this stand-in response.
    Denied(ModelResponse),
    /// Held for answers to these interrupts.
    Held(Vec<Interrupt>),
}

/// How a model stream was consumed.
enum Streamed {
    Response(ModelResponse),
    Withheld {
        released: String,
        text: String,
        handler: Option<String>,
        /// The fallback chain's route, when one answered: its hops stay in the audit.
        fallback: Option<Box<FallbackRoute>>,
    },
}

/// Why a model stream stopped early.
enum Stop {
    Model(ModelError),
    /// A stream guard failed (`OnError::Throw`): the invocation fails.
    Guard(Error),
}

impl Driver<'_> {
    /// Model call `index`: the request, BeforeModelCall, the call (unless denied), and the
    /// verdict of AfterModelCall.
    pub(super) async fn model_call(&mut self, index: u32) -> Result<StepReport, Error> {
        // The span covers the guards too: their run_guardrail spans are its children. Its
        // sampler-relevant attributes are set here, at creation.
        let config = &self.agent.core.settings.config.inference;
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", self.agent.core.model_info().model_id),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = %self.agent.core.model_info().provider,
            gen_ai.request.model = %self.agent.core.model_info().model_id,
            server.address = self.agent.core.model_info().server.as_ref().map(|(host, _)| host.as_str()),
            server.port = self.agent.core.model_info().server.as_ref().map(|(_, port)| i64::from(*port)),
            gen_ai.request.max_tokens = config.max_tokens.map(int),
            gen_ai.request.temperature = config.temperature,
            gen_ai.request.top_p = config.top_p,
            gen_ai.request.seed = config.seed.map(int),
            rein.model_call_index = int(index),
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.system_instructions = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            rein.request.estimated_input_tokens = tracing::field::Empty,
        );
        crate::telemetry::in_span!(&span, self.model_call_in(index, &span))
    }

    async fn model_call_in(
        &mut self,
        index: u32,
        span: &tracing::Span,
    ) -> Result<StepReport, Error> {
        // The call's future is made in a block (layout rule 3).
        let (call, denied) = {
            let request = self.before_model_call(index).await?;
            let denied = matches!(request, Request::Denied(_));
            let call = match request {
                Request::Send(request) => {
                    // Carried across the call's await as a u32 (layout rule 3: it fits the
                    // future's padding); a request past 4 billion tokens counts as 4 billion.
                    let raw = u32::try_from(self.agent.raw_request(&request)).unwrap_or(u32::MAX);
                    // Split: the model's future reads the agent while the call writes the
                    // invocation.
                    let (agent, inv, sink) = (&*self.agent, &mut *self.inv, self.sink);
                    Either::Left(agent.call_model(inv, request, raw, index, sink, span))
                }
                // No model call happens: no usage, metrics or span for it; AfterModelCall sees
                // the denial as the response.
                Request::Denied(denied) => {
                    Either::Right(std::future::ready(Ok(Called::Done(Ok(denied)))))
                }
                Request::Held(interrupts) => {
                    return Ok(StepReport::RequestHeld {
                        interrupts,
                        model_call_index: index,
                    });
                }
            };
            (call, denied)
        };
        // In a block: a borrowed local is carried across every later await (layout rule 3).
        let called = {
            let called = call.await;
            self.record_fallback(&called, span);
            called
        };
        self.inv.streaming_response = false;
        let called = called.inspect_err(|error| {
            // A stream guard failed: what the caller was shown is withdrawn.
            let handler = match error {
                Error::Handler { handler, .. } => Some(handler.clone()),
                _ => None,
            };
            self.sink.discard(error.to_string(), handler);
        })?;
        // A denied call's stand-in is no answer of the model's: it is not checked (sending it
        // back would only be denied again, until the budget ran out). Awaited here rather than
        // through `answered`: the common path then builds no wrapping future.
        if denied || self.agent.core.output.is_none() {
            return self.after_model_call(called, index).await;
        }
        // Boxed (layout rule 1).
        Box::pin(self.typed_answer(called, index)).await
    }

    /// AfterModelCall on a call, with a typed answer checked first (SPEC §13): a final answer
    /// that fails the check is refused before any handler sees it; handlers see only valid
    /// answers, their guidance on one counts in the same budget, and an answer they rewrote is
    /// checked again. Responses with tool uses are not checked (the model may call tools
    /// first).
    ///
    /// A plain function that returns the future (layout rule 3: an `async fn` would carry
    /// `called` beside AfterModelCall's future).
    pub(super) fn answered(
        &mut self,
        called: Called,
        index: u32,
    ) -> impl Future<Output = Result<StepReport, Error>> + Send + '_ {
        if self.agent.core.output.is_none() {
            return Either::Left(self.after_model_call(called, index));
        }
        // Boxed (layout rule 1).
        Either::Right(Box::pin(self.typed_answer(called, index)))
    }

    async fn typed_answer(&mut self, mut called: Called, index: u32) -> Result<StepReport, Error> {
        let core = self.agent.core.clone();
        let (Some(spec), Called::Done(Ok(response))) = (core.output.as_deref(), &mut called) else {
            return self.after_model_call(called, index).await;
        };
        spec.take_final_answer_tool(response);
        if response.message.has_tool_use() {
            return self.after_model_call(called, index).await;
        }
        let raw = response.message.text();
        if let Err(errors) = spec.check(&raw) {
            return Ok(self.refuse(spec, errors, &raw));
        }
        let report = self.after_model_call(called, index).await?;
        Ok(match report {
            StepReport::ModelCalled(ModelCallVerdict::Retry {
                guidance,
                error: None,
            }) => self.refuse(spec, guidance, &raw),
            StepReport::ModelCalled(ModelCallVerdict::Accept { response, edited })
                if !response.message.has_tool_use() =>
            {
                let text = response.message.text();
                match spec.check(&text) {
                    Err(errors) => self.refuse(spec, errors, &text),
                    Ok(_) => {
                        self.record(vec![output_record(
                            DecisionAction::Proceed,
                            format!("the answer matches `{}`", spec.format.name),
                        )]);
                        StepReport::ModelCalled(ModelCallVerdict::Accept { response, edited })
                    }
                }
            }
            other => other,
        })
    }

    /// Refuses a typed answer: recorded (a guide while the budget lasts, else the deny that
    /// ends the run) and reported to the machine, which decides.
    fn refuse(&mut self, spec: &OutputSpec, errors: Vec<String>, raw: &str) -> StepReport {
        let (used, max) = self.inv.run.output_retries();
        let action = if used < max {
            DecisionAction::Guide
        } else {
            DecisionAction::Deny
        };
        let mut record = output_record(action, errors.join("; "));
        record.detail = Some(Box::new(serde_json::json!({
            "attempt": used + 1,
            "max_retries": max,
        })));
        self.record(vec![record]);
        StepReport::OutputRefused {
            guidance: spec.guidance(&errors),
            errors,
            raw: spec.raw(raw),
        }
    }

    /// The request for this call, as BeforeModelCall leaves it; its guidance is stored and
    /// sent on this very call.
    async fn before_model_call(&mut self, index: u32) -> Result<Request, Error> {
        if self.agent.core.tools.has_sources() {
            // Boxed: most agents have no tool source, and their invocation's future keeps its
            // size.
            let reserved = self
                .agent
                .core
                .output
                .as_ref()
                .and_then(|o| o.tools.as_ref())
                .map(|_| crate::structured::FINAL_ANSWER_TOOL);
            Box::pin(self.agent.core.tools.refresh(reserved)).await;
        }
        // Made in a block (layout rule 3: fields assigned in place borrow the local).
        let request = {
            let mut request = ModelRequest::shared(
                self.agent.history.conv().snapshot(),
                self.agent.core.tools.specs(),
                self.inv.cx.invocation_state.clone(),
            );
            request.system_prompt = self.agent.core.system_prompt.clone();
            request.tool_choice = self.agent.core.settings.config.tool_choice.clone();
            request.config = self.agent.core.settings.config.inference.clone();
            if let Some(spec) = &self.agent.core.output {
                if let Some(prompt) = &spec.system_prompt {
                    request.system_prompt = Some(prompt.clone());
                }
                if let Some(tools) = &spec.tools {
                    request.tools = tools.clone();
                    let listed = self.agent.core.tools.listed_specs();
                    if !listed.is_empty() {
                        Arc::make_mut(&mut request.tools).extend(listed);
                    }
                }
                request.output_format = spec.request_format().cloned();
            }
            request
        };
        if !self.agent.core.settings.hooks.has::<BeforeModelCallEvent>() {
            return Ok(Request::Send(request));
        }
        // The event's pass in a block (layout rule 3).
        let (mut verdict, guidance) = {
            let mut ev = self
                .agent
                .before_model_call_event(self.inv.cx.clone(), request)
                .with_model_call_index(index)
                .with_answers(self.inv.answers.clone());
            if self.inv.run.resumes_held_call() {
                ev = ev.as_resume();
            }
            let dispatched = self.agent.core.settings.hooks.dispatch(&mut ev).await;
            self.record(ev.take_decisions());
            dispatched?;
            let guidance = ev.take_guidance();
            // A held call stores nothing: its guidance comes again with the resumed pass.
            let held = !ev.interrupts().is_empty() && !ev.cancel.is_cancelled();
            (ev.into_verdict(), if held { Vec::new() } else { guidance })
        };
        if !guidance.is_empty() {
            let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
            for g in &guidance {
                self.agent
                    .history
                    .append_user(vec![ContentBlock::Text(g.clone())], &to)
                    .await?;
            }
            if let RequestVerdict::Send(request) = &mut verdict {
                for g in guidance {
                    request.append_user_text(g);
                }
            }
        }
        Ok(match verdict {
            RequestVerdict::Send(request) => Request::Send(request),
            RequestVerdict::Deny(text) => Request::Denied(ModelResponse::new(
                Message::assistant(text),
                StopReason::EndTurn,
            )),
            RequestVerdict::Hold(interrupts) => Request::Held(interrupts),
        })
    }

    /// AfterModelCall: the hooks' verdict on the call, with its decisions recorded.
    /// A plain function that returns the future (layout rule 3).
    #[inline]
    pub(super) fn after_model_call(
        &mut self,
        called: Called,
        index: u32,
    ) -> impl Future<Output = Result<StepReport, Error>> + Send + '_ {
        self.inv.discarded_by = None;
        let (outcome, withheld) = match called {
            Called::Done(outcome) => (outcome, None),
            Called::Withheld {
                response,
                text,
                handler,
            } => {
                self.inv.discarded_by = handler;
                (Ok(response), Some(text))
            }
        };
        if !self.agent.core.settings.hooks.has::<AfterModelCallEvent>() {
            return Either::Left(std::future::ready(Ok(StepReport::ModelCalled(
                match (outcome, withheld) {
                    (_, Some(text)) => ModelCallVerdict::Withhold { text },
                    (Ok(response), None) => ModelCallVerdict::Accept {
                        response,
                        edited: false,
                    },
                    (Err(error), None) => ModelCallVerdict::Failed(error),
                },
            ))));
        }
        let (retried, max) = self.inv.run.hook_retries();
        let mut ev = AfterModelCallEvent::new(self.inv.cx.clone(), outcome)
            .with_model_call_index(index)
            .with_answers(self.inv.answers.clone())
            .with_retries(retried, max);
        // Plain hooks see a response the stream guard withheld as withheld (interventions do
        // not run on it: it is settled).
        if let Some(text) = withheld {
            ev.withhold(text);
        }
        Either::Right(async move {
            if let Err(e) = self.agent.core.settings.hooks.dispatch(&mut ev).await {
                self.record(ev.take_decisions());
                return Err(e);
            }
            let mut decisions = ev.take_decisions();
            if ev.retry
                && ev.withheld().is_none()
                && ev.error().is_none()
                && self.inv.run.escalates_retry()
            {
                decisions.push(escalate(&mut ev, max));
                // The guidance that did not take is not injected: a human decides instead.
                for d in &mut decisions {
                    if d.action == DecisionAction::Guide && d.outcome == DecisionOutcome::Applied {
                        d.outcome = DecisionOutcome::Overridden;
                    }
                }
            }
            let verdict = ev.into_verdict();
            self.inv.run.settle_decisions(&verdict, &mut decisions);
            let decided = decisions
                .iter()
                .find(|d| {
                    d.outcome == DecisionOutcome::Applied
                        && matches!(d.action, DecisionAction::Deny | DecisionAction::Guide)
                })
                .map(|d| d.handler.clone());
            if decided.is_some() {
                self.inv.discarded_by = decided;
            }
            self.record(decisions);
            Ok(StepReport::ModelCalled(verdict))
        })
    }

    /// Stores guidance before the model is called again.
    pub(super) async fn store_guidance(
        &mut self,
        guidance: Vec<String>,
    ) -> Result<StepReport, Error> {
        let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
        for g in guidance {
            self.agent
                .history
                .append_user(vec![ContentBlock::Text(g)], &to)
                .await?;
        }
        Ok(StepReport::Done)
    }

    /// Stores a stand-in reply (a withheld response, the retry limit) that ends the turn.
    pub(super) async fn end_turn(
        &mut self,
        text: String,
        record: Option<Box<DecisionRecord>>,
    ) -> Result<StepReport, Error> {
        self.record(record.into_iter().map(|r| *r).collect());
        let message = Message::assistant(text);
        let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
        self.agent.history.add(message.clone(), &to).await?;
        Ok(StepReport::EndedTurn(message))
    }

    /// Stores the accepted response; the stream learns that the deltas it showed stand (or were
    /// rewritten). Stored at once when that awaits nothing (most agents: the step then builds
    /// no future); else what is left to store is handed back for [`accept`](Self::accept).
    pub(super) fn accept_now(
        &mut self,
        response: ModelResponse,
        edited: bool,
    ) -> Result<StepReport, Accepting> {
        self.sink.verdict(true);
        if edited {
            self.sink.emit(|| AgentEvent::ResponseReplaced {
                message: response.message.clone(),
            });
        }
        let has_tool_use = response.message.has_tool_use();
        let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
        match self.agent.history.add_now(response.message, &to) {
            Ok(index) => Ok(StepReport::Accepted {
                index,
                stop_reason: response.stop_reason,
                has_tool_use,
                invalid_inputs: response.invalid_tool_inputs,
            }),
            Err(message) => Err(Accepting {
                message,
                stop_reason: response.stop_reason,
                has_tool_use,
                invalid_inputs: response.invalid_tool_inputs,
            }),
        }
    }

    /// Stores an accepted response through the message path's awaits (a session, a
    /// `MessageAdded` hook).
    pub(super) async fn accept(&mut self, accepting: Accepting) -> Result<StepReport, Error> {
        let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
        let index = self.agent.history.add(accepting.message, &to).await?;
        Ok(StepReport::Accepted {
            index,
            stop_reason: accepting.stop_reason,
            has_tool_use: accepting.has_tool_use,
            invalid_inputs: accepting.invalid_inputs,
        })
    }
}

/// An accepted response whose storing awaits (see [`Driver::accept_now`]).
pub(super) struct Accepting {
    message: Message,
    stop_reason: StopReason,
    has_tool_use: bool,
    invalid_inputs: Vec<(String, String)>,
}

impl Agent {
    /// Calls the model and assembles its stream, streaming deltas to the caller as they come —
    /// through the stream guard when something subscribes to `ModelOutput`. `Err` is a failed
    /// guard (the model's own errors are in [`Called::Done`]).
    ///
    /// The call starts here and the returned future reads it (layout rule 3).
    #[inline]
    fn call_model<'a>(
        &'a self,
        inv: &'a mut Invocation,
        request: ModelRequest,
        raw: u32,
        index: u32,
        sink: &'a Sink,
        span: &'a tracing::Span,
    ) -> impl Future<Output = Result<Called, Error>> + Send + 'a {
        let content = crate::telemetry::capture_content() && !span.is_disabled();
        sink.model_call_started(index, inv.run.output_retries().0 + 1);
        let started = Instant::now();
        inv.streaming_response = true;
        let guarded = self.core.settings.hooks.has::<ModelOutputEvent>();
        if !span.is_disabled() {
            span.record(
                "rein.request.estimated_input_tokens",
                int(self.tokens.get().calibrated(u64::from(raw))),
            );
        }
        if content {
            if let Some(system) = &request.system_prompt {
                span.record("gen_ai.system_instructions", &**system);
            }
            let messages = crate::telemetry::json(&*request.messages);
            span.record("gen_ai.input.messages", messages);
        }
        let open: BoxFuture<'a, Result<ModelStream, ModelError>> = match inv.journal.clone() {
            None => self.core.model.stream(request),
            // Boxed (layout rule 1).
            Some(journal) => Box::pin(async move {
                let model_id = &self.core.model_info().model_id;
                crate::journal::model_call(&*journal, &self.core.model, model_id, request).await
            }),
        };
        async move {
            // The error boxed (layout rule 1).
            let stream = open.await.map_err(Box::new);
            let mut first = None;
            let result = match stream {
                Err(error) => Err(Stop::Model(*error)),
                // Boxed (layout rule 1).
                Ok(stream) if guarded => {
                    Box::pin(self.read_guarded(stream, inv, index, started, &mut first, sink)).await
                }
                Ok(stream) => read(stream, started, &mut first, sink).await,
            };
            let mut cycle = CycleMetrics::default();
            cycle.model_call_index = index;
            cycle.duration = started.elapsed();
            cycle.time_to_first_event = first;
            self.called(inv, result, cycle, content, span, raw)
        }
    }

    /// Reads a model stream through the stream guard.
    async fn read_guarded(
        &self,
        mut stream: ModelStream,
        inv: &mut Invocation,
        index: u32,
        started: Instant,
        first: &mut Option<Duration>,
        sink: &Sink,
    ) -> Result<Streamed, Stop> {
        let hold_back = self.core.settings.config.hold_back;
        // Boxed apart from this (boxed) future (layout rule 2).
        let mut guard = Box::new(OutputGuard::new(
            &self.core.settings.hooks,
            inv.cx.clone(),
            index,
            hold_back,
        ));
        let mut asm = StreamAssembler::new();
        let mut tool_id = String::new();
        // (As in `read`: `let … else`.)
        loop {
            let Some(ev) = stream.next().await else { break };
            let ev = ev.map_err(Stop::Model)?;
            first.get_or_insert_with(|| started.elapsed());
            let ev = match guard
                .feed(ev, inv, &mut asm, sink)
                .await
                .map_err(Stop::Guard)?
            {
                Guarded::Go(Some(ev)) => ev,
                Guarded::Go(None) => continue,
                // Returning drops the model's stream: nothing more is read from it.
                Guarded::Withheld { text, handler } => {
                    return Ok(Streamed::Withheld {
                        released: guard.into_released(),
                        text,
                        handler,
                        fallback: asm.take_fallback(),
                    });
                }
            };
            if assemble(ev, &mut asm, &mut tool_id, sink).map_err(Stop::Model)? {
                sink.flush().await;
            }
        }
        if let Guarded::Withheld { text, handler } = guard
            .close(inv, &mut asm, sink)
            .await
            .map_err(Stop::Guard)?
        {
            return Ok(Streamed::Withheld {
                released: guard.into_released(),
                text,
                handler,
                fallback: asm.take_fallback(),
            });
        }
        assembled(asm)
    }

    /// What a model call came to, with its metrics (`cycle`, timed by the caller) and span
    /// recorded.
    #[inline]
    fn called(
        &self,
        inv: &mut Invocation,
        result: Result<Streamed, Stop>,
        mut cycle: CycleMetrics,
        content: bool,
        span: &tracing::Span,
        raw_estimate: u32,
    ) -> Result<Called, Error> {
        let called = match result {
            Ok(Streamed::Response(response)) => {
                if content {
                    let out = crate::telemetry::json(&response.message);
                    span.record("gen_ai.output.messages", out);
                }
                crate::telemetry::model_call_metrics(
                    || self.core.model_info(),
                    cycle.duration,
                    Some((response.usage.input_tokens, response.usage.output_tokens)),
                    None,
                );
                span.record(
                    "gen_ai.usage.input_tokens",
                    int(response.usage.input_tokens),
                );
                span.record(
                    "gen_ai.usage.output_tokens",
                    int(response.usage.output_tokens),
                );
                crate::telemetry::cache_tokens(span, &response.usage);
                crate::telemetry::finish_reasons(span, response.stop_reason);
                inv.run.add_usage(&response.usage);
                self.tokens
                    .calibrate(u64::from(raw_estimate), &response.usage);
                cycle.usage = response.usage;
                Ok(Called::Done(Ok(response)))
            }
            Ok(Streamed::Withheld {
                released,
                text,
                handler,
                fallback,
            }) => {
                let mut response =
                    ModelResponse::new(Message::assistant(released), StopReason::EndTurn);
                response.fallback = fallback;
                Ok(Called::Withheld {
                    response,
                    text,
                    handler,
                })
            }
            Err(Stop::Model(error)) => {
                let kind = crate::telemetry::model_error_type(&error);
                span.record("otel.status_code", "error");
                span.record("error.type", kind);
                crate::telemetry::model_call_metrics(
                    || self.core.model_info(),
                    cycle.duration,
                    None,
                    Some(kind),
                );
                cycle.time_to_first_event = None;
                Ok(Called::Done(Err(error)))
            }
            Err(Stop::Guard(error)) => Err(error),
        };
        inv.metrics.cycles.push(cycle);
        called
    }

    /// The BeforeModelCall event of a request, with its estimated input tokens. (A function
    /// of its own: layout rule 3 — the estimate would stay in the caller's future.)
    fn before_model_call_event(
        &mut self,
        cx: rein_core::event::InvocationContext,
        request: ModelRequest,
    ) -> BeforeModelCallEvent {
        let estimate = self.tokens.get().calibrated(self.raw_request(&request));
        BeforeModelCallEvent::new(cx, request).with_estimated_input_tokens(estimate)
    }

    /// After a context overflow: whether the conversation manager could shrink the history.
    pub(super) fn reduce_context(&mut self, error: ModelError) -> StepReport {
        let (tokens, fixed) = self.token_parts();
        let mut edit = HistoryEdit::new(self.history.conv_mut()).with_tokens(tokens, fixed);
        let reduced = self.manager.reduce_on_overflow(&mut edit);
        StepReport::Reduced { reduced, error }
    }
}

/// An audit record of the typed-answer check.
fn output_record(action: DecisionAction, text: String) -> DecisionRecord {
    DecisionRecord::new(
        OUTPUT_CHECK,
        EventKind::AfterModelCall,
        action,
        DecisionOutcome::Applied,
    )
    .with_text(text)
}

/// The text of the question a retry cap puts to a human (`OnRetryLimit::Confirm`).
pub(super) fn escalation_prompt(max: u32, guidance: &str) -> String {
    let retries = if max == 1 { "retry" } else { "retries" };
    format!("Guidance did not take after {max} {retries}. Accept this response anyway?\n{guidance}")
}

/// Escalates a retry the cap refuses to a human: the response is held with the
/// `rein:retry-limit` interrupt (about the response as it stands) instead of a hard deny.
/// Returns the audit record of the question.
fn escalate(ev: &mut AfterModelCallEvent, max: u32) -> DecisionRecord {
    let prompt = escalation_prompt(max, &ev.guidance().join("\n"));
    let id = EventKind::AfterModelCall.interrupt_id(&ev.interrupt_subject(), RETRY_LIMIT);
    let reason = serde_json::json!({"prompt": prompt, "guidance": ev.guidance(), "retries": max});
    let interrupt =
        Interrupt::new(id, RETRY_LIMIT, reason).with_fingerprint(ev.response_fingerprint());
    ev.retry = false;
    ev.raise_interrupt(interrupt);
    let mut record = DecisionRecord::new(
        RETRY_LIMIT,
        EventKind::AfterModelCall,
        DecisionAction::Confirm,
        DecisionOutcome::Applied,
    )
    .with_text(prompt);
    record.confirmation = Some(Confirmation::asked());
    record
}

/// Reads a model stream (no stream guard) into its response.
async fn read(
    mut stream: ModelStream,
    started: Instant,
    first: &mut Option<Duration>,
    sink: &Sink,
) -> Result<Streamed, Stop> {
    let mut asm = StreamAssembler::new();
    let mut tool_id = String::new();
    // (`let … else`, not `while let`: layout rule 3.)
    loop {
        let Some(ev) = stream.next().await else { break };
        let ev = ev.map_err(Stop::Model)?;
        first.get_or_insert_with(|| started.elapsed());
        if assemble(ev, &mut asm, &mut tool_id, sink).map_err(Stop::Model)? {
            sink.flush().await;
        }
    }
    assembled(asm)
}

/// The response assembled from the whole stream.
#[inline]
fn assembled(asm: StreamAssembler) -> Result<Streamed, Stop> {
    let response = asm.finish().map_err(|e| Stop::Model(e.into()))?;
    Ok(Streamed::Response(response))
}

/// Adds `ev` to the response and hands its delta to the caller, if one is streaming; returns
/// whether a delta went out. (A function of its own: layout rule 3.)
#[inline]
fn assemble(
    ev: StreamEvent,
    asm: &mut StreamAssembler,
    tool_id: &mut String,
    sink: &Sink,
) -> Result<bool, ModelError> {
    let out = if sink.is_enabled() {
        delta_event(&ev, tool_id, sink)
    } else {
        None
    };
    // Assembled first: a delta the assembler rejects (malformed stream) never reaches the
    // caller, guarded or not.
    asm.push(ev).map_err(ModelError::from)?;
    match out {
        Some(out) => {
            sink.delta(out);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The stream event for a model delta, if the caller sees one (`tool_id` tracks the tool use
/// whose input is streaming).
fn delta_event(ev: &StreamEvent, tool_id: &mut String, sink: &Sink) -> Option<AgentEvent> {
    match ev {
        StreamEvent::BlockStart(BlockStart::ToolUse {
            tool_use_id, name, ..
        }) => {
            tool_id.clone_from(tool_use_id);
            sink.tool_started(name);
            None
        }
        StreamEvent::BlockDelta(BlockDelta::Text(t)) => Some(AgentEvent::TextDelta(t.clone())),
        StreamEvent::BlockDelta(BlockDelta::ToolInput(t)) => Some(AgentEvent::ToolInputDelta {
            tool_use_id: tool_id.clone(),
            delta: t.clone(),
        }),
        StreamEvent::BlockDelta(BlockDelta::ReasoningText(t)) => {
            Some(AgentEvent::ReasoningDelta(t.clone()))
        }
        StreamEvent::BlockStop | StreamEvent::MessageStop { .. } => {
            sink.block_ended();
            None
        }
        _ => None,
    }
}
