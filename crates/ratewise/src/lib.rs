//! Rate limiting on both sides of the wire.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::{Gcra, ManualClock, Quota, RateLimiter};
//!
//! // Ten per second, bursts of up to ten. A manual clock makes the example
//! // exact; production code uses `Gcra::new(quota)` and the real clock.
//! let clock = ManualClock::new();
//! let limiter = Gcra::with_clock(Quota::per_second(10)?, clock.clone());
//!
//! let admitted = (0..15).filter(|_| limiter.check(1).unwrap().is_allowed()).count();
//! assert_eq!(admitted, 10);
//!
//! let denied = limiter.check(1)?;
//! assert_eq!(denied.retry_after, Some(Duration::from_millis(100)));
//!
//! clock.advance(Duration::from_millis(100));
//! assert!(limiter.check(1)?.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Why it is built this way
//!
//! Every algorithm here is a **state machine that is told the time**
//! (`check_at(n, now)`), never one that reads a clock or sleeps. The same
//! object therefore runs in production behind a real [`MonotonicClock`], in
//! tests behind a [`ManualClock`] that reproduces worked examples to the
//! nanosecond, and inside the `ratewise-sim` simulator, which plays half an
//! hour of contended traffic in milliseconds. Async waiting (behind the
//! `tokio` feature) is a thin driver on top, not a second implementation.
//!
//! All seven server-side algorithms implement one trait, [`RateLimiter`], and
//! share one [`Quota`] (a rate and a burst), so switching algorithm is a
//! one-word change and their behaviour can be compared on equal terms:
//!
//! | algorithm | state | bursts? | exact? |
//! |---|---|---|---|
//! | [`Gcra`] | one atomic word, lock-free | up to `burst` | yes |
//! | [`TokenBucket`] | balance + time | up to `burst` | yes |
//! | [`LeakyMeter`] | level + time | up to `burst` | yes |
//! | [`LeakyQueue`] | one departure time | never at the output (admitted requests are delayed) | yes |
//! | [`FixedWindow`] | window index + count | up to `2·burst` across a boundary | per window only |
//! | [`SlidingWindowCounter`] | window index + two counts | up to `burst` | no (trailing count is estimated) |
//! | [`SlidingWindowLog`] | up to `burst` timestamps, 16 B each | at most `burst` in any window | yes |
//!
//! Answers are [`Decision`]s that carry their evidence — limit, remaining,
//! reset and retry-after — so a server can write `RateLimit-*` and
//! `Retry-After` headers without asking again ([`headers_out`] writes them in
//! the IETF draft's current form or the legacy ones, without allocating). Misuse is a typed error
//! ([`QuotaError`], [`CheckError`]), never a panic.
//!
//! # Beyond one limiter
//!
//! * [`keyed`] — [`KeyedLimiter`]: one limiter per user, key or IP, sharded,
//!   with a hard cap on keys and eviction only of keys back at full capacity,
//!   so ten million distinct keys cannot exhaust memory or reset a quota.
//! * [`hierarchy`] — [`Hierarchy`]: per-user, per-endpoint and global limits
//!   together; a request is admitted only if every level admits it, and no
//!   level is charged for a request another level refused.
//! * [`sharded`], [`striped`] — a global limit split across shards for extreme
//!   contention (with a documented error bound) and striped counters.
//! * [`client`] — the other side of the wire: strategies for *calling* a
//!   rate-limited API (backoff with jitter, AutoSleeper, the Heroku
//!   strategies, AIMD, CUBIC, flood guard, SRE throttling, retry budgets,
//!   server hints), response classification, and the adaptive
//!   [`client::Throttle`].
//! * [`debounce`] — debounce, event throttle and coalesce for event streams.
//!
//! # Features
//!
//! * `tokio` — async drivers (`until_ready`, deadlines; the [`debounce`]
//!   handles).
//! * `stream` — `Stream` adapters (`debounce::stream`).
//! * `http` — classification of `http` crate responses for client throttling.

#![warn(missing_docs)]
// docs.rs (and `RUSTDOCFLAGS="--cfg docsrs" cargo +nightly doc`) labels
// feature-gated items; `doc_cfg` is nightly-only, so stable never sees it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithms;
pub mod backend;
pub mod borrowing;
pub mod client;
pub mod concurrency;
pub mod debounce;
pub mod decision;
pub mod error;
pub mod headers_out;
pub mod hierarchy;
pub mod keyed;
pub mod limiter;
pub mod quota;
pub mod sharded;
pub mod striped;
mod sync;
#[cfg(test)]
mod test_support;
pub mod time;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod wait;

// The seven algorithms live in `algorithms/`; their modules stay public at
// the crate's root (`ratewise::gcra`, `ratewise::token_bucket`, …).
pub use algorithms::{
    fixed_window, gcra, leaky_meter, leaky_queue, sliding_window_counter, sliding_window_log,
    token_bucket,
};
pub use decision::Decision;
pub use error::{CheckError, QuotaError, ReserveError};
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use hierarchy::{Hierarchy, HierarchyDecision};
pub use keyed::{KeyedError, KeyedLimiter};
pub use leaky_meter::LeakyMeter;
pub use leaky_queue::LeakyQueue;
pub use limiter::{RateLimiter, Reservation};
pub use quota::Quota;
pub use sharded::ShardedLimiter;
pub use sliding_window_counter::SlidingWindowCounter;
pub use sliding_window_log::SlidingWindowLog;
pub use time::{Clock, CoarseClock, ManualClock, MonotonicClock, StdClock, Timestamp};
pub use token_bucket::TokenBucket;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use wait::TokioClock;

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
