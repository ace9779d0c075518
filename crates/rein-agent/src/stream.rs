//! Streaming: the [`AgentEvent`]s of an invocation, delivered as the caller polls.
//!
//! There is no background task: the invocation's future lives inside the stream and runs when
//! the caller polls, so a delta reaches the caller without a thread or task hop.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::task::AtomicWaker;
use rein_core::{
    Error, Message, ToolResult, ToolUse,
    audit::DecisionRecord,
    id::{InjectionId, MessageId},
    interrupt::Interrupt,
    result::AgentResult,
};

use crate::structured::PartialOutput;

/// One event of a streamed invocation.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AgentEvent {
    /// A model call starts.
    ModelCallStarted {
        /// Its index within the invocation.
        model_call_index: u32,
    },
    /// Text from the model.
    TextDelta(String),
    /// A fragment of a tool use's input JSON.
    ToolInputDelta {
        /// The tool use.
        tool_use_id: String,
        /// The fragment.
        delta: String,
    },
    /// Reasoning text from the model.
    ReasoningDelta(String),
    /// The typed answer parsed so far from the streaming response (typed agents only, SPEC
    /// §13): unfinished strings, arrays and objects closed where they stop. Unchecked — the
    /// answer may still be refused; only [`AgentEvent::Output`] is the answer.
    OutputPartial {
        /// The output attempt it belongs to: 1 for the first answer, 2 for the first retry
        /// after a refusal, and so on.
        attempt: u32,
        /// The value so far.
        value: serde_json::Value,
    },
    /// The typed answer, checked against the schema and the type and accepted by the
    /// interventions: the value of [`AgentResult::output`], sent just before
    /// [`AgentEvent::Finished`].
    Output {
        /// The answer.
        value: serde_json::Value,
    },
    /// The response streamed so far is withdrawn (retried, withheld or failed): a UI should
    /// retract what it showed. Not sent when `hold_deltas_until_verdict` held the deltas back:
    /// nothing was shown.
    ResponseDiscarded {
        /// Why.
        reason: String,
        /// The handler (or `rein:retry-limit`) whose decision withdrew it; `None` for a failed
        /// call, a cancel, or a plain hook.
        handler: Option<String>,
    },
    /// The response streamed so far was rewritten before it was stored; this is what counts.
    ResponseReplaced {
        /// The stored message.
        message: Message,
    },
    /// A message was stored in history.
    MessageAdded {
        /// Its id.
        id: MessageId,
        /// The message.
        message: Message,
    },
    /// A stored message was rewritten: text joined to it (guidance, an injected message, tool
    /// results after a user message) or a tool use rewritten by a hook or a transform.
    MessageUpdated {
        /// Its id (as in the `MessageAdded` that announced it).
        id: MessageId,
        /// The message as it now is.
        message: Message,
    },
    /// The conversation manager summarized older messages after the invocation (SPEC §6.1),
    /// or, when the summary could not be written, trimmed them.
    ContextSummarized {
        /// How many leading messages the summary stands for (or were trimmed).
        message_count: usize,
        /// The estimated input tokens of the history before and after.
        estimated_tokens_before: u64,
        /// See `estimated_tokens_before`.
        estimated_tokens_after: u64,
        /// The summary; `None` when the manager fell back to trimming.
        summary: Option<String>,
        /// Why no summary was written, when none was.
        failure: Option<String>,
    },
    /// A tool is about to run (after BeforeToolCall hooks and interventions let it, and its
    /// input passed validation).
    ToolCallStarted {
        /// The tool use.
        tool_use: ToolUse,
    },
    /// A running tool reported how far it has come
    /// ([`ToolContext::report_progress`](rein_core::tool::ToolContext::report_progress); an
    /// MCP server's `notifications/progress` for the call). Sent between the tool use's
    /// `ToolCallStarted` and its `ToolResult`, never after. Coalesced: while a report of the
    /// same tool use waits unread in the stream, a newer one replaces it, so a tool reporting
    /// faster than the stream is read does not grow memory.
    ToolProgress {
        /// The tool use.
        tool_use_id: String,
        /// The tool's name.
        name: String,
        /// Done so far, in the tool's own unit.
        progress: f64,
        /// The whole, when known.
        total: Option<f64>,
        /// What the tool is doing now, for a human.
        message: Option<String>,
    },
    /// A tool call finished (after AfterToolCall hooks).
    ToolResult(ToolResult),
    /// An intervention decision (see the decision audit).
    Decision(DecisionRecord),
    /// An interrupt was raised.
    Interrupt(Interrupt),
    /// An injected message was admitted and added to the conversation.
    InjectionConsumed {
        /// Its id.
        id: InjectionId,
        /// The message as delivered (after transforms).
        message: Message,
    },
    /// An injected message waits for a human's answer (a `Confirm` at `before_invocation`):
    /// parked while the run goes on; answer through
    /// [`TurnInterceptor::answer`](crate::TurnInterceptor::answer).
    InjectionAwaitingApproval {
        /// Its id.
        id: InjectionId,
        /// What is asked.
        interrupts: Vec<Interrupt>,
    },
    /// An injected message was rejected.
    InjectionRejected {
        /// Its id.
        id: InjectionId,
        /// Why: `stale`, `run ended`, or the deny / guidance text.
        reason: String,
    },
    /// Control passed from one agent to another (a handoff, SPEC §9.2).
    Handoff {
        /// The agent that had control.
        from: String,
        /// The agent that has it now.
        to: String,
    },
    /// An event of an agent running as a tool of this one ([`AgentTool`](crate::AgentTool)),
    /// with the path of agents it came from (`child`, `child/grandchild`).
    SubAgent {
        /// The path of the agent it came from.
        agent: String,
        /// Its event.
        event: Box<AgentEvent>,
    },
    /// The invocation finished; always the last item.
    Finished(AgentResult),
}

#[derive(Default)]
struct Queue {
    items: VecDeque<AgentEvent>,
    /// The typed answer streaming (a typed agent's stream only): kept here, behind the
    /// queue's lock, so the sink (carried by every invocation's future) does not grow.
    partial: Option<PartialOutput>,
}

/// The events waiting for the caller, and who to wake when a tool's progress arrives from
/// another task (the loop's own events are read when the run's future yields; a progress
/// report comes while it waits on the tool).
#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    reader: AtomicWaker,
}

/// Where the loop writes events. Disabled for `invoke`, so nothing is built or queued there.
#[derive(Clone, Default)]
pub(crate) struct Sink {
    queue: Option<Arc<Shared>>,
    hold: Option<Arc<Mutex<Vec<AgentEvent>>>>,
}

impl Sink {
    pub(crate) fn disabled() -> Self {
        Self::default()
    }

    fn enabled(hold_deltas: bool, partial: Option<PartialOutput>) -> Self {
        Self {
            queue: Some(Arc::new(Shared {
                queue: Mutex::new(Queue {
                    items: VecDeque::new(),
                    partial,
                }),
                reader: AtomicWaker::new(),
            })),
            hold: hold_deltas.then(Arc::default),
        }
    }

    fn queue(&self) -> Option<std::sync::MutexGuard<'_, Queue>> {
        self.queue
            .as_ref()
            .map(|q| q.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A model call starts; its answer, if it is the typed answer, is output attempt
    /// `attempt`.
    pub(crate) fn model_call_started(&self, model_call_index: u32, attempt: u32) {
        if let Some(mut q) = self.queue() {
            if let Some(p) = &mut q.partial {
                p.start(attempt);
            }
            q.items
                .push_back(AgentEvent::ModelCallStarted { model_call_index });
        }
    }

    /// A tool use starts streaming its input.
    pub(crate) fn tool_started(&self, name: &str) {
        if let Some(p) = self.queue().as_mut().and_then(|q| q.partial.as_mut()) {
            p.tool_started(name);
        }
    }

    #[inline]
    pub(crate) fn is_enabled(&self) -> bool {
        self.queue.is_some()
    }

    /// Queues the event `make` builds; for `invoke` (no stream) nothing is built.
    #[inline]
    pub(crate) fn emit(&self, make: impl FnOnce() -> AgentEvent) {
        if self.is_enabled() {
            self.push(make());
        }
    }

    /// Queues an event.
    pub(crate) fn push(&self, event: AgentEvent) {
        if let Some(mut q) = self.queue() {
            q.items.push_back(event);
        }
    }

    /// Queues a tool's progress report (an [`AgentEvent::ToolProgress`], maybe inside
    /// `SubAgent`s), from any task, unless `open` says its tool no longer runs (read under the
    /// queue's lock, so a report never follows the tool's result). A report of the same tool
    /// use still unread is replaced in place: a tool reporting faster than the caller reads
    /// keeps one event per tool use in the queue, the newest. The reader is woken.
    pub(crate) fn progress(&self, open: Option<&AtomicBool>, event: AgentEvent) {
        let Some(shared) = &self.queue else {
            return;
        };
        {
            let mut q = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if open.is_some_and(|o| !o.load(Ordering::Acquire)) {
                return;
            }
            match q.items.iter_mut().rev().find(|e| same_progress(e, &event)) {
                Some(unread) => *unread = event,
                None => q.items.push_back(event),
            }
        }
        shared.reader.wake();
    }

    /// Closes a tool use's progress (`open` of [`progress`](Self::progress)): no report of
    /// it is queued from now on.
    pub(crate) fn close_progress(&self, open: &AtomicBool) {
        // Under the queue's lock: a report being queued now lands before the close.
        let _queue = self.queue();
        open.store(false, Ordering::Release);
    }

    /// Whether `event` is a progress report (maybe a sub-agent's).
    pub(crate) fn is_progress(event: &AgentEvent) -> bool {
        match event {
            AgentEvent::ToolProgress { .. } => true,
            AgentEvent::SubAgent { event, .. } => Self::is_progress(event),
            _ => false,
        }
    }

    /// Queues a model delta, or holds it until the verdict when the agent is set to.
    pub(crate) fn delta(&self, event: AgentEvent) {
        if let Some(h) = &self.hold {
            let partial = self.partial(|p| p.feed_event(&event));
            let mut h = h.lock().unwrap_or_else(PoisonError::into_inner);
            h.push(event);
            h.extend(partial);
            return;
        }
        // One lock for the delta and its partial: a stream without an output type pays
        // nothing more than before.
        if let Some(mut q) = self.queue() {
            let partial = q.partial.as_mut().and_then(|p| p.feed_event(&event));
            q.items.push_back(event);
            if let Some((attempt, value)) = partial {
                q.items
                    .push_back(AgentEvent::OutputPartial { attempt, value });
            }
        }
    }

    /// A content block of the response ended: the typed answer's last partial, if the text
    /// grew since it was last parsed.
    pub(crate) fn block_ended(&self) {
        if let Some(p) = self.partial(PartialOutput::flush) {
            self.held_or_pushed(p);
        }
    }

    fn held_or_pushed(&self, event: AgentEvent) {
        match &self.hold {
            Some(h) => h.lock().unwrap_or_else(PoisonError::into_inner).push(event),
            None => self.push(event),
        }
    }

    /// The typed answer's partial after `step`, if it changed.
    fn partial(
        &self,
        step: impl FnOnce(&mut PartialOutput) -> Option<(u32, serde_json::Value)>,
    ) -> Option<AgentEvent> {
        let mut q = self.queue()?;
        let (attempt, value) = step(q.partial.as_mut()?)?;
        Some(AgentEvent::OutputPartial { attempt, value })
    }

    /// The verdict on the response: release held deltas, or drop them. Returns whether the
    /// caller may have seen the response's deltas (they were not held back).
    pub(crate) fn verdict(&self, accepted: bool) -> bool {
        let Some(h) = &self.hold else {
            return true;
        };
        let held = std::mem::take(&mut *h.lock().unwrap_or_else(PoisonError::into_inner));
        if accepted {
            for e in held {
                self.push(e);
            }
        }
        false
    }

    /// Withdraws the response streamed so far: held deltas are dropped; shown ones are
    /// retracted with `ResponseDiscarded`.
    pub(crate) fn discard(&self, reason: String, handler: Option<String>) {
        if self.verdict(false) {
            self.emit(|| AgentEvent::ResponseDiscarded { reason, handler });
        }
    }

    fn pop(&self) -> Option<AgentEvent> {
        self.queue()?.items.pop_front()
    }

    fn has_items(&self) -> bool {
        self.queue().is_some_and(|q| !q.items.is_empty())
    }

    /// The caller waits for events: a progress report from another task wakes `waker`.
    fn park(&self, waker: &std::task::Waker) {
        if let Some(shared) = &self.queue {
            shared.reader.register(waker);
        }
    }

    /// Lets the caller take what was queued before the loop goes on (streaming only).
    pub(crate) async fn flush(&self) {
        if self.is_enabled() && self.has_items() {
            YieldOnce(false).await;
        }
    }
}

/// Whether `a` and `b` are progress reports of the same tool use of the same agent.
fn same_progress(a: &AgentEvent, b: &AgentEvent) -> bool {
    match (a, b) {
        (
            AgentEvent::ToolProgress { tool_use_id: x, .. },
            AgentEvent::ToolProgress { tool_use_id: y, .. },
        ) => x == y,
        (
            AgentEvent::SubAgent { agent: x, event: e },
            AgentEvent::SubAgent { agent: y, event: f },
        ) => x == y && same_progress(e, f),
        _ => false,
    }
}

/// Returns `Pending` once (waking itself, so it is safe inside any combinator).
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<AgentResult, Error>> + Send + 'a>>;

/// The stream returned by [`Agent::stream`](crate::Agent::stream): `AgentEvent`s, ending with
/// [`AgentEvent::Finished`] or an error.
pub struct AgentStream<'a> {
    run: Option<RunFuture<'a>>,
    sink: Sink,
    finished: Option<Result<AgentResult, Error>>,
}

impl<'a> AgentStream<'a> {
    pub(crate) fn new<F>(
        hold_deltas: bool,
        partial: Option<PartialOutput>,
        make: impl FnOnce(Sink) -> F,
    ) -> Self
    where
        F: Future<Output = Result<AgentResult, Error>> + Send + 'a,
    {
        let sink = Sink::enabled(hold_deltas, partial);
        let run = Box::pin(make(sink.clone()));
        Self {
            run: Some(run),
            sink,
            finished: None,
        }
    }
}

impl AgentStream<'_> {
    /// The next event, without `futures::StreamExt` (the stream implements `Stream` too).
    ///
    /// ```
    /// # use rein_agent::{Agent, AgentEvent};
    /// # use rein_models::ScriptedModel;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_core::Error> {
    /// let mut agent = Agent::builder().model(ScriptedModel::builder().text("Hi!").build()).build()?;
    /// let mut events = agent.stream("Hello");
    /// while let Some(event) = events.next().await {
    ///     if let AgentEvent::Finished(result) = event? {
    ///         assert_eq!(result.text(), "Hi!");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Option<Result<AgentEvent, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for AgentStream<'_> {
    type Item = Result<AgentEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(e) = self.sink.pop() {
            return Poll::Ready(Some(Ok(e)));
        }
        if let Some(run) = self.run.as_mut() {
            match run.as_mut().poll(cx) {
                Poll::Ready(result) => {
                    self.run = None;
                    self.finished = Some(result);
                }
                Poll::Pending => {
                    // The loop queued events before yielding (the common case): no need to
                    // register for a wake-up (an atomic exchange or two per event).
                    if let Some(e) = self.sink.pop() {
                        return Poll::Ready(Some(Ok(e)));
                    }
                    // Waiting on the model or a tool: registered before the last look, so a
                    // progress report queued meanwhile from another task is not missed.
                    self.sink.park(cx.waker());
                    return match self.sink.pop() {
                        Some(e) => Poll::Ready(Some(Ok(e))),
                        None => Poll::Pending,
                    };
                }
            }
        }
        if let Some(e) = self.sink.pop() {
            return Poll::Ready(Some(Ok(e)));
        }
        match self.finished.take() {
            Some(Ok(r)) => Poll::Ready(Some(Ok(AgentEvent::Finished(r)))),
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => Poll::Ready(None),
        }
    }
}
