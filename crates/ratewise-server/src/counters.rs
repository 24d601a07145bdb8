//! A rule's counters in memory: one limiter per distinct descriptor value,
//! in a [`KeyedLimiter`] with a bound on the number of keys.

// `KeyedLimiter` looks keys up by `&K`, and the key is a `Box<str>`.
#![allow(clippy::borrowed_box)]

use std::time::Duration;

use ratewise::keyed::{GcraState, KeyState, KeyedError, NoClock};
use ratewise::{
    CheckError, Decision, FixedWindow, KeyedLimiter, LeakyMeter, Quota, Reservation, ReserveError,
    SlidingWindowCounter, SlidingWindowLog, Timestamp, TokenBucket,
};

use crate::config::AlgorithmName;

/// The per-key state of a rule that does not use GCRA.
pub(crate) struct AnyState(Box<dyn KeyState>);

impl KeyState for AnyState {
    fn quota(&self) -> Quota {
        self.0.quota()
    }
    fn set_quota_at(&mut self, quota: Quota, now: Timestamp) {
        self.0.set_quota_at(quota, now)
    }
    fn check_at(&mut self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.0.check_at(n, now)
    }
    fn peek_at(&self, n: u64, now: Timestamp) -> Result<Decision, CheckError> {
        self.0.peek_at(n, now)
    }
    fn reserve_within_at(
        &mut self,
        n: u64,
        now: Timestamp,
        max_wait: Duration,
    ) -> Result<Reservation, ReserveError> {
        self.0.reserve_within_at(n, now, max_wait)
    }
    fn cancel_at(&mut self, reservation: Reservation, now: Timestamp) -> u64 {
        self.0.cancel_at(reservation, now)
    }
    fn full_at(&self, now: Timestamp) -> Timestamp {
        self.0.full_at(now)
    }
}

/// One rule's counters.
pub(crate) enum Counters {
    Gcra(KeyedLimiter<Box<str>, GcraState, NoClock>),
    Other(KeyedLimiter<Box<str>, AnyState, NoClock>),
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("keys", &self.len())
            .finish_non_exhaustive()
    }
}

impl Counters {
    /// Counters for `quota` under `algorithm`, holding at most `max_keys`
    /// keys (a full table refuses new keys until old ones are back at full
    /// capacity).
    pub(crate) fn new(quota: Quota, algorithm: AlgorithmName, max_keys: usize) -> Counters {
        let builder = KeyedLimiter::<Box<str>>::builder(quota)
            .max_keys(max_keys)
            .clock(NoClock);
        let other = |make: fn(Quota) -> Box<dyn KeyState>| {
            Counters::Other(builder_other(quota, max_keys, make))
        };
        match algorithm {
            AlgorithmName::Gcra => Counters::Gcra(builder.build()),
            AlgorithmName::TokenBucket => other(|q| Box::new(TokenBucket::with_clock(q, NoClock))),
            AlgorithmName::LeakyBucket => other(|q| Box::new(LeakyMeter::with_clock(q, NoClock))),
            AlgorithmName::FixedWindow => other(|q| Box::new(FixedWindow::with_clock(q, NoClock))),
            AlgorithmName::SlidingWindow => {
                other(|q| Box::new(SlidingWindowCounter::with_clock(q, NoClock)))
            }
            AlgorithmName::SlidingLog => {
                other(|q| Box::new(SlidingWindowLog::with_clock(q, NoClock)))
            }
        }
    }

    pub(crate) fn check_at(
        &self,
        key: &Box<str>,
        n: u64,
        now: Timestamp,
    ) -> Result<Decision, KeyedError> {
        match self {
            Counters::Gcra(k) => k.check_at(key, n, now),
            Counters::Other(k) => k.check_at(key, n, now),
        }
    }

    pub(crate) fn peek_at(
        &self,
        key: &Box<str>,
        n: u64,
        now: Timestamp,
    ) -> Result<Decision, CheckError> {
        match self {
            Counters::Gcra(k) => k.peek_at(key, n, now),
            Counters::Other(k) => k.peek_at(key, n, now),
        }
    }

    pub(crate) fn reserve_now(
        &self,
        key: &Box<str>,
        n: u64,
        now: Timestamp,
    ) -> Result<Reservation, KeyedError> {
        match self {
            Counters::Gcra(k) => k.reserve_within_at(key, n, now, Duration::ZERO),
            Counters::Other(k) => k.reserve_within_at(key, n, now, Duration::ZERO),
        }
    }

    pub(crate) fn cancel_at(&self, key: &Box<str>, reservation: Reservation, now: Timestamp) {
        match self {
            Counters::Gcra(k) => k.cancel_at(key, reservation, now),
            Counters::Other(k) => k.cancel_at(key, reservation, now),
        };
    }

    /// Whether `key` holds a counter now.
    pub(crate) fn contains(&self, key: &Box<str>) -> bool {
        match self {
            Counters::Gcra(k) => k.contains(key),
            Counters::Other(k) => k.contains(key),
        }
    }

    /// The number of keys held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Counters::Gcra(k) => k.len(),
            Counters::Other(k) => k.len(),
        }
    }
}

fn builder_other(
    quota: Quota,
    max_keys: usize,
    make: fn(Quota) -> Box<dyn KeyState>,
) -> KeyedLimiter<Box<str>, AnyState, NoClock> {
    KeyedLimiter::<Box<str>>::builder(quota)
        .max_keys(max_keys)
        .clock(NoClock)
        .limiter(move |q| AnyState(make(q)))
        .build()
}
