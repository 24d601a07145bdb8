//! [`Knee`]: ratewise's own controller. It keeps a short queue above the
//! server's knee, and tells a queue from a slower server by cutting the
//! limit and watching whether latency follows.

use std::time::Duration;

use super::{LimitAlgorithm, Sample};
use crate::time::Timestamp;

/// ratewise's adaptive concurrency limit: hold the mean latency within a
/// headroom of the no-queue latency, and learn the no-queue latency again
/// when a cut shows the latency is not a queue.
///
/// # Why it works
///
/// A server with `W` workers has a *knee*: below `W` requests in flight,
/// admitting more raises throughput and leaves latency alone; above it,
/// throughput stays put and every extra request waits in a queue. The best
/// limit sits a little above the knee: enough queue that a worker never
/// idles while work is refused, little enough that latency stays near the
/// no-queue latency.
///
/// The hard part is that a latency rise has two causes that call for
/// opposite answers. A **queue** (too many admitted) shrinks when the limit
/// shrinks. A **slower server** (a dependency slows down, capacity halves)
/// does not: every request takes longer whatever the limit, and cutting
/// further only starves the workers. Vegas and Gradient2 compare latency
/// with a remembered baseline and cannot tell the two apart: Vegas keeps
/// shrinking, Gradient2 lets its long-term average drift up, which also lets
/// a real queue grow. `Knee` asks the server: the cut it makes anyway is
/// the experiment.
///
/// * **Windows.** Samples are pooled into windows of at least 128 samples
///   and one baseline of time, so each decision rests on a mean of many
///   latencies (single samples, with exponential service times, say almost
///   nothing; the *minimum* says even less, which is why Vegas collapses).
/// * **Baseline** `B`: the mean latency with no queue. A window faster than
///   `B` pulls it down (by a tenth of the gap); nothing pulls it up
///   except the test below, so a standing queue never becomes the new
///   normal.
/// * **Hold or grow.** While the window's mean latency `r` is within
///   `B × (1 + headroom)` (headroom 0.25 by default: a queue of about a
///   quarter of the workers), or not significantly above it, the limit grows
///   by `√limit / 2` per window, but only if the window used at least 90 %
///   of it (an idle client does not inflate its limit).
/// * **Cut.** When `r` exceeds the target by more than two standard errors
///   of the window's mean (noise is not a signal), the limit is multiplied by
///   `√(target / r)` (at least ½): half the proportional step in log terms,
///   because part of the excess may be a slower server rather than a queue
///   (the test below tells). The next window counts only requests admitted
///   after the cut (their permits carry the controller's epoch): the ones
///   admitted before still report the old queue, and cutting again on them
///   would cut twice for one queue (Envoy #11579 is the same mistake with
///   minRTT).
/// * **The test.** If the limit has been cut to 60 % of where the episode
///   of cuts began, the latency is still above target and it fell by less
///   than 10 % since the window before (a queue we made drains as the
///   limit shrinks; once it is gone the latency stops falling), the
///   latency is not a queue: `B` becomes the current latency, the target moves with
///   it, and the limit grows back to the new knee. A latency spike of a
///   slow dependency (more in flight for the same throughput, by Little's
///   law) is therefore followed within a few windows instead of being
///   answered by refusing the work.
/// * **Losses.** A window with a dropped request (a 503, a timeout, or a
///   request slower than the timeout, 5 s by default) cuts the limit to
///   80 % without learning latency from it: a timeout's constant latency
///   (Netflix #137) and a refusal's near-zero one (#176) never enter `B`.
///
/// The limit stays within `[min, max]` and every quantity is a finite,
/// non-negative number: latencies are clamped, and a window without a
/// successful sample changes no average.
///
/// ```
/// use std::time::Duration;
/// use ratewise::concurrency::{Knee, LimitAlgorithm, Sample};
/// use ratewise::Timestamp;
///
/// let mut k = Knee::new(20, 4, 200);
/// let mut t = Timestamp::ZERO;
/// // A window of 128 samples at 10 ms, the limit fully used: it grows.
/// for _ in 0..128 {
///     t = t + Duration::from_millis(1);
///     k.on_sample(Sample { now: t, rtt: Duration::from_millis(10), inflight: 20, dropped: false, epoch: 0 });
/// }
/// assert!(k.limit() > 20);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Knee {
    limit: f64,
    min: f64,
    max: f64,
    headroom: f64,
    timeout: Duration,
    /// The no-queue mean latency in seconds; `None` until the first window.
    baseline: Option<f64>,
    window: Window,
    /// The limit and the latency of the latest window of the current run
    /// of cuts.
    episode: Option<(f64, f64)>,
    /// Bumped at each cut: only requests admitted after it judge it.
    epoch: u64,
}

/// The samples pooled since the last decision.
#[derive(Clone, Debug, Default, PartialEq)]
struct Window {
    start: Option<Timestamp>,
    count: u32,
    sum_s: f64,
    sum_sq: f64,
    drops: u32,
    peak: usize,
}

/// Samples a window needs before a decision.
const MIN_SAMPLES: u32 = 128;
/// A cut to this share of the episode's starting limit, with latency still
/// significantly high, re-learns the baseline...
const TEST_CUT: f64 = 0.6;
/// ...if the latency fell by less than this share since the window
/// before.
const TEST_FALL: f64 = 0.1;
/// How far a faster window pulls the baseline down.
const BASELINE_DOWN: f64 = 0.1;
/// Standard errors by which a window's mean must exceed the target to cut.
const SIGNIFICANT: f64 = 2.0;
/// The cut after a window with a loss.
const LOSS_BACKOFF: f64 = 0.8;

impl Default for Knee {
    fn default() -> Self {
        Knee::new(20, 4, 1000)
    }
}

impl Knee {
    /// Starts at `initial`, within `[min, max]` (`min` at least 1, `max` at
    /// least `min`); headroom 0.25, timeout 5 s.
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        let min = min.max(1) as f64;
        let max = (max as f64).max(min);
        Knee {
            limit: super::clamp(initial as f64, min, max),
            min,
            max,
            headroom: 0.25,
            timeout: Duration::from_secs(5),
            baseline: None,
            window: Window::default(),
            episode: None,
            epoch: 0,
        }
    }

    /// A request slower than this counts as a drop.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The latency above the no-queue latency the limit may cost, as a share
    /// of it (0.25: a mean latency up to 25 % above no-queue). Negative or
    /// NaN values count as 0; at most 10.
    pub fn with_headroom(mut self, headroom: f64) -> Self {
        self.headroom = super::clamp(headroom, 0.0, 10.0);
        self
    }

    /// The no-queue latency it has learned, if any.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline.map(Duration::from_secs_f64)
    }

    fn decide(&mut self) {
        let w = std::mem::take(&mut self.window);
        if w.drops > 0 {
            self.limit = super::clamp(self.limit * LOSS_BACKOFF, self.min, self.max);
            self.episode = None;
            return;
        }
        if w.count == 0 {
            return;
        }
        let n = f64::from(w.count);
        let r = w.sum_s / n;
        // The standard error of the window's mean: a cut needs the mean
        // above target by more than noise.
        let var = ((w.sum_sq - w.sum_s * r) / (n - 1.0).max(1.0)).max(0.0);
        let se = (var / n).sqrt();
        let base = match self.baseline {
            None => r,
            Some(b) if r < b => b + BASELINE_DOWN * (r - b),
            Some(b) => b,
        };
        self.baseline = Some(base);
        let target = base * (1.0 + self.headroom);
        if r - SIGNIFICANT * se > target {
            let (start, prev) = *self.episode.get_or_insert((self.limit, f64::INFINITY));
            self.episode = Some((start, r));
            if self.limit <= (start * TEST_CUT).max(self.min) && r >= (1.0 - TEST_FALL) * prev {
                // Cut hard and the latency stayed: not our queue.
                self.baseline = Some(r);
                self.episode = None;
                return;
            }
            let gradient = super::clamp((target / r).sqrt(), 0.5, 1.0);
            self.limit = super::clamp(self.limit * gradient, self.min, self.max);
            // Requests admitted before the cut still report the old queue.
            self.epoch += 1;
        } else {
            self.episode = None;
            if w.peak as f64 >= 0.9 * self.limit.floor() {
                let next = self.limit + self.limit.sqrt() / 2.0;
                self.limit = super::clamp(next, self.min, self.max);
            }
        }
    }
}

impl LimitAlgorithm for Knee {
    fn limit(&self) -> usize {
        self.limit as usize
    }

    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn on_sample(&mut self, s: Sample) {
        if s.epoch != self.epoch {
            return;
        }
        let w = &mut self.window;
        let start = *w.start.get_or_insert(s.now);
        if s.dropped || s.rtt > self.timeout {
            w.drops += 1;
        } else {
            w.count += 1;
            let rtt = s.rtt.as_secs_f64();
            w.sum_s += rtt;
            w.sum_sq += rtt * rtt;
        }
        w.peak = w.peak.max(s.inflight);
        let span = self.baseline.unwrap_or(0.0);
        let elapsed = s.now.saturating_duration_since(start).as_secs_f64();
        if w.count + w.drops >= MIN_SAMPLES && elapsed >= span {
            self.decide();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrency::test_support::sample;

    /// One full window of `rtt_ms` samples at `inflight`, from `t_ms`, one
    /// millisecond apart; returns the time after.
    fn window(k: &mut Knee, t_ms: u64, rtt_ms: u64, inflight: usize) -> u64 {
        for i in 0..u64::from(MIN_SAMPLES) {
            k.on_sample(fresh(k, t_ms + i, rtt_ms, inflight, false));
        }
        t_ms + u64::from(MIN_SAMPLES)
    }

    /// A sample from a request admitted in the controller's current epoch.
    fn fresh(k: &Knee, t_ms: u64, rtt_ms: u64, inflight: usize, dropped: bool) -> Sample {
        Sample {
            epoch: k.epoch(),
            ..sample(t_ms, rtt_ms, inflight, dropped)
        }
    }

    #[test]
    fn worked_trace_grow_cut_and_relearn() {
        let mut k = Knee::new(25, 4, 200);
        // First window: 20 ms, the limit used. It becomes the baseline and,
        // within the target (25 ms), the limit grows by √25 / 2 = 2.5.
        let t = window(&mut k, 0, 20, 25);
        assert_eq!(k.baseline(), Some(Duration::from_millis(20)));
        assert!((k.limit - 27.5).abs() < 1e-9, "{}", k.limit);
        // A window that did not use the limit: no growth.
        let t = window(&mut k, t, 20, 10);
        assert!((k.limit - 27.5).abs() < 1e-9);
        // Latency doubles (40 ms): cut by √(target / r) = √(25 / 40), and
        // a new epoch: only requests admitted from now on judge the cut.
        let g = (25.0f64 / 40.0).sqrt();
        let epoch = k.epoch();
        let t = window(&mut k, t, 40, 27);
        assert!((k.limit - 27.5 * g).abs() < 1e-9, "{}", k.limit);
        assert_eq!(k.epoch(), epoch + 1);
        // A late answer to a request admitted before the cut is not counted.
        k.on_sample(sample(t, 90, 27, false));
        assert_eq!(k.window.count, 0);
        // Still 40 ms: cut again, twice, down to 49 % of where the cuts
        // began (27.5), under the 60 % of the test.
        let t = window(&mut k, t, 40, 21);
        let t = window(&mut k, t, 40, 17);
        let cut = 27.5 * g * g * g;
        assert!((k.limit - cut).abs() < 1e-9, "{}", k.limit);
        // The next window finds the latency where it was: the server, not a
        // queue. The baseline is learnt again at 40 ms and the limit holds.
        let t = window(&mut k, t, 40, 13);
        assert_eq!(k.baseline(), Some(Duration::from_millis(40)));
        assert!((k.limit - cut).abs() < 1e-9);
        // From there it grows back at the new latency.
        let used = k.limit() + 1;
        window(&mut k, t, 40, used);
        assert!(k.limit > cut);
    }

    #[test]
    fn a_queue_that_shrinks_with_the_cut_is_not_relearnt() {
        let mut k = Knee::new(40, 4, 200);
        let t = window(&mut k, 0, 20, 10);
        // Latency 60 ms, and each cut brings it down: a queue we made.
        let mut t = window(&mut k, t, 60, 40);
        for rtt in [50, 42, 36, 30] {
            let used = k.limit();
            t = window(&mut k, t, rtt, used);
        }
        assert!(
            k.baseline().unwrap() < Duration::from_millis(21),
            "{:?}",
            k.baseline()
        );
        assert!(k.limit() < 20, "{}", k.limit());
    }

    #[test]
    fn losses_cut_and_never_enter_the_baseline() {
        // Netflix #137 (every call times out in the same time) and #176 (a
        // refusal comes back in ~0 ms).
        let mut k = Knee::new(100, 4, 200).with_timeout(Duration::from_secs(1));
        let t = window(&mut k, 0, 20, 10);
        let base = k.baseline();
        let mut t = t;
        for _ in 0..20 {
            for i in 0..u64::from(MIN_SAMPLES) {
                k.on_sample(fresh(&k, t + i, 5_000, 100, false));
            }
            t += u64::from(MIN_SAMPLES);
            for i in 0..u64::from(MIN_SAMPLES) {
                k.on_sample(fresh(&k, t + i, 0, 100, true));
            }
            t += u64::from(MIN_SAMPLES);
        }
        assert_eq!(k.limit(), 4);
        assert_eq!(k.baseline(), base);
    }

    #[test]
    fn a_fractional_limit_in_full_use_grows() {
        // A limit of 7.9 admits 7: a window with 7 in flight used all of it.
        let mut k = Knee::new(8, 4, 200);
        k.limit = 7.9;
        window(&mut k, 0, 20, 7);
        assert!(k.limit > 7.9, "{}", k.limit);
    }

    #[test]
    fn noise_is_not_a_cut() {
        // Scattered latencies: a window whose mean is above the target by
        // less than two standard errors holds the limit.
        let mut k = Knee::new(30, 4, 200);
        let t = window(&mut k, 0, 20, 10);
        for i in 0..u64::from(MIN_SAMPLES) {
            // Alternating 2 ms and 49 ms: mean 25.5 ms, above the 25 ms
            // target by a quarter of its standard error (about 2 ms).
            let rtt = if i % 2 == 0 { 2 } else { 49 };
            k.on_sample(fresh(&k, t + i, rtt, 10, false));
        }
        assert!((k.limit - 30.0).abs() < 1e-9, "{}", k.limit);
    }

    #[test]
    fn an_idle_client_does_not_grow() {
        let mut k = Knee::default();
        let mut t = 0;
        for _ in 0..50 {
            t = window(&mut k, t, 10, 3);
        }
        assert_eq!(k.limit(), 20);
    }

    #[test]
    fn a_latency_spike_is_followed_not_refused() {
        // A slow dependency adds 100 ms: in flight must grow (Little's law).
        let mut k = Knee::new(30, 4, 1000);
        let mut t = window(&mut k, 0, 20, 30);
        for _ in 0..100 {
            let used = k.limit();
            t = window(&mut k, t, 120, used);
        }
        assert!(k.limit() > 60, "{}", k.limit());
        assert!(k.baseline().unwrap() >= Duration::from_millis(100));
    }

    proptest::proptest! {
        #[test]
        fn limit_stays_in_bounds_and_finite(
            min in 1usize..50,
            span in 0usize..500,
            initial in 0usize..1000,
            headroom in -1.0f64..20.0,
            samples in proptest::collection::vec((0u64..20_000, 0usize..2000, proptest::bool::ANY, 0u64..50), 0..2000),
        ) {
            let max = min + span;
            let mut k = Knee::new(initial, min, max).with_headroom(headroom);
            let mut now = 0;
            for (rtt, inflight, dropped, gap) in samples {
                now += gap;
                k.on_sample(fresh(&k, now, rtt, inflight, dropped));
                proptest::prop_assert!(k.limit.is_finite());
                proptest::prop_assert!((min..=max).contains(&k.limit()));
                if let Some(b) = k.baseline {
                    proptest::prop_assert!(b.is_finite() && b >= 0.0);
                }
            }
        }
    }
}
