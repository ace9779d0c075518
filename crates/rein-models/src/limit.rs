//! [`RateLimiter`] and [`LimitedModel`]: a client-side bound on requests in flight, requests
//! per minute and tokens per minute, shared by every model (and agent) that holds a clone.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt as _;
use rein_core::{ModelError, request::ModelRequest, stream::StreamEvent};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::model::{Model, ModelInfo, ModelStream, SharedModel};

/// The window requests and tokens per minute are counted over.
const MINUTE: Duration = Duration::from_secs(60);

/// A client-side limit on model calls: at most N in flight, R started and T tokens used in any
/// 60 seconds. Cloning is cheap and shares the limit: give one limiter to every
/// [`LimitedModel`] that calls the same account (many agents, a fallback chain's members).
///
/// - **In flight**: a call holds a slot from its start until its stream ends or is dropped.
/// - **Requests per minute**: a call starts only when fewer than R calls started in the last
///   60 seconds (a sliding window: never a burst of 2R across a minute's edge).
/// - **Tokens per minute**: counted from the usage each call reports (its `Metadata`, total
///   tokens) when it reports it; a call starts only while the tokens of the last 60 seconds
///   are below T. A call's own tokens are not known before it runs: one call may overshoot T,
///   and the next calls wait until it ages out of the window.
///
/// - **A provider's throttling**: when a call through the limiter is refused as throttled (429)
///   with a `retry-after`, no call through the limiter starts until that time has passed — the
///   account is throttled, not one request — capped at 60 seconds (a server cannot stall every
///   agent for longer with one header).
///
/// A waiting call holds nothing: dropping its future (a cancelled run, a timeout) leaves the
/// limiter as if it never asked. Time is tokio's clock (a paused clock in tests).
///
/// ```
/// use rein_models::{LimitedModel, RateLimiter, ScriptedModel};
/// let limiter = RateLimiter::builder()
///     .max_in_flight(4)
///     .requests_per_minute(60)
///     .tokens_per_minute(100_000)
///     .build();
/// let a = LimitedModel::new(ScriptedModel::repeating_text("a"), limiter.clone());
/// let b = LimitedModel::new(ScriptedModel::repeating_text("b"), limiter);
/// # let _ = (a, b);
/// ```
#[derive(Clone)]
pub struct RateLimiter(Arc<Limits>);

struct Limits {
    in_flight: Option<(Arc<Semaphore>, usize)>,
    requests_per_minute: Option<usize>,
    tokens_per_minute: Option<u64>,
    window: Mutex<Window>,
}

/// What happened in the last minute.
#[derive(Default)]
struct Window {
    /// When each call of the last minute started (oldest first).
    starts: VecDeque<Instant>,
    /// When each call of the last minute reported its tokens, and how many (oldest first).
    tokens: VecDeque<(Instant, u64)>,
    /// The sum of `tokens`.
    token_sum: u64,
    /// No call starts before this: the provider throttled a call and said when to come back.
    paused_until: Option<Instant>,
}

impl Window {
    fn forget_before(&mut self, since: Instant) {
        while self.starts.front().is_some_and(|t| *t <= since) {
            self.starts.pop_front();
        }
        while let Some((_, n)) = self.tokens.front().filter(|(t, _)| *t <= since) {
            self.token_sum = self.token_sum.saturating_sub(*n);
            self.tokens.pop_front();
        }
    }
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("max_in_flight", &self.0.in_flight.as_ref().map(|(_, n)| n))
            .field("requests_per_minute", &self.0.requests_per_minute)
            .field("tokens_per_minute", &self.0.tokens_per_minute)
            .finish()
    }
}

/// Builds a [`RateLimiter`]; a limit left unset does not apply.
#[derive(Debug, Default, Clone)]
pub struct RateLimiterBuilder {
    max_in_flight: Option<usize>,
    requests_per_minute: Option<usize>,
    tokens_per_minute: Option<u64>,
}

impl RateLimiterBuilder {
    /// At most `n` calls in flight (at least 1).
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = Some(n.clamp(1, Semaphore::MAX_PERMITS));
        self
    }

    /// At most `n` calls started in any 60 seconds (at least 1).
    pub fn requests_per_minute(mut self, n: usize) -> Self {
        self.requests_per_minute = Some(n.max(1));
        self
    }

    /// New calls wait while the calls of the last 60 seconds reported `n` tokens or more
    /// (at least 1).
    pub fn tokens_per_minute(mut self, n: u64) -> Self {
        self.tokens_per_minute = Some(n.max(1));
        self
    }

    /// The limiter.
    pub fn build(self) -> RateLimiter {
        RateLimiter(Arc::new(Limits {
            in_flight: self.max_in_flight.map(|n| (Arc::new(Semaphore::new(n)), n)),
            requests_per_minute: self.requests_per_minute,
            tokens_per_minute: self.tokens_per_minute,
            window: Mutex::new(Window::default()),
        }))
    }
}

impl RateLimiter {
    /// A builder with no limit set.
    pub fn builder() -> RateLimiterBuilder {
        RateLimiterBuilder::default()
    }

    /// Waits for a slot in flight, then for the minute's budgets; the call is counted as
    /// started when this returns. Dropped while it waits, it holds nothing.
    async fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = match &self.0.in_flight {
            // The semaphore is never closed: `acquire_owned` cannot fail.
            Some((semaphore, _)) => semaphore.clone().acquire_owned().await.ok(),
            None => None,
        };
        loop {
            let wait_until = {
                let mut window = self.window();
                let now = Instant::now();
                if let Some(since) = now.checked_sub(MINUTE) {
                    window.forget_before(since);
                }
                let requests_full = self
                    .0
                    .requests_per_minute
                    .is_some_and(|max| window.starts.len() >= max);
                let tokens_spent = self
                    .0
                    .tokens_per_minute
                    .is_some_and(|max| window.token_sum >= max);
                // The oldest entry holding the limit: when it ages out, look again. (A full
                // window is never empty: each limit is at least 1.)
                let paused = window.paused_until.filter(|t| *t > now);
                let blocker = if paused.is_some() {
                    paused
                } else if requests_full {
                    window.starts.front().map(|t| *t + MINUTE)
                } else if tokens_spent {
                    window.tokens.front().map(|(t, _)| *t + MINUTE)
                } else {
                    None
                };
                match blocker {
                    Some(at) => at,
                    None => {
                        if self.0.requests_per_minute.is_some() {
                            window.starts.push_back(now);
                        }
                        return permit;
                    }
                }
            };
            tokio::time::sleep_until(wait_until).await;
        }
    }

    /// Holds every call back until the `retry-after` of a throttled call (at most a minute).
    fn pause_for(&self, error: &ModelError) {
        let Some(after) = error.retry_after().filter(|_| error.is_throttled()) else {
            return;
        };
        let until = Instant::now() + after.min(MINUTE);
        let mut window = self.window();
        window.paused_until = Some(window.paused_until.map_or(until, |t| t.max(until)));
    }

    /// Counts the tokens a call reported.
    fn spend(&self, tokens: u64) {
        if self.0.tokens_per_minute.is_none() || tokens == 0 {
            return;
        }
        let mut window = self.window();
        window.tokens.push_back((Instant::now(), tokens));
        window.token_sum = window.token_sum.saturating_add(tokens);
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        // The window stays consistent under a panic (each update is one push or pop).
        self.0.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A model whose calls go through a [`RateLimiter`] (waiting, never failing, while a limit is
/// reached).
///
/// In a [`FallbackModel`](crate::FallbackModel), limit each member with its own account's
/// limiter: a call waits for its model's limit rather than moving on.
#[derive(Debug, Clone)]
pub struct LimitedModel {
    model: SharedModel,
    limiter: RateLimiter,
}

impl LimitedModel {
    /// `model`, limited by `limiter`.
    pub fn new(model: impl Into<SharedModel>, limiter: RateLimiter) -> Self {
        Self {
            model: model.into(),
            limiter,
        }
    }
}

impl Model for LimitedModel {
    fn info(&self) -> ModelInfo {
        self.model.info()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let permit = self.limiter.admit().await;
        let stream = match self.model.stream(request).await {
            Ok(stream) => stream,
            Err(e) => {
                self.limiter.pause_for(&e);
                return Err(e);
            }
        };
        let limiter = self.limiter.clone();
        // The stream holds the call's slot in flight until it ends or is dropped.
        Ok(Box::pin(stream.inspect(move |event| {
            let _slot = &permit;
            match event {
                Ok(StreamEvent::Metadata { usage, .. }) => limiter.spend(usage.total_tokens),
                Err(e) => limiter.pause_for(e),
                Ok(_) => {}
            }
        })))
    }
}
