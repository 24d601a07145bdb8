//! A `loom` model of the lock-free GCRA update: every interleaving of two
//! threads checking at a frozen time admits exactly the burst.
//!
//! Run with `RUSTFLAGS="--cfg ratewise_loom" cargo test -p ratewise --release --test loom_gcra`.

#![cfg(ratewise_loom)]

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

/// Re-configuration racing checks: whatever the interleaving, the result is
/// one of the serial orders — never more admitted than the old quota had
/// (2), never the new quota applied to an arrival time in the old units.
#[test]
fn set_quota_racing_checks_is_linearizable() {
    loom::model(|| {
        let old = Quota::per_second(10).unwrap().with_burst(2).unwrap();
        let new = Quota::per_second(1).unwrap().with_burst(1).unwrap();
        let g = Arc::new(Gcra::with_clock(old, ManualClock::new()));
        let t = Timestamp::from_nanos(0);
        let checker = {
            let g = g.clone();
            thread::spawn(move || (0..2).filter(|_| g.check_at(1, t).unwrap().allowed).count())
        };
        g.set_quota_at(new, t);
        let admitted = checker.join().unwrap();
        // Serial orders: both checks first (2), the change first (1 of the
        // one unit the new burst keeps), or one check, the change, one check
        // (2: one unit left, capped at the new burst of 1).
        assert!((1..=2).contains(&admitted), "admitted {admitted}");
        // In every order the limiter ends empty under the new quota, and the
        // wait is exactly one new interval.
        let d = g.peek_at(1, t).unwrap();
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after, Some(std::time::Duration::from_secs(1)));
    });
}
