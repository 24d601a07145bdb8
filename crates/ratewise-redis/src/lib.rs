//! Distributed rate limits on Redis for [`ratewise`]: one quota per key held
//! by every replica of a service, decided by a Lua script in one round trip,
//! with a failure policy for when Redis is down.
//!
//! ```
//! use ratewise::backend::DecisionSource;
//! use ratewise::Quota;
//! use ratewise_redis::{connect_lazy, Algorithm, FailurePolicy, Options, RedisLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Nothing listens on port 1, so the failure policy answers.
//! let conn = connect_lazy("redis://127.0.0.1:1")?;
//! let options = Options { policy: FailurePolicy::FailClosed, ..Options::default() };
//! let limiter = RedisLimiter::with_options(conn, Quota::per_second(100)?, Algorithm::Gcra, options)?;
//!
//! let d = limiter.check("user-42", 1).await?;
//! assert!(!d.decision.allowed); // 429, with Retry-After from d.decision.retry_after
//! assert_eq!(d.source, DecisionSource::FailClosed);
//! # Ok(())
//! # }
//! ```
//!
//! * [`RedisLimiter`] takes a [`Connection`] ([`connect`] for one server,
//!   [`connect_cluster`] for a Cluster) and implements
//!   [`ratewise::backend::AsyncKeyedLimiter`], so code written against the
//!   in-memory [`ratewise::KeyedLimiter`] switches backend by its constructor.
//!   Each [`Algorithm`] decides exactly as its in-memory twin, in whole µs.
//! * Concurrent requests share script calls (batching,
//!   [`Options::max_batch`]): on one Redis server any keys under one quota,
//!   on a Cluster one key's; decisions are unchanged.
//! * Every call runs under a timeout and a circuit breaker
//!   ([`ResilienceConfig`]); meanwhile the [`FailurePolicy`] answers, and
//!   every decision says where it came from.
//! * [`TwoTierLimiter`] admits hot keys in process from tokens leased out of
//!   Redis; [`MultiLimiter`] checks several levels all-or-nothing.
//! * [`Fleet`] counts the instances (heartbeats on Redis), so each
//!   [`LocalShare`] holds its part of the quota in an outage. Metrics go to
//!   the [`metrics`] facade under `ratewise_redis_*`.
//! * The `tls` feature (off by default) accepts `rediss://` URLs: TLS with
//!   rustls, checked against the system's roots (a URL ending in `#insecure`
//!   skips the check, for tests against a self-signed certificate);
//!   [`TlsCerts`] adds a private authority and a client certificate
//!   ([`connect_lazy_with`], [`connect_cluster_with`]).
//!
//! The [`_guide`] covers state, batching, failure, Cluster and metrics.

pub mod _guide;
mod batch;
mod connection;
mod core;
mod error;
mod fleet;
mod limiter;
mod local_share;
mod multi;
mod policy;
pub mod two_tier;

pub use crate::core::{MAX_KEY_LEN, MAX_MICROS};
pub use connection::{
    client, connect, connect_cluster, connect_cluster_with, connect_lazy, connect_lazy_with,
    manager_config, Connection, TlsCerts,
};
pub use error::Error;
pub use fleet::Fleet;
pub use limiter::{Algorithm, Options, RedisLimiter, Timed};
pub use local_share::LocalShare;
pub use multi::{MultiDecision, MultiLimiter};
pub use policy::{FailurePolicy, ResilienceConfig, StatsSnapshot};
pub use redis::aio::ConnectionManager;
pub use redis::cluster_async::ClusterConnection;
pub use two_tier::{LeaseConfig, LeaseStats, TwoTierLimiter};
