//! The registry: the handlers of an agent, registered once, and one bridging hook callback per
//! lifecycle event that runs their pass (`pass.rs`).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use rein_core::{
    Error,
    audit::{EventKind, OnError},
    error::BuildError,
    event::{AfterInvocationEvent, BeforeInvocationEvent},
};
use rein_hooks::{HookOrder, HookRegistry};

use crate::error::HandlerError;
use crate::event::PassEvent;
use crate::handler::{InterventionContext, Mode};
use crate::list::for_each_intervention_event;
use crate::set::{EVENT_COUNT, EventSet};
use crate::shared::{Repr, SharedHandler};

use crate::pass::{run_pass, run_pass_now};

/// One handler as the registry keeps it: what it decided once, at build.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) handler: Repr,
    pub(crate) name: Arc<str>,
    pub(crate) on_error: OnError,
    pub(crate) mode: Mode,
    pub(crate) parallel: bool,
    /// In an event's list: how many handlers the parallel group this one starts holds (two or
    /// more), else 0 (sequential, or a later member of a group).
    pub(crate) group: usize,
}

/// The handlers of each event (at the event's position in the list of events), in registration
/// order, and the options.
pub(crate) struct Shared {
    entries: [Box<[Entry]>; EVENT_COUNT],
    /// The handlers told when an invocation ends.
    ended: Box<[Entry]>,
    pub(crate) audit_timing: bool,
}

impl Shared {
    pub(crate) fn entries<E: PassEvent>(&self) -> &[Entry] {
        &self.entries[E::POSITION]
    }
}

/// The intervention handlers of an agent, ready to be installed into its hook registry.
///
/// Built once from a list of handlers (names must be unique), it registers into a
/// [`HookRegistry`] one bridging callback per lifecycle event that some handler subscribes to:
/// at [`INPUT_ORDER`](Self::INPUT_ORDER) on Before* events (after plain hooks) and at
/// [`OUTPUT_ORDER`](Self::OUTPUT_ORDER) on After* events (before plain hooks). Within a
/// callback, one pass over the handlers in registration order implements SPEC §3.3. A message
/// injected mid-run is checked by the `before_invocation` handlers alone
/// ([`check_injected`](Self::check_injected)): plain hooks do not see it. Cloning is cheap.
///
/// ```
/// use rein_interventions::{
///     BeforeToolCallAction, BeforeToolCallEvent, Cancel, Intervention, InterventionRegistry,
///     InvocationContext, ToolUse, json,
/// };
/// use rein_hooks::HookRegistry;
///
/// let registry = InterventionRegistry::new([Intervention::named("no-rm")
///     .before_tool_call(|ev, _| match ev.tool_use().name.as_str() {
///         "rm" => BeforeToolCallAction::deny("rm is not allowed"),
///         _ => BeforeToolCallAction::Proceed,
///     })])?;
/// let mut hooks = HookRegistry::new();
/// registry.install(&mut hooks);
///
/// let mut ev = BeforeToolCallEvent::new(
///     InvocationContext::default(),
///     ToolUse::new("t1", "rm", json!({"path": "/"})),
/// );
/// futures_executor::block_on(hooks.dispatch(&mut ev))?;
/// assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: rm is not allowed".into()));
/// # Ok::<(), rein_interventions::Error>(())
/// ```
#[derive(Clone)]
pub struct InterventionRegistry {
    shared: Arc<Shared>,
    names: Arc<[Arc<str>]>,
}

impl fmt::Debug for InterventionRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterventionRegistry")
            .field("handlers", &self.names)
            .field("audit_timing", &self.shared.audit_timing)
            .finish()
    }
}

/// Builds an [`InterventionRegistry`].
#[derive(Debug, Default)]
pub struct InterventionRegistryBuilder {
    handlers: Vec<SharedHandler>,
    audit_timing: bool,
}

impl InterventionRegistryBuilder {
    /// Adds a handler (it runs after those added before it).
    pub fn handler(mut self, handler: impl Into<SharedHandler>) -> Self {
        self.handlers.push(handler.into());
        self
    }

    /// Adds handlers, in order.
    pub fn handlers<I>(mut self, handlers: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<SharedHandler>,
    {
        self.handlers.extend(handlers.into_iter().map(Into::into));
        self
    }

    /// Records how long each handler took in the audit records (`duration`). Off by default: it
    /// reads the clock twice per handler call.
    pub fn audit_timing(mut self, on: bool) -> Self {
        self.audit_timing = on;
        self
    }

    /// Builds the registry. Fails with [`BuildError::DuplicateHandler`](rein_core::error::BuildError)
    /// (`duplicate intervention handler name: '<name>'`) when two handlers share a name.
    pub fn build(self) -> Result<InterventionRegistry, Error> {
        let mut names: Vec<Arc<str>> = Vec::with_capacity(self.handlers.len());
        let mut entries = Vec::with_capacity(self.handlers.len());
        for shared in &self.handlers {
            let handler = shared.repr().handler();
            let name: Arc<str> = Arc::from(handler.name());
            if names.contains(&name) {
                return Err(BuildError::DuplicateHandler(name.to_string()).into());
            }
            names.push(name.clone());
            let entry = Entry {
                name,
                on_error: handler.on_error(),
                mode: handler.mode(),
                parallel: handler.parallel(),
                group: 0,
                handler: shared.repr().clone(),
            };
            entries.push((handler.subscriptions(), entry));
        }
        let shared = Shared {
            entries: std::array::from_fn(|position| {
                grouped(
                    entries
                        .iter()
                        .filter(|(s, _)| s.contains(EventSet::at(position)))
                        .map(|(_, e)| e.clone())
                        .collect(),
                )
            }),
            ended: entries
                .iter()
                .filter(|(_, e)| e.handler.notices_end())
                .map(|(_, e)| e.clone())
                .collect(),
            audit_timing: self.audit_timing,
        };
        Ok(InterventionRegistry {
            shared: Arc::new(shared),
            names: names.into(),
        })
    }
}

/// Marks the head of each run of two or more consecutive parallel handlers with its length.
fn grouped(mut entries: Vec<Entry>) -> Box<[Entry]> {
    let mut start = 0;
    while start < entries.len() {
        let len = entries[start..].iter().take_while(|e| e.parallel).count();
        if len >= 2 {
            entries[start].group = len;
        }
        start += len.max(1);
    }
    entries.into_boxed_slice()
}

impl InterventionRegistry {
    /// The hook order the interventions decide at on Before* events (90): after plain hooks
    /// at the default order, so they see the event as the hooks left it.
    pub const INPUT_ORDER: HookOrder = HookOrder(90);

    /// The hook order the interventions act at on After* events (−90): before plain hooks at
    /// the default order, so the hooks see what the interventions made of the event.
    pub const OUTPUT_ORDER: HookOrder = HookOrder(-90);

    /// A registry of these handlers, in this order (no audit timing).
    pub fn new<I>(handlers: I) -> Result<Self, Error>
    where
        I: IntoIterator,
        I::Item: Into<SharedHandler>,
    {
        Self::builder().handlers(handlers).build()
    }

    /// A builder (for options such as audit timing).
    pub fn builder() -> InterventionRegistryBuilder {
        InterventionRegistryBuilder::default()
    }

    /// The handler names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// How many handlers there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// How many handlers subscribe to `kind`.
    pub fn subscribers(&self, kind: EventKind) -> usize {
        // The empty set of a non-intervention event has no position in the list.
        self.shared
            .entries
            .get(EventSet::of(kind).position())
            .map_or(0, |entries| entries.len())
    }

    /// Registers the bridging callbacks into `hooks`: one per event some handler subscribes to.
    /// Install a registry once per hook registry.
    pub fn install(&self, hooks: &mut HookRegistry) {
        macro_rules! bridges {
            ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {
                $(self.bridge::<$crate::$event>(hooks);)*
            };
        }
        for_each_intervention_event!(bridges);
        self.notify_end(hooks);
    }

    /// Tells the handlers that want it when an invocation has ended.
    fn notify_end(&self, hooks: &mut HookRegistry) {
        if self.shared.ended.is_empty() {
            return;
        }
        let shared = self.shared.clone();
        hooks.add_with(
            Self::OUTPUT_ORDER,
            move |event: &mut AfterInvocationEvent| {
                let cx = InterventionContext::from(event.context());
                for entry in shared.ended.iter() {
                    let call = || entry.handler.handler().invocation_ended(event, &cx);
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(call)) {
                        tracing::warn!(
                            handler = %entry.name,
                            error = %HandlerError::from_panic(panic),
                            "intervention handler panicked in invocation_ended; ignored"
                        );
                    }
                }
            },
        );
    }

    /// Whether any handler checks a message injected mid-run (subscribes to
    /// `before_invocation`).
    pub fn checks_injected(&self) -> bool {
        !self.shared.entries::<BeforeInvocationEvent>().is_empty()
    }

    /// Checks a message injected mid-run (an event made with
    /// [`as_injected`](BeforeInvocationEvent::as_injected)): one `before_invocation` pass of
    /// the handlers, without the plain hooks (SPEC §5).
    pub async fn check_injected(&self, event: &mut BeforeInvocationEvent) -> Result<(), Error> {
        run_pass(&self.shared, event).await
    }

    /// A hook registry holding only this registry's callbacks.
    pub fn to_hooks(&self) -> HookRegistry {
        let mut hooks = HookRegistry::new();
        self.install(&mut hooks);
        hooks
    }

    fn bridge<E: PassEvent>(&self, hooks: &mut HookRegistry) {
        let entries = self.shared.entries::<E>();
        if entries.is_empty() {
            return;
        }
        let order = E::ORDER;
        let shared = self.shared.clone();
        // A parallel group awaits its members together, which only the async pass does.
        if entries
            .iter()
            .all(|e| e.group == 0 && e.handler.completes_immediately::<E>())
        {
            // Every handler decides without suspending: run the pass in a sync callback, as a
            // plain function, with no future and no reference count traffic per dispatch.
            hooks.add_with(order, move |event: &mut E| run_pass_now(&shared, event));
        } else {
            hooks.add_async_with(order, move |event: &mut E| {
                let shared = shared.clone();
                Box::pin(async move { run_pass(&shared, event).await })
            });
        }
    }
}
