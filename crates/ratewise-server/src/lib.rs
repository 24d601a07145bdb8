//! A rate-limit service for Envoy: gRPC `ShouldRateLimit` (RLS v3), HTTP
//! `POST /json`, envoyproxy/ratelimit's YAML, ratewise's algorithms.
//!
//! ```
//! use ratewise_server::config::{compile_sources, LoadOptions};
//! use ratewise_server::rls::{Code, Entry, RateLimitDescriptor, RateLimitRequest};
//! use ratewise_server::{Engine, EngineOptions};
//!
//! let yaml = r#"
//! domain: edge
//! descriptors:
//!   - key: user
//!     rate_limit: { unit: second, requests_per_unit: 2 }
//! "#;
//! let rules = compile_sources(&[("edge.yaml".into(), yaml.into())], None, LoadOptions::default())?;
//! let engine = Engine::new(rules, EngineOptions::default());
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
//! // The evidence travels with the answer, Retry-After among the headers.
//! assert_eq!(refused.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit), Some(2));
//! assert!(refused.response_headers_to_add.iter().any(|h| h.key == "Retry-After"));
//! assert_eq!(engine.decide_at(&call("bob"), now)?.overall_code(), Code::Ok);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The binary (`ratewise-server --config DIR`) serves gRPC on 8081 and HTTP
//! (`/json`, `/healthcheck`, `/metrics`, `/status`, `/rules`, a live page)
//! on 8080; `ratewise-server --check --config DIR` validates a configuration
//! and prints its rules without serving. [`config`] compiles the rules; [`Engine`] decides, sans-IO;
//! [`rls`] is the wire protocol; [`grpc`], [`http`] and [`serve`] drive it.

#![warn(missing_docs)]

mod charge;
pub mod config;
mod counters;
mod engine;
pub mod grpc;
pub mod history;
pub mod http;
pub mod quota;
pub mod redis_store;
mod response;
pub mod rlqs;
pub mod rls;
pub mod serve;
mod telemetry;

pub use engine::{Engine, EngineOptions, RequestError};
pub use response::HeaderMode;
pub use telemetry::RuleTotals;
