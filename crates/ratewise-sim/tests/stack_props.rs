//! The `stack` server: a stacked server never admits more than its tightest
//! limit allows, and stack scenarios with every header profile run
//! deterministically.

use std::time::Duration;

use proptest::prelude::*;
use ratewise::Timestamp;
use ratewise_sim::server::{LimiterAlgorithm, ServerConfig, ServerModel};
use ratewise_sim::stack::{HeaderProfile, LimitConfig, RetryAfterMode, StackServer, Start};
use ratewise_sim::{report, Experiment, Scenario};

fn rate_limit() -> impl Strategy<Value = LimitConfig> {
    (
        0..LimiterAlgorithm::ALL.len(),
        1u64..30,
        0.5f64..20.0,
        any::<bool>(),
        prop_oneof![Just(429u16), Just(403), Just(503)],
    )
        .prop_map(|(a, limit, window_s, full, status)| LimitConfig::Rate {
            name: None,
            algorithm: LimiterAlgorithm::ALL[a],
            limit: Some(limit),
            window_s: Some(window_s),
            rate_per_s: None,
            burst: None,
            // Only GCRA and the token bucket (the first two) start empty.
            start: if full || a > 1 {
                Start::Full
            } else {
                Start::Empty
            },
            status,
            body: None,
            reported: true,
            retry_after: None,
        })
}

fn stack() -> impl Strategy<Value = Vec<LimitConfig>> {
    (
        proptest::collection::vec(rate_limit(), 1..4),
        proptest::option::of(1u32..6),
    )
        .prop_map(|(mut limits, cap)| {
            if let Some(max_in_flight) = cap {
                limits.insert(
                    0,
                    LimitConfig::Concurrency {
                        name: None,
                        max_in_flight,
                        status: 503,
                        body: None,
                        retry_after: None,
                    },
                );
            }
            limits
        })
}

/// Arrivals: `(gap before it, service time)` in milliseconds.
fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0u64..400, 0u64..3000), 1..300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every request the stack admitted is one each of its limits, fed only
    /// the admitted requests, admits too: the stack never admits more than
    /// its tightest limit allows (refusals charge nothing). And the
    /// concurrency cap is never exceeded.
    #[test]
    fn a_stacked_server_never_admits_more_than_its_tightest_limit(
        limits in stack(),
        arrivals in arrivals(),
    ) {
        let mut server = StackServer::new(&limits, HeaderProfile::Ietf, RetryAfterMode::Exact, None, 0.0)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut now = 0u64;
        let mut admitted: Vec<(Timestamp, Timestamp)> = Vec::new();
        for (gap, service) in &arrivals {
            now += gap * 1_000_000;
            let t = Timestamp::from_nanos(now);
            let r = server.handle_for(t, Duration::from_millis(*service));
            if !r.throttled {
                admitted.push((t, t.saturating_add(Duration::from_millis(*service) + r.delay)));
            }
        }
        for (i, l) in limits.iter().enumerate() {
            match l {
                LimitConfig::Rate { .. } => {
                    let alone = l
                        .limiter(&format!("limits[{i}]"))
                        .unwrap_or_else(|e| panic!("{e}"))
                        .unwrap_or_else(|| panic!("a rate limit has a limiter"));
                    for (k, (t, _)) in admitted.iter().enumerate() {
                        let d = alone.check_at(1, *t).unwrap_or_else(|e| panic!("{e}"));
                        prop_assert!(d.allowed, "limit {i} alone refuses admitted request {k} at {t:?}");
                    }
                }
                LimitConfig::Concurrency { max_in_flight, .. } => {
                    for (t, _) in &admitted {
                        let busy = admitted.iter().filter(|(s, e)| s <= t && e > t).count();
                        prop_assert!(busy <= *max_in_flight as usize, "{busy} in flight at {t:?}");
                    }
                }
            }
        }
    }
}

const STACK: &str = r#"name = "stacked"
description = "two rate limits and a concurrency cap"
seed = 3
sample_interval_s = 5

[latency]
kind = "uniform"
min_s = 0.1
max_s = 0.4

[server]
kind = "stack"
headers = "PROFILE"
retry_after = "RETRY"
RETRY_S
hints_stale_s = STALE

[[server.limits]]
kind = "rate"
name = "minute"
algorithm = "gcra"
limit = 60
window_s = 60
start = "empty"
status = 403
body = '{"message":"You have exceeded a secondary rate limit"}'

[[server.limits]]
kind = "rate"
name = "second"
algorithm = "sliding_window_log"
limit = 3
window_s = 1

[[server.limits]]
kind = "concurrency"
max_in_flight = 2
status = 503

[[clients]]
threads = 4
workload = { requests = 15 }
"#;

fn stacked(profile: &str, retry: &str, stale: f64) -> Scenario {
    let src = STACK
        .replace("PROFILE", profile)
        .replace(
            "RETRY_S",
            if retry == "constant" {
                "retry_after_s = 2.0"
            } else {
                ""
            },
        )
        .replace("RETRY", retry)
        .replace("STALE", &stale.to_string());
    Scenario::parse(&src, "stacked.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn json_of(s: &Scenario) -> String {
    let e = Experiment::new(s.clone())
        .run(|| {})
        .unwrap_or_else(|e| panic!("{e}"));
    report::json(&e)
}

/// Each header profile and each Retry-After mode, fresh and stale, runs
/// every strategy to the same bytes twice; what the clients are told
/// changes what they do.
#[test]
fn stacked_scenarios_run_deterministically_with_every_header_profile() {
    let mut documents = Vec::new();
    for profile in [
        "ietf",
        "draft",
        "x-ratelimit-epoch",
        "x-ratelimit-delta",
        "remaining",
        "none",
    ] {
        for retry in ["exact", "rounded", "constant", "absent"] {
            for stale in [0.0, 2.0] {
                let s = stacked(profile, retry, stale);
                let a = json_of(&s);
                assert_eq!(a, json_of(&s), "{profile} / {retry} / {stale}");
                let doc: serde_json::Value =
                    serde_json::from_str(&a).unwrap_or_else(|e| panic!("{e}"));
                for r in doc["results"].as_array().into_iter().flatten() {
                    // The job is 60 calls; the minute limit starts empty, so
                    // nobody can finish in less than a minute.
                    assert!(
                        r["successes"].as_u64().unwrap_or(0) >= 60
                            || r["time_to_clear_s"].is_null()
                    );
                    if let Some(t) = r["time_to_clear_s"].as_f64() {
                        assert!(t >= 59.0, "{profile}/{retry}: {t}");
                    }
                }
                documents.push(a);
            }
        }
    }
    documents.sort();
    documents.dedup();
    assert!(documents.len() > 1, "the header profile never mattered");
}

/// The three public APIs shipped as scenarios parse, are stacks, and an old
/// single-server file still loads as before.
#[test]
fn shipped_api_scenarios_are_stacks_and_old_files_still_load() {
    for name in ["github", "shopify", "stripe"] {
        let s = Scenario::load(name).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(s.server, ServerConfig::Stack { .. }), "{name}");
    }
    let heroku = Scenario::load("heroku").unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(heroku.server, ServerConfig::HerokuBucket { .. }));
}

/// A stack error names the limit, its line and the cause.
#[test]
fn stack_errors_are_located() {
    let src = STACK
        .replace("PROFILE", "draft")
        .replace("RETRY_S", "")
        .replace("RETRY", "exact")
        .replace("STALE", "0")
        .replace("max_in_flight = 2", "max_in_flight = 0");
    let err = Scenario::parse(&src, "stacked.toml")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("stacked.toml:37"), "{err}");
    assert!(err.contains("server.limits[2].max_in_flight"), "{err}");
    assert!(err.contains("admits nothing"), "{err}");
    let src = STACK
        .replace("PROFILE", "draft")
        .replace("RETRY_S", "")
        .replace("RETRY", "constant")
        .replace("STALE", "0");
    let err = Scenario::parse(&src, "stacked.toml")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("server.retry_after_s") && err.contains("needs retry_after_s"),
        "{err}"
    );
}
