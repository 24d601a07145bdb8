//! The request loop every HTTP client driver shares (features `tokio` and
//! `http`): the reqwest middleware and the tower client layer are this loop
//! with their own way of copying, sending and reading a request.
//!
//! [`send`] drives one call through an [`AsyncThrottle`]'s partition: sleep
//! out a retry's delay, take a slot ([`Throttle::acquire_at`](crate::Throttle::acquire_at),
//! then [`Throttle::recheck_at`](crate::Throttle::recheck_at) after sleeping
//! to it), send a copy of the request, classify the answer, record it
//! ([`Throttle::record_at`](crate::Throttle::record_at)), then answer or go
//! round again. A request that cannot be copied is sent once (a retry it
//! needs ends the call: [`RefusalReason::NotReplayable`]). Drop is safe.
//!
//! With `observe` each call reports `ratewise_client_*` metrics ([`names`],
//! by partition) and `tracing` events (`debug` per retry, `warn` per refusal).
//!
//! ```
//! use std::time::Duration;
//! use ratewise_client::exchange::{send, Answer};
//! use ratewise_client::{AsyncThrottle, Outcome, ThrottleConfig};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let throttle: AsyncThrottle<String> = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
//! let key = "api.example.com:443".to_owned();
//! let mut sent = 0;
//! let answer = send(
//!     &throttle,
//!     &key,
//!     "GET /items",
//!     |request| Some(*request), // a &str copies: every attempt can be replayed
//!     |_request| { sent += 1; let status: u16 = if sent == 1 { 429 } else { 200 }; async move { status } },
//!     |status: &u16| Answer {
//!         outcome: if *status == 429 { Outcome::throttled() } else { Outcome::success() },
//!         status: http::StatusCode::from_u16(*status).ok(),
//!     },
//! )
//! .await;
//! assert_eq!(answer.unwrap(), 200); // the 429 was retried
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::hash::Hash;

use super::driver::AsyncThrottle;
use super::throttle::{Step, StopReason};
use super::{Outcome, Signal};

/// The metric names and label keys of the client drivers, in one place. The
/// server side's are `ratewise_*` (`ratewise-tower`'s `observe` module);
/// the client's are the `ratewise_client_*` family, labelled by
/// [`PARTITION`](names::PARTITION) as the server's are by policy.
pub mod names {
    /// Counter: attempts sent, retries included.
    pub const ATTEMPTS: &str = "ratewise_client_attempts_total";
    /// Counter: answers classified as throttled.
    pub const THROTTLED: &str = "ratewise_client_throttled_total";
    /// Counter: attempts sent again.
    pub const RETRIES: &str = "ratewise_client_retries_total";
    /// Counter: calls ended by a [`Refused`](super::Refused), label
    /// [`REASON`].
    pub const REFUSED: &str = "ratewise_client_refused_total";
    /// Histogram: seconds waited before each attempt.
    pub const WAIT_SECONDS: &str = "ratewise_client_wait_seconds";
    /// Gauge: the partition's pacing rate, requests per second.
    pub const RATE: &str = "ratewise_client_rate";
    /// Label: the partition (the key's `Display`, host and port by default).
    pub const PARTITION: &str = "partition";
    /// Label: why a call was refused ([`Refused::label`](super::Refused::label)).
    pub const REASON: &str = "reason";
}

/// Why a driver returned an error instead of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The throttle stopped the call ([`StopReason`] says why and which side).
    Stopped(StopReason),
    /// The answer asked for a retry, but the request's body cannot be sent
    /// again (a stream), so it was not retried. Client-side.
    NotReplayable,
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::Stopped(r) => r.fmt(f),
            RefusalReason::NotReplayable => f.write_str(
                "the response was throttled and the request's body cannot be replayed, so it was not retried",
            ),
        }
    }
}

/// A call that ended without an answer to return: the client declined to
/// send (deadline, retry budget, SRE rejection), or a retry was due and the
/// request could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ratewise: call to {partition} stopped after {attempts} attempt(s) ({side}): {reason}{}",
    last_status.map(|s| format!("; last status {s}")).unwrap_or_default(),
    side = if self.is_client_side() { "client-side refusal" } else { "server kept refusing" })]
pub struct Refused {
    /// Why.
    pub reason: RefusalReason,
    /// Attempts sent.
    pub attempts: u32,
    /// The status of the last answer, if any attempt was answered.
    pub last_status: Option<http::StatusCode>,
    /// The partition (its `Display`).
    pub partition: String,
}

impl Refused {
    /// `true` when the client declined to send the next attempt (deadline,
    /// retry budget, SRE rejection, a body that cannot be replayed); `false`
    /// when the server's refusals ended the call.
    pub fn is_client_side(&self) -> bool {
        match self.reason {
            RefusalReason::Stopped(r) => r.is_client_side(),
            RefusalReason::NotReplayable => true,
        }
    }

    /// The `reason` label of `ratewise_client_refused_total`: `not_replayable`,
    /// `max_attempts`, `deadline`, `budget_exhausted`, `rejected_locally`,
    /// `retry_forbidden`.
    pub fn label(&self) -> &'static str {
        match self.reason {
            RefusalReason::NotReplayable => "not_replayable",
            RefusalReason::Stopped(StopReason::MaxAttempts) => "max_attempts",
            RefusalReason::Stopped(StopReason::Deadline) => "deadline",
            RefusalReason::Stopped(StopReason::BudgetExhausted) => "budget_exhausted",
            RefusalReason::Stopped(StopReason::RejectedLocally) => "rejected_locally",
            RefusalReason::Stopped(StopReason::RetryForbidden) => "retry_forbidden",
        }
    }
}

/// What a driver read from one answer (a response or a transport error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// What it means for the throttle.
    pub outcome: Outcome,
    /// The HTTP status, if there was a response.
    pub status: Option<http::StatusCode>,
}

impl Answer {
    /// A response's status and headers, classified by `classifier`
    /// (status, then headers) with the hints it carries read at the
    /// wall-clock time now.
    pub fn response(
        classifier: &super::Classifier,
        status: http::StatusCode,
        headers: &http::HeaderMap,
    ) -> Self {
        Answer {
            outcome: classifier.outcome(
                status.as_u16(),
                headers,
                None,
                std::time::SystemTime::now(),
            ),
            status: Some(status),
        }
    }

    /// A transport error: no response, [`Signal::Failure`] (not retried by
    /// default).
    pub fn failure() -> Self {
        Answer {
            outcome: Outcome::new(Signal::Failure),
            status: None,
        }
    }
}

/// Sends `request` through `throttle`'s partition `key`, retrying as the
/// throttle says.
///
/// - `replay(&request)` makes the copy each attempt sends; `None` means the
///   request cannot be copied, and then the request itself is sent, once.
/// - `transmit(copy)` sends an attempt; its output `R` is whatever the driver
///   gets back (typically `Result<Response, TransportError>`).
/// - `read(&answer)` classifies it.
///
/// # Errors
/// `Ok` carries the answer that ended the call: a success, a failure the
/// throttle does not retry, or the last refusal when the server had the last
/// word ([`StopReason::is_client_side`] is `false`: an attempt limit, or the
/// server forbade retries) — the caller sees the 429 as it would without a
/// throttle. [`Refused`] when the client declined to send an attempt, or a
/// retry was due and the request could not be replayed.
pub async fn send<K, Q, R, Fut>(
    throttle: &AsyncThrottle<K>,
    key: &K,
    request: Q,
    mut replay: impl FnMut(&Q) -> Option<Q>,
    mut transmit: impl FnMut(Q) -> Fut,
    mut read: impl FnMut(&R) -> Answer,
) -> Result<R, Refused>
where
    K: Hash + Eq + Clone + Send + Sync + fmt::Display,
    Fut: Future<Output = R>,
{
    let obs = Observer::new(key);
    // "Ready to send" since: the wait histogram measures from here, a wait
    // behind another call's first contact included.
    let mut ready_at = throttle.now();
    // A partition never answered learns the server's limits from one attempt
    // before the others are sent (`AsyncThrottle::first_contact`): a server that
    // states its rate is paced from the start instead of answering a burst
    // with 429s. The guard is dropped once the first attempt is recorded.
    let mut first = throttle.first_contact(key).await;
    // The first call itself waited for nobody; any other may have been held.
    let mut now = if first.is_some() {
        ready_at
    } else {
        throttle.now()
    };
    // The call began when it was handed over (a deadline counts the wait).
    let mut call = throttle.begin(ready_at);
    let mut not_before = now;
    let mut last_status = None;
    // The original is kept to copy from; when it cannot be copied it is sent
    // itself, once.
    let mut original = Some(request);
    loop {
        now = match throttle
            .wait_for_slot(key, &mut call, not_before, now)
            .await
        {
            Ok(at) => at,
            Err(reason) => {
                return Err(obs.refuse(RefusalReason::Stopped(reason), &call, last_status))
            }
        };
        obs.attempt(now.saturating_duration_since(ready_at));
        let (attempt, replayable) = match original.as_ref().and_then(&mut replay) {
            Some(copy) => (copy, true),
            None => match original.take() {
                Some(request) => (request, false),
                // Unreachable: a request that cannot be copied is sent once
                // and the call ends after it.
                None => return Err(obs.refuse(RefusalReason::NotReplayable, &call, last_status)),
            },
        };
        let answer = transmit(attempt).await;
        let Answer { outcome, status } = read(&answer);
        obs.throttled(outcome.signal);
        now = throttle.now();
        ready_at = now;
        let step = throttle.record_at(key, &mut call, now, &outcome);
        if let Some(f) = first.take() {
            f.recorded(&outcome);
        }
        obs.rate(throttle.rate_of(key));
        match step {
            Step::Done => return Ok(answer),
            Step::Retry(_) if !replayable => {
                return Err(obs.refuse(RefusalReason::NotReplayable, &call, status))
            }
            Step::Retry(delay) => {
                obs.retry(&call, delay, outcome.signal);
                last_status = status;
                not_before = now.saturating_add(delay);
            }
            // The server had the last word: hand its answer back.
            Step::GiveUp(reason) if !reason.is_client_side() => return Ok(answer),
            Step::GiveUp(reason) => {
                return Err(obs.refuse(RefusalReason::Stopped(reason), &call, status))
            }
        }
    }
}

/// Reports one call's events (feature `observe`: metrics and tracing; without
/// it, only the partition's name for a [`Refused`]).
struct Observer {
    partition: String,
}

impl Observer {
    fn new<K: fmt::Display>(key: &K) -> Self {
        Observer {
            partition: key.to_string(),
        }
    }

    fn refuse(
        &self,
        reason: RefusalReason,
        call: &super::throttle::Call,
        last_status: Option<http::StatusCode>,
    ) -> Refused {
        let refused = Refused {
            reason,
            attempts: call.attempts(),
            last_status,
            partition: self.partition.clone(),
        };
        #[cfg(feature = "observe")]
        {
            metrics::counter!(names::REFUSED,
                names::PARTITION => self.partition.clone(), names::REASON => refused.label())
            .increment(1);
            tracing::warn!(partition = %self.partition, attempts = refused.attempts,
                reason = %reason, client_side = refused.is_client_side(), "ratewise: call refused");
        }
        refused
    }

    #[cfg_attr(not(feature = "observe"), allow(unused_variables))]
    fn attempt(&self, waited: std::time::Duration) {
        #[cfg(feature = "observe")]
        {
            metrics::histogram!(names::WAIT_SECONDS, names::PARTITION => self.partition.clone())
                .record(waited.as_secs_f64());
            metrics::counter!(names::ATTEMPTS, names::PARTITION => self.partition.clone())
                .increment(1);
        }
    }

    #[cfg_attr(not(feature = "observe"), allow(unused_variables))]
    fn throttled(&self, signal: Signal) {
        #[cfg(feature = "observe")]
        if signal == Signal::Throttled {
            metrics::counter!(names::THROTTLED, names::PARTITION => self.partition.clone())
                .increment(1);
        }
    }

    #[cfg_attr(not(feature = "observe"), allow(unused_variables))]
    fn rate(&self, rate: Option<f64>) {
        #[cfg(feature = "observe")]
        metrics::gauge!(names::RATE, names::PARTITION => self.partition.clone())
            .set(rate.unwrap_or(0.0));
    }

    #[cfg_attr(not(feature = "observe"), allow(unused_variables))]
    fn retry(&self, call: &super::throttle::Call, delay: std::time::Duration, signal: Signal) {
        #[cfg(feature = "observe")]
        {
            metrics::counter!(names::RETRIES, names::PARTITION => self.partition.clone())
                .increment(1);
            tracing::debug!(partition = %self.partition, attempt = call.attempts(),
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                signal = ?signal, "ratewise: retrying");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::{BackoffConfig, Jitter};
    use crate::throttle::ThrottleConfig;
    use crate::ServerHints;
    use std::time::Duration;

    fn throttle(config: ThrottleConfig) -> AsyncThrottle<String> {
        AsyncThrottle::new(ThrottleConfig {
            backoff: BackoffConfig::constant(Duration::from_millis(100)).with_jitter(Jitter::None),
            pause_jitter: 0.0,
            ..config
        })
        .unwrap()
    }

    /// An answer is its status: 429 carries `Retry-After: 1`.
    fn read(status: &u16) -> Answer {
        let outcome = if *status == 429 {
            Outcome::throttled().with_hints(ServerHints {
                retry_after: Some(Duration::from_secs(1)),
                ..ServerHints::default()
            })
        } else {
            Outcome::success()
        };
        Answer {
            outcome,
            status: http::StatusCode::from_u16(*status).ok(),
        }
    }

    /// Answers the scripted statuses in turn, noting each request sent.
    async fn run(
        th: &AsyncThrottle<String>,
        script: &[u16],
        replayable: bool,
    ) -> (Result<u16, Refused>, Vec<u32>) {
        let mut sent = Vec::new();
        let mut n = 0;
        let r = send(
            th,
            &"api:443".to_owned(),
            7u32,
            |q| replayable.then_some(*q),
            |q| {
                sent.push(q);
                let status = script[n.min(script.len() - 1)];
                n += 1;
                async move { status }
            },
            read,
        )
        .await;
        (r, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_is_retried_after_its_retry_after_with_a_copy() {
        let th = throttle(ThrottleConfig::default());
        let t0 = tokio::time::Instant::now();
        let (r, sent) = run(&th, &[429, 200], true).await;
        assert_eq!(r, Ok(200));
        assert_eq!(sent, [7, 7]);
        // The retry goes at the later of its `Retry-After` (1 s) and the
        // first slot of the pace that 429 started: a lone call measured no
        // send rate, so pacing starts at the fallback rate times the
        // decrease, from an empty pacer (one interval after the 429).
        let c = crate::adaptive::AdaptiveConfig::default();
        let first_slot = Duration::from_secs_f64(1.0 / (c.fallback_rate * c.decrease_factor));
        assert_eq!(t0.elapsed(), first_slot.max(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_cannot_be_copied_is_sent_once_and_refused() {
        let th = throttle(ThrottleConfig::default());
        let (r, sent) = run(&th, &[429, 200], false).await;
        let refused = r.unwrap_err();
        assert_eq!(refused.reason, RefusalReason::NotReplayable);
        assert!(refused.is_client_side());
        assert_eq!(refused.label(), "not_replayable");
        assert_eq!(
            (refused.attempts, refused.last_status),
            (1, Some(http::StatusCode::TOO_MANY_REQUESTS))
        );
        assert_eq!(refused.partition, "api:443");
        assert_eq!(sent, [7]);
        // Sent once and answered: nothing to replay, nothing refused.
        let th = throttle(ThrottleConfig::default());
        assert_eq!(run(&th, &[200], false).await.0, Ok(200));
    }

    #[tokio::test(start_paused = true)]
    async fn the_server_having_the_last_word_returns_its_answer() {
        let th = throttle(ThrottleConfig {
            max_attempts: 2,
            ..ThrottleConfig::default()
        });
        let (r, sent) = run(&th, &[429], true).await;
        assert_eq!(r, Ok(429), "the last 429, as without a throttle");
        assert_eq!(sent.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_side_stop_is_a_refusal_with_the_last_status() {
        let th = throttle(ThrottleConfig {
            deadline: Some(Duration::from_millis(500)),
            ..ThrottleConfig::default()
        });
        let (r, sent) = run(&th, &[429], true).await;
        let refused = r.unwrap_err();
        assert_eq!(refused.reason, RefusalReason::Stopped(StopReason::Deadline));
        assert!(refused.is_client_side());
        assert_eq!(
            refused.last_status,
            Some(http::StatusCode::TOO_MANY_REQUESTS)
        );
        assert_eq!(sent.len(), 1);
        let text = refused.to_string();
        assert!(
            text.contains("client-side") && text.contains("429"),
            "{text}"
        );
    }
}
