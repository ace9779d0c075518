//! The registry and its ordering rule.

use std::fmt;
use std::sync::Arc;

use rein_core::{
    Error, ToolHandle,
    audit::EventKind,
    error::{BoxError, BuildError},
    event::{
        AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent,
        BeforeModelCallEvent, BeforeToolCallEvent, MessageAddedEvent, MessageUpdatedEvent,
        ModelOutputEvent,
    },
    tool::BoxFuture,
};

/// The position of a callback among those of the same event. Lower runs first.
///
/// On After* events, callbacks of the same order run in reverse registration order, so
/// before/after pairs nest like middleware; distinct orders still ascend. Orders between
/// [`SDK_FIRST`](Self::SDK_FIRST) and [`SDK_LAST`](Self::SDK_LAST) are for the layers built on
/// hooks as for you (Rein's interventions take two of them: see `rein_interventions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HookOrder(pub i32);

impl HookOrder {
    /// Runs before everything else.
    pub const SDK_FIRST: Self = Self(-100);
    /// The default.
    pub const DEFAULT: Self = Self(0);
    /// Runs after everything else.
    pub const SDK_LAST: Self = Self(100);
}

/// What a callback may return: `()` or `Result<(), E>`. An error fails the invocation
/// (a `rein_core::Error` passes through as it is; anything else becomes `Error::Hook`).
pub trait IntoHookResult {
    /// Converts into the registry's result.
    fn into_hook_result(self, event: EventKind) -> Result<(), Error>;
}

impl IntoHookResult for () {
    #[inline]
    fn into_hook_result(self, _: EventKind) -> Result<(), Error> {
        Ok(())
    }
}

impl<E: Into<BoxError>> IntoHookResult for Result<(), E> {
    fn into_hook_result(self, event: EventKind) -> Result<(), Error> {
        self.map_err(|e| {
            let boxed: BoxError = e.into();
            match boxed.downcast::<Error>() {
                Ok(core) => *core,
                Err(source) => Error::Hook {
                    event: event.as_str(),
                    source,
                },
            }
        })
    }
}

type SyncFn<E> = dyn Fn(&mut E) -> Result<(), Error> + Send + Sync;
type AsyncFn<E> = dyn for<'a> Fn(&'a mut E) -> BoxFuture<'a, Result<(), Error>> + Send + Sync;

enum Callback<E> {
    Sync(Arc<SyncFn<E>>),
    Async(Arc<AsyncFn<E>>),
}

impl<E> Clone for Callback<E> {
    fn clone(&self) -> Self {
        match self {
            Self::Sync(f) => Self::Sync(f.clone()),
            Self::Async(f) => Self::Async(f.clone()),
        }
    }
}

struct Entry<E> {
    order: i32,
    seq: u64,
    callback: Callback<E>,
}

impl<E> Clone for Entry<E> {
    fn clone(&self) -> Self {
        Self {
            order: self.order,
            seq: self.seq,
            callback: self.callback.clone(),
        }
    }
}

/// The callbacks of one event type, kept in dispatch order.
struct Hooks<E> {
    entries: Vec<Entry<E>>,
}

impl<E> Default for Hooks<E> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<E> Clone for Hooks<E> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
        }
    }
}

impl<E: HookEvent> Hooks<E> {
    fn insert(&mut self, entry: Entry<E>) {
        // Ascending order; ties by registration order, reversed on After* events.
        let after = E::KIND.is_after();
        let key = |e: &Entry<E>| (e.order, if after { u64::MAX - e.seq } else { e.seq });
        let k = key(&entry);
        let pos = self.entries.partition_point(|e| key(e) <= k);
        self.entries.insert(pos, entry);
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A lifecycle event type hooks can be registered for.
pub trait HookEvent: Send + 'static + sealed::Sealed {
    /// Which event this is.
    const KIND: EventKind;
    #[doc(hidden)]
    fn hooks(registry: &HookRegistry) -> &HooksOf<Self>
    where
        Self: Sized;
    #[doc(hidden)]
    fn hooks_mut(registry: &mut HookRegistry) -> &mut HooksOf<Self>
    where
        Self: Sized;
}

/// The callbacks of one event type (opaque).
pub struct HooksOf<E>(Hooks<E>);

impl<E> Default for HooksOf<E> {
    fn default() -> Self {
        Self(Hooks::default())
    }
}

impl<E> Clone for HooksOf<E> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// Calls `$callback! { field: EventType, ... }` with every lifecycle event hooks can be
/// registered for: the one list the registry's fields, its `Debug`, its `HookEvent` impls and
/// `merge` are generated from, so none of them can leave an event out.
macro_rules! for_each_hook_event {
    ($callback:ident) => {
        $callback! {
            before_invocation: BeforeInvocationEvent,
            before_model_call: BeforeModelCallEvent,
            after_model_call: AfterModelCallEvent,
            model_output: ModelOutputEvent,
            before_tool_call: BeforeToolCallEvent,
            after_tool_call: AfterToolCallEvent,
            message_added: MessageAddedEvent,
            message_updated: MessageUpdatedEvent,
            after_invocation: AfterInvocationEvent,
        }
    };
}

macro_rules! registry {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// Callbacks for every lifecycle event, in dispatch order, and the plugins registered.
        ///
        /// Cloning is cheap (callbacks are shared).
        #[derive(Clone, Default)]
        pub struct HookRegistry {
            $($field: HooksOf<$ty>,)*
            seq: u64,
            plugins: Vec<String>,
            tools: Vec<ToolHandle>,
        }

        $(
            impl sealed::Sealed for $ty {}
            impl HookEvent for $ty {
                const KIND: EventKind = <$ty>::KIND;
                fn hooks(registry: &HookRegistry) -> &HooksOf<Self> {
                    &registry.$field
                }
                fn hooks_mut(registry: &mut HookRegistry) -> &mut HooksOf<Self> {
                    &mut registry.$field
                }
            }
        )*

        impl fmt::Debug for HookRegistry {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut d = f.debug_struct("HookRegistry");
                $(d.field(stringify!($field), &self.$field.0.entries.len());)*
                d.field("plugins", &self.plugins).finish()
            }
        }

        impl HookRegistry {
            /// Appends the callbacks of every event of `other`, keeping their orders.
            fn append_all(&mut self, other: HookRegistry) {
                $(self.append(other.$field);)*
            }

            /// Whether no callback, plugin or plugin tool is registered.
            pub fn is_empty(&self) -> bool {
                $(self.$field.0.entries.is_empty() &&)* self.plugins.is_empty() && self.tools.is_empty()
            }
        }
    };
}

for_each_hook_event!(registry);

impl HookRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn push<E: HookEvent>(&mut self, order: HookOrder, callback: Callback<E>) {
        self.seq += 1;
        let entry = Entry {
            order: order.0,
            seq: self.seq,
            callback,
        };
        E::hooks_mut(self).0.insert(entry);
    }

    /// Appends `hooks` after this registry's callbacks of the same event (on a tie of order
    /// they count as registered later).
    fn append<E: HookEvent>(&mut self, hooks: HooksOf<E>) {
        for e in hooks.0.entries {
            self.seq += 1;
            let entry = Entry { seq: self.seq, ..e };
            E::hooks_mut(self).0.insert(entry);
        }
    }

    /// Registers a sync callback at the default order. The event type is the closure's
    /// argument type.
    pub fn add<E, R, F>(&mut self, f: F) -> &mut Self
    where
        E: HookEvent,
        R: IntoHookResult,
        F: Fn(&mut E) -> R + Send + Sync + 'static,
    {
        self.add_with(HookOrder::DEFAULT, f)
    }

    /// Registers a sync callback with an order.
    pub fn add_with<E, R, F>(&mut self, order: HookOrder, f: F) -> &mut Self
    where
        E: HookEvent,
        R: IntoHookResult,
        F: Fn(&mut E) -> R + Send + Sync + 'static,
    {
        let kind = E::KIND;
        self.push(
            order,
            Callback::Sync(Arc::new(move |ev: &mut E| f(ev).into_hook_result(kind))),
        );
        self
    }

    /// Registers an async callback at the default order: a closure returning
    /// `Box::pin(async move { ... })`, which may borrow the event.
    pub fn add_async<E, R, F>(&mut self, f: F) -> &mut Self
    where
        E: HookEvent,
        R: IntoHookResult + 'static,
        F: for<'a> Fn(&'a mut E) -> BoxFuture<'a, R> + Send + Sync + 'static,
    {
        self.add_async_with(HookOrder::DEFAULT, f)
    }

    /// Registers an async callback with an order.
    pub fn add_async_with<E, R, F>(&mut self, order: HookOrder, f: F) -> &mut Self
    where
        E: HookEvent,
        R: IntoHookResult + 'static,
        F: for<'a> Fn(&'a mut E) -> BoxFuture<'a, R> + Send + Sync + 'static,
    {
        let kind = E::KIND;
        let f = Arc::new(f);
        self.push(
            order,
            Callback::Async(Arc::new(move |ev: &mut E| {
                let f = f.clone();
                Box::pin(async move { f(ev).await.into_hook_result(kind) })
            })),
        );
        self
    }

    /// How many callbacks are registered for `E`.
    pub fn count<E: HookEvent>(&self) -> usize {
        E::hooks(self).0.entries.len()
    }

    /// Whether any callback is registered for `E` (lets the agent skip building the event).
    #[inline]
    pub fn has<E: HookEvent>(&self) -> bool {
        !E::hooks(self).0.entries.is_empty()
    }

    /// Runs the callbacks of `E` in order; the first error stops the dispatch and is returned.
    pub async fn dispatch<E: HookEvent>(&self, event: &mut E) -> Result<(), Error> {
        for entry in &E::hooks(self).0.entries {
            match &entry.callback {
                Callback::Sync(f) => f(event)?,
                Callback::Async(f) => f(event).await?,
            }
        }
        Ok(())
    }

    pub(crate) fn add_plugin_name(&mut self, name: &str) -> Result<(), Error> {
        if self.plugins.iter().any(|p| p == name) {
            return Err(BuildError::DuplicatePlugin(name.to_owned()).into());
        }
        self.plugins.push(name.to_owned());
        Ok(())
    }

    pub(crate) fn push_tool(&mut self, tool: ToolHandle) {
        self.tools.push(tool);
    }

    /// Names of the plugins registered, in order.
    pub fn plugins(&self) -> &[String] {
        &self.plugins
    }

    /// Tools contributed by plugins.
    pub fn plugin_tools(&self) -> &[ToolHandle] {
        &self.tools
    }

    /// Appends every callback of `other` (keeping their orders) and its plugins and tools.
    pub fn merge(&mut self, mut other: HookRegistry) -> Result<(), Error> {
        for p in &other.plugins {
            self.add_plugin_name(p)?;
        }
        self.tools.append(&mut other.tools);
        self.append_all(other);
        Ok(())
    }
}
