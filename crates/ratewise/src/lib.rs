//! Server-side rate limiting: every limiter a sans-IO state machine told the time.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::{Gcra, ManualClock, Quota, RateLimiter};
//!
//! // Ten per second, bursts of ten; production code uses `Gcra::new(quota)`.
//! let clock = ManualClock::new();
//! let limiter = Gcra::with_clock(Quota::per_second(10)?, clock.clone());
//! assert_eq!((0..15).filter(|_| limiter.check(1).unwrap().is_allowed()).count(), 10);
//! assert_eq!(limiter.check(1)?.retry_after, Some(Duration::from_millis(100)));
//! clock.advance(Duration::from_millis(100));
//! assert!(limiter.check(1)?.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every algorithm here is a **state machine that is told the time**
//! (`check_at(n, now)`); the convenience methods read the limiter's [`Clock`]
//! first. The same object runs in production on [`MonotonicClock`], in tests
//! on [`ManualClock`], and in the `ratewise-sim` simulator on virtual time.
//!
//! The seven server-side algorithms — [`Gcra`] (lock-free, the default
//! choice), [`TokenBucket`], [`LeakyMeter`], [`LeakyQueue`] (admitted requests
//! are delayed, output never bursts), [`FixedWindow`] (up to `2·burst` across
//! a boundary), [`SlidingWindowCounter`] (estimated) and [`SlidingWindowLog`]
//! (exact, memory per unit) — implement one trait, [`RateLimiter`], over one
//! [`Quota`]. A [`Decision`] carries its evidence (limit, remaining, reset,
//! retry-after), which [`response_headers`] writes as `RateLimit` and `Retry-After`
//! headers without allocating. Misuse is a typed error, never a panic.
//!
//! Beyond one limiter: [`keyed`] (one limiter per key, bounded memory),
//! [`hierarchy`] (levels checked together, none charged for another's
//! refusal), [`sharded`] and [`striped`] (for extreme contention),
//! [`borrowing`] (HTB-style classes), [`backend`] (the async keyed interface
//! other stores implement). Features: `tokio` (async drivers), `http`
//! (`http` header values), `concurrency` (adaptive limits on requests in
//! flight, with priority shedding).
//!
//! The other side of the wire — strategies for *calling* a rate-limited API
//! and the adaptive client throttle — is the `ratewise-client` crate;
//! debounce, event throttle and coalesce are `ratewise-debounce`.

#![warn(missing_docs)]
// docs.rs (and `RUSTDOCFLAGS="--cfg docsrs" cargo +nightly doc`) labels
// feature-gated items; `doc_cfg` is nightly-only, so stable never sees it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithms;
pub mod backend;
pub mod borrowing;
pub mod breaker;
#[cfg(feature = "concurrency")]
#[cfg_attr(docsrs, doc(cfg(feature = "concurrency")))]
pub mod concurrency;
pub mod decision;
pub mod error;
pub mod hierarchy;
pub mod keyed;
pub mod limiter;
pub mod quota;
pub mod response_headers;
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
