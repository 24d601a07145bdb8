//! The compiled configuration: per domain, a tree of descriptor nodes that a
//! request's entries walk, each node holding at most one [`Rule`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ratewise::Quota;

use super::schema::AlgorithmName;
use crate::counters::Counters;
use crate::rls::{Entry, Unit};
use crate::telemetry::RuleMetrics;

/// Every domain's rules.
#[derive(Debug, Default)]
pub struct RuleSet {
    pub(crate) domains: HashMap<Box<str>, Domain>,
    /// The files the rules came from, in load order.
    pub sources: Vec<String>,
}

impl RuleSet {
    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// The names of the domains, sorted.
    pub fn domain_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.domains.keys().map(|d| &**d).collect();
        names.sort_unstable();
        names
    }

    /// Every rule of every domain, in no particular order.
    pub fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.domains.values().flat_map(|d| d.rules.iter())
    }
}

/// One domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Domain {
    pub(crate) root: Level,
    pub(crate) rules: Vec<Arc<Rule>>,
    pub(crate) failure: Option<super::FailureMode>,
}

/// The children of one node: looked up by exact `key`/`value`, then by a
/// wildcard pattern, then by `key` alone (any value).
#[derive(Debug, Default)]
pub(crate) struct Level {
    pub(crate) exact: Map<Map<Node>>,
    pub(crate) wildcard: Vec<(Box<str>, Pattern, Node)>,
    pub(crate) any: Map<Node>,
}

/// Keys come from the configuration, not from callers, so a fast hasher
/// is safe here (foldhash, seeded per map).
pub(crate) type Map<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// One node of a descriptor tree.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) rule: Option<Arc<Rule>>,
    /// A descriptor ending here also charges the rules above it.
    pub(crate) charge_parents: bool,
    /// The counter key uses this text instead of the entry's value
    /// (`share_threshold`).
    pub(crate) shared_value: Option<Box<str>>,
    pub(crate) children: Level,
}

/// A value pattern with `*` wildcards (each matches any run of characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    parts: Vec<Box<str>>,
}

impl Pattern {
    /// A pattern from its text; `None` if it has no `*`.
    pub fn new(text: &str) -> Option<Pattern> {
        text.contains('*').then(|| Pattern {
            parts: text.split('*').map(Box::from).collect(),
        })
    }

    /// The pattern as written (`*` between its parts).
    pub fn text(&self) -> String {
        self.parts.join("*")
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some(split) => split,
            None => return true,
        };
        let Some(mut tail) = value.strip_prefix(&**first) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return tail.is_empty();
        };
        for part in middle {
            match tail.find(&**part) {
                Some(at) => tail = &tail[at + part.len()..],
                None => return false,
            }
        }
        tail.len() >= last.len() && tail.ends_with(&**last)
    }
}

/// What a matched rule limits to.
#[derive(Clone, Debug, PartialEq)]
pub enum Limit {
    /// `unlimited: true`: always OK.
    Unlimited,
    /// `requests_per_unit: 0`: always over the limit.
    Blocked {
        /// What the status reports.
        reported: ReportedLimit,
    },
    /// A quota enforced by an algorithm.
    Limited {
        /// The rate and burst.
        quota: Quota,
        /// The algorithm.
        algorithm: AlgorithmName,
        /// What the status reports as `current_limit`.
        reported: ReportedLimit,
    },
}

/// A limit in Envoy's terms: requests per unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReportedLimit {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

impl ReportedLimit {
    /// The nearest Envoy form of `count` per `period`: exact when `period`
    /// is one unit; otherwise the longest unit not longer than `period`
    /// (seconds if none), with the count scaled to it and rounded down,
    /// at least 1.
    pub fn nearest(count: u64, period: Duration) -> ReportedLimit {
        let clamp = |n: u128| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        if let Some(unit) = Unit::KNOWN
            .into_iter()
            .find(|u| u.duration() == Some(period))
        {
            return ReportedLimit {
                requests_per_unit: clamp(count.into()),
                unit,
            };
        }
        let unit = Unit::KNOWN
            .into_iter()
            .rev()
            .find(|u| u.duration().is_some_and(|d| d <= period))
            .unwrap_or(Unit::Second);
        let unit_nanos = unit.duration().map_or(1, |d| d.as_nanos());
        let scaled = u128::from(count) * unit_nanos / period.as_nanos().max(1);
        ReportedLimit {
            requests_per_unit: clamp(scaled),
            unit,
        }
    }
}

/// One configured limit, shared by every descriptor that matches its node.
#[derive(Debug)]
pub struct Rule {
    /// Where the rule sits: `domain` then each node's `key`, `key=value` or
    /// `key=pattern`, joined by `.` — unique in a rule set.
    pub path: Arc<str>,
    /// The configured `name`, or the path without the domain.
    pub name: Arc<str>,
    /// The domain.
    pub domain: Arc<str>,
    /// What it limits to.
    pub limit: Limit,
    /// Answer OK even when over the limit (but count it).
    pub shadow: bool,
    /// envoyproxy/ratelimit's quota mode: over its limit, this rule's
    /// descriptor shows OVER_LIMIT but refuses the request only when every
    /// quota-mode rule the request matched is over too (and a rule not in
    /// quota mode refuses as always).
    pub quota: bool,
    /// Names of rules this one replaces in a request that matches both.
    pub replaces: Vec<Arc<str>>,
    /// The counters (in memory), one per distinct descriptor value.
    pub(crate) counters: Option<Arc<Counters>>,
    /// The rule's IETF `RateLimit-Policy` member, written once.
    pub(crate) policy_item: Option<Box<str>>,
    pub(crate) metrics: RuleMetrics,
}

impl Rule {
    /// What the rule reports as `current_limit`; `None` for unlimited.
    pub fn reported(&self) -> Option<ReportedLimit> {
        match &self.limit {
            Limit::Unlimited => None,
            Limit::Blocked { reported } | Limit::Limited { reported, .. } => Some(*reported),
        }
    }

    /// The rule's own decision totals.
    pub fn totals(&self) -> &crate::telemetry::RuleTotals {
        &self.metrics.totals
    }

    /// The algorithm, for limited rules.
    pub fn algorithm(&self) -> Option<AlgorithmName> {
        match &self.limit {
            Limit::Limited { algorithm, .. } => Some(*algorithm),
            _ => None,
        }
    }

    /// A bounded sample of the descriptor values seen recently (one call in
    /// 64 is sampled, at most 16 kept), each with whether it still holds a
    /// counter.
    pub fn sample_keys(&self) -> Vec<(String, bool)> {
        self.metrics
            .sample
            .keys()
            .into_iter()
            .map(|k| {
                let live = self.counters.as_ref().is_some_and(|c| c.contains(&k));
                (k.replace('\u{1f}', ", "), live)
            })
            .collect()
    }

    /// How many distinct descriptor values hold counters now.
    pub fn keys(&self) -> usize {
        self.counters.as_ref().map_or(0, |c| c.len())
    }

    /// The rule in one line: its path, its limit in words, and its modes,
    /// e.g. `edge.user: 0.05/s, burst 3 (gcra), shadow mode` (for `/rules`
    /// and `--check`).
    pub fn describe(&self) -> String {
        format!(
            "{}: {}{}{}",
            self.path,
            self.describe_limit(),
            if self.shadow { ", shadow mode" } else { "" },
            if self.quota { ", quota mode" } else { "" },
        )
    }

    /// The limit in words: `unlimited`, `blocked (0 per unit)`, or the rate
    /// and burst it enforces and its algorithm, e.g. `0.05/s, burst 3 (gcra)`
    /// for 3 a minute.
    pub fn describe_limit(&self) -> String {
        match &self.limit {
            Limit::Unlimited => "unlimited".into(),
            Limit::Blocked { .. } => "blocked (0 per unit)".into(),
            Limit::Limited {
                quota, algorithm, ..
            } => {
                let rate = format!("{:.6}", quota.rate_per_second());
                let rate = rate.trim_end_matches('0').trim_end_matches('.');
                format!("{rate}/s, burst {} ({})", quota.burst(), algorithm.as_str())
            }
        }
    }

    /// The identity under which the rule's counters survive a reload: the
    /// same path, quota and algorithm keep their state.
    pub(crate) fn state_identity(&self) -> Option<(Arc<str>, Quota, AlgorithmName)> {
        match &self.limit {
            Limit::Limited {
                quota, algorithm, ..
            } => Some((Arc::clone(&self.path), *quota, *algorithm)),
            _ => None,
        }
    }
}

/// A rule a descriptor matched, with the counter key it charges.
#[derive(Debug)]
pub struct Matched<'a> {
    /// The rule.
    pub rule: &'a Arc<Rule>,
    /// The counter's key within the rule.
    pub key: Box<str>,
}

impl Domain {
    /// The rules `entries` charges: the rule of the node the entries end at
    /// (if any), preceded by the rules above it when that node charges its
    /// parents. Empty when nothing matches.
    pub fn matches<'a>(&'a self, entries: &[Entry], out: &mut Vec<Matched<'a>>) {
        let mut level = &self.root;
        let mut path: Vec<&Node> = Vec::with_capacity(entries.len());
        for e in entries {
            let node = level
                .exact
                .get(e.key.as_str())
                .and_then(|values| values.get(e.value.as_str()))
                .or_else(|| {
                    level
                        .wildcard
                        .iter()
                        .find(|(k, p, _)| **k == *e.key && p.matches(&e.value))
                        .map(|(_, _, n)| n)
                })
                .or_else(|| level.any.get(e.key.as_str()));
            match node {
                Some(n) => {
                    path.push(n);
                    level = &n.children;
                }
                None => return,
            }
        }
        let Some(last) = path.last() else { return };
        let depth = path.len();
        let first = if last.charge_parents { 0 } else { depth - 1 };
        for (i, node) in path.iter().enumerate().skip(first) {
            if let Some(rule) = &node.rule {
                out.push(Matched {
                    rule,
                    key: counter_key(&entries[..=i], &path[..=i]),
                });
            }
        }
    }
}

/// `key=value` pairs joined by an ASCII unit separator, with a shared
/// node's pattern in place of its value.
fn counter_key(entries: &[Entry], nodes: &[&Node]) -> Box<str> {
    let mut key = String::with_capacity(
        entries
            .iter()
            .map(|e| e.key.len() + e.value.len() + 2)
            .sum(),
    );
    for (e, n) in entries.iter().zip(nodes) {
        if !key.is_empty() {
            key.push('\u{1f}');
        }
        key.push_str(&e.key);
        key.push('=');
        key.push_str(n.shared_value.as_deref().unwrap_or(&e.value));
    }
    key.into_boxed_str()
}

/// The IETF `RateLimit-Policy` member of a rule named `name` limited by
/// `limit`, or `None` (unlimited, blocked, or a name that cannot be written
/// in a header).
pub(crate) fn policy_item(name: &str, limit: &Limit) -> Option<Box<str>> {
    let Limit::Limited { quota, .. } = limit else {
        return None;
    };
    let mut b = ratewise::response_headers::HeaderBuf::<256>::new();
    b.push_policy(&ratewise::response_headers::PolicyInfo::from_quota(
        name, quota,
    ))
    .ok()?;
    Some(b.as_str().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_globs() {
        let p = Pattern::new("/api/*/users/*").unwrap();
        assert!(p.matches("/api/v1/users/7"));
        assert!(p.matches("/api//users/"));
        assert!(!p.matches("/api/v1/groups/7"));
        let p = Pattern::new("*.txt").unwrap();
        assert!(p.matches("a.txt") && p.matches(".txt") && !p.matches("a.txt.gz"));
        let p = Pattern::new("ab*ba").unwrap();
        assert!(!p.matches("aba"), "prefix and suffix may not overlap");
        assert!(p.matches("abba"));
        assert!(Pattern::new("*").unwrap().matches(""));
        assert!(Pattern::new("plain").is_none());
    }

    #[test]
    fn reported_limits_are_exact_for_units_and_scaled_otherwise() {
        let r = ReportedLimit::nearest(100, Duration::from_secs(60));
        assert_eq!((r.requests_per_unit, r.unit), (100, Unit::Minute));
        let r = ReportedLimit::nearest(100, Duration::from_secs(300));
        assert_eq!((r.requests_per_unit, r.unit), (20, Unit::Minute));
        let r = ReportedLimit::nearest(5, Duration::from_millis(500));
        assert_eq!((r.requests_per_unit, r.unit), (10, Unit::Second));
        let r = ReportedLimit::nearest(1, Duration::from_secs(7200));
        assert_eq!((r.requests_per_unit, r.unit), (1, Unit::Hour), "at least 1");
    }
}
