//! The AutoSleeper: a "responsive" exponential backoff whose delay goes up by
//! one factor on every throttled response and comes down by another after
//! every `down_threshold` successes.
//!
//! Source: "Responsive exponential backoff in Go" (reference 000), written for
//! many workers writing to DynamoDB while its capacity autoscales. Unlike a
//! per-call backoff, the delay is kept across calls and paces *every* request:
//! the sleeper sleeps its current interval after a failure *and* after a
//! success, so a found delay keeps the client under the limit until enough
//! successes suggest the capacity has grown.
//!
//! Rules, as in the source:
//! * **up** (on a throttled response): from zero, the interval becomes
//!   `initial`; otherwise `interval · up_multiplier`, randomised, capped at
//!   `max_interval`.
//! * **down** (on every `down_threshold`-th consecutive success while the
//!   interval is non-zero): `interval · down_multiplier`, randomised; below
//!   `initial` it drops to zero.
//! * **randomisation**: `v ± min(factor · v, max_randomization)`, uniform.
//!   Factor 0 means no randomisation.
//! * Intervals are whole nanoseconds, truncated after each step (Go's
//!   `time.Duration(float)`).
//!
//! In [`Strategy`] terms the sleep after a success is paid before the next
//! call ([`Strategy::before_call`]), and the sleep after a failure is the
//! retry delay. Only [`Signal::Throttled`] counts as a failure; other
//! failures end the call without changing the delay (leave them to a
//! [`backoff`](super::backoff) policy).

use std::time::Duration;

use crate::JitterRng;
use rand::Rng;

use super::config::{at_least, at_least_one, within, ConfigError};
use super::{Next, Outcome, Signal, Strategy};
use crate::config::duration_to_nanos_saturating;
use ratewise::time::Timestamp;

/// The AutoSleeper's parameters, with the source's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoSleeperConfig {
    /// First interval after a failure from zero, and the floor below which a
    /// decrease drops to zero (default 500 ms).
    pub initial_interval: Duration,
    /// Largest interval (default 15 min).
    pub max_interval: Duration,
    /// Largest randomisation, either way (default 2 min).
    pub max_randomization: Duration,
    /// Factor on each failure (default 1.5; ≥ 1).
    pub up_multiplier: f64,
    /// Factor on each decrease (default 0.9; in `(0, 1]`).
    pub down_multiplier: f64,
    /// Randomisation as a fraction of the interval (default 0.3; in `[0, 1]`).
    pub randomization_factor: f64,
    /// Successes in a row that trigger one decrease (default 10; ≥ 1).
    pub down_threshold: u32,
}

impl Default for AutoSleeperConfig {
    fn default() -> Self {
        AutoSleeperConfig {
            initial_interval: Duration::from_millis(500),
            max_interval: Duration::from_secs(15 * 60),
            max_randomization: Duration::from_secs(2 * 60),
            up_multiplier: 1.5,
            down_multiplier: 0.9,
            randomization_factor: 0.3,
            down_threshold: 10,
        }
    }
}

/// The AutoSleeper's counters, as in the source's `AutoSleeperMetrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoSleeperMetrics {
    /// Outcomes reported (successes and failures).
    pub invocations: u64,
    /// Increases.
    pub went_up: u64,
    /// Decreases.
    pub went_down: u64,
    /// Non-zero sleeps asked for.
    pub slept: u64,
    /// Sum of all sleeps asked for.
    pub total_sleep: Duration,
}

/// The responsive exponential backoff of reference 000. See the module docs.
#[derive(Clone, Debug)]
pub struct AutoSleeper {
    config: AutoSleeperConfig,
    rng: JitterRng,
    interval: Duration,
    successes: u32,
    /// Sleep owed after the previous call's success, paid before the next.
    pending: Duration,
    metrics: AutoSleeperMetrics,
}

impl AutoSleeper {
    /// An AutoSleeper with `config` and randomisation drawn from `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] when a multiplier, factor or threshold is out of range,
    /// or `max_interval < initial_interval`.
    pub fn new(config: AutoSleeperConfig, seed: u64) -> Result<Self, ConfigError> {
        at_least("up_multiplier", config.up_multiplier, 1.0)?;
        within(
            "down_multiplier",
            config.down_multiplier,
            f64::MIN_POSITIVE,
            1.0,
        )?;
        within(
            "randomization_factor",
            config.randomization_factor,
            0.0,
            1.0,
        )?;
        at_least_one("down_threshold", config.down_threshold)?;
        if config.max_interval < config.initial_interval {
            return Err(ConfigError::Inconsistent(
                "max_interval must be at least initial_interval",
            ));
        }
        Ok(AutoSleeper {
            config,
            rng: JitterRng::seed_from_u64(seed),
            interval: Duration::ZERO,
            successes: 0,
            pending: Duration::ZERO,
            metrics: AutoSleeperMetrics::default(),
        })
    }

    /// The counters so far.
    pub fn metrics(&self) -> AutoSleeperMetrics {
        self.metrics
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The source's `SleepOnFailure`: go up, and return the sleep.
    pub fn on_failure(&mut self) -> Duration {
        self.metrics.invocations += 1;
        self.go_up();
        self.sleep()
    }

    /// The source's `SleepOnSuccess`: count the success, go down on every
    /// `down_threshold`-th one, and return the sleep (zero while the interval
    /// is zero).
    pub fn on_success(&mut self) -> Duration {
        self.metrics.invocations += 1;
        if self.interval.is_zero() {
            return Duration::ZERO;
        }
        self.successes += 1;
        if self.successes >= self.config.down_threshold {
            self.successes = 0;
            self.go_down();
        }
        self.sleep()
    }

    fn sleep(&mut self) -> Duration {
        if !self.interval.is_zero() {
            self.metrics.slept += 1;
            self.metrics.total_sleep = self.metrics.total_sleep.saturating_add(self.interval);
        }
        self.interval
    }

    fn randomize(&mut self, v: f64) -> f64 {
        let f = self.config.randomization_factor;
        if f == 0.0 {
            return v;
        }
        let delta = (f * v).min(nanos_f64(self.config.max_randomization));
        let u: f64 = self.rng.random();
        v - delta + 2.0 * delta * u
    }

    fn go_up(&mut self) {
        self.metrics.went_up += 1;
        if self.interval.is_zero() {
            self.interval = self.config.initial_interval;
            return;
        }
        let v = self.randomize(nanos_f64(self.interval) * self.config.up_multiplier);
        self.interval = if v > nanos_f64(self.config.max_interval) {
            self.config.max_interval
        } else {
            truncate_nanos(v)
        };
    }

    fn go_down(&mut self) {
        self.metrics.went_down += 1;
        let v = self.randomize(nanos_f64(self.interval) * self.config.down_multiplier);
        self.interval = if v < nanos_f64(self.config.initial_interval) {
            Duration::ZERO
        } else {
            truncate_nanos(v)
        };
    }
}

fn nanos_f64(d: Duration) -> f64 {
    duration_to_nanos_saturating(d) as f64
}

/// Go's `time.Duration(float64)`: truncation to whole nanoseconds.
fn truncate_nanos(v: f64) -> Duration {
    if v.is_nan() || v <= 0.0 {
        Duration::ZERO
    } else if v >= u64::MAX as f64 {
        Duration::from_nanos(u64::MAX)
    } else {
        Duration::from_nanos(v as u64)
    }
}

impl Strategy for AutoSleeper {
    fn name(&self) -> &str {
        "auto_sleeper"
    }

    fn before_call(&mut self, _now: Timestamp) -> Duration {
        std::mem::take(&mut self.pending)
    }

    fn after_attempt(&mut self, _now: Timestamp, outcome: &Outcome) -> Next {
        match outcome.signal {
            Signal::Throttled => Next::Retry(self.on_failure()),
            Signal::Success => {
                self.pending = self.on_success();
                Next::Done
            }
            _ => Next::Done,
        }
    }

    fn current_delay(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings of the source's graph: initial 1 ms, ×1.5 up, ×0.6 down,
    /// no randomisation, threshold 5.
    fn graph() -> AutoSleeper {
        AutoSleeper::new(
            AutoSleeperConfig {
                initial_interval: Duration::from_millis(1),
                up_multiplier: 1.5,
                down_multiplier: 0.6,
                randomization_factor: 0.0,
                down_threshold: 5,
                ..AutoSleeperConfig::default()
            },
            0,
        )
        .unwrap()
    }

    #[test]
    fn graph_settings_climb_to_291_9_ms() {
        let mut s = graph();
        let mut want: u64 = 1_000_000;
        let mut got = vec![];
        for i in 0..15 {
            let d = s.on_failure();
            if i > 0 {
                want = (want as f64 * 1.5) as u64; // truncation, as Go does
            }
            assert_eq!(d, Duration::from_nanos(want), "failure {i}");
            got.push(d);
        }
        // "requests were failing till it reached 291.9 ms": 1 ms · 1.5^14.
        let last = got[14].as_secs_f64() * 1000.0;
        assert!((last - 291.9).abs() < 0.05, "{last}");
        let m = s.metrics();
        assert_eq!(
            (m.invocations, m.went_up, m.went_down, m.slept),
            (15, 15, 0, 15)
        );
        let total: Duration = got.iter().sum();
        assert_eq!(m.total_sleep, total);
    }

    #[test]
    fn goes_down_every_threshold_successes_and_drops_to_zero_below_initial() {
        let mut s = graph();
        for _ in 0..3 {
            s.on_failure(); // 1 ms, 1.5 ms, 2.25 ms
        }
        assert_eq!(s.interval(), Duration::from_nanos(2_250_000));
        for _ in 0..4 {
            assert_eq!(s.on_success(), Duration::from_nanos(2_250_000));
        }
        assert_eq!(
            s.on_success(),
            Duration::from_nanos(1_350_000),
            "5th success: ×0.6"
        );
        for _ in 0..5 {
            s.on_success();
        }
        // 1.35 ms × 0.6 = 0.81 ms < 1 ms initial → zero.
        assert_eq!(s.interval(), Duration::ZERO);
        assert_eq!(s.metrics().went_down, 2);
        // At zero, successes neither count nor sleep.
        let before = s.metrics();
        assert_eq!(s.on_success(), Duration::ZERO);
        assert_eq!(s.metrics().slept, before.slept);
        assert_eq!(s.metrics().invocations, before.invocations + 1);
    }

    #[test]
    fn caps_at_max_interval() {
        let mut s = AutoSleeper::new(
            AutoSleeperConfig {
                max_interval: Duration::from_secs(2),
                randomization_factor: 0.0,
                ..AutoSleeperConfig::default()
            },
            0,
        )
        .unwrap();
        for _ in 0..20 {
            s.on_failure();
        }
        assert_eq!(s.interval(), Duration::from_secs(2));
    }

    #[test]
    fn randomization_stays_within_factor_and_max() {
        let mut s = AutoSleeper::new(AutoSleeperConfig::default(), 11).unwrap();
        s.on_failure(); // 500 ms exactly
        for _ in 0..8 {
            let before = s.interval().as_secs_f64();
            let after = s.on_failure().as_secs_f64();
            let center = before * 1.5;
            let delta = (0.3 * center).min(120.0);
            assert!(after >= center - delta - 1e-6 && after <= center + delta + 1e-6);
        }
    }

    #[test]
    fn strategy_paces_after_success_and_retries_on_throttle() {
        let mut s = graph();
        let t = Timestamp::ZERO;
        assert_eq!(s.before_call(t), Duration::ZERO);
        assert_eq!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(Duration::from_millis(1))
        );
        assert_eq!(s.after_attempt(t, &Outcome::success()), Next::Done);
        assert_eq!(
            s.before_call(t),
            Duration::from_millis(1),
            "sleep after success"
        );
        assert_eq!(s.before_call(t), Duration::ZERO, "paid once");
    }

    #[test]
    fn defaults_and_validation() {
        let d = AutoSleeperConfig::default();
        assert_eq!(d.initial_interval, Duration::from_millis(500));
        assert_eq!(d.max_interval, Duration::from_secs(900));
        assert_eq!(d.max_randomization, Duration::from_secs(120));
        assert_eq!(
            (d.up_multiplier, d.down_multiplier, d.randomization_factor),
            (1.5, 0.9, 0.3)
        );
        assert_eq!(d.down_threshold, 10);
        let bad = AutoSleeperConfig {
            down_threshold: 0,
            ..d
        };
        assert!(AutoSleeper::new(bad, 0).is_err());
        let bad = AutoSleeperConfig {
            down_multiplier: 0.0,
            ..d
        };
        assert!(AutoSleeper::new(bad, 0).is_err());
    }
}
