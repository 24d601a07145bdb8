//! [`ClientConcurrencyLayer`]: don't overload a dependency. An adaptive
//! concurrency limit on the *outbound* side of a tower `Service` over
//! `http` (a hyper client, a tonic channel, any HTTP client service).
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response, StatusCode};
//! use ratewise::concurrency::Fixed;
//! use ratewise_tower::client_concurrency::{ClientConcurrencyLayer, ClientError};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In production: `ClientConcurrencyLayer::new("payments")`, with Knee.
//! let layer = ClientConcurrencyLayer::with_algorithm("payments", Fixed(1));
//! let mut client = ServiceBuilder::new().layer(layer.clone()).service_fn(|_req: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("paid"))) // stands for the HTTP client
//! });
//! // One call in flight: the next one fails at once, locally.
//! let first = client.ready().await?.call(Request::new(String::new()));
//! let second = client.ready().await?.call(Request::new(String::new())).await;
//! assert!(matches!(second, Err(ClientError::Refused(r)) if (r.limit, r.inflight) == (1, 1)));
//! assert_eq!(first.await?.status(), StatusCode::OK);
//! assert_eq!(layer.inflight(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! Each call takes a permit from the layer's [`ConcurrencyLimiter`] (driven
//! by [`Knee`] unless another [`LimitAlgorithm`] is given); without one it
//! fails at once with [`ClientError::Refused`] (limit and in-flight count),
//! and the dependency sees no extra request. When the response arrives, a
//! `5xx`, `429`, inner error or response slower than
//! [`timeout`](ClientConcurrencyLayer::timeout) completes the permit as a
//! **drop** (an overload signal), another `4xx` is **ignored**, anything else
//! is a **success** with its latency; a dropped future frees its slot. Put a
//! timeout layer *inside* this one. Clones share one limiter. Metrics
//! `ratewise_client_{admitted,refused,dropped}_total{dependency}` and the
//! gauge `ratewise_client_limit{dependency}`; one refusal warning per second.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use metrics::{Counter, Gauge};
use pin_project_lite::pin_project;
use ratewise::concurrency::{Completion, ConcurrencyLimiter, Knee, LimitAlgorithm, Permit};
use ratewise::{Clock, MonotonicClock};
use tower::{Layer, Service};

use crate::observe::WarnGate;

/// A call refused locally: the dependency is at the concurrency limit this
/// client allows it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "not calling `{dependency}`: {inflight} calls in flight at a concurrency limit of {limit}; \
     the dependency looks overloaded, retry later or degrade"
)]
pub struct Refused {
    /// The dependency's name.
    pub dependency: Arc<str>,
    /// The limit when the call was refused.
    pub limit: usize,
    /// Calls in flight then.
    pub inflight: usize,
}

/// The error of a [`ClientConcurrency`] service.
#[derive(Debug, thiserror::Error)]
pub enum ClientError<E> {
    /// No permit: refused locally, nothing was sent.
    #[error(transparent)]
    Refused(Refused),
    /// The inner service failed.
    #[error("the call failed: {0}")]
    Inner(#[source] E),
}

struct Handles {
    admitted: Counter,
    refused: Counter,
    dropped: Counter,
    limit: Gauge,
}

/// The shared settings of a layer.
struct Settings {
    dependency: Arc<str>,
    clock: Arc<dyn Clock>,
    timeout: Option<Duration>,
    handles: OnceLock<Handles>,
    warn: WarnGate,
}

impl Settings {
    fn handles(&self) -> &Handles {
        self.handles.get_or_init(|| {
            let d = self.dependency.to_string();
            Handles {
                admitted: metrics::counter!("ratewise_client_admitted_total", "dependency" => d.clone()),
                refused: metrics::counter!("ratewise_client_refused_total", "dependency" => d.clone()),
                dropped: metrics::counter!("ratewise_client_dropped_total", "dependency" => d.clone()),
                limit: metrics::gauge!("ratewise_client_limit", "dependency" => d),
            }
        })
    }
}

/// A tower layer that keeps the calls to one dependency within an adaptive
/// concurrency limit; see the [module docs](self). `Clone`: clones share
/// one limiter.
pub struct ClientConcurrencyLayer<A = Knee> {
    limiter: ConcurrencyLimiter<A>,
    settings: Arc<Settings>,
}

impl<A> Clone for ClientConcurrencyLayer<A> {
    fn clone(&self) -> Self {
        ClientConcurrencyLayer {
            limiter: self.limiter.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<A> std::fmt::Debug for ClientConcurrencyLayer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConcurrencyLayer")
            .field("dependency", &self.settings.dependency)
            .finish_non_exhaustive()
    }
}

impl ClientConcurrencyLayer<Knee> {
    /// A layer for the dependency `name` (the metrics label), driven by
    /// ratewise's recommended controller, [`Knee`], with its defaults.
    pub fn new(name: &str) -> Self {
        Self::with_algorithm(name, Knee::default())
    }
}

impl<A: LimitAlgorithm + 'static> ClientConcurrencyLayer<A> {
    /// A layer for the dependency `name` driven by `algorithm` (e.g.
    /// `Aimd::default()`, `Gradient2::default()`, `Fixed(n)`), on the
    /// production clock.
    pub fn with_algorithm(name: &str, algorithm: A) -> Self {
        ClientConcurrencyLayer {
            limiter: ConcurrencyLimiter::new(algorithm),
            settings: Arc::new(Settings {
                dependency: Arc::from(name),
                clock: Arc::new(MonotonicClock::new()),
                timeout: None,
                handles: OnceLock::new(),
                warn: WarnGate::new(Duration::from_secs(1)),
            }),
        }
    }

    fn with(self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = Settings {
            dependency: Arc::clone(&self.settings.dependency),
            clock: Arc::clone(&self.settings.clock),
            timeout: self.settings.timeout,
            handles: OnceLock::new(),
            warn: WarnGate::new(Duration::from_secs(1)),
        };
        f(&mut settings);
        ClientConcurrencyLayer {
            limiter: self.limiter,
            settings: Arc::new(settings),
        }
    }

    /// Reads latencies from `clock` (tests use tokio's paused clock or a
    /// manual one).
    pub fn clock(self, clock: impl Clock + 'static) -> Self {
        self.with(|s| s.clock = Arc::new(clock))
    }

    /// A response slower than this counts as a drop even if it succeeded
    /// (the caller had given up on it). Unset by default.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.with(|s| s.timeout = Some(timeout))
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.limiter.limit()
    }

    /// Calls in flight.
    pub fn inflight(&self) -> usize {
        self.limiter.inflight()
    }

    /// The limiter itself (to read the controller's gauges).
    pub fn limiter(&self) -> &ConcurrencyLimiter<A> {
        &self.limiter
    }
}

impl<S, A> Layer<S> for ClientConcurrencyLayer<A> {
    type Service = ClientConcurrency<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientConcurrency {
            inner,
            limiter: self.limiter.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The service of [`ClientConcurrencyLayer`].
pub struct ClientConcurrency<S, A = Knee> {
    inner: S,
    limiter: ConcurrencyLimiter<A>,
    settings: Arc<Settings>,
}

impl<S: Clone, A> Clone for ClientConcurrency<S, A> {
    fn clone(&self) -> Self {
        ClientConcurrency {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<S, A, ReqB, ResB> Service<Request<ReqB>> for ClientConcurrency<S, A>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    A: LimitAlgorithm + 'static,
{
    type Response = Response<ResB>;
    type Error = ClientError<S::Error>;
    type Future = ClientFuture<S::Future, A>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ClientError::Inner)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let s = &self.settings;
        let now = s.clock.now();
        match self.limiter.try_acquire(now) {
            None => {
                s.handles().refused.increment(1);
                let refused = Refused {
                    dependency: Arc::clone(&s.dependency),
                    limit: self.limiter.limit(),
                    inflight: self.limiter.inflight(),
                };
                if let Some(held_back) = s.warn.admit(now.as_nanos()) {
                    tracing::warn!(
                        dependency = %s.dependency,
                        limit = refused.limit,
                        inflight = refused.inflight,
                        held_back,
                        "calls refused locally: the dependency is at its concurrency limit"
                    );
                }
                ClientFuture {
                    state: State::Refused {
                        refused: Some(refused),
                    },
                }
            }
            Some(permit) => {
                s.handles().admitted.increment(1);
                ClientFuture {
                    state: State::Running {
                        future: self.inner.call(req),
                        permit: Some(permit),
                        limiter: self.limiter.clone(),
                        settings: Arc::clone(&self.settings),
                    },
                }
            }
        }
    }
}

pin_project! {
    /// The response future of [`ClientConcurrency`].
    pub struct ClientFuture<F, A> {
        #[pin]
        state: State<F, A>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, A> {
        Running {
            #[pin]
            future: F,
            permit: Option<Permit>,
            limiter: ConcurrencyLimiter<A>,
            settings: Arc<Settings>,
        },
        Refused {
            refused: Option<Refused>,
        },
    }
}

/// How a call that came back ends for the controller.
fn completion<ResB, E>(
    out: &Result<Response<ResB>, E>,
    latency: Duration,
    timeout: Option<Duration>,
) -> Completion {
    match out {
        Err(_) => Completion::Dropped,
        Ok(_) if timeout.is_some_and(|t| latency > t) => Completion::Dropped,
        Ok(res) => {
            let s = res.status();
            if crate::concurrency::is_overload(s) {
                Completion::Dropped
            } else if s.is_client_error() {
                Completion::Ignored
            } else {
                Completion::Success
            }
        }
    }
}

impl<F, A, ResB, E> Future for ClientFuture<F, A>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    A: LimitAlgorithm + 'static,
{
    type Output = Result<Response<ResB>, ClientError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Refused { refused } => {
                let refused = refused
                    .take()
                    .expect("ClientFuture polled after completion");
                Poll::Ready(Err(ClientError::Refused(refused)))
            }
            StateProj::Running {
                future,
                permit,
                limiter,
                settings,
            } => {
                let out = std::task::ready!(future.poll(cx));
                if let Some(p) = permit.take() {
                    let now = settings.clock.now();
                    let latency = now.saturating_duration_since(p.started());
                    let c = completion(&out, latency, settings.timeout);
                    limiter.complete(p, now, c);
                    let handles = settings.handles();
                    if c == Completion::Dropped {
                        handles.dropped.increment(1);
                    }
                    let limit = limiter.limit();
                    handles.limit.set(limit as f64);
                    tracing::debug!(
                        dependency = %settings.dependency,
                        completion = ?c,
                        latency_ms = latency.as_secs_f64() * 1e3,
                        limit,
                        "call completed"
                    );
                }
                Poll::Ready(out.map_err(ClientError::Inner))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn statuses_map_to_completions() {
        let res = |code: u16| -> Result<Response<()>, ()> {
            let mut r = Response::new(());
            *r.status_mut() = StatusCode::from_u16(code).unwrap();
            Ok(r)
        };
        let ms = Duration::from_millis;
        assert_eq!(completion(&res(200), ms(5), None), Completion::Success);
        assert_eq!(completion(&res(304), ms(5), None), Completion::Success);
        assert_eq!(completion(&res(404), ms(5), None), Completion::Ignored);
        assert_eq!(completion(&res(429), ms(5), None), Completion::Dropped);
        assert_eq!(completion(&res(503), ms(5), None), Completion::Dropped);
        assert_eq!(
            completion(&Err::<Response<()>, _>(()), ms(5), None),
            Completion::Dropped
        );
        // A success slower than the caller's timeout is a drop.
        assert_eq!(
            completion(&res(200), ms(50), Some(ms(20))),
            Completion::Dropped
        );
        assert_eq!(
            completion(&res(200), ms(20), Some(ms(20))),
            Completion::Success
        );
    }
}
