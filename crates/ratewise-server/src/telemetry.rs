//! Metrics through the `metrics` facade, labelled by domain and rule only
//! (never by descriptor value, so the number of series is bounded by the
//! configuration). Handles are registered when a rule is compiled, so a
//! decision increments counters without building a key.
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `ratewise_server_decisions_total` | domain, rule, outcome (`ok`, `over_limit`) | descriptors decided |
//! | `ratewise_server_shadow_refusals_total` | domain, rule | refusals answered OK in shadow mode |
//! | `ratewise_server_near_limit_total` | domain, rule | admissions that left less than 20 % of the limit |
//! | `ratewise_server_requests_total` | outcome (`ok`, `over_limit`, `invalid`, `unknown_domain`) | calls answered |
//! | `ratewise_server_degraded_decisions_total` | reason | decisions not made by the configured store |
//! | `ratewise_server_store_errors_total` | — | store failures |
//! | `ratewise_server_decision_seconds` | — | time to decide one call (a histogram: `serve::LATENCY_BUCKETS_S`) |
//! | `ratewise_server_config_reloads_total` | result (`ok`, `failed`) | configuration loads |

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::Counter;

/// A rule's metric handles and its own totals (for `/status`).
#[derive(Debug)]
pub(crate) struct RuleMetrics {
    pub(crate) ok: Counter,
    pub(crate) over_limit: Counter,
    pub(crate) shadow: Counter,
    pub(crate) near_limit: Counter,
    pub(crate) totals: RuleTotals,
    pub(crate) sample: KeySample,
}

/// Counts kept by the service itself, for the status page.
#[derive(Debug, Default)]
pub struct RuleTotals {
    /// Descriptors answered OK.
    pub ok: AtomicU64,
    /// Descriptors answered OVER_LIMIT.
    pub over_limit: AtomicU64,
    /// Refusals answered OK in shadow mode.
    pub shadow_refusals: AtomicU64,
}

impl RuleTotals {
    /// `(ok, over_limit, shadow_refusals)`.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.ok.load(Ordering::Relaxed),
            self.over_limit.load(Ordering::Relaxed),
            self.shadow_refusals.load(Ordering::Relaxed),
        )
    }
}

impl RuleMetrics {
    pub(crate) fn new(domain: &str, rule: &str) -> RuleMetrics {
        let d = domain.to_string();
        let r = rule.to_string();
        let decisions = |outcome: &'static str| {
            metrics::counter!("ratewise_server_decisions_total",
                "domain" => d.clone(), "rule" => r.clone(), "outcome" => outcome)
        };
        RuleMetrics {
            ok: decisions("ok"),
            over_limit: decisions("over_limit"),
            shadow: metrics::counter!("ratewise_server_shadow_refusals_total",
                "domain" => d.clone(), "rule" => r.clone()),
            near_limit: metrics::counter!("ratewise_server_near_limit_total",
                "domain" => d, "rule" => r),
            totals: RuleTotals::default(),
            sample: KeySample::default(),
        }
    }

    pub(crate) fn record(&self, ok: bool) {
        if ok {
            self.ok.increment(1);
            self.totals.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.over_limit.increment(1);
            self.totals.over_limit.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn record_shadow_refusal(&self) {
        self.shadow.increment(1);
        self.totals.shadow_refusals.fetch_add(1, Ordering::Relaxed);
    }
}

/// Handles for service-wide metrics.
#[derive(Debug)]
pub(crate) struct ServiceMetrics {
    pub(crate) requests_ok: Counter,
    pub(crate) requests_over: Counter,
    pub(crate) requests_invalid: Counter,
    pub(crate) unknown_domain: Counter,
}

impl ServiceMetrics {
    pub(crate) fn new() -> ServiceMetrics {
        let requests = |outcome: &'static str| metrics::counter!("ratewise_server_requests_total", "outcome" => outcome);
        ServiceMetrics {
            requests_ok: requests("ok"),
            requests_over: requests("over_limit"),
            requests_invalid: requests("invalid"),
            unknown_domain: requests("unknown_domain"),
        }
    }
}

/// Counts a configuration load.
pub(crate) fn record_reload(ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    metrics::counter!("ratewise_server_config_reloads_total", "result" => result).increment(1);
}

/// A bounded sample of the descriptor values a rule has seen recently, for
/// the debug view: one call in [`KeySample::EVERY`] offers its key, and at
/// most [`KeySample::MAX`] are kept (the oldest go first).
#[derive(Debug, Default)]
pub(crate) struct KeySample {
    calls: AtomicU64,
    keys: std::sync::Mutex<std::collections::VecDeque<Box<str>>>,
}

impl KeySample {
    pub(crate) const EVERY: u64 = 64;
    pub(crate) const MAX: usize = 16;

    pub(crate) fn offer(&self, key: &str) {
        if !self
            .calls
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(Self::EVERY)
        {
            return;
        }
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.iter().any(|k| &**k == key) {
            return;
        }
        if keys.len() == Self::MAX {
            keys.pop_front();
        }
        keys.push_back(key.into());
    }

    pub(crate) fn keys(&self) -> Vec<Box<str>> {
        let keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.iter().cloned().collect()
    }
}
