//! [`TwoTierLimiter`]: hot keys admitted in process from batches of tokens
//! leased out of the Redis bucket (003's "local token bucket, Redis only
//! when the local bucket is empty").
//!
//! Each key's lease is a local counter of tokens taken from that key's
//! GCRA bucket on Redis by one script call. Admissions spend local tokens
//! with one atomic operation; only an empty lease goes to Redis. The lease
//! size adapts to this process's own rate for the key (enough for
//! [`LeaseConfig::target`] of traffic, at most [`LeaseConfig::max_lease`]),
//! and a refusal by Redis is remembered until its `retry_after`, so a
//! flood of refused requests costs one Redis call per refill interval.
//!
//! **Bound.** Every admitted unit was first taken from the Redis bucket, so
//! the whole fleet admits at most `r·T + b` in total, like the single-tier
//! limiter. Tokens spend up to [`LeaseConfig::lease_ttl`] after they were
//! leased, so a short window can see up to `r·ttl` more than `⌊d/I⌋ + b`.
//!
//! **Fairness cost.** Tokens leased by one process are not available to the
//! others until used or expired: a process that leased `max_lease` tokens
//! and then goes quiet wastes them (they expire, never return), and a
//! newcomer may be refused while others hold leases. With `P` processes the
//! worst under-admission is `P × max_lease` units per lease lifetime. Keep
//! `max_lease` a small fraction of the burst (default `burst / 8`).
//!
//! Decisions from leased tokens say [`DecisionSource::Backend`]: the tokens
//! came from Redis. Their evidence is local: `remaining` is this process's
//! lease, `reset_after` assumes the global bucket is as empty as the lease.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ratewise::backend::{AsyncKeyedLimiter, BackendDecision, DecisionSource};
use ratewise::{Decision, Quota};
use redis::Script;

use crate::core::{micros, validate_key, Core, MicroQuota};
use crate::error::Error;
use crate::limiter::Options;

/// How leases are sized and how long they live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The most tokens one lease takes (default `max(1, burst / 8)`).
    pub max_lease: Option<u64>,
    /// How much of this process's recent traffic one lease should cover
    /// (default 50 ms).
    pub target: Duration,
    /// Leased tokens not spent within this time expire (default 1 s).
    pub lease_ttl: Duration,
    /// At most this many keys hold leases; beyond it, expired leases are
    /// dropped, and if none has expired a new key is refused (default
    /// 100 000).
    pub max_keys: usize,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            max_lease: None,
            target: Duration::from_millis(50),
            lease_ttl: Duration::from_secs(1),
            max_keys: 100_000,
        }
    }
}

/// Counters of a [`TwoTierLimiter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Decisions answered from a lease or a remembered refusal, without Redis.
    pub local: u64,
    /// Lease requests sent to Redis.
    pub redis_calls: u64,
    /// Tokens leased from Redis.
    pub leased: u64,
    /// Leased tokens that expired unused.
    pub expired: u64,
}

/// See the [module docs](self).
#[derive(Clone, Debug)]
pub struct TwoTierLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    core: Core,
    quota: MicroQuota,
    max_lease: u64,
    config: LeaseConfig,
    origin: Instant,
    leases: RwLock<HashMap<Vec<u8>, Arc<Lease>>>,
    local: AtomicU64,
    redis_calls: AtomicU64,
    leased: AtomicU64,
    expired: AtomicU64,
}

#[derive(Debug, Default)]
struct Lease {
    /// Tokens left in the lease.
    tokens: AtomicU64,
    /// When they expire (ns since the limiter's origin).
    expires: AtomicU64,
    /// Redis refused until then (ns since origin): refuse locally.
    denied_until: AtomicU64,
    /// Serializes refills of this key; holds the adaptive state.
    refill: tokio::sync::Mutex<Refill>,
}

#[derive(Debug, Default)]
struct Refill {
    /// Size of the next lease.
    size: u64,
    /// When the last lease was granted, and how much it was.
    last_at: u64,
    last_granted: u64,
}

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    crate::core::script_with_prelude(&SCRIPT, include_str!("lua/lease.lua"))
}

enum Take {
    Admitted(u64),
    Denied(u64),
    Empty,
}

impl TwoTierLimiter {
    /// A two-tier limiter over GCRA buckets on Redis.
    pub fn new(
        conn: impl Into<crate::Connection>,
        quota: Quota,
        options: Options,
        config: LeaseConfig,
    ) -> Result<TwoTierLimiter, Error> {
        let quota = MicroQuota::new(quota, false)?;
        let max_lease = config
            .max_lease
            .unwrap_or(quota.burst / 8)
            .clamp(1, quota.burst);
        Ok(TwoTierLimiter {
            inner: Arc::new(Inner {
                core: options.into_core(conn)?,
                quota,
                max_lease,
                config,
                origin: Instant::now(),
                leases: RwLock::new(HashMap::new()),
                local: AtomicU64::new(0),
                redis_calls: AtomicU64::new(0),
                leased: AtomicU64::new(0),
                expired: AtomicU64::new(0),
            }),
        })
    }

    /// Lease counters.
    pub fn lease_stats(&self) -> LeaseStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let i = &self.inner;
        LeaseStats {
            local: r(&i.local),
            redis_calls: r(&i.redis_calls),
            leased: r(&i.leased),
            expired: r(&i.expired),
        }
    }

    /// Decision counts by source, Redis failures, breaker openings.
    pub fn stats(&self) -> crate::StatsSnapshot {
        self.inner.core.res.stats.snapshot()
    }

    fn now(&self) -> u64 {
        u64::try_from(self.inner.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lease(&self, key: &[u8], now: u64) -> Option<Arc<Lease>> {
        let i = &self.inner;
        if let Some(l) = i
            .leases
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return Some(l.clone());
        }
        let mut map = i.leases.write().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= i.config.max_keys && !map.contains_key(key) {
            map.retain(|_, l| {
                l.expires.load(Ordering::Relaxed) > now
                    || l.denied_until.load(Ordering::Relaxed) > now
            });
            if map.len() >= i.config.max_keys {
                return None;
            }
        }
        Some(map.entry(key.to_vec()).or_default().clone())
    }

    fn decision(&self, allowed: bool, remaining: u64, retry_ns: u64) -> BackendDecision {
        let q = &self.inner.quota;
        let e = Duration::from_micros(q.emission_us);
        let missing = u32::try_from(q.burst.saturating_sub(remaining)).unwrap_or(u32::MAX);
        BackendDecision {
            decision: Decision {
                allowed,
                limit: q.burst,
                remaining,
                reset_after: e.saturating_mul(missing),
                retry_after: (!allowed).then(|| Duration::from_nanos(retry_ns)),
                delay: Duration::ZERO,
            },
            source: DecisionSource::Backend,
        }
    }

    /// Spends `n` leased tokens, or reports a remembered refusal.
    fn take(lease: &Lease, n: u64, now: u64) -> Take {
        let until = lease.denied_until.load(Ordering::Acquire);
        if now < until {
            return Take::Denied(until - now);
        }
        if now >= lease.expires.load(Ordering::Acquire) {
            return Take::Empty;
        }
        let mut t = lease.tokens.load(Ordering::Acquire);
        while t >= n {
            match lease
                .tokens
                .compare_exchange_weak(t, t - n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Take::Admitted(t - n),
                Err(cur) => t = cur,
            }
        }
        Take::Empty
    }

    /// The answer a lease gives without Redis (counted), if it gives one.
    fn local_answer(&self, take: Take) -> Option<BackendDecision> {
        let d = match take {
            Take::Admitted(left) => self.decision(true, left, 0),
            Take::Denied(wait) => self.decision(false, 0, wait),
            Take::Empty => return None,
        };
        self.inner.local.fetch_add(1, Ordering::Relaxed);
        Some(d)
    }

    /// Admits `n` units for `key`, from this process's lease when it can.
    pub async fn check(&self, key: impl AsRef<[u8]>, n: u64) -> Result<BackendDecision, Error> {
        let key = key.as_ref();
        validate_key(key)?;
        let q = self.inner.quota;
        q.validate_weight(n)?;
        let i = &self.inner;
        let now = self.now();
        let Some(lease) = self.lease(key, now) else {
            return Ok(self.decision(false, 0, i.config.lease_ttl.as_nanos() as u64));
        };
        if let Some(d) = self.local_answer(Self::take(&lease, n, now)) {
            return Ok(d);
        }
        let mut refill = lease.refill.lock().await;
        // Someone else may have refilled while this caller waited.
        let now = self.now();
        if let Some(d) = self.local_answer(Self::take(&lease, n, now)) {
            return Ok(d);
        }
        if now >= lease.expires.load(Ordering::Acquire) {
            let stale = lease.tokens.swap(0, Ordering::AcqRel);
            i.expired.fetch_add(stale, Ordering::Relaxed);
        }
        // Size the lease to this process's recent rate for the key.
        let elapsed = now.saturating_sub(refill.last_at).max(1);
        let rate_size =
            u128::from(refill.last_granted) * i.config.target.as_nanos() / u128::from(elapsed);
        refill.size = u64::try_from(rate_size)
            .unwrap_or(u64::MAX)
            .max(refill.size / 2)
            .clamp(1, i.max_lease);
        let want = refill.size.max(n);
        let core = &i.core;
        let mut inv = script().prepare_invoke();
        inv.key(core.full_key(key))
            .arg(-1i64)
            .arg(q.emission_us)
            .arg(q.burst)
            .arg(want)
            .arg(core.slack_ms);
        let mut conn = core.conn.clone();
        i.redis_calls.fetch_add(1, Ordering::Relaxed);
        let v = match core.res.run(inv.invoke_async::<Vec<i64>>(&mut conn)).await {
            Ok(v) if v.len() == 3 => v,
            Ok(_) => {
                let e = redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "the lease script answered with the wrong number of values",
                ));
                return core.degrade(key, n, false, q.burst, crate::policy::Failure::Redis(e));
            }
            Err(f) => return core.degrade(key, n, false, q.burst, f),
        };
        let granted = u64::try_from(v[0]).unwrap_or(0);
        if granted == 0 {
            core.count_backend(false);
            let wait = u64::try_from(micros(v[1]).as_nanos()).unwrap_or(u64::MAX);
            lease
                .denied_until
                .store(now.saturating_add(wait), Ordering::Release);
            return Ok(self.decision(false, 0, wait));
        }
        i.leased.fetch_add(granted, Ordering::Relaxed);
        refill.last_at = now;
        refill.last_granted = granted;
        let ttl = u64::try_from(i.config.lease_ttl.as_nanos()).unwrap_or(u64::MAX);
        lease
            .expires
            .store(now.saturating_add(ttl), Ordering::Release);
        let total = lease.tokens.fetch_add(granted, Ordering::AcqRel) + granted;
        drop(refill);
        let taken = Self::take(&lease, n, now);
        core.count_backend(matches!(taken, Take::Admitted(_)));
        match taken {
            Take::Admitted(left) => Ok(self.decision(true, left, 0)),
            _ => {
                // The lease was too small for this weight (or others spent
                // it first): the tokens stay for later requests.
                let e = q.emission_us * 1000;
                let short = n.saturating_sub(total).max(1);
                Ok(self.decision(false, 0, short * e))
            }
        }
    }
}

impl<K: AsRef<[u8]> + ?Sized + Sync> AsyncKeyedLimiter<K> for TwoTierLimiter {
    type Error = Error;

    fn check(
        &self,
        key: &K,
        n: u64,
    ) -> impl Future<Output = Result<BackendDecision, Error>> + Send {
        TwoTierLimiter::check(self, key.as_ref(), n)
    }

    /// A peek answers from this process's lease without taking tokens or
    /// calling Redis: it says whether the lease (or a remembered refusal)
    /// would decide, and otherwise that Redis would be asked (reported as
    /// allowed with `remaining` 0).
    fn peek(&self, key: &K, n: u64) -> impl Future<Output = Result<BackendDecision, Error>> + Send {
        let result = (|| {
            let key = key.as_ref();
            validate_key(key)?;
            self.inner.quota.validate_weight(n)?;
            let now = self.now();
            let map = self
                .inner
                .leases
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(lease) = map.get(key) else {
                return Ok(self.decision(true, 0, 0));
            };
            let until = lease.denied_until.load(Ordering::Acquire);
            if now < until {
                return Ok(self.decision(false, 0, until - now));
            }
            let live = now < lease.expires.load(Ordering::Acquire);
            let t = if live {
                lease.tokens.load(Ordering::Acquire)
            } else {
                0
            };
            Ok(self.decision(true, t.saturating_sub(n), 0))
        })();
        std::future::ready(result)
    }
}
