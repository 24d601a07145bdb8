//! What a bucket is limited to: its `BucketId` matched against the domain's
//! descriptors, and the share a data plane gets turned into the strategy it
//! enforces.

use std::time::Duration;

use crate::config::{Limit, Matched, RuleSet};
use crate::rlqs::{BlanketRule, BucketId, RateLimitStrategy, Strategy, TokenBucket};
use crate::rls::Entry;

/// What the configuration says of a bucket.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum BucketLimit {
    /// No rule, or an unlimited one: allow all.
    Unlimited,
    /// `requests_per_unit: 0`: deny all.
    Blocked,
    /// A quota divided among the data planes; `key` names its leases.
    Limited {
        key: String,
        rate_per_s: f64,
        burst: u64,
    },
}

/// The bucket's entries, in the order the domain's descriptors nest them:
/// a `BucketId` is unordered, so every order is tried (up to 4 keys; more
/// are taken in key order) and the one reaching the deepest rule wins.
pub(crate) fn limit_of(rules: &RuleSet, domain: &str, id: &BucketId) -> BucketLimit {
    let Some(d) = rules.domain(domain) else {
        return BucketLimit::Unlimited;
    };
    let entries: Vec<Entry> = id
        .bucket
        .iter()
        .map(|(k, v)| Entry {
            key: k.clone(),
            value: v.clone(),
        })
        .collect();
    let mut best: Option<(usize, BucketLimit)> = None;
    let mut matched: Vec<Matched<'_>> = Vec::new();
    for order in orders(entries.len()) {
        let ordered: Vec<Entry> = order.iter().map(|&i| entries[i].clone()).collect();
        matched.clear();
        d.matches(&ordered, &mut matched);
        let Some(m) = matched.last() else { continue };
        let depth = m.rule.path.matches('.').count();
        if best.as_ref().is_some_and(|(b, _)| *b >= depth) {
            continue;
        }
        let limit = match &m.rule.limit {
            Limit::Unlimited => BucketLimit::Unlimited,
            Limit::Blocked { .. } => BucketLimit::Blocked,
            Limit::Limited { quota, .. } => BucketLimit::Limited {
                key: format!("{}|{}", m.rule.path, m.key),
                rate_per_s: 1e9 / quota.emission_nanos() as f64,
                burst: quota.burst(),
            },
        };
        best = Some((depth, limit));
    }
    best.map_or(BucketLimit::Unlimited, |(_, l)| l)
}

/// The orders to try the entries in: every permutation of up to 4, else
/// the key order alone.
fn orders(n: usize) -> Vec<Vec<usize>> {
    if n > 4 {
        return vec![(0..n).collect()];
    }
    let mut out = Vec::new();
    permute(&mut (0..n).collect(), 0, &mut out);
    out
}

fn permute(v: &mut Vec<usize>, k: usize, out: &mut Vec<Vec<usize>>) {
    if k == v.len() {
        out.push(v.clone());
        return;
    }
    for i in k..v.len() {
        v.swap(k, i);
        permute(v, k + 1, out);
        v.swap(k, i);
    }
}

/// A blanket rule.
pub(crate) fn blanket(rule: BlanketRule) -> RateLimitStrategy {
    RateLimitStrategy {
        strategy: Some(Strategy::BlanketRule(rule as i32)),
    }
}

/// The token bucket enforcing `gets` requests per second out of a quota of
/// `rate_per_s` with `burst`: whole tokens per whole second (Envoy 1.40
/// truncates a fill interval to whole seconds), so `floor(gets)` tokens a
/// second, or one token every `ceil(1/gets)` seconds below 1/s; and the same
/// part of the burst (at least 1). Every rounding is down, so the parts
/// never sum above the whole. Nothing to give is deny-all.
pub(crate) fn token_bucket(gets: f64, rate_per_s: f64, burst: u64) -> RateLimitStrategy {
    if gets.is_nan() || gets <= 1e-9 || rate_per_s <= 0.0 {
        return blanket(BlanketRule::DenyAll);
    }
    let part = (gets / rate_per_s).min(1.0);
    let max_tokens = ((burst as f64 * part).floor() as u64).clamp(1, u64::from(u32::MAX)) as u32;
    let (tokens, interval_s) = if gets >= 1.0 {
        (gets.floor().min(f64::from(u32::MAX)) as u32, 1)
    } else {
        (1, (1.0 / gets).ceil().min(86_400.0 * 365.0) as u64)
    };
    RateLimitStrategy {
        strategy: Some(Strategy::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill: Some(tokens),
            fill_interval: Some(prost_duration(Duration::from_secs(interval_s))),
        })),
    }
}

/// A `google.protobuf.Duration`.
pub(crate) fn prost_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{compile_sources, LoadOptions};
    use std::collections::BTreeMap;

    fn rules(yaml: &str) -> RuleSet {
        compile_sources(
            &[("d.yaml".into(), yaml.into())],
            None,
            LoadOptions::default(),
        )
        .unwrap()
    }

    fn id(pairs: &[(&str, &str)]) -> BucketId {
        BucketId {
            bucket: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn an_unordered_bucket_finds_the_nested_rule() {
        let r = rules(
            "domain: edge
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100 }
    descriptors:
      - key: api
        rate_limit: { unit: second, requests_per_unit: 10 }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
",
        );
        // "api" sorts before "tenant", but the rule nests tenant → api.
        let nested = limit_of(&r, "edge", &id(&[("api", "search"), ("tenant", "t1")]));
        assert!(
            matches!(&nested, BucketLimit::Limited { rate_per_s, .. } if (*rate_per_s - 10.0).abs() < 1e-9),
            "{nested:?}"
        );
        let outer = limit_of(&r, "edge", &id(&[("tenant", "t1")]));
        assert!(
            matches!(&outer, BucketLimit::Limited { rate_per_s, .. } if (*rate_per_s - 100.0).abs() < 1e-9)
        );
        assert_eq!(
            limit_of(&r, "edge", &id(&[("blocked", "x")])),
            BucketLimit::Blocked
        );
        assert_eq!(
            limit_of(&r, "edge", &id(&[("other", "x")])),
            BucketLimit::Unlimited
        );
        assert_eq!(
            limit_of(&r, "nowhere", &id(&[("tenant", "t1")])),
            BucketLimit::Unlimited
        );
    }

    #[test]
    fn shares_become_token_buckets_that_never_sum_above_the_quota() {
        let Some(Strategy::TokenBucket(t)) = token_bucket(25.0, 100.0, 100).strategy else {
            panic!("a token bucket")
        };
        assert_eq!(t.max_tokens, 25);
        assert_eq!(t.tokens_per_fill, Some(25));
        assert_eq!(
            t.fill_interval,
            Some(prost_duration(Duration::from_secs(1)))
        );
        let Some(Strategy::TokenBucket(f)) = token_bucket(23.9, 100.0, 100).strategy else {
            panic!("a token bucket")
        };
        assert_eq!(
            (f.tokens_per_fill, f.max_tokens),
            (Some(23), 23),
            "rounded down"
        );
        assert_eq!(token_bucket(0.0, 100.0, 100), blanket(BlanketRule::DenyAll));
        let Some(Strategy::TokenBucket(small)) = token_bucket(0.5, 100.0, 10).strategy else {
            panic!("a token bucket")
        };
        assert_eq!(small.max_tokens, 1, "at least one token");
        assert_eq!(
            small.fill_interval,
            Some(prost_duration(Duration::from_secs(2)))
        );
    }
}
