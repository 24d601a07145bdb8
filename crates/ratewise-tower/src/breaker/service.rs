//! The service: asks the breaker before each call.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{BoxError, Service};

use super::future::ResponseFuture;
use super::layer::{Classify, Pending, Shared};

/// The service of [`CircuitBreakerLayer`](super::CircuitBreakerLayer).
pub struct CircuitBreaker<S, C> {
    inner: S,
    shared: Arc<Shared>,
    classify: C,
}

impl<S, C> CircuitBreaker<S, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>, classify: C) -> Self {
        CircuitBreaker {
            inner,
            shared,
            classify,
        }
    }
}

impl<S: Clone, C: Clone> Clone for CircuitBreaker<S, C> {
    fn clone(&self) -> Self {
        CircuitBreaker {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            classify: self.classify.clone(),
        }
    }
}

impl<S, C, Req> Service<Req> for CircuitBreaker<S, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Classify<S::Response> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let now = self.shared.clock.now();
        match self.shared.breaker.try_call(now) {
            Err(refused) => {
                self.shared.note_refused(now);
                ResponseFuture::refused(refused)
            }
            Ok(call) => ResponseFuture::called(
                self.inner.call(req),
                Pending {
                    shared: Arc::clone(&self.shared),
                    call: Some(call),
                },
                self.classify.clone(),
            ),
        }
    }
}
