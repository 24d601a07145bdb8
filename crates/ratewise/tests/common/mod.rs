//! Shared helpers for the integration tests: every algorithm under one
//! constructor, so each property is checked against all of them.

#![allow(dead_code)]

use ratewise::{Gcra, ManualClock, Quota, RateLimiter, TokenBucket};

/// The algorithms, by name.
pub const ALGORITHMS: &[&str] = &["gcra", "token_bucket"];

/// A fresh limiter of the named algorithm on a manual clock.
pub fn build(name: &str, quota: Quota) -> Box<dyn RateLimiter> {
    let clock = ManualClock::new();
    match name {
        "gcra" => Box::new(Gcra::with_clock(quota, clock)),
        "token_bucket" => Box::new(TokenBucket::with_clock(quota, clock)),
        other => panic!("unknown algorithm {other}"),
    }
}

/// The most weight an algorithm may admit in any closed interval of length
/// `t_nanos`, for rate `1/emission` and burst `b` — the bound each algorithm
/// documents.
pub fn bound(name: &str, quota: Quota, t_nanos: u64) -> u64 {
    let b = quota.burst();
    let rt = t_nanos / quota.emission_nanos();
    match name {
        "gcra" | "token_bucket" => rt + b,
        other => panic!("unknown algorithm {other}"),
    }
}
