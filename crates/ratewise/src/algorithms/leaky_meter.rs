//! The leaky bucket as a meter.
//!
//! A bucket of capacity `burst` whose level drains continuously at the
//! quota's rate. Each admitted request pours its weight in; a request of
//! weight `n` is admitted iff `level + n ≤ capacity`, otherwise it is denied
//! and the level is left untouched. Requests are never delayed — that is the
//! [queue variant](crate::LeakyQueue)'s job.
//!
//! The meter is the [token bucket](crate::TokenBucket) seen upside down
//! (`level = capacity − tokens`), and is built as exactly that: it keeps the
//! token bucket's state and runs its arithmetic, reading the missing tokens
//! as the level. So it admits the same sequences as a token bucket that
//! starts full, and follows the same reservation, cancellation and
//! re-configuration rules. It exists as its own type because it **starts
//! empty** by default, and because "level" is the vocabulary of the
//! leaky-bucket literature and of its `reset_after` (time to drain).
//!
//! # Invariants
//!
//! * The level is kept in nanoseconds of drain time (one unit = one emission
//!   interval; the bucket's missing credit), so the arithmetic is exact
//!   integers: no float drift over any run length.
//! * Without reservations `0 ≤ level ≤ burst·interval`. A reservation may
//!   pour past the brim (a debt later requests queue behind, as in Go's
//!   `x/time/rate`); the level then drains back below the brim before anyone
//!   else is admitted.
//! * A `now` earlier than the latest time seen drains nothing.
//!
//! **Re-configuring** with [`RateLimiter::set_quota_at`](crate::RateLimiter::set_quota_at) keeps the number of
//! *free* units (capacity − level, re-scaled to the new interval and rounded
//! towards less room), capped at the new capacity, exactly as the token
//! bucket keeps its tokens; a debt from reservations stays a debt.

use std::fmt::DebugStruct;
use std::sync::Mutex;

use crate::algorithms::mutex_limiter::DebugFields;
use crate::algorithms::token_bucket::Bucket;
use crate::time::MonotonicClock;

/// A leaky bucket used as a meter. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{LeakyMeter, ManualClock, Quota, RateLimiter};
///
/// let clock = ManualClock::new();
/// let meter = LeakyMeter::with_clock(Quota::per_second(10)?.with_burst(20)?, clock.clone());
/// assert!(meter.check(15)?.is_allowed()); // level 15 of 20
/// assert!(!meter.check(10)?.is_allowed()); // would overflow
/// clock.advance(Duration::from_millis(500)); // drained to 10
/// assert!(meter.check(10)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeakyMeter<C = MonotonicClock> {
    state: Mutex<Bucket<Level>>,
    clock: C,
}

/// The meter's view of a [`Bucket`]: its level.
pub(crate) enum Level {}

crate::algorithms::mutex_limiter::impl_rate_limiter!(LeakyMeter, "An empty meter");

impl DebugFields for Bucket<Level> {
    fn fields(&self, d: &mut DebugStruct<'_, '_>) {
        d.field("level_nanos", &self.level());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ReserveError;
    use crate::limiter::RateLimiter;
    use crate::quota::Quota;
    use crate::test_support::{
        admitted, assert_peeks_allowed, assert_retry_exact, assert_weights, ms, quota,
    };
    use crate::time::{ManualClock, Timestamp};

    fn meter(rate: u64, burst: u64) -> LeakyMeter<ManualClock> {
        LeakyMeter::with_clock(quota(rate, burst), ManualClock::new())
    }

    /// 003, "Leaky Bucket — The Mathematics", meter worked example.
    #[test]
    fn worked_example_r10_c20() {
        let m = meter(10, 20);
        assert_eq!(admitted(&m, 10, 1, ms(0)), 10);
        assert_eq!(m.peek_at(1, ms(0)).unwrap().remaining, 10);
        // Drained by 5 to 5; ten more make 15.
        assert_eq!(admitted(&m, 10, 1, ms(500)), 10);
        // Drained by 5 to 10; of 30, 10 fit.
        assert_eq!(m.peek_at(1, ms(1000)).unwrap().remaining, 10);
        assert_eq!(admitted(&m, 30, 1, ms(1000)), 10);
        // 10 + 10 + 10 = 30 = r·1 + c.
        let full = m.peek_at(1, ms(1000)).unwrap();
        assert_eq!(full.reset_after, Duration::from_secs(2));
        assert_eq!(full.retry_after, Some(Duration::from_millis(100)));
    }

    #[test]
    fn starts_empty() {
        let m = meter(10, 5);
        let d = m.peek_at(1, ms(0)).unwrap();
        assert_eq!((d.allowed, d.remaining, d.limit), (true, 5, 5));
        assert_eq!(d.reset_after, Duration::ZERO);
    }

    #[test]
    fn weights_and_errors() {
        let m = meter(10, 5);
        let denied = assert_weights(&m, ms(0));
        assert_eq!(denied.retry_after, Some(Duration::from_millis(100)));
        // The denial changed nothing.
        assert_eq!(denied.remaining, 2);
    }

    #[test]
    fn retry_after_is_exact() {
        let m = meter(10, 20);
        assert_eq!(admitted(&m, 20, 1, ms(0)), 20);
        let t = assert_retry_exact(&m, 1, ms(0));
        assert_eq!(t, ms(100));
        let t = assert_retry_exact(&m, 7, ms(130));
        assert_eq!(t, ms(800));
        let q = Quota::per_second(3).unwrap();
        let odd = LeakyMeter::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&odd, 5, 1, ms(0)), 3);
        assert_retry_exact(&odd, 2, Timestamp::from_nanos(12_345));
    }

    #[test]
    fn peek_does_not_consume() {
        let m = meter(10, 3);
        assert_peeks_allowed(&m, 1, 10);
        assert_eq!(admitted(&m, 5, 1, ms(0)), 3);
    }

    #[test]
    fn backwards_time_drains_nothing() {
        let m = meter(10, 10);
        assert_eq!(admitted(&m, 10, 1, ms(5000)), 10);
        assert_eq!(admitted(&m, 10, 1, ms(0)), 0);
        assert_eq!(admitted(&m, 10, 1, ms(5100)), 1);
    }

    #[test]
    fn reservation_and_cancel() {
        let m = meter(10, 10);
        assert_eq!(admitted(&m, 10, 1, ms(0)), 10);
        let r = m.reserve_at(5, ms(0)).unwrap();
        assert_eq!(r.act_at(), ms(500));
        let later = m.reserve_at(2, ms(0)).unwrap();
        assert_eq!(later.act_at(), ms(700));
        // Too long a wait reserves nothing.
        assert!(matches!(
            m.reserve_within_at(1, ms(0), Duration::from_millis(799)),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
        // Two of the five were promised to `later`.
        assert_eq!(m.cancel_at(r, ms(200)), 3);
        assert_eq!(m.cancel_at(later, ms(200)), 2);
        // As in `x/time/rate`, the two units `r` could not return stay used
        // even once `later` is gone: 10 drained by 2, plus 2.
        assert_eq!(m.peek_at(1, ms(200)).unwrap().remaining, 0);
        assert_eq!(m.peek_at(1, ms(400)).unwrap().remaining, 2);
        // Cancelling after the act time gives nothing back.
        let r = m.reserve_at(1, ms(400)).unwrap();
        assert_eq!(m.cancel_at(r, ms(401)), 0);
    }

    #[test]
    fn set_quota_keeps_free_units() {
        let m = meter(10, 10);
        assert_eq!(admitted(&m, 6, 1, ms(0)), 6);
        m.set_quota_at(Quota::per_second(1).unwrap().with_burst(10).unwrap(), ms(0));
        assert_eq!(m.peek_at(1, ms(0)).unwrap().remaining, 4);
        // Draining at the new rate: one unit per second.
        assert_eq!(m.peek_at(1, ms(1000)).unwrap().remaining, 5);
        // A smaller capacity caps the free units...
        m.set_quota_at(
            Quota::per_second(1).unwrap().with_burst(3).unwrap(),
            ms(1000),
        );
        assert_eq!(m.peek_at(1, ms(1000)).unwrap().remaining, 3);
        assert_eq!(admitted(&m, 5, 1, ms(1000)), 3);
        // ...and raising it again hands nothing out by itself.
        m.set_quota_at(
            Quota::per_second(1).unwrap().with_burst(10).unwrap(),
            ms(1000),
        );
        assert_eq!(m.peek_at(1, ms(1000)).unwrap().remaining, 0);
        assert_eq!(
            m.peek_at(1, ms(1000)).unwrap().retry_after,
            Some(Duration::from_secs(1))
        );
    }

    // At most `b + ⌊D/I⌋` units within any span of `D` ns.
    crate::test_support::shared_limiter_tests!(LeakyMeter, span_bound: |i, b, span| b + span / i);
}
