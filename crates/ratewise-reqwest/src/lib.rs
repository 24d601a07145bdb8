//! ratewise's client [`Throttle`] as a [`reqwest_middleware::Middleware`]:
//! every request through the client is paced per host, a throttled response
//! (429, 503 with `Retry-After`, Google/GitHub 403s, …) pauses the host and is
//! retried after the server's `Retry-After` or the backoff, and the
//! `RateLimit-*` / `X-RateLimit-*` headers lower the pace before any 429.
//!
//! ```no_run
//! use ratewise::client::{Throttle, ThrottleConfig};
//! use ratewise_reqwest::ThrottleMiddleware;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let throttle = Throttle::new(ThrottleConfig::default())?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(ThrottleMiddleware::per_host(throttle))
//!     .build();
//! let response = client.get("http://127.0.0.1:8080/items").send().await?;
//! assert!(response.status().is_success());
//! # Ok(())
//! # }
//! ```
//!
//! # What it does with each request
//!
//! 0. The first call to a partition that has never been answered goes
//!    alone; the others wait for its answer ([`Throttle::first_contact`]), so a
//!    server that states its rate (`RateLimit-Policy: "p";q=100;w=1`) is
//!    paced from the start instead of answering a burst with 429s. It costs
//!    one round trip, once per partition.
//! 1. Takes a slot in the request's partition (its host and port by default,
//!    [`ThrottleMiddleware::with_key`] for any other key): waits out a pause
//!    and the pacer ([`Throttle::acquire_at`]).
//! 2. Sends a copy of the request ([`reqwest::Request::try_clone`]) so it can
//!    be sent again; a request whose body cannot be copied (a stream) is sent
//!    once and never retried: if it is throttled, the middleware returns
//!    [`Refused`] with [`RefusalReason::NotReplayable`].
//! 3. Classifies the response with ratewise's
//!    [`ratewise::client::Classifier`] (status, then headers) and
//!    reads its hints ([`ratewise::client::parse_hints`]); the throttle decides:
//!    done, retry after a delay, or give up.
//!
//! It returns the response that ended the call — a success, or the last
//! refusal when the server had the last word (an attempt limit you set, or
//! the server forbade retries): you see the 429 as you would without the
//! middleware. When the *client* declined to send (your deadline would pass,
//! the retry budget is spent, the SRE throttle rejected it) or the body could
//! not be replayed, it returns a [`reqwest_middleware::Error::Middleware`]
//! holding a [`Refused`] (find it with [`Refused::from_error`]), whose
//! [`Refused::is_client_side`] says which side refused.
//!
//! # Metrics
//!
//! With a [`metrics`] recorder installed, per partition (label `partition`):
//! counters `ratewise_client_attempts_total`, `ratewise_client_throttled_total`,
//! `ratewise_client_retries_total`, `ratewise_client_refused_total` (label
//! `reason`), the histogram `ratewise_client_wait_seconds` (time spent waiting
//! before an attempt) and the gauge `ratewise_client_rate` (the partition's
//! pacing rate, requests per second; 0 while not pacing). `tracing` events:
//! `debug` for each retry, `warn` for each refusal.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use http::Extensions;
use ratewise::client::throttle::Step;
use ratewise::client::{Classifier, Outcome, StopReason, Throttle};
use reqwest::{Request, Response, StatusCode};
use reqwest_middleware::{Middleware, Next};

/// Why the middleware returned an error instead of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The throttle stopped the call ([`StopReason`] says why and which side).
    Stopped(StopReason),
    /// The response was throttled, but the request's body cannot be sent
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

/// The typed error inside [`reqwest_middleware::Error::Middleware`] when a
/// call ends without a response to return.
#[derive(Clone, Debug, thiserror::Error)]
#[error("ratewise: call to {partition} stopped after {attempts} attempt(s) ({side}): {reason}{}",
    last_status.map(|s| format!("; last status {s}")).unwrap_or_default(),
    side = if self.is_client_side() { "client-side refusal" } else { "server kept refusing" })]
pub struct Refused {
    /// Why.
    pub reason: RefusalReason,
    /// Attempts sent.
    pub attempts: u32,
    /// The status of the last response, if any attempt was answered.
    pub last_status: Option<StatusCode>,
    /// The partition (the host by default).
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

    /// The `Refused` inside a middleware error, if that is what it is.
    pub fn from_error(error: &reqwest_middleware::Error) -> Option<&Refused> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Refused>(),
            _ => None,
        }
    }

    fn label(&self) -> &'static str {
        match self.reason {
            RefusalReason::NotReplayable => "not_replayable",
            RefusalReason::Stopped(StopReason::MaxAttempts) => "max_attempts",
            RefusalReason::Stopped(StopReason::Deadline) => "deadline",
            RefusalReason::Stopped(StopReason::BudgetExhausted) => "budget_exhausted",
            RefusalReason::Stopped(StopReason::RejectedLocally) => "rejected_locally",
            RefusalReason::Stopped(StopReason::RetryForbidden) => "retry_forbidden",
            RefusalReason::Stopped(_) => "other",
        }
    }
}

type KeyFn<K> = dyn Fn(&Request) -> K + Send + Sync;

/// The middleware: a shared [`Throttle`] and how to pick a request's
/// partition.
pub struct ThrottleMiddleware<K = String> {
    throttle: Throttle<K>,
    key: Arc<KeyFn<K>>,
    classifier: Arc<Classifier>,
}

impl<K> Clone for ThrottleMiddleware<K> {
    fn clone(&self) -> Self {
        ThrottleMiddleware {
            throttle: self.throttle.clone(),
            key: Arc::clone(&self.key),
            classifier: Arc::clone(&self.classifier),
        }
    }
}

impl<K> fmt::Debug for ThrottleMiddleware<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleMiddleware")
            .field("throttle", &self.throttle)
            .finish_non_exhaustive()
    }
}

/// A request's host and port (`"api.example.com:443"`), the default
/// partition key.
pub fn host_key(request: &Request) -> String {
    let url = request.url();
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => String::new(),
    }
}

impl ThrottleMiddleware<String> {
    /// `throttle`, partitioned per host and port.
    pub fn per_host(throttle: Throttle<String>) -> Self {
        ThrottleMiddleware::with_key(throttle, host_key)
    }
}

impl<K> ThrottleMiddleware<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + fmt::Display + 'static,
{
    /// `throttle`, partitioned by `key(request)`.
    pub fn with_key(
        throttle: Throttle<K>,
        key: impl Fn(&Request) -> K + Send + Sync + 'static,
    ) -> Self {
        ThrottleMiddleware {
            throttle,
            key: Arc::new(key),
            classifier: Arc::new(Classifier::new()),
        }
    }

    /// The same middleware with another classifier (say, one with a predicate
    /// for an API's own "slow down" response).
    pub fn with_classifier(mut self, classifier: Classifier) -> Self {
        self.classifier = Arc::new(classifier);
        self
    }

    /// The throttle (its metrics, rates per partition, …).
    pub fn throttle(&self) -> &Throttle<K> {
        &self.throttle
    }

    fn refuse(
        &self,
        partition: &K,
        reason: RefusalReason,
        attempts: u32,
        last_status: Option<StatusCode>,
    ) -> reqwest_middleware::Error {
        let refused = Refused {
            reason,
            attempts,
            last_status,
            partition: partition.to_string(),
        };
        metrics::counter!("ratewise_client_refused_total",
            "partition" => refused.partition.clone(), "reason" => refused.label())
        .increment(1);
        tracing::warn!(partition = %refused.partition, attempts, reason = %reason,
            client_side = refused.is_client_side(), "ratewise: call refused");
        reqwest_middleware::Error::middleware(refused)
    }
}

#[async_trait::async_trait]
impl<K> Middleware for ThrottleMiddleware<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + fmt::Display + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = (self.key)(&req);
        let label = key.to_string();
        let th = &self.throttle;
        let mut now = th.now();
        let mut call = th.begin(now);
        let mut not_before = now;
        let mut last_status = None;
        // The original is kept to copy from; when it cannot be copied it is
        // sent itself, once.
        let mut original = Some(req);
        // A partition never answered learns the server's limits from one
        // attempt before the others are sent.
        let mut first = th.first_contact(&key).await;
        loop {
            if not_before > now {
                tokio::time::sleep(not_before.saturating_duration_since(now)).await;
                now = th.now();
            }
            let wait = match th.acquire_at(&key, &mut call, now, now) {
                Ok(wait) => wait,
                Err(reason) => {
                    return Err(self.refuse(
                        &key,
                        RefusalReason::Stopped(reason),
                        call.attempts(),
                        last_status,
                    ))
                }
            };
            metrics::histogram!("ratewise_client_wait_seconds", "partition" => label.clone())
                .record(wait.as_secs_f64());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let (attempt, replayable) = match original.as_ref().and_then(Request::try_clone) {
                Some(copy) => (copy, true),
                None => match original.take() {
                    Some(req) => (req, false),
                    // Unreachable: a request that cannot be copied is sent
                    // once and the call ends after it.
                    None => {
                        return Err(self.refuse(
                            &key,
                            RefusalReason::NotReplayable,
                            call.attempts(),
                            last_status,
                        ))
                    }
                },
            };
            metrics::counter!("ratewise_client_attempts_total", "partition" => label.clone())
                .increment(1);
            let result = next.clone().run(attempt, extensions).await;
            let outcome = match &result {
                Ok(r) => self.classifier.outcome(
                    r.status().as_u16(),
                    r.headers(),
                    None,
                    SystemTime::now(),
                ),
                Err(_) => Outcome::new(ratewise::client::Signal::Failure),
            };
            if outcome.signal == ratewise::client::Signal::Throttled {
                metrics::counter!("ratewise_client_throttled_total", "partition" => label.clone())
                    .increment(1);
            }
            now = th.now();
            let step = th.record_at(&key, &mut call, now, &outcome);
            drop(first.take());
            metrics::gauge!("ratewise_client_rate", "partition" => label.clone())
                .set(th.rate_of(&key).unwrap_or(0.0));
            match step {
                Step::Done => return result,
                Step::Retry(_) if !replayable => {
                    let status = result.as_ref().ok().map(Response::status);
                    return Err(self.refuse(
                        &key,
                        RefusalReason::NotReplayable,
                        call.attempts(),
                        status,
                    ));
                }
                Step::Retry(delay) => {
                    metrics::counter!("ratewise_client_retries_total", "partition" => label.clone())
                        .increment(1);
                    tracing::debug!(partition = %label, attempt = call.attempts(),
                        delay_ms = delay.as_millis() as u64, signal = ?outcome.signal,
                        "ratewise: retrying");
                    last_status = result.as_ref().ok().map(Response::status);
                    not_before = now.saturating_add(delay);
                }
                Step::GiveUp(reason) if !reason.is_client_side() => {
                    // The server had the last word: hand its answer (or the
                    // transport's error) back.
                    return result;
                }
                Step::GiveUp(reason) => {
                    let status = result.as_ref().ok().map(Response::status);
                    return Err(self.refuse(
                        &key,
                        RefusalReason::Stopped(reason),
                        call.attempts(),
                        status,
                    ));
                }
            }
        }
    }
}
