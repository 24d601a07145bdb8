//! Adaptive concurrency limits: how many requests may be *in flight* at once,
//! adjusted from the latency and the losses each completed request reports.
//! A concurrency limit that follows latency shrinks when a dependency slows,
//! so queues stay short (Little's law: in flight = throughput × latency).
//!
//! ```
//! use std::time::Duration;
//! use ratewise::concurrency::{Aimd, Completion, ConcurrencyLimiter};
//! use ratewise::Timestamp;
//!
//! let limiter = ConcurrencyLimiter::new(Aimd::default()); // starts at 20
//! let t0 = Timestamp::ZERO;
//! let permits: Vec<_> = (0..20).map(|_| limiter.try_acquire(t0).unwrap()).collect();
//! assert!(limiter.try_acquire(t0).is_none()); // the 21st waits or is shed
//!
//! // A request that came back overloaded (a 503, a timeout) shrinks the limit.
//! let mut permits = permits.into_iter();
//! let t1 = t0 + Duration::from_millis(30);
//! limiter.complete(permits.next().unwrap(), t1, Completion::Dropped);
//! assert_eq!(limiter.limit(), 20); // AIMD's floor is 20 by default…
//! # drop(permits);
//! ```
//!
//! [`ConcurrencyLimiter::try_acquire`] takes `now` and returns a [`Permit`];
//! [`ConcurrencyLimiter::complete`] ends it as a success, a drop (overload: a
//! 429/503, a timeout) or ignored; a permit dropped uncompleted frees its slot.
//! [`ConcurrencyLimiter::try_acquire_as`] sheds by [`Priority`]. The
//! controllers ([`Aimd`], [`Vegas`], [`Gradient2`], [`EnvoyGradient`],
//! [`Fixed`], and `Knee`, ours) implement [`LimitAlgorithm`] with their
//! published defaults; each documents where it departs from its reference.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::time::Timestamp;

mod aimd;
mod envoy;
mod gradient2;
mod knee;
mod vegas;

pub use aimd::Aimd;
pub use envoy::EnvoyGradient;
pub use gradient2::Gradient2;
pub use knee::Knee;
pub use vegas::Vegas;

/// One completed request, as a [`LimitAlgorithm`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When the request completed.
    pub now: Timestamp,
    /// How long it took, from acquiring the permit to completing it.
    pub rtt: Duration,
    /// Requests in flight when it started, itself included. For a request of
    /// a class below [`Priority::Critical`] it is scaled by the class's cap
    /// ([`Priority::share`]): a class that found its share of the limit full
    /// reports a full limit, so a controller that grows only when its limit
    /// is used sees the demand the lower classes were refused for.
    pub inflight: usize,
    /// Whether it was dropped: a sign of overload (429, 503, timeout).
    pub dropped: bool,
    /// The epoch it started in (see [`LimitAlgorithm::epoch`]).
    pub epoch: u64,
}

/// A controller that sets a concurrency limit from completed requests.
pub trait LimitAlgorithm: Send {
    /// The current limit (at least 1).
    fn limit(&self) -> usize;

    /// Learns from one completed request.
    fn on_sample(&mut self, sample: Sample);

    /// A counter the controller bumps when earlier samples must no longer
    /// count (a new measurement phase); permits carry the epoch they were
    /// acquired in, so a sample from an earlier phase can be told apart.
    /// The default never changes.
    fn epoch(&self) -> u64 {
        0
    }
}

/// A fixed concurrency limit (Stripe's "N requests in flight").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed(pub usize);

impl LimitAlgorithm for Fixed {
    fn limit(&self) -> usize {
        self.0.max(1)
    }

    fn on_sample(&mut self, _sample: Sample) {}
}

/// The class of a request, for load shedding: the lower the class, the
/// smaller the share of the concurrency limit it may fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Must get through (health checks, payments): the whole limit.
    Critical,
    /// Important interactive traffic: 90 % of the limit.
    High,
    /// Everything else: 80 % of the limit, so at least a fifth of the limit
    /// is always there for critical and high traffic.
    Normal,
    /// Batch and best-effort work, shed first: 50 % of the limit.
    Sheddable,
}

impl Priority {
    /// The share of the limit this class may fill.
    pub const fn share(self) -> f64 {
        match self {
            Priority::Critical => 1.0,
            Priority::High => 0.9,
            Priority::Normal => 0.8,
            Priority::Sheddable => 0.5,
        }
    }

    /// The in-flight count at which this class is refused under `limit`
    /// (at least 1, so no class is locked out of an idle limiter).
    pub fn cap(self, limit: usize) -> usize {
        ((limit as f64 * self.share()) as usize).clamp(1, limit.max(1))
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// It succeeded; its latency is a sample.
    Success,
    /// It was dropped or refused downstream for overload (429, 503,
    /// timeout): a loss signal.
    Dropped,
    /// Not a signal either way (a client error, a cancellation): frees the
    /// slot and teaches nothing.
    Ignored,
}

struct State<A> {
    algorithm: A,
    inflight: usize,
}

struct Shared<A> {
    state: Mutex<State<A>>,
}

impl<A> Shared<A> {
    fn lock(&self) -> MutexGuard<'_, State<A>> {
        // The state is plain numbers, consistent between statements.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A concurrency limiter driven by a [`LimitAlgorithm`]; see the
/// [module docs](self). Cheap to clone: clones share one state.
pub struct ConcurrencyLimiter<A> {
    shared: Arc<Shared<A>>,
}

impl<A> Clone for ConcurrencyLimiter<A> {
    fn clone(&self) -> Self {
        ConcurrencyLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// A slot for one request in flight, from [`ConcurrencyLimiter::try_acquire`].
/// Complete it with [`ConcurrencyLimiter::complete`]; dropping it frees the
/// slot without a sample.
#[must_use = "a permit holds a slot until it is completed or dropped"]
pub struct Permit {
    /// The limiter to give the slot back to if the permit is dropped
    /// without being completed (an `Arc` clone: no allocation).
    release: Option<Arc<dyn Release>>,
    started: Timestamp,
    inflight: usize,
    /// `inflight` as the controller sees it: scaled to the limit for a
    /// lower class (see [`Sample::inflight`]).
    used: usize,
    epoch: u64,
}

impl Permit {
    /// When the permit was acquired.
    pub fn started(&self) -> Timestamp {
        self.started
    }

    /// Requests in flight when it was acquired, itself included.
    pub fn inflight(&self) -> usize {
        self.inflight
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("started", &self.started)
            .field("inflight", &self.inflight)
            .finish_non_exhaustive()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(limiter) = self.release.take() {
            limiter.release();
        }
    }
}

/// Gives a slot back, for a permit dropped without being completed.
trait Release: Send + Sync {
    fn release(&self);
}

impl<A: Send> Release for Shared<A> {
    fn release(&self) {
        let mut s = self.lock();
        s.inflight = s.inflight.saturating_sub(1);
    }
}

impl<A: LimitAlgorithm + 'static> ConcurrencyLimiter<A> {
    /// A limiter driven by `algorithm`.
    pub fn new(algorithm: A) -> Self {
        ConcurrencyLimiter {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    algorithm,
                    inflight: 0,
                }),
            }),
        }
    }

    /// A slot for a request starting at `now`, or `None` when the limit is
    /// reached (the caller queues, sheds with a 503, or fails fast).
    pub fn try_acquire(&self, now: Timestamp) -> Option<Permit> {
        self.try_acquire_as(now, Priority::Critical)
    }

    /// [`ConcurrencyLimiter::try_acquire`] for a request of class
    /// `priority`: each class sees only its share of the limit
    /// ([`Priority::share`]), so as load rises the lowest classes are refused
    /// first and the top of the limit stays for critical traffic (Stripe's
    /// load shedder keeps 20 % for critical requests: here every class but
    /// [`Priority::Critical`] is held to at most 90 % or less).
    pub fn try_acquire_as(&self, now: Timestamp, priority: Priority) -> Option<Permit> {
        let mut s = self.shared.lock();
        let cap = priority.cap(s.algorithm.limit());
        if s.inflight >= cap {
            return None;
        }
        s.inflight += 1;
        let inflight = s.inflight;
        let limit = s.algorithm.limit();
        let used = if cap >= limit {
            inflight
        } else {
            // The class's in-flight count relative to its cap, on the
            // limit's scale.
            (inflight * limit).div_ceil(cap.max(1))
        };
        let epoch = s.algorithm.epoch();
        drop(s);
        let release: Arc<dyn Release> = self.shared.clone();
        Some(Permit {
            release: Some(release),
            started: now,
            inflight,
            used,
            epoch,
        })
    }

    /// Ends the request `permit` stood for, at `now`, and lets the controller
    /// learn from it.
    pub fn complete(&self, mut permit: Permit, now: Timestamp, completion: Completion) {
        // The slot is freed here, under the same lock as the sample.
        permit.release = None;
        let mut s = self.shared.lock();
        s.inflight = s.inflight.saturating_sub(1);
        if completion == Completion::Ignored {
            return;
        }
        let sample = Sample {
            now,
            rtt: now.saturating_duration_since(permit.started),
            inflight: permit.used,
            dropped: completion == Completion::Dropped,
            epoch: permit.epoch,
        };
        s.algorithm.on_sample(sample);
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.shared.lock().algorithm.limit()
    }

    /// Requests in flight now.
    pub fn inflight(&self) -> usize {
        self.shared.lock().inflight
    }

    /// Runs `f` on the controller (to read its gauges in a test or a status
    /// page).
    pub fn with_algorithm<R>(&self, f: impl FnOnce(&A) -> R) -> R {
        f(&self.shared.lock().algorithm)
    }
}

impl<A> std::fmt::Debug for ConcurrencyLimiter<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimiter").finish_non_exhaustive()
    }
}

/// Clamps `v` into `[lo, hi]` (`lo ≤ hi` assumed; NaN becomes `lo`).
pub(crate) fn clamp(v: f64, lo: f64, hi: f64) -> f64 {
    if v.is_nan() {
        lo
    } else {
        v.max(lo).min(hi)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::time::Duration;

    use super::{LimitAlgorithm, Sample};
    use crate::time::Timestamp;

    /// A sample at `t_ms` with the given RTT, in-flight count and drop flag.
    pub(crate) fn sample(t_ms: u64, rtt_ms: u64, inflight: usize, dropped: bool) -> Sample {
        Sample {
            now: Timestamp::from_nanos(t_ms * 1_000_000),
            rtt: Duration::from_millis(rtt_ms),
            inflight,
            dropped,
            epoch: 0,
        }
    }

    /// Feeds `count` samples of `rtt_ms` at full use of the current limit,
    /// one millisecond apart from `t0_ms`; returns the time after.
    pub(crate) fn feed<A: LimitAlgorithm>(
        a: &mut A,
        t0_ms: u64,
        count: u64,
        rtt_ms: u64,
        dropped: bool,
    ) -> u64 {
        for i in 0..count {
            let inflight = a.limit();
            let mut s = sample(t0_ms + i, rtt_ms, inflight, dropped);
            s.epoch = a.epoch();
            a.on_sample(s);
        }
        t0_ms + count
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn fixed_limit_counts_slots_and_frees_them_on_drop() {
        let l = ConcurrencyLimiter::new(Fixed(2));
        let t = Timestamp::ZERO;
        let a = l.try_acquire(t).unwrap();
        let b = l.try_acquire(t).unwrap();
        assert!(l.try_acquire(t).is_none());
        assert_eq!(l.inflight(), 2);
        // A cancelled request (the permit dropped) frees its slot.
        drop(a);
        assert_eq!(l.inflight(), 1);
        let c = l.try_acquire(t).unwrap();
        l.complete(b, t + Duration::from_millis(5), Completion::Success);
        l.complete(c, t + Duration::from_millis(5), Completion::Ignored);
        assert_eq!(l.inflight(), 0);
        assert_eq!(l.limit(), 2);
        assert_eq!(Fixed(0).limit(), 1, "a limit is at least one");
    }

    #[test]
    fn critical_traffic_survives_double_overload() {
        // Capacity 100 in flight; every tick all requests complete and 200
        // arrive (2× overload) in a shuffled order: 8 % critical, 30 %
        // normal, the rest sheddable.
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let l = ConcurrencyLimiter::new(Fixed(100));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut offered = [0u64; 4];
        let mut admitted = [0u64; 4];
        for tick in 0..1_000u64 {
            let now = Timestamp::from_nanos(tick * 1_000_000);
            let mut arrivals: Vec<Priority> = (0..200)
                .map(|i| match i {
                    0..16 => Priority::Critical,
                    16..76 => Priority::Normal,
                    _ => Priority::Sheddable,
                })
                .collect();
            arrivals.shuffle(&mut rng);
            let mut held = Vec::new();
            for p in arrivals {
                offered[p as usize] += 1;
                if let Some(permit) = l.try_acquire_as(now, p) {
                    admitted[p as usize] += 1;
                    held.push(permit);
                }
            }
            let end = Timestamp::from_nanos(tick * 1_000_000 + 900_000);
            for permit in held {
                l.complete(permit, end, Completion::Success);
            }
        }
        let rate = |p: Priority| admitted[p as usize] as f64 / offered[p as usize] as f64;
        assert!(
            rate(Priority::Critical) >= 0.99,
            "{}",
            rate(Priority::Critical)
        );
        // The refusals land on the lower classes, sheddable most.
        assert!(rate(Priority::Sheddable) < rate(Priority::Normal));
        assert!(rate(Priority::Sheddable) < 0.5);
        // The cost: the room kept for critical traffic is idle when it does
        // not come. Between 80 and 100 of the 100 slots are used each tick.
        let used = admitted.iter().sum::<u64>();
        assert!((80 * 1_000..=100 * 1_000).contains(&used), "{used}");
    }

    /// Netflix #72: a caller behind a *rate* limit of `allowed` requests per
    /// RTT-long window sends `limit` requests a window; the excess is
    /// refused at once. Returns the mean limit over the last 100 of 600
    /// windows and the limit after the first 10.
    fn behind_a_rate_limit<A: LimitAlgorithm + 'static>(a: A, allowed: usize) -> (f64, usize) {
        let l = ConcurrencyLimiter::new(a);
        let (mut sum, mut early) = (0.0, 0);
        for w in 0..600u64 {
            let t = Timestamp::from_nanos(w * 10_000_000);
            let permits: Vec<_> = std::iter::from_fn(|| l.try_acquire(t)).collect();
            for (i, p) in permits.into_iter().enumerate() {
                if i < allowed {
                    l.complete(p, t + Duration::from_millis(10), Completion::Success);
                } else {
                    l.complete(p, t + Duration::from_micros(100), Completion::Dropped);
                }
            }
            if w == 9 {
                early = l.limit();
            }
            if w >= 500 {
                sum += l.limit() as f64;
            }
        }
        (sum / 100.0, early)
    }

    #[test]
    fn rate_limited_callers_settle_near_the_rate_netflix_72() {
        // AIMD and Knee (×0.8 per window with a loss) settle near the 30
        // the rate allows; Vegas, which sheds only log10(limit) per drop,
        // is still far above it after ten windows (its documented limit).
        let allowed = 30;
        let (aimd, aimd_early) = behind_a_rate_limit(Aimd::new(200, 1, 200), allowed);
        let (knee, _) = behind_a_rate_limit(Knee::new(200, 1, 200), allowed);
        let (_, vegas_early) = behind_a_rate_limit(Vegas::new(200, 200, 1), allowed);
        for (name, mean) in [("aimd", aimd), ("knee", knee)] {
            assert!(
                (15.0..=60.0).contains(&mean),
                "{name} settles at {mean}, the rate allows {allowed}"
            );
        }
        assert!(aimd_early <= 40, "{aimd_early}");
        assert!(
            vegas_early > allowed * 3 / 2,
            "{vegas_early} vs {aimd_early}"
        );
    }

    #[test]
    fn class_caps_are_never_zero() {
        for limit in [1, 2, 3, 10, 1000] {
            for p in [
                Priority::Critical,
                Priority::High,
                Priority::Normal,
                Priority::Sheddable,
            ] {
                let cap = p.cap(limit);
                assert!(cap >= 1 && cap <= limit);
            }
        }
        assert_eq!(Priority::Normal.cap(100), 80);
    }

    #[test]
    fn slots_are_never_over_granted_across_threads() {
        let l = ConcurrencyLimiter::new(Fixed(8));
        let peak = std::sync::atomic::AtomicUsize::new(0);
        let now = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2_000 {
                        if let Some(p) = l.try_acquire(Timestamp::ZERO) {
                            let n = now.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                            peak.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                            now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                            l.complete(p, Timestamp::ZERO, Completion::Success);
                        }
                    }
                });
            }
        });
        assert!(peak.into_inner() <= 8);
        assert_eq!(l.inflight(), 0);
    }
}
