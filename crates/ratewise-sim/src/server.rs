//! Simulated servers: what answers the clients' requests.
//!
//! A server is a state machine told the time of each request
//! ([`ServerModel::handle`]); it answers success or throttled plus the hints a
//! real API would send (`RateLimit-Remaining`, `Retry-After`). Requests are
//! handled in the order the engine delivers them, which is the order of
//! arrival, exactly as a mutex-protected fake server would.
//!
//! Invariants every model keeps:
//! * time never runs backwards for a model (the engine guarantees it);
//! * a throttled request consumes nothing;
//! * [`ServerModel::offered`] is the number of successes the server could
//!   have granted between the first request and `end` — the denominator of
//!   the utilization metric — so `successes <= offered` up to rounding.

use std::time::Duration;

use ratewise::{
    FixedWindow, Gcra, LeakyMeter, LeakyQueue, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, Timestamp, TokenBucket,
};
use ratewise_client::{secs_to_duration, ServerHints};
use serde::Deserialize;

use crate::error::{non_negative, positive, SimError};

/// A response as written on the wire: status, header lines and body. A
/// server that sends one (the `stack` server) is read by the client with
/// ratewise's own classifier and header parser, as a real client would.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wire {
    /// HTTP status.
    pub status: u16,
    /// Header lines, in order.
    pub headers: Vec<(&'static str, String)>,
    /// Body, if any.
    pub body: Option<String>,
}

/// One response as the client sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    /// `true` for a 429 (or the API's equivalent).
    pub throttled: bool,
    /// The headers the server sends (`RateLimit-Remaining`,
    /// `RateLimit-Limit`, `Retry-After`, `RateLimit-Reset`), already in the
    /// form the strategies read them.
    pub hints: ServerHints,
    /// Extra time the server holds an admitted request before answering
    /// (a leaky-bucket queue's scheduled departure); added to the latency.
    pub delay: Duration,
    /// The response as written on the wire, when the server writes one;
    /// then the client's outcome is read from it and `hints` is unused.
    pub wire: Option<Box<Wire>>,
}

/// A simulated API's admission logic.
pub trait ServerModel {
    /// Handles one request arriving at `now`.
    fn handle(&mut self, now: Timestamp) -> Response;
    /// Handles one request arriving at `now` whose response, if admitted,
    /// takes `service` to leave (plus the response's own `delay`): what a
    /// server that caps concurrent requests needs. Defaults to
    /// [`ServerModel::handle`].
    fn handle_for(&mut self, now: Timestamp, service: Duration) -> Response {
        let _ = service;
        self.handle(now)
    }
    /// Capacity left at `now` (for charts); does not consume anything.
    fn remaining(&mut self, now: Timestamp) -> f64;
    /// Successes the server could have granted from its first request (or
    /// the start of the run) up to `end`.
    fn offered(&mut self, end: Timestamp) -> f64;
}

/// Builds a quota of `rate` per second with burst `burst`, mapping the core
/// error into a scenario error on `field`.
fn quota(rate: f64, burst: u64, field: &str) -> Result<Quota, SimError> {
    Quota::from_rate(rate)
        .and_then(|q| q.with_burst(burst.max(1)))
        .map_err(|e| SimError::invalid(field, e.to_string()))
}

/// Builds a quota of `limit` requests per window of `window_s` seconds,
/// mapping the core error into a scenario error on `server.window_s`.
fn window_quota(limit: u64, window_s: f64) -> Result<Quota, SimError> {
    Quota::per(limit, secs_to_duration(window_s))
        .map_err(|e| SimError::invalid("server.window_s", e.to_string()))
}

/// Takes one request's worth from a float stock when at least one is
/// there; returns `true` (throttled) when not, leaving the stock as it was.
fn take_one(stock: &mut f64) -> bool {
    let throttled = *stock < 1.0;
    if !throttled {
        *stock -= 1.0;
    }
    throttled
}

/// A Heroku-style answer: `RateLimit-Remaining` only, the floor of what is
/// left after the decrement.
fn remaining_only(throttled: bool, left: f64) -> Response {
    Response {
        throttled,
        hints: ServerHints {
            // floor of a non-negative finite float; saturating cast by definition.
            remaining: Some(left.max(0.0).floor() as u64),
            ..ServerHints::default()
        },
        ..Response::default()
    }
}

/// A float token bucket integrated exactly over spans of constant net flow:
/// the arithmetic shared by the shared-capacity and autoscaling servers,
/// whose refill rates change over time (and, when shared, may turn
/// negative), which the core token bucket's fixed quota cannot express.
#[derive(Clone, Debug)]
struct Fluid {
    /// Tokens in the bucket.
    tokens: f64,
    /// Simulated seconds up to which the bucket has been integrated.
    at: f64,
    /// Tokens that flowed in since the start: the capacity offered.
    offered: f64,
}

impl Fluid {
    /// A bucket holding `tokens` at time zero.
    fn new(tokens: f64) -> Self {
        Fluid {
            tokens,
            at: 0.0,
            offered: tokens,
        }
    }

    /// Integrates from `self.at` to `to` (nothing when `to` is not later)
    /// at `net` tokens per second, holding the stock within `[0, cap]`;
    /// only inflow counts as offered.
    fn flow_to(&mut self, to: f64, net: f64, cap: f64) {
        let dt = to - self.at;
        if dt > 0.0 {
            self.offered += net.max(0.0) * dt;
            self.tokens = (self.tokens + net * dt).clamp(0.0, cap);
            self.at = to;
        }
    }
}

/// The server section of a scenario file: which model and its parameters.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServerConfig {
    /// Heroku's continuously refilled token bucket (the fake server of the
    /// `rate_throttle_client` gem's simulator).
    HerokuBucket {
        /// Bucket size (`MAX`).
        #[serde(default = "default_heroku_capacity")]
        capacity: f64,
        /// Refill per simulated second.
        #[serde(default = "default_heroku_refill")]
        refill_per_s: f64,
        /// Tokens at the start (`STARTING_LIMIT`).
        #[serde(default)]
        starting: f64,
    },
    /// A fixed stock of requests that never refills (the gem's
    /// "decrease only" fake server).
    DecreaseOnly {
        /// Requests available (`STARTING_LIMIT`).
        starting: f64,
    },
    /// Any core ratewise limiter used as the server.
    Limiter {
        /// `gcra` or `token_bucket`.
        algorithm: LimiterAlgorithm,
        /// Sustained requests per second.
        rate_per_s: f64,
        /// Burst size in requests.
        burst: u64,
        /// Whether the limiter starts with its burst available.
        #[serde(default = "default_true")]
        start_full: bool,
    },
    /// "N requests per W seconds" in fixed windows aligned to time zero, as
    /// Google-style per-100-seconds quotas are counted.
    FixedWindow {
        /// Requests allowed in each window.
        limit: u64,
        /// Window length in seconds.
        window_s: f64,
    },
    /// A token bucket whose capacity is shared with background tenants whose
    /// load varies over time (the EMR `DescribeCluster` case).
    Shared {
        /// The API's total sustained rate per second.
        rate_per_s: f64,
        /// Bucket size.
        burst: f64,
        /// Background load: from `at_s` on, other tenants consume
        /// `rate_per_s` (until the next entry). Sorted by `at_s`.
        #[serde(default)]
        background: Vec<BackgroundLoad>,
    },
    /// An API as a stack of limits (see [`crate::stack`]): every limit must
    /// admit a request, a refusal charges no other limit, each limit
    /// refuses with its own status, and responses carry the headers of the
    /// chosen profile.
    Stack {
        /// The limits, checked in this order; the first that refuses sets
        /// the status.
        limits: Vec<crate::stack::LimitConfig>,
        /// Which rate-limit headers every response carries.
        #[serde(default)]
        headers: crate::stack::HeaderProfile,
        /// What `Retry-After` a refusal carries.
        #[serde(default)]
        retry_after: crate::stack::RetryAfterMode,
        /// The constant `Retry-After`, seconds (with `retry_after =
        /// "constant"`).
        #[serde(default)]
        retry_after_s: Option<f64>,
        /// The rate-limit headers describe the server as it was this many
        /// seconds earlier (0: fresh).
        #[serde(default)]
        hints_stale_s: f64,
    },
    /// Provisioned capacity that scales up after sustained high utilization,
    /// with a delay (the DynamoDB autoscaling case).
    Autoscaling {
        /// Provisioned requests per second at the start.
        initial_rate_per_s: f64,
        /// Upper bound of scaling.
        max_rate_per_s: f64,
        /// Seconds of capacity that can burst (DynamoDB keeps up to 300 s of
        /// unused capacity).
        #[serde(default = "default_burst_s")]
        burst_s: f64,
        /// Target utilization (consumed / provisioned), e.g. 0.7.
        #[serde(default = "default_target")]
        target_utilization: f64,
        /// Length of one evaluation period in seconds.
        #[serde(default = "default_eval")]
        evaluation_s: f64,
        /// Consecutive periods above target before scaling is triggered.
        #[serde(default = "default_sustained")]
        sustained_periods: u32,
        /// Delay between the trigger and the new capacity taking effect.
        #[serde(default = "default_scale_delay")]
        scale_delay_s: f64,
    },
}

/// A core algorithm usable as a server.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LimiterAlgorithm {
    /// [`ratewise::Gcra`].
    Gcra,
    /// [`ratewise::TokenBucket`].
    TokenBucket,
    /// [`ratewise::FixedWindow`] (window = burst / rate).
    FixedWindow,
    /// [`ratewise::SlidingWindowLog`].
    SlidingWindowLog,
    /// [`ratewise::SlidingWindowCounter`].
    SlidingWindowCounter,
    /// [`ratewise::LeakyMeter`].
    LeakyMeter,
    /// [`ratewise::LeakyQueue`]: admitted requests are answered at their
    /// scheduled departure.
    LeakyQueue,
}

impl LimiterAlgorithm {
    /// Every core algorithm, GCRA and the token bucket (the two that can
    /// start empty) first.
    pub const ALL: [LimiterAlgorithm; 7] = [
        LimiterAlgorithm::Gcra,
        LimiterAlgorithm::TokenBucket,
        LimiterAlgorithm::FixedWindow,
        LimiterAlgorithm::SlidingWindowLog,
        LimiterAlgorithm::SlidingWindowCounter,
        LimiterAlgorithm::LeakyMeter,
        LimiterAlgorithm::LeakyQueue,
    ];
}

/// One step of background tenant load.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackgroundLoad {
    /// When this load starts, in simulated seconds.
    pub at_s: f64,
    /// Requests per second the other tenants consume from then on.
    pub rate_per_s: f64,
}

fn default_heroku_capacity() -> f64 {
    4500.0
}
fn default_heroku_refill() -> f64 {
    1.25
}
fn default_true() -> bool {
    true
}
fn default_burst_s() -> f64 {
    300.0
}
fn default_target() -> f64 {
    0.7
}
fn default_eval() -> f64 {
    60.0
}
fn default_sustained() -> u32 {
    2
}
fn default_scale_delay() -> f64 {
    300.0
}

impl ServerConfig {
    /// Checks the parameters; errors name the offending field.
    pub fn validate(&self) -> Result<(), SimError> {
        match self {
            ServerConfig::HerokuBucket {
                capacity,
                refill_per_s,
                starting,
            } => {
                positive(*capacity, "server.capacity")?;
                non_negative(*refill_per_s, "server.refill_per_s")?;
                non_negative(*starting, "server.starting")?;
                if *refill_per_s == 0.0 && *starting < 1.0 {
                    return Err(SimError::invalid(
                        "server.refill_per_s",
                        format!(
                            "the server has no capacity: refill_per_s = 0 and starting = {starting}, \
                             so no request can ever succeed (set refill_per_s above 0 or starting to 1 or more)"
                        ),
                    ));
                }
                Ok(())
            }
            ServerConfig::DecreaseOnly { starting } => {
                non_negative(*starting, "server.starting")?;
                if *starting < 1.0 {
                    return Err(SimError::invalid(
                        "server.starting",
                        format!(
                            "the server has no capacity: a decrease-only server never refills and \
                             starting = {starting}, so no request can ever succeed (set starting to 1 or more)"
                        ),
                    ));
                }
                Ok(())
            }
            ServerConfig::Limiter {
                algorithm,
                rate_per_s,
                burst,
                start_full,
            } => {
                positive(*rate_per_s, "server.rate_per_s")?;
                if !start_full
                    && !matches!(
                        algorithm,
                        LimiterAlgorithm::Gcra | LimiterAlgorithm::TokenBucket
                    )
                {
                    return Err(SimError::invalid(
                        "server.start_full",
                        "only gcra and token_bucket can start empty",
                    ));
                }
                quota(*rate_per_s, *burst, "server.burst").map(|_| ())
            }
            ServerConfig::FixedWindow { limit, window_s } => {
                positive(*window_s, "server.window_s")?;
                if *limit == 0 {
                    return Err(SimError::invalid("server.limit", "must be at least 1"));
                }
                window_quota(*limit, *window_s).map(|_| ())
            }
            ServerConfig::Shared {
                rate_per_s,
                burst,
                background,
            } => {
                positive(*rate_per_s, "server.rate_per_s")?;
                positive(*burst, "server.burst")?;
                let mut last = f64::NEG_INFINITY;
                for b in background {
                    non_negative(b.at_s, "server.background.at_s")?;
                    non_negative(b.rate_per_s, "server.background.rate_per_s")?;
                    if b.at_s < last {
                        return Err(SimError::invalid(
                            "server.background.at_s",
                            "entries must be sorted by at_s",
                        ));
                    }
                    last = b.at_s;
                }
                Ok(())
            }
            ServerConfig::Stack {
                limits,
                retry_after,
                retry_after_s,
                hints_stale_s,
                ..
            } => crate::stack::validate(limits, *retry_after, *retry_after_s, *hints_stale_s),
            ServerConfig::Autoscaling {
                initial_rate_per_s,
                max_rate_per_s,
                burst_s,
                target_utilization,
                evaluation_s,
                scale_delay_s,
                ..
            } => {
                positive(*initial_rate_per_s, "server.initial_rate_per_s")?;
                positive(*max_rate_per_s, "server.max_rate_per_s")?;
                if max_rate_per_s < initial_rate_per_s {
                    return Err(SimError::invalid(
                        "server.max_rate_per_s",
                        "must be at least initial_rate_per_s",
                    ));
                }
                non_negative(*burst_s, "server.burst_s")?;
                positive(*evaluation_s, "server.evaluation_s")?;
                non_negative(*scale_delay_s, "server.scale_delay_s")?;
                if !(*target_utilization > 0.0 && *target_utilization <= 1.0) {
                    return Err(SimError::invalid(
                        "server.target_utilization",
                        "must be in (0, 1]",
                    ));
                }
                Ok(())
            }
        }
    }

    /// For a server that never refills, the field that says so and the
    /// number of successes it offers in all; `None` when capacity returns.
    pub fn total_capacity(&self) -> Option<(&'static str, f64)> {
        match *self {
            ServerConfig::HerokuBucket {
                refill_per_s,
                starting,
                capacity,
            } => (refill_per_s == 0.0)
                .then(|| ("server.refill_per_s", starting.min(capacity).floor())),
            ServerConfig::DecreaseOnly { starting } => Some(("server.starting", starting.floor())),
            _ => None,
        }
    }

    /// A one-line description for listings and reports.
    pub fn describe(&self) -> String {
        match self {
            ServerConfig::HerokuBucket {
                capacity,
                refill_per_s,
                starting,
            } => format!("Heroku token bucket: {capacity} max, {refill_per_s}/s refill, starts at {starting}"),
            ServerConfig::DecreaseOnly { starting } => {
                format!("decrease-only: {starting} requests, no refill")
            }
            ServerConfig::Limiter {
                algorithm,
                rate_per_s,
                burst,
                ..
            } => format!("{algorithm:?} limiter: {rate_per_s}/s, burst {burst}"),
            ServerConfig::FixedWindow { limit, window_s } => {
                format!("fixed window: {limit} per {window_s} s")
            }
            ServerConfig::Shared {
                rate_per_s,
                background,
                ..
            } => format!(
                "shared API: {rate_per_s}/s total, {} background load steps",
                background.len()
            ),
            ServerConfig::Stack {
                limits, headers, ..
            } => {
                let parts: Vec<String> = limits
                    .iter()
                    .map(|l| match l {
                        crate::stack::LimitConfig::Rate {
                            name,
                            algorithm,
                            limit,
                            window_s,
                            rate_per_s,
                            burst,
                            status,
                            ..
                        } => {
                            let q = match (limit, window_s, rate_per_s, burst) {
                                (Some(l), Some(w), _, _) => format!("{l} per {w} s"),
                                (_, _, Some(r), Some(b)) => format!("{r}/s, burst {b}"),
                                _ => "?".to_owned(),
                            };
                            format!(
                                "{} {algorithm:?} {q} ({status})",
                                name.as_deref().unwrap_or("rate")
                            )
                        }
                        crate::stack::LimitConfig::Concurrency {
                            name,
                            max_in_flight,
                            status,
                            ..
                        } => format!(
                            "{} at most {max_in_flight} in flight ({status})",
                            name.as_deref().unwrap_or("concurrency")
                        ),
                    })
                    .collect();
                format!("stack of {}; headers {headers:?}", parts.join(" + "))
            }
            ServerConfig::Autoscaling {
                initial_rate_per_s,
                max_rate_per_s,
                scale_delay_s,
                ..
            } => format!(
                "autoscaling: {initial_rate_per_s}/s up to {max_rate_per_s}/s, {scale_delay_s} s scaling delay"
            ),
        }
    }

    /// The sustained rate (requests per second) and the capacity available
    /// at the start of a run, as a client could learn them from the API's
    /// documentation; `None` for a server with no sustained rate (the
    /// decrease-only stock).
    pub fn documented_quota(&self) -> Option<(f64, f64)> {
        match *self {
            ServerConfig::HerokuBucket {
                refill_per_s,
                starting,
                ..
            } => Some((refill_per_s, starting)),
            ServerConfig::DecreaseOnly { .. } => None,
            ServerConfig::Limiter {
                rate_per_s,
                burst,
                start_full,
                ..
            } => Some((rate_per_s, if start_full { burst as f64 } else { 0.0 })),
            ServerConfig::FixedWindow { limit, window_s } => {
                Some((limit as f64 / window_s, limit as f64))
            }
            ServerConfig::Shared {
                rate_per_s, burst, ..
            } => Some((rate_per_s, burst)),
            // The tightest rate limit (lowest sustained rate) of a stack.
            ServerConfig::Stack { ref limits, .. } => limits
                .iter()
                .enumerate()
                .filter_map(|(i, l)| {
                    let q = l.limiter(&format!("server.limits[{i}]")).ok()??;
                    let full = matches!(
                        l,
                        crate::stack::LimitConfig::Rate {
                            start: crate::stack::Start::Full,
                            ..
                        }
                    );
                    let q = q.quota();
                    Some((
                        q.rate_per_second(),
                        if full { q.burst() as f64 } else { 0.0 },
                    ))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0)),
            // The autoscaling server starts with no banked burst.
            ServerConfig::Autoscaling {
                initial_rate_per_s, ..
            } => Some((initial_rate_per_s, 0.0)),
        }
        .filter(|&(rate, _)| rate.is_finite() && rate > 0.0)
    }

    /// One client thread's fair share of the server's quota when `threads`
    /// threads share it, as `count` sends per `window`: the sustained rate
    /// divided by `threads`, with an allowance of `count` back-to-back sends
    /// equal to the thread's share of the capacity available at the start
    /// (at least 1). The window is `count · threads / rate`, so the share's
    /// long-run rate is exactly `rate / threads`.
    ///
    /// For Heroku's bucket (1.25/s, starting empty) and 10 threads that is
    /// 1 send per 8 s; for a fixed window of 100 per 100 s and 4 threads, 25
    /// per 100 s. `None` when the server has no sustained rate.
    pub fn fair_share(&self, threads: usize) -> Option<(u32, Duration)> {
        let (rate, initial) = self.documented_quota()?;
        let n = threads.max(1) as f64;
        let count = (initial.max(0.0) / n).floor().clamp(
            1.0,
            f64::from(ratewise_client::flood_guard::MAX_FLOOD_GUARD_COUNT),
        );
        let window = count * n / rate;
        (window.is_finite() && window > 0.0)
            .then(|| (count as u32, Duration::from_secs_f64(window.min(1.0e12))))
    }

    /// Builds a fresh server.
    ///
    /// # Errors
    /// [`SimError::Invalid`] when the parameters are out of range.
    pub fn build(&self) -> Result<Box<dyn ServerModel>, SimError> {
        self.validate()?;
        Ok(match *self {
            ServerConfig::HerokuBucket {
                capacity,
                refill_per_s,
                starting,
            } => Box::new(HerokuBucket::new(capacity, refill_per_s, starting)),
            ServerConfig::DecreaseOnly { starting } => Box::new(DecreaseOnly::new(starting)),
            ServerConfig::Limiter {
                algorithm,
                rate_per_s,
                burst,
                start_full,
            } => {
                let q = quota(rate_per_s, burst, "server.burst")?;
                let limiter = core_limiter(algorithm, q, start_full);
                Box::new(LimiterServer::new(limiter, start_full))
            }
            ServerConfig::FixedWindow { limit, window_s } => {
                Box::new(FixedWindowServer::new(window_quota(limit, window_s)?))
            }
            ServerConfig::Shared {
                rate_per_s,
                burst,
                ref background,
            } => Box::new(SharedServer::new(rate_per_s, burst, background.clone())),
            ServerConfig::Stack {
                ref limits,
                headers,
                retry_after,
                retry_after_s,
                hints_stale_s,
            } => Box::new(crate::stack::StackServer::new(
                limits,
                headers,
                retry_after,
                retry_after_s,
                hints_stale_s,
            )?),
            ServerConfig::Autoscaling {
                initial_rate_per_s,
                max_rate_per_s,
                burst_s,
                target_utilization,
                evaluation_s,
                sustained_periods,
                scale_delay_s,
            } => Box::new(AutoscalingServer::new(
                initial_rate_per_s,
                max_rate_per_s,
                burst_s,
                target_utilization,
                evaluation_s,
                sustained_periods,
                scale_delay_s,
            )),
        })
    }
}

/// A fresh core limiter of `algorithm` with quota `q` on its own manual
/// clock (the simulator passes every time explicitly), full or — GCRA and
/// the token bucket only — empty at time zero.
pub(crate) fn core_limiter(
    algorithm: LimiterAlgorithm,
    q: Quota,
    start_full: bool,
) -> Box<dyn RateLimiter> {
    let clock = ManualClock::new();
    match (algorithm, start_full) {
        (LimiterAlgorithm::Gcra, true) => Box::new(Gcra::with_clock(q, clock)),
        (LimiterAlgorithm::Gcra, false) => Box::new(Gcra::empty_with_clock(q, clock)),
        (LimiterAlgorithm::TokenBucket, true) => Box::new(TokenBucket::with_clock(q, clock)),
        (LimiterAlgorithm::TokenBucket, false) => Box::new(TokenBucket::empty_with_clock(q, clock)),
        (LimiterAlgorithm::FixedWindow, _) => Box::new(FixedWindow::with_clock(q, clock)),
        (LimiterAlgorithm::SlidingWindowLog, _) => Box::new(SlidingWindowLog::with_clock(q, clock)),
        (LimiterAlgorithm::SlidingWindowCounter, _) => {
            Box::new(SlidingWindowCounter::with_clock(q, clock))
        }
        (LimiterAlgorithm::LeakyMeter, _) => Box::new(LeakyMeter::with_clock(q, clock)),
        (LimiterAlgorithm::LeakyQueue, _) => Box::new(LeakyQueue::with_clock(q, clock)),
    }
}

/// Heroku's fake server, as the open-source `rate_throttle_client` gem's
/// simulator implements it: a continuously refilled token bucket
/// with float state, lazily started clock, and the "no advance while full"
/// quirk. `RateLimit-Remaining` (floor, after the decrement) is sent on both
/// 200 and 429.
#[derive(Clone, Debug)]
pub struct HerokuBucket {
    max: f64,
    rate: f64,
    starting: f64,
    limit_left: f64,
    last_request: Option<Timestamp>,
    first_request: Option<Timestamp>,
}

impl HerokuBucket {
    /// A bucket of `max` tokens refilled at `rate` per second, holding
    /// `starting` tokens until the first request.
    pub fn new(max: f64, rate: f64, starting: f64) -> Self {
        HerokuBucket {
            max,
            rate,
            starting,
            limit_left: starting,
            last_request: None,
            first_request: None,
        }
    }

    /// The stock at `now` after refilling since `last`, capped at `max`.
    fn refilled(&self, last: Timestamp, now: Timestamp) -> f64 {
        let dt = now.saturating_duration_since(last).as_secs_f64();
        (self.limit_left + dt * self.rate).min(self.max)
    }
}

impl ServerModel for HerokuBucket {
    fn handle(&mut self, now: Timestamp) -> Response {
        let last = *self.last_request.get_or_insert(now);
        self.first_request.get_or_insert(now);
        if self.limit_left < self.max {
            self.last_request = Some(now);
            self.limit_left = self.refilled(last, now);
        }
        let throttled = take_one(&mut self.limit_left);
        // Heroku's fake server sends `RateLimit-Remaining` only.
        remaining_only(throttled, self.limit_left)
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        match self.last_request {
            Some(last) if self.limit_left < self.max => self.refilled(last, now),
            _ => self.limit_left,
        }
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let from = self.first_request.unwrap_or(end);
        self.starting + end.saturating_duration_since(from).as_secs_f64() * self.rate
    }
}

/// The decrease-only server of the gem's "time to clear" benchmark: a
/// fixed stock, no refill.
#[derive(Clone, Debug)]
pub struct DecreaseOnly {
    starting: f64,
    limit_left: f64,
}

impl DecreaseOnly {
    /// A server that grants `starting` requests in total.
    pub fn new(starting: f64) -> Self {
        DecreaseOnly {
            starting,
            limit_left: starting,
        }
    }
}

impl ServerModel for DecreaseOnly {
    fn handle(&mut self, _now: Timestamp) -> Response {
        let throttled = take_one(&mut self.limit_left);
        // Same headers as the Heroku bucket: remaining only.
        remaining_only(throttled, self.limit_left)
    }

    fn remaining(&mut self, _now: Timestamp) -> f64 {
        self.limit_left
    }

    fn offered(&mut self, _end: Timestamp) -> f64 {
        self.starting
    }
}

/// Any core [`RateLimiter`] as a server, driven through `check_at` with the
/// simulated time. Sends `RateLimit-Remaining`, `RateLimit-Limit` and
/// `Retry-After` from the limiter's [`ratewise::Decision`].
pub struct LimiterServer {
    limiter: Box<dyn RateLimiter>,
    start_full: bool,
}

impl LimiterServer {
    /// Wraps `limiter`; `start_full` says whether it began with its burst.
    pub fn new(limiter: Box<dyn RateLimiter>, start_full: bool) -> Self {
        LimiterServer {
            limiter,
            start_full,
        }
    }
}

impl ServerModel for LimiterServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        match self.limiter.check_at(1, now) {
            Ok(d) => Response {
                throttled: !d.allowed,
                hints: ServerHints {
                    remaining: Some(d.remaining),
                    limit: Some(d.limit),
                    retry_after: d.retry_after,
                    reset_after: Some(d.reset_after),
                    ..ServerHints::default()
                },
                delay: d.delay,
                wire: None,
            },
            // Weight 1 never exceeds a burst of at least 1; treat the
            // impossible case as a refusal rather than panicking.
            Err(_) => Response {
                throttled: true,
                ..Response::default()
            },
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.limiter
            .peek_at(1, now)
            .map_or(0.0, |d| d.remaining as f64)
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let q = self.limiter.quota();
        let initial = if self.start_full {
            q.burst() as f64
        } else {
            0.0
        };
        initial + end.as_secs_f64() * q.rate_per_second()
    }
}

/// "`limit` per `window_s`" counted in fixed windows aligned to time zero:
/// the core [`FixedWindow`] limiter answering through [`LimiterServer`]. Only
/// the capacity offered differs from a `limiter` server: here it counts
/// whole windows (every window that has begun grants its full limit), not
/// `burst + rate × time`.
pub struct FixedWindowServer {
    server: LimiterServer,
    quota: Quota,
}

impl FixedWindowServer {
    /// A quota of `quota.burst()` requests per window of `quota.window()`.
    pub fn new(quota: Quota) -> Self {
        let limiter = FixedWindow::with_clock(quota, ManualClock::new());
        FixedWindowServer {
            server: LimiterServer::new(Box::new(limiter), true),
            quota,
        }
    }
}

impl ServerModel for FixedWindowServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.server.handle(now)
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.server.remaining(now)
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let windows = end.as_nanos() / self.quota.window_nanos() + 1;
        windows as f64 * self.quota.burst() as f64
    }
}

/// A token bucket refilled at the API's full rate, drained continuously by
/// background tenants at a rate that changes over time; our clients get what
/// is left. The bucket is integrated exactly across load changes.
#[derive(Clone, Debug)]
pub struct SharedServer {
    rate: f64,
    burst: f64,
    background: Vec<BackgroundLoad>,
    bucket: Fluid,
}

impl SharedServer {
    /// A shared API of `rate` per second and `burst` tokens, starting full.
    pub fn new(rate: f64, burst: f64, background: Vec<BackgroundLoad>) -> Self {
        SharedServer {
            rate,
            burst,
            background,
            bucket: Fluid::new(burst),
        }
    }

    fn load_at(&self, t: f64) -> f64 {
        self.background
            .iter()
            .take_while(|b| b.at_s <= t)
            .last()
            .map_or(0.0, |b| b.rate_per_s)
    }

    fn advance(&mut self, t: f64) {
        while self.bucket.at < t {
            let at = self.bucket.at;
            let next_change = self
                .background
                .iter()
                .map(|b| b.at_s)
                .find(|&a| a > at)
                .unwrap_or(f64::INFINITY)
                .min(t);
            let net = self.rate - self.load_at(at);
            self.bucket.flow_to(next_change, net, self.burst);
        }
    }
}

impl ServerModel for SharedServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.advance(now.as_secs_f64());
        let throttled = take_one(&mut self.bucket.tokens);
        let net = self.rate - self.load_at(self.bucket.at);
        let retry_after =
            (throttled && net > 0.0).then(|| secs_to_duration((1.0 - self.bucket.tokens) / net));
        Response {
            throttled,
            hints: ServerHints {
                retry_after,
                ..ServerHints::default()
            },
            ..Response::default()
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.advance(now.as_secs_f64());
        self.bucket.tokens
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        self.advance(end.as_secs_f64());
        self.bucket.offered
    }
}

/// Provisioned capacity with delayed scale-up. Every `evaluation_s` the
/// consumed rate is compared with `target_utilization × provisioned`; after
/// `sustained_periods` consecutive periods at or above target, the
/// provisioned rate becomes `consumed / target` (capped at the maximum)
/// `scale_delay_s` later. Unused capacity accumulates up to `burst_s`
/// seconds' worth. Throttled requests consume nothing and do not count as
/// consumption, as with DynamoDB's consumed-capacity metric.
#[derive(Clone, Debug)]
pub struct AutoscalingServer {
    rate: f64,
    max_rate: f64,
    burst_s: f64,
    target: f64,
    period: f64,
    sustained: u32,
    delay: f64,
    bucket: Fluid,
    period_start: f64,
    consumed_in_period: f64,
    hot_periods: u32,
    pending: Option<(f64, f64)>,
}

impl AutoscalingServer {
    /// See the type's documentation for the meaning of each parameter.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rate: f64,
        max_rate: f64,
        burst_s: f64,
        target: f64,
        period: f64,
        sustained: u32,
        delay: f64,
    ) -> Self {
        AutoscalingServer {
            rate,
            max_rate,
            burst_s,
            target,
            period,
            sustained: sustained.max(1),
            delay,
            bucket: Fluid::new(0.0),
            period_start: 0.0,
            consumed_in_period: 0.0,
            hot_periods: 0,
            pending: None,
        }
    }

    /// The provisioned rate now in force.
    pub fn provisioned(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, to: f64) {
        let cap = (self.rate * self.burst_s).max(1.0);
        self.bucket.flow_to(to, self.rate, cap);
    }

    fn advance(&mut self, t: f64) {
        loop {
            let period_end = self.period_start + self.period;
            let scale_at = self.pending.map_or(f64::INFINITY, |p| p.0);
            let next = period_end.min(scale_at);
            if next > t {
                break;
            }
            self.refill(next);
            if scale_at <= period_end {
                if let Some((_, new_rate)) = self.pending.take() {
                    self.rate = new_rate.max(self.rate);
                }
                continue;
            }
            let consumed_rate = self.consumed_in_period / self.period;
            if consumed_rate >= self.target * self.rate {
                self.hot_periods += 1;
            } else {
                self.hot_periods = 0;
            }
            if self.hot_periods >= self.sustained
                && self.pending.is_none()
                && self.rate < self.max_rate
            {
                let wanted = (consumed_rate / self.target).min(self.max_rate);
                if wanted > self.rate {
                    self.pending = Some((period_end + self.delay, wanted));
                }
                self.hot_periods = 0;
            }
            self.period_start = period_end;
            self.consumed_in_period = 0.0;
        }
        self.refill(t);
    }
}

impl ServerModel for AutoscalingServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.advance(now.as_secs_f64());
        let throttled = take_one(&mut self.bucket.tokens);
        if !throttled {
            self.consumed_in_period += 1.0;
        }
        // This model sends no hints.
        Response {
            throttled,
            ..Response::default()
        }
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.advance(now.as_secs_f64());
        self.bucket.tokens
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        self.advance(end.as_secs_f64());
        self.bucket.offered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: f64) -> Timestamp {
        Timestamp::from_secs_f64(s)
    }

    #[test]
    fn fair_share_splits_the_sustained_rate_between_threads() {
        let heroku = ServerConfig::HerokuBucket {
            capacity: 4500.0,
            refill_per_s: 1.25,
            starting: 0.0,
        };
        // Starting empty: no burst to share, one send per 10 / 1.25 s.
        assert_eq!(heroku.fair_share(10), Some((1, Duration::from_secs(8))));
        let window = ServerConfig::FixedWindow {
            limit: 100,
            window_s: 100.0,
        };
        assert_eq!(window.fair_share(4), Some((25, Duration::from_secs(100))));
        let full = ServerConfig::Limiter {
            algorithm: LimiterAlgorithm::Gcra,
            rate_per_s: 10.0,
            burst: 20,
            start_full: true,
        };
        assert_eq!(full.fair_share(4), Some((5, Duration::from_secs(2))));
        assert_eq!(full.fair_share(0), Some((20, Duration::from_secs(2))));
        assert_eq!(
            ServerConfig::DecreaseOnly { starting: 4500.0 }.fair_share(10),
            None
        );
    }

    #[test]
    fn heroku_family_sends_remaining_only() {
        let mut bucket = HerokuBucket::new(4500.0, 1.25, 0.0);
        let r = bucket.handle(t(0.0));
        assert_eq!(
            (r.hints.remaining, r.hints.limit, r.hints.reset_after),
            (Some(0), None, None)
        );
        let mut stock = DecreaseOnly::new(10.0);
        let r = stock.handle(t(0.0));
        assert_eq!(
            (r.hints.remaining, r.hints.limit, r.hints.reset_after),
            (Some(9), None, None)
        );
    }

    #[test]
    fn heroku_bucket_starts_empty_and_refills_from_first_request() {
        let mut b = HerokuBucket::new(4500.0, 1.25, 0.0);
        // The clock starts at the first request, however late it is.
        let r = b.handle(t(100.0));
        assert!(r.throttled);
        assert_eq!(r.hints.remaining, Some(0));
        // 0.8 s later exactly one token has accrued.
        let r = b.handle(t(100.8));
        assert!(!r.throttled);
        assert_eq!(r.hints.remaining, Some(0));
        let r = b.handle(t(100.8));
        assert!(r.throttled);
        // 8 s later: 10 tokens; remaining is floor after the decrement.
        let r = b.handle(t(108.8));
        assert!(!r.throttled);
        assert_eq!(r.hints.remaining, Some(9));
    }

    #[test]
    fn heroku_bucket_caps_at_max_and_keeps_stale_timestamp_while_full() {
        let mut b = HerokuBucket::new(10.0, 1.0, 10.0);
        // Full: last_request is set at the first request but not advanced.
        let r = b.handle(t(0.0));
        assert_eq!(r.hints.remaining, Some(9));
        let r = b.handle(t(5.0));
        // refilled 5 s (capped at 10), then decremented.
        assert_eq!(r.hints.remaining, Some(9));
    }

    #[test]
    fn decrease_only_counts_down_and_never_refills() {
        let mut s = DecreaseOnly::new(3.0);
        let got: Vec<_> = (0..5)
            .map(|i| s.handle(t(f64::from(i) * 1000.0)))
            .map(|r| (r.throttled, r.hints.remaining))
            .collect();
        assert_eq!(
            got,
            vec![
                (false, Some(2)),
                (false, Some(1)),
                (false, Some(0)),
                (true, Some(0)),
                (true, Some(0))
            ]
        );
    }

    #[test]
    fn fixed_window_resets_on_boundaries_and_says_when() {
        let quota = window_quota(2, 100.0).unwrap_or_else(|e| panic!("{e}"));
        let mut s = FixedWindowServer::new(quota);
        assert!(!s.handle(t(10.0)).throttled);
        assert!(!s.handle(t(20.0)).throttled);
        let r = s.handle(t(30.0));
        assert!(r.throttled);
        assert_eq!(r.hints.retry_after, Some(Duration::from_secs(70)));
        assert!(!s.handle(t(100.0)).throttled);
        assert_eq!(s.offered(t(150.0)), 4.0);
        // A window the core quota cannot represent is an error, not a panic.
        let huge = ServerConfig::FixedWindow {
            limit: 1,
            window_s: 1.0e30,
        };
        assert!(huge.validate().is_err());
        assert!(huge.build().is_err());
    }

    #[test]
    fn shared_server_gives_clients_what_background_leaves() {
        let bg = vec![BackgroundLoad {
            at_s: 10.0,
            rate_per_s: 3.0,
        }];
        let mut s = SharedServer::new(4.0, 4.0, bg);
        // Drain the burst.
        for _ in 0..4 {
            assert!(!s.handle(t(0.0)).throttled);
        }
        assert!(s.handle(t(0.0)).throttled);
        // Before the background load: 4/s for us.
        assert!((s.remaining(t(0.5)) - 2.0).abs() < 1e-9);
        // After it starts, only 1/s is left: from empty at 10 s, 2 tokens at 12 s.
        for _ in 0..4 {
            let _ = s.handle(t(10.0));
        }
        assert!((s.remaining(t(12.0)) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn autoscaling_raises_capacity_after_sustained_load_and_delay() {
        let mut s = AutoscalingServer::new(10.0, 100.0, 1.0, 0.7, 60.0, 2, 120.0);
        // Saturate: 20 requests per second for 10 minutes.
        let mut granted_late = 0;
        for i in 0..12_000 {
            let now = t(f64::from(i) * 0.05);
            let r = s.handle(now);
            if now.as_secs_f64() > 400.0 && !r.throttled {
                granted_late += 1;
            }
        }
        // Hot for 2 periods (120 s), +120 s delay: scaled at 240 s to 10/0.7.
        assert!(s.provisioned() > 10.0, "provisioned {}", s.provisioned());
        assert!(granted_late > 200 * 10);
    }

    #[test]
    fn core_limiter_server_reports_decision_hints() {
        let cfg = ServerConfig::Limiter {
            algorithm: LimiterAlgorithm::Gcra,
            rate_per_s: 1.0,
            burst: 2,
            start_full: true,
        };
        let mut s = cfg.build().unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.handle(t(0.0)).throttled);
        assert!(!s.handle(t(0.0)).throttled);
        let r = s.handle(t(0.0));
        assert!(r.throttled);
        assert_eq!(r.hints.retry_after, Some(Duration::from_secs(1)));
        assert_eq!(r.hints.remaining, Some(0));
    }

    #[test]
    fn every_core_algorithm_serves_and_refuses() {
        for algorithm in LimiterAlgorithm::ALL {
            let cfg = ServerConfig::Limiter {
                algorithm,
                rate_per_s: 10.0,
                burst: 5,
                start_full: true,
            };
            let mut s = cfg.build().unwrap_or_else(|e| panic!("{e}"));
            let admitted = (0..50).filter(|_| !s.handle(t(1.0)).throttled).count();
            assert!((1..=5).contains(&admitted), "{algorithm:?}: {admitted}");
            // A second later, capacity is back.
            assert!(!s.handle(t(2.5)).throttled, "{algorithm:?}");
        }
        let bad = ServerConfig::Limiter {
            algorithm: LimiterAlgorithm::FixedWindow,
            rate_per_s: 1.0,
            burst: 1,
            start_full: false,
        };
        assert!(bad.validate().is_err());
    }
}
