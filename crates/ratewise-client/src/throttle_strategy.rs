//! [`ThrottleStrategy`]: one partition of a [`Throttle`] seen as a
//! [`Strategy`], so the composed throttle (pacer, controller, pause, backoff,
//! budget, SRE) can be driven by the simulator in virtual time exactly like
//! the single strategies.
//!
//! It is a thin sans-IO mapping over [`Throttle::begin`],
//! [`Throttle::acquire_at`] and [`Throttle::record_at`]:
//!
//! * `before_call(now)` begins a call and takes its first slot; the answer is
//!   the pacer's (or a pause's) wait.
//! * `before_send(now)`, when a wait has passed, asks
//!   [`Throttle::recheck_at`] whether a cut or a pause re-planned the
//!   partition meanwhile; if so the call waits for its new slot.
//! * `after_attempt(now, outcome)` records the outcome. [`Step::Done`] is
//!   [`Next::Done`]; [`Step::GiveUp`] is [`Next::GiveUp`]; [`Step::Retry`]
//!   is [`Next::Retry`] with its delay, and the retry takes its slot when
//!   the delay has passed (`before_send`), as the async driver does: a slot
//!   reserved a delay ahead would hold the partition's pacer for every
//!   other call until then.
//! * The interface has no "do not send", so an attempt whose slot the
//!   throttle refuses (SRE rejection, a deadline) is expressed as a wait:
//!   the refusal is counted (metrics, SRE), and the call is sent
//!   [`ThrottleStrategy::refusal_delay`] later through the pause and the
//!   pacer like any attempt — what an application does with a call it
//!   still needs.
//!
//! Several `ThrottleStrategy` values may share one `Throttle` (it is a cheap
//! clone) and even one key: the partition's state is shared, as it is among
//! the tasks of a real client. One `ThrottleStrategy` may also be driven by
//! several simulated threads at once (the simulator's `per_process` state):
//! it keeps every call in flight, and since the interface does not say which
//! call a response belongs to, it matches each response to the call whose
//! attempt was due earliest — exact when latencies are equal, and never a
//! lost call otherwise.

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Duration;

use super::throttle::{Call, Step, Throttle};
use super::{Next, Outcome, Strategy};
use ratewise::time::Timestamp;

/// Where a call's next attempt stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// It holds a pacer slot and waits for it.
    Slotted,
    /// A retry waiting out its delay: it takes its slot when the delay has
    /// passed, as the async driver does (a slot reserved a delay ahead
    /// would hold the whole partition's pacer until then).
    Unslotted,
    /// Sent ([`Strategy::before_send`] said so).
    Sent,
}

/// One partition of a [`Throttle`] as a [`Strategy`].
#[derive(Debug)]
pub struct ThrottleStrategy<K = ()> {
    throttle: Throttle<K>,
    key: K,
    /// Calls in flight with the instant their attempt is due and where it
    /// stands.
    calls: VecDeque<(Timestamp, Attempt, Call)>,
    refusal_delay: Duration,
    refused: u64,
}

impl<K: Hash + Eq + Clone + Send + Sync> ThrottleStrategy<K> {
    /// `throttle`'s partition `key`; a refused call waits one second.
    pub fn new(throttle: Throttle<K>, key: K) -> Self {
        ThrottleStrategy {
            throttle,
            key,
            calls: VecDeque::new(),
            refusal_delay: Duration::from_secs(1),
            refused: 0,
        }
    }

    /// The same adapter with another wait after a refused first attempt.
    pub fn with_refusal_delay(mut self, delay: Duration) -> Self {
        self.refusal_delay = delay;
        self
    }

    /// The wait a refused first attempt turns into.
    pub fn refusal_delay(&self) -> Duration {
        self.refusal_delay
    }

    /// Attempts whose slot the throttle refused (and that were sent later).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The throttle.
    pub fn throttle(&self) -> &Throttle<K> {
        &self.throttle
    }

    /// The partition key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Calls begun and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.calls.len()
    }

    /// A slot for `call` at `now`; a slot the throttle refuses (SRE, the
    /// deadline) is taken anyway after the refusal delay, and counted, as
    /// for a first attempt: the interface has no "do not send".
    fn slot(&mut self, call: &mut Call, now: Timestamp) -> Duration {
        match self.throttle.acquire_at(&self.key, call, now, now) {
            Ok(wait) => wait,
            Err(_refusal) => {
                self.refused += 1;
                let later = now.saturating_add(self.refusal_delay);
                self.throttle
                    .acquire_unrefused_at(&self.key, call, now, later)
            }
        }
    }

    /// Keeps `calls` ordered by the instant each attempt is due.
    fn push(&mut self, due: Timestamp, attempt: Attempt, call: Call) {
        let at = self.calls.partition_point(|(d, _, _)| *d <= due);
        if self.calls.capacity() == 0 {
            // Most callers (one simulated client thread each) never hold
            // more than one call: a first allocation of one, not the
            // default four (a call is a few hundred bytes).
            self.calls.reserve_exact(1);
        }
        self.calls.insert(at, (due, attempt, call));
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> Strategy for ThrottleStrategy<K> {
    fn name(&self) -> &str {
        "throttle"
    }

    fn before_call(&mut self, now: Timestamp) -> Duration {
        let mut call = self.throttle.begin(now);
        let wait = self.slot(&mut call, now);
        self.push(now.saturating_add(wait), Attempt::Slotted, call);
        wait
    }

    fn after_attempt(&mut self, now: Timestamp, outcome: &Outcome) -> Next {
        // The response belongs to the call whose attempt was due earliest;
        // an attempt without `before_call` (a driver that skipped it) still
        // counts: it becomes a call begun now.
        // Sent ones first (a driver that never calls `before_send` marks
        // none: then simply the earliest due).
        let at = self
            .calls
            .iter()
            .position(|(_, attempt, _)| *attempt == Attempt::Sent)
            .unwrap_or(0);
        let mut call = match self.calls.remove(at) {
            Some((_, Attempt::Unslotted, mut call)) => {
                // A retry sent without `before_send`: its slot is taken
                // now, so that it is counted and paced.
                self.slot(&mut call, now);
                call
            }
            Some((_, _, call)) => call,
            None => self.throttle.begin(now),
        };
        match self.throttle.record_at(&self.key, &mut call, now, outcome) {
            Step::Done => Next::Done,
            Step::GiveUp(_) => Next::GiveUp,
            Step::Retry(delay) => {
                self.push(now.saturating_add(delay), Attempt::Unslotted, call);
                Next::Retry(delay)
            }
        }
    }

    fn before_send(&mut self, now: Timestamp) -> Duration {
        // The call being sent is the earliest due one not sent yet.
        let Some(at) = self
            .calls
            .iter()
            .position(|(due, attempt, _)| *attempt != Attempt::Sent && *due <= now)
        else {
            return Duration::ZERO;
        };
        let Some((due, attempt, mut call)) = self.calls.remove(at) else {
            return Duration::ZERO;
        };
        let more = match attempt {
            Attempt::Unslotted => self.slot(&mut call, now),
            _ => self.throttle.recheck_at(&self.key, &mut call, now),
        };
        if more.is_zero() {
            // Back in its place, sent.
            self.calls.insert(at, (due, Attempt::Sent, call));
        } else {
            self.push(now.saturating_add(more), Attempt::Slotted, call);
        }
        more
    }

    fn current_delay(&self) -> Duration {
        self.throttle.metrics().current_delay
    }

    fn current_rate(&self) -> Option<f64> {
        self.throttle.rate_of(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::{BackoffConfig, Jitter};
    use crate::sre::SreConfig;
    use crate::throttle::{Adaptation, ThrottleConfig};
    use crate::ServerHints;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn config() -> ThrottleConfig {
        ThrottleConfig {
            adaptation: Adaptation::Fixed(10.0),
            backoff: BackoffConfig::exponential(ms(100), 2.0).with_jitter(Jitter::None),
            pause_jitter: 0.0,
            burst: Some(1),
            max_attempts: 3,
            ..ThrottleConfig::default()
        }
    }

    #[test]
    fn paces_retries_and_gives_up_like_the_throttle() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap();
        let mut s = ThrottleStrategy::new(th.clone(), 7);
        assert_eq!(s.name(), "throttle");
        let t = Timestamp::ZERO;
        // 10/s, burst 1: calls are spaced 100 ms apart.
        assert_eq!(s.before_call(t), ms(0));
        assert_eq!(s.after_attempt(t, &Outcome::success()), Next::Done);
        assert_eq!(s.before_call(t), ms(100));
        let t1 = t + ms(100);
        // A throttle with Retry-After 2 s: the retry waits 2 s, and the
        // partition is paused for everybody.
        let throttled = Outcome::throttled().with_hints(ServerHints {
            retry_after: Some(Duration::from_secs(2)),
            ..ServerHints::default()
        });
        assert_eq!(
            s.after_attempt(t1, &throttled),
            Next::Retry(Duration::from_secs(2))
        );
        assert_eq!(th.try_acquire_at(&7, t1), Err(Duration::from_secs(2)));
        let t2 = t1 + Duration::from_secs(2);
        assert!(matches!(s.after_attempt(t2, &throttled), Next::Retry(_)));
        // Third attempt throttled: max_attempts = 3 reached.
        assert_eq!(s.after_attempt(t2, &throttled), Next::GiveUp);
        assert_eq!(s.current_rate(), Some(10.0));
        let m = th.metrics();
        assert_eq!((m.attempts, m.successes, m.throttled), (4, 1, 3));
        assert_eq!(m.gave_up, 1);
    }

    #[test]
    fn a_refused_call_becomes_a_wait_and_is_then_sent() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::None,
            sre: Some(SreConfig::default()),
            budget: None,
            max_attempts: 1,
            ..config()
        })
        .unwrap();
        let mut s = ThrottleStrategy::new(th.clone(), 0).with_refusal_delay(ms(500));
        let t = Timestamp::ZERO;
        let (mut waits, mut sent) = (0u64, 0u64);
        for _ in 0..200 {
            let w = s.before_call(t);
            if w == ms(500) {
                waits += 1;
            } else {
                assert_eq!(w, Duration::ZERO);
            }
            sent += 1;
            // A server error: refused by the backend, but no pause.
            let failed = Outcome::new(crate::Signal::ServerError);
            let next = s.after_attempt(t, &failed);
            assert_eq!(next, Next::GiveUp, "max_attempts = 1");
        }
        assert!(waits > 50, "{waits}");
        assert_eq!(s.refused(), waits);
        let m = th.metrics();
        assert_eq!(m.rejected_locally, waits);
        assert_eq!(m.attempts, sent, "every call was sent in the end");
    }

    #[test]
    fn a_refused_retry_gives_up() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::None,
            deadline: Some(ms(150)),
            ..config()
        })
        .unwrap();
        let mut s = ThrottleStrategy::new(th, 0);
        let t = Timestamp::ZERO;
        assert_eq!(s.before_call(t), Duration::ZERO);
        assert_eq!(
            s.after_attempt(t, &Outcome::throttled()),
            Next::Retry(ms(100))
        );
        // The next backoff, 200 ms, would pass the 150 ms deadline.
        assert_eq!(
            s.after_attempt(t + ms(100), &Outcome::throttled()),
            Next::GiveUp
        );
    }

    #[test]
    fn one_strategy_serves_many_calls_in_flight() {
        // Three simulated threads share one object (per-process state): each
        // call is kept until its own response, so none is lost or merged,
        // and a pause re-plans the slots the others hold.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            max_attempts: 2,
            ..config()
        })
        .unwrap();
        let mut s = ThrottleStrategy::new(th.clone(), 0);
        let t = Timestamp::ZERO;
        let waits: Vec<_> = (0..3).map(|_| s.before_call(t)).collect();
        assert_eq!(waits, [ms(0), ms(100), ms(200)]);
        assert_eq!(s.in_flight(), 3);
        assert_eq!(s.before_send(t), Duration::ZERO, "the first is sent");
        // The first call's response: throttled, retried (its second attempt)
        // after the 100 ms pause, at 150 ms.
        assert_eq!(
            s.after_attempt(t + ms(50), &Outcome::throttled()),
            Next::Retry(ms(100))
        );
        assert_eq!(s.in_flight(), 3);
        // The others' slots (100 and 200 ms) were handed out before the
        // pause: each takes a new one when it comes due, and the retry takes
        // its slot when its delay has passed (at 150 ms), as the async driver
        // does, not at the throttle (a slot reserved 100 ms ahead would hold
        // the pacer for everybody until then).
        assert_eq!(s.before_send(t + ms(100)), ms(50), "to the pause's end");
        assert_eq!(s.before_send(t + ms(150)), ms(100), "the retry's slot");
        assert_eq!(s.before_send(t + ms(150)), Duration::ZERO, "the second");
        assert_eq!(s.before_send(t + ms(200)), ms(150), "after the retry's");
        assert_eq!(s.before_send(t + ms(250)), Duration::ZERO, "the retry");
        assert_eq!(
            s.after_attempt(t + ms(260), &Outcome::success()),
            Next::Done
        );
        // The retry's answer: its second throttle reaches its own attempt
        // limit; it was not confused with the fresh call still waiting.
        assert_eq!(
            s.after_attempt(t + ms(300), &Outcome::throttled()),
            Next::GiveUp
        );
        // The second throttle paused the partition again (200 ms, until
        // 500 ms): the last call's slot at 350 ms moves to the pause's end.
        assert_eq!(s.before_send(t + ms(350)), ms(150));
        assert_eq!(s.before_send(t + ms(500)), Duration::ZERO);
        assert_eq!(
            s.after_attempt(t + ms(550), &Outcome::success()),
            Next::Done
        );
        assert_eq!(s.in_flight(), 0);
        let m = th.metrics();
        assert_eq!((m.attempts, m.successes, m.gave_up), (4, 2, 1));
    }
}
