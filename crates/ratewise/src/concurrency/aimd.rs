//! [`Aimd`]: additive increase, multiplicative decrease of the in-flight
//! limit, on losses only (Netflix `AIMDLimit`).

use std::time::Duration;

use super::{LimitAlgorithm, Sample};

/// AIMD on the concurrency limit, with Netflix `concurrency-limits`'
/// defaults: start at 20, never below 20 nor above 200, ×0.9 on a drop or
/// on a request slower than the 5 s timeout, +1 on a success that found the
/// limit at least half used (so an idle client's limit does not drift up).
///
/// As in Netflix since its issues #155/#174, there is no periodic halving at
/// the ceiling.
///
/// ```
/// use std::time::Duration;
/// use ratewise::concurrency::{Aimd, LimitAlgorithm, Sample};
/// use ratewise::Timestamp;
///
/// let mut a = Aimd::new(10, 1, 100);
/// let s = |dropped| Sample {
///     now: Timestamp::ZERO, rtt: Duration::from_millis(10), inflight: 10, dropped, epoch: 0,
/// };
/// a.on_sample(s(false));
/// assert_eq!(a.limit(), 11);
/// a.on_sample(s(true));
/// assert_eq!(a.limit(), 9); // ⌊11 × 0.9⌋
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Aimd {
    limit: usize,
    min: usize,
    max: usize,
    backoff: f64,
    timeout: Duration,
}

impl Default for Aimd {
    fn default() -> Self {
        Aimd::new(20, 20, 200)
    }
}

impl Aimd {
    /// Starts at `initial` (clamped into `[min, max]`); backoff 0.9, timeout
    /// 5 s. `min` is at least 1 and `max` at least `min`.
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        let min = min.max(1);
        let max = max.max(min);
        Aimd {
            limit: initial.clamp(min, max),
            min,
            max,
            backoff: 0.9,
            timeout: Duration::from_secs(5),
        }
    }

    /// The multiplicative decrease, clamped to Netflix's `[0.5, 1)`.
    pub fn with_backoff(mut self, ratio: f64) -> Self {
        self.backoff = super::clamp(ratio, 0.5, 0.999);
        self
    }

    /// A request slower than this counts as a drop.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

impl LimitAlgorithm for Aimd {
    fn limit(&self) -> usize {
        self.limit
    }

    fn on_sample(&mut self, s: Sample) {
        if s.dropped || s.rtt > self.timeout {
            let decreased = (self.limit as f64 * self.backoff) as usize;
            self.limit = decreased.clamp(self.min, self.max);
        } else if s.inflight * 2 >= self.limit {
            self.limit = (self.limit + 1).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrency::test_support::{feed, sample};

    #[test]
    fn netflix_defaults_and_worked_trace() {
        let mut a = Aimd::default();
        assert_eq!(a.limit(), 20);
        // Successes at full use grow the limit one by one, up to 200.
        feed(&mut a, 0, 5, 10, false);
        assert_eq!(a.limit(), 25);
        feed(&mut a, 10, 1000, 10, false);
        assert_eq!(a.limit(), 200, "capped, and never halved at the cap");
        // A drop: ×0.9, rounded down; the floor holds.
        a.on_sample(sample(2000, 10, 200, true));
        assert_eq!(a.limit(), 180);
        feed(&mut a, 3000, 100, 10, true);
        assert_eq!(a.limit(), 20);
        // A success slower than the timeout is a drop too.
        let mut a = Aimd::new(100, 1, 200);
        a.on_sample(sample(0, 6_000, 100, false));
        assert_eq!(a.limit(), 90);
    }

    #[test]
    fn an_idle_client_does_not_grow() {
        let mut a = Aimd::default();
        for t in 0..100 {
            a.on_sample(sample(t, 10, 5, false)); // 5 of 20 in use
        }
        assert_eq!(a.limit(), 20);
    }
}
