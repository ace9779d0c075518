//! Mid-run message injection (SPEC §5): a [`TurnInterceptor`] queues messages from any thread;
//! the loop drains them at the next turn boundary, after admission by the interventions.

use std::collections::VecDeque;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rein_core::{Message, id::InjectionId};

/// Why `inject` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// No invocation is running: there is no turn to inject into.
    #[error("no invocation is running")]
    NoActiveRun,
}

type ConsumedFn = dyn Fn(InjectionId, &Message) + Send + Sync;
type RejectedFn = dyn Fn(InjectionId, &Message, &str) + Send + Sync;

pub(crate) struct Item {
    pub(crate) id: InjectionId,
    pub(crate) message: Message,
    pub(crate) version: u64,
}

#[derive(Default)]
struct Queue {
    running: bool,
    version: u64,
    items: VecDeque<Item>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    on_consumed: Mutex<Option<Arc<ConsumedFn>>>,
    on_rejected: Mutex<Option<Arc<RejectedFn>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A handle that injects messages into the agent's running invocation. Cloneable, `Send +
/// Sync`, callable from any thread without a runtime.
///
/// Each message is stamped with the run it was injected into and delivered at that run's next
/// turn boundary (after a turn's tool results, before the next model call) — or rejected: when
/// stale, when an intervention denies or guides it, or when the run ends first.
///
/// ```
/// use rein_agent::{Agent, InjectError};
/// use rein_core::Message;
/// use rein_models::ScriptedModel;
/// let agent = Agent::builder().model(ScriptedModel::builder().build()).build().unwrap();
/// let steer = agent.interceptor();
/// steer.on_rejected(|id, _msg, reason| println!("{id} rejected: {reason}"));
/// assert_eq!(steer.inject(Message::user("also check X")), Err(InjectError::NoActiveRun));
/// ```
#[derive(Clone, Default)]
pub struct TurnInterceptor {
    shared: Arc<Shared>,
}

impl fmt::Debug for TurnInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = lock(&self.shared.queue);
        f.debug_struct("TurnInterceptor")
            .field("running", &q.running)
            .field("queued", &q.items.len())
            .finish()
    }
}

impl TurnInterceptor {
    /// Queues a message for the running invocation.
    pub fn inject(&self, message: impl Into<Message>) -> Result<InjectionId, InjectError> {
        let mut q = lock(&self.shared.queue);
        if !q.running {
            return Err(InjectError::NoActiveRun);
        }
        let id = InjectionId::new();
        let version = q.version;
        q.items.push_back(Item {
            id,
            message: message.into(),
            version,
        });
        Ok(id)
    }

    /// Called once for each delivered message (with the message as delivered).
    pub fn on_consumed(&self, f: impl Fn(InjectionId, &Message) + Send + Sync + 'static) {
        *lock(&self.shared.on_consumed) = Some(Arc::new(f));
    }

    /// Called once for each rejected message, with the reason.
    pub fn on_rejected(&self, f: impl Fn(InjectionId, &Message, &str) + Send + Sync + 'static) {
        *lock(&self.shared.on_rejected) = Some(Arc::new(f));
    }

    /// Starts a run: a new version; anything still queued is stale.
    pub(crate) fn begin(&self) -> u64 {
        let mut q = lock(&self.shared.queue);
        q.version += 1;
        q.running = true;
        q.version
    }

    /// Takes everything queued.
    pub(crate) fn drain(&self) -> Vec<Item> {
        lock(&self.shared.queue).items.drain(..).collect()
    }

    /// Ends the run: nothing more can be queued; returns what is left (to be rejected). Items
    /// of an earlier run (one whose stream was dropped before it ended) are among them.
    pub(crate) fn end(&self) -> Vec<Item> {
        let mut q = lock(&self.shared.queue);
        q.running = false;
        q.items.drain(..).collect()
    }

    pub(crate) fn consumed(&self, id: InjectionId, message: &Message) {
        let f = lock(&self.shared.on_consumed).clone();
        if let Some(f) = f
            && std::panic::catch_unwind(AssertUnwindSafe(|| f(id, message))).is_err()
        {
            tracing::error!(%id, "on_consumed callback panicked");
        }
    }

    pub(crate) fn rejected(&self, id: InjectionId, message: &Message, reason: &str) {
        let f = lock(&self.shared.on_rejected).clone();
        if let Some(f) = f
            && std::panic::catch_unwind(AssertUnwindSafe(|| f(id, message, reason))).is_err()
        {
            tracing::error!(%id, "on_rejected callback panicked");
        }
    }
}
