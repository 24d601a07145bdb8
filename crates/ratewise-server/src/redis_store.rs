//! Quotas shared across instances on Redis (or Redis Cluster), through
//! `ratewise-redis`: one script per decision, every descriptor of a request
//! in one round trip when their rules are GCRA, keys hash-tagged by domain
//! so that one domain's keys share a Cluster slot. Redis answers within a
//! deadline or the domain's failure policy decides, and every such decision
//! is counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ratewise::backend::{BackendDecision, DecisionSource};
use ratewise::Quota;
use ratewise_redis::{
    Algorithm, Connection, Error, FailurePolicy, LocalShare, MultiLimiter, Options, RedisLimiter,
    ResilienceConfig,
};

use crate::charge::{
    never_admitted, quota_refuses, refused_before_counting, refused_verdict, Charge, Verdict,
};
use crate::config::{AlgorithmName, FailureMode, Limit};
use crate::engine::Plan;

/// Settings of the Redis store.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// The longest a decision waits on Redis before the failure policy
    /// answers (keep it well under Envoy's 20 ms).
    pub deadline: Duration,
    /// The failure policy of domains that set none.
    pub failure: FailureMode,
    /// How many instances share the quotas until heartbeats on Redis say
    /// otherwise ([`RedisStore::set_instances`]): under the `local` policy
    /// each holds `1/instances` of every limit.
    pub instances: u32,
    /// What every key, heartbeat and channel of the service on Redis starts
    /// with (default `ratewise-server:`): deployments that share one Redis
    /// with different prefixes share nothing. No `{` or `}` (the keys' hash
    /// tags are the service's own).
    pub prefix: Arc<str>,
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            deadline: Duration::from_millis(10),
            failure: FailureMode::Open,
            instances: 1,
            prefix: DEFAULT_PREFIX.into(),
        }
    }
}

/// The prefix of the service's keys on Redis unless one is given.
pub const DEFAULT_PREFIX: &str = "ratewise-server:";

/// Why the store could not answer and the policy is to say so.
#[derive(Debug, thiserror::Error)]
#[error("the shared store cannot answer: {0}")]
pub struct StoreUnavailable(pub String);

type SingleKey = (Arc<str>, Quota, AlgorithmName, FailureMode);

/// The Redis store: limiters built on first use, one per rule (and one per
/// combination of GCRA quotas decided together).
pub struct RedisStore {
    conn: Connection,
    settings: RedisSettings,
    single: Mutex<HashMap<SingleKey, RedisLimiter>>,
    multi: Mutex<HashMap<(Vec<Quota>, FailureMode), MultiLimiter>>,
    /// The instance count the local shares divide by.
    instances: AtomicU32,
    /// Every local share handed out, resized with the fleet.
    shares: Mutex<Vec<Arc<LocalShare>>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn algorithm(a: AlgorithmName) -> Algorithm {
    match a {
        // The leaky bucket as a meter decides exactly as GCRA.
        AlgorithmName::Gcra | AlgorithmName::LeakyBucket => Algorithm::Gcra,
        AlgorithmName::TokenBucket => Algorithm::TokenBucket,
        AlgorithmName::FixedWindow => Algorithm::FixedWindow,
        AlgorithmName::SlidingWindow => Algorithm::SlidingWindowCounter,
        AlgorithmName::SlidingLog => Algorithm::SlidingWindowLog,
    }
}

impl RedisStore {
    /// A store on `conn` (e.g. `ratewise_redis::connect_lazy(url)?.into()`,
    /// which starts without Redis and connects when it can).
    pub fn new(conn: Connection, settings: RedisSettings) -> RedisStore {
        RedisStore {
            conn,
            instances: AtomicU32::new(settings.instances.max(1)),
            settings,
            single: Mutex::new(HashMap::new()),
            multi: Mutex::new(HashMap::new()),
            shares: Mutex::new(Vec::new()),
        }
    }

    /// The connection decisions go through.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The number of instances the local fallback divides every limit by.
    pub fn instances(&self) -> u32 {
        self.instances.load(Ordering::Relaxed)
    }

    /// Divides every limit's local fallback by `instances` from now on (the
    /// count heartbeats on Redis last saw; 0 counts as 1).
    pub fn set_instances(&self, instances: u32) {
        let instances = instances.max(1);
        if self.instances.swap(instances, Ordering::Relaxed) == instances {
            return;
        }
        let shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        for share in shares.iter() {
            if let Err(e) = share.set_instances(instances) {
                tracing::warn!(error = %e, "a local fallback keeps its share");
            }
        }
        tracing::info!(
            instances,
            "the local fallback divides every limit by the live instance count"
        );
    }

    fn options(&self, mode: FailureMode, quota: Quota) -> Options {
        let policy = match mode {
            FailureMode::Open => FailurePolicy::FailOpen,
            FailureMode::Closed => FailurePolicy::FailClosed,
            FailureMode::Error => FailurePolicy::Error,
            FailureMode::Local => match LocalShare::new(quota, self.instances()) {
                Ok(share) => {
                    let share = Arc::new(share);
                    self.shares
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Arc::clone(&share));
                    FailurePolicy::LocalFallback(share)
                }
                Err(_) => FailurePolicy::FailOpen,
            },
        };
        Options {
            prefix: self.settings.prefix.to_string(),
            policy,
            resilience: ResilienceConfig {
                timeout: self.settings.deadline,
                ..ResilienceConfig::default()
            },
            ..Options::default()
        }
    }

    fn single(&self, c: &Charge, mode: FailureMode) -> Result<RedisLimiter, Error> {
        let Limit::Limited {
            quota,
            algorithm: a,
            ..
        } = &c.rule.limit
        else {
            unreachable!("only limited rules reach the store")
        };
        let key = (Arc::clone(&c.rule.path), *quota, *a, mode);
        let mut map = self.single.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = map.get(&key) {
            return Ok(l.clone());
        }
        let limiter = RedisLimiter::with_options(
            self.conn.clone(),
            *quota,
            algorithm(*a),
            self.options(mode, *quota),
        )?;
        map.insert(key, limiter.clone());
        Ok(limiter)
    }

    fn multi(&self, quotas: Vec<Quota>, mode: FailureMode) -> Result<MultiLimiter, Error> {
        let key = (quotas, mode);
        let mut map = self.multi.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = map.get(&key) {
            return Ok(l.clone());
        }
        let first = key.0[0];
        let limiter = MultiLimiter::new(
            self.conn.clone(),
            key.0.iter().copied(),
            self.options(mode, first),
        )?;
        map.insert(key, limiter.clone());
        Ok(limiter)
    }

    /// Decides the plan's counted charges on Redis.
    ///
    /// # Errors
    /// [`StoreUnavailable`] when Redis cannot answer and the domain's
    /// policy is `error` (the caller answers `UNAVAILABLE`).
    pub(crate) async fn decide(&self, plan: &mut Plan<'_>) -> Result<(), StoreUnavailable> {
        let mode = plan.failure.unwrap_or(self.settings.failure);
        let counted: Vec<usize> = (0..plan.charges.len())
            .filter(|&i| plan.charges[i].verdict.is_none())
            .collect();
        if counted.is_empty() {
            return Ok(());
        }
        let blocked = refused_before_counting(&plan.charges);
        let together = counted.len() > 1
            && counted.iter().all(|&i| {
                let c = &plan.charges[i];
                c.enforcing()
                    && c.hits == plan.charges[counted[0]].hits
                    && matches!(
                        c.rule.limit,
                        Limit::Limited {
                            algorithm: AlgorithmName::Gcra | AlgorithmName::LeakyBucket,
                            ..
                        }
                    )
            });
        if blocked {
            // Refused whatever the counters say: look, charge nothing.
            for &i in &counted {
                let answer = self.one(&plan.charges[i], mode, true).await?;
                set(&mut plan.charges[i], answer, true);
            }
        } else if counted.len() == 1 {
            let i = counted[0];
            let look = plan.charges[i].hits == 0;
            let answer = self.one(&plan.charges[i], mode, look).await?;
            set(&mut plan.charges[i], answer, false);
        } else if together {
            self.together(plan, &counted, mode).await?;
        } else {
            self.in_turn(plan, &counted, mode).await?;
        }
        Ok(())
    }

    /// One charge alone: its script decides atomically.
    async fn one(
        &self,
        c: &Charge<'_>,
        mode: FailureMode,
        look: bool,
    ) -> Result<BackendDecision, StoreUnavailable> {
        let limiter = self.single(c, mode).map_err(unavailable)?;
        let key = redis_key(c);
        let answer = if look {
            limiter.peek(&key, c.hits.max(1)).await
        } else {
            limiter.check(&key, c.hits).await
        };
        answer_or_policy(answer, c)
    }

    /// GCRA rules with the same weight: one script, one round trip, all or
    /// nothing.
    async fn together(
        &self,
        plan: &mut Plan<'_>,
        counted: &[usize],
        mode: FailureMode,
    ) -> Result<(), StoreUnavailable> {
        let quotas: Vec<Quota> = counted
            .iter()
            .map(|&i| match &plan.charges[i].rule.limit {
                Limit::Limited { quota, .. } => *quota,
                _ => unreachable!("counted charges are limited"),
            })
            .collect();
        let keys: Vec<Vec<u8>> = counted
            .iter()
            .map(|&i| redis_key(&plan.charges[i]))
            .collect();
        let hits = plan.charges[counted[0]].hits;
        let limiter = self.multi(quotas, mode).map_err(unavailable)?;
        match limiter.check(&keys, hits).await {
            Ok(d) if d.levels.len() == counted.len() => {
                let refused = d.denied_level.is_some();
                for (level, &i) in counted.iter().enumerate() {
                    let answer = BackendDecision {
                        decision: d.levels[level],
                        source: d.overall.source,
                    };
                    set(&mut plan.charges[i], answer, refused);
                }
                Ok(())
            }
            Ok(d) => {
                // The failure policy decided for the whole request.
                count_degraded(d.overall.source);
                for &i in counted {
                    set(&mut plan.charges[i], d.overall, false);
                }
                Ok(())
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Mixed algorithms, weights or shadow rules: look at every counter,
    /// then charge each if none refuses. Two round trips, and not atomic
    /// across counters (a concurrent call may slip between the look and the
    /// charge).
    async fn in_turn(
        &self,
        plan: &mut Plan<'_>,
        counted: &[usize],
        mode: FailureMode,
    ) -> Result<(), StoreUnavailable> {
        let mut refused = false;
        for &i in counted {
            let c = &plan.charges[i];
            let answer = self.one(c, mode, true).await?;
            if c.enforcing() && !answer.decision.allowed {
                refused = true;
            }
            set(&mut plan.charges[i], answer, true);
        }
        if refused || quota_refuses(&plan.charges, refused_verdict) {
            return Ok(());
        }
        for &i in counted {
            let c = &plan.charges[i];
            if c.hits == 0 {
                continue;
            }
            let answer = self.one(c, mode, false).await?;
            set(&mut plan.charges[i], answer, false);
        }
        Ok(())
    }
}

/// The key of a charge on Redis: the domain as a hash tag, then the rule's
/// path and the counter's key.
fn redis_key(c: &Charge) -> Vec<u8> {
    let mut key = Vec::with_capacity(c.rule.domain.len() + c.rule.path.len() + c.key.len() + 4);
    key.push(b'{');
    // A `}` in the domain would end the tag early; keep the tag whole.
    key.extend(
        c.rule
            .domain
            .bytes()
            .map(|b| if b == b'}' { b'_' } else { b }),
    );
    key.extend_from_slice(b"}:");
    key.extend_from_slice(c.rule.path.as_bytes());
    key.push(b'|');
    key.extend_from_slice(c.key.as_bytes());
    key
}

fn answer_or_policy(
    answer: Result<BackendDecision, Error>,
    c: &Charge,
) -> Result<BackendDecision, StoreUnavailable> {
    match answer {
        Ok(a) => {
            count_degraded(a.source);
            Ok(a)
        }
        Err(Error::Check(e)) => Ok(BackendDecision::from_backend(never_admitted(&e))),
        Err(e) => {
            metrics::counter!("ratewise_server_store_errors_total").increment(1);
            tracing::debug!(rule = %c.rule.name, error = %e, "the store could not decide");
            Err(unavailable(e))
        }
    }
}

fn unavailable(e: Error) -> StoreUnavailable {
    StoreUnavailable(e.to_string())
}

fn count_degraded(source: DecisionSource) {
    let reason = match source {
        DecisionSource::Backend => return,
        DecisionSource::LocalFallback => "local_fallback",
        DecisionSource::FailOpen => "fail_open",
        DecisionSource::FailClosed => "fail_closed",
        _ => "other",
    };
    metrics::counter!("ratewise_server_degraded_decisions_total", "reason" => reason).increment(1);
}

fn set(c: &mut Charge, answer: BackendDecision, uncharged: bool) {
    let mut v = Verdict::counted(c.descriptor, &c.rule, Ok(answer.decision), c.rule.shadow);
    v.uncharged = uncharged;
    c.verdict = Some(v);
}
