//! Many threads, one limiter, a frozen clock: exactly the burst is admitted.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use common::{build, ALGORITHMS};
use ratewise::{Quota, Timestamp};

#[test]
fn frozen_clock_admits_exactly_the_burst() {
    const THREADS: usize = 8;
    const TRIES: usize = 2_000;
    for name in ALGORITHMS {
        for burst in [1u64, 7, 100, 1000] {
            let q = Quota::per_second(10).unwrap().with_burst(burst).unwrap();
            let limiter: Arc<dyn ratewise::RateLimiter> = Arc::from(build(name, q));
            let admitted = Arc::new(AtomicU64::new(0));
            let barrier = Arc::new(Barrier::new(THREADS));
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (l, a, b) = (limiter.clone(), admitted.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        b.wait();
                        for _ in 0..TRIES {
                            if l.check_at(1, Timestamp::from_nanos(5)).unwrap().allowed {
                                a.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(
                admitted.load(Ordering::Relaxed),
                burst,
                "{name} burst {burst}"
            );
        }
    }
}

/// Re-configuration racing checks: no panic, and with the rate only ever
/// lowered and the clock frozen, never more than the largest burst.
#[test]
fn set_quota_races_checks_safely() {
    for name in ALGORITHMS {
        let q = Quota::per_second(10).unwrap().with_burst(50).unwrap();
        let limiter: Arc<dyn ratewise::RateLimiter> = Arc::from(build(name, q));
        let admitted = Arc::new(AtomicU64::new(0));
        let checker = {
            let (l, a) = (limiter.clone(), admitted.clone());
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    if l.check_at(1, Timestamp::from_nanos(1)).unwrap().allowed {
                        a.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        for i in 0..2_000u64 {
            let q = Quota::per_second(1 + i % 10)
                .unwrap()
                .with_burst(10 + i % 40)
                .unwrap();
            limiter.set_quota_at(q, Timestamp::from_nanos(1));
        }
        checker.join().unwrap();
        assert!(admitted.load(Ordering::Relaxed) <= 50, "{name}");
    }
}
