//! Typed errors. A bad request is rejected before anything is sent to
//! Redis; an unreachable Redis is *not* an error of `check`/`peek` (the
//! failure policy answers instead) but is one of [`reset`] and of the
//! constructors.
//!
//! [`reset`]: crate::RedisLimiter::reset

use std::time::Duration;

use ratewise::{CheckError, QuotaError};

/// Why a Redis limiter could not answer or be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Keys must name something: an empty key would share one counter
    /// between every caller that forgot to fill it in.
    #[error("the rate-limit key is empty; pass a non-empty key such as a user or client id")]
    EmptyKey,
    /// Keys are capped so that a caller-controlled key cannot make Redis
    /// store arbitrarily large names.
    #[error("the rate-limit key is {len} bytes long; at most {max} bytes are allowed (hash long keys first)")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The largest accepted length.
        max: usize,
    },
    /// The weight is zero or larger than the burst.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The quota cannot be represented on Redis (or at all).
    #[error(transparent)]
    Quota(#[from] QuotaError),
    /// A key prefix with a brace would break Redis Cluster hash tags.
    #[error("the key prefix {prefix:?} contains a brace; remove it so the caller's hash tags ({{user-42}}) pick the Cluster slot")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A multi-level decision got a different number of keys than it has
    /// levels.
    #[error("this limiter has {levels} levels but {keys} keys were given; pass one key per level")]
    LevelMismatch {
        /// Levels configured.
        levels: usize,
        /// Keys passed.
        keys: usize,
    },
    /// An explicit `now` beyond what the scripts represent exactly.
    #[error("the explicit time {now:?} is too far from its origin: at most {max:?} (about 142 years) is supported")]
    TimeOutOfRange {
        /// The time passed.
        now: Duration,
        /// The largest accepted time.
        max: Duration,
    },
    /// Certificates for Redis over TLS were given to a build without the
    /// `tls` feature.
    #[error("certificates for Redis over TLS need ratewise-redis's `tls` feature; enable it in Cargo.toml")]
    TlsNotEnabled,
    /// Redis could not be reached or answered with an error (constructors,
    /// `reset`, and decisions under [`FailurePolicy::Error`](crate::FailurePolicy::Error)).
    #[error("Redis is unavailable: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer within the command timeout.
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The circuit breaker is open: Redis failed repeatedly and is not being
    /// asked until the cool-down ends.
    #[error(
        "the circuit breaker is open after repeated Redis failures; retrying after the cool-down"
    )]
    CircuitOpen,
}
