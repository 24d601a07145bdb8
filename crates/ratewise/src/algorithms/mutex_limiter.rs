//! The check, peek and reserve paths shared by the mutex-protected limiters.
//!
//! Six algorithms — the fixed window, the sliding-window counter and log, the
//! leaky meter and queue, and the token bucket — keep their state behind one
//! `Mutex` and answer [`RateLimiter::check_at`], [`RateLimiter::peek_at`] and
//! [`RateLimiter::reserve_within_at`] in the same steps: lock, validate the
//! weight against the burst, bring the state up to `now` (never back in
//! time), work out where the request would go, admit it or not, and describe
//! the outcome. Those steps are written once here, and
//! [`impl_rate_limiter!`] writes each type's constructors (`new`,
//! `with_clock`, `clock`) and its whole `RateLimiter` and `Debug` impls
//! around them. What really differs — how time is settled, when a request
//! passes, what admitting it changes, what the decision reports — stays in
//! each algorithm's module, in its state's [`MutexState`] (or [`EarliestTimeState`])
//! impl; so do its starting state ([`InitialState`]), its cancellation and
//! re-configuration rules ([`ReconfigureCancel`]) and its `Debug` fields ([`DebugFields`]).
//!
//! # Invariants
//!
//! * The lock is held for the whole of one call, so the plan, the admission
//!   and the decision all see one state.
//! * `peek` runs the same [`MutexState::plan`] as `check` (bringing the state
//!   up to date — refilling, draining, pruning — is not consuming) and never
//!   admits; a denied `check` changes nothing more than `peek` would.
//! * A reservation that would wait longer than `max_wait` changes nothing
//!   more than the plan did.
//! * Nothing here allocates: a plan is a small `Copy` value on the stack
//!   (an algorithm's own admission may, as the log's ring grows).
//! * Mutex poisoning is ignored: every state is plain data left consistent
//!   between statements, so a panic elsewhere cannot leave it torn.
//!
//! [`RateLimiter::check_at`]: crate::RateLimiter::check_at
//! [`RateLimiter::peek_at`]: crate::RateLimiter::peek_at
//! [`RateLimiter::reserve_within_at`]: crate::RateLimiter::reserve_within_at

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::decision::Decision;
use crate::error::{CheckError, ReserveError};
use crate::limiter::{validate_weight, Reservation};
use crate::quota::Quota;
use crate::time::{duration_to_nanos_saturating, Timestamp};

/// Locks a limiter's state, ignoring poisoning (see the module docs).
pub(crate) fn lock<S>(state: &Mutex<S>) -> MutexGuard<'_, S> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a reservation books: its act time and the two bookkeeping words of
/// [`Reservation::new`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct BookedReservation {
    /// When the caller may act, in nanoseconds.
    pub(crate) act: u64,
    /// The algorithm's first bookkeeping word.
    pub(crate) mark: u64,
    /// The algorithm's second bookkeeping word.
    pub(crate) cost: u64,
}

/// Where a request would go, as an [`MutexState::plan`] found it.
pub(crate) trait PlanOutcome: Copy {
    /// Whether a check admits the planned request now.
    fn passes(&self) -> bool;

    /// How many nanoseconds a reservation of the planned request would wait,
    /// from the caller's `now`; compared with `max_wait`.
    fn reserve_wait(&self) -> u64;
}

/// A mutex-protected limiter state that can say where a request would go and
/// admit it there. The shared paths call, in order: [`MutexState::plan`],
/// then [`PlanOutcome::passes`], [`MutexState::admit`] and
/// [`MutexState::decision`] (check and peek), or [`PlanOutcome::reserve_wait`]
/// and [`MutexState::book`] (reserve).
pub(crate) trait MutexState {
    /// What [`MutexState::plan`] learns about one request.
    type Plan: PlanOutcome;

    /// The current quota.
    fn quota(&self) -> Quota;

    /// Brings the state up to the caller's `now` (an earlier `now` than one
    /// already seen is treated as no time passing) and works out where a
    /// request of weight `n` would go. Must not consume capacity.
    fn plan(&mut self, n: u64, now: u64) -> Self::Plan;

    /// Admits the planned request now (called only when it passes).
    fn admit(&mut self, n: u64, plan: &Self::Plan);

    /// The decision for the planned request: after admitting it if
    /// `allowed`, otherwise with the state unchanged since the plan.
    fn decision(&self, plan: &Self::Plan, allowed: bool) -> Decision;

    /// Books the planned request at the earliest time it can act.
    fn book(&mut self, n: u64, plan: &Self::Plan) -> BookedReservation;
}

/// A state that places every request at an absolute time — the earliest at
/// which it passes — and admits it there (the window counters and the log).
/// Every such state is an [`MutexState`]: a check passes when that time is
/// not after the clamped `now`, a denial's `retry_after` is that time, and a
/// reservation is booked at it.
pub(crate) trait EarliestTimeState {
    /// The current quota.
    fn quota(&self) -> Quota;

    /// Raises the caller's `now` to the latest time seen and brings the
    /// state up to it. Returns that clamped `now` and the time from which a
    /// request may be placed (not before the clamped `now`).
    fn settle(&mut self, now: u64) -> (u64, u64);

    /// The earliest time at or after `from` at which `n` more units pass.
    fn earliest(&self, n: u64, from: u64) -> u64;

    /// Counts `n` units as admitted at `at`.
    fn admit_at(&mut self, n: u64, at: u64);

    /// What a decision at the clamped `now` for a caller at `caller_now`
    /// reports beyond the verdict: the units free and the time by which
    /// everything counted so far stops counting.
    fn outlook(&self, caller_now: u64, now: u64) -> (u64, u64);

    /// A reservation's first bookkeeping word once it is admitted at `at`.
    fn mark(&self, at: u64) -> u64;
}

/// Raises `last` (the latest time a state has seen) to `now` and returns it
/// twice, as [`EarliestTimeState::settle`] does for a state that keeps nothing else
/// up to date.
pub(crate) fn raise(last: &mut u64, now: u64) -> (u64, u64) {
    *last = (*last).max(now);
    (*last, *last)
}

/// Raises `last` (the latest time a state has seen) to `now` and tells
/// whether `reservation`'s act time has passed on the limiter's clock: a
/// reservation past its act time may have been used, so cancelling it gives
/// nothing back.
pub(crate) fn past_act(last: &mut u64, now: Timestamp, reservation: &Reservation) -> bool {
    *last = (*last).max(now.as_nanos());
    *last > reservation.act_at.as_nanos()
}

/// Where an [`EarliestTimeState`] state places a request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    /// The caller's `now`.
    caller: u64,
    /// The clamped `now`.
    now: u64,
    /// The earliest time the request passes.
    at: u64,
}

impl PlanOutcome for Placed {
    fn passes(&self) -> bool {
        self.at <= self.now
    }

    fn reserve_wait(&self) -> u64 {
        self.at.saturating_sub(self.caller)
    }
}

impl<S: EarliestTimeState> MutexState for S {
    type Plan = Placed;

    fn quota(&self) -> Quota {
        EarliestTimeState::quota(self)
    }

    fn plan(&mut self, n: u64, now: u64) -> Placed {
        let (clamped, from) = self.settle(now);
        Placed {
            caller: now,
            now: clamped,
            at: self.earliest(n, from),
        }
    }

    fn admit(&mut self, n: u64, plan: &Placed) {
        self.admit_at(n, plan.now);
    }

    fn decision(&self, plan: &Placed, allowed: bool) -> Decision {
        let (remaining, reset_at) = self.outlook(plan.caller, plan.now);
        let after = |at: u64| Duration::from_nanos(at.saturating_sub(plan.caller));
        Decision {
            allowed,
            limit: EarliestTimeState::quota(self).burst(),
            remaining,
            reset_after: after(reset_at),
            retry_after: (!allowed).then(|| after(plan.at)),
            delay: Duration::ZERO,
        }
    }

    fn book(&mut self, n: u64, plan: &Placed) -> BookedReservation {
        self.admit_at(n, plan.at);
        BookedReservation {
            act: plan.at,
            mark: self.mark(plan.at),
            cost: n,
        }
    }
}

/// What [`RateLimiter::check_at`](crate::RateLimiter::check_at) and
/// [`RateLimiter::peek_at`](crate::RateLimiter::peek_at) answer.
pub(crate) type Checked = Result<Decision, CheckError>;

/// [`RateLimiter::check_at`](crate::RateLimiter::check_at) (`consume`) or
/// [`RateLimiter::peek_at`](crate::RateLimiter::peek_at) (not `consume`) for
/// a mutex-protected state.
pub(crate) fn decide<S: MutexState>(
    state: &Mutex<S>,
    n: u64,
    now: Timestamp,
    consume: bool,
) -> Checked {
    let mut s = lock(state);
    validate_weight(n, s.quota().burst())?;
    let plan = s.plan(n, now.as_nanos());
    let allowed = plan.passes();
    if allowed && consume {
        s.admit(n, &plan);
    }
    Ok(s.decision(&plan, allowed))
}

/// [`RateLimiter::reserve_within_at`](crate::RateLimiter::reserve_within_at)
/// for a mutex-protected state.
pub(crate) fn reserve<S: MutexState>(
    state: &Mutex<S>,
    n: u64,
    now: Timestamp,
    max_wait: Duration,
) -> Result<Reservation, ReserveError> {
    let mut s = lock(state);
    validate_weight(n, s.quota().burst())?;
    let plan = s.plan(n, now.as_nanos());
    let wait = plan.reserve_wait();
    // No reservation waits longer than MAX_RESERVE_WAIT: it keeps every
    // booked time a bounded distance past the timeline's end, well inside
    // `u64` (see `Timestamp`).
    let allowed = max_wait.min(crate::limiter::MAX_RESERVE_WAIT);
    if wait > duration_to_nanos_saturating(allowed) {
        return Err(ReserveError::WouldWaitTooLong {
            wait: Duration::from_nanos(wait),
            max_wait,
        });
    }
    let b = s.book(n, &plan);
    Ok(Reservation::new(
        n,
        now,
        Timestamp::from_nanos(b.act),
        b.mark,
        b.cost,
    ))
}

/// Re-configuration and cancellation on a locked state: each algorithm's
/// own rules (see its module docs), called by
/// [`RateLimiter::set_quota_at`](crate::RateLimiter::set_quota_at) and
/// [`RateLimiter::cancel_at`](crate::RateLimiter::cancel_at) with the lock
/// held.
pub(crate) trait ReconfigureCancel {
    /// Replaces the quota at `now`.
    fn set_quota(&mut self, quota: Quota, now: Timestamp);

    /// Hands back `reservation` at `now`; returns the whole units given back.
    fn cancel(&mut self, reservation: Reservation, now: Timestamp) -> u64;
}

/// How a mutex-protected limiter's state starts.
pub(crate) trait InitialState {
    /// The state of a limiter created at `now` under `quota`, before any
    /// request.
    fn fresh(quota: Quota, now: u64) -> Self;
}

/// The fields a mutex-protected limiter's `Debug` output shows after its
/// quota.
pub(crate) trait DebugFields {
    /// Adds the state's own fields to `d`.
    fn fields(&self, d: &mut std::fmt::DebugStruct<'_, '_>);
}

/// Implements the constructors, [`RateLimiter`](crate::RateLimiter) and
/// `Debug` for a mutex-protected limiter `$ty<C>`: a struct with the fields
/// `state: Mutex<S>`, where `S:` [`InitialState`] `+` [`MutexState`] `+` [`ReconfigureCancel`]
/// `+` [`DebugFields`], and `clock: C`, where `C: Clock`.
///
/// * `new(quota)` (on the production clock) and `with_clock(quota, clock)`
///   start from the state's [`InitialState::fresh`] at the clock's current time;
///   `$what` is what they make (their docs are `"$what, on …"`). `clock()`
///   returns the clock.
/// * Every `RateLimiter` method locks the state once and hands it to the
///   shared paths above or to the state's own [`ReconfigureCancel`] rules.
/// * `Debug` shows the type's name, its quota and the state's [`DebugFields`].
macro_rules! impl_rate_limiter {
    ($ty:ident, $what:literal) => {
        impl $ty<$crate::time::MonotonicClock> {
            #[doc = concat!($what, ", on the production clock.")]
            pub fn new(quota: $crate::quota::Quota) -> Self {
                Self::with_clock(quota, $crate::time::MonotonicClock::new())
            }
        }

        impl<C: $crate::time::Clock> $ty<C> {
            #[doc = concat!($what, ", on `clock`.")]
            pub fn with_clock(quota: $crate::quota::Quota, clock: C) -> Self {
                let now = $crate::time::Clock::now(&clock).as_nanos();
                $ty {
                    state: ::std::sync::Mutex::new(
                        $crate::algorithms::mutex_limiter::InitialState::fresh(quota, now),
                    ),
                    clock,
                }
            }

            /// The limiter's clock.
            pub fn clock(&self) -> &C {
                &self.clock
            }
        }

        impl<C: $crate::time::Clock> $crate::limiter::RateLimiter for $ty<C> {
            fn quota(&self) -> $crate::quota::Quota {
                $crate::algorithms::mutex_limiter::MutexState::quota(
                    &*$crate::algorithms::mutex_limiter::lock(&self.state),
                )
            }

            fn set_quota_at(&self, quota: $crate::quota::Quota, now: $crate::time::Timestamp) {
                $crate::algorithms::mutex_limiter::ReconfigureCancel::set_quota(
                    &mut *$crate::algorithms::mutex_limiter::lock(&self.state),
                    quota,
                    now,
                )
            }

            fn check_at(
                &self,
                n: u64,
                now: $crate::time::Timestamp,
            ) -> $crate::algorithms::mutex_limiter::Checked {
                $crate::algorithms::mutex_limiter::decide(&self.state, n, now, true)
            }

            fn peek_at(
                &self,
                n: u64,
                now: $crate::time::Timestamp,
            ) -> $crate::algorithms::mutex_limiter::Checked {
                $crate::algorithms::mutex_limiter::decide(&self.state, n, now, false)
            }

            fn reserve_within_at(
                &self,
                n: u64,
                now: $crate::time::Timestamp,
                max_wait: ::std::time::Duration,
            ) -> Result<$crate::limiter::Reservation, $crate::error::ReserveError> {
                $crate::algorithms::mutex_limiter::reserve(&self.state, n, now, max_wait)
            }

            fn cancel_at(
                &self,
                reservation: $crate::limiter::Reservation,
                now: $crate::time::Timestamp,
            ) -> u64 {
                $crate::algorithms::mutex_limiter::ReconfigureCancel::cancel(
                    &mut *$crate::algorithms::mutex_limiter::lock(&self.state),
                    reservation,
                    now,
                )
            }

            fn now(&self) -> $crate::time::Timestamp {
                $crate::time::Clock::now(&self.clock)
            }
        }

        impl<C> ::std::fmt::Debug for $ty<C> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let s = $crate::algorithms::mutex_limiter::lock(&self.state);
                let mut d = f.debug_struct(stringify!($ty));
                d.field(
                    "quota",
                    &$crate::algorithms::mutex_limiter::MutexState::quota(&*s),
                );
                $crate::algorithms::mutex_limiter::DebugFields::fields(&*s, &mut d);
                d.finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use impl_rate_limiter;
