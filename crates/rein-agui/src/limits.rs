//! What one server accepts at most, and the budget of new threads.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The server's bounds: every client is assumed hostile, so what it may hold (connections,
/// time) or start (runs, threads, injections, turns) is capped. Past a cap a request gets a
/// clear answer — 413, 429 with `Retry-After` — and nothing changes. The defaults suit one
/// person's `rein serve` and a small team's server; each is a method here.
///
/// ```
/// use std::time::Duration;
/// use rein_agui::ServerLimits;
/// let limits = ServerLimits::default().max_runs(8).header_timeout(Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimits {
    pub(crate) max_body_bytes: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_runs: usize,
    pub(crate) new_threads_per_minute: u32,
    pub(crate) max_injections_per_run: u32,
    pub(crate) max_turns_per_run: u32,
    pub(crate) keep_alive: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
            max_runs: 32,
            new_threads_per_minute: 60,
            max_injections_per_run: 32,
            max_turns_per_run: 32,
            keep_alive: Duration::from_secs(15),
        }
    }
}

impl ServerLimits {
    /// The largest request body (default 1 MiB): more is `413 BODY_TOO_LARGE`, before it is
    /// parsed. The server reads only the last message of a run request; a client that sends
    /// its whole history grows toward it.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }

    /// How long a connection may take to send a request's headers (default 10 s), also the
    /// longest an idle keep-alive connection stays open: then it is closed (slowloris).
    pub fn header_timeout(mut self, d: Duration) -> Self {
        self.header_timeout = d;
        self
    }

    /// How long a request may take from its headers to the start of the answer — reading the
    /// body and loading the thread (default 30 s): then `408`. A run's event stream, once
    /// started, is not cut.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// Connections open at once (default 256). At the cap the server stops accepting: new
    /// connections wait in the system's queue until one closes (as Go's `LimitListener`).
    /// Applies to [`AguiServer::bind`](crate::AguiServer::bind); a router mounted in your own
    /// server is under that server's limits.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Runs going at once in this server, over all threads (default 32): one more is `429
    /// TOO_MANY_RUNS`.
    pub fn max_runs(mut self, n: usize) -> Self {
        self.max_runs = n;
        self
    }

    /// New threads — run requests on a thread id the store does not hold yet — this server
    /// starts per minute (default 60, in bursts up to that many): past it, `429
    /// TOO_MANY_THREADS`. Every thread is a session the store keeps, so this bounds how fast a
    /// client can fill the store; threads that exist are not counted.
    pub fn new_threads_per_minute(mut self, n: u32) -> Self {
        self.new_threads_per_minute = n;
        self
    }

    /// Messages injected into one running run (default 32): one more is `429
    /// TOO_MANY_INJECTIONS`.
    pub fn max_injections_per_run(mut self, n: u32) -> Self {
        self.max_injections_per_run = n;
        self
    }

    /// Model calls in one run request (default 32): the run stops before the next model call,
    /// as the agent's own `max_turns` does (`RUN_FINISHED`, `stopReason: "limit_turns"`). An
    /// agent's own lower `max_turns` or token limits apply first. A resume starts a new count.
    pub fn max_turns_per_run(mut self, n: u32) -> Self {
        self.max_turns_per_run = n.max(1);
        self
    }

    /// How often a run's event stream sends an SSE comment while nothing else happens (default
    /// 15 s): it keeps proxies from closing the stream, and a client that went away is noticed
    /// (and its run cancelled) by the next write at the latest.
    pub fn keep_alive(mut self, d: Duration) -> Self {
        self.keep_alive = d;
        self
    }
}

/// New threads per minute: a token bucket refilled continuously (`per_minute` tokens a
/// minute, at most `per_minute` kept).
#[derive(Debug)]
pub(crate) struct ThreadBudget {
    per_minute: u32,
    state: Mutex<(f64, Instant)>,
}

impl ThreadBudget {
    pub(crate) fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            state: Mutex::new((f64::from(per_minute), Instant::now())),
        }
    }

    /// Takes one new thread; `Err(seconds)` to wait when there is none left.
    pub(crate) fn take(&self) -> Result<(), u64> {
        let rate = f64::from(self.per_minute) / 60.0;
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * rate;
        s.0 = (s.0 + refill).min(f64::from(self.per_minute));
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else if rate > 0.0 {
            // Whole seconds, rounded up, at least one.
            let wait = ((1.0 - s.0) / rate).ceil().max(1.0);
            Err(if wait.is_finite() { wait as u64 } else { 60 })
        } else {
            Err(60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_budget_gives_its_burst_then_says_how_long_to_wait() {
        let b = ThreadBudget::new(3);
        assert!((0..3).all(|_| b.take().is_ok()));
        let wait = b.take().unwrap_err();
        assert!((1..=20).contains(&wait), "{wait}");
        assert_eq!(ThreadBudget::new(0).take(), Err(60));
    }
}
