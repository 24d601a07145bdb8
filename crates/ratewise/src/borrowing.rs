//! [`BorrowingBuckets`]: classes of traffic under one parent rate, each with
//! an assured rate it always gets and a ceiling it may reach by borrowing the
//! parent's idle capacity (Linux HTB's `rate` and `ceil`).
//!
//! ```
//! use std::time::Duration;
//! use ratewise::borrowing::{BorrowingBuckets, ClassConfig, Grant};
//! use ratewise::Timestamp;
//!
//! // 100/s in all: "api" is assured 60/s and may reach 100/s, "batch" is
//! // assured 20/s and may reach 50/s; 20/s are nobody's.
//! let mut htb = BorrowingBuckets::new(100, 10, &[
//!     ClassConfig { assured_per_second: 60, ceiling_per_second: 100, burst: 10 },
//!     ClassConfig { assured_per_second: 20, ceiling_per_second: 50, burst: 10 },
//! ])?;
//! // "api" asks every 2 ms for 2 s while "batch" is idle: it gets beyond its
//! // assured 60/s by borrowing, but no more than its ceiling allows.
//! let mut borrowed = 0;
//! let mut admitted = 0;
//! for i in 0..1000 {
//!     let g = htb.check_at(0, 1, Timestamp::ZERO + Duration::from_millis(2 * i))?;
//!     borrowed += u32::from(g == Grant::Borrowed);
//!     admitted += u32::from(g.is_admitted());
//! }
//! assert!(borrowed > 0);
//! assert!((120..=2 * 100 + 20).contains(&admitted), "{admitted}");
//! # Ok::<(), ratewise::borrowing::BorrowingError>(())
//! ```
//!
//! Exact integer buckets: an **assured** bucket per class; one **shared**
//! bucket filling at the parent rate minus the assured rates, plus what a
//! full assured bucket would gain (unused assured rate is lent out); a
//! **ceiling** bucket per class charged for every unit the class gets. Hence
//! the parent's total never exceeds its quota, no class gets more than
//! `ceiling × T + 2 × burst` in a span `T`, and a backlogged class gets at
//! least its assured rate (property-tested). Borrowing is first come, first
//! served among the borrowers.

use crate::time::Timestamp;

const SCALE: u128 = 1_000_000_000;

/// One class of traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassConfig {
    /// The rate the class always gets when it asks, in units per second.
    pub assured_per_second: u64,
    /// The most it may get by borrowing, in units per second (at least the
    /// assured rate).
    pub ceiling_per_second: u64,
    /// How many units its buckets hold: its largest burst (at least 1).
    pub burst: u64,
}

/// A configuration that cannot hold its promises.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BorrowingError {
    /// The assured rates add up to more than the parent's rate, so they
    /// cannot all be assured.
    #[error("the classes' assured rates add up to {assured}/s, more than the parent's {parent}/s")]
    Oversubscribed {
        /// The sum of the assured rates.
        assured: u64,
        /// The parent's rate.
        parent: u64,
    },
    /// A class whose ceiling is below its assured rate, or above the
    /// parent's rate, or whose burst is zero.
    #[error("class {class}: need 1 ≤ burst and assured ≤ ceiling ≤ parent rate ({detail})")]
    BadClass {
        /// The class's position.
        class: usize,
        /// What is wrong.
        detail: &'static str,
    },
    /// A parent with a zero rate or burst, or no classes.
    #[error("the parent needs a rate and a burst of at least 1 and at least one class")]
    BadParent,
    /// A request for a class that does not exist.
    #[error("there is no class {0}")]
    NoSuchClass(usize),
    /// A request of weight zero, or heavier than its class's burst (it could
    /// never pass).
    #[error("a request must weigh between 1 and its class's burst ({burst}), got {requested}")]
    BadWeight {
        /// The weight asked for.
        requested: u64,
        /// The class's burst.
        burst: u64,
    },
}

/// What a request got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Admitted within the class's assured rate.
    Assured,
    /// Admitted on the parent's idle capacity.
    Borrowed,
    /// Refused: neither the class's own capacity nor idle capacity within
    /// its ceiling was there.
    Refused,
}

impl Grant {
    /// `true` unless refused.
    pub const fn is_admitted(self) -> bool {
        !matches!(self, Grant::Refused)
    }
}

/// A token bucket in units × 10⁹.
#[derive(Clone, Copy, Debug)]
struct Level {
    tokens: u128,
    cap: u128,
}

impl Level {
    fn full(burst: u64) -> Self {
        let cap = u128::from(burst) * SCALE;
        Level { tokens: cap, cap }
    }

    /// Adds `amount`, returning what did not fit.
    fn fill(&mut self, amount: u128) -> u128 {
        let room = self.cap - self.tokens;
        let taken = amount.min(room);
        self.tokens += taken;
        amount - taken
    }

    fn has(&self, amount: u128) -> bool {
        self.tokens >= amount
    }
}

#[derive(Clone, Debug)]
struct Class {
    config: ClassConfig,
    assured: Level,
    /// The ceiling bucket, in units × 10⁹: charged for every unit the class
    /// gets, and negative (a debt) when assured units outran it.
    ceiling: i128,
}

/// Classes with assured rates and ceilings under one parent rate; see the
/// [module docs](self). Sans-IO: every call takes `now`; share it behind a
/// `Mutex`.
#[derive(Clone, Debug)]
pub struct BorrowingBuckets {
    classes: Vec<Class>,
    shared: Level,
    /// Units per second flowing into the shared bucket on their own.
    shared_rate: u64,
    parent_per_second: u64,
    last: u64,
}

impl BorrowingBuckets {
    /// A parent of `parent_per_second` with a shared burst of `parent_burst`
    /// over `classes`; every bucket starts full.
    ///
    /// # Errors
    /// [`BorrowingError`] when the configuration cannot hold its promises.
    pub fn new(
        parent_per_second: u64,
        parent_burst: u64,
        classes: &[ClassConfig],
    ) -> Result<Self, BorrowingError> {
        if parent_per_second == 0 || parent_burst == 0 || classes.is_empty() {
            return Err(BorrowingError::BadParent);
        }
        let mut assured: u64 = 0;
        for (i, c) in classes.iter().enumerate() {
            let bad = |detail| BorrowingError::BadClass { class: i, detail };
            if c.burst == 0 {
                return Err(bad("burst is 0"));
            }
            if c.ceiling_per_second < c.assured_per_second {
                return Err(bad("ceiling below assured rate"));
            }
            if c.ceiling_per_second > parent_per_second {
                return Err(bad("ceiling above the parent's rate"));
            }
            assured = assured.saturating_add(c.assured_per_second);
        }
        if assured > parent_per_second {
            return Err(BorrowingError::Oversubscribed {
                assured,
                parent: parent_per_second,
            });
        }
        Ok(BorrowingBuckets {
            classes: classes
                .iter()
                .map(|&config| Class {
                    config,
                    assured: Level::full(config.burst),
                    ceiling: (u128::from(config.burst) * SCALE) as i128,
                })
                .collect(),
            shared: Level::full(parent_burst),
            shared_rate: parent_per_second - assured,
            parent_per_second,
            last: 0,
        })
    }

    /// The parent's rate, in units per second.
    pub fn parent_per_second(&self) -> u64 {
        self.parent_per_second
    }

    /// The classes, as configured.
    pub fn classes(&self) -> impl Iterator<Item = &ClassConfig> {
        self.classes.iter().map(|c| &c.config)
    }

    /// Brings every bucket up to `now` (an earlier `now` than one seen adds
    /// nothing). Exact: refills are linear between calls, so what an
    /// assured bucket gains past full is exactly what it would have spilt.
    fn refill(&mut self, now: u64) {
        if now <= self.last {
            return;
        }
        let dt = u128::from(now - self.last);
        self.last = now;
        let mut spill = 0;
        for c in &mut self.classes {
            spill += c.assured.fill(u128::from(c.config.assured_per_second) * dt);
            let cap = (u128::from(c.config.burst) * SCALE) as i128;
            let gain = (u128::from(c.config.ceiling_per_second) * dt).min(cap as u128 * 2) as i128;
            c.ceiling = (c.ceiling + gain).min(cap);
        }
        let _ = self.shared.fill(u128::from(self.shared_rate) * dt + spill);
    }

    /// Asks for `n` units for `class` at `now`.
    ///
    /// # Errors
    /// [`BorrowingError::NoSuchClass`], or [`BorrowingError::BadWeight`] for
    /// a weight of 0 or above the class's burst.
    pub fn check_at(
        &mut self,
        class: usize,
        n: u64,
        now: Timestamp,
    ) -> Result<Grant, BorrowingError> {
        let burst = self
            .classes
            .get(class)
            .ok_or(BorrowingError::NoSuchClass(class))?
            .config
            .burst;
        if n == 0 || n > burst {
            return Err(BorrowingError::BadWeight {
                requested: n,
                burst,
            });
        }
        self.refill(now.as_nanos());
        let need = u128::from(n) * SCALE;
        let c = &mut self.classes[class];
        // The assured rate is the class's own: the ceiling does not stop it
        // (it is charged, and may go into debt, which then stops borrowing).
        let grant = if c.assured.has(need) {
            c.assured.tokens -= need;
            Grant::Assured
        } else if c.ceiling >= need as i128 && self.shared.has(need) {
            self.shared.tokens -= need;
            Grant::Borrowed
        } else {
            return Ok(Grant::Refused);
        };
        c.ceiling -= need as i128;
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_nanos(v * 1_000_000)
    }

    fn class(assured: u64, ceiling: u64, burst: u64) -> ClassConfig {
        ClassConfig {
            assured_per_second: assured,
            ceiling_per_second: ceiling,
            burst,
        }
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        assert_eq!(
            BorrowingBuckets::new(10, 1, &[class(8, 10, 1), class(5, 5, 1)]).unwrap_err(),
            BorrowingError::Oversubscribed {
                assured: 13,
                parent: 10
            }
        );
        assert!(matches!(
            BorrowingBuckets::new(10, 1, &[class(5, 4, 1)]),
            Err(BorrowingError::BadClass { class: 0, .. })
        ));
        assert!(matches!(
            BorrowingBuckets::new(10, 1, &[class(5, 11, 1)]),
            Err(BorrowingError::BadClass { .. })
        ));
        assert_eq!(
            BorrowingBuckets::new(0, 1, &[class(0, 0, 1)]).unwrap_err(),
            BorrowingError::BadParent
        );
        let mut h = BorrowingBuckets::new(10, 1, &[class(5, 10, 2)]).unwrap();
        assert_eq!(h.check_at(1, 1, ms(0)), Err(BorrowingError::NoSuchClass(1)));
        assert!(matches!(
            h.check_at(0, 3, ms(0)),
            Err(BorrowingError::BadWeight { .. })
        ));
    }

    #[test]
    fn an_idle_class_lends_its_assured_rate() {
        // Parent 100/s: A assured 50 ceiling 100, B assured 50 ceiling 100.
        let mut h = BorrowingBuckets::new(100, 1, &[class(50, 100, 1), class(50, 100, 1)]).unwrap();
        // Drain the starting tokens.
        let _ = h.check_at(0, 1, ms(0));
        let _ = h.check_at(0, 1, ms(0));
        let _ = h.check_at(1, 1, ms(0));
        // A asks every 10 ms for 10 s while B is idle: 100/s, all of it.
        let mut admitted = 0;
        for t in 1..=1_000 {
            if h.check_at(0, 1, ms(t * 10)).unwrap().is_admitted() {
                admitted += 1;
            }
        }
        assert!(admitted >= 995, "{admitted}");
    }

    /// A parent rate, `(assured, ceiling, burst)` per class, and steps of
    /// `(ms to advance, [(class, units)])`.
    type Workload = (u64, Vec<(u64, u64, u64)>, Vec<(u64, Vec<(usize, u64)>)>);

    /// Random workloads: per step, a time advance and a set of classes that
    /// each ask for some units.
    fn workload() -> impl Strategy<Value = Workload> {
        (1u64..=50, 1usize..=4).prop_flat_map(|(parent, n)| {
            let classes = proptest::collection::vec((0u64..=parent, 0u64..=parent, 1u64..=5), n)
                .prop_map(move |cs| {
                    // Scale assured rates so they fit under the parent.
                    let total: u64 = cs.iter().map(|c| c.0).sum::<u64>().max(1);
                    cs.into_iter()
                        .map(|(a, c, b)| {
                            let a = a * parent / total.max(parent);
                            (a, c.max(a), b)
                        })
                        .collect::<Vec<_>>()
                });
            let steps = proptest::collection::vec(
                (0u64..200, proptest::collection::vec((0..n, 1u64..=5), 0..6)),
                1..120,
            );
            (Just(parent), classes, steps)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn parent_and_ceilings_hold((parent, cs, steps) in workload()) {
            let configs: Vec<ClassConfig> = cs.iter().map(|&(a, c, b)| class(a, c, b)).collect();
            let parent_burst = 3;
            let mut h = BorrowingBuckets::new(parent, parent_burst, &configs).unwrap();
            let mut t = 0u64;
            // (time in ms, class, units)
            let mut log: Vec<(u64, usize, u64)> = Vec::new();
            for (dt, asks) in &steps {
                t += dt;
                for &(k, n) in asks {
                    let n = n.min(configs[k].burst);
                    if h.check_at(k, n, ms(t)).unwrap().is_admitted() {
                        log.push((t, k, n));
                    }
                }
            }
            // In any span [a, b] (ms): parent total ≤ rate·span + all bursts;
            // class k ≤ ceiling·span + 2·burst.
            let all_bursts: u64 = parent_burst + configs.iter().map(|c| c.burst).sum::<u64>();
            for (i, &(a, _, _)) in log.iter().enumerate() {
                let mut total = 0u64;
                let mut per = vec![0u64; configs.len()];
                for &(b, k, n) in &log[i..] {
                    total += n;
                    per[k] += n;
                    let span = u128::from(b - a);
                    let bound = |rate: u64, burst: u64| (u128::from(rate) * span / 1000) as u64 + burst;
                    prop_assert!(total <= bound(parent, all_bursts), "parent: {total} in {span} ms");
                    prop_assert!(per[k] <= bound(configs[k].ceiling_per_second, 2 * configs[k].burst),
                        "class {k}: {} in {span} ms", per[k]);
                }
            }
        }

        #[test]
        fn a_backlogged_class_gets_its_assured_rate(
            (parent, cs, steps) in workload(),
            hungry in 0usize..4,
        ) {
            let mut configs: Vec<ClassConfig> = cs.iter().map(|&(a, c, b)| class(a, c, b)).collect();
            let hungry = hungry % configs.len();
            // Backlogged: it asks every millisecond, and its burst of at
            // least 2 means its assured bucket is never full when it asks
            // (with a burst of 1, the fraction of a unit that arrives in the
            // millisecond the bucket fills spills to the others).
            configs[hungry].burst = configs[hungry].burst.max(2);
            let mut h = BorrowingBuckets::new(parent, 3, &configs).unwrap();
            // The hungry class asks for 1 unit every millisecond; the others
            // do as the workload says, as greedily as they like.
            let mut t = 0u64;
            let mut got = 0u64;
            let total_ms = 5_000u64;
            for (next_other, ms_now) in (0..total_ms).enumerate() {
                if h.check_at(hungry, 1, ms(ms_now)).unwrap().is_admitted() {
                    got += 1;
                }
                // Replay the others' asks, cycling through the workload.
                let (_, asks) = &steps[next_other % steps.len()];
                for &(k, n) in asks {
                    if k != hungry {
                        let _ = h.check_at(k, n.min(configs[k].burst), ms(ms_now));
                    }
                }
                t = ms_now;
            }
            let assured = configs[hungry].assured_per_second;
            // At most one request per ms is asked for: the assured rate is
            // owed up to that.
            let owed = assured.min(1000) * (t + 1) / 1000;
            prop_assert!(got + 1 >= owed, "got {got}, assured {assured}/s over {} ms", t + 1);
        }
    }
}
