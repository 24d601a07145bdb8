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
//! // Stands in for a hyper-util client: the first call is told to wait 2 s.
//! let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
//! let api = service_fn(move |_req: Request<String>| {
//!     let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
//!     async move {
//!         let status = if n == 0 { 429 } else { 200 };
//!         Response::builder().status(status).header("Retry-After", "2").body(())
//!     }
//! });
//! let throttle = AsyncThrottle::new(ThrottleConfig::default())?;
//! let client = ServiceBuilder::new()
//!     .layer(ThrottleLayer::per_authority(throttle))
//!     .service(api);
//!
//! let started = tokio::time::Instant::now();
//! let request = Request::get("http://api.example.com/items").body(String::new())?;
//! let response = client.oneshot(request).await?;
//! assert_eq!(response.status(), 200);
//! assert!(started.elapsed() >= Duration::from_secs(2)); // Retry-After honoured
//! # Ok(())
//! # }
//! ```
//!
//! # What it does with each request
//!
//! The loop is the core's [`ratewise_client::exchange::send`], the one the
//! reqwest middleware (`ratewise-reqwest`) runs too:
//!
//! 1. Picks the request's partition: its authority, `host:port`
//!    ([`authority_key`]), or any key ([`ThrottleLayer::with_key`]); waits
//!    out the partition's pause and pacer.
//! 2. Sends a copy of the request made by the layer's [`Replay`]: a clone
//!    when the body is `Clone` ([`CloneBody`], the default), your function
//!    ([`ThrottleLayer::replay_with`]), or none ([`NoReplay`]). A request
//!    that cannot be copied is sent once; if its answer asks for a retry the
//!    call ends with a [`Refused`] whose reason is
//!    [`RefusalReason::NotReplayable`].
//! 3. Classifies the response head with ratewise's [`Classifier`] — 429,
//!    503 with `Retry-After`, the `RateLimit`/`RateLimit-Policy` fields, the
//!    legacy `X-RateLimit-*` trio, and for gRPC a `grpc-status: 8`
//!    (`RESOURCE_EXHAUSTED`) in the headers, which is where a trailers-only
//!    response (every unary error) carries it, with `grpc-retry-pushback-ms`
//!    as the retry delay (negative: the server forbids retrying, gRFC A6) —
//!    and lets the throttle decide: done, retry after a delay, or stop.
//!
//! It returns the response that ended the call — a success, or the last
//! refusal when the server had the last word (an attempt limit you set, a
//! forbidden retry). A [`ClientError`] carries either the inner service's
//! error or a [`Refused`] when the client itself declined
//! ([`ClientError::is_client_side`]).
//!
//! A `grpc-status` sent only in the trailers after a streamed body is not
//! seen: the layer does not hold a response back to read its end.
//!
//! # gRPC (tonic)
//!
//! A tonic request body is a stream, not `Clone`: with
//! `.replay_by(NoReplay)` the layer paces and classifies every call but
//! retries none (a throttled one returns [`Refused`] with
//! [`RefusalReason::NotReplayable`]). To retry, buffer the unary message
//! below the layer, as the gRPC retry design does (gRFC A6 buffers each
//! call's messages for its retries): collect the body into a
//! `Full<Bytes>` (`http-body-util`), put the layer over that, and give the
//! channel a tonic body again — `tests/client_throttle.rs` does exactly
//! this:
//!
//! ```text
//! service_fn(collect body → Full<Bytes>)
//!   → ThrottleLayer::per_authority(throttle)          // B = Full<Bytes>: Clone
//!   → map_request(|r| r.map(tonic::body::Body::new))
//!   → tonic::transport::Channel
//! ```
//!
//! # Clones
//!
//! The layer and its services are `Clone` and cheap to clone (a few `Arc`s);
//! every clone shares the one [`AsyncThrottle`], so every task calling through a
//! clone shares its partitions' pace and pauses.
//!
//! # Metrics
//!
//! The `ratewise_client_*` family of [`ratewise_client::exchange`] (names
//! in [`ratewise_client::exchange::names`]), labelled by `partition`, and
//! its `tracing` events.

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
    type Service = ThrottleService<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        ThrottleService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The [`Service`] [`ThrottleLayer`] wraps around a client.
pub struct ThrottleService<S, K = String, R = CloneBody> {
    inner: S,
    layer: ThrottleLayer<K, R>,
}

impl<S: Clone, K, R: Clone> Clone for ThrottleService<S, K, R> {
    fn clone(&self) -> Self {
        ThrottleService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, K, R> fmt::Debug for ThrottleService<S, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, K, R> ThrottleService<S, K, R> {
    /// The throttle (its metrics, rates per partition, …).
    pub fn throttle(&self) -> &AsyncThrottle<K> {
        &self.layer.throttle
    }
}

/// The error of a [`ThrottleService`].
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

/// The response future of a [`ThrottleService`].
pub type ResponseFuture<T, E> =
    Pin<Box<dyn Future<Output = Result<T, ClientError<E>>> + Send + 'static>>;

impl<S, B, RB, K, R> Service<Request<B>> for ThrottleService<S, K, R>
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
