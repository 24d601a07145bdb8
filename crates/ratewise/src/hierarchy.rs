//! [`Hierarchy`]: limits that compose — per user, per endpoint, global — so a
//! level is never charged for a request another level refused.
//!
//! A request is admitted only if **every** level admits it; when any level
//! refuses, every level ends as if the request had never been made. First
//! every level is asked with `peek` (no writes); a refusal stops there and
//! names the level with the largest retry-after. Then, under one short commit
//! lock, each level reserves the request for `now`; if one refuses after all
//! (another thread took its capacity meanwhile), the reservations already
//! made are cancelled in reverse order. Serialised commits make that
//! rollback exact; denials never take the lock. A full keyed level
//! ([`KeyedError::Full`]) refuses like any other.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::hierarchy::Hierarchy;
//! use ratewise::keyed::{KeyedLimiter, NoClock};
//! use ratewise::{Gcra, Quota, Timestamp};
//!
//! struct Request { user: u64, endpoint: &'static str }
//!
//! let limits = Hierarchy::<Request>::new()
//!     .keyed("user", KeyedLimiter::<u64>::builder(Quota::per_second(2)?).build(), |r| &r.user)
//!     .keyed("endpoint", KeyedLimiter::<&str>::builder(Quota::per_second(100)?).build(), |r| &r.endpoint)
//!     .global("global", Gcra::with_clock(Quota::per_second(3)?, NoClock));
//!
//! let now = Timestamp::ZERO;
//! let search = |user| Request { user, endpoint: "/search" };
//! assert!(limits.check_at(&search(1), 2, now)?.allowed);
//! // User 1 is out; the refusal costs the endpoint and global levels nothing.
//! let d = limits.check_at(&search(1), 1, now)?;
//! assert_eq!(d.refused_by.as_deref(), Some("user"));
//! assert_eq!(d.retry_after, Some(Duration::from_millis(500)));
//! // The global level still has exactly one unit for user 2.
//! assert!(limits.check_at(&search(2), 1, now)?.allowed);
//! assert_eq!(limits.check_at(&search(3), 1, now)?.refused_by.as_deref(), Some("global"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::decision::Decision;
use crate::error::CheckError;
use crate::keyed::{KeyState, KeyedError, KeyedLimiter};
use crate::limiter::{RateLimiter, Reservation};
use crate::striped::{AdmissionStats, StripedCounter};
use crate::time::{Clock, Timestamp};

/// One level of a [`Hierarchy`]: something that can look, reserve for now,
/// and cancel, for a request of type `Req`.
///
/// Implemented for [`Global`] (any [`RateLimiter`]) and [`Keyed`] (a
/// [`KeyedLimiter`] with a function that picks the key from the request).
pub trait Level<Req: ?Sized>: Send + Sync {
    /// What admitting `n` at `now` would answer, without changing anything.
    ///
    /// # Errors
    /// [`CheckError`] when the request can never be admitted by this level.
    fn peek_at(&self, req: &Req, n: u64, now: Timestamp) -> Result<Decision, CheckError>;

    /// Reserves `n` for immediate use at `now`, or refuses.
    ///
    /// # Errors
    /// [`KeyedError::WouldWaitTooLong`] or [`KeyedError::Full`] when the
    /// level refuses; [`KeyedError::Check`] for an invalid request.
    fn reserve_now(&self, req: &Req, n: u64, now: Timestamp) -> Result<Reservation, KeyedError>;

    /// Gives back a reservation made by [`Level::reserve_now`] for `req`.
    fn cancel_at(&self, req: &Req, reservation: Reservation, now: Timestamp);
}

/// A level that is one limiter for all requests.
#[derive(Debug)]
pub struct Global<L>(pub L);

impl<Req: ?Sized, L: RateLimiter> Level<Req> for Global<L> {
    fn peek_at(&self, _req: &Req, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.0.peek_at(n, now)
    }
    fn reserve_now(&self, _req: &Req, n: u64, now: Timestamp) -> Result<Reservation, KeyedError> {
        Ok(self.0.reserve_within_at(n, now, Duration::ZERO)?)
    }
    fn cancel_at(&self, _req: &Req, reservation: Reservation, now: Timestamp) {
        let _ = self.0.cancel_at(reservation, now);
    }
}

/// A level with one limiter per key; `key_of` picks the key from the request.
pub struct Keyed<Req: ?Sized, K, L, C, S> {
    /// The per-key limiter.
    pub limiter: KeyedLimiter<K, L, C, S>,
    /// Picks this level's key from a request.
    pub key_of: fn(&Req) -> &K,
}

impl<Req, K, L, C, S> Level<Req> for Keyed<Req, K, L, C, S>
where
    Req: ?Sized,
    K: std::hash::Hash + Eq + Clone + Send + Sync,
    L: KeyState,
    C: Clock,
    S: std::hash::BuildHasher + Clone + Send + Sync,
{
    fn peek_at(&self, req: &Req, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.limiter.peek_at((self.key_of)(req), n, now)
    }
    fn reserve_now(&self, req: &Req, n: u64, now: Timestamp) -> Result<Reservation, KeyedError> {
        self.limiter
            .reserve_within_at((self.key_of)(req), n, now, Duration::ZERO)
    }
    fn cancel_at(&self, req: &Req, reservation: Reservation, now: Timestamp) {
        let _ = self.limiter.cancel_at((self.key_of)(req), reservation, now);
    }
}

/// The answer of [`Hierarchy::check_at`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HierarchyDecision {
    /// Whether every level admitted the request.
    pub allowed: bool,
    /// On denial, the name of the refusing level with the largest
    /// retry-after (the one the caller will wait for). Shared with the
    /// hierarchy, so a denial allocates nothing.
    pub refused_by: Option<Arc<str>>,
    /// The position of that level (0 is the first level added).
    pub refused_level: Option<usize>,
    /// On denial, the largest retry-after of the refusing levels.
    pub retry_after: Option<Duration>,
    /// The fewest units left at any level after this decision (as seen when
    /// the levels were looked at; approximate while other threads check).
    pub remaining: u64,
    /// The limit (burst) of the level with the fewest units left.
    pub limit: u64,
}

impl HierarchyDecision {
    /// `true` if admitted.
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }
}

/// A request a level can never admit (e.g. heavier than its burst).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("level {index} ({name}) cannot take this request: {source}")]
pub struct HierarchyError {
    /// The level's position.
    pub index: usize,
    /// The level's name.
    pub name: Arc<str>,
    /// What is wrong with the request.
    #[source]
    pub source: CheckError,
}

struct NamedLevel<Req: ?Sized> {
    name: Arc<str>,
    level: Box<dyn Level<Req>>,
    refusals: StripedCounter,
}

/// Levels checked together; see the [module docs](self).
pub struct Hierarchy<Req: ?Sized> {
    levels: Vec<NamedLevel<Req>>,
    commit: Mutex<()>,
    stats: AdmissionStats,
}

impl<Req: ?Sized + 'static> Default for Hierarchy<Req> {
    fn default() -> Self {
        Hierarchy::new()
    }
}

impl<Req: ?Sized + 'static> Hierarchy<Req> {
    /// A hierarchy with no levels (which admits everything).
    pub fn new() -> Self {
        Hierarchy {
            levels: Vec::new(),
            commit: Mutex::new(()),
            stats: AdmissionStats::new(),
        }
    }

    /// Adds a level. Levels are looked at and committed in the order added;
    /// put the most selective first so that most denials stop early in
    /// phase 1. The hierarchy owns the level: the exactness of rollbacks
    /// relies on no one else consuming its capacity.
    pub fn level(mut self, name: impl Into<Arc<str>>, level: impl Level<Req> + 'static) -> Self {
        self.levels.push(NamedLevel {
            name: name.into(),
            level: Box::new(level),
            refusals: StripedCounter::with_stripes(4),
        });
        self
    }

    /// Adds a level that is one limiter for every request.
    pub fn global(self, name: impl Into<Arc<str>>, limiter: impl RateLimiter + 'static) -> Self {
        self.level(name, Global(limiter))
    }

    /// Adds a per-key level; `key_of` picks the key from the request.
    pub fn keyed<K, L, C, S>(
        self,
        name: impl Into<Arc<str>>,
        limiter: KeyedLimiter<K, L, C, S>,
        key_of: fn(&Req) -> &K,
    ) -> Self
    where
        K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
        L: KeyState + 'static,
        C: Clock + 'static,
        S: std::hash::BuildHasher + Clone + Send + Sync + 'static,
    {
        self.level(name, Keyed { limiter, key_of })
    }

    /// The number of levels.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// `true` if there are no levels.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// The names of the levels, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.levels.iter().map(|l| &*l.name)
    }

    /// Looks at one level for `req` without changing anything; `None` if
    /// there is no level `index`.
    pub fn peek_level_at(
        &self,
        index: usize,
        req: &Req,
        n: u64,
        now: Timestamp,
    ) -> Option<Result<Decision, CheckError>> {
        self.levels.get(index).map(|l| l.level.peek_at(req, n, now))
    }

    /// Allowed/denied totals of the whole hierarchy.
    pub fn stats(&self) -> &AdmissionStats {
        &self.stats
    }

    /// How many requests level `index` refused (as the level with the
    /// largest retry-after); `None` if there is no such level.
    pub fn refusals(&self, index: usize) -> Option<u64> {
        self.levels.get(index).map(|l| l.refusals.sum())
    }

    /// Admits `req` with weight `n` at `now` if every level admits it;
    /// otherwise charges no level. See the [module docs](self).
    ///
    /// # Errors
    /// [`HierarchyError`] when some level can never admit a request of
    /// weight `n` (nothing is charged).
    pub fn check_at(
        &self,
        req: &Req,
        n: u64,
        now: Timestamp,
    ) -> Result<HierarchyDecision, HierarchyError> {
        // Phase 1: look.
        let mut worst: Option<(usize, Duration)> = None;
        let mut remaining = u64::MAX;
        let mut limit = 0;
        for (i, l) in self.levels.iter().enumerate() {
            let d = l.level.peek_at(req, n, now).map_err(|e| self.error(i, e))?;
            if let Some(retry) = d.retry_after.filter(|_| !d.allowed) {
                if worst.is_none_or(|(_, w)| retry > w) {
                    worst = Some((i, retry));
                }
            }
            let left = d.remaining.saturating_sub(n);
            if left < remaining {
                remaining = left;
                limit = d.limit;
            }
        }
        if let Some((i, retry)) = worst {
            return Ok(self.deny(i, retry, limit));
        }

        // Phase 2: commit, all or nothing.
        let _guard = self.commit.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err((i, e)) = self.commit_from(0, req, n, now) {
            return match e {
                KeyedError::Check(c) => Err(self.error(i, c)),
                KeyedError::WouldWaitTooLong { wait, .. } => Ok(self.deny(i, wait, limit)),
                KeyedError::Full { retry_after, .. } => Ok(self.deny(i, retry_after, limit)),
            };
        }
        self.stats.record(true);
        Ok(HierarchyDecision {
            allowed: true,
            refused_by: None,
            refused_level: None,
            retry_after: None,
            remaining: if self.levels.is_empty() { 0 } else { remaining },
            limit,
        })
    }

    /// Reserves `n` at `now` on levels `i..`, in order. If one refuses, the
    /// reservations already made are cancelled in reverse order (each level
    /// cancels its own as the recursion unwinds) and the refusing level's
    /// index and error are returned. Recursion instead of a list of
    /// reservations: nothing is allocated per request; the depth is the
    /// number of levels.
    fn commit_from(
        &self,
        i: usize,
        req: &Req,
        n: u64,
        now: Timestamp,
    ) -> Result<(), (usize, KeyedError)> {
        let Some(l) = self.levels.get(i) else {
            return Ok(());
        };
        let r = l.level.reserve_now(req, n, now).map_err(|e| (i, e))?;
        self.commit_from(i + 1, req, n, now)
            .inspect_err(|_| l.level.cancel_at(req, r, now))
    }

    /// A denial by level `i`: nothing is left to admit, so `remaining` is 0.
    fn deny(&self, i: usize, retry: Duration, limit: u64) -> HierarchyDecision {
        self.stats.record(false);
        let name = self.levels.get(i).map(|l| {
            l.refusals.add(1);
            l.name.clone()
        });
        HierarchyDecision {
            allowed: false,
            refused_by: name,
            refused_level: Some(i),
            retry_after: Some(retry),
            remaining: 0,
            limit,
        }
    }

    fn error(&self, i: usize, source: CheckError) -> HierarchyError {
        HierarchyError {
            index: i,
            name: self
                .levels
                .get(i)
                .map(|l| l.name.clone())
                .unwrap_or_else(|| Arc::from("")),
            source,
        }
    }
}

impl<Req: ?Sized> std::fmt::Debug for Hierarchy<Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hierarchy")
            .field(
                "levels",
                &self.levels.iter().map(|l| &l.name).collect::<Vec<_>>(),
            )
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::gcra::Gcra;
    use crate::algorithms::token_bucket::TokenBucket;
    use crate::keyed::NoClock;
    use crate::quota::Quota;
    use crate::test_support::ms;

    struct Req {
        user: u32,
        endpoint: u8,
    }

    fn req(user: u32, endpoint: u8) -> Req {
        Req { user, endpoint }
    }

    /// Units level `i` has left for `r` at time zero.
    fn left(h: &Hierarchy<Req>, i: usize, r: &Req) -> u64 {
        h.peek_level_at(i, r, 1, ms(0)).unwrap().unwrap().remaining
    }

    fn three_levels(user_burst: u64, ep_burst: u64, global_burst: u64) -> Hierarchy<Req> {
        let q = |b: u64| Quota::per_second(b).unwrap();
        Hierarchy::new()
            .keyed(
                "user",
                KeyedLimiter::<u32>::builder(q(user_burst)).build(),
                |r: &Req| &r.user,
            )
            .keyed(
                "endpoint",
                KeyedLimiter::<u8>::builder(q(ep_burst))
                    .limiter(|q| TokenBucket::with_clock(q, NoClock))
                    .build(),
                |r: &Req| &r.endpoint,
            )
            .global("global", Gcra::with_clock(q(global_burst), NoClock))
    }

    #[test]
    fn denial_charges_no_level_and_names_the_largest_retry() {
        let h = three_levels(5, 4, 10);
        let r = req(1, 1);
        assert!(h.check_at(&r, 4, ms(0)).unwrap().allowed);
        // User has 1 left, endpoint 0: both refuse; endpoint's wait is longer.
        let d = h.check_at(&r, 2, ms(0)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.refused_by.as_deref(), Some("endpoint"));
        assert_eq!(d.refused_level, Some(1));
        assert_eq!(d.retry_after, Some(Duration::from_millis(500)));
        // Nothing was charged: user still 1, global still 6.
        assert_eq!(left(&h, 0, &r), 1);
        assert_eq!(left(&h, 2, &r), 6);
        assert_eq!((h.stats().allowed.sum(), h.stats().denied.sum()), (1, 1));
        assert_eq!(h.refusals(1), Some(1));
    }

    #[test]
    fn errors_charge_nothing() {
        let h = three_levels(5, 4, 10);
        let r = req(1, 1);
        let e = h.check_at(&r, 5, ms(0)).unwrap_err();
        assert_eq!(e.index, 1);
        assert_eq!(&*e.name, "endpoint");
        assert!(e.to_string().contains("burst"), "{e}");
        assert_eq!(left(&h, 0, &r), 5);
    }

    #[test]
    fn commit_phase_refusal_rolls_back_exactly() {
        // A level that admits on peek but refuses on reserve (as if another
        // thread had taken its capacity in between).
        struct Flaky;
        impl Level<Req> for Flaky {
            fn peek_at(&self, _: &Req, n: u64, _: Timestamp) -> Result<Decision, CheckError> {
                Ok(Decision {
                    allowed: true,
                    limit: 100,
                    remaining: 100 - n,
                    reset_after: Duration::ZERO,
                    retry_after: None,
                    delay: Duration::ZERO,
                })
            }
            fn reserve_now(
                &self,
                _: &Req,
                _: u64,
                _: Timestamp,
            ) -> Result<Reservation, KeyedError> {
                Err(KeyedError::WouldWaitTooLong {
                    wait: Duration::from_secs(3),
                    max_wait: Duration::ZERO,
                })
            }
            fn cancel_at(&self, _: &Req, _: Reservation, _: Timestamp) {}
        }
        let h = three_levels(5, 4, 10).level("flaky", Flaky);
        let r = req(1, 1);
        let d = h.check_at(&r, 3, ms(0)).unwrap();
        assert_eq!(d.refused_by.as_deref(), Some("flaky"));
        assert_eq!(d.retry_after, Some(Duration::from_secs(3)));
        for (i, full) in [(0, 5), (1, 4), (2, 10)] {
            assert_eq!(left(&h, i, &r), full);
        }
    }

    #[test]
    fn a_full_keyed_level_refuses_and_charges_nothing_elsewhere() {
        let q = Quota::per_second(10).unwrap();
        let h = Hierarchy::<Req>::new()
            .global("global", Gcra::with_clock(q, NoClock))
            .keyed(
                "user",
                KeyedLimiter::<u32>::builder(q).max_keys(1).build(),
                |r: &Req| &r.user,
            );
        let r = |user| req(user, 0);
        assert!(h.check_at(&r(1), 3, ms(0)).unwrap().allowed);
        // User 2 looks fine when peeked, but there is no room to track it:
        // the commit refuses, and the global level gets its 3 units back.
        let d = h.check_at(&r(2), 3, ms(0)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.refused_by.as_deref(), Some("user"));
        assert_eq!(d.retry_after, Some(Duration::from_millis(300)));
        assert_eq!(left(&h, 0, &r(2)), 7);
    }

    #[test]
    fn empty_hierarchy_admits() {
        let h = Hierarchy::<Req>::new();
        assert!(h.is_empty());
        let d = h.check_at(&req(0, 0), 1, ms(0)).unwrap();
        assert!(d.allowed);
    }

    #[test]
    fn concurrent_checks_charge_exactly_the_admitted_weight() {
        // Time stands still, so each level's remaining capacity is exactly
        // its burst minus what was admitted through it.
        let h = three_levels(40, 60, 100);
        let admitted: Vec<std::sync::Mutex<Vec<(u32, u8, u64)>>> =
            (0..4).map(|_| std::sync::Mutex::new(Vec::new())).collect();
        std::thread::scope(|s| {
            for (t, log) in admitted.iter().enumerate() {
                let h = &h;
                s.spawn(move || {
                    for i in 0..400u32 {
                        let r = req((i + t as u32) % 5, (i % 3) as u8);
                        let n = u64::from(i % 3) + 1;
                        if h.check_at(&r, n, ms(0)).unwrap().allowed {
                            log.lock().unwrap().push((r.user, r.endpoint, n));
                        }
                    }
                });
            }
        });
        let all: Vec<_> = admitted
            .into_iter()
            .flat_map(|m| m.into_inner().unwrap())
            .collect();
        let total: u64 = all.iter().map(|a| a.2).sum();
        assert!(total <= 100);
        assert_eq!(left(&h, 2, &req(0, 0)), 100 - total);
        for u in 0..5 {
            let used: u64 = all.iter().filter(|a| a.0 == u).map(|a| a.2).sum();
            assert!(used <= 40);
            assert_eq!(left(&h, 0, &req(u, 0)), 40 - used);
        }
        for e in 0..3 {
            let used: u64 = all.iter().filter(|a| a.1 == e).map(|a| a.2).sum();
            assert!(used <= 60);
            assert_eq!(left(&h, 1, &req(0, e)), 60 - used);
        }
        // The global level was the binding one: it is (nearly) used up.
        assert!(total >= 98, "{total}");
    }
}
