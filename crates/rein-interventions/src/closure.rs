//! Handlers built from closures, and the owned event views async closures receive.

use std::fmt;
use std::future::Future;

use rein_core::{
    AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
    BeforeToolCallEvent, BoxFuture, InterruptAnswers, Message, ModelRequest, OnError, StopReason,
    ToolResult, ToolUse, Usage,
};

use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, IntoHandlerResult,
};
use crate::handler::{
    EventSet, HandlerError, HandlerFuture, InterventionContext, InterventionHandler, Mode,
};

/// An owned view of a [`BeforeInvocationEvent`], for async closures (which cannot borrow the
/// event across an `.await`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BeforeInvocationView {
    /// The new input.
    pub messages: Vec<Message>,
    /// Whether the invocation resumes from interrupts.
    pub is_resume: bool,
    /// Whether the input was injected mid-run.
    pub is_injected: bool,
}

impl From<&BeforeInvocationEvent> for BeforeInvocationView {
    fn from(ev: &BeforeInvocationEvent) -> Self {
        Self {
            messages: ev.messages.clone(),
            is_resume: ev.is_resume(),
            is_injected: ev.is_injected(),
        }
    }
}

/// An owned view of a [`BeforeModelCallEvent`], for async closures. The request's fields are
/// shared, so it is cheap.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BeforeModelCallView {
    /// What this call would send.
    pub request: ModelRequest,
    /// The index of the model call within the invocation.
    pub model_call_index: u32,
}

impl From<&BeforeModelCallEvent> for BeforeModelCallView {
    fn from(ev: &BeforeModelCallEvent) -> Self {
        Self {
            request: ev.request.clone(),
            model_call_index: ev.model_call_index(),
        }
    }
}

/// An owned view of an [`AfterModelCallEvent`] with a response, for async closures.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AfterModelCallView {
    /// The response message.
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Usage of the call.
    pub usage: Usage,
    /// The index of the model call within the invocation.
    pub model_call_index: u32,
}

impl AfterModelCallView {
    fn from_event(ev: &AfterModelCallEvent) -> Option<Self> {
        let r = ev.response()?;
        Some(Self {
            message: r.message.clone(),
            stop_reason: r.stop_reason,
            usage: r.usage,
            model_call_index: ev.model_call_index(),
        })
    }
}

/// An owned view of a [`BeforeToolCallEvent`], for async closures.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BeforeToolCallView {
    /// The tool use (as earlier handlers of the pass left it).
    pub tool_use: ToolUse,
    /// Whether a tool of that name is registered.
    pub tool_known: bool,
    /// The answers given on resume (shared).
    pub answers: InterruptAnswers,
    /// The index of the model call that asked for the tool.
    pub model_call_index: u32,
}

impl From<&BeforeToolCallEvent> for BeforeToolCallView {
    fn from(ev: &BeforeToolCallEvent) -> Self {
        Self {
            tool_use: ev.tool_use().clone(),
            tool_known: ev.selected_tool.is_some(),
            answers: ev.answers().clone(),
            model_call_index: ev.model_call_index(),
        }
    }
}

/// An owned view of an [`AfterToolCallEvent`], for async closures.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AfterToolCallView {
    /// The tool use that ran.
    pub tool_use: ToolUse,
    /// Its result (as earlier handlers of the pass left it).
    pub result: ToolResult,
    /// The index of the model call that asked for the tool.
    pub model_call_index: u32,
}

impl From<&AfterToolCallEvent> for AfterToolCallView {
    fn from(ev: &AfterToolCallEvent) -> Self {
        Self {
            tool_use: ev.tool_use().clone(),
            result: ev.result.clone(),
            model_call_index: ev.model_call_index(),
        }
    }
}

type SyncFn<E, A> = Box<dyn Fn(&E, &InterventionContext) -> Result<A, HandlerError> + Send + Sync>;
type AsyncFn<V, A> = Box<
    dyn Fn(V, InterventionContext) -> BoxFuture<'static, Result<A, HandlerError>> + Send + Sync,
>;

enum Slot<E, V, A> {
    Empty,
    Sync(SyncFn<E, A>),
    Async {
        view: fn(&E) -> Option<V>,
        f: AsyncFn<V, A>,
    },
}

impl<E, V, A: Default> Slot<E, V, A> {
    fn is_set(&self) -> bool {
        !matches!(self, Self::Empty)
    }

    fn is_async(&self) -> bool {
        matches!(self, Self::Async { .. })
    }

    #[inline]
    fn call<'a>(&'a self, ev: &'a E, cx: &'a InterventionContext) -> HandlerFuture<'a, A> {
        match self {
            Self::Empty => HandlerFuture::ready(Ok(A::default())),
            Self::Sync(f) => HandlerFuture::ready(f(ev, cx)),
            Self::Async { view, f } => match view(ev) {
                Some(v) => HandlerFuture::boxed(f(v, cx.clone())),
                None => HandlerFuture::ready(Ok(A::default())),
            },
        }
    }
}

/// A handler built from closures, for policies too small to deserve a type.
///
/// Sync closures get the event by reference and cost no allocation per call; async closures
/// (`*_async`) get an owned view of the event (`*View`) and the context, because a closure's
/// future cannot borrow the event across an `.await` on stable Rust. The handler subscribes to
/// exactly the events it has closures for.
///
/// ```
/// use rein_interventions::{BeforeToolCallAction, Intervention, OnError, json};
///
/// let guard = Intervention::named("no-prod-writes")
///     .on_error(OnError::Deny)
///     .before_tool_call(|ev, cx| {
///         let env = cx.invocation_state().get("env").and_then(|v| v.as_str());
///         if env == Some("prod") && ev.tool_use().name.starts_with("write") {
///             BeforeToolCallAction::deny("no writes in prod")
///         } else {
///             BeforeToolCallAction::Proceed
///         }
///     })
///     .after_tool_call_async(|view, _cx| async move {
///         // e.g. call a classifier service here
///         let _ = view.result;
///         Ok::<_, rein_interventions::HandlerError>(rein_interventions::AfterToolCallAction::Proceed)
///     });
/// # let _ = json!({});
/// # let _ = guard;
/// ```
pub struct Intervention {
    name: String,
    on_error: OnError,
    mode: Mode,
    before_invocation: Slot<BeforeInvocationEvent, BeforeInvocationView, BeforeInvocationAction>,
    before_model_call: Slot<BeforeModelCallEvent, BeforeModelCallView, BeforeModelCallAction>,
    after_model_call: Slot<AfterModelCallEvent, AfterModelCallView, AfterModelCallAction>,
    before_tool_call: Slot<BeforeToolCallEvent, BeforeToolCallView, BeforeToolCallAction>,
    after_tool_call: Slot<AfterToolCallEvent, AfterToolCallView, AfterToolCallAction>,
}

impl fmt::Debug for Intervention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intervention")
            .field("name", &self.name)
            .field("on_error", &self.on_error)
            .field("mode", &self.mode)
            .field("subscriptions", &self.events())
            .finish()
    }
}

fn some_view<E, V>(ev: &E) -> Option<V>
where
    for<'e> V: From<&'e E>,
{
    Some(V::from(ev))
}

macro_rules! slot_methods {
    ($field:ident, $async_name:ident, $event:ty, $view:ty, $action:ty, $view_fn:expr) => {
        #[doc = concat!("Sets the `", stringify!($field), "` decision: a sync closure given the event and the context.")]
        pub fn $field<F, R>(mut self, f: F) -> Self
        where
            F: Fn(&$event, &InterventionContext) -> R + Send + Sync + 'static,
            R: IntoHandlerResult<$action>,
        {
            self.$field = Slot::Sync(Box::new(move |ev, cx| f(ev, cx).into_handler_result()));
            self
        }

        #[doc = concat!("Sets the `", stringify!($field), "` decision: an async closure given an owned [`", stringify!($view), "`] and the context.")]
        pub fn $async_name<F, Fut, R>(mut self, f: F) -> Self
        where
            F: Fn($view, InterventionContext) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoHandlerResult<$action> + 'static,
        {
            self.$field = Slot::Async {
                view: $view_fn,
                f: Box::new(move |v, cx| {
                    let fut = f(v, cx);
                    Box::pin(async move { fut.await.into_handler_result() })
                }),
            };
            self
        }
    };
}

impl Intervention {
    /// A handler with this (unique) name, `OnError::Throw`, `Mode::Enforce`, and no decisions
    /// yet (it proceeds everywhere and subscribes to nothing).
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            on_error: OnError::Throw,
            mode: Mode::Enforce,
            before_invocation: Slot::Empty,
            before_model_call: Slot::Empty,
            after_model_call: Slot::Empty,
            before_tool_call: Slot::Empty,
            after_tool_call: Slot::Empty,
        }
    }

    /// Sets what the handler's errors do.
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Sets whether its decisions are applied or only recorded.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The events it has closures for.
    pub fn events(&self) -> EventSet {
        let mut set = EventSet::NONE;
        if self.before_invocation.is_set() {
            set = set | EventSet::BEFORE_INVOCATION;
        }
        if self.before_model_call.is_set() {
            set = set | EventSet::BEFORE_MODEL_CALL;
        }
        if self.after_model_call.is_set() {
            set = set | EventSet::AFTER_MODEL_CALL;
        }
        if self.before_tool_call.is_set() {
            set = set | EventSet::BEFORE_TOOL_CALL;
        }
        if self.after_tool_call.is_set() {
            set = set | EventSet::AFTER_TOOL_CALL;
        }
        set
    }

    slot_methods!(
        before_invocation,
        before_invocation_async,
        BeforeInvocationEvent,
        BeforeInvocationView,
        BeforeInvocationAction,
        some_view::<BeforeInvocationEvent, BeforeInvocationView>
    );
    slot_methods!(
        before_model_call,
        before_model_call_async,
        BeforeModelCallEvent,
        BeforeModelCallView,
        BeforeModelCallAction,
        some_view::<BeforeModelCallEvent, BeforeModelCallView>
    );
    slot_methods!(
        after_model_call,
        after_model_call_async,
        AfterModelCallEvent,
        AfterModelCallView,
        AfterModelCallAction,
        AfterModelCallView::from_event
    );
    slot_methods!(
        before_tool_call,
        before_tool_call_async,
        BeforeToolCallEvent,
        BeforeToolCallView,
        BeforeToolCallAction,
        some_view::<BeforeToolCallEvent, BeforeToolCallView>
    );
    slot_methods!(
        after_tool_call,
        after_tool_call_async,
        AfterToolCallEvent,
        AfterToolCallView,
        AfterToolCallAction,
        some_view::<AfterToolCallEvent, AfterToolCallView>
    );
}

impl InterventionHandler for Intervention {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_error(&self) -> OnError {
        self.on_error
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn subscriptions(&self) -> EventSet {
        self.events()
    }

    fn __completes_immediately(&self, set: EventSet) -> bool {
        let sync = |on: EventSet, is_async: bool| !set.contains(on) || !is_async;
        sync(
            EventSet::BEFORE_INVOCATION,
            self.before_invocation.is_async(),
        ) && sync(
            EventSet::BEFORE_MODEL_CALL,
            self.before_model_call.is_async(),
        ) && sync(EventSet::AFTER_MODEL_CALL, self.after_model_call.is_async())
            && sync(EventSet::BEFORE_TOOL_CALL, self.before_tool_call.is_async())
            && sync(EventSet::AFTER_TOOL_CALL, self.after_tool_call.is_async())
    }

    async fn before_invocation(
        &self,
        event: &BeforeInvocationEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeInvocationAction, HandlerError> {
        self.before_invocation.call(event, cx).await
    }

    async fn before_model_call(
        &self,
        event: &BeforeModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeModelCallAction, HandlerError> {
        self.before_model_call.call(event, cx).await
    }

    async fn after_model_call(
        &self,
        event: &AfterModelCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterModelCallAction, HandlerError> {
        self.after_model_call.call(event, cx).await
    }

    async fn before_tool_call(
        &self,
        event: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        self.before_tool_call.call(event, cx).await
    }

    async fn after_tool_call(
        &self,
        event: &AfterToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<AfterToolCallAction, HandlerError> {
        self.after_tool_call.call(event, cx).await
    }

    fn __dispatch_before_invocation<'a>(
        &'a self,
        event: &'a BeforeInvocationEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeInvocationAction> {
        self.before_invocation.call(event, cx)
    }

    fn __dispatch_before_model_call<'a>(
        &'a self,
        event: &'a BeforeModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeModelCallAction> {
        self.before_model_call.call(event, cx)
    }

    fn __dispatch_after_model_call<'a>(
        &'a self,
        event: &'a AfterModelCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterModelCallAction> {
        self.after_model_call.call(event, cx)
    }

    fn __dispatch_before_tool_call<'a>(
        &'a self,
        event: &'a BeforeToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, BeforeToolCallAction> {
        self.before_tool_call.call(event, cx)
    }

    fn __dispatch_after_tool_call<'a>(
        &'a self,
        event: &'a AfterToolCallEvent,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, AfterToolCallAction> {
        self.after_tool_call.call(event, cx)
    }
}
