//! The client throttles Heroku compared when it added rate throttling to its
//! Platform API gem: a null strategy, exponential backoff, and three
//! "exponential increase" strategies that differ only in how they decrease
//! (reference 002). The winner,
//! [`ExponentialIncreaseProportionalRemainingDecrease`], is the gem's default.
//!
//! They exist so the simulator can replay Heroku's experiment, so each keeps
//! the gem's arithmetic to the letter: sleeps are `f64` seconds, each
//! `v · (1 + U)` with `U ~ Uniform[0, jitter)` from a seeded ChaCha8, no caps;
//! the increase strategies sleep their stored value before every call and
//! retry only on 429. One object serves one caller at a time; to model the
//! gem's process-wide value, carry
//! [`stored_sleep`](ExponentialIncreaseGradualDecrease::stored_sleep) into
//! the next caller with
//! [`set_stored_sleep`](ExponentialIncreaseGradualDecrease::set_stored_sleep).
//!
//! ```
//! use ratewise_client::heroku::{HerokuConfig, ExponentialIncreaseGradualDecrease};
//! use ratewise_client::{Next, Outcome, Strategy};
//! use ratewise::Timestamp;
//!
//! // Jitter off, to show the exact ladder.
//! let config = HerokuConfig { jitter: 0.0, ..HerokuConfig::default() };
//! let mut s = ExponentialIncreaseGradualDecrease::new(config, 42)?;
//! let now = Timestamp::ZERO;
//! assert_eq!(s.before_call(now).as_secs_f64(), 0.0);
//! let ladder: Vec<f64> = (0..3)
//!     .map(|_| match s.after_attempt(now, &Outcome::throttled()) {
//!         Next::Retry(d) => d.as_secs_f64(),
//!         _ => f64::NAN,
//!     })
//!     .collect();
//! for (got, want) in ladder.iter().zip([0.8, 1.76, 2.912]) {
//!     assert!((got - want).abs() < 1e-9, "{got} vs {want}");
//! }
//! // A success stores the last rung ×1.2, minus 0.8: 2.912·1.2 − 0.8.
//! assert_eq!(s.after_attempt(now, &Outcome::success()), Next::Done);
//! assert!((s.stored_sleep() - 2.6944).abs() < 1e-9);
//! # Ok::<(), ratewise_client::ConfigError>(())
//! ```

use std::time::Duration;

use crate::JitterRng;
use rand::Rng;

use super::config::{at_least, positive, secs_to_duration, within, ConfigError};
use super::{Next, Outcome, Signal, Strategy};
use ratewise::time::Timestamp;

/// Heroku's global `max_limit`: 4500 requests per hour.
pub const MAX_LIMIT: f64 = 4500.0;
/// Heroku's global `min_sleep`: `3600 / max_limit` = 0.8 s.
pub const MIN_SLEEP_SECS: f64 = 3600.0 / MAX_LIMIT;
/// Heroku's global `multiplier`: 1.2.
pub const MULTIPLIER: f64 = 1.2;
/// Heroku's jitter bound: every sleep is `v · (1 + U)`, `U ~ Uniform[0, 0.1]`.
pub const JITTER: f64 = 0.1;

/// Parameters shared by the Heroku strategies, with the gem's defaults.
///
/// Durations are handled as `f64` seconds internally, like the gem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HerokuConfig {
    /// The server's limit per hour (`max_limit`, default 4500). Also the
    /// default `decrease_divisor` of the proportional strategies.
    pub max_limit: f64,
    /// The smallest sleep step (`min_sleep`, default 0.8 s = 3600/4500 s).
    pub min_sleep: Duration,
    /// The stored sleep a fresh strategy starts from (`starting_sleep_for`,
    /// default 0). Ignored by [`ExponentialBackoff`], as in the gem.
    pub starting_sleep: Duration,
    /// Growth factor on each throttled response (`multiplier`, default 1.2;
    /// must be ≥ 1).
    pub multiplier: f64,
    /// Upper bound of the jitter fraction `U` (default 0.1). Zero disables
    /// jitter, which tests use to check exact ladders. Must lie in `[0, 1]`.
    pub jitter: f64,
    /// EIGD's constant decrease per call (`decrease`, default `min_sleep`).
    /// `None` means "use `min_sleep`".
    pub decrease: Option<Duration>,
    /// EIPD's and EIPRD's divisor (`decrease_divisor`, default `max_limit`).
    /// `None` means "use `max_limit`".
    pub decrease_divisor: Option<f64>,
}

impl Default for HerokuConfig {
    fn default() -> Self {
        HerokuConfig {
            max_limit: MAX_LIMIT,
            min_sleep: Duration::from_millis(800),
            starting_sleep: Duration::ZERO,
            multiplier: MULTIPLIER,
            jitter: JITTER,
            decrease: None,
            decrease_divisor: None,
        }
    }
}

/// The validated numbers every Heroku strategy computes with.
#[derive(Clone, Debug)]
struct Params {
    min_sleep: f64,
    multiplier: f64,
    jitter: f64,
    decrease: f64,
    decrease_divisor: f64,
    starting_sleep: f64,
}

impl Params {
    fn new(c: &HerokuConfig) -> Result<Params, ConfigError> {
        let max_limit = positive("max_limit", c.max_limit)?;
        let min_sleep = at_least("min_sleep", c.min_sleep.as_secs_f64(), 0.0)?;
        Ok(Params {
            min_sleep,
            multiplier: at_least("multiplier", c.multiplier, 1.0)?,
            jitter: within("jitter", c.jitter, 0.0, 1.0)?,
            decrease: at_least(
                "decrease",
                c.decrease.map_or(min_sleep, |d| d.as_secs_f64()),
                0.0,
            )?,
            decrease_divisor: positive(
                "decrease_divisor",
                c.decrease_divisor.unwrap_or(max_limit),
            )?,
            starting_sleep: at_least("starting_sleep", c.starting_sleep.as_secs_f64(), 0.0)?,
        })
    }
}

/// The gem's `Base`: parameters, the seeded jitter source and the sleep
/// bookkeeping.
#[derive(Clone, Debug)]
struct Base {
    p: Params,
    rng: JitterRng,
    /// The stored value between calls (`@sleep_for`).
    stored: f64,
    /// The working copy of the call in progress.
    local: f64,
    /// The base (pre-jitter) value of the latest sleep asked for.
    last_base: f64,
    /// The largest sleep asked for so far, jitter included.
    max_sleep: f64,
}

impl Base {
    fn new(config: &HerokuConfig, seed: u64) -> Result<Base, ConfigError> {
        let p = Params::new(config)?;
        let stored = p.starting_sleep;
        Ok(Base {
            p,
            rng: JitterRng::seed_from_u64(seed),
            stored,
            local: stored,
            last_base: 0.0,
            max_sleep: 0.0,
        })
    }

    /// `v + jitter(v)` with a fresh `U`, recorded for the metrics.
    fn sleep(&mut self, v: f64) -> Duration {
        self.last_base = v;
        jittered(&mut self.rng, self.p.jitter, v, &mut self.max_sleep)
    }

    /// The increase path of the exponential-increase family on one 429:
    /// add `min_sleep`, sleep, multiply.
    fn increase(&mut self) -> Duration {
        self.local += self.p.min_sleep;
        let d = self.sleep(self.local);
        self.local *= self.p.multiplier;
        d
    }

    /// `s ← s − d` if `s ≥ d`, else 0: the floor shared by every decrease rule.
    fn store_decreased(&mut self, d: f64) {
        self.local = if self.local >= d { self.local - d } else { 0.0 };
        self.stored = self.local;
        self.last_base = self.stored;
    }
}

/// `v · (1 + U)`, `U ~ Uniform[0, jitter)` (none when `jitter` is 0), and
/// the largest such sleep kept in `max_sleep`.
fn jittered(rng: &mut JitterRng, jitter: f64, v: f64, max_sleep: &mut f64) -> Duration {
    let u = if jitter > 0.0 {
        rng.random::<f64>() * jitter
    } else {
        0.0
    };
    let total = v * (1.0 + u);
    if total > *max_sleep {
        *max_sleep = total;
    }
    secs_to_duration(total)
}

macro_rules! heroku_common_methods {
    () => {
        /// The stored sleep in seconds (the gem's `@sleep_for`): what the next
        /// call will sleep before its first attempt, before jitter.
        pub fn stored_sleep(&self) -> f64 {
            self.base.stored
        }

        /// Overwrites the stored sleep (seconds; NaN or negative becomes 0).
        /// Used to model a slot shared by several callers.
        pub fn set_stored_sleep(&mut self, secs: f64) {
            let v = if secs.is_finite() && secs > 0.0 {
                secs
            } else {
                0.0
            };
            self.base.stored = v;
            self.base.local = v;
        }

        /// The largest sleep this strategy has asked for, jitter included, in
        /// seconds (the simulator's `max_sleep_val`).
        pub fn max_sleep(&self) -> f64 {
            self.base.max_sleep
        }
    };
}

/// Heroku's null strategy: one attempt, no sleep, no retry; a 429 is handed
/// back to the caller. Source: `RateThrottleClient::Null`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Null;

impl Strategy for Null {
    fn name(&self) -> &str {
        "null"
    }

    fn before_call(&mut self, _now: Timestamp) -> Duration {
        Duration::ZERO
    }

    fn after_attempt(&mut self, _now: Timestamp, _outcome: &Outcome) -> Next {
        Next::Done
    }
}

/// Heroku's exponential backoff (EB): no sleep before a call; on each 429
/// sleep `s · (1 + U)` then `s ← s · multiplier`, with `s` starting at
/// `min_sleep` on every call. Nothing is kept between calls.
///
/// Retry sleeps within a call are `0.8 · 1.2^i · (1 + U_i)`. Source:
/// `RateThrottleClient::ExponentialBackoff`; the blog's "factor 2.0" run is
/// this strategy with `multiplier = 2.0`.
#[derive(Clone, Debug)]
pub struct ExponentialBackoff {
    // Only what backoff reads (64 bytes: a simulated fleet holds one per
    // client); the increase family's stored value and decrease rules are
    // not kept.
    min_sleep: f64,
    multiplier: f64,
    jitter: f64,
    rng: JitterRng,
    /// The next retry's sleep before jitter.
    local: f64,
    /// The base (pre-jitter) value of the latest sleep asked for.
    last_base: f64,
    /// The largest sleep asked for so far, jitter included.
    max_sleep: f64,
}

impl ExponentialBackoff {
    /// A strategy with `config` (see [`HerokuConfig::default`]) and a jitter
    /// `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] when a parameter is non-finite or out of range.
    pub fn new(config: HerokuConfig, seed: u64) -> Result<Self, ConfigError> {
        let p = Params::new(&config)?;
        Ok(ExponentialBackoff {
            min_sleep: p.min_sleep,
            multiplier: p.multiplier,
            jitter: p.jitter,
            rng: JitterRng::seed_from_u64(seed),
            local: p.min_sleep,
            last_base: 0.0,
            max_sleep: 0.0,
        })
    }

    /// The largest sleep this strategy has asked for, jitter included, in
    /// seconds (the simulator's `max_sleep_val`).
    pub fn max_sleep(&self) -> f64 {
        self.max_sleep
    }
}

impl Strategy for ExponentialBackoff {
    fn name(&self) -> &str {
        "exponential_backoff"
    }

    fn before_call(&mut self, _now: Timestamp) -> Duration {
        self.local = self.min_sleep;
        Duration::ZERO
    }

    fn after_attempt(&mut self, _now: Timestamp, outcome: &Outcome) -> Next {
        if outcome.signal == Signal::Throttled {
            self.last_base = self.local;
            let d = jittered(&mut self.rng, self.jitter, self.local, &mut self.max_sleep);
            self.local *= self.multiplier;
            Next::Retry(d)
        } else {
            // The gem's `sleep(0)` after a success: the chart drops to zero.
            self.last_base = 0.0;
            self.local = self.min_sleep;
            Next::Done
        }
    }

    fn current_delay(&self) -> Duration {
        secs_to_duration(self.last_base)
    }
}

/// Heroku's "exponential increase, gradual decrease" (EIGD): sleep the stored
/// value before every call; on each 429 add `min_sleep`, sleep, multiply; when
/// the call ends subtract `decrease` (default 0.8 s), flooring at zero.
///
/// From zero the retry ladder is 0.8, 1.76, 2.912, 4.294, 5.953, … seconds
/// before jitter. Source: `RateThrottleClient::ExponentialIncreaseGradualDecrease`.
#[derive(Clone, Debug)]
pub struct ExponentialIncreaseGradualDecrease {
    base: Base,
}

impl ExponentialIncreaseGradualDecrease {
    /// A strategy with `config` (see [`HerokuConfig::default`]) and a jitter
    /// `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] when a parameter is non-finite or out of range.
    pub fn new(config: HerokuConfig, seed: u64) -> Result<Self, ConfigError> {
        Ok(ExponentialIncreaseGradualDecrease {
            base: Base::new(&config, seed)?,
        })
    }

    heroku_common_methods!();
}

/// Heroku's "exponential increase, proportional decrease" (EIPD): the EIGD
/// increase, and after each call `s ← s − s / decrease_divisor` (default
/// divisor 4500), i.e. `s · (1 − 1/4500)`.
///
/// Source: `RateThrottleClient::ExponentialIncreaseProportionalDecrease`.
#[derive(Clone, Debug)]
pub struct ExponentialIncreaseProportionalDecrease {
    base: Base,
}

impl ExponentialIncreaseProportionalDecrease {
    /// A strategy with `config` (see [`HerokuConfig::default`]) and a jitter
    /// `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] when a parameter is non-finite or out of range.
    pub fn new(config: HerokuConfig, seed: u64) -> Result<Self, ConfigError> {
        Ok(ExponentialIncreaseProportionalDecrease {
            base: Base::new(&config, seed)?,
        })
    }

    heroku_common_methods!();
}

/// Heroku's "exponential increase, proportional remaining decrease" (EIPRD),
/// the Platform API gem's default: the EIGD increase, and after each call
/// `s ← s − s · remaining / decrease_divisor`, where `remaining` is the final
/// response's `RateLimit-Remaining` ([`ServerHints::remaining`]; absent counts
/// as 0, like the gem's `nil.to_i`). With `remaining = 0` nothing decreases;
/// with a full bucket of 4500 the sleep drops to zero at once.
///
/// Source: `RateThrottleClient::ExponentialIncreaseProportionalRemainingDecrease`.
///
/// [`ServerHints::remaining`]: super::ServerHints::remaining
#[derive(Clone, Debug)]
pub struct ExponentialIncreaseProportionalRemainingDecrease {
    base: Base,
}

impl ExponentialIncreaseProportionalRemainingDecrease {
    /// A strategy with `config` (see [`HerokuConfig::default`]) and a jitter
    /// `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] when a parameter is non-finite or out of range.
    pub fn new(config: HerokuConfig, seed: u64) -> Result<Self, ConfigError> {
        Ok(ExponentialIncreaseProportionalRemainingDecrease {
            base: Base::new(&config, seed)?,
        })
    }

    heroku_common_methods!();
}

/// Implements `Strategy` for an exponential-increase strategy whose decrease
/// amount is `$decrease(&base, &outcome)`.
macro_rules! exponential_increase_strategy {
    ($ty:ty, $name:literal, $decrease:expr) => {
        impl Strategy for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn before_call(&mut self, _now: Timestamp) -> Duration {
                self.base.local = self.base.stored;
                self.base.sleep(self.base.local)
            }

            fn after_attempt(&mut self, _now: Timestamp, outcome: &Outcome) -> Next {
                if outcome.signal == Signal::Throttled {
                    Next::Retry(self.base.increase())
                } else {
                    let decrease: fn(&Base, &Outcome) -> f64 = $decrease;
                    let d = decrease(&self.base, outcome);
                    self.base.store_decreased(d);
                    Next::Done
                }
            }

            fn current_delay(&self) -> Duration {
                secs_to_duration(self.base.last_base)
            }
        }
    };
}

exponential_increase_strategy!(
    ExponentialIncreaseGradualDecrease,
    "exponential_increase_gradual_decrease",
    |b, _| b.p.decrease
);
exponential_increase_strategy!(
    ExponentialIncreaseProportionalDecrease,
    "exponential_increase_proportional_decrease",
    |b, _| b.local / b.p.decrease_divisor
);
exponential_increase_strategy!(
    ExponentialIncreaseProportionalRemainingDecrease,
    "exponential_increase_proportional_remaining_decrease",
    |b, o| {
        // u64 → f64 is exact up to 2^53 and merely rounds beyond; no panic.
        let remaining = o.hints.remaining.unwrap_or(0) as f64;
        b.local * remaining / b.p.decrease_divisor
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerHints;
    use proptest::prelude::{any, prop_assert, proptest};

    const T: Timestamp = Timestamp::ZERO;
    const EPS: f64 = 1e-9;

    #[test]
    fn backoff_holds_only_what_it_reads() {
        // A simulated fleet holds one per client.
        assert!(std::mem::size_of::<ExponentialBackoff>() <= 64);
    }

    fn exact() -> HerokuConfig {
        HerokuConfig {
            jitter: 0.0,
            ..HerokuConfig::default()
        }
    }

    fn retry_secs(n: Next) -> f64 {
        match n {
            Next::Retry(d) => d.as_secs_f64(),
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    fn with_remaining(remaining: u64) -> Outcome {
        Outcome::success().with_hints(ServerHints {
            remaining: Some(remaining),
            ..ServerHints::default()
        })
    }

    /// The spec's ladder from s = 0: 0.8, 1.76, 2.912, 4.294, 5.953, 7.944,
    /// 10.333, 13.199, 16.639, 20.767.
    const LADDER: [f64; 10] = [
        0.8,
        1.76,
        2.912,
        4.2944,
        5.95328,
        7.943936,
        10.3327232,
        13.19926784,
        16.639121408,
        20.7669456896,
    ];

    fn assert_ladder<S: Strategy>(mut s: S) {
        assert_eq!(s.before_call(T), Duration::ZERO, "pre-request sleep of 0");
        for (i, want) in LADDER.iter().enumerate() {
            let got = retry_secs(s.after_attempt(T, &Outcome::throttled()));
            assert!(
                (got - want).abs() < 1e-6,
                "rung {i}: got {got}, want {want}"
            );
            assert!((s.current_delay().as_secs_f64() - want).abs() < 1e-6);
        }
    }

    #[test]
    fn ladders_of_the_exponential_increase_family() {
        assert_ladder(ExponentialIncreaseGradualDecrease::new(exact(), 1).unwrap());
        assert_ladder(ExponentialIncreaseProportionalDecrease::new(exact(), 1).unwrap());
        assert_ladder(ExponentialIncreaseProportionalRemainingDecrease::new(exact(), 1).unwrap());
    }

    #[test]
    fn spec_max_sleep_17_3_is_the_16_639_rung_plus_jitter() {
        // 16.639 × 1.04 ≈ 17.3: the ninth rung with 4 % jitter.
        assert!((LADDER[8] * 1.04 - 17.3).abs() < 0.01);
    }

    #[test]
    fn exponential_backoff_ladder_and_no_memory() {
        let mut s = ExponentialBackoff::new(exact(), 1).unwrap();
        for _call in 0..2 {
            assert_eq!(s.before_call(T), Duration::ZERO);
            for i in 0..23 {
                let got = retry_secs(s.after_attempt(T, &Outcome::throttled()));
                let want = 0.8 * 1.2f64.powi(i);
                assert!((got - want).abs() < 1e-6, "retry {i}: {got} vs {want}");
            }
            assert_eq!(s.after_attempt(T, &Outcome::success()), Next::Done);
            assert_eq!(s.current_delay(), Duration::ZERO, "sleep(0) after success");
        }
        // 0.8 × 1.2^22 = 44.16: the published max of 46.72 is this with 5.8 % jitter.
        assert!((s.max_sleep() - 0.8 * 1.2f64.powi(22)).abs() < 1e-6);
    }

    #[test]
    fn exponential_backoff_multiplier_two_reaches_819_2() {
        let cfg = HerokuConfig {
            multiplier: 2.0,
            ..exact()
        };
        let mut s = ExponentialBackoff::new(cfg, 1).unwrap();
        s.before_call(T);
        let mut last = 0.0;
        for _ in 0..11 {
            last = retry_secs(s.after_attempt(T, &Outcome::throttled()));
        }
        assert!((last - 819.2).abs() < 1e-6);
    }

    #[test]
    fn exponential_backoff_ignores_starting_sleep() {
        let cfg = HerokuConfig {
            starting_sleep: Duration::from_secs(10),
            ..exact()
        };
        let mut s = ExponentialBackoff::new(cfg, 1).unwrap();
        assert_eq!(s.before_call(T), Duration::ZERO);
        assert!((retry_secs(s.after_attempt(T, &Outcome::throttled())) - 0.8).abs() < EPS);
    }

    /// The four strategies that retry, with the gem's defaults.
    fn retrying_strategies() -> Vec<Box<dyn Strategy>> {
        vec![
            Box::new(ExponentialBackoff::new(HerokuConfig::default(), 3).unwrap()),
            Box::new(ExponentialIncreaseGradualDecrease::new(HerokuConfig::default(), 3).unwrap()),
            Box::new(
                ExponentialIncreaseProportionalDecrease::new(HerokuConfig::default(), 3).unwrap(),
            ),
            Box::new(
                ExponentialIncreaseProportionalRemainingDecrease::new(HerokuConfig::default(), 3)
                    .unwrap(),
            ),
        ]
    }

    #[test]
    fn one_429_then_200_is_two_attempts() {
        // Shared test of the gem: one 429 then a 200 calls the block twice.
        for s in &mut retrying_strategies() {
            s.before_call(T);
            let mut attempts = 1;
            let mut outcomes = [Outcome::throttled(), Outcome::success()].into_iter();
            loop {
                let o = outcomes.next().unwrap();
                match s.after_attempt(T, &o) {
                    Next::Retry(_) => attempts += 1,
                    Next::Done => break,
                    Next::GiveUp => panic!("{} gave up", s.name()),
                }
            }
            assert_eq!(attempts, 2, "{}", s.name());
        }
    }

    #[test]
    fn a_200_is_one_attempt() {
        // Shared test of the gem: a 200 calls the block once and returns it.
        let mut strategies = retrying_strategies();
        strategies.insert(0, Box::new(Null));
        for s in &mut strategies {
            s.before_call(T);
            assert_eq!(
                s.after_attempt(T, &Outcome::success()),
                Next::Done,
                "{}",
                s.name()
            );
        }
    }

    #[test]
    fn null_calls_once_and_never_sleeps() {
        let mut s = Null;
        assert_eq!(s.before_call(T), Duration::ZERO);
        assert_eq!(s.after_attempt(T, &Outcome::throttled()), Next::Done);
        assert_eq!(s.after_attempt(T, &Outcome::success()), Next::Done);
        assert_eq!(s.current_delay(), Duration::ZERO);
    }

    #[test]
    fn eigd_stores_increase_then_gradual_decrease() {
        let mut s = ExponentialIncreaseGradualDecrease::new(exact(), 1).unwrap();
        s.before_call(T);
        s.after_attempt(T, &Outcome::throttled()); // s = (0 + 0.8)·1.2 = 0.96
        s.after_attempt(T, &Outcome::success()); // 0.96 − 0.8 = 0.16
        assert!((s.stored_sleep() - 0.16).abs() < EPS);
        // The next call sleeps the stored value first.
        assert!((s.before_call(T).as_secs_f64() - 0.16).abs() < EPS);
        s.after_attempt(T, &Outcome::success()); // 0.16 < 0.8 → 0
        assert_eq!(s.stored_sleep(), 0.0);
        // A custom decrease.
        let cfg = HerokuConfig {
            decrease: Some(Duration::from_millis(100)),
            starting_sleep: Duration::from_secs(1),
            ..exact()
        };
        let mut s = ExponentialIncreaseGradualDecrease::new(cfg, 1).unwrap();
        assert!((s.before_call(T).as_secs_f64() - 1.0).abs() < EPS);
        s.after_attempt(T, &Outcome::success());
        assert!((s.stored_sleep() - 0.9).abs() < EPS);
    }

    #[test]
    fn workload_scenario_eigd_sleeps_1_then_0_2_then_0() {
        // The gem's time-to-clear benchmark: starting sleep 1 s, "sleeps about 1 s, then 0.2, then 0".
        let cfg = HerokuConfig {
            starting_sleep: Duration::from_secs(1),
            ..exact()
        };
        let mut s = ExponentialIncreaseGradualDecrease::new(cfg, 1).unwrap();
        let mut sleeps = vec![];
        for _ in 0..3 {
            sleeps.push(s.before_call(T).as_secs_f64());
            assert_eq!(s.after_attempt(T, &Outcome::success()), Next::Done);
        }
        assert!((sleeps[0] - 1.0).abs() < EPS);
        assert!((sleeps[1] - 0.2).abs() < EPS);
        assert_eq!(sleeps[2], 0.0);
    }

    fn eipd_decrease(start: f64) -> f64 {
        let mut s = ExponentialIncreaseProportionalDecrease::new(exact(), 1).unwrap();
        s.set_stored_sleep(start);
        s.before_call(T);
        s.after_attempt(T, &Outcome::success());
        start - s.stored_sleep()
    }

    #[test]
    fn eipd_decrease_is_proportional() {
        // Gem test: start sleeps 200 and 400, one success each; the decrease
        // for 400 is twice the decrease for 200 (delta 0.001).
        let d200 = eipd_decrease(200.0);
        let d400 = eipd_decrease(400.0);
        assert!((d400 - 2.0 * d200).abs() < 0.001);
        assert!((d200 - 200.0 / 4500.0).abs() < EPS);
    }

    #[test]
    fn eipd_workload_decay_factor() {
        let cfg = HerokuConfig {
            starting_sleep: Duration::from_secs(1),
            ..exact()
        };
        let mut s = ExponentialIncreaseProportionalDecrease::new(cfg, 1).unwrap();
        for k in 0..100 {
            let want = (1.0 - 1.0 / 4500.0f64).powi(k);
            assert!((s.before_call(T).as_secs_f64() - want).abs() < 1e-9);
            s.after_attempt(T, &Outcome::success());
        }
    }

    fn eiprd_after(start: f64, remaining: u64) -> f64 {
        let mut s = ExponentialIncreaseProportionalRemainingDecrease::new(exact(), 1).unwrap();
        s.set_stored_sleep(start);
        s.before_call(T);
        s.after_attempt(T, &with_remaining(remaining));
        s.stored_sleep()
    }

    #[test]
    fn eiprd_more_remaining_decreases_more() {
        // Gem test: from 20, remaining 200 ends lower than remaining 199.
        assert!(eiprd_after(20.0, 200) < eiprd_after(20.0, 199));
        // And the 2× proportionality test.
        let d200 = 200.0 - eiprd_after(200.0, 100);
        let d400 = 400.0 - eiprd_after(400.0, 100);
        assert!((d400 - 2.0 * d200).abs() < 0.001);
        assert!((d200 - 200.0 * 100.0 / 4500.0).abs() < 1e-9);
    }

    #[test]
    fn eiprd_zero_or_missing_remaining_keeps_sleep_and_full_bucket_clears_it() {
        assert!((eiprd_after(5.0, 0) - 5.0).abs() < EPS);
        assert_eq!(eiprd_after(5.0, 4500), 0.0);
        assert_eq!(eiprd_after(5.0, u64::MAX), 0.0);
        let mut s = ExponentialIncreaseProportionalRemainingDecrease::new(exact(), 1).unwrap();
        s.set_stored_sleep(5.0);
        s.before_call(T);
        s.after_attempt(T, &Outcome::success()); // no header: like nil.to_i = 0
        assert!((s.stored_sleep() - 5.0).abs() < EPS);
    }

    #[test]
    fn eiprd_reads_remaining_of_final_response_after_retries() {
        let mut s = ExponentialIncreaseProportionalRemainingDecrease::new(exact(), 1).unwrap();
        s.before_call(T);
        s.after_attempt(T, &Outcome::throttled()); // local = 0.96
        s.after_attempt(T, &with_remaining(450)); // 0.96·(1 − 0.1) = 0.864
        assert!((s.stored_sleep() - 0.864).abs() < EPS);
    }

    #[test]
    fn non_throttled_failures_end_the_call_and_decrease() {
        let cfg = HerokuConfig {
            starting_sleep: Duration::from_secs(2),
            ..exact()
        };
        let mut s = ExponentialIncreaseGradualDecrease::new(cfg, 1).unwrap();
        s.before_call(T);
        let server_error = Outcome::new(Signal::ServerError);
        assert_eq!(s.after_attempt(T, &server_error), Next::Done);
        assert!((s.stored_sleep() - 1.2).abs() < EPS);
    }

    #[test]
    fn jitter_is_seeded_and_within_ten_percent() {
        let run = |seed| {
            let mut s =
                ExponentialIncreaseGradualDecrease::new(HerokuConfig::default(), seed).unwrap();
            s.before_call(T);
            (0..10)
                .map(|_| retry_secs(s.after_attempt(T, &Outcome::throttled())))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same sleeps");
        assert_ne!(a, run(8), "different seed, different jitter");
        for (got, base) in a.iter().zip(LADDER) {
            assert!(
                *got >= base - 1e-9 && *got <= base * 1.1 + 1e-9,
                "{got} vs {base}"
            );
        }
    }

    #[test]
    fn invalid_configs_are_errors() {
        for cfg in [
            HerokuConfig {
                multiplier: f64::NAN,
                ..HerokuConfig::default()
            },
            HerokuConfig {
                multiplier: 0.5,
                ..HerokuConfig::default()
            },
            HerokuConfig {
                jitter: -0.1,
                ..HerokuConfig::default()
            },
            HerokuConfig {
                max_limit: 0.0,
                ..HerokuConfig::default()
            },
            HerokuConfig {
                decrease_divisor: Some(f64::INFINITY),
                ..HerokuConfig::default()
            },
        ] {
            assert!(ExponentialIncreaseGradualDecrease::new(cfg, 0).is_err());
        }
    }

    proptest! {

        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn sleeps_are_finite_and_stored_never_negative(
            seed in any::<u64>(),
            start in 0.0f64..1000.0,
            steps in proptest::collection::vec((any::<bool>(), 0u64..10_000), 0..200),
        ) {
            let mut s = ExponentialIncreaseProportionalRemainingDecrease::new(
                HerokuConfig::default(), seed).unwrap();
            s.set_stored_sleep(start);
            let mut in_call = false;
            for (throttled, remaining) in steps {
                if !in_call {
                    let d = s.before_call(T);
                    prop_assert!(d.as_secs_f64() >= s.stored_sleep() - 1e-9);
                    prop_assert!(d.as_secs_f64() <= s.stored_sleep() * 1.1 + 1e-9);
                    in_call = true;
                }
                let o = if throttled { Outcome::throttled() } else { with_remaining(remaining) };
                match s.after_attempt(T, &o) {
                    Next::Retry(d) => prop_assert!(d > Duration::ZERO),
                    Next::Done => in_call = false,
                    Next::GiveUp => prop_assert!(false, "Heroku strategies never give up"),
                }
                prop_assert!(s.stored_sleep() >= 0.0);
            }
        }
    }
}
