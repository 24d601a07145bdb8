//! [`AsyncKeyedLimiter`]: the one keyed, asynchronous decision interface that
//! every backend implements — the in-memory [`KeyedLimiter`] here, the Redis
//! limiters in `ratewise-redis` — and that drivers such as the tower
//! middleware consume. It needs only `std::future::Future`, so backends and
//! drivers both depend on the core and never on each other. A decision says
//! where it came from ([`DecisionSource`]): a backend that could not reach
//! its store answers with its failure policy's decision and says so.
//!
//! ```
//! use ratewise::backend::{AsyncKeyedLimiter, DecisionSource};
//! use ratewise::keyed::KeyedLimiter;
//! use ratewise::{ManualClock, Quota};
//!
//! // Generic code: works unchanged with a Redis limiter in place of this one.
//! async fn admit<L: AsyncKeyedLimiter<String>>(limiter: &L, user: &str) -> bool {
//!     match limiter.check(&user.to_owned(), 1).await {
//!         Ok(d) => d.decision.allowed,
//!         Err(_) => false, // the backend's own failure policy already ran
//!     }
//! }
//!
//! let limiter = KeyedLimiter::<String>::builder(Quota::per_second(1)?)
//!     .clock(ManualClock::new())
//!     .build();
//! # let poll = |f: std::pin::Pin<&mut dyn std::future::Future<Output = bool>>| {
//! #     let waker = std::task::Waker::noop();
//! #     match f.poll(&mut std::task::Context::from_waker(waker)) {
//! #         std::task::Poll::Ready(v) => v,
//! #         std::task::Poll::Pending => unreachable!("in-memory decisions are ready at once"),
//! #     }
//! # };
//! assert!(poll(std::pin::pin!(admit(&limiter, "ada"))));
//! assert!(!poll(std::pin::pin!(admit(&limiter, "ada"))));
//! assert!(!DecisionSource::Backend.is_degraded());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::hash::{BuildHasher, Hash};

use crate::decision::Decision;
use crate::keyed::{KeyState, KeyedError, KeyedLimiter};
use crate::time::Clock;

/// Where a [`BackendDecision`] was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecisionSource {
    /// The backend's own store decided (for in-memory limiters, always).
    Backend,
    /// The store was unavailable; a local in-memory limiter holding this
    /// instance's share of the quota decided.
    LocalFallback,
    /// The store was unavailable and the policy is to admit.
    FailOpen,
    /// The store was unavailable and the policy is to refuse.
    FailClosed,
}

impl DecisionSource {
    /// `true` when the decision was made without the backend's store.
    pub const fn is_degraded(self) -> bool {
        !matches!(self, DecisionSource::Backend)
    }

    /// A short lowercase name, stable for metrics labels: `backend`,
    /// `local_fallback`, `fail_open`, `fail_closed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DecisionSource::Backend => "backend",
            DecisionSource::LocalFallback => "local_fallback",
            DecisionSource::FailOpen => "fail_open",
            DecisionSource::FailClosed => "fail_closed",
        }
    }
}

/// A keyed decision with its evidence and its provenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendDecision {
    /// The answer and its evidence (limit, remaining, reset, retry-after).
    pub decision: Decision,
    /// Who made it.
    pub source: DecisionSource,
}

impl BackendDecision {
    /// A decision made by the backend's own store.
    pub const fn from_backend(decision: Decision) -> Self {
        BackendDecision {
            decision,
            source: DecisionSource::Backend,
        }
    }
}

/// A keyed rate limiter that answers asynchronously: in memory, or held in
/// a shared store such as Redis. See the [module docs](self).
///
/// Implementations read their own time (the in-memory limiter its
/// [`Clock`], Redis its server clock); the sans-IO `*_at` methods stay on the
/// concrete types.
pub trait AsyncKeyedLimiter<K: ?Sized>: Send + Sync {
    /// Why no decision could be made: an invalid request (zero weight, more
    /// than the burst, a malformed key) or, for a backend whose failure policy
    /// is to report errors, an unreachable store.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Admits `n` units for `key` if its quota allows, consuming them; a
    /// refusal consumes nothing.
    fn check(
        &self,
        key: &K,
        n: u64,
    ) -> impl Future<Output = Result<BackendDecision, Self::Error>> + Send;

    /// What [`AsyncKeyedLimiter::check`] would answer, changing nothing.
    fn peek(
        &self,
        key: &K,
        n: u64,
    ) -> impl Future<Output = Result<BackendDecision, Self::Error>> + Send;
}

impl<K, L, C, S> AsyncKeyedLimiter<K> for KeyedLimiter<K, L, C, S>
where
    K: Hash + Eq + Clone + Sync,
    L: KeyState,
    C: Clock + Sync,
    S: BuildHasher + Clone + Sync,
    Self: Send + Sync,
{
    type Error = KeyedError;

    fn check(
        &self,
        key: &K,
        n: u64,
    ) -> impl Future<Output = Result<BackendDecision, KeyedError>> + Send {
        std::future::ready(KeyedLimiter::check(self, key, n).map(BackendDecision::from_backend))
    }

    fn peek(
        &self,
        key: &K,
        n: u64,
    ) -> impl Future<Output = Result<BackendDecision, KeyedError>> + Send {
        std::future::ready(
            KeyedLimiter::peek(self, key, n)
                .map(BackendDecision::from_backend)
                .map_err(KeyedError::from),
        )
    }
}
