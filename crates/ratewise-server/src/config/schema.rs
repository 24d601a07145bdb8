//! The YAML as written: envoyproxy/ratelimit's format, key for key, plus
//! ratewise's extensions. Unknown keys are errors; serde reports them with
//! the line and column.

use std::time::Duration;

use serde::Deserialize;

use crate::rls::Unit;

/// One configuration file: a domain and its descriptor tree.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSchema {
    /// The domain (the RLS request's `domain`).
    pub domain: String,
    /// The top level of the descriptor tree.
    #[serde(default)]
    pub descriptors: Vec<DescriptorSchema>,
    /// ratewise: what this domain's decisions do when the shared store
    /// (Redis) cannot answer; the server's `--store-failure` when absent.
    pub failure_policy: Option<FailureMode>,
}

/// What decisions do when the shared store cannot answer in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Admit (and count the degraded decision).
    Open,
    /// Refuse (and count it).
    Closed,
    /// Decide in memory with this instance's share of each limit.
    Local,
    /// Answer the call with gRPC `UNAVAILABLE`, so Envoy's
    /// `failure_mode_deny` decides.
    Error,
}

impl std::str::FromStr for FailureMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "open" => Ok(FailureMode::Open),
            "closed" => Ok(FailureMode::Closed),
            "local" => Ok(FailureMode::Local),
            "error" => Ok(FailureMode::Error),
            other => Err(format!(
                "unknown failure policy `{other}`: expected open, closed, local or error"
            )),
        }
    }
}

impl std::fmt::Display for FailureMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::Local => "local",
            FailureMode::Error => "error",
        })
    }
}

/// One node of the descriptor tree.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
// Some keys are accepted for compatibility and not used.
#[allow(dead_code)]
pub struct DescriptorSchema {
    /// The entry's key.
    pub key: String,
    /// The entry's value: absent for any value (one counter per value), a
    /// literal, or a pattern with `*`.
    pub value: Option<String>,
    /// The limit of descriptors that end here.
    pub rate_limit: Option<RateLimitSpec>,
    /// Deeper entries.
    #[serde(default)]
    pub descriptors: Vec<DescriptorSchema>,
    /// Count refusals, but answer OK.
    #[serde(default)]
    pub shadow_mode: bool,
    /// envoyproxy/ratelimit puts the values in metric names; ratewise keeps
    /// metrics per rule only (bounded cardinality) and accepts the key.
    #[serde(default)]
    pub detailed_metric: bool,
    /// As `detailed_metric`: accepted, metrics stay per rule.
    #[serde(default)]
    pub value_to_metric: bool,
    /// Every value matching this node's wildcard shares one counter.
    #[serde(default)]
    pub share_threshold: bool,
    /// envoyproxy/ratelimit's quota mode: over its limit, refuses only with
    /// every other quota-mode rule of the request.
    #[serde(default)]
    pub quota_mode: bool,
    /// Free-form metadata, accepted and ignored.
    #[serde(default)]
    pub metadata: Option<serde_yaml_ng::Value>,
    /// ratewise: a descriptor that ends at or below this node also charges
    /// the limits of the nodes above it, all or nothing.
    #[serde(default)]
    pub charge_parents: Option<bool>,
}

/// A `rate_limit` block as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// The unit of `requests_per_unit` (case-insensitive enum name).
    pub unit: Option<UnitName>,
    /// Requests allowed per `unit` (or per `period`).
    #[serde(default)]
    pub requests_per_unit: u64,
    /// Never limit (answers OK, remaining `u32::MAX`).
    #[serde(default)]
    pub unlimited: bool,
    /// The rule's name (in statuses, headers, metrics and logs).
    pub name: Option<String>,
    /// Other rules this one replaces when both match one request.
    #[serde(default)]
    pub replaces: Vec<ReplacesSchema>,
    /// ratewise: the algorithm (default GCRA).
    pub algorithm: Option<AlgorithmName>,
    /// ratewise: the largest burst (default: `requests_per_unit`).
    pub burst: Option<u64>,
    /// ratewise: any period instead of `unit`, e.g. `5m`, `1h30m`, `250ms`.
    pub period: Option<Period>,
}

/// One `replaces` item.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplacesSchema {
    /// The name of the rule replaced (`name:` with no value reads as empty,
    /// which is refused).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub name: String,
}

/// A string that may be written as nothing (`name:`), read as empty.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A unit name, checked while parsing (so a bad one is reported with its
/// line).
#[derive(Clone, Copy, Debug)]
pub struct UnitName(pub Unit);

impl<'de> Deserialize<'de> for UnitName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Unit::from_name(&s).map(UnitName).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown unit `{s}`: expected second, minute, hour, day, week, month or year"
            ))
        })
    }
}

/// The algorithms a rule can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmName {
    /// GCRA (the default): smooth, exact, one word per key.
    Gcra,
    /// A token bucket.
    TokenBucket,
    /// A leaky bucket used as a meter.
    LeakyBucket,
    /// Fixed windows aligned to the Unix epoch, as envoyproxy/ratelimit.
    FixedWindow,
    /// The sliding-window counter (an estimate over two windows).
    SlidingWindow,
    /// The sliding-window log (exact, one timestamp per unit of burst).
    SlidingLog,
}

impl AlgorithmName {
    /// The name as written in the YAML.
    pub const fn as_str(self) -> &'static str {
        match self {
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::LeakyBucket => "leaky_bucket",
            AlgorithmName::FixedWindow => "fixed_window",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::SlidingLog => "sliding_log",
        }
    }
}

/// A period written as a duration: `90s`, `5m`, `1h30m`, `250ms`, `2d`, `1w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period(pub Duration);

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_period(&s)
            .map(Period)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `5m`, `1h30m`, `250ms`, `1.5s`-free forms: whole numbers, each
/// followed by `ms`, `s`, `m`, `h`, `d` or `w`.
pub fn parse_period(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("invalid period `{s}`: write whole numbers with units ms, s, m, h, d, w (e.g. `5m`, `1h30m`)")
    };
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => n.checked_mul(60).map(Duration::from_secs).ok_or_else(bad)?,
            "h" => n
                .checked_mul(3_600)
                .map(Duration::from_secs)
                .ok_or_else(bad)?,
            "d" => n
                .checked_mul(86_400)
                .map(Duration::from_secs)
                .ok_or_else(bad)?,
            "w" => n
                .checked_mul(7 * 86_400)
                .map(Duration::from_secs)
                .ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    if total.is_zero() {
        return Err(format!("invalid period `{s}`: it must be longer than zero"));
    }
    Ok(total)
}

/// A `rate_limit` block, checked while parsing (so a bad value is reported
/// with its line).
#[derive(Debug, Deserialize)]
#[serde(try_from = "RawRateLimit")]
pub struct RateLimitSpec {
    /// What it limits to.
    pub limit: SpecLimit,
    /// The rule's name.
    pub name: Option<String>,
    /// Names of the rules it replaces.
    pub replaces: Vec<String>,
}

/// The limit of a [`RateLimitSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecLimit {
    /// Never limit.
    Unlimited,
    /// `count` per `period`.
    PerPeriod {
        /// Requests per period (0 refuses everything).
        count: u64,
        /// The period.
        period: Duration,
        /// The unit, when the period was given as one.
        unit: Option<Unit>,
        /// The burst, if not `count`.
        burst: Option<u64>,
        /// The algorithm.
        algorithm: AlgorithmName,
    },
}

impl TryFrom<RawRateLimit> for RateLimitSpec {
    type Error = String;

    fn try_from(raw: RawRateLimit) -> Result<Self, String> {
        let replaces: Vec<String> = raw.replaces.into_iter().map(|r| r.name).collect();
        if replaces.iter().any(|r| r.trim().is_empty()) {
            return Err("a `replaces` entry has an empty `name`".to_string());
        }
        if let Some(own) = raw.name.as_deref() {
            if replaces.iter().any(|r| r == own) {
                return Err(format!(
                    "`replaces` names this rule itself (`{own}`); a rule replaces others"
                ));
            }
        }
        if raw.unlimited {
            let extra = [
                (raw.unit.is_some(), "unit"),
                (raw.requests_per_unit != 0, "requests_per_unit"),
                (raw.period.is_some(), "period"),
                (raw.burst.is_some(), "burst"),
                (raw.algorithm.is_some(), "algorithm"),
            ];
            if let Some((_, key)) = extra.iter().find(|(set, _)| *set) {
                return Err(format!("`{key}` has no meaning with `unlimited: true`"));
            }
            return Ok(RateLimitSpec {
                limit: SpecLimit::Unlimited,
                name: raw.name,
                replaces,
            });
        }
        let (period, unit) = match (raw.unit, raw.period) {
            (Some(_), Some(_)) => {
                return Err("give either `unit` or `period`, not both".to_string());
            }
            (None, None) => {
                return Err(
                    "missing `unit` (or ratewise's `period`, e.g. `period: 5m`)".to_string()
                );
            }
            (Some(UnitName(u)), None) => (u.duration().unwrap_or(Duration::from_secs(1)), Some(u)),
            (None, Some(Period(p))) => (p, None),
        };
        if raw.burst == Some(0) {
            return Err("`burst` must be at least 1".to_string());
        }
        Ok(RateLimitSpec {
            limit: SpecLimit::PerPeriod {
                count: raw.requests_per_unit,
                period,
                unit,
                burst: raw.burst,
                algorithm: raw.algorithm.unwrap_or(AlgorithmName::Gcra),
            },
            name: raw.name,
            replaces,
        })
    }
}
