//! Client-side adaptive throttling from Google's SRE book (chapter 21,
//! "Handling Overload"): when the backend keeps refusing, refuse locally.
//!
//! Over a sliding window (2 minutes) the client counts `requests` (every call
//! the application attempted, including those rejected locally) and `accepts`
//! (calls the backend accepted). It sends normally until `requests` reaches
//! `K × accepts`, then rejects each new call locally with probability
//!
//! `p = max(0, (requests − K·accepts) / (requests + 1))`.
//!
//! With `K = 2` about one refused request gets through per accepted one, so
//! recovery is noticed quickly while a dead backend sees at most about half
//! the demand. Local rejections count as requests, so `p` rises while the
//! backend refuses and decays as the window slides.
//!
//! What counts as "accepted": a success, or a failure the backend produced
//! on its own terms (a client error). Throttles, server errors and timeouts
//! are not accepts.
//!
//! The window is kept in fixed buckets (120 of one second by default), so the
//! state is a small ring of counters and the answer is exact at bucket
//! granularity.

use std::time::Duration;

use crate::client::JitterRng;
use rand::{Rng, SeedableRng};

use super::config::{at_least, ConfigError};
use super::{Outcome, Signal};
use crate::time::{duration_to_nanos_saturating, Timestamp};

/// Parameters of [`SreThrottler`], with the SRE book's values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SreConfig {
    /// The multiplier `K` (2). Lower is more aggressive; must be ≥ 1.
    pub k: f64,
    /// The window (2 minutes).
    pub window: Duration,
    /// Buckets the window is kept in (120; 1 to 3600).
    pub buckets: u32,
}

impl Default for SreConfig {
    fn default() -> Self {
        SreConfig {
            k: 2.0,
            window: Duration::from_secs(120),
            buckets: 120,
        }
    }
}

/// The SRE book's client-side adaptive throttle.
#[derive(Clone, Debug)]
pub struct SreThrottler {
    k: f64,
    bucket_nanos: u64,
    /// `(requests, accepts)` per bucket, a ring indexed by absolute bucket
    /// number modulo its length.
    ring: Vec<(u64, u64)>,
    /// Absolute number of the newest bucket written.
    head: u64,
    rng: JitterRng,
}

impl SreThrottler {
    /// A throttler with `config`, drawing its coin flips from `seed`.
    ///
    /// # Errors
    /// [`ConfigError`] for `k < 1`, a window shorter than its bucket count in
    /// nanoseconds, or a bucket count outside 1–3600.
    pub fn new(config: SreConfig, seed: u64) -> Result<Self, ConfigError> {
        at_least("k", config.k, 1.0)?;
        if config.buckets == 0 || config.buckets > 3600 {
            return Err(ConfigError::OutOfRange {
                field: "buckets",
                expected: "between 1 and 3600",
                value: f64::from(config.buckets),
            });
        }
        let bucket_nanos = duration_to_nanos_saturating(config.window) / u64::from(config.buckets);
        if bucket_nanos == 0 {
            return Err(ConfigError::Inconsistent(
                "the window must be at least one nanosecond per bucket",
            ));
        }
        Ok(SreThrottler {
            k: config.k,
            bucket_nanos,
            ring: vec![(0, 0); config.buckets as usize],
            head: 0,
            rng: JitterRng::seed_from_u64(seed),
        })
    }

    /// A fresh copy (empty window) drawing its coin flips from `seed`.
    pub fn with_seed(&self, seed: u64) -> SreThrottler {
        SreThrottler {
            k: self.k,
            bucket_nanos: self.bucket_nanos,
            ring: vec![(0, 0); self.ring.len()],
            head: 0,
            rng: JitterRng::seed_from_u64(seed),
        }
    }

    /// Moves the window to `now`, clearing buckets that slid out; returns the
    /// ring slot of `now`'s bucket.
    fn advance(&mut self, now: Timestamp) -> usize {
        let n = self.ring.len() as u64;
        let bucket = now.as_nanos() / self.bucket_nanos;
        if bucket > self.head {
            let stale = (bucket - self.head).min(n);
            for i in 0..stale {
                let idx = ((bucket - i) % n) as usize;
                if let Some(slot) = self.ring.get_mut(idx) {
                    *slot = (0, 0);
                }
            }
            self.head = bucket;
        }
        // A `now` older than the head counts in the head bucket.
        (self.head % n) as usize
    }

    /// `(requests, accepts)` in the window ending at `now`.
    pub fn counts(&mut self, now: Timestamp) -> (u64, u64) {
        self.advance(now);
        self.ring
            .iter()
            .fold((0, 0), |(r, a), (dr, da)| (r + dr, a + da))
    }

    /// The probability that a call at `now` is rejected locally.
    pub fn rejection_probability(&mut self, now: Timestamp) -> f64 {
        let (requests, accepts) = self.counts(now);
        let r = requests as f64;
        ((r - self.k * accepts as f64) / (r + 1.0)).max(0.0)
    }

    /// Counts a request at `now` and decides whether to send it: `false`
    /// means "reject locally, do not send".
    pub fn should_send(&mut self, now: Timestamp) -> bool {
        let p = self.rejection_probability(now);
        let slot = self.advance(now);
        if let Some(s) = self.ring.get_mut(slot) {
            s.0 += 1;
        }
        p <= 0.0 || self.rng.random::<f64>() >= p
    }

    /// Records what a sent request produced at `now`.
    pub fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) {
        if matches!(outcome.signal, Signal::Success | Signal::Failure) {
            let slot = self.advance(now);
            if let Some(s) = self.ring.get_mut(slot) {
                s.1 += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Timestamp {
        Timestamp::from_nanos(s * 1_000_000_000)
    }

    #[test]
    fn healthy_backend_never_rejects() {
        let mut t = SreThrottler::new(SreConfig::default(), 1).unwrap();
        for i in 0..1000 {
            assert!(t.should_send(secs(i / 10)));
            t.on_outcome(secs(i / 10), &Outcome::success());
        }
        assert_eq!(t.rejection_probability(secs(100)), 0.0);
    }

    #[test]
    fn probability_follows_the_formula() {
        let mut t = SreThrottler::new(SreConfig::default(), 1).unwrap();
        // 10 accepted, then 90 refused.
        for _ in 0..10 {
            t.should_send(secs(1));
            t.on_outcome(secs(1), &Outcome::success());
        }
        for _ in 0..90 {
            t.should_send(secs(2));
            t.on_outcome(secs(2), &Outcome::throttled());
        }
        let p = t.rejection_probability(secs(3));
        assert!((p - (100.0 - 20.0) / 101.0).abs() < 1e-12, "{p}");
        // Locally rejected calls count as requests, so p rises.
        let mut rejected = 0;
        for _ in 0..1000 {
            if !t.should_send(secs(3)) {
                rejected += 1;
            }
        }
        assert!(rejected > 700, "{rejected}");
        assert!(t.rejection_probability(secs(3)) > p);
        // Two minutes later the window has forgotten it all.
        assert_eq!(t.rejection_probability(secs(3 + 120)), 0.0);
    }

    #[test]
    fn k_two_lets_about_one_refusal_through_per_accept() {
        // Backend that accepts one in three: the client keeps sending until
        // requests ≈ 2 × accepts, so its local rejection stays moderate.
        let mut t = SreThrottler::new(SreConfig::default(), 7).unwrap();
        let mut sent = 0u64;
        for i in 0..6000u64 {
            let now = Timestamp::from_nanos(i * 10_000_000); // 100/s for 60 s
            if t.should_send(now) {
                sent += 1;
                let o = if sent % 3 == 0 {
                    Outcome::success()
                } else {
                    Outcome::throttled()
                };
                t.on_outcome(now, &o);
            }
        }
        let (requests, accepts) = t.counts(Timestamp::from_nanos(6000 * 10_000_000));
        let ratio = requests as f64 / accepts as f64;
        assert!(sent < 6000, "some calls were rejected locally");
        assert!(ratio > 2.0, "requests/accepts = {ratio}");
    }

    #[test]
    fn invalid_configs() {
        let bad = SreConfig {
            k: 0.5,
            ..SreConfig::default()
        };
        assert!(SreThrottler::new(bad, 0).is_err());
        let bad = SreConfig {
            buckets: 0,
            ..SreConfig::default()
        };
        assert!(SreThrottler::new(bad, 0).is_err());
        let bad = SreConfig {
            window: Duration::from_nanos(5),
            buckets: 10,
            ..SreConfig::default()
        };
        assert!(SreThrottler::new(bad, 0).is_err());
    }
}
