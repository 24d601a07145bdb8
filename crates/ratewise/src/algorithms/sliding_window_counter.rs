//! The sliding-window counter: a fixed window's memory with (almost) a
//! sliding window's fairness.
//!
//! Windows of length `W = burst·interval` ([`Quota::window`]) are aligned to
//! the clock's origin, as in [`FixedWindow`](crate::FixedWindow); the limiter
//! also keeps the previous window's count and estimates the trailing window
//! by assuming those units were spread evenly:
//!
//! ```text
//! estimate = prev·(1 − f) + cur,   f = (now − window start) / W
//! ```
//!
//! `n` is admitted iff `estimate + n ≤ burst`, tested in exact `u128`
//! integers, so `retry_after` is exact. The state is `(index, prev, cur)`; a
//! denial changes nothing; a `now` earlier than the latest seen is treated as
//! the latest. A reservation is counted in the window where it first passes
//! (a future window becomes the latest, so earlier checks are denied
//! conservatively) and a cancel returns its weight while that window's count
//! is kept. [`RateLimiter::set_quota_at`](crate::RateLimiter::set_quota_at)
//! keeps the free room, capped at the new burst.

use std::fmt::DebugStruct;
use std::sync::Mutex;

use crate::algorithms::mutex_limiter::{
    DebugFields, EarliestTimeState, InitialState, ReconfigureCancel,
};
use crate::limiter::Reservation;
use crate::quota::Quota;
use crate::time::{MonotonicClock, Timestamp};

/// A sliding-window counter. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{ManualClock, Quota, RateLimiter, SlidingWindowCounter};
///
/// let clock = ManualClock::new();
/// // 10 per sliding window of 1 s.
/// let limiter = SlidingWindowCounter::with_clock(Quota::per_second(10)?, clock.clone());
/// assert!(limiter.check(10)?.is_allowed());
/// // Half-way through the next window, half of the previous one still counts.
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(limiter.peek(1)?.remaining, 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SlidingWindowCounter<C = MonotonicClock> {
    state: Mutex<State>,
    clock: C,
}

#[derive(Debug)]
struct State {
    quota: Quota,
    /// Latest time seen; earlier `now`s are raised to it.
    last: u64,
    /// The latest window with admissions (possibly a future one).
    index: u64,
    /// Units admitted in window `index − 1`.
    prev: u64,
    /// Units admitted in window `index`.
    cur: u64,
}

impl State {
    fn window(&self) -> u64 {
        self.quota.window_nanos()
    }

    fn start(&self, index: u64) -> u64 {
        index.saturating_mul(self.window())
    }

    /// `(prev, cur)` as seen from window `k ≥ index`.
    fn counts(&self, k: u64) -> (u64, u64) {
        if k == self.index {
            (self.prev, self.cur)
        } else if k == self.index.saturating_add(1) {
            (self.cur, 0)
        } else {
            (0, 0)
        }
    }

    /// `estimate·W` at `t` (not before the latest window's start), plus
    /// `n·W`.
    fn weighted(&self, n: u64, t: u64) -> u128 {
        let w = u128::from(self.window());
        let k = t / self.window();
        let elapsed = u128::from(t - self.start(k));
        let (p, c) = self.counts(k);
        u128::from(p) * (w - elapsed) + (u128::from(c) + u128::from(n)) * w
    }
}

impl EarliestTimeState for State {
    fn quota(&self) -> Quota {
        self.quota
    }

    fn settle(&mut self, now: u64) -> (u64, u64) {
        crate::algorithms::mutex_limiter::raise(&mut self.last, now)
    }

    /// The earliest time at or after `now` at which `n` units pass.
    fn earliest(&self, n: u64, now: u64) -> u64 {
        let t0 = now.max(self.start(self.index));
        let k0 = t0 / self.window();
        let w = u128::from(self.window());
        let limit = u128::from(self.quota.burst());
        for k in k0..=k0.saturating_add(2) {
            let (p, c) = self.counts(k);
            let room = limit.saturating_sub(u128::from(c) + u128::from(n));
            if u128::from(c) + u128::from(n) > limit {
                continue;
            }
            // p·(W − e) ≤ room·W  ⟺  e ≥ W − ⌊room·W / p⌋.
            let need = match p {
                0 => 0,
                p => w - (room * w / u128::from(p)).min(w),
            };
            let from = if k == k0 {
                u128::from(t0 - self.start(k0))
            } else {
                0
            };
            let e = need.max(from);
            if e < w {
                return self
                    .start(k)
                    .saturating_add(u64::try_from(e).unwrap_or(u64::MAX));
            }
        }
        // Unreachable: window k0 + 2 is empty and n ≤ burst. Stay total.
        self.start(k0.saturating_add(2))
    }

    fn admit_at(&mut self, n: u64, at: u64) {
        let k = at / self.window();
        if k == self.index.saturating_add(1) {
            self.prev = self.cur;
            self.cur = 0;
        } else if k > self.index {
            self.prev = 0;
            self.cur = 0;
        }
        self.index = self.index.max(k);
        self.cur = self.cur.saturating_add(n);
    }

    /// The estimate's room, and when the estimate reaches zero.
    fn outlook(&self, _caller_now: u64, now: u64) -> (u64, u64) {
        let w = u128::from(self.window());
        let t = now.max(self.start(self.index));
        let k = t / self.window();
        let (p, c) = self.counts(k);
        let remaining = if now < self.start(self.index) {
            0
        } else {
            let free = (u128::from(self.quota.burst()) * w).saturating_sub(self.weighted(0, t));
            u64::try_from(free / w).unwrap_or(u64::MAX)
        };
        // The estimate reaches zero when the last non-empty count has slid
        // out of the trailing window.
        let reset_at = if c > 0 {
            self.start(k.saturating_add(2))
        } else if p > 0 {
            self.start(k.saturating_add(1))
        } else {
            now
        };
        (remaining, reset_at)
    }

    /// The window a reservation was counted in.
    fn mark(&self, _at: u64) -> u64 {
        self.index
    }
}

impl InitialState for State {
    fn fresh(quota: Quota, now: u64) -> Self {
        State {
            quota,
            last: now,
            index: now / quota.window_nanos(),
            prev: 0,
            cur: 0,
        }
    }
}

impl ReconfigureCancel for State {
    fn set_quota(&mut self, quota: Quota, now: Timestamp) {
        self.last = self.last.max(now.as_nanos());
        let t = self.last.max(self.start(self.index));
        let w = u128::from(self.window());
        let used = u64::try_from(self.weighted(0, t).div_ceil(w)).unwrap_or(u64::MAX);
        // Keep the free room, not the count: capping the count at a smaller
        // burst and then raising the burst again would hand out capacity.
        let free = self.quota.burst().saturating_sub(used);
        self.quota = quota;
        self.index = t / quota.window_nanos();
        self.prev = 0;
        self.cur = quota.burst() - free.min(quota.burst());
    }

    fn cancel(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        if crate::algorithms::mutex_limiter::past_act(&mut self.last, now, &reservation) {
            return 0;
        }
        let slot = if reservation.mark == self.index {
            &mut self.cur
        } else if reservation.mark.saturating_add(1) == self.index {
            &mut self.prev
        } else {
            return 0;
        };
        let back = reservation.cost.min(*slot);
        *slot -= back;
        back
    }
}

crate::algorithms::mutex_limiter::impl_rate_limiter!(
    SlidingWindowCounter,
    "A sliding-window counter with nothing counted yet"
);

impl DebugFields for State {
    fn fields(&self, d: &mut DebugStruct<'_, '_>) {
        d.field("index", &self.index)
            .field("prev", &self.prev)
            .field("cur", &self.cur);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ReserveError;
    use crate::limiter::RateLimiter;
    use crate::test_support::{
        admitted, assert_peeks_allowed, assert_retry_exact, assert_weights, ms, quota,
    };
    use crate::time::ManualClock;

    fn swc(rate: u64, burst: u64) -> SlidingWindowCounter<ManualClock> {
        SlidingWindowCounter::with_clock(quota(rate, burst), ManualClock::new())
    }

    #[test]
    fn estimate_weights_the_previous_window() {
        let l = swc(100, 100); // 100 per 1 s
        assert_eq!(admitted(&l, 100, 1, ms(0)), 100);
        // At 1.25 s: 100·0.75 = 75 counted, 25 free.
        assert_eq!(l.peek_at(1, ms(1250)).unwrap().remaining, 25);
        assert_eq!(admitted(&l, 30, 1, ms(1250)), 25);
        // 003's example: at 2.05 s, prev = 25, so 25·0.95 = 23.75 → 76 free.
        assert_eq!(admitted(&l, 100, 1, ms(2050)), 76);
        let d = l.peek_at(1, ms(2050)).unwrap();
        assert_eq!(d.reset_after, Duration::from_millis(1950));
        assert_eq!(d.limit, 100);
    }

    #[test]
    fn no_double_burst_at_the_boundary() {
        let l = swc(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(999)), 10);
        // A fixed window would admit 10 more here.
        assert_eq!(admitted(&l, 10, 1, ms(1000)), 0);
        assert_eq!(admitted(&l, 10, 1, ms(1100)), 1);
    }

    #[test]
    fn weights_and_errors() {
        let l = swc(10, 5);
        assert_weights(&l, ms(0));
    }

    #[test]
    fn retry_after_is_exact() {
        let l = swc(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 10);
        // Same window, full: the next window at 1.1 s counts 9.
        assert_eq!(assert_retry_exact(&l, 1, ms(500)), ms(1100));
        // prev = 10, cur = 1: 4 fit once 10·(1 − f) ≤ 5, at f = 0.5.
        assert_eq!(assert_retry_exact(&l, 4, ms(1200)), ms(1500));
        // prev = 10, cur = 5: 6 cannot fit in this window; in the next, prev
        // = 5 and 5·(1 − f) ≤ 4 at f = 0.2.
        assert_eq!(assert_retry_exact(&l, 6, ms(1600)), ms(2200));
        // A full burst with a non-empty previous window waits for it to go.
        assert_eq!(assert_retry_exact(&l, 10, ms(2300)), ms(4000));
        // Uneven intervals and a prev that does not divide the window.
        let q = Quota::per_second(3).unwrap().with_burst(7).unwrap();
        let odd = SlidingWindowCounter::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&odd, 9, 1, Timestamp::from_nanos(5)), 7);
        assert_retry_exact(&odd, 1, Timestamp::from_nanos(6));
        assert_retry_exact(&odd, 3, Timestamp::from_nanos(2_500_000_007));
        assert_retry_exact(&odd, 7, Timestamp::from_nanos(2_600_000_007));
    }

    #[test]
    fn peek_does_not_consume() {
        let l = swc(10, 2);
        assert_peeks_allowed(&l, 2, 5);
        assert_eq!(admitted(&l, 5, 1, ms(0)), 2);
    }

    #[test]
    fn backwards_time_is_not_more_permissive() {
        let l = swc(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(5500)), 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 0);
        let d = l.check_at(1, ms(0)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(6100)));
        assert_eq!(admitted(&l, 10, 1, ms(6100)), 1);
    }

    /// A full window 0 and a reservation of 5 made at 100 ms, booked in
    /// window 1.
    fn booked() -> (SlidingWindowCounter<ManualClock>, Reservation) {
        let l = swc(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 10);
        let r = l.reserve_at(5, ms(100)).unwrap();
        assert_eq!(r.act_at(), ms(1500));
        (l, r)
    }

    #[test]
    fn reservations_and_cancel() {
        let (l, _) = booked();
        assert!(matches!(
            l.reserve_within_at(5, ms(100), Duration::from_millis(1899)),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
        // Window 1 is booked: checks before it are denied, with the exact
        // time they would pass.
        assert_eq!(l.peek_at(1, ms(900)).unwrap().remaining, 0);
        assert_eq!(assert_retry_exact(&l, 1, ms(900)), ms(1600));

        let (l, r) = booked();
        // prev = 10, cur = 5: 4 more fit in window 1 once 10·(1 − f) ≤ 1.
        let soon = l.reserve_at(4, ms(1000)).unwrap();
        assert_eq!(soon.act_at(), ms(1900));
        assert_eq!(l.cancel_at(soon, ms(1000)), 4);
        // 6 do not fit in window 1; in window 2 prev = 5 and 5·(1 − f) ≤ 4.
        let later = l.reserve_at(6, ms(1000)).unwrap();
        assert_eq!(later.act_at(), ms(2200));
        // `r`'s window is now the previous one: still given back in full.
        assert_eq!(l.cancel_at(r, ms(1000)), 5);
        assert_eq!(l.cancel_at(later, ms(2199)), 6);
        assert_eq!(l.peek_at(1, ms(2199)).unwrap().remaining, 10);
        let gone = l.reserve_at(1, ms(2300)).unwrap();
        assert_eq!(l.cancel_at(gone, ms(2301)), 0);
    }

    #[test]
    fn set_quota_keeps_free_units() {
        let l = swc(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 10);
        // At 1.5 s five are counted, five free; a larger burst keeps five
        // free (it hands nothing out by itself, as in the token bucket).
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(20).unwrap(),
            ms(1500),
        );
        assert_eq!(l.peek_at(1, ms(1500)).unwrap().remaining, 5);
        // A smaller burst caps the free room...
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(3).unwrap(),
            ms(1500),
        );
        assert_eq!(admitted(&l, 5, 1, ms(1500)), 3);
        // ...and raising it again gives nothing back.
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(20).unwrap(),
            ms(1500),
        );
        assert!(!l.peek_at(1, ms(1500)).unwrap().allowed);
    }

    // At most `b + ⌊D/I⌋` units within any span of `D` ns: the estimate
    // falls by at most `b/W = 1/I` per nanosecond, across boundaries too, so
    // it is a leaky bucket's level in disguise.
    crate::test_support::shared_limiter_tests!(
        SlidingWindowCounter,
        span_bound: |i, b, span| b + span / i,
    );
}
