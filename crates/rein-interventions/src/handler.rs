//! The handler trait, and what handlers are given.

use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use rein_core::{
    audit::OnError,
    event::{
        AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent,
        BeforeModelCallEvent, BeforeToolCallEvent, InvocationContext, ModelOutputEvent,
    },
    id::InvocationId,
    state::{AgentState, InvocationState, RunState},
};

use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, ModelOutputAction,
};
use crate::error::HandlerError;
use crate::list::for_each_intervention_event;
use crate::set::EventSet;

/// Whether a handler's decisions take effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Decisions are applied (the default).
    #[default]
    Enforce,
    /// Decisions are evaluated and recorded in the audit as `shadowed`, never applied, and the
    /// handler's errors never fail the invocation: for rolling out a new policy safely.
    Shadow,
}

/// What a handler is given besides the event: the invocation it runs in. Built once per
/// dispatch and shared by all handlers of that dispatch; cloning is cheap.
#[derive(Debug)]
#[non_exhaustive]
pub struct InterventionContext {
    invocation_id: InvocationId,
    invocation_state: InvocationState,
    run_state: RunState,
    agent_state: AgentState,
    /// Set by the pass when it re-checks a pause a human answered (see `recheck`).
    recheck: Option<Arc<Recheck>>,
    /// What the running handler attached to its decision (see `record_detail`); taken by the
    /// pass after each handler. Inline, so a pass that records nothing allocates nothing.
    detail: Mutex<Option<Box<Value>>>,
}

/// A pass that re-checks a pause a human answered: on resume the paused pass runs again, every
/// handler of it (not only the one that asked), and the `Confirm` that asked finds its answer.
/// See [`InterventionContext::recheck`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Recheck {
    /// The answers the resume carries for this event's confirms, in the handlers' order.
    pub answers: Vec<RecheckAnswer>,
}

/// One answer a [`Recheck`] carries.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecheckAnswer {
    /// The handler whose `Confirm` was answered.
    pub handler: String,
    /// The answer as given (`"yes"`, `true`, an `Approval`'s JSON...). The `Confirm` applies it
    /// only while what it asked about is unchanged (its fingerprint), and judges it with its
    /// `evaluate`.
    pub response: Value,
}

impl Recheck {
    /// The answer given to `handler`'s `Confirm`, if it was answered.
    pub fn answer_of(&self, handler: &str) -> Option<&Value> {
        self.answers
            .iter()
            .find(|a| a.handler == handler)
            .map(|a| &a.response)
    }
}

impl Clone for InterventionContext {
    /// A clone shares the states; its detail slot is its own (and empty).
    fn clone(&self) -> Self {
        Self {
            invocation_id: self.invocation_id,
            invocation_state: self.invocation_state.clone(),
            run_state: self.run_state.clone(),
            agent_state: self.agent_state.clone(),
            recheck: self.recheck.clone(),
            detail: Mutex::new(None),
        }
    }
}

impl InterventionContext {
    /// A context for this invocation, with a run state of its own.
    pub fn new(invocation_id: InvocationId, invocation_state: InvocationState) -> Self {
        Self {
            invocation_id,
            invocation_state,
            run_state: RunState::new(),
            agent_state: AgentState::new(),
            recheck: None,
            detail: Mutex::new(None),
        }
    }

    /// The same context in the run whose state is `run_state`.
    pub fn with_run_state(mut self, run_state: RunState) -> Self {
        self.run_state = run_state;
        self
    }

    /// The id of the invocation (a resume is a new invocation).
    pub fn invocation_id(&self) -> InvocationId {
        self.invocation_id
    }

    /// The caller's invocation state (read-only).
    pub fn invocation_state(&self) -> &InvocationState {
        &self.invocation_state
    }

    /// Storage for this run, shared by the agent's hooks and handlers: it lasts from the prompt
    /// until the run ends without pending interrupts, and survives a resume in another process
    /// (it is persisted with the pending interrupts). Prefix keys with the handler's name.
    ///
    /// ```
    /// use rein_interventions::{
    ///     BeforeToolCallAction, BeforeToolCallEvent, HandlerError, InterventionContext,
    /// };
    ///
    /// // At most three calls of `search` per run, approvals and resumes included. Counted by
    /// // tool-use id: the pass re-checking an approved call is not a new call.
    /// fn budget(
    ///     event: &BeforeToolCallEvent,
    ///     cx: &InterventionContext,
    /// ) -> Result<BeforeToolCallAction, HandlerError> {
    ///     if event.tool_use().name != "search" {
    ///         return Ok(BeforeToolCallAction::Proceed);
    ///     }
    ///     let calls = cx
    ///         .run_state()
    ///         .count_once("budget:search", &event.tool_use().tool_use_id)?;
    ///     Ok(if calls > 3 {
    ///         BeforeToolCallAction::deny("search budget spent")
    ///     } else {
    ///         BeforeToolCallAction::Proceed
    ///     })
    /// }
    /// # let _ = rein_interventions::Intervention::named("budget").before_tool_call(budget);
    /// ```
    pub fn run_state(&self) -> &RunState {
        &self.run_state
    }

    /// `Some` when this pass re-checks a pause a human answered, with what was answered; `None`
    /// on a first pass. On resume the pass that paused runs again — every handler of it, each
    /// seeing the same call — so a handler with side effects or counts must not take it for a
    /// new call: count by tool-use id ([`RunState::count_once`]), and log the answer rather than
    /// the call again.
    ///
    /// ```
    /// use rein_interventions::{BeforeToolCallAction, Intervention};
    ///
    /// let audit = Intervention::named("audit-log").before_tool_call(|ev, cx| {
    ///     match cx.recheck().and_then(|r| r.answer_of("delete-approval")) {
    ///         Some(answer) => println!("{}: answered {answer}", ev.tool_use().tool_use_id),
    ///         None if cx.recheck().is_none() => println!("{} asked", ev.tool_use().name),
    ///         None => {} // re-checked for another handler's answer: logged already
    ///     }
    ///     BeforeToolCallAction::Proceed
    /// });
    /// # let _ = audit;
    /// ```
    pub fn recheck(&self) -> Option<&Recheck> {
        self.recheck.as_deref()
    }

    /// Marks the context as the re-check of an answered pause (the pass does this).
    pub(crate) fn set_recheck(&mut self, recheck: Option<Recheck>) {
        self.recheck = recheck.map(Arc::new);
    }

    /// The same context for the agent whose state is `agent_state`.
    pub fn with_agent_state(mut self, agent_state: AgentState) -> Self {
        self.agent_state = agent_state;
        self
    }

    /// The agent's state: it lives with the agent across invocations and runs and is persisted
    /// by the agent's session store, so it is where a handler remembers something for the rest
    /// of a session (a tool the user trusts, a count per session). Shared with the agent's tools
    /// and the application (`agent.state()`): prefix keys with the handler's name.
    pub fn agent_state(&self) -> &AgentState {
        &self.agent_state
    }

    /// Attaches `detail` to the decision the handler is about to return: it is the audit
    /// record's [`detail`](rein_core::audit::DecisionRecord::detail), and with it even a
    /// `Proceed` is recorded (action `proceed`). For what the audit should say beyond the
    /// action's text — an LLM judge's verdict, reason and token usage. A later call replaces
    /// the detail; only this context's handler call sees it (not a clone of the context).
    ///
    /// ```
    /// use rein_interventions::testing::{self, ToolCall};
    /// use rein_interventions::*;
    ///
    /// let scored = Intervention::named("scorer").before_tool_call(|_, cx| {
    ///     cx.record_detail(json!({"score": 0.2}));
    ///     BeforeToolCallAction::Proceed
    /// });
    /// let out = testing::run([scored], ToolCall::new("search", json!({})).event());
    /// assert_eq!(out.decisions[0].action, DecisionAction::Proceed);
    /// assert_eq!(out.decisions[0].detail.as_deref(), Some(&json!({"score": 0.2})));
    /// ```
    pub fn record_detail(&self, detail: impl Into<Value>) {
        // A poisoned slot only means a handler panicked while setting it: the value is whole.
        *self.detail.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(detail.into()));
    }

    /// Takes the detail the last handler attached (no lock: the pass owns the context).
    pub(crate) fn take_detail(&mut self) -> Option<Box<Value>> {
        self.detail
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl From<&InvocationContext> for InterventionContext {
    fn from(cx: &InvocationContext) -> Self {
        Self {
            invocation_id: cx.invocation_id,
            invocation_state: cx.invocation_state.clone(),
            run_state: cx.run_state.clone(),
            agent_state: cx.agent_state.clone(),
            recheck: None,
            detail: Mutex::new(None),
        }
    }
}

/// An intervention handler: a policy that looks at what the agent is about to do (or just did)
/// and decides, through the action it returns, whether it proceeds, is denied, guided, confirmed
/// by a human, or transformed.
///
/// Each of the six lifecycle methods returns its own action type, which admits only the actions
/// valid on that event (SPEC §3.2), so an invalid pair does not compile. Every method defaults to
/// `Proceed`. Methods are async: implement them with `async fn` (or return any `Send` future).
/// A handler reads the event by shared reference and acts only through what it returns; handlers
/// run concurrently for parallel tool calls, hence `Send + Sync`.
///
/// # Subscriptions
/// Rust cannot tell which methods an implementation overrides, so a handler says so in
/// [`subscriptions`](Self::subscriptions), once, when the registry is built. It defaults to
/// every event but `model_output` (a stream guard holds text back, so it is opt-in): a handler
/// that forgets to narrow it is still called everywhere else (correct, at the cost of one boxed
/// future per event for the default `Proceed`), rather than silently ignored.
/// Narrow it to the methods you implement and the other events cost nothing. Handlers built with
/// [`Intervention`](crate::Intervention) set it exactly.
///
/// ```
/// use rein_interventions::{
///     BeforeToolCallAction, BeforeToolCallEvent, EventSet, HandlerError, InterventionContext,
///     InterventionHandler,
/// };
///
/// struct NoRm;
///
/// impl InterventionHandler for NoRm {
///     fn name(&self) -> &str {
///         "no-rm"
///     }
///     fn subscriptions(&self) -> EventSet {
///         EventSet::BEFORE_TOOL_CALL
///     }
///     async fn before_tool_call(
///         &self,
///         event: &BeforeToolCallEvent,
///         _cx: &InterventionContext,
///     ) -> Result<BeforeToolCallAction, HandlerError> {
///         Ok(if event.tool_use().name == "rm" {
///             BeforeToolCallAction::deny("rm is not allowed")
///         } else {
///             BeforeToolCallAction::Proceed
///         })
///     }
/// }
/// ```
pub trait InterventionHandler: Send + Sync + 'static {
    /// The handler's name, unique per agent (a duplicate is an error when the registry is built).
    fn name(&self) -> &str;

    /// What the handler's errors do (default [`OnError::Throw`]).
    fn on_error(&self) -> OnError {
        OnError::Throw
    }

    /// Whether its decisions are applied or only recorded (default [`Mode::Enforce`]).
    fn mode(&self) -> Mode {
        Mode::Enforce
    }

    /// The events the handler is called on, read once when the registry is built (default:
    /// every event but `model_output`, which guards streamed text and so holds it back: a
    /// stream guard subscribes to it explicitly).
    fn subscriptions(&self) -> EventSet {
        EventSet::DEFAULT
    }

    /// Whether the handler may be awaited concurrently with the parallel handlers next to it,
    /// read once when the registry is built (default `false`).
    ///
    /// For handlers that wait on something slow (a remote policy service, an LLM judge). Each run
    /// of two or more consecutive parallel handlers of an event is awaited concurrently, against
    /// the event as it stands when the run starts, so one member does not see another's
    /// transform; the results are applied in registration order, and the outcome and the audit
    /// are those of running them one after the other (SPEC §3.7). A deny cancels the members
    /// still running; each member after the one that stopped the pass is recorded as `not_run`.
    fn parallel(&self) -> bool {
        false
    }

    /// Before the invocation starts, and for each message injected mid-run
    /// (`event.is_injected()`): may deny, guide or transform the input.
    fn before_invocation(
        &self,
        event: &BeforeInvocationEvent,
        cx: &InterventionContext,
    ) -> impl Future<Output = Result<BeforeInvocationAction, HandlerError>> + Send {
        let _ = (event, cx);
        async { Ok(BeforeInvocationAction::Proceed) }
    }

    /// Before each model call: may deny the call, inject guidance, or transform the request.
    fn before_model_call(
        &self,
        event: &BeforeModelCallEvent,
        cx: &InterventionContext,
    ) -> impl Future<Output = Result<BeforeModelCallAction, HandlerError>> + Send {
        let _ = (event, cx);
        async { Ok(BeforeModelCallAction::Proceed) }
    }

    /// After each successful model call: may guide (inject + retry) or transform the response.
    fn after_model_call(
        &self,
        event: &AfterModelCallEvent,
        cx: &InterventionContext,
    ) -> impl Future<Output = Result<AfterModelCallAction, HandlerError>> + Send {
        let _ = (event, cx);
        async { Ok(AfterModelCallAction::Proceed) }
    }

    /// On the text of a streamed response before the caller sees it, after each text delta and
    /// once more when the text block ends (`event.is_final()`): may deny (the stream stops and
    /// the response is withheld) or transform the pending text. Called only when
    /// [`subscriptions`](Self::subscriptions) names it.
    fn model_output(
        &self,
        event: &ModelOutputEvent,
        cx: &InterventionContext,
    ) -> impl Future<Output = Result<ModelOutputAction, HandlerError>> + Send {
        let _ = (event, cx);
        async { Ok(ModelOutputAction::Proceed) }
    }

    /// Before each tool call: may deny, guide, ask for confirmation, or transform the tool use.
    fn before_tool_call(
        &self,
        event: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> impl Future<Output = Result<BeforeToolCallAction, HandlerError>> + Send {
        let _ = (event, cx);
        async { Ok(BeforeToolCallAction::Proceed) }
    }

    /// After each tool call: may transform the result.
    fn after_tool_call(
        &self,
        event: &AfterToolCallEvent,
        cx: &InterventionContext,
    ) -> impl Future<Output = Result<AfterToolCallAction, HandlerError>> + Send {
        let _ = (event, cx);
        async { Ok(AfterToolCallAction::Proceed) }
    }

    /// Once each invocation has ended — completed, failed, or paused by interrupts
    /// (`event.result()` says which) — before the run's state is cleared: a notification, with
    /// nothing to decide, for a handler that keeps resources of its own per run. Called for
    /// every handler that implements it (its subscriptions do not apply), in registration
    /// order; a panic is logged and ignored. Sync: spawn what must wait.
    fn invocation_ended(&self, event: &AfterInvocationEvent, cx: &InterventionContext) {
        let _ = (event, cx);
    }
}

macro_rules! arc_handler {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {
        /// A shared handler is a handler (so one instance can serve several agents).
        impl<H: InterventionHandler> InterventionHandler for Arc<H> {
            fn name(&self) -> &str {
                H::name(self)
            }
            fn on_error(&self) -> OnError {
                H::on_error(self)
            }
            fn mode(&self) -> Mode {
                H::mode(self)
            }
            fn subscriptions(&self) -> EventSet {
                H::subscriptions(self)
            }
            fn invocation_ended(&self, event: &AfterInvocationEvent, cx: &InterventionContext) {
                H::invocation_ended(self, event, cx)
            }
            fn parallel(&self) -> bool {
                H::parallel(self)
            }
            $(
                fn $method(
                    &self,
                    event: &$crate::$event,
                    cx: &InterventionContext,
                ) -> impl Future<Output = Result<$crate::$action, HandlerError>> + Send {
                    H::$method(self, event, cx)
                }
            )*
        }
    };
}

for_each_intervention_event!(arc_handler);
