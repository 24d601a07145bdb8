//! The fixed-window counter.
//!
//! Time is cut into windows of length `W = burst·interval`
//! ([`Quota::window`]) aligned to the clock's origin; each admits up to
//! `burst` units. It is the cheapest algorithm (an index and a count) and the
//! loosest: a client can spend one window's limit at its end and the next
//! window's at its start, `2·burst` in a moment. Choose it when that is
//! acceptable.
//!
//! A denial changes nothing and reports the true earliest time it would
//! pass; a `now` earlier than the latest seen is treated as the latest. A
//! reservation that does not fit is booked at the start of the next window
//! with room, which then becomes the latest window (checks before it are
//! denied conservatively); a cancel returns its weight while that window is
//! the latest. [`RateLimiter::set_quota_at`](crate::RateLimiter::set_quota_at)
//! keeps the free room, capped at the new burst.

use std::fmt::DebugStruct;
use std::sync::Mutex;

use crate::algorithms::mutex_limiter::{
    DebugFields, EarliestTimeState, InitialState, ReconfigureCancel,
};
use crate::limiter::Reservation;
use crate::quota::Quota;
use crate::time::{MonotonicClock, Timestamp};

/// A fixed-window counter. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{FixedWindow, ManualClock, Quota, RateLimiter};
///
/// let clock = ManualClock::new();
/// // 10 per window of 1 s.
/// let limiter = FixedWindow::with_clock(Quota::per_second(10)?, clock.clone());
/// clock.advance(Duration::from_millis(900));
/// assert!(limiter.check(10)?.is_allowed());
/// let denied = limiter.check(1)?;
/// assert_eq!(denied.retry_after, Some(Duration::from_millis(100)));
/// clock.advance(Duration::from_millis(100)); // a new window
/// assert!(limiter.check(10)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FixedWindow<C = MonotonicClock> {
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
    /// Units admitted in window `index`.
    count: u64,
}

impl State {
    fn window(&self) -> u64 {
        self.quota.window_nanos()
    }

    fn start(&self, index: u64) -> u64 {
        index.saturating_mul(self.window())
    }

    /// Units already counted in the window of `t` (`t` not before the
    /// latest window's start).
    fn used_at(&self, t: u64) -> u64 {
        if t / self.window() == self.index {
            self.count
        } else {
            0
        }
    }
}

impl EarliestTimeState for State {
    fn quota(&self) -> Quota {
        self.quota
    }

    fn settle(&mut self, now: u64) -> (u64, u64) {
        crate::algorithms::mutex_limiter::raise(&mut self.last, now)
    }

    /// The earliest time at or after `now` at which `n` units fit.
    fn earliest(&self, n: u64, now: u64) -> u64 {
        let t = now.max(self.start(self.index));
        if self.used_at(t).saturating_add(n) <= self.quota.burst() {
            t
        } else {
            // The next window is empty, and `n ≤ burst`.
            self.start((t / self.window()).saturating_add(1))
        }
    }

    fn admit_at(&mut self, n: u64, at: u64) {
        let k = at / self.window();
        if k != self.index {
            self.index = k;
            self.count = 0;
        }
        self.count = self.count.saturating_add(n);
    }

    /// The room left, and the end of the current window.
    fn outlook(&self, _caller_now: u64, now: u64) -> (u64, u64) {
        let t = now.max(self.start(self.index));
        let end = self.start((t / self.window()).saturating_add(1));
        let remaining = if now < self.start(self.index) {
            0
        } else {
            self.quota.burst().saturating_sub(self.used_at(t))
        };
        (remaining, end)
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
            count: 0,
        }
    }
}

impl ReconfigureCancel for State {
    fn set_quota(&mut self, quota: Quota, now: Timestamp) {
        self.last = self.last.max(now.as_nanos());
        let now = self.last;
        let old_start = self.start(self.index);
        let used = if self.index >= now / self.window() {
            self.count
        } else {
            0
        };
        // Keep the free room, not the count: capping the count at a smaller
        // burst and then raising the burst again would hand out capacity.
        let free = self.quota.burst().saturating_sub(used);
        self.quota = quota;
        let w = quota.window_nanos();
        self.index = (now / w).max(old_start / w);
        self.count = quota.burst() - free.min(quota.burst());
    }

    fn cancel(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        if crate::algorithms::mutex_limiter::past_act(&mut self.last, now, &reservation)
            || reservation.mark != self.index
        {
            return 0;
        }
        let back = reservation.cost.min(self.count);
        self.count -= back;
        back
    }
}

crate::algorithms::mutex_limiter::impl_rate_limiter!(
    FixedWindow,
    "A fixed-window counter with nothing counted yet"
);

impl DebugFields for State {
    fn fields(&self, d: &mut DebugStruct<'_, '_>) {
        d.field("index", &self.index).field("count", &self.count);
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

    fn fixed(rate: u64, burst: u64) -> FixedWindow<ManualClock> {
        FixedWindow::with_clock(quota(rate, burst), ManualClock::new())
    }

    #[test]
    fn counts_per_window_and_resets_at_the_boundary() {
        let l = fixed(10, 10); // 10 per 1 s window
        assert_eq!(admitted(&l, 4, 1, ms(0)), 4);
        let d = l.check_at(1, ms(250)).unwrap();
        assert_eq!(d.remaining, 5);
        assert_eq!(d.reset_after, Duration::from_millis(750));
        assert_eq!(admitted(&l, 10, 1, ms(999)), 5);
        // The boundary weakness: 10 more at once in the next window.
        assert_eq!(admitted(&l, 20, 1, ms(1000)), 10);
        assert_eq!(admitted(&l, 1, 1, ms(3500)), 1);
        assert_eq!(l.peek_at(1, ms(3500)).unwrap().remaining, 9);
    }

    #[test]
    fn weights_and_errors() {
        let l = fixed(10, 5); // 5 per 500 ms
        assert_weights(&l, ms(0));
    }

    #[test]
    fn retry_after_is_exact() {
        let l = fixed(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(300)), 10);
        assert_eq!(assert_retry_exact(&l, 1, ms(300)), ms(1000));
        assert_eq!(admitted(&l, 9, 1, ms(1000)), 9); // 10 in window 1
        assert_eq!(assert_retry_exact(&l, 2, ms(1700)), ms(2000));
        let odd = FixedWindow::with_clock(Quota::per_second(3).unwrap(), ManualClock::new());
        assert_eq!(admitted(&odd, 5, 1, ms(10)), 3);
        assert_eq!(
            assert_retry_exact(&odd, 1, ms(10)),
            Timestamp::from_nanos(1_000_000_002)
        );
    }

    #[test]
    fn peek_does_not_consume() {
        let l = fixed(10, 2);
        assert_peeks_allowed(&l, 2, 5);
        assert_eq!(l.peek_at(1, ms(0)).unwrap().remaining, 2);
        assert_eq!(admitted(&l, 5, 1, ms(0)), 2);
    }

    #[test]
    fn backwards_time_is_not_more_permissive() {
        let l = fixed(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(5500)), 10);
        // Window 0 is long gone, but an old `now` does not reopen it.
        assert_eq!(admitted(&l, 10, 1, ms(100)), 0);
        let d = l.check_at(1, ms(100)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(5900)));
        assert_eq!(admitted(&l, 20, 1, ms(6000)), 10);
    }

    #[test]
    fn reservations_book_future_windows() {
        let l = fixed(10, 10);
        assert_eq!(admitted(&l, 8, 1, ms(200)), 8);
        let now = l.reserve_at(2, ms(200)).unwrap();
        assert_eq!(now.act_at(), ms(200));
        let next = l.reserve_at(4, ms(300)).unwrap();
        assert_eq!(next.act_at(), ms(1000));
        assert!(matches!(
            l.reserve_within_at(7, ms(300), Duration::from_millis(699)),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
        // Window 0 was full anyway; checks before window 1 are denied, and
        // told when window 1 has room.
        let d = l.check_at(6, ms(400)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(600)));
        assert_eq!(d.remaining, 0);
        assert_eq!(assert_retry_exact(&l, 7, ms(500)), ms(2000));
        // `now` was in a window no longer kept: nothing to give back.
        assert_eq!(l.cancel_at(now, ms(200)), 0);
        // `next` is in the latest window and not yet due: all of it.
        let l = fixed(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 10);
        let next = l.reserve_at(4, ms(0)).unwrap();
        assert_eq!(l.cancel_at(next, ms(999)), 4);
        assert_eq!(l.peek_at(1, ms(1000)).unwrap().remaining, 10);
        let late = l.reserve_at(4, ms(1000)).unwrap();
        assert_eq!(l.cancel_at(late, ms(1001)), 0);
    }

    #[test]
    fn set_quota_keeps_the_free_room() {
        let l = fixed(10, 10);
        assert_eq!(admitted(&l, 6, 1, ms(1500)), 6);
        // 20 per 2 s window, in window [0, 2 s): the 4 free units stay 4 (a
        // larger burst hands nothing out by itself, as in the token bucket).
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(20).unwrap(),
            ms(1500),
        );
        let d = l.peek_at(1, ms(1500)).unwrap();
        assert_eq!(
            (d.remaining, d.reset_after),
            (4, Duration::from_millis(500))
        );
        // Down to a burst of 2: the free room is capped at 2...
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(2).unwrap(),
            ms(1500),
        );
        assert_eq!(admitted(&l, 5, 1, ms(1500)), 2);
        // ...and back up to 20: nothing more until the window turns.
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(20).unwrap(),
            ms(1500),
        );
        assert!(!l.peek_at(1, ms(1500)).unwrap().allowed);
        assert!(l.peek_at(20, ms(2000)).unwrap().allowed);
    }

    // At most `b·(⌈D/W⌉ + 1)` units within any span of `D` ns: a span
    // meets at most `⌈D/W⌉ + 1` windows.
    crate::test_support::shared_limiter_tests!(
        FixedWindow,
        span_bound: |i, b, span| b * (span.div_ceil(i * b) + 1),
    );
}
