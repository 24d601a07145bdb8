//! The sliding-window log: exact, at the price of memory.
//!
//! The limiter remembers when each admitted unit was admitted and admits `n`
//! at `now` iff the weight admitted in `(now − W, now]` plus `n` is at most
//! `burst`, with `W = burst·interval` ([`Quota::window`]): *every* window of
//! length `W` holds at most `burst` units.
//!
//! The log is a ring buffer of `(time, weight)` entries, 16 bytes each
//! (same-nanosecond admissions share one), at most `burst` entries; it grows
//! only as traffic needs and then stops allocating. An admission is `O(1)`
//! amortised, a denial `O(entries)` to compute the exact `retry_after`.
//! A denial changes nothing; a `now` earlier than the latest seen is treated
//! as the latest. A cancelled reservation's weight leaves the log before its
//! act time; checks before that time stay denied (conservative).
//! [`RateLimiter::set_quota_at`](crate::RateLimiter::set_quota_at) keeps the
//! log: units of the last window count against the new burst.

use std::collections::VecDeque;
use std::fmt::DebugStruct;
use std::sync::Mutex;

use crate::algorithms::mutex_limiter::{
    DebugFields, EarliestTimeState, InitialState, ReconfigureCancel,
};
use crate::limiter::Reservation;
use crate::quota::Quota;
use crate::time::{MonotonicClock, Timestamp};

/// A sliding-window log. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{ManualClock, Quota, RateLimiter, SlidingWindowLog};
///
/// let clock = ManualClock::new();
/// // 3 in any window of 3 s.
/// let limiter = SlidingWindowLog::with_clock(Quota::per_second(1)?.with_burst(3)?, clock.clone());
/// for _ in 0..3 {
///     assert!(limiter.check(1)?.is_allowed());
///     clock.advance(Duration::from_secs(1));
/// }
/// // At 3 s the first has just left the window (0 s, 3 s].
/// assert!(limiter.check(1)?.is_allowed());
/// let denied = limiter.check(1)?;
/// assert_eq!(denied.retry_after, Some(Duration::from_secs(1)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SlidingWindowLog<C = MonotonicClock> {
    state: Mutex<State>,
    clock: C,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    at: u64,
    weight: u64,
}

#[derive(Debug)]
struct State {
    quota: Quota,
    /// Latest time seen; earlier `now`s are raised to it.
    last: u64,
    /// No decision is made before this time: the latest time anything was
    /// logged at (a reservation's may be in the future). Entries that have
    /// left the window by then were dropped, so it never moves back, not
    /// even when a cancellation removes the entry that raised it.
    floor: u64,
    /// Admissions, oldest first.
    log: VecDeque<Entry>,
    /// Sum of the log's weights.
    total: u64,
}

impl State {
    fn newest(&self) -> Option<u64> {
        self.log.back().map(|e| e.at)
    }

    /// Drops entries that can never count again for a decision at `t` or
    /// later: those at or before `t − W`.
    fn prune(&mut self, t: u64) {
        let w = self.quota.window_nanos();
        while let Some(e) = self.log.front() {
            if e.at.saturating_add(w) > t {
                break;
            }
            self.total -= e.weight;
            self.log.pop_front();
        }
    }
}

impl EarliestTimeState for State {
    fn quota(&self) -> Quota {
        self.quota
    }

    /// Raises `now` to the latest time seen, prunes, and returns the time a
    /// decision is made at (`now`, or the newest entry if later).
    fn settle(&mut self, now: u64) -> (u64, u64) {
        self.last = self.last.max(now);
        let now = self.last;
        let t0 = self.floor.max(now);
        self.prune(t0);
        (now, t0)
    }

    /// The earliest time at or after `t0` at which `n` more units pass.
    /// Assumes the log has been pruned at `t0`.
    fn earliest(&self, n: u64, t0: u64) -> u64 {
        let limit = self.quota.burst();
        if self.total.saturating_add(n) <= limit {
            return t0;
        }
        let w = self.quota.window_nanos();
        let mut left = self.total;
        for e in &self.log {
            left -= e.weight;
            if left.saturating_add(n) <= limit {
                // Entries up to and including `e` have all left the window
                // `(t − W, t]` once `t ≥ e.at + W`.
                return e.at.saturating_add(w);
            }
        }
        // Unreachable: an empty log admits any `n ≤ burst`. Stay total.
        t0
    }

    fn admit_at(&mut self, n: u64, at: u64) {
        match self.log.back_mut() {
            Some(e) if e.at == at => e.weight += n,
            _ => self.log.push_back(Entry { at, weight: n }),
        }
        self.total += n;
        // Decisions are never made before `at` from now on.
        self.floor = self.floor.max(at);
        self.prune(at);
    }

    /// The room left, and when the newest entry leaves the window.
    fn outlook(&self, caller_now: u64, now: u64) -> (u64, u64) {
        let w = self.quota.window_nanos();
        let empty_at = self.newest().map_or(caller_now, |at| at.saturating_add(w));
        // Nothing is available before the floor (see `floor`).
        let remaining = if now < self.floor {
            0
        } else {
            self.quota.burst().saturating_sub(self.total)
        };
        (remaining, empty_at)
    }

    /// The log entry a reservation was counted in: its time.
    fn mark(&self, at: u64) -> u64 {
        at
    }
}

impl InitialState for State {
    fn fresh(quota: Quota, now: u64) -> Self {
        State {
            quota,
            last: now,
            floor: now,
            log: VecDeque::new(),
            total: 0,
        }
    }
}

impl<C> SlidingWindowLog<C> {
    /// How many entries the log holds now (at most the burst).
    pub fn len(&self) -> usize {
        crate::algorithms::mutex_limiter::lock(&self.state)
            .log
            .len()
    }

    /// `true` if the log holds no entries.
    pub fn is_empty(&self) -> bool {
        crate::algorithms::mutex_limiter::lock(&self.state)
            .log
            .is_empty()
    }
}

impl ReconfigureCancel for State {
    fn set_quota(&mut self, quota: Quota, now: Timestamp) {
        self.quota = quota;
        // Drop what has left the new window.
        self.settle(now.as_nanos());
    }

    fn cancel(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        if crate::algorithms::mutex_limiter::past_act(&mut self.last, now, &reservation) {
            return 0;
        }
        let Ok(i) = self.log.binary_search_by_key(&reservation.mark, |e| e.at) else {
            return 0;
        };
        let Some(e) = self.log.get_mut(i) else {
            return 0;
        };
        let back = reservation.cost.min(e.weight);
        e.weight -= back;
        if e.weight == 0 {
            self.log.remove(i);
        }
        self.total -= back;
        back
    }
}

crate::algorithms::mutex_limiter::impl_rate_limiter!(
    SlidingWindowLog,
    "An empty sliding-window log (it allocates on first use)"
);

impl DebugFields for State {
    fn fields(&self, d: &mut DebugStruct<'_, '_>) {
        d.field("entries", &self.log.len())
            .field("total", &self.total);
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

    fn swl(rate: u64, burst: u64) -> SlidingWindowLog<ManualClock> {
        SlidingWindowLog::with_clock(quota(rate, burst), ManualClock::new())
    }

    #[test]
    fn every_window_holds_at_most_burst() {
        let l = swl(10, 10); // 10 in any 1 s
        assert_eq!(admitted(&l, 5, 1, ms(0)), 5);
        assert_eq!(admitted(&l, 10, 1, ms(600)), 5);
        // No boundary: at 1 s the five from t = 0 have left, not the others.
        assert_eq!(admitted(&l, 10, 1, ms(999)), 0);
        assert_eq!(admitted(&l, 10, 1, ms(1000)), 5);
        assert_eq!(admitted(&l, 10, 1, ms(1599)), 0);
        let d = l.peek_at(1, ms(1599)).unwrap();
        assert_eq!(d.reset_after, Duration::from_millis(401));
        assert_eq!(admitted(&l, 10, 1, ms(1600)), 5);
        // Same-time admissions share an entry.
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn weights_and_errors() {
        let l = swl(10, 5);
        let d = assert_weights(&l, ms(100));
        assert_eq!(d.remaining, 2);
    }

    #[test]
    fn retry_after_is_exact() {
        let l = swl(10, 10);
        for i in 0..10 {
            assert!(l.check_at(1, ms(i * 50)).unwrap().allowed);
        }
        assert_eq!(assert_retry_exact(&l, 1, ms(500)), ms(1000));
        // Three must wait for the entries at 50, 100 and 150 ms to leave.
        assert_eq!(assert_retry_exact(&l, 3, ms(1000)), ms(1150));
        assert_eq!(assert_retry_exact(&l, 10, ms(1151)), ms(2150));
        let q = Quota::per_second(3).unwrap().with_burst(4).unwrap();
        let odd = SlidingWindowLog::with_clock(q, ManualClock::new());
        assert_eq!(admitted(&odd, 2, 2, Timestamp::from_nanos(9)), 2);
        assert_retry_exact(&odd, 1, Timestamp::from_nanos(10));
    }

    #[test]
    fn peek_does_not_consume() {
        let l = swl(10, 2);
        assert_peeks_allowed(&l, 2, 5);
        assert!(l.is_empty());
        assert_eq!(admitted(&l, 5, 1, ms(0)), 2);
    }

    #[test]
    fn backwards_time_is_not_more_permissive() {
        let l = swl(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(5500)), 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 0);
        let d = l.check_at(1, ms(0)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(6500)));
        assert_eq!(admitted(&l, 20, 1, ms(6500)), 10);
    }

    #[test]
    fn memory_is_bounded_by_burst() {
        let l = swl(1000, 8);
        for i in 0..10_000u64 {
            let _ = l.check_at(1 + i % 3, Timestamp::from_nanos(i * 400_000));
            assert!(l.len() <= 8);
            let _ = l.reserve_within_at(1, Timestamp::from_nanos(i * 400_000), Duration::MAX);
            assert!(l.len() <= 8);
        }
    }

    /// A full log — 4 units at 0, 6 at 300 ms — and a reservation of 5 made
    /// at 400 ms.
    fn booked() -> (SlidingWindowLog<ManualClock>, Reservation) {
        let l = swl(10, 10);
        assert_eq!(admitted(&l, 4, 1, ms(0)), 4);
        assert_eq!(admitted(&l, 6, 1, ms(300)), 6);
        // Removing the 4 from t = 0 is not enough; the 6 at 300 ms must go.
        let r = l.reserve_at(5, ms(400)).unwrap();
        assert_eq!(r.act_at(), ms(1300));
        (l, r)
    }

    #[test]
    fn reservations_and_cancel() {
        let (l, _) = booked();
        // Before the reservation's time checks are denied, and told when
        // they pass; at 1.3 s the window (0.3 s, 1.3 s] holds only `r`.
        let d = l.peek_at(1, ms(500)).unwrap();
        assert_eq!((d.allowed, d.remaining), (false, 0));
        assert_eq!(assert_retry_exact(&l, 1, ms(500)), ms(1300));
        assert_eq!(l.peek_at(1, ms(1300)).unwrap().remaining, 4);

        let (l, r) = booked();
        assert!(matches!(
            l.reserve_within_at(6, ms(500), Duration::from_millis(1799)),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
        let later = l.reserve_at(5, ms(500)).unwrap();
        assert_eq!(later.act_at(), ms(1300));
        // One entry for both.
        assert_eq!(l.len(), 1);
        // Misuse (a forged twin of `r`, cancelled after `r` itself) takes
        // `later`'s entry; it never panics or returns more than its weight.
        let twin = Reservation::new(r.weight(), r.made_at(), r.act_at(), r.mark(), r.cost());
        assert_eq!(l.cancel_at(r, ms(1000)), 5);
        assert_eq!(l.cancel_at(twin, ms(1000)), 5);
        assert_eq!(l.cancel_at(later, ms(1000)), 0);
        assert!(l.is_empty());
        // The 6 from 300 ms were dropped when `r` was logged, so the stretch
        // before 1.3 s stays closed.
        let d = l.check_at(10, ms(1000)).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(300)));
        assert!(l.check_at(10, ms(1300)).unwrap().allowed);
        let due = l.reserve_at(1, ms(2300)).unwrap();
        assert_eq!(l.cancel_at(due, ms(2301)), 0);
    }

    #[test]
    fn set_quota_keeps_the_log() {
        let l = swl(10, 10);
        assert_eq!(admitted(&l, 8, 1, ms(0)), 8);
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(20).unwrap(),
            ms(500),
        );
        assert_eq!(l.peek_at(1, ms(500)).unwrap().remaining, 12);
        // Now the window is 2 s: the eight count until 2 s.
        assert_eq!(l.peek_at(1, ms(1999)).unwrap().remaining, 12);
        assert_eq!(l.peek_at(1, ms(2000)).unwrap().remaining, 20);

        let l = swl(10, 10);
        assert_eq!(admitted(&l, 8, 1, ms(0)), 8);
        // A burst of 5 (window 500 ms): the eight over-fill it until 500 ms.
        l.set_quota_at(
            Quota::per_second(10).unwrap().with_burst(5).unwrap(),
            ms(100),
        );
        let d = l.peek_at(1, ms(100)).unwrap();
        assert_eq!(
            (d.remaining, d.retry_after),
            (0, Some(Duration::from_millis(400)))
        );
        assert!(l.check_at(5, ms(500)).unwrap().allowed);
    }

    // At most `b·⌈(D + 1)/W⌉` units within any span of `D` ns: at most `b`
    // in each of the `⌈(D + 1)/W⌉` windows `(t − W, t]` that cover it.
    crate::test_support::shared_limiter_tests!(
        SlidingWindowLog,
        span_bound: |i, b, span| b * (span + 1).div_ceil(i * b),
    );
}
