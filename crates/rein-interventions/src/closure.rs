//! Handlers built from closures.

use std::fmt;
use std::future::Future;

use rein_core::{audit::OnError, event::AfterInvocationEvent, tool::BoxFuture};

use crate::action::IntoHandlerResult;
use crate::decision::PendingDecision;
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::list::for_each_intervention_event;
use crate::set::EventSet;

type SyncFn<E, A> = Box<dyn Fn(&E, &InterventionContext) -> Result<A, HandlerError> + Send + Sync>;
type AsyncFn<E, A> = Box<
    dyn for<'a> Fn(&'a E, &'a InterventionContext) -> BoxFuture<'a, Result<A, HandlerError>>
        + Send
        + Sync,
>;

/// The closure of one event, if any.
pub(crate) enum Slot<E, A> {
    Empty,
    Sync(SyncFn<E, A>),
    Async(AsyncFn<E, A>),
}

impl<E, A: Default> Slot<E, A> {
    fn is_set(&self) -> bool {
        !matches!(self, Self::Empty)
    }

    /// Whether its decision is a future to wait for.
    pub(crate) fn is_async(&self) -> bool {
        matches!(self, Self::Async(_))
    }

    #[inline(always)]
    pub(crate) fn call<'a>(
        &'a self,
        ev: &'a E,
        cx: &'a InterventionContext,
    ) -> PendingDecision<'a, A> {
        match self {
            Self::Empty => PendingDecision::ready(Ok(A::default())),
            Self::Sync(f) => PendingDecision::ready(f(ev, cx)),
            Self::Async(f) => PendingDecision::Boxed(f(ev, cx)),
        }
    }
}

/// Gives `f` the higher-ranked signature of an [`AsyncFn`].
fn async_fn<E, A, F>(f: F) -> AsyncFn<E, A>
where
    F: for<'a> Fn(&'a E, &'a InterventionContext) -> BoxFuture<'a, Result<A, HandlerError>>
        + Send
        + Sync
        + 'static,
{
    Box::new(f)
}

/// A handler built from closures, for policies too small to deserve a type.
///
/// Sync closures get the event and the context by reference and cost no allocation per call.
/// Async closures (`*_async`) get them by reference too, and return a boxed future that may
/// borrow both (`Box::pin(async move { .. })`, as with `HookRegistry::add_async`). The handler
/// subscribes to exactly the events it has closures for.
///
/// ```
/// use rein_interventions::{
///     AfterToolCallAction, AfterToolCallEvent, BeforeToolCallAction, HandlerError,
///     Intervention, InterventionContext, OnError,
/// };
///
/// # async fn classify(_text: &str) -> Result<bool, HandlerError> { Ok(false) }
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
///     .after_tool_call_async(|ev: &AfterToolCallEvent, _cx: &InterventionContext| {
///         Box::pin(async move {
///             // The future borrows the event: no copy of the result is made.
///             let flagged = classify(&ev.result.text()).await?;
///             Ok::<_, HandlerError>(if flagged {
///                 AfterToolCallAction::transform(|r| r.set_text("[withheld]"))
///             } else {
///                 AfterToolCallAction::Proceed
///             })
///         })
///     });
/// # let _ = guard;
/// ```
pub struct Intervention {
    name: String,
    on_error: OnError,
    mode: Mode,
    parallel: bool,
    pub(crate) slots: Slots,
    ended: Option<EndedFn>,
}

/// What an [`Intervention`] does when an invocation ends.
type EndedFn = Box<dyn Fn(&AfterInvocationEvent, &InterventionContext) + Send + Sync>;

impl fmt::Debug for Intervention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intervention")
            .field("name", &self.name)
            .field("on_error", &self.on_error)
            .field("mode", &self.mode)
            .field("parallel", &self.parallel)
            .field("subscriptions", &self.events())
            .finish()
    }
}

impl Intervention {
    /// A handler with this (unique) name, `OnError::Throw`, `Mode::Enforce`, not parallel, and no
    /// decisions yet (it proceeds everywhere and subscribes to nothing).
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            on_error: OnError::Throw,
            mode: Mode::Enforce,
            parallel: false,
            slots: Slots::empty(),
            ended: None,
        }
    }

    /// Sets what to do once each invocation has ended
    /// ([`InterventionHandler::invocation_ended`]).
    pub fn on_invocation_end<F>(mut self, f: F) -> Self
    where
        F: Fn(&AfterInvocationEvent, &InterventionContext) + Send + Sync + 'static,
    {
        self.ended = Some(Box::new(f));
        self
    }

    pub(crate) fn notices_end(&self) -> bool {
        self.ended.is_some()
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

    /// Marks the handler parallel: it is awaited concurrently with the parallel handlers next to
    /// it (see [`InterventionHandler::parallel`], SPEC §3.7). Worth it for async closures only.
    pub fn parallel(mut self) -> Self {
        self.parallel = true;
        self
    }

    /// The events it has closures for.
    pub fn events(&self) -> EventSet {
        self.slots.events()
    }
}

macro_rules! closures {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {
        /// The closures of an [`Intervention`], one slot per event.
        pub(crate) struct Slots {
            $(pub(crate) $method: Slot<$crate::$event, $crate::$action>,)*
        }

        impl Slots {
            fn empty() -> Self {
                Self {
                    $($method: Slot::Empty,)*
                }
            }

            fn events(&self) -> EventSet {
                let mut set = EventSet::NONE;
                $(
                    if self.$method.is_set() {
                        set = set | EventSet::$set;
                    }
                )*
                set
            }
        }

        impl Intervention {
            $(
                #[doc = concat!(
                    "Sets the `", stringify!($method), "` decision: a sync closure given the ",
                    "event and the context."
                )]
                pub fn $method<F, R>(mut self, f: F) -> Self
                where
                    F: Fn(&$crate::$event, &InterventionContext) -> R + Send + Sync + 'static,
                    R: IntoHandlerResult<$crate::$action>,
                {
                    self.slots.$method =
                        Slot::Sync(Box::new(move |ev, cx| f(ev, cx).into_handler_result()));
                    self
                }

                #[doc = concat!(
                    "Sets the `", stringify!($method), "` decision: an async closure given the ",
                    "event and the context by reference, returning a boxed future that may ",
                    "borrow them (`|ev, cx| Box::pin(async move { .. })`)."
                )]
                pub fn $async_builder<F, R>(mut self, f: F) -> Self
                where
                    F: for<'a> Fn(&'a $crate::$event, &'a InterventionContext) -> BoxFuture<'a, R>
                        + Send
                        + Sync
                        + 'static,
                    R: IntoHandlerResult<$crate::$action> + 'static,
                {
                    self.slots.$method = Slot::Async(async_fn(move |ev, cx| {
                        let decision = f(ev, cx);
                        Box::pin(async move { decision.await.into_handler_result() })
                    }));
                    self
                }
            )*
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

            fn invocation_ended(&self, event: &AfterInvocationEvent, cx: &InterventionContext) {
                if let Some(f) = &self.ended {
                    f(event, cx);
                }
            }
            fn parallel(&self) -> bool {
                self.parallel
            }

            $(
                fn $method(
                    &self,
                    event: &$crate::$event,
                    cx: &InterventionContext,
                ) -> impl Future<Output = Result<$crate::$action, HandlerError>> + Send {
                    // (The registry calls the slot directly, without this future.)
                    async move { self.slots.$method.call(event, cx).await }
                }
            )*
        }
    };
}

for_each_intervention_event!(closures);
