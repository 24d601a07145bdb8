//! The async driver of [`Throttle`] (feature `tokio`): call an operation,
//! classify its result, wait and retry as the throttle says.
//!
//! The driver is a thin loop over the sans-IO core — acquire a slot
//! ([`Throttle::acquire_at`]), sleep (and [`Throttle::recheck_at`] after it:
//! a cut or a pause meanwhile hands out a new slot), call, classify, record
//! ([`Throttle::record_at`]) — with time read from tokio's clock, so tests
//! under `#[tokio::test(start_paused = true)]` run instantly and exactly.
//!
//! **Cancellation safety.** No lock is held across an `.await`. If the
//! returned future is dropped while sleeping or while the operation runs, the
//! reserved slot is simply not used (the pacer errs on the slow side), a paid
//! budget token stays paid, and every counter is already consistent: nothing
//! needs undoing.

use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use super::throttle::{Call, Step, StopReason, Throttle};
use super::{Outcome, Signal};
use crate::time::{Clock, Timestamp};

/// How a response is turned into an [`Outcome`] when no classifier is given.
///
/// Implemented for [`Outcome`] itself and for `Result<T, E>` (an `Err` is a
/// [`Signal::Failure`], not retried). HTTP classification lives in the
/// classification module (feature `http`).
pub trait Classify {
    /// The outcome this response represents.
    fn classify(&self) -> Outcome;
}

impl Classify for Outcome {
    fn classify(&self) -> Outcome {
        *self
    }
}

impl<T: Classify, E> Classify for Result<T, E> {
    fn classify(&self) -> Outcome {
        match self {
            Ok(t) => t.classify(),
            Err(_) => Outcome::new(Signal::Failure),
        }
    }
}

/// `http` responses (feature `http`) are classified from their status and
/// headers with the default [`Classifier`](super::Classifier); a body-based
/// rule (Google's 403 reasons) needs [`Throttle::run_with`] and the
/// classifier's body-aware methods.
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
impl<B> Classify for http::Response<B> {
    fn classify(&self) -> Outcome {
        super::classify::outcome_parts(&self.status(), self.headers(), std::time::SystemTime::now())
    }
}

/// A call the throttle stopped. Carries the last response, if any attempt was
/// made, and says whether the refusal was the client's own.
#[derive(Debug)]
pub struct ThrottleError<R> {
    reason: StopReason,
    last: Option<R>,
    attempts: u32,
}

impl<R> ThrottleError<R> {
    /// Why the call stopped.
    pub fn reason(&self) -> StopReason {
        self.reason
    }

    /// The last response received, if any attempt was made.
    pub fn last_response(&self) -> Option<&R> {
        self.last.as_ref()
    }

    /// The last response, by value.
    pub fn into_last_response(self) -> Option<R> {
        self.last
    }

    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// `true` when the client refused to send the next attempt; `false` when
    /// the server's refusals used up every attempt allowed. The rule is
    /// [`StopReason::is_client_side`], per reason:
    ///
    /// | reason | client-side | why |
    /// |---|---|---|
    /// | [`MaxAttempts`](StopReason::MaxAttempts) | no | every allowed attempt was sent and refused |
    /// | [`Deadline`](StopReason::Deadline) | yes | the next attempt would start after the deadline, so it was not sent |
    /// | [`BudgetExhausted`](StopReason::BudgetExhausted) | yes | the retry budget could not pay, so the retry was not sent |
    /// | [`RejectedLocally`](StopReason::RejectedLocally) | yes | the SRE throttle refused to send |
    /// | [`RetryForbidden`](StopReason::RetryForbidden) | no | the server asked not to retry |
    pub fn is_client_side(&self) -> bool {
        self.reason.is_client_side()
    }
}

impl<R> std::fmt::Display for ThrottleError<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "call stopped after {} attempt(s) ({}): {}",
            self.attempts,
            if self.is_client_side() {
                "client-side refusal"
            } else {
                "server kept refusing"
            },
            self.reason
        )
    }
}

impl<R: std::fmt::Debug> std::error::Error for ThrottleError<R> {}

/// Held by the first call to a partition that has never been answered
/// ([`Throttle::first_contact`]); the partition's other calls wait until it
/// is dropped.
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct FirstContact<K: Hash + Eq + Clone + Send + Sync> {
    throttle: Throttle<K>,
    key: K,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl<K: Hash + Eq + Clone + Send + Sync> std::fmt::Debug for FirstContact<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstContact").finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> Drop for FirstContact<K> {
    fn drop(&mut self) {
        // The gate is done with once the partition has been answered; the
        // calls still waiting on it hold it and see the answer.
        if self.throttle.answered(&self.key) {
            self.throttle
                .first_contact_gates()
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&self.key);
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<K: Hash + Eq + Clone + Send + Sync> Throttle<K> {
    /// The throttle's notion of now on tokio's clock (origin: first use).
    pub fn now(&self) -> Timestamp {
        self.clock().now()
    }

    /// [`Throttle::try_acquire_at`] now: `Err(wait)` says "would wait this
    /// long", taking nothing.
    ///
    /// # Errors
    /// The wait, when the partition is paused or its pacer is empty.
    pub fn try_acquire(&self, key: &K) -> Result<(), Duration> {
        self.try_acquire_at(key, self.now())
    }

    /// Waits until `key`'s partition may be called: at once once it has been
    /// answered ([`Throttle::answered`]); before that, one call at a time.
    /// The first call to a partition goes alone, holding the returned guard
    /// until its answer is recorded, and the others wait for it — so a
    /// server that states its rate (`RateLimit-Policy`) is paced from the
    /// start instead of answering a burst with 429s. It costs one round trip,
    /// once per partition. [`Throttle::run`] does this itself; drivers with
    /// their own loop (the reqwest middleware) call it before their first
    /// attempt and drop the guard once that attempt is recorded.
    pub async fn first_contact(&self, key: &K) -> Option<FirstContact<K>> {
        if self.answered(key) {
            return None;
        }
        let gate = {
            let mut gates = self
                .first_contact_gates()
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::sync::Arc::clone(gates.entry(key.clone()).or_default())
        };
        let guard = gate.lock_owned().await;
        let first = FirstContact {
            throttle: self.clone(),
            key: key.clone(),
            _guard: guard,
        };
        // Answered while this call waited: no need to hold the others.
        (!self.answered(key)).then_some(first)
    }

    /// Waits until `call` may send its next attempt, from `now`: first out
    /// a retry's delay (until `not_before`), then for the partition's next
    /// slot, taking a new one whenever a cut or a pause re-planned the
    /// partition while it slept ([`Throttle::recheck_at`]). Returns the
    /// time it may send at. Both async loops (`run_with` and the HTTP
    /// exchange) take every attempt's slot through here.
    ///
    /// The delay is slept out before the slot is taken: reserving a slot
    /// far ahead would hold the partition's pacer until then. The clock is
    /// read again only after a sleep.
    pub(crate) async fn wait_for_slot(
        &self,
        key: &K,
        call: &mut Call,
        not_before: Timestamp,
        mut now: Timestamp,
    ) -> Result<Timestamp, StopReason> {
        if not_before > now {
            tokio::time::sleep(not_before.saturating_duration_since(now)).await;
            now = self.now();
        }
        let mut wait = self.acquire_at(key, call, now, now)?;
        while !wait.is_zero() {
            tokio::time::sleep(wait).await;
            now = self.now();
            wait = self.recheck_at(key, call, now);
        }
        Ok(now)
    }

    /// Runs `op` under the throttle in `key`'s partition, classifying its
    /// results with [`Classify`].
    ///
    /// # Errors
    /// [`ThrottleError`] when the throttle stops the call.
    pub async fn run<R, F, Fut>(&self, key: &K, op: F) -> Result<R, ThrottleError<R>>
    where
        R: Classify,
        F: FnMut() -> Fut,
        Fut: Future<Output = R>,
    {
        self.run_with(key, |r: &R| r.classify(), op).await
    }

    /// Runs `op` under the throttle in `key`'s partition, classifying its
    /// results with `classify`.
    ///
    /// # Errors
    /// [`ThrottleError`] when the throttle stops the call.
    pub async fn run_with<R, C, F, Fut>(
        &self,
        key: &K,
        mut classify: C,
        mut op: F,
    ) -> Result<R, ThrottleError<R>>
    where
        C: FnMut(&R) -> Outcome,
        F: FnMut() -> Fut,
        Fut: Future<Output = R>,
    {
        let began = self.now();
        let mut call = self.begin(began);
        let mut first = self.first_contact(key).await;
        // A call held behind another's first contact reads the clock again;
        // the first call itself waited for nobody.
        let mut now = if first.is_some() { began } else { self.now() };
        let mut not_before = now;
        let mut last: Option<R> = None;
        loop {
            if let Err(reason) = self.wait_for_slot(key, &mut call, not_before, now).await {
                return Err(ThrottleError {
                    reason,
                    last,
                    attempts: call.attempts(),
                });
            }
            let response = op().await;
            let outcome = classify(&response);
            now = self.now();
            let step = self.record_at(key, &mut call, now, &outcome);
            drop(first.take());
            match step {
                Step::Done => return Ok(response),
                Step::Retry(delay) => {
                    last = Some(response);
                    not_before = now.saturating_add(delay);
                }
                Step::GiveUp(reason) => {
                    return Err(ThrottleError {
                        reason,
                        last: Some(response),
                        attempts: call.attempts(),
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::backoff::{BackoffConfig, Jitter};
    use crate::client::throttle::{Adaptation, ThrottleConfig};
    use crate::client::ServerHints;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    fn config() -> ThrottleConfig {
        ThrottleConfig {
            adaptation: Adaptation::None,
            backoff: BackoffConfig::exponential(Duration::from_millis(100), 2.0)
                .with_jitter(Jitter::None),
            pause_jitter: 0.0,
            max_attempts: 3,
            ..ThrottleConfig::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_then_succeeds_honouring_retry_after() {
        let th: Throttle<()> = Throttle::new(config()).unwrap();
        let n = AtomicU32::new(0);
        let t0 = tokio::time::Instant::now();
        let r = th
            .run(&(), || async {
                if n.fetch_add(1, Ordering::SeqCst) == 0 {
                    Outcome::throttled().with_hints(ServerHints {
                        retry_after: Some(Duration::from_secs(3)),
                        ..ServerHints::default()
                    })
                } else {
                    Outcome::success()
                }
            })
            .await;
        assert!(matches!(r, Ok(o) if o.signal == Signal::Success));
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        let m = th.metrics();
        assert_eq!(
            (m.attempts, m.successes, m.throttled, m.retries),
            (2, 1, 1, 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_partitions_first_call_goes_alone() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap();
        let t0 = tokio::time::Instant::now();
        // Five calls at once to a partition never answered: each takes 1 s.
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let th = th.clone();
                tokio::spawn(async move {
                    th.run_with(
                        &0,
                        |_| Outcome::success(),
                        || async {
                            let started = t0.elapsed();
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            started
                        },
                    )
                    .await
                })
            })
            .collect();
        let mut starts = vec![];
        for c in calls {
            let started = c.await.unwrap().map_err(|_| "stopped").unwrap();
            starts.push(started);
        }
        starts.sort();
        // The first went alone; the other four waited for its answer, then
        // went together (no pacing: nothing asked for it).
        assert_eq!(starts[0], Duration::ZERO);
        assert!(
            starts[1..].iter().all(|&s| s == Duration::from_secs(1)),
            "{starts:?}"
        );
        assert!(th.answered(&0));
        assert!(th.first_contact(&0).await.is_none(), "answered: no gate");
        // Another partition has its own first contact.
        assert!(th.first_contact(&1).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_with_the_last_response() {
        let th: Throttle<()> = Throttle::new(config()).unwrap();
        let err = th
            .run(&(), || async { Ok::<_, ()>(Outcome::throttled()) })
            .await
            .unwrap_err();
        assert_eq!(err.reason(), StopReason::MaxAttempts);
        assert_eq!(err.attempts(), 3);
        assert!(!err.is_client_side());
        assert_eq!(err.last_response().map(|r| r.is_ok()), Some(true));
        assert!(err.to_string().contains("3 attempt"));
    }

    #[tokio::test(start_paused = true)]
    async fn budget_exhaustion_is_client_side() {
        // Five tokens pay for exactly one retry after a server error (a
        // throttled attempt's retry is paced and never paid from the budget).
        let th: Throttle<()> = Throttle::new(ThrottleConfig {
            budget: Some(crate::client::budget::RetryBudgetConfig {
                capacity: 5,
                ..Default::default()
            }),
            max_attempts: 10,
            ..config()
        })
        .unwrap();
        let err = th
            .run(&(), || async {
                Outcome::new(crate::client::Signal::ServerError)
            })
            .await
            .unwrap_err();
        assert_eq!(err.reason(), StopReason::BudgetExhausted);
        assert_eq!(err.attempts(), 2);
        assert!(
            err.is_client_side(),
            "the client refused to send a retry it could not pay for"
        );
        assert!(err.to_string().contains("client-side"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_reached_between_attempts_is_client_side() {
        let th: Throttle<()> = Throttle::new(ThrottleConfig {
            deadline: Some(Duration::from_millis(150)),
            ..config()
        })
        .unwrap();
        let err = th
            .run(&(), || async { Outcome::throttled() })
            .await
            .unwrap_err();
        assert_eq!(err.reason(), StopReason::Deadline);
        assert!(err.is_client_side());
        assert!(err.last_response().is_some());
    }

    #[test]
    fn client_side_rule_for_every_reason() {
        assert!(!StopReason::MaxAttempts.is_client_side());
        assert!(StopReason::Deadline.is_client_side());
        assert!(StopReason::BudgetExhausted.is_client_side());
        assert!(StopReason::RejectedLocally.is_client_side());
        assert!(!StopReason::RetryForbidden.is_client_side());
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_refusal_is_client_side() {
        let th: Throttle<()> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(1.0),
            burst: Some(1),
            deadline: Some(Duration::from_millis(500)),
            ..config()
        })
        .unwrap();
        // The first call takes the only slot of this second.
        assert!(th.run(&(), || async { Outcome::success() }).await.is_ok());
        let err = th
            .run(&(), || async { Outcome::success() })
            .await
            .unwrap_err();
        assert_eq!(err.reason(), StopReason::Deadline);
        assert!(err.is_client_side());
        assert_eq!(err.attempts(), 0);
        assert!(err.last_response().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_delay_does_not_hold_the_partition() {
        let th: Throttle<()> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(10.0),
            burst: Some(1),
            backoff: BackoffConfig::constant(Duration::from_secs(5)),
            ..config()
        })
        .unwrap();
        let t0 = tokio::time::Instant::now();
        let n = AtomicU32::new(0);
        let a = th.run(&(), || async {
            if n.fetch_add(1, Ordering::SeqCst) == 0 {
                Outcome::new(Signal::ServerError)
            } else {
                Outcome::success()
            }
        });
        let b = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let r = th.run(&(), || async { Outcome::success() }).await;
            (r.is_ok(), t0.elapsed())
        };
        let (ra, (b_ok, b_done)) = tokio::join!(a, b);
        assert!(ra.is_ok());
        assert!(b_ok);
        assert!(
            b_done < Duration::from_millis(300),
            "B finished at {b_done:?}"
        );
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(5),
            "A retried after its 5 s"
        );
        assert_eq!(th.metrics().total_sleep, Duration::from_secs(5));
    }

    #[cfg(feature = "http")]
    #[tokio::test(start_paused = true)]
    async fn http_responses_classify_by_default() {
        let th: Throttle<()> = Throttle::new(config()).unwrap();
        let n = AtomicU32::new(0);
        let r = th
            .run(&(), || async {
                let status = if n.fetch_add(1, Ordering::SeqCst) == 0 {
                    429
                } else {
                    200
                };
                http::Response::builder()
                    .status(status)
                    .header("Retry-After", "2")
                    .body(())
                    .unwrap_or_default()
            })
            .await;
        assert_eq!(r.map(|resp| resp.status().as_u16()).ok(), Some(200));
        assert_eq!(th.metrics().throttled, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn try_acquire_answers_would_wait() {
        let th: Throttle<()> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(2.0),
            burst: Some(1),
            ..config()
        })
        .unwrap();
        assert_eq!(th.try_acquire(&()), Ok(()));
        assert_eq!(th.try_acquire(&()), Err(Duration::from_millis(500)));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(th.try_acquire(&()), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_calls_leave_state_consistent() {
        let th: Throttle<()> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(1.0),
            burst: Some(1),
            ..config()
        })
        .unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        // Take the slot, then start a call that must wait ~1 s and drop it.
        assert!(th.try_acquire(&()).is_ok());
        let c = Arc::clone(&calls);
        let fut = th.run(&(), move || {
            let c = Arc::clone(&c);
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Outcome::success()
            }
        });
        let r = tokio::time::timeout(Duration::from_millis(10), fut).await;
        assert!(r.is_err(), "timed out while waiting for its slot");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "never sent");
        // The dropped call's slot stays used (conservative); the next call
        // simply waits behind it and then succeeds.
        let t0 = tokio::time::Instant::now();
        let c = Arc::clone(&calls);
        let r = th
            .run(&(), move || {
                let c = Arc::clone(&c);
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    Outcome::success()
                }
            })
            .await;
        assert!(r.is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(t0.elapsed() >= Duration::from_millis(1900));
        let m = th.metrics();
        assert_eq!(m.successes, 1);
        assert!(m.attempts >= m.successes + m.throttled);
    }
}
