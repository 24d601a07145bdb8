//! An instance's share of a quota while Redis cannot answer, and the
//! admissions it made then, written back to Redis when Redis is back.
//!
//! Two rules keep a fleet of instances within the quota through an outage:
//! a key's share starts **empty** when the outage finds it (the fleet may
//! have spent the whole burst just before), so the fleet admits at most the
//! quota's rate while Redis is away; and what each instance admitted is
//! **owed** to Redis, charged on the key's first decision after Redis
//! returns, so the refill Redis saw during the outage is not admitted a
//! second time as a burst.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ratewise::keyed::KeyedLimiter;
use ratewise::time::Clock;
use ratewise::{Decision, Quota, QuotaError};

/// Keys a share tracks at most (and keys owing admissions to Redis).
const MAX_KEYS: usize = 100_000;

/// `1/instances` of a quota, decided in memory; see the module docs.
///
/// Build it with [`FailurePolicy::local_share`](crate::FailurePolicy::local_share);
/// [`LocalShare::set_instances`] resizes it when the fleet grows or
/// shrinks.
pub struct LocalShare {
    quota: Quota,
    instances: AtomicU32,
    limiter: KeyedLimiter<Vec<u8>>,
    owed: Mutex<HashMap<Vec<u8>, u64>>,
    /// `owed.len()`, read without the lock on every Redis answer.
    owing: AtomicUsize,
}

impl std::fmt::Debug for LocalShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalShare")
            .field("quota", &self.quota)
            .field("instances", &self.instances())
            .field("owing_keys", &self.owing.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// `quota` divided among `instances`: the emission interval multiplied, the
/// burst divided (rounded down, at least 1).
fn share_of(quota: Quota, instances: u32) -> Result<Quota, QuotaError> {
    let n = u64::from(instances.max(1));
    quota.divided(n, (quota.burst() / n).max(1))
}

impl LocalShare {
    /// `1/instances` of `quota` (0 counts as 1).
    ///
    /// # Errors
    /// [`QuotaError`] when the share's emission interval overflows.
    pub fn new(quota: Quota, instances: u32) -> Result<LocalShare, QuotaError> {
        let share = share_of(quota, instances)?;
        Ok(LocalShare {
            quota,
            instances: AtomicU32::new(instances.max(1)),
            limiter: KeyedLimiter::builder(share).max_keys(MAX_KEYS).build(),
            owed: Mutex::new(HashMap::new()),
            owing: AtomicUsize::new(0),
        })
    }

    /// The whole quota this is a share of.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The number of instances the quota is divided among.
    pub fn instances(&self) -> u32 {
        self.instances.load(Ordering::Relaxed)
    }

    /// The share each key holds now.
    pub fn share(&self) -> Quota {
        self.limiter.default_quota()
    }

    /// Divides the quota among `instances` from now on (0 counts as 1);
    /// tracked keys keep what they have left, as
    /// [`KeyedLimiter::set_default_quota`] does.
    ///
    /// # Errors
    /// [`QuotaError`] when the share's emission interval overflows; the
    /// share is unchanged then.
    pub fn set_instances(&self, instances: u32) -> Result<(), QuotaError> {
        let instances = instances.max(1);
        if self.instances.swap(instances, Ordering::Relaxed) != instances {
            self.limiter
                .set_default_quota(share_of(self.quota, instances)?);
        }
        Ok(())
    }

    /// Decides `n` units for `key` in memory. A key not tracked yet starts
    /// with its share spent; an admission is owed to Redis. `None` when the
    /// share cannot decide (a weight above its burst, a full table, too
    /// many keys owing): the caller refuses.
    pub(crate) fn decide(&self, key: &[u8], n: u64, peek: bool) -> Option<Decision> {
        let key = key.to_vec();
        let now = self.limiter.clock().now();
        if !self.limiter.contains(&key) {
            // Spend the share's burst before the first decision. Two
            // threads may both try; the second finds too little and takes
            // nothing.
            let burst = self.limiter.key_quota(&key).burst();
            let _ = self
                .limiter
                .reserve_within_at(&key, burst, now, Duration::ZERO);
        }
        if peek {
            return self.limiter.peek_at(&key, n, now).ok();
        }
        let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
        if owed.len() >= MAX_KEYS && !owed.contains_key(&key) {
            return None;
        }
        let decision = self.limiter.check_at(&key, n, now).ok()?;
        if decision.allowed && n > 0 {
            *owed.entry(key).or_insert(0) += n;
            self.owing.store(owed.len(), Ordering::Relaxed);
        }
        Some(decision)
    }

    /// Whether any key owes admissions to Redis (one atomic load).
    pub(crate) fn owes(&self) -> bool {
        self.owing.load(Ordering::Relaxed) > 0
    }

    /// Takes what `key` owes to Redis, and forgets its in-memory state so
    /// that the next outage finds it spent again.
    pub(crate) fn take_owed(&self, key: &[u8]) -> Option<u64> {
        let taken = {
            let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
            let taken = owed.remove(key);
            self.owing.store(owed.len(), Ordering::Relaxed);
            taken
        };
        self.limiter.reset(&key.to_vec());
        taken
    }

    /// Units owed to Redis in all, over every key (for tests and status).
    pub fn owed_units(&self) -> u64 {
        let owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
        owed.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_starts_spent_and_refills_at_its_share() {
        let share = LocalShare::new(Quota::per_second(1000).unwrap(), 4).unwrap();
        assert_eq!(share.share().burst(), 250);
        let d = share.decide(b"k", 1, false).unwrap();
        assert!(!d.allowed, "a key found in an outage starts with nothing");
        assert!(d.retry_after.unwrap() <= Duration::from_millis(4));
        assert_eq!(share.owed_units(), 0);
    }

    #[test]
    fn admissions_are_owed_until_taken() {
        let share = LocalShare::new(Quota::per_second(1_000_000).unwrap(), 1).unwrap();
        // 1 µs emission: a little real time refills a few units.
        let mut admitted = 0;
        while admitted < 3 {
            if share.decide(b"k", 1, false).unwrap().allowed {
                admitted += 1;
            }
        }
        assert!(share.owes());
        assert_eq!(share.owed_units(), 3);
        assert_eq!(share.take_owed(b"k"), Some(3));
        assert!(!share.owes());
        assert_eq!(share.take_owed(b"k"), None);
    }

    #[test]
    fn resizing_changes_the_share() {
        let share = LocalShare::new(Quota::per_second(100).unwrap(), 1).unwrap();
        share.set_instances(4).unwrap();
        assert_eq!(share.instances(), 4);
        assert_eq!(share.share().burst(), 25);
        share.set_instances(0).unwrap();
        assert_eq!(share.instances(), 1);
        assert_eq!(share.share().burst(), 100);
    }
}
