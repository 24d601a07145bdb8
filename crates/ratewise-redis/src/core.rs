//! What the single-key and the multi-level limiters share: the connection,
//! key naming and validation, the quota's translation to microseconds, and
//! the failure path.

use std::time::Duration;

use ratewise::backend::{BackendDecision, DecisionSource};
use ratewise::{CheckError, Decision, Quota, QuotaError};

use crate::error::Error;
use crate::policy::{policy_decision, Failure, FailurePolicy, Resilience};

/// The longest key accepted, in bytes (1 KiB).
pub const MAX_KEY_LEN: usize = 1024;

/// The largest time or window the scripts handle, in microseconds: 2^52 µs
/// (about 142 years), so that `now + window` stays below 2^53, where Lua's
/// doubles stop being exact integers.
pub const MAX_MICROS: u64 = 1 << 52;

/// A quota as the scripts see it: emission interval in whole microseconds
/// (rounded up, so never faster than asked) and the burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MicroQuota {
    pub(crate) quota: Quota,
    pub(crate) emission_us: u64,
    pub(crate) burst: u64,
}

impl MicroQuota {
    /// Translates `quota`; `counter` adds the sliding-window counter's bound
    /// (`burst × window ≤ 2^52`: its script forms sums of two such products).
    pub(crate) fn new(quota: Quota, counter: bool) -> Result<MicroQuota, QuotaError> {
        let emission_us = quota.emission_nanos().div_ceil(1000);
        let burst = quota.burst();
        let window = emission_us.saturating_mul(burst);
        if window > MAX_MICROS {
            return Err(QuotaError::TooLarge {
                what: "window (burst × emission interval) in microseconds on Redis",
                got: window,
                limit: MAX_MICROS,
            });
        }
        if counter {
            let product = u128::from(window) * u128::from(burst);
            if product > u128::from(MAX_MICROS) {
                return Err(QuotaError::TooLarge {
                    what: "burst × window in microseconds for the sliding-window counter on Redis",
                    got: u64::try_from(product).unwrap_or(u64::MAX),
                    limit: MAX_MICROS,
                });
            }
        }
        Ok(MicroQuota {
            quota,
            emission_us,
            burst,
        })
    }

    pub(crate) fn validate_weight(&self, n: u64) -> Result<(), CheckError> {
        if n == 0 {
            Err(CheckError::ZeroWeight)
        } else if n > self.burst {
            Err(CheckError::ExceedsBurst {
                requested: n,
                burst: self.burst,
            })
        } else {
            Ok(())
        }
    }

    /// The decision a script's first four integers describe.
    pub(crate) fn decision(&self, v: &[i64]) -> Decision {
        let us = micros;
        Decision {
            allowed: v[0] == 1,
            limit: self.burst,
            remaining: u64::try_from(v[1]).unwrap_or(0),
            reset_after: us(v[2]),
            retry_after: (v[3] >= 0).then(|| us(v[3])),
            delay: Duration::ZERO,
        }
    }
}

/// The script `body` after the shared prelude, built once into `cell`.
pub(crate) fn script_with_prelude(
    cell: &'static std::sync::OnceLock<redis::Script>,
    body: &str,
) -> &'static redis::Script {
    cell.get_or_init(|| redis::Script::new(&format!("{}\n{body}", include_str!("lua/prelude.lua"))))
}

/// A script's non-negative microseconds as a `Duration`.
pub(crate) fn micros(x: i64) -> Duration {
    Duration::from_micros(u64::try_from(x).unwrap_or(0))
}

/// `now` as the scripts' first argument: microseconds, or -1 for Redis's
/// own clock.
pub(crate) fn now_arg(now: Option<Duration>) -> Result<i64, Error> {
    match now {
        None => Ok(-1),
        Some(t) => {
            let us = t.as_micros();
            if us > u128::from(MAX_MICROS) {
                return Err(Error::TimeOutOfRange {
                    now: t,
                    max: Duration::from_micros(MAX_MICROS),
                });
            }
            Ok(us as i64)
        }
    }
}

pub(crate) fn validate_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        Err(Error::EmptyKey)
    } else if key.len() > MAX_KEY_LEN {
        Err(Error::KeyTooLong {
            len: key.len(),
            max: MAX_KEY_LEN,
        })
    } else {
        Ok(())
    }
}

/// Connection, key prefix, expiry slack, failure policy, breaker.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) conn: crate::Connection,
    pub(crate) prefix: Vec<u8>,
    pub(crate) slack_ms: u64,
    pub(crate) policy: FailurePolicy,
    pub(crate) res: Resilience,
}

impl Core {
    pub(crate) fn full_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }

    /// The policy's answer when Redis gave none; counted.
    pub(crate) fn degrade(
        &self,
        key: &[u8],
        n: u64,
        peek: bool,
        limit: u64,
        failure: Failure,
    ) -> Result<BackendDecision, Error> {
        let source = self.policy.source();
        let wait = self.res.time_to_probe().max(Duration::from_millis(1));
        let decision = match &self.policy {
            FailurePolicy::Error => {
                self.res.stats.count(source);
                return Err(failure.into());
            }
            FailurePolicy::FailOpen => policy_decision(true, limit, Duration::ZERO),
            FailurePolicy::FailClosed => policy_decision(false, limit, wait),
            FailurePolicy::LocalFallback(local) => local
                .decide(key, n, peek)
                // A weight above the local share's burst, or a full table:
                // refuse until Redis is back.
                .unwrap_or_else(|| policy_decision(false, limit, wait)),
        };
        self.res.stats.decided(source, decision.allowed);
        Ok(BackendDecision { decision, source })
    }

    /// What `key` owes Redis for admissions made by the local share while
    /// Redis could not answer (at most once per outage and key); the caller
    /// charges it. One atomic load when nothing is owed.
    pub(crate) fn owed(&self, key: &[u8]) -> Option<u64> {
        match &self.policy {
            FailurePolicy::LocalFallback(local) if local.owes() => local.take_owed(key),
            _ => None,
        }
    }

    /// Counts a decision Redis made.
    pub(crate) fn count_backend(&self, allowed: bool) {
        self.res.stats.decided(DecisionSource::Backend, allowed);
    }
}
