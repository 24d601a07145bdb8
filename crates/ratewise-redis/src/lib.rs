//! Distributed rate limits on Redis for [`ratewise`]: one quota per key held
//! by every replica of a service, decided by a Lua script in one round trip,
//! with a failure policy for when Redis is down.
//!
//! ```
//! use ratewise::backend::DecisionSource;
//! use ratewise::Quota;
//! use ratewise_redis::{connect_lazy, Algorithm, FailurePolicy, Options, RedisLimiter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! # rt.block_on(async {
//! // Your Redis URL here; nothing listens on port 1, so this example
//! // shows the failure policy at work.
//! let conn = connect_lazy("redis://127.0.0.1:1")?;
//! let limiter = RedisLimiter::with_options(
//!     conn,
//!     Quota::per_second(100)?, // rate 100/s, burst 100, shared by every replica
//!     Algorithm::Gcra,
//!     Options { policy: FailurePolicy::FailClosed, ..Options::default() },
//! )?;
//!
//! let d = limiter.check("user-42", 1).await?;
//! if d.decision.allowed {
//!     // serve the request
//! } else {
//!     // 429, with Retry-After from d.decision.retry_after
//! }
//! // Redis could not answer (within 50 ms), so the policy did, and says so.
//! assert_eq!(d.source, DecisionSource::FailClosed);
//! assert!(!d.decision.allowed);
//! assert_eq!(limiter.stats().fail_closed, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
//! Limiters take a [`Connection`]: one server through [`connect`] (a
//! reconnecting [`ConnectionManager`]) or a Redis Cluster through
//! [`connect_cluster`] (the `redis` crate's async cluster client, which
//! follows slot moves by itself).
//!
//! `RedisLimiter` implements [`ratewise::backend::AsyncKeyedLimiter`] for any
//! key that is `AsRef<[u8]>` (`str`, `String`, `[u8]`, `Vec<u8>`), so code
//! written against the in-memory [`ratewise::KeyedLimiter`] switches backend
//! by changing its constructor.
//!
//! # Algorithms on Redis
//!
//! Quotas are [`ratewise::Quota`]s (emission interval + burst) validated by
//! the core; on Redis the interval is rounded *up* to whole microseconds,
//! and the window (`burst × interval`) must stay under 2^52 µs (about 142
//! years) so that every value is an exact integer in Lua. Every script
//! returns integers (µs); decisions carry the same evidence as the
//! in-memory limiters, at 1 µs resolution.
//!
//! | algorithm | Redis state per key | memory per key¹ | round trips | exactness |
//! |---|---|---|---|---|
//! | [`Gcra`](Algorithm::Gcra) (default) | one string (TAT) | 72 B | 1 | exact `r·T + b`; identical to the core `Gcra` (tested) |
//! | [`TokenBucket`](Algorithm::TokenBucket) | hash {credit, time} | 120 B | 1 | decides exactly as GCRA |
//! | [`FixedWindow`](Algorithm::FixedWindow) | hash {window, count} | 120 B | 1 | up to `2b` across a window boundary |
//! | [`SlidingWindowCounter`](Algorithm::SlidingWindowCounter) | hash {window, prev, cur} | 120 B | 1 | `r·T + b` (estimate); `burst × window ≤ 2^52 µs` |
//! | [`SlidingWindowLog`](Algorithm::SlidingWindowLog) | sorted set, ≤ `burst` members | 120 B with one member, growing per admission time | 1 (O(burst) in the script) | exact: at most `b` in every window |
//!
//! ¹ Measured with `MEMORY USAGE` on Redis 7 for a short key, see
//! `tests/redis_limits.rs` (`memory_per_key`).
//!
//! Every key is written with a time to live equal to its time to full, so a
//! key disappears exactly when its state is that of a fresh key (plus
//! [`Options::expiry_slack`]); a denial and a `peek` write nothing.
//! By default the script reads Redis's own clock (`TIME`), so the
//! application servers' clocks never matter; `check_at`/`peek_at` take the
//! caller's time instead (for tests, or a caller that owns the clock).
//!
//! [`TwoTierLimiter`] serves hot keys in process: it leases batches of
//! tokens from the key's GCRA bucket on Redis (one script call per lease,
//! sized to this process's own rate) and admits locally, remembering a
//! refusal until its `retry_after`; every admitted unit was taken from the
//! global bucket first. Its module docs state the bound and the fairness
//! cost.
//!
//! [`MultiLimiter`] checks several GCRA levels (per user, per endpoint,
//! global) in one script: all are committed or none. In a Redis Cluster the
//! keys of one decision must share a hash tag; see its docs.
//!
//! # Failure policy
//!
//! Every call to Redis runs under a command timeout (default 50 ms) and a
//! circuit breaker ([`ResilienceConfig`]): after 3 consecutive failures the
//! breaker opens and, for a cool-down (default 250 ms), decisions are made
//! without waiting on Redis; then one probe goes to Redis, and a success
//! closes the breaker. A dead Redis therefore costs one timeout per
//! cool-down, not one per request. What answers meanwhile is the limiter's
//! [`FailurePolicy`]:
//!
//! | policy | decision | `source` | choose it when |
//! |---|---|---|---|
//! | [`FailOpen`](FailurePolicy::FailOpen) (default) | admit | `FailOpen` | the limit protects against abuse, and an outage should not become one |
//! | [`FailClosed`](FailurePolicy::FailClosed) | refuse, `retry_after` = time to the next probe | `FailClosed` | the limit protects a fragile or paid resource |
//! | [`LocalFallback`](FailurePolicy::LocalFallback) ([`FailurePolicy::local_share`]) | an in-memory limiter with this instance's share of the quota | `LocalFallback` | you want the limit approximately kept through an outage |
//! | [`Error`](FailurePolicy::Error) | `Err(Error::Redis / Timeout / CircuitOpen)` | — | the caller decides |
//!
//! Every decision says where it came from
//! ([`BackendDecision::source`](ratewise::backend::BackendDecision)), and
//! [`RedisLimiter::stats`] counts decisions per source, Redis errors,
//! timeouts and breaker openings. Recovery is automatic: the connection
//! manager reconnects, and the first successful probe closes the breaker.
//!
//! The breaker belongs to the limiter, not to a Cluster node: with one
//! master dead, the keys of the live masters are still answered by Redis
//! only while the failures stay under the threshold (the Cluster tests
//! raise it; a limiter per node group is the alternative).
//!
//! Two consequences to know. A check that timed out may still reach Redis
//! and be applied there later (the server was slow, not dead): the key is
//! charged for a request the policy answered, which errs on the side of the
//! limit. And while the breaker is open, a fail-open limiter enforces
//! nothing; `local_share` is the middle ground.
//!
//! Bad requests are typed errors returned before anything is sent: an empty
//! key, a key over 1 KiB ([`MAX_KEY_LEN`]), `n = 0`, `n > burst`, a quota
//! too long for Redis, an explicit time out of range.

mod batch;
mod connection;
mod core;
mod error;
mod limiter;
mod multi;
mod policy;
pub mod two_tier;

pub use crate::core::{MAX_KEY_LEN, MAX_MICROS};
pub use connection::{connect, connect_cluster, connect_lazy, manager_config, Connection};
pub use error::Error;
pub use limiter::{Algorithm, Options, RedisLimiter, Timed};
pub use multi::{MultiDecision, MultiLimiter};
pub use policy::{FailurePolicy, ResilienceConfig, StatsSnapshot};
pub use redis::aio::ConnectionManager;
pub use redis::cluster_async::ClusterConnection;
pub use two_tier::{LeaseConfig, LeaseStats, TwoTierLimiter};
