//! Helpers shared by the algorithms' unit tests.

use std::time::Duration;

use crate::limiter::RateLimiter;
use crate::limiter::Reservation;
use crate::quota::Quota;
use crate::time::Timestamp;

/// A timestamp `v` milliseconds after the origin.
pub(crate) fn ms(v: u64) -> Timestamp {
    Timestamp::from_nanos(v * 1_000_000)
}

/// `rate` per second with a burst of `burst`.
pub(crate) fn quota(rate: u64, burst: u64) -> Quota {
    Quota::per_second(rate).unwrap().with_burst(burst).unwrap()
}

/// Checks `n` at `at` `count` times and returns how many were admitted
/// (`n` must be a valid weight).
pub(crate) fn admitted<L: RateLimiter>(l: &L, count: u64, n: u64, at: Timestamp) -> u64 {
    (0..count)
        .filter(|_| l.check_at(n, at).unwrap().allowed)
        .count() as u64
}

/// For a limiter with a burst of 5 and nothing admitted yet: weight 0 and a
/// weight above the burst are errors, 3 units pass at the origin, 3 more are
/// then denied at `at` and the 2 left still pass there. Returns the denial.
pub(crate) fn assert_weights<L: RateLimiter>(l: &L, at: Timestamp) -> crate::Decision {
    use crate::error::CheckError;
    assert_eq!(l.check_at(0, ms(0)), Err(CheckError::ZeroWeight));
    assert_eq!(
        l.check_at(6, ms(0)),
        Err(CheckError::ExceedsBurst {
            requested: 6,
            burst: 5
        })
    );
    assert!(l.check_at(3, ms(0)).unwrap().allowed);
    let denied = l.check_at(3, at).unwrap();
    assert!(!denied.allowed);
    assert!(l.check_at(2, at).unwrap().allowed);
    denied
}

/// Asserts that `times` peeks of weight `n` at the origin are all allowed
/// (peeking consumes nothing).
pub(crate) fn assert_peeks_allowed<L: RateLimiter>(l: &L, n: u64, times: u64) {
    for _ in 0..times {
        assert!(l.peek_at(n, ms(0)).unwrap().allowed);
    }
}

/// Asserts that a request of weight `n` is denied at `now` and that its
/// `retry_after` is exact: still denied one nanosecond before
/// `now + retry_after`, admitted at it. Consumes the request at that time and
/// returns the time it passed.
pub(crate) fn assert_retry_exact<L: RateLimiter>(l: &L, n: u64, now: Timestamp) -> Timestamp {
    let d = l.peek_at(n, now).unwrap();
    assert!(!d.allowed, "expected a denial at {now}");
    let again = l.check_at(n, now).unwrap();
    assert_eq!(again, d, "check and peek disagree at {now}");
    let retry = d.retry_after.expect("a denial carries retry_after");
    assert!(retry > Duration::ZERO, "a denial must wait");
    let at = now + retry;
    let before = Timestamp::from_nanos(at.as_nanos() - 1);
    let early = l.check_at(n, before).unwrap();
    assert!(
        !early.allowed,
        "admitted 1 ns before retry_after ({before})"
    );
    assert_eq!(
        early.retry_after,
        Some(Duration::from_nanos(1)),
        "retry_after at {before} should be 1 ns"
    );
    let ok = l.check_at(n, at).unwrap();
    assert!(ok.allowed, "denied at now + retry_after ({at})");
    at
}

/// A random time step for a quota of `interval` ns per unit and burst
/// `burst`, scaled so that every regime (idle, saturated, window boundaries)
/// is reached: often none, often up to one interval, sometimes up to three
/// windows.
fn step(interval: u64, burst: u64) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    let window = interval * burst;
    prop_oneof![
        3 => Just(0u64),
        4 => 0..=interval,
        2 => 0..=3 * window,
    ]
}

/// A random workload for property tests: a quota's raw parts and a list of
/// `(time step, weight)` checks, scaled to the quota so that every regime
/// (idle, saturated, window boundaries) is reached.
pub(crate) fn workload() -> impl proptest::strategy::Strategy<Value = (u64, u64, Vec<(u64, u64)>)> {
    use proptest::prelude::*;
    (1u64..=40, 1u64..=8).prop_flat_map(|(interval, burst)| {
        let ops = proptest::collection::vec((step(interval, burst), 1..=burst), 1..80);
        (Just(interval), Just(burst), ops)
    })
}

/// Runs `ops` (time steps and weights) through a limiter from `make` and
/// checks, for every request:
///
/// * a denial changes nothing (an immediate peek answers the same);
/// * a denial's `retry_after` is exact: on a replica that saw the same
///   history, the request is still denied 1 ns before `now + retry_after`
///   and admitted at it;
/// * for every two admissions, the weight admitted between them (inclusive)
///   is at most `bound(span)`.
///
/// Returns the admissions as `(time, weight, decision)`.
pub(crate) fn check_workload<L: RateLimiter>(
    make: impl Fn() -> L,
    ops: &[(u64, u64)],
    bound: impl Fn(u64) -> u64,
) -> Vec<(u64, u64, crate::Decision)> {
    let l = make();
    let mut t = 0u64;
    let mut admitted = Vec::new();
    for (k, &(dt, n)) in ops.iter().enumerate() {
        t += dt;
        let now = Timestamp::from_nanos(t);
        let d = l.check_at(n, now).unwrap();
        if d.allowed {
            admitted.push((t, n, d));
            continue;
        }
        assert_eq!(l.peek_at(n, now).unwrap(), d, "a denial changed the state");
        let retry = d.retry_after.expect("a denial carries retry_after");
        assert!(retry > Duration::ZERO);
        let replica = make();
        let mut u = 0u64;
        for &(dt, n) in &ops[..k] {
            u += dt;
            let _ = replica.check_at(n, Timestamp::from_nanos(u));
        }
        let at = now + retry;
        let early = replica
            .check_at(n, Timestamp::from_nanos(at.as_nanos() - 1))
            .unwrap();
        assert!(!early.allowed, "admitted 1 ns before retry_after");
        assert!(
            replica.check_at(n, at).unwrap().allowed,
            "denied at retry_after"
        );
    }
    let acts: Vec<(u64, u64)> = admitted.iter().map(|&(t, n, _)| (t, n)).collect();
    assert_span_bound(&acts, bound);
    admitted
}

/// Drives a limiter near the end of time with the given weight: nothing
/// may panic or overflow, and answers stay well-formed.
pub(crate) fn exercise_extremes<L: RateLimiter>(l: &L, n: u64) {
    let times = [
        0,
        u64::MAX / 4,
        i64::MAX as u64 - 3,
        i64::MAX as u64 - 1,
        i64::MAX as u64,
        5,        // backwards
        u64::MAX, // pinned at Timestamp::MAX
    ];
    for t in times {
        let now = Timestamp::from_nanos(t);
        for _ in 0..3 {
            let d = l.check_at(n, now).unwrap();
            assert!(d.remaining <= d.limit);
            let _ = l.peek_at(n, now).unwrap();
            if let Ok(r) = l.reserve_within_at(n, now, Duration::MAX) {
                // Misuse must not panic either: a forged twin cancelled after
                // the real one.
                let twin =
                    Reservation::new(r.weight(), r.made_at(), r.act_at(), r.mark(), r.cost());
                let _ = l.cancel_at(r, now);
                let _ = l.cancel_at(twin, now);
            }
            let r = l.reserve_within_at(n, now, Duration::ZERO);
            if let Ok(r) = r {
                let _ = l.cancel_at(r, Timestamp::MAX);
            }
        }
        l.set_quota_at(l.quota(), now);
    }
}

/// A random workload mixing checks (kind 0), reservations with an unbounded
/// (kind 1) or short (kind 2) wait, and cancellations (kind 3, of an earlier
/// reservation chosen by the weight field).
pub(crate) fn mixed_workload(
) -> impl proptest::strategy::Strategy<Value = (u64, u64, Vec<(u64, u8, u64)>)> {
    use proptest::prelude::*;
    (1u64..=40, 1u64..=8).prop_flat_map(|(interval, burst)| {
        let ops = proptest::collection::vec((step(interval, burst), 0u8..4, 1..=burst), 1..80);
        (Just(interval), Just(burst), ops)
    })
}

/// What a [`run_mixed`] run leaves: `(act time, weight)` of everything that
/// will act, and `(weight, units given back)` of every reservation cancelled
/// before its act time.
pub(crate) type Mixed = (Vec<(u64, u64)>, Vec<(u64, u64)>);

/// Runs a [`mixed_workload`] and returns what will act — every admitted
/// check at its time plus its `delay`, every reservation not cancelled at its
/// act time, in the order they were granted — and what the timely
/// cancellations gave back. Checks that a reservation never acts before it
/// was made, that cancelling never returns more than the reservation's
/// weight, and that nothing can be cancelled after its act time.
pub(crate) fn run_mixed<L: RateLimiter>(l: &L, ops: &[(u64, u8, u64)]) -> Mixed {
    let mut t = 0u64;
    let mut acts: Vec<Option<(u64, u64)>> = Vec::new();
    let mut reservations: Vec<(usize, crate::Reservation)> = Vec::new();
    let mut returned = Vec::new();
    for &(dt, kind, n) in ops {
        t += dt;
        let now = Timestamp::from_nanos(t);
        match kind {
            0 => {
                let d = l.check_at(n, now).unwrap();
                if d.allowed {
                    acts.push(Some(((now + d.delay).as_nanos(), n)));
                }
            }
            1 | 2 => {
                let max_wait = if kind == 1 {
                    Duration::MAX
                } else {
                    Duration::from_nanos(n * 3)
                };
                if let Ok(r) = l.reserve_within_at(n, now, max_wait) {
                    assert!(r.act_at() >= now);
                    let act = r.act_at().as_nanos();
                    reservations.push((acts.len(), r));
                    acts.push(Some((act, n)));
                }
            }
            _ => {
                if reservations.is_empty() {
                    continue;
                }
                let k = (n as usize) % reservations.len();
                let (slot, r) = reservations.swap_remove(k);
                let (weight, act_at) = (r.weight(), r.act_at());
                let back = l.cancel_at(r, now);
                assert!(back <= weight);
                if act_at >= now {
                    // Not yet due: the caller will not act.
                    acts[slot] = None;
                    returned.push((weight, back));
                } else {
                    assert_eq!(back, 0, "cancelled after its act time");
                }
            }
        }
    }
    (acts.into_iter().flatten().collect(), returned)
}

/// Asserts that the weight of `acts` within any span of `D` ns is at most
/// `bound(D)`.
pub(crate) fn assert_span_bound(acts: &[(u64, u64)], bound: impl Fn(u64) -> u64) {
    let mut acts = acts.to_vec();
    acts.sort_unstable();
    for i in 0..acts.len() {
        let mut sum = 0;
        for &(tj, nj) in &acts[i..] {
            sum += nj;
            let span = tj - acts[i].0;
            assert!(
                sum <= bound(span),
                "{sum} act within {span} ns, bound {}",
                bound(span)
            );
        }
    }
}

/// Writes the unit tests every mutex-protected limiter `$ty` shares, into
/// its `tests` module (which must have `Quota` in scope):
///
/// * `extreme_times_do_not_panic`: [`exercise_extremes`] for a range of
///   quotas, down to one nanosecond and up to `u64::MAX` per unit, with
///   weights 1 and the burst;
/// * `is_send_sync`: the limiter can be shared between threads;
/// * with `span_bound: |i, b, span| …` (the most weight the algorithm may
///   admit within `span` ns for interval `i` and burst `b`), also
///   `prop_workload` — [`check_workload`]: exact `retry_after`, denials
///   change nothing, admissions within the bound — and
///   `prop_reservations_keep_the_bound` — with reservations and
///   cancellations mixed in, what acts (checks admitted, reservations at
///   their act time, minus those cancelled in time) still respects the
///   bound ([`run_mixed`], [`assert_span_bound`]).
macro_rules! shared_limiter_tests {
    ($ty:ident) => {
        #[test]
        fn extreme_times_do_not_panic() {
            const W: u64 = $crate::quota::MAX_WINDOW_NANOS;
            for (i, b) in [(1, 1), (1, 3), (7, 2), (W / 4, 4), (W, 1), (1, W), (3, W / 3)] {
                let q = Quota::from_parts(i, b).unwrap();
                for n in [1, b] {
                    let l = $ty::with_clock(q, $crate::time::ManualClock::new());
                    $crate::test_support::exercise_extremes(&l, n);
                }
            }
        }

        #[test]
        fn is_send_sync() {
            fn assert_send_sync<T: Send + Sync>() {}
            assert_send_sync::<$ty>();
            assert_send_sync::<$ty<$crate::time::ManualClock>>();
        }
    };
    ($ty:ident, span_bound: |$i:ident, $b:ident, $span:ident| $bound:expr $(,)?) => {
        $crate::test_support::shared_limiter_tests!($ty);

        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
            #[test]
            fn prop_workload((i, b, ops) in $crate::test_support::workload()) {
                let bound = |$i: u64, $b: u64, $span: u64| -> u64 { $bound };
                let q = Quota::from_parts(i, b).unwrap();
                $crate::test_support::check_workload(
                    || $ty::with_clock(q, $crate::time::ManualClock::new()),
                    &ops,
                    |span| bound(i, b, span),
                );
            }

            #[test]
            fn prop_reservations_keep_the_bound((i, b, ops) in $crate::test_support::mixed_workload()) {
                let bound = |$i: u64, $b: u64, $span: u64| -> u64 { $bound };
                let l = $ty::with_clock(Quota::from_parts(i, b).unwrap(), $crate::time::ManualClock::new());
                let (acts, _) = $crate::test_support::run_mixed(&l, &ops);
                $crate::test_support::assert_span_bound(&acts, |span| bound(i, b, span));
            }
        }
    };
}
pub(crate) use shared_limiter_tests;
