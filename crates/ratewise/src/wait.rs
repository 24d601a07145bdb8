//! Async waiting on any [`RateLimiter`] (feature `tokio`).
//!
//! A thin driver over the sans-IO core: it reserves capacity with
//! [`RateLimiter::reserve_within_at`], sleeps until the reservation's act
//! time with `tokio::time::sleep`, and — if the future is dropped before then
//! — hands the reservation back with [`RateLimiter::cancel_at`], so an
//! abandoned wait does not keep capacity from others.
//!
//! The limiter's clock and tokio's timer must agree about how fast time
//! passes. With the production [`MonotonicClock`](crate::MonotonicClock) they
//! do; in tests with tokio's paused time use [`TokioClock`], which reads
//! tokio's (virtual) clock.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ratewise::{wait, Gcra, Quota, TokioClock};
//!
//! let limiter = Gcra::with_clock(Quota::per_second(2)?, TokioClock::new());
//! let start = tokio::time::Instant::now();
//! for _ in 0..4 {
//!     wait::until_ready(&limiter, 1).await?;
//! }
//! // Two at once (the burst), then one every 500 ms.
//! assert_eq!(start.elapsed(), Duration::from_secs(1));
//!
//! // A caller that cannot wait more than 100 ms fails fast, reserving nothing.
//! let err = wait::until_ready_within(&limiter, 1, Duration::from_millis(100)).await;
//! assert!(err.is_err());
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::error::{CheckError, ReserveError};
use crate::limiter::{RateLimiter, Reservation};
use crate::time::{duration_to_nanos_saturating, Clock, Timestamp};

/// Waits until `n` units are available and takes them.
///
/// Cancellation-safe: dropping the future before it completes returns the
/// reserved units (as far as later reservations allow, see
/// [`RateLimiter::cancel_at`]).
///
/// # Errors
/// [`CheckError`] when `n` is zero or larger than the burst (it could never
/// succeed, so it does not wait forever).
pub async fn until_ready<L: RateLimiter + ?Sized>(limiter: &L, n: u64) -> Result<(), CheckError> {
    match until_ready_within(limiter, n, Duration::MAX).await {
        Ok(()) => Ok(()),
        Err(ReserveError::Invalid(e)) => Err(e),
        Err(ReserveError::WouldWaitTooLong { .. }) => Err(CheckError::ExceedsBurst {
            requested: n,
            burst: limiter.quota().burst(),
        }),
    }
}

/// Waits until `n` units are available and takes them, unless that would
/// take longer than `max_wait`, in which case it fails at once and reserves
/// nothing.
///
/// # Errors
/// [`ReserveError::WouldWaitTooLong`] when the wait would exceed `max_wait`;
/// [`ReserveError::Invalid`] for an invalid weight.
pub async fn until_ready_within<L: RateLimiter + ?Sized>(
    limiter: &L,
    n: u64,
    max_wait: Duration,
) -> Result<(), ReserveError> {
    let now = limiter.now();
    let reservation = limiter.reserve_within_at(n, now, max_wait)?;
    let delay = reservation.delay_from(now);
    if delay.is_zero() {
        return Ok(());
    }
    let guard = CancelOnDrop {
        limiter,
        reservation: Some(reservation),
    };
    tokio::time::sleep(delay).await;
    guard.disarm();
    Ok(())
}

/// Waits until `n` units are available and takes them, failing at once if
/// that would be later than `deadline`.
///
/// # Errors
/// As [`until_ready_within`].
pub async fn until_ready_by<L: RateLimiter + ?Sized>(
    limiter: &L,
    n: u64,
    deadline: tokio::time::Instant,
) -> Result<(), ReserveError> {
    let max_wait = deadline.saturating_duration_since(tokio::time::Instant::now());
    until_ready_within(limiter, n, max_wait).await
}

struct CancelOnDrop<'a, L: RateLimiter + ?Sized> {
    limiter: &'a L,
    reservation: Option<Reservation>,
}

impl<L: RateLimiter + ?Sized> CancelOnDrop<'_, L> {
    fn disarm(mut self) {
        self.reservation = None;
    }
}

impl<L: RateLimiter + ?Sized> Drop for CancelOnDrop<'_, L> {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.limiter.cancel(r);
        }
    }
}

/// A [`Clock`] that reads tokio's clock, so limiters follow tokio's paused
/// (virtual) time in tests. In production prefer
/// [`MonotonicClock`](crate::MonotonicClock), which is cheaper.
///
/// Must be created and read inside a tokio runtime when time is paused.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is tokio's "now".
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl TokioClock {
    /// The tokio instant of `t` on this clock, for arming a timer at a
    /// deadline without reading the clock again; `None` if it is too far in
    /// the future to represent.
    pub fn instant_at(&self, t: Timestamp) -> Option<tokio::time::Instant> {
        self.origin.checked_add(Duration::from_nanos(t.as_nanos()))
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(duration_to_nanos_saturating(
            tokio::time::Instant::now().saturating_duration_since(self.origin),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Gcra, Quota, TokenBucket};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn instant_at_is_the_origin_plus_the_timestamp() {
        let clock = TokioClock::new();
        let t = Timestamp::from_nanos(1_500_000_000);
        let at = clock.instant_at(t).unwrap();
        tokio::time::sleep_until(at).await;
        assert_eq!(clock.now(), t);
        // The far end either maps later or is reported unrepresentable.
        assert!(clock.instant_at(Timestamp::MAX).is_none_or(|far| far > at));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_exactly_the_reserved_time() {
        let l = TokenBucket::with_clock(Quota::per_second(10).unwrap(), TokioClock::new());
        let start = tokio::time::Instant::now();
        until_ready(&l, 10).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        until_ready(&l, 5).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        assert_eq!(
            until_ready(&l, 11).await,
            Err(CheckError::ExceedsBurst {
                requested: 11,
                burst: 10
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_wait_returns_its_units() {
        let l = Arc::new(Gcra::with_clock(
            Quota::per_second(10).unwrap(),
            TokioClock::new(),
        ));
        assert!(l.check(10).unwrap().allowed);
        let waiter = {
            let l = Arc::clone(&l);
            tokio::spawn(async move { until_ready(&*l, 5).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        // Two units refilled in 200 ms; the aborted wait's five came back.
        assert_eq!(l.peek(1).unwrap().remaining, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_fails_fast_without_reserving() {
        let l = Gcra::with_clock(Quota::per_second(1).unwrap(), TokioClock::new());
        until_ready(&l, 1).await.unwrap();
        let start = tokio::time::Instant::now();
        let err = until_ready_by(&l, 1, start + Duration::from_millis(999)).await;
        assert!(matches!(err, Err(ReserveError::WouldWaitTooLong { .. })));
        assert_eq!(start.elapsed(), Duration::ZERO);
        until_ready_by(&l, 1, start + Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
