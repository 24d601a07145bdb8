//! A rate-limit service for Envoy (and anything that speaks its protocol):
//! gRPC `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, HTTP
//! `POST /json`, envoyproxy/ratelimit's YAML configuration, and ratewise's
//! algorithms behind them.
//!
//! ```
//! use ratewise_server::config::{compile_sources, LoadOptions};
//! use ratewise_server::rls::{Code, Entry, RateLimitDescriptor, RateLimitRequest};
//! use ratewise_server::{Engine, EngineOptions};
//!
//! // envoyproxy/ratelimit's format: 2 requests per second per user.
//! let yaml = r#"
//! domain: edge
//! descriptors:
//!   - key: user
//!     rate_limit: { unit: second, requests_per_unit: 2 }
//! "#;
//! let rules = compile_sources(&[("edge.yaml".into(), yaml.into())], None, LoadOptions::default())?;
//! let engine = Engine::new(rules, EngineOptions::default());
//!
//! let call = |user: &str| RateLimitRequest {
//!     domain: "edge".into(),
//!     descriptors: vec![RateLimitDescriptor {
//!         entries: vec![Entry { key: "user".into(), value: user.into() }],
//!         ..Default::default()
//!     }],
//!     hits_addend: 1,
//! };
//! let now = ratewise::Timestamp::from_nanos(0);
//! engine.decide_at(&call("alice"), now)?;
//! engine.decide_at(&call("alice"), now)?;
//! let refused = engine.decide_at(&call("alice"), now)?;
//! assert_eq!(refused.overall_code(), Code::OverLimit);
//! // The evidence travels with the answer: the limit, what is left, when
//! // it resets, and the headers Envoy will add (Retry-After among them).
//! let status = &refused.statuses[0];
//! assert_eq!(status.current_limit.as_ref().map(|l| l.requests_per_unit), Some(2));
//! assert!(refused.response_headers_to_add.iter().any(|h| h.key == "Retry-After"));
//! // Another user has a quota of their own.
//! assert_eq!(engine.decide_at(&call("bob"), now)?.overall_code(), Code::Ok);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The binary (`ratewise-server --config DIR`) serves gRPC on
//! `127.0.0.1:8081` and HTTP (`/json`, `/healthcheck`, `/metrics`,
//! `/status`, `/rules`, and a live page at `/`) on `127.0.0.1:8080`,
//! reloading the configuration when its files change. See the README's "Rate-limit at the edge".
//!
//! Map: [`config`] parses and compiles the rules; [`Engine`] decides
//! (sans-IO, told `now`); [`rls`] is the wire protocol; [`grpc`] and
//! [`http`] serve the engine; [`serve`] runs both with reloads and a
//! graceful shutdown.

#![warn(missing_docs)]

mod charge;
pub mod config;
mod counters;
mod engine;
pub mod grpc;
pub mod history;
pub mod http;
pub mod redis_store;
mod response;
pub mod rls;
pub mod serve;
mod telemetry;

pub use engine::{Engine, EngineOptions, RequestError};
pub use response::HeaderMode;
pub use telemetry::RuleTotals;
