//! Rate limiting for tower and axum services, on ratewise's limiters.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use http::{HeaderName, Request, Response, StatusCode};
//! use ratewise::{ManualClock, Quota};
//! use ratewise_tower::{KeySource, Policy, RateLimitLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new(); // production code leaves the real clock in
//! let limits = RateLimitLayer::builder()
//!     .key(KeySource::header(HeaderName::from_static("x-api-key")))
//!     .policy(Policy::per_key("burst", Quota::per(2, Duration::from_secs(1))?))
//!     .policy(Policy::per_key("daily", Quota::per(1_000, Duration::from_secs(86_400))?))
//!     .clock(clock.clone())
//!     .build()?;
//! let svc = ServiceBuilder::new()
//!     .layer(limits)
//!     .service_fn(|_req: Request<String>| async { Ok::<_, Infallible>(Response::new(String::from("hi"))) });
//!
//! let call = |key: &str| {
//!     let req = Request::builder().header("x-api-key", key).body(String::new()).unwrap();
//!     svc.clone().oneshot(req)
//! };
//! assert_eq!(call("ada").await?.status(), StatusCode::OK);
//! let ok = call("ada").await?;
//! assert_eq!(ok.headers()["ratelimit-policy"], r#""burst";q=2;w=1, "daily";q=1000;w=86400"#);
//! assert_eq!(ok.headers()["ratelimit"], r#""burst";r=0;t=1, "daily";r=998;t=173"#);
//!
//! let refused = call("ada").await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "1");
//! assert_eq!(refused.headers()["content-type"], "application/problem+json");
//! assert_eq!(call("grace").await?.status(), StatusCode::OK); // another key
//!
//! clock.advance(Duration::from_millis(500));
//! assert_eq!(call("ada").await?.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! # What it does
//!
//! [`RateLimitLayer`] is a tower [`Layer`](tower::Layer) for axum, hyper
//! and any tower `Service` over `http` requests. Per request it
//!
//! 1. finds the **key** ([`KeySource`]): global; the peer address with
//!    IPv6 grouped by prefix (/64 by default); the client address behind
//!    trusted proxies (`X-Forwarded-For` or `Forwarded`, only as many hops as
//!    configured, a spoofed header from an untrusted peer ignored); a header
//!    (an API key); a value an auth layer put in the extensions; any
//!    closure. A request without a key is charged to a shared anonymous
//!    bucket or refused ([`MissingKey`]);
//! 2. picks the **policy set**: the first matching [`Route`] (path prefix,
//!    method), else the request's tier ([`RateLimitLayerBuilder::tier_by`]),
//!    else the default set;
//! 3. checks every named [`Policy`] of the set at once with the core's
//!    [`Hierarchy`](ratewise::Hierarchy) — a request one policy refuses
//!    charges none of them — with the request's cost (weight);
//! 4. answers a refusal with `429`, `Retry-After` (whole seconds, rounded
//!    up, at least 1), `RateLimit-Policy` and `RateLimit` in the IETF
//!    draft's structured-field form, and an RFC 9457 problem+json body of
//!    the draft's `quota-exceeded` type listing the `violated-policies`;
//!    admitted responses carry the same headers (configurable), and the
//!    legacy `RateLimit-*` / `X-RateLimit-*` trios are options
//!    ([`HeaderStyle`](ratewise::headers_out::HeaderStyle)). A gRPC call
//!    (`content-type: application/grpc…`, e.g. a tonic service behind axum
//!    or tonic's own server) is refused as gRPC expects: a trailers-only
//!    `RESOURCE_EXHAUSTED` with the delay in `grpc-retry-pushback-ms`
//!    (gRFC A6, whole milliseconds rounded up) next to the same headers.
//!
//! The headers are formatted by [`ratewise::headers_out`] on the stack;
//! `RateLimit-Policy` is rendered once and shared.
//!
//! The layer answers in the inner service's own body type, so an admitted
//! response passes through untouched: axum would box (allocate) any body
//! type but its own on every response. That type must be a [`ReplyBody`]
//! (axum's, `String`, `Full`, the boxed bodies, tonic's with the `tonic`
//! feature); any other body is wrapped in a [`RateLimitBody`].
//!
//! # Sharing, clocks, backends
//!
//! The layer, its services and its [`RateLimitHandle`] are `Clone`, and all
//! clones share one set of limiters: cloning per connection or per request
//! (as axum and hyper do) never resets or splits a quota. The clock is
//! injectable ([`RateLimitLayerBuilder::clock`]), so tests run on a
//! [`ManualClock`](ratewise::ManualClock).
//!
//! In-memory policies are [`KeyedLimiter`](ratewise::KeyedLimiter)s (GCRA by
//! default; any ratewise algorithm through [`Policy::per_key_with`]). A
//! single policy can instead be decided by any
//! [`AsyncKeyedLimiter`](ratewise::backend::AsyncKeyedLimiter) — a Redis
//! backend, say — with [`RateLimitLayerBuilder::backend`], or
//! [`RateLimitLayerBuilder::backend_bytes`] for limiters keyed by bytes
//! (`ratewise-redis`'s `RedisLimiter` and `TwoTierLimiter`): switching
//! store is one builder call.
//!
//! # Operations and observability
//!
//! [`RateLimitHandle`] flips the kill switch and shadow mode (decide and
//! count, never refuse) and changes quotas at run time; a single policy
//! can be dark-launched next to enforced ones ([`Policy::shadow`]);
//! [`RateLimitLayerBuilder::bypass`] exempts requests. Counters, a latency
//! histogram and gauges go to the `metrics` facade ([`observe`] lists them);
//! each decision runs in a `tracing` span at debug level, and refusals log
//! one `warn` per interval at most. [`RateLimitHandle::status`] is a
//! JSON-serialisable snapshot for a health endpoint.
//!
//! # The client side
//!
//! [`ThrottleLayer`] ([`client_throttle`]) is the other direction: the
//! core's client `Throttle` around an HTTP *client* service (hyper-util,
//! tonic), pacing per authority and retrying throttled answers (429,
//! `RESOURCE_EXHAUSTED`) after `Retry-After` or the gRPC pushback.
//!
//! # Concurrency limits, both sides
//!
//! [`concurrency::ConcurrencyLimitLayer`] protects a service with an
//! adaptive concurrency limit (503 + `Retry-After` above it, lowest
//! priority shed first); [`ClientConcurrencyLayer`] keeps the calls a
//! client makes to a dependency within one, failing fast and locally
//! ([`client_concurrency::ClientError::Refused`]) when the dependency is at
//! its limit.

#![warn(missing_docs)]

mod body;
pub mod client_concurrency;
pub mod client_throttle;
pub mod concurrency;
mod interned;
mod key;
mod layer;
pub mod observe;
mod policy;
pub mod problem;
mod verdict;

pub use body::{RateLimitBody, ReplyBody};
// The concurrency layer's error types stay under `client_concurrency::`:
// `ClientError` at the root is the throttle layer's.
pub use client_concurrency::ClientConcurrencyLayer;
pub use client_throttle::{ClientError, ThrottleLayer, ThrottleService};
pub use key::{
    IpGrouping, Key, KeyFn, KeySource, MissingKey, ProxyHeader, RequestInfo, Scope, TrustedProxies,
};
pub use layer::{
    BackendFailure, BuildError, RateLimit, RateLimitHandle, RateLimitLayer, RateLimitLayerBuilder,
    ResponseFuture, Route, UnknownPolicy, MAX_NAME_LEN,
};
pub use policy::{Policy, DEFAULT_MAX_KEYS};
pub use verdict::{PolicyState, Verdict, MAX_POLICIES};

/// The README's examples, compiled and run as doc tests (the "Protect a
/// service" quick start needs this crate).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
