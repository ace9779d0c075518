//! A conversation manager's summary (SPEC §6.1): after the invocation, the manager may ask for
//! a summary of the oldest messages; the run writes it here, as a step of its own — a model
//! call through BeforeModelCall/AfterModelCall marked as a summary call, journaled like any
//! model call — and hands the text (or the failure) back to the manager.

use std::sync::Arc;

use futures_util::StreamExt as _;
use rein_core::{
    Message,
    audit::{DecisionAction, DecisionOutcome, DecisionRecord, EventKind},
    event::{AfterModelCallEvent, BeforeModelCallEvent, ModelCallVerdict, RequestVerdict},
    request::ModelRequest,
    result::AgentResult,
    stream::{ModelResponse, StreamAssembler},
};

use super::Driver;
use crate::conversation::{ConversationManager as _, HistoryEdit, SummaryRequest, transcript};
use crate::stream::AgentEvent;
use crate::telemetry::int;

/// The name under which the summary is recorded in the audit and the stream.
pub(crate) const SUMMARY: &str = "rein:summary";

impl Driver<'_> {
    /// After an invocation that ended normally: what the conversation manager asks to have
    /// summarized, if anything ([`summarize`](Self::summarize) then writes it), before its
    /// `apply`.
    pub(super) fn summary_request(&mut self) -> Option<SummaryRequest> {
        let (tokens, fixed) = self.agent.token_parts();
        let edit = HistoryEdit::new(self.agent.history.conv_mut()).with_tokens(tokens, fixed);
        self.agent.manager.summary_request(&edit)
    }

    /// Writes the summary `request` asks for; its decisions and usage go into `result`.
    pub(super) async fn summarize(&mut self, request: SummaryRequest, result: &mut AgentResult) {
        let end = request.end().min(self.agent.history.conv().len());
        let span = tracing::info_span!(
            "summarize_context",
            otel.name = "summarize_context",
            rein.summary.message_count = int(end as u64),
            rein.summary.estimated_tokens_before = tracing::field::Empty,
            rein.summary.estimated_tokens_after = tracing::field::Empty,
            rein.summary.outcome = tracing::field::Empty,
        );
        let before = self.estimated_tokens();
        let written = crate::telemetry::in_span!(&span, self.write_summary(&request, end, result));
        let failure = match &written {
            Ok(_) => None,
            Err(why) => Some(why.clone()),
        };
        {
            let (tokens, fixed) = self.agent.token_parts();
            let mut edit =
                HistoryEdit::new(self.agent.history.conv_mut()).with_tokens(tokens, fixed);
            let text = written.as_deref().ok();
            self.agent.manager.apply_summary(&mut edit, &request, text);
        }
        let after = self.estimated_tokens();
        span.record("rein.summary.estimated_tokens_before", int(before));
        span.record("rein.summary.estimated_tokens_after", int(after));
        span.record(
            "rein.summary.outcome",
            if failure.is_none() {
                "summarized"
            } else {
                "trimmed"
            },
        );
        let (action, text) = match &failure {
            None => (
                DecisionAction::Transform,
                format!(
                    "summarized {end} messages: about {before} tokens became about {after} tokens"
                ),
            ),
            Some(why) => (
                DecisionAction::Error,
                format!("no summary ({why}): the window trimmed instead, to about {after} tokens"),
            ),
        };
        let record = DecisionRecord::new(
            SUMMARY,
            EventKind::AfterInvocation,
            action,
            DecisionOutcome::Applied,
        )
        .with_text(text);
        self.record_late(vec![record], result);
        self.sink.emit(|| AgentEvent::ContextSummarized {
            message_count: end,
            estimated_tokens_before: before,
            estimated_tokens_after: after,
            summary: written.ok(),
            failure,
        });
    }

    /// The history's estimated input tokens.
    fn estimated_tokens(&mut self) -> u64 {
        let (tokens, fixed) = self.agent.token_parts();
        HistoryEdit::new(self.agent.history.conv_mut())
            .with_tokens(tokens, fixed)
            .estimated_tokens()
    }

    /// Records a decision made after the result was built: in the audit of `result`, the
    /// stream and telemetry.
    fn record_late(&mut self, records: Vec<DecisionRecord>, result: &mut AgentResult) {
        self.record(records);
        result.decisions.append(&mut self.inv.decisions);
    }

    /// The summary call: the request, BeforeModelCall, the model (through the journal under a
    /// durable engine), AfterModelCall, and the output's check. `Err` says why there is none.
    async fn write_summary(
        &mut self,
        request: &SummaryRequest,
        end: usize,
        result: &mut AgentResult,
    ) -> Result<String, String> {
        let messages = &self.agent.history.conv().messages()[..end];
        let tokens = self.agent.token_estimator();
        let source: u64 = messages.iter().map(|m| tokens.message(m)).sum();
        let mut call = ModelRequest::shared(
            Arc::new(vec![Message::user(transcript(messages))]),
            Arc::default(),
            self.inv.cx.invocation_state.clone(),
        );
        call.system_prompt = Some(request.system_prompt().clone());
        call.config = self.agent.core.settings.config.inference.clone();
        let index = self.inv.run.model_calls();
        let hooks = self.agent.core.settings.hooks.clone();
        if hooks.has::<BeforeModelCallEvent>() {
            let estimate =
                tokens.request(call.system_prompt.as_deref(), &call.tools, &call.messages);
            let mut ev = BeforeModelCallEvent::new(self.inv.cx.clone(), call)
                .with_model_call_index(index)
                .with_estimated_input_tokens(estimate)
                .as_summary();
            let dispatched = hooks.dispatch(&mut ev).await;
            self.record_late(ev.take_decisions(), result);
            dispatched.map_err(|e| format!("a BeforeModelCall handler failed: {e}"))?;
            call = match ev.into_verdict() {
                RequestVerdict::Send(call) => call,
                RequestVerdict::Deny(text) => return Err(format!("the call was denied: {text}")),
                RequestVerdict::Hold(_) => {
                    return Err("the call was held, and a summary does not wait".into());
                }
                #[allow(unreachable_patterns)]
                _ => return Err("the call was not sent".into()),
            };
        }
        let model = request
            .own_model()
            .unwrap_or(&self.agent.core.model)
            .clone();
        let outcome = match self.inv.journal.clone() {
            Some(journal) => {
                let model_id = model.info().model_id;
                crate::journal::model_call(&*journal, &model, &model_id, call).await
            }
            None => model.stream(call).await,
        };
        let outcome = match outcome {
            Ok(stream) => read(stream).await,
            Err(e) => Err(e),
        };
        if let Ok(response) = &outcome {
            result.usage.add(&response.usage);
        }
        let response = if hooks.has::<AfterModelCallEvent>() {
            let mut ev = AfterModelCallEvent::new(self.inv.cx.clone(), outcome)
                .with_model_call_index(index)
                .as_summary();
            let dispatched = hooks.dispatch(&mut ev).await;
            self.record_late(ev.take_decisions(), result);
            dispatched.map_err(|e| format!("an AfterModelCall handler failed: {e}"))?;
            match ev.into_verdict() {
                ModelCallVerdict::Accept { response, .. } => response,
                ModelCallVerdict::Failed(e) => return Err(format!("the model failed: {e}")),
                _ => return Err("a handler did not accept the summary".into()),
            }
        } else {
            outcome.map_err(|e| format!("the model failed: {e}"))?
        };
        let text = response.message.text();
        let text = text.trim();
        if text.is_empty() {
            return Err("the summary was empty".into());
        }
        if tokens.message(&Message::user(text)) >= source {
            return Err("the summary was no shorter than what it summarizes".into());
        }
        Ok(text.to_owned())
    }
}

/// The summary call's response, assembled (nothing is streamed to the caller: it is not the
/// agent's answer).
async fn read(
    mut stream: rein_models::ModelStream,
) -> Result<ModelResponse, rein_core::ModelError> {
    let mut asm = StreamAssembler::new();
    while let Some(ev) = stream.next().await {
        asm.push(ev?)?;
    }
    Ok(asm.finish()?)
}
