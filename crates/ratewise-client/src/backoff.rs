//! Backoff policies: how long to wait before retry number *i*.
//!
//! A policy is a growth rule (constant, linear, exponential), a cap, an
//! optional retry limit and a jitter rule. The order is fixed and matters:
//! **compute the base delay, cap it, then jitter it.** Jittering first and
//! capping afterwards piles probability mass on the cap, the bug botocore
//! fixed in 2024; capping first keeps the jitter's distribution intact.
//!
//! Sources of the presets:
//! * linear `1 s, 2 s, 3 s, …` and exponential `1 s, 2 s, 4 s, …` — the
//!   "Responsive exponential backoff" post (reference 000);
//! * [`BackoffConfig::google`] — Google APIs' advice: wait 1 s, 2 s, 4 s, 8 s,
//!   16 s, each plus a fresh random ≤ 1000 ms, then give up (reference 004);
//! * [`BackoffConfig::aws_standard`] — AWS SDK standard mode: full jitter of
//!   `min(1 s · 2^i, 20 s)`, 3 attempts in total;
//! * [`Jitter::Proportional`] — Heroku's `v · (1 + U)`, `U ~ Uniform[0, 0.1)`
//!   (reference 002).
//!
//! # Invariants
//! * The base delay never exceeds `max_delay`; jitter `None`, `Full`,
//!   `Equal` and `Decorrelated` never exceed it either. `Proportional(f)` and
//!   `Additive(a)` add at most `f · max_delay` and `a` on top, by definition.
//! * Randomness comes only from the seed given at construction.
//!
//! ```
//! use std::time::Duration;
//! use ratewise_client::backoff::{Backoff, BackoffConfig, Jitter};
//!
//! let config = BackoffConfig::exponential(Duration::from_secs(1), 2.0)
//!     .with_max_delay(Duration::from_secs(5))
//!     .with_jitter(Jitter::None);
//! let mut backoff = Backoff::new(config, 7)?;
//! let delays: Vec<_> = (0..4).filter_map(|_| backoff.next_delay()).collect();
//! assert_eq!(delays, [1, 2, 4, 5].map(Duration::from_secs));
//! # Ok::<(), ratewise_client::ConfigError>(())
//! ```

use std::time::Duration;

use crate::JitterRng;
use rand::Rng;

use super::config::{at_least, positive, secs_to_duration, within, ConfigError};
use super::{Next, Outcome, Signal, Strategy};
use ratewise::time::Timestamp;

/// How the base delay grows with the retry number `i` (0 for the first retry).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Growth {
    /// `initial` every time.
    Constant,
    /// `initial + step · i` (reference 000: 1 s, 2 s, 3 s, …).
    Linear {
        /// Added per retry.
        step: Duration,
    },
    /// `initial · multiplier^i`, i.e. base × factor^n (never base^n).
    Exponential {
        /// Growth factor per retry, ≥ 1.
        multiplier: f64,
    },
}

/// How the capped base delay `d` is randomised.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// `d` exactly.
    None,
    /// `U · d`, `U ~ Uniform[0, 1)`: AWS's and gRPC's default.
    Full,
    /// `d/2 + U · d/2`.
    Equal,
    /// `min(max_delay, Uniform[initial, 3 · previous))`, the "decorrelated"
    /// jitter of AWS's architecture blog; `previous` starts at `initial`.
    /// Here the growth rule is not used: the previous sleep drives growth.
    Decorrelated,
    /// `d · (1 + U · f)`: Heroku's jitter with `f = 0.1`.
    Proportional(f64),
    /// `d + U · a`: Google's "plus a random number of milliseconds ≤ 1000".
    Additive(Duration),
}

/// A backoff policy. Build with a preset and adjust with the `with_*` methods.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// The base delay of the first retry.
    pub initial: Duration,
    /// How the base delay grows.
    pub growth: Growth,
    /// The cap applied to the base delay, before jitter.
    pub max_delay: Duration,
    /// Retries allowed per call; `None` for unlimited.
    pub max_retries: Option<u32>,
    /// The jitter rule, applied after the cap.
    pub jitter: Jitter,
}

impl BackoffConfig {
    /// `delay` before every retry, no jitter, unlimited retries.
    pub fn constant(delay: Duration) -> Self {
        BackoffConfig {
            initial: delay,
            growth: Growth::Constant,
            max_delay: Duration::MAX,
            max_retries: None,
            jitter: Jitter::None,
        }
    }

    /// `initial + step · i`, no jitter, unlimited retries (reference 000).
    pub fn linear(initial: Duration, step: Duration) -> Self {
        BackoffConfig {
            growth: Growth::Linear { step },
            ..BackoffConfig::constant(initial)
        }
    }

    /// `initial · multiplier^i`, full jitter, unlimited retries.
    pub fn exponential(initial: Duration, multiplier: f64) -> Self {
        BackoffConfig {
            growth: Growth::Exponential { multiplier },
            jitter: Jitter::Full,
            ..BackoffConfig::constant(initial)
        }
    }

    /// Google APIs' recommendation (reference 004): 1 s, 2 s, 4 s, 8 s, 16 s,
    /// each plus a fresh random ≤ 1000 ms, then stop after five retries.
    pub fn google() -> Self {
        BackoffConfig {
            max_retries: Some(5),
            max_delay: Duration::from_secs(32),
            jitter: Jitter::Additive(Duration::from_millis(1000)),
            ..BackoffConfig::exponential(Duration::from_secs(1), 2.0)
        }
    }

    /// AWS SDK standard mode: full jitter of `min(1 s · 2^i, 20 s)`, two
    /// retries (three attempts).
    pub fn aws_standard() -> Self {
        BackoffConfig {
            max_retries: Some(2),
            max_delay: Duration::from_secs(20),
            ..BackoffConfig::exponential(Duration::from_secs(1), 2.0)
        }
    }

    /// The same policy with cap `max_delay`.
    pub fn with_max_delay(self, max_delay: Duration) -> Self {
        BackoffConfig { max_delay, ..self }
    }

    /// The same policy allowing `max_retries` retries per call.
    pub fn with_max_retries(self, max_retries: u32) -> Self {
        BackoffConfig {
            max_retries: Some(max_retries),
            ..self
        }
    }

    /// The same policy with `jitter`.
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        BackoffConfig { jitter, ..self }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Growth::Exponential { multiplier } = self.growth {
            at_least("multiplier", multiplier, 1.0)?;
        }
        match self.jitter {
            Jitter::Proportional(f) => {
                within("jitter fraction", f, 0.0, 1.0)?;
            }
            Jitter::Decorrelated => {
                positive("initial (decorrelated jitter)", self.initial.as_secs_f64())?;
            }
            _ => {}
        }
        if self.max_delay < self.initial {
            return Err(ConfigError::Inconsistent(
                "max_delay must be at least the initial delay",
            ));
        }
        Ok(())
    }

    /// The capped base delay of retry `i` (0-based), before jitter.
    pub fn base_delay(&self, i: u32) -> Duration {
        let initial = self.initial.as_secs_f64();
        let secs = match self.growth {
            Growth::Constant => initial,
            Growth::Linear { step } => initial + step.as_secs_f64() * f64::from(i),
            Growth::Exponential { multiplier } => {
                // powi takes i32; beyond that the cap has long applied.
                initial * multiplier.powi(i32::try_from(i).unwrap_or(i32::MAX))
            }
        };
        secs_to_duration(secs).min(self.max_delay)
    }
}

impl Default for BackoffConfig {
    /// Exponential from 100 ms, factor 2, capped at 20 s, full jitter, three
    /// retries: a conservative general-purpose policy.
    fn default() -> Self {
        BackoffConfig::exponential(Duration::from_millis(100), 2.0)
            .with_max_delay(Duration::from_secs(20))
            .with_max_retries(3)
    }
}

/// A backoff policy in use: counts retries and draws jitter from its seed.
#[derive(Clone, Debug)]
pub struct Backoff {
    config: BackoffConfig,
    rng: JitterRng,
    retries: u32,
    previous: Duration,
}

impl Backoff {
    /// A backoff following `config`, with jitter drawn from `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] for a multiplier below 1, a jitter fraction outside
    /// `[0, 1]`, a cap below the initial delay, or decorrelated jitter from a
    /// zero initial delay.
    pub fn new(config: BackoffConfig, seed: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Backoff {
            rng: JitterRng::seed_from_u64(seed),
            retries: 0,
            previous: config.initial,
            config,
        })
    }

    /// A fresh copy (no retries taken) drawing jitter from `seed`.
    pub fn with_seed(&self, seed: u64) -> Backoff {
        Backoff {
            config: self.config,
            rng: JitterRng::seed_from_u64(seed),
            retries: 0,
            previous: self.config.initial,
        }
    }

    /// The policy.
    pub fn config(&self) -> &BackoffConfig {
        &self.config
    }

    /// Retries taken since the last [`reset`](Backoff::reset).
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Forgets past retries (call at the start of each call).
    pub fn reset(&mut self) {
        self.retries = 0;
        self.previous = self.config.initial;
    }

    /// The delay before the next retry, jitter included, counting it; `None`
    /// when the retry limit is reached.
    pub fn next_delay(&mut self) -> Option<Duration> {
        if self
            .config
            .max_retries
            .is_some_and(|max| self.retries >= max)
        {
            return None;
        }
        let d = self.delay_for(self.retries);
        self.retries = self.retries.saturating_add(1);
        Some(d)
    }

    /// The jittered delay for retry `i` without counting it (decorrelated
    /// jitter still advances its "previous sleep").
    pub fn delay_for(&mut self, i: u32) -> Duration {
        let base = self.config.base_delay(i);
        let u: f64 = self.rng.random();
        let d = match self.config.jitter {
            Jitter::None => base,
            Jitter::Full => base.mul_f64(u),
            Jitter::Equal => base / 2 + (base / 2).mul_f64(u),
            Jitter::Decorrelated => {
                let lo = self.config.initial.as_secs_f64();
                let hi = (self.previous.as_secs_f64() * 3.0).max(lo);
                secs_to_duration(lo + (hi - lo) * u).min(self.config.max_delay)
            }
            Jitter::Proportional(f) => secs_to_duration(base.as_secs_f64() * (1.0 + u * f)),
            Jitter::Additive(a) => base.saturating_add(a.mul_f64(u)),
        };
        self.previous = d;
        d
    }
}

/// A plain retry strategy: no pacing, the backoff policy between attempts.
///
/// Retries throttled responses, server errors and timeouts; a success or any
/// other failure ends the call, and a server's refusal to be retried
/// ([`ServerHints::no_retry`](super::ServerHints::no_retry)) gives up. A
/// `Retry-After` hint longer than the backoff wins (the server knows better);
/// the driver caps it.
#[derive(Clone, Debug)]
pub struct BackoffStrategy {
    backoff: Backoff,
    last: Duration,
}

impl BackoffStrategy {
    /// A strategy following `config`, with jitter drawn from `seed`.
    ///
    /// # Errors
    /// As [`Backoff::new`].
    pub fn new(config: BackoffConfig, seed: u64) -> Result<Self, ConfigError> {
        Ok(BackoffStrategy {
            backoff: Backoff::new(config, seed)?,
            last: Duration::ZERO,
        })
    }
}

/// A backoff delay lengthened to the server's wait (its `Retry-After`), if
/// longer: the server knows better. The server's word never shortens a delay.
pub(crate) fn honouring_retry_after(delay: Duration, server_wait: Option<Duration>) -> Duration {
    server_wait.map_or(delay, |ra| ra.max(delay))
}

/// The retry decision of a strategy that follows one per-call backoff:
/// [`call_end`] first; otherwise the
/// backoff's next delay, lengthened to the server's `Retry-After`, or
/// [`Next::GiveUp`] once the backoff's retry limit is reached. The caller may
/// still lengthen a [`Next::Retry`] wait (a pacer slot, a flood guard).
pub(crate) fn backoff_next(backoff: &mut Backoff, outcome: &Outcome) -> Next {
    if let Some(end) = call_end(outcome) {
        return end;
    }
    match backoff.next_delay() {
        Some(d) => Next::Retry(honouring_retry_after(d, outcome.hints.retry_after)),
        None => Next::GiveUp,
    }
}

/// Whether a signal is worth retrying by default.
fn retryable(signal: Signal) -> bool {
    matches!(
        signal,
        Signal::Throttled | Signal::ServerError | Signal::Timeout
    )
}

/// How an attempt's outcome ends the call before any retry policy is asked,
/// if it does: [`Next::Done`] for a signal not worth retrying (a success, a
/// client failure), [`Next::GiveUp`] for a retryable one the server forbade
/// retrying ([`ServerHints::no_retry`](super::ServerHints::no_retry), e.g. a
/// negative gRPC pushback). `None` leaves the decision to the policy.
///
/// Every strategy that retries on the server's signals asks this first, the
/// [`Throttle`](super::throttle::Throttle) included, so the rule is the same
/// everywhere.
pub(crate) fn call_end(outcome: &Outcome) -> Option<Next> {
    if !retryable(outcome.signal) {
        Some(Next::Done)
    } else if outcome.hints.no_retry {
        Some(Next::GiveUp)
    } else {
        None
    }
}

impl Strategy for BackoffStrategy {
    fn name(&self) -> &str {
        "backoff"
    }

    fn before_call(&mut self, _now: Timestamp) -> Duration {
        self.backoff.reset();
        self.last = Duration::ZERO;
        Duration::ZERO
    }

    fn after_attempt(&mut self, _now: Timestamp, outcome: &Outcome) -> Next {
        let next = backoff_next(&mut self.backoff, outcome);
        match next {
            Next::Retry(d) => self.last = d,
            Next::Done => self.last = Duration::ZERO,
            Next::GiveUp => {}
        }
        next
    }

    fn current_delay(&self) -> Duration {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerHints;
    use proptest::prelude::{any, prop_assert, proptest};

    fn secs(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&s| Duration::from_secs(s)).collect()
    }

    fn take(b: &mut Backoff, n: usize) -> Vec<Duration> {
        (0..n).filter_map(|_| b.next_delay()).collect()
    }

    #[test]
    fn linear_sequence_of_000() {
        let cfg = BackoffConfig::linear(Duration::from_secs(1), Duration::from_secs(1));
        let mut b = Backoff::new(cfg, 0).unwrap();
        assert_eq!(take(&mut b, 5), secs(&[1, 2, 3, 4, 5]));
        // With the cap of 000's `maxInterval`.
        let mut b = Backoff::new(cfg.with_max_delay(Duration::from_secs(3)), 0).unwrap();
        assert_eq!(take(&mut b, 5), secs(&[1, 2, 3, 3, 3]));
    }

    #[test]
    fn exponential_sequence_of_000() {
        let cfg = BackoffConfig::exponential(Duration::from_secs(1), 2.0).with_jitter(Jitter::None);
        let mut b = Backoff::new(cfg, 0).unwrap();
        assert_eq!(take(&mut b, 5), secs(&[1, 2, 4, 8, 16]));
    }

    #[test]
    fn constant_and_retry_limit() {
        let cfg = BackoffConfig::constant(Duration::from_millis(250)).with_max_retries(3);
        let mut b = Backoff::new(cfg, 0).unwrap();
        assert_eq!(take(&mut b, 10), vec![Duration::from_millis(250); 3]);
        assert_eq!(b.next_delay(), None);
        b.reset();
        assert!(b.next_delay().is_some());
    }

    #[test]
    fn google_sequence_of_004() {
        let mut b = Backoff::new(BackoffConfig::google(), 42).unwrap();
        let got = take(&mut b, 10);
        assert_eq!(got.len(), 5, "stop after the 16 s wait");
        for (d, base) in got.iter().zip([1u64, 2, 4, 8, 16]) {
            let base = Duration::from_secs(base);
            assert!(
                *d >= base && *d <= base + Duration::from_millis(1000),
                "{d:?}"
            );
        }
        // Fresh randomness after each wait.
        let extra: Vec<_> = got
            .iter()
            .zip([1u64, 2, 4, 8, 16])
            .map(|(d, s)| *d - Duration::from_secs(s))
            .collect();
        assert!(extra.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn cap_first_then_jitter() {
        // Full jitter of a capped base: uniform below the cap, no mass at it.
        let cfg = BackoffConfig::exponential(Duration::from_secs(1), 2.0)
            .with_max_delay(Duration::from_secs(4));
        let mut b = Backoff::new(cfg, 1).unwrap();
        let late: Vec<_> = (10..2010).map(|i| b.delay_for(i)).collect();
        assert!(late.iter().all(|d| *d < Duration::from_secs(4)));
        let mean = late.iter().map(Duration::as_secs_f64).sum::<f64>() / late.len() as f64;
        assert!((mean - 2.0).abs() < 0.15, "mean {mean}");
        // Equal jitter stays in [d/2, d).
        let mut b = Backoff::new(cfg.with_jitter(Jitter::Equal), 1).unwrap();
        for i in 0..100 {
            let base = cfg.base_delay(i);
            let d = b.delay_for(i);
            assert!(d >= base / 2 && d <= base, "{d:?} vs {base:?}");
        }
    }

    #[test]
    fn proportional_is_herokus_ten_percent() {
        let cfg =
            BackoffConfig::constant(Duration::from_secs(10)).with_jitter(Jitter::Proportional(0.1));
        let mut b = Backoff::new(cfg, 5).unwrap();
        for _ in 0..100 {
            let d = b.next_delay().unwrap();
            assert!(d >= Duration::from_secs(10) && d <= Duration::from_secs(11));
        }
    }

    #[test]
    fn decorrelated_stays_between_initial_and_cap() {
        let cfg = BackoffConfig::exponential(Duration::from_millis(100), 2.0)
            .with_max_delay(Duration::from_secs(2))
            .with_jitter(Jitter::Decorrelated);
        let mut b = Backoff::new(cfg, 9).unwrap();
        let mut prev = Duration::from_millis(100);
        for _ in 0..200 {
            let d = b.next_delay().unwrap();
            assert!(d >= Duration::from_millis(100) && d <= Duration::from_secs(2));
            assert!(d <= (prev * 3).max(Duration::from_millis(100)));
            prev = d;
        }
    }

    #[test]
    fn invalid_policies_are_errors() {
        let e = BackoffConfig::exponential(Duration::from_secs(1), 0.5);
        assert!(Backoff::new(e, 0).is_err());
        let c =
            BackoffConfig::constant(Duration::from_secs(2)).with_max_delay(Duration::from_secs(1));
        assert!(Backoff::new(c, 0).is_err());
        let p = BackoffConfig::constant(Duration::from_secs(1))
            .with_jitter(Jitter::Proportional(f64::NAN));
        assert!(Backoff::new(p, 0).is_err());
    }

    #[test]
    fn strategy_retries_what_is_retryable_and_honours_retry_after() {
        let cfg = BackoffConfig::constant(Duration::from_secs(1)).with_max_retries(2);
        let mut s = BackoffStrategy::new(cfg, 0).unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(s.before_call(t), Duration::ZERO);
        let hinted = Outcome::throttled().with_hints(ServerHints {
            retry_after: Some(Duration::from_secs(5)),
            ..ServerHints::default()
        });
        assert_eq!(
            s.after_attempt(t, &hinted),
            Next::Retry(Duration::from_secs(5))
        );
        assert_eq!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(Duration::from_secs(1))
        );
        assert_eq!(s.after_attempt(t, &Outcome::throttled()), Next::GiveUp);
        s.before_call(t);
        let failure = Outcome::new(Signal::Failure);
        assert_eq!(s.after_attempt(t, &failure), Next::Done);
    }

    #[test]
    fn strategy_gives_up_when_the_server_forbids_a_retry() {
        let cfg = BackoffConfig::constant(Duration::from_secs(1)).with_max_retries(2);
        let mut s = BackoffStrategy::new(cfg, 0).unwrap();
        let t = Timestamp::ZERO;
        s.before_call(t);
        let forbid = ServerHints {
            no_retry: true,
            policy: None,
            ..ServerHints::default()
        };
        assert_eq!(
            s.after_attempt(t, &Outcome::throttled().with_hints(forbid)),
            Next::GiveUp
        );
        // A success that carries the refusal is still a success.
        s.before_call(t);
        assert_eq!(
            s.after_attempt(t, &Outcome::success().with_hints(forbid)),
            Next::Done
        );
    }

    proptest! {

        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn never_panics_and_respects_cap(
            seed in any::<u64>(),
            initial_ms in 1u64..10_000,
            cap_extra in 0u64..100_000,
            mult in 1.0f64..10.0,
            kind in 0u8..4,
            i in any::<u32>(),
        ) {
            let jitter = [Jitter::None, Jitter::Full, Jitter::Equal, Jitter::Decorrelated][usize::from(kind)];
            let cap = Duration::from_millis(initial_ms + cap_extra);
            let cfg = BackoffConfig::exponential(Duration::from_millis(initial_ms), mult)
                .with_max_delay(cap)
                .with_jitter(jitter);
            let mut b = Backoff::new(cfg, seed).unwrap();
            prop_assert!(b.delay_for(i) <= cap);
            prop_assert!(cfg.base_delay(i) <= cap);
        }
    }
}
