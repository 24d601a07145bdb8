//! [`ShardedLimiter`]: one global limit split over N independent shards, for
//! contention that even a lock-free limiter cannot absorb.
//!
//! Each shard, on its own cache line, gets 1/N of the rate and `⌈b/N⌉` of the
//! burst; a thread starts at its own shard
//! ([`striped::thread_slot`](crate::striped::thread_slot)), so admissions on
//! different threads do not share a line. The price is exactness: the shards
//! over-admit by at most `N − 1` units in any window, from rounding the
//! burst up ([`ShardedLimiter::max_excess`]); the long-run rate is exact. A
//! request its shard refuses tries the others, so capacity is never
//! stranded; a request may weigh at most `⌈b/N⌉`. Use it for very hot global
//! limits; per-key limits are already spread by
//! [`KeyedLimiter`](crate::KeyedLimiter).
//!
//! ```
//! use ratewise::sharded::ShardedLimiter;
//! use ratewise::{Quota, Timestamp};
//!
//! let limiter = ShardedLimiter::new(Quota::per_second(1000)?, 4)?;
//! assert_eq!(limiter.max_excess(), 0); // 1000 divides evenly by 4
//! let now = Timestamp::ZERO;
//! let admitted = (0..2000).filter(|_| limiter.check_at(1, now).unwrap().is_allowed()).count();
//! assert_eq!(admitted, 1000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crossbeam_utils::CachePadded;

use crate::algorithms::gcra::Gcra;
use crate::decision::Decision;
use crate::error::{CheckError, QuotaError};
use crate::keyed::NoClock;
use crate::limiter::RateLimiter;
use crate::quota::Quota;
use crate::striped::{thread_slot, AdmissionStats};
use crate::time::{Clock, MonotonicClock, Timestamp};

/// A global limit split over shards. See the [module docs](self).
pub struct ShardedLimiter<L = Gcra<NoClock>, C = MonotonicClock> {
    shards: Box<[CachePadded<L>]>,
    global: Quota,
    shard_quota: Quota,
    stats: AdmissionStats,
    clock: C,
}

impl ShardedLimiter {
    /// `quota` split over `shards` GCRA shards (at least 1), on the
    /// production clock.
    ///
    /// # Errors
    /// [`QuotaError`] when the per-shard quota (the interval multiplied by
    /// the shard count) cannot be represented.
    pub fn new(quota: Quota, shards: usize) -> Result<Self, QuotaError> {
        ShardedLimiter::with_limiter(quota, shards, MonotonicClock::new(), |q| {
            Gcra::with_clock(q, NoClock)
        })
    }
}

impl<L: RateLimiter, C: Clock> ShardedLimiter<L, C> {
    /// `quota` split over `shards` limiters built by `factory`; `clock` is
    /// read by the convenience methods.
    ///
    /// # Errors
    /// As [`ShardedLimiter::new`].
    pub fn with_limiter(
        quota: Quota,
        shards: usize,
        clock: C,
        factory: impl Fn(Quota) -> L,
    ) -> Result<Self, QuotaError> {
        let shard_quota = Self::shard_quota(quota, shards)?;
        let n = shards.max(1);
        Ok(ShardedLimiter {
            shards: (0..n)
                .map(|_| CachePadded::new(factory(shard_quota)))
                .collect(),
            global: quota,
            shard_quota,
            stats: AdmissionStats::new(),
            clock,
        })
    }

    /// The quota of one shard: interval × N, burst ⌈burst / N⌉.
    ///
    /// # Errors
    /// [`QuotaError::TooLarge`] when the interval times the shard count
    /// overflows; [`QuotaError::RateTooLow`] or [`QuotaError::BurstOverflow`]
    /// when the shard's interval or window is longer than a quota may be.
    pub fn shard_quota(global: Quota, shards: usize) -> Result<Quota, QuotaError> {
        let n = u64::try_from(shards.max(1)).unwrap_or(u64::MAX);
        global.divided(n, global.burst().div_ceil(n))
    }

    /// The global quota being approximated.
    pub fn quota(&self) -> Quota {
        self.global
    }

    /// The quota of each shard.
    pub fn per_shard_quota(&self) -> Quota {
        self.shard_quota
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The most units by which the shards together can exceed the exact
    /// global limit in any window: `N·⌈b/N⌉ − b` (at most `N − 1`).
    pub fn max_excess(&self) -> u64 {
        (self.shards.len() as u64)
            .saturating_mul(self.shard_quota.burst())
            .saturating_sub(self.global.burst())
    }

    /// Admitted/denied totals (striped, so counting does not contend either).
    pub fn stats(&self) -> &AdmissionStats {
        &self.stats
    }

    /// Admits `n` at `now` from the calling thread's shard, or from the first
    /// other shard that can take it. The decision's `limit`, `remaining` and
    /// `reset_after` describe the shard that answered; on denial,
    /// `retry_after` is the soonest time any shard could take the request.
    ///
    /// # Errors
    /// [`CheckError::ZeroWeight`]; [`CheckError::ExceedsBurst`] when `n` is
    /// larger than one shard's burst.
    pub fn check_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        let len = self.shards.len();
        let start = thread_slot() % len;
        let mut best: Option<Decision> = None;
        for i in 0..len {
            let Some(shard) = self.shards.get((start + i) % len) else {
                continue;
            };
            let d = shard.check_at(n, now)?;
            if d.allowed {
                self.stats.record(true);
                return Ok(d);
            }
            if best.is_none_or(|b| d.retry_after < b.retry_after) {
                best = Some(d);
            }
        }
        self.stats.record(false);
        // `best` is always set: there is at least one shard, and every
        // shard either admitted (returned above) or produced a denial.
        best.ok_or(CheckError::ZeroWeight)
    }

    /// [`ShardedLimiter::check_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`ShardedLimiter::check_at`].
    pub fn check(&self, n: u64) -> Result<Decision, CheckError> {
        self.check_at(n, self.clock.now())
    }

    /// Replaces the global quota at `now`, re-splitting it over the shards.
    ///
    /// # Errors
    /// As [`ShardedLimiter::new`]; on error nothing changes.
    pub fn set_quota_at(&mut self, quota: Quota, now: Timestamp) -> Result<(), QuotaError> {
        let q = Self::shard_quota(quota, self.shards.len())?;
        for s in self.shards.iter() {
            s.set_quota_at(q, now);
        }
        self.global = quota;
        self.shard_quota = q;
        Ok(())
    }
}

impl<L, C> std::fmt::Debug for ShardedLimiter<L, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedLimiter")
            .field("quota", &self.global)
            .field("shards", &self.shards.len())
            .field("shard_quota", &self.shard_quota)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_span_bound, ms};
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn split_rounds_burst_up_and_keeps_the_rate() {
        let s = ShardedLimiter::new(Quota::per_second(10).unwrap(), 4).unwrap();
        assert_eq!(s.per_shard_quota().burst(), 3);
        assert_eq!(
            s.per_shard_quota().emission_interval(),
            Duration::from_millis(400)
        );
        assert_eq!(s.max_excess(), 2);
        // From rest, one thread drains every shard: b + excess.
        let admitted = (0..100)
            .filter(|_| s.check_at(1, ms(0)).unwrap().allowed)
            .count();
        assert_eq!(admitted, 12);
        let d = s.check_at(1, ms(0)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(400)));
        assert_eq!(s.stats().allowed.sum(), 12);
        assert_eq!(
            s.check_at(4, ms(0)),
            Err(CheckError::ExceedsBurst {
                requested: 4,
                burst: 3
            })
        );
    }

    #[test]
    fn impossible_split_is_an_error() {
        let q = Quota::from_parts(crate::quota::MAX_WINDOW_NANOS, 1).unwrap();
        assert!(matches!(
            ShardedLimiter::new(q, 16),
            Err(QuotaError::TooLarge { .. })
        ));
    }

    #[test]
    fn threads_together_stay_within_the_bound() {
        let s = ShardedLimiter::new(Quota::per_second(100).unwrap().with_burst(50).unwrap(), 8)
            .unwrap();
        let total: usize = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let s = &s;
                    sc.spawn(move || {
                        (0..1000u64)
                            .filter(|i| s.check_at(1, ms(i / 100)).unwrap().allowed)
                            .count()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        // Over [0, 9 ms]: exact limit 50 + 0 (no unit refills in 9 ms at
        // 10 ms each); the bound allows max_excess more.
        let bound = 50 + s.max_excess() as usize;
        assert!(total <= bound, "{total} > {bound}");
        assert!(total >= 50, "stranded capacity: {total}");
    }

    proptest! {

        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// In every window of the admission history, the sharded limiter
        /// admits at most b + max_excess + ⌊t/T⌋ units.
        #[test]
        fn never_exceeds_the_documented_bound(
            shards in 1usize..6,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..30, 1u64..4), 1..150),
        ) {
            let q = Quota::per_second(10).unwrap().with_burst(burst).unwrap();
            let s = ShardedLimiter::new(q, shards).unwrap();
            let mut now = 0u64;
            let mut log: Vec<(u64, u64)> = Vec::new();
            for (dt, n) in steps {
                now += dt;
                match s.check_at(n, ms(now)) {
                    Ok(d) if d.allowed => log.push((ms(now).as_nanos(), n)),
                    Ok(_) | Err(CheckError::ExceedsBurst { .. }) => {}
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                }
            }
            let t = q.emission_nanos();
            assert_span_bound(&log, |span| burst + s.max_excess() + span / t);
        }
    }
}
