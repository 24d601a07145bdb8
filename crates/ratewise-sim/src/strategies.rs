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
use ratewise_client::{Adaptation, Strategy, Throttle, ThrottleConfig, ThrottleStrategy};

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

/// A named strategy constructor.
#[derive(Clone, Copy)]
pub struct StrategyInfo {
    /// Name used on the command line and in reports.
    pub name: &'static str,
    /// One line for `ratewise strategies`.
    pub description: &'static str,
    /// The constructor.
    pub build: BuildFn,
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
        (self.build)(params).map_err(|m| {
            SimError::invalid(
                "strategy.initial_delay_s",
                format!("strategy `{}` rejected its parameters: {m}", self.name),
            )
        })
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

/// Every strategy, Heroku's published five first, in the blog's order.
pub const ALL: &[StrategyInfo] = &[
    StrategyInfo {
        name: "eb-x2",
        description:
            "Heroku exponential backoff, multiplier 2.0: sleep 0.8·2^i·(1+U) per consecutive 429",
        build: |p| boxed(ExponentialBackoff::new(heroku(p, 2.0), p.seed)),
    },
    StrategyInfo {
        name: "eb",
        description: "Heroku exponential backoff, multiplier 1.2 (the gem default)",
        build: |p| boxed(ExponentialBackoff::new(heroku(p, 1.2), p.seed)),
    },
    StrategyInfo {
        name: "eigd",
        description: "Heroku exponential increase, gradual (constant 0.8 s) decrease",
        build: |p| {
            boxed(ExponentialIncreaseGradualDecrease::new(
                heroku(p, 1.2),
                p.seed,
            ))
        },
    },
    StrategyInfo {
        name: "eipd",
        description: "Heroku exponential increase, proportional decrease (s·(1−1/4500) per call)",
        build: |p| {
            boxed(ExponentialIncreaseProportionalDecrease::new(
                heroku(p, 1.2),
                p.seed,
            ))
        },
    },
    StrategyInfo {
        name: "eiprd",
        description:
            "Heroku exponential increase, proportional remaining decrease (platform-api default)",
        build: |p| {
            boxed(ExponentialIncreaseProportionalRemainingDecrease::new(
                heroku(p, 1.2),
                p.seed,
            ))
        },
    },
    StrategyInfo {
        name: "null",
        description: "no throttling: one attempt per call, 429s handed back",
        build: |_| Ok(Box::new(Null)),
    },
    StrategyInfo {
        name: "auto-sleeper",
        description:
            "responsive exponential backoff (AutoSleeper): back off while throttled, speed up on success",
        build: |p| boxed(AutoSleeper::new(AutoSleeperConfig::default(), p.seed)),
    },
    StrategyInfo {
        name: "aimd",
        description: "adaptive rate (start 10/s, halve on throttle, +0.5/s per 10 successes) + discounted backoff",
        build: |p| boxed(AimdStrategy::with_defaults(p.seed)),
    },
    StrategyInfo {
        name: "aimd-hints",
        description: "aimd, plus RateLimit-Remaining/Reset hints that lower the pace before any 429 (needs both; Heroku sends no Reset)",
        build: |p| {
            boxed(
                AimdStrategy::with_defaults(p.seed)
                    .map(|s| WithHints::with_meaning(s, p.reset_meaning)),
            )
        },
    },
    StrategyInfo {
        name: "cubic",
        description: "AWS SDK adaptive mode: CUBIC rate (beta 0.7, C 0.4) + standard backoff",
        build: |p| boxed(CubicStrategy::aws_adaptive(p.seed)),
    },
    StrategyInfo {
        name: "flood-guard",
        description: "Google's flood buster: pace own sends to this client's fair share of the quota + Google backoff",
        build: |p| {
            // Without a known quota, a guard so wide it never holds a send.
            let (count, window) = p
                .known_quota
                .unwrap_or((MAX_FLOOD_GUARD_COUNT, Duration::from_millis(1)));
            boxed(FloodGuardStrategy::google(count, window, p.seed))
        },
    },
    StrategyInfo {
        name: "google-backoff",
        description: "Google's 1 s, 2 s, 4 s … + random ≤ 1 s, five retries",
        build: |p| boxed(BackoffStrategy::new(BackoffConfig::google(), p.seed)),
    },
    StrategyInfo {
        name: "aws-standard-backoff",
        description: "AWS SDK standard retry backoff: full jitter of min(2^i s, 20 s), two retries",
        build: |p| boxed(BackoffStrategy::new(BackoffConfig::aws_standard(), p.seed)),
    },
    StrategyInfo {
        name: "sre+eb",
        description: "Heroku exponential backoff behind the SRE book's client-side throttle (K = 2, 2-minute window)",
        build: |p| {
            let sre = SreThrottler::new(SreConfig::default(), derive_seed(p.seed))
                .map_err(|e| e.to_string())?;
            boxed(ExponentialBackoff::new(heroku(p, 1.2), p.seed).map(|eb| WithSre::new(eb, sre)))
        },
    },
    StrategyInfo {
        name: "aws-standard+budget",
        description: "AWS SDK standard retry backoff plus its retry budget (500 tokens; a retry costs 5, successes pay it back)",
        build: |p| {
            let budget =
                RetryBudget::new(RetryBudgetConfig::default()).map_err(|e| e.to_string())?;
            boxed(
                BackoffStrategy::new(BackoffConfig::aws_standard(), p.seed)
                    .map(|b| WithBudget::new(b, budget)),
            )
        },
    },
    StrategyInfo {
        name: "throttle",
        description: "ratewise's composed Throttle with its defaults: adaptive pacing (AIMD gated by RateLimit-Remaining), hints with reset meaning told apart, never gives up while throttled",
        build: |p| {
            let throttle = Throttle::new(ThrottleConfig {
                seed: p.seed,
                hint_reset: p.reset_meaning,
                ..ThrottleConfig::default()
            });
            boxed(throttle.map(|t| ThrottleStrategy::new(t, ())))
        },
    },
    StrategyInfo {
        name: "throttle-v1",
        description: "the Throttle's previous default configuration, for comparison: AIMD from 10/s, resets read as window ends, 5 attempts, 100 ms·2^n backoff",
        build: |p| {
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
            boxed(throttle.map(|t| ThrottleStrategy::new(t, ())))
        },
    },
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
