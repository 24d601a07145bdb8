//! [`ConcurrencyLimitLayer`]: protect a service with an adaptive concurrency
//! limit (`ratewise::concurrency`), shedding the lowest priority first.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response, StatusCode};
//! use ratewise::concurrency::{Fixed, Priority};
//! use ratewise_tower::concurrency::ConcurrencyLimitLayer;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = ConcurrencyLimitLayer::new(Fixed(1))
//!     .priority_by(|req| match req.headers.get("x-priority") {
//!         Some(v) if v == "batch" => Priority::Sheddable,
//!         _ => Priority::Critical,
//!     });
//! let mut svc = ServiceBuilder::new()
//!     .layer(layer.clone())
//!     .service_fn(|_req: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) });
//! // One request in flight (its response not yet polled): the next is shed.
//! let first = svc.ready().await?.call(Request::new(String::new()));
//! let second = svc.ready().await?.call(Request::new(String::new())).await?;
//! assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
//! assert_eq!(second.headers()["retry-after"], "1");
//! assert_eq!(first.await?.status(), StatusCode::OK);
//! assert_eq!(layer.inflight(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! Each request takes a permit from the layer's [`ConcurrencyLimiter`];
//! without one it gets `503` and `Retry-After` at once. A `5xx`, `429` or
//! error completes the permit as a drop, anything else as a success with its
//! latency; a dropped future frees its slot. Clones share one limiter.
//! A shed response carries [`LocalRefusal`] in its extensions, and
//! [`ConcurrencyLimitLayer::health`] reports the share shed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use ratewise::concurrency::{Completion, ConcurrencyLimiter, LimitAlgorithm, Permit, Priority};
use ratewise::striped::StripedCounter;
use ratewise::{Clock, MonotonicClock};
use tower::{Layer, Service};

use crate::body::ReplyBody;
use crate::observe::Health;
use crate::refusal::LocalRefusal;

type PriorityFn = Arc<dyn Fn(&http::request::Parts) -> Priority + Send + Sync>;

/// The shared settings of a layer.
struct Settings {
    clock: Arc<dyn Clock>,
    retry_after: Duration,
    priority: Option<PriorityFn>,
    alert_above: f64,
    counts: Arc<Counts>,
}

/// Requests admitted and shed, shared by every clone.
#[derive(Default)]
struct Counts {
    admitted: StripedCounter,
    shed: StripedCounter,
}

/// A tower layer that sheds load above an adaptive concurrency limit; see
/// the [module docs](self). `Clone`: clones share one limiter.
pub struct ConcurrencyLimitLayer<A> {
    limiter: ConcurrencyLimiter<A>,
    settings: Arc<Settings>,
}

impl<A> Clone for ConcurrencyLimitLayer<A> {
    fn clone(&self) -> Self {
        ConcurrencyLimitLayer {
            limiter: self.limiter.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<A: LimitAlgorithm + 'static> ConcurrencyLimitLayer<A> {
    /// A layer driven by `algorithm` (`Knee::default()` is the one the
    /// simulator recommends, see `docs/simulator.md`; also `Aimd::default()`,
    /// `Gradient2::default()`, `EnvoyGradient::new(seed)`, `Fixed(n)`) on the
    /// production clock, refusing with `Retry-After: 1`; every request is
    /// [`Priority::Critical`] until [`priority_by`](Self::priority_by).
    pub fn new(algorithm: A) -> Self {
        ConcurrencyLimitLayer {
            limiter: ConcurrencyLimiter::new(algorithm),
            settings: Arc::new(Settings {
                clock: Arc::new(MonotonicClock::new()),
                retry_after: Duration::from_secs(1),
                priority: None,
                alert_above: crate::observe::DEFAULT_ALERT_RATIO,
                counts: Arc::default(),
            }),
        }
    }

    fn with(self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = Settings {
            clock: Arc::clone(&self.settings.clock),
            retry_after: self.settings.retry_after,
            priority: self.settings.priority.clone(),
            alert_above: self.settings.alert_above,
            counts: Arc::clone(&self.settings.counts),
        };
        f(&mut settings);
        ConcurrencyLimitLayer {
            limiter: self.limiter,
            settings: Arc::new(settings),
        }
    }

    /// Reads latencies from `clock` (tests use a manual one).
    pub fn clock(self, clock: impl Clock + 'static) -> Self {
        self.with(|s| s.clock = Arc::new(clock))
    }

    /// The `Retry-After` of a shed request, in whole seconds rounded up (at
    /// least 1).
    pub fn retry_after(self, after: Duration) -> Self {
        self.with(|s| s.retry_after = after)
    }

    /// Chooses each request's class; lower classes are shed first.
    pub fn priority_by(
        self,
        f: impl Fn(&http::request::Parts) -> Priority + Send + Sync + 'static,
    ) -> Self {
        self.with(|s| s.priority = Some(Arc::new(f)))
    }

    /// The refusal ratio above which [`health`](Self::health) raises its
    /// alert (default 0.5).
    pub fn alert_above(self, ratio: f64) -> Self {
        self.with(|s| s.alert_above = ratio)
    }

    /// Requests admitted and shed so far, and whether the share shed is
    /// above the alert threshold.
    pub fn health(&self) -> Health {
        let c = &self.settings.counts;
        Health::new(
            "concurrency_limit",
            c.admitted.sum(),
            c.shed.sum(),
            self.settings.alert_above,
        )
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.limiter.limit()
    }

    /// Requests in flight.
    pub fn inflight(&self) -> usize {
        self.limiter.inflight()
    }

    /// The limiter itself (to read the controller's gauges).
    pub fn limiter(&self) -> &ConcurrencyLimiter<A> {
        &self.limiter
    }
}

impl<S, A> Layer<S> for ConcurrencyLimitLayer<A> {
    type Service = ConcurrencyLimit<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            limiter: self.limiter.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The service of [`ConcurrencyLimitLayer`].
pub struct ConcurrencyLimit<S, A> {
    inner: S,
    limiter: ConcurrencyLimiter<A>,
    settings: Arc<Settings>,
}

impl<S: Clone, A> Clone for ConcurrencyLimit<S, A> {
    fn clone(&self) -> Self {
        ConcurrencyLimit {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

/// Whether a response status says the callee is overloaded: a `5xx` or a
/// `429` (both concurrency layers complete such a permit as a drop).
pub(crate) fn is_overload(status: StatusCode) -> bool {
    status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
}

fn shed<B: ReplyBody>(retry_after: Duration) -> Response<B> {
    let secs = ratewise::response_headers::retry_after_secs(retry_after);
    let mut res = Response::new(B::from_bytes(Bytes::from_static(
        b"the service is at its concurrency limit; retry later\n",
    )));
    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res.extensions_mut().insert(LocalRefusal);
    res
}

impl<S, A, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimit<S, A>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    A: LimitAlgorithm + 'static,
    ResB: ReplyBody,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ConcurrencyFuture<S::Future, A>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let now = self.settings.clock.now();
        let (parts, body) = req.into_parts();
        let priority = self
            .settings
            .priority
            .as_ref()
            .map_or(Priority::Critical, |f| f(&parts));
        let acquired = self.limiter.try_acquire_as(now, priority);
        let counts = &self.settings.counts;
        match &acquired {
            None => counts.shed.add(1),
            Some(_) => counts.admitted.add(1),
        }
        match acquired {
            None => ConcurrencyFuture {
                state: Inner::Shed {
                    retry_after: Some(self.settings.retry_after),
                },
            },
            Some(permit) => ConcurrencyFuture {
                state: Inner::Running {
                    future: self.inner.call(Request::from_parts(parts, body)),
                    permit: Some(permit),
                    limiter: self.limiter.clone(),
                    clock: Arc::clone(&self.settings.clock),
                },
            },
        }
    }
}

pin_project! {
    /// The response future of [`ConcurrencyLimit`].
    pub struct ConcurrencyFuture<F, A> {
        #[pin]
        state: Inner<F, A>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum Inner<F, A> {
        Running {
            #[pin]
            future: F,
            permit: Option<Permit>,
            limiter: ConcurrencyLimiter<A>,
            clock: Arc<dyn Clock>,
        },
        Shed {
            retry_after: Option<Duration>,
        },
    }
}

impl<F, A, ResB, E> Future for ConcurrencyFuture<F, A>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    A: LimitAlgorithm + 'static,
    ResB: ReplyBody,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            InnerProj::Shed { retry_after } => {
                // A future is not polled again after Ready; if it were, the
                // refusal would simply be answered again.
                let after = retry_after.take().unwrap_or(Duration::from_secs(1));
                Poll::Ready(Ok(shed(after)))
            }
            InnerProj::Running {
                future,
                permit,
                limiter,
                clock,
            } => {
                let out = std::task::ready!(future.poll(cx));
                let overloaded = match &out {
                    Ok(res) => is_overload(res.status()),
                    Err(_) => true,
                };
                if let Some(p) = permit.take() {
                    let completion = if overloaded {
                        Completion::Dropped
                    } else {
                        Completion::Success
                    };
                    limiter.complete(p, clock.now(), completion);
                }
                Poll::Ready(out)
            }
        }
    }
}
