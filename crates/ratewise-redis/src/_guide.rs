//! A guide to running ratewise's limits on Redis: the algorithms' state,
//! batching, failure policies, Redis Cluster and metrics.
//!
//! # Algorithms on Redis
//!
//! Quotas are [`ratewise::Quota`]s validated by the core; on Redis the
//! interval is rounded *up* to whole microseconds and the window
//! (`burst × interval`) must stay under 2^52 µs (about 142 years), so every
//! value is an exact integer in Lua. Decisions carry the same evidence as
//! the in-memory limiters, at 1 µs resolution.
//!
//! | algorithm | Redis state per key | exactness |
//! |---|---|---|
//! | [`Gcra`](crate::Algorithm::Gcra) (default) | one string (the TAT) | exact `r·T + b`; identical to the core `Gcra` |
//! | [`TokenBucket`](crate::Algorithm::TokenBucket) | hash {credit, time} | decides exactly as GCRA |
//! | [`FixedWindow`](crate::Algorithm::FixedWindow) | hash {window, count} | up to `2b` across a window boundary |
//! | [`SlidingWindowCounter`](crate::Algorithm::SlidingWindowCounter) | hash {window, prev, cur} | `r·T + b` (estimate); `burst × window ≤ 2^52 µs` |
//! | [`SlidingWindowLog`](crate::Algorithm::SlidingWindowLog) | sorted set, ≤ `burst` members | exact: at most `b` in every window |
//!
//! Every key is written with a time to live equal to its time to full
//! (plus [`Options::expiry_slack`](crate::Options::expiry_slack)), so a key
//! disappears exactly when its state is that of a fresh key; a denial and a
//! `peek` write nothing. By default the script reads Redis's own clock
//! (`TIME`); `check_at`/`peek_at` take the caller's time instead.
//!
//! Bad requests are typed errors returned before anything is sent: an empty
//! key, a key over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN), `n = 0`,
//! `n > burst`, a quota too long for Redis, an explicit time out of range.
//!
//! # Batching
//!
//! While a script call is in flight, further requests of the same limiter
//! under the same quota wait in process — for any key on a single Redis
//! server, for the same key on a Cluster (one script call must stay within
//! a slot); when it returns, up to
//! [`Options::max_batch`](crate::Options::max_batch) (default 128) of them
//! go as one call of the algorithm's batch script, which decides them one
//! by one in arrival order, each exactly as the single script would, with
//! its own evidence (a key's requests see its state as the previous ones
//! left it; keys do not affect each other). Up to
//! [`Options::batches_in_flight`](crate::Options::batches_in_flight)
//! (default 2) calls per group are in flight at once. An idle limiter pays
//! nothing: its request goes alone. Ten thousand keys under load cost one
//! round trip per batch, not one per request (figures in the repository's
//! `benches/README.md`).
//!
//! * **Same decisions.** On Redis's clock a batch reads `TIME` once: its
//!   requests are decided at one instant, as requests arriving together.
//! * **Failures.** A failed batch is answered by the failure policy for
//!   each of its requests, and each is counted. A key Redis refuses inside
//!   a batch (it holds another type: `WRONGTYPE`) fails only its own
//!   requests, counted once in `redis_errors` as its own call would be;
//!   the other keys' answers stand.
//! * **Cancellation.** A waiting request whose caller gives up is not sent.
//!   A leader cancelled mid-call hands the batch and the lead on; its call
//!   may still reach Redis, which errs on the side of the limit.
//! * **Scope.** Batching is per limiter; `max_batch: 1` turns it off.
//!   [`MultiLimiter`](crate::MultiLimiter) and
//!   [`TwoTierLimiter`](crate::two_tier::TwoTierLimiter) do not batch.
//!
//! # Failure policy
//!
//! Every call runs under a command timeout (default 50 ms) and a circuit
//! breaker ([`ResilienceConfig`](crate::ResilienceConfig)): after 3
//! consecutive failures it opens for a cool-down (default 250 ms), then one
//! probe goes to Redis and a success closes it. A dead Redis costs one
//! timeout per cool-down, not one per request. Meanwhile the
//! [`FailurePolicy`](crate::FailurePolicy) answers:
//!
//! | policy | decision | choose it when |
//! |---|---|---|
//! | `FailOpen` (default) | admit | the limit protects against abuse, and an outage should not become one |
//! | `FailClosed` | refuse, `retry_after` = time to the next probe | the limit protects a fragile or paid resource |
//! | `LocalFallback` ([`FailurePolicy::local_share`](crate::FailurePolicy::local_share)) | an in-memory limiter with this instance's share of the quota ([`LocalShare`](crate::LocalShare)) | the limit should hold through an outage |
//! | `Error` | `Err(Error::Redis / Timeout / CircuitOpen)` | the caller decides |
//!
//! A local share starts **spent** for each key an outage finds (the fleet
//! may have spent the burst just before), so a fleet whose shares add up
//! to the quota admits at most the quota's rate while Redis is away; and
//! what it admitted is **charged to Redis** on the key's first decision
//! after Redis answers again (at most what Redis has left), so the refill
//! Redis saw meanwhile is not admitted a second time as a burst. Keep the
//! divisor current with [`Fleet`](crate::Fleet) heartbeats and
//! [`LocalShare::set_instances`](crate::LocalShare::set_instances): a
//! count one short lets the fleet exceed the rate by 1/N.
//!
//! Every decision carries its
//! [`source`](ratewise::backend::BackendDecision), and
//! [`RedisLimiter::stats`](crate::RedisLimiter::stats) counts decisions per
//! source, errors, timeouts and breaker openings. A check that timed out may
//! still be applied by Redis later: the key is charged for a request the
//! policy answered, which errs on the side of the limit.
//!
//! # Redis Cluster
//!
//! The keys of one [`MultiLimiter`](crate::MultiLimiter) decision must share
//! a hash tag. A slot moving between masters or a dead master gives errors
//! (`ASK`, `MOVED`, connection failures); the cluster client follows the
//! redirections it can, the rest go to the policy like any other failure.
//! The breaker belongs to the limiter, not to a node: with one master dead,
//! keys on live masters are answered by Redis only while failures stay under
//! the threshold (a limiter per node group is the alternative).
//!
//! # Metrics
//!
//! Through the [`metrics`] facade; handles are registered on a limiter's
//! first call. Every name carries the label `limiter` = the key prefix
//! ([`Options::prefix`](crate::Options::prefix)).
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `ratewise_redis_decisions_total{outcome}` | counter | decisions, `admitted` or `refused`, whoever made them |
//! | `ratewise_redis_degraded_total{source}` | counter | decisions made without Redis: `fail_open`, `fail_closed`, `local_fallback` |
//! | `ratewise_redis_errors_total{kind}` | counter | failed calls (`redis`, `timeout`; one per call) and requests not sent while the breaker was open (`circuit_open`, one per request) |
//! | `ratewise_redis_breaker_open` | gauge | 1 while the breaker is open or half-open |
//! | `ratewise_redis_call_seconds` | histogram | duration of each script call |
//! | `ratewise_redis_batch_requests` | histogram | requests decided per call |
