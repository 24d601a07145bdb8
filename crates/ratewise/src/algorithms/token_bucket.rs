//! The token bucket with continuous refill.
//!
//! Capacity `burst`, refilled at the quota's rate, computed on demand (no
//! background ticker). Tokens are kept as nanoseconds of refill time rather
//! than as a float: one token is one emission interval. Integer arithmetic
//! keeps the bucket exact over any run length, and makes it admit precisely
//! the sequences [`Gcra`](crate::Gcra) admits for the same quota — the two are
//! the same algorithm seen from opposite ends (GCRA stores when the bucket
//! will be full; the bucket stores how full it is).
//!
//! Reservations may drive the balance below zero (a debt later requests
//! queue behind), as in Go's `x/time/rate`.

use std::fmt::DebugStruct;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use crate::algorithms::mutex_limiter::{
    BookedReservation, DebugFields, InitialState, MutexState, PlanOutcome, ReconfigureCancel,
};
use crate::decision::Decision;
use crate::limiter::{give_back, Reservation};
use crate::quota::Quota;
use crate::time::{Clock, MonotonicClock, Timestamp};

/// A token bucket. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{ManualClock, Quota, RateLimiter, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(10)?.with_burst(20)?, clock.clone());
/// assert!(bucket.check(10)?.is_allowed()); // 10 left
/// clock.advance(Duration::from_secs(1)); // refilled to 20 (capped)
/// assert_eq!(bucket.peek(1)?.remaining, 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TokenBucket<C = MonotonicClock> {
    state: Mutex<Bucket<Tokens>>,
    clock: C,
}

/// The state of the bucket family: the token bucket, and the
/// [leaky meter](crate::LeakyMeter), which is the same bucket seen upside
/// down (its level is `window − credit`). `V` only chooses what `Debug`
/// shows: [`Tokens`] here, the meter's level there.
pub(crate) struct Bucket<V> {
    quota: Quota,
    /// Latest time seen; refill is computed from here.
    last: u64,
    /// Balance in nanoseconds of refill (one token = one emission interval).
    /// At most `quota.window_nanos()`; negative after reservations.
    credit: i128,
    /// The act time of the latest grant (check or reservation): Go
    /// `x/time/rate`'s `lastEvent`. A cancelled reservation gives back only
    /// the capacity no later grant was promised: its cost minus the time
    /// from its act time to this one.
    last_act: u64,
    view: PhantomData<fn() -> V>,
}

/// The token bucket's view of a [`Bucket`]: its credit.
pub(crate) enum Tokens {}

impl<V> Bucket<V> {
    /// A bucket at `now` holding `tokens` (at most the burst).
    fn with_tokens(quota: Quota, now: u64, tokens: u64) -> Self {
        Bucket {
            quota,
            last: now,
            credit: i128::from(quota.cost_nanos(tokens)),
            last_act: 0,
            view: PhantomData,
        }
    }

    fn tau(&self) -> i128 {
        i128::from(self.quota.window_nanos())
    }

    /// The bucket seen upside down: nanoseconds of refill missing until it
    /// is full (the leaky meter's level; above the window while in debt).
    pub(crate) fn level(&self) -> i128 {
        self.tau() - self.credit
    }

    fn refill(&mut self, now: u64) {
        // A `now` earlier than `last` refills nothing (time never runs back).
        if now > self.last {
            self.credit = (self.credit + i128::from(now - self.last)).min(self.tau());
            self.last = now;
        }
    }
}

/// Where a [`Bucket`] places a request: what it costs and how long until
/// that fits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cost {
    /// How far the caller's `now` is behind the bucket's latest time (zero
    /// unless the caller's clock ran backwards).
    stale: u64,
    /// The request's cost in nanoseconds of credit.
    cost: u64,
    /// Nanoseconds from the bucket's latest time until the cost fits (zero
    /// if it fits now).
    short: u64,
    /// The same measured from the caller's `now` (zero if it fits now): a
    /// denial's `retry_after` and a reservation's wait, so that a caller
    /// whose `now` is stale and who waits it is not refused again.
    wait: u64,
}

impl PlanOutcome for Cost {
    fn passes(&self) -> bool {
        self.wait == 0
    }

    fn reserve_wait(&self) -> u64 {
        self.wait
    }
}

impl<V> InitialState for Bucket<V> {
    /// A full bucket (an empty meter).
    fn fresh(quota: Quota, now: u64) -> Self {
        Bucket::with_tokens(quota, now, quota.burst())
    }
}

impl<V> MutexState for Bucket<V> {
    type Plan = Cost;

    fn quota(&self) -> Quota {
        self.quota
    }

    fn plan(&mut self, n: u64, now: u64) -> Cost {
        // Refilling is not consuming: peek may bring the balance up to date.
        self.refill(now);
        let cost = self.quota.cost_nanos(n);
        let short = clamp_u64(i128::from(cost) - self.credit);
        let stale = self.last.saturating_sub(now);
        Cost {
            stale,
            cost,
            short,
            wait: if short == 0 {
                0
            } else {
                short.saturating_add(stale)
            },
        }
    }

    fn admit(&mut self, _n: u64, plan: &Cost) {
        self.credit -= i128::from(plan.cost);
        self.last_act = self.last_act.max(self.last);
    }

    fn decision(&self, plan: &Cost, allowed: bool) -> Decision {
        Decision {
            allowed,
            limit: self.quota.burst(),
            remaining: self.quota.units_in(clamp_u64(self.credit)),
            reset_after: Duration::from_nanos(
                clamp_u64(self.tau() - self.credit).saturating_add(plan.stale),
            ),
            retry_after: (!allowed).then(|| Duration::from_nanos(plan.wait)),
            delay: Duration::ZERO,
        }
    }

    /// The reservation acts when the cost fits, measured from the bucket's
    /// latest time (the caller's `now`, unless the caller's clock ran
    /// backwards), and becomes the latest grant if it acts last.
    fn book(&mut self, _n: u64, plan: &Cost) -> BookedReservation {
        self.credit -= i128::from(plan.cost);
        let act = self.last.saturating_add(plan.short);
        self.last_act = self.last_act.max(act);
        BookedReservation {
            act,
            mark: act,
            cost: plan.cost,
        }
    }
}

impl<V> ReconfigureCancel for Bucket<V> {
    fn set_quota(&mut self, quota: Quota, now: Timestamp) {
        self.refill(now.as_nanos());
        // Keep the number of tokens, re-scaled to the new interval rounding
        // towards less room (a debt stays a debt), capped at the new burst.
        let old_e = i128::from(self.quota.emission_nanos());
        let new_e = i128::from(quota.emission_nanos());
        self.credit = self
            .credit
            .saturating_mul(new_e)
            .div_euclid(old_e)
            .min(i128::from(quota.window_nanos()));
        self.quota = quota;
    }

    fn cancel(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        if now > reservation.act_at {
            return 0;
        }
        let now = now.as_nanos();
        self.refill(now);
        let Some(restore) = give_back(
            reservation.cost,
            reservation.weight,
            self.quota,
            reservation.act_at.as_nanos(),
            self.last_act,
        ) else {
            return 0;
        };
        let before = self.credit;
        self.credit = (self.credit + i128::from(restore)).min(self.tau());
        u64::try_from((self.credit - before) / i128::from(self.quota.emission_nanos())).unwrap_or(0)
    }
}

fn clamp_u64(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

impl<C: Clock> TokenBucket<C> {
    /// An empty bucket on `clock`: the first token arrives one interval after
    /// the clock's current time.
    pub fn empty_with_clock(quota: Quota, clock: C) -> Self {
        let now = clock.now().as_nanos();
        TokenBucket {
            state: Mutex::new(Bucket::with_tokens(quota, now, 0)),
            clock,
        }
    }
}

crate::algorithms::mutex_limiter::impl_rate_limiter!(TokenBucket, "A full bucket");

impl DebugFields for Bucket<Tokens> {
    fn fields(&self, d: &mut DebugStruct<'_, '_>) {
        d.field("credit_nanos", &self.credit);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limiter::RateLimiter;
    use crate::test_support::{admitted, ms};
    use crate::time::ManualClock;

    /// 003, "Token Bucket — The Mathematics", worked example: r = 10/s, b = 20.
    #[test]
    fn worked_example_r10_b20() {
        let q = Quota::per_second(10).unwrap().with_burst(20).unwrap();
        let b = TokenBucket::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&b, 10, 1, ms(0)), 10);
        assert_eq!(b.peek_at(1, ms(0)).unwrap().remaining, 10);
        // At t = 1 s the bucket is full again (10 + 10, capped at 20); of 30
        // arrivals, 20 pass.
        assert_eq!(b.peek_at(1, ms(1000)).unwrap().remaining, 20);
        assert_eq!(admitted(&b, 30, 1, ms(1000)), 20);
        // 10 are still waiting; 5 tokens by t = 1.5 s, 5 more by t = 2 s.
        assert_eq!(admitted(&b, 10, 1, ms(1500)), 5);
        assert_eq!(admitted(&b, 5, 1, ms(2000)), 5);
        // 10 + 20 + 5 + 5 = 40 = r·2 + b: the bound is tight.
    }

    #[test]
    fn starts_empty_when_asked() {
        let q = Quota::per_second(10).unwrap();
        let b = TokenBucket::empty_with_clock(q, ManualClock::new());
        assert!(!b.check_at(1, ms(0)).unwrap().allowed);
        assert_eq!(
            b.check_at(1, ms(0)).unwrap().retry_after,
            Some(Duration::from_millis(100))
        );
        assert!(b.check_at(1, ms(100)).unwrap().allowed);
    }

    #[test]
    fn backwards_time_refills_nothing() {
        let q = Quota::per_second(10).unwrap();
        let b = TokenBucket::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&b, 10, 1, ms(5000)), 10);
        assert_eq!(admitted(&b, 10, 1, ms(0)), 0);
        assert_eq!(admitted(&b, 10, 1, ms(5100)), 1);
    }

    #[test]
    fn reservation_debt_and_cancel() {
        let q = Quota::per_second(10).unwrap();
        let b = TokenBucket::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&b, 10, 1, ms(0)), 10);
        let r = b.reserve_at(5, ms(0)).unwrap();
        assert_eq!(r.act_at(), ms(500));
        assert_eq!(b.cancel_at(r, ms(200)), 5);
        assert_eq!(b.peek_at(1, ms(200)).unwrap().remaining, 2);
    }

    #[test]
    fn set_quota_keeps_tokens() {
        let q = Quota::per_second(10).unwrap();
        let b = TokenBucket::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&b, 6, 1, ms(0)), 6);
        b.set_quota_at(Quota::per_second(1).unwrap().with_burst(10).unwrap(), ms(0));
        assert_eq!(b.peek_at(1, ms(0)).unwrap().remaining, 4);
        b.set_quota_at(Quota::per_second(1).unwrap().with_burst(2).unwrap(), ms(0));
        assert_eq!(b.peek_at(1, ms(0)).unwrap().remaining, 2);
    }

    // At most `b + ⌊D/I⌋` units within any span of `D` ns.
    crate::test_support::shared_limiter_tests!(TokenBucket, span_bound: |i, b, span| b + span / i);
}
