//! The model retry strategy (SPEC §2): retryable errors, exponential back-off with full jitter,
//! `retry-after` honoured.

use std::time::Duration;

use rein_core::ModelError;

/// When and how long to wait before calling the model again after an error.
///
/// The default retries errors whose [`ModelError::is_retryable`] is true, at most 6 attempts in
/// all, waiting 1 s doubling up to 30 s with full jitter, or the provider's `retry-after`.
///
/// ```
/// use std::time::Duration;
/// use rein_agent::RetryStrategy;
/// let fast = RetryStrategy::default().with_initial_delay(Duration::ZERO);
/// assert_eq!(fast.max_attempts(), 6);
/// assert_eq!(RetryStrategy::none().max_attempts(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetryStrategy {
    max_attempts: u32,
    initial_delay: Duration,
    max_delay: Duration,
    jitter: bool,
}

impl Default for RetryStrategy {
    fn default() -> Self {
        Self {
            max_attempts: 6,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            jitter: true,
        }
    }
}

impl RetryStrategy {
    /// Never retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// Attempts in all (the first call included).
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The first delay (doubles per attempt).
    pub fn with_initial_delay(mut self, d: Duration) -> Self {
        self.initial_delay = d;
        self
    }

    /// The longest delay.
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Whether to draw the delay uniformly from `[0, backoff]` (full jitter).
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Attempts in all.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delay before attempt `attempt + 1` (`attempt` ≥ 1 calls made so far), or `None` to
    /// give up.
    pub fn delay(&self, error: &ModelError, attempt: u32) -> Option<Duration> {
        if !error.is_retryable() || attempt >= self.max_attempts {
            return None;
        }
        if let Some(after) = error.retry_after() {
            return Some(after.min(self.max_delay.max(after)));
        }
        let exp = attempt.saturating_sub(1).min(20);
        let backoff = self
            .initial_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        if self.jitter && !backoff.is_zero() {
            let r =
                (rein_core::id::InvocationId::new().0.as_u128() as u64) as f64 / u64::MAX as f64;
            Some(backoff.mul_f64(r))
        } else {
            Some(backoff)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_on_non_retryable_and_after_max() {
        let s = RetryStrategy::default().with_jitter(false);
        assert!(s.delay(&ModelError::bad_request("x"), 1).is_none());
        let t = ModelError::throttled("x");
        assert_eq!(s.delay(&t, 1), Some(Duration::from_secs(1)));
        assert_eq!(s.delay(&t, 2), Some(Duration::from_secs(2)));
        assert_eq!(s.delay(&t, 5), Some(Duration::from_secs(16)));
        assert!(s.delay(&t, 6).is_none(), "6 attempts in all");
        let big = RetryStrategy::default()
            .with_jitter(false)
            .with_max_attempts(20);
        assert_eq!(big.delay(&t, 10), Some(Duration::from_secs(30)));
    }

    #[test]
    fn honours_retry_after_and_jitter_stays_in_range() {
        let s = RetryStrategy::default();
        let t = ModelError::throttled("x").with_retry_after(Duration::from_secs(7));
        assert_eq!(s.delay(&t, 1), Some(Duration::from_secs(7)));
        for _ in 0..100 {
            let d = s.delay(&ModelError::server("x"), 3).unwrap();
            assert!(d <= Duration::from_secs(4));
        }
    }
}
