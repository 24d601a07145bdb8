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
/// * **Hold or grow.** The target is `B + headroom × F`, where `F` is the
///   fastest `B` learnt so far (headroom 0.3 by default: on the server it
///   was learnt on, a queue of about 30 % of the workers). The queue's
///   budget is thus a latency, not a share of the current latency: a server
///   that became twice as slow gets the same milliseconds of queue, which
///   is half as many queued requests, not twice the milliseconds. While the
///   window's mean latency `r` is within the target, or not significantly
///   above it, the limit grows by `√limit / 2` per window, scaled by the
///   share of the room `headroom × F` still left above `r` (from the full
///   step at `B` down to half of it near the target, so the limit settles
///   instead of overshooting). While `r` is in the lower half of that room
///   (no queue to speak of), it also grows by up to an eighth of itself
///   (all of it at `B`, none at half the room): a knee that moved far away
///   (a slower dependency, more workers) is reached in a few windows, not
///   dozens of `√limit` steps that each refuse work the server could do.
///   Growth needs a window that used at least 90 % of the limit (an idle
///   client does not inflate its limit).
/// * **Cut.** When `r` exceeds the target by more than two standard errors
///   of the window's mean (noise is not a signal), the limit is multiplied by
///   `√(target / r)` (at least ½): half the proportional step in log terms,
///   because part of the excess may be a slower server rather than a queue
///   (the test below tells). The next window counts only requests admitted
///   after the cut (their permits carry the controller's epoch): the ones
///   admitted before still report the old queue, and cutting again on them
///   would cut twice for one queue (Envoy #11579 is the same mistake with
///   minRTT).
/// * **The test.** If the limit has been cut to 70 % of where the episode
///   of cuts began, the latency is still above target and it fell by less
///   than 10 % since the window before (a queue we made drains as the
///   limit shrinks; once it is gone the latency stops falling), the
///   latency is not a queue: `B` becomes the current latency, the target
///   moves with it, the latest cut (which did not lower the latency) is
///   undone, and the limit grows back to the new knee. A latency spike of a
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
    /// The current run of cuts: the limit it began at, the latest window's
    /// latency and the limit before the latest cut.
    episode: Option<Episode>,
    /// Bumped at each cut: only requests admitted after it judge it.
    epoch: u64,
    /// The lowest no-queue latency learnt so far, in seconds: the headroom
    /// is a share of it.
    fastest: Option<f64>,
}

/// A run of cuts.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Episode {
    /// The limit when the first cut was made.
    start: f64,
    /// The mean latency of the latest window, in seconds.
    latency: f64,
    /// The limit before the latest cut.
    before: f64,
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
const TEST_CUT: f64 = 0.7;
/// ...if the latency fell by less than this share since the window
/// before.
const TEST_FALL: f64 = 0.1;
/// How far a faster window pulls the baseline down.
const BASELINE_DOWN: f64 = 0.1;
/// Standard errors by which a window's mean must exceed the target to cut.
const SIGNIFICANT: f64 = 2.0;
/// The most a window with no queue grows the limit by, as a share of it.
const FAST_GROWTH: f64 = 0.125;
/// The cut after a window with a loss.
const LOSS_BACKOFF: f64 = 0.8;

impl Default for Knee {
    fn default() -> Self {
        Knee::new(20, 4, 1000)
    }
}

impl Knee {
    /// The default headroom ([`Knee::with_headroom`]). A smaller one keeps a
    /// shorter queue, so a lower p99, and idles workers more often: at 0.25 the
    /// fixed limit tuned for each shipped overload scenario's starting capacity
    /// beat `Knee` on both goodput within the objective and p99 in three of ten
    /// scenarios (by a hair; at 0.2 in five); from 0.3 to 0.4 in none, over 3
    /// and 6 seeds.
    pub const DEFAULT_HEADROOM: f64 = 0.3;

    /// Starts at `initial`, within `[min, max]` (`min` at least 1, `max` at
    /// least `min`); headroom 0.3, timeout 5 s.
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        let min = min.max(1) as f64;
        let max = (max as f64).max(min);
        Knee {
            limit: super::clamp(initial as f64, min, max),
            min,
            max,
            headroom: Knee::DEFAULT_HEADROOM,
            timeout: Duration::from_secs(5),
            baseline: None,
            window: Window::default(),
            episode: None,
            epoch: 0,
            fastest: None,
        }
    }

    /// A request slower than this counts as a drop.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The latency above the no-queue latency the limit may cost, as a share
    /// of the fastest no-queue latency learnt ([`Knee::DEFAULT_HEADROOM`], 0.3: a
    /// mean latency up to 30 % above no-queue while the server is as fast as
    /// it has been).
    /// Negative or NaN values count as 0; at most 10.
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
        // The queueing the limit may cost, in seconds: a share of the
        // fastest the server has been, so a server that became slower gets
        // the same latency budget, not a larger one.
        let fastest = self.fastest.map_or(base, |f| f.min(base));
        self.fastest = Some(fastest);
        let room = self.headroom * fastest;
        let target = base + room;
        if r - SIGNIFICANT * se > target {
            let episode = *self.episode.get_or_insert(Episode {
                start: self.limit,
                latency: f64::INFINITY,
                before: self.limit,
            });
            self.episode = Some(Episode {
                latency: r,
                before: self.limit,
                ..episode
            });
            if self.limit <= (episode.start * TEST_CUT).max(self.min)
                && r >= (1.0 - TEST_FALL) * episode.latency
            {
                // Cut hard and the latency stayed: not our queue. The
                // latest cut did not lower the latency either: undo it.
                self.baseline = Some(r);
                self.limit = episode.before;
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
                // The full step while the latency has most of its room left,
                // down to half of it near the target.
                let left = 1.0 - (r - base) / room.max(f64::MIN_POSITIVE);
                // While the latency is in the lower half of its room (no
                // queue to speak of), also grow by a share of the limit, up
                // to an eighth of it: the knee moved away (a slower
                // dependency, more workers) and every window spent climbing
                // to it in √limit steps refuses work the server could do.
                let fast = super::clamp(2.0 * left - 1.0, 0.0, 1.0) * FAST_GROWTH * self.limit;
                let next =
                    self.limit + super::clamp(left, 0.5, 1.0) * self.limit.sqrt() / 2.0 + fast;
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

    // The worked traces below use a headroom of a quarter, which keeps
    // their arithmetic short.
    #[test]
    fn worked_trace_grow_cut_and_relearn() {
        let mut k = Knee::new(25, 4, 200).with_headroom(0.25);
        // First window: 20 ms, the limit used. It becomes the baseline and,
        // with no queue at all (all the room left), the limit grows by
        // √25 / 2 = 2.5 plus an eighth of itself, 3.125.
        let t = window(&mut k, 0, 20, 25);
        assert_eq!(k.baseline(), Some(Duration::from_millis(20)));
        let first = 25.0 + 2.5 + 3.125;
        assert!((k.limit - first).abs() < 1e-9, "{}", k.limit);
        // A window that did not use the limit: no growth.
        let t = window(&mut k, t, 20, 10);
        assert!((k.limit - first).abs() < 1e-9);
        // Latency doubles (40 ms): cut by √(target / r) = √(25 / 40), and
        // a new epoch: only requests admitted from now on judge the cut.
        let g = (25.0f64 / 40.0).sqrt();
        let epoch = k.epoch();
        let t = window(&mut k, t, 40, 27);
        assert!((k.limit - first * g).abs() < 1e-9, "{}", k.limit);
        assert_eq!(k.epoch(), epoch + 1);
        // A late answer to a request admitted before the cut is not counted.
        k.on_sample(sample(t, 90, 27, false));
        assert_eq!(k.window.count, 0);
        // Still 40 ms: cut again, to 62.5 % of where the cuts began, under
        // the 70 % of the test.
        let t = window(&mut k, t, 40, 21);
        let cut = first * g * g;
        assert!((k.limit - cut).abs() < 1e-9, "{}", k.limit);
        // The next window finds the latency where it was: the server, not a
        // queue. The baseline is learnt again at 40 ms, and the latest cut,
        // which did not lower the latency, is undone.
        let t = window(&mut k, t, 40, 17);
        assert_eq!(k.baseline(), Some(Duration::from_millis(40)));
        let undone = first * g;
        assert!((k.limit - undone).abs() < 1e-9, "{}", k.limit);
        // From there it grows back at the new latency, by the full step and
        // an eighth of itself: the target is 40 ms plus a quarter of the
        // fastest no-queue latency seen (20 ms), and a 40 ms window has all
        // that room left.
        let used = k.limit() + 1;
        window(&mut k, t, 40, used);
        assert!(
            (k.limit - (undone + undone.sqrt() / 2.0 + 0.125 * undone)).abs() < 1e-9,
            "{}",
            k.limit
        );
    }

    #[test]
    fn the_step_shrinks_near_the_target() {
        // Baseline 20 ms, target 25 ms: a 24 ms window has a fifth of its
        // room left and grows by half the step (the least) and nothing more
        // (the latency is past half its room); a 22 ms window by 60 % of the
        // step plus a fifth of an eighth of the limit (60 % of the room
        // left is a fifth of the way from half to all of it).
        let mut k = Knee::new(25, 4, 200).with_headroom(0.25);
        let t = window(&mut k, 0, 20, 25);
        let l = k.limit;
        let used = k.limit();
        let t = window(&mut k, t, 24, used);
        assert!(
            (k.limit - (l + 0.5 * l.sqrt() / 2.0)).abs() < 1e-9,
            "{}",
            k.limit
        );
        let l = k.limit;
        let used = k.limit();
        window(&mut k, t, 22, used);
        assert!(
            (k.limit - (l + 0.6 * l.sqrt() / 2.0 + 0.2 * 0.125 * l)).abs() < 1e-9,
            "{}",
            k.limit
        );
    }

    #[test]
    fn a_slower_server_gets_the_same_latency_budget_not_a_larger_one() {
        // Learnt at 20 ms (budget: a quarter of it, 5 ms), then the server
        // halves its speed and the baseline is learnt again at 40 ms.
        let mut k = Knee::new(30, 4, 200).with_headroom(0.25);
        let mut t = window(&mut k, 0, 20, 10);
        while k.baseline() != Some(Duration::from_millis(40)) {
            let used = k.limit();
            t = window(&mut k, t, 40, used);
        }
        // 47 ms is 17.5 % above the new baseline, within a relative quarter
        // (50 ms) but 7 ms of queue, over the 5 ms budget: a cut.
        let (l, epoch) = (k.limit, k.epoch());
        let used = k.limit();
        window(&mut k, t, 47, used);
        assert!(k.limit < l && k.epoch() == epoch + 1, "{}", k.limit);
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
