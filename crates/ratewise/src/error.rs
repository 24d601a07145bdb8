//! Typed errors. Every misuse a caller can reach returns one of these with a
//! message that says what to change; nothing in the public API panics.

use std::time::Duration;

/// A quota (rate and burst) that cannot be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// `count` was zero in `per_second(count)` and friends.
    #[error("a quota must allow at least 1 request per period, got 0")]
    ZeroCount,
    /// The period was zero.
    #[error("the quota's period must be longer than zero")]
    ZeroPeriod,
    /// A floating-point rate that is NaN, infinite, zero or negative.
    #[error(
        "the rate must be a finite number of requests per second greater than zero, got {rate}"
    )]
    InvalidRate {
        /// The offending rate.
        rate: f64,
    },
    /// More than one request per nanosecond.
    #[error("the rate is too high: ratewise measures time in nanoseconds, so at most 1e9 requests per second can be represented")]
    RateTooHigh,
    /// Fewer than one request in about 73 years
    /// ([`MAX_WINDOW_NANOS`](crate::quota::MAX_WINDOW_NANOS)).
    #[error("the rate is too low: one request per {interval:?} exceeds the longest supported interval (2^61 ns, about 73 years)")]
    RateTooLow {
        /// The requested emission interval (saturated).
        interval: Duration,
    },
    /// A burst of zero.
    #[error("the burst must be at least 1, got 0")]
    ZeroBurst,
    /// `burst × interval` is longer than
    /// [`MAX_WINDOW_NANOS`](crate::quota::MAX_WINDOW_NANOS) (about 73 years).
    #[error("a burst of {burst} at one request per {interval:?} takes longer than 2^61 ns (about 73 years) to refill; lower the burst or raise the rate")]
    BurstOverflow {
        /// The requested burst.
        burst: u64,
        /// The emission interval of the quota.
        interval: Duration,
    },
    /// An algorithm-specific size bound was exceeded (e.g. a sharded
    /// limiter whose interval × shard count does not fit).
    #[error("{what}: {limit} is the most this limiter supports, got {got}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The requested value.
        got: u64,
        /// The supported maximum.
        limit: u64,
    },
}

/// A request that cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// A request must cost at least one unit.
    #[error("a request must weigh at least 1, got 0")]
    ZeroWeight,
    /// The request is larger than the limiter can ever hold: it can never
    /// succeed, however long the caller waits. This is not a denial.
    #[error("a request of weight {requested} can never succeed: this limiter's burst (capacity) is {burst}")]
    ExceedsBurst {
        /// The weight asked for.
        requested: u64,
        /// The limiter's capacity.
        burst: u64,
    },
}

/// A reservation that was not made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReserveError {
    /// The request itself is invalid.
    #[error(transparent)]
    Invalid(#[from] CheckError),
    /// Honouring the reservation would mean waiting longer than the caller
    /// allowed; nothing was reserved.
    #[error("the reservation would have to wait {wait:?}, more than the allowed {max_wait:?}")]
    WouldWaitTooLong {
        /// How long the caller would have had to wait.
        wait: Duration,
        /// The most the caller was prepared to wait.
        max_wait: Duration,
    },
}
