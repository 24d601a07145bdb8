//! The gRPC face: [`RateLimiter`] answers `ShouldRateLimit` from an
//! [`Engine`] on the process's monotonic clock.

use std::sync::Arc;

use ratewise::{Clock, MonotonicClock};

use crate::rls::{RateLimitRequest, RateLimitResponse, RateLimitService, RateLimitServiceServer};
use crate::{Engine, RequestError};

/// Serves an [`Engine`] over RLS v3.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    engine: Arc<Engine>,
    clock: MonotonicClock,
}

impl RateLimiter {
    /// A service answering from `engine`, timed by `clock`.
    pub fn new(engine: Arc<Engine>, clock: MonotonicClock) -> RateLimiter {
        RateLimiter { engine, clock }
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
    /// The request's [`RequestError`].
    pub fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, RequestError> {
        self.engine.decide_at(request, self.clock.now())
    }
}

impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.into_inner();
        let span = tracing::debug_span!("should_rate_limit", domain = %request.domain, descriptors = request.descriptors.len());
        let _enter = span.enter();
        match self.decide(&request) {
            Ok(answer) => {
                tracing::debug!(code = answer.overall_code, "decided");
                Ok(tonic::Response::new(answer))
            }
            Err(e) => {
                tracing::debug!(error = %e, "refused to decide");
                Err(tonic::Status::invalid_argument(e.to_string()))
            }
        }
    }
}
