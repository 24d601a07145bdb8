//! CUBIC adaptive rate, as in the AWS SDKs' "adaptive" retry mode (the same
//! algorithm in botocore, Go v2, JS v3 and the Rust runtime).
//!
//! Why CUBIC rather than AIMD: after a cut the rate climbs back quickly while
//! far below the last rate that was throttled (`W_max`), flattens near it, and
//! only then probes beyond. Constants, all configurable:
//!
//! * `β = 0.7` — a throttle cuts the rate to 70 % of what we were sending;
//! * `C = 0.4` — the curve's scale; `rate(t) = C·(t − t_throttle − K)³ + W_max`
//!   with `K = ∛(W_max·(1 − β)/C)`, so the rate is back at `W_max` after `K`
//!   seconds (≈ 1.96 s for `W_max = 10`);
//! * the *measured* send rate is an EWMA over half-second buckets with weight
//!   0.8 on the newest bucket, and the new rate is capped at 2 × measured, so
//!   an idle client cannot bank rate;
//! * the pacer's rate is floored at 0.5/s and its capacity at 1;
//! * pacing is **disabled until the first throttle**: before it, sends are
//!   never delayed.
//!
//! [`Cubic`] is the controller alone ([`RateController`]); [`CubicStrategy`]
//! adds a core [`Pacer`] that every attempt passes through, and AWS standard
//! backoff between retries.

use std::time::Duration;

use super::backoff::{backoff_next, Backoff, BackoffConfig};
use super::config::{positive, within, ConfigError};
use super::pacer::{Pacer, RateController};
use super::{Next, Outcome, Signal, Strategy};
use ratewise::time::Timestamp;

/// Parameters of the [`Cubic`] controller, with the AWS SDK constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CubicConfig {
    /// Multiplicative cut on a throttle (0.7).
    pub beta: f64,
    /// CUBIC scale constant `C` (0.4).
    pub scale: f64,
    /// EWMA weight of the newest bucket (0.8).
    pub smooth: f64,
    /// Measurement bucket length (0.5 s).
    pub bucket: Duration,
    /// Floor of the pacing rate (0.5/s).
    pub min_fill_rate: f64,
    /// The measured rate before any bucket closes (0.5/s, as the Rust SDK).
    pub initial_measured_rate: f64,
}

impl Default for CubicConfig {
    fn default() -> Self {
        CubicConfig {
            beta: 0.7,
            scale: 0.4,
            smooth: 0.8,
            bucket: Duration::from_millis(500),
            min_fill_rate: 0.5,
            initial_measured_rate: 0.5,
        }
    }
}

/// The AWS adaptive-mode rate controller.
#[derive(Clone, Debug)]
pub struct Cubic {
    config: CubicConfig,
    enabled: bool,
    fill_rate: f64,
    measured: f64,
    last_max_rate: f64,
    last_throttle: f64,
    k: f64,
    /// Start of the current measurement bucket, in seconds; `None` before
    /// the first response.
    bucket_start: Option<f64>,
    count: u64,
}

impl Cubic {
    /// A controller with `config`.
    ///
    /// # Errors
    /// [`ConfigError`] for `beta` outside `(0, 1)`, `smooth` outside `[0, 1]`,
    /// or a non-positive scale, bucket, floor or initial rate.
    pub fn new(config: CubicConfig) -> Result<Self, ConfigError> {
        within("beta", config.beta, f64::MIN_POSITIVE, 0.999_999)?;
        positive("scale", config.scale)?;
        within("smooth", config.smooth, 0.0, 1.0)?;
        positive("bucket", config.bucket.as_secs_f64())?;
        positive("min_fill_rate", config.min_fill_rate)?;
        positive("initial_measured_rate", config.initial_measured_rate)?;
        Ok(Cubic {
            enabled: false,
            fill_rate: config.min_fill_rate,
            measured: config.initial_measured_rate,
            last_max_rate: 0.0,
            last_throttle: 0.0,
            k: 0.0,
            bucket_start: None,
            count: 0,
            config,
        })
    }

    /// Whether pacing has been enabled by a throttle.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The measured send rate (EWMA), requests per second.
    pub fn measured_rate(&self) -> f64 {
        self.measured
    }

    /// The pacing rate (meaningful once enabled).
    pub fn fill_rate(&self) -> f64 {
        self.fill_rate
    }

    /// `W_max`: the rate at the last throttle.
    pub fn last_max_rate(&self) -> f64 {
        self.last_max_rate
    }

    /// `K`: seconds from a throttle until the curve is back at `W_max`.
    pub fn time_window(&self) -> f64 {
        self.k
    }

    /// Counts one response at `t` seconds and updates the EWMA when a bucket
    /// closes (the response is counted in the bucket it closes, as the SDKs do).
    fn record(&mut self, t: f64) {
        let b = self.config.bucket.as_secs_f64();
        let bucket = (t / b).floor() * b;
        let start = *self.bucket_start.get_or_insert(bucket);
        self.count += 1;
        if bucket > start {
            let current = self.count as f64 / (bucket - start);
            self.measured =
                current * self.config.smooth + self.measured * (1.0 - self.config.smooth);
            self.count = 0;
            self.bucket_start = Some(bucket);
        }
    }

    /// The CUBIC curve at `t` seconds.
    fn cubic_rate(&self, t: f64) -> f64 {
        let dt = t - self.last_throttle - self.k;
        self.config.scale * dt * dt * dt + self.last_max_rate
    }
}

impl RateController for Cubic {
    fn name(&self) -> &str {
        "cubic"
    }

    fn rate(&self) -> Option<f64> {
        self.enabled.then_some(self.fill_rate)
    }

    fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) -> Option<f64> {
        let t = now.as_secs_f64();
        self.record(t);
        let new_rate = if outcome.signal == Signal::Throttled {
            let rate_to_use = if self.enabled {
                self.measured.min(self.fill_rate)
            } else {
                self.measured
            };
            self.last_max_rate = rate_to_use;
            self.k = (rate_to_use * (1.0 - self.config.beta) / self.config.scale).cbrt();
            self.last_throttle = t;
            self.enabled = true;
            rate_to_use * self.config.beta
        } else {
            self.cubic_rate(t)
        };
        let capped = new_rate.min(2.0 * self.measured);
        if capped.is_finite() {
            self.fill_rate = capped.max(self.config.min_fill_rate);
        }
        self.rate()
    }

    /// Once pacing, lowers the fill rate to `rate` (not below the floor), so
    /// a throttle under the limit starts from the limited rate. The curve
    /// itself is left alone: its next value is again bounded by twice the
    /// measured rate, which the limit held down. Before the first throttle
    /// CUBIC does not pace, and this does nothing.
    fn limit_to(&mut self, rate: f64) {
        if self.enabled && rate < self.fill_rate {
            self.fill_rate = rate.max(self.config.min_fill_rate);
        }
    }
}

/// [`Cubic`] driving a core [`Pacer`], with AWS standard backoff between
/// retries: the AWS SDKs' adaptive retry mode.
#[derive(Debug)]
pub struct CubicStrategy {
    cubic: Cubic,
    pacer: Pacer,
    backoff: Backoff,
    last: Duration,
}

impl CubicStrategy {
    /// A strategy from its parts.
    ///
    /// # Errors
    /// As [`Cubic::new`] and [`Backoff::new`].
    pub fn new(cubic: CubicConfig, backoff: BackoffConfig, seed: u64) -> Result<Self, ConfigError> {
        let controller = Cubic::new(cubic)?;
        let pacer = Pacer::new(cubic.min_fill_rate).map_err(|_| ConfigError::OutOfRange {
            field: "min_fill_rate",
            expected: "a rate a pacer can represent",
            value: cubic.min_fill_rate,
        })?;
        Ok(CubicStrategy {
            cubic: controller,
            pacer,
            backoff: Backoff::new(backoff, seed)?,
            last: Duration::ZERO,
        })
    }

    /// AWS adaptive mode: CUBIC constants and standard backoff
    /// (`min(1 s · 2^i, 20 s)` with full jitter, 3 attempts).
    ///
    /// # Errors
    /// Never with these constants; kept fallible for uniformity.
    pub fn aws_adaptive(seed: u64) -> Result<Self, ConfigError> {
        CubicStrategy::new(CubicConfig::default(), BackoffConfig::aws_standard(), seed)
    }

    /// The controller.
    pub fn controller(&self) -> &Cubic {
        &self.cubic
    }

    fn wait(&mut self, now: Timestamp, min_wait: Duration) -> Duration {
        self.last = if self.cubic.is_enabled() {
            self.pacer.acquire_at(now, now.saturating_add(min_wait))
        } else {
            min_wait
        };
        self.last
    }
}

impl Strategy for CubicStrategy {
    fn name(&self) -> &str {
        "cubic"
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        self.backoff.reset();
        self.wait(now, Duration::ZERO)
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        if let Some(rate) = self.cubic.on_outcome(now, outcome) {
            self.pacer.set_rate_at(rate, now);
        }
        match backoff_next(&mut self.backoff, outcome) {
            Next::Retry(d) => Next::Retry(self.wait(now, d)),
            end => end,
        }
    }

    fn current_delay(&self) -> Duration {
        self.last
    }

    fn current_rate(&self) -> Option<f64> {
        self.cubic.rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> Timestamp {
        Timestamp::from_secs_f64(secs)
    }

    /// Feeds successes at exactly `rate` per second from `from` to `to`.
    fn send_steadily(c: &mut Cubic, rate: f64, from: f64, to: f64) {
        let n = ((to - from) * rate).round() as u64;
        for i in 0..n {
            c.on_outcome(at(from + i as f64 / rate), &Outcome::success());
        }
    }

    #[test]
    fn disabled_until_the_first_throttle() {
        let mut c = Cubic::new(CubicConfig::default()).unwrap();
        send_steadily(&mut c, 10.0, 0.0, 5.0);
        assert_eq!(c.rate(), None);
        assert!(
            (c.measured_rate() - 10.0).abs() < 0.1,
            "{}",
            c.measured_rate()
        );
    }

    #[test]
    fn trajectory_after_a_throttle() {
        let mut c = Cubic::new(CubicConfig::default()).unwrap();
        send_steadily(&mut c, 10.0, 0.0, 10.0);
        let m = c.measured_rate();
        c.on_outcome(at(10.0), &Outcome::throttled());
        // Cut to β × measured; W_max = measured; K = ∛(W_max·0.3/0.4).
        let w_max = c.last_max_rate();
        assert!((w_max - m).abs() < 0.5, "W_max {w_max} vs measured {m}");
        assert!((c.rate().unwrap() - 0.7 * w_max).abs() < 1e-9);
        let k = c.time_window();
        assert!((k - (w_max * 0.3 / 0.4).cbrt()).abs() < 1e-12);
        assert!(
            (k - 1.96).abs() < 0.05,
            "K ≈ 1.96 s for W_max ≈ 10, got {k}"
        );
        // Keep sending at 10/s: the rate follows the CUBIC curve (capped at
        // 2 × measured, which does not bind here) back to W_max at t + K.
        let mut prev = c.rate().unwrap();
        let mut t = 10.0;
        while t < 10.0 + k {
            t += 0.1;
            let r = c.on_outcome(at(t), &Outcome::success()).unwrap();
            let curve = 0.4 * (t - 10.0 - k).powi(3) + w_max;
            assert!(curve < 2.0 * c.measured_rate(), "cap does not bind");
            assert!((r - curve).abs() < 1e-6, "t {t}: {r} vs {curve}");
            assert!(r > prev, "the curve climbs");
            prev = r;
        }
        let at_k = 0.4 * (10.0 + k - 10.0 - k).powi(3) + w_max;
        assert!((at_k - w_max).abs() < 1e-12);
        assert!(
            (prev - w_max).abs() < 0.05,
            "back near W_max after K: {prev}"
        );
    }

    #[test]
    fn rate_is_capped_at_twice_the_measured_rate_and_floored() {
        let mut c = Cubic::new(CubicConfig::default()).unwrap();
        send_steadily(&mut c, 2.0, 0.0, 10.0);
        c.on_outcome(at(10.0), &Outcome::throttled());
        // Long after, the cubic curve is huge; the cap holds it at 2 × measured.
        let r = c.on_outcome(at(100.0), &Outcome::success()).unwrap();
        assert!((r - 2.0 * c.measured_rate()).abs() < 1e-9);
        // Throttled at a trickle: never below 0.5/s.
        let mut c = Cubic::new(CubicConfig::default()).unwrap();
        for i in 0..20 {
            c.on_outcome(at(f64::from(i) * 5.0), &Outcome::throttled());
        }
        assert!(c.rate().unwrap() >= 0.5);
    }

    #[test]
    fn strategy_paces_only_after_a_throttle() {
        let mut s = CubicStrategy::aws_adaptive(1).unwrap();
        for i in 0..20 {
            let t = at(f64::from(i) * 0.1);
            assert_eq!(s.before_call(t), Duration::ZERO);
            assert_eq!(s.after_attempt(t, &Outcome::success()), Next::Done);
        }
        let t = at(2.0);
        assert!(matches!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(_)
        ));
        assert!(s.current_rate().is_some());
        // Now back-to-back calls at the same instant queue behind the pacer.
        let waits: Vec<_> = (0..5).map(|_| s.before_call(t)).collect();
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert!(waits[4] > Duration::ZERO);
    }
}
