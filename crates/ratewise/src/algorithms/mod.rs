//! The seven server-side algorithms, one module each, behind the one
//! [`RateLimiter`](crate::RateLimiter) trait; re-exported at the crate's
//! root (`ratewise::gcra`, `ratewise::token_bucket`, …). GCRA is lock-free
//! and stands alone; the six others are mutex-protected and share
//! `mutex_limiter`, the one implementation of their checks, peeks and
//! reservations.

pub mod fixed_window;
pub mod gcra;
pub mod leaky_meter;
pub mod leaky_queue;
pub(crate) mod mutex_limiter;
pub mod sliding_window_counter;
pub mod sliding_window_log;
pub mod token_bucket;
