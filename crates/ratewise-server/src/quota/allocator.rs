//! Divides a bucket's quota among the data planes that ask for it, in
//! proportion to what they want (Doorman's "wants, has, gets"), so that the
//! leases held never add up to more than the quota. Sans-IO: every call
//! takes `now`.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::Timestamp;
//! use ratewise_server::quota::Allocator;
//!
//! let mut a = Allocator::default();
//! let (ttl, now) = (Duration::from_secs(2), Timestamp::from_nanos(0));
//! // Alone, a data plane gets what it wants and the spare.
//! assert_eq!(a.assign("edge|user=alice", 1, 30.0, 100.0, ttl, now), 100.0);
//! // A second one arrives: it gets only what the first does not hold...
//! assert_eq!(a.assign("edge|user=alice", 2, 90.0, 100.0, ttl, now), 0.0);
//! // ...until the first renews and gives back its part of the excess.
//! assert_eq!(a.assign("edge|user=alice", 1, 30.0, 100.0, ttl, now), 25.0);
//! assert_eq!(a.assign("edge|user=alice", 2, 90.0, 100.0, ttl, now), 75.0);
//! assert!(a.held("edge|user=alice", now) <= 100.0);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ratewise::Timestamp;

/// One data plane's lease on a bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Lease {
    wants: f64,
    has: f64,
    expires: Timestamp,
}

/// The share rule, the same in memory and in the Redis script: when the
/// demands fit, each gets what it wants plus an equal part of the spare;
/// otherwise the quota is divided in proportion to the demands. What others
/// hold bounds it either way (see [`Allocator::assign`]).
pub fn fair_share(wants: f64, others_wants: f64, others: usize, capacity: f64) -> f64 {
    let total = wants + others_wants;
    if total <= capacity {
        wants + (capacity - total) / (others as f64 + 1.0)
    } else {
        capacity * wants / total
    }
}

/// Leases per bucket, per data plane.
#[derive(Debug, Default)]
pub struct Allocator {
    // Leases in a BTreeMap: sums in one order, so results repeat exactly.
    buckets: HashMap<Box<str>, BTreeMap<u64, Lease>>,
}

impl Allocator {
    /// Gives `client` its part of `capacity` (requests per second) on
    /// `bucket` for `ttl`: its [`fair_share`] given the others' demands, but
    /// never more than the others leave free, so the leases held never sum
    /// above `capacity`. Expired leases are dropped first. `wants` is
    /// clamped to `0..=capacity`.
    pub fn assign(
        &mut self,
        bucket: &str,
        client: u64,
        wants: f64,
        capacity: f64,
        ttl: Duration,
        now: Timestamp,
    ) -> f64 {
        let capacity = if capacity.is_finite() {
            capacity.max(0.0)
        } else {
            0.0
        };
        let wants = if wants.is_nan() {
            capacity
        } else {
            wants.clamp(0.0, capacity)
        };
        let leases = self.buckets.entry(bucket.into()).or_default();
        leases.retain(|c, l| *c == client || l.expires > now);
        let (mut others, mut others_wants, mut others_has) = (0, 0.0, 0.0);
        for (_, l) in leases.iter().filter(|(c, _)| **c != client) {
            others += 1;
            others_wants += l.wants;
            others_has += l.has;
        }
        let fair = fair_share(wants, others_wants, others, capacity);
        let gets = fair.min(capacity - others_has).max(0.0);
        leases.insert(
            client,
            Lease {
                wants,
                has: gets,
                expires: now.saturating_add(ttl),
            },
        );
        gets
    }

    /// Ends `client`'s lease on `bucket` (its stream closed, or the bucket
    /// was abandoned): what it held is free at once.
    pub fn release(&mut self, bucket: &str, client: u64) {
        if let Some(leases) = self.buckets.get_mut(bucket) {
            leases.remove(&client);
            if leases.is_empty() {
                self.buckets.remove(bucket);
            }
        }
    }

    /// What the unexpired leases on `bucket` hold in all.
    pub fn held(&self, bucket: &str, now: Timestamp) -> f64 {
        self.buckets.get(bucket).map_or(0.0, |leases| {
            leases
                .values()
                .filter(|l| l.expires > now)
                .map(|l| l.has)
                .sum()
        })
    }

    /// The number of buckets with a lease.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TTL: Duration = Duration::from_secs(2);

    #[derive(Clone, Debug)]
    enum Op {
        Assign { client: u64, wants: f64 },
        Release { client: u64 },
        Wait { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..6, 0.0f64..500.0).prop_map(|(client, wants)| Op::Assign { client, wants }),
            1 => (0u64..6).prop_map(|client| Op::Release { client }),
            2 => (0u64..3000).prop_map(|ms| Op::Wait { ms }),
        ]
    }

    proptest! {
        /// Whatever the order of demands, releases and time, the leases
        /// held never add up to more than the quota.
        #[test]
        fn leases_never_exceed_the_quota(capacity in 1.0f64..1000.0, ops in prop::collection::vec(op(), 1..200)) {
            let mut a = Allocator::default();
            let mut now = Timestamp::from_nanos(0);
            for op in ops {
                match op {
                    Op::Assign { client, wants } => {
                        let gets = a.assign("b", client, wants, capacity, TTL, now);
                        prop_assert!(gets >= 0.0);
                    }
                    Op::Release { client } => a.release("b", client),
                    Op::Wait { ms } => now = now.saturating_add(Duration::from_millis(ms)),
                }
                prop_assert!(a.held("b", now) <= capacity * (1.0 + 1e-9), "{} > {capacity}", a.held("b", now));
            }
        }

        /// Steady demands converge, after two rounds of renewals, to shares
        /// in proportion to them when they exceed the quota.
        #[test]
        fn steady_demands_converge_to_proportional_shares(capacity in 10.0f64..1000.0, wants in prop::collection::vec(1.0f64..1000.0, 2..8)) {
            let mut a = Allocator::default();
            let now = Timestamp::from_nanos(0);
            let mut last = vec![0.0; wants.len()];
            for _ in 0..3 {
                for (i, w) in wants.iter().enumerate() {
                    last[i] = a.assign("b", i as u64, *w, capacity, TTL, now);
                }
            }
            let total: f64 = wants.iter().map(|w| w.min(capacity)).sum();
            if total > capacity {
                for (i, w) in wants.iter().enumerate() {
                    let fair = capacity * w.min(capacity) / total;
                    prop_assert!((last[i] - fair).abs() <= 1e-6 * capacity, "client {i}: {} vs {fair}", last[i]);
                }
            }
        }
    }

    #[test]
    fn an_expired_lease_frees_its_share() {
        let mut a = Allocator::default();
        let t0 = Timestamp::from_nanos(0);
        assert_eq!(a.assign("b", 1, 100.0, 100.0, TTL, t0), 100.0);
        assert_eq!(a.assign("b", 2, 100.0, 100.0, TTL, t0), 0.0);
        let later = t0.saturating_add(TTL);
        assert_eq!(a.assign("b", 2, 100.0, 100.0, TTL, later), 100.0);
    }

    #[test]
    fn nonsense_demands_are_clamped() {
        let mut a = Allocator::default();
        let t0 = Timestamp::from_nanos(0);
        assert_eq!(a.assign("b", 1, f64::NAN, 10.0, TTL, t0), 10.0);
        a.release("b", 1);
        assert_eq!(a.assign("b", 1, -5.0, 10.0, TTL, t0), 10.0, "the spare");
        assert_eq!(a.assign("b", 1, 5.0, f64::INFINITY, TTL, t0), 0.0);
        assert_eq!(a.buckets(), 1);
    }
}
