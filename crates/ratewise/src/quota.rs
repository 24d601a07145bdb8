//! [`Quota`]: how fast, and how bursty.

use std::fmt;
use std::time::Duration;

use crate::error::QuotaError;
use crate::time::duration_to_nanos_saturating;

/// A rate and a burst, the two numbers every algorithm in ratewise shares.
///
/// * The **rate** is stored as an *emission interval*: the time one unit of
///   capacity takes to come back. `Quota::per_second(10)` has an interval of
///   100 ms. Intervals are whole nanoseconds, rounded **up**, so a rate that
///   does not divide a second evenly is never exceeded (e.g. 3 per second is
///   one every 333 333 334 ns).
/// * The **burst** is the capacity: how many units a rested limiter admits at
///   once. It defaults to the count of the constructor, so
///   `per_minute(100)` may admit 100 at once and then 100 more per minute.
///
/// Window-based algorithms read the same two numbers as "`burst` per window of
/// [`Quota::window`]" (burst × interval), so every algorithm enforces the same
/// long-term rate.
///
/// **The domain.** A quota's window (burst × interval) is at most
/// [`MAX_WINDOW_NANOS`], 2^61 ns (about 73 years); a longer one is refused at
/// construction ([`QuotaError::RateTooLow`] for an interval, or
/// [`QuotaError::BurstOverflow`] for a burst, beyond it). Within that domain
/// every algorithm answers exactly at every [`Timestamp`](crate::Timestamp)
/// up to `Timestamp::MAX` — nothing is admitted because an arithmetic
/// result saturated. The bound is what lets the lock-free GCRA keep its
/// arrival time, relative to a moving origin, in 62 bits beside a
/// re-configuration counter, and it keeps every count and every sum of two
/// windows well inside `u64`.
///
/// ```
/// use std::time::Duration;
/// use ratewise::Quota;
///
/// let q = Quota::per_second(10)?;
/// assert_eq!(q.emission_interval(), Duration::from_millis(100));
/// assert_eq!(q.burst(), 10);
///
/// // Half a request per second, one at a time.
/// let slow = Quota::per(2, Duration::from_secs(4))?.with_burst(1)?;
/// assert_eq!(slow.rate_per_second(), 0.5);
///
/// // Nonsense is an error, not a panic.
/// assert!(Quota::per_second(0).is_err());
/// assert!(Quota::from_rate(f64::NAN).is_err());
/// # Ok::<(), ratewise::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    emission_nanos: u64,
    burst: u64,
    /// `floor((2^64 − 1) / emission_nanos)`: turns the hot path's one
    /// division by the interval into a multiply (see [`Quota::units_in`]).
    reciprocal: u64,
}

/// The longest window a [`Quota`] may have: 2^61 ns, about 73 years (see
/// the domain note on [`Quota`]).
pub const MAX_WINDOW_NANOS: u64 = 1 << 61;

impl Quota {
    /// `count` requests per second, burst `count`.
    pub fn per_second(count: u64) -> Result<Quota, QuotaError> {
        Quota::per(count, Duration::from_secs(1))
    }

    /// `count` requests per minute, burst `count`.
    pub fn per_minute(count: u64) -> Result<Quota, QuotaError> {
        Quota::per(count, Duration::from_secs(60))
    }

    /// `count` requests per hour, burst `count`.
    pub fn per_hour(count: u64) -> Result<Quota, QuotaError> {
        Quota::per(count, Duration::from_secs(3600))
    }

    /// `count` requests per `period`, burst `count`.
    pub fn per(count: u64, period: Duration) -> Result<Quota, QuotaError> {
        if count == 0 {
            return Err(QuotaError::ZeroCount);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        let period_nanos = period.as_nanos();
        if u128::from(count) > period_nanos {
            return Err(QuotaError::RateTooHigh);
        }
        let emission = period_nanos.div_ceil(u128::from(count));
        let emission_nanos = u64::try_from(emission)
            .ok()
            .filter(|&e| e <= MAX_WINDOW_NANOS)
            .ok_or(QuotaError::RateTooLow {
                interval: Duration::from_nanos(u64::try_from(emission).unwrap_or(u64::MAX)),
            })?;
        if emission_nanos == 0 {
            return Err(QuotaError::RateTooHigh);
        }
        Quota::from_parts(emission_nanos, count)
    }

    /// One request every `interval`, burst 1.
    pub fn with_interval(interval: Duration) -> Result<Quota, QuotaError> {
        Quota::per(1, interval)
    }

    /// `rate` requests per second as a float (sub-1 rates allowed), burst
    /// `max(1, floor(rate))`.
    pub fn from_rate(rate: f64) -> Result<Quota, QuotaError> {
        if !rate.is_finite() || rate <= 0.0 {
            return Err(QuotaError::InvalidRate { rate });
        }
        if rate > 1e9 {
            return Err(QuotaError::RateTooHigh);
        }
        let emission = (1e9 / rate).ceil();
        if emission < 1.0 {
            return Err(QuotaError::RateTooHigh);
        }
        if emission > MAX_WINDOW_NANOS as f64 {
            return Err(QuotaError::RateTooLow {
                // Saturating float-to-int conversion.
                interval: Duration::from_nanos(emission as u64),
            });
        }
        let burst = rate.floor().max(1.0) as u64;
        Quota::from_parts(emission as u64, burst)
    }

    /// A quota from its raw parts: one unit every `emission_nanos`, capacity
    /// `burst`.
    pub fn from_parts(emission_nanos: u64, burst: u64) -> Result<Quota, QuotaError> {
        if emission_nanos == 0 {
            return Err(QuotaError::RateTooHigh);
        }
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        if emission_nanos > MAX_WINDOW_NANOS {
            return Err(QuotaError::RateTooLow {
                interval: Duration::from_nanos(emission_nanos),
            });
        }
        if emission_nanos
            .checked_mul(burst)
            .is_none_or(|w| w > MAX_WINDOW_NANOS)
        {
            return Err(QuotaError::BurstOverflow {
                burst,
                interval: Duration::from_nanos(emission_nanos),
            });
        }
        Ok(Quota {
            emission_nanos,
            burst,
            reciprocal: u64::MAX / emission_nanos,
        })
    }

    /// Rebuilds a quota from the three words [`Quota::raw_parts`] gave.
    #[inline]
    pub(crate) const fn from_raw_parts(emission_nanos: u64, burst: u64, reciprocal: u64) -> Quota {
        Quota {
            emission_nanos,
            burst,
            reciprocal,
        }
    }

    /// The three words a quota is made of, for storing in atomics.
    #[inline]
    pub(crate) const fn raw_parts(&self) -> (u64, u64, u64) {
        (self.emission_nanos, self.burst, self.reciprocal)
    }

    /// Whole emission intervals in `nanos`: `nanos / interval`, computed with
    /// a multiply by the precomputed reciprocal and at most two corrections
    /// (the estimate is never more than 2 below the true quotient).
    #[inline]
    pub const fn units_in(&self, nanos: u64) -> u64 {
        let e = self.emission_nanos;
        let mut q = ((nanos as u128 * self.reciprocal as u128) >> 64) as u64;
        let mut r = nanos - q * e;
        // Unrolled rather than a loop, so that a caller who never reads the
        // result lets the optimiser delete the whole computation.
        if r >= e {
            q += 1;
            r -= e;
        }
        if r >= e {
            q += 1;
        }
        q
    }

    /// The rate divided by `n` (the emission interval multiplied by `n`;
    /// 0 counts as 1) with `burst`: one part of a quota split `n` ways, as
    /// shards or instances hold it. The caller rounds the burst its way.
    ///
    /// # Errors
    /// [`QuotaError::TooLarge`] when the interval times `n` overflows;
    /// [`QuotaError::RateTooLow`] or [`QuotaError::BurstOverflow`] when the
    /// part's interval or window is longer than a quota may be.
    pub fn divided(self, n: u64, burst: u64) -> Result<Quota, QuotaError> {
        let n = n.max(1);
        let interval = self
            .emission_nanos
            .checked_mul(n)
            .ok_or(QuotaError::TooLarge {
                what: "divisor for this quota's interval",
                got: n,
                limit: u64::MAX / self.emission_nanos,
            })?;
        Quota::from_parts(interval, burst)
    }

    /// The same rate with another burst.
    pub fn with_burst(self, burst: u64) -> Result<Quota, QuotaError> {
        Quota::from_parts(self.emission_nanos, burst)
    }

    /// The same burst with another rate, given as requests per second.
    pub fn with_rate(self, rate: f64) -> Result<Quota, QuotaError> {
        let r = Quota::from_rate(rate)?;
        Quota::from_parts(r.emission_nanos, self.burst)
    }

    /// The same burst with another emission interval.
    pub fn with_emission_interval(self, interval: Duration) -> Result<Quota, QuotaError> {
        let nanos = duration_to_nanos_saturating(interval);
        if nanos > MAX_WINDOW_NANOS {
            return Err(QuotaError::RateTooLow { interval });
        }
        Quota::from_parts(nanos, self.burst)
    }

    /// Time for one unit of capacity to come back.
    pub const fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.emission_nanos)
    }

    /// [`Quota::emission_interval`] in nanoseconds.
    pub const fn emission_nanos(&self) -> u64 {
        self.emission_nanos
    }

    /// The capacity: the most a rested limiter admits at once.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// Requests per second.
    pub fn rate_per_second(&self) -> f64 {
        1e9 / self.emission_nanos as f64
    }

    /// Time to refill the whole burst (burst × interval); also the window
    /// length of the window-based algorithms.
    pub const fn window(&self) -> Duration {
        // Cannot overflow: checked at construction.
        Duration::from_nanos(self.emission_nanos * self.burst)
    }

    /// [`Quota::window`] in nanoseconds.
    pub const fn window_nanos(&self) -> u64 {
        self.emission_nanos * self.burst
    }

    /// Time for `n` units to come back, saturating.
    pub fn cost_nanos(&self, n: u64) -> u64 {
        self.emission_nanos.saturating_mul(n)
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("rate_per_second", &self.rate_per_second())
            .field("burst", &self.burst)
            .finish()
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per second, burst {}",
            self.rate_per_second(),
            self.burst
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_what_they_say() {
        assert_eq!(
            Quota::per_second(10).unwrap().emission_interval(),
            Duration::from_millis(100)
        );
        assert_eq!(
            Quota::per_minute(60).unwrap().emission_interval(),
            Duration::from_secs(1)
        );
        assert_eq!(
            Quota::per_hour(1).unwrap().emission_interval(),
            Duration::from_secs(3600)
        );
        let half = Quota::from_rate(0.5).unwrap();
        assert_eq!(half.emission_interval(), Duration::from_secs(2));
        assert_eq!(half.burst(), 1);
        // Rounded up: never faster than asked.
        assert_eq!(Quota::per_second(3).unwrap().emission_nanos(), 333_333_334);
        assert_eq!(
            Quota::per_second(10).unwrap().window(),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn units_in_matches_division() {
        let samples = [
            0u64,
            1,
            2,
            3,
            7,
            999,
            1_000_000_007,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ];
        for e in [
            1u64,
            2,
            3,
            7,
            10,
            333_333_334,
            1 << 40,
            u64::MAX / 2,
            u64::MAX,
        ] {
            // Beyond the quota domain too: the arithmetic holds for any
            // interval.
            let q = Quota::from_raw_parts(e, 1, u64::MAX / e);
            for x in samples {
                assert_eq!(q.units_in(x), x / e, "{x} / {e}");
            }
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCount));
        assert_eq!(Quota::per(1, Duration::ZERO), Err(QuotaError::ZeroPeriod));
        assert!(matches!(
            Quota::from_rate(-1.0),
            Err(QuotaError::InvalidRate { .. })
        ));
        assert!(matches!(
            Quota::from_rate(f64::INFINITY),
            Err(QuotaError::InvalidRate { .. })
        ));
        assert_eq!(Quota::from_rate(2e9), Err(QuotaError::RateTooHigh));
        assert_eq!(
            Quota::per_second(2_000_000_000),
            Err(QuotaError::RateTooHigh)
        );
        assert!(matches!(
            Quota::from_rate(1e-300),
            Err(QuotaError::RateTooLow { .. })
        ));
        assert!(matches!(
            Quota::per(1, Duration::MAX),
            Err(QuotaError::RateTooLow { .. })
        ));
        assert_eq!(
            Quota::per_second(1).unwrap().with_burst(0),
            Err(QuotaError::ZeroBurst)
        );
        assert!(matches!(
            Quota::per_hour(1).unwrap().with_burst(u64::MAX),
            Err(QuotaError::BurstOverflow { .. })
        ));
        // The domain's edge: a window of exactly 2^61 ns is accepted, one
        // nanosecond more is not (issue: windows past 2^60 ns admitted
        // everything in GCRA).
        assert!(Quota::from_parts(1, MAX_WINDOW_NANOS).is_ok());
        assert!(Quota::from_parts(MAX_WINDOW_NANOS, 1).is_ok());
        assert!(matches!(
            Quota::from_parts(1, MAX_WINDOW_NANOS + 1),
            Err(QuotaError::BurstOverflow { .. })
        ));
        assert!(matches!(
            Quota::from_parts(MAX_WINDOW_NANOS + 1, 1),
            Err(QuotaError::RateTooLow { .. })
        ));
        assert!(matches!(
            Quota::from_parts(1, (1 << 63) + 1),
            Err(QuotaError::BurstOverflow { .. })
        ));
        // 400 000 per hour-interval is a 45-year window: within the domain.
        assert!(Quota::per_hour(1).unwrap().with_burst(400_000).is_ok());
        // One per 317 years is not (Go's TestTinyLimit rate).
        let tiny = Quota::from_rate(1e-10).unwrap_err();
        assert!(matches!(tiny, QuotaError::RateTooLow { .. }));
        assert!(tiny.to_string().contains("73 years"), "{tiny}");
        let msg = Quota::per_second(0).unwrap_err().to_string();
        assert!(msg.contains("at least 1"), "{msg}");
    }
}
