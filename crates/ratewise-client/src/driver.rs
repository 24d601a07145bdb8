//! The async handle of [`Throttle`] (feature `tokio`): call an operation,
//! classify its result, wait and retry as the throttle says.
//!
//! [`AsyncThrottle`] owns what running on tokio needs — the clock and each
//! partition's start gate — around one sans-IO [`Throttle`], which holds no
//! runtime state, so the simulator and production drive the same object.
//! Its loop is thin over that core — acquire a slot
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

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use super::throttle::{Call, Step, StopReason, Throttle, ThrottleConfig};
use super::{ConfigError, Outcome, Signal};
use ratewise::time::{Clock, Timestamp};
use ratewise::wait::TokioClock;

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
/// rule (Google's 403 reasons) needs [`AsyncThrottle::run_with`] and the
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

/// The most calls a partition's slow start lets out at once before it
/// opens the gate for good: beyond this many in flight, a server that has
/// neither refused nor stated a rate is not limiting this client.
const SLOW_START_MAX_WINDOW: u32 = 64;

/// Past two, the slow start's window widens by at most one per this span
/// since its gate was made (a success that comes sooner leaves it as it
/// is): a server that answers in a fraction of a millisecond would
/// otherwise see the window double sixty times a second, every call out at
/// once before its first refusal comes back, while two calls at a time
/// already reach thousands a second there. Where answers come this far
/// apart or more (a round trip of 20 ms, a server that queues its calls),
/// the window grows as before: by one per success.
const SLOW_START_WIDEN_GAP: Duration = Duration::from_millis(10);

/// The shortest and longest a call waiting for a far-off slot sleeps
/// before it asks again whether the partition re-planned
/// ([`Throttle::recheck_at`]).
const RECHECK_MIN: Duration = Duration::from_millis(250);
const RECHECK_MAX: Duration = Duration::from_secs(1);

/// A partition's start gate ([`AsyncThrottle::first_contact`]): a window of
/// calls in flight, one at first, one more per success (past two, at most
/// one per [`SLOW_START_WIDEN_GAP`]), until the partition paces (a refusal
/// or a stated rate) or the window is large.
#[derive(Debug)]
struct StartGate {
    permits: Arc<tokio::sync::Semaphore>,
    window: std::sync::atomic::AtomicU32,
    /// When the gate was made (the partition's first call).
    made: Timestamp,
}

impl StartGate {
    fn new(made: Timestamp) -> Self {
        StartGate {
            permits: Arc::new(tokio::sync::Semaphore::new(1)),
            window: std::sync::atomic::AtomicU32::new(1),
            made,
        }
    }

    /// Whether the window may widen past `window` at `now`: to two at the
    /// first success, then by one per [`SLOW_START_WIDEN_GAP`] since the
    /// gate was made, at most.
    fn may_widen(&self, window: u32, now: Timestamp) -> bool {
        now.saturating_duration_since(self.made)
            >= SLOW_START_WIDEN_GAP.saturating_mul(window.saturating_sub(1))
    }
}

/// What running a [`Throttle`] on tokio needs, shared by every clone of
/// one [`AsyncThrottle`].
struct Runtime<K> {
    /// The clock every timestamp given to the throttle is read from,
    /// created on first use (so inside the runtime).
    clock: OnceLock<TokioClock>,
    /// Partitions in their start (the first call out, then a slow start
    /// until they pace): their calls wait on the gate.
    gates: Mutex<HashMap<K, Arc<StartGate>>>,
}

/// A [`Throttle`] on tokio: the sans-IO throttle plus the clock and the
/// partitions' start gates, shared by cloning (an `Arc`).
///
/// The throttle's own methods (`metrics`, `rate_of`, `forget`, …) are
/// reached through `Deref`. Every timestamp the handle gives its throttle is
/// read from one clock, so build the handle once and clone it; the
/// throttle inside is not handed out by value, so no second clock can
/// drive it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use ratewise_client::{AsyncThrottle, Outcome, ThrottleConfig};
///
/// let throttle: AsyncThrottle<&str> = AsyncThrottle::new(ThrottleConfig::default())?;
/// let answer = throttle.run(&"api.example.com", || async { Outcome::success() }).await?;
/// assert_eq!(answer, Outcome::success());
/// assert_eq!(throttle.metrics().successes, 1);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct AsyncThrottle<K = ()> {
    throttle: Throttle<K>,
    runtime: Arc<Runtime<K>>,
}

impl<K> Clone for AsyncThrottle<K> {
    fn clone(&self) -> Self {
        AsyncThrottle {
            throttle: self.throttle.clone(),
            runtime: Arc::clone(&self.runtime),
        }
    }
}

impl<K> std::fmt::Debug for AsyncThrottle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncThrottle")
            .field("throttle", &self.throttle)
            .finish_non_exhaustive()
    }
}

impl<K> Deref for AsyncThrottle<K> {
    type Target = Throttle<K>;

    fn deref(&self) -> &Throttle<K> {
        &self.throttle
    }
}

/// Held by a call let through a partition's start gate
/// ([`AsyncThrottle::first_contact`]) until its answer is recorded: the first
/// call to a partition goes alone, and until the partition paces, each
/// success lets one more call out at once (a window that doubles every
/// round trip).
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct FirstContact<K: Hash + Eq + Clone + Send + Sync> {
    throttle: AsyncThrottle<K>,
    key: K,
    gate: Arc<StartGate>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<K: Hash + Eq + Clone + Send + Sync> std::fmt::Debug for FirstContact<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstContact").finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> FirstContact<K> {
    /// Ends the hold once this call's attempt is recorded: a success widens
    /// the window by one; a refusal, or a partition that now paces (told
    /// its rate), opens the gate for every call.
    pub fn recorded(mut self, outcome: &Outcome) {
        self.settle(
            outcome.signal == Signal::Success,
            outcome.signal == Signal::Throttled,
        );
    }

    fn settle(&mut self, widen: bool, refused: bool) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let paces = self.throttle.rate_of(&self.key).is_some();
        let window = self.gate.window.load(std::sync::atomic::Ordering::Relaxed);
        if paces || refused || window >= SLOW_START_MAX_WINDOW {
            if !self.gate.permits.is_closed() {
                self.throttle.end_start(&self.key);
                self.gate.permits.close();
            }
            let mut gates = self
                .throttle
                .runtime
                .gates
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if gates
                .get(&self.key)
                .is_some_and(|g| Arc::ptr_eq(g, &self.gate))
            {
                gates.remove(&self.key);
            }
        } else if widen && self.throttle.answered(&self.key) {
            // The first success (a window of one always widens): from here
            // on the gate lets the calls out in a slow start, and the
            // controller's first cut will measure sends this gate kept few
            // and spread out.
            if window == 1 {
                self.throttle.note_slow_started(&self.key);
            }
            if self.gate.may_widen(window, self.throttle.now()) {
                self.gate
                    .window
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.gate.permits.add_permits(1);
            }
        }
        drop(permit);
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> Drop for FirstContact<K> {
    fn drop(&mut self) {
        // Dropped without `recorded`: a driver that only drops the guard
        // once its attempt is recorded still widens the window while the
        // partition is answered (a call given up before any answer only
        // frees its place), and a pace, once set, still opens the gate.
        self.settle(true, false);
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> AsyncThrottle<K> {
    /// A throttle with `config`, on tokio.
    ///
    /// # Errors
    /// [`ConfigError`] for any invalid part, as [`Throttle::new`].
    pub fn new(config: ThrottleConfig) -> Result<Self, ConfigError> {
        Ok(AsyncThrottle {
            throttle: Throttle::new(config)?,
            runtime: Arc::new(Runtime {
                clock: OnceLock::new(),
                gates: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The sans-IO throttle this handle drives.
    pub fn throttle(&self) -> &Throttle<K> {
        &self.throttle
    }

    /// The throttle's notion of now on tokio's clock (origin: first use).
    pub fn now(&self) -> Timestamp {
        self.runtime.clock.get_or_init(TokioClock::new).now()
    }

    /// [`Throttle::try_acquire_at`] now: `Err(wait)` says "would wait this
    /// long", taking nothing.
    ///
    /// # Errors
    /// The wait, when the partition is paused or its pacer is empty.
    pub fn try_acquire(&self, key: &K) -> Result<(), Duration> {
        self.try_acquire_at(key, self.now())
    }

    /// Waits until `key`'s partition may be called. The first call to a
    /// partition goes alone, holding the returned guard until its answer is
    /// recorded ([`FirstContact::recorded`], or dropping the guard then), so
    /// that a server that states
    /// its rate (`RateLimit-Policy`) is paced from the start instead of
    /// answering a burst with 429s. If the answer leaves the partition
    /// without a pace (the server said nothing of its rate), the others are
    /// let out in a slow start: one more at once per success, a window
    /// that doubles every round trip (past two, it widens by at most one
    /// per 10 ms, so a server that answers at once does not get every call
    /// before its first refusal comes back), until the first refusal or a
    /// stated rate starts the pace, or 64 are out. Fifty tasks sharing a
    /// throttle so probe a server that sends nothing in a few round trips,
    /// instead of sending fifty calls into a bucket of ten. Once the partition paces,
    /// every call goes at once (`None`). [`AsyncThrottle::run`] does this itself;
    /// drivers with their own loop (the reqwest middleware) call it before
    /// their first attempt.
    pub async fn first_contact(&self, key: &K) -> Option<FirstContact<K>> {
        // Every call after the start: one atomic load, no shared lock.
        if self.start_over(key) {
            return None;
        }
        let gate = {
            let mut gates = self
                .runtime
                .gates
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match gates.get(key) {
                Some(g) => Arc::clone(g),
                // Answered and no gate left: the slow start is over.
                None if self.answered(key) => return None,
                None => Arc::clone(
                    gates
                        .entry(key.clone())
                        .or_insert_with(|| Arc::new(StartGate::new(self.now()))),
                ),
            }
        };
        // A closed gate is an open door.
        let permit = Arc::clone(&gate.permits).acquire_owned().await.ok()?;
        Some(FirstContact {
            throttle: self.clone(),
            key: key.clone(),
            gate,
            permit: Some(permit),
        })
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
            // A slot far off may be moved closer by a rise meanwhile (calls
            // that queued at a blind start's slow pace would otherwise keep
            // it for seconds after the pace found the server's): the call
            // looks again after an eighth of its wait, within bounds (a
            // wait under `RECHECK_MIN` is slept whole).
            tokio::time::sleep(wait.min((wait / 8).clamp(RECHECK_MIN, RECHECK_MAX))).await;
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
            if let Some(f) = first.take() {
                f.recorded(&outcome);
            }
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
    use crate::adaptive::AdaptiveConfig;
    use crate::backoff::{BackoffConfig, Jitter};
    use crate::throttle::{Adaptation, ThrottleConfig};
    use crate::ServerHints;
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(config()).unwrap();
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
        let th: AsyncThrottle<u8> = AsyncThrottle::new(config()).unwrap();
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
        // The first went alone; its success let two out (a window of two),
        // and their two successes the last two (nothing paces: a slow start
        // that doubles every round trip).
        let secs = |s: &[u64]| {
            s.iter()
                .map(|&n| Duration::from_secs(n))
                .collect::<Vec<_>>()
        };
        assert_eq!(starts, secs(&[0, 1, 1, 2, 2]));
        assert!(th.answered(&0));
        // Another partition has its own first contact.
        assert!(th.first_contact(&1).await.is_some());
    }

    /// Partition 0's first call, let through its start gate and answered
    /// with a success (its guard not yet ended), and that call.
    async fn first_call_answered(th: &AsyncThrottle<u8>) -> (FirstContact<u8>, Call) {
        let first = th
            .first_contact(&0)
            .await
            .expect("the first call goes alone");
        let mut call = th.begin(th.now());
        th.record_at(&0, &mut call, th.now(), &Outcome::success());
        (first, call)
    }

    /// A call to partition 0 waiting at its start gate: `true` if it is
    /// let through holding a place in the window.
    fn waiter(th: &AsyncThrottle<u8>) -> tokio::task::JoinHandle<bool> {
        let th = th.clone();
        tokio::spawn(async move { th.first_contact(&0).await.is_some() })
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_ends_the_slow_start_and_opens_the_gate() {
        let th: AsyncThrottle<u8> = AsyncThrottle::new(config()).unwrap();
        let (first, mut call) = first_call_answered(&th).await;
        first.recorded(&Outcome::success());
        // A window of two: a third call waits for one of them.
        let a = th.first_contact(&0).await.expect("in the window");
        let b = th.first_contact(&0).await.expect("in the window");
        let third = waiter(&th);
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "the window is full");
        // A refusal ends the slow start: the gate opens for every call.
        th.record_at(&0, &mut call, th.now(), &Outcome::throttled());
        a.recorded(&Outcome::throttled());
        assert!(!third.await.unwrap(), "let through without a hold");
        assert!(th.first_contact(&0).await.is_none());
        drop(b);
        assert!(th.first_contact(&0).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_cut_after_the_slow_start_counts_its_sends_over_the_time_they_took() {
        let th: AsyncThrottle<u8> = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
        let admitted = Arc::new(AtomicU32::new(0));
        // Sixteen tasks; the server answers in 40 ms, admits ten calls and
        // then refuses. The gate lets out 1, 2, 4 and 8 calls, one round
        // trip apart: 15 sends in 160 ms (94/s) before the first refusal.
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (th, admitted) = (th.clone(), Arc::clone(&admitted));
                tokio::spawn(async move {
                    th.run_with(
                        &0,
                        |ok: &bool| {
                            if *ok {
                                Outcome::success()
                            } else {
                                Outcome::throttled()
                            }
                        },
                        || {
                            let admitted = Arc::clone(&admitted);
                            async move {
                                tokio::time::sleep(Duration::from_millis(40)).await;
                                admitted.fetch_add(1, Ordering::Relaxed) < 10
                            }
                        },
                    )
                    .await
                })
            })
            .collect();
        let t0 = tokio::time::Instant::now();
        let rate = loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if let Some(r) = th.rate_of(&0) {
                break r;
            }
        };
        // Seen within the millisecond after the refusal at 160 ms.
        let seen = t0.elapsed();
        assert!(
            (160..=161).contains(&seen.as_millis()),
            "first paced at {seen:?}"
        );
        // Pacing starts at half the 94/s the sends went at; counted over
        // the meter's second, they would say 13/s, and the pace would start
        // at a seventh of what the server admitted.
        let sent = 15.0 / 0.160;
        assert!(
            (rate - sent / 2.0).abs() < 1.0,
            "paced from {rate}/s after {sent}/s"
        );
        for t in tasks {
            t.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_widens_by_at_most_one_per_gap() {
        let th: AsyncThrottle<u8> = AsyncThrottle::new(config()).unwrap();
        // Answered at once: the first success widens the window to two.
        let first = th.first_contact(&0).await.expect("the first call");
        let mut call = th.begin(th.now());
        th.record_at(&0, &mut call, th.now(), &Outcome::success());
        first.recorded(&Outcome::success());
        let a = th.first_contact(&0).await.expect("a window of two");
        let b = th.first_contact(&0).await.expect("a window of two");
        // Another success at once leaves it at two.
        a.recorded(&Outcome::success());
        let c = th.first_contact(&0).await.expect("a's place");
        let d = waiter(&th);
        tokio::task::yield_now().await;
        assert!(!d.is_finished(), "still a window of two");
        // A gap after the gate was made, a success widens it to three.
        tokio::time::advance(SLOW_START_WIDEN_GAP).await;
        b.recorded(&Outcome::success());
        // (The waiter let through ended its call unanswered: its place is
        // free again.)
        assert!(d.await.unwrap());
        let _e = th.first_contact(&0).await.expect("a window of three");
        let _f = th.first_contact(&0).await.expect("a window of three");
        let g = waiter(&th);
        tokio::task::yield_now().await;
        assert!(!g.is_finished(), "a window of three, full");
        drop(c);
    }

    #[tokio::test(start_paused = true)]
    async fn a_guard_only_dropped_after_its_answer_still_widens_the_window() {
        let th: AsyncThrottle<u8> = AsyncThrottle::new(config()).unwrap();
        let (first, _) = first_call_answered(&th).await;
        drop(first);
        // A window of two, as if `recorded` had been called; a third waits.
        let _a = th.first_contact(&0).await.expect("in the window");
        let _b = th.first_contact(&0).await.expect("in the window");
        let third = waiter(&th);
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "the window is full");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_given_up_in_the_window_frees_its_place() {
        let th: AsyncThrottle<u8> = AsyncThrottle::new(config()).unwrap();
        let first = th
            .first_contact(&0)
            .await
            .expect("the first call goes alone");
        let waiting = waiter(&th);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // Dropped unanswered (the caller went away): the next call goes,
        // and the window did not grow.
        drop(first);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_with_the_last_response() {
        let th: AsyncThrottle<()> = AsyncThrottle::new(config()).unwrap();
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
            budget: Some(crate::budget::RetryBudgetConfig {
                capacity: 5,
                ..Default::default()
            }),
            max_attempts: 10,
            ..config()
        })
        .unwrap();
        let err = th
            .run(&(), || async { Outcome::new(crate::Signal::ServerError) })
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
    async fn a_call_waiting_for_a_far_slot_takes_a_nearer_one_after_a_rise() {
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
            adaptation: Adaptation::Adaptive(AdaptiveConfig::default()),
            burst: Some(1),
            ..config()
        })
        .unwrap();
        // One send, refused: pacing starts slow (half the send rate
        // measured over the second).
        let now = th.now();
        let mut first = th.begin(now);
        th.acquire_at(&(), &mut first, now, now).unwrap();
        th.record_at(&(), &mut first, now, &Outcome::throttled());
        let slow = th.rate_of(&()).unwrap();
        // The retry takes the slot at the pause's end, a second call the
        // next, an interval at the slow pace later; the waiter's is after it.
        th.acquire_at(&(), &mut first, now, now).unwrap();
        let mut second = th.begin(now);
        let far = th.acquire_at(&(), &mut second, now, now).unwrap()
            + Duration::from_secs_f64(1.0 / slow);
        assert!(far >= Duration::from_secs(1), "{far:?} at {slow}/s");
        let t0 = tokio::time::Instant::now();
        let waiter = async {
            let now = th.now();
            let mut call = th.begin(now);
            th.wait_for_slot(&(), &mut call, now, now).await.unwrap();
            t0.elapsed()
        };
        // Meanwhile successes raise the pace past twice the one the
        // waiter's slot was taken at.
        let rise = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            for _ in 0..10_000 {
                if th.rate_of(&()).unwrap() > 2.5 * slow {
                    break;
                }
                let now = th.now();
                let mut c = th.begin(now);
                th.record_at(&(), &mut c, now, &Outcome::success());
            }
            th.rate_of(&()).unwrap()
        };
        let (sent, fast) = tokio::join!(waiter, rise);
        assert!(fast > 2.5 * slow, "{slow} -> {fast}");
        // It sent at the new pace, an interval after the rise (give or take
        // an eighth of its wait, when it looked again), not at its old slot.
        let rise_at = Duration::from_millis(100);
        let interval = Duration::from_secs_f64(1.0 / fast);
        assert!(
            sent >= rise_at + interval && sent <= rise_at + interval + far / 8,
            "sent at {sent:?}; slot {far:?} at {slow}/s, {interval:?} at {fast}/s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_reached_between_attempts_is_client_side() {
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(config()).unwrap();
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
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
        let th: AsyncThrottle<()> = AsyncThrottle::new(ThrottleConfig {
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
