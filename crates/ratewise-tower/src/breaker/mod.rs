//! [`CircuitBreakerLayer`]: stop calling a dependency that keeps failing,
//! refusing at once with a [`Refused`] error that says when the breaker
//! probes again (the state machine is the core's
//! [`ratewise::breaker::CircuitBreaker`]).
//!
//! ```
//! use std::time::Duration;
//! use http::{Request, Response, StatusCode};
//! use ratewise::breaker::BreakerConfig;
//! use ratewise_tower::breaker::{CircuitBreakerLayer, Refused};
//! use tower::{BoxError, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let breaker = CircuitBreakerLayer::new(BreakerConfig::default().consecutive_failures(2))?;
//! let svc = ServiceBuilder::new().layer(breaker.clone()).service_fn(|_req: Request<String>| async {
//!     let mut res = Response::new(String::new());
//!     *res.status_mut() = StatusCode::BAD_GATEWAY; // the dependency is down
//!     Ok::<_, BoxError>(res)
//! });
//! for _ in 0..2 {
//!     let res = svc.clone().oneshot(Request::new(String::new())).await?;
//!     assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
//! }
//! // Two server errors in a row: open. The next call is refused at once.
//! let err = svc.clone().oneshot(Request::new(String::new())).await.unwrap_err();
//! let refused = err.downcast_ref::<Refused>().expect("the breaker refused");
//! assert!(refused.retry_in() <= Duration::from_secs(5));
//! assert_eq!(breaker.health().refused, 1);
//! # Ok(())
//! # }
//! ```
//!
//! A call is a failure when the service returns an error (a timeout below
//! the breaker included) or, with the default [`ServerErrors`], a `5xx`
//! response; a response another ratewise layer wrote itself (a concurrency
//! limit's `503`, marked [`LocalRefusal`](crate::LocalRefusal)) counts as
//! neither. [`CircuitBreakerLayer::classify`] takes any rule. Clones share
//! one breaker.
//!
//! Metrics, labelled `dependency` ([`CircuitBreakerLayer::dependency`]):
//! `ratewise_breaker_calls_total{result}` (`success`, `failure`),
//! `ratewise_breaker_refused_total`, `ratewise_breaker_opened_total`, and
//! the gauge `ratewise_breaker_state` (0 closed, 1 half-open, 2 open; set
//! when a result moves the breaker and on every refusal).

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::{CircuitBreakerLayer, Classify, ErrorsOnly, ServerErrors};
pub use ratewise::breaker::{BreakerConfig, CallResult, ConfigError, Refused, State};
pub use service::CircuitBreaker;
