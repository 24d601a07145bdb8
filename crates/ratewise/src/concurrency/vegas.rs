//! [`Vegas`]: TCP Vegas's queue estimate applied to the in-flight limit
//! (Netflix `VegasLimit`).

use std::time::Duration;

use rand::{Rng, SeedableRng};

use super::{LimitAlgorithm, Sample};

/// TCP Vegas on the concurrency limit, with Netflix `concurrency-limits`'
/// defaults: start at 20, at most 1000, smoothing 1.0, probe multiplier 30.
///
/// It keeps `rtt_noload`, the lowest RTT seen, and estimates the queue as
/// `⌈limit × (1 − rtt_noload / rtt)⌉`. With `log = max(1, ⌊log10 limit⌋)`,
/// α = 3·log, β = 6·log and threshold = log: a queue at or under the
/// threshold grows the limit by β, under α by log, over β shrinks it by log;
/// a drop shrinks it by log; a sample taken with under half the limit in use
/// changes nothing. Every `jitter × 30 × limit` samples (jitter drawn in
/// `[0.5, 1)` from the seed) `rtt_noload` is re-measured from the next
/// sample, so a path whose base latency rose is learnt again (Netflix #165:
/// no manual `rtt_noload` needed).
///
/// Departure from the reference: a *dropped* request's RTT never becomes
/// `rtt_noload` or a probe (a refusal comes back in about 0 ms and would make
/// every later RTT look like a long queue; the loss is counted as a loss
/// only, as Netflix #176 asks of Gradient2).
///
/// Known limit, as in the reference (Netflix #72): behind a *rate* limit
/// whose window is about the RTT, refusals are fast, and Vegas, which
/// shrinks by only `log` per drop, backs off slowly; [`Aimd`](super::Aimd)
/// is the controller for rate-limited callers.
#[derive(Clone, Debug)]
pub struct Vegas {
    limit: f64,
    max: f64,
    smoothing: f64,
    rtt_noload: Option<Duration>,
    probe_multiplier: f64,
    probe_jitter: f64,
    probe_count: u64,
    rng: rand_chacha::ChaCha8Rng,
}

impl Default for Vegas {
    fn default() -> Self {
        Vegas::new(20, 1000, 0)
    }
}

impl Vegas {
    /// Starts at `initial` (at least 1), at most `max`; `seed` drives the
    /// probe jitter, so runs replay exactly.
    pub fn new(initial: usize, max: usize, seed: u64) -> Self {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let probe_jitter = rng.random_range(0.5..1.0);
        let max = max.max(1) as f64;
        Vegas {
            limit: (initial.max(1) as f64).min(max),
            max,
            smoothing: 1.0,
            rtt_noload: None,
            probe_multiplier: 30.0,
            probe_jitter,
            probe_count: 0,
            rng,
        }
    }

    /// How far each update moves the limit towards its target, in `(0, 1]`.
    pub fn with_smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = super::clamp(smoothing, 0.01, 1.0);
        self
    }

    /// The lowest RTT currently assumed to be the path without queueing.
    pub fn rtt_noload(&self) -> Option<Duration> {
        self.rtt_noload
    }

    fn log10(limit: f64) -> f64 {
        (limit.log10().floor()).max(1.0)
    }
}

impl LimitAlgorithm for Vegas {
    fn limit(&self) -> usize {
        self.limit as usize
    }

    fn on_sample(&mut self, s: Sample) {
        if !s.dropped {
            self.probe_count += 1;
            if self.probe_jitter * self.probe_multiplier * self.limit <= self.probe_count as f64 {
                self.probe_jitter = self.rng.random_range(0.5..1.0);
                self.probe_count = 0;
                self.rtt_noload = Some(s.rtt);
                return;
            }
            match self.rtt_noload {
                Some(base) if s.rtt >= base => {}
                _ => {
                    self.rtt_noload = Some(s.rtt);
                    return;
                }
            }
        }
        let limit = self.limit;
        let log = Vegas::log10(limit);
        let target = if s.dropped {
            limit - log
        } else if (s.inflight as f64) * 2.0 < limit {
            return;
        } else {
            let base = self.rtt_noload.map_or(0.0, |d| d.as_secs_f64());
            let rtt = s.rtt.as_secs_f64().max(f64::MIN_POSITIVE);
            let queue = (limit * (1.0 - base / rtt)).ceil();
            let (alpha, beta, threshold) = (3.0 * log, 6.0 * log, log);
            if queue <= threshold {
                limit + beta
            } else if queue < alpha {
                limit + log
            } else if queue > beta {
                limit - log
            } else {
                return;
            }
        };
        let target = super::clamp(target, 1.0, self.max);
        self.limit = (1.0 - self.smoothing) * limit + self.smoothing * target;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrency::test_support::{feed, sample};

    #[test]
    fn netflix_defaults_and_reaction_to_latency() {
        let mut v = Vegas::default();
        assert_eq!(v.limit(), 20);
        // The first sample sets rtt_noload and changes nothing else.
        v.on_sample(sample(0, 10, 20, false));
        assert_eq!(v.rtt_noload(), Some(Duration::from_millis(10)));
        assert_eq!(v.limit(), 20);
        // No queue (RTT at the base): grow by β = 6·log = 6.
        v.on_sample(sample(1, 10, 20, false));
        assert_eq!(v.limit(), 26);
        // RTT doubled: queue ≈ limit/2 = 13 > β = 6: shrink by log = 1.
        v.on_sample(sample(2, 20, 26, false));
        assert_eq!(v.limit(), 25);
        // A small queue, between threshold and α: grow by log.
        // limit 25, base 10 ms, rtt 10.5 ms: queue = ⌈25 × 0.0476⌉ = 2.
        let mut v2 = v.clone();
        v2.on_sample(Sample {
            rtt: Duration::from_micros(10_500),
            ..sample(3, 0, 25, false)
        });
        assert_eq!(v2.limit(), 26);
        // A drop: shrink by log.
        v.on_sample(sample(4, 1, 25, true));
        assert_eq!(v.limit(), 24);
        // Under half the limit in use: no change.
        v.on_sample(sample(5, 50, 5, false));
        assert_eq!(v.limit(), 24);
        // log10 scaling: at 100 and above, steps are 2 and β is 12.
        let mut big = Vegas::new(150, 1000, 0);
        big.on_sample(sample(0, 10, 150, false));
        big.on_sample(sample(1, 10, 150, false));
        assert_eq!(big.limit(), 162);
    }

    #[test]
    fn a_dropped_request_never_becomes_the_base_rtt() {
        let mut v = Vegas::default();
        v.on_sample(sample(0, 40, 20, false));
        // A refusal comes back in 1 ms.
        v.on_sample(sample(1, 1, 20, true));
        assert_eq!(v.rtt_noload(), Some(Duration::from_millis(40)));
        // So the next normal sample does not look like a 39 ms queue.
        let before = v.limit();
        v.on_sample(sample(2, 40, before, false));
        assert!(v.limit() > before);
    }

    #[test]
    fn base_rtt_is_measured_again_after_probing() {
        // The path's base latency rises from 10 to 30 ms for good: a probe
        // re-learns it instead of reading the new base as a queue forever.
        let mut v = Vegas::new(20, 1000, 7);
        let t = feed(&mut v, 0, 50, 10, false);
        let t = feed(&mut v, t, 5_000, 30, false);
        assert_eq!(v.rtt_noload(), Some(Duration::from_millis(30)));
        feed(&mut v, t, 100, 30, false);
        assert!(v.limit() > 20, "grows again at the new base: {}", v.limit());
    }

    #[test]
    fn same_seed_same_trace() {
        let run = |seed| {
            let mut v = Vegas::new(20, 1000, seed);
            let mut t = 0;
            let mut trace = Vec::new();
            for k in 0..200 {
                t = feed(&mut v, t, 7, 10 + (k % 5) * 3, k % 17 == 0);
                trace.push(v.limit());
            }
            trace
        };
        assert_eq!(run(3), run(3));
    }
}
