//! Rate limiting for tower and axum services, on ratewise's limiters.
//!
//! ```
//! use std::{convert::Infallible, time::Duration};
//! use http::{HeaderName, Request, Response, StatusCode};
//! use ratewise::{ManualClock, Quota};
//! use ratewise_tower::{KeySource, Policy, RateLimitLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = RateLimitLayer::builder()
//!     .key(KeySource::header(HeaderName::from_static("x-api-key")))
//!     .policy(Policy::per_key("burst", Quota::per(1, Duration::from_secs(1))?))
//!     .clock(ManualClock::new()) // production code leaves the real clock in
//!     .build()?;
//! let svc = ServiceBuilder::new().layer(limits).service_fn(|_req: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("hi")))
//! });
//! let call = |key: &str| svc.clone().oneshot(Request::builder().header("x-api-key", key).body(String::new()).unwrap());
//! assert_eq!(call("ada").await?.status(), StatusCode::OK);
//! let refused = call("ada").await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "1");
//! # Ok(())
//! # }
//! ```
//!
//! [`RateLimitLayer`] finds each request's key ([`KeySource`]: peer address,
//! client address behind [`TrustedProxies`], header, extension, closure),
//! picks a policy set ([`Route`], tier or default), checks every [`Policy`] of
//! it at once as one core [`Hierarchy`](ratewise::Hierarchy), and answers a
//! refusal with `429`, `Retry-After`, the IETF `RateLimit-Policy` and
//! `RateLimit` headers and a problem+json body (a gRPC call gets
//! `RESOURCE_EXHAUSTED`). Clones share one set of limiters; a policy may be
//! decided by Redis ([`RateLimitLayerBuilder::backend`]). [`RateLimitHandle`]
//! changes quotas, shadow mode and the kill switch at run time; [`observe`]
//! lists the metrics. [`concurrency`] holds an adaptive concurrency limit and
//! [`breaker`] a circuit breaker (the stack they make with the rate limit and
//! a timeout is in the README); on the client side, [`ThrottleLayer`] paces
//! and retries calls and [`ClientConcurrencyLayer`] caps the calls in flight
//! to a dependency.

#![warn(missing_docs)]

mod body;
pub mod breaker;
pub mod client_concurrency;
pub mod client_throttle;
pub mod concurrency;
mod interned;
mod key;
mod layer;
pub mod observe;
mod policy;
pub mod problem;
mod refusal;
mod verdict;

pub use body::{RateLimitBody, ReplyBody};
// The concurrency layer's error types stay under `client_concurrency::`:
// `ClientError` at the root is the throttle layer's.
pub use client_concurrency::ClientConcurrencyLayer;
pub use client_throttle::{ClientError, Throttle, ThrottleLayer};
pub use key::{
    IpGrouping, Key, KeyFn, KeySource, MissingKey, ProxyHeader, RequestInfo, Scope, TrustedProxies,
};
pub use layer::{
    BackendFailure, BuildError, RateLimit, RateLimitHandle, RateLimitLayer, RateLimitLayerBuilder,
    ResponseFuture, Route, UnknownPolicy, MAX_NAME_LEN,
};
pub use policy::{Policy, DEFAULT_MAX_KEYS};
pub use refusal::LocalRefusal;
pub use verdict::{PolicyState, Verdict, MAX_POLICIES};
