//! The `[server]` section of a scenario file: which model, with which
//! parameters, validated field by field; [`ServerConfig::build`] makes the
//! model.

use std::time::Duration;

use ratewise::Quota;
use ratewise_client::secs_to_duration;
use serde::Deserialize;

use crate::error::{non_negative, positive, SimError};
use crate::server::autoscaling::AutoscalingServer;
use crate::server::decrease_only::DecreaseOnly;
use crate::server::fixed_window::FixedWindowServer;
use crate::server::heroku_bucket::HerokuBucket;
use crate::server::limiter::{core_limiter, LimiterAlgorithm, LimiterServer};
use crate::server::model::ServerModel;
use crate::server::overstated::{OverstatedServer, Overstatement};
use crate::server::shared::{BackgroundLoad, SharedServer};

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
    /// A core limiter whose headers over-state its quota by `factor`
    /// (`RateLimit-Limit`, `-Remaining`, `-Reset`, and `Retry-After` on a
    /// refusal unless `retry_after = false`).
    Overstated {
        /// The core algorithm that really admits.
        algorithm: LimiterAlgorithm,
        /// Sustained requests per second it admits.
        rate_per_s: f64,
        /// Burst size in requests it admits.
        burst: u64,
        /// Whether the limiter starts with its burst available.
        #[serde(default = "default_true")]
        start_full: bool,
        /// How many times the real quota the headers advertise (≥ 1).
        factor: f64,
        /// `offset` (the extra is always "remaining") or `scaled`.
        #[serde(default)]
        overstatement: Overstatement,
        /// Whether a refusal carries `Retry-After`.
        #[serde(default = "default_true")]
        retry_after: bool,
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
            ServerConfig::Overstated {
                algorithm,
                rate_per_s,
                burst,
                start_full,
                factor,
                ..
            } => {
                if !(factor.is_finite() && *factor >= 1.0) {
                    return Err(SimError::invalid(
                        "server.factor",
                        format!("must be a number of at least 1 (the headers over-state the quota), got {factor}"),
                    ));
                }
                ServerConfig::Limiter {
                    algorithm: *algorithm,
                    rate_per_s: *rate_per_s,
                    burst: *burst,
                    start_full: *start_full,
                }
                .validate()
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
            ServerConfig::Overstated {
                algorithm,
                rate_per_s,
                burst,
                factor,
                overstatement,
                ..
            } => format!(
                "{algorithm:?} limiter: {rate_per_s}/s, burst {burst}, headers over-state it {factor}x ({overstatement:?})"
            ),
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
            }
            | ServerConfig::Overstated {
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
            ServerConfig::Overstated {
                algorithm,
                rate_per_s,
                burst,
                start_full,
                factor,
                overstatement,
                retry_after,
            } => {
                let q = quota(rate_per_s, burst, "server.burst")?;
                let limiter = core_limiter(algorithm, q, start_full);
                Box::new(OverstatedServer::new(
                    limiter,
                    start_full,
                    factor,
                    overstatement,
                    retry_after,
                ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use ratewise::Timestamp;

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
