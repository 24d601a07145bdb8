//! Configuration errors and the small numeric helpers every strategy shares.
//!
//! Strategies compute in `f64` seconds where their published source does
//! (Heroku's, the AutoSleeper, CUBIC), because reproducing a published ladder
//! to the last digit needs the same arithmetic. Every conversion back to a
//! [`Duration`] goes through [`secs_to_duration`], which never panics: NaN and
//! negative values become zero, huge ones saturate.

use std::time::Duration;

/// A strategy configuration that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A numeric parameter outside its valid range.
    #[error("`{field}` must be {expected}, got {value}")]
    OutOfRange {
        /// The configuration field at fault.
        field: &'static str,
        /// What the field accepts, in words.
        expected: &'static str,
        /// The offending value (durations in seconds).
        value: f64,
    },
    /// Two parameters contradict each other.
    #[error("{0}")]
    Inconsistent(&'static str),
}

/// Checks that `value` is finite and `>= min`.
pub(crate) fn at_least(field: &'static str, value: f64, min: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value >= min {
        Ok(value)
    } else {
        Err(ConfigError::OutOfRange {
            field,
            expected: if min == 0.0 {
                "a finite number >= 0"
            } else if min == 1.0 {
                "a finite number >= 1"
            } else {
                "a finite number within the documented range"
            },
            value,
        })
    }
}

/// Checks that `value` is finite and `> 0`.
pub(crate) fn positive(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ConfigError::OutOfRange {
            field,
            expected: "a finite number > 0",
            value,
        })
    }
}

/// Checks that `value` lies in `[lo, hi]`.
pub(crate) fn within(
    field: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
) -> Result<f64, ConfigError> {
    if value.is_finite() && value >= lo && value <= hi {
        Ok(value)
    } else {
        Err(ConfigError::OutOfRange {
            field,
            expected: "a finite number within the documented range",
            value,
        })
    }
}

/// Checks a controller's rate range (`0 < min ≤ max`) and its
/// multiplicative decrease (within `(0, 1)`), shared by the AIMD-family
/// controllers.
pub(crate) fn rate_range_and_decrease(
    min_rate: f64,
    max_rate: f64,
    decrease_factor: f64,
) -> Result<(), ConfigError> {
    positive("min_rate", min_rate)?;
    positive("max_rate", max_rate)?;
    if min_rate > max_rate {
        return Err(ConfigError::Inconsistent(
            "min_rate must not exceed max_rate",
        ));
    }
    within(
        "decrease_factor",
        decrease_factor,
        f64::MIN_POSITIVE,
        0.999_999,
    )?;
    Ok(())
}

/// Checks that a count is at least one.
pub(crate) fn at_least_one(field: &'static str, value: impl Into<u64>) -> Result<(), ConfigError> {
    if value.into() == 0 {
        Err(ConfigError::OutOfRange {
            field,
            expected: "at least 1",
            value: 0.0,
        })
    } else {
        Ok(())
    }
}

/// Seconds as a `Duration`, never panicking: NaN or negative gives zero,
/// values beyond `Duration::MAX` saturate.
pub fn secs_to_duration(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// Whole nanoseconds in `d`, saturating at `u64::MAX` (about 584 years).
pub(crate) fn duration_to_nanos_saturating(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secs_to_duration_never_panics() {
        assert_eq!(secs_to_duration(f64::NAN), Duration::ZERO);
        assert_eq!(secs_to_duration(-1.0), Duration::ZERO);
        assert_eq!(secs_to_duration(f64::INFINITY), Duration::MAX);
        assert_eq!(secs_to_duration(1e300), Duration::MAX);
        assert_eq!(secs_to_duration(1.5), Duration::from_millis(1500));
    }

    #[test]
    fn validators_reject_non_finite() {
        assert!(at_least("x", f64::NAN, 0.0).is_err());
        assert!(positive("x", 0.0).is_err());
        assert!(within("x", 1.1, 0.0, 1.0).is_err());
        assert_eq!(within("x", 0.5, 0.0, 1.0), Ok(0.5));
    }
}
