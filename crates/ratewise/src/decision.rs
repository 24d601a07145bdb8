//! [`Decision`]: a limiter's answer, with the evidence a server needs to
//! write rate-limit headers.

use std::time::Duration;

/// The answer to [`check`](crate::RateLimiter::check_at) or
/// [`peek`](crate::RateLimiter::peek_at).
///
/// It carries everything needed for the `RateLimit-*` and `Retry-After`
/// response headers without asking the limiter again:
///
/// ```
/// use std::time::Duration;
/// use ratewise::{Gcra, ManualClock, Quota, RateLimiter, Timestamp};
///
/// let limiter = Gcra::with_clock(Quota::per_second(2)?, ManualClock::new());
/// let t0 = Timestamp::ZERO;
/// assert!(limiter.check_at(2, t0)?.is_allowed());
/// let denied = limiter.check_at(1, t0)?;
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after, Some(Duration::from_millis(500)));
/// let headers: Vec<_> = denied.headers().collect();
/// assert!(headers.contains(&("Retry-After", "1".to_string())));
/// assert!(headers.contains(&("RateLimit-Remaining", "0".to_string())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request was admitted (for `peek`: would be admitted).
    pub allowed: bool,
    /// The limiter's capacity (its burst): `RateLimit-Limit`.
    pub limit: u64,
    /// Whole units still available right after this decision:
    /// `RateLimit-Remaining`.
    pub remaining: u64,
    /// How long until the limiter is back at full capacity if nothing more
    /// is consumed: `RateLimit-Reset`.
    pub reset_after: Duration,
    /// On denial, how long until the same request would be admitted:
    /// `Retry-After`. `None` when allowed.
    pub retry_after: Option<Duration>,
    /// How long an admitted caller must wait before acting. Zero for every
    /// algorithm except the [leaky-bucket queue](crate::LeakyQueue), whose
    /// admissions are scheduled to depart later.
    pub delay: Duration,
}

impl Decision {
    /// `true` if admitted.
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }
}
