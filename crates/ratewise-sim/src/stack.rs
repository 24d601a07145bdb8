//! An API as a stack of limits, answering with real status codes and real
//! header text.
//!
//! Real APIs rarely have one limit. GitHub has an hourly quota, a
//! per-minute secondary limit and a cap on concurrent requests; Stripe a
//! request rate and a concurrency limiter. A `stack` server
//! ([`ServerConfig::Stack`](crate::server::ServerConfig::Stack)) admits a
//! request only when every limit admits it, and a request refused by one
//! limit charges none of the others (as `ratewise::Hierarchy` does). Each
//! rate limit is a core ratewise limiter driven through
//! `RateLimiter::peek_at` / `check_at` — never an algorithm of its own —
//! and each limit refuses with its own status (429, 403, 503 …) and body.
//!
//! The answer is written as the API would write it: a status code and
//! header lines in one of the [`HeaderProfile`]s, with `Retry-After` as a
//! [`RetryAfterMode`] says, the rate-limit numbers possibly stale. The
//! client side then reads that text with ratewise's own classifier and
//! header parser (`ratewise_client::classify::outcome`), exactly as a real
//! client would — so a 403 without a `Retry-After` is a failure, not a
//! throttle, as it is for a real GitHub client.
//!
//! Wall-clock time on the simulated wire (for epoch resets) is
//! [`SIM_EPOCH`] plus the simulated time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratewise::response_headers::{HeaderBuf, PolicyInfo};
use ratewise::{Decision, Quota, RateLimiter, Timestamp};
use ratewise_client::secs_to_duration;
use serde::Deserialize;

use crate::error::{non_negative, positive, SimError};
use crate::server::limiter::{core_limiter, LimiterAlgorithm};
use crate::server::model::{RawResponse, Response, ServerModel};

/// Simulated time zero on the wire's wall clock: 2023-11-14T22:13:20Z, so
/// an epoch reset is a plausible ten-digit number.
pub const SIM_EPOCH: Duration = Duration::from_secs(1_700_000_000);

/// The wall-clock time the simulated wire shows at `now`.
pub fn wall_clock(now: Timestamp) -> SystemTime {
    UNIX_EPOCH + SIM_EPOCH + Duration::from_nanos(now.as_nanos())
}

/// Which rate-limit headers the server sends (on every response).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum HeaderProfile {
    /// The IETF structured fields (drafts ≥ 07): `RateLimit-Policy:
    /// "hourly";q=5000;w=3600` and `RateLimit: "hourly";r=4999;t=3600`, one
    /// item per reported limit, written by the core's header writer as a
    /// ratewise server writes them (a bucket's `q / w` is its sustained
    /// rate: 100/s with a burst of 10 is `q=100;w=1`).
    Ietf,
    /// The older drafts' `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset` (delta seconds), for the tightest reported limit.
    /// The default.
    #[default]
    Draft,
    /// Legacy `X-RateLimit-Limit`, `-Remaining`, `-Reset` with the reset as
    /// epoch seconds (GitHub).
    XRatelimitEpoch,
    /// Legacy `X-RateLimit-*` with the reset as delta seconds.
    XRatelimitDelta,
    /// `RateLimit-Remaining` only (Heroku).
    Remaining,
    /// Shopify REST's `X-Shopify-Shop-Api-Call-Limit: 32/40`: the calls in
    /// the bucket over its size (no reset).
    ShopifyCallLimit,
    /// No rate-limit headers at all.
    None,
}

/// What `Retry-After` a refusal carries.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RetryAfterMode {
    /// The exact wait, in seconds with three decimals (rounded up, so never
    /// earlier than the real wait). The default.
    #[default]
    Exact,
    /// The exact wait rounded up to whole seconds (RFC 9110 delta-seconds).
    Rounded,
    /// Always `retry_after_s` (Shopify sends `2.0` whatever the wait).
    Constant,
    /// No `Retry-After`.
    Absent,
}

/// Whether a bucket begins with its burst available.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Start {
    /// The whole burst is available at time zero. The default.
    #[default]
    Full,
    /// Nothing is available at time zero (GCRA and token bucket only).
    Empty,
}

fn default_status() -> u16 {
    429
}
fn default_true() -> bool {
    true
}

/// One limit of a stack.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LimitConfig {
    /// A rate limit: a core ratewise limiter. Give either `limit` per
    /// `window_s` (burst = `limit` unless `burst` says otherwise) or
    /// `rate_per_s` with `burst`.
    Rate {
        /// Name in headers and reports (`RateLimit-Policy` item name).
        #[serde(default)]
        name: Option<String>,
        /// The core algorithm.
        algorithm: LimiterAlgorithm,
        /// Requests per window.
        #[serde(default)]
        limit: Option<u64>,
        /// Window length, seconds.
        #[serde(default)]
        window_s: Option<f64>,
        /// Sustained requests per second (instead of `limit`/`window_s`).
        #[serde(default)]
        rate_per_s: Option<f64>,
        /// Burst size in requests.
        #[serde(default)]
        burst: Option<u64>,
        /// Full or empty at time zero.
        #[serde(default)]
        start: Start,
        /// Status of a refusal by this limit.
        #[serde(default = "default_status")]
        status: u16,
        /// Body of a refusal by this limit (e.g. GitHub's message).
        #[serde(default)]
        body: Option<String>,
        /// Whether this limit appears in the rate-limit headers (GitHub's
        /// secondary limits do not).
        #[serde(default = "default_true")]
        reported: bool,
        /// This limit's own `Retry-After` mode, when it differs from the
        /// server's (GitHub sends one on secondary limits only).
        #[serde(default)]
        retry_after: Option<RetryAfterMode>,
    },
    /// At most `max_in_flight` requests being served at once; a request
    /// counts from its arrival until its response leaves.
    Concurrency {
        /// Name in reports.
        #[serde(default)]
        name: Option<String>,
        /// The cap.
        max_in_flight: u32,
        /// Status of a refusal by this limit.
        #[serde(default = "default_status")]
        status: u16,
        /// Body of a refusal by this limit.
        #[serde(default)]
        body: Option<String>,
        /// This limit's own `Retry-After` mode, when it differs from the
        /// server's.
        #[serde(default)]
        retry_after: Option<RetryAfterMode>,
    },
}

/// A rate limit's quota, window and whether it can start as asked.
fn rate_quota(
    limit: Option<u64>,
    window_s: Option<f64>,
    rate_per_s: Option<f64>,
    burst: Option<u64>,
    field: &str,
) -> Result<ratewise::Quota, SimError> {
    let bad = |m: String| SimError::invalid(field, m);
    let q = match (limit, window_s, rate_per_s) {
        (Some(l), Some(w), None) => {
            positive(w, &format!("{field}.window_s"))?;
            let q = ratewise::Quota::per(l, secs_to_duration(w)).map_err(|e| bad(e.to_string()))?;
            match burst {
                Some(b) => q.with_burst(b).map_err(|e| bad(e.to_string()))?,
                None => q,
            }
        }
        (None, None, Some(r)) => {
            positive(r, &format!("{field}.rate_per_s"))?;
            let b = burst.ok_or_else(|| bad("`rate_per_s` needs a `burst`".to_owned()))?;
            ratewise::Quota::from_rate(r)
                .and_then(|q| q.with_burst(b))
                .map_err(|e| bad(e.to_string()))?
        }
        _ => {
            return Err(bad(
                "give either `limit` and `window_s`, or `rate_per_s` and `burst`".to_owned(),
            ))
        }
    };
    Ok(q)
}

impl LimitConfig {
    /// A rate limit's quota (`None` for a concurrency cap). Its headers
    /// announce it as a ratewise server does
    /// ([`ratewise::response_headers::PolicyInfo::from_quota`]).
    ///
    /// # Errors
    /// As [`LimitConfig::validate`].
    pub fn quota(&self, field: &str) -> Result<Option<ratewise::Quota>, SimError> {
        match self {
            LimitConfig::Rate {
                limit,
                window_s,
                rate_per_s,
                burst,
                ..
            } => rate_quota(*limit, *window_s, *rate_per_s, *burst, field).map(Some),
            LimitConfig::Concurrency { .. } => Ok(None),
        }
    }

    /// Checks the limit; `field` is its dotted path (`server.limits[1]`).
    ///
    /// # Errors
    /// [`SimError::Invalid`] naming the field and the cause.
    pub fn validate(&self, field: &str) -> Result<(), SimError> {
        self.quota(field)?;
        match self {
            LimitConfig::Rate {
                algorithm,
                start,
                status,
                ..
            } => {
                if *start == Start::Empty
                    && !matches!(
                        algorithm,
                        LimiterAlgorithm::Gcra | LimiterAlgorithm::TokenBucket
                    )
                {
                    return Err(SimError::invalid(
                        &format!("{field}.start"),
                        "only gcra and token_bucket can start empty",
                    ));
                }
                refusal_status(*status, field)
            }
            LimitConfig::Concurrency {
                max_in_flight,
                status,
                ..
            } => {
                if *max_in_flight == 0 {
                    return Err(SimError::invalid(
                        &format!("{field}.max_in_flight"),
                        "must be at least 1: a cap of 0 admits nothing",
                    ));
                }
                refusal_status(*status, field)
            }
        }
    }

    /// The core limiter of a rate limit (`None` for a concurrency cap).
    ///
    /// # Errors
    /// As [`LimitConfig::validate`].
    pub fn limiter(&self, field: &str) -> Result<Option<Box<dyn RateLimiter>>, SimError> {
        Ok(match (self, self.quota(field)?) {
            (
                LimitConfig::Rate {
                    algorithm, start, ..
                },
                Some(q),
            ) => Some(core_limiter(*algorithm, q, *start == Start::Full)),
            _ => None,
        })
    }
}

fn refusal_status(status: u16, field: &str) -> Result<(), SimError> {
    if (400..600).contains(&status) {
        Ok(())
    } else {
        Err(SimError::invalid(
            &format!("{field}.status"),
            format!("a refusal needs a 4xx or 5xx status, got {status}"),
        ))
    }
}

/// Checks a whole stack.
pub(crate) fn validate(
    limits: &[LimitConfig],
    retry_after: RetryAfterMode,
    retry_after_s: Option<f64>,
    hints_stale_s: f64,
) -> Result<(), SimError> {
    if limits.is_empty() {
        return Err(SimError::invalid(
            "server.limits",
            "add at least one [[server.limits]]",
        ));
    }
    if !limits.iter().any(|l| matches!(l, LimitConfig::Rate { .. })) {
        return Err(SimError::invalid(
            "server.limits",
            "a stack needs at least one `kind = \"rate\"` limit",
        ));
    }
    for (i, l) in limits.iter().enumerate() {
        l.validate(&format!("server.limits[{i}]"))?;
    }
    non_negative(hints_stale_s, "server.hints_stale_s")?;
    let own = |l: &LimitConfig| match l {
        LimitConfig::Rate { retry_after, .. } | LimitConfig::Concurrency { retry_after, .. } => {
            *retry_after
        }
    };
    let constant = retry_after == RetryAfterMode::Constant
        || limits
            .iter()
            .any(|l| own(l) == Some(RetryAfterMode::Constant));
    match (constant, retry_after_s) {
        (true, Some(s)) => non_negative(s, "server.retry_after_s"),
        (true, None) => Err(SimError::invalid(
            "server.retry_after_s",
            "retry_after = \"constant\" needs retry_after_s (the seconds every refusal says)",
        )),
        (false, Some(_)) => Err(SimError::invalid(
            "server.retry_after_s",
            "only used with retry_after = \"constant\"",
        )),
        (false, None) => Ok(()),
    }
}

/// One rate limit of a running stack.
struct RateLimit {
    name: String,
    limiter: Box<dyn RateLimiter>,
    refusal: Refusal,
    reported: bool,
    start_full: bool,
}

/// One concurrency cap of a running stack.
struct Cap {
    max: usize,
    refusal: Refusal,
}

/// How a limit says no.
#[derive(Clone, Debug)]
struct Refusal {
    status: u16,
    body: Option<String>,
    retry_after: Option<RetryAfterMode>,
}

/// What one reported limit said at one moment.
#[derive(Clone, Debug)]
struct Reading {
    name: String,
    limit: u64,
    remaining: u64,
    reset: Duration,
    /// The limit's quota, for `RateLimit-Policy`.
    quota: Quota,
}

/// A running stack server.
pub struct StackServer {
    rates: Vec<RateLimit>,
    caps: Vec<Cap>,
    /// When each admitted request's response leaves, earliest first.
    in_flight: BinaryHeap<Reverse<Timestamp>>,
    headers: HeaderProfile,
    retry_after: RetryAfterMode,
    retry_after_s: f64,
    stale: Duration,
    /// Readings not yet old enough to be reported, oldest first, plus the
    /// newest one that is.
    history: VecDeque<(Timestamp, Vec<Reading>)>,
}

impl StackServer {
    /// Builds the stack; `limits` must have passed validation.
    ///
    /// # Errors
    /// [`SimError::Invalid`] when a limit is out of range.
    pub fn new(
        limits: &[LimitConfig],
        headers: HeaderProfile,
        retry_after: RetryAfterMode,
        retry_after_s: Option<f64>,
        hints_stale_s: f64,
    ) -> Result<StackServer, SimError> {
        let mut rates = Vec::new();
        let mut caps = Vec::new();
        for (i, l) in limits.iter().enumerate() {
            let field = format!("server.limits[{i}]");
            match l {
                LimitConfig::Rate {
                    name,
                    start,
                    status,
                    body,
                    reported,
                    retry_after: own,
                    ..
                } => {
                    let limiter = l
                        .limiter(&field)?
                        .ok_or_else(|| SimError::invalid(&field, "not a rate limit"))?;
                    rates.push(RateLimit {
                        name: name.clone().unwrap_or_else(|| format!("limit{i}")),
                        limiter,
                        refusal: Refusal {
                            status: *status,
                            body: body.clone(),
                            retry_after: *own,
                        },
                        reported: *reported,
                        start_full: *start == Start::Full,
                    });
                }
                LimitConfig::Concurrency {
                    max_in_flight,
                    status,
                    body,
                    retry_after: own,
                    ..
                } => caps.push(Cap {
                    max: *max_in_flight as usize,
                    refusal: Refusal {
                        status: *status,
                        body: body.clone(),
                        retry_after: *own,
                    },
                }),
            }
        }
        Ok(StackServer {
            rates,
            caps,
            in_flight: BinaryHeap::new(),
            headers,
            retry_after,
            retry_after_s: retry_after_s.unwrap_or(0.0),
            stale: secs_to_duration(hints_stale_s),
            history: VecDeque::new(),
        })
    }

    /// Requests being served at `now` (responses not yet sent).
    pub fn in_flight(&mut self, now: Timestamp) -> usize {
        while self.in_flight.peek().is_some_and(|Reverse(t)| *t <= now) {
            self.in_flight.pop();
        }
        self.in_flight.len()
    }

    /// The readings a client is shown at `now`: the newest recorded at or
    /// before `now − stale` (none at all before the first such reading).
    fn shown(&mut self, now: Timestamp, fresh: Vec<Reading>) -> Option<Vec<Reading>> {
        self.history.push_back((now, fresh));
        let horizon = now.as_nanos().checked_sub(self.stale.as_nanos() as u64);
        let horizon = horizon?;
        while self
            .history
            .get(1)
            .is_some_and(|(t, _)| t.as_nanos() <= horizon)
        {
            self.history.pop_front();
        }
        self.history
            .front()
            .filter(|(t, _)| t.as_nanos() <= horizon)
            .map(|(_, r)| r.clone())
    }

    fn rate_headers(
        &self,
        now: Timestamp,
        shown: &[Reading],
        out: &mut Vec<(&'static str, String)>,
    ) {
        let tightest = shown
            .iter()
            .min_by(|a, b| a.remaining.cmp(&b.remaining).then(b.reset.cmp(&a.reset)));
        let secs = |d: Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
        match (self.headers, tightest) {
            (HeaderProfile::None, _) | (_, None) => {}
            (HeaderProfile::Ietf, Some(_)) => {
                // Written by the core's header writer, as a ratewise server
                // writes them: a bucket's policy states its sustained rate
                // (`q / w`), not its burst over the time the burst refills.
                let mut policy = HeaderBuf::<4096>::new();
                let mut field = HeaderBuf::<4096>::new();
                for r in shown {
                    let _ = policy.push_policy(&PolicyInfo::from_quota(&r.name, &r.quota));
                    let _ = field.push_limit(&r.name, r.remaining, r.reset);
                }
                let text = |b: &HeaderBuf<4096>| String::from_utf8_lossy(b.as_bytes()).into_owned();
                out.push(("RateLimit-Policy", text(&policy)));
                out.push(("RateLimit", text(&field)));
            }
            (HeaderProfile::Draft, Some(r)) => {
                out.push(("RateLimit-Limit", r.limit.to_string()));
                out.push(("RateLimit-Remaining", r.remaining.to_string()));
                out.push(("RateLimit-Reset", secs(r.reset).to_string()));
            }
            (HeaderProfile::XRatelimitEpoch | HeaderProfile::XRatelimitDelta, Some(r)) => {
                out.push(("X-RateLimit-Limit", r.limit.to_string()));
                out.push(("X-RateLimit-Remaining", r.remaining.to_string()));
                let reset = if self.headers == HeaderProfile::XRatelimitEpoch {
                    let at = SIM_EPOCH + Duration::from_nanos(now.as_nanos()) + r.reset;
                    secs(at)
                } else {
                    secs(r.reset)
                };
                out.push(("X-RateLimit-Reset", reset.to_string()));
            }
            (HeaderProfile::Remaining, Some(r)) => {
                out.push(("RateLimit-Remaining", r.remaining.to_string()));
            }
            (HeaderProfile::ShopifyCallLimit, Some(r)) => {
                let used = r.limit.saturating_sub(r.remaining);
                out.push((
                    "X-Shopify-Shop-Api-Call-Limit",
                    format!("{used}/{}", r.limit),
                ));
            }
        }
    }

    fn retry_after_header(
        &self,
        mode: RetryAfterMode,
        wait: Option<Duration>,
        out: &mut Vec<(&'static str, String)>,
    ) {
        let value = match mode {
            RetryAfterMode::Absent => None,
            RetryAfterMode::Constant => Some(format!("{:.1}", self.retry_after_s)),
            // Milliseconds rounded up: never earlier than the real wait.
            RetryAfterMode::Exact => wait.map(|w| {
                let ms = w.as_nanos().div_ceil(1_000_000);
                format!("{}.{:03}", ms / 1000, ms % 1000)
            }),
            RetryAfterMode::Rounded => {
                wait.map(|w| (w.as_secs() + u64::from(w.subsec_nanos() > 0)).to_string())
            }
        };
        if let Some(v) = value {
            out.push(("Retry-After", v));
        }
    }

    fn reading(r: &RateLimit, d: &Decision) -> Reading {
        Reading {
            name: r.name.clone(),
            limit: d.limit,
            remaining: d.remaining,
            reset: d.reset_after,
            quota: r.limiter.quota(),
        }
    }
}

impl ServerModel for StackServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.handle_for(now, Duration::ZERO)
    }

    fn handle_for(&mut self, now: Timestamp, service: Duration) -> Response {
        let busy = self.in_flight(now);
        // The first refusing limit in the listed order decides the status;
        // the wait is the longest any refusing limit asks for.
        let mut refusal: Option<Refusal> = None;
        let mut wait: Option<Duration> = None;
        for c in &self.caps {
            if busy >= c.max {
                refusal.get_or_insert_with(|| c.refusal.clone());
                let free_at = self.in_flight.peek().map(|Reverse(t)| *t).unwrap_or(now);
                wait = wait.max(Some(free_at.saturating_duration_since(now)));
            }
        }
        let mut decisions = Vec::with_capacity(self.rates.len());
        for r in &self.rates {
            let d = r.limiter.peek_at(1, now);
            match &d {
                Ok(d) if d.allowed => {}
                Ok(d) => {
                    refusal.get_or_insert_with(|| r.refusal.clone());
                    wait = wait.max(d.retry_after);
                }
                Err(_) => {
                    refusal.get_or_insert_with(|| r.refusal.clone());
                }
            }
            decisions.push(d);
        }
        let mut delay = Duration::ZERO;
        if refusal.is_none() {
            // Every limit admits: charge each one (a single-threaded
            // server, so the peeks above still hold).
            for (r, slot) in self.rates.iter().zip(decisions.iter_mut()) {
                let d = r.limiter.check_at(1, now);
                if let Ok(d) = &d {
                    delay = delay.max(d.delay);
                    if !d.allowed {
                        refusal.get_or_insert_with(|| r.refusal.clone());
                    }
                }
                *slot = d;
            }
        }
        let fresh: Vec<Reading> = self
            .rates
            .iter()
            .zip(&decisions)
            .filter(|(r, _)| r.reported)
            .filter_map(|(r, d)| d.as_ref().ok().map(|d| Self::reading(r, d)))
            .collect();
        let shown = self.shown(now, fresh);
        let mut headers = Vec::new();
        if let Some(shown) = &shown {
            self.rate_headers(now, shown, &mut headers);
        }
        let (status, body) = match refusal {
            Some(r) => {
                self.retry_after_header(
                    r.retry_after.unwrap_or(self.retry_after),
                    wait,
                    &mut headers,
                );
                (r.status, r.body)
            }
            None => {
                self.in_flight
                    .push(Reverse(now.saturating_add(service).saturating_add(delay)));
                (200, None)
            }
        };
        Response {
            throttled: status != 200,
            delay,
            wire: Some(Box::new(RawResponse {
                status,
                headers,
                body,
            })),
            ..Response::default()
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.rates
            .iter()
            .filter_map(|r| r.limiter.peek_at(1, now).ok())
            .map(|d| d.remaining as f64)
            .fold(f64::INFINITY, f64::min)
            .min(1.0e18)
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        // The tightest rate limit bounds what the stack can grant.
        self.rates
            .iter()
            .map(|r| {
                let q = r.limiter.quota();
                let initial = if r.start_full { q.burst() as f64 } else { 0.0 };
                initial + end.as_secs_f64() * q.rate_per_second()
            })
            .fold(f64::INFINITY, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise_client::headers::parse_hints;

    fn rate(limit: u64, window_s: f64, status: u16) -> LimitConfig {
        LimitConfig::Rate {
            name: Some(format!("w{window_s}")),
            algorithm: LimiterAlgorithm::Gcra,
            limit: Some(limit),
            window_s: Some(window_s),
            rate_per_s: None,
            burst: None,
            start: Start::Full,
            status,
            body: None,
            reported: true,
            retry_after: None,
        }
    }

    fn server(profile: HeaderProfile, ra: RetryAfterMode) -> StackServer {
        let limits = [rate(10, 60.0, 429), rate(3, 1.0, 403)];
        StackServer::new(&limits, profile, ra, Some(2.0), 0.0).unwrap_or_else(|e| panic!("{e}"))
    }

    fn at(s: f64) -> Timestamp {
        Timestamp::from_secs_f64(s)
    }

    #[test]
    fn the_tightest_limit_refuses_with_its_own_status_and_charges_nothing_else() {
        let mut s = server(HeaderProfile::Draft, RetryAfterMode::Exact);
        for _ in 0..3 {
            assert!(!s.handle(at(0.0)).throttled);
        }
        let r = s.handle(at(0.0));
        let wire = r.wire.unwrap_or_else(|| panic!("no wire"));
        assert_eq!(wire.status, 403);
        // The per-minute limit was not charged for the refusal: 7 left.
        let hints = parse_hints(&wire.headers[..], wall_clock(at(0.0)));
        assert_eq!(hints.remaining, Some(0));
        assert_eq!(
            s.rates[0]
                .limiter
                .peek_at(1, at(0.0))
                .map(|d| d.remaining)
                .ok(),
            Some(7)
        );
        assert!(hints.retry_after.is_some_and(|w| w > Duration::ZERO));
    }

    #[test]
    fn every_header_profile_reads_back_through_the_core_parser() {
        use HeaderProfile::*;
        for profile in [
            Ietf,
            Draft,
            XRatelimitEpoch,
            XRatelimitDelta,
            Remaining,
            ShopifyCallLimit,
            None,
        ] {
            let mut s = server(profile, RetryAfterMode::Rounded);
            let r = s.handle(at(5.0));
            let wire = r.wire.unwrap_or_else(|| panic!("no wire"));
            let h = parse_hints(&wire.headers[..], wall_clock(at(5.0)));
            // After one request the tightest reported limit is 3 per s: 2 left.
            let (remaining, limit, reset) = match profile {
                None => (Option::None, Option::None, Option::None),
                Remaining => (Some(2), Option::None, Option::None),
                ShopifyCallLimit => (Some(2), Some(3), Option::None),
                _ => (Some(2), Some(3), Some(Duration::from_secs(1))),
            };
            assert_eq!(h.remaining, remaining, "{profile:?}: {:?}", wire.headers);
            assert_eq!(h.limit, limit, "{profile:?}: {:?}", wire.headers);
            assert_eq!(h.reset_after, reset, "{profile:?}: {:?}", wire.headers);
        }
    }

    #[test]
    fn retry_after_modes() {
        let wait_of = |mode| {
            let mut s = server(HeaderProfile::None, mode);
            for _ in 0..3 {
                s.handle(at(0.25));
            }
            let r = s.handle(at(0.25));
            let wire = r.wire.unwrap_or_else(|| panic!("no wire"));
            parse_hints(&wire.headers[..], wall_clock(at(0.25))).retry_after
        };
        // One of 3 per second returns after 1/3 s.
        assert_eq!(
            wait_of(RetryAfterMode::Exact),
            Some(Duration::from_millis(334))
        );
        assert_eq!(
            wait_of(RetryAfterMode::Rounded),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            wait_of(RetryAfterMode::Constant),
            Some(Duration::from_secs(2))
        );
        assert_eq!(wait_of(RetryAfterMode::Absent), Option::None);
    }

    #[test]
    fn stale_hints_lag_by_the_given_delay() {
        let limits = [rate(10, 60.0, 429)];
        let mut s = StackServer::new(
            &limits,
            HeaderProfile::Draft,
            RetryAfterMode::Exact,
            Option::None,
            1.0,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let remaining = |s: &mut StackServer, t: f64| {
            let r = s.handle(at(t));
            let wire = r.wire.unwrap_or_else(|| panic!("no wire"));
            parse_hints(&wire.headers[..], wall_clock(at(t))).remaining
        };
        // Nothing is a second old yet: no hints at all.
        assert_eq!(remaining(&mut s, 0.0), Option::None);
        assert_eq!(remaining(&mut s, 0.5), Option::None);
        // At 1.2 s the newest reading a second old is the one at 0.0 s
        // (9 left), though 3 requests have been admitted by now.
        assert_eq!(remaining(&mut s, 1.2), Some(9));
        assert_eq!(remaining(&mut s, 1.6), Some(8));
    }

    #[test]
    fn a_concurrency_cap_counts_requests_until_their_response_leaves() {
        let limits = [
            rate(100, 1.0, 429),
            LimitConfig::Concurrency {
                name: Option::None,
                max_in_flight: 2,
                status: 503,
                body: Option::None,
                retry_after: Option::None,
            },
        ];
        let mut s = StackServer::new(
            &limits,
            HeaderProfile::None,
            RetryAfterMode::Exact,
            Option::None,
            0.0,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let svc = Duration::from_secs(1);
        assert!(!s.handle_for(at(0.0), svc).throttled);
        assert!(!s.handle_for(at(0.1), svc).throttled);
        let r = s.handle_for(at(0.2), svc);
        let wire = r.wire.unwrap_or_else(|| panic!("no wire"));
        assert_eq!(wire.status, 503);
        let h = parse_hints(&wire.headers[..], wall_clock(at(0.2)));
        assert_eq!(h.retry_after, Some(Duration::from_millis(800)));
        // The first response has left at 1.0 s.
        assert!(!s.handle_for(at(1.0), svc).throttled);
    }
}
