//! The run: one invocation, a sans-IO state machine ([`machine`]) that decides the loop, and
//! an async driver ([`Driver`]: this module and the files below) that does the IO and the
//! decisions made inside a step from what hooks and tools return (a tool use's verdict and
//! retries, the retry cap's escalation, a resume's way on, the handoff claim).
//!
//! The driver's files, in the order an invocation goes through them:
//! 1. `start.rs` — input checks, the invocation's context, BeforeInvocation, a resume's answers;
//! 2. `model.rs` — BeforeModelCall, the model stream, AfterModelCall, and what a verdict stores;
//! 3. `tools.rs` — the tool phase: BeforeToolCall, the tool, AfterToolCall, per tool use;
//! 4. `inject.rs` — injected messages delivered at the turn boundary;
//! 5. `finish.rs` — how the run ends: history repaired, the conversation manager's summary
//!    (`summary.rs`) and trim, session saved, AfterInvocation.
//!
//! Comments citing a "layout rule N" refer to the rules that keep the invocation's future small,
//! written once in `docs/performance.md` ("Layout rules").
//!
//! Every way a run ends is a [`machine::Outcome`]: the machine finishes with one, an IO error
//! becomes `Outcome::Failed`, a cancel `Outcome::Cancelled`. `finish.rs` turns it into the
//! result.

mod fallback;
mod finish;
mod inject;
mod machine;
mod model;
mod output;
mod start;
mod summary;
mod tools;

use std::collections::BTreeMap;
use std::task::Poll;
use std::time::Instant;

use rein_core::{
    Error,
    audit::DecisionRecord,
    event::InvocationContext,
    interrupt::{Interrupt, InterruptAnswers, InterruptEvent},
    message::InterruptResponse,
    result::{AgentResult, HandoffRecord, InjectionRecord, InvocationMetrics},
    stream::Usage,
};

use crate::agent::{Agent, Input, InputMessages};
use crate::checkpoint::{Pause, PausedRun, PendingHandoff, PendingInterrupt};
use crate::history::Listeners;
use crate::stream::{AgentEvent, Sink};
use machine::{Outcome, Run, Step, StepReport, ToolPhase};

/// What one invocation accumulates besides the machine's decisions.
pub(crate) struct Invocation {
    cx: InvocationContext,
    run: Run,
    metrics: InvocationMetrics,
    decisions: Vec<DecisionRecord>,
    /// The answers of a resume, until the tool cycle they belong to completes.
    answers: InterruptAnswers,
    /// The tool phase under way (kept if the run is cut off in it, to answer its tool uses).
    tool_phase: Option<ToolPhase>,
    /// Whether a model response is streaming (a cancel then withdraws it).
    streaming_response: bool,
    /// The handler whose decision on the last model call would withdraw its response.
    discarded_by: Option<String>,
    run_version: u64,
    injections: Vec<InjectionRecord>,
    /// Usage of agents that ran as tools, by agent path.
    sub_agent_usage: BTreeMap<String, Usage>,
    /// A handoff a transfer tool asked for, carried out at the next turn boundary.
    handoff: Option<PendingHandoff>,
    /// Handoffs carried out, and how many the invocation allows (the setting of the agent in
    /// control when it started, as its limits).
    handoffs: Vec<HandoffRecord>,
    max_handoffs: u32,
    /// Where the run's model and tool calls are recorded (the journal of the agent that
    /// started it: it stays through handoffs).
    journal: Option<crate::journal::SharedJournal>,
    /// The run's `invoke_agent` span (confirm answers and injections are its events).
    span: tracing::Span,
    /// The input's messages and a resume's answers, until the step that takes them (here, not
    /// the driver's arguments: layout rule 3).
    input: InputMessages,
    responses: Vec<InterruptResponse>,
    /// The nonce of this invocation's pause (it pauses at most once), drawn when the first
    /// interrupt is raised: an invocation that does not pause draws none.
    pause_nonce: Option<String>,
}

impl Invocation {
    /// The paused run of this invocation, stopped at `at` on `interrupts`: with the answers
    /// given so far, the invocation state and the run state.
    fn pause(&self, at: Pause, interrupts: Vec<PendingInterrupt>) -> PausedRun {
        let mut paused = PausedRun::new(at, interrupts, self.cx.invocation_state.clone());
        paused.answers = self
            .answers
            .iter()
            .map(|(id, a)| (id.to_owned(), a.clone()))
            .collect();
        paused.run_state = self.cx.run_state.snapshot();
        paused
    }

    /// Gives `interrupts` this pause's nonce (SPEC §4), so a resume names this pause and an
    /// answer to it can never match another, even when the interrupt's id repeats.
    fn stamp(&mut self, interrupts: &mut [PendingInterrupt]) {
        if interrupts.is_empty() {
            return;
        }
        let nonce = self
            .pause_nonce
            .get_or_insert_with(rein_core::id::unguessable);
        for i in interrupts {
            i.interrupt.nonce = Some(nonce.clone());
        }
    }
}

/// The driving side of one invocation: the agent it runs, what the invocation accumulates and
/// the caller's stream. Its methods are the driver's steps (`drive` and one file per stage).
/// Three pointers, as the run's arguments were: a step's future holds `&mut Driver`, one.
pub(crate) struct Driver<'a> {
    agent: &'a mut Agent,
    inv: &'a mut Invocation,
    sink: &'a Sink,
}

impl Driver<'_> {
    /// The interrupts a hold at `event` about `subject` raised, placed there, stamped with the
    /// pause's nonce and streamed.
    fn raise(
        &mut self,
        event: InterruptEvent,
        subject: &str,
        interrupts: Vec<Interrupt>,
    ) -> Vec<PendingInterrupt> {
        let mut pending: Vec<PendingInterrupt> = interrupts
            .into_iter()
            .map(|i| PendingInterrupt::at(event, subject, i))
            .collect();
        self.inv.stamp(&mut pending);
        for p in &pending {
            self.sink
                .emit(|| AgentEvent::Interrupt(p.interrupt.clone()));
        }
        pending
    }

    /// Records decisions in the audit and streams them.
    fn record(&mut self, decisions: Vec<DecisionRecord>) {
        self.inv.record(decisions, self.sink);
    }

    /// Feeds the machine until it finishes, doing each step's IO (layout rule 3; by value, so
    /// its future holds the three pointers, not a pointer to them).
    async fn drive(mut self) -> Outcome {
        let mut fed = StepReport::Start;
        loop {
            let done = match self.inv.run.next(fed) {
                Step::Finish(outcome) => return outcome,
                Step::AdmitInput => {
                    let messages = std::mem::take(&mut self.inv.input);
                    self.admit_input(messages).await
                }
                // Boxed (layout rule 1): a resume's step is the largest state.
                Step::Resume => {
                    let responses = std::mem::take(&mut self.inv.responses);
                    Box::pin(self.resume(responses)).await
                }
                Step::CallModel { index } => self.model_call(index).await,
                Step::Discard { reason, handler } => {
                    let handler = handler.map(str::to_owned).or(self.inv.discarded_by.take());
                    self.sink.discard(reason, handler);
                    Ok(StepReport::Done)
                }
                Step::StoreGuidance(guidance) => self.store_guidance(guidance).await,
                Step::ReduceContext(error) => Ok(self.agent.reduce_context(error)),
                Step::Backoff(delay) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    Ok(StepReport::Done)
                }
                Step::EndTurn { text, record } => self.end_turn(text, record).await,
                Step::Accept { response, edited } => match self.accept_now(response, edited) {
                    Ok(report) => Ok(report),
                    Err(accepting) => self.accept(accepting).await,
                },
                Step::RunTools {
                    index,
                    model_call_index,
                    invalid_inputs,
                } => {
                    self.inv.tool_phase = Some(self.agent.tool_phase_of(
                        index,
                        model_call_index,
                        Vec::new(),
                        Vec::new(),
                    ));
                    self.tool_phase(&invalid_inputs).await
                }
                Step::DrainInjections => self.drain_injections().await,
            };
            fed = match done {
                Ok(fed) => fed,
                Err(error) => return Outcome::Failed(error),
            };
        }
    }
}

impl Invocation {
    /// Records decisions in the audit and streams them.
    fn record(&mut self, decisions: Vec<DecisionRecord>, sink: &Sink) {
        if decisions.is_empty() {
            return;
        }
        crate::telemetry::decisions(&decisions, &self.span, &self.cx.invocation_state);
        if sink.is_enabled() {
            for d in &decisions {
                sink.push(AgentEvent::Decision(d.clone()));
            }
        }
        self.decisions.extend(decisions);
    }
}

impl Agent {
    pub(crate) async fn run(&mut self, input: Input, sink: Sink) -> Result<AgentResult, Error> {
        // A session is restored before the first invocation; input errors are returned before
        // anything fires.
        self.session_begin().await?;
        // Checked and begun in a block (layout rule 3).
        let (mut inv, span) = {
            let input = input;
            self.check_input(&input)?;
            self.begin(input)
        };
        let cancel = self.cancel.begin();
        let started = Instant::now();
        // Finished here, not in a future of its own: the result is written once, into this
        // future's state, instead of moved into another future and out (each move a copy).
        // The outcome and its driver live in this block only, and the result is neither carried
        // nor borrowed across an await (the summary's step takes it and gives it back): a local
        // live or borrowed across two awaits keeps a place of its own in the future (424 B more,
        // measured).
        let managed;
        let mut result = {
            let outcome = {
                // The run's span is the parent of its chat, execute_tool and run_guardrail
                // spans: entered at each poll of the steps (not through `Instrument`, whose move
                // copied the whole run future). A cancel wins over a step that is ready at the
                // same poll.
                let driver = Driver {
                    agent: self,
                    inv: &mut inv,
                    sink: &sink,
                };
                let mut drive = std::pin::pin!(driver.drive());
                std::future::poll_fn(|cx| {
                    if cancel.as_ref().is_some_and(|c| c.poll_cancelled(cx)) {
                        return Poll::Ready(Outcome::Cancelled);
                    }
                    let _entered = span.enter();
                    drive.as_mut().poll(cx)
                })
                .await
            };
            let mut driver = Driver {
                agent: self,
                inv: &mut inv,
                sink: &sink,
            };
            managed = driver.stopped(&outcome, started);
            // Boxed (layout rule 1): only a failed or cancelled run has something to repair.
            let repaired = match outcome {
                Outcome::Failed(_) | Outcome::Cancelled => Box::pin(driver.repair(&outcome)).await,
                _ => Ok(()),
            };
            driver.outcome_result(outcome, repaired)
        };
        // Matched, not `is_ok()`: a borrow would keep the result's place in the future across
        // the awaits below (1 520 B instead of 1 208).
        #[allow(clippy::redundant_pattern_matching)]
        if managed && matches!(result, Ok(_)) {
            let mut driver = Driver {
                agent: self,
                inv: &mut inv,
                sink: &sink,
            };
            // Only the summary's step is boxed (layout rule 1): a run whose manager asks for
            // none allocates nothing here.
            if let Some(request) = driver.summary_request() {
                result = Box::pin(driver.summarized(request, result)).await;
            }
            self.apply_conversation_manager();
        }
        if self.ends_plainly() {
            self.ending(&inv.cx);
            finish::record_end(&span, &result);
            self.ended(&inv.cx);
            return result;
        }
        Box::pin(self.end(&inv.cx, result, span)).await
    }
}

/// The listeners of the message path for this run.
fn listeners<'a>(
    agent_hooks: &'a rein_hooks::HookRegistry,
    inv: &'a Invocation,
    sink: &'a Sink,
) -> Listeners<'a> {
    Listeners {
        hooks: agent_hooks,
        sink,
        cx: &inv.cx,
    }
}
