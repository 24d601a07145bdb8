//! The two limiters the load example and the layer bench compare,
//! configured alike: keyed GCRA, 50 requests per second per key with a
//! burst of 50, headers on, the key from `x-api-key`.

use std::time::Duration;

use governor::middleware::StateInformationMiddleware;
use http::Request;
use ratewise::Quota;
use ratewise_tower::{KeySource, Policy, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// Simulated clients (distinct `x-api-key` values).
pub const KEYS: u32 = 10_000;

/// tower_governor's key: the `x-api-key` header.
#[derive(Clone)]
pub struct ApiKey;

impl KeyExtractor for ApiKey {
    type Key = String;
    fn extract<T>(&self, req: &Request<T>) -> Result<String, GovernorError> {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// tower_governor, headers on.
#[allow(dead_code)] // the load example's quota; the bench uses its own
pub fn governor_layer() -> GovernorLayer<ApiKey, StateInformationMiddleware, axum::body::Body> {
    // One cell every 20 ms = 50/s.
    governor_layer_with(Duration::from_millis(20), 50)
}

/// tower_governor, headers on, one cell per `period`, `burst` at most.
pub fn governor_layer_with(
    period: Duration,
    burst: u32,
) -> GovernorLayer<ApiKey, StateInformationMiddleware, axum::body::Body> {
    let config = GovernorConfigBuilder::default()
        .period(period)
        .burst_size(burst)
        .key_extractor(ApiKey)
        .use_headers()
        .finish()
        .expect("a valid governor config");
    GovernorLayer::new(config)
}

/// ratewise-tower, in memory, headers on (the default).
#[allow(dead_code)] // the load example's quota; the bench uses its own
pub fn ratewise_layer() -> RateLimitLayer {
    ratewise_layer_with(Quota::per(50, Duration::from_secs(1)).expect("a valid quota"))
}

/// ratewise-tower, in memory, headers on, one GCRA of `quota` per key.
pub fn ratewise_layer_with(quota: Quota) -> RateLimitLayer {
    RateLimitLayer::builder()
        .key(KeySource::header(http::HeaderName::from_static(
            "x-api-key",
        )))
        .policy(Policy::per_key("key", quota))
        .build()
        .expect("a valid layer")
}
