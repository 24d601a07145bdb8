//! [`RateLimiter`]: the one API all seven algorithms share.

use std::time::Duration;

use crate::decision::Decision;
use crate::error::{CheckError, QuotaError, ReserveError};
use crate::quota::Quota;
use crate::time::Timestamp;

/// The longest any reservation may wait (2^60 − 2 ns, about 36 years),
/// whatever `max_wait` the caller allows: every algorithm caps the wait
/// here, so that an act time, and the lock-free GCRA's arrival time after
/// it, stay inside the timeline's exact range. Also reachable as
/// `ratewise::gcra::MAX_RESERVE_WAIT`.
pub const MAX_RESERVE_WAIT: Duration = Duration::from_nanos((1 << 60) - 2);

/// A claim on future capacity, returned by
/// [`RateLimiter::reserve_within_at`].
///
/// The caller may act at [`Reservation::act_at`]. Until then it may hand the
/// reservation back with [`RateLimiter::cancel_at`], which returns to the
/// limiter the part of its cost that no later grant was promised: its cost
/// minus the stretch from its act time to the latest grant's act time.
/// Unlike Go's `x/time/rate`, whose rule this starts from, ratewise never
/// moves that latest act time back — not even when the latest grant itself
/// is cancelled — because once two grants share an act time, Go's "the
/// grant before acts at `act − cost`" is false and would hand the same
/// capacity out twice; later cancellations may therefore return less than
/// Go's would, never more. The window algorithms may have booked a future
/// window and stay conservative after a cancel (see each module).
///
/// No reservation waits longer than [`MAX_RESERVE_WAIT`] (about 36 years),
/// whatever `max_wait` allows.
///
/// A reservation is neither `Copy` nor `Clone`, and cancelling consumes it,
/// so the same capacity cannot be handed back twice. It belongs to the
/// limiter that issued it; cancelling it on another limiter is a logic error
/// whose effect is unspecified but never a panic, and never returns more than
/// the reservation's weight.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation holds capacity until it is used or cancelled"]
pub struct Reservation {
    pub(crate) weight: u64,
    pub(crate) made_at: Timestamp,
    pub(crate) act_at: Timestamp,
    /// Algorithm-specific bookkeeping (e.g. GCRA's arrival time after this
    /// reservation, or the window it was counted in).
    pub(crate) mark: u64,
    /// Algorithm-specific bookkeeping (e.g. the reservation's cost in
    /// nanoseconds of capacity).
    pub(crate) cost: u64,
}

impl Reservation {
    /// Builds a reservation. For implementors of [`RateLimiter`] outside this
    /// crate; `mark` and `cost` are free for the implementation's own use.
    pub fn new(weight: u64, made_at: Timestamp, act_at: Timestamp, mark: u64, cost: u64) -> Self {
        Reservation {
            weight,
            made_at,
            act_at,
            mark,
            cost,
        }
    }

    /// The weight reserved.
    pub const fn weight(&self) -> u64 {
        self.weight
    }

    /// When the reservation was made.
    pub const fn made_at(&self) -> Timestamp {
        self.made_at
    }

    /// The earliest time the caller may act.
    pub const fn act_at(&self) -> Timestamp {
        self.act_at
    }

    /// How long after `now` the caller may act (zero if already due).
    pub fn delay_from(&self, now: Timestamp) -> Duration {
        self.act_at.saturating_duration_since(now)
    }

    /// The implementation's first bookkeeping word (see [`Reservation::new`]).
    pub const fn mark(&self) -> u64 {
        self.mark
    }

    /// The implementation's second bookkeeping word (see [`Reservation::new`]).
    pub const fn cost(&self) -> u64 {
        self.cost
    }
}

/// Go `x/time/rate`'s cancellation rule, in nanoseconds of capacity (one
/// unit = one emission interval, so time and capacity share a scale), shared
/// by the bucket-family limiters and GCRA: the rule
/// [`RateLimiter::cancel_at`] documents. A reservation of `weight` units
/// acting at `act` gives back its `cost` (capped at what `weight` units cost
/// under `q`, so a forged reservation never returns more than its weight)
/// minus the stretch from `act` to the latest grant's act time `last_act`,
/// which later grants were promised. `None` if nothing comes back; otherwise
/// the capacity given back.
///
/// Unlike Go, `last_act` is never moved back when the latest grant is
/// cancelled: "the grant before it acts at `act − cost`" is wrong once an
/// earlier cancellation has let a later grant be booked at the same act
/// time, and the stretch that grant was promised would then be given out
/// again (an over-admission the mixed reservation property found). Keeping
/// it only makes later cancellations give back less.
pub(crate) fn give_back(cost: u64, weight: u64, q: Quota, act: u64, last_act: u64) -> Option<u64> {
    let cost = cost.min(q.cost_nanos(weight));
    let restore = cost.saturating_sub(last_act.saturating_sub(act));
    (restore > 0).then_some(restore)
}

/// The shared API of every rate-limiting algorithm in ratewise.
///
/// The `*_at` methods are the sans-IO core: they take `now` from the caller
/// and never read a clock, sleep, or allocate on the hot path. The methods
/// without `_at` read the limiter's own [`Clock`](crate::Clock).
///
/// All methods take `&self`: limiters are shared between threads as they are
/// (wrap in an `Arc` to share ownership), and may be re-configured while in
/// use with [`RateLimiter::set_quota_at`].
///
/// **Time going backwards.** A `now` earlier than one a limiter has already
/// seen never panics and never admits more than the quota allows; each
/// algorithm treats it as "no time has passed" or stricter.
///
/// ```
/// use std::time::Duration;
/// use ratewise::{ManualClock, Quota, RateLimiter, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(10)?.with_burst(20)?, clock.clone());
/// assert!(bucket.check(20)?.is_allowed());
/// assert!(!bucket.check(1)?.is_allowed());
/// clock.advance(Duration::from_millis(500));
/// assert_eq!(bucket.peek(1)?.remaining, 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait RateLimiter: Send + Sync {
    /// The current quota.
    fn quota(&self) -> Quota;

    /// Replaces the quota on a live limiter. Re-configuration never hands
    /// out capacity by itself: the number of available units is preserved,
    /// capped at the new burst (the rule of `x/time/rate`'s
    /// `SetLimit`/`SetBurst`). The [leaky queue](crate::LeakyQueue) instead
    /// keeps its scheduled departures and its latency bound (see its docs).
    fn set_quota_at(&self, quota: Quota, now: Timestamp);

    /// Admits a request of weight `n` at `now` if capacity allows, consuming
    /// it; a denied request consumes nothing.
    ///
    /// # Errors
    /// [`CheckError::ZeroWeight`] for `n == 0`; [`CheckError::ExceedsBurst`]
    /// when `n` is larger than the burst and so could never be admitted.
    fn check_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError>;

    /// What [`RateLimiter::check_at`] would answer, without consuming
    /// anything.
    ///
    /// # Errors
    /// As [`RateLimiter::check_at`].
    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError>;

    /// Reserves `n` units for the earliest time they are available, provided
    /// that is no more than `max_wait` after `now`; otherwise nothing changes.
    ///
    /// # Errors
    /// [`ReserveError::Invalid`] as for `check_at`;
    /// [`ReserveError::WouldWaitTooLong`] when the wait exceeds `max_wait`.
    fn reserve_within_at(
        &self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError>;

    /// Hands back a reservation at `now`. Does nothing if `now` is after the
    /// reservation's act time (it has been, or could have been, used).
    /// Returns the number of whole units given back, which is less than the
    /// reservation's weight when later reservations were already promised
    /// part of it.
    fn cancel_at(&self, reservation: Reservation, now: Timestamp) -> u64;

    /// The time on the limiter's clock.
    fn now(&self) -> Timestamp;

    /// [`RateLimiter::check_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`RateLimiter::check_at`].
    fn check(&self, n: u64) -> Result<Decision, CheckError> {
        self.check_at(n, self.now())
    }

    /// [`RateLimiter::peek_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`RateLimiter::check_at`].
    fn peek(&self, n: u64) -> Result<Decision, CheckError> {
        self.peek_at(n, self.now())
    }

    /// Reserves `n` units however long the wait.
    ///
    /// # Errors
    /// As [`RateLimiter::check_at`].
    fn reserve_at(&self, n: u64, now: Timestamp) -> Result<Reservation, CheckError> {
        match self.reserve_within_at(n, now, Duration::MAX) {
            Ok(r) => Ok(r),
            Err(ReserveError::Invalid(e)) => Err(e),
            // Unreachable with an unbounded wait, but stay panic-free: report
            // the request as one that can never succeed.
            Err(ReserveError::WouldWaitTooLong { .. }) => Err(CheckError::ExceedsBurst {
                requested: n,
                burst: self.quota().burst(),
            }),
        }
    }

    /// [`RateLimiter::reserve_at`] at the clock's current time.
    ///
    /// # Errors
    /// As [`RateLimiter::check_at`].
    fn reserve(&self, n: u64) -> Result<Reservation, CheckError> {
        self.reserve_at(n, self.now())
    }

    /// [`RateLimiter::cancel_at`] at the clock's current time.
    fn cancel(&self, reservation: Reservation) -> u64 {
        self.cancel_at(reservation, self.now())
    }

    /// [`RateLimiter::set_quota_at`] at the clock's current time.
    fn set_quota(&self, quota: Quota) {
        self.set_quota_at(quota, self.now())
    }

    /// Changes the rate (requests per second), keeping the burst.
    ///
    /// # Errors
    /// When `rate` is not a valid rate for the current burst.
    fn set_rate(&self, rate: f64) -> Result<(), QuotaError> {
        let q = self.quota().with_rate(rate)?;
        self.set_quota(q);
        Ok(())
    }

    /// Changes the burst, keeping the rate.
    ///
    /// # Errors
    /// When `burst` is zero or overflows with the current rate.
    fn set_burst(&self, burst: u64) -> Result<(), QuotaError> {
        let q = self.quota().with_burst(burst)?;
        self.set_quota(q);
        Ok(())
    }
}

impl<L: RateLimiter + ?Sized> RateLimiter for std::sync::Arc<L> {
    fn quota(&self) -> Quota {
        (**self).quota()
    }
    fn set_quota_at(&self, quota: Quota, now: Timestamp) {
        (**self).set_quota_at(quota, now)
    }
    fn check_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        (**self).check_at(n, now)
    }
    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        (**self).peek_at(n, now)
    }
    fn reserve_within_at(
        &self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError> {
        (**self).reserve_within_at(n, now, max_wait)
    }
    fn cancel_at(&self, reservation: Reservation, now: Timestamp) -> u64 {
        (**self).cancel_at(reservation, now)
    }
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// Validates a weight against a burst; shared by every algorithm.
#[inline]
pub(crate) fn validate_weight(n: u64, burst: u64) -> Result<(), CheckError> {
    if n == 0 {
        Err(CheckError::ZeroWeight)
    } else if n > burst {
        Err(CheckError::ExceedsBurst {
            requested: n,
            burst,
        })
    } else {
        Ok(())
    }
}
