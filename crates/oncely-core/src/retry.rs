//! How the runtime retries transient failures: exponential backoff with jitter.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;

/// Retry policy for transient failures of one delivery.
///
/// ```
/// use oncely_core::RetryPolicy;
/// use std::time::Duration;
/// let policy = RetryPolicy::default()
///     .max_attempts(3)
///     .base_delay(Duration::from_millis(10));
/// assert_eq!(policy.attempts(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts, 50 ms doubling up to 5 s, full jitter.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Delay before the second attempt; doubles after that.
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// Upper bound of one delay.
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Attempts in all.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delays between attempts (one fewer than the attempts), jittered.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        ExponentialBuilder::default()
            .with_min_delay(self.base_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .with_jitter()
            .build()
    }
}

/// Capped exponential backoff with full jitter, for holding a delivery while the store fails:
/// the n-th delay is drawn uniformly between `base` and `min(cap, base · 2ⁿ)`. Never ends.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    step: u32,
}

impl Backoff {
    /// 100 ms doubling up to 30 s: a 10 s outage costs about eight probes.
    pub(crate) fn store() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(30),
            step: 0,
        }
    }

    /// The next delay.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1 << self.step.min(20))
            .min(self.cap);
        self.step = self.step.saturating_add(1);
        let base = self.base.min(ceiling);
        // The thread-local generator backon's retry jitter uses too: a deterministic
        // simulation seeds it (`fastrand::seed`) and gets the same delays every run.
        base + (ceiling - base).mul_f64(fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_backoff_doubles_within_bounds_and_caps() {
        let mut backoff = Backoff::store();
        let delays: Vec<Duration> = (0..40).map(|_| backoff.next_delay()).collect();
        for (n, delay) in delays.iter().enumerate() {
            let ceiling = Duration::from_millis(100 << n.min(20)).min(Duration::from_secs(30));
            assert!(
                *delay >= Duration::from_millis(100) && *delay <= ceiling,
                "{n}: {delay:?}"
            );
        }
        // Ten seconds of outage take only a handful of probes.
        let mut backoff = Backoff::store();
        let mut spent = Duration::ZERO;
        let mut probes = 0;
        while spent < Duration::from_secs(10) {
            spent += backoff.next_delay();
            probes += 1;
        }
        assert!(probes <= 20, "{probes}");
    }
}
