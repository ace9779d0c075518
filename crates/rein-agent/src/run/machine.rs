//! The run as a sans-IO state machine: it decides the loop, the driver does the IO.
//!
//! The driver feeds the machine what happened ([`StepReport`]) and gets back what to do next
//! ([`Step`]), until a [`Step::Finish`]. The machine holds the decisions of the loop itself —
//! limits, model-error retries and their back-off, hook-retry caps, what a verdict on a model
//! response means, when the tool phase and the injection drain happen, how a run ends — and
//! no model, hook, clock, runtime or store, so it is unit-tested below with plain values. The
//! decisions made inside a step from what hooks and tools return (a tool use's verdict and
//! retries, the retry cap's escalation, a resume's way on, the handoff claim) are the
//! driver's; the machine sees their results.

use std::collections::BTreeMap;
use std::time::Duration;

use rein_core::{
    ContentBlock, Error, Message, ModelError, ToolResult, ToolUse,
    audit::{DecisionAction, DecisionOutcome, DecisionRecord, EventKind},
    event::ModelCallVerdict,
    interrupt::Interrupt,
    result::OutputError,
    stream::{ModelResponse, StopReason, Usage},
};

use crate::agent::Limits;
use crate::checkpoint::{Checkpoint, Pause, PendingInterrupt};
use crate::retry::RetryStrategy;

/// Why the retry cap denies: its record's text, a reason like any deny record's.
fn retry_limit_reason(n: u32) -> String {
    format!("retry limit ({n}) reached")
}

/// The text that ends a turn or answers a tool when a hook keeps asking for retries: the deny
/// text of [`retry_limit_reason`].
pub(crate) fn retry_limit_text(n: u32) -> String {
    format!("DENIED: {}", retry_limit_reason(n))
}

/// The name under which the retry cap decides in the audit and the stream.
pub(crate) const RETRY_LIMIT: &str = "rein:retry-limit";

/// The audit record of a retry cap of `n` reached (`rein:retry-limit`).
pub(crate) fn retry_limit_record(event: EventKind, n: u32) -> DecisionRecord {
    DecisionRecord::new(
        RETRY_LIMIT,
        event,
        DecisionAction::Deny,
        DecisionOutcome::Applied,
    )
    .with_text(retry_limit_reason(n))
}

/// The name under which the typed-answer check decides in the audit and the stream.
pub(crate) const OUTPUT_CHECK: &str = "rein:output";

/// How a run ends: every way out of the loop is one of these.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The turn ended with this message.
    Reply {
        message: Message,
        stop_reason: StopReason,
    },
    /// The turn ended with the stored message at `index` (the last one when `None`).
    Stored {
        index: Option<usize>,
        stop_reason: StopReason,
    },
    /// Tools wait for answers to these interrupts; `message` holds their tool uses.
    Interrupted {
        message: Message,
        interrupts: Vec<Interrupt>,
    },
    /// A response waits for answers to these interrupts (AfterModelCall); nothing is stored.
    /// (Boxed: layout rule 1.)
    Held {
        response: Box<ModelResponse>,
        interrupts: Vec<Interrupt>,
        model_call_index: u32,
    },
    /// A model call waits for answers before it is sent (BeforeModelCall).
    HeldRequest {
        interrupts: Vec<Interrupt>,
        model_call_index: u32,
    },
    /// The input waits for answers before it is stored (BeforeInvocation); nothing is stored.
    HeldInput {
        messages: Vec<Message>,
        interrupts: Vec<Interrupt>,
    },
    /// The caller asked to stop once the tools finished.
    CancelledAfterTools,
    /// The caller cancelled the run.
    Cancelled,
    /// The run failed.
    Failed(Error),
}

impl Outcome {
    /// Whether the run pauses on interrupts (it has not ended: a resume continues it).
    pub(crate) fn is_pause(&self) -> bool {
        matches!(
            self,
            Self::Interrupted { .. }
                | Self::Held { .. }
                | Self::HeldRequest { .. }
                | Self::HeldInput { .. }
        )
    }
}

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Run BeforeInvocation on the input; store it unless it is denied.
    AdmitInput,
    /// Go on from where the run paused, with the caller's answers: BeforeInvocation again on a
    /// held input, the held model call (its BeforeModelCall pass seeing the answers),
    /// AfterModelCall again on a held response, or the tool phase again.
    Resume,
    /// BeforeModelCall, the model call `index`, AfterModelCall.
    CallModel { index: u32 },
    /// Withdraw the response streamed so far (the caller is told why, and by whom when the
    /// machine itself decided: the retry limit).
    Discard {
        reason: String,
        handler: Option<&'static str>,
    },
    /// Store guidance as user text (before the model is called again).
    StoreGuidance(Vec<String>),
    /// Ask the conversation manager to shrink the history after a context overflow.
    ReduceContext(ModelError),
    /// Wait before calling the model again.
    Backoff(Duration),
    /// Store this text as the assistant's reply, recording `record` first; the turn ends.
    EndTurn {
        text: String,
        record: Option<Box<DecisionRecord>>,
    },
    /// Store the accepted response (telling the stream it was rewritten when `edited`).
    Accept {
        response: ModelResponse,
        edited: bool,
    },
    /// Run the tool uses of the stored assistant message at `index`.
    RunTools {
        index: usize,
        model_call_index: u32,
        invalid_inputs: Vec<(String, String)>,
    },
    /// Deliver the injected messages queued so far (a turn boundary).
    DrainInjections,
    /// The run is over.
    Finish(Outcome),
}

/// What happened since the last step.
#[derive(Debug)]
pub(crate) enum StepReport {
    /// The run starts.
    Start,
    /// The step was done (for steps that have nothing to report).
    Done,
    /// BeforeInvocation denied the input with this text (nothing was stored).
    InputDenied(String),
    /// BeforeInvocation holds the input for answers (nothing was stored).
    InputHeld {
        messages: Vec<Message>,
        interrupts: Vec<Interrupt>,
    },
    /// BeforeModelCall holds model call `model_call_index` for answers (nothing was sent).
    RequestHeld {
        interrupts: Vec<Interrupt>,
        model_call_index: u32,
    },
    /// The model call's verdict.
    ModelCalled(ModelCallVerdict),
    /// Whether the conversation manager shrank the history; the error it was asked for.
    Reduced { reduced: bool, error: ModelError },
    /// The accepted response is stored at `index`; `invalid_inputs` are its tool uses whose
    /// input was not valid JSON (id, parse error).
    Accepted {
        index: usize,
        stop_reason: StopReason,
        has_tool_use: bool,
        invalid_inputs: Vec<(String, String)>,
    },
    /// The stand-in reply is stored.
    EndedTurn(Message),
    /// The tool phase is over.
    ToolsDone(ToolsEnd),
    /// A final answer was refused (it failed the typed-answer check, or a handler guided it):
    /// `errors` say why, `raw` is the answer, `guidance` what the model is told on a retry.
    OutputRefused {
        errors: Vec<String>,
        raw: String,
        guidance: String,
    },
}

/// How a tool phase ended.
#[derive(Debug)]
pub(crate) enum ToolsEnd {
    /// Every tool use has its result (stored); `cancel_requested` when the caller asked to stop
    /// after the tools.
    Completed { cancel_requested: bool },
    /// Tools wait for answers.
    Interrupted {
        message: Message,
        interrupts: Vec<Interrupt>,
    },
}

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Admitting,
    /// A model response or error was withdrawn; what comes next depends on why.
    Discarded,
    /// Guidance stored, a back-off waited or the history reduced: call the model again.
    Retrying,
    Tools,
    Draining,
    Done,
}

/// What a discard was for.
#[derive(Debug)]
enum AfterDiscard {
    /// Store this guidance, then call again.
    Retry(Vec<String>),
    /// Decide what to do about a failed call.
    Recover(ModelError),
    /// Store this reply and end the turn.
    EndTurn(String, Option<Box<DecisionRecord>>),
}

/// What an invocation resumes, if anything (where the run paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// Nothing: a new input.
    No,
    /// The input (BeforeInvocation interrupts).
    Input,
    /// A model call (BeforeModelCall interrupts).
    Request,
    /// A response (AfterModelCall interrupts), held after `hook_retries` retries of its turn
    /// and `output_retries` refused typed answers.
    Response {
        hook_retries: u32,
        output_retries: u32,
    },
    /// A tool phase (tool interrupts; held results among them).
    Tools,
}

impl From<&Pause> for Resume {
    fn from(pause: &Pause) -> Self {
        match pause {
            Pause::Input { .. } => Self::Input,
            Pause::Request { .. } => Self::Request,
            Pause::Response(r) => Self::Response {
                hook_retries: r.hook_retries,
                output_retries: r.output_retries,
            },
            Pause::Tools(_) => Self::Tools,
        }
    }
}

/// One invocation's decisions.
#[derive(Debug)]
pub(crate) struct Run {
    limits: Limits,
    max_hook_retries: u32,
    retry: RetryStrategy,
    resume: Resume,
    /// At the hook-retry cap, ask a human instead of denying (`OnRetryLimit::Confirm`).
    escalate: bool,
    phase: Phase,
    /// Model calls made (retries included); the next call's index.
    model_calls: u32,
    usage: Usage,
    /// Model calls of this turn retried at a hook's request.
    hook_retries: u32,
    /// Consecutive failed model calls of this turn.
    error_attempts: u32,
    /// The history was reduced after a context overflow and no call has succeeded since: a
    /// second overflow ends the run (the retry happens once).
    overflow_reduced: bool,
    /// What follows a discard under way (boxed: layout rule 1).
    after_discard: Option<Box<AfterDiscard>>,
    /// Typed answers refused so far, and how many refusals the invocation allows.
    output_retries: u32,
    max_output_retries: u32,
}

impl Run {
    pub(crate) fn new(
        limits: Limits,
        max_hook_retries: u32,
        retry: RetryStrategy,
        resume: Resume,
    ) -> Self {
        // A held response's turn goes on counting its retries.
        let (hook_retries, output_retries) = match resume {
            Resume::Response {
                hook_retries,
                output_retries,
            } => (hook_retries, output_retries),
            _ => (0, 0),
        };
        Self {
            limits,
            max_hook_retries,
            retry,
            resume,
            escalate: false,
            phase: Phase::Start,
            model_calls: 0,
            usage: Usage::default(),
            hook_retries,
            error_attempts: 0,
            overflow_reduced: false,
            after_discard: None,
            output_retries,
            max_output_retries: 0,
        }
    }

    /// How many refused typed answers are sent back (SPEC §13).
    pub(crate) fn with_output_retries(mut self, max: u32) -> Self {
        self.max_output_retries = max;
        self
    }

    /// Typed answers refused so far, and the cap.
    pub(crate) fn output_retries(&self) -> (u32, u32) {
        (self.output_retries, self.max_output_retries)
    }

    /// At the hook-retry cap, a human is asked instead of a hard deny.
    pub(crate) fn escalating(mut self, escalate: bool) -> Self {
        self.escalate = escalate;
        self
    }

    /// Whether a hook's request to retry the model call now goes to a human instead: the cap
    /// is reached and the agent escalates.
    pub(crate) fn escalates_retry(&self) -> bool {
        self.escalate && self.hook_retries >= self.max_hook_retries
    }

    /// Whether the run resumes from interrupts.
    pub(crate) fn is_resume(&self) -> bool {
        self.resume != Resume::No
    }

    /// Whether the model call under way is the held one a resume makes again (the first call
    /// of an invocation that resumes a request; a retry of it is another call).
    pub(crate) fn resumes_held_call(&self) -> bool {
        matches!(self.resume, Resume::Request) && self.model_calls == 1
    }

    /// Model calls of this turn retried at a hook's request so far, and the cap.
    pub(crate) fn hook_retries(&self) -> (u32, u32) {
        (self.hook_retries, self.max_hook_retries)
    }

    /// Model calls made so far: the index of the next one.
    pub(crate) fn model_calls(&self) -> u32 {
        self.model_calls
    }

    /// Usage so far (what the token limits count).
    pub(crate) fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Counts a model call's usage towards the limits.
    pub(crate) fn add_usage(&mut self, usage: &Usage) {
        self.usage.add(usage);
    }

    /// Settles the audit of a model call before it is recorded: guidance of a retry that the
    /// cap refuses is never injected, so its applied guides are overridden.
    pub(crate) fn settle_decisions(
        &self,
        verdict: &ModelCallVerdict,
        decisions: &mut [DecisionRecord],
    ) {
        if matches!(verdict, ModelCallVerdict::Retry { .. })
            && self.hook_retries >= self.max_hook_retries
        {
            for d in decisions {
                if d.action == DecisionAction::Guide && d.outcome == DecisionOutcome::Applied {
                    d.outcome = DecisionOutcome::Overridden;
                }
            }
        }
    }

    /// The next step, given what happened.
    #[inline]
    pub(crate) fn next(&mut self, fed: StepReport) -> Step {
        let step = match fed {
            StepReport::Start => {
                self.phase = Phase::Admitting;
                if self.resume == Resume::Input {
                    Step::Resume
                } else {
                    Step::AdmitInput
                }
            }
            StepReport::InputDenied(text) => Step::Finish(Outcome::Reply {
                message: Message::assistant(text),
                stop_reason: StopReason::EndTurn,
            }),
            StepReport::InputHeld {
                messages,
                interrupts,
            } => Step::Finish(Outcome::HeldInput {
                messages,
                interrupts,
            }),
            StepReport::RequestHeld {
                interrupts,
                model_call_index,
            } => Step::Finish(Outcome::HeldRequest {
                interrupts,
                model_call_index,
            }),
            StepReport::ModelCalled(verdict) => self.on_verdict(verdict),
            StepReport::OutputRefused {
                errors,
                raw,
                guidance,
            } => self.on_output_refused(errors, raw, guidance),
            StepReport::Reduced { reduced: true, .. } => self.call_model(),
            StepReport::Reduced { error, .. } => self.backoff_or_fail(error),
            StepReport::EndedTurn(message) => Step::Finish(Outcome::Reply {
                message,
                stop_reason: StopReason::EndTurn,
            }),
            StepReport::Accepted {
                index,
                has_tool_use: true,
                invalid_inputs,
                ..
            } => {
                self.phase = Phase::Tools;
                Step::RunTools {
                    index,
                    model_call_index: self.model_calls.saturating_sub(1),
                    invalid_inputs,
                }
            }
            StepReport::Accepted {
                index, stop_reason, ..
            } => Step::Finish(Outcome::Stored {
                index: Some(index),
                stop_reason,
            }),
            StepReport::ToolsDone(ToolsEnd::Interrupted {
                message,
                interrupts,
            }) => Step::Finish(Outcome::Interrupted {
                message,
                interrupts,
            }),
            StepReport::ToolsDone(ToolsEnd::Completed {
                cancel_requested: true,
            }) => Step::Finish(Outcome::CancelledAfterTools),
            StepReport::ToolsDone(ToolsEnd::Completed { .. }) => {
                self.phase = Phase::Draining;
                Step::DrainInjections
            }
            StepReport::Done => match (self.phase, self.resume) {
                (Phase::Admitting, Resume::Tools) => {
                    self.phase = Phase::Tools;
                    Step::Resume
                }
                (Phase::Admitting, Resume::Response { .. }) => {
                    self.phase = Phase::Retrying;
                    Step::Resume
                }
                // The held call is made if the limits allow it (it keeps its index: its
                // answers are bound to its ids).
                (Phase::Admitting, Resume::Request) => match self.call_model() {
                    Step::CallModel { .. } => Step::Resume,
                    other => other,
                },
                (Phase::Admitting | Phase::Draining, _) => self.start_turn(),
                (Phase::Discarded, _) => self.after_discard(),
                (Phase::Retrying, _) => self.call_model(),
                (Phase::Start | Phase::Tools | Phase::Done, _) => Step::Finish(Outcome::Failed(
                    Error::Internal("the run was fed a finished step in a phase that has none"),
                )),
            },
        };
        if let Step::Finish(_) = step {
            self.phase = Phase::Done;
        }
        step
    }

    /// A new turn: fresh retry counts, then a model call.
    #[inline]
    fn start_turn(&mut self) -> Step {
        self.hook_retries = 0;
        self.error_attempts = 0;
        self.overflow_reduced = false;
        self.call_model()
    }

    /// A model call, unless a limit is reached (checked before every call, retries included).
    #[inline]
    fn call_model(&mut self) -> Step {
        if let Some(stop_reason) = self.limit_hit() {
            return Step::Finish(Outcome::Stored {
                index: None,
                stop_reason,
            });
        }
        let index = self.model_calls;
        self.model_calls += 1;
        self.phase = Phase::Retrying;
        Step::CallModel { index }
    }

    #[inline]
    fn limit_hit(&self) -> Option<StopReason> {
        let l = &self.limits;
        if l.max_turns.is_some_and(|n| self.model_calls >= n) {
            Some(StopReason::LimitTurns)
        } else if l
            .max_total_tokens
            .is_some_and(|n| self.usage.total_tokens >= n)
        {
            Some(StopReason::LimitTotalTokens)
        } else if l
            .max_output_tokens
            .is_some_and(|n| self.usage.output_tokens >= n)
        {
            Some(StopReason::LimitOutputTokens)
        } else {
            None
        }
    }

    /// What a verdict on a model call means.
    #[inline]
    fn on_verdict(&mut self, verdict: ModelCallVerdict) -> Step {
        // The model answered: the history fits again, a later overflow gets its own retry.
        if !matches!(
            verdict,
            ModelCallVerdict::Failed(_) | ModelCallVerdict::Retry { error: Some(_), .. }
        ) {
            self.overflow_reduced = false;
        }
        let can_retry = self.hook_retries < self.max_hook_retries;
        let mut handler = None;
        let (reason, then) = match verdict {
            ModelCallVerdict::Retry {
                guidance,
                error: Some(error),
            } if can_retry => {
                self.hook_retries += 1;
                (error.to_string(), AfterDiscard::Retry(guidance))
            }
            ModelCallVerdict::Retry {
                error: Some(error), ..
            }
            | ModelCallVerdict::Failed(error) => (error.to_string(), AfterDiscard::Recover(error)),
            ModelCallVerdict::Withhold { text } => {
                self.error_attempts = 0;
                (text.clone(), AfterDiscard::EndTurn(text, None))
            }
            ModelCallVerdict::Retry {
                guidance,
                error: None,
            } => {
                self.error_attempts = 0;
                if can_retry {
                    self.hook_retries += 1;
                    (
                        "retry requested by a hook".to_owned(),
                        AfterDiscard::Retry(guidance),
                    )
                } else {
                    let text = retry_limit_text(self.max_hook_retries);
                    let record = Box::new(retry_limit_record(
                        EventKind::AfterModelCall,
                        self.max_hook_retries,
                    ));
                    handler = Some(RETRY_LIMIT);
                    (text.clone(), AfterDiscard::EndTurn(text, Some(record)))
                }
            }
            ModelCallVerdict::Hold {
                response,
                interrupts,
                model_call_index,
            } => {
                self.error_attempts = 0;
                return Step::Finish(Outcome::Held {
                    response: Box::new(response),
                    interrupts,
                    model_call_index,
                });
            }
            ModelCallVerdict::Accept {
                mut response,
                edited,
            } => {
                self.error_attempts = 0;
                // A rewritten response that lost its tool uses ends the turn.
                if edited
                    && !response.message.has_tool_use()
                    && response.stop_reason == StopReason::ToolUse
                {
                    response.stop_reason = StopReason::EndTurn;
                }
                return Step::Accept { response, edited };
            }
        };
        self.phase = Phase::Discarded;
        self.after_discard = Some(Box::new(then));
        Step::Discard { reason, handler }
    }

    /// A refused typed answer: sent back with its errors while the budget lasts, else the run
    /// fails with them — never a placeholder answer.
    fn on_output_refused(&mut self, errors: Vec<String>, raw: String, guidance: String) -> Step {
        self.error_attempts = 0;
        if self.output_retries >= self.max_output_retries {
            return Step::Finish(Outcome::Failed(
                OutputError::Exhausted {
                    attempts: self.output_retries + 1,
                    errors,
                    raw,
                }
                .into(),
            ));
        }
        self.output_retries += 1;
        self.phase = Phase::Discarded;
        self.after_discard = Some(Box::new(AfterDiscard::Retry(vec![guidance])));
        Step::Discard {
            reason: "the answer does not match the output schema".into(),
            handler: Some(OUTPUT_CHECK),
        }
    }

    fn after_discard(&mut self) -> Step {
        match self.after_discard.take().map(|b| *b) {
            Some(AfterDiscard::Retry(guidance)) => {
                self.phase = Phase::Retrying;
                Step::StoreGuidance(guidance)
            }
            // Reduced and retried once; overflowing again ends the run with the error.
            Some(AfterDiscard::Recover(error))
                if error.is_context_window_overflow() && self.overflow_reduced =>
            {
                Step::Finish(Outcome::Failed(Error::Model(error)))
            }
            Some(AfterDiscard::Recover(error)) if error.is_context_window_overflow() => {
                self.overflow_reduced = true;
                self.phase = Phase::Retrying;
                Step::ReduceContext(error)
            }
            Some(AfterDiscard::Recover(error)) => self.backoff_or_fail(error),
            Some(AfterDiscard::EndTurn(text, record)) => Step::EndTurn { text, record },
            None => Step::Finish(Outcome::Failed(Error::Internal(
                "a discard with nothing to do after it",
            ))),
        }
    }

    /// A failed call the hooks did not retry: back off and call again while the retry strategy
    /// allows, else fail with the error.
    fn backoff_or_fail(&mut self, error: ModelError) -> Step {
        self.error_attempts += 1;
        match self.retry.delay(&error, self.error_attempts) {
            Some(delay) => {
                tracing::warn!(
                    %error,
                    ?delay,
                    attempt = self.error_attempts,
                    "model call failed; retrying"
                );
                self.phase = Phase::Retrying;
                Step::Backoff(delay)
            }
            None => Step::Finish(Outcome::Failed(Error::Model(error))),
        }
    }
}

/// The bookkeeping of one tool phase: which tool uses of the assistant message have results,
/// which interrupts were raised, which tool uses were rewritten.
#[derive(Debug, Default)]
pub(crate) struct ToolPhase {
    /// The stored assistant message whose tool uses run.
    pub(crate) index: usize,
    pub(crate) model_call_index: u32,
    /// A result per tool use, by position (kept when the phase is cut off).
    results: Vec<Option<ToolResult>>,
    /// Results that wait for an answer (an AfterToolCall interrupt): their tools ran and never
    /// run again; AfterToolCall sees them again on resume.
    held: Vec<ToolResult>,
    /// Tool uses a human edited when approving (run as edited; the stored message is rewritten).
    edits: Vec<ToolUse>,
    /// Agents running as tools that paused, by tool use id: each resumes from its checkpoint
    /// when its tool runs again, kept otherwise. (A vector: empty in nearly every phase, and
    /// cheap to drop.)
    children: Vec<(String, Checkpoint)>,
    interrupts: Vec<PendingInterrupt>,
    rewrites: Vec<ToolUse>,
}

/// How a tool phase's bookkeeping ends.
pub(crate) enum PhaseEnd {
    /// Interrupts were raised: the results so far wait with them.
    Interrupted {
        interrupts: Vec<PendingInterrupt>,
        completed: Vec<ToolResult>,
        held: Vec<ToolResult>,
        children: BTreeMap<String, Checkpoint>,
    },
    /// Every tool use has a result: the blocks of the results message, in tool-use order.
    Completed(Vec<ContentBlock>),
}

impl ToolPhase {
    /// A phase over `tool_uses`, some of which may have finished before (a resume), some with
    /// a result held for an answer.
    pub(crate) fn new<'a>(
        index: usize,
        model_call_index: u32,
        tool_uses: impl Iterator<Item = &'a ToolUse>,
        mut completed: Vec<ToolResult>,
        held: Vec<ToolResult>,
    ) -> Self {
        let results = tool_uses
            .map(|u| {
                completed
                    .iter()
                    .position(|r| r.tool_use_id == u.tool_use_id)
                    .map(|p| completed.swap_remove(p))
            })
            .collect();
        Self {
            index,
            model_call_index,
            results,
            held,
            edits: Vec::new(),
            children: Vec::new(),
            interrupts: Vec::new(),
            rewrites: Vec::new(),
        }
    }

    /// The phase, with tool uses a human edited when approving them.
    pub(crate) fn with_edits(mut self, edits: Vec<ToolUse>) -> Self {
        self.edits = edits;
        self
    }

    /// The paused agents running as tools, to resume them from their checkpoints.
    pub(crate) fn with_children(mut self, children: BTreeMap<String, Checkpoint>) -> Self {
        self.children = children.into_iter().collect();
        self
    }

    /// The checkpoint of the agent that paused running as the tool use `tool_use_id`, if any.
    pub(crate) fn take_child(&mut self, tool_use_id: &str) -> Option<Checkpoint> {
        if self.children.is_empty() {
            return None;
        }
        let at = self.children.iter().position(|(id, _)| id == tool_use_id)?;
        Some(self.children.swap_remove(at).1)
    }

    /// Keeps the checkpoint of an agent that paused running as the tool use `tool_use_id`.
    pub(crate) fn keep_child(&mut self, tool_use_id: String, child: Checkpoint) {
        self.children.retain(|(id, _)| *id != tool_use_id);
        self.children.push((tool_use_id, child));
    }

    /// The tool use as a human edited it (to be rewritten in the stored message), if they did;
    /// else the stored one runs.
    pub(crate) fn take_edit(&mut self, stored: &ToolUse) -> Option<ToolUse> {
        let at = self
            .edits
            .iter()
            .position(|e| e.tool_use_id == stored.tool_use_id)?;
        let edited = self.edits.swap_remove(at);
        self.rewrite(edited.clone());
        Some(edited)
    }

    /// The result held for the tool use `tool_use_id`, if any (taken: it goes through
    /// AfterToolCall again instead of the tool running).
    pub(crate) fn take_held(&mut self, tool_use_id: &str) -> Option<ToolResult> {
        let at = self
            .held
            .iter()
            .position(|r| r.tool_use_id == tool_use_id)?;
        Some(self.held.swap_remove(at))
    }

    /// Whether the tool use at `position` still has to run.
    pub(crate) fn is_open(&self, position: usize) -> bool {
        self.results.get(position).is_some_and(Option::is_none)
    }

    /// Records what the tool use at `position` came to. Returns whether a sequential phase
    /// stops here (the tool waits for an answer).
    #[inline]
    pub(crate) fn record(
        &mut self,
        position: usize,
        result: Option<ToolResult>,
        held: Option<ToolResult>,
        interrupts: Vec<PendingInterrupt>,
        rewritten: Option<ToolUse>,
    ) -> bool {
        let stop = result.is_none();
        if let Some(slot) = self.results.get_mut(position) {
            *slot = result;
        }
        self.held.extend(held);
        self.interrupts.extend(interrupts);
        if let Some(rewritten) = rewritten {
            self.rewrite(rewritten);
        }
        stop
    }

    /// Keeps `tool_use` as what its stored tool use becomes. The last rewrite of a tool use
    /// wins: a human's edit is followed by the pass that ran on it, whose transforms (a
    /// redaction) must reach history too.
    fn rewrite(&mut self, tool_use: ToolUse) {
        match self
            .rewrites
            .iter_mut()
            .find(|r| r.tool_use_id == tool_use.tool_use_id)
        {
            Some(earlier) => *earlier = tool_use,
            None => self.rewrites.push(tool_use),
        }
    }

    /// Tool uses rewritten by hooks or transforms, to commit to the stored message.
    pub(crate) fn take_rewrites(&mut self) -> Vec<ToolUse> {
        std::mem::take(&mut self.rewrites)
    }

    /// The results finished so far.
    pub(crate) fn completed(&self) -> Vec<ToolResult> {
        self.results.iter().flatten().cloned().collect()
    }

    /// Ends the phase of the tool uses of `message`. A tool use left without a result and
    /// without an interrupt (a sequential phase cut short) is answered with `missing_text`.
    pub(crate) fn end(self, message: &Message, missing_text: &str) -> PhaseEnd {
        if !self.interrupts.is_empty() {
            return PhaseEnd::Interrupted {
                completed: self.results.into_iter().flatten().collect(),
                held: self.held,
                interrupts: self.interrupts,
                children: self.children.into_iter().collect(),
            };
        }
        PhaseEnd::Completed(
            self.results
                .into_iter()
                .zip(message.tool_uses())
                .map(|(r, u)| {
                    ContentBlock::ToolResult(Box::new(
                        r.unwrap_or_else(|| ToolResult::error(&u.tool_use_id, missing_text)),
                    ))
                })
                .collect(),
        )
    }
}

/// The retry cap of one tool call (AfterToolCall `retry`).
#[derive(Debug)]
pub(crate) struct ToolRetries {
    retries: u32,
    max: u32,
}

impl ToolRetries {
    pub(crate) fn new(max: u32) -> Self {
        Self { retries: 0, max }
    }

    /// A hook asked to run the tool again: `Ok` to run it, or the text of the error result
    /// that answers the tool use instead (the cap is reached).
    pub(crate) fn retry(&mut self) -> Result<(), String> {
        if self.retries < self.max {
            self.retries += 1;
            Ok(())
        } else {
            Err(retry_limit_text(self.max))
        }
    }

    /// The cap.
    pub(crate) fn max(&self) -> u32 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limits: Limits, max_hook_retries: u32) -> Run {
        let retry = RetryStrategy::default()
            .with_initial_delay(Duration::from_millis(10))
            .with_jitter(false)
            .with_max_attempts(3);
        Run::new(limits, max_hook_retries, retry, Resume::No)
    }

    fn text_response(text: &str) -> ModelResponse {
        ModelResponse::new(Message::assistant(text), StopReason::EndTurn)
    }

    fn accept(text: &str) -> StepReport {
        StepReport::ModelCalled(ModelCallVerdict::Accept {
            response: text_response(text),
            edited: false,
        })
    }

    /// A stored response with tool uses.
    fn with_tools() -> StepReport {
        StepReport::Accepted {
            index: 1,
            stop_reason: StopReason::ToolUse,
            has_tool_use: true,
            invalid_inputs: vec![],
        }
    }

    fn tools_done() -> StepReport {
        StepReport::ToolsDone(ToolsEnd::Completed {
            cancel_requested: false,
        })
    }

    fn started(r: &mut Run) {
        assert!(matches!(r.next(StepReport::Start), Step::AdmitInput));
        assert!(matches!(
            r.next(StepReport::Done),
            Step::CallModel { index: 0 }
        ));
    }

    #[test]
    fn a_text_reply_is_accepted_stored_and_ends_the_run() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        assert!(matches!(
            r.next(accept("hi")),
            Step::Accept { edited: false, .. }
        ));
        let step = r.next(StepReport::Accepted {
            index: 1,
            stop_reason: StopReason::EndTurn,
            has_tool_use: false,
            invalid_inputs: vec![],
        });
        assert!(matches!(
            step,
            Step::Finish(Outcome::Stored {
                index: Some(1),
                stop_reason: StopReason::EndTurn
            })
        ));
    }

    #[test]
    fn a_denied_input_ends_the_run_with_its_text_and_calls_no_model() {
        let mut r = run(Limits::default(), 3);
        assert!(matches!(r.next(StepReport::Start), Step::AdmitInput));
        match r.next(StepReport::InputDenied("no".into())) {
            Step::Finish(Outcome::Reply {
                message,
                stop_reason,
            }) => {
                assert_eq!(message, Message::assistant("no"));
                assert_eq!(stop_reason, StopReason::EndTurn);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tool_uses_run_then_injections_drain_then_a_new_turn_starts() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let step = r.next(with_tools());
        assert!(matches!(
            step,
            Step::RunTools {
                index: 1,
                model_call_index: 0,
                ..
            }
        ));
        let step = r.next(tools_done());
        assert!(matches!(step, Step::DrainInjections));
        assert!(matches!(
            r.next(StepReport::Done),
            Step::CallModel { index: 1 }
        ));
    }

    #[test]
    fn interrupts_and_cancel_after_tools_end_the_run() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        r.next(with_tools());
        let step = r.next(StepReport::ToolsDone(ToolsEnd::Interrupted {
            message: Message::assistant("x"),
            interrupts: vec![Interrupt::new("i", "n", "why")],
        }));
        assert!(matches!(step, Step::Finish(Outcome::Interrupted { .. })));

        let mut r = run(Limits::default(), 3);
        started(&mut r);
        r.next(with_tools());
        let step = r.next(StepReport::ToolsDone(ToolsEnd::Completed {
            cancel_requested: true,
        }));
        assert!(matches!(step, Step::Finish(Outcome::CancelledAfterTools)));
    }

    #[test]
    fn a_resume_runs_the_pending_tools_before_any_model_call() {
        let mut r = Run::new(Limits::default(), 3, RetryStrategy::none(), Resume::Tools);
        assert!(matches!(r.next(StepReport::Start), Step::AdmitInput));
        assert!(matches!(r.next(StepReport::Done), Step::Resume));
        let step = r.next(tools_done());
        assert!(matches!(step, Step::DrainInjections));
        assert!(matches!(
            r.next(StepReport::Done),
            Step::CallModel { index: 0 }
        ));
    }

    #[test]
    fn max_turns_counts_every_model_call_and_ends_with_the_last_stored_message() {
        let limits = Limits {
            max_turns: Some(2),
            ..Limits::default()
        };
        let mut r = run(limits, 5);
        started(&mut r);
        let retry = || {
            StepReport::ModelCalled(ModelCallVerdict::Retry {
                guidance: vec![],
                error: None,
            })
        };
        assert!(matches!(r.next(retry()), Step::Discard { .. }));
        assert!(matches!(r.next(StepReport::Done), Step::StoreGuidance(_)));
        assert!(matches!(
            r.next(StepReport::Done),
            Step::CallModel { index: 1 }
        ));
        r.next(retry());
        r.next(StepReport::Done);
        let step = r.next(StepReport::Done);
        assert!(matches!(
            step,
            Step::Finish(Outcome::Stored {
                index: None,
                stop_reason: StopReason::LimitTurns
            })
        ));
    }

    #[test]
    fn token_limits_stop_before_the_next_call() {
        let limits = Limits {
            max_output_tokens: Some(10),
            ..Limits::default()
        };
        let mut r = run(limits, 3);
        started(&mut r);
        r.add_usage(&Usage::new(2, 10));
        r.next(with_tools());
        r.next(tools_done());
        let step = r.next(StepReport::Done);
        assert!(matches!(
            step,
            Step::Finish(Outcome::Stored {
                stop_reason: StopReason::LimitOutputTokens,
                ..
            })
        ));
    }

    #[test]
    fn hook_retries_are_capped_per_turn_with_the_retry_limit_text_and_record() {
        let mut r = run(Limits::default(), 2);
        started(&mut r);
        let retry = || {
            StepReport::ModelCalled(ModelCallVerdict::Retry {
                guidance: vec!["again".into()],
                error: None,
            })
        };
        for i in 1..=2 {
            match r.next(retry()) {
                Step::Discard { reason, .. } => assert_eq!(reason, "retry requested by a hook"),
                other => panic!("{other:?}"),
            }
            assert!(matches!(r.next(StepReport::Done), Step::StoreGuidance(g) if g == ["again"]));
            assert!(matches!(r.next(StepReport::Done), Step::CallModel { index } if index == i));
        }
        // The third request is refused: its guides are overridden, the turn ends.
        let verdict = ModelCallVerdict::Retry {
            guidance: vec!["again".into()],
            error: None,
        };
        let mut decisions = vec![DecisionRecord::new(
            "g",
            EventKind::AfterModelCall,
            DecisionAction::Guide,
            DecisionOutcome::Applied,
        )];
        r.settle_decisions(&verdict, &mut decisions);
        assert_eq!(decisions[0].outcome, DecisionOutcome::Overridden);
        match r.next(StepReport::ModelCalled(verdict)) {
            Step::Discard { reason, .. } => assert_eq!(reason, "DENIED: retry limit (2) reached"),
            other => panic!("{other:?}"),
        }
        match r.next(StepReport::Done) {
            Step::EndTurn { text, record } => {
                assert_eq!(text, "DENIED: retry limit (2) reached");
                let record = record.expect("a retry-limit record");
                assert_eq!(record.handler, "rein:retry-limit");
                assert_eq!(record.action, DecisionAction::Deny);
                // A reason, like any deny record's: `DENIED: ` is the stored text's prefix.
                assert_eq!(record.text.as_deref(), Some("retry limit (2) reached"));
            }
            other => panic!("{other:?}"),
        }
        let step = r.next(StepReport::EndedTurn(Message::assistant("x")));
        assert!(matches!(step, Step::Finish(Outcome::Reply { .. })));
    }

    #[test]
    fn a_new_turn_resets_the_hook_retry_count() {
        let mut r = run(Limits::default(), 1);
        started(&mut r);
        let retry = || {
            StepReport::ModelCalled(ModelCallVerdict::Retry {
                guidance: vec![],
                error: None,
            })
        };
        r.next(retry());
        r.next(StepReport::Done);
        r.next(StepReport::Done);
        r.next(with_tools());
        r.next(tools_done());
        r.next(StepReport::Done);
        // The new turn may retry again.
        assert!(matches!(
            r.next(retry()),
            Step::Discard { reason, .. } if reason == "retry requested by a hook"
        ));
    }

    #[test]
    fn a_withheld_response_is_discarded_and_its_text_ends_the_turn() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let step = r.next(StepReport::ModelCalled(ModelCallVerdict::Withhold {
            text: "DENIED: no".into(),
        }));
        assert!(matches!(step, Step::Discard { reason, .. } if reason == "DENIED: no"));
        assert!(matches!(
            r.next(StepReport::Done),
            Step::EndTurn { text, record: None } if text == "DENIED: no"
        ));
    }

    #[test]
    fn retryable_model_errors_back_off_then_fail_with_the_error() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let failed =
            || StepReport::ModelCalled(ModelCallVerdict::Failed(ModelError::server("boom")));
        for (i, ms) in [(1, 10), (2, 20)] {
            assert!(matches!(r.next(failed()), Step::Discard { .. }));
            assert!(matches!(
                r.next(StepReport::Done),
                Step::Backoff(d) if d == Duration::from_millis(ms)
            ));
            assert!(matches!(r.next(StepReport::Done), Step::CallModel { index } if index == i));
        }
        r.next(failed());
        assert!(matches!(
            r.next(StepReport::Done),
            Step::Finish(Outcome::Failed(Error::Model(_)))
        ));
    }

    #[test]
    fn a_hook_retry_of_a_failed_call_comes_before_the_retry_strategy() {
        let mut r = Run::new(Limits::default(), 1, RetryStrategy::none(), Resume::No);
        started(&mut r);
        let retry = || {
            StepReport::ModelCalled(ModelCallVerdict::Retry {
                guidance: vec!["g".into()],
                error: Some(ModelError::server("boom")),
            })
        };
        assert!(matches!(r.next(retry()), Step::Discard { .. }));
        assert!(matches!(r.next(StepReport::Done), Step::StoreGuidance(_)));
        assert!(matches!(
            r.next(StepReport::Done),
            Step::CallModel { index: 1 }
        ));
        // At the cap the error takes its normal course: no retry strategy, so it fails.
        r.next(retry());
        assert!(matches!(
            r.next(StepReport::Done),
            Step::Finish(Outcome::Failed(Error::Model(_)))
        ));
    }

    #[test]
    fn a_context_overflow_asks_for_a_reduction_and_calls_again_when_it_worked() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let overflow = || ModelError::context_window_overflow("too long");
        r.next(StepReport::ModelCalled(
            ModelCallVerdict::Failed(overflow()),
        ));
        assert!(matches!(r.next(StepReport::Done), Step::ReduceContext(_)));
        // Nothing to reduce: not retryable, so the run fails.
        let step = r.next(StepReport::Reduced {
            reduced: false,
            error: overflow(),
        });
        assert!(matches!(
            step,
            Step::Finish(Outcome::Failed(Error::Model(_)))
        ));
    }

    #[test]
    fn a_context_overflow_is_retried_once() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let overflow = || ModelError::context_window_overflow("too long");
        r.next(StepReport::ModelCalled(
            ModelCallVerdict::Failed(overflow()),
        ));
        assert!(matches!(r.next(StepReport::Done), Step::ReduceContext(_)));
        let step = r.next(StepReport::Reduced {
            reduced: true,
            error: overflow(),
        });
        assert!(matches!(step, Step::CallModel { index: 1 }));
        // The retry overflows again: the run ends with the overflow, no second reduction,
        // even though the manager could reduce more.
        r.next(StepReport::ModelCalled(
            ModelCallVerdict::Failed(overflow()),
        ));
        match r.next(StepReport::Done) {
            Step::Finish(Outcome::Failed(Error::Model(e))) => {
                assert!(e.is_context_window_overflow());
            }
            other => panic!("expected the overflow, got {other:?}"),
        }
    }

    #[test]
    fn an_answer_between_overflows_gives_the_next_overflow_its_own_retry() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let overflow = || ModelError::context_window_overflow("too long");
        r.next(StepReport::ModelCalled(
            ModelCallVerdict::Failed(overflow()),
        ));
        r.next(StepReport::Done);
        r.next(StepReport::Reduced {
            reduced: true,
            error: overflow(),
        });
        // The hooks retry a good answer; the retried call overflows: reduced again.
        r.next(StepReport::ModelCalled(ModelCallVerdict::Retry {
            guidance: vec!["again".into()],
            error: None,
        }));
        r.next(StepReport::Done);
        assert!(matches!(r.next(StepReport::Done), Step::CallModel { .. }));
        r.next(StepReport::ModelCalled(
            ModelCallVerdict::Failed(overflow()),
        ));
        assert!(matches!(r.next(StepReport::Done), Step::ReduceContext(_)));
    }

    #[test]
    fn an_edited_response_without_tool_uses_ends_the_turn() {
        let mut r = run(Limits::default(), 3);
        started(&mut r);
        let response = ModelResponse::new(Message::assistant("rewritten"), StopReason::ToolUse);
        match r.next(StepReport::ModelCalled(ModelCallVerdict::Accept {
            response,
            edited: true,
        })) {
            Step::Accept { response, edited } => {
                assert!(edited);
                assert_eq!(response.stop_reason, StopReason::EndTurn);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tool_retries_are_capped() {
        let mut t = ToolRetries::new(2);
        assert_eq!(t.retry(), Ok(()));
        assert_eq!(t.retry(), Ok(()));
        assert_eq!(t.retry(), Err("DENIED: retry limit (2) reached".into()));
    }

    #[test]
    fn a_tool_phase_keeps_results_of_a_resume_and_answers_what_was_cut_off() {
        let a = ToolUse::new("a", "t", serde_json::json!({}));
        let b = ToolUse::new("b", "t", serde_json::json!({}));
        let c = ToolUse::new("c", "t", serde_json::json!({}));
        let uses = [&a, &b, &c];
        let message = Message::new(
            rein_core::Role::Assistant,
            uses.iter()
                .map(|u| ContentBlock::ToolUse(Box::new((*u).clone())))
                .collect(),
        );
        let done_b = ToolResult::success("b", "B");
        let mut phase = ToolPhase::new(1, 0, uses.into_iter(), vec![done_b.clone()], vec![]);
        assert_eq!(
            (0..3).filter(|i| phase.is_open(*i)).collect::<Vec<_>>(),
            [0, 2]
        );
        assert!(!phase.record(0, Some(ToolResult::success("a", "A")), None, vec![], None));
        match phase.end(&message, "cut") {
            PhaseEnd::Completed(results) => {
                assert_eq!(results[1], ContentBlock::ToolResult(Box::new(done_b)));
                assert_eq!(
                    results[2],
                    ContentBlock::ToolResult(Box::new(ToolResult::error("c", "cut")))
                );
            }
            PhaseEnd::Interrupted { .. } => panic!("no interrupt was raised"),
        }

        let mut phase = ToolPhase::new(1, 0, uses.into_iter(), vec![], vec![]);
        let asked = PendingInterrupt::at(
            rein_core::interrupt::InterruptEvent::BeforeToolCall,
            "b",
            Interrupt::new("i", "n", "why"),
        );
        let stop = phase.record(1, None, None, vec![asked], None);
        assert!(stop);
        phase.record(0, Some(ToolResult::success("a", "A")), None, vec![], None);
        match phase.end(&message, "cut") {
            PhaseEnd::Interrupted {
                interrupts,
                completed,
                held,
                ..
            } => {
                assert!(held.is_empty());
                assert_eq!(interrupts.len(), 1);
                assert_eq!(completed, [ToolResult::success("a", "A")]);
            }
            PhaseEnd::Completed(_) => panic!("an interrupt was raised"),
        }
    }
}
