//! Pacing from server hints: when a response says how much quota is left
//! (`RateLimit-Remaining`) and when it comes back (`RateLimit-Reset`), slow
//! down *before* any 429.
//!
//! A header can only **lower** the pace: other clients share the quota, so
//! "remaining 4000" is no invitation to send 4000 now; raising the rate is the
//! controller's job. A cap in force is never raised by a later header and
//! lapses only at its own reset; then the pace returns to the owner's
//! controller (or base pace), never above. Servers mean two things by
//! "reset", chosen with [`ResetMeaning`]:
//!
//! * [`ResetMeaning::WindowEnd`] (GitHub, the IETF drafts): the quota comes
//!   back whole at the reset. `remaining > 0` caps the rate at
//!   `remaining / reset` (unless [`HintCap::spreading_windows`] turns that
//!   off, as the default [`Throttle`](super::throttle::Throttle) does);
//!   `remaining = 0` pauses until the reset.
//! * [`ResetMeaning::Refill`] (token buckets, ratewise's own
//!   [`Decision::headers`](ratewise::Decision::headers)): the reset is the time
//!   to full, so an *empty* bucket is paced at `limit / reset`, not paused; a
//!   bucket with tokens left, or a reset of two seconds or less (rounded up
//!   by whole-second headers), sets no cap.
//! * [`ResetMeaning::Auto`] (the default) tells them apart by evidence.
//!
//! A remaining count without a reset is ignored. [`HintCap`] is the
//! bookkeeping; [`WithHints`] applies it to any strategy through a core
//! [`Pacer`].

use std::time::Duration;

use super::pacer::Pacer;
use super::{Next, Outcome, ServerHints, Strategy};
use ratewise::time::Timestamp;

/// What a server's `RateLimit-Reset` (or `X-RateLimit-Reset`) means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetMeaning {
    /// The end of the current quota window: the whole quota returns then.
    WindowEnd,
    /// The time until a token bucket (or a sliding window) is full again
    /// (needs `RateLimit-Limit`).
    Refill,
    /// Told apart from what the server does (the default). Evidence of a
    /// refill: the remaining count rises before the announced reset, or a
    /// 429's `Retry-After` is much shorter than the reset. Evidence of a
    /// window: a 429's `Retry-After` equals the reset, or, with nothing
    /// left, the announced reset instant stands still while time passes
    /// (measured from the first response that said nothing was left, and
    /// weighed before a short `Retry-After`: some servers send the same
    /// one whatever the real wait).
    /// Until there is evidence, a response that states the limit is read as
    /// a refill (pace at `limit / reset`; a fixed window then costs one 429
    /// before it is recognised), one without a limit as a window end.
    #[default]
    Auto,
}

/// What the latest hints allow: a rate cap and a pause, each until a time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HintCap {
    meaning: ResetMeaning,
    cap: Option<(f64, Timestamp)>,
    pause_until: Timestamp,
    /// With [`ResetMeaning::Auto`]: what the evidence says so far.
    detected: Option<ResetMeaning>,
    /// The latest (remaining, reset instant, time seen).
    last: Option<(u64, Timestamp, Timestamp)>,
    /// The first response of the current run saying nothing is left: (time
    /// seen, reset instant).
    empty_since: Option<(Timestamp, Timestamp)>,
    /// Whether a window's remaining quota caps the rate at
    /// `remaining / reset` (see [`HintCap::spreading_windows`]).
    spread_window: bool,
}

/// Header resets are often whole seconds: instants closer than this are the
/// same instant.
const RESET_TOLERANCE: Duration = Duration::from_secs(1);

impl Default for HintCap {
    /// [`HintCap::new`].
    fn default() -> Self {
        HintCap::new()
    }
}

impl HintCap {
    /// No hints seen; resets read as window ends.
    pub fn new() -> Self {
        HintCap::with_meaning(ResetMeaning::WindowEnd)
    }

    /// No hints seen; resets read as `meaning`.
    pub fn with_meaning(meaning: ResetMeaning) -> Self {
        HintCap {
            meaning,
            cap: None,
            pause_until: Timestamp::ZERO,
            detected: None,
            last: None,
            empty_since: None,
            spread_window: true,
        }
    }

    /// Whether a window with quota left caps the rate at `remaining / reset`
    /// (default `true`: the quota is spread over the time left). With
    /// `false`, a window's hints act only when nothing is left — a success
    /// or a 429 saying `remaining = 0` pauses until the reset — as a
    /// bucket's do: quota that is left admits the next request whatever the
    /// pace, and a fixed window gives its whole quota back at its end, so
    /// spreading it only delays a job that needs more than one window's
    /// worth. The default [`Throttle`](super::throttle::Throttle) does not
    /// spread (pacing is its controller's job).
    pub fn spreading_windows(mut self, spread: bool) -> Self {
        self.spread_window = spread;
        self
    }

    /// Takes in the hints of a response received at `now`.
    ///
    /// A hint only ever *lowers* the cap: a cap in force stays until its own
    /// reset passes, and a later response that would allow more (a higher
    /// cap, or no cap at all) is ignored until then. Caps end only by
    /// lapsing, never because a header said so — except once the evidence
    /// shows the reset to be a window's end ([`ResetMeaning::Auto`]): a cap
    /// set while it read as a refill was read wrong, and goes.
    ///
    /// Returns whether these hints are the evidence that did so: the
    /// refusals before them were a window's, not a pace's.
    pub fn observe(&mut self, now: Timestamp, hints: &ServerHints) -> bool {
        let (Some(remaining), Some(reset)) = (hints.remaining, hints.reset_after) else {
            return false;
        };
        let until = now.saturating_add(reset);
        let secs = reset.as_secs_f64();
        let mut window_found = false;
        if self.meaning == ResetMeaning::Auto {
            let window = Some(ResetMeaning::WindowEnd);
            let known = self.detected == window;
            self.detect(now, remaining, until, hints);
            window_found = !known && self.detected == window;
            if window_found {
                self.cap = None;
            }
        }
        self.last = Some((remaining, until, now));
        if remaining == 0 {
            self.empty_since.get_or_insert((now, until));
        } else {
            self.empty_since = None;
        }
        let meaning = self.reading(hints.limit);
        let cap = match meaning {
            ResetMeaning::WindowEnd => {
                if remaining == 0 {
                    self.pause_until = self.pause_until.max(until);
                    None
                } else if secs > 0.0 {
                    // (`None` when not spreading.)
                    self.spread_window.then(|| remaining as f64 / secs)
                } else {
                    None
                }
            }
            // A bucket with tokens left admits the next request whatever
            // the pace; only an empty one needs pacing, at no more than the
            // refill rate the reset implies (`limit / reset` is a lower bound
            // of that rate even when the header rounds the reset up). A
            // reset of two seconds or less is within that rounding: delta
            // seconds round up by up to a second, and an epoch reset read
            // against this clock by up to a second more, so the bucket may
            // refill ten or a hundred times faster than `limit / reset`
            // (a 100/s bucket's 0.1 s read as 1.06 s): it says too little
            // to pace by (the controller paces).
            ResetMeaning::Refill | ResetMeaning::Auto => match hints.limit {
                Some(limit) if remaining == 0 && limit > 0 && reset > RESET_TOLERANCE * 2 => {
                    Some(limit as f64 / secs)
                }
                _ => None,
            },
        };
        if let Some(rate) = cap {
            self.lower(now, rate, until);
        }
        window_found
    }

    /// How the reset is read now: the configured meaning, or for
    /// [`ResetMeaning::Auto`] the evidence, else a refill when the limit is
    /// known and a window end when it is not.
    pub fn reading(&self, limit: Option<u64>) -> ResetMeaning {
        match (self.meaning, self.detected) {
            (ResetMeaning::Auto, Some(m)) => m,
            (ResetMeaning::Auto, None) if limit.is_some() => ResetMeaning::Refill,
            (ResetMeaning::Auto, None) => ResetMeaning::WindowEnd,
            (m, _) => m,
        }
    }

    /// What the evidence says the reset means, if it has said anything yet.
    pub fn detected(&self) -> Option<ResetMeaning> {
        self.detected
    }

    fn detect(&mut self, now: Timestamp, remaining: u64, until: Timestamp, hints: &ServerHints) {
        let reset = until.saturating_duration_since(now);
        // Empty since a response seconds ago whose reset instant still
        // stands: a bucket would have refilled (or, drained by others, moved
        // its instant on). This outweighs a 429's short `Retry-After`, which
        // some servers send whatever the real wait (Shopify's constant 2 s).
        if remaining == 0 {
            if let Some((seen0, until0)) = self.empty_since {
                if now >= seen0.saturating_add(RESET_TOLERANCE * 5 / 2)
                    && now.saturating_add(RESET_TOLERANCE / 2) < until0
                    && until <= until0.saturating_add(RESET_TOLERANCE)
                {
                    self.detected = Some(ResetMeaning::WindowEnd);
                    return;
                }
            }
        }
        if let (Some(ra), 0) = (hints.retry_after, remaining) {
            if reset > RESET_TOLERANCE {
                if ra.saturating_mul(2).saturating_add(RESET_TOLERANCE) < reset {
                    self.detected = Some(ResetMeaning::Refill);
                    return;
                }
                // Whole-second headers make a fast bucket's "retry after 1 s"
                // and "reset in 1 s" look alike: only a reset longer than
                // the rounding can show a window.
                if reset > RESET_TOLERANCE * 2 && ra.saturating_add(RESET_TOLERANCE) >= reset {
                    self.detected = Some(ResetMeaning::WindowEnd);
                    return;
                }
            }
        }
        let Some((r0, until0, _)) = self.last else {
            return;
        };
        if remaining > r0 && now.saturating_add(RESET_TOLERANCE) < until0 {
            // The quota came back before the announced reset: no window.
            self.detected = Some(ResetMeaning::Refill);
        }
    }

    /// For a response's `hints`, the pace that spends the quota it says is
    /// left by its reset, once the evidence has shown that the reset ends a
    /// window ([`ResetMeaning::Auto`]'s detection; a meaning configured is
    /// an assumption, not evidence). A window gives its whole quota back at
    /// its end, so that pace never asks for more than the window holds. The
    /// reset counts as a second at least (a header rounds it up from less);
    /// `None` with nothing left.
    pub fn window_floor(&self, hints: &ServerHints) -> Option<f64> {
        let (left, reset) = (hints.remaining?, hints.reset_after?);
        (left > 0 && self.detected == Some(ResetMeaning::WindowEnd))
            .then(|| left as f64 / reset.as_secs_f64().max(1.0))
    }

    /// Installs a cap of `rate` until `until`, unless a lower one is in force
    /// at `now`.
    fn lower(&mut self, now: Timestamp, rate: f64, until: Timestamp) {
        match self.cap_at(now) {
            Some(current) if current < rate => {}
            _ => self.cap = Some((rate, until)),
        }
    }

    /// The rate cap in force at `now`, if any.
    pub fn cap_at(&self, now: Timestamp) -> Option<f64> {
        self.cap.filter(|(_, until)| now < *until).map(|(r, _)| r)
    }

    /// The end of a "nothing left" pause (in the past when none).
    pub fn pause_until(&self) -> Timestamp {
        self.pause_until
    }

    /// `rate` lowered to the cap in force at `now` (never raised).
    pub fn limit(&self, rate: Option<f64>, now: Timestamp) -> Option<f64> {
        match (rate, self.cap_at(now)) {
            (Some(r), Some(c)) => Some(r.min(c)),
            (None, c) => c,
            (r, None) => r,
        }
    }
}

/// Any strategy, plus pacing from server hints: the inner strategy's waits
/// are kept, and each attempt additionally waits for a slot at the hinted
/// rate and for a hinted pause to end.
#[derive(Debug)]
pub struct WithHints<S> {
    inner: S,
    hints: HintCap,
    /// Created at the first cap.
    pacer: Option<Pacer>,
}

impl<S: Strategy> WithHints<S> {
    /// `inner` with hint pacing, resets read as window ends (see
    /// [`ResetMeaning::Auto`] for the default the throttle uses).
    pub fn new(inner: S) -> Self {
        WithHints::with_meaning(inner, ResetMeaning::WindowEnd)
    }

    /// `inner` with hint pacing, resets read as `meaning`.
    pub fn with_meaning(inner: S, meaning: ResetMeaning) -> Self {
        WithHints {
            inner,
            hints: HintCap::with_meaning(meaning),
            pacer: None,
        }
    }

    /// The hint state.
    pub fn hints(&self) -> &HintCap {
        &self.hints
    }

    fn gate(&mut self, now: Timestamp, wait: Duration) -> Duration {
        let not_before = now.saturating_add(wait).max(self.hints.pause_until());
        let Some(cap) = self.hints.cap_at(now) else {
            return not_before.saturating_duration_since(now);
        };
        if self.pacer.is_none() {
            // Smooth pacing: a burst of one. A cap no pacer can represent
            // (below one request per 10⁶ s) is clamped by `set_rate_at`.
            self.pacer = Pacer::new(1.0).and_then(|p| p.with_burst(1)).ok();
        }
        match &self.pacer {
            Some(p) => {
                p.set_rate_at(cap, now);
                p.acquire_at(now, not_before)
            }
            None => not_before.saturating_duration_since(now),
        }
    }
}

impl<S: Strategy> Strategy for WithHints<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        let wait = self.inner.before_call(now);
        self.gate(now, wait)
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        self.hints.observe(now, &outcome.hints);
        match self.inner.after_attempt(now, outcome) {
            Next::Retry(wait) => Next::Retry(self.gate(now, wait)),
            other => other,
        }
    }

    forward_gauges_to_inner!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::{BackoffConfig, BackoffStrategy};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn hinted(remaining: u64, reset: u64) -> Outcome {
        Outcome::success().with_hints(ServerHints {
            remaining: Some(remaining),
            reset_after: Some(secs(reset)),
            ..ServerHints::default()
        })
    }

    #[test]
    fn remaining_over_reset_caps_and_never_raises() {
        let mut h = HintCap::new();
        let t = Timestamp::ZERO;
        h.observe(t, &hinted(10, 20).hints);
        assert_eq!(h.cap_at(t), Some(0.5));
        assert_eq!(h.limit(Some(5.0), t), Some(0.5), "lowered");
        assert_eq!(h.limit(Some(0.1), t), Some(0.1), "never raised");
        assert_eq!(h.limit(None, t), Some(0.5));
        assert_eq!(h.cap_at(t + secs(20)), None, "expires at the reset");
        // A later, more generous header never raises a cap in force …
        h.observe(t + secs(1), &hinted(500, 1).hints);
        assert_eq!(h.cap_at(t + secs(1)), Some(0.5));
        // … nor removes it; a lower one replaces it.
        h.observe(t + secs(1), &hinted(0, 1).hints);
        assert_eq!(h.cap_at(t + secs(1)), Some(0.5));
        h.observe(t + secs(2), &hinted(1, 10).hints);
        assert_eq!(h.cap_at(t + secs(2)), Some(0.1));
        assert_eq!(h.cap_at(t + secs(11)), Some(0.1));
        assert_eq!(h.cap_at(t + secs(12)), None, "lapses at its own reset");
        // Once lapsed, any cap applies again.
        h.observe(t + secs(12), &hinted(500, 1).hints);
        assert_eq!(h.cap_at(t + secs(12)), Some(500.0));
        // Hints without a reset are ignored.
        let mut h2 = HintCap::new();
        h2.observe(
            t,
            &ServerHints {
                remaining: Some(0),
                ..ServerHints::default()
            },
        );
        assert_eq!(h2, HintCap::new());
    }

    #[test]
    fn without_spreading_a_window_acts_only_when_nothing_is_left() {
        let mut h = HintCap::new().spreading_windows(false);
        let t = Timestamp::ZERO;
        h.observe(t, &hinted(10, 20).hints);
        assert_eq!(h.cap_at(t), None, "quota left: no cap");
        assert_eq!(h.limit(Some(5.0), t), Some(5.0));
        assert_eq!(h.pause_until(), Timestamp::ZERO);
        // Nothing left: pause until the window ends, as when spreading.
        h.observe(t + secs(1), &hinted(0, 19).hints);
        assert_eq!(h.pause_until(), t + secs(20));
        assert_eq!(h.cap_at(t + secs(1)), None);
    }

    #[test]
    fn refill_meaning_paces_an_empty_bucket_at_its_refill_rate() {
        // A 4500/hour bucket (1.25/s), empty: reset = 3600 s to full.
        let mut h = HintCap::with_meaning(ResetMeaning::Refill);
        let t = Timestamp::ZERO;
        let empty = ServerHints {
            remaining: Some(0),
            limit: Some(4500),
            reset_after: Some(Duration::from_secs(3600)),
            ..ServerHints::default()
        };
        h.observe(t, &empty);
        assert_eq!(h.pause_until(), Timestamp::ZERO, "no hour-long pause");
        assert_eq!(h.cap_at(t), Some(1.25));
        // Half full: reset 1800 s; 2250 now plus 2250 refilled over 1800 s.
        let half = ServerHints {
            remaining: Some(2250),
            reset_after: Some(Duration::from_secs(1800)),
            ..empty
        };
        // A bucket with tokens left sets no cap of its own.
        let mut fresh = HintCap::with_meaning(ResetMeaning::Refill);
        fresh.observe(t, &half);
        assert_eq!(fresh.cap_at(t), None);
        // Nor does an empty one whose reset is within whole-second rounding
        // (a 100/s bucket of 10 is full in 0.1 s and says "1").
        let fast = ServerHints {
            remaining: Some(0),
            limit: Some(10),
            reset_after: Some(Duration::from_secs(1)),
            ..ServerHints::default()
        };
        fresh.observe(t, &fast);
        assert_eq!(fresh.cap_at(t), None);
        // Two seconds are still within it: an epoch reset read against
        // another clock adds up to a second more.
        let two = ServerHints {
            reset_after: Some(Duration::from_secs(2)),
            ..fast
        };
        fresh.observe(t, &two);
        assert_eq!(fresh.cap_at(t), None);
        let four = ServerHints {
            reset_after: Some(Duration::from_secs(4)),
            ..fast
        };
        fresh.observe(t, &four);
        assert_eq!(fresh.cap_at(t), Some(2.5), "beyond the rounding: paced");
        // The same header never raises the cap already in force.
        h.observe(t, &half);
        assert_eq!(h.cap_at(t), Some(1.25));
        // Without the limit the reset says nothing usable.
        let mut h = HintCap::with_meaning(ResetMeaning::Refill);
        h.observe(
            t,
            &ServerHints {
                limit: None,
                ..empty
            },
        );
        assert_eq!(h.cap_at(t), None);
        // Read as a window end, the same empty bucket would pause an hour.
        let mut w = HintCap::new();
        w.observe(t, &empty);
        assert_eq!(w.pause_until(), t + Duration::from_secs(3600));
    }

    #[test]
    fn an_empty_quota_whose_reset_stands_still_is_a_window_whatever_retry_after_says() {
        // A fixed window of 6 per 10 s whose 429s always say "retry after
        // 2 s", as Shopify's do.
        let t = Timestamp::ZERO;
        let empty = |reset: u64, retry_after: Option<u64>| ServerHints {
            remaining: Some(0),
            limit: Some(6),
            reset_after: Some(secs(reset)),
            retry_after: retry_after.map(secs),
            ..ServerHints::default()
        };
        let mut h = HintCap::with_meaning(ResetMeaning::Auto);
        h.observe(t + secs(1), &empty(9, None)); // the window's last success
        h.observe(t + secs(2), &empty(8, Some(2)));
        assert_eq!(
            h.detected(),
            Some(ResetMeaning::Refill),
            "a Retry-After far shorter than the reset looks like a bucket"
        );
        assert_eq!(h.pause_until(), Timestamp::ZERO);
        assert_eq!(
            h.cap_at(t + secs(2)),
            Some(6.0 / 9.0),
            "the first empty answer's refill pace"
        );
        // Three seconds on, still empty, the same reset instant: a window.
        h.observe(t + secs(4), &empty(6, Some(2)));
        assert_eq!(h.detected(), Some(ResetMeaning::WindowEnd));
        assert_eq!(h.pause_until(), t + secs(10), "quiet until the window ends");
        assert_eq!(
            h.cap_at(t + secs(4)),
            None,
            "the refill's pace was read wrong"
        );

        // A bucket that others keep empty moves its reset on as time passes:
        // still a refill, paced and never paused.
        let mut b = HintCap::with_meaning(ResetMeaning::Auto);
        b.observe(t + secs(1), &empty(9, None));
        b.observe(t + secs(2), &empty(9, Some(2)));
        b.observe(t + secs(4), &empty(9, Some(2)));
        assert_eq!(b.detected(), Some(ResetMeaning::Refill));
        assert_eq!(b.pause_until(), Timestamp::ZERO);
        assert!(b.cap_at(t + secs(4)).is_some());
    }

    #[test]
    fn nothing_left_pauses_until_reset() {
        let inner = BackoffStrategy::new(BackoffConfig::constant(secs(1)), 0).unwrap();
        let mut s = WithHints::new(inner);
        let t = Timestamp::ZERO;
        assert_eq!(s.before_call(t), Duration::ZERO);
        assert_eq!(s.after_attempt(t, &hinted(0, 30)), Next::Done);
        assert_eq!(s.before_call(t + secs(10)), secs(20));
    }

    #[test]
    fn low_remaining_spreads_calls_before_any_429() {
        let inner = BackoffStrategy::new(BackoffConfig::constant(secs(1)), 0).unwrap();
        let mut s = WithHints::new(inner);
        let t = Timestamp::ZERO;
        s.before_call(t);
        s.after_attempt(t, &hinted(5, 10)); // 0.5/s until t = 10 s
        let waits: Vec<_> = (0..4).map(|_| s.before_call(t)).collect();
        assert_eq!(waits[0], Duration::ZERO);
        assert_eq!(waits[1], secs(2));
        assert_eq!(waits[3], secs(6));
    }
}
