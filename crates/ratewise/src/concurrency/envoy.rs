//! [`EnvoyGradient`]: Envoy's adaptive-concurrency gradient controller.

use std::time::Duration;

use rand::{Rng, SeedableRng};

use super::{LimitAlgorithm, Sample};
use crate::time::Timestamp;

/// Envoy's adaptive-concurrency filter (gradient controller), with its
/// defaults:
///
/// * **minRTT** is measured with the concurrency pinned to 3 (Envoy #9007
///   raised it from 1, because retries overflowed) until 50 samples are in;
///   it is the 50th percentile of those samples. It is measured again every
///   60 s plus up to 15 % jitter (Envoy #8337), and also after 5 consecutive
///   update windows at the minimum limit (Envoy #10647).
/// * Every 100 ms, **sampleRTT** is the 50th percentile of the window's
///   latencies; `gradient = clamp((minRTT + B) / sampleRTT, 0.5, 2.0)` with a
///   buffer `B` of 25 % of minRTT; with `scaled = gradient × limit`, the
///   new limit is `⌊scaled + √scaled⌋`, within `[3, 1000]`.
///
/// A sample from a request that started before the current measurement
/// phase is discarded (its permit carries the phase's epoch): Envoy #11579,
/// where samples from the previous epoch skewed minRTT upwards. Dropped
/// requests are not latency samples. The phase changes happen when a sample
/// arrives (the controller is told the time only through samples), so an
/// idle controller changes nothing.
#[derive(Clone, Debug)]
pub struct EnvoyGradient {
    limit: f64,
    min_limit: f64,
    max_limit: f64,
    probe: usize,
    buffer: f64,
    percentile: f64,
    update_interval: Duration,
    min_rtt_interval: Duration,
    jitter: f64,
    request_count: usize,
    min_rtt: Option<Duration>,
    measuring: bool,
    window_start: Option<Timestamp>,
    next_measurement: Timestamp,
    at_min: u32,
    samples: Vec<Duration>,
    epoch: u64,
    rng: rand_chacha::ChaCha8Rng,
}

impl Default for EnvoyGradient {
    fn default() -> Self {
        EnvoyGradient::new(0)
    }
}

impl EnvoyGradient {
    /// A controller with Envoy's defaults; `seed` drives the jitter of the
    /// minRTT schedule, so runs replay exactly. It starts by measuring
    /// minRTT.
    pub fn new(seed: u64) -> Self {
        EnvoyGradient {
            limit: 3.0,
            min_limit: 3.0,
            max_limit: 1000.0,
            probe: 3,
            buffer: 0.25,
            percentile: 0.5,
            update_interval: Duration::from_millis(100),
            min_rtt_interval: Duration::from_secs(60),
            jitter: 0.15,
            request_count: 50,
            min_rtt: None,
            measuring: true,
            window_start: None,
            next_measurement: Timestamp::MAX,
            at_min: 0,
            samples: Vec::new(),
            epoch: 0,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// How often minRTT is measured again (before jitter).
    pub fn with_min_rtt_interval(mut self, interval: Duration) -> Self {
        self.min_rtt_interval = interval;
        self
    }

    /// The smallest limit outside a minRTT measurement (3 by default),
    /// separate from the probe concurrency of a measurement, which stays 3
    /// (Envoy #46602: `min_concurrency` once set both, so a higher floor
    /// also made every measurement run at that concurrency and read a
    /// queued minRTT). At least 1; the largest limit is raised to it if
    /// needed.
    pub fn with_min_limit(mut self, min: usize) -> Self {
        self.min_limit = min.max(1) as f64;
        self.max_limit = self.max_limit.max(self.min_limit);
        self.limit = self.limit.max(self.min_limit);
        self
    }

    /// The largest limit.
    pub fn with_max_limit(mut self, max: usize) -> Self {
        self.max_limit = (max as f64).max(self.min_limit);
        self
    }

    /// The measured minRTT, once there is one.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Whether minRTT is being measured (the limit is pinned to 3).
    pub fn is_measuring(&self) -> bool {
        self.measuring
    }

    fn percentile(samples: &mut [Duration], p: f64) -> Duration {
        samples.sort_unstable();
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[i.min(samples.len() - 1)]
    }

    fn start_measuring(&mut self) {
        self.measuring = true;
        self.samples.clear();
        self.epoch += 1;
        self.at_min = 0;
    }

    fn schedule_next(&mut self, now: Timestamp) {
        let jitter = self.rng.random_range(0.0..=self.jitter);
        self.next_measurement = now + self.min_rtt_interval.mul_f64(1.0 + jitter);
    }
}

impl LimitAlgorithm for EnvoyGradient {
    fn limit(&self) -> usize {
        if self.measuring {
            self.probe
        } else {
            self.limit as usize
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn on_sample(&mut self, s: Sample) {
        if s.epoch != self.epoch || s.dropped {
            return;
        }
        self.samples.push(s.rtt);
        if self.measuring {
            if self.samples.len() >= self.request_count {
                self.min_rtt = Some(Self::percentile(&mut self.samples, self.percentile));
                self.samples.clear();
                self.measuring = false;
                self.epoch += 1;
                self.window_start = Some(s.now);
                self.schedule_next(s.now);
            }
            return;
        }
        let window_start = *self.window_start.get_or_insert(s.now);
        if s.now < window_start + self.update_interval {
            return;
        }
        let (Some(min_rtt), false) = (self.min_rtt, self.samples.is_empty()) else {
            return;
        };
        let sample_rtt = Self::percentile(&mut self.samples, self.percentile);
        self.samples.clear();
        self.window_start = Some(s.now);
        let min = min_rtt.as_secs_f64();
        let gradient = super::clamp(
            min * (1.0 + self.buffer) / sample_rtt.as_secs_f64().max(1e-9),
            0.5,
            2.0,
        );
        // As Envoy computes it: the headroom is the square root of the
        // scaled limit, and the new limit is a whole number.
        let scaled = gradient * self.limit;
        let next = (scaled + scaled.sqrt()).floor();
        self.limit = super::clamp(next, self.min_limit, self.max_limit);
        if self.limit <= self.min_limit {
            self.at_min += 1;
        } else {
            self.at_min = 0;
        }
        if self.at_min >= 5 || s.now >= self.next_measurement {
            self.start_measuring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrency::test_support::sample;

    /// Feeds samples of `rtt_ms` every `step_ms` from `t_ms` for `count`
    /// samples, in the controller's current epoch; returns the time after.
    fn run(e: &mut EnvoyGradient, t_ms: u64, count: u64, step_ms: u64, rtt_ms: u64) -> u64 {
        let mut t = t_ms;
        for _ in 0..count {
            let mut s = sample(t, rtt_ms, e.limit(), false);
            s.epoch = e.epoch();
            e.on_sample(s);
            t += step_ms;
        }
        t
    }

    #[test]
    fn measures_min_rtt_at_three_then_follows_the_gradient() {
        let mut e = EnvoyGradient::new(1);
        assert!(e.is_measuring());
        assert_eq!(e.limit(), 3, "probe concurrency 3 (Envoy #9007)");
        let t = run(&mut e, 0, 49, 1, 10);
        assert!(e.is_measuring(), "50 samples are needed");
        let t = run(&mut e, t, 1, 1, 10);
        assert!(!e.is_measuring());
        assert_eq!(e.min_rtt(), Some(Duration::from_millis(10)));
        // Latency at minRTT: gradient = 1.25 (the 25 % buffer), so after
        // the first 100 ms window the limit is ⌊3.75 + √3.75⌋ = 5.
        let t = run(&mut e, t, 101, 1, 10);
        assert_eq!(e.limit(), 5);
        // Latency 4× minRTT: gradient at its floor 0.5, the limit shrinks
        // to half plus √limit each window.
        let t = run(&mut e, t, 2_000, 1, 10);
        let high = e.limit;
        assert!(high > 100.0, "{high}");
        run(&mut e, t, 101, 1, 40);
        let scaled = 0.5 * high;
        assert_eq!(e.limit, (scaled + scaled.sqrt()).floor());
    }

    /// Feeds samples of `rtt_ms` every millisecond from `t_ms` until a
    /// minRTT measurement starts; returns when it started.
    fn until_measuring(e: &mut EnvoyGradient, t_ms: u64, rtt_ms: u64) -> u64 {
        let mut t = t_ms;
        while !e.is_measuring() {
            assert!(t < t_ms + 100_000, "no measurement started");
            t = run(e, t, 1, 1, rtt_ms);
        }
        t
    }

    #[test]
    fn min_rtt_is_measured_again_on_schedule_with_jitter() {
        let mut e = EnvoyGradient::new(9).with_min_rtt_interval(Duration::from_secs(1));
        let ended = run(&mut e, 0, 50, 1, 10) - 1;
        // The next measurement starts 1 s plus up to 15 % later (checked at
        // the first sample of the next 100 ms window).
        let started = until_measuring(&mut e, ended + 1, 10);
        assert!(
            (ended + 1_000..=ended + 1_150 + 101).contains(&started),
            "ended {ended}, started again {started}"
        );
        // The base latency rose to 30 ms: the new minRTT says so.
        run(&mut e, started, 50, 1, 30);
        assert_eq!(e.min_rtt(), Some(Duration::from_millis(30)));
        // Different seeds jitter differently.
        let starts: std::collections::BTreeSet<u64> = (0..8)
            .map(|seed| {
                let mut e = EnvoyGradient::new(seed).with_min_rtt_interval(Duration::from_secs(1));
                let t = run(&mut e, 0, 50, 1, 10);
                until_measuring(&mut e, t, 10)
            })
            .collect();
        assert!(starts.len() > 1, "{starts:?}");
    }

    #[test]
    fn five_windows_at_the_minimum_force_a_measurement() {
        // Envoy #10647: stuck at the minimum because minRTT is stale.
        let mut e = EnvoyGradient::new(2);
        let t = run(&mut e, 0, 50, 1, 10);
        // Latency far above minRTT: the limit falls to 3 and sits there;
        // the fifth window at the minimum starts a measurement, long before
        // the 60 s schedule.
        let started = until_measuring(&mut e, t, 100);
        assert!(started < t + 2_000, "{started}");
        run(&mut e, started, 50, 1, 100);
        assert_eq!(e.min_rtt(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn the_floor_is_not_the_probe_concurrency() {
        // Envoy #46602: a floor of 10 must not make the minRTT measurement
        // run at 10 in flight.
        let mut e = EnvoyGradient::new(4).with_min_limit(10);
        assert!(e.is_measuring());
        assert_eq!(e.limit(), 3, "measures at the probe concurrency");
        let t = run(&mut e, 0, 50, 1, 10);
        assert_eq!(e.min_rtt(), Some(Duration::from_millis(10)));
        // Latency far above minRTT: the limit falls to the floor, not to 3.
        run(&mut e, t, 300, 1, 100);
        assert!(e.is_measuring() || e.limit() >= 10, "{}", e.limit());
        let mut e = EnvoyGradient::new(4).with_min_limit(10);
        let t = run(&mut e, 0, 50, 1, 10);
        run(&mut e, t, 150, 1, 100);
        assert_eq!(e.limit(), 10);
    }

    #[test]
    fn samples_from_an_earlier_phase_are_discarded() {
        // Envoy #11579: requests that started before the measurement phase
        // (at a higher concurrency, so slower) must not skew minRTT.
        let mut e = EnvoyGradient::new(3);
        let stale_epoch = e.epoch() + 99;
        for t in 0..100 {
            let mut s = sample(t, 500, 3, false);
            s.epoch = stale_epoch;
            e.on_sample(s);
        }
        assert!(e.is_measuring());
        assert_eq!(e.min_rtt(), None);
        run(&mut e, 100, 50, 1, 10);
        assert_eq!(e.min_rtt(), Some(Duration::from_millis(10)));
    }
}
