//! Shared helpers for the integration tests: every algorithm under one
//! constructor, so each property is checked against all of them.

#![allow(dead_code)]

use ratewise::{
    FixedWindow, Gcra, LeakyMeter, LeakyQueue, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// The algorithms, by name.
pub const ALGORITHMS: &[&str] = &[
    "gcra",
    "token_bucket",
    "leaky_meter",
    "leaky_queue",
    "fixed_window",
    "sliding_window_counter",
    "sliding_window_log",
];

/// A fresh limiter of the named algorithm on a manual clock.
pub fn build(name: &str, quota: Quota) -> Box<dyn RateLimiter> {
    let clock = ManualClock::new();
    match name {
        "gcra" => Box::new(Gcra::with_clock(quota, clock)),
        "token_bucket" => Box::new(TokenBucket::with_clock(quota, clock)),
        "leaky_meter" => Box::new(LeakyMeter::with_clock(quota, clock)),
        "leaky_queue" => Box::new(LeakyQueue::with_clock(quota, clock)),
        "fixed_window" => Box::new(FixedWindow::with_clock(quota, clock)),
        "sliding_window_counter" => Box::new(SlidingWindowCounter::with_clock(quota, clock)),
        "sliding_window_log" => Box::new(SlidingWindowLog::with_clock(quota, clock)),
        other => panic!("unknown algorithm {other}"),
    }
}

/// The most weight an algorithm may let act in any closed interval
/// `[t, t + d]`, for interval `I`, burst `b` and window `W = b·I` — the bound
/// each algorithm documents. `⌊d/I⌋ + b` is the textbook `r·T + b`.
pub fn bound(name: &str, quota: Quota, d: u64) -> u64 {
    let b = quota.burst();
    let w = quota.window_nanos();
    let rt = d / quota.emission_nanos();
    match name {
        // The bucket family; the queue's departures (spaced one interval per
        // unit of the previous request) obey the same bound.
        "gcra" | "token_bucket" | "leaky_meter" | "leaky_queue" | "sliding_window_counter" => {
            rt + b
        }
        // A closed span meets at most ⌈d/W⌉ + 1 aligned windows: the boundary
        // weakness, up to 2b in a single nanosecond.
        "fixed_window" => b * (d.div_ceil(w) + 1),
        // Exactly at most b in every (t − W, t]; ⌈(d+1)/W⌉ of those cover
        // the span. Never more than ⌊d/I⌋ + b.
        "sliding_window_log" => b * (d + 1).div_ceil(w),
        other => panic!("unknown algorithm {other}"),
    }
}
