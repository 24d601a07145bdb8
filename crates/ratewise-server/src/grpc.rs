//! The gRPC face: [`RateLimiter`] answers `ShouldRateLimit` from an
//! [`Engine`] on the process's monotonic clock, with its counters in memory
//! or on Redis.

use std::sync::Arc;

use ratewise::{Clock, MonotonicClock};
use tracing::Instrument;

use crate::redis_store::{RedisStore, StoreUnavailable};
use crate::rls::{RateLimitRequest, RateLimitResponse, RateLimitService, RateLimitServiceServer};
use crate::{Engine, RequestError};

/// Why a call was not decided.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The request itself is wrong (gRPC `INVALID_ARGUMENT`, HTTP 400).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The shared store cannot answer and the domain's failure policy is
    /// `error` (gRPC `UNAVAILABLE`, HTTP 503).
    #[error(transparent)]
    Unavailable(#[from] StoreUnavailable),
}

/// Serves an [`Engine`] over RLS v3.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    engine: Arc<Engine>,
    clock: MonotonicClock,
    redis: Option<Arc<RedisStore>>,
    /// `ratewise_server_decision_seconds`, timed on `clock` by this
    /// driver (the engine reads no clock).
    latency: metrics::Histogram,
}

impl RateLimiter {
    /// A service answering from `engine` with in-memory counters, timed by
    /// `clock`.
    pub fn new(engine: Arc<Engine>, clock: MonotonicClock) -> RateLimiter {
        RateLimiter {
            engine,
            clock,
            redis: None,
            latency: metrics::histogram!("ratewise_server_decision_seconds"),
        }
    }

    /// The same service with its counters on Redis.
    pub fn with_redis(mut self, store: Arc<RedisStore>) -> RateLimiter {
        self.redis = Some(store);
        self
    }

    /// The Redis store, when the counters are on Redis.
    pub fn redis(&self) -> Option<&Arc<RedisStore>> {
        self.redis.as_ref()
    }

    /// Whether the counters are on Redis.
    pub fn is_shared(&self) -> bool {
        self.redis.is_some()
    }

    /// The engine it answers from.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> RateLimitServiceServer<RateLimiter> {
        RateLimitServiceServer::from_arc(Arc::new(self))
    }

    /// Decides `request` now.
    ///
    /// # Errors
    /// [`DecideError`].
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, DecideError> {
        let now = self.clock.now();
        let answer = match &self.redis {
            None => self.engine.decide_at(request, now)?,
            Some(store) => {
                let rules = self.engine.rules();
                let mut plan = self.engine.plan(&rules, request, now)?;
                store.decide(&mut plan).await?;
                self.engine.finish(request, &plan)
            }
        };
        let took = self.clock.now().saturating_duration_since(now);
        self.latency.record(took.as_secs_f64());
        Ok(answer)
    }
}

impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.into_inner();
        let span = tracing::debug_span!("should_rate_limit", domain = %request.domain, descriptors = request.descriptors.len());
        match self.decide(&request).instrument(span).await {
            Ok(answer) => {
                tracing::debug!(code = answer.overall_code, "decided");
                Ok(tonic::Response::new(answer))
            }
            Err(DecideError::Request(e)) => {
                tracing::debug!(error = %e, "refused to decide");
                Err(tonic::Status::invalid_argument(e.to_string()))
            }
            Err(DecideError::Unavailable(e)) => Err(tonic::Status::unavailable(e.to_string())),
        }
    }
}
