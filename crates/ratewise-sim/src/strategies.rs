//! The strategies the simulator can drive, by name.
//!
//! This is a registry of *constructors* only: every entry builds a real
//! strategy object from `ratewise_client` with its published defaults.
//! The simulator never re-implements a strategy; it only calls
//! `before_call` / `after_attempt` on what these functions return.
//!
//! Each object gets its own jitter seed (derived by the engine from the
//! run's seed), so runs replay exactly.

use std::time::Duration;

use ratewise::Timestamp;
use ratewise_client::aimd::{AimdConfig, AimdStrategy};
use ratewise_client::auto_sleeper::{AutoSleeper, AutoSleeperConfig};
use ratewise_client::backoff::{BackoffConfig, BackoffStrategy};
use ratewise_client::budget::{RetryBudget, RetryBudgetConfig, WithBudget};
use ratewise_client::cubic::CubicStrategy;
use ratewise_client::flood_guard::{FloodGuardStrategy, MAX_FLOOD_GUARD_COUNT};
use ratewise_client::heroku::{
    ExponentialBackoff, ExponentialIncreaseGradualDecrease,
    ExponentialIncreaseProportionalDecrease, ExponentialIncreaseProportionalRemainingDecrease,
    HerokuConfig, Null,
};
use ratewise_client::hints::{ResetMeaning, WithHints};
use ratewise_client::sre::{SreConfig, SreThrottler, WithSre};
use ratewise_client::{
    Adaptation, ConfigError, Next, Outcome, Strategy, Throttle, ThrottleConfig, ThrottleStrategy,
};

use crate::error::SimError;

/// SplitMix64: a fixed, portable mixer used to derive independent seeds —
/// the engine's per-client seeds from the run's seed, and a strategy's
/// second seed from its own.
pub fn derive_seed(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What the engine passes to a strategy constructor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StrategyParams {
    /// Seed for the strategy's jitter.
    pub seed: u64,
    /// The scenario's starting sleep (Heroku's `starting_sleep_for`), for
    /// strategies that keep one; `None` keeps the strategy's default.
    pub initial_delay: Option<Duration>,
    /// The quota one client thread knows it has (`count` per `window`),
    /// for strategies that pace to a known quota (the flood guard). The
    /// engine fills it from the scenario's `[strategy]` section or, failing
    /// that, with the thread's fair share of the server's quota
    /// ([`ServerConfig::fair_share`](crate::server::ServerConfig::fair_share));
    /// `None` means no sustained quota is known and the guard never paces.
    pub known_quota: Option<(u32, Duration)>,
    /// How hint-reading strategies interpret `RateLimit-Reset`.
    pub reset_meaning: ResetMeaning,
}

/// Builds one strategy object; the error says what was invalid.
pub type BuildFn = fn(&StrategyParams) -> Result<Box<dyn Strategy>, String>;

/// Builds a run's objects at once, one per item of `params`, held by value
/// ([`Fleet`]); the error says what was invalid.
pub type FleetFn =
    fn(params: &mut dyn Iterator<Item = StrategyParams>) -> Result<Box<dyn Fleet>, String>;

/// A run's strategy objects, addressed by index: the engine's only way to
/// reach them.
///
/// A fleet of one concrete type (`Vec<S>`) holds its objects side by side,
/// with no pointer or allocation each: a hundred thousand simulated clients
/// of exponential backoff take 6.4 MB, read in place. Boxed objects
/// (`Vec<Box<dyn Strategy>>`) are a fleet too, for a [`BuildFn`] alone.
pub trait Fleet {
    /// Objects held.
    fn len(&self) -> usize;
    /// Whether no object is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// [`Strategy::before_call`] of object `i`.
    fn before_call(&mut self, i: usize, now: Timestamp) -> Duration;
    /// [`Strategy::before_send`] of object `i`.
    fn before_send(&mut self, i: usize, now: Timestamp) -> Duration;
    /// [`Strategy::after_attempt`] of object `i`.
    fn after_attempt(&mut self, i: usize, now: Timestamp, outcome: &Outcome) -> Next;
    /// Starts loading object `i` into the cache: the engine calls it for
    /// the next event's object while it handles the current one.
    fn prefetch(&self, _i: usize) {}
}

impl<S: Strategy> Fleet for Vec<S> {
    fn len(&self) -> usize {
        <[S]>::len(self)
    }

    fn before_call(&mut self, i: usize, now: Timestamp) -> Duration {
        self[i].before_call(now)
    }

    fn before_send(&mut self, i: usize, now: Timestamp) -> Duration {
        self[i].before_send(now)
    }

    fn after_attempt(&mut self, i: usize, now: Timestamp, outcome: &Outcome) -> Next {
        self[i].after_attempt(now, outcome)
    }

    fn prefetch(&self, i: usize) {
        if let Some(s) = self.get(i) {
            crate::prefetch::prefetch(s);
        }
    }
}

/// A named strategy constructor.
#[derive(Clone, Copy)]
pub struct StrategyInfo {
    /// Name used on the command line and in reports.
    pub name: &'static str,
    /// One line for `ratewise strategies`.
    pub description: &'static str,
    /// The constructor.
    pub build: BuildFn,
    /// The constructor of a whole run's objects held by value; `None`
    /// builds them one by one with [`build`](Self::build), boxed.
    pub fleet: Option<FleetFn>,
}

impl std::fmt::Debug for StrategyInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrategyInfo")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl StrategyInfo {
    /// Builds an object, mapping a constructor error to a field error.
    ///
    /// # Errors
    /// [`SimError::Invalid`] on `strategy.initial_delay_s` when the
    /// constructor rejects the parameters.
    pub fn instantiate(&self, params: &StrategyParams) -> Result<Box<dyn Strategy>, SimError> {
        (self.build)(params).map_err(|m| self.rejected(&m))
    }

    /// Builds one object per item of `params`, by value when the entry has
    /// a [`fleet`](Self::fleet) constructor.
    ///
    /// # Errors
    /// As [`instantiate`](Self::instantiate).
    pub fn instantiate_fleet(
        &self,
        params: &mut dyn Iterator<Item = StrategyParams>,
    ) -> Result<Box<dyn Fleet>, SimError> {
        match self.fleet {
            Some(fleet) => fleet(params).map_err(|m| self.rejected(&m)),
            None => {
                let mut objects = Vec::with_capacity(params.size_hint().0);
                for p in params {
                    objects.push(self.instantiate(&p)?);
                }
                Ok(Box::new(objects))
            }
        }
    }

    fn rejected(&self, message: &str) -> SimError {
        SimError::invalid(
            "strategy.initial_delay_s",
            format!(
                "strategy `{}` rejected its parameters: {message}",
                self.name
            ),
        )
    }
}

fn heroku(p: &StrategyParams, multiplier: f64) -> HerokuConfig {
    HerokuConfig {
        starting_sleep: p.initial_delay.unwrap_or(Duration::ZERO),
        multiplier,
        ..HerokuConfig::default()
    }
}

fn boxed<S: Strategy + 'static, E: std::fmt::Display>(
    r: Result<S, E>,
) -> Result<Box<dyn Strategy>, String> {
    r.map(|s| Box::new(s) as Box<dyn Strategy>)
        .map_err(|e| e.to_string())
}

/// Every object `make` builds from `params`, in one `Vec<S>`.
fn by_value<S: Strategy + 'static, E: std::fmt::Display>(
    params: &mut dyn Iterator<Item = StrategyParams>,
    make: impl Fn(&StrategyParams) -> Result<S, E>,
) -> Result<Box<dyn Fleet>, String> {
    let made = params.map(|p| make(&p).map_err(|e| e.to_string()));
    // Objects of a whole number of cache lines start on one, so reading
    // one loads as many lines as it fills, not one more (an object of no
    // size stays of no size).
    let size = std::mem::size_of::<S>();
    if size > 0 && size % 64 == 0 {
        Ok(Box::new(
            made.map(|o| o.map(OnItsLines))
                .collect::<Result<Vec<_>, _>>()?,
        ))
    } else {
        Ok(Box::new(made.collect::<Result<Vec<_>, _>>()?))
    }
}

/// An object aligned to a cache line.
#[repr(align(64))]
struct OnItsLines<S>(S);

impl<S: Strategy> Strategy for OnItsLines<S> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        self.0.before_call(now)
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        self.0.after_attempt(now, outcome)
    }

    fn before_send(&mut self, now: Timestamp) -> Duration {
        self.0.before_send(now)
    }

    fn current_delay(&self) -> Duration {
        self.0.current_delay()
    }

    fn current_rate(&self) -> Option<f64> {
        self.0.current_rate()
    }
}

/// A registry entry whose both constructors come from one expression that
/// builds an object from the parameters named `$p`.
macro_rules! strategy {
    ($name:expr, $description:expr, |$p:ident| $make:expr $(,)?) => {
        StrategyInfo {
            name: $name,
            description: $description,
            build: |params| boxed((|$p: &StrategyParams| $make)(params)),
            fleet: Some(|params| by_value(params, |$p| $make)),
        }
    };
}

/// Every strategy, Heroku's published five first, in the blog's order.
pub const ALL: &[StrategyInfo] = &[
    strategy!(
        "eb-x2",
        "Heroku exponential backoff, multiplier 2.0: sleep 0.8·2^i·(1+U) per consecutive 429",
        |p| ExponentialBackoff::new(heroku(p, 2.0), p.seed)
    ),
    strategy!(
        "eb",
        "Heroku exponential backoff, multiplier 1.2 (the gem default)",
        |p| ExponentialBackoff::new(heroku(p, 1.2), p.seed)
    ),
    strategy!(
        "eigd",
        "Heroku exponential increase, gradual (constant 0.8 s) decrease",
        |p| ExponentialIncreaseGradualDecrease::new(heroku(p, 1.2), p.seed)
    ),
    strategy!(
        "eipd",
        "Heroku exponential increase, proportional decrease (s·(1−1/4500) per call)",
        |p| ExponentialIncreaseProportionalDecrease::new(heroku(p, 1.2), p.seed)
    ),
    strategy!(
        "eiprd",
        "Heroku exponential increase, proportional remaining decrease (platform-api default)",
        |p| ExponentialIncreaseProportionalRemainingDecrease::new(heroku(p, 1.2), p.seed)
    ),
    strategy!(
        "null",
        "no throttling: one attempt per call, 429s handed back",
        |_p| Ok::<_, ConfigError>(Null)
    ),
    strategy!(
        "auto-sleeper",
        "responsive exponential backoff (AutoSleeper): back off while throttled, speed up on success",
        |p| AutoSleeper::new(AutoSleeperConfig::default(), p.seed)
    ),
    strategy!(
        "aimd",
        "adaptive rate (start 10/s, halve on throttle, +0.5/s per 10 successes) + discounted backoff",
        |p| AimdStrategy::with_defaults(p.seed)
    ),
    strategy!(
        "aimd-hints",
        "aimd, plus RateLimit-Remaining/Reset hints that lower the pace before any 429 (needs both; Heroku sends no Reset)",
        |p| AimdStrategy::with_defaults(p.seed)
            .map(|s| WithHints::with_meaning(s, p.reset_meaning))
    ),
    strategy!(
        "cubic",
        "AWS SDK adaptive mode: CUBIC rate (beta 0.7, C 0.4) + standard backoff",
        |p| CubicStrategy::aws_adaptive(p.seed)
    ),
    strategy!(
        "flood-guard",
        "Google's flood buster: pace own sends to this client's fair share of the quota + Google backoff",
        |p| {
            // Without a known quota, a guard so wide it never holds a send.
            let (count, window) = p
                .known_quota
                .unwrap_or((MAX_FLOOD_GUARD_COUNT, Duration::from_millis(1)));
            FloodGuardStrategy::google(count, window, p.seed)
        }
    ),
    strategy!(
        "google-backoff",
        "Google's 1 s, 2 s, 4 s … + random ≤ 1 s, five retries",
        |p| BackoffStrategy::new(BackoffConfig::google(), p.seed)
    ),
    strategy!(
        "aws-standard-backoff",
        "AWS SDK standard retry backoff: full jitter of min(2^i s, 20 s), two retries",
        |p| BackoffStrategy::new(BackoffConfig::aws_standard(), p.seed)
    ),
    strategy!(
        "sre+eb",
        "Heroku exponential backoff behind the SRE book's client-side throttle (K = 2, 2-minute window)",
        |p| {
            let sre = SreThrottler::new(SreConfig::default(), derive_seed(p.seed))?;
            ExponentialBackoff::new(heroku(p, 1.2), p.seed).map(|eb| WithSre::new(eb, sre))
        }
    ),
    strategy!(
        "aws-standard+budget",
        "AWS SDK standard retry backoff plus its retry budget (500 tokens; a retry costs 5, successes pay it back)",
        |p| {
            let budget = RetryBudget::new(RetryBudgetConfig::default())?;
            BackoffStrategy::new(BackoffConfig::aws_standard(), p.seed)
                .map(|b| WithBudget::new(b, budget))
        }
    ),
    strategy!(
        "throttle",
        "ratewise's composed Throttle with its defaults: adaptive pacing (AIMD gated by RateLimit-Remaining), hints with reset meaning told apart, never gives up while throttled",
        |p| {
            let throttle = Throttle::new(ThrottleConfig {
                seed: p.seed,
                hint_reset: p.reset_meaning,
                ..ThrottleConfig::default()
            });
            throttle.map(|t| ThrottleStrategy::new(t, ()))
        }
    ),
    strategy!(
        "throttle-v1",
        "the Throttle's previous default configuration, for comparison: AIMD from 10/s, resets read as window ends, 5 attempts, 100 ms·2^n backoff",
        |p| {
            let throttle = Throttle::new(ThrottleConfig {
                seed: p.seed,
                adaptation: Adaptation::Aimd(AimdConfig {
                    decrease_cooldown: Duration::from_secs(1),
                    ..AimdConfig::default()
                }),
                backoff: BackoffConfig::exponential(Duration::from_millis(100), 2.0)
                    .with_max_delay(Duration::from_secs(20)),
                max_attempts: 5,
                burst: None,
                hint_reset: match p.reset_meaning {
                    ResetMeaning::Auto => ResetMeaning::WindowEnd,
                    m => m,
                },
                ..ThrottleConfig::default()
            });
            throttle.map(|t| ThrottleStrategy::new(t, ()))
        }
    ),
];

/// The five strategies of Heroku's published table, in its order.
pub const HEROKU_FIVE: [&str; 5] = ["eb-x2", "eb", "eigd", "eipd", "eiprd"];

/// Looks a strategy up by name.
///
/// # Errors
/// [`SimError::UnknownStrategy`].
pub fn find(name: &str) -> Result<StrategyInfo, SimError> {
    ALL.iter()
        .find(|s| s.name == name)
        .copied()
        .ok_or_else(|| SimError::UnknownStrategy(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_builds_with_and_without_initial_delay() {
        for s in ALL {
            for initial_delay in [None, Some(Duration::from_secs(1))] {
                let p = StrategyParams {
                    seed: 7,
                    initial_delay,
                    known_quota: Some((10, Duration::from_secs(1))),
                    reset_meaning: ResetMeaning::default(),
                };
                assert!(s.instantiate(&p).is_ok(), "{}", s.name);
            }
        }
    }

    #[test]
    fn names_are_unique_and_findable() {
        for (i, s) in ALL.iter().enumerate() {
            assert!(ALL.iter().skip(i + 1).all(|o| o.name != s.name));
            assert_eq!(find(s.name).map(|f| f.name).ok(), Some(s.name));
        }
        assert!(matches!(find("nope"), Err(SimError::UnknownStrategy(_))));
    }
}
