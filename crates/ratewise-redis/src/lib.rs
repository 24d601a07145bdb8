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
//! | algorithm | Redis state per key | memory per key¹ | round trips² | exactness |
//! |---|---|---|---|---|
//! | [`Gcra`](Algorithm::Gcra) (default) | one string (TAT) | 72 B | 1, or 1 per batch (one `GET` and one `SET` per batch) | exact `r·T + b`; identical to the core `Gcra` (tested) |
//! | [`TokenBucket`](Algorithm::TokenBucket) | hash {credit, time} | 120 B | 1, or 1 per batch | decides exactly as GCRA |
//! | [`FixedWindow`](Algorithm::FixedWindow) | hash {window, count} | 120 B | 1, or 1 per batch | up to `2b` across a window boundary |
//! | [`SlidingWindowCounter`](Algorithm::SlidingWindowCounter) | hash {window, prev, cur} | 120 B | 1, or 1 per batch | `r·T + b` (estimate); `burst × window ≤ 2^52 µs` |
//! | [`SlidingWindowLog`](Algorithm::SlidingWindowLog) | sorted set, ≤ `burst` members | 120 B with one member, growing per admission time | 1, or 1 per batch (O(burst) in the script) | exact: at most `b` in every window |
//!
//! ¹ Measured with `MEMORY USAGE` on Redis 7 for a short key, see
//! `tests/redis_limits.rs` (`memory_per_key`).
//! ² Per decision for an idle key; a hot key's concurrent requests share
//! one round trip per batch (see [Batching](#batching)).
//!
//! Every key is written with a time to live equal to its time to full, so a
//! key disappears exactly when its state is that of a fresh key (plus
//! [`Options::expiry_slack`]); a denial and a `peek` write nothing.
//! By default the script reads Redis's own clock (`TIME`), so the
//! application servers' clocks never matter; `check_at`/`peek_at` take the
//! caller's time instead (for tests, or a caller that owns the clock).
//!
//! # Batching
//!
//! A hot key costs one round trip per *batch*, not per request. While a
//! script call for a key is in flight, further requests of the same
//! limiter for the same key and quota wait in process; when the call
//! returns, the waiting requests (at most [`Options::max_batch`], default
//! 128) go as one call of the algorithm's batch script, which decides them
//! one after another in arrival order, each exactly as the single script
//! would have (every step sees the state the previous one left), and
//! answers each with its own evidence. Up to
//! [`Options::batches_in_flight`] (default 2) calls per key are in flight
//! at once, on the limiter's one connection, so Redis decides them in the
//! order they were sent. An idle key pays nothing: the first request finds
//! no call in flight and goes alone, with the single script.
//!
//! * **Same decisions.** In explicit-time mode, a batch decides as the
//!   in-memory limiter does for the same requests one by one, for every
//!   algorithm (`tests/redis_batch.rs`, proptest). On Redis's clock, a batch
//!   reads `TIME` once: its requests are decided at one instant, as
//!   requests arriving together would be.
//! * **Failures.** A batch that fails (timeout, Redis error, open breaker)
//!   is answered by the failure policy for each of its requests, and each
//!   is counted.
//! * **Cancellation.** A waiting request whose caller gives up is not sent.
//!   A leader cancelled mid-call hands its batch and the lead on, so no
//!   request is stranded; its call may still have reached Redis, and the
//!   batch is then sent again, which errs on the side of the limit (as a
//!   timed-out call does).
//! * **Scope.** Batching is per limiter (per connection): requests of
//!   different processes or limiters never share a call. `max_batch: 1`
//!   turns it off. [`MultiLimiter`] and [`TwoTierLimiter`] do not batch.
//!
//! Measured with the load generator (`examples/loadgen.rs`, release build)
//! against one local `redis-server` on a shared, loaded 2-core machine, one
//! key, concurrency 64, GCRA, runs interleaved with the floor (a trivial
//! `EVALSHA` returning 1, same connection setup):
//!
//! | run | decisions/s | Redis calls/s | decisions per call | Redis µs per call³ | p50 | p99 |
//! |---|---|---|---|---|---|---|
//! | floor, round 1 | 158 020 | 158 020 | 1 | 0.78 | 326 µs | 3.19 ms |
//! | **batched** (default), round 1 | **187 581** (1.19× floor) | 10 017 | 18.7 | 26.7 | 279 µs | 2.84 ms |
//! | unbatched (`--max-batch 1`), round 1 | 65 692 (0.42×) | 65 692 | 1 | 5.62 | 845 µs | 4.20 ms |
//! | floor, round 2 | 248 759 | 248 759 | 1 | 0.84 | 221 µs | 572 µs |
//! | **batched**, round 2 | **270 047** (1.09×) | 14 826 | 18.2 | 25.3 | 225 µs | **440 µs** |
//! | unbatched, round 2 | 57 261 (0.23×) | 57 261 | 1 | 5.88 | 837 µs | 5.74 ms |
//! | floor, round 3 | 87 295 | 87 295 | 1 | 0.86 | 367 µs | 5.36 ms |
//! | **batched**, round 3 | **132 989** (1.52×) | 6 708 | 19.8 | 29.6 | 300 µs | 5.08 ms |
//! | unbatched, round 3 | 46 115 (0.53×) | 46 115 | 1 | 6.05 | 919 µs | 6.54 ms |
//!
//! ³ `INFO commandstats`, `cmdstat_evalsha` `usec_per_call`.
//!
//! Batched decisions per second were 1.09–1.52× the floor's calls per
//! second in the same round (target ≥ 0.7×); a second set of three rounds,
//! run later the same way, gave 0.98×, 1.01× and 1.04×, and
//! `--compare-floor 5` at load average 5.7–6.4 gave 0.89–1.46× (median
//! 1.19×, ≈ 19.5 decisions per round trip). Against Node
//! `rate-limiter-flexible` (`RateLimiterRedis` on ioredis, 32–42 k/s in the
//! same rounds) that is 3.6–7.4×. Per round trip a batch costs Redis ≈ 30×
//! a trivial call (25–30 µs against 0.8 µs), that is 1.4–1.5 µs per
//! decision against 5.6–6.1 µs for an unbatched call, so the gain is in
//! round trips and client work. p99 follows the machine's load: 440 µs in
//! the quiet round (floor 572 µs), 1.4–5.1 ms in the loaded ones, where the
//! floor's own p99 was 1.2–5.4 ms; the 1 ms target holds only when the
//! machine is not saturated by other work. An idle key is not slowed: at
//! concurrency 1, p50 44 µs with and without batching.
//! Commands: `loadgen --mode floor --concurrency 64 --duration 5s --json`,
//! `loadgen --algorithm gcra --rate 1000 --burst 50 --keys 1 --concurrency
//! 64 --duration 5s --timeout 1s --json` (add `--max-batch 1` for
//! unbatched); `--compare-floor N` runs both alternately N times and
//! prints the ratios.
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
//! In a Redis Cluster, a slot moving between masters (`CLUSTER SETSLOT …
//! MIGRATING/IMPORTING`, `MIGRATE`) or a master dying gives errors
//! (`ASK`, `MOVED`, connection failures): the cluster client follows the
//! redirections it can, and the rest go to the policy like any other Redis
//! failure (`tests/redis_cluster.rs`). The client sends `ASKING` and the
//! command as two commands on a shared connection, so under concurrency a
//! request can exhaust its retries on `ASK` while keys are migrating; those
//! are policy decisions, counted, until the slot has moved.
//!
//! Bad requests are typed errors returned before anything is sent: an empty
//! key, a key over 1 KiB ([`MAX_KEY_LEN`]), `n = 0`, `n > burst`, a quota
//! too long for Redis, an explicit time out of range.
//!
//! # Metrics
//!
//! Through the [`metrics`] facade (install a recorder, e.g.
//! `metrics-exporter-prometheus`, before the first decision; handles are
//! registered on a limiter's first call). Every name carries the label
//! `limiter` = the limiter's key prefix ([`Options::prefix`]). The names
//! follow `ratewise-tower`'s (`ratewise_…_total` counters,
//! `…_seconds` histograms), under `ratewise_redis_` so that a tower layer
//! on a Redis backend counts its own decisions without a clash.
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `ratewise_redis_decisions_total{outcome}` | counter | decisions, `admitted` or `refused`, whoever made them (Redis or the policy) |
//! | `ratewise_redis_degraded_total{source}` | counter | decisions made without Redis: `fail_open`, `fail_closed`, `local_fallback` |
//! | `ratewise_redis_errors_total{kind}` | counter | Redis calls that failed (`redis`: an error reply or a broken connection; `timeout`; one per call, however many requests it carried), and requests not sent because the breaker was open (`circuit_open`, one per request) |
//! | `ratewise_redis_breaker_open` | gauge | 1 while the circuit breaker is open (or half-open), 0 once a call succeeds |
//! | `ratewise_redis_call_seconds` | histogram | duration of each script call sent to Redis (a round trip, however many requests it decided) |
//! | `ratewise_redis_batch_requests` | histogram | requests decided per call (1 without batching) |

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
