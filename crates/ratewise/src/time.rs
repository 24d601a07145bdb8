//! Time as the algorithms see it: a [`Timestamp`] handed in by the caller, and
//! the [`Clock`]s that drivers use to produce one.
//!
//! Every algorithm in ratewise is a state machine that is *told* the time. That
//! is what lets the simulator run thirty minutes of traffic in milliseconds and
//! lets tests reproduce a worked example to the nanosecond. Only drivers read a
//! clock, and they do it through the [`Clock`] trait:
//!
//! * [`MonotonicClock`] — the production clock. It reads the CPU's time-stamp
//!   counter through `quanta` (about half the cost of `std::time::Instant`),
//!   calibrated to nanoseconds and never going backwards.
//! * [`CoarseClock`] — the production clock read once per `resolution` by a
//!   background thread and handed out as one atomic load: cheaper still, at
//!   the price of a lag of up to `resolution` (which only makes a limiter
//!   stricter).
//! * [`ManualClock`] — a clock that only moves when told to. Clones share one
//!   underlying time, so a test can hand one clone to a limiter and advance
//!   another.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::time::{Clock, ManualClock, Timestamp};
//!
//! let clock = ManualClock::new();
//! let seen_by_limiter = clock.clone();
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(seen_by_limiter.now(), Timestamp::from_nanos(1_500_000_000));
//! ```

mod coarse;

pub use coarse::{CoarseClock, CoarseClockError, MAX_COARSE_RESOLUTION, MIN_COARSE_RESOLUTION};

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A point in monotonic time: nanoseconds since the origin of the clock that
/// produced it.
///
/// Timestamps from different clocks are not comparable. Arithmetic saturates
/// instead of overflowing or panicking: `earlier - later` is a zero duration,
/// and adding a huge duration pins the result at [`Timestamp::MAX`].
///
/// **The timeline** runs from [`Timestamp::ZERO`] to [`Timestamp::MAX`],
/// 2^63 − 1 ns: about 292 years, the range of a signed 64-bit nanosecond
/// count (so Unix-epoch nanoseconds work until the year 2262, like Go's
/// `UnixNano` and `i64` nanoseconds elsewhere). A larger value given to
/// [`Timestamp::from_nanos`] is pinned at `MAX`; time then stands still, which
/// only ever makes a limiter stricter. Every limiter answers exactly on the
/// whole timeline: with a quota's window at most 2^61 ns and reservations
/// waiting at most [`MAX_RESERVE_WAIT`](crate::limiter::MAX_RESERVE_WAIT), a time
/// plus what the algorithms add to it stays inside `u64`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's origin.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The latest instant of the timeline: 2^63 − 1 ns (about 292 years)
    /// after the origin.
    pub const MAX: Timestamp = Timestamp(i64::MAX as u64);

    /// A timestamp `nanos` nanoseconds after the origin, pinned at
    /// [`Timestamp::MAX`].
    pub const fn from_nanos(nanos: u64) -> Self {
        if nanos > Timestamp::MAX.0 {
            Timestamp::MAX
        } else {
            Timestamp(nanos)
        }
    }

    /// A timestamp `d` after the origin, saturating at [`Timestamp::MAX`].
    pub fn from_duration(d: Duration) -> Self {
        Timestamp::from_nanos(duration_to_nanos_saturating(d))
    }

    /// A timestamp `secs` seconds (fractional allowed) after the origin.
    /// Negative or NaN inputs give the origin; huge ones saturate.
    pub fn from_secs_f64(secs: f64) -> Self {
        if secs.is_nan() || secs <= 0.0 {
            return Timestamp::ZERO;
        }
        // Saturating float-to-int conversion, then pinned at MAX.
        Timestamp::from_nanos((secs * 1e9) as u64)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since the origin as a `Duration`.
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// Seconds since the origin, as a float (for reports and charts).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// How long after `earlier` this is; zero if `earlier` is actually later.
    pub const fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Timestamp> {
        let nanos = u64::try_from(d.as_nanos()).ok()?;
        self.0
            .checked_add(nanos)
            .filter(|&t| t <= Timestamp::MAX.0)
            .map(Timestamp)
    }

    /// `self + d`, pinned at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp::from_nanos(self.0.saturating_add(duration_to_nanos_saturating(d)))
    }

    /// `self - d`, pinned at the origin.
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_to_nanos_saturating(d)))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturating: see [`Timestamp::saturating_add`].
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturating: see [`Timestamp::saturating_sub`].
    fn sub(self, rhs: Duration) -> Timestamp {
        self.saturating_sub(rhs)
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    /// Saturating: see [`Timestamp::saturating_duration_since`].
    fn sub(self, rhs: Timestamp) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

/// Whole nanoseconds in `d`, saturating at `u64::MAX` (about 584 years).
pub(crate) fn duration_to_nanos_saturating(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of monotonic time.
///
/// Implementations must never go backwards between two calls on the same
/// clock. (The algorithms tolerate it anyway — a `now` earlier than one
/// already seen is treated conservatively — but a clock that does it is a bug.)
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The production clock: the CPU's time-stamp counter via `quanta`, scaled to
/// nanoseconds since this clock was created.
///
/// Cloning is cheap and clones share the origin. Where the time-stamp counter
/// is not usable (some virtual machines, non-x86 targets) `quanta` falls back
/// to the operating system's monotonic clock by itself.
#[derive(Clone)]
pub struct MonotonicClock {
    inner: quanta::Clock,
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let inner = quanta::Clock::new();
        let origin = inner.raw();
        MonotonicClock { inner, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonotonicClock").finish_non_exhaustive()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        let raw = self.inner.raw();
        // Below Timestamp::MAX for the first 292 years after the clock was
        // made, so the hot path skips `from_nanos`'s clamp.
        Timestamp(self.inner.delta_as_nanos(self.origin, raw))
    }
}

/// A clock built on `std::time::Instant`, kept for comparison benchmarks and
/// for platforms where a user prefers the standard library's clock.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: std::time::Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        StdClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        StdClock::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(duration_to_nanos_saturating(self.origin.elapsed()))
    }
}

/// A clock that moves only when told to. Clones share the same time, and it
/// can be moved from any thread.
///
/// Starts at [`Timestamp::ZERO`] unless built with [`ManualClock::starting_at`].
/// [`ManualClock::set`] may move time backwards on purpose, to test how an
/// algorithm copes with a misbehaving clock.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at the origin.
    pub fn new() -> Self {
        ManualClock::default()
    }

    /// A clock at `start`.
    pub fn starting_at(start: Timestamp) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start.as_nanos())),
        }
    }

    /// Moves time forward by `d` (saturating) and returns the new time.
    pub fn advance(&self, d: Duration) -> Timestamp {
        let step = duration_to_nanos_saturating(d);
        let mut current = self.nanos.load(Ordering::Acquire);
        loop {
            let next = current.saturating_add(step).min(Timestamp::MAX.0);
            match self.nanos.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Timestamp(next),
                Err(actual) => current = actual,
            }
        }
    }

    /// Sets the time, forwards or backwards.
    pub fn set(&self, t: Timestamp) {
        self.nanos.store(t.as_nanos(), Ordering::Release);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp(self.nanos.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_nanos(10);
        assert_eq!(t - Timestamp::from_nanos(20), Duration::ZERO);
        assert_eq!(t - Duration::from_nanos(20), Timestamp::ZERO);
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(t.checked_add(Duration::MAX), None);
        assert_eq!(Timestamp::from_secs_f64(f64::NAN), Timestamp::ZERO);
        assert_eq!(Timestamp::from_secs_f64(1e30), Timestamp::MAX);
        assert_eq!(Timestamp::from_secs_f64(1.5).as_nanos(), 1_500_000_000);
    }

    #[test]
    fn manual_clock_is_shared_between_clones_and_threads() {
        let clock = ManualClock::new();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = clock.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.advance(Duration::from_nanos(1));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(clock.now(), Timestamp::from_nanos(4000));
        clock.set(Timestamp::from_nanos(5));
        assert_eq!(clock.now(), Timestamp::from_nanos(5));
    }

    #[test]
    fn production_clocks_are_monotonic() {
        let q = MonotonicClock::new();
        let s = StdClock::new();
        let (mut lq, mut ls) = (q.now(), s.now());
        for _ in 0..10_000 {
            let (nq, ns) = (q.now(), s.now());
            assert!(nq >= lq && ns >= ls);
            lq = nq;
            ls = ns;
        }
    }
}
