//! ratewise's client [`AsyncThrottle`] as a [`reqwest_middleware::Middleware`]:
//! every request through the client is paced per host, a throttled response
//! (429, 503 with `Retry-After`, Google/GitHub 403s, …) pauses the host and is
//! retried after the server's `Retry-After` or the backoff, and the
//! `RateLimit-*` / `X-RateLimit-*` headers lower the pace before any 429.
//!
//! ```no_run
//! use ratewise_client::{AsyncThrottle, ThrottleConfig};
//! use ratewise_reqwest::ThrottleMiddleware;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let throttle = AsyncThrottle::new(ThrottleConfig::default())?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(ThrottleMiddleware::per_host(throttle))
//!     .build();
//! let response = client.get("http://127.0.0.1:8080/items").send().await?;
//! assert!(response.status().is_success());
//! # Ok(())
//! # }
//! ```
//!
//! The first call to a partition goes alone ([`AsyncThrottle::first_contact`]), so
//! a server that states its rate is paced from the start. Each request takes
//! a slot in its partition (host and port, or [`ThrottleMiddleware::with_key`]),
//! is sent as a copy ([`reqwest::Request::try_clone`]; a streamed body is sent
//! once and, if throttled, ends in [`Refused`] with
//! [`RefusalReason::NotReplayable`]), and its response is classified by the
//! [`ratewise_client::Classifier`]. The middleware returns the response that
//! ended the call — you see the last 429 as you would without it — or a
//! [`reqwest_middleware::Error::Middleware`] holding a [`Refused`]
//! ([`Refused::from_error`]) when the client declined to send. The loop is
//! [`ratewise_client::exchange::send`], shared with `ratewise-tower`, so
//! both report the same `ratewise_client_*` metrics and `tracing` events.

use std::fmt;
use std::sync::Arc;

use http::Extensions;
use ratewise_client::exchange::{self, Answer};
use ratewise_client::{AsyncThrottle, Classifier};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

pub use ratewise_client::exchange::RefusalReason;

/// The typed error inside [`reqwest_middleware::Error::Middleware`] when a
/// call ends without a response to return: the core's
/// [`exchange::Refused`] (its fields and [`is_client_side`](exchange::Refused::is_client_side)
/// are reached through `Deref`), plus [`Refused::from_error`] to find it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct Refused(pub exchange::Refused);

impl Refused {
    /// The `Refused` inside a middleware error, if that is what it is.
    pub fn from_error(error: &reqwest_middleware::Error) -> Option<&Refused> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Refused>(),
            _ => None,
        }
    }
}

impl std::ops::Deref for Refused {
    type Target = exchange::Refused;
    fn deref(&self) -> &exchange::Refused {
        &self.0
    }
}

type KeyFn<K> = dyn Fn(&Request) -> K + Send + Sync;

/// The middleware: a shared [`AsyncThrottle`] and how to pick a request's
/// partition.
pub struct ThrottleMiddleware<K = String> {
    throttle: AsyncThrottle<K>,
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
    pub fn per_host(throttle: AsyncThrottle<String>) -> Self {
        ThrottleMiddleware::with_key(throttle, host_key)
    }
}

impl<K> ThrottleMiddleware<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + fmt::Display + 'static,
{
    /// `throttle`, partitioned by `key(request)`.
    pub fn with_key(
        throttle: AsyncThrottle<K>,
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
    pub fn throttle(&self) -> &AsyncThrottle<K> {
        &self.throttle
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
        // Each attempt runs with its own copy of the extensions; the one
        // that ended the call hands its copy back to the caller.
        let shared: &Extensions = extensions;
        let result = exchange::send(
            &self.throttle,
            &key,
            req,
            Request::try_clone,
            |attempt| {
                let next = next.clone();
                let mut ext = shared.clone();
                async move { (next.run(attempt, &mut ext).await, ext) }
            },
            |(result, _): &(reqwest_middleware::Result<Response>, Extensions)| match result {
                Ok(r) => Answer::response(&self.classifier, r.status(), r.headers()),
                Err(_) => Answer::failure(),
            },
        )
        .await;
        match result {
            Ok((answer, ext)) => {
                *extensions = ext;
                answer
            }
            Err(refused) => Err(reqwest_middleware::Error::middleware(Refused(refused))),
        }
    }
}
