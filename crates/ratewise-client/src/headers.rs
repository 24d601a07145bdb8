//! Reading a server's rate-limit headers into [`ServerHints`].
//!
//! | header | meaning | unit |
//! |---|---|---|
//! | `Retry-After` (RFC 9110) | wait before retrying | delta-seconds **or** an HTTP-date |
//! | `x-amz-retry-after`, `retry-after-ms` | wait before retrying | milliseconds |
//! | `grpc-retry-pushback-ms` | wait before retrying | milliseconds; negative or unparseable: [`ServerHints::no_retry`] |
//! | `RateLimit-Limit` / `-Remaining` / `-Reset` (IETF drafts ≤ 06) | quota, what is left, time to reset | count, count, delta-seconds |
//! | `X-RateLimit-*` (GitHub, Discord's `-Reset-After`, Twitter/X's `x-rate-limit-*`) | same | epoch or delta-seconds, told apart by magnitude |
//! | `RateLimit`, `RateLimit-Policy` (IETF drafts ≥ 07) | `"p";r=..;t=..`, `"p";q=..;w=..` | count, seconds |
//!
//! [`vendor`] reads the forms of OpenAI, Anthropic, Shopify and Reddit where
//! no standard header says the same. [`parse_hints`] reads everything from
//! any [`HeaderSource`]; the single-header parsers ([`parse_retry_after`],
//! [`parse_http_date`], [`parse_delta_seconds`], [`parse_rate_limit_field`],
//! [`parse_rate_limit_policy_field`]) are public too. Instants (an HTTP-date,
//! an epoch reset) are turned into waits against the wall-clock `now` the
//! caller passes; nothing here reads a clock.
//!
//! Rules: no input panics and nothing is invented (a field is `Some` only
//! when a header carried it); `remaining ≤ limit`; the **longest** wait wins;
//! for remaining/limit/reset the newest header generation wins.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use ratewise_client::headers::parse_hints;
//!
//! let headers = [
//!     ("Retry-After", "30"),
//!     ("RateLimit-Policy", r#""default";q=100;w=60"#),
//!     ("RateLimit", r#""default";r=0;t=30"#),
//! ];
//! let hints = parse_hints(&headers[..], SystemTime::now());
//! assert_eq!(hints.retry_after, Some(Duration::from_secs(30)));
//! assert_eq!((hints.remaining, hints.limit), (Some(0), Some(100)));
//! assert_eq!(hints.policy, Some((100, Duration::from_secs(60))));
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ServerHints;

pub mod vendor;
pub use vendor::{parse_rfc3339, parse_unit_duration};

/// Read access to response headers: the one thing the parsers need.
///
/// Implemented for slices, arrays and vectors of `(name, value)` pairs (any
/// mix of `&str`, `String`, `&[u8]`, `Vec<u8>`), for references, and with
/// the `http` feature for `http::HeaderMap`. Names are matched ASCII
/// case-insensitively; callers of [`header`](HeaderSource::header) pass them in
/// lower case.
///
/// ```
/// use ratewise_client::headers::HeaderSource;
///
/// let headers = vec![("Retry-After".to_string(), "5".to_string())];
/// assert_eq!(headers.header("retry-after"), Some(&b"5"[..]));
/// assert_eq!(headers.header("x-amz-retry-after"), None);
/// ```
pub trait HeaderSource {
    /// The value of the first header called `name` (ASCII case-insensitive),
    /// as raw bytes.
    fn header(&self, name: &str) -> Option<&[u8]>;

    /// Every value of the headers called `name`, in order. Structured
    /// fields (`RateLimit`, `RateLimit-Policy`) may be split over several
    /// field lines and are read through this. The provided method returns
    /// at most the first value; implementations that can hold repeated
    /// headers override it.
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.header(name).into_iter().collect()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> HeaderSource for [(K, V)] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(k, _)| k.as_ref().eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_ref())
    }
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.iter()
            .filter(|(k, _)| k.as_ref().eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_ref())
            .collect()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>, const N: usize> HeaderSource for [(K, V); N] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        HeaderSource::header(&self[..], name)
    }
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        HeaderSource::header_values(&self[..], name)
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> HeaderSource for Vec<(K, V)> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        HeaderSource::header(&self[..], name)
    }
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        HeaderSource::header_values(&self[..], name)
    }
}

impl<T: HeaderSource + ?Sized> HeaderSource for &T {
    fn header(&self, name: &str) -> Option<&[u8]> {
        (**self).header(name)
    }
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        (**self).header_values(name)
    }
}

#[cfg(feature = "http")]
impl HeaderSource for http::HeaderMap {
    fn header(&self, name: &str) -> Option<&[u8]> {
        http::HeaderMap::get(self, name).map(http::HeaderValue::as_bytes)
    }
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.get_all(name)
            .iter()
            .map(http::HeaderValue::as_bytes)
            .collect()
    }
}

/// A parsed `Retry-After` value: a wait, or an instant to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// `Retry-After: <delta-seconds>`: wait this long.
    Delay(Duration),
    /// `Retry-After: <HTTP-date>`: wait until this wall-clock instant.
    Date(SystemTime),
}

impl RetryAfter {
    /// The wait this value asks for, measured from the wall-clock time `now`.
    ///
    /// A date at or before `now` gives `None`: the server's moment has passed,
    /// so the caller should use its own backoff rather than retry at once.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime, UNIX_EPOCH};
    /// use ratewise_client::headers::RetryAfter;
    ///
    /// let now = UNIX_EPOCH + Duration::from_secs(1_000);
    /// let later = RetryAfter::Date(UNIX_EPOCH + Duration::from_secs(1_030));
    /// assert_eq!(later.delay_from(now), Some(Duration::from_secs(30)));
    /// let past = RetryAfter::Date(UNIX_EPOCH + Duration::from_secs(900));
    /// assert_eq!(past.delay_from(now), None);
    /// ```
    pub fn delay_from(self, now: SystemTime) -> Option<Duration> {
        match self {
            RetryAfter::Delay(d) => Some(d),
            RetryAfter::Date(at) => match at.duration_since(now) {
                Ok(d) if !d.is_zero() => Some(d),
                _ => None,
            },
        }
    }
}

/// Parses a `Retry-After` value: delta-seconds (`"120"`) or an HTTP-date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, and the two obsolete forms RFC 9110
/// requires recipients to accept). Surrounding whitespace is ignored. As a
/// leniency, delta-seconds may carry a decimal fraction (`"1.5"`). Anything
/// else, including negative numbers, is `None`.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use ratewise_client::headers::{parse_retry_after, RetryAfter};
///
/// assert_eq!(parse_retry_after(b"120"), Some(RetryAfter::Delay(Duration::from_secs(120))));
/// assert_eq!(
///     parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT"),
///     Some(RetryAfter::Date(UNIX_EPOCH + Duration::from_secs(784_111_777))),
/// );
/// assert_eq!(parse_retry_after(b"-1"), None);
/// ```
pub fn parse_retry_after(value: &[u8]) -> Option<RetryAfter> {
    let v = trim(value);
    if v.first().is_some_and(u8::is_ascii_digit) {
        if let Some(d) = parse_decimal_seconds(v) {
            return Some(RetryAfter::Delay(d));
        }
    }
    parse_http_date(v).map(RetryAfter::Date)
}

/// Parses non-negative whole delta-seconds (`1*DIGIT`, surrounding whitespace
/// allowed). Values too large for a `u64` saturate.
///
/// ```
/// use std::time::Duration;
/// use ratewise_client::headers::parse_delta_seconds;
///
/// assert_eq!(parse_delta_seconds(b" 60 "), Some(Duration::from_secs(60)));
/// assert_eq!(parse_delta_seconds(b"99999999999999999999999"), Some(Duration::from_secs(u64::MAX)));
/// assert_eq!(parse_delta_seconds(b"6m0s"), None);
/// ```
pub fn parse_delta_seconds(value: &[u8]) -> Option<Duration> {
    parse_u64(value).map(Duration::from_secs)
}

/// Parses an HTTP-date in any of the three forms of RFC 9110 §5.6.7:
///
/// * IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT` (the one servers must send);
/// * obsolete RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit years
///   below 70 are 20xx, others 19xx);
/// * ANSI C `asctime()`: `Sun Nov  6 08:49:37 1994`.
///
/// The weekday is optional and not cross-checked; the zone must be `GMT` or
/// `UTC` (any case) when present. Years run 1970–9999; anything else is `None`.
///
/// This is hand-written rather than taken from a crate: it is about a hundred
/// lines, has no dependency, and is covered by the same no-panic property
/// tests as every other parser here.
pub fn parse_http_date(value: &[u8]) -> Option<SystemTime> {
    let mut tokens = trim(value)
        .split(|&b| b == b' ' || b == b',' || b == b'-')
        .filter(|t| !t.is_empty())
        .peekable();
    // An optional weekday name.
    if tokens.peek().is_some_and(|t| weekday(t)) {
        tokens.next();
    }
    let first = tokens.next()?;
    let (day, month, year, time) = if let Some(month) = month_number(first) {
        // asctime: Mon D HH:MM:SS YYYY
        let day = parse_small(tokens.next()?)?;
        let time = tokens.next()?;
        let year = parse_small(tokens.next()?)?;
        if tokens.next().is_some() {
            return None;
        }
        (day, month, year, time)
    } else {
        // IMF-fixdate / RFC 850: DD Mon YY[YY] HH:MM:SS GMT
        let day = parse_small(first)?;
        let month = month_number(tokens.next()?)?;
        let year_token = tokens.next()?;
        let mut year = parse_small(year_token)?;
        if year_token.len() == 2 {
            year += if year < 70 { 2000 } else { 1900 };
        }
        let time = tokens.next()?;
        match tokens.next() {
            None => {}
            Some(zone)
                if zone.eq_ignore_ascii_case(b"GMT") || zone.eq_ignore_ascii_case(b"UTC") => {}
            Some(_) => return None,
        }
        if tokens.next().is_some() {
            return None;
        }
        (day, month, year, time)
    };
    let (h, m, s) = parse_clock(time)?;
    if !(1970..=9999).contains(&year) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + h * 3_600 + m * 60 + s;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// One member of a `RateLimit` structured field: a policy's remaining quota
/// and time to reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitItem {
    /// The policy name (`"default"` in `"default";r=5;t=30`), if given.
    pub policy: Option<String>,
    /// The limit in force, which only draft-07's dictionary form carries in
    /// this field (`limit=10, remaining=0, reset=10`). A server may lower it
    /// below its published policy to slow a client down, so when present it
    /// outranks the policy's `q`.
    pub limit: Option<u64>,
    /// `r`: remaining quota units.
    pub remaining: Option<u64>,
    /// `t`: seconds until the quota resets.
    pub reset: Option<Duration>,
}

/// One member of a `RateLimit-Policy` structured field: a policy's quota and
/// window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitPolicy {
    /// The policy name (`"default"` in `"default";q=100;w=60`), if given.
    pub policy: Option<String>,
    /// `q`: quota units allowed per window.
    pub quota: Option<u64>,
    /// `w`: the window, in seconds.
    pub window: Option<Duration>,
    /// `qu`: what the quota counts. Only a [`QuotaUnit::Requests`] policy
    /// (the default) is ever read as a number of requests.
    pub unit: QuotaUnit,
}

/// The unit of a `RateLimit-Policy` quota (the draft's `qu` parameter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum QuotaUnit {
    /// `"requests"`, the default when `qu` is absent.
    #[default]
    Requests,
    /// `"content-bytes"`: the quota counts bytes of content.
    ContentBytes,
    /// `"concurrent-requests"`: the quota caps requests in flight.
    ConcurrentRequests,
    /// Any other registered or vendor unit, as sent.
    Other(String),
}

impl QuotaUnit {
    fn from_param(v: Option<&str>) -> QuotaUnit {
        match v {
            None | Some("requests") => QuotaUnit::Requests,
            Some("content-bytes") => QuotaUnit::ContentBytes,
            Some("concurrent-requests") => QuotaUnit::ConcurrentRequests,
            Some(other) => QuotaUnit::Other(other.to_string()),
        }
    }
}

/// Parses the structured `RateLimit` field of IETF drafts ≥ 07, e.g.
/// `"default";r=50;t=30, "daily";r=900;t=3600`. The draft-07 dictionary form
/// `limit=10, remaining=5, reset=7` is accepted too (as one unnamed item
/// carrying its [`RateLimitItem::limit`]).
/// Members that carry nothing usable are dropped; malformed members are
/// skipped rather than failing the whole field.
///
/// ```
/// use std::time::Duration;
/// use ratewise_client::headers::parse_rate_limit_field;
///
/// let items = parse_rate_limit_field(br#""default";r=50;t=30"#);
/// assert_eq!(items[0].policy.as_deref(), Some("default"));
/// assert_eq!(items[0].remaining, Some(50));
/// assert_eq!(items[0].reset, Some(Duration::from_secs(30)));
/// ```
pub fn parse_rate_limit_field(value: &[u8]) -> Vec<RateLimitItem> {
    let members = sf::parse_list(value);
    let mut out = Vec::new();
    let mut legacy = RateLimitItem::default();
    for m in members {
        match (m.key.as_deref(), &m.item) {
            (Some("limit"), sf::Bare::Int(n)) => legacy.limit = non_negative(*n),
            (Some("remaining"), sf::Bare::Int(n)) => legacy.remaining = non_negative(*n),
            (Some("reset"), sf::Bare::Int(n)) => {
                legacy.reset = non_negative(*n).map(Duration::from_secs)
            }
            (Some(_), _) => {}
            (None, item) => {
                let it = RateLimitItem {
                    policy: item.name(),
                    limit: None,
                    remaining: m.int_param("r").and_then(non_negative),
                    reset: m
                        .int_param("t")
                        .and_then(non_negative)
                        .map(Duration::from_secs),
                };
                if it.remaining.is_some() || it.reset.is_some() {
                    out.push(it);
                }
            }
        }
    }
    if legacy.limit.is_some() || legacy.remaining.is_some() || legacy.reset.is_some() {
        out.push(legacy);
    }
    out
}

/// Parses the structured `RateLimit-Policy` field of IETF drafts ≥ 07, e.g.
/// `"burst";q=100;w=60, "daily";q=1000;w=86400`. The draft-07 form
/// `100;w=60` (the quota as the item itself) is accepted too.
///
/// ```
/// use std::time::Duration;
/// use ratewise_client::headers::parse_rate_limit_policy_field;
///
/// let policies = parse_rate_limit_policy_field(br#""burst";q=100;w=60"#);
/// assert_eq!(policies[0].policy.as_deref(), Some("burst"));
/// assert_eq!(policies[0].quota, Some(100));
/// assert_eq!(policies[0].window, Some(Duration::from_secs(60)));
/// ```
pub fn parse_rate_limit_policy_field(value: &[u8]) -> Vec<RateLimitPolicy> {
    sf::parse_list(value)
        .into_iter()
        .filter(|m| m.key.is_none())
        .filter_map(|m| {
            let (policy, quota) = match &m.item {
                sf::Bare::Int(n) => (None, non_negative(*n)),
                other => (other.name(), m.int_param("q").and_then(non_negative)),
            };
            let window = m
                .int_param("w")
                .and_then(non_negative)
                .map(Duration::from_secs);
            let unit = QuotaUnit::from_param(m.str_param("qu"));
            (quota.is_some() || window.is_some()).then_some(RateLimitPolicy {
                policy,
                quota,
                window,
                unit,
            })
        })
        .collect()
}

/// Reads every supported rate-limit header into one [`ServerHints`]; see the
/// [module docs](self) for the formats and the precedence rules. `now` is the
/// current wall-clock time, used only for HTTP-dates and epoch resets.
pub fn parse_hints<H: HeaderSource + ?Sized>(headers: &H, now: SystemTime) -> ServerHints {
    // gRFC A6: a non-negative integer is a wait; a negative or unparseable
    // one means "do not retry". `Some(None)` is that refusal.
    let grpc_pushback: Option<Option<Duration>> = headers
        .header("grpc-retry-pushback-ms")
        .map(|v| parse_u64(v).map(Duration::from_millis));
    let retry_after = [
        headers
            .header("retry-after")
            .and_then(parse_retry_after)
            .and_then(|r| r.delay_from(now)),
        headers
            .header("x-amz-retry-after")
            .and_then(parse_u64)
            .map(Duration::from_millis),
        headers
            .header("retry-after-ms")
            .and_then(parse_u64)
            .map(Duration::from_millis),
        grpc_pushback.flatten(),
    ]
    .into_iter()
    .flatten()
    .max();

    // Newest generation first: structured fields, then RateLimit-*, then
    // X-RateLimit-*. A policy's quota is informative (the draft's word):
    // the limit in force is what a `RateLimit` item or a `*-Limit` header
    // says, so the policy's `q` is read only when neither is there.
    let (mut hints, policy_limit) = structured_hints(headers);
    // Each generation: limit, remaining, reset, and a delta-seconds reset
    // preferred to the reset (Discord sends both; the delta does not depend
    // on the two clocks agreeing).
    // Twitter/X's trio is the legacy one with one more hyphen.
    const GENERATIONS: [[&str; 4]; 3] = [
        [
            "ratelimit-limit",
            "ratelimit-remaining",
            "ratelimit-reset",
            "",
        ],
        [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-reset-after",
        ],
        [
            "x-rate-limit-limit",
            "x-rate-limit-remaining",
            "x-rate-limit-reset",
            "",
        ],
    ];
    for [limit, remaining, reset, reset_after] in GENERATIONS {
        if hints.limit.is_none() {
            hints.limit = headers.header(limit).and_then(leading_integer);
        }
        if hints.remaining.is_none() {
            hints.remaining = headers.header(remaining).and_then(parse_count);
        }
        if hints.reset_after.is_none() && !reset_after.is_empty() {
            hints.reset_after = headers
                .header(reset_after)
                .and_then(|v| parse_decimal_seconds(trim(v)));
        }
        if hints.reset_after.is_none() {
            hints.reset_after = headers.header(reset).and_then(|v| reset_value(v, now));
        }
    }
    if hints.limit.is_none() {
        hints.limit = policy_limit;
    }
    vendor::fill(headers, now, &mut hints);
    hints.retry_after = retry_after;
    hints.no_retry = matches!(grpc_pushback, Some(None));
    if let (Some(r), Some(l)) = (hints.remaining, hints.limit) {
        hints.remaining = Some(r.min(l));
    }
    hints
}

/// Hints from the structured `RateLimit` / `RateLimit-Policy` pair, and the
/// quota of a lone policy (to use only if no header states the limit in
/// force). The most constraining policy wins: the fewest remaining units,
/// and among equals the longest reset. Its limit is the item's own (draft
/// 07), else the quota of the policy of the same name, or of the only policy
/// when there is just one. Policies counted in another unit than requests
/// (bytes, concurrent requests), and the items that name them, are never
/// read as request counts.
fn structured_hints<H: HeaderSource + ?Sized>(headers: &H) -> (ServerHints, Option<u64>) {
    // Repeated field lines of a structured field form one list.
    let items: Vec<RateLimitItem> = headers
        .header_values("ratelimit")
        .into_iter()
        .flat_map(parse_rate_limit_field)
        .collect();
    let policies: Vec<RateLimitPolicy> = headers
        .header_values("ratelimit-policy")
        .into_iter()
        .flat_map(parse_rate_limit_policy_field)
        .collect();
    let policy_named = |name: &String| policies.iter().find(|p| p.policy.as_ref() == Some(name));
    let counts_requests = |item: &&RateLimitItem| {
        item.policy
            .as_ref()
            .and_then(policy_named)
            .is_none_or(|p| p.unit == QuotaUnit::Requests)
    };
    let tightest = items.iter().filter(counts_requests).min_by(|a, b| {
        let ra = a.remaining.unwrap_or(u64::MAX);
        let rb = b.remaining.unwrap_or(u64::MAX);
        ra.cmp(&rb).then(b.reset.cmp(&a.reset))
    });
    let policy_for = |name: Option<&String>| -> Option<&RateLimitPolicy> {
        let named = name.and_then(policy_named);
        named
            .or(match policies.as_slice() {
                [only] => Some(only),
                _ => None,
            })
            .filter(|p| p.unit == QuotaUnit::Requests)
    };
    match tightest {
        Some(item) => {
            let policy = policy_for(item.policy.as_ref());
            let limit = item.limit.or_else(|| policy.and_then(|p| p.quota));
            let hints = ServerHints {
                retry_after: None,
                remaining: item.remaining,
                limit,
                reset_after: item.reset,
                no_retry: false,
                policy: policy.and_then(quota_and_window),
            };
            (hints, None)
        }
        None => (
            ServerHints {
                policy: policy_for(None).and_then(quota_and_window),
                ..ServerHints::default()
            },
            policy_for(None).and_then(|p| p.quota),
        ),
    }
}

/// A policy's `q` and `w`, when it states both and the window is not zero.
fn quota_and_window(p: &RateLimitPolicy) -> Option<(u64, Duration)> {
    match (p.quota, p.window) {
        (Some(q), Some(w)) if q > 0 && !w.is_zero() => Some((q, w)),
        _ => None,
    }
}

/// Epoch seconds are at least this: 2001-09-09. No reset window is 31 years
/// long, so a larger `*-Reset` value is an instant, not a delta.
const EPOCH_SECONDS_THRESHOLD: u64 = 1_000_000_000;
/// Epoch *milliseconds* are at least this (also 2001-09-09).
const EPOCH_MILLIS_THRESHOLD: u64 = 1_000_000_000_000;

/// A `*-Reset` value: delta-seconds, or (GitHub and others) an epoch instant
/// in seconds or milliseconds, told apart by magnitude; either may carry a
/// decimal fraction (Discord sends epoch seconds with milliseconds). A
/// reset in the past is zero: the window has already rolled over.
fn reset_value(value: &[u8], now: SystemTime) -> Option<Duration> {
    let exact = parse_decimal_seconds(trim(value))?;
    let whole = exact.as_secs();
    if whole < EPOCH_SECONDS_THRESHOLD {
        return Some(exact);
    }
    let at = if whole < EPOCH_MILLIS_THRESHOLD {
        exact
    } else {
        Duration::from_millis(whole)
    };
    let now = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Some(at.saturating_sub(now))
}

/// A remaining count: an integer, or (Reddit) a decimal such as `598.0`,
/// rounded down: never more quota than the server said.
fn parse_count(v: &[u8]) -> Option<u64> {
    parse_decimal_seconds(trim(v)).map(|d| d.as_secs())
}

/// The leading integer of a `RateLimit-Limit` value. Early drafts allowed a
/// policy list after it (`10, 10;w=1, 50;w=60`); the first number is the
/// limit in force.
fn leading_integer(value: &[u8]) -> Option<u64> {
    let v = trim(value);
    let end = v.iter().position(|&b| b == b',').unwrap_or(v.len());
    v.get(..end).and_then(parse_u64)
}

fn non_negative(n: i64) -> Option<u64> {
    u64::try_from(n).ok()
}

/// Strips optional whitespace (spaces and tabs) from both ends.
pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    v.get(start..end).unwrap_or_default()
}

/// `1*DIGIT` with optional surrounding whitespace, saturating at `u64::MAX`.
pub(crate) fn parse_u64(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |acc, &d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// `1*DIGIT [ "." 1*DIGIT ]` seconds; fractions beyond nanoseconds are
/// truncated, whole seconds saturate.
fn parse_decimal_seconds(v: &[u8]) -> Option<Duration> {
    let (whole, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (v.get(..dot)?, Some(v.get(dot + 1..)?)),
        None => (v, None),
    };
    let secs = parse_u64(whole)?;
    let mut nanos = 0u32;
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut scale = 100_000_000u32;
        for &d in frac.iter().take(9) {
            nanos += u32::from(d - b'0') * scale;
            scale /= 10;
        }
    }
    Some(Duration::new(secs, 0).saturating_add(Duration::from_nanos(u64::from(nanos))))
}

/// A small unsigned number (day, year, hour…), at most four digits.
fn parse_small(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 4 {
        return None;
    }
    parse_u64(v)
}

fn parse_clock(v: &[u8]) -> Option<(u64, u64, u64)> {
    let mut parts = v.split(|&b| b == b':');
    let two = |p: Option<&[u8]>| p.filter(|p| p.len() == 2).and_then(parse_u64);
    let h = two(parts.next())?;
    let m = two(parts.next())?;
    let s = two(parts.next())?;
    if parts.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // A leap second names the last second of the minute.
    Some((h, m, s.min(59)))
}

fn weekday(t: &[u8]) -> bool {
    const DAYS: [&[u8]; 7] = [
        b"monday",
        b"tuesday",
        b"wednesday",
        b"thursday",
        b"friday",
        b"saturday",
        b"sunday",
    ];
    DAYS.iter().any(|d| {
        t.eq_ignore_ascii_case(d)
            || (t.len() == 3 && d.get(..3).is_some_and(|s| t.eq_ignore_ascii_case(s)))
    })
}

fn month_number(t: &[u8]) -> Option<u64> {
    const MONTHS: [&[u8]; 12] = [
        b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
        b"dec",
    ];
    MONTHS
        .iter()
        .position(|m| t.eq_ignore_ascii_case(m))
        .and_then(|i| u64::try_from(i + 1).ok())
}

fn is_leap(year: u64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days from 1970-01-01 to a date in 1970..=9999 (H. Hinnant's algorithm,
/// restricted to non-negative results).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// A lenient reader for the subset of RFC 8941 structured fields that the
/// rate-limit headers use: a list (or dictionary) of bare items with
/// parameters. Malformed members are skipped, never fatal, and nothing
/// indexes unchecked.
mod sf {
    /// A bare item.
    #[derive(Clone, Debug, PartialEq)]
    pub(super) enum Bare {
        Str(String),
        Token(String),
        Int(i64),
        /// A decimal, a byte sequence, a boolean, or nothing: kept only so
        /// the member's parameters can still be read.
        Other,
    }

    impl Bare {
        /// The item as a policy name, when it is a string or token.
        pub(super) fn name(&self) -> Option<String> {
            match self {
                Bare::Str(s) | Bare::Token(s) => Some(s.clone()),
                _ => None,
            }
        }
    }

    /// A list member, or a dictionary member when `key` is set.
    #[derive(Clone, Debug, PartialEq)]
    pub(super) struct Member {
        pub(super) key: Option<String>,
        pub(super) item: Bare,
        pub(super) params: Vec<(String, Bare)>,
    }

    impl Member {
        pub(super) fn int_param(&self, name: &str) -> Option<i64> {
            self.params.iter().find_map(|(k, v)| match v {
                Bare::Int(n) if k == name => Some(*n),
                _ => None,
            })
        }

        /// A string or token parameter.
        pub(super) fn str_param(&self, name: &str) -> Option<&str> {
            self.params.iter().find_map(|(k, v)| match v {
                Bare::Str(s) | Bare::Token(s) if k == name => Some(s.as_str()),
                _ => None,
            })
        }
    }

    struct Cursor<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Cursor<'_> {
        fn peek(&self) -> Option<u8> {
            self.s.get(self.i).copied()
        }
        fn bump(&mut self) {
            self.i = self.i.saturating_add(1);
        }
        fn skip_ws(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t')) {
                self.bump();
            }
        }
        /// Skips to just after the next top-level comma (or the end).
        fn skip_member(&mut self) {
            while let Some(b) = self.peek() {
                match b {
                    b',' => {
                        self.bump();
                        return;
                    }
                    b'"' => {
                        let _ = self.string();
                    }
                    _ => self.bump(),
                }
            }
        }
        fn string(&mut self) -> Option<String> {
            // At the opening quote.
            self.bump();
            let mut out = Vec::new();
            loop {
                let b = self.peek()?;
                self.bump();
                match b {
                    b'"' => return Some(String::from_utf8_lossy(&out).into_owned()),
                    b'\\' => {
                        let e = self.peek()?;
                        self.bump();
                        out.push(e);
                    }
                    _ => out.push(b),
                }
            }
        }
        fn token(&mut self) -> String {
            let start = self.i;
            while self
                .peek()
                .is_some_and(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b))
            {
                self.bump();
            }
            let bytes = self.s.get(start..self.i).unwrap_or_default();
            String::from_utf8_lossy(bytes).into_owned()
        }
        fn number(&mut self) -> Bare {
            let start = self.i;
            if self.peek() == Some(b'-') {
                self.bump();
            }
            while self.peek().is_some_and(|b| b.is_ascii_digit() || b == b'.') {
                self.bump();
            }
            let text = self.s.get(start..self.i).unwrap_or_default();
            // RFC 8941 integers have at most 15 digits.
            let digits = text.iter().filter(|b| b.is_ascii_digit()).count();
            if text.contains(&b'.') || digits == 0 || digits > 15 {
                return Bare::Other;
            }
            std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .map_or(Bare::Other, Bare::Int)
        }
        fn bare(&mut self) -> Option<Bare> {
            match self.peek()? {
                b'"' => self.string().map(Bare::Str),
                b'-' | b'0'..=b'9' => Some(self.number()),
                b if b.is_ascii_alphabetic() || b == b'*' => Some(Bare::Token(self.token())),
                b'?' | b':' | b'@' | b'%' => {
                    // Boolean, byte sequence, date, display string: skip the
                    // lexeme up to a delimiter.
                    while self
                        .peek()
                        .is_some_and(|b| !matches!(b, b';' | b',' | b' ' | b'\t'))
                    {
                        self.bump();
                    }
                    Some(Bare::Other)
                }
                _ => None,
            }
        }
        fn key(&mut self) -> Option<String> {
            let b = self.peek()?;
            if !(b.is_ascii_lowercase() || b == b'*') {
                return None;
            }
            let start = self.i;
            while self.peek().is_some_and(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b)
            }) {
                self.bump();
            }
            let bytes = self.s.get(start..self.i).unwrap_or_default();
            Some(String::from_utf8_lossy(bytes).into_owned())
        }
        fn params(&mut self) -> Option<Vec<(String, Bare)>> {
            let mut out = Vec::new();
            loop {
                self.skip_ws();
                if self.peek() != Some(b';') {
                    return Some(out);
                }
                self.bump();
                self.skip_ws();
                let k = self.key()?;
                let v = if self.peek() == Some(b'=') {
                    self.bump();
                    self.bare()?
                } else {
                    Bare::Other
                };
                out.push((k, v));
            }
        }
        fn member(&mut self) -> Option<Member> {
            self.skip_ws();
            let mut key = None;
            let mut item = self.bare()?;
            if let Bare::Token(t) = &item {
                if self.peek() == Some(b'=') {
                    // A dictionary member `key=value`.
                    self.bump();
                    key = Some(t.clone());
                    item = self.bare()?;
                }
            }
            let params = self.params()?;
            self.skip_ws();
            match self.peek() {
                None | Some(b',') => Some(Member { key, item, params }),
                Some(_) => None,
            }
        }
    }

    /// Every well-formed member of a list or dictionary field.
    pub(super) fn parse_list(s: &[u8]) -> Vec<Member> {
        let mut c = Cursor { s, i: 0 };
        let mut out = Vec::new();
        while c.peek().is_some() {
            let start = c.i;
            if let Some(m) = c.member() {
                out.push(m);
            }
            // Resynchronise on the next comma whether or not the member was
            // well formed; always make progress.
            if c.i == start {
                c.bump();
            }
            c.skip_member();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `secs` after the epoch (shared with the vendor forms' tests).
    pub(super) fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn header_lookup_is_case_insensitive_over_many_pair_types() {
        let strs = [("Retry-After", "1")];
        assert_eq!(strs.header("retry-after"), Some(&b"1"[..]));
        let bytes: Vec<(&[u8], &[u8])> = vec![(b"X-RATELIMIT-REMAINING", b"0")];
        assert_eq!(bytes.header("x-ratelimit-remaining"), Some(&b"0"[..]));
        let owned = vec![(String::from("a"), String::from("b"))];
        let by_ref: &dyn HeaderSource = &&owned;
        assert_eq!(by_ref.header("A"), Some(&b"b"[..]));
        assert_eq!(owned.header("c"), None);
    }

    #[test]
    fn retry_after_delta_seconds() {
        assert_eq!(
            parse_retry_after(b"120"),
            Some(RetryAfter::Delay(Duration::from_secs(120)))
        );
        assert_eq!(
            parse_retry_after(b" 0 "),
            Some(RetryAfter::Delay(Duration::ZERO))
        );
        assert_eq!(
            parse_retry_after(b"1.5"),
            Some(RetryAfter::Delay(Duration::from_millis(1500)))
        );
        assert_eq!(
            parse_retry_after(b"184467440737095516150"),
            Some(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
        for bad in [
            &b""[..],
            b"-5",
            b"1.",
            b"1.2.3",
            b"5s",
            b"abc",
            b"+5",
            b"0x10",
        ] {
            assert_eq!(parse_retry_after(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn http_date_three_forms() {
        // RFC 9110's own example instant.
        let expected = Some(at(784_111_777));
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), expected);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), expected);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), expected);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 gmt"), expected);
        // MDN's example.
        assert_eq!(
            parse_http_date(b"Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(at(1_445_412_480))
        );
        assert_eq!(
            parse_http_date(b"Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(at(0))
        );
        assert_eq!(
            parse_http_date(b"Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(at(253_402_300_799))
        );
        assert_eq!(
            parse_http_date(b"Tue, 29 Feb 2000 12:00:00 GMT"),
            Some(at(951_825_600))
        );
        // Two-digit years pivot at 70.
        assert_eq!(
            parse_http_date(b"Friday, 01-Jan-27 00:00:00 GMT"),
            Some(at(1_798_761_600))
        );
    }

    #[test]
    fn http_date_rejects_nonsense() {
        for bad in [
            &b"Sun, 06 Nov 1994 08:49:37 PST"[..],
            b"Sun, 31 Nov 1994 08:49:37 GMT",
            b"Sun, 29 Feb 1900 08:49:37 GMT",
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Sun, 06 Nov 1994 8:49:37 GMT",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT extra",
            b"Sun, 00 Nov 1994 08:49:37 GMT",
            b"Sun,",
            b"",
        ] {
            assert_eq!(
                parse_http_date(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn retry_after_date_in_the_past_means_use_the_backoff() {
        let now = at(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        let future = [("Retry-After", "Wed, 21 Oct 2015 07:28:45 GMT")];
        assert_eq!(
            parse_hints(&future, now).retry_after,
            Some(Duration::from_secs(45))
        );
        let past = [("Retry-After", "Wed, 21 Oct 2015 07:27:00 GMT")];
        assert_eq!(parse_hints(&past, now).retry_after, None);
        let same = [("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")];
        assert_eq!(parse_hints(&same, now).retry_after, None);
    }

    #[test]
    fn amz_retry_after_is_milliseconds_and_invalid_is_ignored() {
        let h = [("x-amz-retry-after", "1500")];
        assert_eq!(
            parse_hints(&h, at(0)).retry_after,
            Some(Duration::from_millis(1500))
        );
        let h = [("x-amz-retry-after", "soon")];
        assert_eq!(parse_hints(&h, at(0)).retry_after, None);
        let h = [("x-amz-retry-after", "-1")];
        assert_eq!(parse_hints(&h, at(0)).retry_after, None);
    }

    #[test]
    fn longest_wait_wins() {
        let h = [
            ("Retry-After", "2"),
            ("x-amz-retry-after", "2500"),
            ("grpc-retry-pushback-ms", "100"),
        ];
        assert_eq!(
            parse_hints(&h, at(0)).retry_after,
            Some(Duration::from_millis(2500))
        );
        let h = [("retry-after-ms", "3100"), ("Retry-After", "3")];
        assert_eq!(
            parse_hints(&h, at(0)).retry_after,
            Some(Duration::from_millis(3100))
        );
        let h = [("grpc-retry-pushback-ms", "-1")];
        assert_eq!(parse_hints(&h, at(0)).retry_after, None);
    }

    #[test]
    fn grpc_negative_or_unparseable_pushback_forbids_retries() {
        for v in ["-1", "-250", "soon", "", "1.5"] {
            let h = [("grpc-retry-pushback-ms", v)];
            let hints = parse_hints(&h, at(0));
            assert!(hints.no_retry, "{v:?}");
            assert_eq!(hints.retry_after, None, "{v:?}");
        }
        // Another header's wait is kept, but the refusal still stands.
        let h = [("grpc-retry-pushback-ms", "-1"), ("Retry-After", "2")];
        let hints = parse_hints(&h, at(0));
        assert!(hints.no_retry);
        assert_eq!(hints.retry_after, Some(Duration::from_secs(2)));
        // A non-negative pushback is a wait, not a refusal; no header, no
        // refusal.
        let h = [("grpc-retry-pushback-ms", "150")];
        let hints = parse_hints(&h, at(0));
        assert!(!hints.no_retry);
        assert_eq!(hints.retry_after, Some(Duration::from_millis(150)));
        let h = [("Retry-After", "2")];
        assert!(!parse_hints(&h, at(0)).no_retry);
    }

    #[test]
    fn github_headers_with_epoch_reset() {
        // A GitHub REST response at 2013-07-01 17:47:53 UTC.
        let now = at(1_372_697_273);
        let h = [
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "56"),
            ("x-ratelimit-used", "4"),
            ("x-ratelimit-reset", "1372700873"),
            ("x-ratelimit-resource", "core"),
        ];
        let hints = parse_hints(&h, now);
        assert_eq!(hints.limit, Some(60));
        assert_eq!(hints.remaining, Some(56));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(3600)));
        assert_eq!(hints.retry_after, None);
        // A reset already past: the window has rolled over.
        assert_eq!(
            parse_hints(&h, at(1_372_700_900)).reset_after,
            Some(Duration::ZERO)
        );
        // Epoch milliseconds are recognised too.
        let ms = [("X-RateLimit-Reset", "1372700873000")];
        assert_eq!(
            parse_hints(&ms, now).reset_after,
            Some(Duration::from_secs(3600))
        );
        // A small value is delta-seconds.
        let delta = [("X-RateLimit-Reset", "42")];
        assert_eq!(
            parse_hints(&delta, now).reset_after,
            Some(Duration::from_secs(42))
        );
    }

    #[test]
    fn draft_06_ratelimit_headers() {
        let h = [
            ("RateLimit-Limit", "100"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "50"),
        ];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.limit, Some(100));
        assert_eq!(hints.remaining, Some(0));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(50)));
        // Heroku sends only the remaining count.
        let heroku = [("RateLimit-Remaining", "4499")];
        let hints = parse_hints(&heroku, at(0));
        assert_eq!(hints.remaining, Some(4499));
        assert_eq!(hints.limit, None);
        // Early drafts put the policy list after the limit.
        let policy = [("RateLimit-Limit", "10, 10;w=1, 50;w=60")];
        assert_eq!(parse_hints(&policy, at(0)).limit, Some(10));
    }

    #[test]
    fn structured_fields_of_the_current_draft() {
        let h = [
            (
                "RateLimit-Policy",
                r#""burst";q=100;w=60, "daily";q=1000;w=86400"#,
            ),
            ("RateLimit", r#""burst";r=50;t=30, "daily";r=10;t=3600"#),
        ];
        let hints = parse_hints(&h, at(0));
        // The daily policy is the tighter one.
        assert_eq!(hints.remaining, Some(10));
        assert_eq!(hints.limit, Some(1000));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(3600)));

        let items = parse_rate_limit_field(br#""a";r=1;t=2;pk=:cGsx:, b;r=0"#);
        assert_eq!(
            items,
            vec![
                RateLimitItem {
                    policy: Some("a".into()),
                    limit: None,
                    remaining: Some(1),
                    reset: Some(Duration::from_secs(2)),
                },
                RateLimitItem {
                    policy: Some("b".into()),
                    limit: None,
                    remaining: Some(0),
                    reset: None,
                },
            ]
        );
        let policies = parse_rate_limit_policy_field(br#""p";q=5;qu="requests";w=1"#);
        assert_eq!(
            policies,
            vec![RateLimitPolicy {
                policy: Some("p".into()),
                quota: Some(5),
                window: Some(Duration::from_secs(1)),
                unit: QuotaUnit::Requests,
            }]
        );
    }

    #[test]
    fn draft_07_limit_key_is_the_limit_in_force() {
        // The dictionary form's `limit=` is kept…
        let h = [("RateLimit", "limit=10, remaining=0, reset=10")];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.limit, Some(10));
        assert_eq!(hints.remaining, Some(0));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(10)));
        // …and outranks the nominal quota of the policy beside it.
        let h = [
            ("RateLimit", "limit=10, remaining=3, reset=10"),
            ("RateLimit-Policy", "100;w=60"),
        ];
        assert_eq!(parse_hints(&h, at(0)).limit, Some(10));
    }

    #[test]
    fn ratelimit_limit_outranks_a_lone_policy() {
        // Draft-06: the policy is informative, the limit is the one in force.
        let h = [
            ("RateLimit-Limit", "10"),
            ("RateLimit-Policy", "100;w=60"),
            ("RateLimit-Remaining", "4"),
        ];
        assert_eq!(parse_hints(&h, at(0)).limit, Some(10));
        let h = [
            ("X-RateLimit-Limit", "10"),
            ("RateLimit-Policy", r#""default";q=100;w=60"#),
        ];
        assert_eq!(parse_hints(&h, at(0)).limit, Some(10));
        // Alone, the policy's quota is all there is.
        let h = [("RateLimit-Policy", "100;w=60")];
        assert_eq!(parse_hints(&h, at(0)).limit, Some(100));
    }

    #[test]
    fn quota_units_are_kept_and_never_read_as_requests() {
        let p = parse_rate_limit_policy_field(
            br#""bytes";q=1000000;qu="content-bytes";w=60, "inflight";q=5;qu="concurrent-requests", "x";q=1;qu="acme-tokens""#,
        );
        assert_eq!(p[0].unit, QuotaUnit::ContentBytes);
        assert_eq!(p[1].unit, QuotaUnit::ConcurrentRequests);
        assert_eq!(p[2].unit, QuotaUnit::Other("acme-tokens".into()));
        // A byte quota alone gives no request limit…
        let h = [(
            "RateLimit-Policy",
            r#""bytes";q=1000000;qu="content-bytes";w=60"#,
        )];
        assert_eq!(parse_hints(&h, at(0)).limit, None);
        // …and its remaining bytes are not remaining requests: the request
        // policy beside it decides.
        let h = [
            (
                "RateLimit-Policy",
                r#""bytes";q=1000000;qu="content-bytes";w=60, "req";q=100;w=60"#,
            ),
            ("RateLimit", r#""bytes";r=0;t=50, "req";r=40;t=20"#),
        ];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.limit, Some(100));
        assert_eq!(hints.remaining, Some(40));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(20)));
    }

    #[test]
    fn structured_fields_split_over_several_lines() {
        let h = [
            ("RateLimit-Policy", r#""burst";q=100;w=60"#),
            ("RateLimit", r#""burst";r=50;t=30"#),
            ("RateLimit-Policy", r#""daily";q=1000;w=86400"#),
            ("RateLimit", r#""daily";r=10;t=3600"#),
        ];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.remaining, Some(10));
        assert_eq!(hints.limit, Some(1000));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn structured_fields_of_draft_07() {
        let h = [
            ("RateLimit", "limit=10, remaining=3, reset=7"),
            ("RateLimit-Policy", "10;w=1"),
        ];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.remaining, Some(3));
        assert_eq!(hints.limit, Some(10));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn structured_field_junk_is_skipped_not_fatal() {
        let items = parse_rate_limit_field(br#"???, "ok";r=4, "unterminated;r=9"#);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].remaining, Some(4));
        // Negative, decimal and oversized numbers carry nothing.
        assert!(
            parse_rate_limit_field(br#""a";r=-1, "b";r=1.5, "c";r=9999999999999999"#).is_empty()
        );
        // A comma inside a string does not split the member.
        let items = parse_rate_limit_field(br#""a,b";r=2"#);
        assert_eq!(items[0].policy.as_deref(), Some("a,b"));
    }

    #[test]
    fn newest_generation_wins_and_remaining_never_exceeds_limit() {
        let h = [
            ("RateLimit", r#""x";r=5;t=10"#),
            ("RateLimit-Remaining", "50"),
            ("X-RateLimit-Remaining", "500"),
            ("X-RateLimit-Limit", "1000"),
        ];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.remaining, Some(5));
        assert_eq!(hints.limit, Some(1000));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(10)));

        let inconsistent = [("RateLimit-Limit", "10"), ("RateLimit-Remaining", "50")];
        let hints = parse_hints(&inconsistent, at(0));
        assert_eq!(hints.remaining, Some(10));
        assert_eq!(hints.limit, Some(10));
    }

    #[test]
    fn no_headers_no_hints() {
        let none: [(&str, &str); 0] = [];
        assert_eq!(parse_hints(&none, at(0)), ServerHints::default());
        let unrelated = [("Content-Type", "application/json"), ("Date", "x")];
        assert_eq!(parse_hints(&unrelated, at(0)), ServerHints::default());
    }

    #[cfg(feature = "http")]
    #[test]
    fn header_map_source() {
        let mut map = http::HeaderMap::new();
        map.insert("retry-after", http::HeaderValue::from_static("7"));
        map.insert("ratelimit-remaining", http::HeaderValue::from_static("3"));
        let hints = parse_hints(&map, at(0));
        assert_eq!(hints.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(hints.remaining, Some(3));

        let mut map = http::HeaderMap::new();
        map.append(
            "ratelimit",
            http::HeaderValue::from_static(r#""a";r=9;t=1"#),
        );
        map.append(
            "ratelimit",
            http::HeaderValue::from_static(r#""b";r=2;t=8"#),
        );
        assert_eq!(map.header_values("RateLimit").len(), 2);
        let hints = parse_hints(&map, at(0));
        assert_eq!(hints.remaining, Some(2));
        assert_eq!(hints.reset_after, Some(Duration::from_secs(8)));
    }

    #[test]
    fn the_governing_policy_gives_the_rate() {
        // Two policies: the tightest item's policy is the one in force.
        let h = [
            (
                "RateLimit-Policy",
                r#""burst";q=100;w=1, "day";q=5000;w=86400"#,
            ),
            ("RateLimit", r#""burst";r=3;t=1, "day";r=4000;t=3000"#),
        ];
        let hints = parse_hints(&h, at(0));
        assert_eq!(hints.policy, Some((100, Duration::from_secs(1))));
        // A lone policy, without any RateLimit item.
        let h = [("RateLimit-Policy", r#""p";q=10;w=60"#)];
        assert_eq!(
            parse_hints(&h, at(0)).policy,
            Some((10, Duration::from_secs(60)))
        );
        // A byte quota, a zero window and a missing window say no rate.
        for v in [
            r#""p";q=10;w=60;qu="content-bytes""#,
            r#""p";q=10;w=0"#,
            r#""p";q=10"#,
        ] {
            let h = [("RateLimit-Policy", v)];
            assert_eq!(parse_hints(&h, at(0)).policy, None, "{v}");
        }
        // Without the structured fields there is no policy.
        let h = [("RateLimit-Limit", "10"), ("RateLimit-Reset", "1")];
        assert_eq!(parse_hints(&h, at(0)).policy, None);
    }
}
