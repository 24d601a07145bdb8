//! A `loom` model of the lock-free GCRA update: every interleaving of two
//! threads checking at a frozen time admits exactly the burst.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ratewise --release --test loom_gcra`.

#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use ratewise::{Gcra, ManualClock, Quota, RateLimiter, Timestamp};

#[test]
fn concurrent_checks_admit_exactly_the_burst() {
    loom::model(|| {
        let q = Quota::per_second(10).unwrap().with_burst(2).unwrap();
        let g = Arc::new(Gcra::with_clock(q, ManualClock::new()));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                thread::spawn(move || {
                    (0..2)
                        .filter(|_| g.check_at(1, Timestamp::from_nanos(1)).unwrap().allowed)
                        .count()
                })
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 2);
    });
}

#[test]
fn weighted_checks_never_over_admit() {
    loom::model(|| {
        let q = Quota::per_second(10).unwrap().with_burst(3).unwrap();
        let g = Arc::new(Gcra::with_clock(q, ManualClock::new()));
        let a = {
            let g = g.clone();
            thread::spawn(move || g.check_at(2, Timestamp::from_nanos(0)).unwrap().allowed)
        };
        let b = {
            let g = g.clone();
            thread::spawn(move || g.check_at(2, Timestamp::from_nanos(0)).unwrap().allowed)
        };
        let admitted = u32::from(a.join().unwrap()) + u32::from(b.join().unwrap());
        // 2 + 2 > 3: exactly one of the two may pass.
        assert_eq!(admitted, 1);
        // The survivor left exactly one unit.
        assert_eq!(g.peek_at(1, Timestamp::from_nanos(0)).unwrap().remaining, 1);
    });
}
