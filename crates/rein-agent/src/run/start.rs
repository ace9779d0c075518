//! How a run starts: input checks, the invocation's context, the input's admission
//! (BeforeInvocation), and a resume's answers.

use std::collections::{BTreeMap, HashMap};

use rein_core::{
    ContentBlock, Error, Message, ToolResult, ToolUse,
    audit::{
        AnswerSource, Confirmation, DecisionAction, DecisionOutcome, DecisionRecord, EventKind,
    },
    event::{BeforeInvocationEvent, InputVerdict, InvocationContext, ModelCallVerdict},
    id::InvocationId,
    interrupt::{Approval, InterruptAnswer, InterruptAnswers, InterruptEvent},
    message::InterruptResponse,
    result::InvocationMetrics,
    stream::ModelResponse,
};
use serde_json::Value;

use super::machine::{RETRY_LIMIT, Resume, Run, StepReport, ToolPhase};
use super::model::Called;
use super::{Driver, Invocation, listeners};
use crate::agent::{Agent, Input, InputMessages, OnRetryLimit};
use crate::checkpoint::{Pause, PausedRun, PendingInterrupt, ResponsePause};
use crate::history::TOOL_CANCELLED;

impl Agent {
    /// Input errors, before anything fires: answers without pending interrupts, for unknown
    /// ones (another pause's among them) or not bound to what they answer; a new prompt while
    /// interrupts are pending.
    pub(super) fn check_input(&self, input: &Input) -> Result<(), Error> {
        if input.is_resume() {
            let Some(p) = &self.pending else {
                return Err(Error::NoPendingInterrupts);
            };
            for r in &input.responses {
                p.answered_by(r)?;
            }
        } else if self.pending.is_some() {
            return Err(Error::InterruptsPending);
        }
        Ok(())
    }

    /// The invocation: its context (a resume without state keeps the paused one's), its
    /// machine and its span.
    pub(super) fn begin(&self, input: Input) -> (Box<Invocation>, tracing::Span) {
        let is_resume = input.is_resume();
        let state = match (input.state, &self.pending) {
            (Some(s), _) => s,
            (None, Some(p)) if is_resume => p.invocation_state.clone(),
            _ => Default::default(),
        };
        // A resume continues the paused run with its state; a prompt starts a run afresh.
        match &self.pending {
            Some(p) if is_resume => self.run_state.replace(p.run_state.clone()),
            _ => self.run_state.clear(),
        }
        // Built whole: `in_run` would make an agent state only to replace it.
        let cx = InvocationContext {
            invocation_id: InvocationId::new(),
            invocation_state: state,
            run_state: self.run_state.clone(),
            agent_state: self.state.clone(),
        };
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format_args!("invoke_agent {}", self.core.name),
            otel.kind = "internal",
            otel.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %self.core.name,
            gen_ai.provider.name = %self.core.model_info().provider,
            gen_ai.request.model = %self.core.model_info().model_id,
            gen_ai.conversation.id = %cx.invocation_id,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            rein.stop_reason = tracing::field::Empty,
        );
        let config = &self.core.settings.config;
        let resume = match &self.pending {
            Some(p) if is_resume => Resume::from(&p.at),
            _ => Resume::No,
        };
        // Boxed (layout rules 1, 2): 720 B inline would be half the invocation's future.
        let inv = Box::new(Invocation {
            cx,
            run: Run::new(
                config.limits,
                config.max_hook_retries,
                config.retry.clone(),
                resume,
            )
            .escalating(config.on_retry_limit == OnRetryLimit::Confirm)
            .with_output_retries(self.core.output.as_ref().map_or(0, |o| o.max_retries)),
            metrics: InvocationMetrics::default(),
            decisions: Vec::new(),
            answers: InterruptAnswers::default(),
            tool_phase: None,
            streaming_response: false,
            discarded_by: None,
            run_version: self.interceptor.begin(is_resume),
            injections: Vec::new(),
            sub_agent_usage: BTreeMap::new(),
            handoff: None,
            handoffs: Vec::new(),
            max_handoffs: config.max_handoffs,
            journal: input.journal.or_else(|| self.core.settings.journal.clone()),
            span: span.clone(),
            input: input.messages,
            responses: input.responses,
            pause_nonce: None,
        });
        (inv, span)
    }
}

impl Driver<'_> {
    /// BeforeInvocation on the input, then the input is stored (unless denied or held).
    pub(super) async fn admit_input(
        &mut self,
        mut messages: InputMessages,
    ) -> Result<StepReport, Error> {
        // A stream dropped mid-run (its future dropped during the tool phase) leaves tool uses
        // without results: answer them first, through the message path.
        if self.agent.pending.is_none() {
            let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
            self.agent
                .history
                .close_open_tool_uses(&[], TOOL_CANCELLED, &to)
                .await?;
        }
        if self
            .agent
            .core
            .settings
            .hooks
            .has::<BeforeInvocationEvent>()
        {
            let mut ev = BeforeInvocationEvent::new(
                self.inv.cx.clone(),
                messages.into_vec(),
                self.agent.history.conv().snapshot(),
            );
            if self.inv.run.is_resume() {
                ev = ev.as_resume().with_answers(self.inv.answers.clone());
            }
            let dispatched = self.agent.core.settings.hooks.dispatch(&mut ev).await;
            // Decisions (a handler error among them) are recorded even when the dispatch fails.
            self.record(ev.take_decisions());
            dispatched?;
            messages = match ev.into_verdict() {
                InputVerdict::Admit(messages) => InputMessages::Many(messages),
                // Nothing is stored: neither the denied input nor the cancel text.
                InputVerdict::Deny(text) => return Ok(StepReport::InputDenied(text)),
                InputVerdict::Hold {
                    messages,
                    interrupts,
                } => {
                    return Ok(StepReport::InputHeld {
                        messages,
                        interrupts,
                    });
                }
            };
        }
        let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
        self.agent.history.add_all(messages, &to).await?;
        Ok(StepReport::Done)
    }

    /// A resume: takes the paused run with the caller's answers (checked, bound to what they
    /// answer, edits applied) and goes on from where it stopped — the one way a paused run
    /// goes on.
    pub(super) async fn resume(
        &mut self,
        responses: Vec<InterruptResponse>,
    ) -> Result<StepReport, Error> {
        let resumed = self.take_paused(responses)?;
        // The paused run is consumed by the resume.
        self.agent.session_sync().await?;
        let fed = match resumed.at {
            Pause::Input { messages } => self.admit_input(InputMessages::Many(messages)).await,
            Pause::Request {
                model_call_index, ..
            } => self.model_call(model_call_index).await,
            Pause::Response(held) => {
                let edited = resumed.response_edited;
                self.resume_response(*held, &resumed.interrupts, edited)
                    .await
            }
            Pause::Tools(_) => {
                // The tool cycle keeps the answers until it completes (`settle_tool_phase`).
                self.inv.tool_phase = resumed.tool_phase;
                return self.tool_phase(&[]).await;
            }
        };
        // The answers were for this pass only (a later call of this invocation has the same
        // index, so an answer must not carry over to it).
        self.inv.answers = InterruptAnswers::default();
        fed
    }

    /// A held response: AfterModelCall runs again on it with the answers (an approval's edit is
    /// the response's new text); the model is not called again.
    async fn resume_response(
        &mut self,
        held: ResponsePause,
        interrupts: &[PendingInterrupt],
        edited_response: bool,
    ) -> Result<StepReport, Error> {
        let mut response = ModelResponse::new(held.message, held.stop_reason);
        response.usage = held.usage;
        // A human answered the retry cap's question: that answer decides, not another pass
        // (whose guidance would ask for the retry again).
        let escalation = interrupts
            .iter()
            .map(|p| &p.interrupt)
            .find(|i| i.name == RETRY_LIMIT)
            .and_then(|i| {
                let answer = self
                    .inv
                    .answers
                    .get_bound(&i.id, &response.message.fingerprint())?;
                Some((i, answer.clone()))
            });
        if let Some((interrupt, answer)) = escalation {
            let approved = Approval::from_answer(&answer).is_some_and(|a| a.approved);
            let prompt = interrupt.reason["prompt"].as_str().unwrap_or_default();
            let mut record = DecisionRecord::new(
                RETRY_LIMIT,
                EventKind::AfterModelCall,
                DecisionAction::Confirm,
                DecisionOutcome::Applied,
            )
            .with_text(prompt);
            record.confirmation = Some(Confirmation::answered(
                approved,
                answer,
                AnswerSource::Resume,
            ));
            self.record(vec![record]);
            let verdict = if approved {
                let edited = edited_response;
                ModelCallVerdict::Accept { response, edited }
            } else {
                ModelCallVerdict::Withhold {
                    text: format!("CONFIRMATION_FAILED: {prompt}"),
                }
            };
            return Ok(StepReport::ModelCalled(verdict));
        }
        self.answered(Called::Done(Ok(response)), held.model_call_index)
            .await
    }

    /// Takes the paused run, recording the caller's answers (with the fingerprints of what
    /// they answer) in the invocation; a paused tool phase is set up to run again. A bad answer, or a
    /// tool phase whose message is no longer in history, changes nothing: the run stays
    /// paused.
    fn take_paused(&mut self, responses: Vec<InterruptResponse>) -> Result<Resumed, Error> {
        let mut paused = self
            .agent
            .pending
            .take()
            .ok_or(Error::NoPendingInterrupts)?;
        let edits = match self.agent.record_answers(&mut paused, responses) {
            Ok(edits) => edits,
            Err(e) => {
                self.agent.pending = Some(paused);
                return Err(e);
            }
        };
        let tool_phase = match &mut paused.at {
            Pause::Tools(t) => {
                let conv = self.agent.history.conv();
                let idx = conv
                    .ids()
                    .iter()
                    .position(|id| *id == t.message_id)
                    // Restored history without ids: find the message itself.
                    .or_else(|| conv.messages().iter().rposition(|m| *m == t.message));
                let Some(idx) = idx else {
                    // Kept: the interrupts stay answerable once history is set right.
                    self.agent.pending = Some(paused);
                    return Err(Error::PendingMessageMissing);
                };
                self.inv.handoff = t.handoff.take();
                let phase = self
                    .agent
                    .tool_phase_of(
                        idx,
                        t.model_call_index,
                        std::mem::take(&mut t.completed),
                        std::mem::take(&mut t.held),
                    )
                    .with_edits(edits.calls)
                    .with_children(std::mem::take(&mut t.children));
                Some(phase)
            }
            Pause::Input { .. } | Pause::Request { .. } | Pause::Response(_) => None,
        };
        let PausedRun {
            at,
            interrupts,
            answers,
            ..
        } = *paused;
        self.inv.answers = InterruptAnswers::new(answers.into_iter().collect::<HashMap<_, _>>());
        Ok(Resumed {
            at,
            interrupts,
            tool_phase,
            response_edited: edits.response,
        })
    }
}

impl Agent {
    /// Records the caller's answers in `paused`, bound to the fingerprints of what they answer.
    /// Answers are checked first — one shaped like an approval but not one, or a bad edit, is
    /// `InvalidAnswer` and `paused` is left as it was — then edits are applied: a held input,
    /// result or response takes its edit, and the answer is bound to the edit.
    fn record_answers(
        &self,
        paused: &mut PausedRun,
        responses: Vec<InterruptResponse>,
    ) -> Result<Edits, Error> {
        // Each answer under the id of the interrupt it answers (hooks look answers up by it),
        // bound to the fingerprint it names — checked to be the interrupt's.
        let mut answered = Vec::with_capacity(responses.len());
        let mut edits = Vec::new();
        for r in responses {
            let pending = paused.answered_by(&r)?;
            if let Some(edit) = self.edit_of(&paused.at, pending, &r)? {
                edits.push((pending.interrupt.id.clone(), edit));
            }
            answered.push((pending.interrupt.id.clone(), r));
        }
        let mut applied = Edits::default();
        let mut bound_to = HashMap::new();
        for (interrupt_id, edit) in edits {
            match (edit, &mut paused.at) {
                (Edit::Call(call), _) => {
                    bound_to.insert(interrupt_id, call.fingerprint());
                    applied.calls.push(call);
                }
                (Edit::Result { call, result }, Pause::Tools(t)) => {
                    bound_to.insert(interrupt_id, result.fingerprint(&call));
                    if let Some(held) = t
                        .held
                        .iter_mut()
                        .find(|h| h.tool_use_id == result.tool_use_id)
                    {
                        *held = result;
                    }
                }
                (Edit::Response(message), Pause::Response(held)) => {
                    bound_to.insert(interrupt_id, message.fingerprint());
                    held.message = message;
                    applied.response = true;
                }
                (Edit::Input(edited), Pause::Input { messages }) => {
                    bound_to.insert(interrupt_id, Message::fingerprint_all(&edited));
                    *messages = edited;
                }
                // `edit_of` makes each edit for the pause it applies to.
                _ => return Err(Error::Internal("an edit for another pause")),
            }
        }
        for (id, r) in answered {
            let fingerprint = bound_to.remove(&id).or(r.fingerprint);
            paused.answers.insert(
                id,
                InterruptAnswer {
                    response: r.response,
                    fingerprint,
                },
            );
        }
        Ok(applied)
    }

    /// The edit an approval carries, checked: a held input's or response's new text, a tool
    /// call's new input against the tool's schema, a held result's new text — by where the
    /// interrupt was raised. `None` when the answer approves nothing or edits nothing. An
    /// answer shaped like an approval but not one is `InvalidAnswer` too.
    fn edit_of(
        &self,
        at: &Pause,
        pending: &PendingInterrupt,
        r: &InterruptResponse,
    ) -> Result<Option<Edit>, Error> {
        let interrupt = &pending.interrupt;
        let invalid = |reason: String| Error::InvalidAnswer {
            interrupt_id: interrupt.id.clone(),
            reason,
        };
        let Some(Approval {
            approved: true,
            edit: Some(edit),
            ..
        }) = Approval::parse(&r.response).map_err(invalid)?
        else {
            return Ok(None);
        };
        // A sub-agent's interrupt is its own: its edit is not for this agent's pause.
        let event = match &pending.point.parent {
            None => Some(pending.point.event),
            Some(_) => None,
        };
        let tools = match (event, at) {
            (Some(InterruptEvent::BeforeInvocation), Pause::Input { messages }) => {
                let Value::String(text) = edit else {
                    return Err(invalid("the edit of an input is its new text".into()));
                };
                // The last message's text blocks become the edited text; other blocks stay.
                let mut messages = messages.clone();
                if let Some(last) = messages.last_mut() {
                    last.content.retain(|b| !matches!(b, ContentBlock::Text(_)));
                    last.content.insert(0, ContentBlock::Text(text));
                }
                return Ok(Some(Edit::Input(messages)));
            }
            (Some(InterruptEvent::AfterModelCall), Pause::Response(held)) => {
                // A typed answer's edit is checked before it is accepted (SPEC §13); it may
                // be given as the JSON value itself.
                let typed = self
                    .core
                    .output
                    .as_deref()
                    .filter(|_| !held.message.has_tool_use());
                let text = match (edit, typed) {
                    (Value::String(text), _) => text,
                    (value, Some(_)) => value.to_string(),
                    (_, None) => {
                        return Err(invalid("the edit of a response is its new text".into()));
                    }
                };
                if let Some(spec) = typed {
                    spec.check(&text).map_err(|errors| {
                        invalid(format!(
                            "the edited answer does not match the output schema: {}",
                            errors.join("; ")
                        ))
                    })?;
                }
                // The text blocks become the edited text; tool uses stay.
                let mut message = held.message.clone();
                message
                    .content
                    .retain(|b| !matches!(b, ContentBlock::Text(_)));
                message.content.insert(0, ContentBlock::Text(text));
                return Ok(Some(Edit::Response(message)));
            }
            (
                Some(event @ (InterruptEvent::BeforeToolCall | InterruptEvent::AfterToolCall)),
                Pause::Tools(t),
            ) => (event, t),
            _ => return Err(invalid("this interrupt's answer takes no edit".into())),
        };
        let (event, t) = tools;
        let call = interrupt
            .tool_use_id
            .as_deref()
            .and_then(|id| t.message.tool_uses().find(|u| u.tool_use_id == id))
            .ok_or_else(|| invalid("only a tool call or its result can be edited".into()))?;
        if event == InterruptEvent::BeforeToolCall {
            if !edit.is_object() {
                return Err(invalid(
                    "the edit of a tool call is its new input, an object".into(),
                ));
            }
            let tool = self
                .core
                .tools
                .get(&call.name)
                .ok_or_else(|| invalid(format!("unknown tool: {}", call.name)))?;
            self.core.tools.validate(&tool, &edit).map_err(|what| {
                invalid(format!(
                    "the edited input does not fit the tool's schema: {what}"
                ))
            })?;
            let mut edited = call.clone();
            edited.input = edit;
            return Ok(Some(Edit::Call(edited)));
        }
        let Value::String(text) = edit else {
            return Err(invalid(
                "the edit of a tool's result is its new text".into(),
            ));
        };
        let held = t
            .held
            .iter()
            .find(|h| h.tool_use_id == call.tool_use_id)
            .ok_or_else(|| invalid("no result waits for this answer".into()))?;
        let mut result = ToolResult::success(held.tool_use_id.clone(), text);
        result.status = held.status;
        Ok(Some(Edit::Result {
            call: call.clone(),
            result,
        }))
    }
}

/// A paused run taken for its resume.
struct Resumed {
    at: Pause,
    interrupts: Vec<PendingInterrupt>,
    /// A paused tool phase, set up to run again.
    tool_phase: Option<ToolPhase>,
    /// Whether an approval edited a held response.
    response_edited: bool,
}

/// The edits the answers applied beyond the pause itself.
#[derive(Default)]
struct Edits {
    /// Tool calls a human edited: they run as edited.
    calls: Vec<ToolUse>,
    /// Whether a held response was edited.
    response: bool,
}

/// What a human changed when approving.
enum Edit {
    /// A tool call's new input.
    Call(ToolUse),
    /// A held result's new text.
    Result { call: ToolUse, result: ToolResult },
    /// A held response with its new text.
    Response(Message),
    /// A held input with its new text.
    Input(Vec<Message>),
}
