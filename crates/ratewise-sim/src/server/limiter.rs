//! Any core ratewise limiter as the server: [`LimiterAlgorithm`] names
//! one, [`LimiterServer`] answers with its decisions.

use ratewise::{
    FixedWindow, Gcra, LeakyMeter, LeakyQueue, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, Timestamp, TokenBucket,
};
use ratewise_client::ServerHints;
use serde::Deserialize;

use crate::server::model::{Response, ServerModel};

/// A core algorithm usable as a server.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LimiterAlgorithm {
    /// [`ratewise::Gcra`].
    Gcra,
    /// [`ratewise::TokenBucket`].
    TokenBucket,
    /// [`ratewise::FixedWindow`] (window = burst / rate).
    FixedWindow,
    /// [`ratewise::SlidingWindowLog`].
    SlidingWindowLog,
    /// [`ratewise::SlidingWindowCounter`].
    SlidingWindowCounter,
    /// [`ratewise::LeakyMeter`].
    LeakyMeter,
    /// [`ratewise::LeakyQueue`]: admitted requests are answered at their
    /// scheduled departure.
    LeakyQueue,
}

impl LimiterAlgorithm {
    /// Every core algorithm, GCRA and the token bucket (the two that can
    /// start empty) first.
    pub const ALL: [LimiterAlgorithm; 7] = [
        LimiterAlgorithm::Gcra,
        LimiterAlgorithm::TokenBucket,
        LimiterAlgorithm::FixedWindow,
        LimiterAlgorithm::SlidingWindowLog,
        LimiterAlgorithm::SlidingWindowCounter,
        LimiterAlgorithm::LeakyMeter,
        LimiterAlgorithm::LeakyQueue,
    ];
}

/// A fresh core limiter of `algorithm` with quota `q` on its own manual
/// clock (the simulator passes every time explicitly), full or — GCRA and
/// the token bucket only — empty at time zero.
pub(crate) fn core_limiter(
    algorithm: LimiterAlgorithm,
    q: Quota,
    start_full: bool,
) -> Box<dyn RateLimiter> {
    let clock = ManualClock::new();
    match (algorithm, start_full) {
        (LimiterAlgorithm::Gcra, true) => Box::new(Gcra::with_clock(q, clock)),
        (LimiterAlgorithm::Gcra, false) => Box::new(Gcra::empty_with_clock(q, clock)),
        (LimiterAlgorithm::TokenBucket, true) => Box::new(TokenBucket::with_clock(q, clock)),
        (LimiterAlgorithm::TokenBucket, false) => Box::new(TokenBucket::empty_with_clock(q, clock)),
        (LimiterAlgorithm::FixedWindow, _) => Box::new(FixedWindow::with_clock(q, clock)),
        (LimiterAlgorithm::SlidingWindowLog, _) => Box::new(SlidingWindowLog::with_clock(q, clock)),
        (LimiterAlgorithm::SlidingWindowCounter, _) => {
            Box::new(SlidingWindowCounter::with_clock(q, clock))
        }
        (LimiterAlgorithm::LeakyMeter, _) => Box::new(LeakyMeter::with_clock(q, clock)),
        (LimiterAlgorithm::LeakyQueue, _) => Box::new(LeakyQueue::with_clock(q, clock)),
    }
}

/// Any core [`RateLimiter`] as a server, driven through `check_at` with the
/// simulated time. Sends `RateLimit-Remaining`, `RateLimit-Limit` and
/// `Retry-After` from the limiter's [`ratewise::Decision`].
pub struct LimiterServer {
    limiter: Box<dyn RateLimiter>,
    start_full: bool,
}

impl LimiterServer {
    /// Wraps `limiter`; `start_full` says whether it began with its burst.
    pub fn new(limiter: Box<dyn RateLimiter>, start_full: bool) -> Self {
        LimiterServer {
            limiter,
            start_full,
        }
    }
}

impl ServerModel for LimiterServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        match self.limiter.check_at(1, now) {
            Ok(d) => Response {
                throttled: !d.allowed,
                hints: ServerHints {
                    remaining: Some(d.remaining),
                    limit: Some(d.limit),
                    retry_after: d.retry_after,
                    reset_after: Some(d.reset_after),
                    ..ServerHints::default()
                },
                delay: d.delay,
                wire: None,
            },
            // Weight 1 never exceeds a burst of at least 1; treat the
            // impossible case as a refusal rather than panicking.
            Err(_) => Response {
                throttled: true,
                ..Response::default()
            },
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.limiter
            .peek_at(1, now)
            .map_or(0.0, |d| d.remaining as f64)
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let q = self.limiter.quota();
        let initial = if self.start_full {
            q.burst() as f64
        } else {
            0.0
        };
        initial + end.as_secs_f64() * q.rate_per_second()
    }
}
