//! Turning decisions into an RLS response: index-aligned statuses with their
//! evidence, the rate-limit headers Envoy should add, and the matched rule
//! names as dynamic metadata for access logs.

use std::time::Duration;

use ratewise::response_headers::{retry_after_secs, HeaderBuf};

use crate::charge::{quota_refuses, refused_verdict, Charge, Verdict};
use crate::config::Rule;
use crate::rls::{
    Code, DescriptorStatus, HeaderValue, RateLimit, RateLimitRequest, RateLimitResponse,
};

/// Which rate-limit headers the service asks Envoy to add to responses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HeaderMode {
    /// None.
    Off,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` of the
    /// descriptor with the fewest units left (envoyproxy/ratelimit's form),
    /// and `Retry-After` when over the limit.
    Legacy,
    /// The IETF draft's `RateLimit-Policy` and `RateLimit` (one item per
    /// matched rule), and `Retry-After` when over the limit.
    #[default]
    Ietf,
}

impl std::str::FromStr for HeaderMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(HeaderMode::Off),
            "legacy" => Ok(HeaderMode::Legacy),
            "ietf" => Ok(HeaderMode::Ietf),
            other => Err(format!(
                "unknown header mode `{other}`: expected off, legacy or ietf"
            )),
        }
    }
}

/// The status of a descriptor whose shown verdict is `v`, on `rule`.
fn status(v: &Verdict, rule: &Rule) -> DescriptorStatus {
    DescriptorStatus {
        code: if v.allowed { Code::Ok } else { Code::OverLimit } as i32,
        current_limit: v.reported.map(|r| RateLimit {
            requests_per_unit: r.requests_per_unit,
            unit: r.unit as i32,
            name: rule.name.to_string(),
        }),
        limit_remaining: v.remaining,
        duration_until_reset: Some(duration(v.reset)),
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

/// The response to `request` given every charge's verdict.
pub(crate) fn build(
    request: &RateLimitRequest,
    charges: &[Charge<'_>],
    mode: HeaderMode,
    metadata: bool,
) -> RateLimitResponse {
    let decided = || {
        charges
            .iter()
            .filter_map(|c| Some((&*c.rule, c.verdict.as_ref()?)))
    };
    let mut shown: Vec<Option<(&Rule, &Verdict)>> = vec![None; request.descriptors.len()];
    for (rule, v) in decided() {
        let slot = &mut shown[v.descriptor];
        if slot.is_none_or(|(_, s)| v.shows_over(s)) {
            *slot = Some((rule, v));
        }
    }
    let statuses: Vec<DescriptorStatus> = shown
        .iter()
        .map(|v| match v {
            Some((rule, v)) => status(v, rule),
            None => DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            },
        })
        .collect();
    // A refusal refuses the request, but a quota-mode rule's only with
    // every other quota-mode rule's.
    let over = charges
        .iter()
        .any(|c| refused_verdict(c) && !c.in_quota_mode())
        || quota_refuses(charges, refused_verdict);
    let retry = decided()
        .filter(|(_, v)| !v.allowed)
        .filter_map(|(_, v)| v.retry_after)
        .max();
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: headers(&shown, over.then_some(retry).flatten(), mode),
        request_headers_to_add: Vec::new(),
        raw_body: Vec::new(),
        dynamic_metadata: if metadata {
            rule_names(decided())
        } else {
            None
        },
    }
}

fn headers(
    shown: &[Option<(&Rule, &Verdict)>],
    retry: Option<Duration>,
    mode: HeaderMode,
) -> Vec<HeaderValue> {
    let mut out = Vec::new();
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_string(),
        value,
    };
    match mode {
        HeaderMode::Off => return out,
        HeaderMode::Legacy => {
            let least = shown
                .iter()
                .flatten()
                .filter(|(_, v)| v.reported.is_some())
                .min_by_key(|(_, v)| (v.allowed, v.remaining));
            if let Some((_, v)) = least {
                let limit = v.reported.map_or(0, |r| r.requests_per_unit);
                out.push(header("RateLimit-Limit", limit.to_string()));
                out.push(header("RateLimit-Remaining", v.remaining.to_string()));
                out.push(header("RateLimit-Reset", ceil_secs(v.reset).to_string()));
            }
        }
        HeaderMode::Ietf => {
            let mut policy = String::with_capacity(64);
            let mut limit = HeaderBuf::<256>::new();
            let mut items = String::with_capacity(64);
            let mut names: Vec<&str> = Vec::new();
            for (rule, v) in shown.iter().flatten() {
                let Some(item) = rule.policy_item.as_deref() else {
                    continue;
                };
                if names.contains(&&*rule.name) {
                    continue;
                }
                names.push(&rule.name);
                if !policy.is_empty() {
                    policy.push_str(", ");
                    items.push_str(", ");
                }
                policy.push_str(item);
                // A name past the buffer leaves the item out (the policy
                // item was checked when the rule was loaded).
                let t = v.retry_after.filter(|_| !v.allowed).unwrap_or(v.reset);
                limit.clear();
                if limit
                    .push_limit(&rule.name, u64::from(v.remaining), t)
                    .is_ok()
                {
                    items.push_str(limit.as_str());
                }
            }
            if !policy.is_empty() {
                out.push(header("RateLimit-Policy", policy));
                out.push(header("RateLimit", items));
            }
        }
    }
    if let Some(wait) = retry {
        out.push(header("Retry-After", retry_after_secs(wait).to_string()));
    }
    out
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn rule_names<'a>(
    decided: impl Iterator<Item = (&'a Rule, &'a Verdict)>,
) -> Option<prost_types::Struct> {
    use prost_types::value::Kind;
    use prost_types::{ListValue, Struct, Value};
    let mut matched: Vec<&str> = Vec::new();
    let mut over: Vec<&str> = Vec::new();
    for (rule, v) in decided {
        if v.reported.is_none() {
            continue;
        }
        let name = &*rule.name;
        if !matched.contains(&name) {
            matched.push(name);
        }
        if !v.allowed && !over.contains(&name) {
            over.push(name);
        }
    }
    if matched.is_empty() {
        return None;
    }
    let list = |names: &[&str]| Value {
        kind: Some(Kind::ListValue(ListValue {
            values: names
                .iter()
                .map(|n| Value {
                    kind: Some(Kind::StringValue((*n).to_string())),
                })
                .collect(),
        })),
    };
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("matched_rules".to_string(), list(&matched));
    fields.insert("over_limit_rules".to_string(), list(&over));
    Some(Struct { fields })
}
