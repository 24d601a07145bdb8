//! Turning decisions into an RLS response: index-aligned statuses with their
//! evidence, the rate-limit headers Envoy should add, and the matched rule
//! names as dynamic metadata for access logs.

use std::sync::Arc;
use std::time::Duration;

use ratewise::headers_out::{retry_after_secs, HeaderBuf, PolicyInfo};
use ratewise::{CheckError, Decision, Quota};

use crate::config::{Limit, ReportedLimit, Rule};
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

/// The outcome of one charge of one descriptor.
#[derive(Clone, Debug)]
pub(crate) struct Verdict {
    pub(crate) descriptor: usize,
    name: Option<Arc<str>>,
    reported: Option<ReportedLimit>,
    quota: Option<Quota>,
    /// The status is OK (shadow refusals included).
    pub(crate) allowed: bool,
    remaining: u32,
    reset: Duration,
    retry_after: Option<Duration>,
    pub(crate) shadow_refusal: bool,
    /// Counted in the decision metrics (not for unlimited rules).
    pub(crate) counts: bool,
    pub(crate) near_limit: bool,
    /// The request was refused elsewhere: this charge was not made.
    pub(crate) uncharged: bool,
}

impl Verdict {
    pub(crate) fn unlimited(descriptor: usize) -> Verdict {
        Verdict {
            descriptor,
            name: None,
            reported: None,
            quota: None,
            allowed: true,
            remaining: u32::MAX,
            reset: Duration::ZERO,
            retry_after: None,
            shadow_refusal: false,
            counts: false,
            near_limit: false,
            uncharged: false,
        }
    }

    pub(crate) fn blocked(descriptor: usize, rule: &Rule, reported: ReportedLimit) -> Verdict {
        Verdict {
            descriptor,
            name: Some(Arc::clone(&rule.name)),
            reported: Some(reported),
            quota: None,
            allowed: rule.shadow,
            remaining: 0,
            reset: Duration::ZERO,
            retry_after: None,
            shadow_refusal: rule.shadow,
            counts: true,
            near_limit: false,
            uncharged: false,
        }
    }

    pub(crate) fn counted(
        descriptor: usize,
        rule: &Rule,
        decision: Result<Decision, CheckError>,
        shadow: bool,
    ) -> Verdict {
        let quota = match &rule.limit {
            Limit::Limited { quota, .. } => Some(*quota),
            _ => None,
        };
        let d = decision.unwrap_or_else(|e| never_admitted(&e));
        let refused = !d.allowed;
        Verdict {
            descriptor,
            name: Some(Arc::clone(&rule.name)),
            reported: rule.reported(),
            quota,
            allowed: !refused || shadow,
            remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
            reset: d.reset_after,
            retry_after: if refused { d.retry_after } else { None },
            shadow_refusal: refused && shadow,
            counts: true,
            near_limit: !refused && d.remaining.saturating_mul(5) < d.limit,
            uncharged: false,
        }
    }

    /// Takes the remaining units and reset time from `d`.
    pub(crate) fn set_evidence(&mut self, d: &Decision) {
        self.remaining = u32::try_from(d.remaining).unwrap_or(u32::MAX);
        self.reset = d.reset_after;
        self.near_limit = d.remaining.saturating_mul(5) < d.limit;
    }

    fn status(&self) -> DescriptorStatus {
        DescriptorStatus {
            code: if self.allowed {
                Code::Ok
            } else {
                Code::OverLimit
            } as i32,
            current_limit: self.reported.map(|r| RateLimit {
                requests_per_unit: r.requests_per_unit,
                unit: r.unit as i32,
                name: self.name.as_deref().unwrap_or_default().to_string(),
            }),
            limit_remaining: self.remaining,
            duration_until_reset: Some(duration(self.reset)),
        }
    }

    /// Which of two verdicts of one descriptor its status shows: a refusal
    /// over an admission (the longer wait first), then the fewest units left.
    fn shows_over(&self, other: &Verdict) -> bool {
        match (self.allowed, other.allowed) {
            (false, true) => true,
            (true, false) => false,
            (false, false) => self.retry_after > other.retry_after,
            (true, true) => {
                (self.reported.is_some(), std::cmp::Reverse(self.remaining))
                    > (other.reported.is_some(), std::cmp::Reverse(other.remaining))
            }
        }
    }
}

/// The decision for a request its limit can never admit (heavier than the
/// burst): refused, nothing charged, and no wait that would help.
pub(crate) fn never_admitted(e: &CheckError) -> Decision {
    let burst = match e {
        CheckError::ExceedsBurst { burst, .. } => *burst,
        _ => 0,
    };
    Decision {
        allowed: false,
        limit: burst,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
        delay: Duration::ZERO,
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
    verdicts: &[Verdict],
    mode: HeaderMode,
) -> RateLimitResponse {
    let mut shown: Vec<Option<&Verdict>> = vec![None; request.descriptors.len()];
    for v in verdicts {
        let slot = &mut shown[v.descriptor];
        if slot.is_none_or(|s| v.shows_over(s)) {
            *slot = Some(v);
        }
    }
    let statuses: Vec<DescriptorStatus> = shown
        .iter()
        .map(|v| match v {
            Some(v) => v.status(),
            None => DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            },
        })
        .collect();
    let over = verdicts.iter().any(|v| !v.allowed);
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: headers(verdicts, &shown, over, mode),
        request_headers_to_add: Vec::new(),
        raw_body: Vec::new(),
        dynamic_metadata: metadata(verdicts),
    }
}

fn headers(
    verdicts: &[Verdict],
    shown: &[Option<&Verdict>],
    over: bool,
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
                .filter(|v| v.reported.is_some())
                .min_by_key(|v| (v.allowed, v.remaining));
            if let Some(v) = least {
                let r = v.reported.unwrap_or(ReportedLimit {
                    requests_per_unit: 0,
                    unit: crate::rls::Unit::Second,
                });
                out.push(header("RateLimit-Limit", r.requests_per_unit.to_string()));
                out.push(header("RateLimit-Remaining", v.remaining.to_string()));
                out.push(header("RateLimit-Reset", ceil_secs(v.reset).to_string()));
            }
        }
        HeaderMode::Ietf => {
            let mut policy = HeaderBuf::<1024>::new();
            let mut limit = HeaderBuf::<1024>::new();
            let mut names: Vec<&str> = Vec::new();
            for v in shown.iter().flatten() {
                let (Some(name), Some(quota)) = (v.name.as_deref(), v.quota) else {
                    continue;
                };
                if names.contains(&name) {
                    continue;
                }
                names.push(name);
                // A name that is not printable ASCII, or a header past its
                // buffer, leaves that item out.
                let _ = policy.push_policy(&PolicyInfo::from_quota(name, &quota));
                let t = v.retry_after.filter(|_| !v.allowed).unwrap_or(v.reset);
                let _ = limit.push_limit(name, u64::from(v.remaining), t);
            }
            if !policy.as_str().is_empty() {
                out.push(header("RateLimit-Policy", policy.as_str().to_string()));
                out.push(header("RateLimit", limit.as_str().to_string()));
            }
        }
    }
    if over {
        let wait = verdicts
            .iter()
            .filter(|v| !v.allowed)
            .filter_map(|v| v.retry_after)
            .max();
        if let Some(wait) = wait {
            out.push(header("Retry-After", retry_after_secs(wait).to_string()));
        }
    }
    out
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn metadata(verdicts: &[Verdict]) -> Option<prost_types::Struct> {
    use prost_types::value::Kind;
    use prost_types::{ListValue, Struct, Value};
    let mut matched: Vec<&str> = Vec::new();
    let mut over: Vec<&str> = Vec::new();
    for v in verdicts {
        if let Some(name) = v.name.as_deref() {
            if !matched.contains(&name) {
                matched.push(name);
            }
            if !v.allowed && !over.contains(&name) {
                over.push(name);
            }
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
