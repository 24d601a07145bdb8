//! Proactive pacing: a core limiter whose rate an adaptive controller adjusts.
//!
//! The rate strategies ([`aimd`](super::aimd), [`cubic`](super::cubic),
//! [`hints`](super::hints)) do not re-implement a token bucket: they drive a
//! [`Gcra`] (lock-free, one atomic word) through its sans-IO `*_at` methods,
//! changing its quota with `set_quota_at` when the controller moves. Every
//! attempt, retries included, takes a slot from the pacer, so a lowered rate
//! is felt at once — the "closed loop" the AWS SDKs converged on.
//!
//! A slot is *reserved* (never refused): the answer is how long to wait. The
//! reservation is made when it is asked for, so concurrent callers queue
//! behind each other instead of all waking at the same instant, and the
//! limiter's capacity never goes negative.

use std::time::Duration;

use super::Outcome;
use ratewise::error::QuotaError;
use ratewise::gcra::Gcra;
use ratewise::limiter::RateLimiter;
use ratewise::quota::Quota;
use ratewise::time::{ManualClock, Timestamp};

/// The slowest pace a pacer accepts: one request per 10⁶ s.
pub const MIN_PACER_RATE: f64 = 1e-6;
/// The fastest pace a pacer accepts: 10⁹ requests per second.
pub const MAX_PACER_RATE: f64 = 1e9;

/// A rate limiter for our own sends, told the time by its caller.
///
/// Its burst is `max(1, floor(rate))` — about one second of rate, as in the
/// AWS adaptive limiter — unless fixed with [`Pacer::with_burst`].
#[derive(Debug)]
pub struct Pacer {
    limiter: Gcra<ManualClock>,
    fixed_burst: Option<u64>,
}

/// A validated pacer's quota and fixed burst, kept where new pacers are
/// made from it (a throttle's template) instead of a whole pacer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PacerSpec {
    quota: Quota,
    fixed_burst: Option<u64>,
}

impl Pacer {
    /// A pacer at `rate` requests per second, starting with a full burst.
    ///
    /// # Errors
    /// [`QuotaError`] when `rate` is not a finite positive number.
    pub fn new(rate: f64) -> Result<Self, QuotaError> {
        let quota = Quota::from_rate(rate)?;
        Ok(Pacer {
            limiter: Gcra::with_clock(quota, ManualClock::new()),
            fixed_burst: None,
        })
    }

    /// The same pacer with a fixed burst (`burst` ≥ 1).
    ///
    /// # Errors
    /// [`QuotaError::ZeroBurst`] or an overflow of `burst × interval`.
    pub fn with_burst(self, burst: u64) -> Result<Self, QuotaError> {
        let quota = self.limiter.quota().with_burst(burst)?;
        Ok(Pacer {
            limiter: Gcra::with_clock(quota, ManualClock::new()),
            fixed_burst: Some(burst),
        })
    }

    /// A new pacer with this one's quota, starting with a full burst.
    pub fn fresh(&self) -> Pacer {
        Pacer::from_spec(self.spec())
    }

    /// What [`Pacer::fresh`] starts from: the quota and the fixed burst, a
    /// few words where a pacer is a few cache lines.
    pub(crate) fn spec(&self) -> PacerSpec {
        PacerSpec {
            quota: self.limiter.quota(),
            fixed_burst: self.fixed_burst,
        }
    }

    /// A pacer at `spec`, starting with a full burst.
    pub(crate) fn from_spec(spec: PacerSpec) -> Pacer {
        Pacer {
            limiter: Gcra::with_clock(spec.quota, ManualClock::new()),
            fixed_burst: spec.fixed_burst,
        }
    }

    /// The current rate in requests per second.
    pub fn rate(&self) -> f64 {
        self.limiter.quota().rate_per_second()
    }

    /// The underlying limiter's quota.
    pub fn quota(&self) -> Quota {
        self.limiter.quota()
    }

    /// Sets the rate at `now`, clamped to
    /// [[`MIN_PACER_RATE`], [`MAX_PACER_RATE`]]; NaN leaves it unchanged.
    /// Capacity already used stays used. Setting the quota already in force
    /// does nothing, so callers may set a rate on every attempt.
    pub fn set_rate_at(&self, rate: f64, now: Timestamp) {
        if rate.is_nan() {
            return;
        }
        let rate = rate.clamp(MIN_PACER_RATE, MAX_PACER_RATE);
        let quota = match self.fixed_burst {
            Some(b) => Quota::from_rate(rate).and_then(|q| q.with_burst(b)),
            None => Quota::from_rate(rate),
        };
        // The clamp makes every rate valid; a fixed burst that overflows at a
        // very low rate keeps the old quota rather than failing.
        // Re-configuring the limiter takes its writer lock and briefly stops
        // concurrent checks; skip it when nothing would change.
        if let Ok(q) = quota {
            if q != self.limiter.quota() {
                self.limiter.set_quota_at(q, now);
            }
        }
    }

    /// Reserves one slot no earlier than `not_before`, returning how long
    /// after `now` the caller may send.
    pub fn acquire_at(&self, now: Timestamp, not_before: Timestamp) -> Duration {
        let at = now.max(not_before);
        match self.limiter.reserve_at(1, at) {
            Ok(r) => r.act_at().saturating_duration_since(now),
            // One unit never exceeds a burst of at least one; should the
            // impossible happen, wait as long as asked rather than panic.
            Err(_) => at.saturating_duration_since(now),
        }
    }

    /// Uses up the whole burst at `now`, as if a send had just emptied it:
    /// the next slot comes one interval after `now` (or after the latest slot
    /// already reserved), so pacing starts evenly instead of with a burst.
    pub fn drain_at(&self, now: Timestamp) {
        // Take what is left at `now`, no more: reserving past it would push
        // the next slot further out than one interval.
        let left = self
            .limiter
            .peek_at(1, now)
            .map_or(0, |d| if d.allowed { d.remaining } else { 0 });
        if left > 0 {
            let _ = self.limiter.reserve_at(left, now);
        }
    }

    /// Drops the credit the pacer would gain until `at` (a pause's end): the
    /// next slot is at `at` (or after the latest slot already reserved), the
    /// ones after it an interval apart.
    pub fn resume_at(&self, at: Timestamp) {
        // A slot free at `at` means none was handed out after it: the
        // schedule restarts there, the fraction of a slot saved dropped
        // with the whole ones (taking only the whole ones would leave the
        // second slot less than an interval after the first).
        if self.limiter.peek_at(1, at).is_ok_and(|d| d.allowed) {
            self.limiter.restart_at(at);
        }
    }

    /// Re-plans the schedule from `at`: the next slot is at `at`, the
    /// following ones one interval apart, with no credit saved and no slot
    /// handed out earlier counted (a caller holding such a slot should take
    /// a new one, as [`Throttle::recheck_at`](super::throttle::Throttle::recheck_at)
    /// does). After a cut or a pause, the slots handed out at the old pace
    /// would otherwise still be used at the old pace.
    pub fn restart_at(&self, at: Timestamp) {
        self.limiter.restart_at(at);
    }

    /// Like [`Pacer::acquire_at`], but only if the slot comes within
    /// `max_wait` of `not_before`; otherwise takes nothing and returns how long
    /// after `now` the caller would have had to wait.
    pub fn acquire_within_at(
        &self,
        now: Timestamp,
        not_before: Timestamp,
        max_wait: Duration,
    ) -> Result<Duration, Duration> {
        let at = now.max(not_before);
        match self.limiter.reserve_within_at(1, at, max_wait) {
            Ok(r) => Ok(r.act_at().saturating_duration_since(now)),
            Err(ratewise::error::ReserveError::WouldWaitTooLong { wait, .. }) => {
                Err(at.saturating_duration_since(now).saturating_add(wait))
            }
            Err(_) => Err(Duration::MAX),
        }
    }

    /// Takes a slot only if one is free at `now`; otherwise says how long the
    /// caller would have to wait, and takes nothing.
    pub fn try_acquire_at(&self, now: Timestamp) -> Result<(), Duration> {
        match self.limiter.check_at(1, now) {
            Ok(d) if d.allowed => Ok(()),
            Ok(d) => Err(d.retry_after.unwrap_or(Duration::ZERO)),
            Err(_) => Err(Duration::MAX),
        }
    }
}

/// An adaptive rate controller: told every send and every outcome, it moves a
/// target rate. Controllers hold no limiter; whoever owns one applies its rate
/// to a [`Pacer`]. This is what [`Throttle`](super::throttle::Throttle)
/// composes.
pub trait RateController: Send {
    /// A short, stable name.
    fn name(&self) -> &str;

    /// The target rate in requests per second, or `None` while the controller
    /// does not want to pace at all (AWS adaptive mode before its first
    /// throttle).
    fn rate(&self) -> Option<f64>;

    /// Told that a request is being sent at `now`.
    fn on_send(&mut self, _now: Timestamp) {}

    /// Told what a request produced at `now`; returns the new target rate
    /// (as [`RateController::rate`]).
    fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) -> Option<f64>;

    /// Told that something outside the controller (a server hint) holds the
    /// pace at `rate` or below: a controller that paces lowers its target to
    /// at most `rate` (never raises it), so that when the outside limit
    /// lapses the rate climbs back by the controller's own rule instead of
    /// snapping back. The default does nothing.
    fn limit_to(&mut self, _rate: f64) {}

    /// Told that the calls of this controller's partition are let out in
    /// a slow start (the async drivers do this when their start gate first
    /// lets two calls out at once, before any pace): the sends a first cut
    /// measures are a burst the driver kept small and spread out, not what
    /// the calls want. The default does nothing.
    fn note_slow_started(&mut self) {}

    /// Told that this controller's partition found its quota closed for a
    /// while (bare refusals to lone probes, no success): the server counts
    /// a window, and a refusal there means "nothing until the window
    /// moves", so a climb that speeds up the longer it goes unrefused
    /// overshoots by the window's whole length. The default does nothing.
    fn note_closed_quota(&mut self) {}
}

impl<R: RateController + ?Sized> RateController for Box<R> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn rate(&self) -> Option<f64> {
        (**self).rate()
    }
    fn on_send(&mut self, now: Timestamp) {
        (**self).on_send(now)
    }
    fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) -> Option<f64> {
        (**self).on_outcome(now, outcome)
    }
    fn limit_to(&mut self, rate: f64) {
        (**self).limit_to(rate)
    }
    fn note_slow_started(&mut self) {
        (**self).note_slow_started()
    }
    fn note_closed_quota(&mut self) {
        (**self).note_closed_quota()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn restart_forgets_slots_handed_out_and_credit_saved() {
        let z = Timestamp::ZERO;
        let p = Pacer::new(10.0).unwrap().with_burst(1).unwrap();
        for k in 0..5 {
            assert_eq!(p.acquire_at(z, z), ms(100 * k));
        }
        // Five slots up to 400 ms are out; re-planned from 150 ms, the next
        // is at 150 ms and the following ones one interval apart.
        p.restart_at(z + ms(150));
        assert_eq!(p.acquire_at(z + ms(100), z), ms(50));
        assert_eq!(p.acquire_at(z + ms(100), z), ms(150));
        // From an idle pacer full of credit: no burst after the restart.
        let idle = Pacer::new(50.0).unwrap();
        let later = z + Duration::from_secs(60);
        idle.restart_at(later);
        assert_eq!(idle.acquire_at(later, later), Duration::ZERO);
        assert_eq!(idle.acquire_at(later, later), ms(20));
    }

    #[test]
    fn drain_takes_what_is_left_and_no_more() {
        let p = Pacer::new(1.0).unwrap();
        let t = Timestamp::ZERO + Duration::from_secs(10);
        // A new rate keeps the one unit left; draining takes it, and the next
        // slot is one interval away, not a whole burst.
        p.set_rate_at(100.0, t);
        p.drain_at(t);
        assert_eq!(p.acquire_at(t, t), ms(10));
        assert_eq!(p.acquire_at(t, t), ms(20));
        // Draining an empty pacer changes nothing.
        p.drain_at(t);
        assert_eq!(p.acquire_at(t, t), ms(30));
        // A full one is emptied.
        let full = Pacer::new(50.0).unwrap();
        let z = Timestamp::ZERO;
        full.drain_at(z);
        assert_eq!(full.acquire_at(z, z), ms(20));
        // Resumed at a pause's end: the credit gained until then is gone,
        // the next slot is at that instant and the following ones even.
        let paused = Pacer::new(10.0).unwrap();
        let end = z + Duration::from_secs(5);
        paused.resume_at(end);
        assert_eq!(paused.acquire_at(z, z), Duration::from_secs(5));
        assert_eq!(paused.acquire_at(z, z), ms(5_100));
        // A fraction of a slot saved is dropped too: 40/s, the burst spent
        // at 0, resumed 1.5 intervals later (1.5 slots saved), the second
        // slot after it is a whole interval on, not half of one.
        let p = Pacer::new(40.0).unwrap();
        for _ in 0..40 {
            p.acquire_at(z, z);
        }
        let end = z + Duration::from_micros(37_500);
        p.resume_at(end);
        assert_eq!(p.acquire_at(end, end), Duration::ZERO);
        assert_eq!(p.acquire_at(end, end), ms(25));
        // Slots already handed out past the pause's end stand.
        let busy = Pacer::new(10.0).unwrap().with_burst(1).unwrap();
        for k in 0..3 {
            assert_eq!(busy.acquire_at(z, z), ms(100 * k));
        }
        busy.resume_at(z + ms(150));
        assert_eq!(busy.acquire_at(z, z), ms(300));
    }

    #[test]
    fn reservations_queue_at_the_rate() {
        let p = Pacer::new(10.0).unwrap().with_burst(1).unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(p.acquire_at(t, t), Duration::ZERO);
        assert_eq!(p.acquire_at(t, t), ms(100));
        assert_eq!(p.acquire_at(t, t), ms(200));
        assert_eq!(p.try_acquire_at(t), Err(ms(300)));
        assert_eq!(p.acquire_within_at(t, t, ms(299)), Err(ms(300)));
        assert_eq!(p.acquire_within_at(t, t, ms(300)), Ok(ms(300)));
        assert_eq!(p.acquire_at(t, t), ms(400));
    }

    #[test]
    fn not_before_is_respected() {
        let p = Pacer::new(10.0).unwrap().with_burst(1).unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(p.acquire_at(t, t + ms(500)), ms(500));
        assert_eq!(p.acquire_at(t, t), ms(600));
    }

    #[test]
    fn lowering_the_rate_is_felt_at_once() {
        let p = Pacer::new(10.0).unwrap().with_burst(1).unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(p.acquire_at(t, t), Duration::ZERO);
        p.set_rate_at(1.0, t);
        assert!(p.acquire_at(t, t) >= ms(900));
        assert!((p.rate() - 1.0).abs() < 1e-9);
        p.set_rate_at(f64::NAN, t);
        assert!((p.rate() - 1.0).abs() < 1e-9);
        p.set_rate_at(0.0, t);
        assert!(p.rate() > 0.0);
    }
}
