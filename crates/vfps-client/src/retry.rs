//! The retry policy: only `UNAVAILABLE`, exponential backoff with jitter.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub multiplier: u32,
}

impl Default for RetryPolicy {
    /// 5 attempts, 200 ms → 5 s, ×2.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            multiplier: 2,
        }
    }
}

impl RetryPolicy {
    /// The verification pass's policy: 10 attempts, 1 s → 10 s.
    pub fn verification() -> Self {
        Self {
            max_attempts: 10,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            multiplier: 2,
        }
    }

    /// Wait after failed attempt number `attempt` (1-based): exponential, capped,
    /// with ±20 % jitter so retries of many calls do not arrive in lockstep.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.multiplier.saturating_pow(attempt.saturating_sub(1));
        let base = self
            .initial_backoff
            .saturating_mul(exp)
            .min(self.max_backoff);
        let jitter = rand::random_range(0.8..1.2);
        base.mul_f64(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        let b1 = p.backoff(1);
        let b3 = p.backoff(3);
        let b9 = p.backoff(9);
        assert!(b1 >= Duration::from_millis(160) && b1 <= Duration::from_millis(240));
        assert!(b3 >= Duration::from_millis(640) && b3 <= Duration::from_millis(960));
        assert!(b9 <= Duration::from_secs(6));
    }
}
