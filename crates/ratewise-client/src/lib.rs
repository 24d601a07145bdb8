//! Client-side throttling: how a *caller* of a rate-limited API decides when
//! to send, and how long to wait after being told to slow down.
//!
//! ```
//! use std::time::Duration;
//! use ratewise_client::backoff::{BackoffConfig, BackoffStrategy, Jitter};
//! use ratewise_client::{Next, Outcome, Strategy, Timestamp};
//!
//! // Exponential backoff from 100 ms, no jitter, so the example is exact.
//! let config = BackoffConfig::exponential(Duration::from_millis(100), 2.0)
//!     .with_jitter(Jitter::None);
//! let mut strategy = BackoffStrategy::new(config, 7)?;
//! let now = Timestamp::ZERO;
//! assert_eq!(strategy.before_call(now), Duration::ZERO);
//! // Throttled twice: wait 100 ms, then 200 ms; a success ends the call.
//! assert_eq!(strategy.after_attempt(now, &Outcome::throttled()), Next::Retry(Duration::from_millis(100)));
//! assert_eq!(strategy.after_attempt(now, &Outcome::throttled()), Next::Retry(Duration::from_millis(200)));
//! assert_eq!(strategy.after_attempt(now, &Outcome::success()), Next::Done);
//! # Ok::<(), ratewise_client::ConfigError>(())
//! ```
//!
//! Every strategy is a sans-IO state machine behind one trait, [`Strategy`]:
//! asked how long to wait before a call, told what each attempt produced. It
//! never sleeps or reads a clock, so the same object runs in an async driver
//! and in the `ratewise-sim` simulator; jitter comes from a seed.
//!
//! Strategies: [`heroku`] (Heroku's EB, EIGD, EIPD, EIPRD), [`backoff`]
//! (constant to decorrelated jitter, AWS standard), [`auto_sleeper`], [`aimd`],
//! [`cubic`] (the AWS SDKs' adaptive mode), [`flood_guard`], [`sre`] (Google's
//! client-side throttling), [`budget`] (retry tokens), [`hints`] (server
//! headers as a pace). [`Throttle`] composes a pacer (a core
//! [`Gcra`](ratewise::Gcra)), a controller, a pause on throttling, a backoff,
//! a budget and the SRE throttle per partition; its async handle
//! `AsyncThrottle` (feature `tokio`) owns the timer and runtime state and
//! runs calls. Features: `tokio`; `http` (classification of `http` responses
//! and, with `tokio`, `exchange`, the loop the reqwest and tower drivers
//! share); `observe` (its metrics and `tracing` events).

#![warn(missing_docs)]
// docs.rs labels feature-gated items; `doc_cfg` is nightly-only.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::time::Duration;

mod jitter_rng;
pub(crate) use jitter_rng::JitterRng;

/// The time every state machine here is told: nanoseconds since a clock's
/// origin.
pub use ratewise::Timestamp;

/// The gauges of a wrapper strategy (a strategy around an `inner` one, such
/// as `WithBudget`, `WithHints`, `WithSre`): a wrapper changes when and
/// whether to send, never the inner strategy's base delay or target rate, so
/// it reports the inner strategy's. Expands to the two [`Strategy`] methods;
/// defined before the modules so that they can use it.
macro_rules! forward_gauges_to_inner {
    () => {
        fn current_delay(&self) -> std::time::Duration {
            self.inner.current_delay()
        }

        fn current_rate(&self) -> Option<f64> {
            self.inner.current_rate()
        }
    };
}

pub mod adaptive;
pub mod aimd;
pub mod auto_sleeper;
pub mod backoff;
pub mod budget;
mod config;
pub mod cubic;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod driver;
#[cfg(all(feature = "tokio", feature = "http"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "tokio", feature = "http"))))]
pub mod exchange;
pub mod flood_guard;
pub mod heroku;
pub mod hints;
pub mod pacer;
pub mod sre;
pub mod throttle;
pub mod throttle_strategy;

pub use config::{secs_to_duration, ConfigError};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use driver::{AsyncThrottle, Classify, FirstContact, ThrottleError};
pub use throttle::{Adaptation, StopReason, Throttle, ThrottleConfig, ThrottleMetrics};
pub use throttle_strategy::ThrottleStrategy;

/// What an attempt produced, as far as throttling is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signal {
    /// The request succeeded.
    Success,
    /// The server said "slow down" (429, 503 with Retry-After, a rate-limit
    /// 403, gRPC `RESOURCE_EXHAUSTED`, AWS throttling codes, …).
    Throttled,
    /// The server failed for another reason (5xx).
    ServerError,
    /// No answer in time.
    Timeout,
    /// Any other failure (client error, connection refused, …); not retried
    /// by default.
    Failure,
}

/// What a response revealed about the server's limits. All optional: most
/// responses reveal nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerHints {
    /// `Retry-After` / `x-amz-retry-after`: the server's own wait.
    pub retry_after: Option<Duration>,
    /// `RateLimit-Remaining` and its variants.
    pub remaining: Option<u64>,
    /// `RateLimit-Limit` and its variants.
    pub limit: Option<u64>,
    /// Time until the server's window or bucket resets.
    pub reset_after: Option<Duration>,
    /// The server asked the client not to retry this request at all (gRPC: a
    /// negative or unparseable `grpc-retry-pushback-ms`). The retrying
    /// strategies then give up ([`Next::GiveUp`]) instead of retrying, and a
    /// [`Throttle`] ends the call with [`StopReason::RetryForbidden`]. Only
    /// the strategies that reproduce a published client exactly
    /// ([`heroku`], [`auto_sleeper`]) ignore it, as their sources do.
    pub no_retry: bool,
    /// The governing IETF `RateLimit-Policy`: its quota `q` and window `w`
    /// (the policy of the tightest `RateLimit` item, or the only policy).
    /// `q / w` is the server's stated sustained rate, which a
    /// [`Throttle`] paces at once the quota the `RateLimit` count shows
    /// has run out (from the first response when there is no count),
    /// before any 429.
    pub policy: Option<(u64, Duration)>,
}

/// [`ServerHints::default`] in a `const` context.
const NO_HINTS: ServerHints = ServerHints {
    retry_after: None,
    remaining: None,
    limit: None,
    reset_after: None,
    no_retry: false,
    policy: None,
};

/// An attempt's result, as fed back to a strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// What happened.
    pub signal: Signal,
    /// What the response said about the server's limits.
    pub hints: ServerHints,
}

impl Outcome {
    /// An attempt that produced `signal`, with no hints.
    pub const fn new(signal: Signal) -> Self {
        Outcome {
            signal,
            hints: NO_HINTS,
        }
    }

    /// A success with no hints.
    pub const fn success() -> Self {
        Outcome::new(Signal::Success)
    }

    /// A throttled response with no hints.
    pub const fn throttled() -> Self {
        Outcome::new(Signal::Throttled)
    }

    /// The same outcome with `hints`.
    pub const fn with_hints(self, hints: ServerHints) -> Self {
        Outcome {
            signal: self.signal,
            hints,
        }
    }
}

/// What a strategy wants after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The call is over: hand the response to the caller.
    Done,
    /// Try again after waiting this long.
    Retry(Duration),
    /// Stop retrying and hand the last response to the caller as a failure
    /// (retry limit, budget, or deadline reached).
    GiveUp,
}

/// A client throttling strategy as a state machine.
///
/// One *call* is: `before_call` (the caller waits what it returns), then one
/// or more attempts, each followed by `after_attempt`, until it answers
/// [`Next::Done`] or [`Next::GiveUp`]. Strategies that keep state across
/// calls (most do) are shared between the tasks of one client by wrapping
/// them in a lock; the simulator models both "state per thread" and "state
/// per process" this way.
pub trait Strategy: Send {
    /// A short, stable name (used by the simulator and in reports).
    fn name(&self) -> &str;

    /// How long to wait before the first attempt of a new call at `now`.
    fn before_call(&mut self, now: Timestamp) -> Duration;

    /// Told what an attempt produced at `now`; says what to do next.
    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next;

    /// Called when the wait `before_call` or a [`Next::Retry`] gave has
    /// passed, just before the attempt is sent at `now`: a further wait
    /// (then it is asked again), or zero to send now. The default sends at
    /// once; a strategy whose waits were handed out from a schedule that
    /// can change meanwhile ([`ThrottleStrategy`]:
    /// a cut or a pause shared by many calls) says how much longer.
    fn before_send(&mut self, _now: Timestamp) -> Duration {
        Duration::ZERO
    }

    /// The strategy's current base delay, before jitter: the value Heroku's
    /// charts plot. Strategies without one return zero.
    fn current_delay(&self) -> Duration {
        Duration::ZERO
    }

    /// The strategy's current target rate in requests per second, for
    /// rate-based strategies; `None` otherwise.
    fn current_rate(&self) -> Option<f64> {
        None
    }
}

impl<S: Strategy + ?Sized> Strategy for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn before_call(&mut self, now: Timestamp) -> Duration {
        (**self).before_call(now)
    }
    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        (**self).after_attempt(now, outcome)
    }
    fn before_send(&mut self, now: Timestamp) -> Duration {
        (**self).before_send(now)
    }
    fn current_delay(&self) -> Duration {
        (**self).current_delay()
    }
    fn current_rate(&self) -> Option<f64> {
        (**self).current_rate()
    }
}

// Response classification and rate-limit header parsing.
pub mod classify;
pub mod headers;

pub use classify::{classify, Classifier, ResponseView};
pub use headers::{parse_hints, HeaderSource, RetryAfter};
