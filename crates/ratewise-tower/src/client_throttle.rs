//! The client half: ratewise's [`AsyncThrottle`] as a tower [`Layer`] around any
//! HTTP client [`Service`] (a hyper-util client, a tonic `Channel`, …).
//!
//! ```
//! use std::time::Duration;
//! use http::{Request, Response};
//! use ratewise_client::{AsyncThrottle, ThrottleConfig};
//! use ratewise_tower::client_throttle::ThrottleLayer;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // Stands in for an HTTP client: the first call is told to wait 2 s.
//! let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
//! let api = service_fn(move |_req: Request<String>| {
//!     let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
//!     async move { Response::builder().status(if first { 429 } else { 200 }).header("Retry-After", "2").body(()) }
//! });
//! let throttle = AsyncThrottle::new(ThrottleConfig::default())?;
//! let client = ServiceBuilder::new()
//!     .layer(ThrottleLayer::per_authority(throttle))
//!     .service(api);
//!
//! let started = tokio::time::Instant::now();
//! let response = client.oneshot(Request::get("http://api.example.com/").body(String::new())?).await?;
//! assert_eq!(response.status(), 200);
//! assert!(started.elapsed() >= Duration::from_secs(2)); // Retry-After honoured
//! # Ok(())
//! # }
//! ```
//!
//! Each request runs [`ratewise_client::exchange::send`] in its partition
//! ([`authority_key`], or [`ThrottleLayer::with_key`]): wait for the pause
//! and the pacer, send a copy made by the [`Replay`] ([`CloneBody`],
//! [`ThrottleLayer::replay_with`] or [`NoReplay`]), classify the head with
//! the [`Classifier`], retry or stop. The result is the last response or a
//! [`ClientError`] (the inner error, or a [`Refused`], e.g.
//! [`RefusalReason::NotReplayable`]). Clones share the one throttle. To
//! retry tonic calls, buffer the message into a `Full<Bytes>` below it.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{request, Request, Response};
use ratewise_client::exchange::{self, Answer};
use ratewise_client::{AsyncThrottle, Classifier};
use tower::{Layer, Service};

pub use ratewise_client::exchange::{RefusalReason, Refused};

/// How the layer copies a request for each attempt.
pub trait Replay<B>: Clone + Send + Sync + 'static {
    /// A copy of `request` to send, or `None` when it cannot be copied (it
    /// is then sent once and never retried).
    fn replay(&self, request: &Request<B>) -> Option<Request<B>>;
}

/// Replays a request by cloning it: the default, for `Clone` bodies
/// (`Full<Bytes>`, `String`, `Vec<u8>`, …).
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneBody;

impl<B: Clone> Replay<B> for CloneBody {
    fn replay(&self, request: &Request<B>) -> Option<Request<B>> {
        Some(request.clone())
    }
}

/// Never replays: each request is sent once.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoReplay;

impl<B> Replay<B> for NoReplay {
    fn replay(&self, _: &Request<B>) -> Option<Request<B>> {
        None
    }
}

/// Replays with a function of yours ([`ThrottleLayer::replay_with`]).
pub struct ReplayFn<F>(Arc<F>);

impl<F> Clone for ReplayFn<F> {
    fn clone(&self) -> Self {
        ReplayFn(Arc::clone(&self.0))
    }
}

impl<F> fmt::Debug for ReplayFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplayFn")
    }
}

impl<B, F> Replay<B> for ReplayFn<F>
where
    F: Fn(&Request<B>) -> Option<Request<B>> + Send + Sync + 'static,
{
    fn replay(&self, request: &Request<B>) -> Option<Request<B>> {
        (self.0)(request)
    }
}

/// A request's authority, `host:port` (`"api.example.com:443"`; the port
/// from the scheme when the URI has none), the default partition key. A
/// URI without a host (a tonic client with no origin set sends the path
/// only) falls back to the `Host` header, then to the empty string.
pub fn authority_key(parts: &request::Parts) -> String {
    let uri = &parts.uri;
    let Some(host) = uri.host() else {
        return parts
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_owned();
    };
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    });
    match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

type KeyFn<K> = dyn Fn(&request::Parts) -> K + Send + Sync;

/// The [`Layer`]: a shared [`AsyncThrottle`], how to pick a request's partition,
/// how to classify a response and how to copy a request.
pub struct ThrottleLayer<K = String, R = CloneBody> {
    throttle: AsyncThrottle<K>,
    key: Arc<KeyFn<K>>,
    classifier: Arc<Classifier>,
    replay: R,
}

impl<K, R: Clone> Clone for ThrottleLayer<K, R> {
    fn clone(&self) -> Self {
        ThrottleLayer {
            throttle: self.throttle.clone(),
            key: Arc::clone(&self.key),
            classifier: Arc::clone(&self.classifier),
            replay: self.replay.clone(),
        }
    }
}

impl<K, R> fmt::Debug for ThrottleLayer<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("throttle", &self.throttle)
            .finish_non_exhaustive()
    }
}

impl ThrottleLayer<String, CloneBody> {
    /// `throttle`, partitioned per authority ([`authority_key`]), replaying
    /// by cloning the request.
    pub fn per_authority(throttle: AsyncThrottle<String>) -> Self {
        ThrottleLayer::with_key(throttle, authority_key)
    }
}

impl<K> ThrottleLayer<K, CloneBody>
where
    K: Hash + Eq + Clone + Send + Sync + fmt::Display + 'static,
{
    /// `throttle`, partitioned by `key(&parts)` (the request without its
    /// body: method, URI, headers, extensions), replaying by cloning.
    pub fn with_key(
        throttle: AsyncThrottle<K>,
        key: impl Fn(&request::Parts) -> K + Send + Sync + 'static,
    ) -> Self {
        ThrottleLayer {
            throttle,
            key: Arc::new(key),
            classifier: Arc::new(Classifier::new()),
            replay: CloneBody,
        }
    }
}

impl<K, R> ThrottleLayer<K, R> {
    /// The same layer copying requests with `replay` (`None`: this request
    /// cannot be copied). For bodies that are not `Clone`, such as tonic's.
    pub fn replay_with<B, F>(self, replay: F) -> ThrottleLayer<K, ReplayFn<F>>
    where
        F: Fn(&Request<B>) -> Option<Request<B>> + Send + Sync + 'static,
    {
        self.replay_by(ReplayFn(Arc::new(replay)))
    }

    /// The same layer copying requests with any [`Replay`] (e.g. [`NoReplay`]).
    pub fn replay_by<R2>(self, replay: R2) -> ThrottleLayer<K, R2> {
        ThrottleLayer {
            throttle: self.throttle,
            key: self.key,
            classifier: self.classifier,
            replay,
        }
    }

    /// The same layer with another classifier (say, one with a predicate
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

impl<S, K, R: Clone> Layer<S> for ThrottleLayer<K, R> {
    type Service = Throttle<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            layer: self.clone(),
        }
    }
}

/// The [`Service`] [`ThrottleLayer`] wraps around a client.
pub struct Throttle<S, K = String, R = CloneBody> {
    inner: S,
    layer: ThrottleLayer<K, R>,
}

impl<S: Clone, K, R: Clone> Clone for Throttle<S, K, R> {
    fn clone(&self) -> Self {
        Throttle {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, K, R> fmt::Debug for Throttle<S, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, K, R> Throttle<S, K, R> {
    /// The throttle (its metrics, rates per partition, …).
    pub fn throttle(&self) -> &AsyncThrottle<K> {
        &self.layer.throttle
    }
}

/// The error of a [`Throttle`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError<E> {
    /// The call ended without a response to return (see
    /// [`Refused::is_client_side`]).
    #[error(transparent)]
    Refused(Refused),
    /// The inner service failed (not ready, or the attempt that ended the
    /// call failed in transport).
    #[error("the inner client failed: {0}")]
    Service(#[source] E),
}

impl<E> ClientError<E> {
    /// `true` when the client declined to send (deadline, retry budget, SRE
    /// rejection, a request that could not be replayed); `false` for an
    /// inner failure or when the server's refusals ended the call.
    pub fn is_client_side(&self) -> bool {
        match self {
            ClientError::Refused(r) => r.is_client_side(),
            ClientError::Service(_) => false,
        }
    }

    /// The refusal, if that is what this is.
    pub fn refused(&self) -> Option<&Refused> {
        match self {
            ClientError::Refused(r) => Some(r),
            ClientError::Service(_) => None,
        }
    }
}

/// The response future of a [`Throttle`].
pub type ResponseFuture<T, E> =
    Pin<Box<dyn Future<Output = Result<T, ClientError<E>>> + Send + 'static>>;

impl<S, B, RB, K, R> Service<Request<B>> for Throttle<S, K, R>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
    K: Hash + Eq + Clone + Send + Sync + fmt::Display + 'static,
    R: Replay<B>,
{
    type Response = Response<RB>;
    type Error = ClientError<S::Error>;
    type Future = ResponseFuture<Response<RB>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ClientError::Service)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service `poll_ready` readied sends the first attempt; clones
        // of it, readied in turn, send the retries.
        let template = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, template.clone());
        let layer = self.layer.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let key = (layer.key)(&parts);
            let mut ready = Some(ready);
            let result = exchange::send(
                &layer.throttle,
                &key,
                Request::from_parts(parts, body),
                |r| layer.replay.replay(r),
                move |attempt| {
                    let (mut svc, is_ready) = match ready.take() {
                        Some(s) => (s, true),
                        None => (template.clone(), false),
                    };
                    async move {
                        if !is_ready {
                            std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
                        }
                        svc.call(attempt).await
                    }
                },
                |result: &Result<Response<RB>, S::Error>| match result {
                    Ok(r) => Answer::response(&layer.classifier, r.status(), r.headers()),
                    Err(_) => Answer::failure(),
                },
            )
            .await;
            match result {
                Ok(answer) => answer.map_err(ClientError::Service),
                Err(refused) => Err(ClientError::Refused(refused)),
            }
        })
    }
}
