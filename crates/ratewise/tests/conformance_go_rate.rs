//! Go's `golang.org/x/time/rate` test suite (`rate_test.go`), ported onto
//! `TokenBucket` and `Gcra`. Each test names the Go test it comes from. Go's
//! limiter is a token bucket, so the cases run on both of ratewise's
//! bucket-equivalent algorithms (ARCHITECTURE.md invariant 4: GCRA ≡ token
//! bucket for time that moves forward).
//!
//! Where ratewise answers differently on purpose, the test asserts ratewise's
//! documented behaviour and cites the line that documents it:
//! * a weight of 0 or above the burst is an error, not `true`/`false`
//!   (`RateLimiter::check_at` docs, invariant 7);
//! * a zero or sub-73-year rate is refused at construction (`Quota` docs,
//!   "The domain");
//! * a `now` earlier than one already seen never admits more than the latest
//!   time seen would (invariant 2) — where Go's own comments say a case
//!   "should violate Limit, Burst", ratewise does not;
//! * cancelling never moves the latest act time back (invariant 9).
//!
//! Go's `d` is 100 ms and its `tN` is `t0 + N·d`.

use std::time::Duration;

use ratewise::keyed::NoClock;
use ratewise::{
    CheckError, Gcra, Quota, QuotaError, RateLimiter, Reservation, ReserveError, Timestamp,
    TokenBucket,
};

/// `tN`: N multiples of Go's `d` = 100 ms after an arbitrary start.
fn t(n: u64) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000_000 + n * 100_000_000)
}

/// Go's `NewLimiter(rate, burst)`.
fn limit(rate: f64, burst: u64) -> Quota {
    Quota::from_rate(rate).unwrap().with_burst(burst).unwrap()
}

/// Runs `case` on a token bucket and on GCRA with the same quota.
fn both(q: Quota, case: impl Fn(&(dyn RateLimiter + Sync), &str)) {
    case(&TokenBucket::with_clock(q, NoClock), "TokenBucket");
    case(&Gcra::with_clock(q, NoClock), "Gcra");
}

/// Go's `run`: `AllowN(t, n)` must answer `ok`.
fn allow(l: &(dyn RateLimiter + Sync), who: &str, steps: &[(Timestamp, u64, bool)]) {
    for (i, &(at, n, ok)) in steps.iter().enumerate() {
        let d = l.check_at(n, at).unwrap();
        assert_eq!(d.allowed, ok, "{who}: step {i}: AllowN({at}, {n})");
    }
}

/// Go's `runReserve` with `InfDuration`: the reservation acts at `act`.
fn reserve(
    l: &(dyn RateLimiter + Sync),
    who: &str,
    at: Timestamp,
    n: u64,
    act: Timestamp,
) -> Reservation {
    let r = l
        .reserve_within_at(n, at, Duration::MAX)
        .unwrap_or_else(|e| panic!("{who}: reserve({at}, {n}): {e}"));
    assert_eq!(r.act_at(), act, "{who}: reserve({at}, {n})");
    r
}

/// [`reserve`], for a reservation the caller will simply use.
fn book(l: &(dyn RateLimiter + Sync), who: &str, at: Timestamp, n: u64, act: Timestamp) {
    let _used = reserve(l, who, at, n, act);
}

#[test]
fn test_limiter_burst1() {
    both(limit(10.0, 1), |l, who| {
        allow(
            l,
            who,
            &[
                (t(0), 1, true),
                (t(0), 1, false),
                (t(0), 1, false),
                (t(1), 1, true),
                (t(1), 1, false),
                (t(1), 1, false),
            ],
        );
        // Go: `{t2, 2, false} // burst size is 1, so n=2 always fails`.
        // ratewise: an error, since it can never succeed (invariant 7).
        assert_eq!(
            l.check_at(2, t(2)),
            Err(CheckError::ExceedsBurst {
                requested: 2,
                burst: 1
            })
        );
        allow(l, who, &[(t(2), 1, true), (t(2), 1, false)]);
    });
}

#[test]
fn test_limiter_burst3() {
    both(limit(10.0, 3), |l, who| {
        allow(
            l,
            who,
            &[
                (t(0), 2, true),
                (t(0), 2, false),
                (t(0), 1, true),
                (t(0), 1, false),
            ],
        );
        // Go `{t1, 4, false}`: more than the burst is an error here.
        assert!(matches!(
            l.check_at(4, t(1)),
            Err(CheckError::ExceedsBurst { .. })
        ));
        allow(
            l,
            who,
            &[
                (t(2), 1, true),
                (t(3), 1, true),
                (t(4), 1, true),
                (t(4), 1, true),
                (t(4), 1, false),
                (t(4), 1, false),
                (t(9), 3, true),
            ],
        );
        // Go `{t9, 0, true}`: a zero weight is an error in ratewise
        // (`RateLimiter::check_at`: "CheckError::ZeroWeight for n == 0").
        assert_eq!(l.check_at(0, t(9)), Err(CheckError::ZeroWeight));
    });
}

#[test]
fn test_limiter_jump_backwards() {
    // Go moves its clock back to t0 on the jump, so at t1 it refills a
    // token again: five admitted within t0..t2. ratewise's token bucket
    // treats the earlier `now` as no time passing but never moves its own
    // time back (invariant 2: "time never runs backwards inside a
    // limiter"), so the token that came back at t1 in Go is not there; the
    // next one arrives at t2.
    let tb = TokenBucket::with_clock(limit(10.0, 3), NoClock);
    allow(
        &tb,
        "TokenBucket",
        &[
            (t(1), 1, true), // start at t1
            (t(0), 1, true), // jump back to t0, two tokens remain
            (t(0), 1, true),
            (t(0), 1, false),
            (t(0), 1, false),
            (t(1), 1, false), // Go: true
            (t(1), 1, false),
            (t(1), 1, false),
            (t(2), 1, true), // got another token
            (t(2), 1, false),
            (t(2), 1, false),
        ],
    );
    // GCRA measures an earlier `now` as it is, which is stricter still
    // (invariant 2: "treated as the latest time seen (or stricter)"): after
    // t1 only one unit fits at t0, where Go admits two; from t1 on it
    // answers as Go does.
    let g = Gcra::with_clock(limit(10.0, 3), NoClock);
    allow(
        &g,
        "Gcra",
        &[
            (t(1), 1, true),
            (t(0), 1, true),
            (t(0), 1, false),
            (t(0), 1, false),
            (t(0), 1, false),
            (t(1), 1, true),
            (t(1), 1, false),
            (t(1), 1, false),
            (t(2), 1, true),
            (t(2), 1, false),
            (t(2), 1, false),
        ],
    );
}

#[test]
fn test_limiter_no_truncation_errors() {
    both(Quota::from_rate(0.7692307692307693).unwrap(), |l, who| {
        assert!(l.check_at(1, t(0)).unwrap().allowed, "{who}");
    });
}

#[test]
fn test_simultaneous_requests() {
    // 15 threads at once on a 1/s, burst 5 limiter (a frozen clock): exactly
    // the burst passes.
    both(limit(1.0, 5), |l, who| {
        let admitted = std::thread::scope(|s| {
            let hs: Vec<_> = (0..15)
                .map(|_| s.spawn(move || l.check_at(1, t(0)).unwrap().allowed))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&ok| ok)
                .count()
        });
        assert_eq!(admitted, 5, "{who}");
    });
}

#[test]
fn test_long_running_qps() {
    // Go offers ~500 requests per second for 5 s to a 100/s, burst 100
    // limiter and expects between 0.999·ideal and ideal + 1 to pass, where
    // ideal = burst + limit·elapsed. Here on a manual clock, every 2 ms.
    both(limit(100.0, 100), |l, who| {
        let start = t(0);
        let mut ok = 0u64;
        let mut at = start;
        let end = start + Duration::from_secs(5);
        while at < end {
            if l.check_at(1, at).unwrap().allowed {
                ok += 1;
            }
            at = at + Duration::from_millis(2);
        }
        let elapsed = (at - start).as_secs_f64();
        let ideal = 100.0 + 100.0 * elapsed;
        assert!(ok as f64 <= ideal + 1.0, "{who}: {ok} > {ideal} + 1");
        assert!(
            ok as f64 >= 0.999 * ideal - 1.0,
            "{who}: {ok} < 0.999·{ideal}"
        );
    });
}

#[test]
fn test_simple_reserve() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        book(l, who, t(0), 2, t(2));
        book(l, who, t(3), 2, t(4));
    });
}

#[test]
fn test_mix() {
    both(limit(10.0, 2), |l, who| {
        // Go: "should return false because n > Burst"; ratewise: an error.
        assert!(matches!(
            l.reserve_within_at(3, t(0), Duration::MAX),
            Err(ReserveError::Invalid(CheckError::ExceedsBurst { .. }))
        ));
        book(l, who, t(0), 2, t(0));
        allow(l, who, &[(t(1), 2, false)]); // not enough tokens
        book(l, who, t(1), 2, t(2));
        allow(l, who, &[(t(1), 1, false)]); // negative tokens
        allow(l, who, &[(t(3), 1, true)]);
    });
}

#[test]
fn test_cancel_invalid() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        // An invalid reservation is an error: there is nothing to cancel
        // (Go cancels an invalid reservation "with no effect").
        assert!(l.reserve_within_at(3, t(0), Duration::MAX).is_err());
        book(l, who, t(0), 2, t(2)); // did not get extra tokens
    });
}

#[test]
fn test_cancel_last() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        let r = reserve(l, who, t(0), 2, t(2));
        assert_eq!(l.cancel_at(r, t(1)), 2, "{who}: got 2 tokens back");
        book(l, who, t(1), 2, t(2));
    });
}

#[test]
fn test_cancel_too_late() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        let r = reserve(l, who, t(0), 2, t(2));
        assert_eq!(l.cancel_at(r, t(3)), 0, "{who}: too late to cancel");
        book(l, who, t(3), 2, t(4));
    });
}

#[test]
fn test_cancel_0_tokens() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        let r = reserve(l, who, t(0), 1, t(1));
        book(l, who, t(0), 1, t(2));
        assert_eq!(l.cancel_at(r, t(0)), 0, "{who}: got 0 tokens back");
        book(l, who, t(0), 1, t(3));
    });
}

#[test]
fn test_cancel_1_token() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        let r = reserve(l, who, t(0), 2, t(2));
        book(l, who, t(0), 1, t(3));
        assert_eq!(l.cancel_at(r, t(2)), 1, "{who}: got 1 token back");
        book(l, who, t(2), 2, t(4));
    });
}

#[test]
fn test_cancel_multi() {
    both(limit(10.0, 4), |l, who| {
        book(l, who, t(0), 4, t(0));
        let ra = reserve(l, who, t(0), 3, t(3));
        book(l, who, t(0), 1, t(4));
        let rc = reserve(l, who, t(0), 1, t(5));
        assert_eq!(l.cancel_at(rc, t(1)), 1, "{who}: C gives 1 back");
        // Go moves its latest act time back to t4 when C, the latest grant,
        // is cancelled, so A then gives 2 back "as if C was never
        // reserved". ratewise never moves it back (invariant 9: once two
        // grants can share an act time, moving it back over-admits), so A's
        // stretch t3..t5 stays promised and A gives back 1.
        assert_eq!(l.cancel_at(ra, t(1)), 1, "{who}: A gives 1 back");
        // Go acts at t5; one unit fewer came back, so one interval later.
        book(l, who, t(1), 3, t(6));
    });
}

#[test]
fn test_reserve_jump_back() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(1), 2, t(1)); // start at t1
                                     // Go acts at t1 here, with the comment "should violate Limit,Burst":
                                     // two at t1 and one more at t1. ratewise never lets an earlier
                                     // `now` admit more than the latest time would (invariant 2): the
                                     // unit comes back at t2.
        book(l, who, t(0), 1, t(2));
        book(l, who, t(2), 2, t(4));
    });
}

#[test]
fn test_reserve_jump_back_cancel() {
    both(limit(10.0, 2), |l, who| {
        book(l, who, t(1), 2, t(1)); // start at t1
        let r = reserve(l, who, t(1), 2, t(3));
        book(l, who, t(1), 1, t(4));
        assert_eq!(l.cancel_at(r, t(0)), 1, "{who}: cancel at t0, 1 back");
        // Go: t4, "should violate Limit,Burst" (2 units at t4 on top of the
        // one booked there). ratewise: t5 (invariant 2).
        book(l, who, t(1), 2, t(5));
    });
}

#[test]
fn test_reserve_set_limit() {
    both(limit(5.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        book(l, who, t(0), 2, t(4));
        l.set_quota_at(limit(10.0, 2), t(2));
        // Go: t4 ("violates Limit and Burst"); ratewise keeps the debt of
        // one unit across the change (invariant 10) and agrees: t4.
        book(l, who, t(2), 1, t(4));
    });
}

#[test]
fn test_reserve_set_burst() {
    both(limit(5.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        book(l, who, t(0), 2, t(4));
        l.set_quota_at(limit(5.0, 4), t(3));
        // Go acts at t9 ("violates Limit and Burst"): raising the burst
        // handed out two units. ratewise never hands out capacity on a
        // re-configuration (invariant 10): at t3 half a unit is still owed,
        // so four more units are due 4.5 intervals after t3.
        book(l, who, t(0), 4, t(3) + Duration::from_millis(900));
    });
}

#[test]
fn test_reserve_set_limit_cancel() {
    both(limit(5.0, 2), |l, who| {
        book(l, who, t(0), 2, t(0));
        let r = reserve(l, who, t(0), 2, t(4));
        l.set_quota_at(limit(10.0, 2), t(2));
        assert_eq!(l.cancel_at(r, t(2)), 2, "{who}: 2 tokens back");
        book(l, who, t(2), 2, t(3));
    });
}

#[test]
fn test_reserve_max() {
    both(limit(10.0, 2), |l, who| {
        let max = Duration::from_millis(100);
        let r = l.reserve_within_at(2, t(0), max).unwrap();
        assert_eq!(r.act_at(), t(0), "{who}");
        let r = l.reserve_within_at(1, t(0), max).unwrap();
        assert_eq!(r.act_at(), t(1), "{who}: reserve for close future");
        // Time to act too far in the future.
        assert!(matches!(
            l.reserve_within_at(1, t(0), max),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
    });
}

#[test]
fn test_zero_limit() {
    // Go's `NewLimiter(0, 1)` admits its burst once and never refills.
    // ratewise has no zero rate: it is refused at construction
    // (`QuotaError::ZeroCount` / `InvalidRate`, `Quota` docs: "Nonsense is
    // an error"). The nearest quota, the slowest one there is, admits its
    // burst and then nothing for 73 years.
    assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCount));
    assert!(matches!(
        Quota::from_rate(0.0),
        Err(QuotaError::InvalidRate { .. })
    ));
    let slowest = Quota::from_parts(ratewise::quota::MAX_WINDOW_NANOS, 1).unwrap();
    both(slowest, |l, who| {
        allow(
            l,
            who,
            &[(t(0), 1, true), (t(0), 1, false), (t(9), 1, false)],
        );
    });
}

#[test]
fn test_tiny_limit() {
    // Go's `NewLimiter(1e-10, 1)`: one per 317 years. Beyond ratewise's
    // domain (a window of at most 2^61 ns, about 73 years: `Quota` docs,
    // "The domain") it is a typed error, not an approximation.
    let e = Quota::from_rate(1e-10).unwrap_err();
    assert!(matches!(e, QuotaError::RateTooLow { .. }), "{e}");
}

#[test]
fn test_every() {
    // Go's `Every(interval)`: ratewise's `with_interval`.
    for (ms, rate) in [
        (1u64, 1e3),
        (10, 100.0),
        (100, 10.0),
        (1000, 1.0),
        (2000, 0.5),
        (2500, 0.4),
        (4000, 0.25),
        (10_000, 0.1),
    ] {
        let q = Quota::with_interval(Duration::from_millis(ms)).unwrap();
        assert!((q.rate_per_second() / rate - 1.0).abs() < 1e-9, "{ms} ms");
    }
    let q = Quota::with_interval(Duration::from_nanos(1)).unwrap();
    assert!((q.rate_per_second() / 1e9 - 1.0).abs() < 1e-9);
    // Go maps 0 and negative intervals to an infinite rate; ratewise has no
    // infinite rate and says so.
    assert_eq!(
        Quota::with_interval(Duration::ZERO),
        Err(QuotaError::ZeroPeriod)
    );
    // Go's `Every(math.MaxInt64)`: 292 years, beyond the domain.
    assert!(matches!(
        Quota::with_interval(Duration::from_nanos(i64::MAX as u64)),
        Err(QuotaError::RateTooLow { .. })
    ));
}
