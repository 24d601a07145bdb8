//! [`MultiLimiter`]: several limits (per user, per endpoint, global) decided
//! together in one script and one round trip, check-then-commit.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ratewise::backend::BackendDecision;
use ratewise::{Decision, Quota};
use redis::Script;

use crate::core::{micros, now_arg, validate_key, Core, MicroQuota};
use crate::error::Error;
use crate::limiter::Options;
use crate::policy::{Failure, StatsSnapshot};

/// A decision over every level of a [`MultiLimiter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiDecision {
    /// The overall answer: the first refusing level's evidence, or, when
    /// every level admits, the evidence of the level with the fewest units
    /// left; and where it came from.
    pub overall: BackendDecision,
    /// The first level that refused, if any (then no level was charged).
    pub denied_level: Option<usize>,
    /// Each level's own evidence, in level order (empty for a decision made
    /// by the failure policy).
    pub levels: Vec<Decision>,
    /// The time the script decided at (Redis's clock or the explicit
    /// `now`); `None` when the failure policy decided.
    pub redis_time: Option<Duration>,
}

/// Several GCRA limits checked together: a request passes only if every
/// level admits it, and a refusal by any level charges none of them.
///
/// # Redis Cluster
///
/// One script touches all the keys of a decision, so in a Redis Cluster
/// they must hash to one slot: give them a common hash tag, e.g.
/// `{user-42}:api` and `{user-42}:all`. Keys in different slots make Redis
/// answer `CROSSSLOT`; that error goes to the failure policy like any other
/// Redis failure (counted in [`StatsSnapshot::redis_errors`]). A global
/// level shared by every user cannot share a slot with each user's keys;
/// check it with a separate [`RedisLimiter`](crate::RedisLimiter) call
/// after the per-user levels admit (two round trips, and a global refusal
/// then does not refund the user's levels). On a single Redis server there
/// is no constraint.
#[derive(Clone, Debug)]
pub struct MultiLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    core: Core,
    levels: Vec<MicroQuota>,
}

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    crate::core::script_with_prelude(&SCRIPT, include_str!("lua/gcra_multi.lua"))
}

impl MultiLimiter {
    /// A limiter with one level per quota, in the order keys will be passed.
    /// Under [`FailurePolicy::LocalFallback`](crate::FailurePolicy::LocalFallback),
    /// the fallback limiter decides on the first level's key alone.
    pub fn new(
        conn: impl Into<crate::Connection>,
        levels: impl IntoIterator<Item = Quota>,
        options: Options,
    ) -> Result<MultiLimiter, Error> {
        let levels = levels
            .into_iter()
            .map(|q| MicroQuota::new(q, false))
            .collect::<Result<Vec<_>, _>>()?;
        if levels.is_empty() {
            return Err(Error::LevelMismatch { levels: 0, keys: 0 });
        }
        Ok(MultiLimiter {
            inner: Arc::new(Inner {
                core: options.into_core(conn)?,
                levels,
            }),
        })
    }

    /// How many levels.
    pub fn levels(&self) -> usize {
        self.inner.levels.len()
    }

    /// Admits `n` units at every level (`keys[i]` for level `i`) on Redis's
    /// clock, or none.
    pub async fn check<K: AsRef<[u8]>>(&self, keys: &[K], n: u64) -> Result<MultiDecision, Error> {
        self.decide(keys, n, None, false).await
    }

    /// What [`MultiLimiter::check`] would answer; writes nothing.
    pub async fn peek<K: AsRef<[u8]>>(&self, keys: &[K], n: u64) -> Result<MultiDecision, Error> {
        self.decide(keys, n, None, true).await
    }

    /// [`MultiLimiter::check`] at the caller's time `now`.
    pub async fn check_at<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        n: u64,
        now: Duration,
    ) -> Result<MultiDecision, Error> {
        self.decide(keys, n, Some(now), false).await
    }

    /// Decision counts by source, Redis failures, breaker openings.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.core.res.stats.snapshot()
    }

    async fn decide<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        n: u64,
        now: Option<Duration>,
        peek: bool,
    ) -> Result<MultiDecision, Error> {
        let levels = &self.inner.levels;
        if keys.len() != levels.len() {
            return Err(Error::LevelMismatch {
                levels: levels.len(),
                keys: keys.len(),
            });
        }
        for (k, q) in keys.iter().zip(levels) {
            validate_key(k.as_ref())?;
            q.validate_weight(n)?;
        }
        let now = now_arg(now)?;
        let core = &self.inner.core;
        let mut inv = script().prepare_invoke();
        for k in keys {
            inv.key(core.full_key(k.as_ref()));
        }
        inv.arg(now).arg(u8::from(peek)).arg(core.slack_ms).arg(n);
        for q in levels {
            inv.arg(q.emission_us).arg(q.burst);
        }
        let mut conn = core.conn.clone();
        let first = keys[0].as_ref();
        let limit = levels[0].burst;
        let v = match core.res.run(inv.invoke_async::<Vec<i64>>(&mut conn)).await {
            Ok(v) if v.len() == 4 * levels.len() + 1 => v,
            Ok(_) => {
                let e = redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "the multi-level script answered with the wrong number of values",
                ));
                let overall = core.degrade(first, n, peek, limit, Failure::Redis(e))?;
                return Ok(degraded(overall));
            }
            Err(f) => {
                let overall = core.degrade(first, n, peek, limit, f)?;
                return Ok(degraded(overall));
            }
        };
        let decisions: Vec<Decision> = levels
            .iter()
            .zip(v.chunks_exact(4))
            .map(|(q, c)| q.decision(c))
            .collect();
        let denied_level = decisions.iter().position(|d| !d.allowed);
        core.count_backend(denied_level.is_none());
        let overall = match denied_level {
            Some(i) => decisions[i],
            None => *decisions
                .iter()
                .min_by_key(|d| d.remaining)
                .unwrap_or(&decisions[0]),
        };
        // Back from an outage: charge every level what the local share
        // admitted meanwhile, at most what the tightest level has left.
        if let Some(owed) = core.owed(first) {
            let left = decisions.iter().map(|d| d.remaining).min().unwrap_or(0);
            let charge = owed.min(left);
            if charge > 0 {
                let mut inv = script().prepare_invoke();
                for k in keys {
                    inv.key(core.full_key(k.as_ref()));
                }
                inv.arg(now).arg(0u8).arg(core.slack_ms).arg(charge);
                for q in levels {
                    inv.arg(q.emission_us).arg(q.burst);
                }
                // Best effort, as for a single key.
                let _ = core.res.run(inv.invoke_async::<Vec<i64>>(&mut conn)).await;
            }
        }
        Ok(MultiDecision {
            overall: BackendDecision::from_backend(overall),
            denied_level,
            levels: decisions,
            redis_time: v.last().copied().map(micros),
        })
    }
}

fn degraded(overall: BackendDecision) -> MultiDecision {
    MultiDecision {
        denied_level: (!overall.decision.allowed).then_some(0),
        overall,
        levels: Vec::new(),
        redis_time: None,
    }
}
