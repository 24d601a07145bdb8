//! The leaky bucket as a queue: a scheduler that never lets output burst.
//!
//! Admitted requests join a bounded FIFO that drains at the quota's rate.
//! Instead of holding them (this crate does no I/O), the queue hands each its
//! **departure time** as [`Decision::delay`] (or [`Reservation::act_at`]); the
//! caller waits that long, then acts. The whole queue is one number, `tail`,
//! the next free departure slot. A request of weight `n` is admitted iff
//!
//! ```text
//! (max(tail, now) − now) + n·interval ≤ burst·interval
//! ```
//!
//! — exactly [GCRA](crate::Gcra)'s test, but it departs at `max(tail, now)`
//! rather than now, and moves `tail` on by `n·interval`. So departures are
//! spaced one interval per unit and a checked request waits at most
//! `(burst − n)·interval`. A denial changes nothing and reports the exact
//! `retry_after`.
//!
//! A reservation may book a slot beyond the queue's capacity (it waits
//! outside the queue first). Cancelling follows Go's `x/time/rate` rule as far
//! as a FIFO allows: the last reservation in the queue gives back its whole
//! weight, any other nothing (its slot becomes idle output, so no later
//! request departs early). [`RateLimiter::set_quota_at`](crate::RateLimiter::set_quota_at)
//! keeps `tail`: scheduled departures stand. A `now` earlier than the latest
//! seen is treated as the latest.

use std::fmt::DebugStruct;
use std::sync::Mutex;
use std::time::Duration;

use crate::algorithms::mutex_limiter::{
    BookedReservation, DebugFields, InitialState, MutexState, PlanOutcome, ReconfigureCancel,
};
use crate::decision::Decision;
use crate::limiter::Reservation;
use crate::quota::Quota;
use crate::time::{MonotonicClock, Timestamp};

/// A leaky bucket used as a queue (a scheduler). See the [module
/// docs](self).
///
/// ```
/// use std::time::Duration;
/// use ratewise::{LeakyQueue, ManualClock, Quota, RateLimiter};
///
/// let clock = ManualClock::new();
/// let queue = LeakyQueue::with_clock(Quota::per_second(10)?.with_burst(3)?, clock.clone());
/// let delays: Vec<_> = (0..3).map(|_| queue.check(1).unwrap().delay).collect();
/// assert_eq!(delays, [0, 100, 200].map(Duration::from_millis));
/// // Full: the fourth must wait until one unit of work has drained.
/// let denied = queue.check(1)?;
/// assert_eq!(denied.retry_after, Some(Duration::from_millis(100)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeakyQueue<C = MonotonicClock> {
    state: Mutex<State>,
    clock: C,
}

#[derive(Debug)]
struct State {
    quota: Quota,
    /// Latest time seen; earlier `now`s are raised to it.
    last: u64,
    /// When all admitted work has been served: the next free departure slot.
    tail: u64,
}

/// Where a request of some weight would go at some time.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The caller's `now`.
    caller: u64,
    /// The clamped `now`.
    now: u64,
    /// Its departure: `max(tail, now)`.
    departure: u64,
    /// `tail` after admitting it.
    tail_after: u64,
    /// How long until it fits in the queue (zero if it fits now).
    wait: u64,
}

impl State {
    /// The evidence at the clamped `now`; `stale` (how far the caller's
    /// `now` is behind it) is added to the durations, which are measured
    /// from the caller's `now`.
    fn evidence(
        &self,
        now: u64,
        stale: u64,
        tail: u64,
        retry_after: Option<u64>,
        delay: u64,
    ) -> Decision {
        let backlog = tail.saturating_sub(now);
        Decision {
            allowed: retry_after.is_none(),
            limit: self.quota.burst(),
            remaining: self
                .quota
                .units_in(self.quota.window_nanos().saturating_sub(backlog)),
            reset_after: Duration::from_nanos(backlog.saturating_add(stale)),
            retry_after: retry_after.map(|r| Duration::from_nanos(r.saturating_add(stale))),
            delay: Duration::from_nanos(delay),
        }
    }
}

impl PlanOutcome for Slot {
    fn passes(&self) -> bool {
        self.wait == 0
    }

    /// A reservation acts at its departure, which may be beyond the queue's
    /// capacity (see the module docs).
    fn reserve_wait(&self) -> u64 {
        self.departure.saturating_sub(self.caller)
    }
}

impl MutexState for State {
    type Plan = Slot;

    fn quota(&self) -> Quota {
        self.quota
    }

    fn plan(&mut self, n: u64, caller: u64) -> Slot {
        self.last = self.last.max(caller);
        let now = self.last;
        let departure = self.tail.max(now);
        let tail_after = departure.saturating_add(self.quota.cost_nanos(n));
        let wait = (tail_after - now).saturating_sub(self.quota.window_nanos());
        Slot {
            caller,
            now,
            departure,
            tail_after,
            wait,
        }
    }

    fn admit(&mut self, _n: u64, slot: &Slot) {
        self.tail = slot.tail_after;
    }

    fn decision(&self, slot: &Slot, allowed: bool) -> Decision {
        if allowed {
            let delay = slot.departure.saturating_sub(slot.caller);
            self.evidence(slot.now, slot.now - slot.caller, self.tail, None, delay)
        } else {
            self.evidence(
                slot.now,
                slot.now - slot.caller,
                self.tail,
                Some(slot.wait),
                0,
            )
        }
    }

    fn book(&mut self, _n: u64, slot: &Slot) -> BookedReservation {
        self.tail = slot.tail_after;
        BookedReservation {
            act: slot.departure,
            mark: slot.tail_after,
            cost: slot.tail_after - slot.departure,
        }
    }
}

impl InitialState for State {
    fn fresh(quota: Quota, now: u64) -> Self {
        State {
            quota,
            last: now,
            tail: now,
        }
    }
}

impl ReconfigureCancel for State {
    fn set_quota(&mut self, quota: Quota, now: Timestamp) {
        self.last = self.last.max(now.as_nanos());
        // `tail` is kept: scheduled departures stand (see the module docs).
        self.quota = quota;
    }

    fn cancel(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        if crate::algorithms::mutex_limiter::past_act(&mut self.last, now, &reservation) {
            return 0;
        }
        // Only the last request in the queue can leave without leaving a hole
        // that a newcomer would fill out of order.
        if self.tail != reservation.mark || reservation.mark < reservation.cost {
            return 0;
        }
        self.tail = reservation.mark - reservation.cost;
        reservation.weight
    }
}

crate::algorithms::mutex_limiter::impl_rate_limiter!(LeakyQueue, "An empty queue");

impl DebugFields for State {
    fn fields(&self, d: &mut DebugStruct<'_, '_>) {
        d.field("tail_nanos", &self.tail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{CheckError, ReserveError};
    use crate::limiter::RateLimiter;
    use crate::test_support::{admitted, assert_retry_exact, ms, quota};
    use crate::time::ManualClock;

    fn queue(rate: u64, burst: u64) -> LeakyQueue<ManualClock> {
        LeakyQueue::with_clock(quota(rate, burst), ManualClock::new())
    }

    /// Admits `count` requests of weight 1 at `at`; returns the departure
    /// times (ms) of those admitted.
    fn departures(l: &LeakyQueue<ManualClock>, count: u64, at: Timestamp) -> Vec<u64> {
        (0..count)
            .filter_map(|_| {
                let d = l.check_at(1, at).unwrap();
                d.allowed.then(|| (at + d.delay).as_nanos() / 1_000_000)
            })
            .collect()
    }

    /// 003, "Leaky Bucket — The Mathematics", queue worked example.
    #[test]
    fn worked_example_r10_c20() {
        let l = queue(10, 20);
        let first = departures(&l, 10, ms(0));
        assert_eq!(first, (0..10).map(|i| i * 100).collect::<Vec<_>>());
        // By t = 1 s all ten have departed; of 30 arrivals, 20 fit.
        assert_eq!(l.peek_at(1, ms(1000)).unwrap().remaining, 20);
        let second = departures(&l, 30, ms(1000));
        assert_eq!(second, (0..20).map(|i| 1000 + i * 100).collect::<Vec<_>>());
        // The last departs at 2.9 s: latency at most c/r = 2 s.
        let full = l.peek_at(1, ms(1000)).unwrap();
        assert_eq!(full.reset_after, Duration::from_secs(2));
        assert_eq!(full.retry_after, Some(Duration::from_millis(100)));
    }

    #[test]
    fn weighted_departures_are_spaced_by_weight() {
        let l = queue(10, 10);
        let a = l.check_at(3, ms(0)).unwrap();
        let b = l.check_at(1, ms(0)).unwrap();
        let c = l.check_at(2, ms(50)).unwrap();
        assert_eq!(a.delay, Duration::ZERO);
        assert_eq!(b.delay, Duration::from_millis(300));
        assert_eq!(c.delay, Duration::from_millis(350)); // departs at 400
        assert_eq!(c.remaining, 4); // 550 ms of work queued at 50 ms
        assert_eq!(l.check_at(0, ms(0)), Err(CheckError::ZeroWeight));
        assert!(matches!(
            l.check_at(11, ms(0)),
            Err(CheckError::ExceedsBurst { .. })
        ));
    }

    #[test]
    fn retry_after_is_exact() {
        let l = queue(10, 20);
        assert_eq!(admitted(&l, 25, 1, ms(0)), 20);
        assert_eq!(assert_retry_exact(&l, 1, ms(0)), ms(100));
        assert_eq!(assert_retry_exact(&l, 5, ms(130)), ms(600));
        let odd = LeakyQueue::with_clock(Quota::per_second(3).unwrap(), ManualClock::new());
        assert_eq!(admitted(&odd, 5, 1, ms(0)), 3);
        assert_retry_exact(&odd, 2, Timestamp::from_nanos(77));
    }

    #[test]
    fn denial_and_peek_change_nothing() {
        let l = queue(10, 2);
        for _ in 0..5 {
            assert!(l.peek_at(2, ms(0)).unwrap().allowed);
        }
        assert!(l.check_at(2, ms(0)).unwrap().allowed);
        for _ in 0..5 {
            assert!(!l.check_at(1, ms(50)).unwrap().allowed);
        }
        let d = l.check_at(1, ms(100)).unwrap();
        assert!(d.allowed);
        assert_eq!(d.delay, Duration::from_millis(100));
    }

    #[test]
    fn backwards_time_is_not_more_permissive() {
        let l = queue(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(5000)), 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 0);
        let d = l.check_at(1, ms(5100)).unwrap();
        assert!(d.allowed);
        assert_eq!(d.delay, Duration::from_millis(900));
        // A caller whose clock is behind is told to wait from its own now.
        let q = queue(10, 10);
        assert!(q.check_at(1, ms(1000)).unwrap().allowed);
        let d = q.check_at(1, ms(400)).unwrap();
        assert_eq!(d.delay, Duration::from_millis(700));
    }

    #[test]
    fn reservations_book_departures_and_cancel_from_the_tail() {
        let l = queue(10, 5);
        let a = l.reserve_at(2, ms(0)).unwrap();
        let b = l.reserve_at(3, ms(0)).unwrap();
        assert_eq!((a.act_at(), b.act_at()), (ms(0), ms(200)));
        // The queue is full; a reservation may wait outside it.
        let c = l.reserve_at(1, ms(0)).unwrap();
        assert_eq!(c.act_at(), ms(500));
        assert!(!l.peek_at(1, ms(0)).unwrap().allowed);
        assert!(matches!(
            l.reserve_within_at(1, ms(0), Duration::from_millis(599)),
            Err(ReserveError::WouldWaitTooLong { .. })
        ));
        // `a` is not last: later requests were scheduled behind it.
        assert_eq!(l.cancel_at(a, ms(0)), 0);
        // From the tail, in reverse order, each gives back its weight.
        assert_eq!(l.cancel_at(c, ms(0)), 1);
        // Cancelling twice cannot happen: `cancel_at` consumes the reservation.
        assert_eq!(l.cancel_at(b, ms(100)), 3);
        let d = l.check_at(1, ms(100)).unwrap();
        // Right behind `a`.
        assert_eq!(d.delay, Duration::from_millis(100));
        // After its act time, a reservation cannot be cancelled.
        let e = l.reserve_at(1, ms(300)).unwrap();
        assert_eq!(e.act_at(), ms(300));
        assert_eq!(l.cancel_at(e, ms(301)), 0);
    }

    #[test]
    fn set_quota_keeps_the_backlog() {
        let l = queue(10, 10);
        assert_eq!(admitted(&l, 10, 1, ms(0)), 10); // 1 s of work
        l.set_quota_at(Quota::per_second(1).unwrap().with_burst(4).unwrap(), ms(0));
        // 1 s of backlog is one unit at the new rate; three more fit.
        let d = l.check_at(3, ms(0)).unwrap();
        assert!(d.allowed);
        assert_eq!(d.delay, Duration::from_secs(1));
        assert_eq!(d.reset_after, Duration::from_secs(4));
        assert!(!l.check_at(1, ms(0)).unwrap().allowed);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Exact retry_after, denials change nothing, at most `b + ⌊D/I⌋`
        /// units admitted within any span of `D` ns; departures are spaced
        /// by the previous weight and no admitted request waits more than
        /// `(b − n)·I`.
        #[test]
        fn prop_workload((i, b, ops) in crate::test_support::workload()) {
            let q = Quota::from_parts(i, b).unwrap();
            let admitted = crate::test_support::check_workload(
                || LeakyQueue::with_clock(q, ManualClock::new()),
                &ops,
                |span| b + span / i,
            );
            let mut prev: Option<(u64, u64)> = None;
            for (t, n, d) in admitted {
                let delay = u64::try_from(d.delay.as_nanos()).unwrap();
                proptest::prop_assert!(delay <= (b - n) * i);
                let departure = t + delay;
                if let Some((pd, pn)) = prev {
                    proptest::prop_assert!(departure >= pd + pn * i);
                }
                prev = Some((departure, n));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// With reservations and cancellations mixed in, the departures of
        /// what acts stay spaced by the preceding weight: cancelling never
        /// lets a newcomer depart inside another request's slot.
        #[test]
        fn prop_output_never_bursts((i, b, ops) in crate::test_support::mixed_workload()) {
            let l = LeakyQueue::with_clock(Quota::from_parts(i, b).unwrap(), ManualClock::new());
            // For the queue, a request acts at its departure.
            let (mut departures, returned) = crate::test_support::run_mixed(&l, &ops);
            for (weight, back) in returned {
                proptest::prop_assert!(back == 0 || back == weight);
            }
            departures.sort_unstable();
            for w in departures.windows(2) {
                proptest::prop_assert!(w[1].0 >= w[0].0 + w[0].1 * i, "{:?}", w);
            }
        }
    }

    crate::test_support::shared_limiter_tests!(LeakyQueue);
}
