//! [`Gradient2`]: the limit follows the ratio of long-term to recent
//! latency (Netflix `Gradient2Limit`).

use std::time::Duration;

use super::{LimitAlgorithm, Sample};

/// Netflix `Gradient2Limit`, with its defaults: start at 20, within
/// `[20, 200]`, smoothing 0.2, queue size 4, a long-term RTT averaged over
/// 600 samples (after a 10-sample warm-up), RTT tolerance 1.5.
///
/// Per sample: `gradient = clamp(1.5 × longRtt / rtt, 0.5, 1.0)`;
/// `target = limit × gradient + queue`; the limit moves 20 % of the way to
/// the target. The long RTT decays ×0.95 when it is more than twice the
/// recent one, so it recovers after a latency spike; a sample taken with less
/// than half the limit in use changes nothing.
///
/// Departures from the reference, each fixing one of its known bugs:
/// * **Drops are losses** (Netflix #176, #137): a dropped request (a 503, a
///   timeout, or a request slower than the 5 s timeout) sets the gradient to
///   its floor, 0.5, and its RTT — about zero for a refusal, a constant for
///   timeouts — never enters the averages. The reference ignores drops, so a
///   service whose every call times out in the same time (zero variance)
///   sees a gradient of 1 and grows to the maximum.
/// * **The queue term only while latency is at or below its long-term
///   average** (Netflix #134): with a tolerance of 1.5, latency 40 % above
///   normal still reads as a gradient of 1, and the reference keeps adding 4
///   — the limit climbs to the maximum under modest overload. Here the limit
///   holds instead, and grows only when the recent RTT is no worse than the
///   long-term one.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradient2 {
    limit: f64,
    min: f64,
    max: f64,
    smoothing: f64,
    queue: f64,
    tolerance: f64,
    timeout: Duration,
    long: LongRtt,
}

/// An exponential average of RTTs in seconds, with a plain average during
/// the warm-up (Netflix `ExpAvgMeasurement`).
#[derive(Clone, Debug, PartialEq)]
struct LongRtt {
    value: f64,
    count: u32,
    window: u32,
    warmup: u32,
}

impl LongRtt {
    fn add(&mut self, x: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.value += (x - self.value) / f64::from(self.count);
        } else {
            let factor = 2.0 / (f64::from(self.window) + 1.0);
            self.value = self.value * (1.0 - factor) + x * factor;
        }
        self.value
    }
}

impl Default for Gradient2 {
    fn default() -> Self {
        Gradient2::new(20, 20, 200)
    }
}

impl Gradient2 {
    /// Starts at `initial`, within `[min, max]` (`min` at least 1).
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        let min = min.max(1) as f64;
        let max = (max as f64).max(min);
        Gradient2 {
            limit: super::clamp(initial as f64, min, max),
            min,
            max,
            smoothing: 0.2,
            queue: 4.0,
            tolerance: 1.5,
            timeout: Duration::from_secs(5),
            long: LongRtt {
                value: 0.0,
                count: 0,
                window: 600,
                warmup: 10,
            },
        }
    }

    /// A request slower than this counts as a drop.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The long-term RTT average.
    pub fn long_rtt(&self) -> Duration {
        Duration::from_secs_f64(self.long.value.max(0.0))
    }
}

impl LimitAlgorithm for Gradient2 {
    fn limit(&self) -> usize {
        self.limit as usize
    }

    fn on_sample(&mut self, s: Sample) {
        let limit = self.limit;
        let dropped = s.dropped || s.rtt > self.timeout;
        let target = if dropped {
            limit * 0.5
        } else {
            let short = s.rtt.as_secs_f64().max(1e-9);
            let mut long = self.long.add(short);
            if long / short > 2.0 {
                self.long.value *= 0.95;
                long = self.long.value;
            }
            if (s.inflight as f64) < limit / 2.0 {
                return;
            }
            let gradient = super::clamp(self.tolerance * long / short, 0.5, 1.0);
            let queue = if short <= long { self.queue } else { 0.0 };
            limit * gradient + queue
        };
        let next = limit * (1.0 - self.smoothing) + target * self.smoothing;
        self.limit = super::clamp(next, self.min, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrency::test_support::{feed, sample};

    #[test]
    fn netflix_defaults_and_steady_growth() {
        let mut g = Gradient2::default();
        assert_eq!(g.limit(), 20);
        // Steady latency: gradient 1, +4 smoothed by 0.2: +0.8 a sample.
        g.on_sample(sample(0, 10, 20, false));
        assert!((g.limit - 20.8).abs() < 1e-9, "{}", g.limit);
        feed(&mut g, 1, 1000, 10, false);
        assert_eq!(g.limit(), 200, "capped at 200");
    }

    #[test]
    fn rising_latency_shrinks_the_limit() {
        let mut g = Gradient2::new(100, 20, 200);
        let t = feed(&mut g, 0, 20, 10, false);
        let before = g.limit;
        // Three times the long-term latency: gradient 0.5 (1.5/3), so the
        // limit moves 20 % of the way to half of itself.
        g.on_sample(sample(t, 30, 100, false));
        let long = g.long.value;
        let expected =
            before * 0.8 + before * super::super::clamp(1.5 * long / 0.030, 0.5, 1.0) * 0.2;
        assert!((g.limit - expected).abs() < 1e-9);
        assert!(g.limit < before);
        let t = feed(&mut g, t + 1, 100, 30, false);
        assert!(
            g.limit() < 60,
            "keeps shrinking while latency stays up: {}",
            g.limit()
        );
        // Latency back to normal: the long average, decayed, lets it grow.
        feed(&mut g, t, 2_000, 10, false);
        assert!(g.limit() > 150, "recovers: {}", g.limit());
    }

    #[test]
    fn same_timeout_every_time_does_not_grow_to_max() {
        // Netflix #137: every call times out after the same 5 s (zero
        // variance). The reference reads a gradient of 1 and grows to the
        // maximum; a timeout is a loss here.
        let mut g = Gradient2::new(100, 20, 200).with_timeout(Duration::from_secs(4));
        feed(&mut g, 0, 200, 5_000, false);
        assert_eq!(g.limit(), 20);
        let mut g = Gradient2::new(100, 20, 200);
        feed(&mut g, 0, 200, 5_000, true);
        assert_eq!(g.limit(), 20);
    }

    #[test]
    fn a_fast_refusal_does_not_pull_the_average_down() {
        // Netflix #176: a drop comes back in ~0 ms.
        let mut g = Gradient2::default();
        let t = feed(&mut g, 0, 20, 50, false);
        let long = g.long_rtt();
        g.on_sample(sample(t, 0, 20, true));
        assert_eq!(g.long_rtt(), long);
    }

    #[test]
    fn modest_overload_does_not_grow_the_limit() {
        // Netflix #134: latency 40 % above its long-term average sits inside
        // the 1.5 tolerance; the reference keeps adding the queue term and
        // climbs to the maximum. Here the limit holds.
        let mut g = Gradient2::new(60, 20, 200);
        let t = feed(&mut g, 0, 10, 10, false);
        let before = g.limit();
        feed(&mut g, t, 300, 14, false);
        assert!(g.limit() <= before, "{} > {before}", g.limit());
    }

    #[test]
    fn an_idle_client_does_not_grow() {
        let mut g = Gradient2::default();
        for t in 0..100 {
            g.on_sample(sample(t, 10, 3, false));
        }
        assert_eq!(g.limit(), 20);
    }
}
