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
//!
//! [`WithSre`] puts the throttle around any [`Strategy`]. The strategy
//! interface has no "do not send" answer, so a local rejection is expressed
//! as a *wait*: the rejected call is not sent now, and the caller comes back
//! [`WithSre::reject_delay`] later (default one bucket) to send it — what an
//! application does with a locally refused call it still needs. A retry the
//! throttle rejects is not made at all: the call gives up
//! ([`Next::GiveUp`]), as [`Throttle`](super::throttle::Throttle) does.

use std::time::Duration;

use crate::JitterRng;
use rand::Rng;

use super::config::{at_least, ConfigError};
use super::{Next, Outcome, Signal, Strategy};
use crate::config::duration_to_nanos_saturating;
use ratewise::time::Timestamp;

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
    /// The sums of `ring`, kept as buckets are written and cleared, so
    /// that a decision does not add up the whole window (up to 3600
    /// buckets) every time.
    totals: (u64, u64),
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
            totals: (0, 0),
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
            totals: (0, 0),
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
                    self.totals.0 -= slot.0;
                    self.totals.1 -= slot.1;
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
        self.totals
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
        self.note_request(now);
        p <= 0.0 || self.rng.random::<f64>() >= p
    }

    /// Counts a request sent at `now` without deciding anything: for a call
    /// that was rejected locally earlier (already counted then) and is sent
    /// after a wait, which the backend sees as one more request.
    pub fn note_request(&mut self, now: Timestamp) {
        let slot = self.advance(now);
        if let Some(s) = self.ring.get_mut(slot) {
            s.0 += 1;
            self.totals.0 += 1;
        }
    }

    /// The length of one window bucket.
    pub fn bucket(&self) -> Duration {
        Duration::from_nanos(self.bucket_nanos)
    }

    /// Records what a sent request produced at `now`.
    pub fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) {
        if matches!(outcome.signal, Signal::Success | Signal::Failure) {
            let slot = self.advance(now);
            if let Some(s) = self.ring.get_mut(slot) {
                s.1 += 1;
                self.totals.1 += 1;
            }
        }
    }
}

/// Any strategy with the SRE client-side throttle around it.
///
/// * `before_call`: the inner strategy's wait, then the throttle's coin. A
///   local rejection (counted as a request, as the SRE book says) becomes a
///   wait of at least [`WithSre::reject_delay`]; the call is then sent, and
///   that send counts as one more request.
/// * `after_attempt`: every outcome feeds the throttle's accept count; a
///   retry the inner strategy wants is offered to the throttle first, and a
///   local rejection turns it into [`Next::GiveUp`].
#[derive(Clone, Debug)]
pub struct WithSre<S> {
    inner: S,
    sre: SreThrottler,
    name: String,
    reject_delay: Duration,
    /// The call was rejected locally in `before_call` and its delayed send
    /// has not been counted yet.
    uncounted: bool,
    rejected: u64,
}

impl<S: Strategy> WithSre<S> {
    /// `inner` behind `sre`; a rejected call waits one bucket of `sre`'s
    /// window (one second by default).
    pub fn new(inner: S, sre: SreThrottler) -> Self {
        let name = format!("{}+sre", inner.name());
        WithSre {
            reject_delay: sre.bucket(),
            inner,
            sre,
            name,
            uncounted: false,
            rejected: 0,
        }
    }

    /// The same adapter with another wait after a local rejection (a zero
    /// delay is raised to one nanosecond, so a rejection always costs time).
    pub fn with_reject_delay(mut self, delay: Duration) -> Self {
        self.reject_delay = delay.max(Duration::from_nanos(1));
        self
    }

    /// The wait a local rejection turns into.
    pub fn reject_delay(&self) -> Duration {
        self.reject_delay
    }

    /// Calls and retries rejected locally so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// The throttle.
    pub fn sre(&self) -> &SreThrottler {
        &self.sre
    }

    /// The wrapped strategy.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Strategy> Strategy for WithSre<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        let wait = self.inner.before_call(now);
        if self.sre.should_send(now) {
            self.uncounted = false;
            wait
        } else {
            self.rejected += 1;
            self.uncounted = true;
            wait.max(self.reject_delay)
        }
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        if std::mem::take(&mut self.uncounted) {
            self.sre.note_request(now);
        }
        self.sre.on_outcome(now, outcome);
        match self.inner.after_attempt(now, outcome) {
            Next::Retry(d) => {
                if self.sre.should_send(now) {
                    Next::Retry(d)
                } else {
                    self.rejected += 1;
                    Next::GiveUp
                }
            }
            other => other,
        }
    }

    forward_gauges_to_inner!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Timestamp {
        Timestamp::from_nanos(s * 1_000_000_000)
    }

    proptest::proptest! {
        /// The running totals always equal the sum of the window's buckets,
        /// whatever the order of times (backwards ones included).
        #[test]
        fn running_totals_equal_the_window(
            buckets in 1u32..8,
            ops in proptest::collection::vec((0u8..3, 0u64..3_000), 1..200),
        ) {
            let config = SreConfig {
                k: 2.0,
                window: Duration::from_secs(1),
                buckets,
            };
            let mut t = SreThrottler::new(config, 7).unwrap();
            for (op, at_ms) in ops {
                let now = Timestamp::from_nanos(at_ms * 1_000_000);
                match op {
                    0 => t.note_request(now),
                    1 => t.on_outcome(now, &Outcome::success()),
                    _ => {
                        let _ = t.should_send(now);
                    }
                }
                let (r, a) = t.counts(now);
                let sum = t.ring.iter().fold((0, 0), |(r, a), (dr, da)| (r + dr, a + da));
                proptest::prop_assert_eq!((r, a), sum);
            }
        }
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

    #[test]
    fn with_sre_turns_local_rejections_into_waits_and_give_ups() {
        use crate::backoff::{BackoffConfig, BackoffStrategy};
        let inner =
            BackoffStrategy::new(BackoffConfig::constant(Duration::from_millis(10)), 0).unwrap();
        let mut s = WithSre::new(inner, SreThrottler::new(SreConfig::default(), 3).unwrap());
        assert_eq!(s.name(), "backoff+sre");
        assert_eq!(s.reject_delay(), Duration::from_secs(1));
        let t = secs(1);
        // A healthy backend: never a wait, never a rejection.
        for _ in 0..20 {
            assert_eq!(s.before_call(t), Duration::ZERO);
            assert_eq!(s.after_attempt(t, &Outcome::success()), Next::Done);
        }
        assert_eq!(s.rejected(), 0);
        // A backend that refuses everything: calls start to be rejected
        // locally (a wait of one bucket), retries start to give up.
        let (mut waits, mut give_ups) = (0, 0);
        for _ in 0..200 {
            if s.before_call(t) == Duration::from_secs(1) {
                waits += 1;
            }
            if s.after_attempt(t, &Outcome::throttled()) == Next::GiveUp {
                give_ups += 1;
            }
        }
        assert!(waits > 50, "{waits}");
        assert!(give_ups > 50, "{give_ups}");
        assert_eq!(s.rejected(), waits + give_ups);
        // Every call counted once as a request, each retry offered once, and
        // each delayed send once more.
        let (requests, accepts) = s.sre.counts(t);
        assert_eq!(accepts, 20);
        assert_eq!(requests, 20 + 200 + 200 + waits);
        // A minute after the window forgot it all, nothing is rejected.
        let later = secs(200);
        assert_eq!(s.before_call(later), Duration::ZERO);
        assert_eq!(s.after_attempt(later, &Outcome::success()), Next::Done);
    }

    #[test]
    fn with_sre_composes_with_a_retry_budget() {
        use crate::backoff::{BackoffConfig, BackoffStrategy};
        use crate::budget::{RetryBudget, RetryBudgetConfig, WithBudget};
        let inner =
            BackoffStrategy::new(BackoffConfig::constant(Duration::from_millis(10)), 0).unwrap();
        let budget = RetryBudget::new(RetryBudgetConfig {
            capacity: 10,
            ..RetryBudgetConfig::default()
        })
        .unwrap();
        let sre = SreThrottler::new(SreConfig::default(), 5).unwrap();
        let mut s = WithSre::new(WithBudget::new(inner, budget), sre);
        let t = secs(1);
        assert_eq!(s.before_call(t), Duration::ZERO);
        // The budget (inside) pays two throttling retries, 5 each, and then
        // gives up, whatever the SRE coin (outside) says about the retries
        // it did pay for: the inner strategy decides first, as in `Throttle`.
        let mut nexts = vec![];
        for _ in 0..3 {
            nexts.push(s.after_attempt(t, &Outcome::throttled()));
        }
        assert_eq!(nexts[2], Next::GiveUp, "{nexts:?}");
        assert_eq!(s.inner().budget().available(), 0);
        // The SRE counted each attempt's outcome: no accepts, and a success
        // is one.
        s.before_call(t);
        assert_eq!(s.after_attempt(t, &Outcome::success()), Next::Done);
        assert_eq!(s.sre().clone().counts(t).1, 1);
        assert_eq!(s.inner().budget().available(), 1, "success refund");
    }

    #[test]
    fn with_sre_keeps_a_longer_inner_wait() {
        use crate::backoff::{BackoffConfig, BackoffStrategy};
        let inner =
            BackoffStrategy::new(BackoffConfig::constant(Duration::from_millis(10)), 0).unwrap();
        let mut s = WithSre::new(inner, SreThrottler::new(SreConfig::default(), 3).unwrap())
            .with_reject_delay(Duration::ZERO);
        assert_eq!(s.reject_delay(), Duration::from_nanos(1));
        let t = secs(1);
        for _ in 0..50 {
            s.before_call(t);
            s.after_attempt(t, &Outcome::throttled());
        }
        // Whatever the coin says, the wait is at least the 1 ns delay when
        // rejected and the inner wait (zero here) otherwise.
        let mut rejected_waits = 0;
        for _ in 0..50 {
            let before = s.rejected();
            let w = s.before_call(t);
            if s.rejected() > before {
                assert_eq!(w, Duration::from_nanos(1));
                rejected_waits += 1;
            } else {
                assert_eq!(w, Duration::ZERO);
            }
            s.after_attempt(t, &Outcome::throttled());
        }
        assert!(rejected_waits > 0);
    }
}
