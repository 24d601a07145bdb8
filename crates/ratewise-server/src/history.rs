//! Decisions per rule over the last minutes, for the live page: the rules'
//! totals sampled at a fixed interval, kept as rates in a bounded ring.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

use crate::config::RuleSet;

/// How many samples are kept.
pub const SAMPLES: usize = 120;

/// One sample: every rule's decisions per second since the previous one.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// One entry per rule.
    pub rules: Vec<RuleRate>,
}

/// A rule's rates in one sample.
#[derive(Clone, Debug, Serialize)]
pub struct RuleRate {
    /// `domain/name`.
    pub rule: String,
    /// Descriptors answered OK per second.
    pub ok_per_s: f64,
    /// Descriptors answered OVER_LIMIT per second.
    pub over_limit_per_s: f64,
}

/// The ring of samples.
#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    last: HashMap<String, (u64, u64)>,
    last_ms: Option<u64>,
    samples: VecDeque<Sample>,
}

impl History {
    /// Takes a sample of `rules` at `unix_ms`.
    pub fn record(&self, rules: &RuleSet, unix_ms: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed_s = inner
            .last_ms
            .map(|t| unix_ms.saturating_sub(t) as f64 / 1_000.0)
            .filter(|s| *s > 0.0);
        let mut rates = Vec::new();
        let mut seen = HashMap::new();
        for r in rules.rules() {
            let (ok, over, _) = r.totals().snapshot();
            let name = format!("{}/{}", r.domain, r.name);
            if let Some(secs) = elapsed_s {
                // A rule replaced by a reload starts from zero again.
                let (ok0, over0) = inner.last.get(&name).copied().unwrap_or((0, 0));
                let delta = |now: u64, before: u64| if now >= before { now - before } else { now };
                rates.push(RuleRate {
                    rule: name.clone(),
                    ok_per_s: delta(ok, ok0) as f64 / secs,
                    over_limit_per_s: delta(over, over0) as f64 / secs,
                });
            }
            seen.insert(name, (ok, over));
        }
        rates.sort_by(|a, b| a.rule.cmp(&b.rule));
        inner.last = seen;
        inner.last_ms = Some(unix_ms);
        if elapsed_s.is_some() {
            if inner.samples.len() == SAMPLES {
                inner.samples.pop_front();
            }
            inner.samples.push_back(Sample {
                unix_ms,
                rules: rates,
            });
        }
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.samples.iter().cloned().collect()
    }
}
