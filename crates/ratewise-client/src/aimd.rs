//! Adaptive client rate limiting combined with backoff, after reference 001
//! ("Rate limiting vs throttling"): exponential backoff alone is a poor
//! citizen, because after backing off it returns to hammering at full speed.
//!
//! Two parts, usable separately:
//! * [`Aimd`] — a rate controller: start at an aggressive rate, cut it
//!   multiplicatively on every throttled response, feel back up additively
//!   after a number of successes, always within `[min_rate, max_rate]`.
//! * [`DiscountedBackoff`] — a backoff whose retry count survives between
//!   calls and is *discounted* by one after every `discount_after`
//!   unthrottled requests, so short events cost short waits and sustained
//!   throttling costs long ones, and a quiet period returns it to zero.
//!
//! [`AimdStrategy`] puts both behind a core [`Pacer`]: every attempt, retries
//! included, takes a slot at the controller's current rate.
//!
//! Defaults follow 001's worked example: start at 10 requests/s, halve on a
//! throttle, discount the retry count after 10 unthrottled requests. The
//! additive step (+0.5/s per 10 successes) and the floor (0.1/s) are
//! ratewise's choices; 001 asks only for "an incremental linear return based
//! on the number of successful requests".
//!
//! Invariant: `min_rate ≤ rate ≤ max_rate` at all times.

use std::time::Duration;

use super::backoff::{call_end, honouring_retry_after, Backoff, BackoffConfig};
use super::config::{at_least, at_least_one, rate_range_and_decrease, within, ConfigError};
use super::pacer::{Pacer, RateController};
use super::{Next, Outcome, Signal, Strategy};
use ratewise::time::Timestamp;

/// Parameters of the [`Aimd`] controller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AimdConfig {
    /// Starting rate, requests per second (default 10: "slightly aggressive").
    pub initial_rate: f64,
    /// Floor (default 0.1/s).
    pub min_rate: f64,
    /// Ceiling (default 10/s, the starting rate).
    pub max_rate: f64,
    /// Factor applied on a throttle (default 0.5, "halving"); in `(0, 1)`.
    pub decrease_factor: f64,
    /// Added after every `increase_every` successes (default 0.5/s).
    pub increase_step: f64,
    /// Successes per additive step (default 10; ≥ 1).
    pub increase_every: u32,
    /// Throttles within this long after a cut are ignored (default zero:
    /// every throttle cuts, as reference 001 describes). With many requests
    /// in flight, a burst of 429s answers *one* overshoot; a cooldown of a
    /// few round trips keeps it from cutting the rate once per request.
    pub decrease_cooldown: Duration,
}

impl Default for AimdConfig {
    fn default() -> Self {
        AimdConfig {
            initial_rate: 10.0,
            min_rate: 0.1,
            max_rate: 10.0,
            decrease_factor: 0.5,
            increase_step: 0.5,
            increase_every: 10,
            decrease_cooldown: Duration::ZERO,
        }
    }
}

impl AimdConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        rate_range_and_decrease(self.min_rate, self.max_rate, self.decrease_factor)?;
        within(
            "initial_rate",
            self.initial_rate,
            self.min_rate,
            self.max_rate,
        )?;
        at_least("increase_step", self.increase_step, 0.0)?;
        at_least_one("increase_every", self.increase_every)?;
        Ok(())
    }
}

/// Additive-increase, multiplicative-decrease rate controller.
#[derive(Clone, Debug)]
pub struct Aimd {
    config: AimdConfig,
    rate: f64,
    successes: u32,
    last_cut: Option<Timestamp>,
}

impl Aimd {
    /// A controller at `config.initial_rate`.
    ///
    /// # Errors
    /// [`ConfigError`] for non-positive or inconsistent rates, a decrease
    /// factor outside `(0, 1)`, or `increase_every = 0`.
    pub fn new(config: AimdConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Aimd {
            rate: config.initial_rate,
            config,
            successes: 0,
            last_cut: None,
        })
    }

    /// The current rate.
    pub fn current(&self) -> f64 {
        self.rate
    }
}

impl RateController for Aimd {
    fn name(&self) -> &str {
        "aimd"
    }

    fn rate(&self) -> Option<f64> {
        Some(self.rate)
    }

    fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) -> Option<f64> {
        match outcome.signal {
            Signal::Throttled => {
                self.successes = 0;
                let cooling = self
                    .last_cut
                    .is_some_and(|t| now < t.saturating_add(self.config.decrease_cooldown));
                if !cooling {
                    self.rate = (self.rate * self.config.decrease_factor).max(self.config.min_rate);
                    self.last_cut = Some(now);
                }
            }
            Signal::Success => {
                self.successes += 1;
                if self.successes >= self.config.increase_every {
                    self.successes = 0;
                    self.rate = (self.rate + self.config.increase_step).min(self.config.max_rate);
                }
            }
            _ => {}
        }
        Some(self.rate)
    }

    /// Lowers the rate to `rate` (not below `min_rate`); the additive
    /// increase then climbs back from there.
    fn limit_to(&mut self, rate: f64) {
        if rate < self.rate {
            self.rate = rate.max(self.config.min_rate);
        }
    }
}

/// A backoff whose retry count persists across calls and decays after
/// successes (reference 001).
#[derive(Clone, Debug)]
pub struct DiscountedBackoff {
    backoff: Backoff,
    discount_after: u32,
    level: u32,
    clean: u32,
}

impl DiscountedBackoff {
    /// `config` gives the delay for each level (its `max_retries` is the
    /// per-call limit); `discount_after` unthrottled requests lower the level
    /// by one (001's example: 10).
    ///
    /// # Errors
    /// As [`Backoff::new`], or `discount_after = 0`.
    pub fn new(config: BackoffConfig, discount_after: u32, seed: u64) -> Result<Self, ConfigError> {
        at_least_one("discount_after", discount_after)?;
        Ok(DiscountedBackoff {
            backoff: Backoff::new(config, seed)?,
            discount_after,
            level: 0,
            clean: 0,
        })
    }

    /// The current retry level (0 after a quiet period).
    pub fn level(&self) -> u32 {
        self.level
    }

    /// The per-call retry limit of the underlying policy.
    pub fn max_retries(&self) -> Option<u32> {
        self.backoff.config().max_retries
    }

    /// A throttle: the delay for the current level, then one level up.
    pub fn on_throttle(&mut self) -> Duration {
        let d = self.backoff.delay_for(self.level);
        self.level = self.level.saturating_add(1);
        self.clean = 0;
        d
    }

    /// An unthrottled request: every `discount_after` of them lower the level.
    pub fn on_success(&mut self) {
        self.clean += 1;
        if self.clean >= self.discount_after {
            self.clean = 0;
            self.level = self.level.saturating_sub(1);
        }
    }
}

/// [`Aimd`] pacing plus [`DiscountedBackoff`]: reference 001 in full.
#[derive(Debug)]
pub struct AimdStrategy {
    aimd: Aimd,
    pacer: Pacer,
    backoff: DiscountedBackoff,
    call_retries: u32,
    last: Duration,
}

impl AimdStrategy {
    /// A strategy from its parts; the pacer starts at `aimd.initial_rate`
    /// with a burst of one (smooth pacing).
    ///
    /// # Errors
    /// As [`Aimd::new`] and [`DiscountedBackoff::new`].
    pub fn new(
        aimd: AimdConfig,
        backoff: BackoffConfig,
        discount_after: u32,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        let controller = Aimd::new(aimd)?;
        let pacer = Pacer::new(aimd.initial_rate)
            .and_then(|p| p.with_burst(1))
            .map_err(|_| ConfigError::OutOfRange {
                field: "initial_rate",
                expected: "a rate a pacer can represent",
                value: aimd.initial_rate,
            })?;
        Ok(AimdStrategy {
            aimd: controller,
            pacer,
            backoff: DiscountedBackoff::new(backoff, discount_after, seed)?,
            call_retries: 0,
            last: Duration::ZERO,
        })
    }

    /// 001's defaults: 10/s start, halve, +0.5/s per 10 successes, backoff
    /// 100 ms × 2ⁿ (full jitter, capped at 20 s, 5 retries per call),
    /// discounted after 10 unthrottled requests.
    ///
    /// # Errors
    /// Never with these constants; kept fallible for uniformity.
    pub fn with_defaults(seed: u64) -> Result<Self, ConfigError> {
        AimdStrategy::new(
            AimdConfig::default(),
            BackoffConfig::default().with_max_retries(5),
            10,
            seed,
        )
    }

    /// The backoff's current retry level.
    pub fn retry_level(&self) -> u32 {
        self.backoff.level()
    }
}

impl Strategy for AimdStrategy {
    fn name(&self) -> &str {
        "aimd"
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        self.call_retries = 0;
        self.last = self.pacer.acquire_at(now, now);
        self.last
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        if let Some(rate) = self.aimd.on_outcome(now, outcome) {
            self.pacer.set_rate_at(rate, now);
        }
        if outcome.signal == Signal::Success {
            self.backoff.on_success();
        }
        if let Some(end) = call_end(outcome) {
            return end;
        }
        if self
            .backoff
            .max_retries()
            .is_some_and(|m| self.call_retries >= m)
        {
            return Next::GiveUp;
        }
        self.call_retries += 1;
        let wait = honouring_retry_after(self.backoff.on_throttle(), outcome.hints.retry_after);
        self.last = self.pacer.acquire_at(now, now.saturating_add(wait));
        Next::Retry(self.last)
    }

    fn current_delay(&self) -> Duration {
        self.last
    }

    fn current_rate(&self) -> Option<f64> {
        Some(self.aimd.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Jitter;

    const T: Timestamp = Timestamp::ZERO;

    #[test]
    fn rate_trajectory_after_throttles() {
        let mut a = Aimd::new(AimdConfig::default()).unwrap();
        assert_eq!(a.rate(), Some(10.0));
        a.on_outcome(T, &Outcome::throttled());
        assert_eq!(a.current(), 5.0);
        a.on_outcome(T, &Outcome::throttled());
        assert_eq!(a.current(), 2.5, "001: 10 → 5 → 2.5");
        for i in 1..=30 {
            a.on_outcome(T, &Outcome::success());
            let want = 2.5 + 0.5 * f64::from(i / 10);
            assert!((a.current() - want).abs() < 1e-12, "after {i} successes");
        }
        for _ in 0..1000 {
            a.on_outcome(T, &Outcome::success());
        }
        assert_eq!(a.current(), 10.0, "capped at max_rate");
        for _ in 0..100 {
            a.on_outcome(T, &Outcome::throttled());
        }
        assert_eq!(a.current(), 0.1, "floored at min_rate");
    }

    #[test]
    fn cooldown_cuts_once_per_burst_of_throttles() {
        let mut a = Aimd::new(AimdConfig {
            decrease_cooldown: Duration::from_millis(500),
            ..AimdConfig::default()
        })
        .unwrap();
        for i in 0..10 {
            a.on_outcome(T + Duration::from_millis(i * 10), &Outcome::throttled());
        }
        assert_eq!(a.current(), 5.0, "ten 429s within 100 ms: one cut");
        a.on_outcome(T + Duration::from_millis(500), &Outcome::throttled());
        assert_eq!(a.current(), 2.5, "after the cooldown, the next cut");
    }

    #[test]
    fn a_throttle_resets_the_success_run() {
        let mut a = Aimd::new(AimdConfig::default()).unwrap();
        a.on_outcome(T, &Outcome::throttled());
        for _ in 0..9 {
            a.on_outcome(T, &Outcome::success());
        }
        a.on_outcome(T, &Outcome::throttled());
        for _ in 0..9 {
            a.on_outcome(T, &Outcome::success());
        }
        assert_eq!(a.current(), 2.5);
    }

    #[test]
    fn discounted_backoff_decays_after_quiet_requests() {
        let cfg = BackoffConfig::exponential(Duration::from_secs(1), 2.0).with_jitter(Jitter::None);
        let mut b = DiscountedBackoff::new(cfg, 10, 0).unwrap();
        assert_eq!(b.on_throttle(), Duration::from_secs(1));
        assert_eq!(b.on_throttle(), Duration::from_secs(2));
        assert_eq!(b.on_throttle(), Duration::from_secs(4));
        assert_eq!(b.level(), 3);
        for _ in 0..10 {
            b.on_success();
        }
        assert_eq!(b.level(), 2);
        assert_eq!(
            b.on_throttle(),
            Duration::from_secs(4),
            "resumes at the discounted level"
        );
        for _ in 0..100 {
            b.on_success();
        }
        assert_eq!(b.level(), 0);
        assert_eq!(b.on_throttle(), Duration::from_secs(1));
    }

    #[test]
    fn strategy_paces_every_attempt_and_lowers_the_pace() {
        let cfg = BackoffConfig::constant(Duration::from_millis(10)).with_max_retries(3);
        let mut s = AimdStrategy::new(AimdConfig::default(), cfg, 10, 0).unwrap();
        // 10/s: calls at t = 0 get slots 0, 100 ms, 200 ms.
        assert_eq!(s.before_call(T), Duration::ZERO);
        assert_eq!(s.after_attempt(T, &Outcome::success()), Next::Done);
        assert_eq!(s.before_call(T), Duration::from_millis(100));
        // A throttle halves the rate; the retry waits for a slot at 5/s.
        let t = T + Duration::from_millis(100);
        let Next::Retry(wait) = s.after_attempt(t, &Outcome::throttled()) else {
            panic!("expected a retry");
        };
        assert_eq!(s.current_rate(), Some(5.0));
        assert!(wait >= Duration::from_millis(190), "{wait:?}");
        assert!(s.after_attempt(t, &Outcome::throttled()) != Next::GiveUp);
        assert!(s.after_attempt(t, &Outcome::throttled()) != Next::GiveUp);
        assert_eq!(s.after_attempt(t, &Outcome::throttled()), Next::GiveUp);
        assert_eq!(s.retry_level(), 3);
    }

    #[test]
    fn strategy_gives_up_when_the_server_forbids_a_retry() {
        let mut s = AimdStrategy::with_defaults(0).unwrap();
        s.before_call(T);
        let forbidden = Outcome::throttled().with_hints(crate::ServerHints {
            no_retry: true,
            policy: None,
            ..crate::ServerHints::default()
        });
        assert_eq!(s.after_attempt(T, &forbidden), Next::GiveUp);
        // Still a throttle: the rate was cut; no retry, so no backoff level.
        assert_eq!(s.current_rate(), Some(5.0));
        assert_eq!(s.retry_level(), 0);
    }

    #[test]
    fn invalid_configs() {
        let bad = AimdConfig {
            decrease_factor: 1.0,
            ..AimdConfig::default()
        };
        assert!(Aimd::new(bad).is_err());
        let bad = AimdConfig {
            min_rate: 20.0,
            ..AimdConfig::default()
        };
        assert!(Aimd::new(bad).is_err());
        assert!(AimdStrategy::with_defaults(1).is_ok());
    }
}
