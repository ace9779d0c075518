//! Cancelling a running invocation from anywhere.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::Context;

use futures_util::task::AtomicWaker;

#[derive(Debug, Default)]
struct CancelState {
    running: bool,
    after_tools: bool,
    message: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<CancelState>,
    /// Set by a cancel while a run runs; read at every poll of the run, so without a lock.
    cancelled: AtomicBool,
    /// The running invocation's task, woken by a cancel.
    waker: AtomicWaker,
}

/// A handle that cancels the agent's running invocation: at once (racing the model stream,
/// back-off sleeps, tools and awaiting hooks), or after the current tools. Cloneable, usable
/// from any thread; cancelling when nothing runs does nothing.
///
/// ```
/// # use rein_agent::{Agent};
/// # use rein_models::ScriptedModel;
/// let agent = Agent::builder().model(ScriptedModel::builder().text("hi").build()).build().unwrap();
/// let handle = agent.cancel_handle();
/// handle.cancel(); // idle: nothing happens
/// assert!(!handle.is_running());
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelHandle {
    inner: Arc<Shared>,
}

impl CancelHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Cancels the running invocation now. The result's message is `Cancelled by user`.
    pub fn cancel(&self) {
        self.cancel_inner(None, false);
    }

    /// Cancels the running invocation now, with this text as the result's message.
    pub fn cancel_with(&self, message: impl Into<String>) {
        self.cancel_inner(Some(message.into()), false);
    }

    /// Lets the current tools finish, then stops before the next model call.
    pub fn cancel_after_tools(&self) {
        self.cancel_inner(None, true);
    }

    fn cancel_inner(&self, message: Option<String>, after_tools: bool) {
        let mut s = self.lock();
        if !s.running {
            return;
        }
        s.message = message;
        if after_tools {
            s.after_tools = true;
        } else {
            self.inner.cancelled.store(true, Ordering::Release);
            self.inner.waker.wake();
        }
    }

    /// Whether an invocation is running.
    pub fn is_running(&self) -> bool {
        self.lock().running
    }

    fn begin(&self) {
        let mut s = self.lock();
        s.running = true;
        s.after_tools = false;
        s.message = None;
        self.inner.cancelled.store(false, Ordering::Release);
    }

    /// Whether the running invocation is cancelled; if not, `cx`'s task is woken by a cancel.
    pub(crate) fn poll_cancelled(&self, cx: &Context<'_>) -> bool {
        if self.inner.cancelled.load(Ordering::Acquire) {
            return true;
        }
        // Registered, then checked again: a cancel between the two is not missed.
        self.inner.waker.register(cx.waker());
        self.inner.cancelled.load(Ordering::Acquire)
    }
}

/// An agent's cancel handle, made when first asked for: an agent nobody can cancel makes no
/// allocation for it, and its runs take no lock for it.
#[derive(Debug, Default)]
pub(crate) struct CancelSlot(OnceLock<CancelHandle>);

impl CancelSlot {
    /// The handle (made now if none was).
    pub(crate) fn handle(&self) -> CancelHandle {
        self.0.get_or_init(CancelHandle::default).clone()
    }

    /// A run starts: the handle it races, if anyone can cancel it.
    pub(crate) fn begin(&self) -> Option<CancelHandle> {
        let handle = self.0.get()?;
        handle.begin();
        Some(handle.clone())
    }

    pub(crate) fn end(&self) {
        if let Some(h) = self.0.get() {
            h.lock().running = false;
        }
    }

    pub(crate) fn after_tools_requested(&self) -> bool {
        self.0.get().is_some_and(|h| h.lock().after_tools)
    }

    pub(crate) fn message(&self) -> Option<String> {
        self.0.get().and_then(|h| h.lock().message.clone())
    }
}
