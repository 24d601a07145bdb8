//! A circuit breaker: stop calling a dependency that keeps failing, and
//! probe it again after a pause. A state machine told the time, like the
//! limiters; the tower layer in `ratewise-tower` drives it.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::breaker::{BreakerConfig, CallResult, CircuitBreaker, State};
//! use ratewise::Timestamp;
//!
//! let breaker = CircuitBreaker::new(
//!     BreakerConfig::default()
//!         .consecutive_failures(3)
//!         .open_for(Duration::from_secs(5)),
//! )?;
//! let t0 = Timestamp::ZERO;
//! for _ in 0..3 {
//!     let call = breaker.try_call(t0)?; // closed: let it through
//!     breaker.record(call, t0, CallResult::Failure);
//! }
//! // Three failures in a row: open, refusing until it probes in 5 s.
//! let refused = breaker.try_call(t0).unwrap_err();
//! assert_eq!(refused.retry_in(), Duration::from_secs(5));
//! assert_eq!(breaker.state(t0), State::Open);
//! // After the pause one probe goes through; its success closes it.
//! let t1 = t0 + Duration::from_secs(5);
//! let probe = breaker.try_call(t1)?;
//! assert!(breaker.try_call(t1).is_err(), "one probe at a time");
//! breaker.record(probe, t1, CallResult::Success);
//! assert_eq!(breaker.state(t1), State::Closed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Closed** lets every call through and trips on a failure ratio over
//! the [`window`](BreakerConfig::window) or on
//! [`consecutive_failures`](BreakerConfig::consecutive_failures).
//! **Open** refuses for [`open_for`](BreakerConfig::open_for) with a
//! [`Refused`] saying when it probes. **Half-open** lets
//! [`probes`](BreakerConfig::probes) calls through: all succeed, it closes;
//! one fails, it opens again (unreported probes are given up after
//! `open_for`).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::time::Timestamp;

/// Buckets of the rolling failure-rate window.
const BUCKETS: u64 = 10;

/// How a [`CircuitBreaker`] decides; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    failure_ratio: f64,
    minimum_calls: u32,
    window: Duration,
    consecutive_failures: u32,
    open_for: Duration,
    probes: u32,
}

impl Default for BreakerConfig {
    /// Trips at 50 % failures over at least 20 calls in 10 s, or at 5
    /// failures in a row; open for 5 s; one probe.
    fn default() -> Self {
        BreakerConfig {
            failure_ratio: 0.5,
            minimum_calls: 20,
            window: Duration::from_secs(10),
            consecutive_failures: 5,
            open_for: Duration::from_secs(5),
            probes: 1,
        }
    }
}

impl BreakerConfig {
    /// The share of failed calls (in `(0, 1]`) that trips the breaker.
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.failure_ratio = ratio;
        self
    }

    /// Calls the window must hold before its failure ratio counts.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.minimum_calls = calls;
        self
    }

    /// The span the failure ratio is measured over (in ten buckets, so
    /// results leave it a tenth of it at a time).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Failures in a row that trip the breaker whatever the ratio (0: only
    /// the ratio trips it).
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.consecutive_failures = failures;
        self
    }

    /// How long the breaker stays open before it probes.
    pub fn open_for(mut self, pause: Duration) -> Self {
        self.open_for = pause;
        self
    }

    /// Calls let through half-open; all must succeed to close.
    pub fn probes(mut self, probes: u32) -> Self {
        self.probes = probes;
        self
    }

    /// How long the breaker stays open ([`open_for`](Self::open_for)).
    pub fn open_duration(&self) -> Duration {
        self.open_for
    }

    /// Calls let through half-open ([`probes`](Self::probes)).
    pub fn probe_count(&self) -> u32 {
        self.probes
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return Err(ConfigError::FailureRatio(self.failure_ratio));
        }
        if self.window.as_nanos() < u128::from(BUCKETS) || self.window > MAX_SPAN {
            return Err(ConfigError::Window(self.window));
        }
        if self.open_for.is_zero() || self.open_for > MAX_SPAN {
            return Err(ConfigError::OpenFor(self.open_for));
        }
        if self.probes == 0 {
            return Err(ConfigError::NoProbes);
        }
        Ok(())
    }
}

/// The longest window or pause: 2^61 ns (about 73 years), as for quotas.
const MAX_SPAN: Duration = Duration::from_nanos(1 << 61);

/// A [`BreakerConfig`] that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The failure ratio is not in `(0, 1]`.
    #[error("the failure ratio must be above 0 and at most 1, got {0}")]
    FailureRatio(f64),
    /// The window is shorter than 10 ns or longer than 2^61 ns.
    #[error("the failure window must be between 10 ns and 2^61 ns, got {0:?}")]
    Window(Duration),
    /// The open pause is zero or longer than 2^61 ns.
    #[error("the open pause must be above zero and at most 2^61 ns, got {0:?}")]
    OpenFor(Duration),
    /// No probe would ever close the breaker again.
    #[error("a breaker needs at least one half-open probe")]
    NoProbes,
}

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Calls go through.
    Closed,
    /// Calls are refused until the pause ends.
    Open,
    /// The pause is over: a few probes go through.
    HalfOpen,
}

impl State {
    /// `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }
}

/// How a call let through ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallResult {
    /// The dependency answered well.
    Success,
    /// It failed (an error, a timeout, a server error).
    Failure,
    /// Neither (cancelled, a client error): frees a probe, teaches nothing.
    Ignored,
}

/// A call the breaker let through; hand it back to
/// [`CircuitBreaker::record`] with its result.
#[derive(Debug)]
#[must_use = "a call's result must be recorded, even as CallResult::Ignored"]
pub struct Call {
    generation: u64,
    probe: bool,
}

impl Call {
    /// Whether it is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// A call refused by an open breaker (or a half-open one whose probes are
/// all out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the circuit breaker is open: the dependency failed too often; it lets a probe through in {retry_in:?}"
)]
pub struct Refused {
    retry_in: Duration,
}

impl Refused {
    /// How long until a call may go through again: the rest of the pause,
    /// or of the probes' allowance when they are all out (a probe that
    /// reports earlier opens or closes the breaker sooner).
    pub fn retry_in(&self) -> Duration {
        self.retry_in
    }
}

/// Calls let through and refused since the breaker was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Calls let through.
    pub admitted: u64,
    /// Calls refused.
    pub refused: u64,
    /// Times the breaker opened.
    pub opened: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Which `window / BUCKETS` slice of time it counts, + 1 (0: unused).
    slice: u64,
    calls: u32,
    failures: u32,
}

#[derive(Debug)]
enum Phase {
    Closed {
        buckets: [Bucket; BUCKETS as usize],
        consecutive: u32,
    },
    Open {
        until: Timestamp,
    },
    HalfOpen {
        /// When the current batch of probes began (for their allowance).
        since: Timestamp,
        out: u32,
        succeeded: u32,
    },
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    generation: u64,
    counts: Counts,
}

/// A circuit breaker; see the [module docs](self). `Sync`: share it in an
/// `Arc` (the state is a few numbers behind a mutex, held for no I/O).
#[derive(Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    inner: Mutex<Inner>,
}

fn closed() -> Phase {
    Phase::Closed {
        buckets: [Bucket::default(); BUCKETS as usize],
        consecutive: 0,
    }
}

impl CircuitBreaker {
    /// A closed breaker, or the reason `config` cannot work.
    pub fn new(config: BreakerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(CircuitBreaker {
            config,
            inner: Mutex::new(Inner {
                phase: closed(),
                generation: 0,
                counts: Counts::default(),
            }),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state is plain numbers, consistent between statements.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves an open breaker whose pause is over to half-open, and gives
    /// up on probes that outlived their allowance.
    fn advance(&self, s: &mut Inner, now: Timestamp) {
        match s.phase {
            Phase::Open { until } if now >= until => {
                s.phase = Phase::HalfOpen {
                    since: now,
                    out: 0,
                    succeeded: 0,
                };
                s.generation += 1;
            }
            Phase::HalfOpen { since, .. }
                if now.saturating_duration_since(since) >= self.config.open_for =>
            {
                s.phase = Phase::HalfOpen {
                    since: now,
                    out: 0,
                    succeeded: 0,
                };
                s.generation += 1;
            }
            _ => {}
        }
    }

    /// Lets a call through at `now`, or refuses it.
    pub fn try_call(&self, now: Timestamp) -> Result<Call, Refused> {
        let mut s = self.lock();
        self.advance(&mut s, now);
        let generation = s.generation;
        let outcome = match &mut s.phase {
            Phase::Closed { .. } => Ok(Call {
                generation,
                probe: false,
            }),
            Phase::Open { until } => Err(Refused {
                retry_in: until.saturating_duration_since(now),
            }),
            Phase::HalfOpen { since, out, .. } => {
                if *out < self.config.probes {
                    *out += 1;
                    Ok(Call {
                        generation,
                        probe: true,
                    })
                } else {
                    let end = since.saturating_add(self.config.open_for);
                    Err(Refused {
                        retry_in: end.saturating_duration_since(now),
                    })
                }
            }
        };
        match outcome {
            Ok(_) => s.counts.admitted += 1,
            Err(_) => s.counts.refused += 1,
        }
        outcome
    }

    /// Records how `call` ended, at `now`; returns the state the breaker
    /// moved to if this result moved it (`Open` when it trips, `Closed`
    /// when the probes succeeded), for a driver that reports changes.
    pub fn record(&self, call: Call, now: Timestamp, result: CallResult) -> Option<State> {
        let mut s = self.lock();
        if call.generation != s.generation {
            // Let through in an earlier state: it says nothing about now.
            return None;
        }
        let slice_len = (self.config.window.as_nanos() / u128::from(BUCKETS)) as u64;
        let config = self.config;
        let trip = match &mut s.phase {
            Phase::Closed {
                buckets,
                consecutive,
            } => {
                if result == CallResult::Ignored {
                    return None;
                }
                let failed = result == CallResult::Failure;
                *consecutive = if failed { *consecutive + 1 } else { 0 };
                let slice = now.as_nanos() / slice_len + 1;
                let bucket = &mut buckets[(slice % BUCKETS) as usize];
                if bucket.slice != slice {
                    *bucket = Bucket {
                        slice,
                        ..Bucket::default()
                    };
                }
                bucket.calls += 1;
                bucket.failures += u32::from(failed);
                // The buckets of the last BUCKETS slices, this one included.
                let (calls, failures) = buckets
                    .iter()
                    .filter(|b| b.slice != 0 && b.slice <= slice && slice - b.slice < BUCKETS)
                    .fold((0u64, 0u64), |(c, f), b| {
                        (c + u64::from(b.calls), f + u64::from(b.failures))
                    });
                let by_ratio = failed
                    && calls >= u64::from(config.minimum_calls)
                    && failures as f64 >= config.failure_ratio * calls as f64;
                let in_a_row = failed
                    && config.consecutive_failures > 0
                    && *consecutive >= config.consecutive_failures;
                by_ratio || in_a_row
            }
            Phase::Open { .. } => false,
            Phase::HalfOpen { out, succeeded, .. } => match result {
                CallResult::Failure => true,
                CallResult::Ignored => {
                    *out = out.saturating_sub(1);
                    false
                }
                CallResult::Success => {
                    *succeeded += 1;
                    if *succeeded >= config.probes {
                        s.phase = closed();
                        s.generation += 1;
                        return Some(State::Closed);
                    }
                    false
                }
            },
        };
        if trip {
            s.phase = Phase::Open {
                until: now.saturating_add(config.open_for),
            };
            s.generation += 1;
            s.counts.opened += 1;
            return Some(State::Open);
        }
        None
    }

    /// Where the breaker stands at `now` (an open breaker whose pause is
    /// over reads half-open).
    pub fn state(&self, now: Timestamp) -> State {
        let mut s = self.lock();
        self.advance(&mut s, now);
        match s.phase {
            Phase::Closed { .. } => State::Closed,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen { .. } => State::HalfOpen,
        }
    }

    /// Calls let through and refused so far.
    pub fn counts(&self) -> Counts {
        self.lock().counts
    }
}
