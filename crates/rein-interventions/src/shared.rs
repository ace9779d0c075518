//! [`SharedHandler`]: a handler as the registry stores it, and how a call reaches it.
//!
//! Handlers that Rein defines ([`Intervention`], and `PolicyHandler` with the `policy` feature)
//! are recognized when they are wrapped and called directly: a sync closure or a policy decides
//! without a future or an allocation. Every other handler goes through [`Erased`], the
//! object-safe twin of [`InterventionHandler`], which boxes the future of each call.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use rein_core::{audit::OnError, event::AfterInvocationEvent, tool::BoxFuture};

use crate::closure::{Intervention, Slot};
use crate::decision::PendingDecision;
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::list::for_each_intervention_event;
#[cfg(feature = "policy")]
use crate::policy::{decide::Decide, handler::PolicyHandler};
use crate::set::EventSet;

/// A type-erased, shareable handler: what the registry is built from. Any
/// [`InterventionHandler`] (including an [`Intervention`] and an `Arc` of a handler) converts
/// into it.
#[derive(Clone)]
pub struct SharedHandler(Repr);

/// How a handler is called.
#[derive(Clone)]
pub(crate) enum Repr {
    /// Closures: sync ones are called directly.
    Closure(Arc<Intervention>),
    /// A built-in policy: always decides at once.
    #[cfg(feature = "policy")]
    Policy(Arc<PolicyHandler>),
    /// Any other handler: one boxed future per call.
    Erased(Arc<dyn Erased>),
}

/// `value` as a `T`, when `V` is `T`.
fn cast<V: 'static, T: 'static>(value: V) -> Result<T, V> {
    let mut slot = Some(value);
    let taken = (&mut slot as &mut dyn Any)
        .downcast_mut::<Option<T>>()
        .and_then(Option::take);
    match (taken, slot) {
        (Some(t), _) => Ok(t),
        (None, Some(v)) => Err(v),
        (None, None) => unreachable!("the value is taken only when it is a `T`"),
    }
}

impl SharedHandler {
    /// Wraps a handler.
    pub fn new<H: InterventionHandler>(handler: H) -> Self {
        // Recognizing the handler types Rein defines costs a type-id comparison or two, once.
        let handler = match cast::<H, Intervention>(handler) {
            Ok(i) => return Self(Repr::Closure(Arc::new(i))),
            Err(h) => h,
        };
        let handler = match cast::<H, Arc<Intervention>>(handler) {
            Ok(i) => return Self(Repr::Closure(i)),
            Err(h) => h,
        };
        #[cfg(feature = "policy")]
        let handler = match cast::<H, PolicyHandler>(handler) {
            Ok(p) => return Self(Repr::Policy(Arc::new(p))),
            Err(h) => h,
        };
        #[cfg(feature = "policy")]
        let handler = match cast::<H, Arc<PolicyHandler>>(handler) {
            Ok(p) => return Self(Repr::Policy(p)),
            Err(h) => h,
        };
        Self(Repr::Erased(Arc::new(handler)))
    }

    /// The handler's name.
    pub fn name(&self) -> &str {
        self.0.handler().name()
    }

    pub(crate) fn repr(&self) -> &Repr {
        &self.0
    }
}

impl<H: InterventionHandler> From<H> for SharedHandler {
    fn from(handler: H) -> Self {
        Self::new(handler)
    }
}

impl fmt::Debug for SharedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.0.handler();
        f.debug_struct("SharedHandler")
            .field("name", &h.name())
            .field("on_error", &h.on_error())
            .field("mode", &h.mode())
            .field("subscriptions", &h.subscriptions())
            .field("parallel", &h.parallel())
            .finish()
    }
}

impl Repr {
    /// The handler, for what it says about itself.
    pub(crate) fn handler(&self) -> &dyn Erased {
        match self {
            Self::Closure(i) => &**i,
            #[cfg(feature = "policy")]
            Self::Policy(p) => &**p,
            Self::Erased(h) => &**h,
        }
    }

    /// Whether the handler may want [`InterventionHandler::invocation_ended`] (closures say
    /// so; policies do not; any other handler might).
    pub(crate) fn notices_end(&self) -> bool {
        match self {
            Self::Closure(i) => i.notices_end(),
            #[cfg(feature = "policy")]
            Self::Policy(_) => false,
            Self::Erased(_) => true,
        }
    }

    /// Calls the handler's method for `E`.
    #[inline(always)]
    pub(crate) fn call<'a, E: Route>(
        &'a self,
        event: &'a E,
        cx: &'a InterventionContext,
    ) -> PendingDecision<'a, E::Action> {
        match self {
            Self::Closure(i) => E::slot(i).call(event, cx),
            #[cfg(feature = "policy")]
            Self::Policy(p) => PendingDecision::ready(E::decide(p, event, cx)),
            Self::Erased(h) => PendingDecision::Boxed(E::erased(&**h, event, cx)),
        }
    }

    /// Whether every call for `E` decides at once.
    pub(crate) fn completes_immediately<E: Route>(&self) -> bool {
        match self {
            Self::Closure(i) => !E::slot(i).is_async(),
            #[cfg(feature = "policy")]
            Self::Policy(_) => true,
            Self::Erased(_) => false,
        }
    }
}

/// How a call for an event reaches each kind of handler (one impl per event, from the list).
pub(crate) trait Route: Sync + Sized {
    /// What handlers decide on it.
    type Action: Default + Send;
    /// The set of only this event.
    const SET: EventSet;

    fn slot(closures: &Intervention) -> &Slot<Self, Self::Action>;
    #[cfg(feature = "policy")]
    fn decide(
        policy: &PolicyHandler,
        event: &Self,
        cx: &InterventionContext,
    ) -> Result<Self::Action, HandlerError>;
    fn erased<'a>(
        handler: &'a dyn Erased,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> BoxFuture<'a, Result<Self::Action, HandlerError>>;
}

macro_rules! erased {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {
        /// The object-safe twin of [`InterventionHandler`]: the same methods, each boxing its
        /// future.
        pub(crate) trait Erased: Send + Sync {
            fn name(&self) -> &str;
            fn on_error(&self) -> OnError;
            fn mode(&self) -> Mode;
            fn subscriptions(&self) -> EventSet;
            fn invocation_ended(&self, event: &AfterInvocationEvent, cx: &InterventionContext);
            fn parallel(&self) -> bool;
            $(
                fn $method<'a>(
                    &'a self,
                    event: &'a $crate::$event,
                    cx: &'a InterventionContext,
                ) -> BoxFuture<'a, Result<$crate::$action, HandlerError>>;
            )*
        }

        impl<H: InterventionHandler> Erased for H {
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
                fn $method<'a>(
                    &'a self,
                    event: &'a $crate::$event,
                    cx: &'a InterventionContext,
                ) -> BoxFuture<'a, Result<$crate::$action, HandlerError>> {
                    Box::pin(H::$method(self, event, cx))
                }
            )*
        }

        $(
            impl Route for $crate::$event {
                type Action = $crate::$action;
                const SET: EventSet = EventSet::$set;

                #[inline]
                fn slot(closures: &Intervention) -> &Slot<Self, Self::Action> {
                    &closures.slots.$method
                }
                #[cfg(feature = "policy")]
                #[inline]
                fn decide(
                    policy: &PolicyHandler,
                    event: &Self,
                    cx: &InterventionContext,
                ) -> Result<Self::Action, HandlerError> {
                    Decide::<Self, Self::Action>::decide(policy, event, cx)
                }
                #[inline]
                fn erased<'a>(
                    handler: &'a dyn Erased,
                    event: &'a Self,
                    cx: &'a InterventionContext,
                ) -> BoxFuture<'a, Result<Self::Action, HandlerError>> {
                    handler.$method(event, cx)
                }
            }
        )*
    };
}

for_each_intervention_event!(erased);

#[cfg(test)]
mod tests {
    use super::*;

    struct Mine;

    impl InterventionHandler for Mine {
        fn name(&self) -> &str {
            "mine"
        }
    }

    fn kind(h: impl InterventionHandler) -> &'static str {
        match SharedHandler::new(h).0 {
            Repr::Closure(_) => "closure",
            #[cfg(feature = "policy")]
            Repr::Policy(_) => "policy",
            Repr::Erased(_) => "erased",
        }
    }

    #[test]
    fn handler_types_of_this_crate_are_recognized_also_behind_an_arc() {
        assert_eq!(kind(Intervention::named("a")), "closure");
        assert_eq!(kind(Arc::new(Intervention::named("a"))), "closure");
        assert_eq!(kind(Mine), "erased");
        assert_eq!(kind(Arc::new(Mine)), "erased");
        #[cfg(feature = "policy")]
        {
            use crate::policy::DenyTools;
            let policy = || {
                PolicyHandler::new(
                    "p",
                    DenyTools {
                        tools: vec!["rm".into()],
                        reason: None,
                    },
                )
            };
            assert!(matches!(policy().map(kind), Ok("policy")));
            assert!(matches!(policy().map(|p| kind(Arc::new(p))), Ok("policy")));
        }
    }
}
