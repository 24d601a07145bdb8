//! The flood guard ("flood buster" of reference 004): when the quota is known
//! — N requests per window — keep a log of our own recent sends and, before
//! each send, wait exactly as long as keeps the last window under N.
//!
//! This is a *sliding log* of one's own traffic, the most precise way to stay
//! under a known quota: the wait is `oldest_in_window + window − now` when the
//! log is full, and zero otherwise. Every attempt, retries included, is logged
//! at the instant it is allowed to go (`now + wait`), so concurrent callers
//! sharing one guard are spread out rather than released together.
//!
//! The quota alone cannot protect against other clients spending the same
//! quota, so throttled responses still back off (Google's 1 s, 2 s, 4 s … +
//! random ≤ 1 s by default, the other half of reference 004), and the retry is
//! logged like any send.
//!
//! Sends are logged in time order, so a retry logged for a later instant
//! also holds back later callers of the *same* guard until then. A guard is
//! meant to be owned by one caller at a time (like every [`Strategy`]); many
//! tasks should share a [`Throttle`](super::throttle::Throttle) instead.
//!
//! Invariant: for every window-long interval `[t, t + window)`, at most `N`
//! logged sends fall inside it. Memory is `N` timestamps.

use std::collections::VecDeque;
use std::time::Duration;

use super::backoff::{backoff_next, Backoff, BackoffConfig};
use super::config::ConfigError;
use super::{Next, Outcome, Strategy};
use ratewise::time::Timestamp;

/// The largest quota count a flood guard accepts (its log holds that many
/// timestamps).
pub const MAX_FLOOD_GUARD_COUNT: u32 = 1_000_000;

/// A log of our own sends that keeps them under `count` per `window`.
#[derive(Clone, Debug)]
pub struct FloodGuard {
    count: usize,
    window: Duration,
    log: VecDeque<Timestamp>,
}

impl FloodGuard {
    /// A guard for a quota of `count` sends per `window`.
    ///
    /// # Errors
    /// [`ConfigError`] for a zero count, a count above
    /// [`MAX_FLOOD_GUARD_COUNT`], or a zero window.
    pub fn new(count: u32, window: Duration) -> Result<Self, ConfigError> {
        if count == 0 || count > MAX_FLOOD_GUARD_COUNT {
            return Err(ConfigError::OutOfRange {
                field: "count",
                expected: "between 1 and 1 000 000",
                value: f64::from(count),
            });
        }
        if window.is_zero() {
            return Err(ConfigError::OutOfRange {
                field: "window",
                expected: "longer than zero",
                value: 0.0,
            });
        }
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        Ok(FloodGuard {
            count,
            window,
            log: VecDeque::with_capacity(count.min(4096)),
        })
    }

    /// How long after `now` a send could go, without logging it.
    pub fn wait_at(&self, now: Timestamp) -> Duration {
        self.wait_not_before(now, now)
    }

    fn wait_not_before(&self, now: Timestamp, not_before: Timestamp) -> Duration {
        let at = now.max(not_before);
        let go = if self.log.len() < self.count {
            at
        } else {
            // The log holds the last `count` sends, oldest first; the next
            // may go once the oldest has left the window.
            self.log
                .front()
                .map_or(at, |oldest| at.max(oldest.saturating_add(self.window)))
        };
        go.saturating_duration_since(now)
    }

    /// Logs a send at the earliest instant ≥ `not_before` that keeps the quota,
    /// and returns how long after `now` that is.
    pub fn acquire_at(&mut self, now: Timestamp, not_before: Timestamp) -> Duration {
        let wait = self.wait_not_before(now, not_before);
        let send = now.saturating_add(wait);
        if self.log.len() >= self.count {
            self.log.pop_front();
        }
        // Sends are logged in order: a later `now` never precedes an earlier
        // logged send's slot, because each slot is at or after the previous.
        let send = self.log.back().map_or(send, |last| send.max(*last));
        self.log.push_back(send);
        send.saturating_duration_since(now)
    }

    /// Sends logged within the window ending at `now`.
    pub fn in_window(&self, now: Timestamp) -> usize {
        let start = now.saturating_sub(self.window);
        self.log
            .iter()
            .filter(|t| **t > start && **t <= now)
            .count()
    }
}

/// [`FloodGuard`] before every attempt plus a backoff on throttles.
#[derive(Clone, Debug)]
pub struct FloodGuardStrategy {
    guard: FloodGuard,
    backoff: Backoff,
    last: Duration,
}

impl FloodGuardStrategy {
    /// A guard for `count` per `window`, backing off with `backoff`.
    ///
    /// # Errors
    /// As [`FloodGuard::new`] and [`Backoff::new`].
    pub fn new(
        count: u32,
        window: Duration,
        backoff: BackoffConfig,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        Ok(FloodGuardStrategy {
            guard: FloodGuard::new(count, window)?,
            backoff: Backoff::new(backoff, seed)?,
            last: Duration::ZERO,
        })
    }

    /// A guard with Google's backoff (reference 004).
    ///
    /// # Errors
    /// As [`FloodGuard::new`].
    pub fn google(count: u32, window: Duration, seed: u64) -> Result<Self, ConfigError> {
        FloodGuardStrategy::new(count, window, BackoffConfig::google(), seed)
    }

    /// The guard.
    pub fn guard(&self) -> &FloodGuard {
        &self.guard
    }
}

impl Strategy for FloodGuardStrategy {
    fn name(&self) -> &str {
        "flood_guard"
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        self.backoff.reset();
        self.last = self.guard.acquire_at(now, now);
        self.last
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        match backoff_next(&mut self.backoff, outcome) {
            Next::Retry(d) => {
                self.last = self.guard.acquire_at(now, now.saturating_add(d));
                Next::Retry(self.last)
            }
            end => end,
        }
    }

    fn current_delay(&self) -> Duration {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{prop_assert, proptest};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_exactly_until_the_oldest_leaves_the_window() {
        let mut g = FloodGuard::new(3, Duration::from_secs(1)).unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(g.acquire_at(t, t), Duration::ZERO);
        assert_eq!(g.acquire_at(t + ms(100), t + ms(100)), Duration::ZERO);
        assert_eq!(g.acquire_at(t + ms(200), t + ms(200)), Duration::ZERO);
        // Fourth send at 300 ms must wait for the first (t = 0) to expire.
        assert_eq!(g.wait_at(t + ms(300)), ms(700));
        assert_eq!(g.acquire_at(t + ms(300), t + ms(300)), ms(700));
        // The fifth waits for the 100 ms send: until 1.1 s.
        assert_eq!(g.acquire_at(t + ms(300), t + ms(300)), ms(800));
    }

    #[test]
    fn invalid_quotas() {
        assert!(FloodGuard::new(0, Duration::from_secs(1)).is_err());
        assert!(FloodGuard::new(1, Duration::ZERO).is_err());
        assert!(FloodGuard::new(MAX_FLOOD_GUARD_COUNT + 1, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn strategy_logs_retries_too() {
        let mut s = FloodGuardStrategy::new(
            2,
            Duration::from_secs(10),
            BackoffConfig::constant(ms(100)).with_max_retries(5),
            0,
        )
        .unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(s.before_call(t), Duration::ZERO);
        // The retry after 100 ms is the second send: allowed then.
        assert_eq!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(ms(100))
        );
        // A third send must wait for the first to leave the 10 s window.
        let t2 = t + ms(100);
        assert_eq!(
            s.after_attempt(t2, &Outcome::throttled()),
            Next::Retry(Duration::from_secs(10) - ms(100))
        );
    }

    proptest! {

        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// A long random run: a quota of N per window is never
        /// exceeded, whatever the arrival pattern.
        #[test]
        fn never_exceeds_its_quota(
            count in 1u32..20,
            window_ms in 1u64..5_000,
            gaps in proptest::collection::vec(0u64..2_000, 1..400),
        ) {
            let window = ms(window_ms);
            let mut g = FloodGuard::new(count, window).unwrap();
            let mut now = Timestamp::ZERO;
            let mut sends = vec![];
            for gap in gaps {
                now = now + ms(gap);
                let wait = g.acquire_at(now, now);
                sends.push(now + wait);
            }
            sends.sort();
            for (i, start) in sends.iter().enumerate() {
                let end = start.saturating_add(window);
                let n = sends[i..].iter().take_while(|t| **t < end).count();
                prop_assert!(n <= count as usize, "{} sends in one window, quota {}", n, count);
            }
        }
    }
}
