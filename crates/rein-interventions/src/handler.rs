//! The handler trait, its type-erased twin, and what handlers are given and may return.

use std::fmt;
use std::future::Future;
use std::ops::BitOr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rein_core::{
    AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
    BeforeToolCallEvent, BoxError, BoxFuture, EventKind, InvocationContext, InvocationId,
    InvocationState, OnError,
};

use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction,
};

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

/// The set of lifecycle events a handler subscribes to, decided once when the registry is built.
///
/// A handler is called only on the events of its set: an event no handler subscribes to gets no
/// bridge callback at all, and a handler outside the set of an event costs nothing there.
///
/// ```
/// use rein_interventions::EventSet;
/// let set = EventSet::BEFORE_TOOL_CALL | EventSet::AFTER_TOOL_CALL;
/// assert!(set.contains(EventSet::BEFORE_TOOL_CALL));
/// assert!(!set.contains(EventSet::BEFORE_MODEL_CALL));
/// assert!(EventSet::ALL.contains(set));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventSet(u8);

impl EventSet {
    /// No event.
    pub const NONE: Self = Self(0);
    /// `before_invocation` (also run for injected input).
    pub const BEFORE_INVOCATION: Self = Self(1);
    /// `before_model_call`.
    pub const BEFORE_MODEL_CALL: Self = Self(1 << 1);
    /// `after_model_call`.
    pub const AFTER_MODEL_CALL: Self = Self(1 << 2);
    /// `before_tool_call`.
    pub const BEFORE_TOOL_CALL: Self = Self(1 << 3);
    /// `after_tool_call`.
    pub const AFTER_TOOL_CALL: Self = Self(1 << 4);
    /// All five intervention events.
    pub const ALL: Self = Self(0b1_1111);

    /// The set holding only `kind` (empty for events handlers are not called on).
    pub const fn of(kind: EventKind) -> Self {
        match kind {
            EventKind::BeforeInvocation => Self::BEFORE_INVOCATION,
            EventKind::BeforeModelCall => Self::BEFORE_MODEL_CALL,
            EventKind::AfterModelCall => Self::AFTER_MODEL_CALL,
            EventKind::BeforeToolCall => Self::BEFORE_TOOL_CALL,
            EventKind::AfterToolCall => Self::AFTER_TOOL_CALL,
            _ => Self::NONE,
        }
    }

    /// The union of both sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every event of `other` is in this set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `kind` is in this set.
    pub const fn contains_kind(self, kind: EventKind) -> bool {
        let one = Self::of(kind);
        one.0 != 0 && self.contains(one)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for EventSet {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl fmt::Debug for EventSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = [
            EventKind::BeforeInvocation,
            EventKind::BeforeModelCall,
            EventKind::AfterModelCall,
            EventKind::BeforeToolCall,
            EventKind::AfterToolCall,
        ];
        f.debug_set()
            .entries(kinds.into_iter().filter(|k| self.contains_kind(*k)))
            .finish()
    }
}

/// What a handler is given besides the event: the invocation it runs in. Built once per
/// dispatch and shared by all handlers of that dispatch; cloning is cheap.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InterventionContext {
    invocation_id: InvocationId,
    invocation_state: InvocationState,
}

impl InterventionContext {
    /// A context for this invocation.
    pub fn new(invocation_id: InvocationId, invocation_state: InvocationState) -> Self {
        Self {
            invocation_id,
            invocation_state,
        }
    }

    /// The id of the invocation (a resume is a new invocation).
    pub fn invocation_id(&self) -> InvocationId {
        self.invocation_id
    }

    /// The caller's invocation state (read-only).
    pub fn invocation_state(&self) -> &InvocationState {
        &self.invocation_state
    }
}

impl From<&InvocationContext> for InterventionContext {
    fn from(cx: &InvocationContext) -> Self {
        Self::new(cx.invocation_id, cx.invocation_state.clone())
    }
}

/// A handler's failure: what its method returned as an error, a failing transform edit or
/// `evaluate`, or a panic. What happens next is the handler's [`OnError`] policy.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it, so `?` works in handler
/// bodies; [`HandlerError::new`] makes one from a message. (Like `anyhow::Error`, it does not
/// implement `std::error::Error` itself, which is what makes that blanket conversion possible.)
pub struct HandlerError {
    message: String,
    source: Option<BoxError>,
}

impl HandlerError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// The message (what `DENIED: Handler threw: <error>` and the audit show).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, when the handler returned one.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    pub(crate) fn from_panic(payload: Box<dyn std::any::Any + Send>) -> Self {
        let text = if let Some(s) = payload.downcast_ref::<&'static str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "unknown panic payload".to_owned()
        };
        Self::new(format!("handler panicked: {text}"))
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self {
            message: error.to_string(),
            source: Some(Box::new(error)),
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

/// The decision of one handler call: ready at once (sync closures, no allocation) or a boxed
/// future. Not part of the public API; it is public only because a hidden trait method names it.
#[doc(hidden)]
pub struct HandlerFuture<'a, A>(HandlerFutureState<'a, A>);

pub(crate) enum HandlerFutureState<'a, A> {
    Ready(Option<Result<A, HandlerError>>),
    Boxed(BoxFuture<'a, Result<A, HandlerError>>),
}

impl<'a, A> HandlerFuture<'a, A> {
    /// A decision that is ready.
    pub(crate) fn ready(result: Result<A, HandlerError>) -> Self {
        Self(HandlerFutureState::Ready(Some(result)))
    }

    /// A decision still to be computed.
    pub fn boxed<F>(future: F) -> Self
    where
        F: Future<Output = Result<A, HandlerError>> + Send + 'a,
    {
        Self(HandlerFutureState::Boxed(Box::pin(future)))
    }

    pub(crate) fn into_state(self) -> HandlerFutureState<'a, A> {
        self.0
    }
}

// Nothing is ever pinned structurally inside (`A` is moved out by value, the boxed future is
// pinned on the heap), so the future may be moved freely.
impl<A> Unpin for HandlerFuture<'_, A> {}

impl<A> Future for HandlerFuture<'_, A> {
    type Output = Result<A, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            HandlerFutureState::Ready(r) => Poll::Ready(
                r.take()
                    .unwrap_or_else(|| Err(HandlerError::new("decision polled after completion"))),
            ),
            HandlerFutureState::Boxed(f) => f.as_mut().poll(cx),
        }
    }
}

impl<A> fmt::Debug for HandlerFuture<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            HandlerFutureState::Ready(_) => "HandlerFuture::Ready",
            HandlerFutureState::Boxed(_) => "HandlerFuture::Boxed",
        })
    }
}

/// An intervention handler: a policy that looks at what the agent is about to do (or just did)
/// and decides, through the action it returns, whether it proceeds, is denied, guided, confirmed
/// by a human, or transformed.
///
/// Each of the five lifecycle methods returns its own action type, which admits only the actions
/// valid on that event (SPEC §3.2), so an invalid pair does not compile. Every method defaults to
/// `Proceed`. Methods are async: implement them with `async fn` (or return any `Send` future).
/// A handler reads the event by shared reference and acts only through what it returns; handlers
/// run concurrently for parallel tool calls, hence `Send + Sync`.
///
/// # Subscriptions
/// Rust cannot tell which methods an implementation overrides, so a handler says so in
/// [`subscriptions`](Self::subscriptions), once, when the registry is built. It defaults to
/// every event: a handler that forgets to narrow it is still called everywhere (correct, at the
/// cost of one boxed future per event for the default `Proceed`), rather than silently ignored.
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

    /// The events the handler is called on, read once when the registry is built (default: all).
    fn subscriptions(&self) -> EventSet {
        EventSet::ALL
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

    #[doc(hidden)]
    fn __dispatch_before_invocation<'a>(
        &'a self,
        event: &'a BeforeInvocationEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeInvocationAction> {
        HandlerFuture::boxed(self.before_invocation(event, cx))
    }

    #[doc(hidden)]
    fn __dispatch_before_model_call<'a>(
        &'a self,
        event: &'a BeforeModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeModelCallAction> {
        HandlerFuture::boxed(self.before_model_call(event, cx))
    }

    #[doc(hidden)]
    fn __dispatch_after_model_call<'a>(
        &'a self,
        event: &'a AfterModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterModelCallAction> {
        HandlerFuture::boxed(self.after_model_call(event, cx))
    }

    #[doc(hidden)]
    fn __dispatch_before_tool_call<'a>(
        &'a self,
        event: &'a BeforeToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeToolCallAction> {
        HandlerFuture::boxed(self.before_tool_call(event, cx))
    }

    #[doc(hidden)]
    fn __dispatch_after_tool_call<'a>(
        &'a self,
        event: &'a AfterToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterToolCallAction> {
        HandlerFuture::boxed(self.after_tool_call(event, cx))
    }

    /// Whether every call on the events of `set` completes without suspending (sync closures):
    /// the registry then runs that event's pass without boxing a future. Not part of the API.
    #[doc(hidden)]
    fn __completes_immediately(&self, set: EventSet) -> bool {
        let _ = set;
        false
    }
}

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
    fn __completes_immediately(&self, set: EventSet) -> bool {
        H::__completes_immediately(self, set)
    }
    async fn before_invocation(
        &self,
        event: &BeforeInvocationEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeInvocationAction, HandlerError> {
        H::__dispatch_before_invocation(self, event, cx).await
    }
    async fn before_model_call(
        &self,
        event: &BeforeModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeModelCallAction, HandlerError> {
        H::__dispatch_before_model_call(self, event, cx).await
    }
    async fn after_model_call(
        &self,
        event: &AfterModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterModelCallAction, HandlerError> {
        H::__dispatch_after_model_call(self, event, cx).await
    }
    async fn before_tool_call(
        &self,
        event: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        H::__dispatch_before_tool_call(self, event, cx).await
    }
    async fn after_tool_call(
        &self,
        event: &AfterToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterToolCallAction, HandlerError> {
        H::__dispatch_after_tool_call(self, event, cx).await
    }
    fn __dispatch_before_invocation<'a>(
        &'a self,
        event: &'a BeforeInvocationEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeInvocationAction> {
        H::__dispatch_before_invocation(self, event, cx)
    }
    fn __dispatch_before_model_call<'a>(
        &'a self,
        event: &'a BeforeModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeModelCallAction> {
        H::__dispatch_before_model_call(self, event, cx)
    }
    fn __dispatch_after_model_call<'a>(
        &'a self,
        event: &'a AfterModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterModelCallAction> {
        H::__dispatch_after_model_call(self, event, cx)
    }
    fn __dispatch_before_tool_call<'a>(
        &'a self,
        event: &'a BeforeToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeToolCallAction> {
        H::__dispatch_before_tool_call(self, event, cx)
    }
    fn __dispatch_after_tool_call<'a>(
        &'a self,
        event: &'a AfterToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterToolCallAction> {
        H::__dispatch_after_tool_call(self, event, cx)
    }
}

/// The object-safe twin of [`InterventionHandler`] that the registry stores.
pub(crate) trait DynHandler: Send + Sync {
    fn name(&self) -> &str;
    fn on_error(&self) -> OnError;
    fn mode(&self) -> Mode;
    fn subscriptions(&self) -> EventSet;
    fn completes_immediately(&self, set: EventSet) -> bool;
    fn before_invocation<'a>(
        &'a self,
        event: &'a BeforeInvocationEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeInvocationAction>;
    fn before_model_call<'a>(
        &'a self,
        event: &'a BeforeModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeModelCallAction>;
    fn after_model_call<'a>(
        &'a self,
        event: &'a AfterModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterModelCallAction>;
    fn before_tool_call<'a>(
        &'a self,
        event: &'a BeforeToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeToolCallAction>;
    fn after_tool_call<'a>(
        &'a self,
        event: &'a AfterToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterToolCallAction>;
}

impl<H: InterventionHandler> DynHandler for H {
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
    fn completes_immediately(&self, set: EventSet) -> bool {
        H::__completes_immediately(self, set)
    }
    fn before_invocation<'a>(
        &'a self,
        event: &'a BeforeInvocationEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeInvocationAction> {
        H::__dispatch_before_invocation(self, event, cx)
    }
    fn before_model_call<'a>(
        &'a self,
        event: &'a BeforeModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeModelCallAction> {
        H::__dispatch_before_model_call(self, event, cx)
    }
    fn after_model_call<'a>(
        &'a self,
        event: &'a AfterModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterModelCallAction> {
        H::__dispatch_after_model_call(self, event, cx)
    }
    fn before_tool_call<'a>(
        &'a self,
        event: &'a BeforeToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeToolCallAction> {
        H::__dispatch_before_tool_call(self, event, cx)
    }
    fn after_tool_call<'a>(
        &'a self,
        event: &'a AfterToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterToolCallAction> {
        H::__dispatch_after_tool_call(self, event, cx)
    }
}

/// A type-erased, shareable handler: what the registry is built from. Any
/// [`InterventionHandler`] (including an [`Intervention`](crate::Intervention)) converts into it.
#[derive(Clone)]
pub struct SharedHandler(pub(crate) Arc<dyn DynHandler>);

impl SharedHandler {
    /// Wraps a handler.
    pub fn new<H: InterventionHandler>(handler: H) -> Self {
        Self(Arc::new(handler))
    }

    /// The handler's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }
}

impl<H: InterventionHandler> From<H> for SharedHandler {
    fn from(handler: H) -> Self {
        Self::new(handler)
    }
}

impl fmt::Debug for SharedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedHandler")
            .field("name", &self.0.name())
            .field("on_error", &self.0.on_error())
            .field("mode", &self.0.mode())
            .field("subscriptions", &self.0.subscriptions())
            .finish()
    }
}
