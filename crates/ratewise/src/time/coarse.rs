//! [`CoarseClock`]: the time as one atomic load, kept current by a
//! background thread.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::{Clock, MonotonicClock, Timestamp};

/// The finest resolution [`CoarseClock`] accepts (a thread that woke more
/// often would cost more than the clock reads it saves).
pub const MIN_COARSE_RESOLUTION: Duration = Duration::from_micros(50);

/// The coarsest resolution [`CoarseClock`] accepts: one second. Beyond it
/// the staleness would show in every `Retry-After`.
pub const MAX_COARSE_RESOLUTION: Duration = Duration::from_secs(1);

/// A production clock read with one atomic load: a background thread stores
/// [`MonotonicClock`]'s time every `resolution`, and [`Clock::now`] returns
/// the latest store.
///
/// Why: reading the time-stamp counter and scaling it is most of what an
/// uncontended check costs, while a load of a line that changes once per
/// `resolution` costs under a nanosecond. A caller making millions of
/// checks a second may want that back.
///
/// What it costs:
/// * **Staleness.** `now` lags real time by up to `resolution`, more while
///   the machine is too busy to schedule the upkeep thread. A lagging clock
///   only makes a limiter stricter: it sees less time pass, so it refills
///   less, never more, and the `Retry-After` and reset it reports are at
///   most that much later than exact. It never goes backwards.
/// * **A thread** per clock (clones share it), parked between updates; it
///   stops when the last clone is dropped.
/// * **Steps.** Requests inside one step see the same instant. With a
///   resolution much shorter than the quota's emission interval this is
///   invisible; a quota of 10 000 per second (an interval of 100 µs) on a
///   1 ms clock refills in bursts of 10.
///
/// ```
/// use std::time::Duration;
/// use ratewise::{CoarseClock, Gcra, Quota, RateLimiter};
///
/// let clock = CoarseClock::new(Duration::from_millis(1))?;
/// let limiter = Gcra::with_clock(Quota::per_second(100)?, clock);
/// assert!(limiter.check(1)?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    now: Arc<CachePadded<AtomicU64>>,
    resolution: Duration,
    /// Dropped with the last clone, which stops the thread.
    _upkeep: Arc<Upkeep>,
}

/// Why a [`CoarseClock`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum CoarseClockError {
    /// The resolution is outside what the clock accepts.
    #[error(
        "a coarse clock's resolution must be between {min:?} and {max:?}, not {given:?}",
        min = MIN_COARSE_RESOLUTION,
        max = MAX_COARSE_RESOLUTION
    )]
    Resolution {
        /// The resolution asked for.
        given: Duration,
    },
    /// The operating system would not start the upkeep thread.
    #[error("could not start the coarse clock's upkeep thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// The upkeep thread and its stop flag.
struct Upkeep {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // The thread exits within one wake-up; a panic in it (there is
            // nothing in its loop that panics) is not this drop's to raise.
            let _ = thread.join();
        }
    }
}

impl CoarseClock {
    /// A clock updated every `resolution`, its origin now.
    ///
    /// # Errors
    /// [`CoarseClockError::Resolution`] outside
    /// [`MIN_COARSE_RESOLUTION`]..=[`MAX_COARSE_RESOLUTION`];
    /// [`CoarseClockError::Spawn`] if the thread cannot be started.
    pub fn new(resolution: Duration) -> Result<CoarseClock, CoarseClockError> {
        if !(MIN_COARSE_RESOLUTION..=MAX_COARSE_RESOLUTION).contains(&resolution) {
            return Err(CoarseClockError::Resolution { given: resolution });
        }
        let precise = MonotonicClock::new();
        let now = Arc::new(CachePadded::new(AtomicU64::new(precise.now().as_nanos())));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let now = Arc::clone(&now);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("ratewise-coarse-clock".into())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(resolution);
                        // One writer, and `precise` never goes backwards:
                        // every reader sees a non-decreasing time.
                        now.store(precise.now().as_nanos(), Ordering::Release);
                    }
                })?
        };
        Ok(CoarseClock {
            now,
            resolution,
            _upkeep: Arc::new(Upkeep {
                stop,
                thread: Some(thread),
            }),
        })
    }

    /// How often the time is refreshed.
    pub fn resolution(&self) -> Duration {
        self.resolution
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("resolution", &self.resolution)
            .field("now", &self.now())
            .finish()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Spins until `clock` shows a time past `after`, failing after `limit`
    /// of real time (the wait is for the upkeep thread, not a guess).
    fn wait_past(clock: &CoarseClock, after: Timestamp, limit: Duration) -> Timestamp {
        let deadline = Instant::now() + limit;
        loop {
            let now = clock.now();
            if now > after {
                return now;
            }
            assert!(Instant::now() < deadline, "the coarse clock stopped");
            std::hint::spin_loop();
        }
    }

    #[test]
    fn resolutions_out_of_range_are_refused() {
        for bad in [
            Duration::ZERO,
            Duration::from_micros(49),
            Duration::from_millis(1001),
        ] {
            let err = CoarseClock::new(bad).unwrap_err();
            assert!(matches!(err, CoarseClockError::Resolution { given } if given == bad));
            assert!(err.to_string().contains("between"), "{err}");
        }
    }

    #[test]
    fn it_advances_and_never_goes_back_on_any_thread() {
        let clock = CoarseClock::new(Duration::from_micros(100)).unwrap();
        assert_eq!(clock.resolution(), Duration::from_micros(100));
        let start = clock.now();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                let clock = clock.clone();
                scope.spawn(move || {
                    let mut last = clock.now();
                    let mut steps = 0;
                    while steps < 20 {
                        let now = clock.now();
                        assert!(now >= last, "went back from {last:?} to {now:?}");
                        if now > last {
                            steps += 1;
                        }
                        last = now;
                        std::hint::spin_loop();
                    }
                });
            }
        });
        let later = wait_past(&clock, start, Duration::from_secs(10));
        assert!(later > start);
    }

    #[test]
    fn clones_share_one_time_and_the_thread_stops_with_the_last() {
        let clock = CoarseClock::new(Duration::from_micros(200)).unwrap();
        let stop = Arc::clone(&clock._upkeep.stop);
        let clone = clock.clone();
        let t = wait_past(&clock, Timestamp::ZERO, Duration::from_secs(10));
        assert!(clone.now() >= t, "a clone reads the same time");
        drop(clock);
        assert!(!stop.load(Ordering::Acquire), "a clone still uses it");
        let t = wait_past(&clone, t, Duration::from_secs(10));
        assert!(t > Timestamp::ZERO);
        drop(clone); // joins the thread
        assert!(stop.load(Ordering::Acquire));
    }
}
