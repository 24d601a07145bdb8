//! What a limiter does when Redis cannot answer: the [`FailurePolicy`], the
//! command timeout and the circuit breaker ([`Resilience`]), and the
//! counters that make degraded decisions visible ([`Stats`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ratewise::backend::DecisionSource;
use ratewise::{Decision, Quota, QuotaError};

use crate::local_share::LocalShare;

/// How a limiter decides when Redis is unreachable, too slow, or its
/// circuit breaker is open. See the crate docs' failure-policy guide.
#[derive(Clone)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit: availability over protection. Decisions say
    /// [`DecisionSource::FailOpen`].
    FailOpen,
    /// Refuse: protection over availability. Decisions say
    /// [`DecisionSource::FailClosed`]; `retry_after` is the time until the
    /// breaker probes Redis again.
    FailClosed,
    /// Decide in memory with this instance's share of the quota
    /// ([`FailurePolicy::local_share`]): a key's share starts spent, and
    /// what it admits is charged to Redis when Redis is back. Decisions say
    /// [`DecisionSource::LocalFallback`].
    LocalFallback(Arc<LocalShare>),
    /// Return the error ([`Error::Redis`](crate::Error::Redis),
    /// [`Error::Timeout`](crate::Error::Timeout),
    /// [`Error::CircuitOpen`](crate::Error::CircuitOpen)) and let the caller
    /// decide.
    Error,
}

impl FailurePolicy {
    /// A local fallback holding `1/instances` of `quota` ([`LocalShare`]):
    /// the rate divided by `instances` and the burst divided, rounded down
    /// but at least 1. With every instance on its fallback, the fleet admits
    /// at most the quota's rate; keep the count current with
    /// [`LocalShare::set_instances`].
    ///
    /// # Errors
    /// [`QuotaError`] when the share's emission interval overflows.
    pub fn local_share(quota: Quota, instances: u32) -> Result<FailurePolicy, QuotaError> {
        Ok(FailurePolicy::LocalFallback(Arc::new(LocalShare::new(
            quota, instances,
        )?)))
    }

    pub(crate) fn source(&self) -> DecisionSource {
        match self {
            FailurePolicy::FailOpen => DecisionSource::FailOpen,
            FailurePolicy::FailClosed | FailurePolicy::Error => DecisionSource::FailClosed,
            FailurePolicy::LocalFallback(_) => DecisionSource::LocalFallback,
        }
    }
}

impl std::fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailurePolicy::FailOpen => f.write_str("FailOpen"),
            FailurePolicy::FailClosed => f.write_str("FailClosed"),
            FailurePolicy::LocalFallback(l) => f.debug_tuple("LocalFallback").field(l).finish(),
            FailurePolicy::Error => f.write_str("Error"),
        }
    }
}

/// A fail-open or fail-closed decision for a limiter with capacity `limit`.
pub(crate) fn policy_decision(allowed: bool, limit: u64, retry: Duration) -> Decision {
    Decision {
        allowed,
        limit,
        remaining: 0,
        reset_after: retry,
        retry_after: (!allowed).then_some(retry),
        delay: Duration::ZERO,
    }
}

/// Timeout and circuit-breaker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResilienceConfig {
    /// The longest a decision waits on Redis (default 50 ms).
    pub timeout: Duration,
    /// Consecutive failures that open the breaker (default 3).
    pub failure_threshold: u32,
    /// How long an open breaker answers by the policy alone before one
    /// probe goes to Redis (default 250 ms).
    pub cool_down: Duration,
}

impl Default for ResilienceConfig {
    fn default() -> Self {
        ResilienceConfig {
            timeout: Duration::from_millis(50),
            failure_threshold: 3,
            cool_down: Duration::from_millis(250),
        }
    }
}

/// Counts of decisions by source and of Redis failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Decisions made by Redis.
    pub backend: u64,
    /// Decisions made by the local fallback limiter.
    pub local_fallback: u64,
    /// Decisions admitted by the fail-open policy.
    pub fail_open: u64,
    /// Decisions refused by the fail-closed policy (or returned as errors
    /// under [`FailurePolicy::Error`]).
    pub fail_closed: u64,
    /// Redis calls that failed with an error (one per batch: a call may
    /// carry several requests).
    pub redis_errors: u64,
    /// Redis calls that exceeded the timeout (one per batch).
    pub timeouts: u64,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// Decisions answered without asking Redis because the breaker was open.
    pub short_circuited: u64,
    /// Script calls sent to Redis (round trips). With batching, one call
    /// decides every request of its batch, so this can be far below
    /// `backend`.
    pub round_trips: u64,
}

impl StatsSnapshot {
    /// Decisions made without Redis.
    pub fn degraded(&self) -> u64 {
        self.local_fallback + self.fail_open + self.fail_closed
    }
}

#[derive(Debug)]
pub(crate) struct Stats {
    backend: AtomicU64,
    local_fallback: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    redis_errors: AtomicU64,
    timeouts: AtomicU64,
    breaker_opened: AtomicU64,
    short_circuited: AtomicU64,
    round_trips: AtomicU64,
    /// The `limiter` label of this limiter's metrics (its key prefix).
    label: String,
    metrics: OnceLock<Handles>,
}

/// The `metrics` handles of one limiter, registered on first use (see the
/// crate docs' "Metrics" for names and meanings).
#[derive(Debug)]
struct Handles {
    admitted: metrics::Counter,
    refused: metrics::Counter,
    fail_open: metrics::Counter,
    fail_closed: metrics::Counter,
    local_fallback: metrics::Counter,
    redis_error: metrics::Counter,
    timeout: metrics::Counter,
    circuit_open: metrics::Counter,
    breaker_open: metrics::Gauge,
    call_seconds: metrics::Histogram,
    batch_requests: metrics::Histogram,
}

impl Handles {
    fn new(limiter: &str) -> Handles {
        let l = || limiter.to_owned();
        let degraded = |s: &'static str| metrics::counter!("ratewise_redis_degraded_total", "limiter" => l(), "source" => s);
        let error = |k: &'static str| metrics::counter!("ratewise_redis_errors_total", "limiter" => l(), "kind" => k);
        let decided = |o: &'static str| metrics::counter!("ratewise_redis_decisions_total", "limiter" => l(), "outcome" => o);
        Handles {
            admitted: decided("admitted"),
            refused: decided("refused"),
            fail_open: degraded("fail_open"),
            fail_closed: degraded("fail_closed"),
            local_fallback: degraded("local_fallback"),
            redis_error: error("redis"),
            timeout: error("timeout"),
            circuit_open: error("circuit_open"),
            breaker_open: metrics::gauge!("ratewise_redis_breaker_open", "limiter" => l()),
            call_seconds: metrics::histogram!("ratewise_redis_call_seconds", "limiter" => l()),
            batch_requests: metrics::histogram!("ratewise_redis_batch_requests", "limiter" => l()),
        }
    }
}

impl Stats {
    fn new(label: String) -> Stats {
        let z = || AtomicU64::new(0);
        Stats {
            backend: z(),
            local_fallback: z(),
            fail_open: z(),
            fail_closed: z(),
            redis_errors: z(),
            timeouts: z(),
            breaker_opened: z(),
            short_circuited: z(),
            round_trips: z(),
            label,
            metrics: OnceLock::new(),
        }
    }

    fn handles(&self) -> &Handles {
        self.metrics.get_or_init(|| Handles::new(&self.label))
    }

    /// Counts a decision: by source, and by outcome in the metrics.
    pub(crate) fn decided(&self, source: DecisionSource, allowed: bool) {
        self.count(source);
        let h = self.handles();
        if allowed { &h.admitted } else { &h.refused }.increment(1);
        match source {
            DecisionSource::Backend => {}
            DecisionSource::LocalFallback => h.local_fallback.increment(1),
            DecisionSource::FailOpen => h.fail_open.increment(1),
            _ => h.fail_closed.increment(1),
        }
    }

    pub(crate) fn count(&self, source: DecisionSource) {
        let c = match source {
            DecisionSource::Backend => &self.backend,
            DecisionSource::LocalFallback => &self.local_fallback,
            DecisionSource::FailOpen => &self.fail_open,
            _ => &self.fail_closed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            backend: r(&self.backend),
            local_fallback: r(&self.local_fallback),
            fail_open: r(&self.fail_open),
            fail_closed: r(&self.fail_closed),
            redis_errors: r(&self.redis_errors),
            timeouts: r(&self.timeouts),
            breaker_opened: r(&self.breaker_opened),
            short_circuited: r(&self.short_circuited),
            round_trips: r(&self.round_trips),
        }
    }
}

/// Why Redis gave no answer.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    Redis(redis::RedisError),
    Timeout(Duration),
    CircuitOpen,
}

impl From<Failure> for crate::Error {
    fn from(f: Failure) -> crate::Error {
        match f {
            Failure::Redis(e) => crate::Error::Redis(e),
            Failure::Timeout(d) => crate::Error::Timeout(d),
            Failure::CircuitOpen => crate::Error::CircuitOpen,
        }
    }
}

/// The command timeout and the circuit breaker around every Redis call.
///
/// Breaker states: *closed* (`open_until == 0`), *open* (`now <
/// open_until`: no call goes to Redis), *half-open* (the cool-down is over:
/// exactly one caller, the one that wins `probing`, asks Redis; the others
/// keep answering by the policy). A success closes it; a failed probe
/// re-opens it for another cool-down.
#[derive(Debug)]
pub(crate) struct Resilience {
    pub(crate) config: ResilienceConfig,
    origin: Instant,
    consecutive: AtomicU64,
    /// Nanoseconds since `origin` until which the breaker is open; 0 = closed.
    open_until: AtomicU64,
    probing: AtomicBool,
    pub(crate) stats: Stats,
}

impl Resilience {
    /// `label` names the limiter in its metrics (its key prefix).
    pub(crate) fn new(config: ResilienceConfig, label: String) -> Self {
        Resilience {
            config,
            origin: Instant::now(),
            consecutive: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            stats: Stats::new(label),
        }
    }

    fn elapsed(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// How long until the breaker lets a probe through (zero if closed).
    pub(crate) fn time_to_probe(&self) -> Duration {
        let until = self.open_until.load(Ordering::Acquire);
        Duration::from_nanos(until.saturating_sub(self.elapsed()))
    }

    /// Runs `call` under the timeout, unless the breaker is open.
    pub(crate) async fn run<T, F>(&self, call: F) -> Result<T, Failure>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.run_batch(call, 1).await
    }

    /// Counts a Redis error that failed part of a call that answered (a
    /// batch script's refused key), as its own call's failure would have
    /// been counted. The breaker does not hear of it: Redis answered.
    pub(crate) fn count_redis_error(&self) {
        self.stats.redis_errors.fetch_add(1, Ordering::Relaxed);
        self.stats.handles().redis_error.increment(1);
    }

    /// [`Resilience::run`] for a call deciding `requests` requests.
    pub(crate) async fn run_batch<T, F>(&self, call: F, requests: usize) -> Result<T, Failure>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let h = self.stats.handles();
        let until = self.open_until.load(Ordering::Acquire);
        let mut probe = false;
        if until != 0 {
            if self.elapsed() < until
                || self
                    .probing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                // Counted per request: each is a decision made without Redis.
                let n = requests as u64;
                self.stats.short_circuited.fetch_add(n, Ordering::Relaxed);
                h.circuit_open.increment(n);
                return Err(Failure::CircuitOpen);
            }
            probe = true;
        }
        self.stats.round_trips.fetch_add(1, Ordering::Relaxed);
        h.batch_requests.record(requests as f64);
        let sent = Instant::now();
        let outcome = match tokio::time::timeout(self.config.timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.count_redis_error();
                Err(Failure::Redis(e))
            }
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                h.timeout.increment(1);
                Err(Failure::Timeout(self.config.timeout))
            }
        };
        h.call_seconds.record(sent.elapsed().as_secs_f64());
        match &outcome {
            Ok(_) => {
                self.consecutive.store(0, Ordering::Relaxed);
                if until != 0 || probe {
                    self.open_until.store(0, Ordering::Release);
                    h.breaker_open.set(0.0);
                }
                if probe {
                    self.probing.store(false, Ordering::Release);
                }
            }
            Err(_) => {
                let n = self.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
                if probe || n >= u64::from(self.config.failure_threshold.max(1)) {
                    let cool = u64::try_from(self.config.cool_down.as_nanos()).unwrap_or(u64::MAX);
                    let was = self
                        .open_until
                        .swap(self.elapsed().saturating_add(cool), Ordering::AcqRel);
                    if was == 0 || probe {
                        self.stats.breaker_opened.fetch_add(1, Ordering::Relaxed);
                    }
                    h.breaker_open.set(1.0);
                    self.consecutive.store(0, Ordering::Relaxed);
                }
                if probe {
                    self.probing.store(false, Ordering::Release);
                }
            }
        }
        outcome
    }
}
