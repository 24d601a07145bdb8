//! Helpers shared by the algorithms' unit tests.

use std::time::Duration;

use crate::limiter::RateLimiter;
use crate::time::Timestamp;

/// A timestamp `v` milliseconds after the origin.
pub(crate) fn ms(v: u64) -> Timestamp {
    Timestamp::from_nanos(v * 1_000_000)
}

/// Checks `n` at `at` `count` times and returns how many were admitted.
pub(crate) fn admitted<L: RateLimiter>(l: &L, count: u64, n: u64, at: Timestamp) -> u64 {
    (0..count)
        .filter(|_| l.check_at(n, at).map(|d| d.allowed).unwrap_or(false))
        .count() as u64
}

/// Asserts that a request of weight `n` is denied at `now` and that its
/// `retry_after` is exact: still denied one nanosecond before
/// `now + retry_after`, admitted at it. Consumes the request at that time and
/// returns the time it passed.
pub(crate) fn assert_retry_exact<L: RateLimiter>(l: &L, n: u64, now: Timestamp) -> Timestamp {
    let d = l.peek_at(n, now).unwrap();
    assert!(!d.allowed, "expected a denial at {now}");
    let again = l.check_at(n, now).unwrap();
    assert_eq!(again, d, "check and peek disagree at {now}");
    let retry = d.retry_after.expect("a denial carries retry_after");
    assert!(retry > Duration::ZERO, "a denial must wait");
    let at = now + retry;
    let before = Timestamp::from_nanos(at.as_nanos() - 1);
    let early = l.check_at(n, before).unwrap();
    assert!(
        !early.allowed,
        "admitted 1 ns before retry_after ({before})"
    );
    assert_eq!(
        early.retry_after,
        Some(Duration::from_nanos(1)),
        "retry_after at {before} should be 1 ns"
    );
    let ok = l.check_at(n, at).unwrap();
    assert!(ok.allowed, "denied at now + retry_after ({at})");
    at
}
