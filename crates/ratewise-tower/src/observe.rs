//! Observability: `metrics` handles, a rate-limited warning for refusals,
//! and the JSON status snapshot.
//!
//! Metric names (labels in braces):
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `ratewise_admitted_total{policy}` | counter | requests a policy admitted |
//! | `ratewise_refused_total{policy}` | counter | requests a policy refused (429 sent) |
//! | `ratewise_shadow_refused_total{policy}` | counter | refusals shadow mode let through |
//! | `ratewise_keys_tracked{policy}` | gauge | keys a per-key policy holds (refreshed every 1 024 decisions and on each status snapshot) |
//! | `ratewise_decision_seconds` | histogram | time to decide: the limiters, the bookkeeping and the headers (on the layer's clock, so zero on a frozen `ManualClock`; for an async backend, until its answer) |
//! | `ratewise_degraded_total{source}` | counter | decisions a backend made without its store (`fail_open`, `fail_closed`, `local_fallback`) |
//! | `ratewise_backend_healthy` | gauge | 1 while the backend's store answers, 0 after a degraded decision or error |
//! | `ratewise_bypassed_total{reason}` | counter | requests not checked (`disabled`, `bypass`) |
//! | `ratewise_client_admitted_total{dependency}` | counter | outbound calls [`ClientConcurrencyLayer`](crate::ClientConcurrencyLayer) gave a permit |
//! | `ratewise_client_refused_total{dependency}` | counter | outbound calls it refused locally |
//! | `ratewise_client_dropped_total{dependency}` | counter | outbound calls completed as overload signals (5xx, 429, errors, too slow) |
//! | `ratewise_client_limit{dependency}` | gauge | its concurrency limit after each completion |
//!
//! The client side (this crate's [`ThrottleLayer`](crate::ThrottleLayer) and
//! the reqwest middleware) reports the `ratewise_client_*` family, labelled
//! by `partition` as these are by `policy`; its names live in one place,
//! [`ratewise_client::exchange::names`].
//!
//! Handles are registered with the global recorder on first use, so install
//! the recorder (e.g. `metrics-exporter-prometheus`) before the first
//! request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use ratewise::striped::StripedCounter;
use ratewise::Timestamp;
use serde::Serialize;

use crate::key::Scope;

pub(crate) struct PolicyHandles {
    pub(crate) admitted: Counter,
    pub(crate) refused: Counter,
    pub(crate) shadow_refused: Counter,
    pub(crate) keys: Gauge,
}

/// One policy's metric handles, registered on first use.
pub(crate) struct PolicyMetrics {
    name: Arc<str>,
    handles: OnceLock<PolicyHandles>,
}

impl PolicyMetrics {
    pub(crate) fn new(name: &Arc<str>) -> Self {
        PolicyMetrics {
            name: name.clone(),
            handles: OnceLock::new(),
        }
    }

    pub(crate) fn get(&self) -> &PolicyHandles {
        self.handles.get_or_init(|| {
            let p = self.name.to_string();
            PolicyHandles {
                admitted: metrics::counter!("ratewise_admitted_total", "policy" => p.clone()),
                refused: metrics::counter!("ratewise_refused_total", "policy" => p.clone()),
                shadow_refused: metrics::counter!("ratewise_shadow_refused_total", "policy" => p.clone()),
                keys: metrics::gauge!("ratewise_keys_tracked", "policy" => p),
            }
        })
    }
}

pub(crate) struct LayerHandles {
    pub(crate) latency: Histogram,
    pub(crate) backend_healthy: Gauge,
    pub(crate) bypass_disabled: Counter,
    pub(crate) bypass_predicate: Counter,
}

/// Layer-wide metric handles, registered on first use.
#[derive(Default)]
pub(crate) struct LayerMetrics {
    handles: OnceLock<LayerHandles>,
}

impl LayerMetrics {
    pub(crate) fn get(&self) -> &LayerHandles {
        self.handles.get_or_init(|| {
            let backend_healthy = metrics::gauge!("ratewise_backend_healthy");
            // Healthy until a degraded decision says otherwise.
            backend_healthy.set(1.0);
            LayerHandles {
                latency: metrics::histogram!("ratewise_decision_seconds"),
                backend_healthy,
                bypass_disabled: metrics::counter!("ratewise_bypassed_total", "reason" => "disabled"),
                bypass_predicate: metrics::counter!("ratewise_bypassed_total", "reason" => "bypass"),
            }
        })
    }

    pub(crate) fn degraded(source: ratewise::backend::DecisionSource) {
        metrics::counter!("ratewise_degraded_total", "source" => source.as_str()).increment(1);
    }
}

/// Lets one `warn!` through per interval; counts the ones held back, so a
/// flood of refusals cannot flood the logs.
///
/// A held-back warning only reads `last` and adds to a striped counter:
/// under a flood on many cores no line that every core writes is touched.
pub(crate) struct WarnGate {
    interval_nanos: u64,
    /// The time of the last warning + 1 (0: never warned).
    last: AtomicU64,
    suppressed: StripedCounter,
}

impl WarnGate {
    pub(crate) fn new(interval: Duration) -> Self {
        WarnGate {
            interval_nanos: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            last: AtomicU64::new(0),
            suppressed: StripedCounter::new(),
        }
    }

    /// `Some(n)` if a warning may be logged now, `n` being how many were
    /// held back since the last one.
    pub(crate) fn admit(&self, now_nanos: u64) -> Option<u64> {
        let stamp = now_nanos.saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && stamp.saturating_sub(last) < self.interval_nanos {
            self.suppressed.add(1);
            return None;
        }
        self.last
            .compare_exchange(last, stamp, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
            .map(|_| self.suppressed.take())
            .or_else(|| {
                self.suppressed.add(1);
                None
            })
    }
}

/// The refusal ratio above which a layer's [`Health`] raises its alert,
/// unless configured otherwise.
pub const DEFAULT_ALERT_RATIO: f64 = 0.5;

/// One protection layer's refusals since it was built, for operators: a
/// ratio above the layer's alert threshold means the layer is turning
/// away a large share of the work (the dependency fails, or demand is
/// above capacity) and someone should look. Counts since the start dilute
/// a fresh outage in a long healthy history: [`Health::since`] gives the
/// figures, and the alert, over the interval between two snapshots.
///
/// ```
/// use ratewise_tower::observe::Health;
///
/// // A day of traffic with few refusals, then a minute refusing most.
/// let morning = Health::new("circuit_breaker", 1_000_000, 10, 0.5);
/// let now = Health::new("circuit_breaker", 1_000_100, 910, 0.5);
/// assert!(!now.alert, "diluted: {}", now.refusal_ratio);
/// let minute = now.since(&morning);
/// assert_eq!((minute.admitted, minute.refused), (100, 900));
/// assert!(minute.alert);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Health {
    /// `rate_limit`, `circuit_breaker` or `concurrency_limit`.
    pub layer: &'static str,
    /// Requests let through.
    pub admitted: u64,
    /// Requests refused.
    pub refused: u64,
    /// `refused / (admitted + refused)`; 0 before the first request.
    pub refusal_ratio: f64,
    /// The ratio is above the layer's threshold.
    pub alert: bool,
    /// The layer's threshold.
    pub alert_above: f64,
}

impl Health {
    /// The health of a layer that let `admitted` through and refused
    /// `refused`, alerting above `alert_above`.
    pub fn new(layer: &'static str, admitted: u64, refused: u64, alert_above: f64) -> Self {
        let total = admitted + refused;
        let refusal_ratio = if total == 0 {
            0.0
        } else {
            refused as f64 / total as f64
        };
        Health {
            layer,
            admitted,
            refused,
            refusal_ratio,
            alert: refusal_ratio > alert_above,
            alert_above,
        }
    }

    /// The health over the interval since `earlier`, an older snapshot of
    /// the same layer: the requests admitted and refused in between, their
    /// ratio, and the alert on it (at this snapshot's threshold). Counts
    /// never go back, so an `earlier` that is in fact later gives zeros.
    pub fn since(&self, earlier: &Health) -> Health {
        Health::new(
            self.layer,
            self.admitted.saturating_sub(earlier.admitted),
            self.refused.saturating_sub(earlier.refused),
            self.alert_above,
        )
    }
}

/// The window a status snapshot's recent figures cover, unless configured
/// otherwise.
pub const DEFAULT_RECENT_WINDOW: Duration = Duration::from_secs(60);

/// Counts taken at earlier status snapshots, so that a snapshot can also
/// report the interval since the latest one at least `window` old (or the
/// oldest, while the layer is younger than that): an outage after a long
/// healthy history shows there, where counts since the start dilute it.
/// A sample is kept at most every sixteenth of the window, so memory stays
/// bounded however often the status is read.
pub(crate) struct RecentCounts {
    window: Duration,
    samples: Mutex<VecDeque<Sample>>,
}

/// When a snapshot was taken, and its (admitted, refused) per policy.
type Sample = (Timestamp, Vec<(u64, u64)>);

impl RecentCounts {
    pub(crate) fn new(window: Duration) -> Self {
        RecentCounts {
            window,
            samples: Mutex::new(VecDeque::new()),
        }
    }

    /// Records `counts` (admitted, refused per policy, cumulative) taken
    /// at `now`, and returns the interval's length and the counts at its
    /// start. A clock that went back starts the history again.
    pub(crate) fn baseline(
        &self,
        now: Timestamp,
        counts: &[(u64, u64)],
    ) -> (Duration, Vec<(u64, u64)>) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples
            .back()
            .is_some_and(|(t, c)| *t > now || c.len() != counts.len())
        {
            samples.clear();
        }
        let step = self.window / 16;
        if samples
            .back()
            .is_none_or(|(t, _)| now.saturating_duration_since(*t) >= step)
        {
            samples.push_back((now, counts.to_vec()));
        }
        while samples.len() >= 2
            && samples
                .get(1)
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= self.window)
        {
            samples.pop_front();
        }
        match samples.front() {
            Some((t, c)) => (now.saturating_duration_since(*t), c.clone()),
            None => (Duration::ZERO, counts.to_vec()),
        }
    }
}

/// A point-in-time view of the limiter, for a health or status endpoint
/// (`serde_json::to_string(&handle.status())`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Status {
    /// `false` while the kill switch is off (every request passes).
    pub enabled: bool,
    /// `true` in shadow mode (refusals are counted, never sent).
    pub shadow: bool,
    /// The policy sets (the default set first, then routes and tiers).
    pub sets: Vec<SetStatus>,
    /// The decision backend.
    pub backend: BackendStatus,
}

/// One policy set in a [`Status`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SetStatus {
    /// `default`, or the route or tier name.
    pub name: String,
    /// Its policies, in checking order.
    pub policies: Vec<PolicyStatus>,
}

/// One policy in a [`Status`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyStatus {
    /// The policy name (as in `RateLimit-Policy`).
    pub name: String,
    /// Per key or global.
    pub scope: Scope,
    /// `q`: units per window.
    pub quota: u64,
    /// `w`: the window in seconds (fractional).
    pub window_secs: f64,
    /// Keys tracked now (`null` when the backend keeps them elsewhere).
    pub keys_tracked: Option<usize>,
    /// Requests this policy admitted.
    pub admitted: u64,
    /// Requests this policy refused.
    pub refused: u64,
    /// Refusals shadow mode (or this policy's own dark launch) let
    /// through.
    pub shadow_refused: u64,
    /// A [dark-launched](crate::Policy::shadow) policy: counted, never
    /// enforced.
    pub shadow: bool,
    /// `refused / (admitted + refused)` since the layer was built.
    pub refusal_ratio: f64,
    /// The refusal ratio is above the layer's threshold
    /// ([`RateLimitLayerBuilder::refusal_alert`](crate::RateLimitLayerBuilder::refusal_alert)).
    pub alert: bool,
    /// The same figures, and the alert, over the recent interval: since
    /// the latest earlier snapshot at least the layer's recent window old
    /// ([`RateLimitLayerBuilder::recent_window`](crate::RateLimitLayerBuilder::recent_window),
    /// default 60 s), or since the first snapshot while none is. Zero at
    /// the first snapshot. An operator's alert reads this one: counts since
    /// the start dilute a fresh outage in a long healthy history.
    pub recent: Health,
    /// The recent interval's length in seconds.
    pub recent_secs: f64,
}

/// The backend in a [`Status`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BackendStatus {
    /// `memory`, or the async backend's type name.
    pub kind: String,
    /// `false` after a degraded decision or an error, until the next
    /// decision the backend's store makes.
    pub healthy: bool,
    /// Decisions made without the store (fail open/closed, local fallback)
    /// or backend errors.
    pub degraded_decisions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_counts_keep_one_window_and_bounded_samples() {
        let r = RecentCounts::new(Duration::from_secs(60));
        let at = |s: u64| Timestamp::ZERO + Duration::from_secs(s);
        assert_eq!(r.baseline(at(0), &[(0, 0)]), (Duration::ZERO, vec![(0, 0)]));
        // Read every second for ten minutes: the interval never passes the
        // window by more than a sample's step, and at most 17 are kept.
        for s in 1..=600 {
            let (len, before) = r.baseline(at(s), &[(s, 0)]);
            assert!(len >= Duration::from_secs(60).min(at(s) - at(0)), "{s}");
            assert!(len < Duration::from_secs(64), "{s}: {len:?}");
            assert_eq!(before[0].0, s - len.as_secs());
            let kept = r.samples.lock().unwrap().len();
            assert!(kept <= 17, "{s}: {kept}");
        }
        // A clock that went back starts again.
        assert_eq!(
            r.baseline(at(10), &[(7, 1)]),
            (Duration::ZERO, vec![(7, 1)])
        );
    }

    #[test]
    fn health_since_an_earlier_snapshot_judges_the_interval_alone() {
        let earlier = Health::new("concurrency_limit", 990, 10, 0.2);
        let later = Health::new("concurrency_limit", 1_000, 40, 0.2);
        assert!(!later.alert, "{later:?}");
        let interval = later.since(&earlier);
        assert_eq!((interval.admitted, interval.refused), (10, 30));
        assert!((interval.refusal_ratio - 0.75).abs() < 1e-12);
        assert!(interval.alert);
        assert_eq!(interval.alert_above, 0.2);
        // Nothing in between: no ratio, no alert; swapped: zeros, never a
        // wrapped count.
        let idle = later.since(&later);
        assert_eq!((idle.admitted, idle.refused, idle.alert), (0, 0, false));
        let swapped = earlier.since(&later);
        assert_eq!((swapped.admitted, swapped.refused), (0, 0));
    }

    #[test]
    fn warn_gate_lets_one_through_per_interval_and_counts_the_rest() {
        let g = WarnGate::new(Duration::from_secs(1));
        assert_eq!(g.admit(0), Some(0));
        for t in 1..=99u64 {
            assert_eq!(g.admit(t * 1_000_000), None);
        }
        assert_eq!(g.admit(1_000_000_000), Some(99));
        assert_eq!(g.admit(1_500_000_000), None);
        assert_eq!(g.admit(2_000_000_000), Some(1));
    }

    /// Four threads refusing at once: one warning in the interval, and the
    /// next one counts every other refusal exactly once.
    #[test]
    fn warn_gate_counts_every_held_back_warning_across_threads() {
        let g = WarnGate::new(Duration::from_secs(1));
        let passed: u64 = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4u64)
                .map(|t| {
                    let g = &g;
                    scope.spawn(move || {
                        (0..10_000u64)
                            .filter(|i| g.admit(t * 10_000 + i).is_some())
                            .count() as u64
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(passed, 1);
        assert_eq!(g.admit(2_000_000_000), Some(39_999));
    }
}
